"""Exact expected values of the randomized roundings on small instances, and an adversarial search.

Used to settle the factor of ``scaled`` (Algorithm 3, docs/solve-maxecc.md "The factor of
scaled"): by linearity E[value] = sum_e w_e P(e satisfied), and P(e satisfied) depends only on
the LP values of e's own vertices, so it is computed exactly by a recursion over the subsets of
e's vertices that are still uncoloured (2^|e| states; instances with r <= 12).

``scaled`` (a continuous-time Markov chain): from the state U (uncoloured vertices of e, every
other vertex of e coloured c = c(e)), an arrival of a colour c' != c reaches some vertex of U at
rate max_{v in U} x_{v,c'} (e is lost); an arrival of c with theta in (a_{j-1}, a_j] (a_j the
sorted distinct x_{v,c}, v in U, a_0 = 0) colours {v in U: x_{v,c} >= a_j} with c, at rate
a_j - a_{j-1}; other arrivals change nothing. So
    P(U) = sum_j (a_j - a_{j-1}) P({v in U: x_{v,c} < a_j}) / Lambda(U),
    Lambda(U) = sum_{c' != c} max_{v in U} x_{v,c'} + max_{v in U} x_{v,c},
P(empty) = 1, and where Lambda(U) = 0 the vertices of U are leftovers that take their majority
colour (e is satisfied iff all of them have majority c).

``threshold-order``: a uniformly random colour order, one threshold per colour; the same subset
recursion with the set of colours already processed (2^k x 2^|e| states; k <= 12).

``finite-horizon``: the chain of ``scaled`` stopped at a time (matrix exponential) or after T
discrete colour draws (matrix power of its jump chain), issue 57.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.solve_maxecc.hypergraph import Hypergraph
from icmlkit.lib.solve_maxecc.lp import LPSolution, solve_lp
from icmlkit.lib.solve_maxecc.rounding import X_EPS, _Ctx

MAX_EDGE = 12
MAX_COLOURS_ORDER = 12
EXACT_ALGORITHMS = ("scaled", "threshold-order", "finite-horizon")


def _dense_x(H: Hypergraph, lp: LPSolution) -> np.ndarray:
    x = np.zeros((H.n, H.k))
    x[lp.pair_v, lp.pair_c] = np.where(lp.x < X_EPS, 0.0, lp.x)
    return x


def _majority(H: Hypergraph) -> np.ndarray:
    return _Ctx(H).majority.cpu().numpy()


def _c_arrivals(U: list[int], col: np.ndarray):
    """The arrivals of the edge's own colour from state U: for theta in (a_{j-1}, a_j] (a_j the
    sorted distinct positive LP values ``col`` of U's vertices) the vertices with value >= a_j take
    the colour; yields (interval length, bitmask of the vertices left uncoloured). The last a_j
    is returned through StopIteration-free iteration by the caller via ``prev``."""
    prev = 0.0
    for a in np.unique(col):
        if a <= 0.0:
            continue
        yield a - prev, sum(1 << U[i] for i in range(len(U)) if col[i] < a)
        prev = a


def _scaled_edge(xe: np.ndarray, c: int, maj: np.ndarray) -> float:
    """P(edge satisfied) under ``scaled``; ``xe`` [|e|, k] the LP rows of its vertices."""
    r = len(xe)
    others = np.delete(xe, c, axis=1)

    @lru_cache(maxsize=None)
    def p(mask: int) -> float:
        if mask == 0:
            return 1.0
        U = [i for i in range(r) if mask >> i & 1]
        xc = xe[U, c]
        lam = float(others[U].max(axis=0).sum()) + float(xc.max())
        if lam <= 0.0:
            return float(all(maj[i] == c for i in U))
        return sum(rate * p(rest) for rate, rest in _c_arrivals(U, xc)) / lam

    return p((1 << r) - 1)


def _threshold_order_edge(xe: np.ndarray, c: int, maj: np.ndarray) -> float:
    """P(edge satisfied) under ``threshold-order`` (random colour order, one threshold each)."""
    r, k = xe.shape

    @lru_cache(maxsize=None)
    def p(mask: int, done: int) -> float:
        if mask == 0:
            return 1.0
        U = [i for i in range(r) if mask >> i & 1]
        left = [cc for cc in range(k) if not done >> cc & 1]
        if not left:
            return float(all(maj[i] == c for i in U))
        total = 0.0
        for cc in left:
            nd = done | (1 << cc)
            col = xe[U, cc]
            if cc != c:
                total += (1.0 - float(col.max())) * p(mask, nd)
                continue
            covered = 0.0
            for rate, rest in _c_arrivals(U, col):
                total += rate * p(rest, nd)
                covered += rate
            total += (1.0 - covered) * p(mask, nd)  # theta above every value: nothing changes
        return total / len(left)

    return p((1 << r) - 1, 0)


def _horizon_edge(xe: np.ndarray, c: int, maj: np.ndarray, horizon: float = 1.0, draws: int | None = None,
                  k: int | None = None) -> float:
    """P(edge satisfied) under ``finite-horizon``: the Markov chain of :func:`_scaled_edge` (states:
    the uncoloured subsets U of e, plus "lost") run for time ``horizon``, P = exp(Q horizon)[e, .]
    (scipy's expm over 2^|e| + 1 states); at the horizon a state U is satisfied iff every vertex
    of U has majority colour c (``maj`` all -1: the process without the majority fill).
    ``draws`` = T instead: the discrete form [reconstructed; exact expectations only, no sampler]:
    T draws of a uniformly random colour (of ``k``, default ``xe.shape[1]``) with a fresh shared threshold
    each, one step of the jump chain I + Q/k per draw, P = ((I + Q/k)^T)[e, .]."""
    from scipy.linalg import expm

    if math.isinf(horizon) and draws is None:
        return _scaled_edge(xe, c, maj)
    r = len(xe)
    others = np.delete(xe, c, axis=1)
    S = 1 << r  # state S is "lost"
    Q = np.zeros((S + 1, S + 1))
    for mask in range(1, S):
        U = [i for i in range(r) if mask >> i & 1]
        Q[mask, S] += float(others[U].max(axis=0).sum()) if others.shape[1] else 0.0
        for rate, rest in _c_arrivals(U, xe[U, c]):
            Q[mask, rest] += rate
        Q[mask, mask] = -Q[mask].sum()
    if draws is None:
        row = expm(Q * horizon)[S - 1]
    else:
        row = np.linalg.matrix_power(np.eye(S + 1) + Q / (k or xe.shape[1]), int(draws))[S - 1]
    good = np.array([1.0] + [float(all(maj[i] == c for i in range(r) if mask >> i & 1)) for mask in range(1, S)])
    return float(np.clip(row[:S] @ good, 0.0, 1.0))


_EDGE = {"scaled": _scaled_edge, "threshold-order": _threshold_order_edge, "finite-horizon": _horizon_edge}


def exact_edge_probabilities(H: Hypergraph, lp: LPSolution, algorithm: str = "scaled", *, horizon: float = 1.0,
                             fill: bool = True, draws: int | None = None) -> np.ndarray:
    """P(e satisfied) for every edge under ``algorithm`` (``scaled``, ``threshold-order`` or
    ``finite-horizon`` at ``horizon``, or after ``draws`` discrete colour draws), exactly.
    ``fill=False``: the leftovers stay uncoloured instead of taking their majority colour (the
    process the factors are proved for)."""
    if algorithm not in _EDGE:
        raise UsageError(f"exact expectations exist for {', '.join(EXACT_ALGORITHMS)}, not {algorithm!r}")
    if H.r > MAX_EDGE:
        raise UsageError(f"exact expectations need edges of at most {MAX_EDGE} vertices, this instance has r = {H.r}")
    if algorithm == "threshold-order" and H.k > MAX_COLOURS_ORDER:
        raise UsageError(f"exact threshold-order needs at most {MAX_COLOURS_ORDER} colours, this instance has {H.k}")
    x, maj = _dense_x(H, lp), _majority(H) if fill else np.full(H.n, -1)
    if algorithm == "finite-horizon" and not horizon > 0:
        raise UsageError(f"the horizon must be positive, not {horizon}")
    if draws is not None and (algorithm != "finite-horizon" or draws < 0):
        raise UsageError("draws (a count >= 0) applies to finite-horizon only")
    extra = {"horizon": float(horizon), "draws": draws} if algorithm == "finite-horizon" else {}
    if draws is not None:
        extra["k"] = H.k
    out = np.empty(H.m)
    memo: dict = {}
    for e, nodes in enumerate(H.edges()):
        c, xe, me = int(H.colour[e]), x[nodes], maj[nodes]
        if algorithm != "threshold-order":
            # Canonical form (the chain sees only e's nonzero colour columns, as a set, and whether
            # each vertex's majority is c): colour c first, the others sorted; equal forms share one
            # computation (the affine design's p^2 edges are one form).
            keep = (xe > 0).any(axis=0)
            keep[c] = True
            others = xe[:, keep & (np.arange(H.k) != c)]
            others = others[:, np.lexsort(others)] if others.shape[1] else others
            xe = np.concatenate([xe[:, c:c + 1], others], axis=1)
            me, c = np.where(me == c, 0, -1), 0
            key = (xe.shape, xe.tobytes(), me.tobytes())
            if key not in memo:
                memo[key] = _EDGE[algorithm](xe, c, me, **extra)
            out[e] = memo[key]
        else:
            out[e] = _EDGE[algorithm](xe, c, me, **extra)
    return out


def exact_expected_value(H: Hypergraph, lp: LPSolution, algorithm: str = "scaled", **options) -> float:
    """E[value] of one trial of ``algorithm`` = sum_e w_e P(e satisfied), exactly (``options``:
    ``horizon``, ``fill`` of :func:`exact_edge_probabilities`)."""
    return float(exact_edge_probabilities(H, lp, algorithm, **options) @ H.weight)


def uniform_lp_point(H: Hypergraph) -> LPSolution:
    """The feasible LP point x_{v,c} = 1 / (number of colours at v) on v's incident pairs, z_e = min_{v in e}
    x_{v,c(e)}: an optimum on :func:`generate.affine_design` (value n / r), where HiGHS may return an
    integral optimum instead. The factors hold against any feasible point (docs), so E[value] / value
    of this point measures them."""
    from icmlkit.lib.solve_maxecc.lp import incident_pairs

    pairs = incident_pairs(H)
    per_v = np.bincount(pairs.pair_v, minlength=H.n)
    x = 1.0 / per_v[pairs.pair_v]
    z = np.minimum.reduceat(x[pairs.of_entry], H.ptr[:-1])
    return LPSolution(pairs.pair_v, pairs.pair_c, x, z, float(z @ H.weight), "uniform point", False, 0.0, 0.0,
                      "uniform")


# ------------------------------------------------------------------------------ adversarial search
@dataclass
class SearchResult:
    algorithm: str
    r: int
    min_ratio: float
    instance: Hypergraph
    lp_value: float
    evaluations: int
    history: list[tuple[float, float]]  # (ratio at the start, ratio at the end) per start

    @property
    def summary(self) -> dict:
        fac = {"1/r": 1 / self.r, "(1-e^-r)/r": (1 - math.exp(-self.r)) / self.r, "1/(r+1)": 1 / (self.r + 1)}
        return {"algorithm": self.algorithm, "r": self.r, "min_ratio": self.min_ratio, "lp_value": self.lp_value,
                "n": self.instance.n, "m": self.instance.m, "k": self.instance.k, "evaluations": self.evaluations,
                "factors": fac, "below": {name: self.min_ratio < f - 1e-9 for name, f in fac.items()}}


def _random_instance(rng: np.random.Generator, n: int, m: int, k: int, r: int) -> Hypergraph:
    edges, colours = [], []
    for _ in range(m):
        size = int(rng.integers(2, r + 1))
        edges.append(sorted(rng.choice(n, size=size, replace=False).tolist()))
        colours.append(int(rng.integers(k)))
    edges[0] = sorted(rng.choice(n, size=r, replace=False).tolist())  # rank exactly r
    w = np.exp(rng.normal(0.0, 1.0, size=m))
    return Hypergraph.from_edges(edges, colours, w, node_ids=list(range(n)), colour_labels=list(range(k)))


def _mutate(rng: np.random.Generator, H: Hypergraph, r: int) -> Hypergraph:
    edges, colours, w = H.edges(), H.colour.tolist(), H.weight.copy()
    move = rng.integers(4)
    e = int(rng.integers(H.m))
    if move == 0:
        w[e] *= math.exp(rng.normal(0.0, 0.7))
    elif move == 1:
        colours[e] = int(rng.integers(H.k))
    elif move == 2 or H.m <= 2:
        size = int(rng.integers(2, r + 1))
        edges.append(sorted(rng.choice(H.n, size=size, replace=False).tolist()))
        colours.append(int(rng.integers(H.k)))
        w = np.append(w, math.exp(rng.normal(0.0, 1.0)))
    else:
        del edges[e], colours[e]
        w = np.delete(w, e)
    if max(len(s) for s in edges) < r:
        return H
    return Hypergraph.from_edges(edges, colours, w, node_ids=list(range(H.n)), colour_labels=list(range(H.k)))


def _ratio(H: Hypergraph, algorithm: str, options: dict | None = None) -> tuple[float, float]:
    lp = solve_lp(H, method="simplex")
    if lp.value <= 1e-9:
        return math.inf, 0.0
    return exact_expected_value(H, lp, algorithm, **(options or {})) / lp.value, lp.value


def adversarial_search(algorithm: str = "scaled", *, r: int = 2, n: int = 7, k: int = 4, m: int = 12,
                       restarts: int = 8, steps: int = 150, seed: int = 0,
                       starts: list[Hypergraph] | None = None, options: dict | None = None) -> SearchResult:
    """Hill-climb over small weighted instances for the smallest E[value]/LP of ``algorithm``
    (exact expectations, HiGHS LP optima). Random restarts, plus ``starts`` (e.g. the known gadgets);
    each step reweights, recolours, adds or removes one edge and keeps the change when the ratio
    does not rise. ``options`` (``horizon``, ``fill``) go to :func:`exact_expected_value`. Returns the
    worst instance found."""
    if r < 2 or n < r or k < 2 or m < 1 or restarts < 0 or steps < 0:
        raise UsageError("adversarial_search needs r >= 2, n >= r, k >= 2, m >= 1")
    rng = np.random.default_rng(seed)
    best: tuple[float, float, Hypergraph] | None = None
    history, evals = [], 0
    inits = list(starts or []) + [_random_instance(rng, n, m, k, r) for _ in range(restarts)]
    for H in inits:
        cur, lpv = _ratio(H, algorithm, options)
        first = cur
        evals += 1
        for _ in range(steps):
            G = _mutate(rng, H, max(r, H.r))
            q, lq = _ratio(G, algorithm, options)
            evals += 1
            if q <= cur:
                H, cur, lpv = G, q, lq
        history.append((first, cur))
        if best is None or cur < best[0]:
            best = (cur, lpv, H)
    return SearchResult(algorithm, r, best[0], best[2], best[1], evals, history)
