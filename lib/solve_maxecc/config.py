"""Option dataclasses of solve-maxecc (``lp``, ``solve``, ``generate``), with their command-line help.

Standard library and lib/core only: the CLI declares its options from these dataclasses at import
time (``icmlkit.cli._common.config_options``), and ``--help`` must not import numpy or HiGHS.
"""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.core.config import option
from icmlkit.lib.core.errors import UsageError

# 'best' runs the others in this order (except NOT_IN_BEST) and keeps the first of equal values
ALGORITHMS = ("majority", "lp-argmax", "threshold-order", "paired", "scaled", "finite-horizon", "veldt-threshold",
              "combinatorial", "best")
# finite-horizon is scaled stopped early (a weaker factor, the same cost): selected by name only
NOT_IN_BEST = ("finite-horizon",)
LP_METHODS = ("rowgen", "ipm", "simplex", "pdlp", "choose", "pdhg")
# Measured (2 cores, bench/solve_maxecc.py): rowgen 0.9 s on DAWN where ipm takes 40 s and the
# dual simplex 80 s; 3.9 s vs 12 s on MAG-10; 0.1 s vs 1.7 s on Brain.
DEFAULT_LP_METHOD = "rowgen"
GENERATE_KINDS = ("planted", "odd-cycle", "star", "rainbow-cycle")


def _lp_method():
    return option(
        DEFAULT_LP_METHOD,
        "rowgen: exact row generation (one edge-vertex row per edge, then the violated ones, warm-started dual "
        "simplex; 0.9 s on DAWN); or the full model with HiGHS's ipm (40 s on DAWN), simplex, pdlp (approximate) "
        "or choose; or pdhg: icmlkit's restarted PDHG in torch (first-order, relative gap 1e-4 certified by its "
        "dual bound, lp_upper_bound; faster than HiGHS on large fractional LPs).", choices=LP_METHODS)


def _lp_time_limit():
    return option(None, "Seconds for the LP; past it the best LP point so far is used and lp_value is no longer an "
                  "upper bound (status says so).", min=0, min_open=True)


@dataclass
class LPConfig:
    """``lp``: the LP relaxation (the same two options end :class:`SolveConfig`)."""

    lp_method: str = _lp_method()
    lp_time_limit: float | None = _lp_time_limit()


@dataclass
class SolveConfig:
    """``solve``: the rounding, local search, the optional ILP and the LP (as :class:`LPConfig`)."""

    algorithm: str = option(
        "best", "majority and lp-argmax are the MaxECC baselines, veldt-threshold and combinatorial the MinECC "
        "ones; finite-horizon is scaled stopped at --horizon (reconstructed); best runs all but finite-horizon "
        "and keeps the best.", choices=ALGORITHMS, flags=("--algorithm", "-a"))
    trials: int = option(100, "Randomized roundings to draw (vectorised); the best one is kept.", min=1,
                         flags=("--trials", "-t"))
    derandomize: bool = option(
        False, "paired: try every colour pair and every LP breakpoint instead of sampling (deterministic, "
        "value >= LP/ceil(k/2)).")
    horizon: float = option(
        1.0, "finite-horizon (reconstructed): stop scaled's rate-1 colour clocks at this time, so each colour is "
        "drawn Poisson(horizon) times; leftovers take their majority colour. Factor (1-e^(-horizon*r))/r, the "
        "abstract's (1-e^-r)/r at 1 (our proof, unreviewed).", min=0, min_open=True)
    local_search: bool = option(False, "Greedy recolouring afterwards; never lowers the value.")
    ilp: bool = option(False, "Exact mode that never loses: local search on the rounding, then HiGHS MIP warm-started "
                       "with it; the better colouring is written and value is its value, with HiGHS's proven bound "
                       "(ilp_bound, ilp_gap) and exact_winner (mip or heuristic).")
    time_limit: float = option(60.0, "Seconds for the ILP (HiGHS MIP).", min=0, min_open=True)
    lp_method: str = _lp_method()
    lp_time_limit: float | None = _lp_time_limit()

    def check(self) -> None:
        if self.derandomize and self.algorithm not in ("paired", "best"):
            raise UsageError("--derandomize applies to --algorithm paired (or best)")


@dataclass
class GenerateConfig:
    """``generate``: a planted instance or an adversarial gadget (:mod:`icmlkit.lib.solve_maxecc.generate`)."""

    kind: str = option("planted", "planted: Amburg-style clusters with noisy edge colours; the others are small "
                       "adversarial gadgets whose LP is fractional.", choices=GENERATE_KINDS)
    n: int = option(200, "planted: vertices.", min=2)
    m: int | None = option(None, "planted: edges (default 2n).", min=1)
    k: int = option(3, "Colours.", min=2)
    r: int = option(3, "Maximum edge size.", min=1)
    noise: float = option(0.4, "planted: probability that an edge's colour is replaced by another.", min=0, max=1)
    length: int = option(5, "odd-cycle / rainbow-cycle: number of edges around the cycle.", min=3)
    weighted: bool = option(False, "planted: random integer weights 1..5.")
