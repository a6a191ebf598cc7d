"""Derivation graphs D_Y(G) of the do-calculus, their connected components, and the canonical
four-test equivalence criterion.

An *expression* is P(y | do(x), w) for a fixed outcome set Y: a pair (X, W) of disjoint subsets of
V \\ Y. Here they are bitmasks over the free variables F = V \\ Y (in graph order). An edge joins two
expressions when ONE set-valued application of a rule maps one to the other; it is labelled with the
rule and a direction (the naming is reconstructed):

- R1 up / R1 down: insert / delete the observations Z;
- R2 up: observations Z become actions (Z moves from W to X); R2 down: actions become observations;
- R3 up / R3 down: insert / delete the actions Z.

The connected component of a query is its equivalence class under the do-calculus (the paper's
characterisation). :func:`equivalence_class` enumerates it exactly by breadth-first search with a
cap; :func:`canonical_test` decides equivalence of two expressions with at most four rule
applications, R2 up, R3 up, R3 down, R2 down (the paper's Theorem 6 / Corollary 1). The explicit
sets of the four steps are RECONSTRUCTED (the paper's text is not available); the test suite and
the benchmark check them against the exhaustive search.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from icmlkit.lib.causal.admg import ADMG
from icmlkit.lib.causal.parse import Query
from icmlkit.lib.core.errors import UsageError

ARROW = {"up": "\u2191", "down": "\u2193"}


def subsets(mask: int):
    """Non-empty sub-masks of ``mask`` (in decreasing numeric order)."""
    sub = mask
    while sub:
        yield sub
        sub = (sub - 1) & mask


class RuleOracle:
    """The rules as d-separation tests on masks over the free variables, cached by (rule, X, Z, W)."""

    def __init__(self, G: ADMG, Y):
        self.G = G
        self.Y = frozenset(Y)
        self.free = [v for v in G.nodes if v not in self.Y]
        self.k = len(self.free)
        self.full = (1 << self.k) - 1
        self._sets: dict[int, frozenset] = {}
        self.cache: dict[tuple, bool] = {}
        self.tests = 0

    def set_of(self, m: int) -> frozenset:
        s = self._sets.get(m)
        if s is None:
            s = frozenset(v for i, v in enumerate(self.free) if m >> i & 1)
            self._sets[m] = s
        return s

    def mask_of(self, S) -> int:
        idx = {v: i for i, v in enumerate(self.free)}
        m = 0
        for v in S:
            m |= 1 << idx[v]
        return m

    def holds(self, rule: int, x: int, z: int, w: int) -> bool:
        """Whether rule ``rule`` licenses its equality for base actions x, moved set z, observations w."""
        if not z:
            return True
        key = (rule, x, z, w)
        r = self.cache.get(key)
        if r is None:
            self.tests += 1
            X, Z, W = self.set_of(x), self.set_of(z), self.set_of(w)
            G = self.G
            if rule == 1:
                r = G.d_separated(self.Y, Z, X | W, bar=X)
            elif rule == 2:
                r = G.d_separated(self.Y, Z, X | W, bar=X, under=Z)
            else:
                zw = Z - G.ancestors(W, bar=X)
                r = G.d_separated(self.Y, Z, X | W, bar=X | zw)
            self.cache[key] = r
        return r

    def text(self, x: int, w: int) -> str:
        q = Query(self.Y, self.set_of(x), self.set_of(w))
        return q.text(self.G.nodes)

    def neighbours(self, x: int, w: int, rules=(1, 2, 3)):
        """Every single valid set-valued rule application from (x, w): yields (label, z, (x', w'))."""
        r = self.full & ~x & ~w
        if 2 in rules:
            for z in subsets(x):  # R2 down: actions z -> observations
                if self.holds(2, x & ~z, z, w):
                    yield "R2" + ARROW["down"], z, (x & ~z, w | z)
            for z in subsets(w):  # R2 up: observations z -> actions
                if self.holds(2, x, z, w & ~z):
                    yield "R2" + ARROW["up"], z, (x | z, w & ~z)
        if 3 in rules:
            for z in subsets(x):  # R3 down: delete actions z
                if self.holds(3, x & ~z, z, w):
                    yield "R3" + ARROW["down"], z, (x & ~z, w)
            for z in subsets(r):  # R3 up: insert actions z
                if self.holds(3, x, z, w):
                    yield "R3" + ARROW["up"], z, (x | z, w)
        if 1 in rules:
            for z in subsets(w):  # R1 down: delete observations z
                if self.holds(1, x, z, w & ~z):
                    yield "R1" + ARROW["down"], z, (x, w & ~z)
            for z in subsets(r):  # R1 up: insert observations z
                if self.holds(1, x, z, w):
                    yield "R1" + ARROW["up"], z, (x, w | z)


@dataclass
class EquivalenceClass:
    """The connected component of a query in D_Y(G), with a shortest rule path to each member."""

    oracle: RuleOracle
    members: list[tuple[int, int]]
    parent: dict[tuple[int, int], tuple]  # member -> (previous member, label, z)
    depth: dict[tuple[int, int], int]
    edges: list[tuple] = field(default_factory=list)  # (a, b, label, z) for a < b in BFS order
    capped: bool = False
    seconds: float = 0.0
    method: str = "bfs"
    paths: dict | None = None  # canonical route: member -> list of (label, z, from, to)
    pruned: list = field(default_factory=list)  # variables not connected to Y (see :func:`prune`)

    @property
    def n_expressions(self) -> int:
        """Members of the class over ALL variables: each listed member stands for 3^|pruned| (every
        pruned variable free, under do() or observed)."""
        return len(self.members) * 3 ** len(self.pruned)

    def path(self, m: tuple[int, int]) -> list[dict]:
        if self.paths is not None:
            return [{"rule": label, "Z": sorted(self.oracle.set_of(z), key=self.oracle.G.index.get),
                     "from": self.oracle.text(*fr), "to": self.oracle.text(*to)} for label, z, fr, to in self.paths[m]]
        steps = []
        while self.parent.get(m) is not None:
            prev, label, z = self.parent[m]
            steps.append({"rule": label, "Z": sorted(self.oracle.set_of(z), key=self.oracle.G.index.get),
                          "from": self.oracle.text(*prev), "to": self.oracle.text(*m)})
            m = prev
        return steps[::-1]

    def query(self, m: tuple[int, int]) -> Query:
        return Query(self.oracle.Y, self.oracle.set_of(m[0]), self.oracle.set_of(m[1]))

    def to_json(self) -> list[dict]:
        o = self.oracle
        return [{"expression": o.text(*m), "do": sorted(o.set_of(m[0]), key=o.G.index.get),
                 "given": sorted(o.set_of(m[1]), key=o.G.index.get), "observational": m[0] == 0,
                 "distance": self.depth[m], "path": self.path(m)} for m in self.members]

    def to_dot(self) -> str:
        o = self.oracle
        ids = {m: i for i, m in enumerate(self.members)}
        lines = ["graph derivation {", '  node [shape=box, fontname="Helvetica"];']
        for m, i in ids.items():
            style = ", style=bold" if i == 0 else (", style=filled, fillcolor=lightgrey" if m[0] == 0 else "")
            lines.append(f'  n{i} [label="{o.text(*m)}"{style}];')
        for a, b, label, z in self.edges:
            zs = ",".join(sorted(o.set_of(z), key=o.G.index.get))
            lines.append(f'  n{ids[a]} -- n{ids[b]} [label="{label} {{{zs}}}"];')
        lines.append("}")
        return "\n".join(lines) + "\n"


def prune(G: ADMG, query: Query) -> tuple[ADMG, Query, list[str]]:
    """Drop the variables with no path at all (directed or bidirected edges, any orientation) to the
    outcome Y: the connected components of the skeleton that hold no node of Y.

    Such a variable v is d-separated from Y given any set in every mutilation of G, and it lies on
    no path between Y and the other variables, so (i) every rule may add, delete or exchange v
    (under do() or observed) freely and (ii) v never changes another rule's test (it is no ancestor
    of anything in Y's component, so rule 3's Z(W) is unchanged too). The class over V is therefore
    {(X' u S1, W' u S2)}: every member (X', W') of the class over the kept variables R with any
    disjoint S1, S2 of the pruned ones, i.e. 3^|pruned| expressions per member, all with the same
    estimand (v is independent of R). Returns (G[R], the query restricted to R, pruned names in
    graph order). Variables connected to Y are kept even when some of them could be pruned by a
    finer argument.
    """
    import networkx as nx

    g = nx.Graph()
    g.add_nodes_from(G.nodes)
    g.add_edges_from(G.directed)
    g.add_edges_from(G.bidirected)
    keep = set()
    for comp in nx.connected_components(g):
        if comp & set(query.Y):
            keep |= comp
    pruned = [v for v in G.nodes if v not in keep]
    if not pruned:
        return G, query, []
    q = Query(query.Y, query.X & keep, query.W & keep, tuple((k, v) for k, v in query.values if k in keep))
    return G.subgraph(keep), q, pruned


def equivalence_class(G: ADMG, query: Query, rules=(1, 2, 3), cap: int = 200_000, edges: bool = False,
                      oracle: RuleOracle | None = None, pruning: bool = False) -> EquivalenceClass:
    """Exact enumeration of the query's class by breadth-first search on D_Y(G).

    Every set-valued application of the chosen rules (default R1, R2, R3) is tried from every
    member. The search stops after ``cap`` members and marks the class ``capped`` (then it is a
    subset of the true class). With ``edges=True`` every valid rule edge between members is kept
    (for drawing). With ``pruning`` the variables not connected to Y are removed first
    (:func:`prune`): the members are then those over the kept variables, each standing for
    3^|pruned| expressions (``n_expressions``).
    """
    if pruning:
        G2, q2, pruned = prune(G, query)
        if pruned:
            cls = equivalence_class(G2, q2, rules=rules, cap=cap, edges=edges)
            cls.pruned = pruned
            return cls
    t0 = time.perf_counter()
    o = oracle or RuleOracle(G, query.Y)
    start = (o.mask_of(query.X), o.mask_of(query.W))
    parent = {start: None}
    depth = {start: 0}
    order = [start]
    dq = deque([start])
    edge_list = []
    capped = False
    while dq and not capped:
        m = dq.popleft()
        for label, z, nb in o.neighbours(*m, rules=rules):
            if nb not in parent:
                if len(order) >= cap:
                    capped = True
                    break
                parent[nb] = (m, label, z)
                depth[nb] = depth[m] + 1
                order.append(nb)
                dq.append(nb)
            if edges and (nb in parent):
                edge_list.append((m, nb, label, z))
    if edges:
        pos = {m: i for i, m in enumerate(order)}
        seen, kept = set(), []
        for a, b, label, z in edge_list:
            if a in pos and b in pos and pos[a] < pos[b] and (a, b, label, z) not in seen:
                seen.add((a, b, label, z))
                kept.append((a, b, label, z))
        edge_list = kept
    return EquivalenceClass(o, order, parent, depth, edge_list, capped, time.perf_counter() - t0)


# --------------------------------------------------------------------------- canonical criterion


def canonical_steps(x: int, w: int, x2: int, w2: int) -> list[tuple]:
    """The four canonical steps from (x, w) to (x2, w2) [reconstructed]:

    with S = W & W' and A = (X | X' | W | W') minus S,
      1. R2 up   Z1 = W \\ W'             : (X, W)            -> (X | Z1, S)
      2. R3 up   Z2 = (X' | W'\\W) \\ (X|W) : (X | Z1, S)       -> (A, S)
      3. R3 down Z3 = A \\ (X' | W')       : (A, S)            -> (X' | W'\\W, S)
      4. R2 down Z4 = W' \\ W              : (X' | Z4, S)      -> (X', W')
    Returns (label, rule, base_x, z, w, from, to) for each step (empty steps included, z = 0).
    """
    s = w & w2
    z1 = w & ~w2
    e1 = (x | z1, s)
    z2 = (x2 | (w2 & ~w)) & ~(x | w)
    a = x | z1 | z2
    z3 = a & ~(x2 | w2)
    z4 = w2 & ~w
    e3 = (x2 | z4, s)
    return [("R2" + ARROW["up"], 2, x, z1, s, (x, w), e1),
            ("R3" + ARROW["up"], 3, x | z1, z2, s, e1, (a, s)),
            ("R3" + ARROW["down"], 3, a & ~z3, z3, s, (a, s), e3),
            ("R2" + ARROW["down"], 2, x2, z4, s, e3, (x2, w2))]


def canonical_test(o: RuleOracle, e1: tuple[int, int], e2: tuple[int, int]) -> tuple[bool, list[dict]]:
    """Corollary 1 (reconstructed sets): e1 ~ e2 iff the four canonical steps are all valid.

    Four d-separation tests (fewer when a step is empty). Returns (equivalent, tests) where each test
    records the rule, the moved set, the expressions it joins and whether its d-separation holds.
    """
    ok = True
    tests = []
    for label, rule, bx, z, s, fr, to in canonical_steps(*e1, *e2):
        holds = o.holds(rule, bx, z, s)
        ok &= holds
        tests.append({"rule": label, "Z": sorted(o.set_of(z), key=o.G.index.get), "from": o.text(*fr),
                      "to": o.text(*to), "empty": z == 0, "holds": bool(holds)})
    return ok, tests


# --------------------------------------------------------------------------- whole-space routines


def _canonical_ok(o: RuleOracle, x, w, x2, w2) -> np.ndarray:
    """The four canonical tests on arrays of pairs (vectorised keys, each distinct test run once)."""
    k = o.k
    s = w & w2
    z1 = w & ~w2
    z2 = (x2 | (w2 & ~w)) & ~(x | w)
    a = x | z1 | z2
    z3 = a & ~(x2 | w2)
    z4 = w2 & ~w
    ok = np.ones(len(x2), dtype=bool)
    m = (1 << k) - 1
    for rule, bx, z in ((2, x, z1), (3, x | z1, z2), (3, a & ~z3, z3), (2, x2, z4)):
        key = (bx << (2 * k)) | (z << k) | s
        uniq, inv = np.unique(key, return_inverse=True)
        vals = np.array([o.holds(rule, int(u >> (2 * k)), int((u >> k) & m), int(u & m)) for u in uniq.tolist()],
                        dtype=bool)
        ok &= vals[inv.ravel()]
    return ok


def equivalence_class_canonical(G: ADMG, query: Query, cap: int = 200_000,
                                oracle: RuleOracle | None = None, edges: bool = False,
                                pruning: bool = False) -> EquivalenceClass:
    """The class by Corollary 1 instead of BFS: the four canonical tests from the query to every one
    of the 3^|V\\Y| candidate expressions (vectorised; reconstructed step sets). Each member's path
    is its canonical witness (at most four steps). ``cap`` bounds the number of candidates.
    ``pruning`` as in :func:`equivalence_class`."""
    if pruning:
        G2, q2, pruned = prune(G, query)
        if pruned:
            cls = equivalence_class_canonical(G2, q2, cap=cap, edges=edges)
            cls.pruned = pruned
            return cls
    t0 = time.perf_counter()
    o = oracle or RuleOracle(G, query.Y)
    if 3 ** o.k > cap:
        raise UsageError(f"the canonical route tests all 3^{o.k} = {3 ** o.k} candidates, more than --cap {cap}; "
                         "use the BFS route (--method bfs) or raise --cap")
    start = (o.mask_of(query.X), o.mask_of(query.W))
    ex = all_expressions(o.k)
    n = len(ex)
    ok = _canonical_ok(o, np.full(n, start[0], dtype=np.int64), np.full(n, start[1], dtype=np.int64),
                       ex[:, 0], ex[:, 1])
    members = [start] + [(int(a), int(b)) for a, b in ex[ok].tolist() if (int(a), int(b)) != start]
    paths, depth, edge_list = {}, {}, []
    for m in members:
        steps = [(label, z, fr, to) for label, rule, bx, z, s, fr, to in canonical_steps(*start, *m) if z]
        paths[m] = steps
        depth[m] = len(steps)
        if edges:
            edge_list += [(fr, to, label, z) for label, z, fr, to in steps]
    if edges:
        edge_list = list(dict.fromkeys(edge_list))
    return EquivalenceClass(o, members, {start: None}, depth, edge_list, False, time.perf_counter() - t0,
                            method="canonical", paths=paths)


def all_expressions(k: int) -> np.ndarray:
    """Every (x, w) over k free variables as an (3^k, 2) int64 array (digit 0 free, 1 do, 2 observed)."""
    n = 3 ** k
    digits = (np.arange(n)[:, None] // (3 ** np.arange(k))[None, :]) % 3
    bits = 1 << np.arange(k, dtype=np.int64)
    x = ((digits == 1) * bits).sum(1)
    w = ((digits == 2) * bits).sum(1)
    return np.stack([x, w], 1).astype(np.int64)


def components(o: RuleOracle, rules=(1, 2, 3)) -> np.ndarray:
    """Label of the connected component of every expression of all_expressions(k) (union-find over
    every valid set-valued rule edge: the exhaustive reference)."""
    k = o.k
    ex = all_expressions(k)
    index = {(int(a), int(b)): i for i, (a, b) in enumerate(ex)}
    par = list(range(len(ex)))

    def find(i):
        while par[i] != i:
            par[i] = par[par[i]]
            i = par[i]
        return i

    def union(i, j):
        ri, rj = find(i), find(j)
        if ri != rj:
            par[max(ri, rj)] = min(ri, rj)

    full = o.full
    for i, (x, w) in enumerate(ex.tolist()):
        r = full & ~x & ~w
        for z in subsets(r):
            if 1 in rules and o.holds(1, x, z, w):
                union(i, index[(x, w | z)])
            if 3 in rules and o.holds(3, x, z, w):
                union(i, index[(x | z, w)])
            if 2 in rules and o.holds(2, x, z, w):
                union(index[(x | z, w)], index[(x, w | z)])
    return np.array([find(i) for i in range(len(ex))])


def canonical_all_pairs(o: RuleOracle, block: int = 2_000_000) -> np.ndarray:
    """The canonical criterion on every ordered pair (a, b) of all_expressions(k), vectorised:
    returns an (N, N) bool matrix. Each of the four tests is keyed by its (base, Z, S) masks; the
    distinct keys are tested once (cached d-separation), then scattered back."""
    k = o.k
    ex = all_expressions(k)
    n = len(ex)
    out = np.zeros((n, n), dtype=bool)
    rows_per = max(1, block // n)
    for r0 in range(0, n, rows_per):
        ia = np.arange(r0, min(n, r0 + rows_per))
        x = np.repeat(ex[ia, 0], n)
        w = np.repeat(ex[ia, 1], n)
        x2 = np.tile(ex[:, 0], len(ia))
        w2 = np.tile(ex[:, 1], len(ia))
        ok = _canonical_ok(o, x, w, x2, w2)
        out[ia] = ok.reshape(len(ia), n)
    return out


