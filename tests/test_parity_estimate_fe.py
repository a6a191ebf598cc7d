"""Parity: estimate-fe's estimator layer against pymbar 4.0.3 (the peer named in the method sheet; no
official CARD code is reachable). ``bar_estimate`` (own log-space Bennett solve, overlap, EXP) on
Gaussian Crooks-consistent works and a heavy-tailed case, against pymbar's ``bar``, ``bar_overlap`` and
``exp`` stored in tests/data/parity/estimate-fe/ (no pymbar needed to run this test). Tolerance 1e-10.
On the heavy tail pymbar's dDelta_f is NaN; ours is finite (pinned)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from icmlkit.lib.estimate_fe.estimate import bar_estimate

DATA = Path(__file__).parent / "data" / "parity" / "estimate-fe"
TOL = 1e-10
CASES = ("gauss_s0.5", "gauss_s1.5", "gauss_s3.0", "heavy_tail")
KEYS = ("delta_f", "delta_f_err", "overlap", "exp_forward")   # the order of <case>_pymbar


@pytest.fixture(scope="module")
def works():
    return np.load(DATA / "bar_works.npz")


def _ours(z, case) -> np.ndarray:
    r = bar_estimate(z[f"{case}_wF"], z[f"{case}_wR"])
    return np.array([r[k] for k in KEYS], dtype=np.float64)


@pytest.mark.parametrize("case", CASES)
def test_bar_matches_pymbar(works, case):
    ours, ref = _ours(works, case), works[f"{case}_pymbar"]
    for i, key in enumerate(KEYS):
        if case == "heavy_tail" and key == "delta_f_err":
            continue
        assert abs(ours[i] - ref[i]) < TOL, (key, ours[i], ref[i])


def test_heavy_tail_error_is_finite_where_pymbar_gives_nan(works):
    ours, ref = _ours(works, "heavy_tail"), works["heavy_tail_pymbar"]
    assert math.isnan(ref[1])
    recorded = json.loads((DATA / "ours_vs_pymbar.json").read_text(), parse_constant=float)["heavy_tail"]["ours_ddf"]
    assert math.isfinite(ours[1]) and abs(ours[1] - recorded) < TOL


def test_parity_detects_a_1e3_change(works):
    for case in CASES:
        ours, ref = _ours(works, case) + 1e-3, works[f"{case}_pymbar"]
        ok = np.isfinite(ref)
        assert (np.abs(ours[ok] - ref[ok]) > TOL).all()
