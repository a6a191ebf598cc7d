"""Training, evaluation, prediction and super-resolution of the operator models (one function per
subcommand; each takes config dataclasses and loaded :class:`~icmlkit.lib.train_operator.data.FieldSet` s and
returns a result with ``.summary``).

Training (method sheet step 9): global scalar mean/std normalisers of x and y (``UnitTransformer``,
over samples, points and channels), relative-L2 loss on the decoded output, AdamW, OneCycleLR (one
step per batch), gradient-norm clip 0.1. Under torchrun each process takes its contiguous part of every
global batch and the gradients are averaged over the processes before the clip. ``--recipe paper`` is
the official Darcy script's recipe instead: trunc_normal(0.02) initialisation of every Linear and the
loss rel-L2 + 0.1 x rel-L2 of the central-difference gradients, summed over the batch
(:func:`paper_init`, :func:`gradient_rel_l2`). ``--recipe h1`` keeps PyTorch's initialisation and takes the
batch mean of the same rel-L2 + 0.1 x gradient term: the loss of the official Burgers-Super-Res run (the
Galerkin Transformer's H1 regulariser, gamma 0.1), whose own initialisation is not the Darcy one.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from icmlkit.lib.core import console
from icmlkit.lib.core.checkpoint import fingerprint, restore
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.runtime import Dist, generator, seeded
from icmlkit.lib.train_operator.config import ModelConfig, TrainConfig
from icmlkit.lib.train_operator.data import FieldSet
from icmlkit.lib.train_operator.modelio import read_model_file, write_model
from icmlkit.lib.train_operator.nets import build_net, count_params, matched_fno_width

log = console.log


def _info(msg: str) -> None:
    log.debug(msg)


@dataclass
class Normaliser:
    """Global scalar mean/std of the inputs and of the outputs."""

    x_mean: float
    x_std: float
    y_mean: float
    y_std: float

    @classmethod
    def fit(cls, data: FieldSet) -> "Normaliser":
        x, y = data.x.astype(np.float64), data.y.astype(np.float64)
        return cls(float(x.mean()), float(x.std()) + 1e-8, float(y.mean()), float(y.std()) + 1e-8)


class OperatorModel:
    """A network with its normalisers and its training box (for position features)."""

    def __init__(self, cfg: dict, cin: int, cout: int, dim: int, norm: Normaliser, lo, hi, train_res: str = ""):
        self.cfg, self.cin, self.cout, self.dim = dict(cfg), cin, cout, dim
        self.norm, self.train_res = norm, train_res
        self.lo = torch.as_tensor(np.asarray(lo, dtype=np.float32))
        self.hi = torch.as_tensor(np.asarray(hi, dtype=np.float32))
        self.net = build_net(self.cfg, cin, cout, dim)

    @property
    def params(self) -> int:
        return count_params(self.net)

    def to(self, device):
        self.net.to(device)
        self.lo, self.hi = self.lo.to(device), self.hi.to(device)
        return self

    def check_fits(self, data: FieldSet) -> None:
        if data.x.shape[2] != self.cin:
            raise InputError(f"x has {data.x.shape[2]} channels; the model was trained on {self.cin}", data.path)
        if data.dim != self.dim:
            raise InputError(f"the points are {data.dim}-D; the model was trained on {self.dim}-D points", data.path)
        if self.cfg["model"] in ("fno", "funcattn-conv") and (data.grid is None or len(data.grid) != self.dim):
            raise InputError(f"--model {self.cfg['model']} needs a regular grid; this file holds a point set", data.path)
        if self.cfg["model"] == "funcattn-conv" and self.dim != 2:
            raise InputError("--model funcattn-conv needs a 2-D grid", data.path)
        if data.y is not None and data.y.shape[2] != self.cout:
            raise InputError(f"y has {data.y.shape[2]} channels; the model predicts {self.cout}", data.path)
        check_quadrature(self.cfg.get("quadrature", "uniform"), data)

    def forward_normalised(self, xb: torch.Tensor, coords: torch.Tensor, grid) -> torch.Tensor:
        """Decoded prediction of a batch of raw inputs (B, n, cin)."""
        n = self.norm
        xin = (xb - n.x_mean) / n.x_std
        out = self.net(xin, coords, self.lo, self.hi, grid)
        return out * n.y_std + n.y_mean

    @torch.no_grad()
    def predict(self, data: FieldSet, device, batch: int = 16) -> np.ndarray:
        self.check_fits(data)
        self.net.eval()
        coords = torch.as_tensor(data.coords, device=device)
        outs = []
        for i in range(0, data.n_samples, batch):
            xb = torch.as_tensor(data.x[i:i + batch], device=device)
            outs.append(self.forward_normalised(xb, coords, data.grid).float().cpu().numpy())
        return np.concatenate(outs, 0)

    # files ---------------------------------------------------------------------------------------
    def tensors(self) -> dict:
        return {k: v.detach().cpu() for k, v in self.net.state_dict().items()}

    def meta(self) -> dict:
        return {"cin": self.cin, "cout": self.cout, "dim": self.dim, "normaliser": asdict(self.norm),
                "lo": self.lo.cpu().tolist(), "hi": self.hi.cpu().tolist(), "train_resolution": self.train_res,
                "params": self.params}

    def save(self, path) -> None:
        write_model(path, self.tensors(), self.cfg, self.meta())


def load_model(path) -> OperatorModel:
    """A model file written by ``train`` (an InputError naming the file when it is not one)."""
    tensors, cfg, meta = read_model_file(path)
    try:
        m = OperatorModel(cfg, int(meta["cin"]), int(meta["cout"]), int(meta["dim"]), Normaliser(**meta["normaliser"]),
                          meta["lo"], meta["hi"], meta.get("train_resolution", ""))
        m.net.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in tensors.items()}, strict=True)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise InputError(f"the weights do not fit the model config ({first})", str(path)) from None
    return m


def rel_l2(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-sample relative L2 error ||pred - y|| / ||y|| over points and channels: (B,)."""
    B = pred.shape[0]
    num = (pred - target).reshape(B, -1).norm(dim=1)
    den = target.reshape(B, -1).norm(dim=1).clamp_min(1e-12)
    return num / den


def paper_init(net: torch.nn.Module) -> None:
    """The official model's initialisation (``--recipe paper``): every Linear's weight trunc_normal(std
    0.02) (truncated at +-2, as timm's), its bias 0; LayerNorms weight 1, bias 0. Convolutions, the
    temperatures and the alpha parameters keep their own initial values."""
    for m in net.modules():
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
        elif isinstance(m, torch.nn.LayerNorm):
            torch.nn.init.ones_(m.weight)
            torch.nn.init.zeros_(m.bias)


def central_differences(u: torch.Tensor, grid: tuple, convention: str) -> list[torch.Tensor]:
    """Per grid axis, (u[i+1] - u[i-1]) s / 2 of (B, n, c) values on a row-major grid: zero ghost points
    beyond both ends (a Dirichlet boundary, as the official Darcy script pads), or wrapped around on a
    periodic grid. Each (B, *grid, c)."""
    B, _, c = u.shape
    g = u.reshape(B, *grid, c)
    out = []
    for ax, s in enumerate(grid, start=1):
        if convention == "periodic":
            d = torch.roll(g, -1, ax) - torch.roll(g, 1, ax)
        else:
            z = torch.zeros_like(g.narrow(ax, 0, 1))
            gp = torch.cat([z, g, z], dim=ax)
            d = gp.narrow(ax, 2, s) - gp.narrow(ax, 0, s)
        out.append(d * (s / 2.0))
    return out


def boundary_zeroed(u: torch.Tensor, grid: tuple, convention: str) -> torch.Tensor:
    """(B, n, c) values with the grid's boundary points set to 0 (the official script zeroes the
    prediction's outer ring before differentiating): both ends of every axis on a node grid, the first
    (x = 0) on a cell grid, none on a periodic one."""
    if convention == "periodic":
        return u
    mask = torch.ones(grid, dtype=u.dtype, device=u.device)
    for ax, s in enumerate(grid):
        ends = (0, s - 1) if convention == "node" else (0,)
        for i in ends:
            idx = [slice(None)] * len(grid)
            idx[ax] = i
            mask[tuple(idx)] = 0
    return u * mask.reshape(1, -1, 1)


def gradient_rel_l2(pred: torch.Tensor, target: torch.Tensor, grid: tuple, convention: str) -> torch.Tensor:
    """(B,) sum over the grid axes of the relative L2 error of the central-difference gradient, the
    prediction's boundary zeroed first (the official Darcy script's derivative term, ``--recipe paper``)."""
    gp = central_differences(boundary_zeroed(pred, grid, convention), grid, convention)
    gt = central_differences(target, grid, convention)
    return sum(rel_l2(a, b) for a, b in zip(gp, gt))


def objective(err: torch.Tensor, pred: torch.Tensor, target: torch.Tensor, data: FieldSet, recipe: str,
              world: int = 1) -> torch.Tensor:
    """The training loss of a batch from its per-sample relative L2 ``err``: ``ours`` their mean;
    ``paper`` the official sum over the batch of rel-L2 + 0.1 x :func:`gradient_rel_l2` (times the process
    count under torchrun, whose averaged gradients then equal one process's sum over the global batch);
    ``h1`` the batch mean of the same rel-L2 + 0.1 x gradient term."""
    if recipe == "h1":
        return (err + 0.1 * gradient_rel_l2(pred, target, data.grid, data.convention)).mean()
    if recipe != "paper":
        return err.mean()
    return (err + 0.1 * gradient_rel_l2(pred, target, data.grid, data.convention)).sum() * world


# --------------------------------------------------------------------------- train


@dataclass
class TrainResult:
    model: OperatorModel
    rows: list
    summary: dict


def check_quadrature(quadrature: str, data: FieldSet) -> None:
    """``trapezoid`` is the rule of a node grid (boundaries included); on a cell or periodic grid (i/n
    points: the last point is not a boundary) the uniform sum is the right one: refused there."""
    if quadrature == "trapezoid" and data.grid is not None and data.convention != "node":
        raise UsageError(f"--quadrature trapezoid is the rule of node grids (boundaries included); "
                         f"{data.path or 'the data'} is a {data.convention or 'grid of unknown convention'} grid "
                         f"{data.resolution}, where the uniform sum is right (use --quadrature uniform, or --grid "
                         f"node if its points do include both boundaries)")


def _check_data(mcfg: ModelConfig, data: FieldSet, what: str, recipe: str = "ours") -> None:
    if data.y is None:
        raise InputError("missing key 'y' (training needs outputs)", data.path)
    check_quadrature(mcfg.quadrature, data)
    if recipe in ("paper", "h1") and (data.grid is None or data.convention is None):
        raise UsageError(f"--recipe {recipe} needs a grid of known convention (its loss takes central differences); "
                         f"{data.path or 'the data'} holds {'a point set' if data.grid is None else 'a grid whose coords match no convention'}")
    if mcfg.model in ("fno", "funcattn-conv") and data.grid is None:
        raise InputError(f"--model {mcfg.model} needs a regular grid; this file holds a point set", data.path)
    if mcfg.model == "funcattn-conv" and len(data.grid) != 2:
        raise InputError("--model funcattn-conv needs a 2-D grid", data.path)
    if mcfg.model == "fno" and data.grid is not None and min(data.grid) // 2 < 1:
        raise InputError("the grid is too small for FNO", data.path)



def evaluate_model(model: OperatorModel, data: FieldSet, device, batch: int = 16) -> np.ndarray:
    """Per-sample relative L2 errors of ``model`` on ``data`` (decoded outputs)."""
    pred = torch.as_tensor(model.predict(data, device, batch))
    return rel_l2(pred, torch.as_tensor(data.y)).numpy()


def train(mcfg: ModelConfig, tcfg: TrainConfig, data: FieldSet, val: FieldSet | None = None, *, seed: int = 0,
          device="cpu", dist: Dist | None = None, checkpointer=None) -> TrainResult:
    """Train ``mcfg``'s network on ``data`` (``val``: a validation set, else the last ``val_fraction``)."""
    dist = dist if dist is not None else Dist()
    device = torch.device(device)
    set_threads(device, tcfg.threads)
    _check_data(mcfg, data, "DATA", tcfg.recipe)
    if tcfg.ntrain is not None:
        data = data.head(tcfg.ntrain)
    if val is None and tcfg.val_fraction > 0:
        nval = max(1, int(round(data.n_samples * tcfg.val_fraction)))
        if nval >= data.n_samples:
            raise InputError(f"{data.n_samples} samples cannot be split into training and validation", data.path)
        data, val = data.head(data.n_samples - nval), data.tail(data.n_samples - nval)
    if val is not None:
        _check_data(mcfg, val, "--val", tcfg.recipe)
    if data.n_samples < tcfg.batch:
        raise UsageError(f"--batch {tcfg.batch} is larger than the {data.n_samples} training samples")
    if tcfg.batch % dist.world:
        raise UsageError(f"--batch {tcfg.batch} does not split evenly over {dist.world} processes")
    cfg = mcfg.to_dict()
    cin, cout, dim = data.x.shape[2], data.y.shape[2], data.dim
    if cfg["model"] == "fno" and cfg.get("fno_width") is None:
        cfg["fno_width"] = matched_fno_width(cfg, cin, cout, dim)
    norm = Normaliser.fit(data)
    lo, hi = data.box()
    with seeded(seed, "init"):
        model = OperatorModel(cfg, cin, cout, dim, norm, lo, hi, data.resolution).to(device)
        if tcfg.recipe == "paper":
            paper_init(model.net)
    net = model.net
    params = [p for p in net.parameters()]
    steps = data.n_samples // tcfg.batch
    opt = torch.optim.AdamW(params, lr=tcfg.lr, weight_decay=tcfg.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=tcfg.lr, epochs=tcfg.epochs, steps_per_epoch=steps)
    g = generator(seed, "batches")
    fp = fingerprint({"model": ModelConfig.fingerprint_dict(cfg), "train": tcfg.fingerprint_dict(), "world": dist.world,
                      "seed": seed},
                     data.x, data.y, data.coords, None if val is None else val.x)
    start, rows, seconds = 0, [], []
    state = checkpointer.load(fp) if checkpointer is not None else None
    if state is not None:
        start, extra = restore(state, model=net, optimizer=opt, scheduler=sched, rng={"batches": g})
        rows = list(extra.get("rows", []))
    X = torch.as_tensor(data.x, device=device)
    Y = torch.as_tensor(data.y, device=device)
    coords = torch.as_tensor(data.coords, device=device)
    part = dist.split(tcfg.batch)
    for epoch in range(start, tcfg.epochs):
        t0 = time.perf_counter()
        net.train()
        perm = torch.randperm(data.n_samples, generator=g)
        total = 0.0
        for b in range(steps):
            idx = perm[b * tcfg.batch:(b + 1) * tcfg.batch][part].to(device)
            pred = model.forward_normalised(X[idx], coords, data.grid)
            err = rel_l2(pred, Y[idx])
            loss = objective(err, pred, Y[idx], data, tcfg.recipe, dist.world)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if dist.active:
                dist.average_gradients(params)
            torch.nn.utils.clip_grad_norm_(params, tcfg.clip)
            opt.step()
            sched.step()
            total += float(err.detach().mean())
        train_err = dist.all_mean(total / steps)
        val_err = float(evaluate_model(model, val, device).mean()) if val is not None else None
        seconds.append(time.perf_counter() - t0)
        rows.append({"epoch": epoch + 1, "train_rel_l2": train_err, "val_rel_l2": val_err,
                     "lr": float(sched.get_last_lr()[0])})
        _info(f"epoch {epoch + 1}/{tcfg.epochs}: train {train_err:.4f}"
              + (f" val {val_err:.4f}" if val_err is not None else ""))
        if checkpointer is not None and checkpointer.due(epoch + 1, tcfg.epochs):
            checkpointer.save(epoch + 1, fp, model=net, optimizer=opt, scheduler=sched, rng={"batches": g},
                              extra={"rows": rows})
    vals = [r["val_rel_l2"] for r in rows if r["val_rel_l2"] is not None]
    summary = {
        "model": cfg["model"], "epochs": tcfg.epochs, "params": model.params,
        "best_val_rel_l2": min(vals) if vals else None, "final_val_rel_l2": vals[-1] if vals else None,
        "final_train_rel_l2": rows[-1]["train_rel_l2"] if rows else None,
        "seconds_per_epoch": float(np.mean(seconds)) if seconds else None,
        "n_train": data.n_samples, "n_val": None if val is None else val.n_samples,
        "resolution": data.resolution, "resumed_from": start if state is not None else None,
        "world_size": dist.world,
    }
    if cfg["model"] == "fno":
        summary["fno_width"] = cfg["fno_width"]
    net.eval()
    return TrainResult(model.to("cpu"), rows, summary)


# --------------------------------------------------------------------------- eval / predict / superres


@dataclass
class EvalResult:
    errors: np.ndarray
    summary: dict


def set_threads(device, threads: int = 1) -> None:
    """torch CPU threads for the small batched solves (one thread is many times faster than two on a
    loaded machine: the per-matrix LAPACK calls are too small to share)."""
    if torch.device(device).type == "cpu":
        torch.set_num_threads(max(1, int(threads)))


def evaluate(model: OperatorModel, data: FieldSet, *, device="cpu", batch: int = 16, threads: int = 1) -> EvalResult:
    """Relative L2 x 100 (per sample, averaged; on decoded outputs) at ``data``'s resolution."""
    set_threads(device, threads)
    if data.y is None:
        raise InputError("missing key 'y' (eval needs outputs)", data.path)
    model.check_fits(data)
    model.to(device)
    t0 = time.perf_counter()
    err = evaluate_model(model, data, torch.device(device), batch)
    return EvalResult(err, {
        "model": model.cfg["model"], "resolution": data.resolution, "n": data.n_samples,
        "rel_l2_x100": float(100 * err.mean()), "rel_l2_std": float(100 * err.std()),
        "params": model.params, "seconds": time.perf_counter() - t0,
        "train_resolution": model.train_res})


@dataclass
class PredictResult:
    y: np.ndarray  # in the input file's layout
    coords: np.ndarray
    summary: dict


def predict(model: OperatorModel, data: FieldSet, *, device="cpu", batch: int = 16, threads: int = 1) -> PredictResult:
    set_threads(device, threads)
    model.to(device)
    t0 = time.perf_counter()
    pred = model.predict(data, torch.device(device), batch)
    return PredictResult(data.to_layout(pred), data.coords, {
        "n": data.n_samples, "resolution": data.resolution, "points": data.n_points, "channels": int(pred.shape[2]),
        "seconds": time.perf_counter() - t0})


@dataclass
class SuperResResult:
    rows: list
    examples: list = field(default_factory=list)  # (resolution, x, y, pred) of sample 0 on grids
    summary: dict = field(default_factory=dict)


def nested_grid(coarse: FieldSet, fine: FieldSet) -> bool:
    """True when ``fine`` holds the samples of ``coarse`` (the same outputs at the shared points) on a grid
    whose every s-th point (per axis) is a point of ``coarse``: the case where ``fine`` can also be predicted
    by interpolating ``coarse``'s prediction. Two grids qualify: 2-D node grids over the same box ((F - 1) a
    multiple of (C - 1) per axis; bilinear, :func:`upsample_grid`) and periodic grids of any dimension (F a
    multiple of C per axis; trigonometric, :func:`upsample_periodic`)."""
    if coarse.grid is None or fine.grid is None or len(coarse.grid) != len(fine.grid):
        return False
    if coarse.y is None or fine.y is None or coarse.n_samples != fine.n_samples or coarse.y.shape[2] != fine.y.shape[2]:
        return False
    if coarse.convention == fine.convention == "periodic":
        if any(c < 1 or f % c for c, f in zip(coarse.grid, fine.grid)):
            return False
        steps = [f // c for c, f in zip(coarse.grid, fine.grid)]
    else:
        if len(coarse.grid) != 2 or coarse.convention != "node" or fine.convention != "node":
            return False
        if any(c < 2 or (f - 1) % (c - 1) for c, f in zip(coarse.grid, fine.grid)):
            return False
        if not (np.allclose(coarse.coords.min(0), fine.coords.min(0)) and np.allclose(coarse.coords.max(0),
                                                                                      fine.coords.max(0))):
            return False
        steps = [(f - 1) // (c - 1) for c, f in zip(coarse.grid, fine.grid)]
    N, c = coarse.n_samples, coarse.y.shape[2]
    shared = fine.y.reshape(N, *fine.grid, c)[(slice(None), *[slice(None, None, st) for st in steps])]
    return bool(np.allclose(shared, coarse.y.reshape(N, *coarse.grid, c), rtol=1e-5, atol=1e-6))


def upsample_periodic(values: np.ndarray, grid: tuple, new_grid: tuple, mode: str = "fourier") -> np.ndarray:
    """(N, prod(grid), c) values on a periodic grid (points i / s per axis) interpolated onto ``new_grid`` (each
    size a multiple of the old one), axis by axis: ``fourier``, the trigonometric interpolant (the spectrum
    zero-padded, the Nyquist coefficient of an even size split between +-s/2: exact for a field band-limited
    below s/2), or ``linear``, piecewise linear with wrap-around. Returns (N, prod(new_grid), c)."""
    if mode not in ("fourier", "linear"):
        raise UsageError(f"interpolation mode {mode!r} is not one of fourier, linear")
    N, _, c = values.shape
    v = np.asarray(values, dtype=np.float64).reshape(N, *grid, c)
    for ax, (s, S) in enumerate(zip(grid, new_grid), start=1):
        if S == s:
            continue
        if S % s:
            raise UsageError(f"the new size {S} is not a multiple of {s}")
        if mode == "fourier":
            f = np.fft.rfft(v, axis=ax)
            if s % 2 == 0:
                idx = [slice(None)] * f.ndim
                idx[ax] = -1
                f[tuple(idx)] *= 0.5
            pad = [(0, 0)] * f.ndim
            pad[ax] = (0, S // 2 + 1 - f.shape[ax])
            v = np.fft.irfft(np.pad(f, pad), n=S, axis=ax) * (S / s)
        else:
            t = np.arange(S) * (s / S)
            i0 = np.floor(t).astype(int)
            w = (t - i0).reshape([-1 if a == ax else 1 for a in range(v.ndim)])
            v = np.take(v, i0 % s, axis=ax) * (1 - w) + np.take(v, (i0 + 1) % s, axis=ax) * w
    return v.reshape(N, -1, c).astype(values.dtype)


def interpolate_prediction(values: np.ndarray, coarse: FieldSet, fine: FieldSet, mode: str | None = None) -> np.ndarray:
    """A prediction on ``coarse``'s grid carried onto ``fine``'s nested grid (:func:`nested_grid`): bilinear on a
    node grid, ``mode`` (default ``fourier``) on a periodic one."""
    if coarse.convention == "periodic":
        return upsample_periodic(values, coarse.grid, fine.grid, mode or "fourier")
    return upsample_grid(values, coarse.grid, fine.grid)


def upsample_grid(values: np.ndarray, grid: tuple, new_grid: tuple) -> np.ndarray:
    """(N, H*W, c) values on ``grid`` bilinearly interpolated onto ``new_grid`` (both spanning the same box,
    end nodes included): (N, H'*W', c)."""
    N, _, c = values.shape
    t = torch.from_numpy(np.ascontiguousarray(values.reshape(N, *grid, c).transpose(0, 3, 1, 2)))
    up = torch.nn.functional.interpolate(t, size=tuple(new_grid), mode="bilinear", align_corners=True)
    return up.permute(0, 2, 3, 1).reshape(N, -1, c).numpy()


def superres(model: OperatorModel, sets: list[FieldSet], *, device="cpu", batch: int = 16,
             threads: int = 1) -> SuperResResult:
    """One model evaluated at several resolutions (no retraining): a row per data set, the ratio of
    each error to the first set's, and sample 0 of each grid set for the figure.

    The baseline a user would try first rides along: where a set's grid nests the first set's and holds
    the same samples (:func:`nested_grid`), ``interp_rel_l2_x100`` is the error of the first set's
    prediction interpolated onto that grid (bilinear on node grids, trigonometric on periodic ones:
    :func:`interpolate_prediction`; else None)."""
    rows, examples = [], []
    first = sets[0]
    coarse = None
    for data in sets:
        res = evaluate(model, data, device=device, batch=batch, threads=threads)
        interp = None
        if data is not first and nested_grid(first, data):
            if coarse is None:
                coarse = model.predict(first, torch.device(device), batch)
            up = torch.from_numpy(interpolate_prediction(coarse, first, data))
            interp = float(100 * rel_l2(up, torch.from_numpy(data.y)).mean())
        rows.append({"data": data.path, **{k: res.summary[k] for k in ("resolution", "n", "rel_l2_x100",
                                                                          "rel_l2_std", "seconds")},
                     "points": data.n_points, "interp_rel_l2_x100": interp})
        if data.grid is not None and len(data.grid) == 2:
            pred = model.predict(data.head(1), torch.device(device))
            examples.append((data.resolution, data.x[0, :, 0].reshape(data.grid), data.y[0, :, 0].reshape(data.grid),
                             pred[0, :, 0].reshape(data.grid)))
    base = rows[0]["rel_l2_x100"]
    for r in rows:
        r["ratio_to_first"] = r["rel_l2_x100"] / base if base > 0 else None
    return SuperResResult(rows, examples, {
        "model": model.cfg["model"], "train_resolution": model.train_res, "params": model.params,
        "resolutions": [r["resolution"] for r in rows], "rel_l2_x100": [r["rel_l2_x100"] for r in rows],
        "interp_rel_l2_x100": [r["interp_rel_l2_x100"] for r in rows],
        "max_ratio_to_first": max(r["ratio_to_first"] or 0 for r in rows)})


def plot_superres(path, res: SuperResResult) -> None:
    """The figure of ``superres``: error vs points, and sample 0 (input, truth, prediction, error) per grid."""
    from icmlkit.lib.core.plot import pyplot, save_png

    plt = pyplot()
    ex = res.examples
    rows = 1 + len(ex)
    fig, axes = plt.subplots(rows, 4, figsize=(12, 3 * rows), squeeze=False)
    ax = axes[0, 0]
    ax.plot([r["points"] for r in res.rows], [r["rel_l2_x100"] for r in res.rows], "o-", label="zero-shot")
    interp = [(r["points"], r["interp_rel_l2_x100"]) for r in res.rows[1:] if r["interp_rel_l2_x100"] is not None]
    if interp:
        ax.plot([res.rows[0]["points"]] + [p for p, _ in interp],
                [res.rows[0]["rel_l2_x100"]] + [e for _, e in interp], "s--",
                label=f"{res.rows[0]['resolution']} prediction, interpolated")
        ax.legend(fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("points")
    ax.set_ylabel("relative L2 x 100")
    ax.set_title(f"{res.summary['model']} trained at {res.summary['train_resolution']}")
    for a in axes[0, 1:]:
        a.axis("off")
    for i, (resolution, x, y, p) in enumerate(ex, start=1):
        for j, (img, title) in enumerate([(x, "input"), (y, "truth"), (p, "prediction"), (p - y, "error")]):
            a = axes[i, j]
            im = a.imshow(img, origin="lower")
            a.set_title(f"{title} {resolution}")
            a.set_xticks([])
            a.set_yticks([])
            fig.colorbar(im, ax=a, fraction=0.046)
    fig.tight_layout()
    save_png(fig, path)
