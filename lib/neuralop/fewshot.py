"""Few-shot sine regression: the functional map as cross-attention vs softmax cross-attention.

Tasks y = A sin(x + phi), A ~ U[0.1, 5], phi ~ U[0, pi], x ~ U[-5, 5]; each task shows K context points
and asks for the values at query points. Both models share everything but the attention:

- 4-layer MLP encoders: queries q(x), keys k(x) of the context, values v(x, y) of the context;
- FuncAttn: out = C V with the ridge map C = Q K^T (K K^T + lambda I)^-1 (lambda = 1e-4), the least-squares
  map of the method sheet's step 5 taken over the context points (Intention-style ridge attention);
  softmax: out = softmax(Q K^T / sqrt(d)) V;
- a 2-layer decoder on [q, out].

[reconstructed] The task distribution (the usual MAML sine benchmark), the encoder widths, the decoder,
the training schedule and the use of the primal K x K form (the same map as the dual form, cheaper for
K < d) are our choices; the paper's text says only "4-layer MLP encoders, ridge 1e-4".
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn

from icmlkit.lib.core.runtime import generator, seeded
from icmlkit.lib.neuralop.config import FewShotConfig


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


class CrossAttentionRegressor(nn.Module):
    def __init__(self, width=64, attention="funcattn", ridge=1e-4):
        super().__init__()
        self.attention, self.ridge = attention, ridge
        self.q = _mlp(1, width, width)
        self.k = _mlp(1, width, width)
        self.v = _mlp(2, width, width)
        self.dec = _mlp(2 * width, width, 1, layers=2)

    def forward(self, xc, yc, xq):
        Q, K, V = self.q(xq), self.k(xc), self.v(torch.cat([xc, yc], -1))
        if self.attention == "softmax":
            out = torch.softmax(Q @ K.transpose(-1, -2) / K.shape[-1] ** 0.5, dim=-1) @ V
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
    """Meta-train both regressors on the same task stream; report the query MSE on the same test tasks."""
    device = torch.device(device)
    test = [t.to(device) for t in sample_tasks(cfg.test_tasks, cfg.context, cfg.queries, generator(seed, "test-tasks"))]
    out, curves = {}, {}
    for name in ("funcattn", "softmax"):
        with seeded(seed, "init"):
            model = CrossAttentionRegressor(cfg.width, name, cfg.ridge).to(device)
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
        "context": cfg.context, "mse_funcattn": out["funcattn"]["mse"], "mse_softmax": out["softmax"]["mse"],
        "ratio": ratio, "target_met": ratio is not None and ratio <= 0.1, "steps": cfg.steps,
        "seconds_funcattn": out["funcattn"]["seconds"], "seconds_softmax": out["softmax"]["seconds"]}, curves)
