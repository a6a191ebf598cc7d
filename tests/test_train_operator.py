"""train-operator: the FuncAttn layer's identities, the readers, the solvers, training/resume/torchrun,
the subcommands and their error paths."""
from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
import torch

from conftest import BIN, REPO, Interrupted, exe, run_tool
from fuzzing import FuzzCase, MismatchCase, check_malformed, run_inprocess
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.train_operator.config import DarcyConfig, FewShotConfig, ModelConfig, TrainConfig
from icmlkit.lib.train_operator.data import fieldset, grid_coords, read_fields
from icmlkit.lib.train_operator.nets import (BasisProjection, FuncAttnNet, basis_transform, build_net, functional_map,
                                       functional_map_matrix, primal_map_matrix, unified_pos)

TOOL = "train-operator"
DARCY = REPO / "data" / "darcy"


def js(r):
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# --------------------------------------------------------------------------- the layer


def test_dual_form_equals_the_primal_ridge_map_up_to_one_over_one_minus_alpha():
    g = torch.Generator().manual_seed(0)
    Q = torch.randn(3, 2, 32, 16, generator=g, dtype=torch.float64)
    K = torch.randn(3, 2, 32, 16, generator=g, dtype=torch.float64)
    for a_raw in (0.0, 1e-3, -2.0, 1.5):
        a = torch.tensor(a_raw, dtype=torch.float64)
        alpha = torch.sigmoid(a)
        lam = alpha / (1 - alpha)
        dual = functional_map_matrix(Q, K, a)
        primal = primal_map_matrix(Q, K, lam)
        assert torch.allclose(dual * (1 - alpha), primal, atol=1e-8, rtol=0), a_raw
        assert not torch.allclose(dual, primal, atol=1e-3)  # the factor 1/(1 - alpha) is really there


def test_functional_map_applies_c_without_forming_it_and_solves_in_fp32_under_autocast():
    g = torch.Generator().manual_seed(1)
    Q, K, V = (torch.randn(2, 4, 32, 16, generator=g) for _ in range(3))
    a = torch.zeros(1, 4, 1, 1)
    ref = functional_map_matrix(Q.double(), K.double(), a.double()) @ V.double()
    assert torch.allclose(functional_map(Q, K, V, a).double(), ref, atol=1e-4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = functional_map(Q.bfloat16(), K.bfloat16(), V.bfloat16(), a)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()
    # bf16 inputs, fp32 solve: the error is the inputs' rounding, not an unstable bf16 solve
    assert float((out.double() - ref).abs().max() / ref.abs().max()) < 0.1


def test_rows_of_w_sum_to_one_and_tau_is_clamped():
    torch.manual_seed(0)
    proj = BasisProjection(16, 4, 8)
    W, f = proj(torch.randn(2, 50, 16))
    assert W.shape == (2, 4, 50, 8) and f.shape == (2, 4, 50, 4)
    assert torch.allclose(W.sum(-1), torch.ones(2, 4, 50), atol=1e-6) and (W >= 0).all()
    u = torch.randn(2, 50, 16)
    with torch.no_grad():
        proj.tau.fill_(1e3)
        w_big = proj(u)[0]
        proj.tau.fill_(5.0)
        w_max = proj(u)[0]
        proj.tau.fill_(1e-3)
        w_small = proj(u)[0]
        proj.tau.fill_(0.1)
        w_min = proj(u)[0]
    assert torch.equal(w_big, w_max) and torch.equal(w_small, w_min)  # tau acts as clamp(tau, 0.1, 5)
    lin = proj.lin.weight.detach()  # d_h -> k, orthogonal init: orthonormal columns
    assert torch.allclose(lin.T @ lin, torch.eye(4), atol=1e-5)


def _basis_coefficients(net: FuncAttnNet, s: int) -> tuple[torch.Tensor, torch.Tensor]:
    """T (normalised) and the un-normalised W^T f of the first block for a piecewise-constant field at s x s."""
    coords = torch.as_tensor(grid_coords((s, s)), dtype=torch.float64)
    field = ((coords[:, 0] < 0.5) ^ (coords[:, 1] < 0.3)).double()[None, :, None] * 2.0 - 1.0
    lo, hi = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    feats = unified_pos(coords, lo, hi)
    h = net.pre(torch.cat([feats[None], field], -1))
    blk = net.blocks[0]
    W, f = blk.proj(blk.ln1(h))
    return basis_transform(W, f), torch.einsum("bhnk,bhnd->bhkd", W, f)


@torch.no_grad()
def test_basis_coefficients_of_a_piecewise_constant_field_are_resolution_consistent():
    torch.manual_seed(0)
    net = FuncAttnNet(1, 1, 2, width=16, heads=2, layers=1, bases=8).double()
    T16, raw16 = _basis_coefficients(net, 16)
    T32, raw32 = _basis_coefficients(net, 32)
    T64, _ = _basis_coefficients(net, 64)
    d_16_32 = float((T16 - T32).norm() / T32.norm())
    d_32_64 = float((T32 - T64).norm() / T64.norm())
    assert d_16_32 < 0.1 and d_32_64 < d_16_32  # quadrature error, shrinking with the grid
    ratio = float(raw32.norm() / raw16.norm())
    assert 3.5 < ratio < 4.5  # without diag(1/sum W) the coefficients scale with n


def test_trapezoid_quadrature_makes_t_consistent_across_node_grids_where_the_uniform_sum_drifts():
    from icmlkit.lib.train_operator.nets import quadrature_weights

    def T(s, rule):  # smooth W and f with edge values unlike the interior, on an s x s node grid
        c = torch.as_tensor(grid_coords((s, s)), dtype=torch.float64)
        W = torch.softmax(torch.stack([c[:, 0], c[:, 1], c[:, 0] * c[:, 1]], -1) * 3, -1)[None, None]
        f = (1 + c[:, :1] + torch.cos(3 * c[:, 1:]))[None, None]
        return basis_transform(W, f, quadrature_weights((s, s), rule))

    fine = T(257, "trapezoid")
    err = {rule: float((T(17, rule) - fine).norm() / fine.norm()) for rule in ("uniform", "trapezoid")}
    assert err["trapezoid"] < 0.1 * err["uniform"]
    assert quadrature_weights((5, 5), "uniform") is None and quadrature_weights(None, "trapezoid") is None
    q = quadrature_weights((3, 4), "trapezoid").reshape(3, 4)
    assert torch.allclose(q / q[1, 1], torch.tensor([[.25, .5, .5, .25], [.5, 1, 1, .5], [.25, .5, .5, .25]]))
    # the option trains, is in the checkpoint fingerprint only when not at its old default, and model
    # configs written before it existed still build
    assert "quadrature" not in ModelConfig.fingerprint_dict(ModelConfig().to_dict())
    assert ModelConfig.fingerprint_dict(ModelConfig(quadrature="trapezoid").to_dict())["quadrature"] == "trapezoid"
    old = {k: v for k, v in ModelConfig(width=8, heads=2, layers=1, bases=4).to_dict().items() if k != "quadrature"}
    assert build_net(old, 1, 1, 2).quadrature == "uniform"


def test_linear_projections_are_permutation_equivariant_over_points():
    torch.manual_seed(0)
    net = FuncAttnNet(1, 1, 2, width=16, heads=2, layers=2, bases=8).double()
    coords = torch.rand(70, 2, dtype=torch.float64)
    x = torch.randn(3, 70, 1, dtype=torch.float64)
    lo, hi = coords.min(0).values, coords.max(0).values
    perm = torch.randperm(70)
    out = net(x, coords, lo, hi)
    out_p = net(x[:, perm], coords[perm], lo, hi)
    assert torch.allclose(out[:, perm], out_p, atol=1e-10)


def test_swapping_the_map_for_softmax_gives_transolver():
    cfg = ModelConfig().to_dict()
    torch.manual_seed(0)
    fa = build_net({**cfg, "width": 16, "heads": 2, "layers": 2, "bases": 8}, 1, 1, 2).double()
    tr = build_net({**cfg, "width": 16, "heads": 2, "layers": 2, "bases": 8, "model": "transolver"}, 1, 1, 2).double()
    tr.load_state_dict(fa.state_dict(), strict=True)  # the identical net: the same parameters
    coords = torch.as_tensor(grid_coords((8, 8)), dtype=torch.float64)
    x = torch.randn(2, 64, 1, dtype=torch.float64)
    lo, hi = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    y_fa, y_tr = fa(x, coords, lo, hi), tr(x, coords, lo, hi)
    assert not torch.allclose(y_fa, y_tr, atol=1e-6)
    for blk in fa.blocks:
        blk.attention = "softmax"
    assert torch.allclose(fa(x, coords, lo, hi), y_tr, atol=1e-12)


def test_shared_variant_has_one_set_of_basis_weights():
    base = {**ModelConfig().to_dict(), "width": 16, "heads": 2, "layers": 3, "bases": 8}
    own = build_net(base, 1, 1, 2)
    shared = build_net({**base, "shared": True}, 1, 1, 2)
    per_block = sum(p.numel() for p in own.blocks[0].proj.parameters())
    n_own = sum(p.numel() for p in own.parameters())
    n_shared = sum(p.numel() for p in shared.parameters())
    assert n_own - n_shared == 2 * per_block
    assert shared.blocks[0].proj is shared.blocks[2].proj


# --------------------------------------------------------------------------- data


def test_the_column_major_pt_files_read_correctly():
    raw = torch.load(DARCY / "darcy_test_16.pt", weights_only=True)
    assert not raw["y"].is_contiguous()  # the shipped files are column-major
    fs = read_fields(DARCY / "darcy_test_16.pt")
    assert fs.x.shape == (50, 256, 1) and fs.grid == (16, 16) and fs.layout == "nhw"
    y = fs.y[..., 0].reshape(50, 16, 16)
    assert np.array_equal(y, raw["y"].numpy())  # logical indexing, not the storage order
    # Darcy: u = 0 on the boundary; the first row and column are ~0, the interior is not
    assert np.abs(y[:, 0, :]).mean() < 0.02 and np.abs(y[:, :, 0]).mean() < 0.02 and np.abs(y[:, 8, 8]).mean() > 0.3
    # reading the raw storage in C order (the bug the contiguity step avoids) would scramble samples
    storage_order = raw["y"].permute(2, 1, 0).contiguous().reshape(-1)  # the bytes as they lie in the file
    wrong = storage_order.numpy().reshape(50, 16, 16)
    assert not np.allclose(wrong, y)


def test_a_column_major_tensor_of_our_own_reads_in_logical_order(tmp_path):
    a = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)
    cm = a.permute(2, 1, 0).contiguous().permute(2, 1, 0)
    assert not cm.is_contiguous() and torch.equal(cm, a)
    torch.save({"x": cm, "y": cm * 2}, tmp_path / "cm.pt")
    fs = read_fields(tmp_path / "cm.pt")
    assert np.array_equal(fs.x[..., 0], a.reshape(2, 12).numpy())
    assert np.array_equal(fs.y[..., 0], 2 * a.reshape(2, 12).numpy())


@pytest.mark.skipif(not (REPO.parent / "shared" / "data" / "darcy" / "burgers_lowres.pt").is_file(),
                    reason="../shared/data/darcy/burgers_lowres.pt is not here")
def test_the_low_resolution_burgers_set_reads_as_one_input_and_17_output_channels(tmp_path):
    path = REPO.parent / "shared" / "data" / "darcy" / "burgers_lowres.pt"
    raw = torch.load(path, weights_only=True)
    fs = read_fields(path, "input", "output")
    assert fs.grid == (16,) and fs.x.shape == (1200, 16, 1) and fs.y.shape == (1200, 16, 17)
    assert np.array_equal(fs.y[:, :, 0], raw["input"].numpy().astype(np.float32))  # the first output step is u0
    assert np.array_equal(fs.to_layout(fs.y), raw["output"].numpy().astype(np.float32))  # N x C x L back


def test_npz_and_mat_point_sets_and_grids(tmp_path):
    import scipy.io

    rng = np.random.default_rng(0)
    coords = rng.random((40, 2)).astype(np.float32)
    np.savez(tmp_path / "p.npz", x=rng.random((5, 40)), y=rng.random((5, 40, 2)), coords=coords)
    fs = read_fields(tmp_path / "p.npz")
    assert fs.layout == "points" and fs.grid is None and fs.y.shape == (5, 40, 2) and fs.dim == 2
    scipy.io.savemat(tmp_path / "g.mat", {"coeff": rng.random((4, 9, 9)), "sol": rng.random((4, 9, 9))})
    g = read_fields(tmp_path / "g.mat", "coeff", "sol")
    assert g.grid == (9, 9) and g.x.shape == (4, 81, 1)
    assert np.allclose(g.to_layout(g.y), scipy.io.loadmat(tmp_path / "g.mat")["sol"])


@pytest.mark.parametrize("arrays,needle", [
    (dict(x=np.ones((4, 8, 8)), y=np.ones((4, 9, 9))), "'x' (4, 8, 8) and 'y' (4, 9, 9) disagree"),
    (dict(x=np.ones((4, 8, 8)), y=np.ones((3, 8, 8))), "different numbers of samples"),
    (dict(x=np.full((4, 8, 8), np.nan), y=np.ones((4, 8, 8))), "'x' holds NaN"),
    (dict(x=np.ones((4, 8, 8)), y=np.ones((4, 8, 8)) * np.inf), "'y' holds NaN"),
    (dict(x=np.ones((4, 10)), y=np.ones((4, 10)), coords=np.ones((11, 2))), "'coords' has 11 points"),
    (dict(x=np.ones((4, 10)), y=np.ones((4, 10)), coords=np.ones((10, 5))), "'coords' has shape (10, 5)"),
    (dict(y=np.ones((4, 8, 8))), "missing key 'x'"),
    (dict(x=np.ones((4, 8, 8))), "missing key 'y'"),
])
def test_each_bad_input_exits_1_naming_file_and_key(tmp_path, capsys, arrays, needle):
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    out = tmp_path / "out"
    out.mkdir()
    for argv in (["train", str(bad), "-o", str(out / "m.safetensors"), "--epochs", "1"],
                 ["superres", str(_tiny_model(tmp_path)), str(bad), "-o", str(out / "t.csv")]):
        code, stdout, err = run_inprocess(TOOL, argv, capsys)
        assert code == 1 and err.startswith("Error: ") and "bad.npz" in err and needle in err, err
        assert len(err.strip().splitlines()) == 1 and not list(out.iterdir())


# --------------------------------------------------------------------------- solvers


def test_darcy_solver_matches_a_manufactured_solution_at_second_order():
    from icmlkit.lib.train_operator.solvers import solve_darcy

    errs = []
    for s in (17, 33):
        t = np.linspace(0, 1, s)
        X, Y = np.meshgrid(t, t, indexing="ij")
        a = 1 + X + Y ** 2
        u = np.sin(np.pi * X) * np.sin(np.pi * Y)
        ux, uy = np.pi * np.cos(np.pi * X) * np.sin(np.pi * Y), np.pi * np.sin(np.pi * X) * np.cos(np.pi * Y)
        f = -(ux + 2 * Y * uy - 2 * np.pi ** 2 * a * u)
        errs.append(np.abs(solve_darcy(a, f) - u).max())
    assert errs[1] < 1e-3 and 3.5 < errs[0] / errs[1] < 4.5


def test_generated_darcy_resolutions_are_subsamples_of_one_fine_solve():
    from icmlkit.lib.train_operator.solvers import generate_darcy

    c = generate_darcy(DarcyConfig(n=3, solve_resolution=33, resolution=9), seed=5).arrays
    f = generate_darcy(DarcyConfig(n=3, solve_resolution=33, resolution=33), seed=5).arrays
    assert np.array_equal(c["y"], f["y"][:, :, ::4, ::4]) and set(np.unique(f["x"])) <= {3.0, 12.0}
    assert np.abs(f["y"][:, 0, 0, :]).max() == 0 and f["y"].max() > 0
    with pytest.raises(UsageError, match="multiple"):
        DarcyConfig(solve_resolution=33, resolution=10).check()


def test_burgers_etdrk4_converges_in_time_and_keeps_the_mean():
    from icmlkit.lib.train_operator.solvers import burgers_grf, solve_burgers

    u0 = burgers_grf(2, 256, rng=np.random.default_rng(0)) + 0.3
    a = solve_burgers(u0, 0.1, 0.2, 2e-3)
    b = solve_burgers(u0, 0.1, 0.2, 1e-3)
    assert np.abs(a - b).max() < 1e-6 * max(1.0, np.abs(b).max())
    assert np.allclose(a.mean(1), u0.mean(1), atol=1e-10)
    assert np.abs(a - a.mean(1, keepdims=True)).max() < np.abs(u0 - u0.mean(1, keepdims=True)).max()


def test_navier_stokes_decays_a_steady_euler_mode_exactly_at_second_order():
    """A vorticity whose Fourier modes share one |k| has u . grad w = 0, so without forcing the solution
    is w0 exp(-nu 4 pi^2 |k|^2 t): the Crank-Nicolson error falls 4x when dt halves."""
    from icmlkit.lib.train_operator.solvers import solve_ns

    s, nu = 16, 0.01
    t = np.arange(s) / s
    X, Y = np.meshgrid(t, t, indexing="ij")
    w0 = (np.cos(4 * np.pi * X) + 0.7 * np.sin(4 * np.pi * Y) + 0.2 * np.sin(4 * np.pi * X))[None]
    exact = w0 * np.exp(-nu * 4 * np.pi ** 2 * 4 * 1.0)
    errs = [np.abs(solve_ns(w0, 0.0, nu, [0.5, 1.0], dt)[:, 1] - exact).max() for dt in (0.02, 0.01)]
    assert errs[1] < 2e-5 and 3.5 < errs[0] / errs[1] < 4.5
    # two different |k|: the advection term acts; inviscid, unforced: mean and enstrophy are conserved
    w1 = (np.cos(2 * np.pi * X) + np.sin(4 * np.pi * Y))[None]
    w = solve_ns(w1, 0.0, 0.0, [0.5], 0.01)[:, 0]
    assert np.abs(w - w1).max() > 0.1
    assert abs(w.mean()) < 1e-12 and abs((w ** 2).mean() - (w1 ** 2).mean()) < 1e-4


def test_generated_ns_is_a_subsample_of_the_fine_solve_and_runs_from_the_cli(tmp_path):
    from icmlkit.lib.train_operator.config import NSConfig
    from icmlkit.lib.train_operator.solvers import generate_ns

    kw = dict(n=2, solve_resolution=16, t_in=2, t_out=1, record_dt=0.5, dt=0.05)
    fine = generate_ns(NSConfig(resolution=16, **kw), seed=3).arrays
    coarse = generate_ns(NSConfig(resolution=8, **kw), seed=3).arrays
    assert fine["x"].shape == (2, 2, 16, 16) and fine["y"].shape == (2, 1, 16, 16)
    assert np.array_equal(coarse["x"], fine["x"][:, :, ::2, ::2]) and np.array_equal(coarse["y"], fine["y"][:, :, ::2, ::2])
    assert np.allclose(coarse["coords"][:3], [[0, 0], [0, 0.125], [0, 0.25]])
    assert not np.allclose(fine["x"][:, 0], fine["x"][:, 1])  # the flow moves between snapshots
    out = tmp_path / "ns.npz"
    s = js(run_tool(TOOL, "generate", "ns", "-o", out, "--n", "2", "--solve-resolution", "16", "--resolution", "8",
                    "--t-in", "2", "--t-out", "1", "--record-dt", "0.5", "--dt", "0.05", "--seed", "3", "--json"))
    assert s["pde"] == "ns" and s["t_in"] == 2
    fs = read_fields(out)  # a grid file with its periodic nodes in coords: 2 input and 1 output channels
    assert fs.grid == (8, 8) and fs.x.shape == (2, 64, 2) and fs.y.shape == (2, 64, 1)
    assert np.array_equal(fs.coords, coarse["coords"])
    t = js(run_tool(TOOL, "train", out, "-o", tmp_path / "ns.safetensors", "--width", "8", "--heads", "2", "--layers",
                    "1", "--bases", "4", "--epochs", "1", "--batch", "1", "--val-fraction", "0.5", "--json"))
    assert t["resolution"] == "8x8" and np.isfinite(t["best_val_rel_l2"])


# --------------------------------------------------------------------------- training


def _tiny_cfg(**kw):
    return ModelConfig(width=8, heads=2, layers=1, bases=4, **kw)


def _tiny_data(n=12, s=8, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.random((n, s, s)) > 0.5).astype(np.float32)
    y = np.cumsum(x, axis=1) / s
    return fieldset(x, y, None)


def _tiny_model(tmp_path):
    from icmlkit.lib.train_operator.train import train

    p = tmp_path / "tiny.safetensors"
    if not p.exists():
        train(_tiny_cfg(), TrainConfig(epochs=1, batch=4, val_fraction=0), _tiny_data()).model.save(p)
    return p


def test_training_learns_and_same_seed_same_bytes(tmp_path):
    from icmlkit.lib.train_operator.train import train

    data = _tiny_data(24)
    res = train(_tiny_cfg(), TrainConfig(epochs=12, batch=4, lr=1e-2, val_fraction=0.25), data, seed=1)
    rows = res.rows
    assert rows[-1]["train_rel_l2"] < 0.75 * rows[0]["train_rel_l2"]
    res.model.save(tmp_path / "a.safetensors")
    train(_tiny_cfg(), TrainConfig(epochs=12, batch=4, lr=1e-2, val_fraction=0.25), data, seed=1).model.save(
        tmp_path / "b.safetensors")
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()


def test_resume_gives_the_same_model_bytes(tmp_path, interrupting_checkpointer):
    from icmlkit.lib.core.checkpoint import Checkpointer
    from icmlkit.lib.train_operator.train import train

    data = _tiny_data(16)
    kw = dict(seed=2)
    tc = TrainConfig(epochs=5, batch=4, val_fraction=0.25)
    full = train(_tiny_cfg(), tc, data, **kw)
    full.model.save(tmp_path / "full.safetensors")
    ck = tmp_path / "r.safetensors.ckpt.pt"
    with pytest.raises(Interrupted):
        train(_tiny_cfg(), tc, data, checkpointer=interrupting_checkpointer(ck, every=2), **kw)
    res = train(_tiny_cfg(), tc, data, checkpointer=Checkpointer(ck, every=2, resume=True), **kw)
    assert res.summary["resumed_from"] == 2 and res.rows == full.rows
    res.model.save(tmp_path / "r.safetensors")
    assert (tmp_path / "r.safetensors").read_bytes() == (tmp_path / "full.safetensors").read_bytes()
    with pytest.raises(UsageError, match="other settings"):
        train(_tiny_cfg(), tc, data, checkpointer=Checkpointer(ck, resume=True), seed=3)


def test_cli_resume_writes_the_same_files(tmp_path, interrupting_checkpointer):
    from icmlkit.lib.train_operator.train import train

    data = tmp_path / "d.npz"
    fs = _tiny_data(16)
    np.savez(data, x=fs.x[..., 0].reshape(16, 8, 8), y=fs.y[..., 0].reshape(16, 8, 8))
    opts = ["--width", "8", "--heads", "2", "--layers", "1", "--bases", "4", "--epochs", "4", "--batch", "4",
            "--checkpoint-every", "2", "--device", "cpu", "--no-manifest"]
    assert run_tool(TOOL, "train", data, "-o", tmp_path / "a.safetensors", *opts).returncode == 0
    with pytest.raises(Interrupted):
        train(_tiny_cfg(), TrainConfig(epochs=4, batch=4), read_fields(data), seed=0,
              checkpointer=interrupting_checkpointer(f"{tmp_path / 'b.safetensors'}.ckpt.pt", 2))
    r = run_tool(TOOL, "train", data, "-o", tmp_path / "b.safetensors", *opts, "--resume", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["resumed_from"] == 2
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()
    assert (tmp_path / "a.epochs.csv").read_bytes() == (tmp_path / "b.epochs.csv").read_bytes()
    assert not (tmp_path / "b.safetensors.ckpt.pt").exists()


def test_torchrun_two_processes_match_one(tmp_path):
    """`train` under torchrun (2 processes, gloo, CPU) with a global batch of 4 ends with the weights of
    one process with the same batch (float32: equal up to the order of the gradient sums)."""
    from icmlkit.lib.train_operator.modelio import read_model_file

    data = tmp_path / "d.npz"
    fs = _tiny_data(16)
    np.savez(data, x=fs.x[..., 0].reshape(16, 8, 8), y=fs.y[..., 0].reshape(16, 8, 8))
    opts = ["train", str(data), "--width", "8", "--heads", "2", "--layers", "1", "--bases", "4", "--epochs", "2",
            "--batch", "4", "--device", "cpu", "--checkpoint-every", "0", "--json", "--no-progress"]
    one = run_tool(TOOL, *opts, "-o", tmp_path / "one.safetensors")
    assert one.returncode == 0, one.stderr
    env = {**os.environ, "ICMLKIT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}
    two = subprocess.run([str(BIN / "torchrun"), "--nproc_per_node", "2", "--standalone", exe(TOOL), *opts,
                          "-o", str(tmp_path / "two.safetensors")], capture_output=True, text=True, timeout=300,
                         env=env, cwd=tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    assert json.loads(two.stdout)["world_size"] == 2
    a, _, _ = read_model_file(tmp_path / "one.safetensors")
    b, _, _ = read_model_file(tmp_path / "two.safetensors")
    assert a.keys() == b.keys()
    diff = max(float(np.abs(a[k].astype(np.float64) - b[k]).max()) for k in a)
    assert diff < 1e-5, diff
    man = json.loads((tmp_path / "two.safetensors.manifest.json").read_text())
    assert man["distributed"] == {"world_size": 2, "backend": "gloo"}


def test_fno_is_parameter_matched_and_runs_at_a_finer_grid():
    from icmlkit.lib.train_operator.train import evaluate, train

    data = _tiny_data(8)
    cfg = {**_tiny_cfg().to_dict()}
    fa = build_net(cfg, 1, 1, 2)
    res = train(_tiny_cfg(model="fno", modes=3), TrainConfig(epochs=1, batch=4, val_fraction=0), data)
    n_fa = sum(p.numel() for p in fa.parameters())
    assert abs(res.summary["params"] - n_fa) / n_fa < 0.2
    fine = _tiny_data(4, s=16, seed=1)
    assert np.isfinite(evaluate(res.model, fine).summary["rel_l2_x100"])
    pts = fieldset(np.ones((2, 10)), np.ones((2, 10)), np.random.default_rng(0).random((10, 2)))
    with pytest.raises(InputError, match="needs a regular grid"):
        train(_tiny_cfg(model="fno"), TrainConfig(epochs=1, batch=2, val_fraction=0), pts)


def test_model_file_is_standard_safetensors(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    from icmlkit.lib.train_operator.train import load_model

    p = _tiny_model(tmp_path)
    loaded = st.load_file(str(p))
    m = load_model(p)
    for k, v in m.net.state_dict().items():
        assert np.array_equal(loaded[k], v.numpy()), k


# --------------------------------------------------------------------------- the executable


def test_cli_generate_train_eval_predict_superres(tmp_path):
    g9, g17 = tmp_path / "g9.npz", tmp_path / "g17.npz"
    common = ["--n", "12", "--solve-resolution", "17"]
    assert js(run_tool(TOOL, "generate", "darcy", "-o", g9, *common, "--resolution", "9", "--json"))["resolution"] == 9
    js(run_tool(TOOL, "generate", "darcy", "-o", g17, *common, "--resolution", "17", "--json"))
    m = tmp_path / "m.safetensors"
    s = js(run_tool(TOOL, "train", g9, "-o", m, "--width", "8", "--heads", "2", "--layers", "1", "--bases", "4",
                    "--epochs", "2", "--batch", "4", "--json"))
    assert {"epochs", "params", "best_val_rel_l2", "seconds_per_epoch"} <= set(s)
    assert (tmp_path / "m.epochs.csv").read_text().splitlines()[0] == "epoch,train_rel_l2,val_rel_l2,lr"
    conf = json.loads((tmp_path / "m.config.json").read_text())
    assert conf["model"]["model"] == "funcattn" and conf["model"]["bases"] == 4 and conf["train"]["epochs"] == 2
    assert conf["meta"]["params"] == s["params"] and s["config_json"].endswith("m.config.json")
    e = js(run_tool(TOOL, "eval", m, g17, "--json"))
    assert {"model", "resolution", "n", "rel_l2_x100", "rel_l2_std", "params", "seconds"} <= set(e)
    assert e["resolution"] == "17x17" and e["n"] == 12 and e["params"] == s["params"]
    assert run_tool(TOOL, "eval", m, g17, "--fail-above", "0").returncode == 3
    p = tmp_path / "p.npz"
    js(run_tool(TOOL, "predict", m, g17, "-o", p, "--json"))
    with np.load(p) as z:
        assert z["y"].shape == (12, 1, 17, 17) and z["coords"].shape == (289, 2)
    sr = js(run_tool(TOOL, "superres", m, g9, g17, "-o", tmp_path / "sr.csv", "--plot", tmp_path / "sr.png",
                     "--json"))
    assert sr["resolutions"] == ["9x9", "17x17"] and (tmp_path / "sr.png").read_bytes()[:4] == b"\x89PNG"
    assert len((tmp_path / "sr.csv").read_text().splitlines()) == 3
    # g17 holds g9's samples on a nested grid: the interpolated 9x9 prediction rides along
    assert sr["interp_rel_l2_x100"][0] is None and sr["interp_rel_l2_x100"][1] > 0


def test_superres_interpolation_baseline_only_on_nested_grids_of_the_same_samples():
    from icmlkit.lib.train_operator.train import nested_grid, upsample_grid

    def bilinear_set(s, n=3, shift=0.0):  # y = a + b x + c y + d x y: bilinear interpolation is exact on it
        c = grid_coords((s, s))
        coef = np.random.default_rng(0).normal(size=(n, 4)) + shift
        y = coef[:, :1] + coef[:, 1:2] * c[:, 0] + coef[:, 2:3] * c[:, 1] + coef[:, 3:] * c[:, 0] * c[:, 1]
        return fieldset(y.reshape(n, s, s).astype(np.float32), y.reshape(n, s, s).astype(np.float32), None)

    c9, f17 = bilinear_set(9), bilinear_set(17)
    assert nested_grid(c9, f17) and not nested_grid(f17, c9)
    assert not nested_grid(c9, bilinear_set(16)) and not nested_grid(c9, bilinear_set(17, shift=1.0))
    np.testing.assert_allclose(upsample_grid(c9.y, c9.grid, f17.grid), f17.y, atol=1e-5)
    up = upsample_grid(c9.y, c9.grid, (17, 17)).reshape(3, 17, 17)
    np.testing.assert_allclose(up[:, ::2, ::2], c9.y.reshape(3, 9, 9), atol=1e-6)  # coarse nodes kept


def test_few_shot_runs_the_three_attentions():
    from icmlkit.lib.train_operator.fewshot import few_shot

    s = few_shot(FewShotConfig(steps=30, test_tasks=20, width=16, tasks=8)).summary
    assert min(s["mse_funcattn"], s["mse_ridge"], s["mse_softmax"]) > 0
    assert s["ratio"] == s["mse_funcattn"] / s["mse_softmax"]


def test_few_shot_funcattn_slices_over_points_and_reduces_to_the_ridge_map():
    """Softmax over the points: every basis is a distribution over the context points. When the k >= K
    bases span the K context points, the map through the bases equals the ridge map over the points
    (as lambda -> 0, both are Q K^+ V)."""
    from icmlkit.lib.train_operator.fewshot import point_bases, sliced_map

    g = torch.Generator().manual_seed(0)
    Q = torch.randn(3, 7, 8, generator=g, dtype=torch.float64)
    K = torch.randn(3, 4, 8, generator=g, dtype=torch.float64)
    V = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    W = point_bases(torch.randn(3, 4, 6, generator=g, dtype=torch.float64), torch.tensor(0.5, dtype=torch.float64))
    assert torch.allclose(W.sum(-2), torch.ones(3, 6, dtype=torch.float64))
    lam = 1e-10
    ridge = Q @ K.transpose(-1, -2) @ torch.linalg.solve(K @ K.transpose(-1, -2) + lam * torch.eye(4, dtype=torch.float64), V)
    assert torch.allclose(sliced_map(Q, K, V, W, lam), ridge, atol=1e-5)
    assert not torch.allclose(sliced_map(Q, K, V, W[..., :2], lam), ridge, atol=1e-2)  # 2 bases < 4 points


# --------------------------------------------------------------------------- fuzz


def _valid(base):
    d = base / "d.npz"
    fs = _tiny_data(8)
    np.savez(d, x=fs.x[..., 0].reshape(8, 8, 8), y=fs.y[..., 0].reshape(8, 8, 8))
    return {"data": d, "model": _tiny_model(base)}


DATA_KINDS = ("missing", "empty", "binary", "folder", "garbage_npz", "garbage_pt")
TRAIN = ["--width", "8", "--heads", "2", "--layers", "1", "--bases", "4", "--epochs", "1", "--batch", "4"]
FUZZ = [
    FuzzCase("train", ["train", "{bad}", "-o", "{out}/m.safetensors", *TRAIN], ".npz", DATA_KINDS),
    FuzzCase("train", ["train", "{bad}", "-o", "{out}/m.safetensors", *TRAIN], ".pt", DATA_KINDS, label="pt"),
    FuzzCase("train", ["train", "{bad}", "-o", "{out}/m.safetensors", *TRAIN], ".mat", DATA_KINDS, label="mat"),
    FuzzCase("train", ["train", "{data}", "--val", "{bad}", "-o", "{out}/m.safetensors", *TRAIN], ".npz", DATA_KINDS,
             _valid, "val"),
    FuzzCase("eval", ["eval", "{bad}", "{data}"], ".safetensors", ("missing", "empty", "binary", "folder",
                                                                    "garbage_pt"), _valid, "model"),
    FuzzCase("eval", ["eval", "{model}", "{bad}"], ".pt", DATA_KINDS, _valid, "data"),
    FuzzCase("predict", ["predict", "{bad}", "{data}", "-o", "{out}/p.npz"], ".safetensors",
             ("missing", "empty", "binary", "folder", "garbage_npz"), _valid, "model"),
    FuzzCase("predict", ["predict", "{model}", "{bad}", "-o", "{out}/p.npz"], ".npz", DATA_KINDS, _valid, "inputs"),
    FuzzCase("superres", ["superres", "{bad}", "{data}", "-o", "{out}/t.csv", "--plot", "{out}/t.png"],
             ".safetensors", ("missing", "empty", "binary", "folder"), _valid, "model"),
    FuzzCase("superres", ["superres", "{model}", "{data}", "{bad}", "-o", "{out}/t.csv", "--plot", "{out}/t.png"],
             ".npz", DATA_KINDS, _valid, "data"),
    FuzzCase("generate", ["generate", "darcy", "-o", "{out}/g.npz", "--n", "1", "--solve-resolution", "9",
                          "--resolution", "5", "--config", "{bad}"], ".toml", ("missing", "binary", "folder"),
             label="config"),
]


def _other_grid(base):
    """The 2-D, one-channel tiny model and data it was not trained on: a 1-D grid and a 2-channel 2-D grid."""
    rng = np.random.default_rng(0)
    line, chan = base / "line.npz", base / "chan.npz"
    np.savez(line, x=rng.random((4, 16)), y=rng.random((4, 16)))
    np.savez(chan, x=rng.random((4, 2, 8, 8)), y=rng.random((4, 1, 8, 8)))
    return {"model": _tiny_model(base), "line": line, "chan": chan}


# issue 59 (tests/test_mismatch_sweep.py): data on another grid dimension or with other channels than the
# model's recorded ones are refused (another resolution of the same grid is superres, not a mismatch)
MISMATCH = [
    MismatchCase(cmd, [cmd, "{model}", "{line}", *out], _other_grid, ("line.npz", "1-D", "2-D"), "grid-dim")
    for cmd, out in (("eval", []), ("predict", ["-o", "{out}/p.npz"]), ("superres", ["-o", "{out}/t.csv"]))
] + [MismatchCase("eval", ["eval", "{model}", "{chan}"], _other_grid, ("chan.npz", "x has 2 channels", "trained on 1"),
                  "channels")]


@pytest.mark.parametrize("case", FUZZ, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed(TOOL, case, tmp_path, capsys)


def test_a_model_file_with_the_wrong_weights_is_refused(tmp_path, capsys):
    from icmlkit.lib.train_operator.modelio import read_model_file, write_model

    tensors, cfg, meta = read_model_file(_tiny_model(tmp_path))
    write_model(tmp_path / "w.safetensors", tensors, {**cfg, "width": 16}, meta)
    d = _valid(tmp_path)["data"]
    code, _, err = run_inprocess(TOOL, ["eval", str(tmp_path / "w.safetensors"), str(d)], capsys)
    assert code == 1 and "w.safetensors" in err and "do not fit" in err


# --------------------------------------------------------------------------- issue 53: grid conventions, recipe


@pytest.mark.skipif(not (DARCY / "darcy_test_32.pt").is_file(), reason="data/darcy is not here")
def test_neuraloperator_darcy_files_are_cell_grids_and_their_nodes_agree_across_resolutions():
    """darcy_test_16 is exactly darcy_test_32's even nodes: with i/n positions the same node has the same
    coordinates at both resolutions (linspace(0, 1, n) moved it by up to 0.031)."""
    a, b = read_fields(DARCY / "darcy_test_16.pt"), read_fields(DARCY / "darcy_test_32.pt")
    assert a.convention == b.convention == "cell"
    even = b.coords.reshape(32, 32, 2)[::2, ::2].reshape(-1, 2)
    assert np.array_equal(a.coords, even) and float(a.coords.max()) == 15 / 16
    assert np.array_equal(a.y, b.y.reshape(50, 32, 32, 1)[:, ::2, ::2].reshape(50, -1, 1))
    lo, hi = a.box()
    assert lo.tolist() == [0, 0] and hi.tolist() == [1, 1]
    old = read_fields(DARCY / "darcy_test_16.pt", grid="node")  # the former positions, on request
    assert old.convention == "node" and float(old.coords.max()) == 1.0
    assert float(np.abs(old.coords - read_fields(DARCY / "darcy_test_32.pt", grid="node").coords.reshape(
        32, 32, 2)[::2, ::2].reshape(-1, 2)).max()) == pytest.approx(1 - 30 / 31, abs=1e-6)


def test_grid_conventions_from_keys_coords_and_format(tmp_path):
    from icmlkit.lib.core.io import write_npz
    from icmlkit.lib.train_operator.data import grid_axis

    assert np.allclose(grid_axis(4, "node"), [0, 1 / 3, 2 / 3, 1]) and np.allclose(grid_axis(4, "cell"), [0, .25, .5, .75])
    x = np.ones((2, 4, 4), dtype=np.float32)
    assert fieldset(x, x, None).convention == "node"                                  # arrays: node, as before
    assert fieldset(x, x, grid_coords((4, 4), "cell")).convention == "cell"           # inferred from coords
    odd = grid_coords((4, 4), "node") * 2
    fs = fieldset(x, x, odd)
    assert fs.convention is None and np.array_equal(fs.coords, odd)                   # kept, no convention
    write_npz(tmp_path / "p.npz", x=x, y=x, grid=np.array("periodic"))
    assert read_fields(tmp_path / "p.npz").convention == "periodic"                   # the file's grid key
    assert read_fields(tmp_path / "p.npz", grid="node").convention == "node"          # --grid overrides it
    write_npz(tmp_path / "bad.npz", x=x, y=x, grid=np.array("staggered"))
    with pytest.raises(InputError, match="key 'grid'"):
        read_fields(tmp_path / "bad.npz")
    pts = np.ones((2, 10), dtype=np.float32)
    with pytest.raises(InputError, match="point set"):
        fieldset(pts, pts, np.random.default_rng(0).random((10, 2)), convention="cell")
    line = np.ones((2, 8), dtype=np.float32)  # N x L with 1-D coords and a convention: a 1-D grid
    fs = fieldset(line, line, grid_coords((8,), "periodic"), convention="periodic")
    assert fs.grid == (8,) and fs.layout == "nl" and fs.convention == "periodic"


def test_generators_name_their_grid():
    from icmlkit.lib.train_operator.config import BurgersConfig
    from icmlkit.lib.train_operator.solvers import generate_burgers, generate_darcy

    d = generate_darcy(DarcyConfig(n=1, solve_resolution=9, resolution=5)).arrays
    assert str(d["grid"]) == "node" and np.allclose(d["coords"], grid_coords((5, 5), "node"))
    b = generate_burgers(BurgersConfig(n=1, solve_resolution=64, resolution=16, t_final=0.01, dt=1e-3)).arrays
    fs = fieldset(b["x"], b["y"], b["coords"], convention=str(b["grid"]))
    assert fs.convention == "periodic" and fs.grid == (16,) and float(fs.coords.max()) == 15 / 16


def test_trapezoid_is_refused_on_cell_and_periodic_grids():
    from icmlkit.lib.train_operator.train import check_quadrature, train

    x = (np.random.default_rng(0).random((8, 6, 6)) > 0.5).astype(np.float32)
    cell = fieldset(x, x, grid_coords((6, 6), "cell"))
    node = fieldset(x, x, None)
    with pytest.raises(UsageError, match="trapezoid.*cell grid"):
        train(_tiny_cfg(quadrature="trapezoid"), TrainConfig(epochs=1, batch=4, val_fraction=0), cell)
    res = train(_tiny_cfg(quadrature="trapezoid"), TrainConfig(epochs=1, batch=4, val_fraction=0), node)
    with pytest.raises(UsageError, match="trapezoid"):
        res.model.predict(cell, torch.device("cpu"))                      # a trapezoid model on an i/n grid
    check_quadrature("uniform", cell)
    check_quadrature("trapezoid", fieldset(np.ones((2, 5)), np.ones((2, 5)), np.random.default_rng(0).random((5, 2))))


def test_central_differences_boundaries_and_the_gradient_term():
    from icmlkit.lib.train_operator.train import boundary_zeroed, central_differences, gradient_rel_l2

    s = 33
    t = np.linspace(0, 1, s)
    X, Y = np.meshgrid(t, t, indexing="ij")
    u = torch.tensor((np.sin(np.pi * X) * np.sin(2 * np.pi * Y)).reshape(1, -1, 1))
    dx, dy = central_differences(u, (s, s), "node")
    # interior: the derivative to O(h^2); the scale is (s / 2) per index step as the official 1 / (2 dx), dx = 1/s
    ex = (np.pi * np.cos(np.pi * X) * np.sin(2 * np.pi * Y))[1:-1, 1:-1] * s / (s - 1)
    assert np.abs(dx[0, 1:-1, 1:-1, 0].numpy() - ex).max() < 0.05
    p = torch.tensor(np.sin(2 * np.pi * np.arange(16) / 16).reshape(1, -1, 1))
    (dp,) = central_differences(p, (16,), "periodic")                     # wraps around: no boundary error
    assert np.abs(dp[0, :, 0].numpy() - 2 * np.pi * np.cos(2 * np.pi * np.arange(16) / 16)).max() < 0.2
    ones = torch.ones(1, 16, 1)
    assert boundary_zeroed(ones, (4, 4), "node").reshape(4, 4).sum() == 4        # the 2 x 2 interior
    assert boundary_zeroed(ones, (4, 4), "cell").reshape(4, 4).sum() == 9        # x = 0 rows/columns only
    assert boundary_zeroed(ones, (4, 4), "periodic").sum() == 16
    exact = torch.tensor(np.sin(np.pi * X) * np.sin(np.pi * Y)).reshape(1, -1, 1)  # zero on the boundary
    assert float(gradient_rel_l2(exact, exact, (s, s), "node")) < 1e-12
    assert float(gradient_rel_l2(exact * 1.1, exact, (s, s), "node")) == pytest.approx(2 * 0.1, rel=1e-6)


def test_recipe_paper_initialises_and_trains_and_ours_is_unchanged():
    from icmlkit.lib.train_operator.train import objective, paper_init, rel_l2, train

    net = build_net(_tiny_cfg().to_dict() | {"width": 64, "heads": 4}, 1, 1, 2)
    paper_init(net)
    lin = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    w = torch.cat([m.weight.reshape(-1) for m in lin])
    assert abs(float(w.detach().std()) - 0.02) < 0.002 and float(w.detach().abs().max()) <= 2.0
    assert all(m.bias is None or float(m.bias.abs().max()) == 0 for m in lin)
    data = _tiny_data()
    pred, y = torch.rand(4, 64, 1), torch.rand(4, 64, 1)
    err = rel_l2(pred, y)
    assert torch.equal(objective(err, pred, y, data, "ours"), err.mean())
    assert float(objective(err, pred, y, data, "paper")) > float(err.sum())
    tc = TrainConfig(epochs=2, batch=4, val_fraction=0)
    ours = train(_tiny_cfg(), tc, data, seed=1)
    paper = train(_tiny_cfg(), TrainConfig(epochs=2, batch=4, val_fraction=0, recipe="paper"), data, seed=1)
    assert np.isfinite(paper.summary["final_train_rel_l2"])
    assert paper.summary["final_train_rel_l2"] != ours.summary["final_train_rel_l2"]
    assert "recipe" not in tc.fingerprint_dict()                                  # old checkpoints still resume
    assert TrainConfig(recipe="paper").fingerprint_dict()["recipe"] == "paper"
    pts = fieldset(np.ones((4, 10), np.float32), np.ones((4, 10), np.float32), np.random.default_rng(0).random((10, 2)))
    with pytest.raises(UsageError, match="--recipe paper needs a grid"):
        train(_tiny_cfg(), TrainConfig(epochs=1, batch=2, val_fraction=0, recipe="paper"), pts)


def test_cli_grid_and_recipe_options(tmp_path):
    data = tmp_path / "d.npz"
    from icmlkit.lib.core.io import write_npz

    x = (np.random.default_rng(0).random((8, 6, 6)) > 0.5).astype(np.float32)
    write_npz(data, x=x, y=np.cumsum(x, axis=1) / 6)
    common = ["--width", "8", "--heads", "2", "--layers", "1", "--bases", "4", "--epochs", "1", "--batch", "4",
              "--val-fraction", "0"]
    r = run_tool(TOOL, "train", data, "-o", tmp_path / "m.safetensors", "--grid", "cell", "--quadrature",
                 "trapezoid", *common)
    assert r.returncode == 2 and "trapezoid" in r.stderr
    s = js(run_tool(TOOL, "train", data, "-o", tmp_path / "m.safetensors", "--grid", "cell", "--recipe", "paper",
                    *common, "--json"))
    assert np.isfinite(s["final_train_rel_l2"])
    e = js(run_tool(TOOL, "eval", tmp_path / "m.safetensors", data, "--grid", "cell", "--json"))
    assert np.isfinite(e["rel_l2_x100"])


# --------------------------------------------------------------------------- periodic 1-D (the Burgers part)


def test_periodic_interpolation_fourier_is_exact_on_band_limited_fields_and_linear_keeps_the_nodes():
    from icmlkit.lib.train_operator.train import upsample_periodic

    def trig(s):  # modes 0 .. 7 of a 1-D periodic field, two samples, one channel
        t = np.arange(s) / s
        coef = np.random.default_rng(0).normal(size=(2, 8, 2))
        y = sum(coef[:, m, :1] * np.cos(2 * np.pi * m * t) + coef[:, m, 1:] * np.sin(2 * np.pi * m * t) for m in range(8))
        return y[..., None]

    np.testing.assert_allclose(upsample_periodic(trig(16), (16,), (64,)), trig(64), atol=1e-10)  # 7 < 16 / 2
    lin = upsample_periodic(trig(16), (16,), (64,), "linear").reshape(2, 64)
    np.testing.assert_allclose(lin[:, ::4], trig(16)[..., 0], atol=1e-12)                     # nodes kept
    c = trig(16)[..., 0]
    np.testing.assert_allclose(lin[:, 62], 0.5 * (c[:, 15] + c[:, 0]), atol=1e-12)           # wraps around
    # 2-D, axis by axis: a separable trigonometric field is reproduced
    f = lambda s: np.outer(np.cos(2 * np.pi * np.arange(s) / s), np.sin(4 * np.pi * np.arange(s) / s)).reshape(1, -1, 1)
    np.testing.assert_allclose(upsample_periodic(f(8), (8, 8), (32, 32)), f(32), atol=1e-10)
    with pytest.raises(UsageError):
        upsample_periodic(trig(16), (16,), (24,))


def _burgers_sets(n=6, sizes=(16, 64), solve=64):
    from icmlkit.lib.train_operator.config import BurgersConfig
    from icmlkit.lib.train_operator.solvers import generate_burgers

    a = generate_burgers(BurgersConfig(n=n, solve_resolution=solve, resolution=solve, t_final=0.1, dt=1e-3)).arrays
    return [fieldset(a["x"][:, ::solve // s], a["y"][:, ::solve // s], grid_coords((s,), "periodic"),
                     convention="periodic") for s in sizes]


def test_periodic_grids_of_one_solve_nest_and_superres_interpolates_them():
    from icmlkit.lib.train_operator.train import interpolate_prediction, nested_grid, superres, train

    c16, f64 = _burgers_sets()
    assert nested_grid(c16, f64) and not nested_grid(f64, c16)
    other = _burgers_sets(sizes=(64,), solve=64, n=5)[0]
    assert not nested_grid(c16, other)                                                    # other samples
    node = fieldset(f64.x.reshape(6, 8, 8), f64.y.reshape(6, 8, 8), None)
    assert not nested_grid(c16, node)
    up = interpolate_prediction(c16.y, c16, f64)
    assert up.shape == f64.y.shape and np.abs(up - f64.y).max() < 0.05 * np.abs(f64.y).max()  # smooth fields
    res = train(_tiny_cfg(), TrainConfig(epochs=1, batch=3, val_fraction=0, recipe="paper"), c16)
    rows = superres(res.model, [c16, f64]).rows
    assert rows[0]["interp_rel_l2_x100"] is None and rows[1]["interp_rel_l2_x100"] > 0


@pytest.mark.parametrize("model", ["funcattn", "transolver", "fno"])
def test_the_nets_have_a_1d_path_on_a_periodic_grid(model):
    from icmlkit.lib.train_operator.train import train

    c16, f64 = _burgers_sets()
    res = train(_tiny_cfg(model=model, modes=4), TrainConfig(epochs=2, batch=3, val_fraction=0, recipe="paper"), c16)
    assert res.model.dim == 1 and np.isfinite(res.summary["final_train_rel_l2"])
    p = res.model.predict(f64, torch.device("cpu"))
    assert p.shape == (6, 64, 1) and np.isfinite(p).all()


def test_funcattn_is_discretisation_consistent_on_a_periodic_grid():
    """On a periodic grid the uniform sum of step 3 is the trapezoid rule of a periodic integrand when the
    point-wise features are periodic (``pos="periodic"``): the outputs at the shared points agree between s
    and 4 s points to the 1e-5 of step 3 (no retraining). Distances to a reference grid (``unified``) jump
    at the wrap t -> 1 / t = 0, which leaves a first-order (left Riemann) rule: the gap shrinks 4x per 4x."""
    lo, hi = torch.zeros(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64)

    def gaps(pos):
        torch.manual_seed(0)
        net = FuncAttnNet(1, 1, 1, width=16, heads=2, layers=2, bases=8, pos=pos).double()

        def out(s):
            t = torch.arange(s, dtype=torch.float64) / s
            x = (torch.sin(2 * torch.pi * t) + 0.5 * torch.cos(4 * torch.pi * t))[None, :, None]
            with torch.no_grad():
                return net(x, t[:, None], lo, hi, (s,))[0, :, 0]

        a, b, c = out(256), out(1024), out(4096)
        return float((b[::4] - a).norm() / a.norm()), float((c[::4] - b).norm() / b.norm())

    per, uni = gaps("periodic"), gaps("unified")
    assert max(per) < 1e-5 and per[1] < per[0]
    assert 3 < uni[0] / uni[1] < 5 and uni[1] > 100 * per[1]


def test_recipe_h1_is_the_batch_mean_of_rel_l2_plus_the_gradient_term_with_default_init():
    from icmlkit.lib.train_operator.train import gradient_rel_l2, objective, rel_l2, train

    c16, _ = _burgers_sets()
    pred = torch.tensor(c16.y[:3]) * 1.1 + 0.01
    y = torch.tensor(c16.y[:3])
    err = rel_l2(pred, y)
    want = (err + 0.1 * gradient_rel_l2(pred, y, c16.grid, "periodic")).mean()
    assert float(objective(err, pred, y, c16, "h1")) == pytest.approx(float(want), rel=1e-12)
    assert float(objective(err, pred, y, c16, "paper")) == pytest.approx(3 * float(want), rel=1e-6)  # the sum
    a = train(_tiny_cfg(), TrainConfig(epochs=1, batch=3, val_fraction=0, recipe="h1"), c16, seed=0)
    b = train(_tiny_cfg(), TrainConfig(epochs=1, batch=3, val_fraction=0, recipe="paper"), c16, seed=0)
    w = [k for k in a.model.tensors() if k.endswith("pre.0.weight")][0]
    assert float(a.model.tensors()[w].std()) > 3 * float(b.model.tensors()[w].std())  # default init, not 0.02
    pts = fieldset(np.ones((4, 5)), np.ones((4, 5)), np.random.default_rng(0).random((5, 2)))
    with pytest.raises(UsageError, match="--recipe h1 needs a grid"):
        train(_tiny_cfg(), TrainConfig(epochs=1, batch=2, val_fraction=0, recipe="h1"), pts)
