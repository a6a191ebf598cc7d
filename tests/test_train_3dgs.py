"""train-3dgs: rasterizer (analytic image, tiles = dense, gradients and HVPs vs finite differences),
Hutchinson vs the exact Hessian diagonal, the closed-form Hellinger clips, .ply round trip, scene
errors, and the command line (generate, fit, resume, eval, render, compare, determinism, malformed inputs);
issue 31: the prototype's options (each changes only what it names), the Gauss-Newton curvature of the
training loss vs finite differences, the scaled schedule's travel budget, pair-sorted tile lists,
recomputation, and CPU vs CUDA renders (``cuda`` marker)."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

from conftest import run_tool
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.train_3dgs.camera import Cameras, look_at, sphere_cameras
from icmlkit.lib.train_3dgs.memory import TensorMemoryMeter, tensor_bytes
from icmlkit.lib.train_3dgs.config import FitConfig
from icmlkit.lib.train_3dgs.metrics import GN_FLOOR, gs_loss, reg_residual, regularisers, train_residual
from icmlkit.lib.train_3dgs.model import GROUPS, Gaussians, covariance, knn_log_scales, quat_to_rotmat
from icmlkit.lib.train_3dgs.optim import (GaussianTrustRegion, exp_schedule, hellinger_sq, named_groups, rotation_kappa,
                                  scaled_radii, sqrt_radius_sum)
from icmlkit.lib.train_3dgs.ply import read_ply, write_ply
from icmlkit.lib.train_3dgs.rasterize import ALPHA_MAX, LOWPASS, _tile_lists, project, render, smootherstep_taper
from icmlkit.lib.train_3dgs.scene import read_scene, synthetic_gaussians
from icmlkit.lib.train_3dgs.train import curvature_refresh, initial_gaussians, tr_radii
from icmlkit.lib.train_3dgs.sh import C0, rgb_to_sh0

D = torch.float64


def random_gaussians(n, degree, seed, spread=0.6, dtype=D) -> Gaussians:
    g = torch.Generator().manual_seed(seed)
    return Gaussians(
        means=(torch.rand(n, 3, generator=g, dtype=dtype) * 2 - 1) * spread,
        log_scales=torch.log(0.15 + 0.2 * torch.rand(n, 3, generator=g, dtype=dtype)),
        quats=torch.randn(n, 4, generator=g, dtype=dtype),
        opacity_logits=torch.randn(n, generator=g, dtype=dtype),
        sh0=rgb_to_sh0(0.2 + 0.6 * torch.rand(n, 1, 3, generator=g, dtype=dtype)),
        shN=0.1 * torch.randn(n, (degree + 1) ** 2 - 1, 3, generator=g, dtype=dtype), sh_degree=degree)


def small_cams(n=2, size=12, seed=0, dtype=D) -> Cameras:
    return sphere_cameras(n, 3.0, size, size, 50.0, torch.Generator().manual_seed(seed), dtype=dtype)


# --------------------------------------------------------------------------- rasterizer


def test_single_gaussian_matches_analytic_image():
    """An isotropic Gaussian on the optical axis: the image is bg + alpha (c - bg) with alpha the
    2-D Gaussian of variance (f s / z)^2 + 0.3 (times the taper), computed here independently."""
    s, z, f, W = 0.1, 3.0, 20.0, 16
    g = Gaussians(torch.zeros(1, 3, dtype=D), torch.full((1, 3), math.log(s), dtype=D),
                  torch.tensor([[1.0, 0, 0, 0]], dtype=D), torch.tensor([0.5], dtype=D),
                  rgb_to_sh0(torch.tensor([[[0.9, 0.2, 0.4]]], dtype=D)), torch.zeros(1, 0, 3, dtype=D), 0)
    R, t = look_at(torch.tensor([[0.0, 0.0, -z]], dtype=D), torch.zeros(1, 3, dtype=D), up=(0.0, -1.0, 0.0))
    cams = Cameras(R, t, torch.tensor([f], dtype=D), torch.tensor([f], dtype=D), torch.tensor([W / 2], dtype=D),
                   torch.tensor([W / 2], dtype=D), W, W)
    bg = torch.tensor([0.1, 0.3, 0.5], dtype=D)
    img = render(g, cams, background=bg, tile_size=4)[0]
    var = (f * s / z) ** 2 + LOWPASS
    yy, xx = np.meshgrid(np.arange(W) + 0.5 - W / 2, np.arange(W) + 0.5 - W / 2, indexing="ij")
    q = (xx ** 2 + yy ** 2) / var
    tt = np.clip((9.0 - q) / 5.0, 0, 1)
    alpha = ALPHA_MAX / (1 + math.exp(-0.5)) * np.exp(-0.5 * q) * tt ** 3 * (tt * (6 * tt - 15) + 10)
    expected = bg.numpy() + alpha[..., None] * (np.array([0.9, 0.2, 0.4]) - bg.numpy())
    np.testing.assert_allclose(img.numpy(), expected, atol=1e-12)


def test_taper_is_smooth_and_exact_at_the_ends():
    q = torch.tensor([0.0, 4.0, 6.5, 9.0, 12.0], dtype=D)
    np.testing.assert_allclose(smootherstep_taper(q).numpy(), [1, 1, 0.5, 0, 0], atol=1e-15)


def test_tiled_equals_dense_and_views_are_independent():
    g = random_gaussians(40, 2, seed=1)
    cams = small_cams(3, 20, seed=2)
    dense = render(g, cams, background=[1, 1, 1], tile_size=None)
    for ts in (2, 4, 7):
        np.testing.assert_allclose(render(g, cams, background=[1, 1, 1], tile_size=ts).numpy(), dense.numpy(),
                                   atol=1e-12)
    one = render(g, cams[[1]], background=[1, 1, 1], tile_size=4)
    np.testing.assert_allclose(one[0].numpy(), dense[1].numpy(), atol=1e-12)


def _loss_of_flat(base: Gaussians, cams, target):
    def f(flat):
        img = render(base.unflatten(flat), cams, background=[0.5, 0.5, 0.5], tile_size=4)
        return (img - target).square().mean()
    return f


def test_gradient_and_hvp_match_finite_differences():
    g = random_gaussians(3, 1, seed=3)
    cams = small_cams(2, 10, seed=4)
    target = torch.rand(2, 10, 10, 3, generator=torch.Generator().manual_seed(5), dtype=D)
    f = _loss_of_flat(g, cams, target)
    x = g.flat().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-7, rtol=1e-4)
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(6), dtype=D)
    (gx,) = torch.autograd.grad(f(x), x, create_graph=True)
    (hv,) = torch.autograd.grad(gx, x, v)
    h = 1e-5
    xp, xm = (x + h * v).detach().requires_grad_(True), (x - h * v).detach().requires_grad_(True)
    fd = (torch.autograd.grad(f(xp), xp)[0] - torch.autograd.grad(f(xm), xm)[0]) / (2 * h)
    np.testing.assert_allclose(hv.numpy(), fd.numpy(), rtol=1e-4, atol=1e-8 * float(fd.abs().max()))
    assert float(hv.abs().max()) > 0


# --------------------------------------------------------------------------- curvature


def _five_gaussian_problem(views=2, size=12):
    g = random_gaussians(5, 0, seed=7)
    cams = small_cams(views, size, seed=8)
    target = torch.rand(views, size, size, 3, generator=torch.Generator().manual_seed(9), dtype=D)
    return g, cams, target


def _fresh_opt(g, probes):
    params = {k: v.detach().clone().requires_grad_(True) for k, v in g.tensors().items()}
    opt = GaussianTrustRegion(named_groups(params), betas=(0.9, 0.0), block_average=False, probes=probes)
    return params, opt


def test_hutchinson_matches_exact_hessian_diagonal_within_sampling_error():
    g, cams, target = _five_gaussian_problem()
    f = _loss_of_flat(g, cams, target)
    H = torch.autograd.functional.hessian(f, g.flat())
    diag = H.diagonal()
    M = 200
    params, opt = _fresh_opt(g, M)
    img = render(Gaussians(**params, sh_degree=0), cams, background=[0.5, 0.5, 0.5], tile_size=4)
    opt.hutchinson((img - target).square().mean(), generator=torch.Generator().manual_seed(10))
    est = torch.cat([opt.state[params[k]]["hess"].reshape(-1) for k in GROUPS])  # beta2 = 0: D = D_hat
    # Var(z_i (Hz)_i) = sum_{j != i} H_ij^2 for Rademacher z
    se = torch.sqrt(((H * H).sum(1) - diag * diag) / M)
    z = (est - diag).abs() / (se + 1e-15)
    assert float(z.max()) < 5.0, f"Hutchinson off by {float(z.max()):.1f} standard errors"
    assert float(z.mean()) < 1.5
    # the estimate carries information: it correlates with the exact diagonal
    assert float(torch.corrcoef(torch.stack([est, diag]))[0, 1]) > 0.9


def test_gauss_newton_product_matches_explicit_jacobian():
    g, cams, target = _five_gaussian_problem(views=1, size=8)

    def resid(flat):
        return (render(g.unflatten(flat), cams, background=[0.5, 0.5, 0.5], tile_size=4) - target).reshape(-1)

    J = torch.autograd.functional.jacobian(resid, g.flat())
    G = 2.0 / J.shape[0] * J.T @ J
    params, opt = _fresh_opt(g, 1)
    gen = torch.Generator().manual_seed(11)
    r = (render(Gaussians(**params, sh_degree=0), cams, background=[0.5, 0.5, 0.5], tile_size=4) - target).reshape(-1)
    dhat = torch.cat([d.reshape(-1) for d in opt.gauss_newton(r, generator=gen)])
    z = GaussianTrustRegion.rademacher  # same probes again
    gen2 = torch.Generator().manual_seed(11)
    zs = torch.cat([z(params[k], gen2).reshape(-1) for k in GROUPS])
    np.testing.assert_allclose(dhat.numpy(), (zs * (G @ zs)).numpy(), rtol=1e-8, atol=1e-14)


def test_curvature_in_view_chunks_equals_the_batch():
    """Per-view passes with the same probe sum to the batch HVP / Gauss-Newton product."""
    g, cams, target = _five_gaussian_problem(views=3, size=10)
    n = target.numel()
    for kind in ("hvp", "gn"):
        out = []
        for chunked in (False, True):
            params, opt = _fresh_opt(g, 2)
            gen = torch.Generator().manual_seed(21)

            def res(ids):
                return render(Gaussians(**params, sh_degree=0), cams[ids], background=[0.5] * 3, tile_size=4) - target[ids]

            if kind == "hvp":
                arg = [lambda i=i: res([i]).square().sum() / n for i in range(3)] if chunked else res([0, 1, 2]).square().mean()
                out.append(torch.cat([d.reshape(-1) for d in opt.hutchinson(arg, generator=gen)]))
            else:
                arg = [lambda i=i: res([i]).reshape(-1) for i in range(3)] if chunked else res([0, 1, 2]).reshape(-1)
                out.append(torch.cat([d.reshape(-1) for d in opt.gauss_newton(arg, generator=gen, scale=2.0 / n)]))
        np.testing.assert_allclose(out[1].numpy(), out[0].numpy(), rtol=1e-9, atol=1e-15)
        assert float(out[0].abs().max()) > 0


# --------------------------------------------------------------------------- trust region


def _tr_for(g: Gaussians, radius=1e-4):
    params = {k: v.detach().clone().requires_grad_(True) for k, v in g.tensors().items()}
    return params, GaussianTrustRegion(named_groups(params), radius=radius, radius_final=radius, opacity_range=(0.01, 1.0))


def _huge_steps(g: Gaussians, sign: float):
    return {k: torch.full_like(v, sign * 1e3) for k, v in g.tensors().items()}


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_mean_scale_rotation_clips_keep_exact_hellinger_within_radius(sign):
    eps = 1e-4
    g = random_gaussians(64, 1, seed=12)
    params, opt = _tr_for(g, eps)
    obar = torch.sigmoid(g.opacity_logits).clamp(0.01, 1.0)
    Sigma = covariance(g.log_scales, g.quats)
    for name, d in (("means", 3), ("log_scales", 3), ("quats", 4)):
        for j in range(d):
            raw = {k: torch.zeros_like(v) for k, v in g.tensors().items()}
            raw[name][:, j] = sign * 1e3  # far outside: the clip decides the step
            step = opt.trust_region_clip(raw, eps)[name]
            moved = {**g.tensors(), name: g.tensors()[name] + step}
            h2 = hellinger_sq(g.means, Sigma, moved["means"], covariance(moved["log_scales"], moved["quats"]))
            budget = eps / d
            assert float((obar * h2 / budget).max()) <= 1.0 + 1e-3, (name, j)
            assert float((obar * h2).min()) > 0  # the clip moved every Gaussian
            if name == "means":  # the mean bound is exact for a single axis
                np.testing.assert_allclose((obar * h2).numpy(), budget, rtol=1e-6)
    # all three mean axes at once on axis-aligned Gaussians: sum of the budgets = eps
    ga = g.replace(quats=torch.tensor([[1.0, 0, 0, 0]], dtype=D).repeat(64, 1))
    params, opt = _tr_for(ga, eps)
    step = opt.trust_region_clip(_huge_steps(ga, sign), eps)
    Sa = covariance(ga.log_scales, ga.quats)
    h2 = hellinger_sq(ga.means, Sa, ga.means + step["means"], Sa)
    assert float((obar * h2).max()) <= eps * (1 + 1e-6)


def test_whole_group_steps_stay_within_the_composed_bounds():
    """All components at once (element-wise budgets add up with cross terms): scales stay within
    eps/3 (their three eigen-axes are independent), means within the Cauchy-Schwarz bound
    1 - (1 - eps/(3 o))^9 <= 3 eps / o."""
    eps = 1e-5
    g = random_gaussians(500, 0, seed=18)
    params, opt = _tr_for(g, eps)
    obar = torch.sigmoid(g.opacity_logits).clamp(0.01, 1.0)
    S = covariance(g.log_scales, g.quats)
    signs = torch.sign(torch.randn(500, 3, generator=torch.Generator().manual_seed(19), dtype=D))
    for name in ("means", "log_scales"):
        raw = {k: torch.zeros_like(v) for k, v in g.tensors().items()}
        raw[name] = 1e3 * signs
        step = opt.trust_region_clip(raw, eps)[name]
        m = {**g.tensors(), name: g.tensors()[name] + step}
        h2 = hellinger_sq(g.means, S, m["means"], covariance(m["log_scales"], m["quats"]))
        if name == "means":
            assert bool((h2 <= -torch.expm1(9 * torch.log1p(-eps / (3 * obar))) * (1 + 1e-6)).all())
        else:
            assert float((obar * h2).max()) <= eps / 3 * 1.02


def test_opacity_colour_clips_follow_the_closed_forms():
    eps = 1e-5
    g = random_gaussians(32, 2, seed=13)
    params, opt = _tr_for(g, eps)
    out = opt.trust_region_clip(_huge_steps(g, 1.0), eps)
    a = torch.sigmoid(g.opacity_logits)
    np.testing.assert_allclose(torch.sigmoid(g.opacity_logits + out["opacity_logits"]).numpy(),
                               (a + torch.sqrt(4 * a * eps)).clamp(max=1 - 1e-5).numpy(), rtol=1e-9)
    obar = a.clamp(0.01, 1.0)
    c = (C0 * g.sh0[:, 0] + 0.5).clamp_min(1e-3)
    bdc = torch.sqrt(4 * c * eps / (3 * obar[:, None])) / C0
    np.testing.assert_allclose(out["sh0"][:, 0].numpy(), bdc.numpy(), rtol=1e-12)
    np.testing.assert_allclose(out["shN"].numpy(), (bdc / 20)[:, None].expand_as(out["shN"]).numpy(), rtol=1e-12)


def test_rotation_kappa_is_the_second_order_coefficient():
    g = random_gaussians(6, 0, seed=14)
    kappa = rotation_kappa(g.quats, g.log_scales)
    S = covariance(g.log_scales, g.quats)
    for j in range(4):
        q2 = g.quats.clone()
        q2[:, j] += 1e-4
        h2 = hellinger_sq(g.means, S, g.means, covariance(g.log_scales, q2))
        np.testing.assert_allclose((h2 / 1e-8).numpy(), (kappa[:, j] / 16).numpy(), rtol=2e-3)


def test_step_needs_curvature_and_radius_decays():
    g = random_gaussians(4, 0, seed=15)
    params, opt = _tr_for(g)
    with pytest.raises(UsageError, match="before any curvature refresh"):
        opt.step()
    for bad in (dict(radius=0.0), dict(radius_final=0.0), dict(radius=-1e-6)):
        with pytest.raises(UsageError):
            GaussianTrustRegion(named_groups(params), **bad)
    assert exp_schedule(1e-6, 1e-8, 0, 1000) == pytest.approx(1e-6)
    assert exp_schedule(1e-6, 1e-8, 999, 1000) == pytest.approx(1e-8)
    assert exp_schedule(1e-6, 1e-8, 500, 1001) == pytest.approx(1e-7)


def test_tr_steps_lower_the_loss():
    g, cams, _ = _five_gaussian_problem()
    gen0 = torch.Generator().manual_seed(17)
    with torch.no_grad():  # a reachable target: the scene with moved means and other colours
        target = render(g.replace(means=g.means + 0.1 * torch.randn(g.means.shape, generator=gen0, dtype=D),
                                  sh0=g.sh0 + 0.3 * torch.randn(g.sh0.shape, generator=gen0, dtype=D)),
                        cams, background=[0.5, 0.5, 0.5], tile_size=4)
    params = {k: v.detach().clone().requires_grad_(True) for k, v in g.tensors().items()}
    opt = GaussianTrustRegion(named_groups(params), radius=1e-2, radius_final=1e-3, total_steps=30, hessian_every=5)
    gen = torch.Generator().manual_seed(16)
    losses = []
    for _ in range(30):
        img = render(Gaussians(**params, sh_degree=0), cams, background=[0.5, 0.5, 0.5], tile_size=4)
        loss = (img - target).square().mean()
        losses.append(float(loss.detach()))
        for p in params.values():
            p.grad = None
        due = opt.curvature_due()
        loss.backward(retain_graph=due)
        if due:
            opt.hutchinson(loss, generator=gen)
        opt.step()
    assert losses[-1] < 0.5 * losses[0], losses[::5]


# --------------------------------------------------------------------------- files


@pytest.mark.parametrize("degree", [0, 1, 3])
def test_ply_roundtrip(tmp_path, degree):
    g = random_gaussians(17, degree, seed=20, dtype=torch.float32)
    write_ply(tmp_path / "a.ply", g)
    back = read_ply(tmp_path / "a.ply")
    assert back.sh_degree == degree and back.n == 17
    for k in GROUPS:
        assert torch.equal(back.tensors()[k], g.tensors()[k]), k
    raw = (tmp_path / "a.ply").read_bytes()
    head = raw[:raw.index(b"end_header")].decode("ascii")
    assert "property float f_dc_0" in head and "property float rot_3" in head
    assert head.count("f_rest_") == 3 * ((degree + 1) ** 2 - 1)


def test_bad_ply(tmp_path):
    (tmp_path / "x.ply").write_bytes(b"ply\nformat ascii 1.0\nend_header\n")
    with pytest.raises(InputError, match="binary_little_endian"):
        read_ply(tmp_path / "x.ply")


def _scene(tmp_path, name="s", n=20):
    out = tmp_path / name
    r = run_tool("train-3dgs", "generate", "-o", out, "--n-gaussians", n, "--size", 16, "--train", 4, "--test", 2,
                 "--json")
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def scene_dir(tmp_path_factory):
    return _scene(tmp_path_factory.mktemp("gs"))


def test_generate_layout_and_gt_render(scene_dir):
    meta = json.loads((scene_dir / "transforms_train.json").read_text())
    assert len(meta["frames"]) == 4 and "camera_angle_x" in meta
    sc = read_scene(scene_dir)
    assert sc.train_images.shape == (4, 16, 16, 3) and sc.test_images.shape == (2, 16, 16, 3)
    gt = read_ply(scene_dir / "gt.ply")
    img = render(gt, sc.test_cams, background=sc.background, tile_size=4)
    assert float((img - sc.test_images).abs().max()) < 3 / 255  # only 8-bit rounding


def test_missing_image_and_singular_pose_are_clear_errors(tmp_path):
    sc = _scene(tmp_path, "bad")
    img = sc / "train" / (json.loads((sc / "transforms_train.json").read_text())["frames"][1]["file_path"][8:] + ".png")
    img.unlink()
    with pytest.raises(InputError, match=r"transforms_train.json, frames\[1\].file_path: image .* does not exist"):
        read_scene(sc)
    r = run_tool("train-3dgs", "eval", sc / "gt.ply", sc)
    assert r.returncode == 1 and r.stderr.startswith("Error:") and "frames[1]" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    sc2 = _scene(tmp_path, "bad2")
    meta = json.loads((sc2 / "transforms_test.json").read_text())
    meta["frames"][0]["transform_matrix"] = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]]
    (sc2 / "transforms_test.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match=r"frames\[0\].transform_matrix: .*not invertible"):
        read_scene(sc2)


def test_colmap_text_model_and_its_errors(tmp_path, scene_dir):
    """A COLMAP text model of the synthetic scene reads back the same cameras; a zero quaternion
    is reported with its line."""
    from PIL import Image

    sc = read_scene(scene_dir)
    col = tmp_path / "colmap"
    (col / "sparse" / "0").mkdir(parents=True)
    (col / "images").mkdir()
    cams = sc.train_cams
    (col / "sparse" / "0" / "cameras.txt").write_text(
        f"# camera list\n1 PINHOLE 16 16 {float(cams.fx[0])} {float(cams.fy[0])} 8 8\n")
    lines = ["# image list"]
    for i in range(len(cams)):
        R = cams.R[i].double().numpy()
        w = math.sqrt(max(1 + R[0, 0] + R[1, 1] + R[2, 2], 1e-12)) / 2
        q = [w, (R[2, 1] - R[1, 2]) / (4 * w), (R[0, 2] - R[2, 0]) / (4 * w), (R[1, 0] - R[0, 1]) / (4 * w)]
        t = cams.t[i].double().tolist()
        lines += [f"{i + 1} {' '.join(map(str, q))} {' '.join(map(str, t))} 1 v{i}.png", ""]
        arr = (sc.train_images[i].numpy() * 255 + 0.5).astype(np.uint8)
        Image.fromarray(arr, "RGB").save(col / "images" / f"v{i}.png")
    (col / "sparse" / "0" / "images.txt").write_text("\n".join(lines) + "\n")
    (col / "sparse" / "0" / "points3D.txt").write_text("1 0.1 0.2 0.3 255 0 0 0.5\n2 -0.1 0 0.2 0 255 0 0.5\n")
    cs = read_scene(col)
    assert cs.kind == "colmap" and cs.points.shape == (2, 3)
    assert len(cs.train_cams) == 3 and len(cs.test_cams) == 1  # every 8th (v0) is a test view
    np.testing.assert_allclose(cs.train_cams.R.numpy(), sc.train_cams.R[1:].numpy(), atol=1e-5)
    bad = lines[:]
    bad[1] = "1 0 0 0 0 0 0 0 1 v0.png"
    (col / "sparse" / "0" / "images.txt").write_text("\n".join(bad) + "\n")
    with pytest.raises(InputError, match=r"images.txt, line 2: the pose is not invertible"):
        read_scene(col)


# --------------------------------------------------------------------------- memory meter


def test_memory_meter_counts_a_known_graph():
    """Saved-for-backward bytes of a hand-checked graph: storages deduplicated, parameters excluded,
    released when autograd frees the graph; the double-backward graph counts too."""
    import gc

    x = torch.randn(1000, dtype=torch.float32, requires_grad=True)
    meter = TensorMemoryMeter(static=[x])
    assert meter.static_bytes == 8000  # parameter + its gradient
    with meter:
        with meter.section("a"):
            y = torch.exp(x)                            # saves its result y: 4000 B
            z = y * y.view(10, 100).reshape(1000)       # saves y twice (views of one storage): +0
            v = (torch.sin(y) * 3).sum() + z.sum()      # sin saves y: +0; x * scalar, sum save no tensor
            assert meter.live_bytes == 4000
            w = torch.cos(x.double())                   # a new float64 storage saved by cos: +8000
            assert meter.live_bytes == 12000
        v.backward()                                     # frees v's graph: y's storage released
        assert meter.live_bytes == 8000
        del w
        gc.collect()
        assert meter.live_bytes == 0 and meter.peak_saved_bytes == 12000 and meter.section_peaks["a"] == 12000
        with meter.section("b"):
            f = torch.exp(x).square().sum()              # exp saves its result, square its input (same): 4000
            g, = torch.autograd.grad(f, x, create_graph=True)  # the backward's own saved tensors join
            during = meter.live_bytes
            torch.autograd.grad(g, x, grad_outputs=torch.ones_like(x))
        assert during > 4000
        del f, g
        gc.collect()
        assert meter.live_bytes == 0
    assert meter.add_static([torch.zeros(10, 10), torch.zeros(5, dtype=torch.float64)]) == 440
    assert meter.peak_bytes == 8440 + max(12000, meter.section_peaks["b"])
    assert tensor_bytes([x, x.view(10, 100), x.detach()]) == 4000
    y = torch.exp(x)  # outside the context: not counted (the hooks were removed)
    assert meter.live_bytes == 0


# --------------------------------------------------------------------------- command line

FIT = ["--iters", 6, "--init", "gt-noise", "--sh-degree", 1, "--sh-every", 3, "--eval-every", 3, "--no-progress"]


def test_fit_is_deterministic_and_eval_agrees(tmp_path, scene_dir):
    outs = []
    for k in (1, 2):
        r = run_tool("train-3dgs", "fit", scene_dir, "-o", tmp_path / f"f{k}.ply", "--optimizer", "tr", *FIT, "--json")
        assert r.returncode == 0, r.stderr
        outs.append(json.loads(r.stdout))
    s = outs[0]
    for key in ("psnr_test", "ssim_test", "iters", "seconds", "seconds_per_iter", "peak_memory_mb", "n_gaussians",
                "optimizer", "peak_tensor_memory_mb", "clip_fraction"):
        assert key in s
    assert s["peak_tensor_memory_mb"] == outs[1]["peak_tensor_memory_mb"] > s["static_memory_mb"] > 0
    assert set(s["clip_fraction"]) == set(GROUPS) and all(0 <= v <= 1 for v in s["clip_fraction"].values())
    assert s["optimizer"] == "tr" and s["iters"] == 6 and s["n_gaussians"] == 20
    assert (tmp_path / "f1.ply").read_bytes() == (tmp_path / "f2.ply").read_bytes()
    csv = (tmp_path / "f1.metrics.csv").read_text()
    assert csv == (tmp_path / "f2.metrics.csv").read_text()
    assert csv.splitlines()[0] == "iter,loss,psnr_batch,step_size,psnr_test,ssim_test" and len(csv.splitlines()) == 8
    assert (tmp_path / "f1.ply.manifest.json").exists() and not (tmp_path / "f1.ply.ckpt.pt").exists()
    ev = run_tool("train-3dgs", "eval", tmp_path / "f1.ply", scene_dir, "--json")
    assert ev.returncode == 0, ev.stderr
    assert json.loads(ev.stdout)["psnr_test"] == pytest.approx(s["psnr_test"], abs=1e-3)
    assert run_tool("train-3dgs", "eval", tmp_path / "f1.ply", scene_dir, "--fail-under", 99).returncode == 3
    again = run_tool("train-3dgs", "fit", scene_dir, "-o", tmp_path / "f1.ply", *FIT)
    assert again.returncode == 1 and "--overwrite" in again.stderr


@pytest.mark.parametrize("optimizer", ["adam", "tr"])
def test_resume_continues_to_the_same_bytes(tmp_path, scene_dir, optimizer):
    """6 steps at once, and the step-3 checkpoint an interrupted run leaves + --resume: the same .ply
    and metrics bytes; a checkpoint of other settings is refused (exit 2)."""
    from icmlkit.lib.core.checkpoint import Checkpointer
    from icmlkit.lib.train_3dgs.train import FitConfig, InitConfig, fit_scene

    args = [scene_dir, "--optimizer", optimizer, *FIT, "--device", "cpu"]
    full = run_tool("train-3dgs", "fit", *args, "-o", tmp_path / "full.ply")
    assert full.returncode == 0, full.stderr
    sc = read_scene(scene_dir)
    cfg = FitConfig(optimizer=optimizer, iters=6, sh_degree=1, sh_every=3, eval_every=3)
    ckpt = tmp_path / "r.ply.ckpt.pt"
    fit_scene(sc, cfg, InitConfig(init="gt-noise"), seed=0, gt=read_ply(scene_dir / "gt.ply"),
              checkpointer=Checkpointer(ckpt, every=3))  # the last step writes no checkpoint: as if killed after 3
    assert torch.load(ckpt, weights_only=True)["step"] == 3
    other = run_tool("train-3dgs", "fit", *args, "-o", tmp_path / "r.ply", "--resume", "--seed", 1)
    assert other.returncode == 2 and "--resume" in other.stderr and not (tmp_path / "r.ply").exists()
    r = run_tool("train-3dgs", "fit", *args, "-o", tmp_path / "r.ply", "--resume", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["resumed_from"] == 3
    assert (tmp_path / "r.ply").read_bytes() == (tmp_path / "full.ply").read_bytes()
    assert (tmp_path / "r.metrics.csv").read_bytes() == (tmp_path / "full.metrics.csv").read_bytes()
    assert not ckpt.exists()
    missing = run_tool("train-3dgs", "fit", *args, "-o", tmp_path / "m.ply", "--resume")
    assert missing.returncode == 2 and "--resume" in missing.stderr


def test_render_and_compare_cli(tmp_path, scene_dir):
    r = run_tool("train-3dgs", "render", scene_dir / "gt.ply", scene_dir / "transforms_test.json", "--outdir",
                 tmp_path / "png", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["n_views"] == 2 and (out["width"], out["height"]) == (16, 16)
    assert len(list((tmp_path / "png").glob("*.png"))) == 2
    c = run_tool("train-3dgs", "compare", scene_dir, "--outdir", tmp_path / "cmp", *FIT, "--json")
    assert c.returncode == 0, c.stderr
    s = json.loads(c.stdout)
    assert {"psnr_test_adam", "psnr_test_tr", "psnr_test_tr_half", "time_ratio_tr_over_adam"} <= set(s)
    assert (tmp_path / "cmp" / "compare.csv").read_text().startswith("iter,psnr_adam,psnr_tr\n0,")
    for f in ("adam.ply", "tr.ply", "compare.md", "summary.json", "manifest.json"):
        assert (tmp_path / "cmp" / f).exists(), f


def test_bad_usage_exits_2(tmp_path, scene_dir):
    r = run_tool("train-3dgs", "fit", scene_dir, "-o", tmp_path / "x.txt")
    assert r.returncode == 2 and "ply" in r.stderr
    r = run_tool("train-3dgs", "fit", scene_dir, "-o", tmp_path / "x.ply", "--optimizer", "sgd")
    assert r.returncode == 2
    r = run_tool("train-3dgs", "fit", tmp_path / "nowhere", "-o", tmp_path / "x.ply")
    assert r.returncode == 1 and "nowhere" in r.stderr and not (tmp_path / "x.ply").exists()
    # the scaled schedule over too short a run would leave the closed forms' range
    r = run_tool("train-3dgs", "fit", scene_dir, "-o", tmp_path / "x.ply", "--iters", 12, "--schedule", "scaled")
    assert r.returncode == 2 and "--schedule scaled" in r.stderr and not (tmp_path / "x.ply").exists()


@pytest.mark.slow
def test_lego_subset_reads_and_trains_a_little(tmp_path):
    from icmlkit.lib.core.io import shared_data_dir

    lego = shared_data_dir("nerf_lego_100")
    if lego is None:
        pytest.skip("../shared/data/nerf_lego_100 is not present")
    sc = read_scene(lego, downscale=2)
    assert sc.train_images.shape == (40, 50, 50, 3) and sc.test_images.shape == (10, 50, 50, 3)
    r = run_tool("train-3dgs", "fit", lego, "-o", tmp_path / "l.ply", "--init", "random", "--n-gaussians", 500,
                 "--iters", 10, "--downscale", 2, "--sh-degree", 0, "--json", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["n_gaussians"] == 500


# --------------------------------------------------------------------------- malformed inputs

from fuzzing import DEFAULT_KINDS, FuzzCase, check_malformed  # noqa: E402

JSON_KINDS = DEFAULT_KINDS + ("truncated_json", "truncated_jsonl")
_CACHE: dict = {}


def _copy_scene(base, name="bad", drop=None, first_image=None):
    """A copy of one small synthetic scene at ``base/name``; ``drop``: a file removed from it (the slot
    of the broken input); ``first_image``: frames[0] of transforms_train.json points there instead."""
    import shutil
    import tempfile

    from icmlkit.lib.train_3dgs.scene import make_synthetic_scene

    if "scene" not in _CACHE:
        _CACHE["scene"] = src = __import__("pathlib").Path(tempfile.mkdtemp(prefix="gs-fuzz-")) / "s"
        make_synthetic_scene(src, n_gaussians=12, size=8, n_train=2, n_test=1, sh_degree=0, seed=0)
    dst = base / name
    shutil.copytree(_CACHE["scene"], dst)
    if drop:
        (dst / drop).unlink()
    if first_image:
        meta = json.loads((dst / "transforms_train.json").read_text())
        meta["frames"][0]["file_path"] = first_image
        (dst / "transforms_train.json").write_text(json.dumps(meta))
    return dst


def _in_scene(drop=None, first_image=None):
    return lambda base: {"scene": _copy_scene(base, drop=drop, first_image=first_image)}


def _valid(base):
    sc = _copy_scene(base, name="ok")
    return {"scene": sc, "ply": sc / "gt.ply", "cams": sc / "transforms_test.json"}


def _resume_setup(base):
    return {"scene": _copy_scene(base, name="ok"), "plyout": base / "bad.ply"}


QUICK = ["--iters", "2", "--sh-degree", "0", "--device", "cpu"]
FIT_OUT = ["-o", "{out}/f.ply"]
TRAIN_3DGS_FUZZ = [
    FuzzCase("fit", ["fit", "{bad}", *FIT_OUT, *QUICK], label="scene-folder"),
    FuzzCase("fit", ["fit", "{scene}", *FIT_OUT, *QUICK], suffix="/transforms_train.json",
             setup=_in_scene(drop="transforms_train.json"), kinds=JSON_KINDS, label="transforms_train"),
    FuzzCase("fit", ["fit", "{scene}", *FIT_OUT, *QUICK], suffix="/transforms_test.json",
             setup=_in_scene(drop="transforms_test.json"), kinds=JSON_KINDS[1:], label="transforms_test"),  # may be absent
    FuzzCase("fit", ["fit", "{scene}", *FIT_OUT, *QUICK], suffix="/train/bad.png",
             setup=_in_scene(first_image="./train/bad"), kinds=DEFAULT_KINDS + ("garbage_png",), label="image"),
    FuzzCase("fit", ["fit", "{scene}", *FIT_OUT, *QUICK, "--init", "gt-noise"], suffix="/gt.ply",
             setup=_in_scene(drop="gt.ply"), kinds=DEFAULT_KINDS + ("garbage_pt",), label="gt.ply"),
    FuzzCase("fit", ["fit", "{scene}", *FIT_OUT, *QUICK, "--init-ply", "{bad}"], suffix=".ply", setup=_valid,
             kinds=DEFAULT_KINDS + ("garbage_pt",), label="--init-ply"),
    FuzzCase("fit", ["fit", "{scene}", "-o", "{plyout}", *QUICK, "--resume"], suffix=".ply.ckpt.pt",
             setup=_resume_setup, kinds=DEFAULT_KINDS + ("garbage_pt", "garbage_npz"), label="checkpoint",
             extra={"no_file": "bad.ply"}),
    FuzzCase("eval", ["eval", "{bad}", "{scene}", "--device", "cpu"], suffix=".ply", setup=_valid,
             kinds=DEFAULT_KINDS + ("garbage_pt",), label="splats"),
    FuzzCase("eval", ["eval", "{ply}", "{bad}", "--device", "cpu"], setup=_valid, label="scene-folder"),
    FuzzCase("eval", ["eval", "{scene}/gt.ply", "{scene}", "--device", "cpu"], suffix="/transforms_test.json",
             setup=_in_scene(drop="transforms_test.json"), kinds=JSON_KINDS, label="transforms_test"),
    FuzzCase("compare", ["compare", "{scene}", "--outdir", "{out}/cmp", *QUICK], suffix="/transforms_test.json",
             setup=_in_scene(drop="transforms_test.json"), kinds=JSON_KINDS, label="transforms_test"),
    FuzzCase("render", ["render", "{bad}", "{cams}", "--outdir", "{out}/png", "--device", "cpu"], suffix=".ply",
             setup=_valid, kinds=DEFAULT_KINDS + ("garbage_pt",), label="splats"),
    FuzzCase("render", ["render", "{ply}", "{bad}", "--outdir", "{out}/png", "--device", "cpu"], suffix=".json",
             setup=_valid, kinds=JSON_KINDS, label="cameras"),
    FuzzCase("compare", ["compare", "{bad}", "--outdir", "{out}/cmp", *QUICK], label="scene-folder"),
    FuzzCase("compare", ["compare", "{scene}", "--outdir", "{out}/cmp", *QUICK, "--init-ply", "{bad}"],
             suffix=".ply", setup=_valid, kinds=DEFAULT_KINDS + ("garbage_pt",), label="--init-ply"),
]


def test_fit_without_test_views_reports_no_psnr(tmp_path):
    sc = _copy_scene(tmp_path, drop="transforms_test.json")
    r = run_tool("train-3dgs", "fit", sc, "-o", tmp_path / "f.ply", *QUICK, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["psnr_test"] is None


@pytest.mark.parametrize("case", TRAIN_3DGS_FUZZ, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed("train-3dgs", case, tmp_path, capsys)
    if "no_file" in case.extra:  # an output outside {out}: none may be left behind either
        assert not [k for k in case.kinds if (tmp_path / k / case.extra["no_file"]).exists()]


@pytest.mark.parametrize("text,where", [
    ('{"camera_angle_x": "wide", "frames": [{"file_path": "a", "transform_matrix": []}]}', "camera_angle_x"),
    ('{"camera_angle_x": 0.7, "frames": [3]}', "frames[0]"),
    ('[1, 2]', "expected an object"),
    ('{"camera_angle_x": 0.7, "w": "x", "frames": [{"transform_matrix": [[1, 0, 0, 0]]}]}', "w and h"),
    ('{"camera_angle_x": 0.7, "frames": [{"transform_matrix": [[NaN, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], '
     '[0, 0, 0, 1]]}]}', "non-finite")])
def test_bad_transforms_json_is_named(tmp_path, text, where):
    from icmlkit.lib.train_3dgs.scene import read_cameras

    p = tmp_path / "t.json"
    p.write_text(text)
    with pytest.raises(InputError, match=re.escape(where)):
        read_cameras(p)


# --------------------------------------------------------------------------- issue 31: the prototype's options


def test_scaled_schedule_has_the_paper_travel_budget():
    """sum_t sqrt(radius_t) over our run equals the literal schedule's over 30k steps (to 1e-9), the
    decay ratio is kept, and fit uses exactly these radii."""
    paper = sqrt_radius_sum(1e-6, 1e-8, 30000)
    assert paper == pytest.approx(11.7, abs=0.05) and sqrt_radius_sum(1e-6, 1e-8, 1000) == pytest.approx(0.39, abs=0.01)
    for iters in (300, 1000, 2500):
        r0, r1 = scaled_radii(1e-6, 1e-8, iters, 30000)
        assert abs(sqrt_radius_sum(r0, r1, iters) - paper) <= 1e-9 * paper
        assert r1 / r0 == pytest.approx(1e-2, rel=1e-12)
        assert tr_radii(FitConfig(iters=iters, schedule="scaled")) == (r0, r1)
    assert tr_radii(FitConfig(iters=1000)) == (1e-6, 1e-8)  # literal: unchanged
    assert scaled_radii(1e-6, 1e-8, 30000, 30000) == pytest.approx((1e-6, 1e-8), rel=1e-12)
    with pytest.raises(UsageError, match="schedule scaled"):
        tr_radii(FitConfig(iters=20, schedule="scaled"))


def _gn_problem():
    g, cams, target = _five_gaussian_problem(views=2, size=10)
    params = {k: v.detach().clone().requires_grad_(True) for k, v in g.tensors().items()}
    return g, cams, target, params


def _train_res(params, cams, target, lam=0.2, ro=0.01, rs=0.02):
    img = render(Gaussians(**params, sh_degree=0), cams, background=[0.5] * 3, tile_size=4)
    return torch.cat([train_residual(img, target, lam, target.numel()),
                      reg_residual(params["opacity_logits"], params["log_scales"], ro, rs)]), img


def test_gn_train_residual_is_the_training_loss_and_matches_finite_differences():
    """The square-root residual's squares sum to the training loss (L1 + D-SSIM + regularisers) plus
    the floor, and the Gauss-Newton product 2 J^T J z of gauss_newton matches J z by central finite
    differences of the residual (then J^T by one vector-Jacobian product)."""
    g, cams, target, params = _gn_problem()
    r, img = _train_res(params, cams, target)
    loss = gs_loss(img, target, 0.2) + regularisers(params["opacity_logits"], params["log_scales"], 0.01, 0.02)
    assert float(r.detach().square().sum()) == pytest.approx(float(loss.detach()) + GN_FLOOR, rel=1e-12)
    opt = GaussianTrustRegion(named_groups(params), betas=(0.9, 0.0), block_average=False)
    dhat = opt.gauss_newton(r, generator=torch.Generator().manual_seed(31), scale=2.0)
    gen = torch.Generator().manual_seed(31)
    zs = [GaussianTrustRegion.rademacher(params[k], gen) for k in GROUPS]
    h = 1e-6

    def res_at(sign):
        moved = {k: (params[k] + sign * h * z).detach() for k, z in zip(GROUPS, zs)}
        return _train_res(moved, cams, target)[0].detach()

    jz = (res_at(1) - res_at(-1)) / (2 * h)
    r2, _ = _train_res(params, cams, target)
    jtjz = torch.autograd.grad(r2, [params[k] for k in GROUPS], grad_outputs=jz)
    for k, z, d, v in zip(GROUPS, zs, dhat, jtjz):
        np.testing.assert_allclose(d.numpy(), (2 * z * v).numpy(), rtol=1e-5,
                                   atol=1e-9 * float(v.abs().max()) if v.numel() else 0.0, err_msg=k)
    assert float(torch.cat([d.reshape(-1) for d in dhat]).abs().max()) > 0


def test_gn_train_in_view_chunks_equals_one_graph(scene_dir):
    """curvature_refresh with gn-train: per-view chunks (+ the regulariser chunk) give the diagonal
    of the single batch graph; the gradient path is not touched."""
    sc = read_scene(scene_dir, dtype=D)
    g0 = initial_gaussians(sc, "random", 12, 1, seed=3)
    out = []
    for cv in (0, 1):
        cfg = FitConfig(curvature="gn-train", curvature_views=cv, reg_opacity=0.01, reg_scale=0.01, sh_degree=1)
        params = {k: v.detach().clone().requires_grad_(True) for k, v in g0.tensors().items()}
        g = Gaussians(**params, sh_degree=1)
        opt = GaussianTrustRegion(named_groups(params), betas=(0.9, 0.0), block_average=False)
        bg = torch.tensor(sc.background, dtype=D)
        img = render(g, sc.train_cams[[0, 1, 2]], background=bg, tile_size=4) if cv == 0 else None
        curvature_refresh(opt, cfg, g, sc.train_cams, sc.train_images, [0, 1, 2], bg, img,
                          torch.Generator().manual_seed(5))
        out.append(torch.cat([opt.state[params[k]]["hess"].reshape(-1) for k in GROUPS]))
    np.testing.assert_allclose(out[1].numpy(), out[0].numpy(), rtol=1e-9, atol=1e-18)
    assert float(out[0].abs().max()) > 0


def _hutch_opt(g, **kw):
    params = {k: v.detach().clone().requires_grad_(True) for k, v in g.tensors().items()}
    return params, GaussianTrustRegion(named_groups(params), **kw)


def _l2(params, cams, target):
    img = render(Gaussians(**params, sh_degree=0), cams, background=[0.5] * 3, tile_size=4)
    return (img - target).square().mean()


def _hess(opt, params):
    return torch.cat([opt.state[params[k]]["hess"].reshape(-1) for k in GROUPS])


def test_initial_probes_change_only_the_first_refresh():
    g, cams, target = _five_gaussian_problem()
    kw = dict(betas=(0.9, 0.0), block_average=False)
    pa, a = _hutch_opt(g, initial_probes=20, probes=1, **kw)
    pb, b = _hutch_opt(g, probes=20, **kw)
    pc, c = _hutch_opt(g, probes=1, **kw)
    ga, gb = torch.Generator().manual_seed(40), torch.Generator().manual_seed(40)
    assert a.probes_now() == 20
    a.hutchinson(_l2(pa, cams, target), generator=ga)
    b.hutchinson(_l2(pb, cams, target), generator=gb)
    assert torch.equal(_hess(a, pa), _hess(b, pb))  # the first refresh: 20 probes
    assert a.probes_now() == 1
    c.refreshes = 1  # c: a plain 1-probe optimizer at its second refresh, same probe stream
    gc = torch.Generator().manual_seed(41)
    ga.manual_seed(41)
    a.hutchinson(_l2(pa, cams, target), generator=ga)
    c.hutchinson(_l2(pc, cams, target), generator=gc)
    assert torch.equal(_hess(a, pa), _hess(c, pc))  # later refreshes: as without the option


def test_abs_before_ema_and_block_average_change_only_the_diagonal():
    """|D_hat| enters the EMA with abs_before_ema (D = b2 b2' ... of |D_hat|), else D_hat itself; the
    first D_est is the same either way; block averaging replaces D_hat by its per-Gaussian means."""
    g, cams, target = _five_gaussian_problem()
    b2 = 0.5
    runs = {}
    for name, kw in {"toy": {}, "abs": dict(abs_before_ema=True), "block": dict(block_average=True)}.items():
        params, opt = _hutch_opt(g, betas=(0.9, b2), block_average=kw.pop("block_average", False), **kw)
        gen = torch.Generator().manual_seed(50)
        dh = [torch.cat([d.reshape(-1) for d in opt.hutchinson(_l2(params, cams, target), generator=gen)])]
        first = _hess(opt, params).clone()
        dh.append(torch.cat([d.reshape(-1) for d in opt.hutchinson(_l2(params, cams, target), generator=gen)]))
        runs[name] = (dh, first, _hess(opt, params), params, opt)
    (d1, d2), first_toy, toy, _, _ = runs["toy"]
    _, first_abs, ab, _, _ = runs["abs"]
    assert torch.equal(first_abs.abs(), first_toy.abs())  # same D_est after one refresh
    np.testing.assert_allclose(toy.numpy(), ((1 - b2) * (b2 * d1 + d2)).numpy(), rtol=1e-12, atol=1e-30)
    np.testing.assert_allclose(ab.numpy(), ((1 - b2) * (b2 * d1.abs() + d2.abs())).numpy(), rtol=1e-12, atol=1e-30)
    assert bool(((d1 < 0) | (d2 < 0)).any()) and not torch.equal(ab.abs(), toy.abs())
    same_sign = (d1 > 0) & (d2 > 0)
    assert torch.equal(ab[same_sign], toy[same_sign])
    _, _, blk, params, opt = runs["block"]
    for k in GROUPS:  # constant within each Gaussian's block
        h = opt.state[params[k]]["hess"].reshape(params[k].shape[0], -1)
        assert torch.allclose(h, h[:, :1].expand_as(h), rtol=0, atol=1e-18), k


def _one_step(g, cams, target, steps=1, **kw):
    """``steps`` TR steps from g (fixed seed, curvature every step): the parameters."""
    params, opt = _hutch_opt(g, radius=1e-2, radius_final=1e-2, hessian_every=1, **kw)
    gen = torch.Generator().manual_seed(60)
    for _ in range(steps):
        loss = _l2(params, cams, target)
        for p in params.values():
            p.grad = None
        loss.backward(retain_graph=True)
        opt.hutchinson(loss, generator=gen)
        opt.step()
    return {k: v.detach() for k, v in params.items()}


@pytest.mark.parametrize("option,group", [(dict(color_caps=True), "sh0"), (dict(opacity_factor=10.0), "opacity_logits"),
                                          (dict(renorm_quats_every=1), "quats")])
def test_each_step_option_changes_only_its_group(option, group):
    g, cams, target = _five_gaussian_problem()
    ends = torch.tensor([[0.001, 0.999, 0.001], [0.999, 0.001, 0.999]], dtype=D).repeat(3, 1)[:5, None, :]
    g = g.replace(sh0=rgb_to_sh0(ends),
                  quats=2.5 * g.quats / g.quats.norm(dim=-1, keepdim=True))  # colours near the range ends, |q| != 1
    base, opt_on = _one_step(g, cams, target), _one_step(g, cams, target, **option)
    changed = [k for k in GROUPS if not torch.equal(base[k], opt_on[k])]
    assert changed == [group]
    if group == "sh0":
        c0, cb, cn = (C0 * x[:, 0] + 0.5 for x in (g.sh0, base["sh0"], opt_on["sh0"]))
        assert bool(((cb < 0) | (cb > 1)).any())  # without the caps the step leaves [0, 1]
        assert bool(((cn >= -1e-12) & (cn <= 1 + 1e-12)).all())
    elif group == "opacity_logits":
        o0 = torch.sigmoid(g.opacity_logits)
        d_on, d_base = ((torch.sigmoid(x["opacity_logits"]) - o0).abs() for x in (opt_on, base))
        assert bool((d_on <= torch.sqrt(4 * o0 * 1e-2 * 10.0) * (1 + 1e-9)).all()) and float(d_on.max()) > float(d_base.max())
    else:  # renormalised: the same rotation, unit quaternions
        np.testing.assert_allclose(quat_to_rotmat(opt_on["quats"]).numpy(), quat_to_rotmat(base["quats"]).numpy(),
                                   atol=1e-13)
        np.testing.assert_allclose(opt_on["quats"].norm(dim=-1).numpy(), 1.0, atol=1e-14)
        assert float((base["quats"].norm(dim=-1) - 1).abs().min()) > 0.5


def test_quaternion_renormalisation_every_k_steps_keeps_rotations():
    g, cams, target = _five_gaussian_problem()
    g = g.replace(quats=3.0 * g.quats)
    for steps in (1, 2):
        a = _one_step(g, cams, target, steps=steps, renorm_quats_every=2)
        b = _one_step(g, cams, target, steps=steps)
        if steps == 1:  # not due yet: identical
            assert all(torch.equal(a[k], b[k]) for k in GROUPS)
        else:
            np.testing.assert_allclose(a["quats"].norm(dim=-1).numpy(), 1.0, atol=1e-14)
            assert float(b["quats"].norm(dim=-1).min()) > 2.0
            # the second step differs only through |q| (clip cap |q| tau_q and the raw step scale):
            # the rotations still agree closely, and exactly after renormalising at the same point
            assert float((quat_to_rotmat(a["quats"]) - quat_to_rotmat(b["quats"])).abs().max()) < 0.05


def test_init_opacity_changes_only_the_opacities(scene_dir):
    sc = read_scene(scene_dir)
    gt = read_ply(scene_dir / "gt.ply")
    for mode in ("random", "gt-noise"):
        a = initial_gaussians(sc, mode, 30, 1, seed=2, gt=gt)
        b = initial_gaussians(sc, mode, 30, 1, seed=2, gt=gt, opacity=0.5)
        assert [k for k in GROUPS if not torch.equal(a.tensors()[k], b.tensors()[k])] == ["opacity_logits"]
        np.testing.assert_allclose(torch.sigmoid(b.opacity_logits.double()).numpy(), 0.5, atol=1e-7)
        np.testing.assert_allclose(torch.sigmoid(a.opacity_logits.double()).numpy(), 0.1, atol=1e-7)


def test_regularisers_are_off_by_default_and_enter_the_loss():
    g = random_gaussians(6, 0, seed=70)
    assert regularisers(g.opacity_logits, g.log_scales) == 0.0
    val = regularisers(g.opacity_logits, g.log_scales, 0.01, 0.02)
    assert float(val) == pytest.approx(0.01 * float(torch.sigmoid(g.opacity_logits).mean())
                                       + 0.02 * float(g.log_scales.exp().mean()), rel=1e-12)
    r = reg_residual(g.opacity_logits, g.log_scales, 0.01, 0.02)
    assert float(r.square().sum()) == pytest.approx(float(val), rel=1e-12)


def test_knn_scene_scales_match_the_knn_init():
    """--scales knn: the known scales sit on the kNN init on average (the sheet's scene is ~4x
    smaller); the means, rotations, opacities and colours are the same draws."""
    fixed = synthetic_gaussians(400, 1, torch.Generator().manual_seed(80), dtype=D)
    knn = synthetic_gaussians(400, 1, torch.Generator().manual_seed(80), dtype=D, scales="knn")
    init = knn_log_scales(knn.means)[:, 0]
    assert abs(float((knn.log_scales.mean(1) - init).median())) < 0.1
    assert float((fixed.log_scales.mean(1) - init).median()) < -1.0
    assert [k for k in GROUPS if not torch.equal(fixed.tensors()[k], knn.tensors()[k])] == ["log_scales"]


def test_tile_lists_are_the_depth_ordered_overlaps():
    """The pair-sorted tile lists equal a brute-force construction (per view and tile, the Gaussians
    whose 3-sigma box touches the tile, front to back)."""
    g = random_gaussians(30, 0, seed=90)
    cams = small_cams(2, 16, seed=91)
    means2d, _, depth, radii, _, visible = project(g, cams)
    idx, valid = _tile_lists(means2d, radii, depth, visible, 16, 16, 4, 4, culling=True)
    for v in range(2):
        order = sorted(range(30), key=lambda n: float(depth[v, n]) if visible[v, n] else float("inf"))
        for t in range(16):
            tx, ty = t % 4, t // 4
            x, y, rr = means2d[v, :, 0], means2d[v, :, 1], radii[v]
            hit = [n for n in order if visible[v, n] and x[n] + rr[n] >= 0 and x[n] - rr[n] <= 16
                   and y[n] + rr[n] >= 0 and y[n] - rr[n] <= 16
                   and math.floor((x[n] - rr[n]) / 4) <= tx <= math.floor((x[n] + rr[n]) / 4)
                   and math.floor((y[n] - rr[n]) / 4) <= ty <= math.floor((y[n] + rr[n]) / 4)]
            assert idx[v, t][valid[v, t]].tolist() == hit, (v, t)


def test_recompute_keeps_gradients_and_hvps_and_saves_less():
    """Activation checkpointing of the compositing pieces: the same gradient and HVP (double
    backward), and fewer bytes saved for backward."""
    g = random_gaussians(20, 1, seed=93)
    cams = small_cams(2, 16, seed=94)
    target = torch.rand(2, 16, 16, 3, generator=torch.Generator().manual_seed(95), dtype=D)
    out, saved = [], []
    for rec in (False, True):
        gg = g.detach().requires_grad_(True)
        ps = list(gg.tensors().values())
        meter = TensorMemoryMeter(static=ps)
        with meter:
            loss = (render(gg, cams, background=[1, 1, 1], tile_size=4, max_elems=2000, recompute=rec) - target).square().mean()
            grads = torch.autograd.grad(loss, ps, create_graph=True)
        saved.append(meter.peak_saved_bytes)
        hv = torch.autograd.grad(grads, ps, grad_outputs=[torch.ones_like(x) for x in grads], allow_unused=True)
        out.append([x.detach() for x in (*grads, *[h for h in hv if h is not None])])
    for a, b in zip(*out):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-10, atol=1e-14)
    assert saved[1] < saved[0]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_and_cpu_renders_agree():
    """The same code on CUDA: renders (tiled and dense), gradients and an HVP agree with the CPU to 1e-5."""
    g = random_gaussians(60, 2, seed=95)
    cams = small_cams(3, 24, seed=96)
    target = torch.rand(3, 24, 24, 3, generator=torch.Generator().manual_seed(97), dtype=D)
    out = {}
    for dev in ("cpu", "cuda"):
        gd = g.to(device=dev).requires_grad_(True)
        cd, td = cams.to(dev), target.to(dev)
        imgs = [render(gd, cd, background=[1, 1, 1], tile_size=ts) for ts in (4, None)]
        loss = (imgs[0] - td).square().mean()
        grads = torch.autograd.grad(loss, list(gd.tensors().values()), create_graph=True)
        hv = torch.autograd.grad(grads, list(gd.tensors().values()), grad_outputs=[torch.ones_like(x) for x in grads])
        out[dev] = [x.detach().cpu() for x in (*imgs, *grads, *hv)]
    for a, b in zip(out["cpu"], out["cuda"]):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------- issue 53: opacity floor, tau_q


def test_opacity_floor_and_quaternion_radius_are_options_with_the_prototype_defaults(scene_dir, monkeypatch):
    from icmlkit.lib.train_3dgs import train as train_mod
    from icmlkit.lib.train_3dgs.optim import OPACITY_RANGE, TAU_Q
    from icmlkit.lib.train_3dgs.train import FitConfig, InitConfig, fit_scene

    cfg = FitConfig()
    assert (cfg.opacity_floor, cfg.tau_q) == (0.1, 0.01) == (OPACITY_RANGE[0], TAU_Q)
    g = random_gaussians(32, 1, seed=3).replace(opacity_logits=torch.full((32,), -6.0, dtype=D))  # o ~ 0.0025
    eps = 1e-4
    raw = {k: torch.full_like(v, 1e3) for k, v in g.tensors().items()}
    steps = {}
    for floor, tau in ((0.1, 0.01), (0.01, 0.05)):
        params = {k: v.detach().clone().requires_grad_(True) for k, v in g.tensors().items()}
        opt = GaussianTrustRegion(named_groups(params), radius=eps, radius_final=eps, opacity_range=(floor, 1.0),
                                  tau_q=tau)
        steps[floor] = opt.trust_region_clip(raw, eps)
    # the means' bound scales as sqrt(-ln(1 - eps / (3 o_bar))): about sqrt(10) tighter with the 0.1 floor
    ratio = steps[0.01]["means"] / steps[0.1]["means"]
    assert torch.allclose(ratio, torch.full_like(ratio, math.sqrt(10)), rtol=2e-3)
    qn = g.quats.norm(dim=-1, keepdim=True)
    assert float((steps[0.1]["quats"].abs() - qn * 0.01).max()) <= 1e-12      # the tau_q cap binds at 1 %
    big = {k: torch.full_like(v, 1e3) for k, v in g.tensors().items()}
    params = {k: v.detach().clone().requires_grad_(True) for k, v in g.tensors().items()}
    loose = GaussianTrustRegion(named_groups(params), radius=0.2, radius_final=0.2, tau_q=0.05)
    capped = loose.trust_region_clip(big, 0.2)["quats"].abs()
    assert float((capped - qn * 0.05).abs().min()) < 1e-12                     # a wide radius: the cap decides
    seen = {}

    class Stop(Exception):
        pass

    def spy(groups, **kw):
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(train_mod, "GaussianTrustRegion", spy)
    sc = read_scene(scene_dir)
    for floor, tau in ((0.1, 0.01), (0.01, 0.05)):
        with pytest.raises(Stop):
            fit_scene(sc, FitConfig(iters=2, opacity_floor=floor, tau_q=tau), InitConfig(init="random", n_gaussians=8))
        assert seen["opacity_range"] == (floor, 1.0) and seen["tau_q"] == tau
    with pytest.raises(UsageError, match="3 o_min"):  # the scaled schedule's limit follows the floor
        train_mod.tr_radii(FitConfig(iters=10, schedule="scaled", opacity_floor=0.01))


def test_cli_takes_opacity_floor_and_tau_q(scene_dir, tmp_path):
    r = run_tool("train-3dgs", "fit", scene_dir, "-o", tmp_path / "a.ply", "--iters", "2", "--opacity-floor", "0.01",
                 "--tau-q", "0.05", "--init", "random", "--n-gaussians", "8", "--json")
    assert r.returncode == 0, r.stderr
    bad = run_tool("train-3dgs", "fit", scene_dir, "-o", tmp_path / "b.ply", "--opacity-floor", "0")
    assert bad.returncode == 2 and "--opacity-floor" in bad.stderr


# --------------------------------------------------------------------------- issue 55: pruning


def test_pruning_is_off_by_default_and_removes_collapsed_gaussians(scene_dir, tmp_path):
    """prune_opacity (off by default: N fixed) removes the Gaussians below the floor every prune_every
    steps, with their optimizer state rows, for both optimizers; a checkpoint written after a prune
    resumes to the same result; the flag is on the CLI."""
    from icmlkit.lib.core.checkpoint import Checkpointer
    from icmlkit.lib.train_3dgs.optim import make_adam, prune_gaussians
    from icmlkit.lib.train_3dgs.train import FitConfig, fit

    assert FitConfig().prune_opacity == 0.0
    with pytest.raises(UsageError, match="--prune-opacity"):
        FitConfig(prune_opacity=1.0).check()
    # the helper keeps exactly the kept rows of every parameter and every per-Gaussian state tensor
    g = random_gaussians(10, 1, seed=4)
    keep = torch.tensor([True, False] * 5)
    for kind in ("adam", "tr"):
        params = {k: v.detach().clone().requires_grad_(True) for k, v in g.tensors().items()}
        opt = make_adam(params, 1.0) if kind == "adam" else GaussianTrustRegion(named_groups(params))
        if kind == "tr":
            opt.hutchinson((render(Gaussians(**params, sh_degree=1), small_cams(), background=[1, 1, 1])
                            - 0.5).square().mean())
        loss = sum(v.square().sum() for v in params.values())
        loss.backward()
        opt.step()
        before = {k: {n: t.clone() for n, t in opt.state[p].items()} for k, p in params.items()}
        new = prune_gaussians(opt, keep)
        for k, p in new.items():
            assert p.is_leaf and p.requires_grad and p.shape[0] == 5
            assert torch.equal(p.detach(), params[k].detach()[keep])
            for n, t in opt.state[p].items():
                ref = before[k][n]
                assert torch.equal(t, ref[keep] if ref.dim() and ref.shape[0] == 10 else ref), (kind, k, n)
        if kind == "tr":
            assert opt.names["means"] is new["means"]
        sum(v.square().sum() for v in new.values()).backward()
        opt.step()  # the optimizer runs on the pruned tensors
    sc, gt = read_scene(scene_dir), read_ply(scene_dir / "gt.ply")
    start = initial_gaussians(sc, "gt-noise", 20, 1, seed=0, gt=gt)
    logits = torch.where(torch.arange(20) % 2 == 0, -7.0, 0.0).to(start.opacity_logits.dtype)  # opacity 9e-4 or 0.5
    start = start.replace(opacity_logits=logits)
    for kind in ("adam", "tr"):
        cfg = FitConfig(optimizer=kind, iters=6, sh_degree=1, sh_every=3, eval_every=3, prune_opacity=0.01, prune_every=2)
        res = fit(sc, start, cfg, seed=0)
        assert res.summary["pruned"] == 10 and res.summary["n_gaussians"] == 10  # the faint half, at step 2
        assert fit(sc, start, FitConfig(optimizer=kind, iters=6, sh_degree=1, sh_every=3, eval_every=3),
                   seed=0).summary["n_gaussians"] == 20
        ckpt = tmp_path / f"{kind}.ckpt.pt"
        fit(sc, start, cfg, seed=0, checkpointer=Checkpointer(ckpt, every=3))  # written at step 3, after the prune
        again = fit(sc, start, cfg, seed=0, checkpointer=Checkpointer(ckpt, every=3, resume=True))
        assert again.summary["resumed_from"] == 3 and again.summary["pruned"] == res.summary["pruned"]
        for k, v in res.gaussians.tensors().items():
            assert torch.equal(v, again.gaussians.tensors()[k]), (kind, k)
    r = run_tool("train-3dgs", "fit", scene_dir, "-o", tmp_path / "p.ply", *FIT, "--prune-opacity", "0.1",
                 "--prune-every", "2", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["n_gaussians"] + out["pruned"] == 20
