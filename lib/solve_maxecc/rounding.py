"""Roundings of the MaxECC LP, baselines, evaluation and local search (method sheet solve-maxecc.md).

Everything is vectorised torch: no Python loop over trials, vertices or edges (loops run over
colours or colour pairs only, k of them at most, and over chunks of trials to bound memory).
Randomness: every random number is drawn up front on the CPU from the given ``torch.Generator``
and then moved to ``device``, so a seed gives the same colourings on any device and chunking.

A colouring ``sigma`` is int64 [n] (or [T, n]) of colour indices; -1 (uncoloured) and -2 (a colour
with no edges) never satisfy an edge. Randomized roundings return a :class:`Rounds` with the value
of every trial and the best trial's colouring.

LP values x_{v,c} below ``X_EPS`` = 1e-9 count as 0 (interior-point noise).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from icmlkit.lib.core.console import progress
from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.solve_maxecc.hypergraph import Hypergraph
from icmlkit.lib.solve_maxecc.lp import LPSolution, incident_pairs

X_EPS = 1e-9
_BUDGET = 1 << 23  # elements per [trials, items] tensor in one chunk (~64 MB in int64/float64)
_BIG = 1 << 62
SCALED_RECORDS = 64  # records per (trial, colour) in Algorithm 3; m_64 ~ e^-64, far below X_EPS


# ------------------------------------------------------------------------------- shared context
class _Ctx:
    """The instance and (optionally) the LP as tensors on one device."""

    def __init__(self, H: Hypergraph, lp: LPSolution | None = None, device="cpu"):
        dev = torch.device(device)
        self.H, self.device, self.n, self.k, self.m = H, dev, H.n, H.k, H.m
        pairs = incident_pairs(H)
        if lp is not None and not (
            np.array_equal(lp.pair_v, pairs.pair_v) and np.array_equal(lp.pair_c, pairs.pair_c)
        ):
            raise UsageError("the LP solution was computed for a different instance")
        t = lambda a: torch.as_tensor(np.ascontiguousarray(a), device=dev)  # noqa: E731
        self.nodes, self.edge_of, self.colour = t(H.nodes), t(H.edge_of), t(H.colour)
        self.weight = t(H.weight)
        self.pair_v, self.pair_c, self.of_entry = t(pairs.pair_v), t(pairs.pair_c), t(pairs.of_entry)
        self.P = pairs.P
        if lp is not None:
            x = np.where(lp.x < X_EPS, 0.0, lp.x)
            self.x = t(x)
        self._majority = None

    @property
    def majority(self) -> torch.Tensor:
        if self._majority is None:
            pw = torch.zeros(self.P, dtype=torch.float64, device=self.device)
            pw.index_add_(0, self.of_entry, self.weight[self.edge_of])
            col = _segment_argmax(pw, self.pair_v, self.pair_c, self.n, self.k)
            self._majority = torch.where(col >= 0, col, torch.zeros_like(col))
        return self._majority

    def chunk(self, width: int) -> int:
        """Trials per chunk so that a [trials, width] tensor stays within the budget."""
        return max(1, _BUDGET // max(1, width))


def _segment_argmax(values, pair_v, pair_c, n, k) -> torch.Tensor:
    """Per vertex, the colour of its pair with the largest value (ties -> smallest colour);
    -1 for vertices without pairs. ``values`` [P] (1-D)."""
    dev = values.device
    vmax = torch.full((n,), -math.inf, dtype=values.dtype, device=dev)
    vmax.scatter_reduce_(0, pair_v, values, "amax", include_self=True)
    cand = torch.where(values == vmax[pair_v], pair_c, torch.full_like(pair_c, k))
    col = torch.full((n,), k, dtype=torch.int64, device=dev)
    col.scatter_reduce_(0, pair_v, cand, "amin", include_self=True)
    return torch.where(col < k, col, torch.full_like(col, -1))


def _first_by_key(ctx: _Ctx, key: torch.Tensor, fill: bool = True) -> torch.Tensor:
    """[T, P] integer keys (``priority * k + colour``, ``_BIG`` = not eligible) -> [T, n] sigma:
    each vertex takes its smallest key's colour; vertices with none take the majority colour
    (``fill``) or stay uncoloured (-1, ``fill=False``: the analysed process alone)."""
    T = key.shape[0]
    vmin = torch.full((T, ctx.n), _BIG, dtype=torch.int64, device=ctx.device)
    vmin.scatter_reduce_(1, ctx.pair_v.expand(T, -1), key, "amin", include_self=True)
    rest = ctx.majority.expand(T, -1) if fill else torch.full_like(vmin, -1)
    return torch.where(vmin < _BIG, vmin % ctx.k, rest)


# ------------------------------------------------------------------------------- evaluation
def _evaluate_t(ctx: _Ctx, sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Satisfied weight (float64 [T]) and count (int64 [T]) for sigma [T, n] on ctx.device.

    Entry (e, v) is good iff sigma(v) = c(e); an edge is satisfied iff it has no bad entry, found by
    a segment sum of bad entries over ``edge_of`` (index_add)."""
    T = sigma.shape[0]
    bad = (sigma[:, ctx.nodes] != ctx.colour[ctx.edge_of]).to(torch.float32)
    per_edge = torch.zeros(T, ctx.m, dtype=torch.float32, device=ctx.device)
    per_edge.index_add_(1, ctx.edge_of, bad)
    sat = per_edge == 0
    return (sat.to(torch.float64) * ctx.weight).sum(1), sat.sum(1)


def evaluate(H: Hypergraph, sigma, device="cpu"):
    """Weight and number of satisfied edges of sigma [n] (-> float, int) or [T, n] (-> arrays).

    An edge is satisfied iff every vertex has colour c(e); -1 / -2 never satisfy."""
    ctx = _Ctx(H, None, device)
    s = torch.as_tensor(np.asarray(sigma, dtype=np.int64), device=ctx.device)
    single = s.dim() == 1
    s = s.reshape(-1, H.n) if single else s
    if s.shape[-1] != H.n:
        raise UsageError(f"a colouring needs {H.n} entries, got {s.shape[-1]}")
    vals, cnts = [], []
    step = ctx.chunk(len(H.nodes))
    for a in range(0, s.shape[0], step):
        v, c = _evaluate_t(ctx, s[a:a + step])
        vals.append(v.cpu())
        cnts.append(c.cpu())
    value, count = torch.cat(vals).numpy(), torch.cat(cnts).numpy()
    return (float(value[0]), int(count[0])) if single else (value, count)


# ------------------------------------------------------------------------------- results
@dataclass
class Rounds:
    """Result of a rounding: ``values`` of every trial (float64 [T]), the best trial's colouring
    ``sigma`` (int64 [n], every vertex coloured), its ``value`` and index, and the wall time;
    ``min_lower_bound``: a certified lower bound on the MinECC optimum when the algorithm gives one."""

    algorithm: str
    values: np.ndarray
    sigma: np.ndarray
    value: float
    best_trial: int
    seconds: float
    min_lower_bound: float | None = None


def _run_trials(ctx: _Ctx, name: str, trials: int, width: int, make_sigma) -> Rounds:
    """Run ``make_sigma(lo, hi) -> [hi-lo, n]`` over chunks of trials, keeping every value and
    the best colouring."""
    if trials < 1:
        raise UsageError("trials must be at least 1")
    t0 = time.perf_counter()
    step = ctx.chunk(max(width, len(ctx.H.nodes)))
    values = np.empty(trials)
    best_val, best_sigma, best_i = -math.inf, None, -1
    for lo in progress(range(0, trials, step), total=-(-trials // step), desc=f"{name} trials"):
        hi = min(trials, lo + step)
        sigma = make_sigma(lo, hi)
        val, _ = _evaluate_t(ctx, sigma)
        val = val.cpu().numpy()
        values[lo:hi] = val
        i = int(np.argmax(val))  # first trial wins ties
        if val[i] > best_val:
            best_val, best_sigma, best_i = float(val[i]), sigma[i].cpu().numpy(), lo + i
    return Rounds(name, values, best_sigma.astype(np.int64), float(best_val), best_i, time.perf_counter() - t0)


def _single(ctx: _Ctx, name: str, sigma: torch.Tensor, t0: float) -> Rounds:
    val, _ = _evaluate_t(ctx, sigma.reshape(1, -1))
    v = float(val[0])
    return Rounds(name, np.array([v]), sigma.cpu().numpy().astype(np.int64), v, 0, time.perf_counter() - t0)


def _need_lp(lp):
    if lp is None:
        raise UsageError("this rounding needs an LP solution (solve_lp)")


# ------------------------------------------------------------------------------- baselines
def majority(H: Hypergraph, device="cpu") -> Rounds:
    """Baseline (Amburg et al.): every vertex takes the colour of largest incident edge weight
    (ties -> smallest colour index); isolated vertices take colour 0."""
    t0 = time.perf_counter()
    ctx = _Ctx(H, None, device)
    return _single(ctx, "majority", ctx.majority, t0)


def lp_argmax(H: Hypergraph, lp: LPSolution, device="cpu") -> Rounds:
    """Baseline: sigma(v) = argmax_c x_{v,c} over v's pairs (ties -> smallest colour); vertices
    whose x are all 0 take the majority colour."""
    _need_lp(lp)
    t0 = time.perf_counter()
    ctx = _Ctx(H, lp, device)
    col = _segment_argmax(ctx.x, ctx.pair_v, ctx.pair_c, ctx.n, ctx.k)
    vmax = torch.zeros(ctx.n, dtype=torch.float64, device=ctx.device)
    vmax.scatter_reduce_(0, ctx.pair_v, ctx.x, "amax", include_self=True)
    sigma = torch.where((col >= 0) & (vmax > 0), col, ctx.majority)
    return _single(ctx, "lp-argmax", sigma, t0)


def factors(r: int, k: int) -> dict[str, float]:
    """The factor (expected value over LP) the abstract claims for each randomized rounding, for
    rank r and k colours: 1/(r+1), 1/ceil(k/2), (1 - e^-r)/r (the algorithms are reconstructed)."""
    return {"threshold-order": 1 / (r + 1), "paired": 1 / math.ceil(k / 2), "scaled": (1 - math.exp(-r)) / r,
            "finite-horizon": (1 - math.exp(-r)) / r}


# ------------------------------------------------------------------------------- Algorithm 1
def threshold_order(H: Hypergraph, lp: LPSolution, trials: int, gen: torch.Generator, device="cpu") -> Rounds:
    """Algorithm 1 [reconstructed]: random colour order + ONE shared threshold per colour.

    Method sheet, Algorithm 1, per trial:
      1. draw a uniformly random order of the colours and theta_c ~ U[0,1] per colour, shared by
         all vertices (never per-vertex sampling: that gives only ~z^r per edge);
      2. in that order, give c to every still-uncoloured v with x_{v,c} >= theta_c;
      3. leftovers take their majority colour.
    Vectorised: pair (v,c) is eligible iff x_{v,c} >= theta_c; its key is (rank of c, c); each
    vertex takes its smallest eligible key (scatter_reduce amin).
    Guarantee (sheet's proof): P(e satisfied) >= z_e / (1 + r(1 - z_e)) >= z_e / (r + 1), so
    E[value] >= LP / (r + 1).
    """
    _need_lp(lp)
    ctx = _Ctx(H, lp, device)
    k = ctx.k
    theta = torch.rand(trials, k, generator=gen, dtype=torch.float64).to(ctx.device)
    rank = torch.rand(trials, k, generator=gen, dtype=torch.float64).argsort(1).argsort(1).to(ctx.device)
    x = ctx.x

    def make(lo, hi):
        thr = theta[lo:hi][:, ctx.pair_c]
        elig = (x >= thr) & (x > 0)
        key = rank[lo:hi][:, ctx.pair_c] * k + ctx.pair_c
        return _first_by_key(ctx, torch.where(elig, key, _BIG))

    return _run_trials(ctx, "threshold-order", trials, ctx.P, make)


# ------------------------------------------------------------------------------- Algorithm 2
def colour_pairs(k: int) -> list[tuple[int, int | None]]:
    """The colour pairs (0,1), (2,3), ...; with odd k the last colour is alone (b = None)."""
    return [(a, a + 1 if a + 1 < k else None) for a in range(0, k, 2)]


def paired(H: Hypergraph, lp: LPSolution, trials: int, gen: torch.Generator, device="cpu") -> Rounds:
    """Algorithm 2 [reconstructed]: dependent (paired) rounding, factor 1/ceil(k/2).

    Method sheet, Algorithm 2, per trial:
      1. pair the colours (0,1), (2,3), ...; with odd k one colour is alone;
      2. pick a pair (a, b) uniformly and theta ~ U[0,1];
      3. sigma(v) = a if x_{v,a} >= theta, else b if x_{v,b} >= 1 - theta (a wins the tie).
    Leftovers: the other pairs in a random order, each with its own theta, then majority (this
    never un-satisfies an edge). Drawing a random order of all pairs makes its first pair uniform.
    Given its pair is chosen, an edge of colour a is satisfied iff theta <= min_v x_{v,a}, and of
    colour b iff theta >= 1 - min_v x_{v,b}: probability >= z_e, so E >= LP / ceil(k/2). For k = 2
    every trial reaches the LP value (the LP is integral).
    """
    _need_lp(lp)
    ctx = _Ctx(H, lp, device)
    k, npairs = ctx.k, (ctx.k + 1) // 2
    theta = torch.rand(trials, npairs, generator=gen, dtype=torch.float64).to(ctx.device)
    rank = torch.rand(trials, npairs, generator=gen, dtype=torch.float64).argsort(1).argsort(1).to(ctx.device)
    group, role = ctx.pair_c // 2, ctx.pair_c % 2
    x = ctx.x

    def make(lo, hi):
        th = theta[lo:hi][:, group]
        elig = torch.where(role == 0, x >= th, x >= 1.0 - th) & (x > 0)
        key = (rank[lo:hi][:, group] * 2 + role) * k + ctx.pair_c
        return _first_by_key(ctx, torch.where(elig, key, _BIG))

    return _run_trials(ctx, "paired", trials, ctx.P, make)


def paired_derandomized(H: Hypergraph, lp: LPSolution, device="cpu") -> Rounds:
    """Algorithm 2, derandomised [reconstructed]: deterministic value >= LP / ceil(k/2).

    For each colour pair (a, b), the first-stage value f(theta) is piecewise constant with
    breakpoints in {x_{v,a}} and {1 - x_{v,b}}; it is evaluated at the midpoint of every interval
    between consecutive breakpoints (so no tie between theta and an x can occur) for all
    midpoints at once: sort t_e = min_v x_{v,c(e)} per edge, suffix sums of weights, searchsorted
    (a-edges count iff t_e > theta, b-edges iff t_e > 1 - theta). The best (pair, theta) is at
    least the average over pairs and theta, hence >= LP / ceil(k/2).
    Leftovers: greedily, the remaining pairs with the best theta for the residual (edges whose
    coloured vertices already carry their colour; t_e over the uncoloured ones), then majority.
    """
    _need_lp(lp)
    t0 = time.perf_counter()
    ctx = _Ctx(H, lp, device)
    dev, x = ctx.device, ctx.x
    sigma = torch.full((ctx.n,), -1, dtype=torch.int64, device=dev)
    xe = x[ctx.of_entry]  # x_{v, c(e)} per entry
    ce = ctx.colour[ctx.edge_of]
    remaining = colour_pairs(ctx.k)
    while remaining:
        sv = sigma[ctx.nodes]
        val = torch.where(sv < 0, xe, torch.where(sv == ce, 2.0, -1.0).to(torch.float64))
        t_e = torch.full((ctx.m,), math.inf, dtype=torch.float64, device=dev)
        t_e.scatter_reduce_(0, ctx.edge_of, val, "amin", include_self=True)
        t_e = torch.where(t_e >= 2.0, -1.0, t_e)  # already satisfied: not a gain
        best = None
        for j, (a, b) in enumerate(remaining):
            theta, gain = _best_theta(ctx, t_e, a, b)
            if best is None or gain > best[2]:
                best = (j, theta, gain)
        j, theta, _ = best
        a, b = remaining.pop(j)
        elig_a = (ctx.pair_c == a) & (x >= theta) & (x > 0)
        elig_b = (ctx.pair_c == b) & (x >= 1.0 - theta) & (x > 0) if b is not None else torch.zeros_like(elig_a)
        key = torch.where(elig_a, 0, torch.where(elig_b, 1, 2))
        vkey = torch.full((ctx.n,), 2, dtype=torch.int64, device=dev)
        vkey.scatter_reduce_(0, ctx.pair_v, key, "amin", include_self=True)
        newc = torch.where(vkey == 0, a, b if b is not None else -1)
        sigma = torch.where((sigma < 0) & (vkey < 2), newc, sigma)
    sigma = torch.where(sigma >= 0, sigma, ctx.majority)
    return _single(ctx, "paired-derandomized", sigma, t0)


def _best_theta(ctx: _Ctx, t_e: torch.Tensor, a: int, b: int | None) -> tuple[float, float]:
    """(theta, first-stage gain) maximising the gain of pair (a, b) over all interval midpoints."""
    x, dev = ctx.x, ctx.device
    bps = [x[ctx.pair_c == a]]
    if b is not None:
        bps.append(1.0 - x[ctx.pair_c == b])
    bp = torch.unique(torch.cat(bps + [torch.tensor([0.0, 1.0], dtype=torch.float64, device=dev)]).clamp(0, 1))
    mids = (bp[:-1] + bp[1:]) / 2 if len(bp) > 1 else torch.tensor([0.5], dtype=torch.float64, device=dev)

    def count_above(col, thresholds):
        sel = ctx.colour == col
        t, w = t_e[sel], ctx.weight[sel]
        order = torch.argsort(t)
        t, w = t[order], w[order]
        suffix = torch.cat([torch.flip(torch.cumsum(torch.flip(w, [0]), 0), [0]), torch.zeros(1, dtype=w.dtype, device=dev)])
        return suffix[torch.searchsorted(t, thresholds, right=True)]

    gain = count_above(a, mids)
    if b is not None:
        gain = gain + count_above(b, 1.0 - mids)
    i = int(torch.argmax(gain))
    return float(mids[i]), float(gain[i])


# ------------------------------------------------------------------------------- Algorithm 3
def scaled(
    H: Hypergraph, lp: LPSolution, trials: int, gen: torch.Generator, device="cpu", records: int = SCALED_RECORDS
) -> Rounds:
    """Algorithm 3 [reconstructed; hypothesis]: the Poissonised version of Algorithm 1.

    Every colour has arrivals at the times of a rate-1 Poisson process; each arrival carries a
    FRESH threshold theta ~ U[0,1] shared by all vertices, and at an arrival of colour c every
    still-uncoloured v with x_{v,c} >= theta takes c. Leftovers (x too small to be reached by
    the sampled records) take the majority colour.

    Implementation without simulating rounds: for one colour only the records (prefix minima)
    m_j of its thresholds matter; pair (v, c) activates at the first record with m_j <= x_{v,c}.
    Records are sampled directly: m_1 ~ U, t_1 ~ Exp(1); t_{j+1} = t_j + Exp(1)/m_j (the next
    arrival below m_j comes at rate m_j), m_{j+1} = m_j * U. ``records`` = 64 of them reach
    m ~ e^-64, far below X_EPS. torch.searchsorted finds each pair's first record, and each
    vertex takes the colour of its earliest activation (scatter_reduce amin).

    Guarantee (proved in docs/solve-maxecc.md "The factor of scaled"; exact expectations in
    lib/solve_maxecc/exact.py support it): before the first "touch" of edge e (an arrival of some c'
    with theta <= max_{v in e} x_{v,c'}) all its vertices are uncoloured. Touches of colour c'
    form a Poisson process of rate max_v x_{v,c'}; e is satisfied if the first touch is an
    arrival of c = c(e) with theta <= z_e = min_v x_{v,c} (rate z_e): P >= z_e / R_e with
    R_e = sum_{c'} max_{v in e} x_{v,c'}. With u = argmax_v x_{v,c},
    R_e - z_e <= (x_{u,c} - z_e) + sum_{v in e} (1 - x_{v,c}) <= |e| (1 - z_e), so
    P >= z / (z + r(1 - z)) >= z / r >= z (1 - e^{-r}) / r.
    This gives 1/r, STRONGER than the abstract's (1 - e^{-r})/r (our proof, unreviewed); the
    abstract's constant is the factor of the same process stopped at time 1, :func:`finite_horizon`.
    Tests check the factor, the per-edge bound and exact expectations.
    """
    return _poisson_rounding(H, lp, trials, gen, device, records, "scaled", math.inf, True)


DEFAULT_HORIZON = 1.0


def finite_horizon(
    H: Hypergraph, lp: LPSolution, trials: int, gen: torch.Generator, device="cpu", horizon: float = DEFAULT_HORIZON,
    fill: bool = True, records: int = SCALED_RECORDS,
) -> Rounds:
    """Algorithm 3, finite-horizon form [reconstructed]: ``scaled``'s clocks stopped at ``horizon``.

    The process of :func:`scaled` (every colour arrives at the times of a rate-1 Poisson process,
    each arrival with a fresh threshold theta ~ U[0,1] shared by all vertices; an arrival of c gives c
    to every still-uncoloured v with x_{v,c} >= theta), run only up to time ``horizon`` instead of
    until every vertex is coloured. With the default horizon 1 every colour is drawn Poisson(1)
    times, k draws in expectation: the Poissonised form of a rounding that draws k (colour,
    threshold) pairs, as Angel et al.'s rounding is summarised, instead of drawing until every
    vertex is coloured. Vertices still uncoloured at the horizon take their majority colour
    (``fill``, the method sheet's rule; it can only add value) or stay uncoloured (``fill=False``:
    the analysed process alone, for measurements; such a colouring has -1 entries).
    The paper's construction is unknown: this variant is our reading of "analytical scaling".

    Factor (our proof, unreviewed; docs/solve-maxecc.md "Finite horizon"): the first-touch
    argument of :func:`scaled` with the first touch required before the horizon: touches of e come
    at total rate R_e = sum_{c'} max_{v in e} x_{v,c'}, so
    P(e satisfied) >= z_e (1 - e^{-horizon R_e}) / R_e >= z_e (1 - e^{-horizon r}) / r, since
    (1 - e^{-hR}) / R decreases in R and R_e <= z_e + |e| (1 - z_e) <= r. At horizon 1 this is the
    abstract's (1 - e^{-r})/r (0.432 for graphs); ``horizon`` -> infinity gives ``scaled``'s 1/r.
    Draws do not depend on ``horizon``: one seed gives the same arrivals as ``scaled``, and a
    horizon past every activation reproduces ``scaled``'s colourings exactly.
    """
    return _poisson_rounding(H, lp, trials, gen, device, records, "finite-horizon", float(horizon), fill)


def _poisson_rounding(H, lp, trials, gen, device, records, name, horizon, fill) -> Rounds:
    """The Poisson-clock process of ``scaled`` (rate-1 arrivals per colour, a fresh shared threshold
    at each), stopped at time ``horizon`` (math.inf: run until every reachable vertex is coloured).
    Pairs activated after ``horizon`` count as never activated; leftovers take the majority colour
    (``fill``) or stay uncoloured (-1). Draws do not depend on ``horizon`` or ``fill``, so one seed
    gives the same arrivals for every horizon (a horizon past every activation equals ``scaled``)."""
    if not horizon > 0:
        raise UsageError(f"the horizon must be positive, not {horizon}")
    _need_lp(lp)
    ctx = _Ctx(H, lp, device)
    k, L, dev = ctx.k, int(records), ctx.device
    exp = torch.empty(trials, k, L, dtype=torch.float64).exponential_(1.0, generator=gen)
    u = torch.rand(trials, k, L, generator=gen, dtype=torch.float64)
    m_rec = torch.cumprod(u, dim=2)
    m_prev = torch.cat([torch.ones(trials, k, 1, dtype=torch.float64), m_rec[:, :, :-1]], dim=2)
    t_rec = torch.cumsum(exp / m_prev, dim=2)
    neg_m = (-m_rec).to(dev)  # increasing in j
    t_pad = torch.cat([t_rec, torch.full((trials, k, 1), math.inf, dtype=torch.float64)], dim=2).to(dev)
    by_colour = [torch.nonzero(ctx.pair_c == c).reshape(-1) for c in range(k)]
    x = ctx.x

    def make(lo, hi):
        T = hi - lo
        act = torch.full((T, ctx.P), math.inf, dtype=torch.float64, device=dev)
        for c, idx in enumerate(by_colour):  # loop over colours only
            if len(idx) == 0:
                continue
            vals = (-x[idx]).expand(T, -1).contiguous()
            first = torch.searchsorted(neg_m[lo:hi, c, :].contiguous(), vals, right=False)
            act[:, idx] = torch.gather(t_pad[lo:hi, c, :], 1, first)
        act = torch.where((x > 0) & (act <= horizon), act, math.inf)
        tmin = torch.full((T, ctx.n), math.inf, dtype=torch.float64, device=dev)
        tmin.scatter_reduce_(1, ctx.pair_v.expand(T, -1), act, "amin", include_self=True)
        win = (act == tmin[:, ctx.pair_v]) & torch.isfinite(act)
        return _first_by_key(ctx, torch.where(win, ctx.pair_c, _BIG), fill)

    return _run_trials(ctx, name, trials, ctx.P, make)


def edge_bounds(H: Hypergraph, lp: LPSolution) -> dict[str, np.ndarray]:
    """Per-edge lower bounds on P(e satisfied) implied by the proofs (for tests and reports):
    ``scaled`` z_e / R_e (Algorithm 3), ``threshold_order`` z_e / (1 + S_e) with
    S_e = sum_{v in e} (1 - x_{v,c(e)}) (Algorithm 1), where z_e = min_v x_{v,c(e)}, and ``R`` = R_e
    (``finite_horizon`` at horizon h: z_e (1 - e^{-h R_e}) / R_e)."""
    pairs = incident_pairs(H)
    x = np.where(lp.x < X_EPS, 0.0, lp.x)
    xe = x[pairs.of_entry]
    z = np.minimum.reduceat(xe, H.ptr[:-1])
    S = np.add.reduceat(1.0 - xe, H.ptr[:-1])
    # R_e = sum over colours c' of max_{v in e} x_{v,c'}: expand every entry (e, v) to all pairs of v.
    per_v = np.bincount(pairs.pair_v, minlength=H.n)
    first = np.concatenate([[0], np.cumsum(per_v)[:-1]])
    cnt = per_v[H.nodes]
    ent = np.repeat(np.arange(len(H.nodes)), cnt)
    offs = np.arange(len(ent)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    p = first[H.nodes][ent] + offs
    R = np.zeros((H.m, H.k))
    np.maximum.at(R, (H.edge_of[ent], pairs.pair_c[p]), x[p])
    Rsum = R.sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled_b = np.where(z > 0, z / np.maximum(Rsum, 1e-300), 0.0)
    return {"z": z, "scaled": scaled_b, "threshold_order": z / (1.0 + S), "R": Rsum}


# ------------------------------------------------------------------------------- local search
def local_search(H: Hypergraph, sigma, max_rounds: int = 10_000, device="cpu") -> tuple[np.ndarray, int]:
    """Greedy recolouring that never lowers the value (method sheet, Algorithm 4).

    Per round, for every vertex v and incident colour c: gain(v, c) = weight of the edges of
    colour c whose only vertex off colour c is v, minus loss(v) = weight of the satisfied edges at
    v. Vertices with a positive best gain that are strict local maxima of (gain, then smaller
    index) among the vertices sharing an edge with them move together: accepted moves touch
    disjoint edge sets, so their gains add up and the value rises by their sum. Stops when no
    move gains. Returns (sigma, rounds).
    """
    ctx = _Ctx(H, None, device)
    dev = ctx.device
    s = torch.as_tensor(np.array(sigma, dtype=np.int64), device=dev).clone()
    if s.shape != (ctx.n,):
        raise UsageError(f"a colouring needs {ctx.n} entries, got shape {tuple(s.shape)}")
    ce = ctx.colour[ctx.edge_of]
    we = ctx.weight[ctx.edge_of]
    tol = 1e-9 * float(ctx.weight.max())
    rounds = 0
    for rounds in range(1, max_rounds + 1):
        off = (s[ctx.nodes] != ce)
        miss = torch.zeros(ctx.m, dtype=torch.int64, device=dev).index_add_(0, ctx.edge_of, off.to(torch.int64))
        sat_e = (miss == 0)[ctx.edge_of]
        loss = torch.zeros(ctx.n, dtype=torch.float64, device=dev).index_add_(0, ctx.nodes, torch.where(sat_e, we, 0.0))
        only = (miss[ctx.edge_of] == 1) & off
        gain = torch.zeros(ctx.P, dtype=torch.float64, device=dev).index_add_(0, ctx.of_entry, torch.where(only, we, 0.0))
        net = gain - loss[ctx.pair_v]
        net = torch.where(ctx.pair_c == s[ctx.pair_v], -math.inf, net)
        best_c = _segment_argmax(net, ctx.pair_v, ctx.pair_c, ctx.n, ctx.k)
        best = torch.full((ctx.n,), -math.inf, dtype=torch.float64, device=dev)
        best.scatter_reduce_(0, ctx.pair_v, net, "amax", include_self=True)
        cand = best > tol
        if not bool(cand.any()):
            break
        # Priority rank: larger gain first, then smaller index (stable sort keeps index order).
        order = torch.argsort(torch.where(cand, -best, math.inf), stable=True)
        rank = torch.empty(ctx.n, dtype=torch.int64, device=dev)
        rank[order] = torch.arange(ctx.n, device=dev)
        rank = torch.where(cand, rank, _BIG)
        emin = torch.full((ctx.m,), _BIG, dtype=torch.int64, device=dev)
        emin.scatter_reduce_(0, ctx.edge_of, rank[ctx.nodes], "amin", include_self=True)
        vmin = torch.full((ctx.n,), _BIG, dtype=torch.int64, device=dev)
        vmin.scatter_reduce_(0, ctx.nodes, emin[ctx.edge_of], "amin", include_self=True)
        accept = cand & (vmin == rank)
        s = torch.where(accept, best_c, s)
    return s.cpu().numpy(), rounds
