"""Parity: solve-decentralized's Chebyshev pieces against the predecessor paper's author code
(kisnikser/Decentralized-Optimization @ ea16f91, run in a scratch folder; fixture in
tests/data/parity/solve-decentralized/, see its README). Tolerance 1e-12 absolute, float64."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from icmlkit.lib.solve_decentralized.spectral import chebyshev_solve, wprime_dense

FIX = Path(__file__).parent / "data" / "parity" / "solve-decentralized"
TOL = 1e-12


@pytest.fixture(scope="module")
def fx():
    with np.load(FIX / "chebyshev_and_wprime.npz") as d:
        return {k: d[k] for k in d.files}


def test_chebyshev_solve_matches_official(fx):
    M, r = fx["M"], fx["r"]
    v = chebyshev_solve(lambda v: M.T @ (M @ v - r), fx["v0"], float(fx["cheb_mu"]), float(fx["cheb_L"]),
                        int(fx["cheb_degree"]))
    np.testing.assert_allclose(v, fx["v_official"], rtol=0, atol=TOL)


@pytest.mark.parametrize("degree", [3, 4, 15])
def test_wprime_product_matches_official(fx, degree):
    """W' y with y node-major (12 nodes x m = 3); 15 = ceil(chi) is the official default degree, 4 =
    ceil(sqrt(chi)) ours (a documented departure: docs/solve-decentralized.md, Departures)."""
    Wp = wprime_dense(fx["W"], float(fx["lam_min"]), float(fx["lam_max"]), degree)
    n = fx["W"].shape[0]
    out = (Wp @ fx["y"].reshape(n, -1)).ravel()
    np.testing.assert_allclose(out, fx[f"wprime_official_deg{degree}"], rtol=0, atol=TOL)
