"""metric-match: the low-rank loss identity, the r x r eigen route, learned tangents of a plane, the kNN
baseline's tangent and factor-2 convention, h-dependence, bad inputs, --resume, torchrun, fuzzing."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import BIN, Interrupted, exe, run_tool
from fuzzing import FuzzCase, MismatchCase, check_malformed, run_inprocess
from icmlkit.lib.core.io import write_npz
from icmlkit.lib.metric_match.api import evaluate, interpolate, knn_query, query
from icmlkit.lib.metric_match.config import (EvalConfig, GenerateConfig, InterpolateConfig, KnnConfig, QueryConfig,
                                       TrainConfig)
from icmlkit.lib.metric_match.core import eig_route, local_dimension, lowrank_loss, naive_loss, projector_error
from icmlkit.lib.metric_match.data import Points
from icmlkit.lib.metric_match.generate import generate, resolve_skdim
from icmlkit.lib.metric_match.knn import knn_cdc
from icmlkit.lib.metric_match.model import load_model, model_bytes, save_model
from icmlkit.lib.metric_match.train import train

TOOL = "metric-match"
TINY = dict(steps=300, batch=128, rank=3, width=32, blocks=1, emb=8, lr=3e-3, h_min=0.01, h_max=4.0)


def plane(n=1500, D=4, seed=0):
    """Points of a 2-D plane (a random orthonormal pair of R^D), uniform in [-1, 1]^2."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((D, 2)))
    uv = rng.uniform(-1, 1, (n, 2))
    return uv @ Q.T, Q.T


@pytest.fixture(scope="module")
def plane_model(tmp_path_factory):
    x, basis = plane()
    res = train(TrainConfig(**TINY), Points(x, "plane"), seed=0)
    folder = tmp_path_factory.mktemp("plane")
    save_model(folder / "m.safetensors", res.model)
    write_npz(folder / "pts.npz", points=x[:200])
    write_npz(folder / "test.npz", points=x[:100], tangent=np.repeat(basis[None], 100, 0),
              dim=np.full(100, 2))
    np.savetxt(folder / "pts.csv", x[:50], delimiter=",")
    return {"model": res.model, "x": x, "basis": basis, "dir": folder, "res": res}


# ----------------------------------------------------------------------------------------- the math


@pytest.mark.parametrize("lam", [0.0, 0.3])
def test_lowrank_loss_equals_the_naive_frobenius_loss(lam):
    g = torch.Generator().manual_seed(0)
    for B, r, D in [(7, 3, 5), (4, 6, 2), (3, 1, 9)]:
        M = torch.randn(B, r, D, generator=g, dtype=torch.float64)
        delta = torch.randn(B, D, generator=g, dtype=torch.float64)
        a, b = lowrank_loss(M, delta, lam), naive_loss(M, delta, lam)
        assert abs(float(a - b)) <= 1e-10 * max(1.0, abs(float(b))), (float(a), float(b))


def test_eig_route_equals_a_dense_eigh():
    g = torch.Generator().manual_seed(1)
    M = torch.randn(5, 3, 6, generator=g, dtype=torch.float64)
    lam, V = eig_route(M)
    dense = torch.linalg.eigvalsh(M.transpose(-1, -2) @ M).flip(-1)
    assert torch.allclose(lam, dense[:, :3], atol=1e-10)
    assert dense[:, 3:].abs().max() < 1e-10
    # eigenvectors: orthonormal and Gamma v = lam v
    assert torch.allclose(V @ V.transpose(-1, -2), torch.eye(3, dtype=torch.float64).expand(5, 3, 3), atol=1e-10)
    gamma = M.transpose(-1, -2) @ M
    assert torch.allclose(gamma @ V.transpose(-1, -2), V.transpose(-1, -2) * lam[:, None, :], atol=1e-9)
    # the top-2 projector equals the dense one
    w, U = torch.linalg.eigh(gamma)
    top = U[:, :, -2:].transpose(-1, -2)
    assert float(projector_error(V[:, :2], top).max()) < 1e-8


def test_local_dimension_rules():
    spec = torch.tensor([[0.5, 0.49, 0.02, 0.0], [0.5, 0.01, 0.0, 0.0], [0.5, 0.5, 0.5, 0.48]])
    assert local_dimension(spec).tolist() == [2, 1, 4]
    assert local_dimension(spec, "threshold", 0.5).tolist() == [2, 1, 4]
    assert local_dimension(spec, "threshold", 0.99).tolist() == [1, 1, 3]


def test_generated_geometry_is_exact():
    out = generate("sphere", GenerateConfig(n=200, d=3, ambient=7, rotate=True), seed=3)["arrays"]
    x, T = out["points"], out["tangent"]
    assert x.shape == (200, 7) and T.shape == (200, 3, 7)
    assert np.allclose(np.linalg.norm(x, axis=1), 1)
    assert np.allclose(np.einsum("nid,njd->nij", T, T), np.eye(3), atol=1e-10)
    assert np.abs(np.einsum("nid,nd->ni", T, x)).max() < 1e-10  # tangent to the sphere
    # the rotation depends on D alone: another seed lies on the same 3-sphere
    other = generate("sphere", GenerateConfig(n=50, d=3, ambient=7, rotate=True), seed=4)["arrays"]["points"]
    span = np.linalg.svd(np.vstack([x, other]), compute_uv=False)
    assert span[4] < 1e-10
    for kind in ("squiggly-circle", "torus", "swiss-roll"):
        o = generate(kind, GenerateConfig(n=100), seed=0)["arrays"]
        t = o["tangent"]
        assert np.allclose(np.einsum("nid,njd->nij", t, t), np.eye(t.shape[1]), atol=1e-10)
        # finite-difference check of the tangent: nearby points differ along it (torus, squiggly)
    assert resolve_skdim("M13b") == "M13b_Spiral" and resolve_skdim("M1") == "M1_Sphere"


def test_knn_on_a_dense_circle_gives_its_tangent_and_the_factor_two():
    t = np.linspace(0, 2 * np.pi, 4000, endpoint=False)
    data = np.stack([np.cos(t), np.sin(t)], 1)
    q = data[::400]
    lam, V = knn_cdc(torch.as_tensor(data), torch.as_tensor(q), k=256, h=0.02)
    tangent = np.stack([-np.sin(t[::400]), np.cos(t[::400])], 1)
    assert np.abs(np.abs((V[:, 0].numpy() * tangent).sum(1)) - 1).max() < 1e-3
    # kernel convention: Gamma = sum w (y - x)(y - x)^T / h^2 -> tangent eigenvalue 1, i.e. twice the
    # metric-matching target E[(X - Y)(X - Y)^T / 2h^2] (1/2); --halve gives 1/2
    assert np.allclose(lam[:, 0].numpy(), 1.0, atol=0.05), lam[:, 0]
    assert lam[:, 1].max() < 0.01
    lam2, _ = knn_cdc(torch.as_tensor(data), torch.as_tensor(q), k=256, h=0.02, halve=True)
    assert np.allclose(lam2.numpy(), lam.numpy() / 2)
    # the point itself is excluded: the same answer as the kNN of points off the data set's grid
    lam3, _ = knn_cdc(torch.as_tensor(data), torch.as_tensor(q), k=256, h=0.02, exclude_self=False)
    assert not np.allclose(lam3.numpy(), lam.numpy())


# ----------------------------------------------------------------------------------------- learning


def test_learned_gamma_of_a_plane_spans_the_plane(plane_model):
    m, x, basis = plane_model["model"], plane_model["x"], plane_model["basis"]
    pts = Points(x[:200], "pts")
    q = query(m, pts, QueryConfig(h=0.05, what="tangent", dim=2))
    T = torch.as_tensor(q.arrays["tangent"])
    err = projector_error(T, torch.as_tensor(basis).expand(len(T), 2, 4))
    assert float(err.mean()) < 0.25, float(err.mean())
    # the target is about 1/2 on the plane and 0 across it
    spec = q.arrays["spectrum"]
    assert spec[:, 2].mean() < 0.25 * spec[:, 0].mean()
    assert q.summary["median_local_dim"] == 2


def test_outputs_change_with_h(plane_model):
    m = plane_model["model"]
    pts = Points(plane_model["x"][:50] + 0.05, "pts")
    a = query(m, pts, QueryConfig(h=0.02, what="metric")).arrays["spectrum"]
    b = query(m, pts, QueryConfig(h=2.0, what="metric")).arrays["spectrum"]
    assert np.abs(a - b).max() > 1e-2


def test_gradient_is_gamma_times_the_direction(plane_model):
    m = plane_model["model"]
    pts = Points(plane_model["x"][:20], "pts")
    v = "1,2,-1,0.5"
    g = query(m, pts, QueryConfig(h=0.05, what="gradient", direction=v)).arrays["gradient"]
    M = m.factor(torch.as_tensor(m.standardise(pts.x)), 0.05)
    dense = (M.transpose(-1, -2) @ M).numpy() @ np.array([1, 2, -1, 0.5])
    assert np.allclose(g, dense, atol=1e-10)
    # intrinsic: the gradient lies (mostly) in the plane
    basis = plane_model["basis"]
    inplane = g @ basis.T @ basis
    assert np.linalg.norm(g - inplane) < 0.3 * np.linalg.norm(g)


def test_interpolation_stays_on_the_plane(plane_model):
    m, x, basis = plane_model["model"], plane_model["x"], plane_model["basis"]
    r = interpolate(m, Points(x[:5], "a"), Points(x[5:10], "b"), InterpolateConfig(h=0.05, steps=12))
    P = r.arrays["path"]
    assert P.shape == (5, 12, 4)
    off = P - (P @ basis.T) @ basis
    assert np.abs(off).max() < 0.2
    assert r.summary["median_end_gap"] < 0.3
    assert np.allclose(r.arrays["linear"][:, 0], x[:5]) and np.allclose(r.arrays["linear"][:, -1], x[5:10])


def test_eval_with_the_knn_baseline(plane_model):
    folder = plane_model["dir"]
    test = Points(plane_model["x"][:100], "test", arrays={"tangent": np.repeat(plane_model["basis"][None], 100, 0)})
    r = evaluate(plane_model["model"], test, EvalConfig(h_grid="0.05,0.2", knn_k="16,32"),
                 Points(plane_model["x"], "data"))
    s = r.summary
    assert s["knn_projector_error"] is not None and s["knn_projector_error"] < 0.1
    assert s["h"] in (0.05, 0.2) and s["knn_k"] in (16, 32)
    assert len(r.rows) == 2 + 4
    assert folder.exists()


def test_resume_gives_the_same_bytes(tmp_path, interrupting_checkpointer):
    x, _ = plane(400)
    cfg = TrainConfig(**{**TINY, "steps": 30})
    full = train(cfg, Points(x, "p"), seed=2)
    with pytest.raises(Interrupted):
        train(cfg, Points(x, "p"), seed=2, checkpointer=interrupting_checkpointer(tmp_path / "c.pt", every=10))
    ck = interrupting_checkpointer(tmp_path / "c.pt", every=0, resume=True)
    resumed = train(cfg, Points(x, "p"), seed=2, checkpointer=ck)
    assert model_bytes(full.model) == model_bytes(resumed.model)
    assert full.rows == resumed.rows


def test_centred_variant_trains_a_denoiser(tmp_path):
    x, basis = plane(400)
    res = train(TrainConfig(**{**TINY, "steps": 40, "centred": True, "denoiser_steps": 20}), Points(x, "p"))
    assert res.model.denoiser is not None and res.summary["denoiser_steps"] == 20
    save_model(tmp_path / "c.safetensors", res.model)
    back = load_model(tmp_path / "c.safetensors")
    assert back.denoiser is not None and model_bytes(back) == model_bytes(res.model)
    assert {r[1] for r in res.rows} == {"denoiser", "metric"}


def test_rank_below_2d_minus_1_warns(caplog):
    x, _ = plane(100)
    with caplog.at_level("WARNING", logger="icmlkit"):
        train(TrainConfig(**{**TINY, "steps": 2, "rank": 2, "dim": 2}), Points(x, "p"))
    assert any("2d - 1" in r.getMessage() for r in caplog.records)


# ----------------------------------------------------------------------------------------- the CLI


def test_cli_pipeline_and_same_seed_same_bytes(tmp_path):
    g = run_tool(TOOL, "generate", "torus", "--n", "300", "-o", tmp_path / "t.npz", "--json")
    assert g.returncode == 0, g.stderr
    assert json.loads(g.stdout) == {"kind": "torus", "n": 300, "D": 3, "d": 2, "noise": 0.0, "exact_tangents": True}
    opts = ["--steps", "20", "--batch", "64", "--rank", "3", "--width", "16", "--blocks", "1", "--emb", "4",
            "--checkpoint-every", "0"]
    a = run_tool(TOOL, "train", tmp_path / "t.npz", "-o", tmp_path / "a.safetensors", *opts, "--json")
    assert a.returncode == 0, a.stderr
    s = json.loads(a.stdout)
    assert s["rank"] == 3 and s["D"] == 3 and s["world_size"] == 1
    b = run_tool(TOOL, "train", tmp_path / "t.npz", "-o", tmp_path / "b.safetensors", *opts)
    assert b.returncode == 0, b.stderr
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()
    assert (tmp_path / "a.loss.csv").read_text().startswith("step,stage,loss,lr")
    q = run_tool(TOOL, "query", tmp_path / "a.safetensors", tmp_path / "t.npz", "--h", "0.1", "--what", "dim",
                 "--shard", "2/3", "-o", tmp_path / "q.npz", "--json")
    assert q.returncode == 0, q.stderr
    qs = json.loads(q.stdout)
    assert {"n", "D", "rank", "h", "median_local_dim", "seconds", "queries_per_s"} <= set(qs)
    assert qs["n"] == 100
    z = np.load(tmp_path / "q.npz")
    assert z["index"].tolist() == list(range(100, 200)) and z["spectrum"].shape == (100, 3)
    k = run_tool(TOOL, "knn", tmp_path / "t.npz", tmp_path / "t.npz", "--k", "16", "--h", "0.1", "--json")
    assert k.returncode == 0 and json.loads(k.stdout)["k"] == 16
    e = run_tool(TOOL, "eval", tmp_path / "a.safetensors", tmp_path / "t.npz", "--h-grid", "0.1",
                 "--data", tmp_path / "t.npz", "--knn-k", "16", "--json")
    assert e.returncode == 0, e.stderr
    es = json.loads(e.stdout)
    assert {"projector_error", "knn_projector_error", "dim_accuracy", "h", "knn_k", "knn_h"} <= set(es)


def test_help_and_bad_flag():
    r = run_tool(TOOL, "--help")
    assert r.returncode == 0 and "Example" in r.stdout and "[reconstructed]" in r.stdout
    r = run_tool(TOOL, "query", "--no-such-flag")
    assert r.returncode == 2


def test_bad_inputs_exit_as_stated(plane_model, tmp_path, capsys):
    d = plane_model["dir"]
    model, pts = str(d / "m.safetensors"), str(d / "pts.npz")
    out = tmp_path / "o.npz"
    # h outside the trained range [0.01, 4]: exit 2 naming --h and the range
    code, _, err = run_inprocess(TOOL, ["query", model, pts, "--h", "9", "-o", str(out)], capsys)
    assert code == 2 and "--h" in err and "[0.01, 4]" in err and not out.exists()
    code, _, err = run_inprocess(TOOL, ["interpolate", model, pts, pts, "--h", "0.001", "-o", str(out)], capsys)
    assert code == 2 and "[0.01, 4]" in err and not out.exists()
    # D differing from the model's: exit 1 naming the file
    write_npz(tmp_path / "d5.npz", points=np.zeros((3, 5)))
    code, _, err = run_inprocess(TOOL, ["query", model, str(tmp_path / "d5.npz"), "--h", "0.1", "-o", str(out)], capsys)
    assert code == 1 and "d5.npz" in err and "D = 5" in err and "D = 4" in err and not out.exists()
    # NaN rows: exit 1 naming the file and the row
    bad = np.zeros((4, 4))
    bad[2, 1] = np.nan
    write_npz(tmp_path / "nan.npz", points=bad)
    code, _, err = run_inprocess(TOOL, ["query", model, str(tmp_path / "nan.npz"), "--h", "0.1", "-o", str(out)],
                                 capsys)
    assert code == 1 and "nan.npz" in err and "row 2" in err and not out.exists()
    (tmp_path / "nan.csv").write_text("1,2,3,4\n1,nan,3,4\n")
    code, _, err = run_inprocess(TOOL, ["train", str(tmp_path / "nan.csv"), "-o", str(tmp_path / "x.safetensors")],
                                 capsys)
    assert code == 1 and "nan.csv, line 2" in err and not (tmp_path / "x.safetensors").exists()
    # rank < 1: exit 2 naming --rank and the allowed range
    code, _, err = run_inprocess(TOOL, ["train", pts, "--rank", "0", "-o", str(tmp_path / "x.safetensors")], capsys)
    assert code == 2 and "--rank" in err and ">=1" in err.replace(" ", "")
    assert not (tmp_path / "x.safetensors").exists()


def test_interpolate_png_for_an_image_model(tmp_path):
    rng = np.random.default_rng(0)
    imgs = rng.uniform(0, 1, (60, 4, 5))
    write_npz(tmp_path / "imgs.npz", images=imgs)
    r = run_tool(TOOL, "train", tmp_path / "imgs.npz", "-o", tmp_path / "m.safetensors", "--steps", "5", "--batch", "32",
                 "--rank", "4", "--width", "16", "--blocks", "1", "--emb", "4")
    assert r.returncode == 0, r.stderr
    write_npz(tmp_path / "a.npz", images=imgs[:2])
    write_npz(tmp_path / "b.npz", images=imgs[2:4])
    r = run_tool(TOOL, "interpolate", tmp_path / "m.safetensors", tmp_path / "a.npz", tmp_path / "b.npz",
                 "--h", "0.5", "--steps", "6", "-o", tmp_path / "p.png", "--json")
    assert r.returncode == 0, r.stderr
    from PIL import Image

    with Image.open(tmp_path / "p.png") as im:
        assert im.size == (6 * 5, 2 * 4)


def image_plane(n=1500, side=2, seed=0):
    """Images on a 2-D plane of R^{side x side}: a I_1 + b I_2 for two fixed orthonormal images (2 x 2
    images: the plane test's D = 4; at D = 64 neither network learns it in a test's few steps)."""
    x, basis = plane(n, side * side, seed)
    return x.reshape(n, side, side), basis


def test_unet_learns_the_plane_of_an_image_set():
    """The small UNet (chosen by --net auto for an image set) learns Gamma whose top-2 eigenvectors
    span the images' plane, as the MLP does for points."""
    imgs, basis = image_plane()
    cfg = TrainConfig(**{**TINY, "steps": 600, "net": "auto", "channels": 8})
    res = train(cfg, Points(imgs.reshape(len(imgs), -1), "imgs", image_shape=(2, 2)), seed=0)
    m = res.model
    assert m.config["arch"]["kind"] == "unet" and m.net.kind == "unet"
    q = query(m, Points(imgs[:200].reshape(200, -1), "pts"), QueryConfig(h=0.05, what="tangent", dim=2))
    err = projector_error(torch.as_tensor(q.arrays["tangent"]), torch.as_tensor(basis).expand(200, 2, 4))
    assert float(err.mean()) < 0.35, float(err.mean())  # a random 2-plane of R^4 scores about 1.4
    assert q.summary["median_local_dim"] == 2


def test_unet_model_round_trip_and_net_choice(tmp_path, capsys):
    rng = np.random.default_rng(1)
    imgs = rng.uniform(0, 1, (40, 6, 5, 3))
    pts = Points(imgs.reshape(40, -1), "imgs", image_shape=(6, 5, 3))
    res = train(TrainConfig(**{**TINY, "steps": 4, "centred": True, "denoiser_steps": 3, "channels": 8}), pts, seed=0)
    save_model(tmp_path / "u.safetensors", res.model)
    back = load_model(tmp_path / "u.safetensors")
    assert back.net.kind == "unet" and back.denoiser is not None and back.denoiser.kind == "unet"
    y = torch.as_tensor(res.model.standardise(pts.x[:5]))
    assert torch.equal(res.model.factor(y, 0.3), back.factor(y, 0.3))
    assert model_bytes(back) == model_bytes(res.model)
    # --net mlp on images keeps the MLP; --net unet on points is a usage error (exit 2, no output)
    mlp = train(TrainConfig(**{**TINY, "steps": 2, "net": "mlp"}), pts, seed=0).model
    assert mlp.net.kind == "mlp" and mlp.config["arch"]["kind"] == "mlp"
    write_npz(tmp_path / "p.npz", points=rng.normal(size=(20, 4)))
    out = tmp_path / "x.safetensors"
    code, _, err = run_inprocess(TOOL, ["train", str(tmp_path / "p.npz"), "--net", "unet", "-o", str(out)], capsys)
    assert code == 2 and "--net unet" in err and not out.exists()


def test_torchrun_two_processes_match_one(tmp_path):
    torchrun = BIN / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun not installed")
    x, _ = plane(200)
    np.save(tmp_path / "p.npy", x)
    opts = ["train", str(tmp_path / "p.npy"), "--steps", "6", "--batch", "32", "--rank", "3", "--width", "16",
            "--blocks", "1", "--emb", "4", "--precision", "float64", "--device", "cpu", "--checkpoint-every", "0",
            "--json", "--no-progress"]
    one = run_tool(TOOL, *opts, "-o", tmp_path / "one.safetensors")
    assert one.returncode == 0, one.stderr
    env = {**os.environ, "ICMLKIT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}
    two = subprocess.run([str(torchrun), "--nproc_per_node", "2", "--standalone", exe(TOOL), *opts,
                          "-o", str(tmp_path / "two.safetensors")], capture_output=True, text=True, timeout=300,
                         env=env, cwd=tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    assert json.loads(two.stdout)["world_size"] == 2
    a, b = load_model(tmp_path / "one.safetensors"), load_model(tmp_path / "two.safetensors")
    sa, sb = a.net.state_dict(), b.net.state_dict()
    assert max(float((sa[k] - sb[k]).abs().max()) for k in sa) <= 1e-6
    man = json.loads((tmp_path / "two.safetensors.manifest.json").read_text())
    assert man["distributed"] == {"world_size": 2, "backend": "gloo"}


def test_demo_runs(tmp_path, capsys):
    code, out, err = run_inprocess(TOOL, ["demo", "--outdir", str(tmp_path / "demo"), "--steps", "20", "--json"], capsys)
    assert code == 0, err
    s = json.loads(out)
    assert {"projector_error", "knn_projector_error", "dim_accuracy", "headline"} <= set(s)
    assert (tmp_path / "demo" / "model.safetensors").exists() and (tmp_path / "demo" / "manifest.json").exists()


# ----------------------------------------------------------------------------------------- fuzzing


def _model(base: Path) -> dict:
    x, _ = plane(100)
    res = train(TrainConfig(**{**TINY, "steps": 2}), Points(x, "p"))
    save_model(base / "m.safetensors", res.model)
    write_npz(base / "pts.npz", points=x[:10])
    write_npz(base / "test.npz", points=x[:10], dim=np.full(10, 2))
    return {"model": base / "m.safetensors", "pts": base / "pts.npz", "test": base / "test.npz"}


POINT_KINDS = ("missing", "empty", "binary", "folder", "wrong_csv", "nan_csv", "garbage_npz")
NPZ_KINDS = ("missing", "empty", "binary", "folder", "garbage_npz", "garbage_pt")
MODEL_KINDS = ("missing", "empty", "binary", "folder", "garbage_pt", "truncated_json")
CASES = [
    FuzzCase("train", ["train", "{bad}", "-o", "{out}/m.safetensors", "--steps", "2"], ".csv", POINT_KINDS),
    FuzzCase("train", ["train", "{bad}", "-o", "{out}/m.safetensors", "--steps", "2"], ".npz", NPZ_KINDS),
    FuzzCase("train", ["train", "{bad}", "-o", "{out}/m.safetensors", "--steps", "2"], ".npy", NPZ_KINDS),
    FuzzCase("query", ["query", "{bad}", "{pts}", "--h", "0.1", "-o", "{out}/q.npz"], ".safetensors", MODEL_KINDS,
             setup=_model, label="model"),
    FuzzCase("query", ["query", "{model}", "{bad}", "--h", "0.1", "-o", "{out}/q.npz"], ".csv", POINT_KINDS,
             setup=_model, label="points"),
    FuzzCase("knn", ["knn", "{bad}", "{pts}", "-o", "{out}/k.npz"], ".npz", NPZ_KINDS, setup=_model, label="data"),
    FuzzCase("knn", ["knn", "{pts}", "{bad}", "-o", "{out}/k.npz"], ".csv", POINT_KINDS, setup=_model,
             label="points"),
    FuzzCase("interpolate", ["interpolate", "{bad}", "{pts}", "{pts}", "--h", "0.1", "-o", "{out}/p.npz"],
             ".safetensors", MODEL_KINDS, setup=_model, label="model"),
    FuzzCase("interpolate", ["interpolate", "{model}", "{bad}", "{pts}", "--h", "0.1", "-o", "{out}/p.npz"],
             ".npz", NPZ_KINDS, setup=_model, label="a"),
    FuzzCase("interpolate", ["interpolate", "{model}", "{pts}", "{bad}", "--h", "0.1", "-o", "{out}/p.npz"],
             ".csv", POINT_KINDS, setup=_model, label="b"),
    FuzzCase("eval", ["eval", "{bad}", "{test}", "-o", "{out}/e.csv"], ".safetensors", MODEL_KINDS, setup=_model,
             label="model"),
    FuzzCase("eval", ["eval", "{model}", "{bad}", "-o", "{out}/e.csv"], ".npz", NPZ_KINDS, setup=_model,
             label="testset"),
    FuzzCase("eval", ["eval", "{model}", "{bad}", "-o", "{out}/e.csv"], ".csv", POINT_KINDS, setup=_model,
             label="testset-csv"),
    FuzzCase("eval", ["eval", "{model}", "{test}", "--data", "{bad}", "-o", "{out}/e.csv"], ".npz", NPZ_KINDS,
             setup=_model, label="data"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed(TOOL, case, tmp_path, capsys)


def _points_of_other_d(base: Path) -> dict:
    """The tiny model of a plane in D = 4 and points, a test set and data in D = 5."""
    x, _ = plane(10, D=5)
    write_npz(base / "d5.npz", points=x)
    write_npz(base / "test5.npz", points=x, dim=np.full(10, 2))
    return {**_model(base), "d5": base / "d5.npz", "test5": base / "test5.npz"}


# issue 59 (tests/test_mismatch_sweep.py): points of another ambient dimension than the model's are refused
_D = ("the model was trained on D = 4", "D = 5")
MISMATCH = [
    MismatchCase("query", ["query", "{model}", "{d5}", "--h", "0.1", "-o", "{out}/q.npz"], _points_of_other_d,
                 ("d5.npz", *_D), "points"),
    MismatchCase("interpolate", ["interpolate", "{model}", "{d5}", "{pts}", "--h", "0.1", "-o", "{out}/p.npz"],
                 _points_of_other_d, ("d5.npz", *_D), "a"),
    MismatchCase("eval", ["eval", "{model}", "{test5}", "-o", "{out}/e.csv"], _points_of_other_d,
                 ("test5.npz", *_D), "testset"),
    MismatchCase("eval", ["eval", "{model}", "{test}", "--data", "{d5}", "-o", "{out}/e.csv"], _points_of_other_d,
                 ("d5.npz", *_D), "data"),
]


def test_wrong_shapes_are_refused(tmp_path, capsys):
    base = tmp_path
    named = _model(base)
    write_npz(base / "one_d.npz", points=np.zeros(5))
    write_npz(base / "tan.npz", points=np.zeros((10, 4)), tangent=np.zeros((3, 2, 4)))
    write_npz(base / "strs.npz", points=np.array([["a", "b"]]))
    for argv in (["train", str(base / "one_d.npz"), "-o", str(base / "o.safetensors")],
                 ["train", str(base / "strs.npz"), "-o", str(base / "o.safetensors")],
                 ["eval", str(named["model"]), str(base / "tan.npz")],
                 ["eval", str(named["model"]), str(named["pts"])]):
        code, _, err = run_inprocess(TOOL, argv, capsys)
        assert code == 1 and err.startswith("Error:") and "Traceback" not in err, (argv, err)
    assert not (base / "o.safetensors").exists()


# ------------------------------------------------------------------ issue 53: h embedding, weak eigen-gap

def test_log_h_frequencies_are_bounded_and_old_files_keep_theirs():
    from icmlkit.lib.metric_match.config import H_FREQ_MAX
    from icmlkit.lib.metric_match.core import log_h_frequencies
    from icmlkit.lib.metric_match.model import build_nets

    f = log_h_frequencies(32)
    assert float(f.max()) == pytest.approx(H_FREQ_MAX) and float(f.min()) == pytest.approx(1 / 8)
    assert torch.allclose(f[1:] / f[:-1], f[1:2] / f[:1])                  # geometric
    assert torch.equal(log_h_frequencies(8), 2.0 ** torch.arange(8, dtype=torch.float64) / 8)  # below the bound
    assert float(log_h_frequencies(32, None).max()) == pytest.approx(2 ** 31 / 8)  # the former rule: 2.7e8
    assert float(log_h_frequencies(16, 4.0).max()) == pytest.approx(4.0)
    arch = {"width": 8, "blocks": 1, "emb": 32, "kind": "mlp", "channels": 4}
    old, _ = build_nets({"D": 3, "rank": 2, "arch": arch}, seed=0)          # a file written before the bound
    new, _ = build_nets({"D": 3, "rank": 2, "arch": {**arch, "h_freq_max": 8.0}}, seed=0)
    assert old.mlp.h_freq_max is None and new.mlp.h_freq_max == 8.0
    h = torch.tensor([0.1, 0.1 * (1 + 1e-6)])
    y = torch.zeros(2, 3)
    # the unbounded embedding swings by O(1) for a 1e-6 change of h; the bounded one does not
    assert (old(y, h)[0] - old(y, h)[1]).abs().max() > 100 * (new(y, h)[0] - new(y, h)[1]).abs().max()


def test_train_records_h_freq_max(tmp_path):
    x, _ = plane(100)
    res = train(TrainConfig(**{**TINY, "steps": 2, "h_freq_max": 4.0}), Points(x, "p"))
    save_model(tmp_path / "m.safetensors", res.model)
    m = load_model(tmp_path / "m.safetensors")
    assert m.config["arch"]["h_freq_max"] == 4.0 and m.net.mlp.h_freq_max == 4.0


def _spectrum_rows(vals, n=20):
    lam = torch.tensor([vals] * n, dtype=torch.float64)
    V = torch.eye(len(vals), dtype=torch.float64)[None].expand(n, -1, -1)
    return lam, V


def test_tangent_without_dim_refuses_a_weak_eigengap():
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.metric_match.api import _outputs
    from icmlkit.lib.metric_match.core import eigengap_strength

    # the plain S^4 model's shape: 4 tangent ~0.5, the radial one 0.3, normals 0.005
    weak, V = _spectrum_rows([0.5, 0.5, 0.5, 0.5, 0.3, 0.005, 0.005, 0.005])
    ratio, alt = eigengap_strength(weak)
    assert float(ratio[0]) == pytest.approx(0.295 / 0.2) and int(alt[0]) == 4
    with pytest.raises(UsageError, match="eigen-gap is weak.*d = 5 and d = 4.*--dim"):
        _outputs("tangent", weak, V, QueryConfig(what="tangent"), 8)
    arrays, extra = _outputs("tangent", weak, V, QueryConfig(what="tangent", dim=4), 8)   # --dim: no check
    assert arrays["tangent"].shape == (20, 4, 8) and extra["eigengap_ratio"] == pytest.approx(1.475)
    _outputs("tangent", weak, V, QueryConfig(what="tangent", dim_rule="threshold"), 8)    # a chosen rule
    arrays, extra = _outputs("tangent", weak, V, QueryConfig(what="tangent"), 8, refuse_weak=False)  # knn: warns
    assert arrays["tangent"].shape == (20, 5, 8) and extra["eigengap_ratio"] < 2
    _outputs("dim", weak, V, QueryConfig(what="dim"), 8)                                 # not a tangent
    clean, V = _spectrum_rows([0.5, 0.5, 0.5, 0.5, 0.03, 0.005, 0.005, 0.005])
    arrays, extra = _outputs("tangent", clean, V, QueryConfig(what="tangent"), 8)
    assert extra["d"] == 4 and extra["eigengap_ratio"] > 10
    one, V = _spectrum_rows([0.5])
    assert _outputs("tangent", one, V, QueryConfig(what="tangent"), 1)[1]["eigengap_ratio"] == float("inf")
