"""Training by metric matching (the ``train`` subcommand).

1. Standardise the points (``scale="rms"``: centre, divide by the RMS radius; h is in these units).
2. (``centred``) Train a denoiser D(y, h) ~ E[X | Y = y] on Y = X + hZ (EDM-style weighting
   (1 + h^2) / h^2, **[reconstructed]**), then freeze it.
3. Train M(y, h): every step draws a global batch of points, one Z ~ N(0, I) and one h per point
   (lognormal exp(N(-1.2, 1.2^2)) clamped to [h_min, h_max], uniform, or lognormalwide), sets
   Y = X + hZ and delta = (X - Y) / (sqrt(2) h) (= -Z / sqrt(2); or (X - D(Y, h)) / (sqrt(2) h) when
   centred) and minimises the low-rank loss (|M M^T|^2 - 2|M delta|^2 + |delta|^4) / D^2 (+ Tikhonov).
   AdamW with a cosine decay **[reconstructed]** and gradient-norm clipping at 1 **[reconstructed]**.
4. (``val_points`` > 0) The held-out split (``val_points`` of DATA, at most a fifth, drawn with the
   stream "validation" and never trained on; the standardisation is the training points') chooses the
   model's default query h from ``h_grid`` (:mod:`.select`: projector error when DATA has exact
   tangents, the benchmark's criterion; else the chord residual **[reconstructed]**), stored in the
   model's config as ``h_default`` with the scores in its info.

Random streams (named, from the seed): "batches", "noise", "bandwidth" (drawn at the global batch
size on every rank; each torchrun rank takes its ``dist.split`` part and the gradients are averaged
with one all-reduce, so the step is the one-process step on the global batch), "init" /
"init-denoiser" for the weights. ``checkpointer`` saves the nets, optimiser, schedule, streams and
loss rows; a resumed run gives the same model bytes as an uninterrupted one.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from icmlkit.lib.core.checkpoint import fingerprint, restore
from icmlkit.lib.core.console import log, progress
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.runtime import Dist, generator
from icmlkit.lib.metric_match.config import TrainConfig
from icmlkit.lib.metric_match.core import lowrank_loss
from icmlkit.lib.metric_match.data import Points
from icmlkit.lib.metric_match.model import MetricModel, build_nets
from icmlkit.lib.metric_match.select import choose_h, truth_arrays

LOSS_COLUMNS = ["step", "stage", "loss", "lr"]


@dataclass
class TrainResult:
    model: MetricModel
    rows: list
    summary: dict


def standardisation(x: np.ndarray, scale: str, where: str = "data") -> tuple[np.ndarray, float]:
    """(mean, scale) of ``x``: the centre and RMS radius (``rms``) or (0, 1) (``none``)."""
    D = x.shape[1]
    if scale == "none":
        return np.zeros(D), 1.0
    mean = x.mean(0)
    s = float(np.sqrt(((x - mean) ** 2).sum(1).mean()))
    if not np.isfinite(s) or s <= 1e-12:
        raise InputError("all points are identical (RMS radius 0): nothing to learn", where)
    return mean, s


def sample_h(n: int, cfg: TrainConfig, gen: torch.Generator) -> torch.Tensor:
    """(n,) float64 noise levels from the configured distribution, clamped to [h_min, h_max]."""
    if cfg.bandwidth == "uniform":
        u = torch.rand(n, generator=gen, dtype=torch.float64)
        return cfg.h_min + (cfg.h_max - cfg.h_min) * u
    z = torch.randn(n, generator=gen, dtype=torch.float64)
    h = torch.exp(z) if cfg.bandwidth == "lognormalwide" else torch.exp(-1.2 + 1.2 * z)
    return h.clamp(cfg.h_min, cfg.h_max)



def train(cfg: TrainConfig, points: Points, *, seed: int = 0, device="cpu", dist: Dist | None = None,
          checkpointer=None) -> TrainResult:
    """Train a metric-matching model on ``points`` (see the module docstring for the steps)."""
    cfg.check()
    dist = dist if dist is not None else Dist()
    dev = torch.device(device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    dtype = torch.float64 if cfg.precision == "float64" else torch.float32
    x = np.asarray(points.x, dtype=np.float64)
    N, D = x.shape
    if N < 2:
        raise InputError(f"needs at least 2 points, found {N}", points.path)
    tangent, dims = truth_arrays(points.arrays, N, D, points.path)
    n_val = min(int(cfg.val_points), N // 5)
    val_idx = None
    if n_val >= 1:
        perm = torch.randperm(N, generator=generator(seed, "validation")).numpy()
        val_idx, train_idx = perm[:n_val], np.sort(perm[n_val:])
        x_val, x = x[val_idx], x[train_idx]
        N = len(x)
    mean, scale = standardisation(x, cfg.scale, points.path)
    rank = int(cfg.rank) if cfg.rank is not None else min(D, 16)
    if cfg.dim is not None and rank < 2 * cfg.dim - 1:
        log.warning("--rank %d is below 2d - 1 = %d for d = %d: Gamma may fail to represent the tangent spaces "
                    "(Thm 4.2)", rank, 2 * cfg.dim - 1, cfg.dim)
    kind = "unet" if cfg.net == "unet" or (cfg.net == "auto" and points.image_shape) else "mlp"
    if kind == "unet" and not points.image_shape:
        raise UsageError(f"--net unet needs an image set (a folder of PNGs or an .npz of (N, H, W[, C]) images); "
                         f"{points.path} holds points of shape N x {D}")
    config = {"D": D, "rank": rank, "arch": {"width": cfg.width, "blocks": cfg.blocks, "emb": cfg.emb, "kind": kind,
                                             "channels": cfg.channels, "h_freq_max": cfg.h_freq_max},
              "h_min": cfg.h_min, "h_max": cfg.h_max, "bandwidth": cfg.bandwidth, "tikhonov": cfg.tikhonov,
              "centred": bool(cfg.centred), "scale_mode": cfg.scale,
              "image_shape": list(points.image_shape) if points.image_shape else None}
    net, den = build_nets(config, seed, dtype)
    net.to(dev)
    if den is not None:
        den.to(dev)
    params = list(net.parameters()) + (list(den.parameters()) if den is not None else [])
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    n_den = cfg.denoiser_steps if cfg.centred else 0
    total = n_den + cfg.steps

    def lr_factor(s: int) -> float:
        s0, n = (s, n_den) if s < n_den else (s - n_den, cfg.steps)
        return 0.5 * (1 + math.cos(math.pi * min(s0, n) / n))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    streams = {"batches": generator(seed, "batches"), "noise": generator(seed, "noise"),
               "bandwidth": generator(seed, "bandwidth")}
    B = min(cfg.batch, max(N, dist.world))
    part = dist.split(B)
    X = torch.as_tensor((x - mean) / scale, dtype=dtype, device=dev)
    settings = {"config": asdict(cfg), "seed": int(seed), "batch_used": B}
    settings["config"].pop("threads", None)
    settings["config"].pop("log_every", None)
    if not cfg.val_points:  # the former settings: checkpoints written before the split still resume
        settings["config"].pop("val_points", None)
        settings["config"].pop("h_grid", None)
    fp = fingerprint(settings, x)
    rows: list = []
    start, t_before = 0, 0.0
    state = checkpointer.load(fp) if checkpointer is not None else None
    if state is not None:
        start, extra = restore(state, model=_Both(net, den), optimizer=opt, scheduler=sched, rng=streams)
        rows, t_before = [list(r) for r in extra["rows"]], float(extra["seconds"])
    both = _Both(net, den)
    t0 = time.perf_counter()
    sqrt2 = math.sqrt(2.0)
    loss = torch.zeros(())
    for step in progress(range(start, total), total=total - start, desc="train"):
        stage = "denoiser" if step < n_den else "metric"
        idx = torch.randint(0, N, (B,), generator=streams["batches"])[part]
        z = torch.randn(B, D, generator=streams["noise"], dtype=torch.float64)[part].to(dev, dtype)
        h = sample_h(B, cfg, streams["bandwidth"])[part].to(dev, dtype)
        xb = X[idx.to(dev)]
        y = xb + h[:, None] * z
        opt.zero_grad(set_to_none=True)
        if stage == "denoiser":
            w = (1 + h * h) / (h * h)
            loss = (w * ((den(y, h) - xb) ** 2).mean(-1)).mean()
        else:
            if den is not None:
                with torch.no_grad():
                    delta = (xb - den(y, h)) / (sqrt2 * h[:, None])
            else:
                delta = -z / sqrt2  # (X - Y) / (sqrt(2) h) exactly, without the cancellation at small h
            loss = lowrank_loss(net(y, h), delta, cfg.tikhonov)
        loss.backward()
        if dist.active:
            dist.average_gradients(params)
        torch.nn.utils.clip_grad_norm_([p for p in params if p.grad is not None], 1.0)
        opt.step()
        sched.step()
        if step % cfg.log_every == 0 or step == total - 1 or step == n_den - 1:
            rows.append([step, stage, dist.all_mean(float(loss.detach())), float(opt.param_groups[0]["lr"])])
        if checkpointer is not None and checkpointer.due(step + 1, total):
            checkpointer.save(step + 1, fp, model=both, optimizer=opt, scheduler=sched, rng=streams,
                              extra={"rows": rows, "seconds": t_before + time.perf_counter() - t0})
    seconds = t_before + time.perf_counter() - t0
    final = [r for r in rows if r[1] == "metric"]
    info = {"n_train": N, "steps": cfg.steps, "denoiser_steps": n_den, "batch": B, "seed": int(seed),
            "final_loss": final[-1][2] if final else None}
    net.eval()
    model = MetricModel(net.float().cpu(), config, mean, scale,
                        den.float().cpu().eval() if den is not None else None, info)
    sel = None
    if val_idx is not None:
        sel = choose_h(model, torch.as_tensor((x_val - mean) / scale), cfg.h_values(),
                       tangent=tangent[val_idx] if tangent is not None else None,
                       dims=dims[val_idx] if dims is not None else None, dim=cfg.dim,
                       x_train=torch.as_tensor((x - mean) / scale))
        config["h_default"] = sel["h"]
        info["h_selection"] = sel
        log.info("default query h = %g (%s criterion on %d held-out points, d = %d)", sel["h"], sel["criterion"],
                 sel["n_val"], sel["d"])
    summary = {"n": N, "D": D, "rank": rank, "steps": cfg.steps, "denoiser_steps": n_den, "batch": B,
               "final_loss": info["final_loss"], "h_min": cfg.h_min, "h_max": cfg.h_max, "scale": scale,
               "h": sel["h"] if sel else None, "n_val": sel["n_val"] if sel else 0,
               "h_criterion": sel["criterion"] if sel else None,
               "seconds": round(seconds, 3), "world_size": dist.world}
    return TrainResult(model, rows, summary)


class _Both(torch.nn.Module):
    """The metric net and the denoiser as one module (one state dict for the checkpoint)."""

    def __init__(self, net, den):
        super().__init__()
        self.net = net
        if den is not None:
            self.den = den
