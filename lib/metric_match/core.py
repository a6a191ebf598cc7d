"""The numerical core of metric matching: the loss, the FiLM MLP on (y, h), the r x r eigen route.

- :func:`lowrank_loss`: the per-sample metric-matching loss that never forms a D x D matrix,
  (|M M^T|_F^2 - 2 |M delta|^2 + |delta|^4) / D^2 with delta = (X - Y) / (sqrt(2) h), batch-averaged;
  with a Tikhonov term Gamma = M^T M + lambda I it adds 2 lambda |M|_F^2 (and the constant terms
  -2 lambda |delta|^2 + lambda^2 D, kept so that it equals the naive loss exactly).
  :func:`naive_loss` is the D x D Frobenius MSE it equals (a test checks 1e-10 in float64).
- :class:`FiLMMLP`: y -> M(y, h) in R^{r x D}; h enters through a sinusoidal embedding of log h
  (frequencies bounded by ``h_freq_max``, :func:`log_h_frequencies`) and FiLM (scale, shift) in every
  residual block. The input is divided by sqrt(1 + h^2) (data of RMS
  radius 1 after standardisation) **[reconstructed]** preconditioning; widths and block layout
  **[reconstructed]** (the paper's MLP: hidden 1024, 4 layers, a time embedding).
- :class:`FiLMUNet`: the small UNet for image sets (two downsamplings, FiLM conv blocks on the same
  h embedding) with r output maps per channel: M(y, h) for images **[reconstructed]** layout.
- :func:`eig_route`: eigen-decomposition of the r x r Gram M M^T (float64), its eigenvectors mapped back
  to R^D (v_i = M^T u_i / sqrt(lambda_i)): the spectrum and an orthonormal eigenbasis of Gamma = M^T M.
- :func:`local_dimension`: the local intrinsic dimension from the spectrum's decay (eigen-gap or
  threshold rule, **[reconstructed]**: the paper reads it "from where the eigenvalues decay").
  :func:`eigengap_strength` says how clearly the eigen-gap picks it (``query --what tangent`` without
  ``--dim`` refuses an ambiguous one).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.metric_match.config import H_FREQ_MAX


def lowrank_loss(M: torch.Tensor, delta: torch.Tensor, tikhonov: float = 0.0, reduce: bool = True) -> torch.Tensor:
    """Metric-matching loss of factors ``M`` (B, r, D) against targets ``delta`` (B, D):
    |M^T M + lambda I - delta delta^T|_F^2 / D^2 computed through the r x r Gram only."""
    D = M.shape[-1]
    G = M @ M.transpose(-1, -2)                      # (B, r, r)
    Md = torch.einsum("brd,bd->br", M, delta)        # (B, r)
    dd = (delta * delta).sum(-1)                     # (B,)
    per = (G * G).sum((-1, -2)) - 2 * (Md * Md).sum(-1) + dd * dd
    if tikhonov:
        per = per + 2 * tikhonov * (M * M).sum((-1, -2)) - 2 * tikhonov * dd + tikhonov ** 2 * D
    per = per / (D * D)
    return per.mean() if reduce else per


def naive_loss(M: torch.Tensor, delta: torch.Tensor, tikhonov: float = 0.0) -> torch.Tensor:
    """The same loss built with D x D matrices (for tests on small D only)."""
    D = M.shape[-1]
    gamma = M.transpose(-1, -2) @ M + tikhonov * torch.eye(D, dtype=M.dtype, device=M.device)
    target = delta[:, :, None] * delta[:, None, :]
    return ((gamma - target) ** 2).sum((-1, -2)).div(D * D).mean()


def log_h_frequencies(n_freq: int, f_max: float | None = H_FREQ_MAX, *, dtype=torch.float64,
                      device=None) -> torch.Tensor:
    """The n_freq frequencies (radians per unit of log h) of :func:`sinusoidal`: 2^k / 8 while they stay
    at or below ``f_max``; when 2^(n_freq-1) / 8 would pass it, n_freq geometric steps from 1/8 to
    ``f_max`` instead. ``f_max=None`` is the former unbounded 2^k / 8 (up to 2.7e8 at n_freq 32, where
    most features are noise in h: sin/cos of log h times 1e8), kept only for model files written
    before the bound (their ``arch`` has no ``h_freq_max``)."""
    k = torch.arange(n_freq, dtype=dtype, device=device)
    if f_max is None or n_freq < 2 or 2.0 ** (n_freq - 1) / 8.0 <= f_max:
        return 2.0 ** k / 8.0
    return (8.0 * float(f_max)) ** (k / (n_freq - 1)) / 8.0


def sinusoidal(h: torch.Tensor, n_freq: int, f_max: float | None = H_FREQ_MAX) -> torch.Tensor:
    """(B,) noise levels -> (B, 2 n_freq) sin/cos features of log h at :func:`log_h_frequencies`
    ([reconstructed] embedding)."""
    x = torch.log(h)[:, None]
    freqs = log_h_frequencies(n_freq, f_max, dtype=h.dtype, device=h.device)
    ang = x * freqs[None, :]
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)


class FiLMBlock(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width, elementwise_affine=False)
        self.film = nn.Linear(width, 2 * width)
        self.lin1 = nn.Linear(width, width)
        self.lin2 = nn.Linear(width, width)

    def forward(self, x, e):
        s, b = self.film(e).chunk(2, dim=-1)
        z = self.norm(x) * (1 + s) + b
        return x + self.lin2(torch.nn.functional.silu(self.lin1(torch.nn.functional.silu(z))))


class FiLMMLP(nn.Module):
    """(y (B, D), h (B,)) -> (B, out) with FiLM conditioning on h in every block."""

    def __init__(self, D: int, out: int, width: int = 256, blocks: int = 3, emb: int = 32,
                 h_freq_max: float | None = H_FREQ_MAX):
        super().__init__()
        self.D, self.out_dim, self.n_freq, self.h_freq_max = D, out, emb, h_freq_max
        self.inp = nn.Linear(D, width)
        self.emb = nn.Sequential(nn.Linear(2 * emb, width), nn.SiLU(), nn.Linear(width, width), nn.SiLU())
        self.blocks = nn.ModuleList([FiLMBlock(width) for _ in range(blocks)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, out)

    def forward(self, y, h):
        x = self.inp(y / torch.sqrt(1 + h * h)[:, None])
        e = self.emb(sinusoidal(h, self.n_freq, self.h_freq_max))
        for blk in self.blocks:
            x = blk(x, e)
        return self.head(self.norm(x))


class FiLMConvBlock(nn.Module):
    """GroupNorm -> FiLM(scale, shift from the h embedding) -> SiLU-conv3x3-SiLU-conv3x3, residual."""

    def __init__(self, cin: int, cout: int, emb_width: int):
        super().__init__()
        self.norm = nn.GroupNorm(math.gcd(8, cin), cin, affine=False)
        self.film = nn.Linear(emb_width, 2 * cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, e):
        s, b = self.film(e)[:, :, None, None].chunk(2, dim=1)
        z = self.norm(x) * (1 + s) + b
        silu = torch.nn.functional.silu
        return self.skip(x) + self.conv2(silu(self.conv1(silu(z))))


def image_dims(image_shape) -> tuple[int, int, int]:
    """(H, W, C) of an image shape (H, W) or (H, W, C)."""
    shape = tuple(int(v) for v in image_shape)
    return (shape[0], shape[1], shape[2] if len(shape) > 2 else 1)


class FiLMUNet(nn.Module):
    """The small UNet for images: (y (B, D) flattened (H, W[, C]) images, h (B,)) -> (B, out_per_channel,
    H, W, C)-shaped outputs flattened to (B, out_per_channel, D). Two resolutions below the input
    (stride-2 convolutions, nearest upsampling, skip concatenation), a FiLM conv block at each level
    conditioned on the sinusoidal log-h embedding, the input divided by sqrt(1 + h^2) as in the MLP.
    Layout and widths **[reconstructed]** (the paper uses "a UNet" for images; its configuration is
    not reproduced here)."""

    def __init__(self, image_shape, out_per_channel: int, channels: int = 32, emb: int = 32,
                 h_freq_max: float | None = H_FREQ_MAX):
        super().__init__()
        self.H, self.W, self.C = image_dims(image_shape)
        self.out_per_channel, self.n_freq, self.h_freq_max = out_per_channel, emb, h_freq_max
        c, ew = channels, 4 * channels
        self.emb = nn.Sequential(nn.Linear(2 * emb, ew), nn.SiLU(), nn.Linear(ew, ew), nn.SiLU())
        self.inp = nn.Conv2d(self.C, c, 3, padding=1)
        self.enc1 = FiLMConvBlock(c, c, ew)
        self.down1 = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.enc2 = FiLMConvBlock(2 * c, 2 * c, ew)
        self.down2 = nn.Conv2d(2 * c, 2 * c, 3, stride=2, padding=1)
        self.mid = FiLMConvBlock(2 * c, 2 * c, ew)
        self.dec2 = FiLMConvBlock(4 * c, 2 * c, ew)
        self.dec1 = FiLMConvBlock(3 * c, c, ew)
        self.norm = nn.GroupNorm(math.gcd(8, c), c)
        self.out = nn.Conv2d(c, out_per_channel * self.C, 3, padding=1)

    def forward(self, y, h):
        B = y.shape[0]
        up = torch.nn.functional.interpolate
        x = (y / torch.sqrt(1 + h * h)[:, None]).reshape(B, self.H, self.W, self.C).permute(0, 3, 1, 2)
        e = self.emb(sinusoidal(h, self.n_freq, self.h_freq_max))
        a = self.enc1(self.inp(x), e)
        b = self.enc2(self.down1(a), e)
        m = self.mid(self.down2(b), e)
        u = self.dec2(torch.cat([up(m, size=b.shape[-2:], mode="nearest"), b], 1), e)
        u = self.dec1(torch.cat([up(u, size=a.shape[-2:], mode="nearest"), a], 1), e)
        o = self.out(torch.nn.functional.silu(self.norm(u)))          # (B, out * C, H, W)
        o = o.reshape(B, self.out_per_channel, self.C, self.H, self.W).permute(0, 1, 3, 4, 2)
        return o.reshape(B, self.out_per_channel, self.H * self.W * self.C)


def _backbone(D: int, out_rows: int, width: int, blocks: int, emb: int, kind: str, image_shape, channels: int,
              h_freq_max: float | None = H_FREQ_MAX):
    if kind == "unet":
        H, W, C = image_dims(image_shape)
        if H * W * C != D:
            raise UsageError(f"image shape {tuple(image_shape)} does not hold D = {D} values")
        return FiLMUNet(image_shape, out_rows, channels, emb, h_freq_max)
    return FiLMMLP(D, out_rows * D, width, blocks, emb, h_freq_max)


class MetricNet(nn.Module):
    """M(y, h) in R^{r x D}: a :class:`FiLMMLP` with r D outputs, or (``kind="unet"``, images) a
    :class:`FiLMUNet` with r output maps per image channel."""

    def __init__(self, D: int, rank: int, width: int = 256, blocks: int = 3, emb: int = 32, kind: str = "mlp",
                 image_shape=None, channels: int = 32, h_freq_max: float | None = H_FREQ_MAX):
        super().__init__()
        self.D, self.rank, self.kind = D, rank, kind
        net = _backbone(D, rank, width, blocks, emb, kind, image_shape, channels, h_freq_max)
        if kind == "unet":
            self.unet = net
        else:
            self.mlp = net

    def forward(self, y, h):
        out = self.unet(y, h) if self.kind == "unet" else self.mlp(y, h)
        return out.reshape(-1, self.rank, self.D) / math.sqrt(self.D)


class Denoiser(nn.Module):
    """D(y, h) ~ E[X | Y = y] with EDM-style preconditioning for data of unit RMS radius
    (c_skip = 1/(1+h^2), c_out = h/sqrt(1+h^2)) **[reconstructed]**; the same backbone as the metric
    network (MLP, or the UNet for images)."""

    def __init__(self, D: int, width: int = 256, blocks: int = 3, emb: int = 32, kind: str = "mlp",
                 image_shape=None, channels: int = 32, h_freq_max: float | None = H_FREQ_MAX):
        super().__init__()
        self.kind = kind
        net = _backbone(D, 1, width, blocks, emb, kind, image_shape, channels, h_freq_max)
        if kind == "unet":
            self.unet = net
        else:
            self.mlp = FiLMMLP(D, D, width, blocks, emb, h_freq_max)

    def forward(self, y, h):
        h2 = (h * h)[:, None]
        out = self.unet(y, h).reshape(y.shape) if self.kind == "unet" else self.mlp(y, h)
        return y / (1 + h2) + h[:, None] / torch.sqrt(1 + h2) * out


def eig_route(M: torch.Tensor, eps: float = 1e-12) -> tuple[torch.Tensor, torch.Tensor]:
    """(spectrum (n, r) descending, eigenvectors (n, r, D) as rows) of Gamma = M^T M from the r x r Gram
    M M^T in float64 (never D x D). Eigenvectors of (near-)zero eigenvalues are returned as zeros."""
    M = M.double()
    G = M @ M.transpose(-1, -2)
    lam, U = torch.linalg.eigh(G)                    # ascending
    lam, U = lam.flip(-1), U.flip(-1)
    lam = lam.clamp_min(0)
    V = (M.transpose(-1, -2) @ U)                     # (n, D, r): M^T u_i = sqrt(lam_i) v_i
    scale = torch.where(lam > eps * lam[..., :1].clamp_min(eps), 1 / lam.clamp_min(1e-300).sqrt(),
                        torch.zeros_like(lam))
    V = V * scale[:, None, :]
    return lam, V.transpose(-1, -2)


def local_dimension(spectrum: torch.Tensor, rule: str = "eigengap", threshold: float = 0.5) -> torch.Tensor:
    """(n,) local dimension from a descending (n, r) spectrum.

    eigengap: argmax_k (lambda_k - lambda_{k+1}) + 1 with lambda_{r+1} = 0 (relative to lambda_1);
    threshold: #{k : lambda_k > threshold lambda_1}. Both **[reconstructed]**."""
    lam = spectrum.double()
    if rule == "threshold":
        return (lam > threshold * lam[:, :1]).sum(-1).clamp_min(1)
    nxt = torch.cat([lam[:, 1:], torch.zeros_like(lam[:, :1])], dim=-1)
    return (lam - nxt).argmax(-1) + 1


def eigengap_strength(spectrum: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """((n,) ratio of the largest gap lambda_k - lambda_{k+1} (lambda_{r+1} = 0) to the second largest,
    (n,) the dimension the second-largest gap would give). A ratio near 1 means two cuts of the spectrum
    are about as good: the eigen-gap dimension is ambiguous (e.g. the plain S^4 model's radial
    eigenvalue 0.3 between the tangent ones 0.5 and the normal ones 0.005). A spectrum of length 1 has
    one gap: ratio inf."""
    lam = spectrum.double()
    nxt = torch.cat([lam[:, 1:], torch.zeros_like(lam[:, :1])], dim=-1)
    gaps = lam - nxt
    if gaps.shape[1] < 2:
        return torch.full((len(lam),), float("inf"), dtype=torch.float64), torch.ones(len(lam), dtype=torch.long)
    top = torch.topk(gaps, 2, dim=-1)
    first, second = top.values[:, 0], top.values[:, 1]
    ratio = torch.where(second > 0, first / second.clamp_min(1e-300), torch.full_like(first, float("inf")))
    return ratio, top.indices[:, 1] + 1


def projector_error(basis: torch.Tensor, true_basis: torch.Tensor) -> torch.Tensor:
    """(n,) |P_est - P_true|_F of orthonormal row bases (n, d, D) and (n, d', D)."""
    P = basis.transpose(-1, -2) @ basis
    Q = true_basis.transpose(-1, -2) @ true_basis
    return torch.linalg.matrix_norm((P - Q).double())
