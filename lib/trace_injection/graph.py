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
    function and argument values spelled out in an injection candidate) -> trust_transfer. Out of an
    instruction-like segment these are the ``marked_*`` strategies, out of the plain part of a span
    whose source the task names the ``named_*`` ones (provenance), each fitted apart by EM.

One piece of content is one cause (**reconstructed**, issue 54): a text repeated verbatim in several
tool outputs (the same injected block on every web page the agent visits, the same page read twice)
makes one instruction edge and one overlap edge into a call, from its first occurrence, not one per
copy; the copies are not independent causes, and a noisy-OR of k copies would count one weak cue k
times.

A call's result is not evidence for what the call itself sent (**reconstructed**): a value that
occurs in the arguments of the call that produced a text makes no content edge from that text and
no task support through it, and a result of function f spelling out f makes no instruction edge
(a reservation confirmed, a file echoed after an append: the origin of such a value is the earlier
call, so the blame stays with whatever explained that call).

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
from functools import lru_cache

from icmlkit.lib.trace_injection import content as C
from icmlkit.lib.trace_injection.config import (ACTION_VERBS, CONFIDENCE, DEFAULTS, DEFAULT_SINKS, confidence_table,
                                                sink_category)
from icmlkit.lib.trace_injection.schema import Trace

TRIGGER_TYPES = ("data_dependency", "trust_transfer")
EDGE_TYPES = ("data_dependency", "trust_transfer", "state_enablement")
STATE_RE = re.compile(r"(^|_)(login|log_in|signin|sign_in|authenticate|auth|connect|open_session|get_token|"
                      r"unlock|select_account|start_session)($|_)")
_NUMERIC = re.compile(r"^[\d\s.,:/+-]*$")
READ_VERBS = ("get", "read", "visit", "open", "search", "list", "find", "browse", "check")


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
    named_by: str | None = None  # untrusted span: the trusted task that names its source (provenance)


@dataclass
class Edge:
    src: str
    dst: str
    type: str
    confidence: float
    strategy: str
    weight: float = 1.0       # strength found by the strategy; confidence = theta[strategy] * weight
    norm: str = ""            # the value normalisation that made a content edge ("" = plain; content.NORMALISATIONS)


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
    """Set every edge's confidence to ``table[strategy] * weight`` (strategies missing from ``table``,
    or every strategy when ``table`` is None, take the prior ``config.CONFIDENCE``, a ``named_*`` one the
    table's plain strategy: ``config.confidence_table``); in place, returns
    ``g`` (so a graph, or the edges a prefix graph shares with the online builder, never keeps an
    earlier call's table)."""
    t = confidence_table(table)
    for e in g.edges:
        e.confidence = float(min(1.0, t[e.strategy] * e.weight))
    return g


def _marked(src: Node, strategy: str) -> str:
    """Edges out of an instruction-like segment get their own strategy (``marked_*``), so the fit can
    weigh the instruction cue: the weak feature, never a gate. Edges out of the plain part of an
    untrusted span whose source the task names (``named_by``: the file, e-mail, page or transactions
    the user pointed to) get theirs too (``named_*``; reconstructed, issue 54 items 1 and 3): a value or
    an instruction the agent takes from data the user asked it to use is a legitimate untrusted -> sink
    flow as often as not, and EM fits how often (a segment of such a span stays ``marked_*``: the
    instruction cue, not the provenance, decides there). Other spans keep the plain strategy."""
    if src.kind == "SEGMENT":
        return f"marked_{strategy}"
    return f"named_{strategy}" if src.named_by is not None else strategy


def build_graph(trace: Trace, sinks: dict | None = None, params: dict | None = None, scorer=None,
                verdict_only: bool = False) -> TraceGraph:
    """Build the typed graph of ``trace`` (Steps 1-2). ``scorer(piece, heuristic_score)`` optionally
    rescores instruction-likeness (the LLM judge); its call count is the caller's business.

    ``verdict_only``: stop after the last call that can be a verdict sink (:func:`verdict_horizon`).
    Every edge points into an event from earlier ones, so nothing later is an ancestor of a verdict
    sink: the verdict (effect, P(compromised), chain, slice, reachability) is the same, and a run
    without any sink call gets an empty graph (``detect`` without a learned head)."""
    b = GraphBuilder(trace.id, sinks, params, scorer)
    events = trace.events
    if verdict_only:
        events = events[: verdict_horizon(events, b.sinks, bool(b.p["answer_sink"])) + 1]
    for ev in events:
        b.add(ev)
    return b.graph()


def verdict_horizon(events, sinks: dict, answer_sink: bool = False) -> int:
    """The index of the last call of ``events`` that can be a verdict sink (a sink call; the final
    answer only with ``answer_sink``), -1 when there is none."""
    for k in range(len(events) - 1, -1, -1):
        ev = events[k]
        if ev.kind == "ACTION":
            cat = sink_category(ev.function, sinks)
            if cat is not None and (cat != "answer" or answer_sink):
                return k
    return -1


def _prepare(raw: str, trusted: bool, threshold: float, scorer=None) -> tuple:
    """A text prepared for the graph: (the rest after its candidate segments, as :class:`.content.Text`;
    [(segment text, score, Text)]; [(normalised piece, canonical piece, score)] of the pieces with a
    positive instruction score). Untrusted text only is segmented."""
    rest = C.unwrap(raw)
    if trusted:
        return C.Text(rest), (), ()
    full = rest
    scored = C.scored_pieces(rest, scorer)
    segs = C.segments(rest, threshold, scored=scored)
    for s in reversed(segs):
        rest = rest[: s["start"]] + " " + rest[s["end"]:]
    pieces = tuple((pn, C.canonical_of(pn), sc) for (a, b), sc in scored if sc > 0 for pn in (C.normalise(full[a:b]),))
    return C.Text(rest), tuple((s["text"], s["score"], C.Text(s["text"])) for s in segs), pieces


@lru_cache(maxsize=8192)
def _prepared(raw: str, trusted: bool, threshold: float) -> tuple:
    """:func:`_prepare` with the heuristic instruction score, cached per text (tool outputs repeat across
    the runs of one environment; the prepared text is read-only)."""
    return _prepare(raw, trusted, threshold)


def clear_caches() -> None:
    """Empty the per-text and per-value caches (prepared texts, values, matches; a benchmark clears
    them before each timed pass so that repeats do not time a warm cache)."""
    _prepared.cache_clear()
    _echo_text.cache_clear()
    C.clear_caches()


@lru_cache(maxsize=8192)
def _echo_text(joined: str) -> C.Text:
    """The arguments of a call as one prepared text, cached (the same calls recur across runs; read-only)."""
    return C.Text(joined)


class GraphBuilder:
    """The graph of a trajectory built one event at a time: :meth:`add` extends it with the next event
    (its node, its segments and every edge into it), :meth:`graph` returns the graph of the prefix
    added so far. Every edge into an event depends only on the events before it, so the graph of a
    prefix is the same whether built at once (:func:`build_graph`) or extended event by event (the
    online gate extends one builder per trajectory instead of rebuilding each prefix)."""

    indexed = True  # test a value only against the texts it can match (False: against every text; the tests)

    def __init__(self, trace_id: str, sinks: dict | None = None, params: dict | None = None, scorer=None):
        self.id = trace_id
        self.p = {**DEFAULTS, **(params or {})}
        self.sinks = sinks or DEFAULT_SINKS
        self.scorer = scorer
        self.nodes: dict[str, Node] = {}
        self.edges: list[Edge] = []
        self.state_edges: list[Edge] = []
        self.order = 0
        self.texts: dict[str, C.Text] = {}     # node -> its text prepared for matching
        self.producers: dict[str, str] = {}
        self.actions: list[str] = []
        self.state_actions: list[str] = []
        self.pieces: dict[str, list] = {}      # untrusted span -> [(norm piece, canonical piece, score)]
        self.tasks: list[str] = []             # trusted TASK nodes
        self.named: dict[str, str] = {}        # untrusted span -> the task that names its source
        self.echo: dict[str, tuple] = {}       # a call's result (and its segments) -> (the call's function, its arguments as Text)
        self.into: dict[str, list] = {}        # node -> trigger edges into it (taint bookkeeping)
        self.last_agent_action: dict = {}
        self.prev_agent = None
        # candidates and what they mainly drive: an action whose strongest trigger parent is tainted
        # (and at least 0.3), and the result of such an action; their content does not explain arguments
        self.tainted: set = set()

    def graph(self) -> TraceGraph:
        """The graph of the events added so far (a new node map and edge list; the edges are shared)."""
        return TraceGraph(self.id, dict(self.nodes), self.edges + self.state_edges)

    def _edge(self, src, dst, typ, weight, strategy, norm=""):
        if weight > 0:
            w = float(min(1.0, weight))
            e = Edge(src, dst, typ, float(min(1.0, CONFIDENCE[strategy] * w)), strategy, w, norm)
            (self.state_edges if typ == "state_enablement" else self.edges).append(e)
            if typ in TRIGGER_TYPES:
                self.into.setdefault(dst, []).append(e)

    def _update_taint(self, nid):
        # the prior confidences (not ``e.confidence``, which a fitted table may have reweighted)
        t = u = 0.0
        for e in self.into.get(nid, ()):
            c = min(1.0, CONFIDENCE[e.strategy] * e.weight)
            if e.src in self.tainted:
                t = max(t, c)
            else:
                u = max(u, c)
        if t >= 0.3 and t >= u:
            self.tainted.add(nid)

    def add(self, ev) -> None:
        """Extend the graph with the next event of the trajectory."""
        p, nodes = self.p, self.nodes
        self.order += 1
        if ev.kind == "ACTION":
            node = Node(ev.id, "ACTION", False, text="", function=ev.function, args=ev.args,
                        sink=sink_category(ev.function, self.sinks), order=self.order, event=ev.id)
        else:
            node = Node(ev.id, ev.kind, ev.trusted, text=ev.text, function=ev.function, order=self.order, event=ev.id)
        nodes[ev.id] = node
        # (c) delegation: a new agent takes over after another agent's action
        if (ev.agent is not None and self.prev_agent is not None and ev.agent != self.prev_agent
                and self.prev_agent in self.last_agent_action):
            self._edge(self.last_agent_action[self.prev_agent], ev.id, "trust_transfer", 1.0, "delegation")
        if ev.agent is not None:
            self.prev_agent = ev.agent
        if ev.kind == "ACTION":
            self._action_edges(node, ev)
            # state_enablement: earlier state-creating calls -> this call (capability, not cause)
            for a in self.state_actions:
                self._edge(a, ev.id, "state_enablement", 1.0, "state")
            if STATE_RE.search((ev.function or "").lower()):
                self.state_actions.append(ev.id)
            self.actions.append(ev.id)
            self._update_taint(ev.id)
            if ev.agent is not None:
                self.last_agent_action[ev.agent] = ev.id
        elif ev.kind == "OBSERVATION" and ev.parent_call in nodes:
            self._edge(ev.parent_call, ev.id, "data_dependency", 1.0, "produced")
            if ev.parent_call in self.tainted:
                self.tainted.add(ev.id)
        # (a) explicit taint into this event
        for tok in ev.consumed:
            if tok in self.producers and self.producers[tok] != ev.id:
                self._edge(self.producers[tok], ev.id, "data_dependency", 1.0, "taint")
        for tok in ev.produced:
            self.producers.setdefault(tok, ev.id)
        # text of the event for later matching; untrusted text is split into candidate segments
        if ev.kind in ("TASK", "OBSERVATION", "LLM_CALL") and ev.text:
            self._text(node, ev)

    def _text(self, node: Node, ev) -> None:
        p = self.p
        call = self.nodes.get(ev.parent_call) if ev.kind == "OBSERVATION" else None
        echo = None
        if call is not None and call.kind == "ACTION":
            # the result of a call repeats what the call sent (a reservation confirmed, a file appended to):
            # the call's own arguments and function are not evidence that the result caused a later call
            echo = (call.function or "", _echo_text(" \n ".join(C.flat_values(call.args))))
        if self.scorer is None:  # the heuristic score depends on the text alone: prepared once per text
            rest, segs, pieces = _prepared(ev.text, bool(ev.trusted), float(p["instruction_threshold"]))
        else:
            rest, segs, pieces = _prepare(ev.text, bool(ev.trusted), p["instruction_threshold"], self.scorer)
        for k, (seg_text, seg_score, seg) in enumerate(segs):
            self.order += 1
            sid = f"{ev.id}#seg{k}"
            self.nodes[sid] = Node(sid, "SEGMENT", False, text=seg_text, candidate=True, score=seg_score,
                                   order=self.order, event=ev.id)
            self.tainted.add(sid)
            self._edge(ev.id, sid, "data_dependency", 1.0, "segment")
            self.texts[sid] = seg
            if echo is not None:
                self.echo[sid] = echo
        text = rest
        if ev.kind == "TASK" and ev.trusted:
            if any(self.texts[t].norm == text.norm for t in self.tasks):
                return  # the same prompt repeated (e.g. a repeat-the-prompt defence): no new evidence
            self.tasks.append(ev.id)
        self.texts[ev.id] = text
        if echo is not None:
            self.echo[ev.id] = echo
        if not ev.trusted and ev.kind == "OBSERVATION":
            # provenance: the task that names the source this span was read from (the file, e-mail,
            # web page, channel or transactions it asks about), if any
            call = self.nodes.get(ev.parent_call)
            vals = [C.value(v) for v in C.flat_values(call.args if call else {}) if len(v.strip()) >= 3]
            fn = node.function or (call.function if call else None)
            by = next((t for t in self.tasks if C.names_source(fn, vals, self.texts[t])), None)
            if by is None:
                # transitively: a source named in the plain text of a span the task names ("do the
                # tasks on the list at <url>" -> the channels the list speaks of)
                by = next((self.named[s] for s in self.named if s not in self.tainted
                           and C.names_source(fn, vals, self.texts[s])), None)
            if by is not None:
                self.named[ev.id] = node.named_by = by
            if p["candidates"] == "untrusted" and rest.norm:
                node.candidate = True
                # the weak instruction feature: scored pieces of the span (a value inside one supports
                # the task's edge by 1 - score^2)
                self.pieces[ev.id] = pieces

    def _action_edges(self, node: Node, ev) -> None:
        p, nodes = self.p, self.nodes
        raw = [v for v in C.flat_values(ev.args) if v.strip()]
        if (ev.function or "") == "respond":  # an answer: its sentences and lines are the values to explain
            raw = [v for t in raw for v in re.split(r"(?<=[.!?])\s+|\n+", t) if v.strip()]
        values = [C.value(v) for v in raw]
        long_values = [v for v in values if len(v.norm) >= p["min_overlap"]]
        salient = [v for v in values if len(v.raw.strip()) >= 3 and not _NUMERIC.match(v.raw.strip())]
        named_values = [v for v in values if len(v.raw.strip()) >= 2]
        fn = ev.function or ""
        n = len(salient)
        found = [False] * n         # the value occurs in some earlier text (else the agent composed it)
        trusted = [0.0] * n         # ... in trusted content (the task, the system prompt)
        referenced = [0.0] * n      # ... in a span whose source the task names (1 - score^2 of its piece)
        ref_task = [None] * n
        overlaps = []
        # one containment test per value over every earlier text joined tells which values can match
        # some text at all (most cannot): the per-text tests that cannot succeed are skipped (same edges)
        corpus = C.Corpus(self.texts.values())
        mo = p["min_overlap"]
        indexed = self.indexed
        if indexed:  # whether a value can match some text: the texts it can match, kept per value (exact)
            def may(v, min_len=6):
                at = corpus.matching(v, min_len)
                return at is None or bool(at)
        else:
            may = corpus.may_match
        may_long = [may(v, mo) for v in long_values]
        ids_long = [[t for t in v.idents() if len(t.norm) >= mo and may(t, mo)] for v in long_values]
        live = [k for k, v in enumerate(long_values) if may_long[k] or ids_long[k] or not v.identifier()]
        may_sal = [may(v) for v in salient]
        may_named = [may(v) for v in named_values]
        zero = (0.0, "")
        items = list(self.texts.items())
        srcs = [nodes[sid] for sid, _ in items]
        echoes = [self.echo.get(sid) for sid, _ in items]
        every = range(len(items))
        # (d) content overlap -> data_dependency, tested only on the (value, text) pairs that can give a
        # positive strength (every other pair gives 0; exact): a text that the value, or one of its
        # identifier tokens, can match (Corpus.matching), and for a value judged by its shingle coverage
        # a text sharing one of its shingles (a long text: every one, its shingle set is built only when
        # the value may reach the threshold, Value.shingle_bound)
        cand: dict = {}  # text index -> the values to test against it
        shingled = []
        for k in live:
            v = long_values[k]
            if not v.identifier() and v.shingles(mo):
                shingled.append(k)
            for u in ([v] if may_long[k] else []) + ids_long[k]:
                at = corpus.matching(u, mo) if indexed else None
                for i in (every if at is None else at):
                    cand.setdefault(i, set()).add(k)
        if shingled:
            union = frozenset().union(*(long_values[k].shingles(mo) for k in shingled)) if indexed else None
            for i, (sid, text) in enumerate(items):
                ks = shingled
                if indexed and len(text.norm) < C.LONG_TEXT:
                    tsh = text.shingles(mo)  # (a dict: content._shingles; each test iterates the smaller side)
                    common = tsh.keys() & union if len(union) <= len(tsh) else union.intersection(tsh)
                    ks = [k for k in shingled if common and not long_values[k].shingles(mo).keys().isdisjoint(common)]
                if ks:
                    cand.setdefault(i, set()).update(ks)
        for i in sorted(cand):
            sid, text = items[i]
            echo = echoes[i]
            strengths = [zero] * len(long_values)
            for k in cand[i]:
                if echo is not None and C.match(long_values[k], echo[1])[0]:
                    continue  # the value was in the call that produced this text: not taken from it
                strengths[k] = C.overlap_known(long_values[k], text, mo, p["similarity"], may_long[k], ids_long[k])
            if any(st for st, _ in strengths):
                overlaps.append((sid, strengths))
        # where each value occurs in earlier text: tested only on the texts it can match (Corpus.matching)
        plains = [src.kind != "SEGMENT" and sid not in self.tainted for (sid, _), src in zip(items, srcs)]
        for k, v in enumerate(salient):
            if not may_sal[k]:
                continue
            at = corpus.matching(v) if indexed else None
            for i in (every if at is None else at):
                plain = plains[i]
                if found[k] and (not plain or trusted[k] >= 1.0):
                    continue
                sid, text = items[i]
                echo = echoes[i]
                if echo is not None and C.match(v, echo[1])[0]:
                    continue
                ok, how = C.match(v, text)
                if not ok:
                    continue
                found[k] = True
                if not plain:
                    continue
                src = srcs[i]
                named_by = self.named.get(sid) if not src.trusted else None
                if src.trusted:
                    trusted[k] = 1.0
                elif named_by is not None and referenced[k] < 1.0:
                    s = max((sc for pn, pc, sc in self.pieces.get(sid, ()) if v.norm in pn or v.canon in pc),
                            default=0.0)
                    if 1.0 - s * s > referenced[k]:
                        referenced[k], ref_task[k] = 1.0 - s * s, named_by
        copies = set()  # one piece of content is one cause: a verbatim copy of an earlier text makes no edge
        for i, (sid, text) in enumerate(items):
            src, echo = srcs[i], echoes[i]
            # instruction pattern from an injection candidate -> trust_transfer
            if src.candidate and not (echo is not None and echo[0] == fn):  # a result of fn names fn: an echo
                fm = C.function_match(fn, text)
                if fm >= 0.5 and text.norm not in copies:
                    copies.add(text.norm)
                    named = [m and C.match(v, text)[0] and not (echo is not None and C.match(v, echo[1])[0])
                             for v, m in zip(named_values, may_named)]
                    frac = (sum(named) / len(named)) if named else 1.0
                    self._edge(sid, node.id, "trust_transfer", fm * (0.3 + 0.7 * frac), _marked(src, "instruction"))
        # (d) overlap edges, scaled by the share of the call's sourced values that this source provides
        # (values found in no earlier text do not count; reconstructed)
        sourced = [any(st[k][0] > 0 for _, st in overlaps) for k in range(len(long_values))]
        n_sourced = max(1, sum(sourced))
        copies = set()
        for sid, st in overlaps:
            if self.texts[sid].norm in copies:
                continue  # (as above: the first occurrence of a text repeated verbatim is the cause)
            copies.add(self.texts[sid].norm)
            best, how = max(st, key=lambda x: (x[0], x[1] == ""))
            share = sum(1 for x, _ in st if x > 0) / n_sourced
            strat = "overlap" if best >= 1.0 else "fuzzy"
            self._edge(sid, node.id, "data_dependency", best * (0.3 + 0.7 * share), _marked(nodes[sid], strat), how)
        # (b) compatible sequence from the trusted task, and the task-referenced-source edge. A value
        # found in earlier text is explained by the task when it occurs in trusted content (sequence)
        # or in an untrusted span whose source the task names (referenced; provenance-aware, reconstructed);
        # a value found only in other untrusted content is not: the least explained value bounds the
        # call's explanation ("min" aggregation; "mean" with support="mean"). Values found in no earlier
        # text were composed by the agent: they neither support nor weaken the task's edges.
        idx = [k for k in range(n) if found[k]]
        reading = node.sink == "http_get" or (C.function_tokens(fn) or ("",))[0] in READ_VERBS or \
            fn.lower().split("_")[0] in READ_VERBS
        agg = min if p["support"] == "min" else (lambda xs: sum(xs) / len(xs))
        both = agg([max(trusted[k], referenced[k]) for k in idx]) if idx else 1.0
        seq_support = agg([trusted[k] for k in idx]) if idx else 1.0
        ref_share = both - seq_support if both > seq_support else 0.0
        for sid in self.tasks:
            compat = C.function_match(fn, self.texts[sid]) if fn != "respond" else 1.0
            verb = C.function_tokens(fn)[0] if fn != "respond" else ""
            if verb in ACTION_VERBS and not C.function_match(verb, self.texts[sid]):
                compat *= 0.3  # the task never asks for this kind of action
            self._edge(sid, node.id, "trust_transfer", max(0.15, compat) * (0.25 + 0.75 * seq_support), "sequence")
            if ref_share > 0 and any(ref_task[k] == sid for k in idx):
                # data the user pointed to: legitimate for a reading call whatever it reads (a link in
                # the e-mail the user asked about); a writing call also needs the task to ask for it
                self._edge(sid, node.id, "trust_transfer", ref_share * (1.0 if reading else max(0.15, compat)),
                           "referenced")
