"""Fitting a Gaussian scene to posed images with 3DGS2-TR or the reference Adam, at fixed N (no
densification; pruning of collapsed Gaussians, opacity below ``prune_opacity`` every ``prune_every``
steps as 3DGS does between its densification steps, is an option, off by default), plus evaluation,
initialisation and the Adam-vs-TR comparison.

Both optimizers see the same views in the same order (the batch sampler draws from the named
stream "batches" of the seed alone) and start from the same initialisation (stream "init"). The
training loss is the reference 0.8 L1 + 0.2 (1 - SSIM) (plus the optional 3DGS-MCMC-style
regularisers); the TR curvature pass uses the mean squared error of the same rendered batch (SSIM
disabled; pure L1 has a zero Hessian), by Hutchinson HVPs or the Gauss-Newton product, or
(``curvature="gn-train"``, the authors' training prototype) the Gauss-Newton product of the
square-root residual of the training loss itself (:func:`~icmlkit.lib.train_3dgs.metrics.train_residual`). **[reconstructed]** one multi-view batch per step for both g and Hz with the
same probe z on all views. The curvature pass re-renders the batch one view at a time
(``curvature_views``) and sums the per-view HVPs (the same z; exactly the batch HVP, since views are
independent), so only one view's double-backward graph is alive at a time.
"""
from __future__ import annotations

import math
import resource
import time
from dataclasses import asdict, dataclass

import torch

from icmlkit.lib.core.checkpoint import Checkpointer, fingerprint, restore
from icmlkit.lib.core.console import progress
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.runtime import generator
from icmlkit.lib.train_3dgs.config import FitConfig, InitConfig  # noqa: F401 - re-exported: the options of fit
from icmlkit.lib.train_3dgs.memory import TensorMemoryMeter
from icmlkit.lib.train_3dgs.model import GROUPS, Gaussians, init_gaussians, random_box_init
from icmlkit.lib.train_3dgs.metrics import gs_loss, psnr, reg_residual, regularisers, ssim, train_residual
from icmlkit.lib.train_3dgs.optim import (GaussianTrustRegion, adam_lr_update, make_adam, named_groups, prune_gaussians,
                                          scaled_radii)
from icmlkit.lib.train_3dgs.rasterize import render
from icmlkit.lib.train_3dgs.scene import Scene

METRIC_COLUMNS = ["iter", "loss", "psnr_batch", "step_size", "psnr_test", "ssim_test"]


@dataclass
class FitResult:
    """The fitted Gaussians, the metric rows (:data:`METRIC_COLUMNS`) and the summary (the CLI's JSON)."""

    gaussians: Gaussians
    rows: list
    summary: dict

    def metric_rows(self) -> list[dict]:
        return [dict(zip(METRIC_COLUMNS, r)) for r in self.rows]


@dataclass
class EvalResult:
    summary: dict


def peak_memory_mb(device) -> float:
    """Peak memory so far: CUDA allocator peak on a GPU, else the process's peak RSS."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


@torch.no_grad()
def evaluate(g: Gaussians, cams, images: torch.Tensor, background, tile_size=4, views_per_pass: int = 8) -> dict:
    """Mean PSNR and SSIM over the views (rendered on ``background``)."""
    if len(cams) == 0:
        return {"psnr": None, "ssim": None}
    ps, ss = [], []
    for i in range(0, len(cams), views_per_pass):
        ids = list(range(i, min(i + views_per_pass, len(cams))))
        img = render(g, cams[ids], background=background, tile_size=tile_size)
        gt = images[ids]
        ps.append(psnr(img, gt, reduce=False))
        ss.append(ssim(img.clamp(0, 1), gt, reduce=False))
    return {"psnr": float(torch.cat(ps).mean()), "ssim": float(torch.cat(ss).mean())}


def initial_gaussians(scene: Scene, mode: str, n: int, sh_degree: int, seed: int, noise: float = 0.05,
                      gt: Gaussians | None = None, opacity: float = 0.1) -> Gaussians:
    """The initial Gaussians (identical for every optimizer given the seed).

    - ``random``: N uniform in the box seen by the cameras (rebuttal Exp 3: no SfM points);
    - ``sfm``: the COLMAP points (all of them; N is ignored);
    - ``gt-noise``: the known Gaussians' means plus N(0, (noise * extent)^2), extent the half-width of
      their bounding box, with the 3DGS default init for everything else (needs ``gt``);
    - ``auto``: sfm when the scene has points, else random.

    Every mode starts at opacity ``opacity`` (3DGS: 0.1; 3DGS-MCMC and the TR prototype: 0.5).
    """
    gen = generator(seed, "init")
    if mode == "auto":
        mode = "sfm" if scene.points is not None else "random"
    if mode == "sfm":
        if scene.points is None:
            raise InputError("--init sfm needs a COLMAP points3D.txt with points", scene.path)
        return init_gaussians(scene.points, scene.point_colors, sh_degree, opacity=opacity)
    if mode == "gt-noise":
        if gt is None:
            raise InputError("--init gt-noise needs the known Gaussians (gt.ply, written by `generate`)", scene.path)
        m = gt.means.detach().double()
        c = 0.5 * (m.max(0).values + m.min(0).values)
        extent = float((m - c).abs().max())
        means = m + noise * extent * torch.randn(m.shape, generator=gen, dtype=torch.float64)
        return init_gaussians(means.to(gt.means.dtype), None, sh_degree, opacity=opacity)
    if mode == "random":
        center, half = scene.look_at_box()
        return random_box_init(n, center, half, sh_degree, gen, dtype=scene.train_images.dtype, opacity=opacity)
    raise UsageError(f"--init must be auto, random, sfm or gt-noise, not {mode!r}")


def starting_gaussians(scene: Scene, init: InitConfig, sh_degree: int, seed: int, ply: Gaussians | None = None,
                       gt: Gaussians | None = None) -> Gaussians:
    """``ply`` (a given start, with room made for SH up to ``sh_degree``) or :func:`initial_gaussians`
    by ``init`` (``gt``: the known Gaussians, for ``gt-noise``)."""
    if ply is not None:
        return ply.with_sh_degree(sh_degree)
    return initial_gaussians(scene, init.init, init.n_gaussians, sh_degree, seed, noise=init.noise, gt=gt,
                             opacity=init.init_opacity)


def evaluate_split(g: Gaussians, scene: Scene, split: str = "test", device="cpu") -> EvalResult:
    """PSNR and SSIM of ``g`` on the scene's ``split`` ('test' or 'train') views (the ``eval``
    subcommand); summary keys psnr_test, ssim_test, n_views, split, n_gaussians."""
    if split not in ("test", "train"):
        raise UsageError(f"--split must be test or train, not {split!r}")
    cams, imgs = (scene.test_cams, scene.test_images) if split == "test" else (scene.train_cams, scene.train_images)
    if len(cams) == 0:
        raise UsageError(f"--split {split}: {scene.path} has no {split} views")
    dev = torch.device(device)
    ev = evaluate(g.to(device=dev, dtype=imgs.dtype), cams.to(dev), imgs.to(dev), scene.background)
    return EvalResult({"psnr_test": ev["psnr"], "ssim_test": ev["ssim"], "n_views": len(cams), "split": split,
                       "n_gaussians": g.n})


def tr_radii(cfg: FitConfig) -> tuple[float, float]:
    """TR's (start, end) radius: the literal ``(radius, radius_final)`` or, with ``schedule="scaled"``,
    :func:`~icmlkit.lib.train_3dgs.optim.scaled_radii` over ``iters`` for ``schedule_horizon``."""
    if cfg.schedule == "scaled":
        r0, r1 = scaled_radii(cfg.radius, cfg.radius_final, cfg.iters, cfg.schedule_horizon)
        limit = 3 * cfg.opacity_floor  # the means' bound needs eps < 3 o_bar
        if max(r0, r1) >= limit:
            raise UsageError(f"--schedule scaled: {cfg.iters} iterations for a {cfg.schedule_horizon}-iteration "
                             f"budget give a start radius of {r0:.3g}, beyond the trust region's closed forms "
                             f"(< {limit:g} = 3 o_min); use more --iters or a smaller --schedule-horizon")
        return r0, r1
    return cfg.radius, cfg.radius_final


def curvature_refresh(opt: GaussianTrustRegion, cfg: FitConfig, g: Gaussians, cams, images, ids: list, bg,
                      img: torch.Tensor | None, generator: torch.Generator) -> None:
    """One refresh of TR's diagonal on the batch ``ids``: ``img`` (the batch's render, graph kept)
    for one graph, or None to re-render in chunks of ``cfg.curvature_views`` views (each rendered,
    differentiated twice and freed in turn, the same probe z). ``hvp``/``gn``: the L2 loss/residual;
    ``gn-train``: the square-root residual of the training loss (images, and the regularisers as a
    chunk of their own), Gauss-Newton matrix 2 J^T J of sum r^2."""
    gt = images[ids]
    n_tot = gt.numel()
    cv = cfg.curvature_views
    parts = [ids[i:i + cv] for i in range(0, len(ids), cv)] if img is None else []

    def rendered(sub):
        return render(g, cams[sub], background=bg, tile_size=cfg.tile_size, recompute=cfg.recompute)

    if cfg.curvature == "gn-train":
        reg = (lambda: reg_residual(g.opacity_logits, g.log_scales, cfg.reg_opacity, cfg.reg_scale))
        if img is None:
            chunks = [lambda s=s: train_residual(rendered(s), images[s], cfg.lambda_dssim, n_tot) for s in parts]
            if cfg.reg_opacity or cfg.reg_scale:
                chunks.append(reg)
        else:
            r_reg = reg()
            r_img = train_residual(img, gt, cfg.lambda_dssim, n_tot)
            chunks = r_img if r_reg is None else torch.cat([r_img, r_reg])
        opt.gauss_newton(chunks, generator=generator, scale=2.0)
    elif cfg.curvature == "hvp":
        opt.hutchinson([lambda s=s: (rendered(s) - images[s]).square().sum() / n_tot for s in parts]
                       if img is None else (img - gt).square().mean(), generator=generator)
    else:
        opt.gauss_newton([lambda s=s: (rendered(s) - images[s]).reshape(-1) for s in parts]
                         if img is None else (img - gt).reshape(-1), generator=generator, scale=2.0 / n_tot)


def fit_scene(scene: Scene, cfg: FitConfig, init: InitConfig, seed: int = 0, device="cpu",
              ply: Gaussians | None = None, gt: Gaussians | None = None,
              checkpointer: Checkpointer | None = None) -> FitResult:
    """The ``fit`` subcommand: :func:`starting_gaussians`, then :func:`fit`."""
    init.check()
    start = starting_gaussians(scene, init, cfg.sh_degree, seed, ply=ply, gt=gt)
    return fit(scene, start, cfg, seed=seed, device=device, checkpointer=checkpointer)


def fit(scene: Scene, init: Gaussians, cfg: FitConfig, seed: int = 0, device="cpu",
        checkpointer: Checkpointer | None = None) -> FitResult:
    """Optimise ``init`` on the scene's train views; evaluate on its test views every
    ``cfg.eval_every`` steps (and at ``cfg.eval_iters``, the start and the end).

    Random streams (named, from ``seed``): "batches" (the views of each step; the same for every
    optimizer) and "probe" (the Rademacher probes of TR's curvature).
    ``checkpointer``: saves the parameters, optimizer state, both streams, the metric rows and the
    step every ``checkpointer.every`` steps, and resumes from its file (only a checkpoint written
    with the same settings, seed, initialisation and scene: the fingerprint) to the same result
    as an uninterrupted run. Returns the fitted Gaussians, the metric rows (:data:`METRIC_COLUMNS`)
    and a summary.
    """
    cfg.check()
    dev = torch.device(device)
    dtype = scene.train_images.dtype
    cams, images = scene.train_cams.to(dev), scene.train_images.to(dev)
    tcams, timages = scene.test_cams.to(dev), scene.test_images.to(dev)
    bg = torch.tensor(scene.background, dtype=dtype, device=dev)
    max_deg = min(cfg.sh_degree, init.sh_degree)
    params = {k: v.detach().clone().to(dev, dtype).requires_grad_(True) for k, v in init.tensors().items()}
    extent = cfg.extent if cfg.extent is not None else scene.center_and_radius[1]
    radii = tr_radii(cfg)

    def make_optimizer(tensors: dict):
        if cfg.optimizer == "tr":
            return GaussianTrustRegion(named_groups(tensors), betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                                       hessian_every=cfg.hessian_every, block_average=cfg.block_average,
                                       radius=radii[0], radius_final=radii[1], total_steps=cfg.iters,
                                       tau_q=cfg.tau_q, opacity_range=(cfg.opacity_floor, 1.0),
                                       probes=cfg.probes, initial_probes=cfg.initial_probes,
                                       abs_before_ema=cfg.abs_before_ema, renorm_quats_every=cfg.renorm_quats_every,
                                       color_caps=cfg.color_caps,
                                       opacity_factor=(cfg.opacity_radius or cfg.radius) / cfg.radius)
        return make_adam(tensors, extent, cfg.adam_lr_scale)

    opt = make_optimizer(params)
    streams = {"batches": generator(seed, "batches"), "probe": generator(seed, "probe")}
    gen_batch, gen_probe = streams["batches"], streams["probe"]
    rows: list = []
    start = 0
    settings = asdict(cfg)
    if settings["adam_lr_scale"] == 1.0:  # added later: checkpoints of earlier runs still resume
        del settings["adam_lr_scale"]
    if settings["opacity_floor"] == 0.01:  # added later (0.01 was fixed): earlier runs resume with it
        del settings["opacity_floor"]
    if settings["prune_opacity"] == 0.0:  # added later: without pruning, earlier checkpoints still resume
        del settings["prune_opacity"], settings["prune_every"]
    fp = fingerprint({"config": settings, "seed": int(seed), "dtype": str(dtype)}, *init.tensors().values(),
                     scene.train_cams.R, scene.train_cams.t, scene.train_images, scene.test_images, scene.background)
    state = checkpointer.load(fp) if checkpointer is not None else None
    t_train = 0.0
    if state is not None:
        saved = state["extra"]["params"]
        if saved["means"].shape[0] != params["means"].shape[0]:  # pruned before the checkpoint: its N
            params = {k: saved[k].detach().clone().to(dev, dtype).requires_grad_(True) for k in GROUPS}
            opt = make_optimizer(params)
        start, extra = restore(state, optimizer=opt, rng=streams)
        with torch.no_grad():
            for k in GROUPS:
                params[k].copy_(extra["params"][k].to(dev, dtype))
        rows = [list(r) for r in extra["rows"]]
        t_train = float(extra["seconds"])
    n_views = len(cams)
    bsz = min(cfg.batch, n_views)
    eval_at = set(cfg.eval_iters) | {cfg.iters} | set(range(0, cfg.iters + 1, max(cfg.eval_every, 1)))

    def current(step: int) -> Gaussians:
        d = min(max_deg, step // max(cfg.sh_every, 1))
        return Gaussians(**params, sh_degree=d)

    def eval_row(step: int, loss=None, pb=None, ss=None) -> list:
        ev = evaluate(current(step), tcams, timages, bg, cfg.tile_size) if step in eval_at else {"psnr": None, "ssim": None}
        return [step, loss, pb, ss, ev["psnr"], ev["ssim"]]

    if start == 0 and not rows:
        rows.append(eval_row(0))
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    rss0 = peak_memory_mb(dev)
    meter = TensorMemoryMeter(static=params.values())
    clip_sum: dict[str, float] = {}
    pruned = int(extra.get("pruned", 0)) if state is not None else 0
    with meter:
        for step in progress(range(start, cfg.iters), total=cfg.iters - start, desc=f"fit {cfg.optimizer}"):
            t0 = time.perf_counter()
            ids = torch.randperm(n_views, generator=gen_batch)[:bsz].tolist()
            g = current(step)
            with meter.section("train"):
                img = render(g, cams[ids], background=bg, tile_size=cfg.tile_size, recompute=cfg.recompute)
                gt = images[ids]
                loss = gs_loss(img, gt, cfg.lambda_dssim) + regularisers(
                    g.opacity_logits, g.log_scales, cfg.reg_opacity, cfg.reg_scale)
            for p in params.values():
                p.grad = None
            if cfg.optimizer == "tr":
                due = opt.curvature_due()
                cv = cfg.curvature_views
                loss.backward(retain_graph=due and not cv)
                if due:
                    with meter.section("curvature"):
                        curvature_refresh(opt, cfg, g, cams, images, ids, bg, img if not cv else None, gen_probe)
                step_size = opt.radius_now()
                opt.step()
                for k, v in opt.last_clip_fraction.items():
                    clip_sum[k] = clip_sum.get(k, 0.0) + v
            else:
                loss.backward()
                step_size = adam_lr_update(opt, step, cfg.iters, extent, cfg.adam_lr_scale)
                opt.step()
            t_train += time.perf_counter() - t0
            with torch.no_grad():
                pb = float(psnr(img.detach(), gt))
            if not math.isfinite(float(loss.detach())):
                raise FloatingPointError(f"the loss is not finite at step {step + 1}")
            if cfg.prune_opacity and (step + 1) % cfg.prune_every == 0 and step + 1 < cfg.iters:
                with torch.no_grad():
                    keep = torch.sigmoid(params["opacity_logits"]) >= cfg.prune_opacity
                if bool(keep.any()) and not bool(keep.all()):  # never prune every Gaussian
                    pruned += int((~keep).sum())
                    params = prune_gaussians(opt, keep)
                    meter.exclude(params.values())
            rows.append(eval_row(step + 1, float(loss.detach()), pb, step_size))
            if checkpointer is not None and checkpointer.due(step + 1, cfg.iters):
                checkpointer.save(step + 1, fp, optimizer=opt, rng=streams, extra={
                    "params": {k: v.detach().cpu().clone() for k, v in params.items()},
                    "rows": [list(r) for r in rows], "seconds": t_train, "pruned": pruned})
    meter.add_static(t for st in opt.state.values() for t in st.values() if torch.is_tensor(t))
    peak = peak_memory_mb(dev)
    final = Gaussians(**{k: v.detach().cpu() for k, v in params.items()}, sh_degree=max_deg)
    last = next((r for r in reversed(rows) if r[4] is not None), [None] * len(METRIC_COLUMNS))  # no test views
    summary = {"psnr_test": last[4], "ssim_test": last[5], "iters": cfg.iters, "seconds": round(t_train, 3),
               "seconds_per_iter": round(t_train / max(cfg.iters, 1), 5), "peak_memory_mb": round(peak, 1),
               "peak_train_memory_mb": round(max(peak - rss0, 0.0), 1) if dev.type != "cuda" else round(peak, 1),
               "n_gaussians": final.n, "optimizer": cfg.optimizer, **meter.summary_mb()}
    if cfg.prune_opacity:
        summary["pruned"] = pruned
    if cfg.optimizer == "tr":
        summary["radius_schedule"] = [radii[0], radii[1]]
    n_steps = cfg.iters - start
    if clip_sum and n_steps:
        summary["clip_fraction"] = {k: round(v / n_steps, 4) for k, v in clip_sum.items()}
    summary["resumed_from"] = start if state is not None else None
    return FitResult(final, rows, summary)


def psnr_at(rows: list, step: int) -> float | None:
    for r in rows:
        if r[0] == step:
            return r[4]
    return None
