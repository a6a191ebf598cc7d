"""Identification: the ID and IDC algorithms (Shpitser & Pearl 2006; 2008) producing estimand
expression trees (:mod:`icmlkit.lib.derive_docalc.expr`), and the estimands of a whole equivalence class.

ID(y, x, P, G), lines as in the paper:
  1. x empty: sum_{V \\ y} P.
  2. V != An(Y): recurse on An(Y) with P marginalised.
  3. W = (V \\ X) \\ An(Y) in G_{bar X} non-empty: recurse with x u w.
  4. C(G \\ X) = {S_1..S_k}, k > 1: sum_{V \\ (y u x)} prod_i ID(s_i, v \\ s_i, P, G).
  5. C(G) = {G}: fail with the hedge (G, S).
  6. S in C(G): sum_{S \\ y} prod_{V_i in S} P(v_i | v_pi^(i-1)).
  7. S inside S' in C(G): recurse on G[S'] with P' = prod_{V_i in S'} P(v_i | v_pi^(i-1)).
IDC(y, x, z): move z in Z into the actions while (Y _||_ z | X, Z \\ z) in G_{bar X, underline z}
(rule 2), then ID(y u z, x) / sum_y ID(y u z, x).

pi is a fixed topological order of G (ties broken by declaration order), so the output is
deterministic; the result is put in canonical form.
"""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.causal.admg import ADMG
from icmlkit.lib.causal.parse import Query
from icmlkit.lib.derive_docalc.expr import ONE, Expr, Frac, Prob, Prod, Sum, canonical


class NotIdentifiable(Exception):
    """ID failed at line 5: the hedge is the pair of C-forests (F, F')."""

    def __init__(self, F: frozenset, F2: frozenset):
        self.F, self.F2 = F, F2
        super().__init__(f"not identifiable: hedge F = {{{', '.join(sorted(F))}}}, "
                         f"F' = {{{', '.join(sorted(F2))}}}")


@dataclass
class _Dist:
    """The current distribution of the recursion: an expression over ``vars`` (a distribution over
    them, given fixed context values). ``raw`` = a plain P(vars | context) of the observed joint;
    ``chain`` = factor of each variable when the expression is a chain-rule product in pi order."""

    expr: Expr
    vars: frozenset
    raw: bool = False
    chain: dict | None = None


def _marg(P: _Dist, keep: frozenset, order: list[str]) -> _Dist:
    keep = frozenset(keep) & P.vars
    drop = P.vars - keep
    if not drop:
        return P
    if P.raw:
        return _Dist(canonical(Sum(tuple(drop), P.expr)), keep, raw=True)
    if P.chain is not None:
        pos = {v: i for i, v in enumerate(order)}
        if min(pos[d] for d in drop) > max((pos[k] for k in keep), default=-1):
            # dropping a pi-suffix of a chain-rule product: the dropped factors sum to one
            return _Dist(canonical(Prod(tuple(P.chain[v] for v in order if v in keep))), keep,
                         chain={v: P.chain[v] for v in keep})
    return _Dist(canonical(Sum(tuple(drop), P.expr)), keep)


def _cond(P: _Dist, v: str, given: frozenset, order: list[str]) -> Expr:
    """P(v | given) of the current distribution (given = v's pi-predecessors, possibly with context)."""
    inside = given & P.vars
    if P.raw:
        base = P.expr.body if isinstance(P.expr, Sum) else P.expr
        ctx = set(base.cond) if isinstance(base, Prob) else set()
        return Prob((v,), tuple(set(given) | ctx))
    if P.chain is not None:
        pos = {u: i for i, u in enumerate(order)}
        if all(pos[u] < pos[v] for u in inside) and {u for u in P.vars if pos[u] < pos[v]} <= inside:
            return P.chain[v]
    num = _marg(P, inside | {v}, order).expr
    den = _marg(P, inside, order).expr
    return canonical(Frac(num, den))


def _id(y: frozenset, x: frozenset, P: _Dist, G: ADMG, order: list[str]) -> Expr:
    V = frozenset(G.nodes)
    order = [v for v in order if v in V]
    # line 1
    if not x:
        return _marg(P, y, order).expr
    # line 2
    an = frozenset(G.ancestors(y))
    if an != V:
        return _id(y, x & an, _marg(P, an, order), G.subgraph(an), order)
    # line 3
    w = (V - x) - frozenset(G.ancestors(y, bar=x))
    if w:
        return _id(y, x | w, P, G, order)
    # line 4
    comps = G.c_components(V - x)
    if len(comps) > 1:
        parts = tuple(_id(S, V - S, P, G, order) for S in comps)
        return canonical(Sum(tuple(V - (y | x)), Prod(parts)))
    S = comps[0]
    CG = G.c_components()
    # line 5
    if len(CG) == 1 and CG[0] == V:
        raise NotIdentifiable(V, S)
    pre = {v: frozenset(order[:i]) for i, v in enumerate(order)}
    # line 6
    if S in CG:
        factors = tuple(_cond(P, v, pre[v], order) for v in order if v in S)
        return canonical(Sum(tuple(S - y), Prod(factors)))
    # line 7
    S2 = next(C for C in CG if S <= C)
    chain = {v: _cond(P, v, pre[v], order) for v in order if v in S2}
    P2 = _Dist(canonical(Prod(tuple(chain.values()))), S2, chain=chain)
    return _id(y, x & S2, P2, G.subgraph(S2), order)


def identify_id(G: ADMG, Y, X) -> Expr:
    """ID: the estimand of P(y | do(x)) or raise :class:`NotIdentifiable`."""
    Y, X = frozenset(Y), frozenset(X)
    order = G.topological_order()
    V = frozenset(G.nodes)
    return canonical(_id(Y, X, _Dist(Prob(tuple(V)), V, raw=True), G, order))


def move_conditions_to_actions(G: ADMG, Y: frozenset, X: frozenset, W: frozenset) -> tuple:
    """IDC's first step: by rule 2, move every z of w into the actions while y is d-separated from z
    given x and the rest of w in G with x's in-edges and z's out-edges cut; returns (X, W)."""
    changed = True
    while changed and W:
        changed = False
        for z in sorted(W, key=G.index.get):
            if G.d_separated(Y, {z}, X | (W - {z}), bar=X, under={z}):
                X, W = X | {z}, W - {z}
                changed = True
                break
    return X, W


def identify(G: ADMG, q: Query) -> Expr:
    """IDC: the estimand of P(y | do(x), w) or raise :class:`NotIdentifiable`."""
    Y = q.Y
    X, W = move_conditions_to_actions(G, Y, q.X, q.W)
    if not W:
        return identify_id(G, Y, X)
    joint = identify_id(G, Y | W, X)
    return canonical(Frac(joint, Sum(tuple(Y), joint)))


def mutilate(G: ADMG, S) -> ADMG:
    """G_{bar S}: edges into S removed, directed and bidirected (the graph of a randomised
    experiment on S, whose joint P^(S)(V) is Markov to it)."""
    S = set(S)
    if not S:
        return G
    return ADMG(list(G.nodes), {(a, b) for a, b in G.directed if b not in S},
                {(a, b) for a, b in G.bidirected if a not in S and b not in S})


def simplify(G: ADMG, e: Expr) -> Expr:
    """The estimand simplified by d-separation (after Tikka & Karvanen 2017): every factor
    P(A | C) loses each conditioning variable c with (A _||_ c | C \\ c) in the graph its
    distribution is Markov to (G for the observed joint; G_{bar Z} for an experiment's
    P_do{Z}), so the value never changes; then the canonical form drops the sums this frees
    (sum_z P(z) = 1, P(a|c) P(c) -> P(a, c), ...). Repeated to a fixed point. Variables are tried
    in graph order, so the result is deterministic (another order can give another valid form)
    [reconstructed: the R package's simp=TRUE is the peer; the Python port of causaleffect only
    simplifies algebraically]."""
    graphs: dict = {}

    def go(x: Expr) -> Expr:
        if isinstance(x, Prob):
            H = graphs.get(x.do)
            if H is None:
                H = graphs[x.do] = mutilate(G, x.do)
            A, C = set(x.vars), list(x.cond)
            changed = True
            while changed:
                changed = False
                for c in sorted(C, key=H.index.get):
                    rest = set(C) - {c}
                    if H.d_separated(A, {c}, rest):
                        C.remove(c)
                        changed = True
                        break
            return Prob(tuple(A), tuple(C), x.do)
        if isinstance(x, Prod):
            return Prod(tuple(go(f) for f in x.factors))
        if isinstance(x, Sum):
            return Sum(x.over, go(x.body))
        if isinstance(x, Frac):
            return Frac(go(x.num), go(x.den))
        return x

    out = canonical(e)
    for _ in range(8):  # simplification can expose new marginalisations; a fixed point comes fast
        new = canonical(go(out))
        if new == out:
            break
        out = new
    return out


@dataclass
class MemberEstimand:
    member: str
    observational: bool
    identifiable: bool
    estimand: Expr | None
    hedge: str | None = None


def identify_class(G: ADMG, members: list[Query]) -> list[MemberEstimand]:
    """IDC on every member of an equivalence class (members with X = {} are already observational)."""
    out = []
    for q in members:
        try:
            e = identify(G, q)
            out.append(MemberEstimand(q.text(G.nodes), not q.X, True, e))
        except NotIdentifiable as exc:
            out.append(MemberEstimand(q.text(G.nodes), not q.X, False, None, str(exc)))
    return out


__all__ = ["NotIdentifiable", "identify", "identify_id", "simplify", "mutilate", "identify_class", "MemberEstimand", "ONE"]
