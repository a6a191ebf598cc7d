"""Parity: metric-match's core against the official code (jacobbamb/metric-matching @ 0859395, MIT, run
in a scratch folder; fixture in tests/data/parity/metric-match/, see its README). Tolerance 1e-10 in
float64 (1e-6 for the kNN carre du champ: the official softmax runs in float32).

By design: with a Tikhonov term ours keeps the constant (-2 lambda |delta|^2 + lambda^2 D) / D^2 so that
the loss equals the naive D x D Frobenius loss; the gradient is the official one (pinned below)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from icmlkit.lib.metric_match.config import TrainConfig
from icmlkit.lib.metric_match.core import eig_route, lowrank_loss, naive_loss, projector_error
from icmlkit.lib.metric_match.generate import _embed, sphere
from icmlkit.lib.metric_match.knn import knn_cdc, knn_neighbours
from icmlkit.lib.metric_match.train import sample_h

FIX = Path(__file__).parent / "data" / "parity" / "metric-match"
TOL = 1e-10


def _load(name: str) -> dict:
    with np.load(FIX / f"{name}.npz") as d:
        return {k: d[k] for k in d.files}


def _proj(basis_cols: np.ndarray) -> np.ndarray:
    """(..., D, d) column bases -> (..., D, D) orthogonal projectors (sign and rotation free)."""
    return basis_cols @ np.swapaxes(basis_cols, -1, -2)


@pytest.mark.parametrize("lam,key", [(0.0, "tik0"), (0.05, "tik005")])
def test_loss_and_gradient(lam, key):
    d = _load("loss")
    M = torch.tensor(d["M"], requires_grad=True)
    delta = torch.tensor(d["delta"])
    loss = lowrank_loss(M, delta, lam)
    loss.backward()
    np.testing.assert_allclose(M.grad.numpy(), d[f"grad_{key}"], rtol=0, atol=TOL)
    D = delta.shape[-1]
    const = float(((-2 * lam * (delta * delta).sum(-1) + lam ** 2 * D) / D ** 2).mean())  # ours keeps it
    assert abs(float(loss.detach()) - (float(d[f"loss_{key}"]) + const)) <= TOL
    if lam:
        assert abs(const) > 1e-3  # the documented difference is real here (4.3e-3)


def test_naive_branch():
    d = _load("loss")
    assert abs(float(naive_loss(torch.tensor(d["M"]), torch.tensor(d["delta"]))) - float(d["naive_mse"])) <= TOL


def test_eig_route_spectrum_and_projectors():
    d = _load("eig")
    lam, V = eig_route(torch.tensor(d["M"]))       # (n, r), (n, r, D) rows, descending
    np.testing.assert_allclose(lam.numpy(), d["evals"], rtol=0, atol=TOL * np.abs(d["evals"]).max())
    ours = np.swapaxes(V.numpy(), -1, -2)           # (n, D, r) columns
    for i in range(ours.shape[-1]):
        np.testing.assert_allclose(_proj(ours[..., i:i + 1]), _proj(d["evecs"][..., i:i + 1]), rtol=0, atol=TOL)
    np.testing.assert_allclose(_proj(ours[..., :3]), _proj(d["tangent_d3"]), rtol=0, atol=TOL)


@pytest.mark.parametrize("k,h", [(16, 0.05), (64, 0.2)])
def test_knn_carre_du_champ(k, h):
    d = _load("knn_cdc")
    data, queries = torch.tensor(d["data"]), torch.tensor(d["queries"])
    _, idx = knn_neighbours(data, queries, k)
    assert [set(r) for r in idx.numpy().tolist()] == [set(r) for r in d[f"idx_k{k}_h{h}"].tolist()]
    lam, U = knn_cdc(data, queries, k, h)           # (n, D) descending, (n, D, D) rows
    G = np.swapaxes(U.numpy(), -1, -2) @ (lam.numpy()[..., None] * U.numpy())
    ref = d[f"cdc_k{k}_h{h}"]
    np.testing.assert_allclose(G, ref, rtol=0, atol=1e-6 * max(1.0, np.abs(ref).max()))
    tangent = np.swapaxes(U.numpy()[:, :2], -1, -2)
    np.testing.assert_allclose(_proj(tangent), _proj(d[f"tangent_k{k}_h{h}"]), rtol=0, atol=1e-6)


class _Fixed:
    """An rng whose standard_normal returns the fixture's points (sphere() normalises them)."""

    def __init__(self, x):
        self.x = x

    def standard_normal(self, shape):
        assert tuple(shape) == self.x.shape
        return self.x.copy()


def test_sphere_tangents_and_projector_metric():
    d = _load("sphere")
    x = d["x"]
    m = int(d["d"])
    pts, tan = sphere(len(x), m, _Fixed(x[:, :m + 1]))
    pts, tan = _embed(pts, tan, x.shape[1], False, None)
    np.testing.assert_allclose(pts, x, rtol=0, atol=TOL)
    ours = np.swapaxes(tan, -1, -2)                 # (n, D, d) columns
    np.testing.assert_allclose(_proj(ours), _proj(d["tangent"]), rtol=0, atol=TOL)
    other = torch.tensor(np.swapaxes(d["other_basis"], -1, -2))
    dist = float(projector_error(torch.tensor(np.swapaxes(d["tangent"], -1, -2)), other).mean())
    assert abs(dist - float(d["mean_projector_distance"])) <= TOL


@pytest.mark.parametrize("bandwidth", ["lognormal", "lognormalwide", "uniform"])
def test_sample_h_same_draws(bandwidth):
    """The same draws to the last bit or two (the README recorded bit-identical; exp's rounding can
    differ by one ulp between builds)."""
    d = _load("sample_h")
    cfg = TrainConfig(bandwidth=bandwidth, h_min=float(d["h_min"]), h_max=float(d["h_max"]))
    gen = torch.Generator().manual_seed(int(d["seed"]))
    h = sample_h(len(d[bandwidth]), cfg, gen).numpy()
    np.testing.assert_allclose(h, d[bandwidth], rtol=1e-14, atol=0)
