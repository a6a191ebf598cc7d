"""Issue 57: the finite-horizon form of ``scaled`` (lib/solve_maxecc/rounding.py finite_horizon,
reconstructed), its exact expectations (lib/solve_maxecc/exact.py) and the factor it attains."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import run_tool
from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.core.runtime import generator
from icmlkit.lib.solve_maxecc import (edge_bounds, finite_horizon, planted, rainbow_cycle, scaled, solve,
                                      solve_lp, star)
from icmlkit.lib.solve_maxecc.exact import _horizon_edge, exact_expected_value, uniform_lp_point
from icmlkit.lib.solve_maxecc.generate import affine_design

Z999 = 3.29


def test_a_horizon_past_every_activation_reproduces_scaled():
    """The draws do not depend on the horizon: with the same seed, an unreachable horizon gives
    scaled's colourings trial by trial, and a short one gives values no larger on every trial
    where nothing was filled (the fill makes no such promise, so it is off here)."""
    H = planted(300, 5, 3, 600, 0.8, seed=4)
    lp = solve_lp(H)
    a = scaled(H, lp, 300, generator(7, "x"))
    b = finite_horizon(H, lp, 300, generator(7, "x"), horizon=1e12)
    assert np.array_equal(a.values, b.values) and np.array_equal(a.sigma, b.sigma)
    short = finite_horizon(H, lp, 300, generator(7, "x"), horizon=0.5, fill=False)
    long = finite_horizon(H, lp, 300, generator(7, "x"), horizon=1e12, fill=False)
    assert np.all(short.values <= long.values + 1e-9) and short.values.mean() < long.values.mean()


def test_one_draw_and_a_tiny_horizon_give_the_predicted_expectation():
    """One discrete colour draw satisfies e iff it is c(e) with theta <= z_e: E = LP / k exactly;
    a horizon h -> 0 gives E = h LP to first order."""
    H = planted(40, 4, 3, 90, 0.7, seed=3)
    lp = solve_lp(H)
    assert exact_expected_value(H, lp, "finite-horizon", fill=False, draws=1) == pytest.approx(lp.value / H.k, rel=1e-12)
    h = 1e-6
    assert exact_expected_value(H, lp, "finite-horizon", fill=False, horizon=h) / h == pytest.approx(lp.value, rel=1e-4)
    # many draws / a long horizon: the infinite process
    inf = exact_expected_value(H, lp, "scaled", fill=False)
    assert exact_expected_value(H, lp, "finite-horizon", fill=False, draws=5000) == pytest.approx(inf, rel=1e-9)
    assert exact_expected_value(H, lp, "finite-horizon", fill=False, horizon=200.0) == pytest.approx(inf, rel=1e-9)


def test_exact_horizon_by_hand():
    """An edge whose every touch decides it (each vertex at z on c, the rest on its own colour):
    P = z (1 - e^{-hR}) / R with R = z + r (1 - z), the bound of the proof met with equality."""
    z, r, h = 0.3, 3, 0.7
    xe = np.zeros((r, r + 1))
    xe[:, 0] = z
    xe[np.arange(r), np.arange(1, r + 1)] = 1 - z
    R = z + r * (1 - z)
    assert _horizon_edge(xe, 0, np.full(r, -1), h) == pytest.approx(z * (1 - math.exp(-h * R)) / R, rel=1e-12)
    assert _horizon_edge(xe, 0, np.zeros(r, dtype=int), h) == pytest.approx(
        z * (1 - math.exp(-h * R)) / R + math.exp(-h * R), rel=1e-12)  # leftovers fill to c: no touch wins too


@pytest.mark.parametrize("p,r", [(5, 2), (7, 3), (5, 4)])
def test_affine_design_attains_the_closed_form(p, r):
    """At the uniform LP optimum of the affine design every touch decides its edge, so the exact
    E/LP equals 1/R (infinite) and (1 - e^{-R})/R (horizon 1), R = r - (r-1)/p: these tend to 1/r
    and to the abstract's (1 - e^{-r})/r as p grows."""
    H = affine_design(p, r)
    pt = uniform_lp_point(H)
    assert pt.value == pytest.approx(p) and solve_lp(H).value == pytest.approx(p)  # an LP optimum
    R = r - (r - 1) / p
    assert exact_expected_value(H, pt, "scaled", fill=False) / p == pytest.approx(1 / R, rel=1e-10)
    assert exact_expected_value(H, pt, "finite-horizon", fill=False) / p == pytest.approx((1 - math.exp(-R)) / R,
                                                                                         rel=1e-10)


@pytest.mark.parametrize("fill", [False, True])
@pytest.mark.parametrize("gadget", ["rainbow", "star", "affine"])
def test_sampled_mean_equals_the_exact_expectation(gadget, fill):
    H = {"rainbow": lambda: rainbow_cycle(5, 3, 2), "star": lambda: star(3), "affine": lambda: affine_design(5, 3)}[gadget]()
    lp = uniform_lp_point(H) if gadget == "affine" else solve_lp(H)
    T = 8000
    v = finite_horizon(H, lp, T, generator(5, gadget), fill=fill).values
    exact = exact_expected_value(H, lp, "finite-horizon", fill=fill)
    half = Z999 * v.std(ddof=1) / math.sqrt(T) + 1e-12
    assert abs(v.mean() - exact) <= half, (gadget, fill, v.mean(), exact)


@pytest.mark.parametrize("seed", range(4))
def test_finite_horizon_meets_its_per_edge_bound_and_factor(seed):
    H = planted(25, 4, 3, 45, 0.8, seed=seed, weighted=True)
    lp = solve_lp(H)
    for h in (0.5, 1.0, 3.0):
        from icmlkit.lib.solve_maxecc.exact import exact_edge_probabilities

        pe = exact_edge_probabilities(H, lp, "finite-horizon", horizon=h, fill=False)
        b = edge_bounds(H, lp)
        with np.errstate(divide="ignore", invalid="ignore"):
            bound = np.where(b["R"] > 0, b["z"] * (1 - np.exp(-h * b["R"])) / b["R"], 0.0)
        assert np.all(pe >= bound - 1e-12)
        assert pe @ H.weight >= (1 - math.exp(-h * H.r)) / H.r * lp.value - 1e-9


def test_bad_horizon_is_a_usage_error():
    H = star(3)
    lp = solve_lp(H)
    with pytest.raises(UsageError):
        finite_horizon(H, lp, 5, generator(0), horizon=0.0)
    with pytest.raises(UsageError):
        exact_expected_value(H, lp, "scaled", draws=3)


def test_best_leaves_finite_horizon_out_and_the_cli_runs_it(tmp_path):
    H = star(4)
    s = solve(H, algorithm="best", trials=20).summary
    assert "finite-horizon" not in s["values"] and "scaled" in s["values"]
    inst = tmp_path / "star.txt"
    assert run_tool("solve-maxecc", "generate", "--kind", "star", "--k", 4, "-o", inst).returncode == 0
    out = run_tool("solve-maxecc", "solve", inst, "-a", "finite-horizon", "--horizon", 0.5, "-t", 50, "--json")
    assert out.returncode == 0, out.stderr
    js = json.loads(out.stdout)
    assert js["algorithm"] == "finite-horizon" and 0 < js["value"] <= js["lp_value"] + 1e-9
    assert run_tool("solve-maxecc", "solve", inst, "-a", "finite-horizon", "--horizon", 0).returncode == 2
