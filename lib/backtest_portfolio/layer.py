"""The differentiable max-Sharpe layer (cvxpylayers): the homogenised, DPP-compliant program.

Tangency problem  max_w (μ-r_f)ᵀw / sqrt(wᵀΣw)  s.t. 1ᵀw = 1, w >= 0, [δ·m <= w <= m]  becomes, with
y = κw and κ = 1/((μ-r_f)ᵀw) > 0 (Schaible / Charnes-Cooper homogenisation):

    minimise ‖F y‖²  s.t. (μ-r_f)ᵀy = 1,  y >= 0,  y <= m ⊙ 1ᵀy,  [y >= δ m ⊙ 1ᵀy];   w* = y*/1ᵀy*

F is a factor with FᵀF = Σ (Cholesky), m the (soft or hard) selection mask; every constraint is
parameter × (parameter-free affine), so the program is DPP and cvxpylayers differentiates it.
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

    def __init__(self, n: int, p: int | None = None, min_weight: float = 0.0, solver_args: dict | None = None):
        import cvxpy as cp
        from cvxpylayers.torch import CvxpyLayer

        self.n, self.p, self.min_weight = n, p or n, float(min_weight)
        y = cp.Variable(n)
        mu = cp.Parameter(n)
        F = cp.Parameter((self.p, n))
        m = cp.Parameter(n)
        cons = [mu @ y == 1, y >= 0, y <= cp.multiply(m, cp.sum(y))]
        if self.min_weight > 0:
            cons.append(y >= self.min_weight * cp.multiply(m, cp.sum(y)))
        prob = cp.Problem(cp.Minimize(cp.sum_squares(F @ y)), cons)
        assert prob.is_dpp()
        self.problem = prob
        self.solver_args = {**DEFAULT_SOLVER_ARGS, **(solver_args or {})}
        self._layer = CvxpyLayer(prob, parameters=[mu, F, m], variables=[y])

    def __call__(self, mu_ex, F, mask=None):
        import torch

        B, n = mu_ex.shape
        if mask is None:
            mask = torch.ones_like(mu_ex)
        mu_ex = mu_ex.to(torch.float64)
        F = F.to(torch.float64)
        mask = mask.to(torch.float64)
        with torch.no_grad():
            infeasible = best_excess_return(mu_ex.detach(), mask.detach(), self.min_weight) <= 0
        ones = torch.ones_like(mu_ex)
        mu_use = torch.where(infeasible[:, None], ones, mu_ex)
        mscale = mu_use.detach().abs().amax(-1, keepdim=True).clamp_min(1e-300)
        fscale = F.detach().abs().amax(dim=(-2, -1), keepdim=True).clamp_min(1e-300)
        (y,) = self._layer(mu_use / mscale, F / fscale, mask, solver_args=self.solver_args)
        y = torch.clamp(y, min=0.0) * (mask > 0)  # solver round-off below zero / outside the mask
        w = y / y.sum(-1, keepdim=True)
        return w, infeasible


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
