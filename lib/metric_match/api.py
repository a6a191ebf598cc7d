"""One library call per subcommand: query, knn, interpolate, eval (train is in ``train.py``, generate in
``generate.py``). Every result has ``arrays`` (written as .npz by the CLI) and ``summary`` (--json).

Geometry outputs follow metric matching's convention Gamma_eps = E[(X - Y)(X - Y)^T / 2eps | Y]: on a
manifold the spectrum is about 1/2 on the d tangent directions and about 0 across; the kNN baseline's
kernel convention (divided by h^2) is twice that (``knn --halve`` divides it by 2).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from icmlkit.lib.core.console import log
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.metric_match.config import EvalConfig, InterpolateConfig, KnnConfig, QueryConfig
from icmlkit.lib.metric_match.core import eig_route, eigengap_strength, local_dimension, projector_error
from icmlkit.lib.metric_match.data import Points, parse_direction
from icmlkit.lib.metric_match.knn import knn_cdc
from icmlkit.lib.metric_match.model import MetricModel
from icmlkit.lib.metric_match.select import truth_arrays
from icmlkit.lib.metric_match.train import standardisation


@dataclass
class Result:
    arrays: dict
    summary: dict
    rows: list = field(default_factory=list)


def _slice(n: int, shard: tuple[int, int]) -> np.ndarray:
    k, m = shard
    return np.arange((k - 1) * n // m, k * n // m)


# `query --what tangent` without --dim refuses (`knn`: warns) when the median ratio of the largest
# eigen-gap to the second largest is below this: two dimensions fit about equally well [reconstructed
# threshold]
WEAK_EIGENGAP_RATIO = 2.0


def _tangent_dim(cfg_dim, local_dim: torch.Tensor, rank: int) -> int:
    d = int(cfg_dim) if cfg_dim is not None else int(torch.median(local_dim).item()) if len(local_dim) else 1
    if d > rank:
        raise UsageError(f"--dim {d} is above the spectrum's length {rank} (the model's rank)")
    return d


def _check_gap(lam, cfg: QueryConfig, d: int, refuse: bool = True) -> float | None:
    """The median eigen-gap ratio (None for an empty query). A tangent dimension read from a weak
    eigen-gap (ratio below :data:`WEAK_EIGENGAP_RATIO`, no --dim, the eigengap rule) is refused, or with
    ``refuse=False`` (the kNN baseline) logged as a warning."""
    if not len(lam):
        return None
    ratio, alt = eigengap_strength(lam)
    med = float(torch.median(ratio).item())
    if cfg.what == "tangent" and cfg.dim is None and cfg.dim_rule == "eigengap" and med < WEAK_EIGENGAP_RATIO:
        other = int(torch.median(alt).item())
        msg = (f"the eigen-gap is weak: the largest gap is only {med:.2f}x the second largest (median over the "
               f"points; below {WEAK_EIGENGAP_RATIO:g}), so d = {d} and d = {other} fit about equally well; pass "
               f"--dim (or --dim-rule threshold)")
        if refuse:
            raise UsageError(msg)
        log.warning(msg)
    return med


def _outputs(what: str, lam, V, cfg: QueryConfig, D: int, M=None, refuse_weak: bool = True) -> tuple[dict, dict]:
    ld = local_dimension(lam, cfg.dim_rule, cfg.dim_threshold)
    arrays = {"spectrum": lam.numpy(), "local_dim": ld.numpy().astype(np.int64)}
    extra: dict = {}
    if what == "tangent":
        d = _tangent_dim(cfg.dim, ld, lam.shape[1])
        extra["eigengap_ratio"] = _check_gap(lam, cfg, d, refuse_weak)
        arrays["tangent"] = V[:, :d].numpy()
        extra["d"] = d
    elif what == "metric":
        arrays["eigvecs"] = V.numpy()
        if M is not None:
            arrays["factor"] = M.numpy()
    elif what == "gradient":
        v = torch.as_tensor(parse_direction(cfg.direction, D))
        if M is not None:
            arrays["gradient"] = torch.einsum("nrd,nr->nd", M, torch.einsum("nrd,d->nr", M, v)).numpy()  # never D x D
        else:
            arrays["gradient"] = torch.einsum("nr,nrd,nre,e->nd", lam, V, V, v).numpy()
    med = float(np.median(arrays["local_dim"])) if len(ld) else None
    return arrays, {"median_local_dim": med, **extra}


def query(model: MetricModel, pts: Points, cfg: QueryConfig, shard: tuple[int, int] = (1, 1)) -> Result:
    """Geometry at ``pts`` from the trained network: M(y, h), the r x r eigen route (spectrum,
    eigenvectors mapped back to R^D), local dimension, and the asked-for output."""
    cfg.check()
    model.check_points(pts.x, pts.path)
    h = model.resolve_h(cfg.h)
    idx = _slice(len(pts.x), shard)
    y = torch.as_tensor(model.standardise(pts.x[idx]))
    t0 = time.perf_counter()
    M = model.factor(y, h, cfg.batch)
    lam, V = eig_route(M)
    arrays, extra = _outputs(cfg.what, lam, V, cfg, model.D, M)
    sec = time.perf_counter() - t0
    arrays["index"] = idx.astype(np.int64)
    summary = {"n": int(len(idx)), "D": model.D, "rank": model.rank, "h": h,
               "h_source": "given" if cfg.h is not None else "validation", "what": cfg.what,
               "median_local_dim": extra.pop("median_local_dim"), **extra, "seconds": round(sec, 6),
               "queries_per_s": round(len(idx) / sec, 1) if sec > 0 and len(idx) else None}
    return Result(arrays, summary)


def knn_query(data: Points, pts: Points, kcfg: KnnConfig, cfg: QueryConfig, shard: tuple[int, int] = (1, 1),
              device="cpu") -> Result:
    """The kNN-CDC baseline at ``pts`` with the same outputs as :func:`query` (spectrum of length D)."""
    kcfg.check()
    cfg.check()
    if pts.x.shape[1] != data.x.shape[1]:
        raise InputError(f"points have D = {pts.x.shape[1]}, DATA has D = {data.x.shape[1]}", pts.path)
    mean, scale = standardisation(data.x, kcfg.scale, data.path)
    dev = torch.device(device)
    t0 = time.perf_counter()
    X = torch.as_tensor((data.x - mean) / scale, device=dev)
    t_index = time.perf_counter() - t0
    idx = _slice(len(pts.x), shard)
    Q = torch.as_tensor((pts.x[idx] - mean) / scale, device=dev)
    t1 = time.perf_counter()
    lam, V = knn_cdc(X, Q, kcfg.k, kcfg.knn_h, chunk=kcfg.chunk, halve=kcfg.halve)
    lam, V = lam.cpu(), V.cpu()
    arrays, extra = _outputs(cfg.what, lam, V, cfg, data.x.shape[1], refuse_weak=False)
    sec = time.perf_counter() - t1
    arrays["index"] = idx.astype(np.int64)
    summary = {"n": int(len(idx)), "D": int(data.x.shape[1]), "rank": int(data.x.shape[1]), "h": kcfg.knn_h,
               "k": kcfg.k, "n_data": int(len(data.x)), "convention": "kernel/2 (target)" if kcfg.halve else
               "kernel (2x target)", "what": cfg.what, "median_local_dim": extra.pop("median_local_dim"), **extra,
               "seconds": round(sec, 6), "seconds_index": round(t_index, 6),
               "queries_per_s": round(len(idx) / sec, 1) if sec > 0 and len(idx) else None}
    return Result(arrays, summary)


def _pair(a: Points, b: Points) -> tuple[np.ndarray, np.ndarray]:
    if a.x.shape[1] != b.x.shape[1]:
        raise InputError(f"B has D = {b.x.shape[1]}, A has D = {a.x.shape[1]}", b.path)
    if len(a.x) != len(b.x) and min(len(a.x), len(b.x)) != 1:
        raise InputError(f"A has {len(a.x)} points and B {len(b.x)}: give equally many (paired) or one of them",
                         b.path)
    n = max(len(a.x), len(b.x))
    return np.broadcast_to(a.x, (n, a.x.shape[1])), np.broadcast_to(b.x, (n, b.x.shape[1]))


@torch.no_grad()
def interpolate(model: MetricModel, a: Points, b: Points, cfg: InterpolateConfig) -> Result:
    """On-manifold paths from each A to its B by intrinsic-gradient flow of f(y) = -|y - b|^2 / 2:
    y_{i+1} = y_i + Gamma(y_i)(b - y_i) / (lambda_1(y_i) (S - 1 - i)) for S points **[reconstructed]**
    step rule (Gamma / lambda_1 is about the tangent projector, so in flat space this is the straight
    line and the last step lands on b's tangential component). Also the linear interpolation."""
    cfg.check()
    model.check_points(a.x, a.path)
    model.check_points(b.x, b.path)
    h = model.resolve_h(cfg.h)
    A, B = _pair(a, b)
    ya, yb = torch.as_tensor(model.standardise(A)), torch.as_tensor(model.standardise(B))
    S = cfg.steps
    t0 = time.perf_counter()
    path = [ya]
    y = ya.clone()
    for i in range(S - 1):
        M = model.factor(y, h)
        g = (M.transpose(-1, -2) @ (M @ (yb - y)[:, :, None]))[:, :, 0]
        lam1 = torch.linalg.eigvalsh(M @ M.transpose(-1, -2))[:, -1].clamp_min(1e-12)
        y = y + g / lam1[:, None] / (S - 1 - i)
        path.append(y.clone())
    P = torch.stack(path, 1)                                                    # (n, S, D) standardised
    tgrid = torch.linspace(0, 1, S, dtype=torch.float64)[None, :, None]
    L = ya[:, None, :] * (1 - tgrid) + yb[:, None, :] * tgrid
    gap = torch.linalg.norm(P[:, -1] - yb, dim=-1) / torch.linalg.norm(ya - yb, dim=-1).clamp_min(1e-12)
    sec = time.perf_counter() - t0
    raw = model.unstandardise(P.numpy().reshape(-1, model.D)).reshape(P.shape)
    lin = model.unstandardise(L.numpy().reshape(-1, model.D)).reshape(L.shape)
    summary = {"n_paths": int(len(A)), "steps": S, "h": h, "D": model.D,
               "median_end_gap": float(gap.median()), "seconds": round(sec, 6),
               "image_shape": model.config.get("image_shape")}
    return Result({"path": raw, "linear": lin, "end_gap": gap.numpy()}, summary)


def path_png(paths: np.ndarray, image_shape, max_rows: int = 16) -> bytes:
    """A grid PNG of image paths (rows: paths, columns: steps), grey levels min-max scaled."""
    import io

    from PIL import Image

    n, S, D = paths.shape
    shape = tuple(image_shape)
    imgs = paths[:max_rows].reshape(min(n, max_rows), S, *shape)
    lo, hi = float(imgs.min()), float(imgs.max())
    imgs = (imgs - lo) / (hi - lo if hi > lo else 1.0)
    if len(shape) == 2:
        Hh, Ww = shape
        grid = imgs.transpose(0, 2, 1, 3).reshape(imgs.shape[0] * Hh, S * Ww)
        mode = "L"
    else:
        Hh, Ww, C = shape
        grid = imgs.transpose(0, 2, 1, 3, 4).reshape(imgs.shape[0] * Hh, S * Ww, C)
        mode = "RGB" if C == 3 else "L"
        if C not in (1, 3):
            raise UsageError(f"images with {C} channels cannot be written as PNG; use .npz")
        if C == 1:
            grid = grid[..., 0]
    buf = io.BytesIO()
    Image.fromarray(np.clip(grid * 255 + 0.5, 0, 255).astype(np.uint8), mode=mode).save(buf, format="PNG")
    return buf.getvalue()


def _truth(test: Points) -> tuple[np.ndarray | None, int | None, np.ndarray | None]:
    tangent, dims = truth_arrays(test.arrays, len(test.x), test.x.shape[1], test.path)
    if dims is None and tangent is not None:
        dims = np.full(len(test.x), tangent.shape[1], dtype=np.int64)
    if tangent is None and dims is None:
        raise InputError("a test set needs the array 'tangent' (n, d, D) and/or 'dim' (n,) (see `generate`)",
                         test.path)
    d = int(tangent.shape[1]) if tangent is not None else int(np.median(dims))
    return tangent, d, dims


def _scores(lam, V, tangent, d, dims, rule, thr) -> dict:
    ld = local_dimension(lam, rule, thr).numpy()
    out = {"dim_accuracy": float((ld == dims).mean()), "median_dim_error": float(np.median(np.abs(ld - dims))),
           "median_local_dim": float(np.median(ld))}
    out["projector_error"] = (float(projector_error(V[:, :d], torch.as_tensor(tangent)).mean())
                              if tangent is not None else None)
    return out


def evaluate(model: MetricModel, test: Points, cfg: EvalConfig, data: Points | None = None) -> Result:
    """Projector error (mean |P_est - P_true|_F with the top-d eigenvectors) and local-dimension accuracy
    on a test set with exact geometry, at ``cfg.h`` or the best h of the grid (chosen on this test set,
    reported); with ``data`` also the kNN-CDC baseline at its best (k, h) of the grids."""
    cfg.check()
    model.check_points(test.x, test.path)
    tangent, d, dims = _truth(test)
    lo, hi = model.h_range
    if cfg.h is not None:
        model.check_h(cfg.h)
        hs = [cfg.h]
    else:
        hs = [h for h in cfg.grid("h") if lo <= h <= hi]
        if not hs:
            raise UsageError(f"--h-grid has no value in the model's trained range [{lo:g}, {hi:g}]")
    y = torch.as_tensor(model.standardise(test.x))
    rows = []
    for h in hs:
        lam, V = eig_route(model.factor(y, h))
        rows.append({"method": "metric-match", "h": h, "k": None,
                     **_scores(lam, V, tangent, d, dims, cfg.dim_rule, cfg.dim_threshold)})
    key = "projector_error" if tangent is not None else "median_dim_error"
    best = min(rows, key=lambda r: (r[key], -r["dim_accuracy"]))
    knn_best = None
    if data is not None:
        if data.x.shape[1] != model.D:
            raise InputError(f"DATA has D = {data.x.shape[1]}, the model was trained on D = {model.D}", data.path)
        X = torch.as_tensor(model.standardise(data.x))
        for k in cfg.grid("k", int):
            for h in cfg.grid("h"):
                lam, V = knn_cdc(X, y, k, h)
                rows.append({"method": "knn", "h": h, "k": k,
                             **_scores(lam, V, tangent, d, dims, cfg.dim_rule, cfg.dim_threshold)})
        knn_rows = [r for r in rows if r["method"] == "knn"]
        knn_best = min(knn_rows, key=lambda r: (r[key], -r["dim_accuracy"]))
    summary = {"n": int(len(test.x)), "d": d, "projector_error": best["projector_error"],
               "knn_projector_error": knn_best["projector_error"] if knn_best else None,
               "dim_accuracy": best["dim_accuracy"], "knn_dim_accuracy": knn_best["dim_accuracy"] if knn_best else None,
               "median_dim_error": best["median_dim_error"], "h": best["h"],
               "knn_k": knn_best["k"] if knn_best else None, "knn_h": knn_best["h"] if knn_best else None}
    return Result({}, summary, rows)
