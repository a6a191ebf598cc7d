"""lib/core/stats.paired_bootstrap: the one paired bootstrap the benchmarks and fed-stream's compare quote."""
import numpy as np
import pytest

from icmlkit.lib.core.stats import paired_bootstrap


def test_constant_difference_has_a_point_interval():
    ci = paired_bootstrap([3.0, 4.0, 5.0], [1.0, 2.0, 3.0])
    assert ci["mean"] == ci["low"] == ci["high"] == 2.0
    assert (ci["n"], ci["wins"], ci["losses"]) == (3, 3, 0)


def test_interval_brackets_the_mean_and_matches_the_normal_approximation():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.3, 1.0, 400), np.zeros(400)
    ci = paired_bootstrap(a, b, n_boot=4000, seed=3)
    se = a.std(ddof=1) / np.sqrt(len(a))
    assert ci["low"] < ci["mean"] < ci["high"]
    assert ci["high"] - ci["low"] == pytest.approx(2 * 1.96 * se, rel=0.1)


def test_same_seed_same_interval_and_no_pairs():
    a, b = [0.1, 0.5, 0.2, 0.9], [0.2, 0.1, 0.2, 0.3]
    assert paired_bootstrap(a, b, seed=7) == paired_bootstrap(a, b, seed=7)
    empty = paired_bootstrap([], [])
    assert empty["n"] == 0 and empty["low"] is None and empty["mean"] is None
