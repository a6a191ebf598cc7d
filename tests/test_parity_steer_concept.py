"""Parity: steer-concept's whitening and steers against the official MidSteer code (Atmyre/MidSteer @
0f3b31e: ``fractional_matrix_power_cov_torch`` and ``CrossAttentionOutputSteering``, run in a scratch
folder; fixture in tests/data/parity/steer-concept/, see its README). Tolerance 1e-10 absolute
(float64) on the well-conditioned Sigma.

The ill-conditioned Sigma (eigenvalues 1 .. 1e-12) pins both whitening rules: the default is the
official cut (torch.linalg.pinv's, all 16 directions kept), ``threshold=1e-10`` this project's former
rule (3 directions dropped; docs/steer-concept.md, Departures)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from icmlkit.lib.steer_concept.stats import OURS_EIG_THRESHOLD, Stats, Whitening
from icmlkit.lib.steer_concept.steer import fit_step

FIX = Path(__file__).parent / "data" / "parity" / "steer-concept"
TOL = 1e-10


@pytest.fixture(scope="module")
def fx():
    with np.load(FIX / "fixtures.npz") as d:
        return {k: d[k] for k in d.files}


@pytest.fixture(scope="module")
def recorded():
    return {r["case"]: r for r in json.loads((FIX / "results.json").read_text())}


@pytest.mark.parametrize("method", ["midsteer", "leace", "casteer"])
@pytest.mark.parametrize("beta", [1.0, 2.0])
@pytest.mark.parametrize("clip", [True, False])
def test_steers_match_official(fx, method, beta, clip):
    neutral = Stats(mean=torch.from_numpy(fx["mu0"]), cov=torch.from_numpy(fx["Sigma"]), n=400, shrinkage=0.0)
    step = fit_step(fx["mu_s"], fx["mu_t"], neutral, method=method, beta=beta, clip=clip)
    out = step.apply(fx["x"])  # [batch, tokens, heads, d], the official layout
    np.testing.assert_allclose(out, fx[f"official_{method}_b{beta}_clip{int(clip)}"], rtol=0, atol=TOL)


def test_midsteer_maps_source_mean_onto_target(fx):
    neutral = Stats(mean=torch.from_numpy(fx["mu0"]), cov=torch.from_numpy(fx["Sigma"]), n=400, shrinkage=0.0)
    step = fit_step(fx["mu_s"], fx["mu_t"], neutral, method="midsteer", beta=1.0)
    np.testing.assert_allclose(step.apply(fx["mu_s"]), fx["mu_t"], rtol=0, atol=TOL)


@pytest.mark.parametrize("power", [-0.5, 0.5])
def test_whitening_matches_official_well_conditioned(fx, power):
    wh = Whitening(torch.from_numpy(fx["Sigma"]))
    ours = (wh.W if power < 0 else wh.W_plus).numpy()
    assert wh.effective_rank == 16
    np.testing.assert_allclose(ours, fx[f"official_Sigma_pow_{power}"], rtol=0, atol=TOL)


@pytest.mark.parametrize("power", [-0.5, 0.5])
def test_whitening_default_is_the_official_cut_on_ill_conditioned(fx, power):
    """Eigenvalues down to 1e-12: the official (pinv) rule keeps all 16. Sigma^{-1/2} reaches 6e5 here,
    so eigh's round-off allows a relative 1e-4 of its largest entry (measured 1e-5)."""
    wh = Whitening(torch.from_numpy(fx["Sigma_ill"]))
    ref = fx[f"official_Sigma_ill_pow_{power}"]
    ours = (wh.W if power < 0 else wh.W_plus).numpy()
    assert wh.effective_rank == 16
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max()


def test_whitening_ours_option_pinned_on_ill_conditioned(fx, recorded):
    """threshold=1e-10 (this project's former default) drops the 3 eigenvalues below 1e-10: the
    differences from the official roots are the ones recorded in results.json."""
    wh = Whitening(torch.from_numpy(fx["Sigma_ill"]), threshold=OURS_EIG_THRESHOLD)
    assert wh.effective_rank == 13
    for power, W in ((-0.5, wh.W), (0.5, wh.W_plus)):
        rec = recorded[f"Sigma^{power} (eigenvalues 1..1e-12)"]
        assert rec["our_effective_rank"] == 13
        diff = np.abs(W.numpy() - fx[f"official_Sigma_ill_pow_{power}"]).max()
        assert diff == pytest.approx(rec["max_abs_diff"], rel=1e-3)
