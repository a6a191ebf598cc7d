"""Smooth top-k selection with exact cardinality Σm = k, batched over rows of scores s (B, n).

- ``capped-simplex`` (default): m = σ((s - τ)/ε) with the threshold τ found by bisection so that
  Σm = k (the entropic projection onto the capped simplex {0 <= m <= 1, 1ᵀm = k}). Gradient by
  implicit differentiation: ∂m/∂s = (1/ε)(D - d dᵀ/1ᵀd), d = m(1-m), D = diag(d).
- ``sinkhorn``: entropic optimal transport of the n scores onto two anchors with marginals
  (n-k, k)/n (Xie et al. 2020), log-domain Sinkhorn ending on the column update so Σm = k;
  gradient by autograd through the iterations.
- ``perturbed``: m = E[hardtopk(s + εZ)], Z ~ N(0, I) (Berthet et al. 2020), estimated with a fixed
  number of samples (every sample has exactly k ones, so Σm = k); gradient by the perturbed
  estimator (1/ε) E[⟨g, hardtopk(s+εZ)⟩ Z].
- ``hard_topk``: the 0/1 indicator of the k largest scores (ties broken by the lower index), used
  at test time.

Which smooth operator the paper uses is not known: the choice is RECONSTRUCTED and exposed as
``--topk``. All float64.
"""
from __future__ import annotations

from icmlkit.lib.core.errors import UsageError

TOPK_METHODS = ("capped-simplex", "sinkhorn", "perturbed")


def hard_topk(s, k: int):
    import torch

    order = torch.argsort(-s, dim=-1, stable=True)[..., :k]
    m = torch.zeros_like(s)
    return m.scatter(-1, order, 1.0)


def _threshold(s, k: int, eps: float, iters: int = 100):
    """τ with Σσ((s-τ)/ε) = k by bisection (float64), then two Newton polish steps."""
    import torch

    lo = s.min(-1, keepdim=True).values - 40 * eps
    hi = s.max(-1, keepdim=True).values + 40 * eps
    for _ in range(iters):
        mid = (lo + hi) / 2
        tot = torch.sigmoid((s - mid) / eps).sum(-1, keepdim=True)
        above = tot > k  # threshold too low
        lo = torch.where(above, mid, lo)
        hi = torch.where(above, hi, mid)
    tau = (lo + hi) / 2
    for _ in range(2):
        m = torch.sigmoid((s - tau) / eps)
        d = (m * (1 - m)).sum(-1, keepdim=True) / eps
        step = (m.sum(-1, keepdim=True) - k) / d.clamp_min(1e-300)
        tau = torch.where(d > 1e-200, tau + step, tau)
    return tau


class _CappedSimplexTopK:
    """Autograd function built lazily (torch imported only when used)."""

    fn = None

    @classmethod
    def get(cls):
        if cls.fn is None:
            import torch

            class F(torch.autograd.Function):
                @staticmethod
                def forward(ctx, s, k, eps):
                    with torch.no_grad():
                        tau = _threshold(s, k, eps)
                        m = torch.sigmoid((s - tau) / eps)
                    ctx.save_for_backward(m)
                    ctx.eps = eps
                    return m

                @staticmethod
                def backward(ctx, g):
                    (m,) = ctx.saved_tensors
                    d = m * (1 - m)
                    dsum = d.sum(-1, keepdim=True).clamp_min(1e-300)
                    grad = (d * g - d * (d * g).sum(-1, keepdim=True) / dsum) / ctx.eps
                    return grad, None, None

            cls.fn = F
        return cls.fn


def capped_simplex_topk(s, k: int, eps: float):
    """Soft top-k mask with Σm = k (to ~1e-12) and the implicit gradient; s (B, n) float64."""
    return _CappedSimplexTopK.get().apply(s, k, float(eps))


def sinkhorn_topk(s, k: int, eps: float, iters: int | None = None):
    """Entropic-OT soft top-k (Xie et al. 2020): scores standardised to [0, 1], anchors {0, 1},
    marginals a = 1/n (rows), b = ((n-k)/n, k/n) (columns); m = n·Γ[:, 1]. Σm = k exactly after
    the final column update. Iterations default to max(200, 5/ε) (capped at 20000): Sinkhorn
    slows down as ε falls."""
    import torch

    if iters is None:
        iters = int(min(20000, max(200, 5 / eps)))
    B, n = s.shape
    lo = s.min(-1, keepdim=True).values.detach()
    hi = s.max(-1, keepdim=True).values.detach()
    x = (s - lo) / (hi - lo).clamp_min(1e-12)
    anchors = torch.tensor([0.0, 1.0], dtype=s.dtype)
    C = (x[..., None] - anchors) ** 2                            # (B, n, 2)
    loga = torch.full((B, n), -torch.log(torch.tensor(float(n), dtype=s.dtype)))
    logb = torch.log(torch.tensor([(n - k) / n, k / n], dtype=s.dtype)).expand(B, 2)
    f = torch.zeros(B, n, dtype=s.dtype)
    g = torch.zeros(B, 2, dtype=s.dtype)
    K = -C / eps
    for _ in range(iters):
        f = loga - torch.logsumexp(K + g[:, None, :], dim=2)
        g = logb - torch.logsumexp(K + f[:, :, None], dim=1)
    logP = K + f[:, :, None] + g[:, None, :]
    return n * torch.exp(logP[..., 1])


def perturbed_topk(s, k: int, eps: float, samples: int = 200, generator=None):
    """Perturbed-optimiser soft top-k (Berthet et al. 2020) with Gaussian noise; Σm = k exactly."""
    import torch

    class P(torch.autograd.Function):
        @staticmethod
        def forward(ctx, s):
            Z = torch.randn((samples,) + tuple(s.shape), generator=generator, dtype=s.dtype)
            Y = hard_topk(s.detach()[None] + eps * Z, k)
            ctx.save_for_backward(Y, Z)
            return Y.mean(0)

        @staticmethod
        def backward(ctx, gout):
            Y, Z = ctx.saved_tensors
            inner = (Y * gout[None]).sum(-1, keepdim=True)       # (S, B, 1)
            return (inner * Z).mean(0) / eps

    return P.apply(s)


def soft_topk(s, k: int, eps: float, method: str = "capped-simplex", generator=None):
    if method == "capped-simplex":
        return capped_simplex_topk(s, k, eps)
    if method == "sinkhorn":
        return sinkhorn_topk(s, k, eps)
    if method == "perturbed":
        return perturbed_topk(s, k, eps, generator=generator)
    raise UsageError(f"unknown top-k method {method!r}; expected one of {TOPK_METHODS}")
