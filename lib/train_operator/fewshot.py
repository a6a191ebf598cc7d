"""Few-shot sine regression: the functional map as cross-attention vs softmax cross-attention.

Tasks y = A sin(x + phi), A ~ U[0.1, 5], phi ~ U[0, pi], x ~ U[-5, 5]; each task shows K context points
and asks for the values at query points. Both models share everything but the attention:

- 4-layer MLP encoders: queries q(x), keys k(x) of the context, values v(x, y) of the context;
- ``funcattn`` (the paper's few-shot FuncAttn): the context is sliced into ``bases`` soft bases with the
  softmax over the **points** (W = softmax_n(Lin(K) / tau), tau learned, init 0.5, clamped to [0.1, 5], Lin
  orthogonal), basis tokens T = diag(1 / sum_n W) W^T K and value coefficients V~ = W^T V; the
  functional map C = Q T^T ((1 - lambda) T T^T + lambda I_k)^-1 (lambda = 1e-4, a k x k fp32 solve) sends
  each query to the bases: out = C V~;
- ``ridge``: the same least-squares map taken over the context points directly, C = Q K^T (K K^T +
  lambda I)^-1, out = C V (Intention-style ridge attention; equal to ``funcattn`` when the bases span
  the context points);
- ``softmax``: out = softmax(Q K^T / sqrt(d)) V;
- a 2-layer decoder on [q, out].

[reconstructed] The task distribution (the usual MAML sine benchmark), the encoder widths, the value
encoder and the decoder (the official code feeds the raw y), the number of bases, the training schedule
are our choices; the paper's text says only "4-layer MLP encoders, ridge 1e-4, softmax over points".
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn

from icmlkit.lib.core.runtime import generator, seeded
from icmlkit.lib.train_operator.config import FewShotConfig


def sample_tasks(n_tasks: int, n_ctx: int, n_q: int, g: torch.Generator):
    A = 0.1 + 4.9 * torch.rand(n_tasks, 1, 1, generator=g)
    ph = np.pi * torch.rand(n_tasks, 1, 1, generator=g)
    x = -5 + 10 * torch.rand(n_tasks, n_ctx + n_q, 1, generator=g)
    y = A * torch.sin(x + ph)
    return x[:, :n_ctx], y[:, :n_ctx], x[:, n_ctx:], y[:, n_ctx:]


def _mlp(i, w, o, layers=4):
    mods, d = [], i
    for _ in range(layers - 1):
        mods += [nn.Linear(d, w), nn.GELU()]
        d = w
    mods.append(nn.Linear(d, o))
    return nn.Sequential(*mods)


ATTENTIONS = ("funcattn", "ridge", "softmax")


def point_bases(logits: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """W = softmax(logits / clamp(tau, 0.1, 5)) over the points (axis -2): (.., n, k), columns sum to 1."""
    return torch.softmax(logits / tau.clamp(0.1, 5.0), dim=-2)


def sliced_map(Q, K, V, W, ridge: float):
    """out = C V~ with T = diag(1 / sum_n W) W^T K, V~ = W^T V and C = Q T^T ((1 - l) T T^T + l I_k)^-1,
    solved in float32 (float64 stays float64) with autocast off."""
    work = torch.float64 if Q.dtype == torch.float64 else torch.float32
    with torch.autocast(device_type=Q.device.type, enabled=False):
        Qf, Kf, Vf, Wf = (t.to(work) for t in (Q, K, V, W))
        T = (Wf.transpose(-1, -2) @ Kf) / (Wf.sum(-2)[..., None] + 1e-5)
        Vt = Wf.transpose(-1, -2) @ Vf
        k = T.shape[-2]
        G = (1 - ridge) * (T @ T.transpose(-1, -2)) + ridge * torch.eye(k, dtype=work, device=T.device)
        C = torch.linalg.solve(G, T @ Qf.transpose(-1, -2)).transpose(-1, -2)  # Q T^T G^-1 (G symmetric)
        return (C @ Vt).to(Q.dtype)


class CrossAttentionRegressor(nn.Module):
    def __init__(self, width=64, attention="funcattn", ridge=1e-4, bases=16):
        super().__init__()
        self.attention, self.ridge = attention, ridge
        self.q = _mlp(1, width, width)
        self.k = _mlp(1, width, width)
        self.v = _mlp(2, width, width)
        self.dec = _mlp(2 * width, width, 1, layers=2)
        if attention == "funcattn":
            self.slice = nn.Linear(width, bases)
            nn.init.orthogonal_(self.slice.weight)
            self.tau = nn.Parameter(torch.tensor(0.5))

    def forward(self, xc, yc, xq):
        Q, K, V = self.q(xq), self.k(xc), self.v(torch.cat([xc, yc], -1))
        if self.attention == "softmax":
            out = torch.softmax(Q @ K.transpose(-1, -2) / K.shape[-1] ** 0.5, dim=-1) @ V
        elif self.attention == "funcattn":
            out = sliced_map(Q, K, V, point_bases(self.slice(K), self.tau), self.ridge)
        else:
            with torch.autocast(device_type=Q.device.type, enabled=False):
                Qf, Kf = Q.float(), K.float()
                G = Kf @ Kf.transpose(-1, -2) + self.ridge * torch.eye(K.shape[-2], device=K.device)
                C = torch.linalg.solve(G, Kf @ Qf.transpose(-1, -2)).transpose(-1, -2)  # Q K^T G^-1
                out = (C @ V.float()).to(Q.dtype)
        return self.dec(torch.cat([Q, out], -1))


@dataclass
class FewShotResult:
    summary: dict
    curves: dict


def few_shot(cfg: FewShotConfig, *, seed: int = 0, device="cpu") -> FewShotResult:
    """Meta-train the three regressors on the same task stream; report the query MSE on the same test tasks."""
    device = torch.device(device)
    test = [t.to(device) for t in sample_tasks(cfg.test_tasks, cfg.context, cfg.queries, generator(seed, "test-tasks"))]
    out, curves = {}, {}
    for name in ATTENTIONS:
        with seeded(seed, "init"):
            model = CrossAttentionRegressor(cfg.width, name, cfg.ridge, cfg.bases).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        g = generator(seed, "tasks")
        t0 = time.perf_counter()
        curve = []
        for step in range(cfg.steps):
            xc, yc, xq, yq = (t.to(device) for t in sample_tasks(cfg.tasks, cfg.context, cfg.queries, g))
            loss = ((model(xc, yc, xq) - yq) ** 2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if (step + 1) % max(1, cfg.steps // 20) == 0:
                curve.append(float(loss.detach()))
        with torch.no_grad():
            mse = float(((model(*test[:3]) - test[3]) ** 2).mean())
        out[name] = {"mse": mse, "seconds": time.perf_counter() - t0}
        curves[name] = curve
    ratio = out["funcattn"]["mse"] / out["softmax"]["mse"] if out["softmax"]["mse"] > 0 else None
    return FewShotResult({
        "context": cfg.context, "bases": cfg.bases, "mse_funcattn": out["funcattn"]["mse"],
        "mse_ridge": out["ridge"]["mse"], "mse_softmax": out["softmax"]["mse"],
        "ratio": ratio, "target_met": ratio is not None and ratio <= 0.1, "steps": cfg.steps,
        "seconds_funcattn": out["funcattn"]["seconds"], "seconds_ridge": out["ridge"]["seconds"],
        "seconds_softmax": out["softmax"]["seconds"]}, curves)
