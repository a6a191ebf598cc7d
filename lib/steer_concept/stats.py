"""Statistics for affine concept steering: neutral mean and covariance, concept means, whitening.

MidSteer (Gaintseva et al., ICML 2026) and LEACE (Belrose et al., NeurIPS 2023) both work in the
coordinates whitened by the *neutral* covariance: W = Sigma^{-1/2}, W+ = Sigma^{1/2}. Everything here
is computed in float64 (the eigendecomposition of a 384 x 384 covariance in float32 loses the small
eigenvalues that whitening then amplifies).

- :func:`neutral_stats` -- mean mu0 and covariance Sigma of neutral activations (chunked, float64),
  optionally shrunk toward a scaled identity (a fixed coefficient, or Ledoit-Wolf's estimate).
- :func:`concept_mean` -- mu_s / mu_t, the mean activation of a concept's examples.
- :class:`Whitening` -- Sigma^{-1/2} and Sigma^{1/2} by ``eigh``; eigenvalues at or below the cut
  are dropped, i.e. both are pseudo-inverse square roots on the range of Sigma. The default cut is the
  official code's, torch.linalg.pinv's rule lambda_max * d * eps(float64); a number r (``--eig-threshold``,
  this project's former default 1e-10) cuts at r * max(1, lambda_max) instead.
  ``effective_rank`` says how many directions were kept.
"""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.core.errors import InputError

DEFAULT_EIG_THRESHOLD = None  # None: the official cut, torch.linalg.pinv's rule (lambda_max * d * eps)
OURS_EIG_THRESHOLD = 1e-10    # the former default: lambda <= 1e-10 * max(1, lambda_max) dropped


def eig_cut(evals, threshold: float | None = DEFAULT_EIG_THRESHOLD) -> float:
    """The eigenvalue at or below which a direction of Sigma is dropped. ``None``: the official
    MidSteer rule (core/math.py, MIT), torch.linalg.pinv's: largest * d * eps of the dtype (about
    3.6e-15 * largest for d = 16 in float64); a number r: r * max(1, largest)."""
    import torch

    top = float(evals.max())
    if threshold is None:
        return top * int(evals.shape[-1]) * torch.finfo(evals.dtype).eps
    return float(threshold) * max(1.0, top)


def _as_2d_float64(x, name: str):
    import numpy as np
    import torch

    if isinstance(x, np.ndarray):
        x = torch.from_numpy(np.ascontiguousarray(x))
    if not isinstance(x, torch.Tensor):
        raise InputError(f"expected an array, got {type(x).__name__}", name)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise InputError(f"expected a 2-D array (samples x features), got shape {tuple(x.shape)}", name)
    if x.shape[0] == 0:
        raise InputError("has no rows", name)
    if not (x.is_floating_point()):
        raise InputError(f"expected floating-point values, got {x.dtype}", name)
    x = x.to(torch.float64)
    if not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).any(dim=1).nonzero()[0, 0])
        raise InputError(f"row {bad} holds a NaN or infinite value", name)
    return x


@dataclass
class Stats:
    """Mean ``mean`` [d] and covariance ``cov`` [d, d] (float64) of ``n`` samples.

    ``shrinkage`` is the coefficient alpha actually used: cov = (1 - alpha) S + alpha (tr S / d) I.
    """

    mean: "object"
    cov: "object"
    n: int
    shrinkage: float = 0.0

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0])


def ledoit_wolf_coefficient(xc, cov) -> float:
    """Ledoit-Wolf (2004) shrinkage coefficient for centred samples ``xc`` [n, d] and their
    (1/n-normalised) covariance ``cov``; the same estimator as ``sklearn.covariance.ledoit_wolf``.

    alpha = min(b2, d2) / d2 with mu = tr(S)/d, d2 = ||S - mu I||_F^2 and
    b2 = (1/n^2) sum_i ||x_i x_i^T - S||_F^2 = (1/n^2) (sum_i ||x_i||^4 - n ||S||_F^2).
    """
    import torch

    n, d = xc.shape
    mu = torch.trace(cov) / d
    d2 = torch.sum((cov - mu * torch.eye(d, dtype=cov.dtype, device=cov.device)) ** 2)
    if float(d2) == 0.0:
        return 0.0
    sq = (xc * xc).sum(dim=1)
    b2 = (torch.sum(sq * sq) - n * torch.sum(cov * cov)) / (n * n)
    return float(torch.clamp(b2, min=0.0).minimum(d2) / d2)


def neutral_stats(x, *, shrinkage: float | str | None = None, chunk: int = 65536, name: str = "neutral",
                  device=None) -> Stats:
    """Mean and covariance of neutral activations ``x`` [n, d] in float64.

    The covariance is the unbiased sample covariance (1/(n-1)); its scale does not change any
    steer (whitening and un-whitening cancel), only the shrinkage and the eigenvalue threshold see
    it. ``shrinkage``: None/0 (none), a float in [0, 1], or ``"auto"`` (Ledoit-Wolf).
    """
    import torch

    x = _as_2d_float64(x, name)
    if device is not None:
        x = x.to(device)
    n, d = x.shape
    if n < 2:
        raise InputError(f"needs at least 2 rows for a covariance, got {n}", name)
    mean = x.mean(dim=0)
    cov = torch.zeros(d, d, dtype=torch.float64, device=x.device)
    for i in range(0, n, chunk):  # chunks keep the float64 copy of a centred block small
        xc = x[i:i + chunk] - mean
        cov += xc.T @ xc
    alpha = 0.0
    if shrinkage == "auto":
        alpha = ledoit_wolf_coefficient(x - mean, cov / n)
    elif shrinkage not in (None, 0, 0.0):
        alpha = float(shrinkage)
        if not 0.0 <= alpha <= 1.0:
            raise InputError(f"shrinkage must be in [0, 1] or 'auto', got {shrinkage!r}", "shrinkage")
    cov = cov / (n - 1)
    cov = (cov + cov.T) / 2
    if alpha > 0:
        mu = torch.trace(cov) / d
        cov = (1 - alpha) * cov + alpha * mu * torch.eye(d, dtype=cov.dtype, device=cov.device)
    return Stats(mean=mean, cov=cov, n=n, shrinkage=alpha)


def concept_mean(x, name: str = "concept"):
    """mu_s or mu_t: the float64 mean of a concept's activations [n, d] (one row per example)."""
    return _as_2d_float64(x, name).mean(dim=0)


class Whitening:
    """W = Sigma^{-1/2} and W+ = Sigma^{1/2} by eigendecomposition in float64.

    Eigenvalues at or below :func:`eig_cut` are zeroed in both (pseudo-inverse): by default the
    official code's cut (torch.linalg.pinv's rule, ``threshold=None``); ``threshold=r`` drops
    lambda <= r * max(1, largest) (1e-10 was this project's default). ``identity=True`` gives
    W = W+ = I (the CASteer special case).
    """

    def __init__(self, cov=None, *, threshold: float | None = DEFAULT_EIG_THRESHOLD, identity: bool = False,
                 dim: int | None = None, device=None):
        import torch

        if identity:
            d = dim if dim is not None else int(cov.shape[0])
            eye = torch.eye(d, dtype=torch.float64, device=device)
            self.W, self.W_plus = eye, eye.clone()
            self.eigenvalues = torch.ones(d, dtype=torch.float64, device=device)
            self.effective_rank = d
            return
        cov = cov.to(torch.float64)
        evals, evecs = torch.linalg.eigh((cov + cov.T) / 2)
        cut = eig_cut(evals, threshold)
        keep = evals > cut
        safe = torch.where(keep, evals, torch.ones_like(evals))
        inv_sqrt = torch.where(keep, safe.rsqrt(), torch.zeros_like(evals))
        sqrt = torch.where(keep, safe.sqrt(), torch.zeros_like(evals))
        self.W = (evecs * inv_sqrt) @ evecs.T
        self.W_plus = (evecs * sqrt) @ evecs.T
        self.eigenvalues = evals
        self.effective_rank = int(keep.sum())

    @property
    def dim(self) -> int:
        return int(self.W.shape[0])
