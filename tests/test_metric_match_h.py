"""metric-match: the default query h is chosen at training time on a held-out split of the training points
(projector error when the data carry exact tangents, the benchmark's criterion; the chord residual
otherwise), stored in the model, used by query / interpolate without --h; --h overrides it."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import run_tool
from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.core.runtime import generator
from icmlkit.lib.metric_match.api import evaluate, interpolate, query
from icmlkit.lib.metric_match.config import DEFAULT_H_GRID, EvalConfig, InterpolateConfig, QueryConfig, TrainConfig
from icmlkit.lib.metric_match.data import Points
from icmlkit.lib.metric_match.model import load_model, save_model
from icmlkit.lib.metric_match.train import train

TOOL = "metric-match"
TINY = dict(steps=300, batch=128, rank=3, width=32, blocks=1, emb=8, lr=3e-3, h_min=0.01, h_max=4.0)
GRID = [float(h) for h in DEFAULT_H_GRID.split(",")]


def plane(n=1500, D=4, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((D, 2)))
    return rng.uniform(-1, 1, (n, 2)) @ Q.T, Q.T


def held_out(n: int, n_val: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    perm = torch.randperm(n, generator=generator(seed, "validation")).numpy()
    return perm[:n_val], np.sort(perm[n_val:])


@pytest.fixture(scope="module")
def chord_model():
    x, basis = plane()
    return x, basis, train(TrainConfig(**TINY), Points(x, "plane"), seed=0)


def test_default_h_is_chosen_on_the_held_out_split_and_stored(chord_model, tmp_path):
    x, basis, res = chord_model
    s, m = res.summary, res.model
    assert s["n"] == 1200 and s["n_val"] == 300 and s["h_criterion"] == "chord"   # a fifth of 1500, not 500
    assert s["h"] in GRID and m.default_h == s["h"] and m.info["h_selection"]["d"] == 2
    sel = m.info["h_selection"]
    assert sel["scores"][sel["grid"].index(s["h"])] == min(sel["scores"])
    save_model(tmp_path / "m.safetensors", m)
    assert load_model(tmp_path / "m.safetensors").default_h == s["h"]
    pts = Points(x[:50], "pts")
    q = query(m, pts, QueryConfig(what="dim"))
    assert q.summary["h"] == s["h"] and q.summary["h_source"] == "validation"
    q = query(m, pts, QueryConfig(h=0.05, what="dim"))                                 # --h overrides it
    assert q.summary["h"] == 0.05 and q.summary["h_source"] == "given"
    assert interpolate(m, Points(x[:2], "a"), Points(x[2:4], "b"), InterpolateConfig(steps=3)).summary["h"] == s["h"]
    # the chosen h is about as good on test points as the best h of the grid chosen on the test set itself
    test = Points(x[:100], "test", arrays={"tangent": np.repeat(basis[None], 100, 0)})
    rows = evaluate(m, test, EvalConfig(h_grid=DEFAULT_H_GRID)).rows
    err = {r["h"]: r["projector_error"] for r in rows}
    assert err[s["h"]] <= 1.25 * min(err.values()) + 0.01, (s["h"], err)


def test_the_held_out_points_are_never_trained_on(chord_model):
    x, _, res = chord_model
    _, train_idx = held_out(len(x), 300)
    alone = train(TrainConfig(**TINY, val_points=0), Points(x[train_idx], "plane"), seed=0)
    a, b = res.model.net.state_dict(), alone.model.net.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert alone.model.default_h is None and alone.summary["h"] is None and alone.summary["n_val"] == 0
    with pytest.raises(UsageError, match="no validated default h.*--h"):
        query(alone.model, Points(x[:5], "pts"), QueryConfig())


def test_with_exact_tangents_the_criterion_is_the_benchmarks_projector_error():
    x, basis = plane(1000)
    tangent = np.repeat(basis[None], len(x), 0)
    res = train(TrainConfig(**TINY, val_points=150), Points(x, "plane", arrays={"tangent": tangent}), seed=0)
    sel = res.model.info["h_selection"]
    assert sel["criterion"] == "projector" and sel["n_val"] == 150 and sel["d"] == 2
    val_idx, _ = held_out(len(x), 150)
    ev = evaluate(res.model, Points(x[val_idx], "val", arrays={"tangent": tangent[val_idx]}),
                  EvalConfig(h_grid=DEFAULT_H_GRID))
    assert np.allclose([r["projector_error"] for r in ev.rows], sel["scores"], rtol=1e-9, atol=1e-12)
    assert ev.summary["h"] == sel["h"] == res.model.default_h


def test_the_grid_must_meet_the_trained_range():
    with pytest.raises(UsageError, match="--h-grid"):
        TrainConfig(h_min=1.0, h_max=2.0).check()
    TrainConfig(h_min=1.0, h_max=2.0, val_points=0).check()
    with pytest.raises(UsageError, match="--h-grid"):
        TrainConfig(h_grid="0.1,x").check()


def test_cli_train_stores_the_h_and_query_reads_it(tmp_path):
    g = run_tool(TOOL, "generate", "sphere", "--d", "2", "--n", "400", "-o", tmp_path / "s.npz")
    assert g.returncode == 0, g.stderr
    t = run_tool(TOOL, "train", tmp_path / "s.npz", "-o", tmp_path / "m.safetensors", "--steps", "20", "--batch", "64",
                 "--rank", "3", "--width", "16", "--blocks", "1", "--emb", "4", "--val-points", "50", "--json")
    assert t.returncode == 0, t.stderr
    ts = json.loads(t.stdout)
    assert ts["n"] == 350 and ts["n_val"] == 50 and ts["h_criterion"] == "projector" and ts["h"] in GRID
    q = run_tool(TOOL, "query", tmp_path / "m.safetensors", tmp_path / "s.npz", "--what", "dim", "--json")
    assert q.returncode == 0, q.stderr
    qs = json.loads(q.stdout)
    assert qs["h"] == ts["h"] and qs["h_source"] == "validation"
    h = run_tool(TOOL, "train", "--help")
    assert "--val-points" in h.stdout and "--h-grid" in h.stdout and "held-out" in h.stdout
    assert "default query h" in h.stdout
