"""The ``causaleffect`` package (PyPI, MIT; a test/benchmark-only dependency) as an oracle:
run its ID/IDC on an ADMG and convert its ``Probability`` tree into our expression trees so both
estimands can be evaluated on the same exact distribution."""
from __future__ import annotations

from icmlkit.lib.causal.admg import ADMG
from icmlkit.lib.core.errors import require_module
from icmlkit.lib.derive_docalc.expr import ONE, Expr, Frac, Prob, Prod, Sum


def _convert(p) -> Expr:
    if p._recursive:
        body: Expr = Prod(tuple(_convert(c) for c in p._children))
    else:
        body = Prob(tuple(p._var), tuple(p._cond)) if p._var else ONE
    if p._sumset:
        body = Sum(tuple(p._sumset), body)
    if p._fraction and p._divisor is not None:
        body = Frac(body, _convert(p._divisor))
    return body


def causaleffect_identify(G: ADMG, Y, X, W=(), simplify: bool = False) -> Expr | None:
    """causaleffect.ID(Y, X, G, cond=W) as an (uncanonicalised) expression, or None when it reports
    the effect not identifiable. ``simplify`` first applies causaleffect's own ``simplify()`` (what
    its ``printLatex`` prints; algebraic only in the Python port: chain rule and marginalisation)."""
    ce = require_module("causaleffect", "derive-docalc")
    edges = [f"{a}->{b}" for a, b in sorted(G.directed)] + [f"{a}<->{b}" for a, b in sorted(G.bidirected)]
    # causaleffect builds its vertex list from the edges: add the isolated nodes explicitly
    graph = ce.createGraph(edges)
    names = set(graph.vs["name"]) if graph.vcount() else set()
    missing = [v for v in G.nodes if v not in names]
    if missing:
        graph.add_vertices(missing)
    P = ce.ID(set(Y), set(X), graph, cond=set(W) if W else None)
    if not P.identifiable:
        return None
    if simplify:
        P.simplify()
        if P._recursive:
            for child in P._children:
                child.simplify()
    return _convert(P)
