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
    the model status, whether it is proven ``optimal``, and the wall time. With a ``start``:
    ``mip_value`` is the value of HiGHS's own incumbent (None when it found none), ``start_value``
    the start's, and ``winner`` "mip" when HiGHS's incumbent is strictly better than the start,
    else "start" (then ``sigma`` is the start: the result never loses to it)."""

    value: float
    bound: float
    gap: float
    sigma: np.ndarray
    status: str
    optimal: bool
    seconds: float
    mip_value: float | None = None
    start_value: float | None = None
    winner: str | None = None


def solve_ilp(H: Hypergraph, time_limit: float | None = 60.0, start: np.ndarray | None = None,
              threads: int | None = None, lp=None) -> ILPResult:
    """Solve MaxECC exactly: the LP of :func:`build_model` with binary x (z stays continuous; with
    x integral the optimal z_e = min_v x_{v,c(e)} is integral), HiGHS MIP with mip_rel_gap 0 and a
    time limit, over the rows that row generation needs. When the LP optimum is already integral
    it is returned as the optimum without a MIP. ``start`` (a colouring, int64 [n]) is passed to
    HiGHS as a warm start (``Highs.setSolution``) and kept if HiGHS finds nothing better, so the
    result is never below the start. Caution: with highspy 1.16 a warm start made MAG-10 slower
    (139 s instead of 64 s) and HiGHS reported an objective above the LP optimum; the value is
    recounted from the colouring and the bound is dropped when HiGHS's objective disagrees with its
    own solution (see below). ``lp``: an optimal row-generation LP solution of ``H`` to reuse (its
    rows start the MIP's row generation); any other is solved again."""
    from icmlkit.lib.solve_maxecc.rounding import evaluate, majority

    highs_options(None, time_limit, threads)  # validate before any work
    t0 = time.perf_counter()
    # Row generation: the rows the LP needed (solve_lp's exact row generation), then the MIP on
    # them, adding any row its solution violates (see run_rowgen); far smaller than the full model.
    if lp is None or lp.rows is None or not lp.optimal:  # a given LP is reused only from row generation, solved
        lp = solve_lp(H, method="rowgen", time_limit=time_limit, threads=threads)
    maj = majority(H).sigma
    if start is not None:
        start = np.asarray(start, dtype=np.int64)
        if start.shape != (H.n,):
            raise UsageError(f"a start colouring needs {H.n} entries, got shape {start.shape}")
        v0 = float(evaluate(H, start)[0])
    if lp.optimal and np.all(np.minimum(lp.x, 1.0 - lp.x) <= INTEGRAL_TOL):
        # The LP optimum is integral, so it is an optimal colouring: no MIP needed (Brain, DAWN).
        sigma = colouring_from_x(H, lp.pair_v, lp.pair_c, lp.x, maj)
        value, _ = evaluate(H, sigma)
        mip_value, winner = float(value), None
        if start is not None:
            winner = "mip" if value > v0 else "start"
            if winner == "start":
                sigma, value = start, v0
        bound = max(lp.value, value)
        return ILPResult(value=float(value), bound=bound, gap=(bound - value) / max(abs(bound), 1e-9), sigma=sigma,
                         status="Optimal (the LP optimum is integral)", optimal=abs(bound - value) <= 1e-6 * max(1, bound),
                         seconds=time.perf_counter() - t0, mip_value=mip_value,
                         start_value=None if start is None else v0, winner=winner)
    added = lp.rows.copy()  # row generation adds to it
    limit = None if time_limit is None else max(1e-3, time_limit - (time.perf_counter() - t0))
    h, model, col = _run_mip(H, added, start, limit, threads, presolve=True)
    note = ""
    if start is not None and _overclaims(H, h, model, col):
        # HiGHS 1.16's presolve can mis-map a warm start ("MIP start solution is feasible in the
        # reduced space: objective value is 5" for a start worth 4, then "Optimal" at 5, above the
        # LP bound): solve again without presolve for the time left
        left = None if time_limit is None else time_limit - (time.perf_counter() - t0)
        if left is None or left > 0.05:
            h, model, col = _run_mip(H, added, start, left, threads, presolve=False)
            note = " (rerun without presolve: HiGHS's presolve mis-mapped the warm start)"
    pv, pc = model.pairs.pair_v, model.pairs.pair_c
    status = h.getModelStatus()
    info = h.getInfo()
    has_incumbent = col.shape == (model.num_x + model.num_z,)
    if has_incumbent:
        sigma = colouring_from_x(H, pv, pc, col[: model.num_x], maj)
    else:  # no incumbent at all (time limit hit before the first one)
        sigma = start if start is not None else maj
    value, _ = evaluate(H, sigma)
    mip_value, winner = (float(value) if has_incumbent else None), None
    if start is not None:
        winner = "mip" if mip_value is not None and mip_value > v0 else "start"
        if winner == "start":
            sigma, value = start, v0
    bound = float(info.mip_dual_bound)
    optimal = status == _highspy().HighsModelStatus.kOptimal
    hs_status = h.modelStatusToString(status) + note
    # Guard: HiGHS 1.16 with a warm start was seen to report an objective (and bound) above the LP
    # optimum on MAG-10 while returning a solution worth less. An objective above the value of the
    # solution HiGHS returns means it pruned against an incumbent it does not have, so its bound
    # is not trusted; an objective below it (seen at time limits with a warm start: HiGHS returns
    # the start but reports its own worse incumbent) only made its pruning more cautious, so the
    # bound stands.
    if has_incumbent and _overclaims(H, h, model, col):
        optimal = False
        hs_status += " (objective above the value of HiGHS's own solution; bound not trusted)"
        bound = math.inf
    # the LP optimum is a proven upper bound too (the full LP: row generation is exact); take the
    # tighter one, and the LP's alone when HiGHS's is missing or not trusted
    lp_bound = float(lp.value) if lp.optimal else float(H.total_weight)
    if not math.isfinite(bound):
        hs_status += "; bound from the LP" if lp.optimal else "; bound = total weight"
    bound = min(bound, lp_bound)
    bound = max(bound, value)
    return ILPResult(
        value=float(value), bound=bound, gap=(bound - value) / max(abs(bound), 1e-9), sigma=sigma,
        status=hs_status, optimal=optimal,
        seconds=time.perf_counter() - t0, mip_value=mip_value, start_value=None if start is None else v0, winner=winner,
    )


def _run_mip(H: Hypergraph, added: np.ndarray, start: np.ndarray | None, time_limit: float | None,
             threads: int | None, presolve: bool):
    """HiGHS MIP over the incidence rows in ``added`` (updated in place by row generation), warm-started
    with the colouring ``start`` when given; returns (Highs, model, HiGHS's column values)."""
    model = build_model(H, integer=True, entries=np.flatnonzero(added))
    h = new_highs(highs_options(None, time_limit, threads))
    if not presolve:
        h.setOptionValue("presolve", "off")
    h.passModel(model.lp)
    if start is not None:
        pv, pc = model.pairs.pair_v, model.pairs.pair_c
        x0 = (start[pv] == pc).astype(np.float64)
        z0 = np.minimum.reduceat(x0[model.pairs.of_entry], H.ptr[:-1])
        h.setSolution(len(x0) + len(z0), np.arange(len(x0) + len(z0), dtype=np.int32), np.concatenate([x0, z0]))
    run_rowgen(H, h, model, added, time_limit)
    return h, model, np.asarray(h.getSolution().col_value, dtype=np.float64)


def _overclaims(H: Hypergraph, h, model, col: np.ndarray) -> bool:
    """Whether HiGHS's objective is above the value of the solution it returns (no solution: False)."""
    if col.shape != (model.num_x + model.num_z,):
        return False
    own = float(H.weight @ np.clip(col[model.num_x:], 0, 1))
    return float(h.getInfo().objective_function_value) > own + 1e-6 * max(1.0, abs(own))


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
