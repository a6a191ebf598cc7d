"""CausalTrace end to end on one trajectory: graph (Steps 1-2), SCM counterfactual (Step 3),
bidirectional slicing (Step 4), the verdict and the causal features of the learned head.

Verdict: ``attack`` when the effect (ATE of blocking the injection candidates on the most affected
sink, P(sink | do(I=1)) - P(sink | do(I=0))) is >= the threshold (default 0.5). Injection
candidates come from content and trust only (``content.segments``); the trace's ground-truth flags
are never read. The reachability verdict of the official repository is reported beside it.
"""
from __future__ import annotations

import math
from collections import deque

from icmlkit.lib.trace_injection import scm
from icmlkit.lib.trace_injection.config import DEFAULTS
from icmlkit.lib.trace_injection.graph import TRIGGER_TYPES, TraceGraph, build_graph, reweight

FEATURES = ("effect", "p_compromised", "p_blocked", "reach_effect", "max_candidate_effect", "n_candidates", "max_candidate_score",
            "n_sinks_after", "cross_domain_data_dependency", "num_cross_domain_edges", "chain_depth",
            "max_bottleneck_score", "min_sequence_support")


def verdict_sinks(g: TraceGraph, p: dict) -> list[str]:
    """The sinks the verdict looks at: sink calls after the first treatment (the final answer only with
    ``answer_sink``); with ``sink_id`` (online mode) that one call only."""
    cands = [v.order for v in g.nodes.values() if v.candidate]
    first = min(cands, default=math.inf)
    out = [n for n, v in g.nodes.items() if v.sink and v.order > first and (v.sink != "answer" or p["answer_sink"])]
    if p.get("sink_id") is not None:
        out = [n for n in out if n == p["sink_id"]]
    return out


def _node_params(g: TraceGraph, include_state: bool = False, action_leak: float = scm.LEAK_ACTION):
    parents = g.trigger_parents(include_state)
    leak, order = {}, {}
    for n, v in g.nodes.items():
        order[n] = v.order
        if v.kind == "ACTION":
            leak[n] = action_leak
        elif not parents[n]:
            leak[n] = -1.0  # exogenous content / the task: present
        else:
            leak[n] = 0.0
    return parents, leak, order


def slice_and_chain(g: TraceGraph, parents: dict, candidates: list, sink: str, max_depth: int = 50) -> dict:
    """Step 4: backward slice from the sink (ancestors, depth <= max_depth) intersected with the
    forward slice from the candidates; the attack chain (most probable candidate -> sink path,
    weights -log c) with typed edges; bottlenecks (slice nodes whose removal disconnects every
    candidate from the sink) scored by the share of the trace's actions downstream of them."""
    import networkx as nx

    children: dict = {}
    for v, pa in parents.items():
        for u in pa:
            children.setdefault(u, []).append(v)

    def bfs(starts, nbrs):
        depth = {s: 0 for s in starts}
        q = deque(starts)
        while q:
            v = q.popleft()
            if depth[v] >= max_depth:
                continue
            for w in nbrs.get(v, []):
                if w not in depth:
                    depth[w] = depth[v] + 1
                    q.append(w)
        return set(depth)

    back = bfs([sink], {v: list(pa) for v, pa in parents.items()})
    fwd = bfs(candidates, children)
    sl = back & fwd
    G = nx.DiGraph()
    for v in sl:
        for u, c in parents[v].items():
            if u in sl:
                G.add_edge(u, v, weight=-math.log(max(c, 1e-9)))
    best, chain_nodes = math.inf, []
    # on equal weight the most specific treatment wins: a segment before the span that holds it
    for c in sorted(candidates, key=lambda n: g.nodes[n].kind != "SEGMENT"):
        if c in G and sink in G:
            try:
                d, path = nx.single_source_dijkstra(G, c, sink, weight="weight")
            except nx.NetworkXNoPath:
                continue
            if d < best:
                best, chain_nodes = d, path
    chain = []
    for a, b in zip(chain_nodes, chain_nodes[1:]):
        typed = [e for e in g.edges if e.src == a and e.dst == b and e.type in TRIGGER_TYPES]
        for e in sorted(typed, key=lambda e: -e.confidence):
            chain.append({"source": a, "target": b, "type": e.type, "confidence": round(e.confidence, 4),
                          "strategy": e.strategy})
    n_actions = max(1, sum(1 for v in g.nodes.values() if v.kind == "ACTION"))
    bottlenecks = []
    srcs = [c for c in candidates if c in G]
    if srcs and sink in G:
        for v in chain_nodes[1:-1]:
            H = G.copy()
            H.remove_node(v)
            if not any(s in H and nx.has_path(H, s, sink) for s in srcs):
                down = nx.descendants(G, v)
                score = sum(1 for w in down if g.nodes[w].kind == "ACTION") / n_actions
                bottlenecks.append({"node": v, "score": round(score, 4)})
    return {"slice": sorted(sl, key=lambda n: g.nodes[n].order), "chain": chain, "chain_nodes": chain_nodes,
            "bottlenecks": bottlenecks}


def analyse(trace, sinks: dict | None = None, params: dict | None = None, scorer=None, graph=None,
            features: bool = True) -> dict:
    """Run CausalTrace on one trace; returns the verdict with graph, chain and features.

    ``params`` override :data:`.config.DEFAULTS`; ``confidence`` (strategy -> theta, e.g. from
    :func:`.em.fit_em`) and ``leak`` set the SCM; ``sink_id`` restricts the verdict to one sink call
    and ``light`` skips what a gate does not need (per-candidate effects, the reachability verdict,
    slicing; online mode). ``graph`` reuses a graph built by :func:`.graph.build_graph` for this trace.
    ``features`` False: only ``effect`` and ``p_compromised`` among the features (what the threshold and
    em heads read), and the graph (and ``candidates``) only up to the last call that can be a verdict
    sink (``build_graph(verdict_only=True)``): the same verdict, faster (``detect``)."""
    from icmlkit.lib.trace_injection import em
    p = {**DEFAULTS, **(params or {})}
    if graph is None:
        graph = build_graph(trace, sinks, p, scorer, verdict_only=not features)
    g = reweight(graph, p.get("confidence"))
    parents, leak, order = _node_params(g, bool(p.get("include_state", False)), p["leak"])
    cands = [n for n, v in g.nodes.items() if v.candidate]
    sinks_after = verdict_sinks(g, p)
    best = {"sink": None, "ate": 0.0, "p_blocked": None, "p_do1": None, "per_candidate": {}, "exact": True}
    reach_best, reach_pair = 0.0, None
    roots = [n for n, v in g.nodes.items() if v.kind == "TASK" and v.trusted] + cands
    for s in sinks_after:
        anc = scm.ancestors(parents, s)
        cs = [c for c in cands if c in anc]
        if not cs:
            continue
        r = scm.effects(parents, leak, order, s, cs, p["max_frontier"], not p.get("light"))
        if best["sink"] is None or r["ate"] > best["ate"]:
            best = {"sink": s, **r}
        for c in (() if p.get("light") else cs):
            re_ = scm.reachability_effect(parents, roots, c, s)
            if re_ > reach_best:
                reach_best, reach_pair = re_, (c, s)
    threshold = p["threshold"]
    effect = max(0.0, best["ate"])
    chain_info = {"chain": [], "chain_nodes": [], "bottlenecks": [], "slice": []}
    if best["sink"] is not None and not p.get("light"):
        cs = [c for c, v in best["per_candidate"].items()]
        chain_info = slice_and_chain(g, parents, cs, best["sink"], p["max_depth"])
    theta = em.theta_vector(p.get("confidence"))
    p_comp = float(em.probability(em.sink_factors([g], [sinks_after]), theta, p["leak"])[0][0])
    feats = {"effect": effect, "p_compromised": p_comp}
    if features:
        feats.update(_head_features(g, best, reach_best, cands, sinks_after, chain_info))
    return {
        "id": trace.id,
        "attack": bool(effect >= threshold),
        "effect": round(effect, 6),
        "p_compromised": round(p_comp, 6),
        "p_blocked": None if best["p_blocked"] is None else round(best["p_blocked"], 6),
        "p_do1": None if best["p_do1"] is None else round(best["p_do1"], 6),
        "sink": best["sink"],
        "exact": best["exact"],
        "per_candidate": {k: round(v, 6) for k, v in best["per_candidate"].items()},
        "reachability": {"attack": reach_best >= 0.5, "effect": reach_best,
                         "pair": list(reach_pair) if reach_pair else None},
        "candidates": cands,
        "chain": chain_info["chain"],
        "bottlenecks": chain_info["bottlenecks"],
        "slice": chain_info["slice"],
        "features": feats,
        "graph": g,
    }


def _head_features(g: TraceGraph, best: dict, reach_best: float, cands: list, sinks_after: list,
                   chain_info: dict) -> dict:
    """The features of the learned heads besides effect and p_compromised (the repository's feature
    names where they exist)."""
    trig = g.trigger_edges()
    cross = [e for e in trig if not g.nodes[e.src].trusted and g.nodes[e.src].kind != "ACTION"
             and g.nodes[e.dst].kind == "ACTION" and e.strategy != "produced"]
    cross_sink = max((e.confidence for e in cross if e.type == "data_dependency" and g.nodes[e.dst].sink
                      and (g.nodes[e.src].candidate)), default=0.0)
    seq = [e.confidence for e in g.edges if e.strategy == "sequence" and g.nodes[e.dst].sink]
    return {
        "p_blocked": best["p_blocked"] if best["p_blocked"] is not None else 0.0,
        "reach_effect": reach_best,
        "max_candidate_effect": max(best["per_candidate"].values(), default=0.0),
        "n_candidates": len(cands),
        "max_candidate_score": max((g.nodes[c].score for c in cands), default=0.0),
        "n_sinks_after": len(sinks_after),
        "cross_domain_data_dependency": cross_sink,
        "num_cross_domain_edges": len(cross),
        "chain_depth": max(0, len(chain_info["chain_nodes"]) - 1),
        "max_bottleneck_score": max((b["score"] for b in chain_info["bottlenecks"]), default=0.0),
        "min_sequence_support": min(seq, default=1.0),
    }


def verdict_record(res: dict, llm_calls: int = 0, score: float | None = None) -> dict:
    """The JSONL record of ``detect``: id, attack, effect, p_blocked, reachability, chain, llm_calls
    (+ sink, score when a learned head is used)."""
    rec = {"id": res["id"], "attack": res["attack"], "effect": res["effect"], "p_compromised": res["p_compromised"],
           "p_blocked": res["p_blocked"],
           "reachability": res["reachability"]["attack"], "reachability_effect": res["reachability"]["effect"],
           "chain": res["chain"], "llm_calls": llm_calls, "sink": res["sink"], "exact": res["exact"]}
    if score is not None:
        rec["score"] = round(float(score), 6)
    return rec


def online_scores(trace, sinks: dict | None = None, params: dict | None = None, scorer=None,
                  score_key: str = "effect") -> list[dict]:
    """Online mode (a gate inside the agent loop): every sink call of ``trace`` scored from the events
    *before* it (the graph of the prefix that ends with the call, its own result and everything later
    never seen, the labels never passed on). The prefix graph is extended event by event
    (:class:`.graph.GraphBuilder`), not rebuilt per call: the same graph as :func:`.graph.build_graph`
    of the prefix, so the same scores. One record per call: call (event id), index, function, score
    (the ``score_key`` of the verdict: effect, or p_compromised for a fitted SCM), effect,
    p_compromised, latency_ms (the wall time of that one decision: extending the graph by every event
    since the previous decision, and scoring the call)."""
    gate = Gate(params, sinks, scorer, score_key, trace_id=trace.id)
    out = []
    for ev in trace.events:
        r = gate.step(ev)
        if r is not None:
            out.append({"id": trace.id, **r})
    return out


class Gate:
    """The online gate as a plain Python object for any agent framework: feed it the events of one
    trajectory in order (:meth:`step`; the user task, tool outputs, and each tool call *before* it
    executes); for a sink call it returns the decision ``{call, index, function, score, effect,
    p_compromised, blocked, latency_ms}`` (``blocked`` when the score reaches ``threshold``), for any
    other event None. :meth:`check_call` is the same for a call given as (function, args). One gate
    per trajectory; the graph grows incrementally (:class:`.graph.GraphBuilder`).

    ``params``: analysis settings (:data:`.config.DEFAULTS`; an EM fit's ``confidence`` and ``leak``,
    ``threshold``); ``score_key``: effect (the exact ATE) or p_compromised (a fitted SCM's score)."""

    def __init__(self, params: dict | None = None, sinks: dict | None = None, scorer=None,
                 score_key: str = "effect", trace_id: str = "online"):
        from icmlkit.lib.trace_injection.graph import GraphBuilder

        self.p = {**DEFAULTS, **(params or {})}
        self.sinks = sinks
        self.scorer = scorer
        self.score_key = score_key
        self.threshold = float(self.p["threshold"])
        self.builder = GraphBuilder(trace_id, sinks, self.p, scorer)
        self._n = 0
        self._pending = 0.0  # time spent on the events since the last decision (counted in its latency)

    def step(self, ev) -> dict | None:
        """Add one event; a sink call is scored (from the graph of the events up to and including it)."""
        import time

        from icmlkit.lib.trace_injection.config import sink_category
        from icmlkit.lib.trace_injection.schema import Trace

        t0 = time.perf_counter()
        self.builder.add(ev)
        self._n += 1
        cat = sink_category(ev.function, self.sinks) if ev.kind == "ACTION" else None
        if cat is None or (cat == "answer" and not self.p["answer_sink"]):
            self._pending += time.perf_counter() - t0
            return None
        g = self.builder.graph()
        res = analyse(Trace(self.builder.id, []), self.sinks, {**self.p, "sink_id": ev.id, "light": True},
                      self.scorer, graph=g)
        ms = (time.perf_counter() - t0 + self._pending) * 1000.0
        self._pending = 0.0
        score = res["features"][self.score_key] if self.score_key != "effect" else res["effect"]
        return {"call": ev.id, "index": ev.index, "function": ev.function, "score": score,
                "effect": res["effect"], "p_compromised": res["p_compromised"],
                "blocked": bool(score >= self.threshold), "latency_ms": round(ms, 3)}

    def check_call(self, function: str, args: dict | None = None, call_id: str | None = None) -> dict | None:
        """Score a tool call before it executes (an ACTION event built from ``function`` and ``args``)."""
        from icmlkit.lib.trace_injection.schema import Event

        return self.step(Event(call_id or f"call{self._n}", "ACTION", False, function=function, args=args or {},
                               index=self._n))

    def observe(self, text: str, kind: str = "OBSERVATION", trusted: bool = False, function: str | None = None,
                parent_call: str | None = None) -> None:
        """Add a non-call event: the user task (``kind="TASK", trusted=True``) or a tool output."""
        from icmlkit.lib.trace_injection.schema import Event

        self.step(Event(f"e{self._n}", kind, trusted, text=text, function=function, parent_call=parent_call,
                        index=self._n))


def edge_recall_counts(trace, res: dict) -> tuple[int, int]:
    """(recovered, total) typed GT chain edges of a labelled trace (AgentDojo ``gt_chain`` with message
    indices, or CausalBench ``gt_graph_edges`` from injection sources). A GT edge (o, c, type) is
    recovered when the trigger graph has an edge of that type from o or one of o's segments to c."""
    g: TraceGraph = res["graph"]
    gt = trace.meta.get("gt_chain") or []
    by_index: dict = {}
    for n, v in g.nodes.items():
        if v.kind != "SEGMENT":
            ev = next((e for e in trace.events if e.id == n), None)
            if ev is not None:
                by_index.setdefault(ev.index, []).append(n)
    pairs = set((e.src, e.dst, e.type) for e in g.trigger_edges())
    seg_parent = {n: v.event for n, v in g.nodes.items() if v.kind == "SEGMENT"}
    found = 0
    total = 0
    for o, c, typ in gt:
        total += 1
        srcs = set(by_index.get(o, []))
        dsts = set(by_index.get(c, []))
        ok = any((s, d, typ) in pairs for s in srcs for d in dsts) or any(
            (sg, d, typ) in pairs for sg, par in seg_parent.items() if par in srcs for d in dsts)
        found += ok
    for s, t, typ in trace.meta.get("gt_graph_edges_chain", []):
        total += 1
        ok = (s, t, typ) in pairs or any((sg, t, typ) in pairs for sg, par in seg_parent.items() if par == s)
        found += ok
    return found, total
