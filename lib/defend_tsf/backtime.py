"""BackTime's trigger generator (Lin et al., NeurIPS 2024), a compact version trained bi-level against a
surrogate forecaster.

The generator is a two-layer graph convolution over the channels: each channel's history before the
attack time (the L - trigger_len rows of the look-back before the trigger, z-scored) is embedded, mixed
over a channel graph (symmetric-normalised |correlation| of the clean training data, top-k neighbours
and self loops), and mapped to a trigger of trigger_len steps per attacked channel, bounded by
budget * tanh(.). Bi-level loop, ``rounds`` times: (1) inject the current triggers, (2) train the
surrogate a few epochs on the poisoned training windows, (3) update the generator so that the frozen
surrogate forecasts the attacker's target pattern from triggered inputs (SmoothL1 on the attacked
channels and pattern steps) + lambda_norm * mean |trigger|.

[reconstructed]: the graph construction, the layer sizes (d = 32, two GCN layers), the surrogate
(DLinear), rounds = 3, generator steps = 50 per round, Adam 1e-3 for the generator; BackTime's own
generator and schedule are not reproduced line by line.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from icmlkit.lib.core.runtime import generator, seeded
from icmlkit.lib.defend_tsf import timeguard as tg
from icmlkit.lib.defend_tsf.config import ModelConfig
from icmlkit.lib.defend_tsf.models import build_model


def channel_graph(values_norm: np.ndarray, k: int = 3) -> torch.Tensor:
    """Symmetric-normalised adjacency of the top-k |correlation| neighbours of each channel (+ self loops)."""
    C = values_norm.shape[1]
    if C == 1:
        return torch.ones(1, 1)
    corr = np.nan_to_num(np.abs(np.corrcoef(values_norm.T)))
    np.fill_diagonal(corr, 0)
    A = np.zeros_like(corr)
    kk = min(k, C - 1)
    for c in range(C):
        nb = np.argsort(-corr[c], kind="stable")[:kk]
        A[c, nb] = corr[c, nb]
    A = np.maximum(A, A.T) + np.eye(C)
    d = 1 / np.sqrt(A.sum(1))
    return torch.as_tensor(d[:, None] * A * d[None, :], dtype=torch.float32)


class TriggerGenerator(nn.Module):
    def __init__(self, hist: int, tl: int, adj: torch.Tensor, attacked: np.ndarray, budget: float, d: int = 32):
        super().__init__()
        self.register_buffer("adj", adj)
        self.attacked = torch.as_tensor(attacked, dtype=torch.long)
        self.budget = budget
        self.inp = nn.Linear(hist, d)
        self.g1 = nn.Linear(d, d)
        self.g2 = nn.Linear(d, d)
        self.out = nn.Linear(d, tl)

    def forward(self, hist_norm: torch.Tensor) -> torch.Tensor:
        """(P, hist, C) z-scored histories -> (P, tl, k) triggers in [-budget, budget]."""
        h = torch.relu(self.inp(hist_norm.transpose(1, 2)))  # (P, C, d)
        h = torch.relu(self.adj @ self.g1(h))
        h = torch.relu(self.adj @ self.g2(h)) + h
        trig = self.budget * torch.tanh(self.out(h[:, self.attacked]))  # (P, k, tl)
        return trig.transpose(1, 2)


def histories(norm: np.ndarray, times: np.ndarray, hist: int) -> torch.Tensor:
    rows = np.asarray(times)[:, None] - hist + np.arange(hist)[None, :]
    return torch.as_tensor(norm[np.clip(rows, 0, None)], dtype=torch.float32)


def _windows(norm_p: np.ndarray, mean, std, L: int, H: int, T_train: int):
    starts = np.arange(0, T_train - L - H + 1)
    x = torch.as_tensor(np.stack([norm_p[n:n + L] for n in starts]), dtype=torch.float32)
    y = torch.as_tensor(np.stack([norm_p[n + L:n + L + H] for n in starts]) * std + mean, dtype=torch.float32)
    return x, y


def train_generator(norm: np.ndarray, T_train: int, mean: np.ndarray, std: np.ndarray, times: np.ndarray,
                    channels: np.ndarray, pattern: np.ndarray, L: int, H: int, tl: int, budget: float, *,
                    seed: int, rounds: int = 3, surrogate_epochs: int = 3, gen_steps: int = 50,
                    lambda_norm: float = 0.05, device=None) -> TriggerGenerator:
    """The bi-level loop above; returns the trained generator (on the CPU)."""
    from icmlkit.lib.defend_tsf.attack import inject

    dev = device if device is not None else torch.device("cpu")
    hist = max(1, L - tl)
    adj = channel_graph(norm[:T_train])
    with seeded(seed, "backtime-generator"):
        gen = TriggerGenerator(hist, tl, adj, channels, budget).to(dev)
    with seeded(seed, "backtime-surrogate"):
        sur = build_model(ModelConfig(model="dlinear"), L, H, norm.shape[1]).to(dev)
    g_opt = torch.optim.Adam(gen.parameters(), lr=1e-3)
    s_opt = torch.optim.Adam(sur.parameters(), lr=1e-3)
    batches = generator(seed, "backtime-batches")
    mean_t = torch.as_tensor(mean, dtype=torch.float32, device=dev)
    std_t = torch.as_tensor(std, dtype=torch.float32, device=dev)
    H_hist = histories(norm, times, hist).to(dev)
    ch = torch.as_tensor(channels, dtype=torch.long, device=dev)
    ps = min(pattern.size, H)
    pat = torch.as_tensor(pattern[:ps], dtype=torch.float32, device=dev)
    ref = torch.as_tensor(norm[np.asarray(times) - 1][:, channels], dtype=torch.float32, device=dev)  # (P, k)
    # the clean look-back before the trigger, and the future after it, of each attack time's window
    starts = np.asarray(times) + tl - L
    x_clean = torch.as_tensor(np.stack([norm[n:n + L] for n in starts]), dtype=torch.float32, device=dev)
    y_clean = torch.as_tensor(np.stack([norm[n + L:n + L + H] for n in starts]), dtype=torch.float32, device=dev)
    ones = None
    for _ in range(rounds):
        with torch.no_grad():
            trig = gen(H_hist).cpu().numpy().astype(np.float64)
        pnorm, _ = inject(norm[:T_train], times, channels, trig, pattern)
        x, y = _windows(pnorm, mean, std, L, H, T_train)
        if ones is None:
            ones = torch.ones(norm.shape[1], x.shape[0], dtype=torch.bool)
        for _ in range(surrogate_epochs):
            order = torch.randperm(x.shape[0], generator=batches)
            for idx in torch.split(order, 64):
                pred = sur(x[idx].to(dev)) * std_t + mean_t
                loss = tg.window_channel_loss(pred, y[idx].to(dev)).mean()
                s_opt.zero_grad(set_to_none=True)
                loss.backward()
                s_opt.step()
        for p in sur.parameters():
            p.requires_grad_(False)
        for _ in range(gen_steps):
            trig_t = gen(H_hist)  # (P, tl, k)
            xt = x_clean.clone()
            xt[:, L - tl:, ch] = ref[:, None, :] + trig_t
            pred = sur(xt)  # z-scored forecast
            target = y_clean.clone()
            target[:, :ps, ch] = ref[:, None, :] + pat[None, :, None]
            err = nn.functional.smooth_l1_loss(pred[:, :ps][:, :, ch], target[:, :ps][:, :, ch])
            loss = err + lambda_norm * trig_t.abs().mean()
            g_opt.zero_grad(set_to_none=True)
            loss.backward()
            g_opt.step()
        for p in sur.parameters():
            p.requires_grad_(True)
    return gen.cpu().eval()


@torch.no_grad()
def triggers_for(gen: TriggerGenerator, norm: np.ndarray, times: np.ndarray, L: int, tl: int) -> np.ndarray:
    """(P, tl, k) triggers of the generator for the given attack times (float64)."""
    if len(times) == 0:
        return np.zeros((0, tl, len(gen.attacked)))
    return gen(histories(norm, times, max(1, L - tl))).numpy().astype(np.float64)
