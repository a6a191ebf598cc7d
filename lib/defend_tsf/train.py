"""Training a forecaster on possibly poisoned data under a defence: TimeGuard (Stage I + Stage II),
no defence, or the sample-level loss filter.

TimeGuard, per the method sheet:
  Stage I  1. backcaster (same architecture, L and H swapped) trained T_b epochs on the reversed
              windows (reversed future in, reversed past out); per (n, c) backcast loss; RCF_c = the
              alpha N LOWEST.
           2. NDF_c = the alpha N windows with the LARGEST mean distance to their k_nn nearest
              windows (time-aware weighted z-normalised [x; y], raw scale).
           3. pool_c = RCF_c & NDF_c; warm-up T_1 epochs on it.
  Stage II for e < T_2: gamma_e = alpha + (beta - alpha) e / (T_2 - 1); loss per (n, c); DRLS pool
           (distance to the windows outside the pool on the K_max graph -> candidates -> lowest loss);
           one epoch on the new pool.
  The checkpoint kept is the one with the best clean MAE on the VALIDATION split (the official code
  uses the test split).

Only the loss is masked: the forecaster always sees every channel. An epoch passes over all
windows in a seeded order (batches without a pooled pair are skipped).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from icmlkit.lib.core import console
from icmlkit.lib.core.checkpoint import fingerprint, restore
from icmlkit.lib.core.runtime import Dist, generator, seeded
from icmlkit.lib.defend_tsf import timeguard as tg
from icmlkit.lib.defend_tsf.config import DataConfig, ModelConfig, TrainConfig
from icmlkit.lib.defend_tsf.data import Scaler, Series, Splits, make_splits, window_starts
from icmlkit.lib.defend_tsf.models import build_model

MODEL_FORMAT = "icmlkit.defend-tsf.model/1"


@dataclass
class Prepared:
    """Windows of one series under one data config, as tensors (float32; raw targets)."""

    series: Series
    cfg: DataConfig
    splits: Splits
    scaler: Scaler
    windows: dict  # split -> (x_norm (N, L, C), y_raw (N, H, C), starts (N,))
    train_raw: np.ndarray


def windows_of(values_raw: np.ndarray, scaler: Scaler, lo: int, hi: int, L: int, H: int):
    starts = window_starts(lo, hi, L, H)
    norm = torch.as_tensor(scaler.transform(values_raw), dtype=torch.float32)
    raw = torch.as_tensor(values_raw, dtype=torch.float32)
    s = torch.as_tensor(starts)
    xr = s[:, None] + torch.arange(L)[None, :]
    yr = s[:, None] + L + torch.arange(H)[None, :]
    return norm[xr], raw[yr], s


def prepare(series: Series, cfg: DataConfig, scaler: Scaler | None = None) -> Prepared:
    """Splits, training statistics (unless ``scaler`` is given) and the windows of each split."""
    sp = make_splits(series, cfg)
    sc = scaler or Scaler.fit(series.values[: sp.train_end])
    L, H = cfg.seq_len, cfg.pred_len
    wins = {w: windows_of(series.values, sc, *sp.rows(w), L, H) for w in ("train", "val", "test")}
    return Prepared(series, cfg, sp, sc, wins, series.values[: sp.train_end])


@dataclass
class TrainResult:
    model: dict            # what the .pt holds (state_dict, configs, scaler, columns, final pool)
    pools: dict            # name -> (C, N) bool arrays (rcf, ndf, init, final, best)
    log: list              # one row per epoch
    summary: dict
    stats: dict = field(default_factory=dict)


def _denorm(pred_norm, mean, std):
    return pred_norm * std + mean


@torch.no_grad()
def predict(model, x_norm, mean, std, device, chunk: int = 4096):
    """Raw-scale forecasts of (N, L, C) z-scored inputs, in chunks."""
    model.eval()
    outs = []
    for s in range(0, x_norm.shape[0], chunk):
        outs.append(_denorm(model(x_norm[s:s + chunk].to(device)), mean, std).cpu())
    model.train()
    return torch.cat(outs) if outs else torch.zeros(0)


@torch.no_grad()
def full_losses(model, x_norm, y_raw, mean, std, device) -> torch.Tensor:
    """l_{n,c} for every training window, (C, N)."""
    pred = predict(model, x_norm, mean, std, device)
    return tg.window_channel_loss(pred, y_raw).T.contiguous()


def _epoch(model, opt, x_in, y_tgt, mask_cn, gen, batch_size, dist: Dist, device, mean, std) -> float:
    """One pass over all windows in a seeded order (the loss masked by the pool, so every defence takes
    the same number of steps per epoch; a batch with no pooled pair is skipped); returns the mean
    masked loss.

    Under torchrun each rank takes its contiguous part of every global batch; the loss is divided
    by the global batch's mask count (times the world size, which DDP's gradient mean undoes), so
    the update equals the one-process update."""
    N = mask_cn.shape[1]
    order = torch.randperm(N, generator=gen)
    batches = list(torch.split(order, batch_size))
    if len(batches) > 1 and batches[-1].numel() < dist.world:
        batches[-2] = torch.cat([batches[-2], batches[-1]])
        batches.pop()
    total, count = 0.0, 0.0
    for idx in batches:
        m = mask_cn[:, idx].T  # (B, C)
        denom = float(m.sum())
        if denom == 0:
            continue
        lo = dist.rank * idx.numel() // dist.world
        hi = (dist.rank + 1) * idx.numel() // dist.world
        part = idx[lo:hi]
        pred = _denorm(model(x_in[part].to(device)), mean, std)
        loss_nc = tg.window_channel_loss(pred, y_tgt[part].to(device))
        loss = tg.masked_loss(loss_nc, m[lo:hi].to(device), denom) * dist.world
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += float(loss.detach()) / dist.world * denom
        count += denom
    return total / max(count, 1.0)


def _val_mae(model, prep: Prepared, mean, std, device) -> float:
    x, y, _ = prep.windows["val"]
    pred = predict(model, x, mean, std, device)
    return float((pred - y).abs().mean())


def _share(pool: torch.Tensor, poison: torch.Tensor | None) -> float | None:
    if poison is None:
        return None
    n = int(pool.sum())
    return float((pool & poison).sum()) / n if n else 0.0


def backcaster_windows(x_norm: torch.Tensor, y_raw: torch.Tensor, scaler: Scaler) -> tuple[torch.Tensor, torch.Tensor]:
    """The backcaster's training pairs: input = the time-reversed future (z-scored, H steps), target =
    the time-reversed past (raw scale, L steps)."""
    mean = torch.as_tensor(scaler.mean, dtype=torch.float32)
    std = torch.as_tensor(scaler.std, dtype=torch.float32)
    return tg.backcast_batch(x_norm * std + mean, (y_raw - mean) / std)


def schedule(cfg: TrainConfig) -> list[tuple[str, int]]:
    """(phase, epoch within the phase) for every epoch of the run."""
    if cfg.defense == "timeguard":
        phases = [("backcast", cfg.t_b), ("warmup", cfg.t_1), ("drls", cfg.t_2)]
    elif cfg.defense == "sample-filter":
        phases = [("warmup", cfg.t_1), ("filter", cfg.t_2)]
    else:
        phases = [("train", cfg.t_1 + cfg.t_2)]
    return [(p, i) for p, n in phases for i in range(n)]


def train_forecaster(prep: Prepared, model_cfg: ModelConfig, cfg: TrainConfig, *, seed: int, device=None,
                     dist: Dist = Dist(), checkpointer=None, graph: tg.NeighbourGraph | None = None,
                     poison: np.ndarray | None = None, attack: str | None = None) -> TrainResult:
    """Train ``model_cfg`` on the training split of ``prep`` under ``cfg.defense``.

    ``graph``: a precomputed K_max-NN graph of the training windows (built here when None and
    TimeGuard needs it); ``poison``: the (C, N) ground truth of poisoned (window, channel) pairs,
    only for reporting pool purity (never used by the defence)."""
    device = device if device is not None else torch.device("cpu")
    L, H = prep.cfg.seq_len, prep.cfg.pred_len
    xtr, ytr, starts = prep.windows["train"]
    N, C = xtr.shape[0], xtr.shape[2]
    mean = torch.as_tensor(prep.scaler.mean, dtype=torch.float32, device=device)
    std = torch.as_tensor(prep.scaler.std, dtype=torch.float32, device=device)
    poison_t = torch.as_tensor(poison, dtype=torch.bool) if poison is not None else None
    settings = {"data": asdict(prep.cfg), "model": asdict(model_cfg), "train": asdict(cfg), "seed": seed,
                "world": dist.world, "format": MODEL_FORMAT}
    fp = fingerprint(settings, prep.series.values, list(prep.series.columns))

    with seeded(seed, "init"):
        net = build_model(model_cfg, L, H, C).to(device)
    model = dist.wrap(net, device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    gen = generator(seed, "batches")
    bc_net = bc_model = bc_opt = None
    if cfg.defense == "timeguard":
        with seeded(seed, "backcaster"):
            bc_net = build_model(model_cfg, H, L, C).to(device)
        bc_model = dist.wrap(bc_net, device)
        bc_opt = torch.optim.Adam(bc_model.parameters(), lr=cfg.lr)
    bc_in = bc_tgt = None
    if cfg.defense == "timeguard":
        bc_in, bc_tgt = backcaster_windows(xtr, ytr, prep.scaler)
    sched = schedule(cfg)
    total = len(sched)
    ones = torch.ones(C, N, dtype=torch.bool)
    pool = ones.clone()
    pools: dict = {}
    log: list = []
    best = {"val": float("inf"), "epoch": -1, "state": None, "pool": None}
    start = 0
    t_knn = 0.0
    state = checkpointer.load(fp) if checkpointer is not None else None
    if state is not None:
        start, extra = restore(state, model=net, optimizer=opt, rng={"batches": gen})
        if bc_net is not None and extra.get("bc_model") is not None:
            bc_net.load_state_dict(extra["bc_model"])
            bc_opt.load_state_dict(extra["bc_opt"])
        pool = extra["pool"].clone()
        pools = {k: v.clone() for k, v in extra["pools"].items()}
        log = list(extra["log"])
        best = {"val": float(extra["best_val"]), "epoch": int(extra["best_epoch"]),
                "state": extra["best_state"], "pool": extra["best_pool"]}
    if cfg.defense == "timeguard" and graph is None:
        t0 = time.perf_counter()
        raw_train = torch.as_tensor(prep.train_raw, dtype=torch.float64)
        graph = tg.build_graph(raw_train, starts, L, H, cfg.k_max, cfg.sigma, device=device)
        t_knn = time.perf_counter() - t0

    t_start = time.perf_counter()
    for e in console.progress(range(start, total), total=total - start, desc=f"train {cfg.defense}"):
        phase, i = sched[e]
        row = {"epoch": e, "phase": phase, "ratio": None, "pool_fraction": None, "train_loss": None,
               "val_mae": None, "poison_share_pool": None}
        if phase == "backcast":
            row["train_loss"] = _epoch(bc_model, bc_opt, bc_in, bc_tgt, ones, gen, cfg.batch_size, dist, device,
                                       mean, std)
            row["pool_fraction"] = 1.0
            if i == cfg.t_b - 1:  # end of Stage I: the two criteria and their intersection
                bl = full_losses(bc_net, bc_in, bc_tgt, mean, std, device)
                pools["rcf"] = tg.rcf_mask(bl, cfg.alpha, cfg.pool_count)
                pools["ndf"] = tg.ndf_mask(graph, cfg.k_nn, cfg.alpha, cfg.pool_count)
                pool = pools["rcf"] & pools["ndf"]
                pools["init"] = pool.clone()
                row["pool_fraction"] = float(pool.float().mean())
                row["poison_share_pool"] = _share(pool, poison_t)
                bc_net = bc_model = bc_opt = None  # no longer needed
        else:
            if phase in ("drls", "filter"):
                ratio = tg.ratio_at(i, cfg.t_2, cfg.alpha, cfg.beta)
                loss = full_losses(net, xtr, ytr, mean, std, device)
                if phase == "drls":
                    pool = tg.drls_pool(loss, graph, pool, ratio, cfg.pi, cfg.k_nn, cfg.pool_count)
                    if cfg.stage2_optimizer == "per-epoch":  # the official code builds a new Adam each epoch
                        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
                else:
                    pool = tg.sample_filter_pool(loss, ratio, cfg.pool_count)
                row["ratio"] = ratio
            elif phase == "warmup" and cfg.defense == "sample-filter":
                pool = ones
            row["pool_fraction"] = float(pool.float().mean())
            row["poison_share_pool"] = _share(pool, poison_t)
            row["train_loss"] = _epoch(model, opt, xtr, ytr, pool, gen, cfg.batch_size, dist, device, mean, std)
            val = _val_mae(net, prep, mean, std, device)
            row["val_mae"] = val
            if val < best["val"]:
                best = {"val": val, "epoch": e, "state": {k: v.detach().cpu().clone() for k, v in net.state_dict().items()},
                        "pool": pool.clone()}
        log.append(row)
        console.report(loss=row["train_loss"], **({"val_mae": row["val_mae"]} if row["val_mae"] is not None else {}))
        if checkpointer is not None and checkpointer.due(e + 1, total):
            checkpointer.save(e + 1, fp, model=net, optimizer=opt, rng={"batches": gen}, extra={
                "bc_model": bc_net.state_dict() if bc_net is not None else None,
                "bc_opt": bc_opt.state_dict() if bc_opt is not None else None,
                "pool": pool, "pools": pools, "log": log, "best_val": best["val"], "best_epoch": best["epoch"],
                "best_state": best["state"], "best_pool": best["pool"]})
    seconds = time.perf_counter() - t_start
    pools["final"] = pool.clone()
    if best["state"] is None:  # no forecaster epoch at all (cannot happen with t_2 >= 1)
        best["state"] = {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
        best["pool"] = pool.clone()
    pools["best"] = best["pool"].clone()
    obj = {
        "format": MODEL_FORMAT, "state_dict": best["state"], "model_config": asdict(model_cfg),
        "data_config": asdict(prep.cfg), "train_config": asdict(cfg), "columns": list(prep.series.columns),
        "mean": torch.as_tensor(prep.scaler.mean), "std": torch.as_tensor(prep.scaler.std),
        "defense": cfg.defense, "attack": attack, "best_epoch": int(best["epoch"]), "seed": int(seed),
        "final_pool": pools["final"].clone(), "n_train_windows": int(N),
    }
    share_train = float(poison_t.float().mean()) if poison_t is not None else None
    share_pool = _share(pools["final"], poison_t)
    summary = {
        "model": model_cfg.model, "defense": cfg.defense, "attack": attack, "seq_len": L, "pred_len": H,
        "epochs": total, "best_epoch": int(best["epoch"]), "val_mae": best["val"],
        "pool_fraction": float(pools["final"].float().mean()),
        "poison_share_train": share_train, "poison_share_pool": share_pool,
        "pool_purity": None if share_pool is None else 1.0 - share_pool,
        "seconds": seconds, "knn_seconds": t_knn, "resumed_from": start or None,
    }
    return TrainResult(obj, {k: v.numpy() for k, v in pools.items()}, log, summary, {"graph": graph})
