"""A differentiable Gaussian-splatting rasterizer in pure PyTorch, twice differentiable.

Steps (all vectorised over views, Gaussians and pixels):

1. **EWA projection** (Zwicker et al.; 3DGS eq. 5): camera coordinates ``u = R mu + t``; the
   Jacobian J of the perspective map at u (with 3DGS's 1.3 x tan(fov/2) guard band on x/z, y/z);
   ``Sigma_2D = J R Sigma R^T J^T + 0.3 I`` (the low-pass filter of 3DGS); the conic is its inverse,
   with the determinant's non-negative part clamped at 0 against floating-point cancellation.
2. **Colour** from spherical harmonics up to degree 3 along the camera-to-mean direction.
3. **Depth sort** per view (the order is piecewise constant, so it is computed detached).
4. **Per-pixel weights** in ``[tiles, K, pixels]`` tensors: ``alpha = 0.99 * o * exp(-q/2) * w(q)``,
   q the Mahalanobis distance squared. ``w`` is a C2 smootherstep taper from 1 at q = 4 (2 sigma) to
   0 at q = 9 (3 sigma) that replaces 3DGS's hard ``alpha < 1/255`` skip, so the image, its gradient
   and its Hessian are continuous and culling at 3 sigma is exact. The factor 0.99 replaces the clamp
   of alpha to 0.99 (smooth).
5. **Alpha compositing** with a smooth transmittance ``T_k = exp(sum_{j<k} log(1 - alpha_j))``
   (no ``cumprod``, whose double backward is fragile through zeros); the background gets the final T.

Tiling: with ``tile_size`` set, each (view, tile) lists only the Gaussians whose 3-sigma box touches
it (in depth order, padded to the longest list); without it, every visible Gaussian is composited
on chunks of ``chunk`` pixels (the dense reference). Both give the same image up to rounding. The
lists are built without gradient; everything that depends on the parameters stays in the graph, so
``torch.autograd.grad(..., create_graph=True)`` gives Hessian-vector products (double backward).
"""
from __future__ import annotations

import math

import torch
import torch.utils.checkpoint

from icmlkit.lib.train_3dgs.camera import Cameras
from icmlkit.lib.train_3dgs.model import Gaussians, covariance
from icmlkit.lib.train_3dgs.sh import sh_to_rgb

Q_TAPER_START = 4.0   # Mahalanobis^2 where the taper starts (2 sigma)
Q_CUTOFF = 9.0        # ... and where it reaches 0 (3 sigma): the footprint radius is 3 sigma
ALPHA_MAX = 0.99
NEAR = 0.01
LOWPASS = 0.3


def smootherstep_taper(q: torch.Tensor) -> torch.Tensor:
    """1 for q <= 4, 0 for q >= 9, C2 in between (6t^5 - 15t^4 + 10t^3 of t = (9-q)/5)."""
    t = ((Q_CUTOFF - q) / (Q_CUTOFF - Q_TAPER_START)).clamp(0.0, 1.0)
    return t * t * t * (t * (6 * t - 15) + 10)


def project(g: Gaussians, cams: Cameras):
    """EWA projection of every Gaussian into every view.

    Returns means2d [V,N,2], conics [V,N,3] (a, b, c of the inverse 2-D covariance), depths [V,N],
    radii [V,N] (3-sigma footprint in pixels, detached), colours [V,N,3] and visible [V,N] (bool).
    """
    R, t = cams.R, cams.t
    u = torch.einsum("vij,nj->vni", R, g.means) + t[:, None, :]  # [V,N,3]
    z = u[..., 2]
    visible = (z > NEAR).detach()
    zs = torch.where(visible, z, torch.ones_like(z))  # finite values for the hidden ones
    fx, fy = cams.fx[:, None], cams.fy[:, None]
    limx = 1.3 * (0.5 * cams.width / fx)
    limy = 1.3 * (0.5 * cams.height / fy)
    xz = torch.maximum(torch.minimum(u[..., 0] / zs, limx), -limx)
    yz = torch.maximum(torch.minimum(u[..., 1] / zs, limy), -limy)
    zero = torch.zeros_like(zs)
    J = torch.stack([fx / zs, zero, -fx * xz / zs, zero, fy / zs, -fy * yz / zs], -1).reshape(*zs.shape, 2, 3)
    Sigma = covariance(g.log_scales, g.quats)  # [N,3,3]
    T = J @ R[:, None]  # [V,N,2,3]
    cov2d = T @ Sigma[None] @ T.transpose(-1, -2)
    A, b, C = cov2d[..., 0, 0], cov2d[..., 0, 1], cov2d[..., 1, 1]
    a, c = A + LOWPASS, C + LOWPASS
    # det = a c - b^2 written so that it stays >= the low-pass part when A C - b^2 (>= 0 in exact
    # arithmetic) cancels to a negative value in floating point (very large or thin Gaussians)
    det = (A * C - b * b).clamp_min(0.0) + LOWPASS * (A + C) + LOWPASS * LOWPASS
    conics = torch.stack([c / det, -b / det, a / det], -1)
    means2d = torch.stack([fx * u[..., 0] / zs + cams.cx[:, None], fy * u[..., 1] / zs + cams.cy[:, None]], -1)
    with torch.no_grad():
        mid = 0.5 * (a + c)
        lam = mid + torch.sqrt((mid * mid - det).clamp_min(0.1))
        radii = math.sqrt(Q_CUTOFF) * torch.sqrt(lam)
    dirs = g.means[None] - cams.centers[:, None, :]
    dirs = dirs / dirs.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    colors = sh_to_rgb(g.sh, dirs, g.sh_degree)
    return means2d, conics, z, radii, colors, visible


def _tile_lists(means2d, radii, depth, visible, width, height, tw, th, culling: bool):
    """Per (view, tile): indices of the Gaussians to composite, in depth order, padded.

    Returns idx [V,T,K] (long), valid [V,T,K] (bool). Built without gradient from the list of
    (Gaussian, tile) pairs each 3-sigma box touches (as the CUDA rasterizers do: one sort of the
    pairs by (view, tile, depth rank)), so memory is O(pairs + V T K), never O(V T N).
    """
    V, N = depth.shape
    dev = depth.device
    ntx, nty = -(-width // tw), -(-height // th)
    T = ntx * nty
    with torch.no_grad():
        key = torch.where(visible, depth, torch.full_like(depth, float("inf")))
        order = torch.argsort(key, dim=1, stable=True)  # [V,N] front to back
        rank = torch.empty_like(order)
        rank.scatter_(1, order, torch.arange(N, device=dev).expand(V, N).contiguous())
        if culling:
            x, y = means2d[..., 0].detach(), means2d[..., 1].detach()
            x0 = torch.floor((x - radii) / tw).clamp(0, ntx - 1).long()
            x1 = torch.floor((x + radii) / tw).clamp(-1, ntx - 1).long()
            y0 = torch.floor((y - radii) / th).clamp(0, nty - 1).long()
            y1 = torch.floor((y + radii) / th).clamp(-1, nty - 1).long()
            onscreen = visible & (x + radii >= 0) & (x - radii <= width) & (y + radii >= 0) & (y - radii <= height)
        else:
            x0 = y0 = torch.zeros(V, N, dtype=torch.long, device=dev)
            x1, y1 = torch.full_like(x0, ntx - 1), torch.full_like(x0, nty - 1)
            onscreen = visible
        nx = (x1 - x0 + 1).clamp_min(0)
        ny = (y1 - y0 + 1).clamp_min(0)
        cnt = (nx * ny * onscreen).reshape(-1)  # tiles per (view, Gaussian)
        total = int(cnt.sum())
        src = torch.repeat_interleave(torch.arange(V * N, device=dev), cnt)  # (view, Gaussian) of each pair
        local = torch.arange(total, device=dev) - (torch.cumsum(cnt, 0) - cnt)[src]
        nxs = nx.reshape(-1)[src]
        tile = (y0.reshape(-1)[src] + local // nxs.clamp_min(1)) * ntx + x0.reshape(-1)[src] + local % nxs.clamp_min(1)
        view = src // N
        group = view * T + tile
        srt = torch.argsort(group * N + rank.reshape(-1)[src])  # by (view, tile), then depth
        group, gauss = group[srt], (src % N)[srt]
        counts = torch.bincount(group, minlength=V * T)
        K = max(int(counts.max()) if counts.numel() else 0, 1)
        pos = torch.arange(total, device=dev) - (torch.cumsum(counts, 0) - counts)[group]
        idx = torch.zeros(V * T, K, dtype=torch.long, device=dev)
        valid = torch.zeros(V * T, K, dtype=torch.bool, device=dev)
        idx[group, pos] = gauss
        valid[group, pos] = True
    return idx.reshape(V, T, K), valid.reshape(V, T, K)


def _composite(idx, valid, vb, px, py, means2d, conics, colors, op_all):
    """Alpha-composite B tiles: idx/valid [B,K], vb [B] view of each tile, px/py [B,P] pixel
    centres. Returns rgb [B,P,3] (without background) and the final transmittance [B,P]."""
    vi = vb[:, None].expand_as(idx)
    mu = means2d[vi, idx]   # [B,K,2]
    con = conics[vi, idx]   # [B,K,3]
    col = colors[vi, idx]   # [B,K,3]
    op = op_all[idx] * (ALPHA_MAX * valid)  # [B,K]; padding entries get opacity 0
    dx = px[:, None, :] - mu[..., 0:1]  # [B,K,P]
    dy = py[:, None, :] - mu[..., 1:2]
    q = (con[..., 0:1] * dx + (2 * con[..., 1:2]) * dy) * dx + con[..., 2:3] * (dy * dy)
    alpha = op[..., None] * (torch.exp(-0.5 * q) * smootherstep_taper(q))
    log1m = torch.log1p(-alpha)
    cum = torch.cumsum(log1m, dim=1)
    weight = alpha * torch.exp(cum - log1m)  # alpha_k * T_k with T_k = prod_{j<k} (1 - alpha_j)
    rgb = torch.einsum("bkp,bkc->bpc", weight, col)
    return rgb, torch.exp(cum[:, -1, :])


def render(g: Gaussians, cams: Cameras, background=None, tile_size: int | None = 4, chunk: int = 4096,
           return_alpha: bool = False, buckets: int = 8, max_elems: int = 1 << 22, recompute: bool = False):
    """Render V views: images [V, H, W, 3] (and alpha = 1 - T_final [V, H, W] when asked).

    ``tile_size``: tile culling with square tiles of that many pixels (None: dense, every visible
    Gaussian on chunks of about ``chunk`` pixels). ``background``: RGB (default black). Tiles are
    composited in ``buckets`` groups of similar list length, each in pieces of at most ``max_elems``
    (Gaussian, pixel) pairs, which bounds the transient memory of the [tiles, K, pixels] tensors.
    ``recompute``: each piece is recomputed in the backward pass (non-reentrant activation
    checkpointing, which keeps double backward), so the training graph keeps only the pieces'
    inputs instead of their [tiles, K, pixels] intermediates: its memory no longer grows with the
    image size times the list length (an HVP still holds one piece's graph per piece).
    """
    V, H, W = len(cams), cams.height, cams.width
    dev, dt = g.means.device, g.means.dtype
    means2d, conics, depth, radii, colors, visible = project(g, cams)
    if tile_size:
        tw = th = int(tile_size)
    else:
        tw, th = W, max(1, min(H, chunk // max(W, 1)))
    idx, valid = _tile_lists(means2d, radii, depth, visible, W, H, tw, th, culling=bool(tile_size))
    ntx, nty = -(-W // tw), -(-H // th)
    T = ntx * nty
    # pixel centres of every tile [T, P, 2]
    ly, lx = torch.meshgrid(torch.arange(th, device=dev, dtype=dt), torch.arange(tw, device=dev, dtype=dt),
                            indexing="ij")
    ox = (torch.arange(ntx, device=dev, dtype=dt) * tw).repeat(nty)
    oy = (torch.arange(nty, device=dev, dtype=dt) * th).repeat_interleave(ntx)
    px = ox[:, None] + lx.reshape(1, -1) + 0.5
    py = oy[:, None] + ly.reshape(1, -1) + 0.5
    # flatten (view, tile) and composite in buckets of similar list length (less padding)
    B = V * T
    idx, valid = idx.reshape(B, -1), valid.reshape(B, -1)
    vb = torch.arange(V, device=dev).repeat_interleave(T)
    tb = torch.arange(T, device=dev).repeat(V)
    counts = valid.sum(1)
    perm = torch.argsort(counts, stable=True)
    op_all = torch.sigmoid(g.opacity_logits)
    bg = torch.as_tensor(background, device=dev, dtype=dt) if background is not None else None
    P = tw * th
    pieces_rgb, pieces_t = [], []
    nb = max(1, min(int(buckets), B))
    bounds = [B * i // nb for i in range(nb + 1)]
    for i in range(nb):
        sel = perm[bounds[i]:bounds[i + 1]]
        if sel.numel() == 0:
            continue
        K = max(int(counts[sel].max()), 1)
        step = max(1, int(max_elems) // max(K * P, 1))
        for j in range(0, sel.numel(), step):
            s = sel[j:j + step]
            args = (idx[s, :K], valid[s, :K], vb[s], px[tb[s]], py[tb[s]], means2d, conics, colors, op_all)
            if recompute:
                rgb_s, tf_s = torch.utils.checkpoint.checkpoint(_composite, *args, use_reentrant=False)
            else:
                rgb_s, tf_s = _composite(*args)
            pieces_rgb.append(rgb_s)
            pieces_t.append(tf_s)
    inv = torch.argsort(perm)
    rgb = torch.cat(pieces_rgb, 0)[inv].reshape(V, T, P, 3)
    t_final = torch.cat(pieces_t, 0)[inv].reshape(V, T, P)
    if bg is not None:
        rgb = rgb + t_final[..., None] * bg
    img = rgb.reshape(V, nty, ntx, th, tw, 3).permute(0, 1, 3, 2, 4, 5).reshape(V, nty * th, ntx * tw, 3)
    img = img[:, :H, :W]
    if return_alpha:
        a = (1 - t_final).reshape(V, nty, ntx, th, tw).permute(0, 1, 3, 2, 4).reshape(V, nty * th, ntx * tw)
        return img, a[:, :H, :W]
    return img
