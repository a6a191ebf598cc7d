"""The differentiable max-Sharpe layer (cvxpylayers): the homogenised, DPP-compliant program.

Tangency problem  max_w (μ-r_f)ᵀw / sqrt(wᵀΣw)  s.t. 1ᵀw = 1, w >= 0, [δ·m <= w <= m]  becomes, with
y = κw and κ = 1/((μ-r_f)ᵀw) > 0 (Schaible / Charnes-Cooper homogenisation):

    minimise ‖F y‖² [+ ‖d ⊙ y‖²]  s.t. (μ-r_f)ᵀy = 1,  y >= 0,  y <= m ⊙ 1ᵀy,  [y >= δ m ⊙ 1ᵀy];   w* = y*/1ᵀy*

F is a factor with FᵀF = Σ (Cholesky), or, for a factor-model covariance Σ = FᵀF + diag(d²) (the
``pca-factor`` estimate of large universes), the p × n loadings F plus the idiosyncratic
volatilities d; m the (soft or hard) selection mask; every constraint is parameter ×
(parameter-free affine), so the program is DPP and cvxpylayers differentiates it.

Scaling to large n (above ``SPARSE_ABOVE`` names, or ``sparse=True``): the sum 1ᵀy is a variable t of
its own (t = 1ᵀy, y <= m ⊙ t), so each cap row has 2 non-zeros instead of n (the dense form makes the
KKT system O(n²): at n = 500 it took 12.6 s and 4.1 GB per batch of 16 against 0.8 s and 0.5 GB;
bench part ``large-universe-speed``). Small universes keep the dense form: Clarabel solves it more
accurately (the Sharpe objective is flat at the optimum, so weights carry the square root of the
solver's gap). A hard
mask with k ones is re-solved on its k names only (:func:`solve_on_support`; the same program,
since m_i = 0 forces y_i = 0).
The normalisation w = y/1ᵀy is done in torch. The optional floor δ (``min_weight``) keeps every
selected name at >= δ of the portfolio so that a hard mask of k names gives exactly k holdings.

Infeasible case: the program has a solution only if some portfolio on the mask has a positive
expected excess return. :func:`best_excess_return` computes the largest (μ-r_f)ᵀw over the
feasible set exactly (a greedy fill of the capped simplex); rows where it is <= 0 are flagged
``infeasible`` and solved as the minimum-variance portfolio on the mask instead (the same program
with μ-r_f replaced by 1: the homogenisation of min wᵀΣw s.t. 1ᵀw = 1). Their gradient with respect
to μ is zero.

Scale: the solution is invariant to positive rescaling of μ-r_f and of F, so each row is divided
by its (detached) largest entry before the solve; this is exact for values and gradients.
"""
from __future__ import annotations

DEFAULT_SOLVER_ARGS = {"solve_method": "Clarabel", "tol_gap_abs": 1e-11, "tol_gap_rel": 1e-11, "tol_feas": 1e-11,
                       "tol_ktratio": 1e-9}
# universes above this size use the sparse form (t = 1ᵀy); below it the dense form, which Clarabel solves
# more accurately (weights to ~1e-7 where the sparse form gives ~1e-6 .. 1e-4 relative on small interior problems)
SPARSE_ABOVE = 64


def best_excess_return(mu_ex, mask, min_weight: float = 0.0):
    """max (μ-r_f)ᵀw over {δm <= w <= m, 1ᵀw = 1}, batched (B, n); -inf where the set is empty.

    Greedy: give every name its floor δm_i, then fill the remaining budget along μ descending
    up to the caps. Exact for this linear program over a box ∩ simplex.
    """
    import torch

    lo = min_weight * mask
    cap = mask - lo
    budget = 1.0 - lo.sum(-1, keepdim=True)
    order = torch.argsort(mu_ex, dim=-1, descending=True, stable=True)
    cap_s = torch.gather(cap, -1, order)
    mu_s = torch.gather(mu_ex, -1, order)
    before = torch.cumsum(cap_s, -1) - cap_s
    fill = torch.clamp(torch.minimum(cap_s, budget - before), min=0.0)
    value = (lo * mu_ex).sum(-1) + (fill * mu_s).sum(-1)
    empty = (budget.squeeze(-1) < -1e-12) | (cap.sum(-1) + 1e-12 < budget.squeeze(-1))
    return torch.where(empty, torch.full_like(value, -float("inf")), value)


class SharpeLayer:
    """Batched differentiable tangency portfolio on a mask: ``w, infeasible = layer(mu_ex, F, mask)``.

    mu_ex (B, n) expected excess daily returns μ̂ - r_f; F (B, p, n) with FᵀF = Σ̂; mask (B, n) in
    [0, 1] (None = all ones). ``min_weight`` δ >= 0 is the floor on selected names (δk <= 1).
    Differentiable in mu_ex, F and mask (cvxpylayers + diffcp; Clarabel by default).
    """

    def __init__(self, n: int, p: int | None = None, min_weight: float = 0.0, solver_args: dict | None = None,
                 diag: bool = False, sparse: bool | None = None):
        import cvxpy as cp
        from cvxpylayers.torch import CvxpyLayer

        self.n, self.p, self.min_weight, self.diag = n, p or n, float(min_weight), bool(diag)
        self.sparse = n > SPARSE_ABOVE if sparse is None else bool(sparse)
        y = cp.Variable(n)
        # t = 1ᵀy: one extra variable keeps every cap row sparse (nonneg: Clarabel gets closer to its tolerance)
        t = cp.Variable(nonneg=True) if self.sparse else cp.sum(y)
        mu = cp.Parameter(n)
        F = cp.Parameter((self.p, n))
        m = cp.Parameter(n)
        params = [mu, F, m]
        objective = cp.sum_squares(F @ y)
        if self.diag:
            d = cp.Parameter(n)
            params.append(d)
            objective = objective + cp.sum_squares(cp.multiply(d, y))
        cons = [mu @ y == 1, y >= 0, y <= cp.multiply(m, t)] + ([t == cp.sum(y)] if self.sparse else [])
        if self.min_weight > 0:
            cons.append(y >= self.min_weight * cp.multiply(m, t))
        prob = cp.Problem(cp.Minimize(objective), cons)
        assert prob.is_dpp()
        self.problem = prob
        self.solver_args = {**DEFAULT_SOLVER_ARGS, **(solver_args or {})}
        self._layer = CvxpyLayer(prob, parameters=params, variables=[y])

    def __call__(self, mu_ex, F, mask=None, d=None):
        import torch

        B, n = mu_ex.shape
        if mask is None:
            mask = torch.ones_like(mu_ex)
        if (d is not None) != self.diag:
            raise ValueError("the layer was built " + ("with" if self.diag else "without") + " a diagonal d")
        mu_ex = mu_ex.to(torch.float64)
        F = F.to(torch.float64)
        mask = mask.to(torch.float64)
        with torch.no_grad():
            infeasible = best_excess_return(mu_ex.detach(), mask.detach(), self.min_weight) <= 0
        ones = torch.ones_like(mu_ex)
        mu_use = torch.where(infeasible[:, None], ones, mu_ex)
        mscale = mu_use.detach().abs().amax(-1, keepdim=True).clamp_min(1e-300)
        fscale = F.detach().abs().amax(dim=(-2, -1), keepdim=True)
        if d is not None:
            d = d.to(torch.float64)
            fscale = torch.maximum(fscale, d.detach().abs().amax(-1)[:, None, None])
        fscale = fscale.clamp_min(1e-300)
        extra = [] if d is None else [d / fscale[:, :, 0]]
        (y,) = self._layer(mu_use / mscale, F / fscale, mask, *extra, solver_args=self.solver_args)
        y = torch.clamp(y, min=0.0) * (mask > 0)  # solver round-off below zero / outside the mask
        w = y / y.sum(-1, keepdim=True)
        return w, infeasible


_LAYERS: dict = {}


def layer_for(n: int, p: int | None = None, min_weight: float = 0.0, diag: bool = False,
              sparse: bool | None = None) -> SharpeLayer:
    """A :class:`SharpeLayer` of this shape, built once per process (building costs 0.05-0.5 s)."""
    key = (n, p or n, float(min_weight), bool(diag), sparse)
    if key not in _LAYERS:
        _LAYERS[key] = SharpeLayer(n, p, min_weight=min_weight, diag=diag, sparse=sparse)
    return _LAYERS[key]


def solve_on_support(mu_ex, F, mask, d=None, min_weight: float = 0.0):
    """The layer's program for a HARD mask (0/1, the same number k of ones in every row), solved on
    the k selected names only: the sub-covariance F_Sᵀ F_S [+ diag(d_S²)] is factored (k × k
    Cholesky) and a k-name layer re-solves. The same solution as the n-name program (m_i = 0
    forces y_i = 0), at a cost that no longer grows with n. Returns (w (B, n), infeasible (B,))."""
    import torch

    from icmlkit.lib.backtest_portfolio.estimators import factor

    B, n = mu_ex.shape
    mask = mask.to(torch.float64)
    k = int(round(float(mask[0].sum())))
    if k < 1 or not torch.all(mask.sum(-1).round() == k) or not torch.all((mask == 0) | (mask == 1)):
        raise ValueError("solve_on_support needs a 0/1 mask with the same number of ones in every row")
    idx = torch.sort(torch.argsort(-mask, dim=-1, stable=True)[:, :k], dim=-1).values   # (B, k) selected names
    mu_s = torch.gather(mu_ex.to(torch.float64), 1, idx)
    F = F.to(torch.float64)
    F_s = torch.gather(F, 2, idx[:, None, :].expand(-1, F.shape[1], -1))                   # (B, p, k)
    S = F_s.transpose(1, 2) @ F_s
    if d is not None:
        S = S + torch.diag_embed(torch.gather(d.to(torch.float64), 1, idx) ** 2)
    w_s, infeasible = layer_for(k, k, min_weight)(mu_s, factor(S))
    return torch.zeros(B, n, dtype=torch.float64).scatter(1, idx, w_s), infeasible


def solve_tangency_cvxpy(mu_ex, S, mask=None, min_weight: float = 0.0):
    """The same program for one date with plain cvxpy (the solve-per-date loop of the benchmark).

    Returns (w numpy (n,), infeasible bool).
    """
    import cvxpy as cp
    import numpy as np
    import torch

    mu_ex = np.asarray(mu_ex, dtype=np.float64)
    n = mu_ex.shape[0]
    mask = np.ones(n) if mask is None else np.asarray(mask, dtype=np.float64)
    infeasible = float(best_excess_return(torch.tensor(mu_ex)[None], torch.tensor(mask)[None], min_weight)[0]) <= 0
    mu_use = np.ones(n) if infeasible else mu_ex
    L = np.linalg.cholesky(np.asarray(S, dtype=np.float64)).T
    y = cp.Variable(n)
    cons = [(mu_use / np.abs(mu_use).max()) @ y == 1, y >= 0, y <= cp.multiply(mask, cp.sum(y))]
    if min_weight > 0:
        cons.append(y >= min_weight * cp.multiply(mask, cp.sum(y)))
    cp.Problem(cp.Minimize(cp.sum_squares((L / np.abs(L).max()) @ y)), cons).solve(solver=cp.CLARABEL)
    w = np.clip(y.value, 0, None) * (mask > 0)
    return w / w.sum(), infeasible


class CvxpyTangency:
    """The same program as one parametrised cvxpy problem, built and compiled once and re-solved per
    date by setting its parameters (what a careful user of plain cvxpy writes; the benchmark's
    fair speed baseline). ``solve(mu_ex, F, mask)`` for one date: (w numpy (n,), infeasible)."""

    def __init__(self, n: int, min_weight: float = 0.0):
        import cvxpy as cp

        self.n, self.min_weight = n, float(min_weight)
        self.y = cp.Variable(n)
        self.mu = cp.Parameter(n)
        self.F = cp.Parameter((n, n))
        self.m = cp.Parameter(n, nonneg=True)
        y = self.y
        cons = [self.mu @ y == 1, y >= 0, y <= cp.multiply(self.m, cp.sum(y))]
        if self.min_weight > 0:
            cons.append(y >= self.min_weight * cp.multiply(self.m, cp.sum(y)))
        self.problem = cp.Problem(cp.Minimize(cp.sum_squares(self.F @ y)), cons)
        assert self.problem.is_dpp()

    def solve(self, mu_ex, F, mask=None):
        import cvxpy as cp
        import numpy as np
        import torch

        mu_ex = np.asarray(mu_ex, dtype=np.float64)
        F = np.asarray(F, dtype=np.float64)
        mask = np.ones(self.n) if mask is None else np.asarray(mask, dtype=np.float64)
        infeasible = float(best_excess_return(torch.tensor(mu_ex)[None], torch.tensor(mask)[None],
                                              self.min_weight)[0]) <= 0
        mu_use = np.ones(self.n) if infeasible else mu_ex
        self.mu.value = mu_use / np.abs(mu_use).max()
        self.F.value = F / np.abs(F).max()
        self.m.value = mask
        self.problem.solve(solver=cp.CLARABEL)
        w = np.clip(self.y.value, 0, None) * (mask > 0)
        return w / w.sum(), infeasible
