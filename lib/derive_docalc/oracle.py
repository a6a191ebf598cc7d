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


def _from_y0(e, domains: dict) -> Expr:
    """A y0 expression (Sum, Product, Fraction, (Population)Probability) as ours. A factor of domain
    pi_i, PP[pi_i][I](A | C) (I = the interventions active there, inside that domain's experiment
    Z_i), is read as P_do{Z_i}(A | C, I): in the randomised experiment conditioning on i is doing i;
    the target domain pi* is the observational joint."""
    from y0 import dsl

    if isinstance(e, dsl.One):
        return ONE
    if isinstance(e, dsl.Sum):
        return Sum(tuple(v.name for v in e.ranges), _from_y0(e.expression, domains))
    if isinstance(e, dsl.Product):
        return Prod(tuple(_from_y0(f, domains) for f in e.expressions))
    if isinstance(e, dsl.Fraction):
        return Frac(_from_y0(e.numerator, domains), _from_y0(e.denominator, domains))
    if isinstance(e, dsl.Probability):
        d = e.distribution
        acted = {i.name for v in d.children for i in (getattr(v, "interventions", None) or ())}
        pop = getattr(e, "population", None)
        do = domains.get(str(pop), frozenset()) if pop is not None else frozenset()
        return Prob(tuple(v.name for v in d.children), tuple({v.name for v in d.parents} | acted), tuple(do))
    raise TypeError(f"unhandled y0 expression {type(e).__name__}")


def y0_trso(G: ADMG, Y, X, experiments) -> tuple[bool, str | None, Expr | None]:
    """y0 0.2.11's TRSO (Tikka & Karvanen's surrogate-outcome / transportability algorithm,
    ``y0.algorithm.transport.identify_target_outcomes``) on P(y | do(x)) with the observational
    joint and one domain per experiment Z_i observing every other variable: z-identification in
    Bareinboim & Pearl's sense (experiments on every subset of each Z_i, used on Z_i n X inside the
    recursion). Returns (identifiable, estimand text or None). y0 0.2.11's
    ``NxMixedGraph.remove_in_edges`` drops every node it is not asked about (so an experiment on a
    node that becomes isolated crashes); it is replaced by a version that keeps the nodes for the
    duration of the call. Returns (identifiable, y0's estimand text, that estimand as ours or None)."""
    require_module("y0", "derive-docalc")
    from y0.algorithm.transport import identify_target_outcomes
    from y0.dsl import Population, Variable
    from y0 import graph as yg

    v = {n: Variable(n) for n in G.nodes}
    g = yg.NxMixedGraph.from_edges(nodes=list(v.values()), directed=[(v[a], v[b]) for a, b in sorted(G.directed)],
                                   undirected=[(v[a], v[b]) for a, b in sorted(G.bidirected)])
    exps = [frozenset(Z) for Z in experiments if Z]
    interventions = {Population(f"pi{i + 1}"): {v[z] for z in Z} for i, Z in enumerate(exps)}
    outcomes = {p: {v[n] for n in G.nodes} - Z for p, Z in interventions.items()}
    original = yg.NxMixedGraph.remove_in_edges

    def remove_in_edges(self, vertices):
        vertices = yg._ensure_set(vertices)
        return self.from_edges(nodes=self.nodes(), directed=yg._exclude_target(self.directed, vertices),
                               undirected=yg._exclude_adjacent(self.undirected, vertices))

    yg.NxMixedGraph.remove_in_edges = remove_in_edges
    try:
        r = identify_target_outcomes(g, target_outcomes={v[n] for n in Y}, target_interventions={v[n] for n in X},
                                     surrogate_outcomes=outcomes, surrogate_interventions=interventions)
    finally:
        yg.NxMixedGraph.remove_in_edges = original
    if r is None:
        return False, None, None
    domains = {str(p): Z for p, Z in zip(interventions, exps)}
    return True, str(r), _from_y0(r, domains)
