"""Steps 1-2 of CausalTrace: the typed provenance graph of a trajectory.

Nodes (Step 1): one per event, with its trust domain (trusted user/system vs untrusted external
content) and a sink flag from the sink table; plus, for untrusted text, one node per
instruction-like segment (content and trust only, never ground-truth flags; reconstructed, see
``content.py``).

Treatments (``candidates="untrusted"``, the default): **every untrusted span** (each tool output and
each of its instruction-like segments) is a candidate treatment I; whether a sink depends on it is
left to the counterfactual, with the trusted task's own demands as the competing cause. The phrase
and imperative cues enter only as a weak feature: a value found in an untrusted piece supports the
task's edge by ``1 - instruction score`` of that piece. ``candidates="markers"`` is the earlier
marker-gated variant (only instruction-like segments are treatments; kept for the ablation).

Edges (Step 2), each with a confidence, from four inference strategies in order:

(a) explicit taint: j consumes a token i produced -> data_dependency;
(b) compatible sequence: the trusted task -> an action compatible with it (its function named in
    the task), scaled by how much of the action's arguments are explained by content that is not an
    injection candidate -> trust_transfer (the user's instruction);
(c) delegation: an orchestrator's call -> the first event of the sub-agent it hands over to ->
    trust_transfer;
(d) content overlap: an argument value (>= ``min_overlap`` characters, normalised) contained in i's
    text, or shingle similarity >= ``similarity`` -> data_dependency; an instruction pattern (j's
    function and argument values spelled out in an injection candidate) -> trust_transfer.

Also: a call -> the result it returned (data_dependency), an observation -> its candidate segments
(data_dependency), and state_enablement from state-creating calls (login, authenticate, connect,
open session, select account ...) to later calls: these grant capability, not cause, and are
excluded from the trigger subgraph. Every edge carries a ``weight`` in [0, 1] (the strength the
strategy found) and its confidence is ``theta[strategy] * weight``: the hand-set ``config.CONFIDENCE``
(reconstructed) are the prior, :mod:`.em` fits theta by maximum likelihood and :func:`reweight`
applies a fitted table without rebuilding the graph (the structure and the taint bookkeeping use
the prior table, so they do not depend on theta).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from icmlkit.lib.trace_injection import content as C
from icmlkit.lib.trace_injection.config import ACTION_VERBS, CONFIDENCE, DEFAULTS, DEFAULT_SINKS, sink_category
from icmlkit.lib.trace_injection.schema import Trace

TRIGGER_TYPES = ("data_dependency", "trust_transfer")
EDGE_TYPES = ("data_dependency", "trust_transfer", "state_enablement")
STATE_RE = re.compile(r"(^|_)(login|log_in|signin|sign_in|authenticate|auth|connect|open_session|get_token|"
                      r"unlock|select_account|start_session)($|_)")
_NUMERIC = re.compile(r"^[\d\s.,:/+-]*$")


@dataclass
class Node:
    id: str
    kind: str                 # TASK, OBSERVATION, LLM_CALL, ACTION, SEGMENT
    trusted: bool
    text: str = ""
    function: str | None = None
    args: dict = field(default_factory=dict)
    sink: str | None = None   # sink category, or None
    candidate: bool = False   # injection candidate (treatment I)
    score: float = 0.0        # instruction-likeness
    order: int = 0            # position in the trajectory (topological order)
    event: str | None = None  # the event a SEGMENT belongs to


@dataclass
class Edge:
    src: str
    dst: str
    type: str
    confidence: float
    strategy: str
    weight: float = 1.0       # strength found by the strategy; confidence = theta[strategy] * weight


@dataclass
class TraceGraph:
    trace_id: str
    nodes: dict
    edges: list
    llm_calls: int = 0

    def order(self) -> list:
        return sorted(self.nodes, key=lambda n: self.nodes[n].order)

    def trigger_edges(self) -> list:
        return [e for e in self.edges if e.type in TRIGGER_TYPES]

    def trigger_parents(self, include_state: bool = False) -> dict:
        """node -> {parent: combined confidence} over data_dependency + trust_transfer edges (several
        edges between one pair combine as a noisy-OR). ``include_state`` adds state_enablement edges
        (wrong by the method; for the ablation only)."""
        out: dict = {n: {} for n in self.nodes}
        for e in (self.edges if include_state else self.trigger_edges()):
            prev = out[e.dst].get(e.src, 0.0)
            out[e.dst][e.src] = 1 - (1 - prev) * (1 - e.confidence)
        return out

    def to_networkx(self, trigger_only: bool = False):
        import networkx as nx

        g = nx.MultiDiGraph(trace=self.trace_id)
        for n in self.order():
            v = self.nodes[n]
            g.add_node(n, kind=v.kind, trust="trusted" if v.trusted else "untrusted", sink=v.sink or "",
                       candidate=v.candidate, function=v.function or "", score=round(v.score, 4),
                       text=v.text[:200])
        for e in self.edges:
            if trigger_only and e.type not in TRIGGER_TYPES:
                continue
            g.add_edge(e.src, e.dst, type=e.type, confidence=round(e.confidence, 4), strategy=e.strategy)
        return g


def reweight(g: "TraceGraph", table: dict | None) -> "TraceGraph":
    """Set every edge's confidence to ``table[strategy] * weight`` (strategies missing from ``table``
    keep the prior ``config.CONFIDENCE``); in place, returns ``g``."""
    if table:
        for e in g.edges:
            e.confidence = float(min(1.0, table.get(e.strategy, CONFIDENCE[e.strategy]) * e.weight))
    return g


def _marked(src: Node, strategy: str) -> str:
    """Edges out of an instruction-like segment get their own strategy (``marked_*``), so the fit can
    weigh the instruction cue: the weak feature, never a gate (plain spans keep theirs)."""
    return f"marked_{strategy}" if src.kind == "SEGMENT" else strategy


def _salient(values: list[str]) -> list[str]:
    """Argument values worth explaining: text of >= 3 characters that is not just a number or date."""
    return [v for v in values if len(v.strip()) >= 3 and not _NUMERIC.match(v.strip())]


def build_graph(trace: Trace, sinks: dict | None = None, params: dict | None = None, scorer=None) -> TraceGraph:
    """Build the typed graph of ``trace`` (Steps 1-2). ``scorer(piece, heuristic_score)`` optionally
    rescores instruction-likeness (the LLM judge); its call count is the caller's business."""
    p = {**DEFAULTS, **(params or {})}
    sinks = sinks or DEFAULT_SINKS
    nodes: dict[str, Node] = {}
    edges: list[Edge] = []
    order = 0
    # texts used for matching: node -> (normalised text, tokens)
    texts: dict[str, tuple[str, set]] = {}
    producers: dict[str, str] = {}
    actions: list[str] = []
    seg_of: dict[str, list[str]] = {}
    pieces: dict[str, list] = {}
    last_agent_action: dict = {}
    prev_agent = None

    # candidates and what they mainly drive: an action whose strongest trigger parent is tainted (and at
    # least 0.3), and the result of such an action; their content does not explain arguments
    tainted: set = set()

    def add_edge(src, dst, typ, weight, strategy):
        if weight > 0:
            w = float(min(1.0, weight))
            edges.append(Edge(src, dst, typ, float(min(1.0, CONFIDENCE[strategy] * w)), strategy, w))

    def update_taint(nid):
        t = u = 0.0
        for e in edges:
            if e.dst == nid and e.type in TRIGGER_TYPES:
                if e.src in tainted:
                    t = max(t, e.confidence)
                else:
                    u = max(u, e.confidence)
        if t >= 0.3 and t >= u:
            tainted.add(nid)

    for ev in trace.events:
        order += 1
        if ev.kind == "ACTION":
            node = Node(ev.id, "ACTION", False, text="", function=ev.function, args=ev.args,
                        sink=sink_category(ev.function, sinks), order=order, event=ev.id)
        else:
            node = Node(ev.id, ev.kind, ev.trusted, text=ev.text, function=ev.function, order=order, event=ev.id)
        nodes[ev.id] = node
        # (c) delegation: a new agent takes over after another agent's action
        if ev.agent is not None and prev_agent is not None and ev.agent != prev_agent and prev_agent in last_agent_action:
            add_edge(last_agent_action[prev_agent], ev.id, "trust_transfer", 1.0, "delegation")
        if ev.agent is not None:
            prev_agent = ev.agent
        if ev.kind == "ACTION":
            _action_edges(node, ev, nodes, texts, producers, actions, add_edge, p, tainted, pieces)
            actions.append(ev.id)
            update_taint(ev.id)
            if ev.agent is not None:
                last_agent_action[ev.agent] = ev.id
        elif ev.kind == "OBSERVATION" and ev.parent_call in nodes:
            add_edge(ev.parent_call, ev.id, "data_dependency", 1.0, "produced")
            if ev.parent_call in tainted:
                tainted.add(ev.id)
        elif ev.kind == "LLM_CALL":
            pass  # connected through taint tokens only
        # (a) explicit taint into this event
        for tok in ev.consumed:
            if tok in producers and producers[tok] != ev.id:
                add_edge(producers[tok], ev.id, "data_dependency", 1.0, "taint")
        for tok in ev.produced:
            producers.setdefault(tok, ev.id)
        # text of the event for later matching; untrusted text is split into candidate segments
        if ev.kind in ("TASK", "OBSERVATION", "LLM_CALL") and ev.text:
            rest = C.unwrap(ev.text)
            if not ev.trusted:
                full = rest
                scored = C.scored_pieces(rest, scorer)
                segs = C.segments(rest, p["instruction_threshold"], scored=scored)
                for k, s in enumerate(segs):
                    order += 1
                    sid = f"{ev.id}#seg{k}"
                    nodes[sid] = Node(sid, "SEGMENT", False, text=s["text"], candidate=True, score=s["score"],
                                      order=order, event=ev.id)
                    tainted.add(sid)
                    add_edge(ev.id, sid, "data_dependency", 1.0, "segment")
                    seg_of.setdefault(ev.id, []).append(sid)
                    texts[sid] = (C.normalise(s["text"]), C.tokens(s["text"]))
                for s in reversed(segs):
                    rest = rest[: s["start"]] + " " + rest[s["end"]:]
            texts[ev.id] = (C.normalise(rest), C.tokens(rest))
            if not ev.trusted and ev.kind == "OBSERVATION" and p["candidates"] == "untrusted" and rest.strip():
                node.candidate = True
                # the weak instruction feature: scored pieces of the span (a value inside one supports
                # the task's edge by 1 - score^2)
                pieces[ev.id] = [(C.normalise(full[a:b]), sc) for (a, b), sc in scored if sc > 0]
    # state_enablement: state-creating calls -> later calls (capability, not cause)
    for i, a in enumerate(actions):
        if STATE_RE.search((nodes[a].function or "").lower()):
            for b in actions[i + 1:]:
                add_edge(a, b, "state_enablement", 1.0, "state")
    return TraceGraph(trace.id, nodes, edges)


def _action_edges(node: Node, ev, nodes, texts, producers, actions, add_edge, p, tainted=frozenset(), pieces=None):
    values = [v for v in C.flat_values(ev.args) if v.strip()]
    if (ev.function or "") == "respond":  # an answer: its sentences and lines are the values to explain
        values = [v for t in values for v in re.split(r"(?<=[.!?])\s+|\n+", t) if v.strip()]
    norm_values = [C.normalise(v) for v in values]
    long_values = [v for v in norm_values if len(v) >= p["min_overlap"]]
    salient = _salient(values)
    sal_norm = [C.normalise(v) for v in salient]
    fn = ev.function or ""
    # sources: everything earlier that has text
    support_hits = [0.0] * len(sal_norm)
    found = [False] * len(sal_norm)  # the value occurs in some earlier text (else the agent composed it)
    pieces = pieces or {}
    task_sources = []
    overlaps = []
    for sid, (tnorm, ttoks) in texts.items():
        src = nodes[sid]
        if src.kind == "TASK" and src.trusted:
            task_sources.append(sid)
        # (d) content overlap -> data_dependency
        strengths = [C.overlap(v, tnorm, p["min_overlap"], p["similarity"]) for v in long_values]
        if max(strengths, default=0.0) > 0:
            overlaps.append((sid, strengths))
        for k, v in enumerate(salient):
            if not found[k] and C.value_in(v, tnorm, ttoks):
                found[k] = True
        if src.kind != "SEGMENT" and sid not in tainted:
            for k, v in enumerate(salient):
                if support_hits[k] < 1.0 and C.value_in(v, tnorm, ttoks):
                    vn = sal_norm[k]
                    s = max((sc for pn, sc in pieces.get(sid, ()) if vn in pn), default=0.0)
                    support_hits[k] = max(support_hits[k], 1.0 - s * s)
        # instruction pattern from an injection candidate -> trust_transfer
        if src.candidate:
            fm = C.function_match(fn, ttoks)
            if fm >= 0.5:
                named = [C.value_in(v, tnorm, ttoks) for v in values if len(v.strip()) >= 2]
                frac = (sum(named) / len(named)) if named else 1.0
                add_edge(sid, node.id, "trust_transfer", fm * (0.3 + 0.7 * frac), _marked(src, "instruction"))
    # (d) overlap edges, scaled by the share of the call's sourced values that this source provides
    # (values found in no earlier text do not count; reconstructed)
    sourced = [any(st[k] > 0 for _, st in overlaps) for k in range(len(long_values))]
    n_sourced = max(1, sum(sourced))
    for sid, st in overlaps:
        best = max(st)
        share = sum(1 for x in st if x > 0) / n_sourced
        strat = "overlap" if best >= 1.0 else "fuzzy"
        add_edge(sid, node.id, "data_dependency", best * (0.3 + 0.7 * share), _marked(nodes[sid], strat))
    # (b) compatible sequence from the trusted task
    # values found in no earlier text were composed by the agent: they neither support nor weaken the
    # task's edge (reconstructed)
    support = (sum(support_hits) / sum(found)) if any(found) else 1.0
    for sid in task_sources:
        compat = C.function_match(fn, texts[sid][1]) if fn != "respond" else 1.0
        verb = C.function_tokens(fn)[0] if fn != "respond" else ""
        if verb in ACTION_VERBS and not C.function_match(verb, texts[sid][1]):
            compat *= 0.3  # the task never asks for this kind of action
        add_edge(sid, node.id, "trust_transfer", max(0.15, compat) * (0.25 + 0.75 * support), "sequence")
