"""``solve``: one call from a problem to a solution, a trace and the accounting summary."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.solve_decentralized.config import SolveConfig
from icmlkit.lib.solve_decentralized.problem import Problem

SUMMARY_KEYS = ("method", "backend", "n_nodes", "chi", "kappa_f", "kappa_ac", "kappa_ct", "iterations",
                "communications", "floats_sent", "a_mults", "grad_calls", "prox_calls", "local_solves",
                "oracle_calls", "rel_error", "constraint_residual", "converged", "seconds")
DPMM_RHO = 30.0   # dpmm's default penalty, in units of sqrt(mu_f L_f)/lambda_max(K^T K) [reconstructed]
TRACE_COLUMNS = ("iteration", "communications", "a_mults", "grad_calls", "rel_error", "constraint_residual",
                 "suboptimality", "floats_sent", "oracle_calls")


@dataclass
class SolveResult:
    x: np.ndarray
    xt: np.ndarray            # the node copies of x~ (n, p)
    trace: list
    summary: dict
    setup: dict = field(default_factory=dict)


def _fin(v):
    return None if v is None or not np.isfinite(v) else float(v)


class Monitor:
    """Error, residual and suboptimality against the central optimum: logging and the stopping
    test only (global quantities; never fed back into the iterates)."""

    def __init__(self, prob: Problem, ref, cfg: SolveConfig, counters_of=None):
        from icmlkit.lib.solve_decentralized.methods import n_links

        self.prob, self.cfg = prob, cfg
        self.links = n_links(prob.laplacian())
        self.ref = {"x": ref.x, "xt": ref.xt}
        self.norm = float(np.sqrt(np.sum(ref.x ** 2) + prob.n * np.sum(ref.xt ** 2)))
        w = np.concatenate([ref.x, np.repeat(ref.xt[None], prob.n, 0)], 1)
        self.fstar = prob.value(w)
        self.rows: list[dict] = []
        self.last: dict = {}
        self.counters_of = counters_of

    def measure(self, x, X) -> dict:
        from icmlkit.lib.solve_decentralized.reference import constraint_residual, rel_error

        prob = self.prob
        e = rel_error(prob, x, X, self.ref)
        r = constraint_residual(prob, x, X, self.norm)
        wbar = np.concatenate([x, np.repeat(X.mean(0)[None], prob.n, 0)], 1)
        sub = (prob.value(wbar) - self.fstar) / max(abs(self.fstar), 1e-300)
        return {"rel_error": e, "constraint_residual": r, "suboptimality": sub}

    def __call__(self, k, ops, u) -> bool:
        from icmlkit.lib.solve_decentralized.methods import floats_sent, oracle_calls

        x, X = ops.primal(u)
        meas = self.measure(x, X)
        cnt = ops.cnt
        row = {"iteration": k, "communications": cnt["rounds"], "a_mults": cnt["a_mults"],
               "grad_calls": cnt["grads"], **meas, "floats_sent": floats_sent(cnt, self.links),
               "oracle_calls": oracle_calls(cnt)}
        self.last = row
        if k % self.cfg.trace_every == 0 or k == 1:
            self.rows.append(row)
        if not np.isfinite(meas["rel_error"]) or meas["rel_error"] > 1e12:
            return True
        if self.cfg.iterations is not None:
            return False
        return self.converged(meas)

    def converged(self, meas) -> bool:
        tol = self.cfg.tol
        main = meas["rel_error"] if self.cfg.criterion == "error" else abs(meas["suboptimality"])
        return bool(main <= tol and meas["constraint_residual"] <= tol)

    def finish(self):
        if self.last and (not self.rows or self.rows[-1]["iteration"] != self.last["iteration"]):
            self.rows.append(self.last)


def predicted_scale(s) -> float:
    """sqrt(kappa_f) (sqrt(kappa_AC) + sqrt(kappa_Ct)) sqrt(chi): the communication bound per log(1/eps),
    up to the constant (the complexity claim of the paper's abstract)."""
    ka = s.kappa_ac if np.isfinite(s.kappa_ac) else 0.0
    kc = s.kappa_ct if np.isfinite(s.kappa_ct) else 0.0
    return float(math.sqrt(s.kappa_f) * (math.sqrt(ka) + math.sqrt(kc) or 1.0) * math.sqrt(s.chi))


def solve(cfg: SolveConfig, prob: Problem, *, ref=None, seed: int = 0, setup=None) -> SolveResult:
    """Solve (P) with ``cfg.method`` on ``cfg.backend``; the central optimum (``ref``, computed when
    not given) is used for the error, the residual and the stopping test only. ``setup``: a
    :class:`~icmlkit.lib.solve_decentralized.spectral.Setup` computed before (apapc-cheb, apapc, dpmm;
    its variant must be the method's: cheb for apapc-cheb, plain for apapc and dpmm), so that an
    expensive matrix-free setup is paid once for several runs."""
    from icmlkit.lib.solve_decentralized.reference import reference

    t0 = time.perf_counter()
    if ref is None:
        ref = reference(prob, cfg.reference)
    mon = Monitor(prob, ref, cfg)
    iters = cfg.iterations or cfg.max_iter
    W = prob.laplacian()
    given = setup
    if given is not None:
        want = {"apapc-cheb": "cheb", "apapc": "plain", "dpmm": "plain"}.get(cfg.method)
        if want is None or given.variant != want:
            raise UsageError(f"a precomputed setup of variant {given.variant!r} does not fit --method {cfg.method}")
    if prob.nonsmooth and cfg.method != "sliding":
        raise UsageError(f"the problem has an l1 term (non-smooth f): --method {cfg.method} needs a smooth f; "
                         "use --method sliding (Algorithm 2)")
    if prob.sparse and cfg.method in ("centralized", "tracking-admm", "extra", "gradient-tracking"):
        raise UsageError(f"--method {cfg.method} needs a dense coupled matrix A (this problem's A is sparse); "
                         "use apapc-cheb, apapc, dpmm or sliding")
    if cfg.method in ("apapc-cheb", "apapc"):
        from icmlkit.lib.solve_decentralized.methods import NodeOps, apapc
        from icmlkit.lib.solve_decentralized.spectral import make_setup

        setup = given or make_setup(prob, "cheb" if cfg.method == "apapc-cheb" else "plain", cfg.bounds,
                           rng=np.random.default_rng(seed), aug=cfg.aug, augment_mode=cfg.augment,
                           practical=cfg.practical, deg_k=cfg.deg_k, deg_w=cfg.deg_w,
                           eta_scale=cfg.step if cfg.step is not None else 1.0)
        t_loop = time.perf_counter()
        if cfg.backend == "dist":
            from icmlkit.lib.solve_decentralized.dist import run_dist

            out = run_dist(prob, setup, iters, monitor_cfg=(ref, cfg))
            x, X, k, cnt, rows = out["x"], out["X"], out["iterations"], out["counters"], out["trace"]
            mon.rows, mon.last = rows, (rows[-1] if rows else {})
        else:
            ops = NodeOps(prob.A, prob.b, prob.C, prob.c, prob.Ct, prob.ct, prob.grad, setup, lambda V: W @ V)
            u, k = apapc(ops, setup, iters, mon)
            x, X = ops.primal(u)
            cnt = ops.cnt
        loop_seconds = time.perf_counter() - t_loop
    elif cfg.method == "centralized":
        from icmlkit.lib.solve_decentralized.methods import CentralOps, apapc, central_setup
        from icmlkit.lib.solve_decentralized.reference import constraints

        E, e = constraints(prob)
        setup = central_setup(prob, E, cfg.aug)
        ops = CentralOps(prob, E, e, setup)
        t_loop = time.perf_counter()
        u, k = apapc(ops, setup, iters, mon)
        x, X = ops.primal(u)
        cnt = ops.cnt
        loop_seconds = time.perf_counter() - t_loop
    elif cfg.method in ("extra", "gradient-tracking"):
        from icmlkit.lib.solve_decentralized.methods import ConsensusOps, extra, gradient_tracking
        from icmlkit.lib.solve_decentralized.spectral import condition_numbers, exact_bounds

        _, lmax = exact_bounds(W)
        if prob.m or np.abs(prob.C).sum() or np.abs(prob.Ct).sum():
            # constrained: the consensus method runs on the dual (multiplier copies) [reconstructed]
            from icmlkit.lib.solve_decentralized.methods import DualConsensusOps

            if prob.loss != "quadratic":
                raise UsageError(f"--method {cfg.method} on a constrained problem runs on the dual and needs "
                                 "quadratic losses (its local step is an exact solve)")
            ops = DualConsensusOps(prob, lambda V: W @ V, lmax)
            w0 = np.zeros((prob.n, ops.k_rows))
            L_f = ops.L_dual
        else:
            cn = condition_numbers(prob)
            ops = ConsensusOps(prob.grad, prob.dmax, lambda V: W @ V, lmax)
            w0 = np.zeros((prob.n, prob.D))
            L_f = cn["L_f"]
        step = (cfg.step if cfg.step is not None else (1.0 if cfg.method == "extra" else 0.25)) / L_f
        t_loop = time.perf_counter()
        fn = extra if cfg.method == "extra" else gradient_tracking
        w, k = fn(ops, w0, step, iters, mon)
        x, X = ops.primal(w)
        cnt = ops.cnt
        loop_seconds = time.perf_counter() - t_loop
    elif cfg.method == "tracking-admm":
        from icmlkit.lib.solve_decentralized.methods import TrackingADMM
        from icmlkit.lib.solve_decentralized.spectral import exact_bounds

        if prob.loss != "quadratic" and cfg.local_steps is None:
            raise UsageError("--method tracking-admm needs quadratic losses (its local step is an exact solve); "
                             "give --local-steps T for T gradient steps instead")
        _, lmax = exact_bounds(W)
        alg = TrackingADMM(prob, lambda V: W @ V, lmax, cfg.rho if cfg.rho is not None else 1.0,
                           local_steps=cfg.local_steps)
        t_loop = time.perf_counter()
        v, k = alg.run(iters, mon)
        x, X = alg.primal(v)
        cnt = alg.cnt
        loop_seconds = time.perf_counter() - t_loop
    elif cfg.method == "dpmm":
        from icmlkit.lib.solve_decentralized.methods import NodeOps, dpmm, dpmm_prox
        from icmlkit.lib.solve_decentralized.spectral import make_setup

        # the plain reformulation (W, not W'; no Chebyshev) gives K and its bounds [reconstructed]
        setup = given or make_setup(prob, "plain", cfg.bounds, rng=np.random.default_rng(seed), aug=cfg.aug,
                           require_strong=False)
        rho, c = dpmm_steps(setup, cfg.rho if cfg.rho is not None else DPMM_RHO, prob.loss == "quadratic")
        prox = dpmm_prox(prob, c)
        ops = NodeOps(prob.A, prob.b, prob.C, prob.c, prob.Ct, prob.ct, prob.grad, setup, lambda V: W @ V)
        t_loop = time.perf_counter()
        u, k = dpmm(ops, rho, c, iters, prox, mon)
        x, X = ops.primal(u)
        cnt = ops.cnt
        loop_seconds = time.perf_counter() - t_loop
    elif cfg.method == "sliding":
        from icmlkit.lib.solve_decentralized.sliding import sliding

        t_loop = time.perf_counter()
        x, X, k, cnt = sliding(prob, cfg, mon)
        loop_seconds = time.perf_counter() - t_loop
    else:  # pragma: no cover - the config's choices
        raise UsageError(f"unknown --method {cfg.method}")
    mon.finish()
    from icmlkit.lib.solve_decentralized.methods import floats_sent, oracle_calls

    meas = mon.measure(x, X)
    from icmlkit.lib.solve_decentralized.spectral import condition_numbers

    cn = condition_numbers(prob) if setup is None else None
    chi = setup.chi if setup is not None and setup.chi else float(_chi(W))
    kf = setup.kappa_f if setup is not None else cn["kappa_f"]
    ka = setup.kappa_ac if setup is not None else cn["kappa_ac"]
    kc = setup.kappa_ct if setup is not None else cn["kappa_ct"]
    summary = {"method": cfg.method, "backend": cfg.backend, "n_nodes": prob.n, "chi": _fin(chi),
               "kappa_f": _fin(kf), "kappa_ac": _fin(ka), "kappa_ct": _fin(kc), "iterations": int(k),
               "communications": int(cnt["rounds"]), "floats_sent": floats_sent(cnt, mon.links),
               "floats_per_link_round": round(int(cnt.get("msg_floats", 0)) / max(int(cnt["rounds"]), 1), 3),
               "a_mults": int(cnt["a_mults"]), "grad_calls": int(cnt["grads"]), "prox_calls": int(cnt.get("prox", 0)),
               "local_solves": int(cnt.get("solves", 0)), "oracle_calls": oracle_calls(cnt),
               "rel_error": _fin(meas["rel_error"]), "constraint_residual": _fin(meas["constraint_residual"]),
               "suboptimality": _fin(meas["suboptimality"]), "converged": mon.converged(meas),
               "seconds": round(time.perf_counter() - t0, 4), "loop_seconds": round(loop_seconds, 4)}
    if cfg.method == "tracking-admm":
        summary.update(local_steps=cfg.local_steps, local_step="exact solve" if cfg.local_steps is None
                       else f"{cfg.local_steps} accelerated projected-gradient steps")
    if setup is not None:
        summary.update(setup_seconds=setup.setup_seconds)
    if setup is not None and cfg.method in ("apapc-cheb", "apapc"):
        summary.update(practical=bool(setup.practical), consensus_rows=setup.consensus, eta=setup.eta)
        summary.update(deg_w=setup.deg_w, deg_k=setup.deg_k,
                       predicted_communications_scale=_fin(predicted_scale(setup)),
                       predicted_communications=_fin(predicted_scale(setup) * math.log(1 / cfg.tol)))
    sd = setup.as_dict() if setup is not None else {}
    if cfg.method == "dpmm":
        sd.update(method="dpmm", dpmm_rho=rho, dpmm_c=c, dpmm_prox="exact" if prox is not None else "linearised")
    return SolveResult(x=x, xt=X, trace=mon.rows, summary=summary, setup=sd)


def dpmm_steps(setup, rho_units: float, exact_prox: bool) -> tuple[float, float]:
    """DPMM's penalty rho = rho_units * sqrt(mu_f L_f) / lambda_max(K^T K) and proximal step
    c = 0.99 / (rho lambda_max(K^T K)) (exact prox of f) or 0.99 / (L_f + rho lambda_max(K^T K))
    (f linearised) [reconstructed]."""
    L_k = setup.L_k if setup.L_k > 0 else 1.0
    scale = math.sqrt(max(setup.mu_f, 1e-12 * setup.L_f) * setup.L_f)
    rho = rho_units * scale / L_k
    c = 0.99 / (rho * L_k) if exact_prox else 0.99 / (setup.L_f + rho * L_k)
    return rho, c


def _chi(W):
    from icmlkit.lib.solve_decentralized.spectral import exact_bounds

    lmin, lmax = exact_bounds(W)
    return lmax / lmin


def solution_arrays(prob: Problem, res: SolveResult) -> dict:
    """The solution .npz: x (n, dmax, zero-padded), d (true sizes), xt (the mean copy), xt_copies."""
    xt = res.xt.mean(0) if res.xt.size else np.zeros(prob.p)
    return {"x": res.x, "d": np.asarray(prob.d), "xt": xt, "xt_copies": res.xt}
