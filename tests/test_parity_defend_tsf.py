"""Parity: defend-tsf's TimeGuard pieces against the TimeGuard authors' code (``utils/distances.py``,
``defense_timeguard.py``), on the fixture in tests/data/parity/defend-tsf/ (README there: inputs, the
official outputs, tolerance 1e-6 on distances, the official running in float32). No official code here.

Compared: the Gaussian weights, the time-aware representation (official ``to_euclidean_from_pearson``),
the NDF score and mask (Stage I), the distance to the excluded set (Stage II, from the K_max graph) and
the DRLS pool sizes (the official counts int(N * gamma); ours does too by default, ``round`` as an option)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from icmlkit.lib.defend_tsf import timeguard as tg

DATA = Path(__file__).parent / "data" / "parity" / "defend-tsf"
TOL = 1e-6


@pytest.fixture(scope="module")
def fx():
    z = np.load(DATA / "fixtures.npz")
    raw = torch.as_tensor(z["raw"])
    starts = torch.as_tensor(z["starts"])
    L, H, k_nn, k_max = int(z["L"]), int(z["H"]), int(z["k_nn"]), int(z["K_max"])
    w = tg.gaussian_weights(L, H, 2.0)
    win = tg.channel_windows(raw, starts, L, H)                              # (C, N, L+H)
    rep = torch.stack([tg.weighted_znorm(win[c], w) for c in range(win.shape[0])])
    graph = tg.build_graph(raw, starts, L, H, k_max, 2.0)
    ours = {
        "weights": w.numpy(),
        "euclid": rep.permute(1, 0, 2).numpy(),                              # official layout (N, C, L+H)
        "ndf_score": tg.ndf_score(graph, k_nn).T.numpy(),                    # (N, C)
        "dist_to_excluded": tg.distance_to_excluded(graph, torch.as_tensor(z["pool"]), k_nn).T.numpy(),
    }
    return z, graph, ours


def _diff(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    fin = np.isfinite(b)
    assert (np.isfinite(a) == fin).all()                                    # the inf pattern is identical
    return float(np.max(np.abs(a[fin] - b[fin])))


@pytest.mark.parametrize("key", ["weights", "euclid", "ndf_score", "dist_to_excluded"])
def test_distances_match_official(fx, key):
    z, _, ours = fx
    assert _diff(ours[key], z[f"official_{key}"]) < TOL


def test_parity_detects_a_1e3_change(fx):
    z, _, ours = fx
    for key, v in ours.items():
        assert _diff(np.asarray(v) + 1e-3, z[f"official_{key}"]) > TOL, key


def test_ndf_mask_is_the_official_selection(fx):
    """Stage I NDF: the official keeps the last int(N * alpha) windows of an ascending argsort."""
    z, graph, _ = fx
    alpha, N = float(z["alpha"]), len(z["starts"])
    score = np.asarray(z["official_ndf_score"], dtype=np.float64)           # (N, C)
    k = int(N * alpha)
    for counting in ("floor", "round"):
        mask = tg.ndf_mask(graph, int(z["k_nn"]), alpha, counting).numpy()
        assert mask.sum(1).tolist() == [tg.pool_size(alpha, N, counting)] * mask.shape[0]
    mask = tg.ndf_mask(graph, int(z["k_nn"]), alpha).numpy()               # default: floor, the official count
    for c in range(mask.shape[0]):
        official = set(np.argsort(score[:, c], kind="stable")[-k:].tolist())
        assert set(np.flatnonzero(mask[c]).tolist()) == official


def test_drls_pool_sizes_official_floor_and_round_option(fx):
    """results.json: official pool sizes 345 / 603 / 864 cells at gamma 0.2 / 0.35 / 0.5; ours rounded
    gave 345 / 606 / 864. The default (floor) now gives the official sizes; ``round`` keeps ours."""
    z, graph, _ = fx
    res = json.loads((DATA / "results.json").read_text())
    loss, pool = torch.as_tensor(z["loss"]).T.contiguous(), torch.as_tensor(z["pool"])
    for gamma in ("0.2", "0.35", "0.5"):
        official_size, round_size = res[f"drls_pool_size_official_ours_gamma{gamma}"]
        floor = tg.drls_pool(loss, graph, pool, float(gamma), 2.0, int(z["k_nn"]))
        rnd = tg.drls_pool(loss, graph, pool, float(gamma), 2.0, int(z["k_nn"]), counting="round")
        assert int(floor.sum()) == official_size
        assert int(rnd.sum()) == round_size
        # every kept window is a candidate: among the top int(N min(pi gamma, 1)) by distance to the excluded set
        dist = tg.distance_to_excluded(graph, pool, int(z["k_nn"]))
        n_cand = tg.pool_size(min(2.0 * float(gamma), 1.0), loss.shape[1])
        for c in range(loss.shape[0]):
            cand = set(torch.sort(-dist[c], stable=True).indices[:n_cand].tolist())
            assert set(torch.nonzero(floor[c]).flatten().tolist()) <= cand
