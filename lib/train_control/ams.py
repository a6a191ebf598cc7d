"""Action Manifold Smoothing (AMS): orthogonally sampled, antithetic neighbourhood-averaged TD targets.

Only the abstract of Lin (ICML 2026) is known: "AMS replaces the point-wise TD target with an
orthogonally-sampled neighbourhood average". Everything below is **[reconstructed]** from it and
from TD3/SAC practice (method sheet train-control.md):

1. U = QR(G)[:, :K], G ~ N(0, I) of size d x K, the columns' signs fixed by sign(diag R) (so U is a
   Haar-distributed orthonormal frame); K > d stacks ceil(K/d) independent orthonormal d x d blocks.
   Redrawn per batch element (``per="element"``) or once per batch (``per="batch"``).
   ``kind="iid"``: i.i.d. unit-norm Gaussian directions instead (the ablation).
2. Antithetic neighbours a'_k+- = clip(a' +- rho u_k, -1, 1): the clip comes after the shift.
3. y = r + gamma (1 - done) [w0 min_i Q_i(s', a') + (1 - w0) (1/2K) sum_{k,+-} min_i Q_i(s', a'_k+-)]
   (SAC: minus alpha log pi(a'|s') once), evaluated as one batched (B * 2K)-row forward under
   ``torch.no_grad()``.

Why it smooths: for a quadratic Q, (1/2K) sum_+- Q(a +- rho u_k) = Q(a) + (rho^2 / 2K) sum_k u_k^T H u_k
exactly (the gradient terms cancel); with K = d the sum is tr(H) (the action Laplacian).
"""
from __future__ import annotations

import math

import torch

from icmlkit.lib.core.errors import UsageError


def orthonormal_directions(batch: int, d: int, k: int, generator: torch.Generator, per: str = "element",
                           kind: str = "orthogonal", dtype=torch.float32, device=None) -> torch.Tensor:
    """Directions U of shape (batch, d, k): columns orthonormal within each block of d (kind
    ``orthogonal``), or i.i.d. unit vectors (kind ``iid``). ``per="batch"`` draws one U for all rows.

    The Gaussian draws are made on the CPU from ``generator`` in float64 (device independent), then
    moved to ``device``/``dtype``."""
    if k < 1:
        raise UsageError("K must be >= 1")
    n = batch if per == "element" else 1
    if kind == "iid":
        g = torch.randn(n, d, k, generator=generator, dtype=torch.float64)
        u = g / g.norm(dim=1, keepdim=True).clamp_min(1e-12)
    elif kind == "orthogonal":
        blocks = math.ceil(k / d)
        width = min(k, d)
        g = torch.randn(n * blocks, d, width, generator=generator, dtype=torch.float64)
        q, r = torch.linalg.qr(g)
        sign = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))
        sign = torch.where(sign == 0, torch.ones_like(sign), sign)
        q = q * sign.unsqueeze(-2)
        u = q.reshape(n, blocks, d, width).permute(0, 2, 1, 3).reshape(n, d, blocks * width)[..., :k]
    else:
        raise UsageError(f"unknown direction kind {kind!r}")
    if per != "element":
        u = u.expand(batch, d, k)
    return u.to(device=device, dtype=dtype)


def directions_used(k: int, d: int, kind: str = "orthogonal") -> int:
    """The K actually drawn for d-dimensional actions. Orthogonal directions in d = 1 are all +-1, so
    every antithetic pair is the same two neighbours a' +- rho and K > 1 only repeats it: capped at 1 (the same value
    from 2 forwards instead of 2K). For d >= 2, K > d stacks independent orthonormal blocks, whose
    neighbours are distinct points: kept."""
    return 1 if kind == "orthogonal" and d == 1 else int(k)


def k_note(flag: str, k: int, d: int, kind: str = "orthogonal") -> str | None:
    """The one-line warning when :func:`directions_used` caps ``flag``'s K, else None."""
    if directions_used(k, d, kind) >= k:
        return None
    return (f"{flag} {k} > action dimension {d}: orthogonal directions in 1-D are +-1, so the 2K neighbours are "
            f"a' +- rho repeated; using K = 1 (2 neighbours, the same value)")


def td3_noise_norm(d: int, std: float = 0.2, clip: float = 0.5, samples: int = 200_000, seed: int = 0) -> float:
    """E ||eps|| of TD3's target noise eps = clip(N(0, std^2 I_d), -clip, clip) in d dimensions, by
    Monte Carlo over ``samples`` draws of a fixed generator (standard error ~ 1e-4 at the defaults;
    ~0.82 for d = 17): the AMS radius rho whose neighbours sit as far from a' as TD3's perturbed target
    action does on average (the "rho matched to TD3's perturbation norm" of the mechanism study)."""
    if d < 1 or samples < 1:
        raise UsageError("d and samples must be >= 1")
    g = torch.Generator().manual_seed(seed)
    tot, left = 0.0, samples
    while left > 0:
        n = min(left, 50_000)
        eps = (std * torch.randn(n, d, generator=g, dtype=torch.float64)).clamp(-clip, clip)
        tot += float(eps.norm(dim=1).sum())
        left -= n
    return tot / samples


def neighbours(a: torch.Tensor, u: torch.Tensor, rho: float, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
    """Antithetic neighbours of ``a`` (B, d) along ``u`` (B, d, K): (B, 2K, d), clipped after the shift.

    Order: a + rho u_1, ..., a + rho u_K, a - rho u_1, ..., a - rho u_K."""
    step = rho * u.transpose(1, 2)  # (B, K, d)
    nb = torch.cat([a.unsqueeze(1) + step, a.unsqueeze(1) - step], dim=1)
    return nb.clamp(low, high)


def neighbourhood_mean(q_fn, s: torch.Tensor, a: torch.Tensor, u: torch.Tensor, rho: float,
                       center_weight: float = 0.0) -> torch.Tensor:
    """w0 q(s, a) + (1 - w0) mean over the 2K antithetic neighbours of q(s, a_k+-), as ONE batched
    forward of B * 2K (+ B with a centre weight) rows; ``q_fn(s, a) -> (N,)``. Returns (B,)."""
    b, d = a.shape
    nb = neighbours(a, u, rho)
    m = nb.shape[1]
    ss = s.unsqueeze(1).expand(b, m, s.shape[-1])
    if center_weight > 0:
        ss = torch.cat([ss, s.unsqueeze(1)], dim=1)
        nb = torch.cat([nb, a.unsqueeze(1)], dim=1)
    q = q_fn(ss.reshape(-1, s.shape[-1]), nb.reshape(-1, d)).reshape(b, -1)
    mean_nb = q[:, :m].mean(dim=1)
    if center_weight > 0:
        return center_weight * q[:, m] + (1.0 - center_weight) * mean_nb
    return mean_nb
