"""Forecasters on (B, L, C) z-scored inputs -> (B, H, C) forecasts; the losses per (window, channel)
are computed outside (``losses.window_channel_loss``), so every model supports channel-wise pools.

- :class:`DLinear` (Zeng et al. 2023): moving-average decomposition, one shared linear map per part
  (channel-independent).
- :class:`PatchTST` (Nie et al. 2023): channel-independent patches + Transformer encoder, with RevIN.
- :class:`ITransformerLite` (Liu et al. 2024): each channel's whole look-back is one token; a small
  Transformer mixes channels (the channel-entangled model), with the series-stationary norm.
- :class:`TimesNetLite` (Wu et al. 2023): FFT top-k periods, 1-D -> 2-D fold, a 2-D conv block,
  aggregation weighted by amplitude [reconstructed simplification: one inception pair of kernels
  (3, 5), no temporal embedding].

Dropout is 0 everywhere (deterministic; same bytes per seed and under torchrun)."""
from __future__ import annotations

import torch
from torch import nn

from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.defend_tsf.config import ModelConfig


class _Norm(nn.Module):
    """Per-window, per-channel normalisation of the input, undone on the output (RevIN without affine)."""

    @staticmethod
    def stats(x):
        mu = x.mean(dim=1, keepdim=True)
        sd = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + 1e-5)
        return mu, sd


class DLinear(nn.Module):
    def __init__(self, L: int, H: int, C: int, kernel: int = 25):
        super().__init__()
        k = min(kernel, L if L % 2 == 1 else L - 1) if L > 1 else 1
        self.k = max(1, k)
        self.seasonal = nn.Linear(L, H)
        self.trend = nn.Linear(L, H)
        for lin in (self.seasonal, self.trend):  # DLinear's initialisation: the mean of the look-back
            nn.init.constant_(lin.weight, 1.0 / L)
            nn.init.zeros_(lin.bias)

    def forward(self, x):  # (B, L, C)
        pad = (self.k - 1) // 2
        xs = x.permute(0, 2, 1)  # (B, C, L)
        front = xs[:, :, :1].expand(-1, -1, pad)
        end = xs[:, :, -1:].expand(-1, -1, pad)
        padded = torch.cat([front, xs, end], dim=2)
        trend = padded.unfold(2, self.k, 1).mean(-1) if self.k > 1 else xs
        seas = xs - trend
        return (self.seasonal(seas) + self.trend(trend)).permute(0, 2, 1)


class PatchTST(nn.Module):
    def __init__(self, L: int, H: int, C: int, d_model=64, n_layers=2, n_heads=4):
        super().__init__()
        self.p = min(16, L)
        self.s = max(1, self.p // 2)
        self.n_patch = (L - self.p) // self.s + 2  # with one end-padding patch as in PatchTST
        self.embed = nn.Linear(self.p, d_model)
        self.pos = nn.Parameter(torch.zeros(1, self.n_patch, d_model))
        nn.init.normal_(self.pos, std=0.02)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 2 * d_model, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.enc = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(self.n_patch * d_model, H)

    def forward(self, x):
        B, L, C = x.shape
        mu, sd = _Norm.stats(x)
        z = ((x - mu) / sd).permute(0, 2, 1).reshape(B * C, L)
        z = torch.cat([z, z[:, -1:].expand(-1, self.s)], dim=1)
        patches = z.unfold(1, self.p, self.s)[:, : self.n_patch]  # (BC, n, p)
        h = self.enc(self.embed(patches) + self.pos)
        out = self.head(h.reshape(B * C, -1)).reshape(B, C, -1).permute(0, 2, 1)
        return out * sd + mu


class ITransformerLite(nn.Module):
    def __init__(self, L: int, H: int, C: int, d_model=64, n_layers=2, n_heads=4):
        super().__init__()
        self.embed = nn.Linear(L, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 2 * d_model, dropout=0.0, batch_first=True,
                                           norm_first=False)
        self.enc = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, H)

    def forward(self, x):
        mu, sd = _Norm.stats(x)
        z = ((x - mu) / sd).permute(0, 2, 1)  # (B, C, L): one token per channel
        h = self.norm(self.enc(self.embed(z)))
        return self.head(h).permute(0, 2, 1) * sd + mu


class _TimesBlock(nn.Module):
    def __init__(self, T: int, d: int, k: int = 2):
        super().__init__()
        self.T, self.k = T, k
        self.conv = nn.ModuleList([nn.Conv2d(d, d, 3, padding=1), nn.Conv2d(d, d, 5, padding=2)])
        self.conv2 = nn.Conv2d(d, d, 3, padding=1)

    def forward(self, x):  # (B, T, d)
        B, T, d = x.shape
        amp = torch.fft.rfft(x, dim=1).abs()  # (B, F, d)
        freq = amp.mean(0).mean(-1)
        freq[0] = 0
        k = min(self.k, freq.numel() - 1) if freq.numel() > 1 else 0
        if k < 1:
            return x
        top = torch.topk(freq, k).indices.sort().values
        periods = [max(1, T // int(f)) for f in top.tolist()]
        weights = amp.mean(-1)[:, top]  # (B, k)
        outs = []
        for p in periods:
            n = -(-T // p) * p
            pad = torch.cat([x, x.new_zeros(B, n - T, d)], dim=1) if n > T else x
            grid = pad.reshape(B, n // p, p, d).permute(0, 3, 1, 2)
            g = sum(c(grid) for c in self.conv) / len(self.conv)
            g = self.conv2(torch.nn.functional.gelu(g))
            outs.append(g.permute(0, 2, 3, 1).reshape(B, n, d)[:, :T])
        stack = torch.stack(outs, dim=-1)  # (B, T, d, k)
        w = torch.softmax(weights, dim=1)[:, None, None, :]
        return x + (stack * w).sum(-1)


class TimesNetLite(nn.Module):
    def __init__(self, L: int, H: int, C: int, d_model=16, n_layers=2):
        super().__init__()
        self.L, self.H = L, H
        self.embed = nn.Linear(C, d_model)
        self.extend = nn.Linear(L, L + H)
        self.blocks = nn.ModuleList([_TimesBlock(L + H, d_model) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, C)

    def forward(self, x):
        mu, sd = _Norm.stats(x)
        z = (x - mu) / sd
        h = self.extend(self.embed(z).permute(0, 2, 1)).permute(0, 2, 1)  # (B, L+H, d)
        for b in self.blocks:
            h = self.norm(b(h))
        y = self.out(h)[:, -self.H:]
        return y * sd + mu


def build_model(cfg: ModelConfig, L: int, H: int, C: int) -> nn.Module:
    """The forecaster named by ``cfg.model`` (parameters drawn from torch's global RNG: build it
    under ``runtime.seeded(seed, stream)``)."""
    if cfg.model == "dlinear":
        return DLinear(L, H, C, cfg.moving_avg)
    if cfg.model == "patchtst":
        return PatchTST(L, H, C, cfg.d_model, cfg.n_layers, cfg.n_heads)
    if cfg.model == "itransformer":
        return ITransformerLite(L, H, C, cfg.d_model, cfg.n_layers, cfg.n_heads)
    if cfg.model == "timesnet":
        return TimesNetLite(L, H, C, max(4, cfg.d_model // 4), cfg.n_layers)
    raise UsageError(f"unknown model {cfg.model!r}")
