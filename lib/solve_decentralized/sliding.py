"""Algorithm 2: gradient sliding (Lan 2016) for non-smooth or non-strongly-convex f.

[reconstructed] The outer loop owns the expensive part, phi(u) = <z, K u - b'> + (R/2)||K u - b'||^2
(its gradient costs one K and one K^T product: 2 deg_w rounds of neighbour exchanges and one
product by A, C, Ct); the inner loop runs T_k local prox-(sub)gradient steps on h(u) = sum_i f_i
(the smooth part of f by its gradient, an l1 term by its prox: soft-thresholding), with no
communication. Lan's parameters for the convex case: gamma_k = 2/(k+1), beta_k = 2 L_phi / k,
p_t = t/2, q_t = 2/(t+2); the listing's undefined u~^0 is set to u^0 (Lan's recurrence). The
strongly convex non-smooth and convex smooth cases are handled by restarts: after each run of
``outer`` steps the multiplier z <- z + R (K u - b') is updated (a method-of-multipliers restart,
so the constraints hold exactly in the limit, not only up to the penalty's O(1/R) bias).
"""
from __future__ import annotations

import numpy as np

from icmlkit.lib.solve_decentralized.methods import NodeOps


def _soft(v, t):
    return np.sign(v) * np.maximum(np.abs(v) - t, 0.0)


def sliding(prob, cfg, monitor):
    """Run Algorithm 2 on the simulator; returns (x, X, iterations, counters)."""
    W = prob.laplacian()
    setup = make_setup_sliding(prob, cfg)
    ops = NodeOps(prob.A, prob.b, prob.C, prob.c, prob.Ct, prob.ct, prob.grad, setup, lambda V: W @ V)
    l1 = prob.l1 if prob.l1 is not None else np.zeros(prob.n)
    dm, m = prob.dmax, prob.m
    Ls, _ = prob.smoothness()
    L_h = float(Ls.max())
    R = (cfg.step if cfg.step is not None else 30.0) * L_h / max(setup.L_k, 1e-300)
    L_phi = R * setup.L_k
    lam_pad = np.concatenate([l1[:, None] * np.ones((1, dm)), np.zeros((prob.n, m)), l1[:, None] * np.ones((1, prob.p))], 1)
    u = ops.zeros()
    zrows = np.zeros_like(ops.bprime)
    outer = cfg.sliding_inner  # outer steps per restart (= inner steps per outer step) [reconstructed]
    k_total = 0

    def h_grad(v):
        x, y, X = ops.split(v)
        g = prob.grad(np.concatenate([x, X], 1))
        return np.concatenate([g[:, :dm], np.zeros_like(y), g[:, dm:]], 1)

    for restart in range(cfg.sliding_restarts):
        x_prev, x_bar = u.copy(), u.copy()
        for k in range(1, outer + 1):
            k_total += 1
            gam = 2.0 / (k + 1)
            beta = 2.0 * L_phi / k + L_h  # the smooth part of h is handled in the prox-linear steps
            xl = (1 - gam) * x_bar + gam * x_prev
            g = ops.KT(zrows + R * (ops.K(xl) - ops.bprime))
            T = cfg.sliding_inner
            # PS procedure (u~_0 = u_0 = x_{k-1})
            ut, ut_avg = x_prev.copy(), x_prev.copy()
            for t in range(1, T + 1):
                pt, qt = t / 2.0, 2.0 / (t + 2)
                hg = h_grad(ut)
                ops.cnt["grads"] += 1
                denom = beta * (1 + pt)
                target = (beta * x_prev + beta * pt * ut - g - hg) / denom
                ut = _soft(target, lam_pad / denom)
                ut_avg = (1 - qt) * ut_avg + qt * ut
            x_prev = ut
            x_bar = (1 - gam) * x_bar + gam * ut_avg
            u = x_bar
            if monitor(k_total, ops, u):
                return (*ops.primal(u), k_total, ops.cnt)
        zrows = zrows + R * (ops.K(u) - ops.bprime)
    return (*ops.primal(u), k_total, ops.cnt)


def make_setup_sliding(prob, cfg):
    """W' and the scalings of Algorithm 1's reformulation (the Chebyshev variant); the strong
    convexity test is not needed here."""
    from icmlkit.lib.solve_decentralized import spectral

    return spectral.make_setup(prob, "cheb", cfg.bounds, aug=0.0, require_strong=False)
