"""The networks: the FuncAttn layer and model, the Transolver swap, the ablations, and our FNO.

FuncAttn layer (method sheet steps 1-6), on x in R^{B x n x C} with H heads of d_h = C / H:

1. u = LN(x);
2. x_mid = P_x(u), f_mid = P_f(u) (Linear, or 3x3 Conv2d on a grid for ``funcattn-conv``), split into
   heads; W = softmax(Lin(x_mid) / tau) over the k bases (tau per head, init 0.5, clamped to [0.1, 5];
   Lin: d_h -> k, orthogonal init): a soft partition of unity;
3. T = diag(1 / (sum_n W + 1e-5)) W^T f_mid (k x d_h) (``quadrature="trapezoid"``, our addition, weights
   the points of a node grid by the trapezoid rule: :func:`quadrature_weights`);
4. Q = T W_q, K = T W_k, V = T W_v (no bias);
5. the functional map in dual form C = Q ((1 - a) K^T K + a I)^-1 K^T with a = sigmoid(a_raw): a batched
   ``torch.linalg.solve`` of the d_h x d_h system, in float32 even under autocast (:func:`functional_map`);
   Transolver instead: softmax(Q K^T / sqrt(d_h)) over the slice tokens;
6. out_n = sum_g W_ng (C V)_g; heads joined, Linear, residual; then LN -> MLP -> residual.

Cost O(n k d + k d^2 + d^3): no n x n (and no k x k when C V is formed as Q (M^-1 (K^T V))).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from icmlkit.lib.core.errors import UsageError

TAU_MIN, TAU_MAX = 0.1, 5.0


# --------------------------------------------------------------------------- step 5


def _solve_fp32(Q, K, V, alpha):
    M = (1 - alpha) * (K.transpose(-1, -2) @ K)
    M = M + alpha * torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
    Z = torch.linalg.solve(M, K.transpose(-1, -2) @ V)  # (.., d_h, d_h): never k x k or n x n
    return Q @ Z


def functional_map(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, a_raw: torch.Tensor) -> torch.Tensor:
    """C V with C = Q ((1 - alpha) K^T K + alpha I)^-1 K^T, alpha = sigmoid(a_raw), batched over the
    leading axes; the solve runs in float32 (float64 inputs stay float64) with autocast off."""
    dtype = Q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    with torch.autocast(device_type=Q.device.type, enabled=False):
        alpha = torch.sigmoid(a_raw.to(work))
        out = _solve_fp32(Q.to(work), K.to(work), V.to(work), alpha)
    return out.to(dtype)


def functional_map_matrix(Q, K, a_raw):
    """The k x k map C of the dual form itself (for tests and inspection)."""
    alpha = torch.sigmoid(a_raw)
    d = K.shape[-1]
    M = (1 - alpha) * (K.transpose(-1, -2) @ K) + alpha * torch.eye(d, dtype=K.dtype, device=K.device)
    return Q @ torch.linalg.solve(M, K.transpose(-1, -2))


def primal_map_matrix(Q, K, lam):
    """The primal ridge solution Q K^T (K K^T + lam I)^-1 (k x k), for the tests' identity check."""
    k = K.shape[-2]
    G = K @ K.transpose(-1, -2) + lam * torch.eye(k, dtype=K.dtype, device=K.device)
    return torch.linalg.solve(G, K @ Q.transpose(-1, -2)).transpose(-1, -2)  # Q K^T G^-1 (G symmetric)


# --------------------------------------------------------------------------- position features


def unified_pos(coords: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, ref: int = 8) -> torch.Tensor:
    """Distances from every point to the nodes of a ``ref``^d reference grid spanning the training box
    [lo, hi] (Transolver's unified_pos): (n, ref^d)."""
    d = coords.shape[1]
    axes = [torch.linspace(float(lo[i]), float(hi[i]), ref, dtype=coords.dtype, device=coords.device)
            for i in range(d)]
    refs = torch.stack([m.reshape(-1) for m in torch.meshgrid(*axes, indexing="ij")], dim=1)  # (ref^d, d)
    return torch.cdist(coords, refs)


def periodic_pos(coords: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, harmonics: int = 4) -> torch.Tensor:
    """[our addition] sin(2 pi j t) and cos(2 pi j t), j = 1 .. ``harmonics``, of each coordinate t scaled to
    [0, 1) by the box [lo, hi]: (n, 2 * harmonics * d). On a periodic grid (points i / s) these features, and
    with them every point-wise quantity of the net, are periodic, so the uniform sum over the points in step 3
    is the trapezoid rule of a periodic integrand (spectrally accurate). Distances (``unified``) or raw
    coordinates jump between t -> 1 and t = 0, which leaves the uniform sum a first-order (left Riemann) rule."""
    t = (coords - lo.to(coords)) / (hi.to(coords) - lo.to(coords)).clamp_min(1e-12)
    j = torch.arange(1, harmonics + 1, dtype=coords.dtype, device=coords.device)
    ang = 2 * math.pi * t[:, :, None] * j  # (n, d, harmonics)
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1).reshape(coords.shape[0], -1)


def position_features(pos: str, coords: torch.Tensor, lo, hi) -> torch.Tensor:
    """The position features of step 7: ``unified``, ``periodic`` or the raw ``coords``."""
    if pos == "unified":
        return unified_pos(coords, lo, hi)
    if pos == "periodic":
        return periodic_pos(coords, lo, hi)
    return coords


def position_dim(pos: str, dim: int) -> int:
    return {"unified": 8 ** dim, "periodic": 8 * dim}.get(pos, dim)


def fourier_basis(coords: torch.Tensor, lo, hi, k: int) -> torch.Tensor:
    """[reconstructed] k fixed cosine bases prod_i sqrt(2 - [m_i = 0]) cos(pi m_i t_i) of the coordinates
    scaled to [0, 1] by the training box, lowest |m| first (the fixed-basis ablation): (n, k)."""
    d = coords.shape[1]
    t = (coords - lo.to(coords)) / (hi.to(coords) - lo.to(coords)).clamp_min(1e-12)
    side = int(math.ceil(k ** (1.0 / d))) + 1
    grids = torch.meshgrid(*[torch.arange(side)] * d, indexing="ij")
    ms = torch.stack([g.reshape(-1) for g in grids], 1)
    order = sorted(range(ms.shape[0]), key=lambda i: (int((ms[i] ** 2).sum()), ms[i].tolist()))
    ms = ms[order[:k]].to(coords)
    scale = torch.where(ms == 0, torch.ones_like(ms), torch.full_like(ms, math.sqrt(2.0)))
    phi = torch.cos(math.pi * t[:, None, :] * ms[None]) * scale[None]
    return phi.prod(-1)


# --------------------------------------------------------------------------- the layer


class BasisProjection(nn.Module):
    """Step 2: P_x, P_f and the soft bases W = softmax(Lin(x_mid) / tau) over k (one per block, or one
    shared by all blocks in the ``shared`` variant)."""

    def __init__(self, width: int, heads: int, bases: int, conv: bool = False):
        super().__init__()
        self.heads, self.dh, self.conv = heads, width // heads, conv
        if conv:
            self.px = nn.Conv2d(width, width, 3, padding=1)
            self.pf = nn.Conv2d(width, width, 3, padding=1)
        else:
            self.px = nn.Linear(width, width)
            self.pf = nn.Linear(width, width)
        self.lin = nn.Linear(self.dh, bases)
        nn.init.orthogonal_(self.lin.weight)
        self.tau = nn.Parameter(torch.full((1, heads, 1, 1), 0.5))

    def _project(self, layer, u, grid):
        if not self.conv:
            return layer(u)
        B, n, C = u.shape
        img = u.transpose(1, 2).reshape(B, C, *grid)
        return layer(img).reshape(B, C, n).transpose(1, 2)

    def split(self, t):
        B, n, C = t.shape
        return t.reshape(B, n, self.heads, self.dh).transpose(1, 2)  # (B, H, n, d_h)

    def features(self, u, grid):
        return self.split(self._project(self.pf, u, grid))

    def forward(self, u, grid=None):
        x_mid = self.split(self._project(self.px, u, grid))
        f_mid = self.features(u, grid)
        tau = self.tau.clamp(TAU_MIN, TAU_MAX)
        W = torch.softmax(self.lin(x_mid) / tau, dim=-1)  # over the k bases: rows sum to 1
        return W, f_mid


def basis_transform(W: torch.Tensor, f: torch.Tensor, q: torch.Tensor | None = None) -> torch.Tensor:
    """Step 3: T = diag(1 / (sum_n W + 1e-5)) W^T f, batched over (B, H): (B, H, k, d_h). ``q`` (n,): point
    weights of a quadrature (:func:`quadrature_weights`), each point's row of W scaled by its weight; None
    is the paper's uniform sum."""
    W = weigh_points(W, q)
    T = torch.einsum("bhnk,bhnd->bhkd", W, f)
    return T / (W.sum(dim=2)[..., None] + 1e-5)


def weigh_points(W: torch.Tensor, q: torch.Tensor | None) -> torch.Tensor:
    """Each point's row of W (B, H, n, k) scaled by its quadrature weight ``q`` (n,); None leaves W as is."""
    return W if q is None else W * q[:, None].to(W)


def quadrature_weights(grid, rule: str) -> torch.Tensor | None:
    """[our addition] Point weights for T: None (uniform) for ``uniform`` or a point set; for
    ``trapezoid`` on a node grid (boundary nodes included, as ``linspace(0, 1, s)``), the trapezoid rule's
    weights 1/2 at the end nodes of each axis and 1 inside, multiplied over the axes, scaled to mean 1 so
    that the 1e-5 of step 3 keeps its size. With uniform weights the edge nodes' share of T shrinks as the
    grid is refined (about 4/s of the points on an s x s grid), which a trained model notices."""
    if rule == "uniform" or grid is None:
        return None
    axes = []
    for s in grid:
        w = torch.ones(int(s))
        if s > 1:
            w[0] = w[-1] = 0.5
        axes.append(w)
    q = axes[0]
    for w in axes[1:]:
        q = torch.outer(q, w).reshape(-1)
    return q / q.mean()


class FuncAttnBlock(nn.Module):
    """One block: the layer (``attention`` = ``funcattn`` or ``softmax`` for Transolver), then LN -> MLP."""

    def __init__(self, width, heads, bases, mlp_ratio=1.0, attention="funcattn", conv=False, basis="learned",
                 inverse=True, alpha_init=1e-3, shared: BasisProjection | None = None):
        super().__init__()
        self.heads, self.dh = heads, width // heads
        self.attention, self.basis, self.inverse = attention, basis, inverse
        self.ln1 = nn.LayerNorm(width)
        self._shared = shared is not None
        self.proj = shared if shared is not None else BasisProjection(width, heads, bases, conv)
        self.wq = nn.Linear(self.dh, self.dh, bias=False)
        self.wk = nn.Linear(self.dh, self.dh, bias=False)
        self.wv = nn.Linear(self.dh, self.dh, bias=False)
        self.a = nn.Parameter(torch.full((1, heads, 1, 1), float(alpha_init)))
        self.out = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        hidden = max(1, int(round(width * mlp_ratio)))
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width))

    def mix(self, Q, K, V):
        """Step 5 (or Transolver's softmax over slice tokens)."""
        if self.attention == "softmax":
            A = torch.softmax(Q @ K.transpose(-1, -2) / math.sqrt(self.dh), dim=-1)
            return A @ V
        return functional_map(Q, K, V, self.a)

    def forward(self, x, grid=None, phi=None, q=None):
        B, n, C = x.shape
        u = self.ln1(x)
        if self.basis == "fourier":
            W = phi[None, None].expand(B, self.heads, *phi.shape)
            f = self.proj.features(u, grid)
            T = torch.einsum("bhnk,bhnd->bhkd", weigh_points(W, q), f) / n  # quadrature of the fixed bases [reconstructed]
        else:
            W, f = self.proj(u, grid)
            T = basis_transform(W, f, q)
        O = self.mix(self.wq(T), self.wk(T), self.wv(T))  # (B, H, k, d_h)
        if self.inverse:
            y = torch.einsum("bhnk,bhkd->bhnd", W, O)
        else:  # [reconstructed] ablation: no inverse transform, the bases' mean broadcast to the points
            y = O.mean(dim=2, keepdim=True).expand(B, self.heads, n, self.dh)
        y = y.transpose(1, 2).reshape(B, n, C)
        x = x + self.out(y)
        return x + self.mlp(self.ln2(x))


class FuncAttnNet(nn.Module):
    """Step 7: an input MLP on [position features, input field] -> C, N blocks, LN -> Linear."""

    def __init__(self, cin: int, cout: int, dim: int, width=64, heads=4, layers=4, bases=32, mlp_ratio=1.0,
                 attention="funcattn", conv=False, pos="unified", shared=False, basis="learned", inverse=True,
                 alpha_init=1e-3, quadrature="uniform"):
        super().__init__()
        self.pos, self.basis, self.bases, self.quadrature = pos, basis, bases, quadrature
        pdim = position_dim(pos, dim)
        self.pre = nn.Sequential(nn.Linear(pdim + cin, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
        sh = BasisProjection(width, heads, bases, conv) if shared else None
        self.shared_proj = sh
        self.blocks = nn.ModuleList([
            FuncAttnBlock(width, heads, bases, mlp_ratio, attention, conv, basis, inverse, alpha_init, shared=sh)
            for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, cout)

    def forward(self, x, coords, lo, hi, grid=None):
        B = x.shape[0]
        feats = position_features(self.pos, coords, lo, hi)
        h = self.pre(torch.cat([feats[None].expand(B, *feats.shape).to(x.dtype), x], dim=-1))
        phi = fourier_basis(coords, lo, hi, self.bases).to(x.dtype) if self.basis == "fourier" else None
        q = quadrature_weights(grid, self.quadrature)
        q = None if q is None else q.to(device=x.device, dtype=x.dtype)
        for blk in self.blocks:
            h = blk(h, grid, phi, q)
        return self.head(self.ln(h))


# --------------------------------------------------------------------------- FNO baseline


class SpectralConv(nn.Module):
    """A Fourier layer on a 1-D or 2-D grid: the lowest ``modes`` frequencies (per axis; both signs on
    the first axis in 2-D) multiplied by learned complex matrices (stored as real pairs)."""

    def __init__(self, width: int, modes: int, dim: int):
        super().__init__()
        self.modes, self.dim = modes, dim
        scale = 1.0 / (width * width)
        blocks = 1 if dim == 1 else 2
        shape = (blocks, width, width, *([modes] * dim), 2)
        self.weight = nn.Parameter(scale * torch.rand(shape))

    def forward(self, x):  # x: (B, C, *grid)
        w = torch.view_as_complex(self.weight)
        m = self.modes
        if self.dim == 1:
            L = x.shape[-1]
            xf = torch.fft.rfft(x)
            out = torch.zeros(x.shape[0], w.shape[2], xf.shape[-1], dtype=xf.dtype, device=x.device)
            mm = min(m, xf.shape[-1])
            out[..., :mm] = torch.einsum("bix,iox->box", xf[..., :mm], w[0, ..., :mm])
            return torch.fft.irfft(out, n=L)
        H, Wd = x.shape[-2:]
        xf = torch.fft.rfft2(x)
        out = torch.zeros(x.shape[0], w.shape[2], H, xf.shape[-1], dtype=xf.dtype, device=x.device)
        m1, m2 = min(m, H // 2), min(m, xf.shape[-1])
        out[:, :, :m1, :m2] = torch.einsum("bixy,ioxy->boxy", xf[:, :, :m1, :m2], w[0, :, :, :m1, :m2])
        out[:, :, H - m1:, :m2] = torch.einsum("bixy,ioxy->boxy", xf[:, :, H - m1:, :m2], w[1, :, :, :m1, :m2])
        return torch.fft.irfft2(out, s=(H, Wd))


class FNONet(nn.Module):
    """Our FNO (Li et al. 2021): lift [field, coordinates] -> width, ``layers`` x (spectral conv + 1x1
    conv, GELU between), project width -> 128 -> cout. Grids only (1-D or 2-D)."""

    def __init__(self, cin: int, cout: int, dim: int, width=20, layers=4, modes=8):
        super().__init__()
        self.dim = dim
        self.lift = nn.Linear(cin + dim, width)
        self.spectral = nn.ModuleList([SpectralConv(width, modes, dim) for _ in range(layers)])
        conv = nn.Conv1d if dim == 1 else nn.Conv2d
        self.skip = nn.ModuleList([conv(width, width, 1) for _ in range(layers)])
        self.proj = nn.Sequential(nn.Linear(width, 128), nn.GELU(), nn.Linear(128, cout))

    def forward(self, x, coords, lo, hi, grid=None):
        if grid is None:
            raise UsageError("fno needs a regular grid")
        B, n, _ = x.shape
        h = self.lift(torch.cat([x, coords[None].expand(B, *coords.shape).to(x.dtype)], dim=-1))
        h = h.transpose(1, 2).reshape(B, -1, *grid)
        last = len(self.spectral) - 1
        for i, (sp, sk) in enumerate(zip(self.spectral, self.skip)):
            h = sp(h) + sk(h)
            if i < last:
                h = F.gelu(h)
        h = h.reshape(B, h.shape[1], n).transpose(1, 2)
        return self.proj(h)


def count_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def build_net(cfg: dict, cin: int, cout: int, dim: int) -> nn.Module:
    """The network of a model config (a :class:`~icmlkit.lib.train_operator.config.ModelConfig` as a dict,
    with ``fno_width`` resolved for FNO)."""
    model = cfg["model"]
    if model == "fno":
        return FNONet(cin, cout, dim, width=int(cfg["fno_width"]), layers=cfg["layers"], modes=cfg["modes"])
    alpha = cfg.get("alpha_init")
    if alpha is None:
        alpha = 0.0 if model == "funcattn-conv" else 1e-3
    return FuncAttnNet(cin, cout, dim, width=cfg["width"], heads=cfg["heads"], layers=cfg["layers"],
                       bases=cfg["bases"], mlp_ratio=cfg["mlp_ratio"],
                       attention="softmax" if model == "transolver" else "funcattn",
                       conv=model == "funcattn-conv", pos=cfg["pos"], shared=cfg["shared"], basis=cfg["basis"],
                       inverse=cfg["inverse"], alpha_init=alpha, quadrature=cfg.get("quadrature", "uniform"))


def matched_fno_width(cfg: dict, cin: int, cout: int, dim: int) -> int:
    """The FNO width whose parameter count is closest to the FuncAttn net of the same config."""
    target = count_params(build_net({**cfg, "model": "funcattn"}, cin, cout, dim))
    best, best_gap = 1, None
    for w in range(1, 257):
        n = count_params(FNONet(cin, cout, dim, width=w, layers=cfg["layers"], modes=cfg["modes"]))
        gap = abs(n - target)
        if best_gap is None or gap < best_gap:
            best, best_gap = w, gap
        if n > target:
            break
    return best
