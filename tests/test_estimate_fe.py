"""estimate-fe: the radix map, the gauge measure, BAR, a tiny CARD run, OpenMM systems and bad inputs."""
from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import BIN, REPO, Interrupted, exe, run_tool
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.estimate_fe import card, gauge
from icmlkit.lib.estimate_fe.estimate import bar_estimate
from icmlkit.lib.estimate_fe.model import CARD
from icmlkit.lib.estimate_fe.radix import RadixMap
from icmlkit.lib.estimate_fe.systems import builtin, exact_free_energy, triatomic_quadrature

FREESOLV = REPO.parent / "shared" / "data" / "freesolv" / "amber.tar.gz"
needs_freesolv = pytest.mark.skipif(not FREESOLV.exists(), reason="FreeSolv not present in ../shared/data/freesolv")


# ----------------------------------------------------------------------------------- radix map


@pytest.mark.parametrize("r,L", [(4, 3), (2, 5), (3, 2)])
def test_radix_map_is_a_bijection(r, L):
    g = torch.Generator().manual_seed(1)
    free = torch.ones(5, 3, dtype=torch.bool)
    free[0] = False
    free[1, 1:] = False
    lo = torch.full((5, 3), -3.0)
    rm = RadixMap(lo, 6.0, free, r=r, L=L)
    y = torch.where(free, torch.rand(200, 5, 3, generator=g, dtype=torch.float64) * 6 - 3, torch.zeros(()))
    tok, u = rm.encode(y)
    assert tok.shape == (200, L, 5) and int(tok.max()) < r ** 3 and int(tok.min()) >= 0
    assert torch.allclose(rm.decode(tok, u), y, atol=1e-12, rtol=0)
    # and the other way round: any digits and residuals come back
    tok2 = torch.randint(0, r ** 3, (50, L, 5), generator=g)
    tok2 = torch.where(rm.allowed_tokens()[torch.arange(5)[None, None, :].expand(50, L, 5), tok2], tok2, torch.zeros((), dtype=torch.long))
    u2 = torch.where(free, torch.rand(50, 5, 3, generator=g, dtype=torch.float64), torch.zeros(()))
    t3, u3 = rm.encode(rm.decode(tok2, u2))
    assert torch.equal(t3, tok2) and torch.allclose(u3, u2, atol=1e-9)
    # fixed axes only allow digit 0
    assert int(rm.allowed_tokens()[0].sum()) == 1 and int(rm.allowed_tokens()[1].sum()) == r


def _grid(rm: RadixMap, axes_free: list[tuple[int, int]], nodes: int):
    """Gauss-Legendre nodes inside every finest cell along each free axis -> points and weights."""
    n_cells = rm.r ** rm.L
    x, w = np.polynomial.legendre.leggauss(nodes)
    h = rm.a / n_cells
    pts, wts = [], []
    for (i, ax) in axes_free:
        lo = float(rm.lo[i, ax])
        c = lo + h * np.arange(n_cells)[:, None] + 0.5 * h * (x[None, :] + 1)
        pts.append(c.ravel())
        wts.append(np.tile(0.5 * h * w, n_cells))
    mesh = np.meshgrid(*pts, indexing="ij")
    wm = np.meshgrid(*wts, indexing="ij")
    W = np.prod(np.stack([m.ravel() for m in wm]), 0)
    return [m.ravel() for m in mesh], W


def _integral(model: CARD, rm: RadixMap, n_atoms: int, axes_free, nodes: int) -> float:
    pts, W = _grid(rm, axes_free, nodes)
    y = torch.zeros(len(W), n_atoms, 3, dtype=torch.float64)
    for (i, ax), p in zip(axes_free, pts):
        y[:, i, ax] = torch.as_tensor(p)
    with torch.no_grad():
        lq = torch.cat([model.log_prob(y[k:k + 8192]) for k in range(0, len(y), 8192)]).numpy()
    return float((np.exp(lq) * W).sum())


def test_log_density_integrates_to_one_in_1d():
    torch.manual_seed(0)
    free = torch.zeros(1, 3, dtype=torch.bool)
    free[0, 0] = True
    rm = RadixMap(torch.tensor([[-1.5, 0.0, 0.0]]), 3.0, free, r=4, L=2)
    model = CARD(rm, [6], np.zeros((1, 1, 1)), d=16, heads=2, enc_layers=1, dec_layers=1, K=3, max_shape=6.0).eval()
    assert _integral(model, rm, 1, [(0, 0)], 40) == pytest.approx(1.0, abs=2e-5)


def test_log_density_integrates_to_one_in_3d():
    torch.manual_seed(1)
    rm = RadixMap(torch.tensor([[-1.0, -1.0, -1.0]]), 2.0, torch.ones(1, 3, dtype=torch.bool), r=2, L=1)
    model = CARD(rm, [8], np.zeros((1, 1, 1)), d=16, heads=2, enc_layers=1, dec_layers=1, K=2, max_shape=3.0).eval()
    assert _integral(model, rm, 1, [(0, 0), (0, 1), (0, 2)], 10) == pytest.approx(1.0, abs=1e-3)


def test_log_density_integrates_to_one_on_the_gauge_section():
    """A triatomic in the frame gauge: 3 free coordinates (x2; x3, y3), two of them on half-lines."""
    torch.manual_seed(2)
    free = torch.as_tensor(gauge.free_mask(3, True))
    lo = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [-2.0, 0.0, 0.0]])
    rm = RadixMap(lo, 4.0, free, r=2, L=1)
    ref = np.array([[[0, 1, 1], [1, 0, 1.5], [1, 1.5, 0]]], dtype=float)
    model = CARD(rm, [6, 6, 6], ref, d=16, heads=2, enc_layers=1, dec_layers=1, K=2, max_shape=3.0).eval()
    assert _integral(model, rm, 3, [(1, 0), (2, 0), (2, 1)], 10) == pytest.approx(1.0, abs=1e-3)


def test_sampled_log_q_matches_the_density():
    torch.manual_seed(3)
    s = builtin("triatomic")
    x = s.sample(200, seed=0, chains=50, burn_in=200, thin=2)["x"]
    model, order, _ = card.build(s, x, d=16, heads=2, enc_layers=1, dec_layers=1, K=3)
    y, lq = model.sample(64, torch.Generator().manual_seed(0))
    assert torch.isfinite(lq).all()
    assert torch.allclose(model.log_prob(y).detach(), lq, atol=1e-6)
    assert (y[:, 1, 0] > 0).all() and (y[:, 2, 1] > 0).all() and (y[:, 0] == 0).all()


# ----------------------------------------------------------------------------------- gauge


def test_frame_gauge_keeps_distances_and_orders_atoms():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 5, 3))
    y = gauge.to_frame(x)
    d = lambda a: np.linalg.norm(a[:, :, None] - a[:, None], axis=-1)  # noqa: E731
    assert np.allclose(d(x), d(y))
    assert np.allclose(y[:, 0], 0) and np.allclose(y[:, 1, 1:], 0) and np.allclose(y[:, 2, 2], 0)
    assert (y[:, 1, 0] > 0).all() and (y[:, 2, 1] > 0).all()
    # bond-graph DFS with element priority C > N > O > others > H: methanol C O H(O) H H H
    z = [6, 8, 1, 1, 1, 1]
    bonds = [(0, 2), (0, 3), (0, 4), (1, 5), (0, 1)]
    assert gauge.dfs_order(z, bonds) == [0, 1, 5, 2, 3, 4]
    # without bonds: the most rigid atoms first
    xs = rng.normal(size=(50, 3, 3)) * np.array([0.01, 0.01, 1.0])[None, :, None]
    assert gauge.variance_order(xs)[-1] == 2


def test_frame_gauge_jacobian_against_the_internal_coordinate_quadrature():
    """integral over (x2, x3, y3) of x2^2 y3 exp(-U) equals integral r1^2 r2^2 sin(theta) exp(-U)."""
    spec = builtin("triatomic").spec
    n = 100
    xg, wg = np.polynomial.legendre.leggauss(n)

    def rule(lo, hi):
        return 0.5 * (hi - lo) * xg + 0.5 * (hi + lo), 0.5 * (hi - lo) * wg

    x2, w2 = rule(0.55, 1.45)
    x3, w3 = rule(-1.5, 0.8)
    y3, w4 = rule(1e-9, 1.7)
    X2, X3, Y3 = np.meshgrid(x2, x3, y3, indexing="ij")
    frames = np.zeros((X2.size, 3, 3))
    frames[:, 1, 0], frames[:, 2, 0], frames[:, 2, 1] = X2.ravel(), X3.ravel(), Y3.ravel()
    u = builtin("triatomic").reduced_energy(frames)
    W = (w2[:, None, None] * w3[None, :, None] * w4[None, None, :]).ravel()
    lj = gauge.log_jacobian(frames)
    log_cart = math.log((W * np.exp(lj - u)).sum())
    assert log_cart == pytest.approx(triatomic_quadrature(spec), abs=2e-3)


def test_exact_free_energies():
    assert exact_free_energy({"kind": "harmonic-trap", "n_atoms": 2, "k": [1.0, 1.0, 1.0]}) == pytest.approx(-3 * math.log(2 * math.pi))
    spec = builtin("triatomic").spec
    assert triatomic_quadrature(spec, 100) == pytest.approx(triatomic_quadrature(spec, 160), abs=1e-8)
    # a pure double well without tilt: symmetric, F finite and below the one-well harmonic value
    f = exact_free_energy({"kind": "double-well", "n_atoms": 1, "barrier": 0.0, "x0": 1.0, "k": [1.0, 1.0]})
    assert f is not None and math.isfinite(f)


# ----------------------------------------------------------------------------------- BAR


def test_bar_on_two_gaussians_gives_the_exact_difference():
    rng = np.random.default_rng(0)
    sa, sb, mu, c = 1.0, 0.7, 0.3, 0.25
    ua = lambda x: x ** 2 / (2 * sa ** 2)  # noqa: E731
    ub = lambda x: (x - mu) ** 2 / (2 * sb ** 2) + c  # noqa: E731
    exact = c - math.log(sb / sa)  # f_b - f_a
    xa = rng.normal(0, sa, 20000)
    xb = rng.normal(mu, sb, 20000)
    r = bar_estimate(ub(xa) - ua(xa), ua(xb) - ub(xb))
    assert abs(r["delta_f"] - exact) < 4 * r["delta_f_err"] and r["delta_f_err"] < 0.02
    assert r["exp_forward"] == pytest.approx(exact, abs=0.05) and r["exp_reverse"] == pytest.approx(exact, abs=0.05)
    assert 0.3 < r["overlap"] <= 1 and 0 < r["ess_forward"] <= 1 and 0 < r["ess_reverse"] <= 1
    m = bar_estimate(ub(xa) - ua(xa), ua(xb) - ub(xb), "mbar")
    assert m["delta_f"] == pytest.approx(r["delta_f"], abs=1e-6)


# ----------------------------------------------------------------------------------- a tiny run


def test_tiny_model_on_a_harmonic_trap_gives_a_finite_estimate():
    s = builtin("trap4")
    fr = s.sample(600, seed=0)
    bundle, info = card.train(s, fr["x"][:300], fr["u"][:300], steps=200, stage2_steps=10, batch=64, d=16, heads=2,
                              enc_layers=1, dec_layers=1, K=4)
    assert math.isfinite(info["val_nll"])
    res = card.estimate(bundle, s, fr["x"][300:], fr["u"][300:], n_samples=300)
    for k in ("f_kT", "f_err_kT", "overlap", "ess_forward", "ess_reverse", "f_exp_forward_kT", "f_exp_reverse_kT"):
        assert math.isfinite(res[k]), k
    assert 0 <= res["overlap"] <= 1 and 0 < res["ess_forward"] <= 1 and 0 < res["ess_reverse"] <= 1
    assert res["energy_evals"] == 300 and res["n_model_samples"] == 300


def test_training_resumes_from_a_checkpoint_to_the_same_weights(tmp_path, interrupting_checkpointer):
    from icmlkit.lib.core.checkpoint import Checkpointer
    from icmlkit.lib.core.io import read_torch, torch_bytes

    s = builtin("trap4")
    fr = s.sample(200, seed=0)
    kw = dict(steps=30, stage2_steps=10, batch=32, d=16, heads=2, enc_layers=1, dec_layers=1, K=4, seed=3)
    full, _ = card.train(s, fr["x"], fr["u"], **kw)

    path = tmp_path / "m.pt.ckpt.pt"
    with pytest.raises(Interrupted):
        card.train(s, fr["x"], fr["u"], checkpointer=interrupting_checkpointer(path, every=25), **kw)
    assert read_torch(path, "checkpoint")["step"] == 25
    resumed, info = card.train(s, fr["x"], fr["u"], checkpointer=Checkpointer(path, every=25, resume=True), **kw)
    assert info["steps_done"] == 40
    for k, v in full["state_dict"].items():
        assert torch.equal(v, resumed["state_dict"][k]), k
    assert torch_bytes(full) == torch_bytes(resumed)  # the whole model file, not only the weights
    with pytest.raises(UsageError, match="other settings"):
        card.train(s, fr["x"], fr["u"], checkpointer=Checkpointer(path, resume=True), **{**kw, "seed": 4})
    with pytest.raises(InputError, match="not a CARD model file"):
        card.load(path)  # a checkpoint is not a model file


def test_cli_resume_gives_the_same_model_file(tmp_path, interrupting_checkpointer):
    """An interrupted `train` (checkpoint at step 20, written by the library as the CLI would) resumed
    with --resume writes the same bytes as the uninterrupted command."""
    from icmlkit.lib.estimate_fe import api

    fr = tmp_path / "trap.npz"
    assert run_tool("estimate-fe", "sample", "trap4", "--frames", "120", "-o", fr).returncode == 0
    opts = ["--steps", "25", "--stage2-steps", "5", "--width", "16", "--layers", "1", "--batch", "16",
            "--checkpoint-every", "20", "--device", "cpu"]
    r = run_tool("estimate-fe", "train", "trap4", fr, "-o", tmp_path / "a.pt", *opts)
    assert r.returncode == 0, r.stderr

    cfg = api.TrainConfig(steps=25, stage2_steps=5, width=16, layers=1, batch=16)
    sysm = api.open_system("trap4")
    with pytest.raises(Interrupted):
        api.train(cfg, sysm, api.load_frames(fr, sysm), seed=0,
                  checkpointer=interrupting_checkpointer(f"{tmp_path / 'b.pt'}.ckpt.pt", 20))
    r = run_tool("estimate-fe", "train", "trap4", fr, "-o", tmp_path / "b.pt", *opts, "--resume")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()
    assert not (tmp_path / "b.pt.ckpt.pt").exists()


def test_torchrun_two_processes_give_the_one_process_weights(tmp_path):
    """`estimate-fe train` under torchrun (2 processes, gloo, CPU) with a global batch of 16 ends with
    the weights of one process with the same batch (Stage I and Stage II steps; float64 training so
    that the order of the batch sums does not matter, see card.train)."""
    fr = tmp_path / "trap.npz"
    assert run_tool("estimate-fe", "sample", "trap4", "--frames", "60", "-o", fr).returncode == 0
    opts = ["train", "trap4", str(fr), "--steps", "4", "--stage2-steps", "3", "--width", "8", "--layers", "1",
            "--components", "2", "--depth", "2", "--batch", "16", "--precision", "float64", "--device", "cpu",
            "--checkpoint-every", "0", "--json", "--no-progress"]
    one = run_tool("estimate-fe", *opts, "-o", tmp_path / "one.pt")
    assert one.returncode == 0, one.stderr
    env = {"OMP_NUM_THREADS": "1"}
    two = subprocess.run([str(BIN / "torchrun"), "--nproc_per_node", "2", "--standalone", exe("estimate-fe"), *opts,
                          "-o", str(tmp_path / "two.pt")], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "ICMLKIT_NO_PROGRESS": "1", **env}, cwd=tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    summary = json.loads(two.stdout)  # rank 0 alone prints
    assert summary["world_size"] == 2 and json.loads(one.stdout)["world_size"] == 1
    a = torch.load(tmp_path / "one.pt", weights_only=True)["state_dict"]
    b = torch.load(tmp_path / "two.pt", weights_only=True)["state_dict"]
    assert a.keys() == b.keys()
    diff = max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
    assert diff <= 1e-6, diff
    manifest = json.loads((tmp_path / "two.pt.manifest.json").read_text())
    assert manifest["distributed"] == {"world_size": 2, "backend": "gloo"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.pt", "one.pt.manifest.json", "trap.npz",
                                                          "trap.npz.manifest.json", "two.pt", "two.pt.manifest.json"]


def test_cli_sample_train_estimate_and_refusal(tmp_path):
    fr, model = tmp_path / "trap.npz", tmp_path / "trap.pt"
    r = run_tool("estimate-fe", "sample", "trap4", "--frames", "400", "-o", fr, "--json")
    assert r.returncode == 0, r.stderr
    r2 = run_tool("estimate-fe", "sample", "trap4", "--frames", "400", "-o", tmp_path / "again.npz")
    assert r2.returncode == 0 and fr.read_bytes() == (tmp_path / "again.npz").read_bytes()  # same seed, same bytes
    r = run_tool("estimate-fe", "train", "trap4", fr, "-o", model, "--steps", "60", "--stage2-steps", "5",
                 "--width", "16", "--layers", "1", "--batch", "64", "--checkpoint-every", "20", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["train_frames"] + info["val_frames"] == 200 and info["val_frames"] == 20
    assert not (tmp_path / "trap.pt.ckpt.pt").exists()  # the checkpoint is removed once training ends
    r = run_tool("estimate-fe", "train", "trap4", fr, "-o", tmp_path / "other.pt", "--resume")
    assert r.returncode == 2 and "nothing to resume" in r.stderr
    r = run_tool("estimate-fe", "estimate", "trap4", model, fr, "--samples", "200", "--min-overlap", "0", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["frames_skipped_as_training"] == 200 and math.isfinite(out["f_kT"]) and out["f_exact_kT"] is not None
    for k in ("f_kT", "f_err_kT", "overlap", "ess_forward", "ess_reverse", "energy_evals", "seconds_estimate"):
        assert k in out
    # an impossible overlap threshold: exit 3, no number reported, the reason on stderr
    r = run_tool("estimate-fe", "estimate", "trap4", model, fr, "--samples", "200", "--min-overlap", "1", "--json")
    assert r.returncode == 3 and json.loads(r.stdout)["f_kT"] is None and "overlap" in r.stderr


def test_cli_systems_lists_exact_free_energies():
    r = run_tool("estimate-fe", "systems", "--json")
    assert r.returncode == 0
    rows = {row["name"]: row for row in json.loads(r.stdout)["systems"]}
    assert rows["trap4"]["f_exact_kT"] == pytest.approx(exact_free_energy(rows["trap4"]["spec"]))
    assert rows["triatomic"]["f_exact_kT"] is not None and rows["lj6-trap"]["f_exact_kT"] is None


# ----------------------------------------------------------------------------------- bad systems


def test_bad_systems_fail_with_a_clear_message(tmp_path):
    r = run_tool("estimate-fe", "sample", str(tmp_path / "nope.json"), "-o", tmp_path / "f.npz")
    assert r.returncode == 1 and "nope.json" in r.stderr and "no such file" in r.stderr
    assert not (tmp_path / "f.npz").exists()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": "harmonic-trap", "n_atoms": 2, "k": [1, -1, 1]}))
    r = run_tool("estimate-fe", "sample", bad, "-o", tmp_path / "f.npz")
    assert r.returncode == 1 and "bad.json" in r.stderr and "'k'" in r.stderr
    # frames of a 4-atom system given for a 6-atom system
    fr = tmp_path / "trap.npz"
    assert run_tool("estimate-fe", "sample", "trap4", "--frames", "100", "-o", fr).returncode == 0
    r = run_tool("estimate-fe", "train", "lj6-trap", fr, "-o", tmp_path / "m.pt", "--steps", "2")
    assert r.returncode == 1 and "trap.npz" in r.stderr and "6" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "m.pt").exists()
    # NaN energies
    from icmlkit.lib.core.io import load_npz, write_npz

    d = load_npz(fr)
    d["u"][7] = np.nan
    nan = tmp_path / "nan.npz"
    write_npz(nan, **d)
    r = run_tool("estimate-fe", "train", "trap4", nan, "-o", tmp_path / "m.pt", "--steps", "2")
    assert r.returncode == 1 and "not finite" in r.stderr and "u[7]" in r.stderr
    r = run_tool("estimate-fe", "estimate", "trap4", tmp_path / "missing.pt", fr)
    assert r.returncode == 1 and "missing.pt" in r.stderr


def test_mismatched_model_and_system():
    s4, s6 = builtin("trap4"), builtin("lj6-trap")
    fr = s4.sample(100, seed=0)
    bundle, _ = card.train(s4, fr["x"], fr["u"], steps=2, stage2_steps=0, batch=16, d=16, heads=2, enc_layers=1,
                           dec_layers=1, K=2)
    with pytest.raises(InputError, match="4 atoms"):
        card.estimate(bundle, s6, s6.sample(20, seed=0, chains=10, burn_in=10, thin=1)["x"], np.zeros(20))


def test_molecule_options_on_an_analytic_system_are_refused(tmp_path, capsys):
    """Issue 59: --env, --temperature and --inpcrd given for an analytic system (in kT, no solvent) were
    silently ignored; given on the command line they exit 2 with one line naming the option and the
    system, before any output; their defaults (and the molecule-only commands' fixed environments) pass."""
    from fuzzing import run_inprocess

    from icmlkit.lib.estimate_fe.api import open_system

    out = tmp_path / "f.npz"
    for extra, names in ((["--env", "obc2"], ["--env obc2"]), (["--temperature", "300"], ["--temperature 300"]),
                         (["--env", "vacuum", "--temperature", "298.15"], ["--env vacuum", "--temperature 298.15"]),
                         (["--inpcrd", "x.inpcrd"], ["--inpcrd x.inpcrd"])):
        code, stdout, stderr = run_inprocess("estimate-fe", ["sample", "trap4", "--frames", "10", "-o", str(out),
                                                             *extra], capsys)
        line = _one_error_line(stderr)
        assert code == 2 and not stdout.strip() and not out.exists(), (extra, stderr)
        assert all(n in line for n in names) and "analytic system trap4" in line, line
    code, _, stderr = run_inprocess("estimate-fe", ["train", "trap4", str(out), "-o", str(tmp_path / "m.pt"),
                                                    "--temperature", "310"], capsys)
    assert code == 2 and "--temperature 310" in _one_error_line(stderr)
    code, _, stderr = run_inprocess("estimate-fe", ["sample", "trap4", "--frames", "10", "-o", str(out)], capsys)
    assert code == 0 and out.exists(), stderr
    assert open_system("trap4", env="obc2", temperature=300.0).temperature is None  # the API: only ``given`` refuses
    with pytest.raises(UsageError, match="--temperature 300: the analytic system trap4"):
        open_system("trap4", temperature=300.0, given=("temperature",))


def _one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_frames_of_another_system_are_refused(tmp_path):
    """Issue 57: a frames file records its system, environment and force-field hash, and u is
    recomputed on 8 frames: trap4 frames given for dw4 exit 2 (one line naming the file and what
    differs), matching frames pass, a file without the record is checked by its energies only, a
    tampered energy is refused; a garbage model file is one error line."""
    from icmlkit.lib.core.io import load_npz, write_npz
    from icmlkit.lib.estimate_fe import frames as F
    from icmlkit.lib.estimate_fe.api import load_frames

    fr, model = tmp_path / "trap.npz", tmp_path / "trap.pt"
    assert run_tool("estimate-fe", "sample", "trap4", "--frames", "100", "-o", fr).returncode == 0
    d = load_npz(fr)
    assert str(d["system"]) == "trap4" and str(d["env"]) == "analytic" and len(str(d["ff_hash"])) == 16
    ok = load_frames(fr, builtin("trap4"))
    assert ok.check == {"record": True, "energies_checked": F.N_CHECK, "max_abs_du_kT": 0.0, "energy_evals": F.N_CHECK}
    r = run_tool("estimate-fe", "train", "trap4", fr, "-o", model, "--steps", "2", "--stage2-steps", "0", "--width",
                 "8", "--layers", "1", "--batch", "16")
    assert r.returncode == 0, r.stderr
    r = run_tool("estimate-fe", "estimate", "trap4", model, fr, "--samples", "20", "--min-overlap", "0", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["frames_check"]["record"] is True
    for cmd in (["train", "dw4", fr, "-o", tmp_path / "dw.pt", "--steps", "1"],
                ["estimate", "dw4", model, fr, "--samples", "20"]):
        r = run_tool("estimate-fe", *cmd)
        line = _one_error_line(r.stderr)
        assert r.returncode == 2 and "trap.npz" in line and "system 'trap4', not 'dw4'" in line and "force field" in line
    assert not (tmp_path / "dw.pt").exists()
    # the same potential from a spec file under another name: the name differs, so it is refused too
    spec = tmp_path / "mine.json"
    spec.write_text(json.dumps({"kind": "harmonic-trap", "n_atoms": 4, "k": [1.0, 4.0, 16.0], "name": "mine"}))
    r = run_tool("estimate-fe", "estimate", spec, model, fr, "--samples", "20")
    assert r.returncode == 2 and "system 'trap4', not 'mine'" in r.stderr and "force field" not in r.stderr
    # a file written before the record: accepted with a warning, its energies still checked
    old = tmp_path / "old.npz"
    write_npz(old, x=d["x"], u=d["u"])
    r = run_tool("estimate-fe", "estimate", "trap4", model, old, "--samples", "20", "--min-overlap", "0", "--json")
    assert r.returncode == 0 and "cannot be checked" in r.stderr
    assert json.loads(r.stdout)["frames_check"]["record"] is False
    r = run_tool("estimate-fe", "estimate", "dw4", model, old, "--samples", "20")
    line = _one_error_line(r.stderr)
    assert r.returncode == 2 and "old.npz" in line and "recorded energy of frame" in line and "dw4" in line
    # a tampered energy (all keys kept): the recomputed u refuses it
    d2 = dict(d)
    d2["u"] = d["u"] + 0.5
    write_npz(tmp_path / "tampered.npz", **d2)
    with pytest.raises(UsageError, match="recorded energy of frame"):
        load_frames(tmp_path / "tampered.npz", builtin("trap4"))
    # a garbage model file: one line, not PyTorch's text
    (tmp_path / "garbage.pt").write_bytes(os.urandom(300))
    r = run_tool("estimate-fe", "estimate", "trap4", tmp_path / "garbage.pt", fr)
    line = _one_error_line(r.stderr)
    assert r.returncode == 1 and "garbage.pt" in line and "weights_only" not in r.stderr and len(r.stderr.splitlines()) == 1


@needs_freesolv
def test_obc2_frames_with_env_vacuum_are_refused_and_the_vertical_gap_baseline(tmp_path):
    """OBC2 frames given with --env vacuum exit 2 (record, and without it the recomputed energies);
    matching frames pass; `baseline --method vertical-gap` is transfer's vertical gap."""
    from icmlkit.lib.core.io import load_npz, write_npz
    from icmlkit.lib.estimate_fe.mm import kcal_per_kT, load_molecule, vertical_gap_kT

    cl = "freesolv:mobley_4434915"  # chloromethane
    f = tmp_path / "cl.obc2.npz"
    r = run_tool("estimate-fe", "sample", cl, "--env", "obc2", "--frames", "20", "--interval", "5", "--equil", "20",
                 "-o", f)
    assert r.returncode == 0, r.stderr
    m = tmp_path / "cl.pt"
    r = run_tool("estimate-fe", "train", cl, f, "--env", "obc2", "-o", m, "--steps", "1", "--stage2-steps", "0",
                 "--width", "8", "--layers", "1", "--batch", "8")
    assert r.returncode == 0, r.stderr
    r = run_tool("estimate-fe", "estimate", cl, m, f, "--env", "vacuum", "--samples", "10")
    line = _one_error_line(r.stderr)
    assert r.returncode == 2 and "cl.obc2.npz" in line and "env 'obc2', not 'vacuum'" in line
    d = load_npz(f)
    write_npz(tmp_path / "old.npz", x=d["x"], u=d["u"])
    r = run_tool("estimate-fe", "estimate", cl, m, tmp_path / "old.npz", "--env", "vacuum", "--samples", "10")
    assert r.returncode == 2 and "recorded energy of frame" in r.stderr
    r = run_tool("estimate-fe", "estimate", cl, m, f, "--env", "obc2", "--samples", "10", "--min-overlap", "0", "--json")
    assert r.returncode == 0, r.stderr
    fc = json.loads(r.stdout)["frames_check"]
    assert fc["record"] is True and fc["max_abs_du_kT"] < 1e-6
    r = run_tool("estimate-fe", "baseline", cl, "--method", "vertical-gap", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    systems = {e: load_molecule(cl, env=e) for e in ("vacuum", "obc2")}
    want = vertical_gap_kT(systems, systems["vacuum"].minimised()) * kcal_per_kT(298.15)
    assert out["method"] == "vertical-gap" and out["energy_evals"] == 2 and out["overlap"] is None
    assert out["delta_g_kcal"] == pytest.approx(want, abs=1e-9) and -2 < want < 0


# ----------------------------------------------------------------------------------- OpenMM


@needs_freesolv
def test_freesolv_molecule_energies_and_md():
    from icmlkit.lib.estimate_fe.mm import freesolv_entry, load_molecule

    vac = load_molecule("freesolv:mobley_1636752", env="vacuum")  # methanol
    obc = load_molecule("freesolv:mobley_1636752", env="obc2")
    assert vac.n_atoms == 6 and list(vac.z) == [6, 8, 1, 1, 1, 1]
    uv, uo = vac.reduced_energy(vac.x0[None]), obc.reduced_energy(vac.x0[None])
    assert np.isfinite(uv).all() and uo[0] < uv[0]  # solvation lowers the energy of a polar molecule
    # rigid motions leave the energy unchanged (the gauge relies on it)
    y = gauge.to_frame(vac.x0[None])
    assert vac.reduced_energy(y)[0] == pytest.approx(uv[0], abs=1e-6)
    fr = vac.sample(20, seed=0, interval=10, equil=100)
    assert fr["x"].shape == (20, 6, 3) and np.allclose(vac.reduced_energy(fr["x"]), fr["u"], atol=1e-4)
    assert freesolv_entry("mobley_1636752")["expt_kcal"] == pytest.approx(-5.10)


@needs_freesolv
def test_baseline_and_bad_molecule_inputs(tmp_path):
    r = run_tool("estimate-fe", "baseline", "freesolv:mobley_4434915", "--windows", "3", "--frames-per-window", "20",
                 "--interval", "20", "--equil", "200", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert math.isfinite(out["delta_g_kcal"]) and len(out["f_kT"]) == 3 and out["energy_evals"] > 0
    r = run_tool("estimate-fe", "sample", "freesolv:no_such_thing", "-o", tmp_path / "f.npz")
    assert r.returncode == 1 and "no_such_thing" in r.stderr
    pt = tmp_path / "x.prmtop"
    pt.write_text("not a prmtop\n")
    (tmp_path / "x.inpcrd").write_text("garbage\n")
    r = run_tool("estimate-fe", "sample", pt, "-o", tmp_path / "f.npz")
    assert r.returncode == 1 and "x.prmtop" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_triatomic_free_energy_matches_quadrature():
    from icmlkit.lib.estimate_fe.pipeline import run_system

    s = builtin("triatomic")
    res = run_system(s, None, n_frames=3000, train_fraction=2 / 3, steps=600, stage2_steps=150, n_samples=2000)
    assert abs(res["f_kT"] - s.f_exact()) < max(0.1, 4 * res["f_err_kT"])
    assert res["overlap"] > 0.05


@needs_freesolv
def test_cli_solvation_pipeline_keys(tmp_path):
    out = tmp_path / "run"
    r = run_tool("estimate-fe", "solvation", "freesolv:mobley_4434915", "--outdir", out, "--frames", "60", "--interval",
                 "10", "--steps", "5", "--stage2-steps", "1", "--samples", "40", "--min-overlap", "0", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for k in ("delta_g_kcal", "f_kT", "f_err_kT", "overlap", "ess_forward", "ess_reverse", "energy_evals", "seconds_md",
              "seconds_train", "seconds_estimate", "units", "freesolv"):
        assert k in d, k
    assert d["freesolv"]["expt_kcal"] == pytest.approx(-0.55) and len(d["f_kT"]) == 2
    assert (out / "manifest.json").exists() and (out / "summary.json").exists()
    assert (out / "mobley_4434915.vacuum.pt").exists() and (out / "mobley_4434915.obc2.frames.npz").exists()


def test_bar_is_shift_covariant_and_survives_huge_works():
    """Molecules have absolute f of hundreds of kT, and a model sample with overlapping atoms has a
    huge work: the estimate, its error and the overlap must not overflow."""
    rng = np.random.default_rng(1)
    base_f, base_r = rng.normal(1, 1, 2000), rng.normal(-1, 1, 800)
    ref = bar_estimate(base_f, base_r)
    for off in (350.0, -900.0):
        wf, wr = base_f + off, base_r - off
        wf[:4] = 1e9
        wf[4] = np.inf
        wr[:2] = 1e7
        r = bar_estimate(wf, wr)
        assert r["delta_f"] - off == pytest.approx(ref["delta_f"], abs=0.01)
        assert math.isfinite(r["delta_f_err"]) and r["delta_f_err"] == pytest.approx(ref["delta_f_err"], rel=0.05)
        assert r["overlap"] == pytest.approx(ref["overlap"], abs=0.02) and r["overlap"] > 0.5


def _pymbar_bar(wF, wR):
    import contextlib
    import io
    import warnings

    from icmlkit.lib.estimate_fe.estimate import import_pymbar

    import_pymbar()
    from pymbar import other_estimators as oe

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = oe.bar(wF, wR)
        return float(r["Delta_f"]), float(r["dDelta_f"]), float(oe.bar_overlap(wF, wR))


@pytest.mark.parametrize("mf,sf,mr,sr,nF,nR", [(1, 1, -1, 1, 2000, 800), (3, 2, 0.5, 1.5, 500, 1500),
                                                (0.2, 0.5, -0.2, 0.5, 300, 300)])
def test_log_space_bar_equals_pymbar_on_gaussian_works(mf, sf, mr, sr, nF, nR):
    rng = np.random.default_rng(nF)
    wF, wR = rng.normal(mf, sf, nF), rng.normal(mr, sr, nR)
    df, ddf, ov = _pymbar_bar(wF, wR)
    r = bar_estimate(wF, wR)
    assert r["delta_f"] == pytest.approx(df, abs=1e-9) and r["delta_f_err"] == pytest.approx(ddf, rel=1e-9)
    assert r["overlap"] == pytest.approx(ov, abs=1e-9)


def test_a_bad_proposal_is_refused_not_reported_with_confidence():
    """Issue 28: works capped at +100 kT before BAR made a poor proposal (3 good samples among 300;
    the rest hundreds to thousands of kT off, as an under-trained molecular model gives) look like
    overlap 0.38 and Delta f 870 +- 0.1. Uncapped, in log space: pymbar's Delta f and overlap, a finite
    error (pymbar's own is NaN here), and the refusal gate fires at the default --min-overlap."""
    from icmlkit.lib.estimate_fe.api import refusal
    from icmlkit.lib.estimate_fe.config import EstimateConfig

    rng = np.random.default_rng(3)
    wF = np.concatenate([rng.normal(1, 1, 3), 150 + rng.exponential(2000, 297)])
    wR = rng.normal(-1, 1, 300)
    df, _, ov = _pymbar_bar(wF, wR)
    r = bar_estimate(wF, wR)
    assert r["delta_f"] == pytest.approx(df, abs=1e-6) and r["overlap"] == pytest.approx(ov, abs=1e-9)
    assert r["overlap"] < 0.03 and math.isfinite(r["delta_f_err"]) and r["delta_f_err"] > 0.3
    out = {"overlap": r["overlap"], "ess_forward": r["ess_forward"], "ess_reverse": r["ess_reverse"], "f_kT": r["delta_f"]}
    assert refusal(out, EstimateConfig().min_overlap) is not None and out["f_kT"] is None
    assert bar_estimate(wF, wR, "mbar")["delta_f"] == pytest.approx(r["delta_f"], abs=1e-6)


def test_cli_demo_writes_its_run_folder(tmp_path):
    out = tmp_path / "demo"
    r = run_tool("estimate-fe", "demo", "--outdir", out, "--steps", "3", "--json", "--no-progress")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert "triatomic" in d["headline"] and d["f_exact_kT"] == pytest.approx(builtin("triatomic").f_exact())
    assert (out / "summary.json").exists() and (out / "manifest.json").exists() and (out / "triatomic.pt").exists()


# ----------------------------------------------------------------------------------- malformed inputs

from fuzzing import FuzzCase, MismatchCase, check_malformed  # noqa: E402

_VALID: dict = {}


def _valid_files(base):
    """A frames file and a tiny model of trap4 (made once, copied into each case's folder)."""
    import shutil

    from icmlkit.lib.estimate_fe import api

    if not _VALID:
        import tempfile

        d = Path(tempfile.mkdtemp(prefix="fe-fuzz-"))
        s = builtin("trap4")
        res = api.sample(api.SampleConfig(frames=40), s, seed=0)
        from icmlkit.lib.core.io import write_json, write_npz

        write_npz(d / "f.npz", **res.arrays)
        tr = api.train(api.TrainConfig(steps=2, stage2_steps=0, width=8, layers=1, components=2, depth=2, batch=8), s,
                       api.load_frames(d / "f.npz", s))
        card.save(d / "m.pt", tr.bundle)
        write_json(d / "trap4.json", {"kind": "harmonic-trap", "n_atoms": 4, "k": [1.0, 4.0, 16.0]})
        _VALID.update(frames=d / "f.npz", model=d / "m.pt", spec=d / "trap4.json")
    out = {}
    for k, p in _VALID.items():
        shutil.copy(p, base / p.name)
        out[k] = base / p.name
    return out


def _dw4_frames(base):
    """The tiny trap4 model and frames of dw4 (the same 4 atoms): the model is of another system."""
    from icmlkit.lib.core.io import write_npz
    from icmlkit.lib.estimate_fe import api

    files = _valid_files(base)
    write_npz(base / "dw.npz", **api.sample(api.SampleConfig(frames=20), builtin("dw4"), seed=0).arrays)
    return {**files, "dw": base / "dw.npz"}


# issue 59 (tests/test_mismatch_sweep.py): a model or frames of another system are refused before any estimate
MISMATCH = [
    MismatchCase("estimate", ["estimate", "dw4", "{model}", "{dw}", "--samples", "10"], _dw4_frames,
                 ("m.pt", "name 'trap4', not 'dw4'"), "model-system"),
    MismatchCase("estimate", ["estimate", "dw4", "{model}", "{frames}", "--samples", "10"], _dw4_frames,
                 ("f.npz", "system 'trap4', not 'dw4'"), "frames-system"),
    MismatchCase("solvation", ["solvation", "dw4", "--samples", "10", "--vacuum-model", "{model}", "--vacuum-frames",
                               "{dw}", "--solvent-model", "{model}", "--solvent-frames", "{dw}"], _dw4_frames,
                 ("m.pt", "name 'trap4', not 'dw4'"), "model-system"),
]

_NPZ = ("missing", "empty", "binary", "folder", "garbage_npz")
_PT = ("missing", "empty", "binary", "folder", "garbage_pt")
_JSON = ("missing", "empty", "binary", "folder", "truncated_json")
_SOLV = ["solvation", "trap4", "--samples", "10", "--min-overlap", "0"]
FUZZ = [
    FuzzCase("sample", ["sample", "{bad}", "--frames", "10", "-o", "{out}/f.npz"], ".json", _JSON, label="system-json"),
    FuzzCase("sample", ["sample", "{bad}", "--frames", "10", "-o", "{out}/f.npz"], ".prmtop", label="system-prmtop"),
    FuzzCase("train", ["train", "{bad}", "{frames}", "-o", "{out}/m.pt", "--steps", "1"], ".json", _JSON,
             _valid_files, label="system-json"),
    FuzzCase("train", ["train", "trap4", "{bad}", "-o", "{out}/m.pt", "--steps", "1"], ".npz", _NPZ, label="frames"),
    FuzzCase("estimate", ["estimate", "{bad}", "{model}", "{frames}", "--samples", "10"], ".json", _JSON,
             _valid_files, label="system-json"),
    FuzzCase("estimate", ["estimate", "trap4", "{bad}", "{frames}", "--samples", "10"], ".pt", _PT, _valid_files,
             label="model"),
    FuzzCase("estimate", ["estimate", "trap4", "{model}", "{bad}", "--samples", "10"], ".npz", _NPZ, _valid_files,
             label="frames"),
    FuzzCase("estimate", ["estimate", "trap4", "{frames}", "{frames}", "--samples", "10"], ".npz", ("missing",),
             _valid_files, label="frames-as-model"),
    FuzzCase("solvation", [*_SOLV, "--vacuum-model", "{bad}", "--vacuum-frames", "{frames}", "--solvent-model",
                           "{model}", "--solvent-frames", "{frames}"], ".pt", _PT, _valid_files, label="vacuum-model"),
    FuzzCase("solvation", [*_SOLV, "--vacuum-model", "{model}", "--vacuum-frames", "{frames}", "--solvent-model",
                           "{model}", "--solvent-frames", "{bad}"], ".npz", _NPZ, _valid_files, label="solvent-frames"),
    FuzzCase("solvation", ["solvation", "{bad}", "--outdir", "{out}/run", "--frames", "20"], ".prmtop",
             label="system-prmtop"),
    FuzzCase("baseline", ["baseline", "{bad}", "--windows", "2"], ".prmtop", label="system-prmtop"),
    FuzzCase("baseline", ["baseline", "{bad}", "--windows", "2"], ".json", _JSON, label="system-json"),
]  # `systems` and `demo` read no files


def _chloromethane_frames(base):
    """Valid vacuum frames of chloromethane (made once, copied into each case's folder)."""
    import shutil

    if "cl" not in _VALID_CL:
        import tempfile

        from icmlkit.lib.core.io import write_npz
        from icmlkit.lib.estimate_fe import api

        d = Path(tempfile.mkdtemp(prefix="fe-fuzz-cl-"))
        s = api.open_system("freesolv:mobley_4434915")
        write_npz(d / "v.npz", **api.sample(api.SampleConfig(frames=12, interval=5, equil=20), s, seed=0).arrays)
        _VALID_CL["cl"] = d / "v.npz"
    shutil.copy(_VALID_CL["cl"], base / "v.npz")
    return {"vac": base / "v.npz"}


_VALID_CL: dict = {}
if FREESOLV.exists():
    FUZZ.append(FuzzCase("train-multi", ["train-multi", "{bad}", "-o", "{out}/m.pt", "--steps", "1"], ".prmtop",
                         label="molecule-prmtop"))
    FUZZ.append(FuzzCase("transfer", ["transfer", "freesolv:mobley_4434915", "--vacuum-model", "{bad}",
                                      "--obc2-model", "{bad}", "--samples", "10"], ".pt", _PT, label="models"))
    FUZZ.append(FuzzCase("transfer", ["transfer", "freesolv:mobley_4434915", "--vacuum-model", "{model}",
                                      "--obc2-model", "{model}", "--samples", "10"], ".pt", ("missing",), _valid_files,
                         label="single-molecule-model"))
    FUZZ.append(FuzzCase("baseline", ["baseline", "freesolv:mobley_4434915", "--method", "endstate-bar",
                                      "--vacuum-frames", "{vac}", "--solvent-frames", "{bad}"], ".npz", _NPZ,
                         _chloromethane_frames, label="endstate-solvent-frames"))


@pytest.mark.parametrize("case", FUZZ, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed("estimate-fe", case, tmp_path, capsys)


def test_device_and_seed_options_only_where_used():
    from icmlkit.cli.estimate_fe import cli

    names = {c: {p.name for p in cmd.params} for c, cmd in cli.commands.items()}
    for c in ("sample", "train", "train-multi", "estimate", "solvation", "baseline", "demo"):
        assert "device" in names[c], c
    assert "device" not in names["systems"] and "seed" not in names["systems"] and "device" not in names["transfer"]
    for c, cmd in cli.commands.items():
        assert "JSON keys:" in (cmd.help or ""), c


def test_usage_errors_name_the_option(tmp_path):
    r = run_tool("estimate-fe", "train", "trap4", tmp_path / "f.npz", "-o", tmp_path / "m.txt")
    assert r.returncode == 2 and "-o" in r.stderr and ".pt" in r.stderr
    r = run_tool("estimate-fe", "systems", "--name", "nope", "-o", tmp_path / "x.json")
    assert r.returncode == 2 and "--name" in r.stderr
    r = run_tool("estimate-fe", "solvation", "trap4", "--vacuum-model", "m.pt")
    assert r.returncode == 2 and "--solvent-frames" in r.stderr
    r = run_tool("estimate-fe", "estimate", "trap4", "m.pt", "f.npz", "--estimator", "tip")
    assert r.returncode == 2 and "--estimator" in r.stderr


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_train_and_estimate_run_on_cuda(tmp_path):
    fr, model = tmp_path / "trap.npz", tmp_path / "trap.pt"
    assert run_tool("estimate-fe", "sample", "trap4", "--frames", "100", "-o", fr, "--device", "cuda").returncode == 0
    r = run_tool("estimate-fe", "train", "trap4", fr, "-o", model, "--steps", "5", "--stage2-steps", "2", "--width",
                 "16", "--layers", "1", "--batch", "16", "--device", "cuda", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["device"].startswith("cuda")
    assert json.loads((tmp_path / "trap.pt.manifest.json").read_text())["device"].startswith("cuda")
    r = run_tool("estimate-fe", "estimate", "trap4", model, fr, "--samples", "50", "--min-overlap", "0",
                 "--device", "cuda", "--json")
    assert r.returncode == 0, r.stderr
    assert math.isfinite(json.loads(r.stdout)["overlap"])


# ----------------------------------------------------------------------------------- issue 28


def test_cli_refuses_an_untrained_and_a_garbage_model(tmp_path):
    """A model trained for one step, and one whose weights are noise, must end in the refusal (exit 3,
    f_kT null, the reason on stderr) at the default --min-overlap, never in a confident number."""
    fr, model = tmp_path / "trap.npz", tmp_path / "bad.pt"
    assert run_tool("estimate-fe", "sample", "trap4", "--frames", "400", "-o", fr).returncode == 0
    r = run_tool("estimate-fe", "train", "trap4", fr, "-o", model, "--steps", "1", "--stage2-steps", "0", "--width", "16",
                 "--layers", "1", "--batch", "16")
    assert r.returncode == 0, r.stderr
    bundle = torch.load(model, weights_only=True)
    g = torch.Generator().manual_seed(0)
    bundle["state_dict"] = {k: (v + 3 * torch.randn(v.shape, generator=g) if v.is_floating_point() else v)
                            for k, v in bundle["state_dict"].items()}
    card.save(tmp_path / "garbage.pt", bundle)
    for m in (model, tmp_path / "garbage.pt"):
        r = run_tool("estimate-fe", "estimate", "trap4", m, fr, "--samples", "300", "--json")
        assert r.returncode == 3, (m, r.stdout, r.stderr)
        out = json.loads(r.stdout)
        assert out["f_kT"] is None and out["f_err_kT"] is None and out["overlap"] < 0.03
        assert "overlap" in r.stderr and "no free energy is reported" in r.stderr


@pytest.mark.slow
@needs_freesolv
def test_cli_refuses_an_untrained_methanol_model(tmp_path):
    """The issue's case: an under-trained methanol model (3 steps) is refused, not reported."""
    fr, model = tmp_path / "meoh.npz", tmp_path / "meoh.pt"
    meoh = "freesolv:mobley_1636752"
    assert run_tool("estimate-fe", "sample", meoh, "--frames", "200", "--interval", "10", "--equil", "200",
                    "-o", fr).returncode == 0
    r = run_tool("estimate-fe", "train", meoh, fr, "-o", model, "--steps", "3", "--stage2-steps", "0", "--width", "16",
                 "--layers", "1", "--batch", "16")
    assert r.returncode == 0, r.stderr
    r = run_tool("estimate-fe", "estimate", meoh, model, fr, "--samples", "300", "--json")
    assert r.returncode == 3 and json.loads(r.stdout)["f_kT"] is None and "overlap" in r.stderr


def test_endstate_bar_on_two_traps_gives_the_exact_difference():
    """End-state BAR's plumbing (decorrelation, cross energies, signs, units) on two harmonic traps whose
    free-energy difference is exact: Delta G = kT (F_b - F_a)."""
    from icmlkit.lib.estimate_fe.mm import endstate_bar, kcal_per_kT
    from icmlkit.lib.estimate_fe.systems import analytic_from_spec

    specs = {"vacuum": {"kind": "harmonic-trap", "n_atoms": 2, "k": [1.0, 2.0, 3.0]},
             "obc2": {"kind": "harmonic-trap", "n_atoms": 2, "k": [1.5, 2.5, 2.0]}}
    systems = {e: analytic_from_spec(s) for e, s in specs.items()}
    frames = {e: {**systems[e].sample(3000, seed=i), "energy_evals": 0} for i, e in enumerate(specs)}
    out = endstate_bar(systems, frames, 300.0)
    exact = (exact_free_energy(specs["obc2"]) - exact_free_energy(specs["vacuum"])) * kcal_per_kT(300.0)
    assert abs(out["delta_g_kcal"] - exact) < 4 * out["delta_g_err_kcal"] and out["delta_g_err_kcal"] < 0.02
    assert out["energy_evals_estimate"] == sum(out["n_effective"]) and 0.3 < out["overlap"] <= 1
    # the other state's energies only on the decorrelated frames (exact draws: nearly all of them)
    assert all(2000 <= k <= 3000 for k in out["n_effective"])


@pytest.mark.slow
@needs_freesolv
def test_cli_baseline_endstate_bar_from_md_and_from_files(tmp_path):
    cl = "freesolv:mobley_4434915"  # chloromethane
    md = ["--frames-per-window", "150", "--interval", "20", "--equil", "500"]
    r = run_tool("estimate-fe", "baseline", cl, "--method", "endstate-bar", *md, "--json")
    assert r.returncode == 0, r.stderr
    a = json.loads(r.stdout)
    assert a["method"] == "endstate-bar" and a["frames_from"] == "md" and abs(a["delta_g_kcal"] - (-0.24)) < 0.3
    assert a["energy_evals"] == a["energy_evals_md"] + a["energy_evals_estimate"] and a["overlap"] > 0.5
    v, s = tmp_path / "v.npz", tmp_path / "s.npz"
    for env, path in (("vacuum", v), ("obc2", s)):
        assert run_tool("estimate-fe", "sample", cl, "--env", env, "--frames", "150", "--interval", "20", "--equil",
                        "500", "-o", path).returncode == 0
    r = run_tool("estimate-fe", "baseline", cl, "--method", "endstate-bar", "--vacuum-frames", v, "--solvent-frames", s,
                 "--json")
    assert r.returncode == 0, r.stderr
    b = json.loads(r.stdout)
    assert b["frames_from"] == "files" and abs(b["delta_g_kcal"] - a["delta_g_kcal"]) < 0.15
    r = run_tool("estimate-fe", "baseline", cl, "--method", "endstate-bar", "--vacuum-frames", s, "--solvent-frames", v)
    assert r.returncode == 2 and "s.npz" in r.stderr and "env 'obc2', not 'vacuum'" in r.stderr
    r = run_tool("estimate-fe", "baseline", cl, "--method", "endstate-bar", "--vacuum-frames", v)
    assert r.returncode == 2 and "--solvent-frames" in r.stderr
    r = run_tool("estimate-fe", "baseline", cl, "--vacuum-frames", v, "--solvent-frames", s)
    assert r.returncode == 2 and "endstate-bar" in r.stderr


@pytest.mark.parametrize("bonds", [[(0, 1), (1, 2), (0, 3), (0, 4), (0, 5), (2, 6)],  # atom 2 on atom 1
                                   [(0, 1), (0, 2), (2, 3), (2, 4), (4, 5), (4, 6), (1, 7)]])  # atom 2 on atom 0
def test_internal_coordinates_round_trip_with_the_exact_log_jacobian(bonds):
    """t -> frame-gauge coordinates -> t is the identity, and log J of the chart equals
    log |det d y_free / d t_free| (autograd) + the frame gauge's log(x2^2 y3), the measure the
    triatomic quadrature test checks."""
    from icmlkit.lib.estimate_fe.internal import ZMatrix, free_mask, zmatrix_refs

    n = 1 + max(max(b) for b in bonds)
    par, g, d = zmatrix_refs(n, bonds)
    assert all(0 <= par[i] < i for i in range(1, n))
    rng = np.random.default_rng(n)
    x = rng.normal(size=(6, n, 3)) * 1.3
    zm = ZMatrix(par, g, d, np.full((n, 3), -4.0), np.full((n, 3), 9.0))
    t, lj = zm.to_free(x)
    y, lj2 = zm.to_cartesian(t)
    assert np.allclose(y, gauge.to_frame(x), atol=1e-10) and np.allclose(lj, lj2, atol=1e-10)
    # distances survive (a rigid motion of the input)
    dist = lambda a: np.linalg.norm(a[:, :, None] - a[:, None], axis=-1)  # noqa: E731
    assert np.allclose(dist(y), dist(x), atol=1e-10)
    free, gfree = torch.as_tensor(free_mask(n)), torch.as_tensor(gauge.free_mask(n, True))

    def f(tf):
        tt = torch.zeros(n, 3, dtype=torch.float64)
        tt[free] = tf
        return zm.cartesian(zm.from_unit(tt[None]))[0][gfree]

    for k in range(len(x)):
        tf = torch.as_tensor(t[k])[free]
        logdet = float(torch.linalg.slogdet(torch.autograd.functional.jacobian(f, tf))[1])
        assert logdet + gauge.log_jacobian(y[k:k + 1])[0] == pytest.approx(lj[k], abs=1e-8)
    with pytest.raises(InputError, match="connected bond graph"):
        zmatrix_refs(4, [(0, 1), (2, 3)])


def test_internal_coordinate_model_trains_estimates_and_round_trips_its_file(tmp_path):
    s = builtin("triatomic")
    fr = s.sample(400, seed=0, chains=50, burn_in=200, thin=2)
    bundle, info = card.train(s, fr["x"][:300], fr["u"][:300], steps=30, stage2_steps=5, batch=64, d=16, heads=2,
                              enc_layers=1, dec_layers=1, K=3, coords="internal")
    assert bundle["coords"]["kind"] == "internal" and math.isfinite(info["val_nll"])
    card.save(tmp_path / "m.pt", bundle)
    loaded = card.load(tmp_path / "m.pt")
    zm = card.zmatrix_of(loaded)
    # the force-field boxes of the triatomic: bonds b +- 8 / sqrt(kb), the angle theta0 +- 8 / sqrt(ka) within [0, pi]
    assert zm.lo[1, 0] == pytest.approx(1 - 8 / math.sqrt(200)) and zm.lo[2, 1] + zm.width[2, 1] == pytest.approx(math.pi)
    res = card.estimate(loaded, s, fr["x"][300:], fr["u"][300:], n_samples=200)
    assert math.isfinite(res["f_kT"]) and res["nonfinite_model_energies"] == 0 and 0 < res["overlap"] <= 1
    model = card.model_from_bundle(loaded)
    y, lq = model.sample(20, torch.Generator().manual_seed(1))
    x, lj = card.free_to_frames(y.numpy(), loaded["order"], True, zm)
    assert np.allclose(card.prepare(x, np.zeros(20), loaded["order"], True, zm).y, y.numpy(), atol=1e-9)
    r = run_tool("estimate-fe", "train", "trap4", tmp_path / "none.npz", "-o", tmp_path / "t.pt", "--coords", "bogus")
    assert r.returncode == 2 and "--coords" in r.stderr


def test_internal_coordinates_need_a_bond_graph(tmp_path):
    fr = tmp_path / "trap.npz"
    assert run_tool("estimate-fe", "sample", "trap4", "--frames", "50", "-o", fr).returncode == 0
    r = run_tool("estimate-fe", "train", "trap4", fr, "-o", tmp_path / "m.pt", "--coords", "internal", "--steps", "1")
    assert r.returncode == 2 and "bond graph" in r.stderr and not (tmp_path / "m.pt").exists()


@pytest.mark.slow
def test_internal_coordinate_triatomic_matches_quadrature():
    from icmlkit.lib.estimate_fe.pipeline import run_system

    s = builtin("triatomic")
    res = run_system(s, None, n_frames=3000, train_fraction=2 / 3, steps=300, stage2_steps=50, n_samples=1000,
                     arch={"coords": "internal"})
    assert abs(res["f_kT"] - s.f_exact()) < max(0.05, 4 * res["f_err_kT"]) and res["overlap"] > 0.5


@pytest.mark.slow
@needs_freesolv
def test_force_field_boxes_hold_the_md_frames():
    """Methanol's internal-coordinate boxes come from its force field alone and contain every MD frame."""
    from icmlkit.lib.estimate_fe.internal import build_zmatrix
    from icmlkit.lib.estimate_fe.mm import load_molecule

    vac = load_molecule("freesolv:mobley_1636752", env="vacuum")
    fr = vac.sample(300, seed=0, interval=20, equil=500)
    order = gauge.dfs_order(vac.z, vac.bonds)
    zm = build_zmatrix(vac, order, fr["x"][:1])
    t, _ = zm.to_free(fr["x"][:, order])
    free = zm.free
    assert (t[:, free] >= 0).all() and (t[:, free] < 1).all()
    # the bond-length boxes are narrow: 16 thermal sigmas (about 0.5 A for a C-H bond)
    assert zm.width[1:, 0].max() < 0.8


# ----------------------------------------------------------------------------------- transfer

_DB = """# made-up FreeSolv-style database (compound; SMILES; name; expt; err; calc; err; ...)
t_1; CO; m-ol; -5.1; 0.6; -3.5; 0.0
t_2; CCC; p-ane; 2.0; 0.2; 1.5; 0.0
t_3; CC#N; ac-nitrile; -3.9; 0.2; -3.5; 0.0
t_4; [NH4+]; ion; -80; 1; -80; 0.0
t_5; CCCC; b-ane; 2.1; 0.2; 2.0; 0.0
t_6; CBr; br; -0.8; 0.2; -0.5; 0.0
t_7; CS; m-thiol; -1.2; 0.2; -0.3; 0.0
t_8; C; m-ane; 2.0; 0.2; 2.4; 0.0
t_9; CCl; cl; -0.6; 0.6; 0.8; 0.0
"""


def test_transfer_rule_and_split_keep_held_out_molecules_out_of_training(tmp_path):
    from icmlkit.lib.estimate_fe import transfer

    db = tmp_path / "database.txt"
    db.write_text(_DB)
    picked = [e["compound"] for e in transfer.select_freesolv(db)]
    assert picked == ["t_1", "t_2", "t_7", "t_9"]  # 2-3 heavy atoms of C N O S Cl, no brackets, no triple bond
    train, held = transfer.split(picked, 1)
    assert set(train).isdisjoint(held) and sorted(train + held) == picked
    assert transfer.split(picked[::-1], 1) == (train, held)  # order does not matter
    with pytest.raises(InputError):
        transfer.split(picked, 4)
    # the trained model lists exactly its training molecules, never a held-out one
    ctxs, frames = _toy_contexts()
    bundle, info = transfer.train_multi([c for c in ctxs if c.name != "held"], {k: v for k, v in frames.items()
                                        if k != "held"}, steps=3, batch=8, d=8, heads=2, layers=1, K=2)
    assert bundle["molecules"] == ["a3", "b4"] and "held" not in info["frames_per_molecule"]


def _toy_contexts():
    """Three made-up molecules (3, 4 and 4 atoms, chains) with hand-made internal-coordinate boxes,
    and frames drawn uniformly inside the boxes."""
    from icmlkit.lib.estimate_fe.internal import ZMatrix, free_mask, zmatrix_refs
    from icmlkit.lib.estimate_fe.radix import RadixMap
    from icmlkit.lib.estimate_fe.transfer import Context

    rng = np.random.default_rng(0)
    out, frames = [], {}
    for name, n, zs in (("a3", 3, [6, 8, 1]), ("b4", 4, [6, 6, 1, 1]), ("held", 4, [8, 6, 1, 1])):
        bonds = [(i, i + 1) for i in range(n - 1)]
        par, g, d = zmatrix_refs(n, bonds)
        lo, w = np.zeros((n, 3)), np.ones((n, 3))
        lo[:, 0], w[:, 0] = 0.9, 0.6
        lo[:, 1], w[:, 1] = 1.4, 1.2
        lo[:, 2], w[:, 2] = -math.pi, 2 * math.pi
        zm = ZMatrix(par, g, d, lo, w)
        t = np.where(zm.free, rng.uniform(0.05, 0.95, (64, n, 3)), 0.0)
        x, _ = zm.to_cartesian(t)
        ref = x[:1]
        dist = np.linalg.norm(ref[:, :, None] - ref[:, None], axis=-1)
        out.append(Context(name, list(range(n)), zm, RadixMap(np.zeros((n, 3)), 1.0, free_mask(n), r=2, L=1),
                           np.array(zs), dist))
        frames[name] = (x, np.zeros(len(x)))
    return out, frames


def test_multi_molecule_log_q_integrates_to_one_on_a_small_system():
    """A model shared by molecules of 3 and 4 atoms, bound to the 3-atom one after training on both:
    its density integrates to 1 over the unit box of the 3 free internal coordinates, and binding
    another molecule in between changes nothing."""
    from icmlkit.lib.estimate_fe import transfer

    ctxs, frames = _toy_contexts()
    bundle, _ = transfer.train_multi(ctxs[:2], {k: frames[k] for k in ("a3", "b4")}, steps=20, batch=16, d=16, heads=2,
                                     layers=1, K=2)
    m = transfer.model_for(bundle, ctxs[0])
    rm = ctxs[0].radix
    assert _integral(m, rm, 3, [(1, 0), (2, 0), (2, 1)], 12) == pytest.approx(1.0, abs=2e-3)
    t = torch.as_tensor(np.where(ctxs[0].zmat.free, 0.3, 0.0))[None].double()
    before = m.log_prob(t)
    m.bind(ctxs[1].radix, ctxs[1].z, ctxs[1].ref_dist)
    y, lq = m.sample(8, torch.Generator().manual_seed(0))
    assert y.shape == (8, 4, 3) and torch.allclose(m.log_prob(y), lq, atol=1e-6)
    m.bind(ctxs[0].radix, ctxs[0].z, ctxs[0].ref_dist)
    assert torch.equal(m.log_prob(t), before)
    with pytest.raises(InputError, match="not a multi-molecule"):
        transfer.model_for({"format": "icmlkit-card-2"}, ctxs[0])


def test_multi_molecule_training_resumes_to_the_same_bytes(tmp_path, interrupting_checkpointer):
    """train_multi interrupted after its first checkpoint and resumed gives the bundle of an
    uninterrupted run (weights, optimiser path and both random streams restored)."""
    from icmlkit.lib.core.checkpoint import Checkpointer
    from icmlkit.lib.core.io import torch_bytes
    from icmlkit.lib.estimate_fe import transfer

    ctxs, frames = _toy_contexts()
    fr = {k: frames[k] for k in ("a3", "b4")}
    kw = dict(steps=12, batch=16, d=16, heads=2, layers=1, K=2, seed=2)
    full, _ = transfer.train_multi(ctxs[:2], fr, **kw)
    path = tmp_path / "m.pt.ckpt.pt"
    with pytest.raises(Interrupted):
        transfer.train_multi(ctxs[:2], fr, checkpointer=interrupting_checkpointer(path, every=5), **kw)
    resumed, info = transfer.train_multi(ctxs[:2], fr, checkpointer=Checkpointer(path, every=5, resume=True), **kw)
    assert info["steps_done"] == 12 and torch_bytes(full) == torch_bytes(resumed)
    with pytest.raises(UsageError, match="other settings"):
        transfer.train_multi(ctxs[:2], fr, checkpointer=Checkpointer(path, resume=True), **{**kw, "seed": 3})


@needs_freesolv
def test_cli_train_multi_then_transfer_to_an_unseen_molecule(tmp_path):
    """`train-multi` in both environments on methanol and methanethiol, then `transfer` to
    chloromethane: finite estimates with intervals, counted evaluations, not seen in training; the
    vacuum model given as the OBC2 one is refused; --min-ess 1 exits 3; models trained without
    constraints are refused for a molecule with --constraints hbonds."""
    small = ["--md-frames", "30", "--md-interval", "5", "--md-equil", "20", "--steps", "6", "--batch", "8",
             "--width", "8", "--layers", "1", "--components", "2"]
    for env in ("vacuum", "obc2"):
        r = run_tool("estimate-fe", "train-multi", "freesolv:mobley_1636752", "freesolv:mobley_525934", "--env", env,
                     "-o", tmp_path / f"{env}.pt", *small, "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["molecules"] == ["mobley_1636752", "mobley_525934"]
    args = ["transfer", "freesolv:mobley_4434915", "--vacuum-model", tmp_path / "vacuum.pt", "--samples", "40"]
    r = run_tool("estimate-fe", *args, "--obc2-model", tmp_path / "obc2.pt", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for k in ("delta_g_independent_kcal", "delta_g_paired_kcal", "vertical_gap_kcal"):
        assert math.isfinite(out[k]), k
    assert out["ci_paired_kcal"][0] <= out["delta_g_paired_kcal"] <= out["ci_paired_kcal"][1]
    assert out["energy_evals_paired"] == 2 * out["energy_evals_independent"] == 4 * 40
    assert out["seen_in_training"] == {"vacuum": False, "obc2": False}
    r = run_tool("estimate-fe", *args, "--obc2-model", tmp_path / "vacuum.pt")
    assert r.returncode == 2 and "trained in vacuum" in r.stderr
    r = run_tool("estimate-fe", *args, "--obc2-model", tmp_path / "obc2.pt", "--min-ess", "1")
    assert r.returncode == 3 and "--min-ess" in r.stderr
    r = run_tool("estimate-fe", *args, "--obc2-model", tmp_path / "obc2.pt", "--constraints", "hbonds")
    assert r.returncode == 1 and "--constraints none" in r.stderr


class _ToyEnergy:
    """beta U = sum of squared pair distances (+ a constant shift), counting its evaluations."""

    def __init__(self, shift: float):
        self.shift, self.energy_evals = shift, 0

    def reduced_energy(self, x):
        self.energy_evals += len(x)
        d = np.linalg.norm(x[:, :, None] - x[:, None], axis=-1)
        return 0.5 * (d ** 2).sum(axis=(1, 2)) / 4 + self.shift


def test_paired_hydration_estimate_recovers_a_constant_shift_exactly():
    """With u_obc2 = u_vac + 1.7 every sample's work differs by exactly 1.7, so the paired estimate
    (the same pooled samples in both environments) is 1.7 with a zero-width interval, while the
    per-environment difference is not; the paired route costs twice the energy evaluations."""
    from icmlkit.lib.estimate_fe import transfer

    ctxs, frames = _toy_contexts()
    bundle, _ = transfer.train_multi(ctxs[:2], {k: frames[k] for k in ("a3", "b4")}, steps=10, batch=16, d=16, heads=2,
                                     layers=1, K=2)
    other, _ = transfer.train_multi(ctxs[:2], {k: frames[k] for k in ("a3", "b4")}, steps=10, batch=16, d=16, heads=2,
                                    layers=1, K=2, seed=1)
    systems = {"vacuum": _ToyEnergy(0.0), "obc2": _ToyEnergy(1.7)}
    res = transfer.hydration_unseen({"vacuum": bundle, "obc2": other}, {"vacuum": ctxs[2], "obc2": ctxs[2]}, systems,
                                    n_samples=64, n_boot=20)
    assert res["delta_f_paired_kT"] == pytest.approx(1.7, abs=1e-9)
    assert res["ci_paired_kT"][1] - res["ci_paired_kT"][0] < 1e-9
    assert abs(res["delta_f_independent_kT"] - 1.7) > 1e-6
    assert res["energy_evals_paired"] == 4 * 64 and res["energy_evals_independent"] == 2 * 64
    assert set(res["ess_forward"]["vacuum"]) == {"vacuum", "obc2"}


@pytest.mark.slow
@needs_freesolv
def test_transfer_estimate_on_an_unseen_molecule_needs_no_md():
    """A model trained on two molecules estimates F of a third from samples alone: finite, with an
    interval, its energy evaluations exactly the samples (no MD)."""
    from icmlkit.lib.estimate_fe import transfer
    from icmlkit.lib.estimate_fe.mm import load_molecule

    ctxs, frames = [], {}
    for cid in ("mobley_1636752", "mobley_525934"):  # methanol, methanethiol
        s = load_molecule(f"freesolv:{cid}")
        ctxs.append(transfer.context(s, s.minimised()))
        fr = s.sample(200, seed=0, interval=10, equil=300)
        frames[s.name] = (fr["x"], fr["u"])
    bundle, _ = transfer.train_multi(ctxs, frames, steps=40, batch=32, d=16, heads=2, layers=1, K=2)
    cl = load_molecule("freesolv:mobley_4434915")  # chloromethane, never seen
    res = transfer.estimate_unseen(bundle, transfer.context(cl, cl.minimised()), cl, n_samples=200, n_boot=50)
    assert math.isfinite(res["f_kT"]) and res["ci_kT"][0] <= res["ci_kT"][1] and res["energy_evals"] == 200


def test_stage_three_reverse_kl_counts_its_energy_calls(tmp_path):
    """--kl-steps: each Stage III step evaluates the target energy on one batch of model samples;
    the training summary counts them, and the model still gives a finite estimate."""
    fr = tmp_path / "tri.npz"
    assert run_tool("estimate-fe", "sample", "triatomic", "--frames", "200", "-o", fr).returncode == 0
    r = run_tool("estimate-fe", "train", "triatomic", fr, "-o", tmp_path / "m.pt", "--steps", "6", "--stage2-steps",
                 "2", "--kl-steps", "3", "--batch", "32", "--width", "16", "--layers", "1", "--coords", "internal",
                 "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["energy_evals_train"] == 3 * 32 and out["steps_done"] == 11
    r = run_tool("estimate-fe", "estimate", "triatomic", tmp_path / "m.pt", fr, "--samples", "100", "--min-overlap", "0",
                 "--json")
    assert r.returncode == 0 and math.isfinite(json.loads(r.stdout)["f_kT"])


# ----------------------------------------------------------------------------------- X-H constraints


def test_fixed_bond_lengths_round_trip_on_the_constraint_manifold():
    """A chart with fixed bond lengths places those atoms at exactly the constraint length, round-trips
    its free coordinates, and its log J is the free chart's log J at the same point less the log widths
    of the fixed axes (the measure of delta(r - d) dx)."""
    from icmlkit.lib.estimate_fe.internal import ZMatrix, zmatrix_refs

    bonds = [(0, 1), (1, 2), (0, 3), (0, 4), (0, 5), (2, 6)]
    n = 7
    par, g, d = zmatrix_refs(n, bonds)
    lo, width = np.full((n, 3), 0.5), np.full((n, 3), 2.0)
    lo[:, 1], width[:, 1] = 0.2, 2.7
    lo[3:, 2], width[3:, 2] = -math.pi, 2 * math.pi
    fixed = np.zeros((n, 3), dtype=bool)
    fixed[[3, 4, 6], 0] = True
    lo[[3, 4, 6], 0] = [1.09, 1.10, 0.97]
    zc, zf = ZMatrix(par, g, d, lo, width, fixed), ZMatrix(par, g, d, lo, width)
    assert zc.free.sum() == zf.free.sum() - 3 and ZMatrix.from_state(zc.state()).fixed.tolist() == fixed.tolist()
    t = np.random.default_rng(3).uniform(0.05, 0.95, size=(5, n, 3))
    t[:, ~zc.free] = 0.0
    y, lj = zc.to_cartesian(t)
    for i, dist in ((3, 1.09), (4, 1.10), (6, 0.97)):
        assert np.allclose(np.linalg.norm(y[:, i] - y[:, par[i]], axis=-1), dist, atol=1e-12)
    t2, lj2 = zc.to_free(y)
    assert np.allclose(t2, t, atol=1e-10) and np.allclose(lj2, lj, atol=1e-10)
    _, lj_free = zf.to_free(y)
    assert np.allclose(lj, lj_free - np.log(width[fixed]).sum(), atol=1e-10)
    with pytest.raises(InputError, match="only bond lengths"):
        ZMatrix(par, g, d, lo, width, np.eye(n, 3, k=1, dtype=bool))


@needs_freesolv
def test_hbond_constraints_hold_in_md_model_samples_and_files(tmp_path):
    """--constraints hbonds: MD frames and CARD samples both sit on the constraint lengths; frames,
    models and systems of different settings are refused; Cartesian coordinates cannot hold a bond."""
    from icmlkit.lib.estimate_fe.api import load_frames, open_system
    from icmlkit.lib.estimate_fe.mm import load_molecule

    s = load_molecule("freesolv:mobley_1636752", env="vacuum", constraints="hbonds")  # methanol
    held = s.bonded_params()["constraints"]
    assert len(held) == 4 and all(min(ij) >= 0 for ij in held)  # three C-H and the O-H
    fr = s.sample(120, seed=0, interval=10, equil=100)
    for (i, j), dist in held.items():
        assert np.abs(np.linalg.norm(fr["x"][:, i] - fr["x"][:, j], axis=-1) - dist).max() < 1e-4
    bundle, info = card.train(s, fr["x"][:100], fr["u"][:100], steps=5, stage2_steps=0, batch=32, d=16, heads=2,
                              enc_layers=1, dec_layers=1, K=2, coords="internal")
    zm = card.zmatrix_of(bundle)
    assert info["n_free"] == 3 * s.n_atoms - 6 - 4 and zm.fixed.sum() == 4
    model = card.model_from_bundle(bundle)
    y, _ = model.sample(16, torch.Generator().manual_seed(0))
    x, _ = card.free_to_frames(y.numpy(), bundle["order"], True, zm)
    for (i, j), dist in held.items():
        assert np.allclose(np.linalg.norm(x[:, i] - x[:, j], axis=-1), dist, atol=1e-9)
    assert np.isfinite(s.reduced_energy(x)).all()
    flexible = load_molecule("freesolv:mobley_1636752", env="vacuum")
    with pytest.raises(InputError, match="--constraints hbonds"):
        card.check_system(bundle, flexible, "m.pt")
    with pytest.raises(UsageError, match="--coords internal"):
        card.build(s, fr["x"][:20], coords="cartesian")
    with pytest.raises(UsageError, match="for molecules"):
        open_system("trap4", constraints="hbonds")
    # a frames file remembers its setting; the CLI refuses to train across settings
    f = tmp_path / "meoh.npz"
    r = run_tool("estimate-fe", "sample", "freesolv:mobley_1636752", "--constraints", "hbonds", "--frames", "20",
                 "--interval", "5", "--equil", "10", "-o", f)
    assert r.returncode == 0, r.stderr
    with pytest.raises(InputError, match="constraints 'hbonds'"):
        load_frames(f, flexible)
    r = run_tool("estimate-fe", "train", "freesolv:mobley_1636752", f, "-o", tmp_path / "m.pt", "--steps", "1")
    assert r.returncode == 1 and "hbonds" in r.stderr and not (tmp_path / "m.pt").exists()


def test_alanine_dipeptide_and_pdb_files(tmp_path):
    """The built-in ACE-ALA-NME (amber14): 22 atoms, L at CA, finite MD energies in both environments,
    its .pdb readable as a SYSTEM; a .pdb amber14 cannot parametrise is refused with exit 1."""
    from icmlkit.lib.estimate_fe.api import open_system
    from icmlkit.lib.estimate_fe.mm import alanine_dipeptide_pdb

    s = open_system("alanine-dipeptide")
    assert s.n_atoms == 22 and len(s.bonds) == 21 and sorted(set(s.z.tolist())) == [1, 6, 7, 8]
    x = s.x0
    name = [a.name for a in s._top.topology.atoms()]
    n, ca, c, cb = (name.index(k, 6) for k in ("N", "CA", "C", "CB"))
    assert np.linalg.det(np.stack([x[n] - x[ca], x[c] - x[ca], x[cb] - x[ca]])) > 0  # L-alanine
    for env in ("vacuum", "obc2"):
        fr = open_system("alanine-dipeptide", env=env).sample(20, seed=0, interval=5, equil=50)
        assert np.isfinite(fr["u"]).all()
    r = run_tool("estimate-fe", "sample", alanine_dipeptide_pdb(), "--frames", "10", "--interval", "2", "--equil", "5",
                 "-o", tmp_path / "a.npz")
    assert r.returncode == 0, r.stderr
    bad = tmp_path / "bad.pdb"
    bad.write_text("ATOM      1  XX  UNK A   1       0.000   0.000   0.000  1.00  0.00          Xx\nEND\n")
    r = run_tool("estimate-fe", "sample", bad, "--frames", "10", "-o", tmp_path / "b.npz")
    assert r.returncode == 1 and "bad.pdb" in r.stderr and not (tmp_path / "b.npz").exists()


@pytest.mark.parametrize("argv", [["solvation", "trap4", "--outdir", "{tmp}/sv"],
                                  ["train-multi", "trap4", "-o", "{tmp}/m.pt"]])
def test_molecule_commands_refuse_an_analytic_system_in_one_line(argv, tmp_path, capsys):
    """Commands only molecules serve named the failure by a TypeError/AttributeError of the analytic
    system class; now one line naming the command and the system, exit 2, nothing written."""
    from fuzzing import run_inprocess

    argv = [a.format(tmp=tmp_path) for a in argv]
    code, stdout, stderr = run_inprocess("estimate-fe", argv, capsys)
    assert code == 2 and stdout == "", (code, stderr)
    what = "solvation --outdir" if argv[0] == "solvation" else argv[0]
    assert stderr.strip().splitlines()[-1] == f"Error: `{what}` needs a molecule (a .prmtop, a .pdb or freesolv:<id>), not trap4"
    assert not any(tmp_path.iterdir())
