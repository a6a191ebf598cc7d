"""The central optimum of (P): an exact KKT solve (numpy) for quadratics, an equality-constrained
Newton method for logistic losses, or cvxpy (``require_module("cvxpy", "solve-decentralized")``)."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.solve_decentralized.problem import Problem, a_block, a_mul


@dataclass
class ReferenceResult:
    x: np.ndarray          # (n, dmax), padded with zeros
    xt: np.ndarray         # (p,)
    summary: dict


def _layout(prob: Problem):
    """Global variable v = (x_1 real, ..., x_n real, x~): the index of each node's w_i = (x_i, x~)."""
    offs = np.concatenate([[0], np.cumsum(prob.d)]).astype(int)
    nx = int(offs[-1])
    idx = [np.concatenate([np.arange(offs[i], offs[i + 1]), nx + np.arange(prob.p)]).astype(int)
           for i in range(prob.n)]
    return offs, nx, idx


def constraints(prob: Problem):
    """(E, e): every constraint of (P) on the global variable v."""
    offs, nx, _ = _layout(prob)
    N = nx + prob.p
    if prob.sparse:   # sum_i A_i x_i = sum_i b_i only (local C rows are refused for sparse A on reading)
        return _sparse_constraints(prob, N), prob.b.sum(0)
    rows, rhs = [], []
    if prob.m:
        M = np.zeros((prob.m, N))
        for i in range(prob.n):
            M[:, offs[i]:offs[i + 1]] = prob.A[i, :, :prob.d[i]]
        rows.append(M); rhs.append(prob.b.sum(0))
    for i in range(prob.n):
        if prob.C.shape[1]:
            M = np.zeros((prob.C.shape[1], N))
            M[:, offs[i]:offs[i + 1]] = prob.C[i, :, :prob.d[i]]
            rows.append(M); rhs.append(prob.c[i])
        if prob.Ct.shape[1]:
            M = np.zeros((prob.Ct.shape[1], N))
            M[:, nx:] = prob.Ct[i]
            rows.append(M); rhs.append(prob.ct[i])
    if not rows:
        return np.zeros((0, N)), np.zeros(0)
    E, e = np.concatenate(rows), np.concatenate(rhs)
    keep = np.abs(E).sum(1) > 0  # padded zero rows
    return E[keep], e[keep]


def _sparse_constraints(prob: Problem, N: int):
    """E (m, N) as CSR: the blocks A_i side by side, zero columns for x~ (no Ct rows with sparse A)."""
    import scipy.sparse as sp

    if np.abs(prob.Ct).sum():
        raise InputError("a sparse coupled matrix A with constraints Ct on x~ is not supported (give A dense)",
                         prob.meta.get("spec"))
    blocks = [a_block(prob.A, i, prob.d[i]) for i in range(prob.n)] + [sp.csr_matrix((prob.m, prob.p))]
    return sp.hstack(blocks).tocsr()[:, :N]


def _unpack(prob, v):
    offs, nx, _ = _layout(prob)
    x = np.zeros((prob.n, prob.dmax))
    for i in range(prob.n):
        x[i, :prob.d[i]] = v[offs[i]:offs[i + 1]]
    return x, v[nx:].copy()


def _hess_grad(prob, v, idx):
    """Hessian (dense, or scipy CSR for a sparse problem) and gradient of f at the global v."""
    import scipy.sparse as sp

    N = len(v)
    H = sp.lil_matrix((N, N)) if prob.sparse else np.zeros((N, N))
    g = np.zeros(N)
    x, xt = _unpack(prob, v)
    w = np.concatenate([x, np.repeat(xt[None], prob.n, 0)], 1)
    G = prob.grad(w)
    for i in range(prob.n):
        real = prob.real_w(i)
        g[idx[i]] += G[i][real]
        if prob.loss in ("quadratic", "logbarrier"):
            Hi = prob.Q[i][np.ix_(real, real)]
            if prob.loss == "logbarrier":
                se = np.maximum(w[i] - prob.lb[i], prob.bfloor[i])
                Hi = Hi + np.diag((prob.bw[i] / se ** 2)[real])
        else:
            Fi = prob.F[i][:, real]
            z = Fi @ w[i][real]
            s = 1.0 / (1.0 + np.exp(-z * prob.y[i]))
            dd = prob.weight[i] * s * (1 - s)
            Hi = Fi.T @ Fi.multiply(dd[:, None]) + sp.diags(prob.lam[i][real])
            Hi = Hi.tocoo() if prob.sparse else Hi.toarray()
        if prob.sparse:
            Hi = sp.coo_matrix(Hi)
            H = H + sp.csr_matrix((Hi.data, (idx[i][Hi.row], idx[i][Hi.col])), shape=(N, N))
        else:
            H[np.ix_(idx[i], idx[i])] += Hi
    return (H.tocsr() if prob.sparse else H), g


def _kkt_step(H, g, E, r):
    """Solve [[H, E^T], [E, 0]] [dv; lam] = [-g; -r] (least squares: redundant rows allowed; sparse H
    and E: a sparse LU, so E must have full row rank)."""
    N, k = H.shape[0], E.shape[0]
    if not isinstance(H, np.ndarray):
        import scipy.sparse as sp
        from scipy.sparse.linalg import spsolve

        K = sp.bmat([[H, E.T], [E, None]], format="csc")
        sol = spsolve(K, np.concatenate([-g, -r]))
        return sol[:N], sol[N:]
    K = np.block([[H, E.T], [E, np.zeros((k, k))]])
    rhs = np.concatenate([-g, -r])
    sol = np.linalg.lstsq(K, rhs, rcond=None)[0]
    return sol[:N], sol[N:]


def reference(prob: Problem, method: str = "auto", tol: float = 1e-12, max_newton: int = 100) -> ReferenceResult:
    """x* of (P). ``auto``: KKT for quadratics (one linear solve, exact), Newton for logistic;
    ``cvxpy``: the conic solvers (Clarabel)."""
    t0 = time.perf_counter()
    if method == "auto":
        method = "cvxpy" if prob.nonsmooth else ("kkt" if prob.loss == "quadratic" else "newton")
    if prob.nonsmooth and method != "cvxpy":
        from icmlkit.lib.core.errors import UsageError

        raise UsageError("an l1 term makes f non-smooth: the reference needs --reference cvxpy (or auto)")
    if method == "cvxpy":
        x, xt = _cvxpy(prob)
    elif method in ("kkt", "newton"):
        E, e = constraints(prob)
        _, nx, idx = _layout(prob)
        N = nx + prob.p
        if prob.loss == "logbarrier":
            v = _barrier_newton(prob, E, e, idx, N, tol, max_newton)
        else:
            v = _lstsq(E, e) if E.shape[0] else np.zeros(N)
        for it in range(0 if prob.loss == "logbarrier" else (1 if prob.loss == "quadratic" else max_newton)):
            H, g = _hess_grad(prob, v, idx)
            dv, _ = _kkt_step(H, g, E, E @ v - e)
            if prob.loss == "quadratic":
                v = v + dv
                break
            # damped Newton with backtracking on the objective (feasibility is kept: E dv = 0)
            f0 = _objective(prob, v)
            step = 1.0
            while step > 1e-10 and _objective(prob, v + step * dv) > f0 + 0.25 * step * float(g @ dv):
                step /= 2
            v = v + step * dv
            if -float(g @ dv) < tol ** 2 * max(1.0, abs(f0)):
                break
        x, xt = _unpack(prob, v)
    else:
        raise UsageError(f"unknown reference method {method!r}")
    kkt = kkt_residual(prob, x, xt)
    if not np.isfinite(kkt["stationarity"]) or (prob.loss == "quadratic" and method == "kkt"
                                                  and kkt["feasibility"] > 1e-6 * max(1.0, float(np.max(np.abs(x), initial=0.0)))):
        raise InputError("the central KKT system has no solution (infeasible constraints)", prob.meta.get("spec"))
    w = np.concatenate([x, np.repeat(xt[None], prob.n, 0)], 1)
    summary = {"method": method, "n_nodes": prob.n, "objective": float(prob.value(w)),
               "kkt_stationarity": kkt["stationarity"], "kkt_feasibility": kkt["feasibility"],
               "norm_x": float(np.linalg.norm(x)), "norm_xt": float(np.linalg.norm(xt)),
               "seconds": round(time.perf_counter() - t0, 4)}
    if prob.solution is not None:
        summary["planted_error"] = float(rel_error(prob, x, np.repeat(xt[None], prob.n, 0), prob.solution))
    return ReferenceResult(x=x, xt=xt, summary=summary)


def _barrier_newton(prob, E, e, idx, N, tol, max_newton):
    """Infeasible-start Newton (Boyd-Vandenberghe, Sec. 10.3) for the log-barrier loss (continued
    quadratically below bfloor, so defined everywhere): start at x_j = lb_j + 1 (feasibility not
    required), step on the primal-dual residual r = (grad f + E^T nu, E v - e) with backtracking on ||r||."""
    if prob.sparse:
        from icmlkit.lib.core.errors import UsageError

        raise UsageError("the log-barrier reference needs a dense coupled matrix A; use --method cvxpy")
    offs, nx, _ = _layout(prob)
    v = np.zeros(N)
    for i in range(prob.n):
        di = prob.d[i]
        on = prob.bw[i, :di] > 0
        v[offs[i]:offs[i] + di] = np.where(on, prob.lb[i, :di] + 1.0, 0.0)
    nu = np.zeros(E.shape[0])

    def resid(v, nu):
        _, g = _hess_grad(prob, v, idx)
        return np.concatenate([g + E.T @ nu, E @ v - e])

    def inside(v):
        return np.isfinite(_objective(prob, v))

    r = resid(v, nu)
    for _ in range(max_newton):
        H, g = _hess_grad(prob, v, idx)
        k = E.shape[0]
        K = np.block([[H, E.T], [E, np.zeros((k, k))]])
        sol = np.linalg.lstsq(K, -r, rcond=None)[0]
        dv, dnu = sol[:N], sol[N:]
        t, nr = 1.0, float(np.linalg.norm(r))
        while t > 1e-12 and (not inside(v + t * dv) or
                             np.linalg.norm(resid(v + t * dv, nu + t * dnu)) > (1 - 0.01 * t) * nr):
            t /= 2
        v, nu = v + t * dv, nu + t * dnu
        r = resid(v, nu)
        if float(np.linalg.norm(r)) <= tol * max(1.0, float(np.linalg.norm(v))):
            break
    return v


def _lstsq(E, e):
    """Least-squares solution of E v = e (LSQR to machine precision for a sparse E)."""
    if isinstance(E, np.ndarray):
        return np.linalg.lstsq(E, e, rcond=None)[0]
    from scipy.sparse.linalg import lsqr

    return lsqr(E, e, atol=1e-15, btol=1e-15, iter_lim=20 * max(E.shape))[0]


def _objective(prob, v):
    x, xt = _unpack(prob, v)
    return prob.value(np.concatenate([x, np.repeat(xt[None], prob.n, 0)], 1))


def kkt_residual(prob: Problem, x, xt) -> dict:
    """Stationarity ||grad f + E^T lam|| at the best multipliers (least squares) and feasibility
    ||E v - e|| of the point (x, x~)."""
    E, e = constraints(prob)
    _, nx, idx = _layout(prob)
    v = np.concatenate([np.concatenate([x[i, :prob.d[i]] for i in range(prob.n)]), xt])
    _, g = _hess_grad(prob, v, idx)
    if E.shape[0]:
        lam = _lstsq(E.T, -g)
        stat = float(np.linalg.norm(g + E.T @ lam))
        feas = float(np.linalg.norm(E @ v - e))
    else:
        stat, feas = float(np.linalg.norm(g)), 0.0
    return {"stationarity": stat, "feasibility": feas}


def rel_error(prob: Problem, x, X, ref) -> float:
    """||(x, x~_1..x~_n) - (x*, x~*, ..., x~*)|| / ||(x*, x~*, ..., x~*)|| (never y)."""
    xs, xts = ref["x"], ref["xt"]
    num = float(np.sum((x - xs) ** 2) + np.sum((X - xts[None]) ** 2))
    den = float(np.sum(xs ** 2) + prob.n * np.sum(xts ** 2))
    return float(np.sqrt(num / max(den, 1e-300)))


def constraint_residual(prob: Problem, x, X, ref_norm: float = 1.0) -> float:
    """sqrt(||sum_i (A_i x_i - b_i)||^2 + sum ||C_i x_i - c_i||^2 + sum ||Ct_i x~_i - ct_i||^2
    + sum ||x~_i - mean x~||^2) / max(1, ||u*||)."""
    r = 0.0
    if prob.m:
        r += float(np.sum((a_mul(prob.A, x).sum(0) - prob.b.sum(0)) ** 2))
    if prob.C.shape[1]:
        r += float(np.sum((np.einsum("nrd,nd->nr", prob.C, x) - prob.c) ** 2))
    if prob.p:
        if prob.Ct.shape[1]:
            r += float(np.sum((np.einsum("nsp,np->ns", prob.Ct, X) - prob.ct) ** 2))
        r += float(np.sum((X - X.mean(0, keepdims=True)) ** 2))
    return float(np.sqrt(r) / max(1.0, ref_norm))


def _cvxpy(prob: Problem):
    from icmlkit.lib.core.errors import require_module

    cp = require_module("cvxpy", "solve-decentralized")
    xs = [cp.Variable(prob.d[i]) for i in range(prob.n)]
    xt = cp.Variable(prob.p) if prob.p else None
    obj, cons = 0, []
    for i in range(prob.n):
        parts = ([xs[i]] if prob.d[i] else []) + ([xt] if prob.p else [])
        w = cp.hstack(parts) if len(parts) > 1 else parts[0]
        real = prob.real_w(i)
        if prob.loss in ("quadratic", "logbarrier"):
            Qi = prob.Q[i][np.ix_(real, real)]
            obj += 0.5 * cp.quad_form(w, cp.psd_wrap(Qi)) + prob.q[i][real] @ w
            if prob.loss == "logbarrier" and prob.d[i]:
                di = prob.d[i]
                on = np.flatnonzero(prob.bw[i, :di] > 0)
                if on.size:
                    obj -= prob.bw[i, on] @ cp.log(xs[i][on] - prob.lb[i, on])
        else:
            Fi = prob.F[i][:, real]
            obj += prob.weight[i] * cp.sum(cp.logistic(-cp.multiply(prob.y[i], Fi @ w)))
            obj += 0.5 * cp.sum(cp.multiply(prob.lam[i][real], cp.square(w)))
        if prob.nonsmooth and prob.l1[i] > 0:
            obj += prob.l1[i] * cp.norm1(w)
        if prob.C.shape[1] and prob.d[i]:
            cons.append(prob.C[i, :, :prob.d[i]] @ xs[i] == prob.c[i])
        if prob.Ct.shape[1] and prob.p:
            cons.append(prob.Ct[i] @ xt == prob.ct[i])
    if prob.m:
        cons.append(sum(a_block(prob.A, i, prob.d[i]) @ xs[i] for i in range(prob.n) if prob.d[i]) == prob.b.sum(0))
    pb = cp.Problem(cp.Minimize(obj), cons)
    try:
        pb.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    except Exception:  # noqa: BLE001 - solver options differ across versions
        pb.solve()
    if pb.status not in ("optimal", "optimal_inaccurate"):
        raise InputError(f"cvxpy: the problem is {pb.status}", prob.meta.get("spec"))
    x = np.zeros((prob.n, prob.dmax))
    for i in range(prob.n):
        if prob.d[i]:
            x[i, :prob.d[i]] = xs[i].value
    return x, (np.asarray(xt.value, float) if prob.p else np.zeros(0))
