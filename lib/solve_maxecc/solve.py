"""The one-call facade: LP, roundings, optional local search and ILP, and a summary dict."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.core.runtime import generator
from icmlkit.lib.solve_maxecc import rounding as R
from icmlkit.lib.solve_maxecc.config import ALGORITHMS, NOT_IN_BEST
from icmlkit.lib.solve_maxecc.hypergraph import Hypergraph
from icmlkit.lib.solve_maxecc.ilp import solve_ilp
from icmlkit.lib.solve_maxecc.lp import DEFAULT_METHOD, LPSolution, solve_lp
from icmlkit.lib.solve_maxecc.minecc import combinatorial, min_cost, min_ratio, veldt_threshold

RANDOMIZED = ("threshold-order", "paired", "scaled", "finite-horizon", "veldt-threshold")
NO_LP = ("majority", "combinatorial")
SUMMARY_KEYS = (
    "n", "m", "k", "r", "lp_value", "value", "ratio_to_lp", "unsatisfied_weight", "lp_min_value",
    "ratio_to_lp_min", "ilp_value", "ilp_gap", "algorithm", "trials", "seconds_lp", "seconds_rounding",
    "seconds_total",
)


@dataclass
class SolveResult:
    """``sigma`` (int64 [n]), the ``summary`` dict (keys :data:`SUMMARY_KEYS`, plus ``values``
    (each rounding's value before local search) and ``winner`` for algorithm 'best', and
    ``value_before_local_search`` with local search), the LP solution used (None for majority without LP) and
    the ILP result when one was run."""

    sigma: np.ndarray
    summary: dict
    lp: LPSolution | None = None
    ilp: object | None = None
    rounds: dict = field(default_factory=dict)


def _run_one(name: str, H, lp, trials, seed, derandomize, device, horizon=R.DEFAULT_HORIZON) -> R.Rounds:
    if name == "majority":
        return R.majority(H, device=device)
    if name == "combinatorial":
        return combinatorial(H)
    if name == "lp-argmax":
        return R.lp_argmax(H, lp, device=device)
    if name == "paired" and derandomize:
        return R.paired_derandomized(H, lp, device=device)
    # One generator per algorithm, seeded from ``seed``: each algorithm's draws do not depend on
    # which other algorithms ran before it.
    gen = generator(seed, name)
    if name == "finite-horizon":
        return R.finite_horizon(H, lp, trials, gen, device=device, horizon=horizon)
    fn = {"threshold-order": R.threshold_order, "paired": R.paired, "scaled": R.scaled,
          "veldt-threshold": veldt_threshold}[name]
    return fn(H, lp, trials, gen, device=device)


def solve(
    H: Hypergraph,
    algorithm: str = "best",
    trials: int = 100,
    seed: int = 0,
    derandomize: bool = False,
    local_search: bool = False,
    ilp: bool = False,
    ilp_time_limit: float = 60.0,
    lp: LPSolution | None = None,
    lp_method: str = DEFAULT_METHOD,
    lp_time_limit: float | None = None,
    device="cpu",
    horizon: float = 1.0,
) -> SolveResult:
    """Solve MaxECC on ``H``.

    1. LP (HiGHS, ``lp_method``) unless given as ``lp`` or not needed (majority, combinatorial);
    2. rounding: ``algorithm`` in majority, lp-argmax, threshold-order (Algorithm 1, reconstructed),
       paired (Algorithm 2, reconstructed; ``derandomize`` uses the deterministic version), scaled
       (Algorithm 3, reconstructed), finite-horizon (scaled stopped at time ``horizon``, reconstructed;
       not part of 'best'), the MinECC baselines veldt-threshold (reconstructed) and
       combinatorial (lib/solve_maxecc/minecc.py), or 'best': all of them, keeping the best colouring
       (first in that order on ties); randomized ones keep the best of ``trials`` trials. Both
       objectives are reported: ``value`` (satisfied weight, MaxECC) and ``unsatisfied_weight``
       (W - value, MinECC) with its ratio to the MinECC LP bound W - LP;
    3. optional greedy ``local_search`` (never lowers the value);
    4. optional ``ilp``, the exact mode that never loses (issue 57): local search runs on the
       rounding's winner whatever ``local_search`` says, HiGHS MIP (:func:`solve_ilp`, limit
       ``ilp_time_limit``) is warm-started with that colouring, and the better of the two is
       returned: ``value`` = max(MIP incumbent, heuristic) with ``ilp_bound`` HiGHS's proven upper
       bound, ``ilp_gap`` = (bound - value) / bound, and ``exact_winner`` "mip" (HiGHS's own incumbent
       strictly better) or "heuristic" (the warm start kept; ties go to it). ``heuristic_value`` is
       the rounding + local search value, ``ilp_value`` HiGHS's own incumbent (null if none).
    """
    if algorithm not in ALGORITHMS:
        raise UsageError(f"algorithm must be one of {', '.join(ALGORITHMS)}, not {algorithm!r}")
    if trials < 1:
        raise UsageError("trials must be at least 1")
    t0 = time.perf_counter()
    seconds_lp = 0.0
    if lp is None and algorithm not in NO_LP:
        lp = solve_lp(H, method=lp_method, time_limit=lp_time_limit, device=device)
        seconds_lp = time.perf_counter() - t0
    t1 = time.perf_counter()
    names = [a for a in ALGORITHMS if a != "best" and a not in NOT_IN_BEST] if algorithm == "best" else [algorithm]
    rounds = {name: _run_one(name, H, lp, trials, seed, derandomize, device, horizon) for name in names}
    winner = max(names, key=lambda a: (rounds[a].value, -names.index(a)))
    sigma, value = rounds[winner].sigma, rounds[winner].value
    before_search = value
    if local_search or ilp:
        sigma, _ = R.local_search(H, sigma, device=device)
        value, _ = R.evaluate(H, sigma)
    seconds_rounding = time.perf_counter() - t1
    heuristic_value = float(value)
    ilp_res = None
    if ilp:  # the exact mode: warm-started MIP, the better of the two (never below the heuristic)
        ilp_res = solve_ilp(H, time_limit=ilp_time_limit, start=sigma, lp=lp)
        sigma, value = ilp_res.sigma, ilp_res.value
    lp_value = lp.value if lp is not None else None
    summary = {
        "n": H.n, "m": H.m, "k": H.k, "r": H.r,
        "lp_value": lp_value,
        "value": float(value),
        "ratio_to_lp": (float(value) / lp_value) if lp_value else None,
        "unsatisfied_weight": min_cost(H, float(value)),
        "lp_min_value": (H.total_weight - lp_value) if lp_value is not None else None,
        "ratio_to_lp_min": min_ratio(H, float(value), lp_value),
        "ilp_value": ilp_res.mip_value if ilp_res else None,
        "ilp_gap": ilp_res.gap if ilp_res else None,
        "algorithm": algorithm,
        "trials": trials,
        "seconds_lp": seconds_lp,
        "seconds_rounding": seconds_rounding,
        "seconds_total": time.perf_counter() - t0,
    }
    if local_search or ilp:
        summary["value_before_local_search"] = float(before_search)
    if ilp_res is not None:
        summary.update(heuristic_value=heuristic_value, ilp_bound=float(ilp_res.bound), ilp_optimal=bool(ilp_res.optimal),
                       ilp_status=ilp_res.status, seconds_ilp=ilp_res.seconds,
                       exact_winner="mip" if ilp_res.winner == "mip" else "heuristic")
    if "combinatorial" in rounds:
        summary["min_lower_bound"] = rounds["combinatorial"].min_lower_bound
    if algorithm == "best":
        # each rounding's own value, before any local search (which runs on the winner only)
        summary["winner"] = winner
        summary["values"] = {a: rounds[a].value for a in names}
    return SolveResult(sigma=np.asarray(sigma, dtype=np.int64), summary=summary, lp=lp, ilp=ilp_res, rounds=rounds)


def score_colouring(H: Hypergraph, sigma, labels=None) -> dict:
    """Both objectives of a colouring: ``value`` (satisfied weight, MaxECC), ``unsatisfied_weight``
    (W - value, MinECC), ``satisfied`` (edges), ``m``, ``uncoloured``; with ground-truth ``labels``
    (int [n]) also ``ari`` and ``nmi`` (scikit-learn), uncoloured vertices as one extra cluster."""
    sigma = np.asarray(sigma, dtype=np.int64)
    value, satisfied = R.evaluate(H, sigma)
    out = {"value": float(value), "unsatisfied_weight": min_cost(H, float(value)), "satisfied": int(satisfied),
           "m": int(H.m), "uncoloured": int((sigma < 0).sum())}
    if labels is not None:
        from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

        out["ari"] = float(adjusted_rand_score(labels, sigma))
        out["nmi"] = float(normalized_mutual_info_score(labels, sigma))
    return out
