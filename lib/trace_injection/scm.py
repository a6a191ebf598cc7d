"""Step 3: the structural causal model on the trigger subgraph and its counterfactuals.

Structural equations (noisy-OR; **reconstructed** project version of the repository's
"probabilistic SCM"): every node v is a binary variable "v happens / carries its content",

    X_v = 1 - (1 - leak_v) * prod_{u in pa(v)} (1 - c_uv * X_u)        (in distribution)

over the trigger parents only (data_dependency + trust_transfer; state_enablement grants
capability, not cause, and is excluded). c_uv is the combined confidence of the edges u -> v;
leak_v = 0.05 for actions (the repository's beta_task: the agent acts on its own) and 0 otherwise.
Trusted roots (the task) and parentless content are exogenous and present (X = 1).

An intervention do(I = b) replaces I's equation by the constant b. P(M = 1 | do(.)) is computed
**exactly** by forward propagation in topological order over the ancestors of M, keeping the joint
distribution of the "frontier" (processed nodes whose children are not all processed) as a dense
table of 2^k states (numpy, vectorised over states); parents shared by several paths are
therefore handled exactly, not by an independence approximation. When the frontier would exceed
``max_frontier`` nodes the propagation falls back to treating parents as independent (flagged
``exact = False``). :func:`brute_force` enumerates all joint states (the tests' oracle).

The deterministic reachability verdict of the official repository (P = 0 / 0.5 / 1, effect = 1 - P)
is in :func:`reachability_effect`, for comparison.
"""
from __future__ import annotations

import itertools

import numpy as np

LEAK_ACTION = 0.05
BATCH_FRONTIER = 10  # effects() batches its interventions while the joint table has at most 2^8 states


def ancestors(parents: dict, target: str) -> set:
    seen, stack = {target}, [target]
    while stack:
        v = stack.pop()
        for u in parents.get(v, {}):
            if u not in seen:
                seen.add(u)
                stack.append(u)
    return seen


def _topo(nodes: set, parents: dict, order: dict) -> list:
    return sorted(nodes, key=lambda n: order[n])


def _elimination_plan(parents: dict, order: dict, target: str, fixed) -> tuple:
    """The target's ancestors once the in-edges of ``fixed`` are cut, in topological order, and each
    one's number of children among them (a variable leaves the joint table when the count hits 0)."""
    anc = ancestors({k: ({} if k in fixed else v) for k, v in parents.items()}, target)
    children_left = {n: 0 for n in anc}
    for v in anc:
        if v in fixed:
            continue
        for u in parents.get(v, {}):
            if u in anc:
                children_left[u] += 1
    return anc, _topo(anc, parents, order), children_left


def _fold_parents(v, parents: dict, anc: set, leak: dict, const: dict):
    """The noisy-OR inputs of ``v``: None for an exogenous, present root (no parent among the
    ancestors, leak < 0); else ``(keep, var_pa)``, ``keep`` = (1 - leak) x prod over the parents
    already constant of (1 - c x value), ``var_pa`` the (parent, confidence) pairs still variable."""
    pa = {u: c for u, c in parents.get(v, {}).items() if u in anc}
    lk = leak.get(v, 0.0)
    if not pa and lk < 0:
        return None
    keep = 1.0 - max(lk, 0.0)
    var_pa = []
    for u, c in pa.items():
        if u in const:
            keep *= 1.0 - c * const[u]
        else:
            var_pa.append((u, c))
    return keep, var_pa


def prob(parents: dict, leak: dict, order: dict, target: str, do: dict | None = None,
         max_frontier: int = 20) -> tuple[float, bool]:
    """Exact P(X_target = 1 | do) for the noisy-OR model; returns (probability, exact)."""
    do = do or {}
    anc, topo, children_left = _elimination_plan(parents, order, target, do)
    const: dict = {}           # nodes with a fixed value
    frontier: list = []        # variables in the joint table, in axis order
    table = np.ones(1, dtype=np.float64)  # shape (2,)*len(frontier), flattened lazily
    table = table.reshape(())
    exact = True
    marg: dict = {}            # fallback: independent marginals
    for v in topo:
        if v in do:
            const[v] = float(do[v])
        else:
            folded = _fold_parents(v, parents, anc, leak, const)
            if folded is None:
                const[v] = 1.0  # leak < 0 marks an exogenous, present root
            else:
                keep, var_pa = folded  # constant parents folded into the leak
                if not var_pa and keep in (0.0, 1.0):
                    const[v] = 1.0 - keep
                elif not exact or len(frontier) + 1 > max_frontier:
                    if exact:  # switch to the fallback: marginals of the table so far
                        for i, u in enumerate(frontier):
                            other = tuple(j for j in range(len(frontier)) if j != i)
                            marg[u] = float(table.sum(axis=other)[1] if other else table[1])
                    exact = False
                    q = keep
                    for u, c in var_pa:
                        q *= 1.0 - c * marg.get(u, 0.0)
                    marg[v] = 1.0 - q
                    frontier.append(v)
                else:
                    # q(state) = keep * prod (1 - c * x_u), vectorised over the table's states
                    q = np.full(table.shape, keep)
                    for u, c in var_pa:
                        ax = frontier.index(u)
                        shape = [1] * len(frontier)
                        shape[ax] = 2
                        q = q * np.array([1.0, 1.0 - c]).reshape(shape)
                    p1 = 1.0 - q
                    table = np.stack([table * (1.0 - p1), table * p1], axis=-1)
                    frontier.append(v)
        # retire parents whose children are all processed (never the target)
        if v not in do:
            for u in parents.get(v, {}):
                if u in anc and u not in const:
                    children_left[u] -= 1
                    if children_left[u] == 0 and u != target and u in frontier:
                        if exact:
                            ax = frontier.index(u)
                            table = table.sum(axis=ax)
                        frontier.remove(u)
    if target in const:
        return const[target], True
    if not exact:
        return float(marg.get(target, 0.0)), False
    ax = frontier.index(target)
    other = tuple(i for i in range(len(frontier)) if i != ax)
    return float(table.sum(axis=other)[1] if other else table[1]), True


def brute_force(parents: dict, leak: dict, order: dict, target: str, do: dict | None = None) -> float:
    """P(X_target = 1 | do) by enumerating every joint state of the non-constant nodes (exponential;
    the tests' oracle on small graphs)."""
    do = do or {}
    nodes = sorted(parents, key=lambda n: order[n])
    free = [n for n in nodes if n not in do and (parents[n] or leak.get(n, 0.0) >= 0)]
    total = 0.0
    for bits in itertools.product((0, 1), repeat=len(free)):
        x = dict(zip(free, bits))
        x.update({k: float(v) for k, v in do.items()})
        w = 1.0
        for n in nodes:
            if n in do:
                continue
            lk = leak.get(n, 0.0)
            if not parents[n] and lk < 0:
                if x.get(n, 1) != 1:
                    w = 0.0
                x[n] = 1
                continue
            q = 1.0 - max(lk, 0.0)
            for u, c in parents[n].items():
                q *= 1.0 - c * x[u]
            p1 = 1.0 - q
            w *= p1 if x[n] == 1 else 1.0 - p1
            if w == 0.0:
                break
        if w and x[target] == 1:
            total += w
    return total


def prob_batch(parents: dict, leak: dict, order: dict, target: str, dos: list,
               max_frontier: int = 20) -> list | None:
    """P(X_target = 1 | do) for every intervention of ``dos`` in one forward pass (the same exact
    propagation as :func:`prob`, with a leading batch axis: a node set by some interventions only stays
    a variable whose equation each of those rows replaces by its constant); None when the frontier
    would exceed ``max_frontier`` (the caller then runs :func:`prob` per intervention)."""
    nb = len(dos)
    always = set(dos[0]).intersection(*dos[1:]) if dos else set()
    some = set().union(*dos) - always if dos else set()
    anc, topo, children_left = _elimination_plan(parents, order, target, always)
    const: dict = {}
    frontier: list = []
    table = np.ones(nb, dtype=np.float64)
    for v in topo:
        rows = None
        if v in always:
            vals = [float(d[v]) for d in dos]
            if all(x == vals[0] for x in vals):
                const[v] = vals[0]
            else:
                rows = np.array(vals)
            p1 = None
        else:
            folded = _fold_parents(v, parents, anc, leak, const)
            if folded is None:
                p1 = 1.0  # exogenous, present root
            else:
                keep, var_pa = folded
                if var_pa:
                    q = np.full(table.shape, keep)
                    for u, c in var_pa:
                        shape = [1] * table.ndim
                        shape[1 + frontier.index(u)] = 2
                        q = q * np.array([1.0, 1.0 - c]).reshape(shape)
                    p1 = 1.0 - q
                else:
                    p1 = 1.0 - keep
            if v in some:
                vals = np.array([float(d[v]) if v in d else np.nan for d in dos])
                base = np.broadcast_to(np.asarray(p1, dtype=np.float64), table.shape)
                shape = [nb] + [1] * (table.ndim - 1)
                p1 = np.where(np.isnan(vals).reshape(shape), base, np.nan_to_num(vals).reshape(shape))
            elif not isinstance(p1, np.ndarray) and p1 in (0.0, 1.0):
                const[v] = p1
                p1 = None
        if v not in const:
            if len(frontier) + 1 > max_frontier:
                return None
            if rows is not None:
                p1 = rows.reshape([nb] + [1] * (table.ndim - 1))
            table = np.stack([table * (1.0 - p1), table * p1], axis=-1)
            frontier.append(v)
        if v not in always:
            for u in parents.get(v, {}):
                if u in anc and u not in const:
                    children_left[u] -= 1
                    if children_left[u] == 0 and u != target and u in frontier:
                        table = table.sum(axis=1 + frontier.index(u))
                        frontier.remove(u)
    if target in const:
        return [const[target]] * nb
    ax = 1 + frontier.index(target)
    other = tuple(i for i in range(1, table.ndim) if i != ax)
    t = table.sum(axis=other) if other else table
    return [float(x) for x in t[:, 1]]


def effects(parents: dict, leak: dict, order: dict, sink: str, candidates: list, max_frontier: int = 20,
            per_candidate: bool = True) -> dict:
    """Counterfactuals for one sink: P(sink | do(all candidates = 1/0)), the joint ATE, and (with
    ``per_candidate``) each candidate's own ATE (others following their equations). Every
    intervention in one batched pass (:func:`prob_batch`) when the frontier allows, else one
    :func:`prob` each."""
    anc = ancestors(parents, sink)
    own = [c for c in candidates if c in anc] if per_candidate else []
    dos = [{c: 1 for c in candidates}, {c: 0 for c in candidates}]
    for c in own:
        dos += [{c: 1}, {c: 0}]
    # batched while the joint table is small (one pass instead of 2 + 2|candidates| saves numpy's
    # per-node overhead); a large frontier is cheaper per intervention, each with its own cut graph
    r = prob_batch(parents, leak, order, sink, dos, min(max_frontier, BATCH_FRONTIER))
    if r is not None:
        per = {c: 0.0 for c in (candidates if per_candidate else ())}
        for k, c in enumerate(own):
            per[c] = r[2 + 2 * k] - r[3 + 2 * k]
        return {"p_do1": r[0], "p_blocked": r[1], "ate": r[0] - r[1], "per_candidate": per, "exact": True}
    exact = True
    p1, e1 = prob(parents, leak, order, sink, {c: 1 for c in candidates}, max_frontier)
    p0, e0 = prob(parents, leak, order, sink, {c: 0 for c in candidates}, max_frontier)
    exact = e1 and e0
    per = {}
    anc = ancestors(parents, sink)
    for c in (candidates if per_candidate else ()):
        if c not in anc:
            per[c] = 0.0
            continue
        a, ea = prob(parents, leak, order, sink, {c: 1}, max_frontier)
        b, eb = prob(parents, leak, order, sink, {c: 0}, max_frontier)
        exact = exact and ea and eb
        per[c] = a - b
    return {"p_do1": p1, "p_blocked": p0, "ate": p1 - p0, "per_candidate": per, "exact": exact}


def reachability_effect(parents: dict, roots: list, candidate: str, sink: str, min_conf: float = 0.5,
                        exclude=()) -> float:
    """The repository's deterministic verdict: P = 0 if the sink is reachable only via the
    candidate, 0.5 if also from another root without it, 1 if unreachable from the candidate;
    returns the effect 1 - P. Edges below ``min_conf`` are ignored; an alternative path may not pass
    through the candidate nor any node of ``exclude``.

    Ours (the defaults, as :func:`.detect.analyse` calls it): roots = trusted tasks + candidates,
    ``min_conf`` 0.5, ``exclude`` empty. The official ``counterfactual_query`` is the same rule with
    roots = every parentless node, ``min_conf`` 0 and ``exclude`` = all candidates (the parity test
    checks both; why ours differs: docs/trace-injection.md, Departures)."""
    banned = {candidate, *exclude}
    children: dict = {}
    for v, pa in parents.items():
        for u, c in pa.items():
            if c >= min_conf:
                children.setdefault(u, []).append(v)

    def reach(starts, banned):
        seen, stack = set(starts), list(starts)
        while stack:
            v = stack.pop()
            for w in children.get(v, []):
                if w not in seen and w not in banned:
                    seen.add(w)
                    stack.append(w)
        return seen

    if sink not in reach([candidate], ()):
        return 0.0
    others = [r for r in roots if r not in banned]
    return 0.5 if sink in reach(others, banned) else 1.0
