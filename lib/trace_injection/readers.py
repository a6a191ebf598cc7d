"""Trajectory readers and the validator (Step 0).

Formats, detected per record:

- **CausalBench JSON** (official repository): ``{run_id|id, is_attack, attack_type, task_description,
  trajectory: [event...], causal_graph: {nodes, edges}}``; events carry ``event_id``, ``event_type``
  (TASK, OBSERVATION, LLM_CALL, ACTION), ``service``, ``trust_level``, ``endpoint``, ``data_produced``,
  ``data_consumed`` and content fields.
- **AgentDojo-style message lists**: a JSON list of messages, or ``{"messages": [...], ...}``; roles
  system / user (trusted), assistant (with ``tool_calls`` [{id, function, args}]), tool (results,
  untrusted external content; ``tool_call_id`` names the call).
- **Recorded AgentDojo runs** (``agentdojo_runs`` exports): line 1 is a header ``{"metadata": {...}}``
  (no messages), each later line ``{index, messages, metadata, annotations}`` with messages in the
  OpenAI chat format. Labels come from ``metadata`` (:data:`LABELS`: ``compromised`` = an
  injection task and ``security`` true; ``attacked`` = an injection task); class P / N2 / N1.
  A run without messages is skipped and counted (:class:`ReadStats`).
- **Generic JSONL steps**: one ``{step, role, tool, args, output}`` record per line (optional
  ``trace`` to hold several trajectories in one file, ``trust``, ``agent``, ``produced``, ``consumed``).

Tool results whose ``tool_call_id`` is empty or missing (several pipelines export them so) are
paired with the pending calls of the last assistant turns **by position** (first unanswered call
first) and counted in :class:`ReadStats`; ``strict_ids=True`` refuses them instead.

A file may be one JSON document (a trace or a list of traces) or JSONL (one trace per line, or one
step per line). Every malformed record raises :class:`InputError` naming the file, the line and the
field. Labels and ground truth go to ``Trace.meta`` only.
"""
from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.io import display_name, open_text, parse_json
from icmlkit.lib.trace_injection.config import TRUSTED_ROLES
from icmlkit.lib.trace_injection.schema import KINDS, Event, Trace

META_KEYS = ("label", "class", "suite", "user_task", "injection_task", "template", "gt_chain", "is_attack",
             "attack_type", "vectors")


LABELS = ("compromised", "attacked")


@dataclass
class ReadStats:
    """What the readers repaired or skipped: ``repaired_ids`` (tool results paired with their call by
    position), ``skipped_empty`` (recorded runs without messages), ``runs`` (recorded-run records read)."""

    repaired_ids: int = 0
    skipped_empty: int = 0
    runs: int = 0

    def as_dict(self) -> dict:
        return {"repaired_ids": self.repaired_ids, "skipped_empty": self.skipped_empty, "runs": self.runs}


@dataclass
class ReadOptions:
    label: str = "compromised"     # compromised | attacked (recorded runs)
    strict_ids: bool = False       # refuse tool results with an empty tool_call_id
    stats: ReadStats = field(default_factory=ReadStats)


class _Where:
    def __init__(self, path, line=None, opts: ReadOptions | None = None):
        self.path, self.line = display_name(path), line
        self.opts = opts or ReadOptions()

    def fail(self, field: str, msg: str):
        raise InputError(f"{field}: {msg}", self.path, self.line)


def _text(v) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, list):  # content blocks [{"type": "text", "content"|"text": ...}]
        return "\n".join(_text(b.get("content", b.get("text")) if isinstance(b, dict) else b) for b in v)
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def _tokens(v, where: _Where, field: str) -> tuple:
    if v is None:
        return ()
    if isinstance(v, str):
        return (v,)
    if not isinstance(v, list):
        where.fail(field, "expected a list of taint tokens")
    return tuple(str(x) for x in v)


# --------------------------------------------------------------------------- AgentDojo messages


def from_messages(messages, tid: str, where: _Where, meta: dict | None = None, base: str = "") -> Trace:
    if not isinstance(messages, list) or not messages:
        where.fail(f"{base}messages", "expected a non-empty list of messages")
    events: list[Event] = []
    calls: dict[str, str] = {}
    last_call: list[str] = []
    pending: deque = deque()  # calls not answered yet, oldest first (pairing by position)
    n = 0
    for i, m in enumerate(messages):
        f = f"{base}messages[{i}]"
        if not isinstance(m, dict):
            where.fail(f, "expected an object")
        role = m.get("role")
        if role not in ("system", "user", "assistant", "tool", "developer", "function"):
            where.fail(f"{f}.role", f"expected system, user, assistant or tool, got {role!r}")
        content = _text(m.get("content"))
        if role in TRUSTED_ROLES:
            events.append(Event(id=f"m{i}", kind="TASK", trusted=True, text=content, index=i, agent=m.get("agent")))
        elif role == "assistant":
            tcs = m.get("tool_calls") or []
            if not isinstance(tcs, list):
                where.fail(f"{f}.tool_calls", "expected a list")
            for k, tc in enumerate(tcs):
                g = f"{f}.tool_calls[{k}]"
                if not isinstance(tc, dict):
                    where.fail(g, "expected an object")
                fn = tc.get("function")
                if isinstance(fn, dict):  # OpenAI wire format {"function": {"name", "arguments"}}
                    args = fn.get("arguments", {})
                    fn = fn.get("name")
                    if isinstance(args, str):
                        try:
                            args = json.loads(args) if args.strip() else {}
                        except json.JSONDecodeError:
                            where.fail(f"{g}.function.arguments", "not valid JSON")
                else:
                    args = tc.get("args", tc.get("arguments", {}))
                if not isinstance(fn, str) or not fn:
                    where.fail(f"{g}.function", "missing the function name")
                if args is None:
                    args = {}
                if not isinstance(args, dict):
                    where.fail(f"{g}.args", "expected an object of argument values")
                n += 1
                eid = f"m{i}.{k}"
                cid = str(tc.get("id") or f"_call{n}")
                calls[cid] = eid
                last_call.append(eid)
                pending.append(eid)
                events.append(Event(id=eid, kind="ACTION", trusted=False, function=fn, args=args, index=i,
                                    agent=m.get("agent")))
            if not tcs and content.strip():
                events.append(Event(id=f"m{i}", kind="ACTION", trusted=False, function="respond",
                                    args={"text": content}, index=i, agent=m.get("agent")))
        else:  # tool result
            cid = m.get("tool_call_id")
            linked = m.get("tool_call") if isinstance(m.get("tool_call"), dict) else {}
            if cid not in (None, ""):
                if str(cid) not in calls:
                    where.fail(f"{f}.tool_call_id", f"{cid!r} names no earlier tool call")
                parent = calls[str(cid)]
            elif linked.get("id") not in (None, "") and str(linked["id"]) in calls:
                parent = calls[str(linked["id"])]
            elif where.opts.strict_ids:
                where.fail(f"{f}.tool_call_id", "empty: names no tool call (without --strict-ids such results are "
                           "paired with the pending calls by position)")
            elif pending:
                parent = pending.popleft()
                where.opts.stats.repaired_ids += 1
            else:
                parent = last_call[-1] if last_call else None
            if parent in pending:
                pending.remove(parent)
            trusted = bool(m.get("trusted", False))
            events.append(Event(id=f"m{i}", kind="OBSERVATION", trusted=trusted, text=content, parent_call=parent,
                                index=i, function=m.get("function") or m.get("name") or linked.get("function")))
    return Trace(id=tid, events=events, meta=dict(meta or {}), source=where.path)


# --------------------------------------------------------------------------- CausalBench


def from_causalbench(doc: dict, where: _Where) -> Trace:
    tid = str(doc.get("run_id", doc.get("id", "")))
    traj = doc.get("trajectory")
    if not isinstance(traj, list) or not traj:
        where.fail("trajectory", "expected a non-empty list of events")
    events = []
    seen = set()
    for i, ev in enumerate(traj):
        f = f"trajectory[{i}]"
        if not isinstance(ev, dict):
            where.fail(f, "expected an object")
        eid = ev.get("event_id")
        if eid is None:
            where.fail(f"{f}.event_id", "missing")
        eid = str(eid)
        if eid in seen:
            where.fail(f"{f}.event_id", f"duplicate id {eid!r}")
        seen.add(eid)
        kind = str(ev.get("event_type", "")).upper()
        if kind not in KINDS:
            where.fail(f"{f}.event_type", f"expected one of {', '.join(KINDS)}, got {ev.get('event_type')!r}")
        trust = ev.get("trust_level", "trusted" if kind == "TASK" else "untrusted")
        if trust not in ("trusted", "untrusted"):
            where.fail(f"{f}.trust_level", f"expected trusted or untrusted, got {trust!r}")
        args = ev.get("args", ev.get("parameters", {})) or {}
        if not isinstance(args, dict):
            where.fail(f"{f}.args", "expected an object")
        fn = ev.get("action") or ev.get("function") or ev.get("tool")
        endpoint = ev.get("endpoint")
        if kind == "ACTION" and not fn:
            method = str(ev.get("method", "")).upper()
            fn = f"{ev.get('service', 'tool')}_{method.lower() or 'call'}" if method else (endpoint or ev.get("service"))
            if method == "POST":
                fn = "http_post"
        if endpoint and kind == "ACTION":
            args = {**args, "_endpoint": endpoint}
        text = _text(ev.get("content", ev.get("output", ev.get("data", ev.get("payload")))))
        if kind == "TASK" and not text:
            text = _text(doc.get("task_description"))
        events.append(Event(id=eid, kind=kind, trusted=trust == "trusted", text=text, function=fn if kind == "ACTION"
                            else None, args=args, produced=_tokens(ev.get("data_produced"), where, f"{f}.data_produced"),
                            consumed=_tokens(ev.get("data_consumed"), where, f"{f}.data_consumed"),
                            agent=ev.get("agent"), service=ev.get("service"), index=i))
    meta = {k: doc[k] for k in ("is_attack", "attack_type") if k in doc}
    if "is_attack" in doc:
        meta["label"] = int(bool(doc["is_attack"]))
    srcs = [str(ev.get("event_id")) for ev in traj if ev.get("is_injection_source")]
    meta["gt_injection_sources"] = srcs
    cg = doc.get("causal_graph") or {}
    edges = cg.get("edges", []) if isinstance(cg, dict) else []
    if not isinstance(edges, list):
        where.fail("causal_graph.edges", "expected a list")
    gt = []
    for k, e in enumerate(edges):
        if not isinstance(e, dict) or "source" not in e or "target" not in e:
            where.fail(f"causal_graph.edges[{k}]", "expected {source, target, type}")
        gt.append([str(e["source"]), str(e["target"]), str(e.get("type", "data_dependency"))])
    meta["gt_graph_edges"] = gt
    # the known attack chain: trigger-type GT edges reachable from the injection sources
    reach, frontier = set(srcs), list(srcs)
    while frontier:
        v = frontier.pop()
        for a, b, typ in gt:
            if a == v and typ in ("data_dependency", "trust_transfer") and b not in reach:
                reach.add(b)
                frontier.append(b)
    meta["gt_graph_edges_chain"] = [e for e in gt if e[0] in reach and e[2] in ("data_dependency", "trust_transfer")]
    return Trace(id=tid or "trace", events=events, meta=meta, source=where.path)


# --------------------------------------------------------------------------- generic JSONL steps


def from_steps(records: list[tuple[int, dict]], tid: str, where_path) -> Trace:
    events = []
    pending_call = None
    for line, r in records:
        where = _Where(where_path, line)
        role = str(r.get("role", "")).lower()
        if not role:
            where.fail("role", "missing (user, system, assistant, tool)")
        step = r.get("step", len(events))
        args = r.get("args", {}) or {}
        if not isinstance(args, dict):
            where.fail("args", "expected an object")
        prod = _tokens(r.get("produced"), where, "produced")
        cons = _tokens(r.get("consumed"), where, "consumed")
        trust = r.get("trust")
        if trust is not None and trust not in ("trusted", "untrusted"):
            where.fail("trust", f"expected trusted or untrusted, got {trust!r}")
        output = _text(r.get("output", r.get("content")))
        if role in TRUSTED_ROLES:
            events.append(Event(id=f"s{step}", kind="TASK", trusted=trust != "untrusted", text=output, index=line,
                                produced=prod, agent=r.get("agent")))
        elif role in ("assistant", "agent", "action"):
            tool = r.get("tool")
            if tool is not None and not isinstance(tool, str):
                where.fail("tool", "expected a function name")
            if not tool:
                tool = "respond"
                args = {**args, "text": output}
            eid = f"s{step}"
            events.append(Event(id=eid, kind="ACTION", trusted=False, function=tool, args=args, index=line,
                                consumed=cons, produced=() if r.get("output") is not None and tool != "respond" else prod,
                                agent=r.get("agent")))
            pending_call = eid
            if tool != "respond" and r.get("output") is not None:
                events.append(Event(id=f"s{step}.out", kind="OBSERVATION", trusted=trust == "trusted", text=output,
                                    parent_call=eid, index=line, produced=prod, function=tool))
        elif role in ("tool", "observation", "function"):
            events.append(Event(id=f"s{step}", kind="OBSERVATION", trusted=trust == "trusted", text=output,
                                parent_call=pending_call, index=line, produced=prod, function=r.get("tool")))
        else:
            where.fail("role", f"expected user, system, assistant or tool, got {role!r}")
    ids = [e.id for e in events]
    if len(set(ids)) != len(ids):
        _Where(where_path, records[0][0]).fail("step", "duplicate step numbers in one trace")
    return Trace(id=tid, events=events, meta={}, source=display_name(where_path))


# --------------------------------------------------------------------------- recorded AgentDojo runs


def is_run_header(doc) -> bool:
    """Line 1 of a recorded-runs export: ``{"metadata": {...}}`` with no trace of its own."""
    return (isinstance(doc, dict) and isinstance(doc.get("metadata"), dict)
            and not any(k in doc for k in ("messages", "trajectory", "role", "index")))


def run_labels(md: dict, where: _Where) -> dict:
    """meta of a recorded run from its ``metadata``: suite, pipeline model, task ids, attack type, and
    the label of ``where.opts.label`` with the class (P = attacked and security true, N2 = attacked,
    N1 = no attack). security is read only on attacked runs (it is true on every benign run)."""
    inj = md.get("injection_task_id")
    if inj is not None and not isinstance(inj, str):
        where.fail("metadata.injection_task_id", f"expected a string or null, got {inj!r}")
    sec = md.get("security")
    if inj is not None and not isinstance(sec, bool):
        where.fail("metadata.security", f"expected true or false on an attacked run, got {sec!r}")
    attacked = inj is not None
    compromised = attacked and bool(sec)
    meta = {"suite": md.get("suite_name"), "model": md.get("model"), "user_task": md.get("user_task_id"),
            "injection_task": inj, "attack_type": md.get("attack_type"),
            "class": "P" if compromised else ("N2" if attacked else "N1")}
    meta["label"] = int(compromised if where.opts.label == "compromised" else attacked)
    return meta


def from_run(doc, where: _Where, pipeline: str) -> Trace | None:
    """One ``{index, messages, metadata, annotations}`` record; None (counted) without messages."""
    if not isinstance(doc, dict):
        where.fail("record", "expected an object {index, messages, metadata, annotations}")
    md = doc.get("metadata")
    if not isinstance(md, dict):
        where.fail("metadata", "expected an object (suite_name, model, security, injection_task_id, ...)")
    idx = doc.get("index")
    if idx is not None and (isinstance(idx, bool) or not isinstance(idx, (int, str))):
        where.fail("index", f"expected an integer, got {idx!r}")
    msgs = doc.get("messages")
    if msgs is None or msgs == []:
        where.opts.stats.skipped_empty += 1
        return None
    meta = run_labels(md, where)
    meta["pipeline"] = pipeline
    where.opts.stats.runs += 1
    tid = f"{pipeline}:{idx if idx is not None else where.line}"
    return from_messages(msgs, tid, where, meta=meta)


# --------------------------------------------------------------------------- dispatch


def _meta_of(doc: dict) -> dict:
    meta = {k: doc[k] for k in META_KEYS if k in doc}
    if "is_attack" in meta and "label" not in meta:
        meta["label"] = int(bool(meta["is_attack"]))
    return meta


def parse_record(doc, path, line=None, default_id="trace", opts: ReadOptions | None = None) -> Trace:
    where = _Where(path, line, opts)
    if isinstance(doc, list):
        return from_messages(doc, default_id, where)
    if not isinstance(doc, dict):
        where.fail("record", "expected a trace object or a message list")
    tid = str(doc.get("id", doc.get("run_id", default_id)))
    if "trajectory" in doc:
        return from_causalbench(doc, where)
    if "messages" in doc:
        return from_messages(doc["messages"], tid, where, meta=_meta_of(doc))
    where.fail("record", "no 'messages' (AgentDojo) or 'trajectory' (CausalBench) field, and not a step "
               "{step, role, tool, args, output}")


def read_traces(path, opts: ReadOptions | None = None) -> list[Trace]:
    """All traces of one file (``-`` = stdin, ``.gz`` transparent); ``opts`` sets the label of recorded
    runs and the tool_call_id policy and collects :class:`ReadStats`."""
    opts = opts or ReadOptions()
    with open_text(path) as fh:
        text = fh.read()
    name = display_name(path)
    if not text.strip():
        raise InputError("empty file, expected traces", name)
    stripped = text.lstrip()
    # one JSON document?
    if stripped[0] in "[{":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            doc = None
        if doc is not None:
            if isinstance(doc, list) and doc and all(isinstance(d, dict) and ("messages" in d or "trajectory" in d)
                                                     for d in doc):
                return [parse_record(d, path, None, f"{_stem(name)}:{k}", opts) for k, d in enumerate(doc)]
            one_line = 1 if "\n" not in text.strip() else None
            if not is_run_header(doc):
                return [parse_record(doc, path, one_line, _stem(name), opts)]
    # JSONL
    rows = []
    for ln, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        rows.append((ln, parse_json(raw, name, line=ln)))
    if not rows:
        raise InputError("no records", name)
    if is_run_header(rows[0][1]):
        pipeline = str(rows[0][1]["metadata"].get("name") or _stem(name))
        out = [from_run(r, _Where(path, ln, opts), pipeline) for ln, r in rows[1:]]
        return [t for t in out if t is not None]
    is_step = [isinstance(r, dict) and "role" in r and "messages" not in r and "trajectory" not in r for _, r in rows]
    if all(is_step):
        groups: dict[str, list] = {}
        for ln, r in rows:
            groups.setdefault(str(r.get("trace", r.get("trace_id", _stem(name)))), []).append((ln, r))
        return [from_steps(recs, tid, path) for tid, recs in groups.items()]
    if any(is_step):
        bad = is_step.index(not is_step[0]) if not all(is_step) else 0
        raise InputError("mixes step records and whole traces", name, rows[bad][0])
    return [parse_record(r, path, ln, f"{_stem(name)}:{ln}", opts) for ln, r in rows]


def _stem(name: str) -> str:
    import os

    base = os.path.basename(name)
    for ext in (".gz", ".jsonl", ".json"):
        if base.endswith(ext):
            base = base[: -len(ext)]
    return base
