"""MinECC, the complementary objective: minimise the weight of UNSATISFIED edges (Amburg et al.;
Veldt, "Optimal LP rounding and linear-time approximation algorithms for clustering edge-colored
hypergraphs", ICML 2022).

For a colouring, unsatisfied = W - value, so the two objectives share their optima, their
colourings and their LP: the MinECC LP value is W - LP (the same relaxation, with d_{v,c} =
1 - x_{v,c} as Veldt's "distance" variables). Their approximation ratios differ: here a ratio is
cost / (W - LP) >= 1. Two MinECC baselines:

- ``veldt-threshold`` [reconstructed from the paper's published summary, not its text]: one
  threshold t ~ U(I) shared by all colours and vertices, I = (1/2, 7/8) on graphs (r = 2, factor
  4/3) and (1/2, 2/3) otherwise (factor 2 - 2/(r+1)); the colours in a uniformly random order,
  each giving c to every still-uncoloured v with d_{v,c} < t; leftovers take their majority
  colour. The random order is our reading (with t > 1/2 a vertex can be close to two colours);
  the tests check the factor against brute-forced optima.
- ``combinatorial``: the linear-time 2-approximation through the implicit conflict graph (two
  edges of different colours that share a vertex cannot both be satisfied, so the unsatisfied
  edges form a vertex cover of it): Bar-Yehuda-Even local ratio, one pass over the vertices,
  never building the conflict graph. At each vertex the residual weights of its edges are paired
  across colours: when one colour holds at least half of the residual mass it absorbs all the
  others; otherwise the mass line is paired with itself shifted by half (two points half the
  mass apart always lie in different colours), which zeroes every edge there. Edges whose
  residual reaches 0 form the cover; the others are conflict-free and colour their vertices.
  The sum of the subtracted amounts is a lower bound on the MinECC optimum (a certificate).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from icmlkit.lib.solve_maxecc.hypergraph import Hypergraph
from icmlkit.lib.solve_maxecc.lp import LPSolution
from icmlkit.lib.solve_maxecc.rounding import _BIG, Rounds, _Ctx, _first_by_key, _need_lp, _run_trials, evaluate


def min_factors(r: int, k: int) -> dict[str, float]:
    """The MinECC factors (cost over W - LP): Veldt's LP rounding and the combinatorial algorithm."""
    return {"veldt-threshold": 4 / 3 if r <= 2 else 2 - 2 / (r + 1), "combinatorial": 2.0}


def threshold_interval(r: int) -> tuple[float, float]:
    """Veldt's interval I for the shared threshold: (1/2, 7/8) on graphs, (1/2, 2/3) on hypergraphs."""
    return (0.5, 7 / 8) if r <= 2 else (0.5, 2 / 3)


def veldt_threshold(H: Hypergraph, lp: LPSolution, trials: int, gen: torch.Generator, device="cpu") -> Rounds:
    """Veldt's threshold rounding for MinECC [reconstructed]: t ~ U(I) shared, random colour order,
    every uncoloured v with 1 - x_{v,c} < t takes c, leftovers their majority colour. Values are
    MaxECC values (satisfied weight); the MinECC cost of a trial is W - value."""
    _need_lp(lp)
    ctx = _Ctx(H, lp, device)
    lo_t, hi_t = threshold_interval(H.r)
    t = (lo_t + (hi_t - lo_t) * torch.rand(trials, 1, generator=gen, dtype=torch.float64)).to(ctx.device)
    rank = torch.rand(trials, ctx.k, generator=gen, dtype=torch.float64).argsort(1).argsort(1).to(ctx.device)
    x = ctx.x

    def make(lo, hi):
        elig = ((1.0 - x) < t[lo:hi]) & (x > 0)
        key = rank[lo:hi][:, ctx.pair_c] * ctx.k + ctx.pair_c
        return _first_by_key(ctx, torch.where(elig, key, _BIG))

    return _run_trials(ctx, "veldt-threshold", trials, ctx.P, make)


def combinatorial(H: Hypergraph) -> Rounds:
    """The linear-time 2-approximation for MinECC (local ratio on the implicit conflict graph).
    Returns the colouring as a one-trial :class:`Rounds` whose ``min_lower_bound`` is the certified
    lower bound on the MinECC optimum (sum of the local-ratio steps)."""
    t0 = time.perf_counter()
    res = H.weight.astype(np.float64).copy()
    order = np.argsort(H.nodes, kind="stable")  # entries grouped by vertex
    ev = H.edge_of[order]
    starts = np.searchsorted(H.nodes[order], np.arange(H.n + 1))
    tol = 1e-12 * max(1.0, float(H.weight.max()) if H.m else 1.0)
    lower = 0.0
    for v in range(H.n):
        edges = ev[starts[v]:starts[v + 1]]
        if len(edges) < 2:
            continue
        edges = edges[res[edges] > tol]
        if len(edges) < 2:
            continue
        col = H.colour[edges]
        mass = np.bincount(col, weights=res[edges], minlength=H.k)
        if np.count_nonzero(mass > tol) < 2:
            continue
        total = float(mass.sum())
        top = int(np.argmax(mass))
        rest = total - float(mass[top])
        if mass[top] >= rest:
            # the top colour absorbs all others: subtract `rest` from its edges in order
            lower += rest
            res[edges[col != top]] = 0.0
            mine = edges[col == top]
            before = np.concatenate([[0.0], np.cumsum(res[mine])[:-1]])
            res[mine] = np.maximum(0.0, res[mine] - np.maximum(0.0, rest - before))
        else:
            # no colour holds half the mass: pair the mass line with itself shifted by half
            lower += total / 2
            res[edges] = 0.0
    kept = res > tol
    sigma = np.full(H.n, -1, dtype=np.int64)
    keep_entries = kept[H.edge_of]
    sigma[H.nodes[keep_entries]] = H.colour[H.edge_of[keep_entries]]
    ctx = _Ctx(H)
    maj = ctx.majority.cpu().numpy()
    sigma = np.where(sigma >= 0, sigma, maj)
    value, _ = evaluate(H, sigma)
    return Rounds("combinatorial", np.array([float(value)]), sigma, float(value), 0, time.perf_counter() - t0,
                  min_lower_bound=lower)


def min_cost(H: Hypergraph, value: float) -> float:
    """The MinECC cost (unsatisfied weight) of a colouring with MaxECC value ``value``."""
    return float(H.total_weight - value)


def min_ratio(H: Hypergraph, value: float, lp_value: float | None) -> float | None:
    """cost / (W - LP); None when the LP's MinECC bound is 0 (an integral, fully satisfiable LP)."""
    if lp_value is None:
        return None
    bound = H.total_weight - lp_value
    if bound <= 1e-9 * max(1.0, H.total_weight):
        return None if min_cost(H, value) > 1e-9 * max(1.0, H.total_weight) else 1.0
    return min_cost(H, value) / bound
