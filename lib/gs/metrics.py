"""Image metrics and the training losses: PSNR, SSIM (11x11 Gaussian window, sigma 1.5, as in the
reference 3DGS), the 3DGS loss 0.8 L1 + 0.2 (1 - SSIM), and the L2 loss of the curvature pass."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _window(dtype, device, size: int = 11, sigma: float = 1.5) -> torch.Tensor:
    x = torch.arange(size, dtype=dtype, device=device) - (size - 1) / 2
    g = torch.exp(-x * x / (2 * sigma * sigma))
    g = g / g.sum()
    return (g[:, None] * g[None, :]).expand(3, 1, size, size).contiguous()


def ssim(a: torch.Tensor, b: torch.Tensor, reduce: bool = True) -> torch.Tensor:
    """SSIM of images [V, H, W, 3] in [0, 1] (zero padding, as the reference training code);
    the mean over everything, or one value per view with ``reduce=False``."""
    x, y = a.permute(0, 3, 1, 2), b.permute(0, 3, 1, 2)
    w = _window(a.dtype, a.device)
    pad = w.shape[-1] // 2
    mu_x = F.conv2d(x, w, padding=pad, groups=3)
    mu_y = F.conv2d(y, w, padding=pad, groups=3)
    sxx = F.conv2d(x * x, w, padding=pad, groups=3) - mu_x * mu_x
    syy = F.conv2d(y * y, w, padding=pad, groups=3) - mu_y * mu_y
    sxy = F.conv2d(x * y, w, padding=pad, groups=3) - mu_x * mu_y
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    m = ((2 * mu_x * mu_y + c1) * (2 * sxy + c2)) / ((mu_x * mu_x + mu_y * mu_y + c1) * (sxx + syy + c2))
    return m.mean() if reduce else m.mean((1, 2, 3))


def psnr(a: torch.Tensor, b: torch.Tensor, reduce: bool = True) -> torch.Tensor:
    """PSNR in dB of images in [0, 1]: per view, then the mean (``reduce``) or the per-view values."""
    mse = (a.clamp(0, 1) - b).square().flatten(1).mean(1)
    val = -10 * torch.log10(mse.clamp_min(1e-12))
    return val.mean() if reduce else val


def gs_loss(img: torch.Tensor, gt: torch.Tensor, lambda_dssim: float = 0.2) -> torch.Tensor:
    """The reference 3DGS loss (1 - lambda) L1 + lambda (1 - SSIM)."""
    l1 = (img - gt).abs().mean()
    if lambda_dssim == 0:
        return l1
    return (1 - lambda_dssim) * l1 + lambda_dssim * (1 - ssim(img, gt))
