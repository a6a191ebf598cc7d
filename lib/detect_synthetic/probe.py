"""Differential Robustness Probing (DRP): perturbations, drift features and the discrepancy loss.

- :func:`multiscale_views`: the "raw" views of an image (0.5x resized, Gaussian-smoothed, 3x3
  median-filtered) that the probe generator and the foundation branch see.
- :func:`lpd_map`: the local-pixel-deviation map (FerretNet's zero-masked median deviation): by
  default as the official code (lower median of the 8 neighbours, zero padding), ``mode="mid-mean"``
  for ours before 2026-12-07 (mean of the two middle neighbours, replicate padding).
- :class:`ProbeUNet`: the learned perturbation generator g(x, views, f(x)) -> δ = ε·tanh(·), an
  L∞-bounded perturbation applied and clamped in **pixel space** ([0, 1]); the official code adds δ
  to the normalised tensor without clamping — our choice is documented in the README.
- :func:`gaussian_noise` / :func:`gaussian_probe`: RIGID's fixed probe λ·N(0, I) (antithetic draws
  ±n, so the average is symmetric in the noise sign). RIGID (He, Chen, Ho 2024) adds it to the
  encoder's *normalised* input tensor at the encoder's input resolution, unclamped; the detector
  does that by default (``rigid_space="normalised"``, see ``Detector.rigid_drift``).
  :func:`gaussian_probe` is the older pixel-space variant (x + λ·n clamped to [0, 1] at the image
  resolution), kept for ``rigid_space="pixel"`` and model files written before.
- :func:`drift`: cosine similarity, L2 distance and difference vector of f(x) and f(x + δ).
- :func:`discrepancy_loss`: L_emb = relu(s_f − s_r + m(1 − s_r)) / (1 − s_r) over batch means of
  the cosine on reals (s_r) and fakes (s_f), margin m = 1 (method sheet, from the official code).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.detect_synthetic.config import LPD_MODES


def gaussian_kernel(sigma: float, device=None) -> torch.Tensor:
    radius = max(1, int(round(2.5 * sigma)))
    t = torch.arange(-radius, radius + 1, dtype=torch.float32, device=device)
    k = torch.exp(-0.5 * (t / sigma) ** 2)
    return k / k.sum()


def gaussian_blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian smoothing per channel, reflect padding."""
    k = gaussian_kernel(sigma, x.device).to(x.dtype)
    r = (k.numel() - 1) // 2
    c = x.shape[1]
    x = F.pad(x, [r, r, r, r], mode="reflect" if min(x.shape[-2:]) > r else "replicate")
    x = F.conv2d(x, k.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
    return F.conv2d(x, k.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)


def _neighbourhood(x: torch.Tensor, padding: str = "replicate") -> torch.Tensor:
    """(B, C, H, W) -> (B, C, 9, H, W): the 3x3 neighbourhood of each pixel (``replicate`` padding, or
    ``zeros``)."""
    b, c, h, w = x.shape
    p = F.pad(x, [1, 1, 1, 1], mode="replicate") if padding == "replicate" else F.pad(x, [1, 1, 1, 1])
    return F.unfold(p.reshape(b * c, 1, h + 2, w + 2), 3).view(b, c, 9, h, w)


def median3(x: torch.Tensor) -> torch.Tensor:
    """3x3 median filter (vectorised with unfold)."""
    return _neighbourhood(x).median(dim=2).values


def lpd_map(x: torch.Tensor, mode: str = "lower-median") -> torch.Tensor:
    """Local pixel deviation: x minus the median of its 8 neighbours (the centre is masked out of
    the 3x3 window, FerretNet's "zero-masked median deviation").

    ``lower-median`` (default, the official RA-Det / FerretNet code): the lower of the two middle
    neighbours (torch.median of the 9 values with the centre set to -inf), zero padding at the border.
    ``mid-mean`` (ours before 2026-12-07): the mean of the two middle neighbours, replicate padding."""
    if mode not in LPD_MODES:
        raise UsageError(f"--lpd must be one of {', '.join(LPD_MODES)}, not {mode!r}")
    nb = _neighbourhood(x, "zeros" if mode == "lower-median" else "replicate")
    ring = torch.cat([nb[:, :, :4], nb[:, :, 5:]], dim=2).sort(dim=2).values
    if mode == "lower-median":
        return x - ring[:, :, 3]
    return x - 0.5 * (ring[:, :, 3] + ring[:, :, 4])


def multiscale_views(x: torch.Tensor, sigma: float = 1.0) -> list[torch.Tensor]:
    """[0.5x down-and-up resized, Gaussian-smoothed (σ), 3x3 median] views of x (same size).

    **reconstructed**: the official code stacks 15 channels (these views, x + δ and differences)
    for a 224-px DINOv3; σ = 2 there, σ = 1 here for 32-64 px crops.
    """
    h, w = x.shape[-2:]
    small = F.interpolate(x, size=(max(1, h // 2), max(1, w // 2)), mode="bilinear", align_corners=False,
                          antialias=True)
    resized = F.interpolate(small, size=(h, w), mode="bilinear", align_corners=False)
    return [resized, gaussian_blur(x, sigma), median3(x)]


def apply_perturbation(x: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """x + δ clamped to the valid pixel range; |result − x| ≤ |δ| element-wise."""
    return (x + delta).clamp(0.0, 1.0)


def gaussian_noise(shape, draws: int, generator: torch.Generator, device=None, dtype=torch.float32) -> torch.Tensor:
    """``draws`` standard-normal patterns (draws, 1, *shape), antithetic pairs (n, −n) when
    ``draws`` is even; drawn once per call and shared by every image of a batch."""
    half = (draws + 1) // 2
    n = torch.randn((half, 1, *shape), generator=generator, device=device, dtype=dtype)
    return torch.cat([n, -n])[:draws] if draws > 1 else n


def gaussian_probe(x: torch.Tensor, strength: float, draws: int, generator: torch.Generator) -> torch.Tensor:
    """RIGID's fixed probe: ``draws`` perturbed copies (draws, B, 3, H, W) of x + λ·n, clamped,
    with antithetic pairs (n, −n) when ``draws`` is even. The noise patterns are drawn once per
    call and shared by every image of the batch, so with a fixed seed an image's score does not
    depend on the batch or shard it is scored in."""
    noise = gaussian_noise(x.shape[1:], draws, generator, x.device, x.dtype)
    return apply_perturbation(x.unsqueeze(0), strength * noise)


def drift(f_clean: torch.Tensor, f_pert: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(cosine similarity (B,), L2 distance (B,), difference vector f(x) − f(x + δ) (B, D))."""
    diff = f_clean - f_pert
    return F.cosine_similarity(f_clean, f_pert, dim=-1, eps=1e-8), diff.norm(dim=-1), diff


def discrepancy_loss(cos: torch.Tensor, labels: torch.Tensor, margin: float = 1.0) -> torch.Tensor:
    """The normalised discrepancy loss of RA-Det's probe (labels: 1 = generated, 0 = real).

    L_emb = relu(s_f − s_r + m(1 − s_r)) / (1 − s_r), s_r / s_f the mean cosine similarity of reals
    / fakes in the batch. It is zero once the fakes' mean drift 1 − s_f reaches (1 + m) times the
    reals' 1 − s_r; minimising it lowers s_f (fakes drift more) and raises s_r (reals stay put).
    Needs both classes in the batch (use a class-balanced sampler).
    """
    real, fake = labels == 0, labels == 1
    if not bool(real.any()) or not bool(fake.any()):
        raise InputError("the discrepancy loss needs reals and fakes in every batch")
    s_r = cos[real].mean()
    s_f = cos[fake].mean()
    denom = (1.0 - s_r).clamp_min(1e-6)
    return F.relu(s_f - s_r + margin * (1.0 - s_r)) / denom


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.n1 = nn.GroupNorm(min(8, cout), cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.n2 = nn.GroupNorm(min(8, cout), cout)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x):
        h = F.silu(self.n1(self.c1(x)))
        h = self.n2(self.c2(h))
        return F.silu(h + self.skip(x))


class ProbeUNet(nn.Module):
    """The DRP perturbation generator: a small UNet on [x, multi-scale views] (12 channels) with the
    clean embedding f(x) injected at the bottleneck; output δ = ε·tanh(·), so ‖δ‖∞ ≤ ε.

    The input is pixel-unshuffled by 2 (each 2x2 patch becomes 4x the channels) and δ is
    pixel-shuffled back, so the UNet runs at half resolution yet δ keeps a value per pixel (4x
    fewer multiply-adds than a full-resolution first level; the probe and the noise CNN were 80% of
    a training step before).

    **reconstructed** at small scale: the official UNet has base 64 channels, 5 levels and attention
    for 224-px inputs; here ``base`` channels (16 by default), 3 levels and the 2x unshuffle.
    """

    def __init__(self, embed_dim: int, base: int = 16, in_channels: int = 12):
        super().__init__()
        b = base
        self.e1 = _Block(4 * in_channels, b)
        self.e2 = _Block(b, 2 * b)
        self.e3 = _Block(2 * b, 4 * b)
        self.embed = nn.Sequential(nn.LayerNorm(embed_dim), nn.Linear(embed_dim, 4 * b))
        self.d2 = _Block(6 * b, 2 * b)
        self.d1 = _Block(3 * b, b)
        self.out = nn.Conv2d(b, 12, 3, padding=1)
        nn.init.normal_(self.out.weight, std=1e-2)
        nn.init.zeros_(self.out.bias)

    def forward(self, x, views, f_clean, eps):
        h, w = x.shape[-2:]
        inp = torch.cat([x, *views], dim=1)
        if h % 2 or w % 2:
            inp = F.pad(inp, [0, w % 2, 0, h % 2], mode="replicate")
        h1 = self.e1(F.pixel_unshuffle(inp, 2))
        h2 = self.e2(F.avg_pool2d(h1, 2, ceil_mode=True))
        h3 = self.e3(F.avg_pool2d(h2, 2, ceil_mode=True)) + self.embed(f_clean)[:, :, None, None]
        u2 = self.d2(torch.cat([F.interpolate(h3, size=h2.shape[-2:], mode="nearest"), h2], dim=1))
        u1 = self.d1(torch.cat([F.interpolate(u2, size=h1.shape[-2:], mode="nearest"), h1], dim=1))
        raw = F.pixel_shuffle(self.out(u1), 2)[..., :h, :w]
        eps = torch.as_tensor(eps, dtype=x.dtype, device=x.device).reshape(-1, 1, 1, 1)
        return eps * torch.tanh(raw)
