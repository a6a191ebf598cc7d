"""Estimates from trailing windows (no look-ahead), the closed-form tangency portfolio and the exact
cardinality-constrained optimum by enumeration.

Every function here is vectorised over a batch of dates: the window of date index t is the
``window`` daily returns ending at t *inclusive* (data known at the close of day t).
Float64 throughout (covariances of daily returns are ~1e-4 and their inverses need it).
"""
from __future__ import annotations

import math

from icmlkit.lib.core.errors import InputError, UsageError

FEATURE_NAMES = ("ret_21d", "ret_63d", "ret_126d", "ret_252d", "vol_21d", "vol_63d")
FEATURE_LOOKBACK = 252


def _t(x, dtype=None):
    import torch

    return torch.as_tensor(x, dtype=dtype or torch.float64)


def windows(returns, idx, window: int):
    """(B, window, n): the trailing windows of ``returns`` (T x n) ending at each index of ``idx``."""
    import torch

    R = _t(returns)
    idx = torch.as_tensor(idx, dtype=torch.long)
    if int(idx.min()) < window - 1:
        raise InputError(f"date index {int(idx.min())} has fewer than {window} days of history")
    offs = torch.arange(-window + 1, 1)
    return R[idx[:, None] + offs[None, :]]


def sample_cov(X):
    """Sample covariance (ddof 1) of each window in X (B, T, n)."""
    Xc = X - X.mean(dim=1, keepdim=True)
    return Xc.transpose(1, 2) @ Xc / (X.shape[1] - 1)


def ledoit_wolf(X):
    """Ledoit-Wolf (2004) shrinkage towards a scaled identity, batched over windows X (B, T, n).

    Same estimator as sklearn.covariance.LedoitWolf (biased 1/T covariance of the centred
    window, shrinkage = min(beta, delta) / delta); checked against it in the tests.
    """
    import torch

    B, T, n = X.shape
    Xc = X - X.mean(dim=1, keepdim=True)
    S = Xc.transpose(1, 2) @ Xc / T
    X2 = Xc ** 2
    trace = X2.sum(dim=1) / T                                  # (B, n) diagonal of S
    mu = trace.sum(dim=1) / n                                  # (B,)
    beta_ = (X2.transpose(1, 2) @ X2).sum(dim=(1, 2))
    delta_ = ((Xc.transpose(1, 2) @ Xc) ** 2).sum(dim=(1, 2)) / T ** 2
    beta = (beta_ / T - delta_) / (n * T)
    delta = (delta_ - 2 * mu * trace.sum(dim=1) + n * mu ** 2) / n
    beta = torch.minimum(beta, delta)
    shrink = torch.where(delta > 0, beta / torch.where(delta > 0, delta, torch.ones_like(delta)), torch.zeros_like(delta))
    eye = torch.eye(n, dtype=X.dtype, device=X.device)
    return (1 - shrink)[:, None, None] * S + (shrink * mu)[:, None, None] * eye, shrink


COV_METHODS = ("ledoit-wolf", "sample", "pca-factor")


def pca_factor(X, factors: int = 5, floor: float = 1e-3):
    """Statistical factor model of each window X (B, T, n): the top ``factors`` principal
    components of the sample covariance (ddof 1) as loadings F (B, K, n) and the residual variance
    as an idiosyncratic diagonal, so Σ̂ = FᵀF + diag(d²) with d (B, n). Each residual variance is
    floored at ``floor`` times the asset's total variance (keeps Σ̂ positive definite when T < n).
    The covariance of large universes: O(Kn) numbers per date instead of n², and the layer's
    factor form takes (F, d) directly."""
    import torch

    B, T, n = X.shape
    K = min(int(factors), T - 1, n)
    if K < 1:
        raise UsageError(f"pca-factor needs at least 1 factor and 2 days, got {factors} factors, {T} days")
    Xc = (X - X.mean(dim=1, keepdim=True)) / math.sqrt(T - 1)
    _, sv, Vh = torch.linalg.svd(Xc, full_matrices=False)
    F = sv[:, :K, None] * Vh[:, :K, :]                          # (B, K, n): FᵀF = top-K part of Σ̂
    var = (Xc ** 2).sum(dim=1)                                 # (B, n) sample variances
    resid = torch.maximum(var - (F ** 2).sum(dim=1), floor * var).clamp_min(1e-300)
    return F, torch.sqrt(resid)


def factor_model(returns, idx, window: int, method: str = "ledoit-wolf", factors: int = 5):
    """(F, d) with Σ̂ = FᵀF [+ diag(d²)] at each date of ``idx``: the Cholesky factor of the dense
    estimates (d None), or the pca-factor loadings and idiosyncratic volatilities."""
    if method == "pca-factor":
        return pca_factor(windows(returns, idx, window), factors)
    return factor(covariance(returns, idx, window, method)), None


def covariance(returns, idx, window: int, method: str = "ledoit-wolf", ridge: float = 1e-10, factors: int = 5):
    """Σ̂ at each date of ``idx`` from the trailing ``window`` (sample, ledoit-wolf or the dense form
    FᵀF + diag(d²) of pca-factor), plus a tiny ridge."""
    import torch

    X = windows(returns, idx, window)
    if method == "pca-factor":
        F, d = pca_factor(X, factors)
        S = F.transpose(1, 2) @ F + torch.diag_embed(d ** 2)
    elif method == "sample":
        S = sample_cov(X)
    elif method == "ledoit-wolf":
        S, _ = ledoit_wolf(X)
    else:
        raise UsageError(f"unknown covariance method {method!r}")
    n = S.shape[-1]
    scale = torch.diagonal(S, dim1=1, dim2=2).mean(dim=1)
    return S + (ridge * scale)[:, None, None] * torch.eye(n, dtype=S.dtype)


def factor(S):
    """F with FᵀF = Σ (upper Cholesky factor), batched: the factor form of the Sharpe layer."""
    import torch

    L = torch.linalg.cholesky(S)
    return L.transpose(-1, -2)


def historical_mean(returns, idx, window: int):
    """Trailing mean daily return (the 'historical' estimate of μ)."""
    return windows(returns, idx, window).mean(dim=1)


def features(returns, idx):
    """Per-asset features at each date: trailing 1/3/6/12-month returns (21/63/126/252 days,
    compounded) and 1/3-month volatility (21/63 days, annualised). (B, n, 6), float64."""
    import torch

    X = windows(returns, idx, FEATURE_LOOKBACK)
    logr = torch.log1p(X)
    cum = [torch.expm1(logr[:, -h:].sum(dim=1)) for h in (21, 63, 126, 252)]
    vol = [X[:, -h:].std(dim=1) * math.sqrt(252) for h in (21, 63)]
    return torch.stack(cum + vol, dim=-1)


def forward_returns(returns, idx, horizon: int):
    """(B, horizon, n): the returns of days t+1 .. t+horizon after each date index t (loss only)."""
    import torch

    R = _t(returns)
    idx = torch.as_tensor(idx, dtype=torch.long)
    if int(idx.max()) + horizon >= R.shape[0]:
        raise InputError("holding period runs past the end of the data")
    offs = torch.arange(1, horizon + 1)
    return R[idx[:, None] + offs[None, :]]


# --------------------------------------------------------------------------- closed forms


def closed_form_tangency(mu_ex, S):
    """w ∝ Σ⁻¹(μ - r_f), normalised to sum 1 (the unconstrained tangency portfolio), batched."""
    import torch

    z = torch.linalg.solve(S, mu_ex.unsqueeze(-1)).squeeze(-1)
    return z / z.sum(dim=-1, keepdim=True)


def sharpe_of(w, mu_ex, S, periods: int = 252):
    """Annualised ex-ante Sharpe (wᵀμ)/√(wᵀΣw)·√periods, batched over leading dimensions."""
    import torch

    num = (w * mu_ex).sum(-1)
    den = torch.sqrt(torch.einsum("...i,...ij,...j->...", w, S, w).clamp_min(1e-300))
    return num / den * math.sqrt(periods)


def n_supports(n: int, k: int) -> int:
    return sum(math.comb(n, j) for j in range(1, k + 1))


def exact_sparse_tangency(mu_ex, S, k: int, max_supports: int = 400_000, chunk: int = 20000):
    """The exact long-only max-Sharpe portfolio with at most k names, by enumeration.

    At the optimum with support T the non-negativity constraints are inactive on T, so the
    weights are the unconstrained tangency portfolio of T; conversely every support whose
    tangency portfolio is strictly positive is feasible. Hence the optimum is the best
    sqrt(μ_Tᵀ Σ_T⁻¹ μ_T) over supports |T| <= k whose closed form is positive (all sizes, all
    subsets, solved as batched linear systems). Returns (w (n,), sharpe (daily units), support).
    If no asset has μ_i > 0 there is no positive-Sharpe portfolio: returns (None, -inf, ()).
    """
    import itertools

    import torch

    mu_ex = _t(mu_ex)
    S = _t(S)
    n = mu_ex.shape[0]
    if n_supports(n, k) > max_supports:
        raise UsageError(f"exact enumeration over {n_supports(n, k)} supports (n={n}, k={k}) is too large "
                         f"(limit {max_supports}); use a smaller universe or k")
    best, best_w, best_T = -math.inf, None, ()
    for j in range(1, k + 1):
        combos = itertools.combinations(range(n), j)
        while True:
            block = list(itertools.islice(combos, chunk))
            if not block:
                break
            T = torch.tensor(block, dtype=torch.long)                      # (C, j)
            mus = mu_ex[T]                                                  # (C, j)
            Ss = S[T[:, :, None], T[:, None, :]]                            # (C, j, j)
            z = torch.linalg.solve(Ss, mus.unsqueeze(-1)).squeeze(-1)       # Σ_T⁻¹ μ_T
            q = (mus * z).sum(-1)
            ok = (z > 0).all(dim=-1) & (q > 0)
            if not ok.any():
                continue
            q = torch.where(ok, q, torch.full_like(q, -math.inf))
            i = int(torch.argmax(q))
            if float(q[i]) > best:
                best = float(q[i])
                w = torch.zeros(n, dtype=torch.float64)
                w[T[i]] = z[i] / z[i].sum()
                best_w, best_T = w, tuple(int(a) for a in T[i])
    if best_w is None:
        return None, -math.inf, ()
    return best_w, math.sqrt(best), best_T
