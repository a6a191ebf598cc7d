"""Surrogate experiments: which members of a query's class become identifiable when data from an
experiment do(E) are available (the experimental-design use of the class; after the
z-identification of Bareinboim & Pearl 2012).

A member P(y | do(x'), w') is answered by data from a randomised experiment on E, E a subset of
X', when P_E(y | do(x' \\ E), w') is identifiable from P_E(V) in G_{bar E} (the graph of the
experiment: E has no parents and no latent confounders there, so conditioning on e equals doing
e, by rule 2): IDC of P(y | do(x' \\ E), w', e) in G_{bar E}, every P of the result read as the
experiment's distribution P(. | do(E)). E = X' always works (the experiment on the member's own
actions measures it directly); E = {} is observational identification. Because every member
equals the query, an experiment that answers one member answers the query: the class turns
"which experiment answers P(y | do(x))" into a search over its members.

[reconstructed scope] Only members of the class and experiments on subsets of a member's action
set are considered, one experiment at a time (the full z-ID algorithm combines experiments inside
the ID recursion and can succeed where this search does not).
"""
from __future__ import annotations

from icmlkit.lib.core.errors import UsageError

from dataclasses import dataclass
from itertools import combinations

from icmlkit.lib.causal.admg import ADMG
from icmlkit.lib.causal.parse import Query
from icmlkit.lib.derive_docalc import expr as E
from icmlkit.lib.derive_docalc.identify import NotIdentifiable, identify, simplify


def mutilate(G: ADMG, S) -> ADMG:
    """G_{bar S}: edges into S removed, directed and bidirected."""
    S = set(S)
    return ADMG(list(G.nodes), {(a, b) for a, b in G.directed if b not in S},
                {(a, b) for a, b in G.bidirected if a not in S and b not in S})


def identify_from_experiment(G: ADMG, q: Query, exp: frozenset) -> E.Expr | None:
    """The estimand of member ``q`` in terms of P(. | do(exp)), or None when not identifiable
    (``exp`` must be a subset of q.X), simplified by d-separation in G_{bar exp}."""
    exp = frozenset(exp)
    if not exp <= q.X:
        raise UsageError("the experiment must act on a subset of the member's actions")
    if not exp:
        H, q2 = G, q
    else:
        H = mutilate(G, exp)
        q2 = Query(q.Y, q.X - exp, q.W | exp)
    try:
        return simplify(H, identify(H, q2))  # P_E is Markov to G_{bar E}: its d-separations simplify
    except NotIdentifiable:
        return None


@dataclass
class ExperimentReport:
    summary: dict


def _fmt(S, G) -> str:
    return "{" + ", ".join(sorted(S, key=G.index.get)) + "}"


def experiments(ce, available: list[frozenset] | None = None, max_size: int = 3,
                max_members: int = 5000) -> ExperimentReport:
    """For every member (the first ``max_members``), the minimal non-empty experiments E (subsets of
    its actions with |E| <= ``max_size``, or only those in ``available``) that identify it, and
    whether it is identifiable observationally ([] listed first); for the query, the minimal
    experiments over all members, each with one member and its estimand."""
    G: ADMG = ce.graph
    cls = ce.cls
    members = cls.members[:max_members]
    rows, found = [], {}
    for m in members:
        mq = cls.query(m)
        if available is not None:
            cands = [a for a in available if a <= mq.X]
        else:
            xs = sorted(mq.X, key=G.index.get)
            cands = [frozenset(c) for k in range(0, min(max_size, len(xs)) + 1) for c in combinations(xs, k)]
        cands = sorted(set(cands), key=lambda a: (len(a), sorted(G.index[v] for v in a)))
        minimal = []
        for a in cands:
            if any(b and b <= a for b, _ in minimal):  # minimal among the non-empty experiments
                continue
            e = identify_from_experiment(G, mq, a)
            if e is not None:
                minimal.append((a, e))
        name = mq.text(G.nodes)
        rows.append({"member": name, "experiments": [sorted(a, key=G.index.get) for a, _ in minimal]})
        for a, e in minimal:
            if a not in found:
                txt = E.text(e)
                if a:
                    txt = txt.replace("P(", f"P_do{_fmt(a, G)}(")
                found[a] = {"experiment": sorted(a, key=G.index.get), "member": name, "estimand": txt}
    minimal_q = [v for a, v in sorted(found.items(), key=lambda kv: (len(kv[0]), sorted(G.index[v] for v in kv[0])))
                 if not any(b and b < a for b in found)]
    summary = {"query": cls.oracle.text(*cls.members[0]), "observationally_identifiable": ce.identifiable,
               "n_members": len(cls.members), "members_checked": len(members), "max_size": max_size,
               "available": None if available is None else [sorted(a, key=G.index.get) for a in available],
               "experiments": minimal_q, "members": rows, "pruned": list(cls.pruned)}
    return ExperimentReport(summary)
