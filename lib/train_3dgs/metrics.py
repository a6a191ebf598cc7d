"""Image metrics and the training losses: PSNR, SSIM (11x11 Gaussian window, sigma 1.5, as in the
reference 3DGS), the 3DGS loss 0.8 L1 + 0.2 (1 - SSIM) with optional 3DGS-MCMC-style regularisers,
and the square-root residual of that loss for the Gauss-Newton curvature of the prototype."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _window(dtype, device, size: int = 11, sigma: float = 1.5) -> torch.Tensor:
    x = torch.arange(size, dtype=dtype, device=device) - (size - 1) / 2
    g = torch.exp(-x * x / (2 * sigma * sigma))
    g = g / g.sum()
    return (g[:, None] * g[None, :]).expand(3, 1, size, size).contiguous()


GN_FLOOR = 1e-3  # [reconstructed] added under the square roots of the residual (bounded Jacobian)


def ssim_map(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The SSIM map [V, 3, H, W] of images [V, H, W, 3] (zero padding, as the reference training code)."""
    x, y = a.permute(0, 3, 1, 2), b.permute(0, 3, 1, 2)
    w = _window(a.dtype, a.device)
    pad = w.shape[-1] // 2
    mu_x = F.conv2d(x, w, padding=pad, groups=3)
    mu_y = F.conv2d(y, w, padding=pad, groups=3)
    sxx = F.conv2d(x * x, w, padding=pad, groups=3) - mu_x * mu_x
    syy = F.conv2d(y * y, w, padding=pad, groups=3) - mu_y * mu_y
    sxy = F.conv2d(x * y, w, padding=pad, groups=3) - mu_x * mu_y
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    return ((2 * mu_x * mu_y + c1) * (2 * sxy + c2)) / ((mu_x * mu_x + mu_y * mu_y + c1) * (sxx + syy + c2))


def ssim(a: torch.Tensor, b: torch.Tensor, reduce: bool = True) -> torch.Tensor:
    """SSIM of images [V, H, W, 3] in [0, 1]: the mean of :func:`ssim_map`, or one value per view
    with ``reduce=False``."""
    m = ssim_map(a, b)
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


def regularisers(opacity_logits: torch.Tensor, log_scales: torch.Tensor, reg_opacity: float = 0.0,
                 reg_scale: float = 0.0):
    """``reg_opacity * mean(opacity) + reg_scale * mean(scale)`` (3DGS-MCMC's L1 terms; activated
    values are positive, so these are L1 norms); 0.0 when both weights are 0."""
    out = 0.0
    if reg_opacity:
        out = out + reg_opacity * torch.sigmoid(opacity_logits).mean()
    if reg_scale:
        out = out + reg_scale * torch.exp(log_scales).mean()
    return out


def train_residual(img: torch.Tensor, gt: torch.Tensor, lambda_dssim: float, n_total: int,
                   floor: float = GN_FLOOR) -> torch.Tensor:
    """The square-root residual of the image part of :func:`gs_loss` for the Gauss-Newton curvature
    (the prototype's curvature from the training loss): a flat vector r with
    ``sum r^2 = (1-lambda) sum(|e| + floor)/n + lambda sum(1 - ssim_map + floor)/n``, n =
    ``n_total`` (the element count of the whole batch, so per-view chunks add up): over the whole
    batch, the loss plus the constant ``floor``. ``floor`` keeps the
    Jacobian of sqrt(|e|) bounded at e = 0 **[reconstructed]** (L1's Gauss-Newton weight is
    1/(|e| + floor))."""
    w1 = (1 - lambda_dssim) / n_total
    parts = [torch.sqrt(w1 * ((img - gt).abs() + floor)).reshape(-1)]
    if lambda_dssim:
        d = (1 - ssim_map(img, gt)).clamp_min(0.0)
        parts.append(torch.sqrt(lambda_dssim / n_total * (d + floor)).reshape(-1))
    return torch.cat(parts)


def reg_residual(opacity_logits: torch.Tensor, log_scales: torch.Tensor, reg_opacity: float,
                 reg_scale: float) -> torch.Tensor | None:
    """The square-root residual of :func:`regularisers` (its squares sum to them exactly); None when
    both weights are 0."""
    parts = []
    if reg_opacity:
        parts.append(torch.sqrt(reg_opacity / opacity_logits.numel() * torch.sigmoid(opacity_logits)).reshape(-1))
    if reg_scale:
        parts.append(torch.sqrt(reg_scale / log_scales.numel() * torch.exp(log_scales)).reshape(-1))
    return torch.cat(parts) if parts else None
