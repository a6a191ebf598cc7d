"""A trained metric-matching model: the metric network, the optional denoiser, the standardisation,
the trained h range; saved as one deterministic .safetensors file (weights + JSON config metadata)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import torch

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.io import read_safetensors, safetensors_bytes, write_bytes
from icmlkit.lib.core.runtime import seeded
from icmlkit.lib.metric_match.core import Denoiser, MetricNet

FORMAT = "icmlkit.metric-match/1"


@dataclass
class MetricModel:
    """``net`` (M(y, h)), ``denoiser`` (or None), ``mean`` (D,) and ``scale`` of the standardisation
    y_std = (y - mean) / scale, and ``config`` (D, rank, arch, h_min, h_max, image_shape, ...)."""

    net: MetricNet
    config: dict
    mean: np.ndarray
    scale: float
    denoiser: Denoiser | None = None
    info: dict = field(default_factory=dict)

    @property
    def D(self) -> int:
        return int(self.config["D"])

    @property
    def rank(self) -> int:
        return int(self.config["rank"])

    @property
    def h_range(self) -> tuple[float, float]:
        return float(self.config["h_min"]), float(self.config["h_max"])

    @property
    def default_h(self) -> float | None:
        """The query h ``train`` chose on its validation split (None: a model trained without one)."""
        h = self.config.get("h_default")
        return None if h is None else float(h)

    def resolve_h(self, h: float | None, option: str = "--h") -> float:
        """``h`` when given (checked against the trained range), else the stored :attr:`default_h`."""
        if h is None:
            if self.default_h is None:
                raise UsageError(f"this model has no validated default h (trained with --val-points 0 or before "
                                 f"the option): pass {option}")
            h = self.default_h
        self.check_h(h, option)
        return float(h)

    def check_h(self, h: float, option: str = "--h") -> None:
        lo, hi = self.h_range
        if not (lo <= h <= hi):
            raise UsageError(f"{option} {h:g} is outside the model's trained range [{lo:g}, {hi:g}]")

    def check_points(self, x: np.ndarray, where: str) -> None:
        if x.ndim != 2 or x.shape[1] != self.D:
            raise InputError(f"points have D = {x.shape[-1] if x.ndim else 0}, the model was trained on D = "
                             f"{self.D}", where)

    def standardise(self, x: np.ndarray) -> np.ndarray:
        return (np.asarray(x, dtype=np.float64) - self.mean) / self.scale

    def unstandardise(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.float64) * self.scale + self.mean

    @torch.no_grad()
    def factor(self, y_std: torch.Tensor, h: float, batch: int = 4096) -> torch.Tensor:
        """M(y, h) (n, r, D) for standardised points (float32 network, float64 out)."""
        self.net.eval()
        p = next(self.net.parameters())
        out = []
        for i in range(0, len(y_std), batch):
            yb = y_std[i:i + batch].to(p.device, p.dtype)
            hb = torch.full((len(yb),), float(h), dtype=p.dtype, device=p.device)
            out.append(self.net(yb, hb).double().cpu())
        if not out:
            return torch.zeros((0, self.rank, self.D), dtype=torch.float64)
        return torch.cat(out)

    def to(self, device) -> "MetricModel":
        self.net.to(device)
        if self.denoiser is not None:
            self.denoiser.to(device)
        return self


def build_nets(config: dict, seed: int, dtype=torch.float32):
    """The metric network (and the denoiser when ``config["centred"]``), built under the named
    stream ``seeded(seed, "init")`` / ``"init-denoiser"``."""
    arch = config["arch"]
    # files written before the bound have no h_freq_max: None rebuilds their unbounded embedding
    extra = {"kind": arch.get("kind", "mlp"), "image_shape": config.get("image_shape"),
             "channels": int(arch.get("channels", 32)), "h_freq_max": arch.get("h_freq_max")}
    with seeded(seed, "init"):
        net = MetricNet(config["D"], config["rank"], arch["width"], arch["blocks"], arch["emb"], **extra).to(dtype)
    den = None
    if config.get("centred"):
        with seeded(seed, "init-denoiser"):
            den = Denoiser(config["D"], arch["width"], arch["blocks"], arch["emb"], **extra).to(dtype)
    return net, den


def model_bytes(model: MetricModel) -> bytes:
    tensors = {f"net.{k}": v.detach().float().cpu() for k, v in model.net.state_dict().items()}
    if model.denoiser is not None:
        tensors.update({f"denoiser.{k}": v.detach().float().cpu() for k, v in model.denoiser.state_dict().items()})
    tensors["mean"] = np.asarray(model.mean, dtype=np.float64)
    meta = {"format": FORMAT, "config": json.dumps(model.config, sort_keys=True),
            "scale": repr(float(model.scale)), "info": json.dumps(model.info, sort_keys=True)}
    return safetensors_bytes(tensors, meta)


def save_model(path, model: MetricModel) -> None:
    write_bytes(path, model_bytes(model))


def load_model(path, device="cpu") -> MetricModel:
    """A model written by :func:`save_model`; any defect is an InputError naming the file."""
    tensors, meta = read_safetensors(path, fmt=FORMAT, what="metric-match model")
    try:
        config = json.loads(meta["config"])
        scale = float(meta["scale"])
        info = json.loads(meta.get("info", "{}"))
        mean = np.asarray(tensors["mean"], dtype=np.float64)
        net, den = build_nets(config, 0)
        net.load_state_dict({k[4:]: torch.from_numpy(v) for k, v in tensors.items() if k.startswith("net.")})
        if den is not None:
            den.load_state_dict({k[9:]: torch.from_numpy(v) for k, v in tensors.items() if k.startswith("denoiser.")})
        if mean.shape != (int(config["D"]),) or not np.isfinite(scale) or scale <= 0:
            raise ValueError("inconsistent standardisation")
    except (KeyError, ValueError, TypeError, RuntimeError, json.JSONDecodeError, UsageError) as exc:
        raise InputError(f"not a metric-match model ({str(exc).splitlines()[0][:200]})", str(path)) from None
    m = MetricModel(net.eval(), config, mean, scale, den.eval() if den is not None else None, info)
    return m.to(device)
