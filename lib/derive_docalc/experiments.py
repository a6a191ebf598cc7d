"""Surrogate experiments: general identifiability (g-identifiability) of P(y | do(x), w) from an
arbitrary collection of experiments Z = {Z_1, ..., Z_m}, each giving the joint P^(Z_i)(V) of a
randomised experiment on Z_i (Z_i = {} is the observational joint), after Lee, Correa & Bareinboim
(2019, "General identifiability with arbitrary surrogate experiments", the gID algorithm) and the
decomposition of Kivva, Mokhtarian, Etesami & Kiyavash (2022, "Revisiting the general
identifiability problem"), which reduces it to classical identification sub-problems.

:func:`gid` [reconstructed from the published characterisation; the papers' pseudo-code was not
available]:

1. restrict G to An(Y) (an ancestral set: the experiments' marginals over it are those of the
   same experiments restricted to it), keep X' = X n An(Y);
2. D = An(Y) in G[V' \\ X'] and its c-components D_1..D_k (in G[D]); then
   P(y | do(x)) = sum_{D \\ Y} prod_j Q[D_j], Q[D_j] = P(d_j | do(v' \\ d_j));
3. Q[D_j] is identified from experiment Z (Z n D_j empty) when ID of P(d_j | do(v' \\ d_j))
   succeeds in G_{bar Z} on the experiment's joint (in the experiment, Z has no parents and no
   confounders, and doing v' \\ d_j includes doing Z, so that ID is Tian's identification of
   Q[D_j] from Q[V' \\ Z]); the experiments are tried with the fewest variables first (the
   observational joint first when available);
4. the query is identifiable iff every D_j is identified by some experiment; otherwise the
   failing component is reported.
Under positivity this is sound and complete for P(y | do(x)) (Kivva et al.'s theorem; our
implementation of it is reconstructed and checked in the benchmark against y0's TRSO on
subset-closed collections and numerically on exact SCMs). A conditional query P(y | do(x), w)
first moves each w with (Y _||_ w | X, W \\ w) in G_{bar X, underline w} into the actions (rule 2,
as IDC does), then returns gID(y u w, x) / sum_y gID(y u w, x) [reconstructed; sound, but
completeness for conditional queries from experiments is not claimed].

Every factor of an estimand carries its experiment (``P_do{Z}(.)`` in text; ``Prob.do``); the
estimand is simplified by d-separation in each factor's own graph (G_{bar Z}).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

from icmlkit.lib.causal.admg import ADMG
from icmlkit.lib.causal.parse import Query
from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.derive_docalc import expr as E
from icmlkit.lib.derive_docalc.identify import (NotIdentifiable, identify, identify_id, move_conditions_to_actions,
                                                mutilate, simplify)

__all__ = ["GIDResult", "gid", "gid_query", "relabel", "identify_from_experiment", "experiments", "mutilate"]


def relabel(e: E.Expr, do) -> E.Expr:
    """The same expression with every factor read from experiment ``do``'s joint."""
    do = tuple(sorted(do))
    if isinstance(e, E.Prob):
        return E.Prob(e.vars, e.cond, do)
    if isinstance(e, E.Prod):
        return E.Prod(tuple(relabel(f, do) for f in e.factors))
    if isinstance(e, E.Sum):
        return E.Sum(e.over, relabel(e.body, do))
    if isinstance(e, E.Frac):
        return E.Frac(relabel(e.num, do), relabel(e.den, do))
    return e


@dataclass
class GIDResult:
    """``estimand`` (None when not identifiable); ``components``: each c-component D_j of the
    decomposition with the experiment that identified it (None when none did); ``failed``: the
    first component no experiment identifies."""

    identifiable: bool
    estimand: E.Expr | None
    components: list = field(default_factory=list)
    failed: frozenset | None = None

    def summary(self, G: ADMG) -> dict:
        def s(S):
            return sorted(S, key=G.index.get)
        return {"identifiable": self.identifiable,
                "estimand": E.text(self.estimand) if self.estimand is not None else None,
                "components": [{"component": s(D), "experiment": None if Z is None else s(Z)}
                               for D, Z in self.components],
                "failed_component": s(self.failed) if self.failed is not None else None}


def _order(G: ADMG, available) -> list[frozenset]:
    out = sorted({frozenset(Z) for Z in available}, key=lambda Z: (len(Z), sorted(G.index[v] for v in Z if v in G.index)))
    return out


def gid(G: ADMG, Y, X, available, simplified: bool = True) -> GIDResult:
    """gID of P(y | do(x)) from the experiments ``available`` (an iterable of variable sets; the
    empty set stands for the observational joint). See the module docstring."""
    Y, X = frozenset(Y), frozenset(X)
    if Y & X:
        raise UsageError("outcomes and actions overlap")
    exps = _order(G, available)
    an = frozenset(G.ancestors(Y))
    Gp = G.subgraph(an)
    Xp = X & an
    Vp = frozenset(Gp.nodes)
    D = frozenset(Gp.subgraph(Vp - Xp).ancestors(Y))
    comps = sorted(Gp.subgraph(D).c_components(), key=lambda C: min(G.index[v] for v in C))
    factors, used = [], []
    for Dj in comps:
        got = None
        for Z in exps:
            if Z & Dj:
                continue
            H = mutilate(Gp, Z & Vp)
            try:
                q = identify_id(H, Dj, Vp - Dj)
            except NotIdentifiable:
                continue
            got = (Z, relabel(q, Z))
            break
        if got is None:
            used.append((Dj, None))
            return GIDResult(False, None, used, Dj)
        used.append((Dj, got[0]))
        factors.append(got[1])
    est = E.canonical(E.Sum(tuple(D - Y), E.Prod(tuple(factors))))
    if simplified:
        est = simplify(G, est)
    return GIDResult(True, est, used)


def gid_query(G: ADMG, q: Query, available, simplified: bool = True) -> GIDResult:
    """gID of a conditional query P(y | do(x), w): rule 2 moves w into the actions where it can,
    then gID(y u w, x) / sum_y gID(y u w, x) [reconstructed for w; see the module docstring]."""
    Y = q.Y
    X, W = move_conditions_to_actions(G, Y, q.X, q.W)
    if not W:
        return gid(G, Y, X, available, simplified)
    r = gid(G, Y | W, X, available, simplified=False)
    if not r.identifiable:
        return r
    est = E.canonical(E.Frac(r.estimand, E.Sum(tuple(Y), r.estimand)))
    return GIDResult(True, simplify(G, est) if simplified else est, r.components)


def identify_from_experiment(G: ADMG, q: Query, exp: frozenset) -> E.Expr | None:
    """The estimand of ``q`` from the data of the one experiment ``exp`` (the empty set: the
    observational joint), or None when not identifiable from it (gID with that one experiment)."""
    r = gid_query(G, q, [frozenset(exp)])
    return r.estimand


@dataclass
class ExperimentReport:
    summary: dict


def _fmt(S, G) -> list:
    return sorted(S, key=G.index.get)


def experiments(ce, available: list[frozenset] | None = None, max_size: int = 3,
                max_members: int = 200) -> ExperimentReport:
    """Which experiments identify the query (gID, see :func:`gid`).

    ``experiments``: the minimal sets E (each ALONE, its joint the only data) that identify the
    query: the sets in ``available``, or every subset of the variables outside Y with |E| <=
    ``max_size`` (the empty set = observational data, listed first when it suffices); each with
    its estimand from the class member whose estimand is smallest (:func:`expr.size_key`).
    ``combined`` (with ``available``): gID from all the available experiments together plus the
    observational joint, which can succeed where each experiment alone fails."""
    G: ADMG = ce.graph
    cls = ce.cls
    q = ce.query if ce.query is not None else cls.query(cls.members[0])
    members = [cls.query(m) for m in cls.members[:max_members]]
    free = [v for v in G.nodes if v not in q.Y]
    if available is not None:
        cands = _order(G, available)
    else:
        cands = [frozenset(c) for k in range(0, min(max_size, len(free)) + 1) for c in combinations(free, k)]
    found = []
    for a in cands:
        if any(b and b < a for b, _ in found):  # minimal among the non-empty experiments
            continue
        r = gid_query(G, q, [a])
        if not r.identifiable:
            continue
        best = (q, r.estimand)
        for mq in members[1:]:
            e = gid_query(G, mq, [a]).estimand
            if e is not None and E.size_key(e) < E.size_key(best[1]):
                best = (mq, e)
        found.append((a, {"experiment": _fmt(a, G), "member": best[0].text(G.nodes),
                          "estimand": E.text(best[1]), "size": E.size(best[1])}))
    rows = []
    for mq in members:
        rows.append({"member": mq.text(G.nodes),
                     "experiments": [_fmt(a, G) for a, _ in found if gid_query(G, mq, [a]).identifiable]})
    summary = {"query": q.text(G.nodes), "observationally_identifiable": ce.identifiable,
               "n_members": len(cls.members), "members_checked": len(members), "max_size": max_size,
               "available": None if available is None else [_fmt(a, G) for a in available],
               "experiments": [v for _, v in found], "members": rows, "pruned": list(cls.pruned)}
    if available is not None:
        summary["combined"] = gid_query(G, q, [frozenset()] + list(available)).summary(G)
    return ExperimentReport(summary)
