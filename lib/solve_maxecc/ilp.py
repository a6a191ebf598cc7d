"""Exact MaxECC: the ILP with HiGHS MIP, and brute force for tiny instances (tests)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.solve_maxecc.hypergraph import Hypergraph
from icmlkit.lib.solve_maxecc.lp import (_highspy, build_model, colouring_from_x, highs_options, new_highs, run_rowgen,
                                   solve_lp)


@dataclass
class ILPResult:
    """``value`` of the best colouring found (recounted with :func:`evaluate`), HiGHS's dual
    ``bound``, relative ``gap`` = (bound - value) / max(|bound|, 1e-9), the colouring ``sigma``,
    the model status, whether it is proven ``optimal``, and the wall time."""

    value: float
    bound: float
    gap: float
    sigma: np.ndarray
    status: str
    optimal: bool
    seconds: float


def solve_ilp(H: Hypergraph, time_limit: float | None = 60.0, start: np.ndarray | None = None,
              threads: int | None = None) -> ILPResult:
    """Solve MaxECC exactly: the LP of :func:`build_model` with binary x (z stays continuous; with
    x integral the optimal z_e = min_v x_{v,c(e)} is integral), HiGHS MIP with mip_rel_gap 0 and a
    time limit, over the rows that row generation needs. When the LP optimum is already integral
    it is returned as the optimum without a MIP. ``start`` (a colouring, int64 [n]) is passed to
    HiGHS as a warm start and kept if HiGHS finds nothing better. Caution: with highspy 1.16 a warm start made MAG-10 slower (139 s
    instead of 64 s) and HiGHS reported an objective above the LP optimum; the result is checked
    against HiGHS's own solution (see below), and :func:`solve` does not warm-start."""
    from icmlkit.lib.solve_maxecc.rounding import evaluate, majority

    highs_options(None, time_limit, threads)  # validate before any work
    t0 = time.perf_counter()
    # Row generation: the rows the LP needed (solve_lp's exact row generation), then the MIP on
    # them, adding any row its solution violates (see run_rowgen); far smaller than the full model.
    lp = solve_lp(H, method="rowgen", time_limit=time_limit, threads=threads)
    maj = majority(H).sigma
    if lp.optimal and np.all(np.minimum(lp.x, 1.0 - lp.x) <= INTEGRAL_TOL):
        # The LP optimum is integral, so it is an optimal colouring: no MIP needed (Brain, DAWN).
        sigma = colouring_from_x(H, lp.pair_v, lp.pair_c, lp.x, maj)
        value, _ = evaluate(H, sigma)
        bound = max(lp.value, value)
        return ILPResult(value=float(value), bound=bound, gap=(bound - value) / max(abs(bound), 1e-9), sigma=sigma,
                         status="Optimal (the LP optimum is integral)", optimal=abs(bound - value) <= 1e-6 * max(1, bound),
                         seconds=time.perf_counter() - t0)
    added = lp.rows
    remaining = None if time_limit is None else max(1e-3, time_limit - (time.perf_counter() - t0))
    model = build_model(H, integer=True, entries=np.flatnonzero(added))
    h = new_highs(highs_options(None, remaining, threads))
    h.passModel(model.lp)
    pv, pc = model.pairs.pair_v, model.pairs.pair_c
    if start is not None:
        start = np.asarray(start, dtype=np.int64)
        if start.shape != (H.n,):
            raise UsageError(f"a start colouring needs {H.n} entries, got shape {start.shape}")
        x0 = (start[pv] == pc).astype(np.float64)
        z0 = np.minimum.reduceat(x0[model.pairs.of_entry], H.ptr[:-1])
        h.setSolution(len(x0) + len(z0), np.arange(len(x0) + len(z0), dtype=np.int32), np.concatenate([x0, z0]))
    run_rowgen(H, h, model, added, remaining)
    status = h.getModelStatus()
    info = h.getInfo()
    col = np.asarray(h.getSolution().col_value, dtype=np.float64)
    if col.shape == (model.num_x + model.num_z,):
        sigma = colouring_from_x(H, pv, pc, col[: model.num_x], maj)
    else:  # no incumbent at all (time limit hit before the first one)
        sigma = start if start is not None else maj
    value, _ = evaluate(H, sigma)
    if start is not None:
        v0, _ = evaluate(H, start)
        if v0 > value:
            sigma, value = start, v0
    bound = float(info.mip_dual_bound)
    optimal = status == _highspy().HighsModelStatus.kOptimal
    hs_status = h.modelStatusToString(status)
    # Guard: HiGHS 1.16 with a warm start was seen to report an objective (and bound) above the LP
    # optimum on MAG-10 while returning a solution worth less. Trust the objective only if it
    # matches HiGHS's own solution.
    if col.shape == (model.num_x + model.num_z,):
        own = float(H.weight @ np.clip(col[model.num_x:], 0, 1))
        if abs(own - float(info.objective_function_value)) > 1e-6 * max(1.0, abs(own)):
            optimal = False
            hs_status += " (objective inconsistent with the solution; bound not trusted)"
            bound = math.inf
    if not math.isfinite(bound):
        bound = float(H.total_weight)
    bound = max(bound, value)
    return ILPResult(
        value=float(value), bound=bound, gap=(bound - value) / max(abs(bound), 1e-9), sigma=sigma,
        status=hs_status, optimal=optimal,
        seconds=time.perf_counter() - t0,
    )


INTEGRAL_TOL = 1e-9
BRUTE_FORCE_LIMIT = 1 << 22  # colourings (k^n)


def brute_force(H: Hypergraph) -> tuple[float, np.ndarray]:
    """Exhaustive optimum over all k^n colourings (tests); refuses k^n > 2^22.

    Enumerates colourings as base-k digits in chunks and evaluates each chunk vectorised.
    Returns (OPT, the first optimal colouring in enumeration order)."""
    from icmlkit.lib.solve_maxecc.rounding import _Ctx, _evaluate_t

    if H.n * math.log2(max(H.k, 2)) > math.log2(BRUTE_FORCE_LIMIT):
        raise UsageError(f"brute force over {H.k}^{H.n} colourings is too large (limit {BRUTE_FORCE_LIMIT})")
    ctx = _Ctx(H)
    total = H.k ** H.n
    powers = torch.tensor([H.k ** i for i in range(H.n)], dtype=torch.int64)
    best_val, best_sigma = -1.0, None
    step = max(1, (1 << 22) // max(1, len(H.nodes)))
    for lo in range(0, total, step):
        codes = torch.arange(lo, min(total, lo + step), dtype=torch.int64)
        sigma = (codes[:, None] // powers[None, :]) % H.k
        val, _ = _evaluate_t(ctx, sigma)
        i = int(torch.argmax(val))
        if float(val[i]) > best_val:
            best_val, best_sigma = float(val[i]), sigma[i].numpy().copy()
    return best_val, best_sigma
