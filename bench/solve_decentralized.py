"""Benchmark of solve-decentralized (there are no paper numbers; the targets are the issue's).
Parts (bench/_common.py harness):

mixed         n in {5, 10, 20} on path and ring, d_i = 5, m = 3, C_i one row, Ct_i 2 x 4, kappa_f in
              {10, 100, 1000}: APAPC + Chebyshev (theory constants) to rel. error and residual <= 1e-6
              (numpy KKT ground truth, checked against cvxpy on one cell); fitted log-log slopes of
              communications vs chi and vs kappa_f.
largest-cell  the largest cell (n = 20, path, kappa_f = 1000): communications of every method, each tuned
              by ``tune`` with the same budget (4 settings of its own knobs): APAPC + Chebyshev, plain and
              centralized APAPC (augmentation weight ``aug`` and ``augment``), Tracking-ADMM and DPMM
              [reconstructed] (rho), EXTRA and gradient tracking on the dual ([reconstructed]; step).
grid          kappa_f in {10, 100, 1000} x chi (n = 10 on Erdos-Renyi, ring, path: chi about 6, 10, 40), d_i = 5,
              m = 3: every method tuned by ``tune`` with the same budget (4 settings) beside APAPC + Chebyshev's
              theory row: APAPC + Chebyshev, the practical APAPC mode, plain APAPC, Tracking-ADMM exact and
              oracle-matched (T gradient steps), DPMM, EXTRA and gradient tracking on the dual; rounds, floats
              sent and local-oracle calls to 1e-6; a winner map (markdown table and PNG heatmap) per cost.
vfl           VFL ridge on breast_cancer (standardised) in 4 parties, shared bias as x~: the formulation's
              exact KKT solution on all 569 samples, and APAPC + Chebyshev on the first 100, vs
              scikit-learn's Ridge.
vfl-full      APAPC + Chebyshev on all 569 samples (about 13 minutes: the setup's dense eigen-solves of
              the 4676-dimensional K, kappa_K about 2.6e4, deg_k = 161).
a9a           a9a (LIBSVM test split) l2-logistic regression on 20 nodes (ring and Erdos-Renyi):
              communications to 1e-6 relative suboptimality vs scikit-learn's LogisticRegression,
              APAPC + Chebyshev vs EXTRA and gradient tracking, each tuned with the same budget (3).
a9a-vfl       a9a by feature blocks (VFL, sparse A_i): 4 parties on a path and 20 on a ring, APAPC +
              Chebyshev vs plain APAPC to 1e-6 relative suboptimality, DPMM beside them, the model vs
              scikit-learn (about 25 minutes on one core; each cell is a cached item, so a killed run
              resumes at the next cell).
dist          4 gloo processes on localhost vs the simulator (max |difference| of the iterates), wall time
              dist / sim, and the simulator's time to 1e-6 vs cvxpy's central solve (time_call each).

Run:  make bench TOOL=solve-decentralized   (or .venv/bin/python bench/solve_decentralized.py [--quick] [--part P])
"""
from __future__ import annotations

import json
import math

import numpy as np

from _common import Bench, speed_ratio, table, target, time_call, tune
from icmlkit.lib.core.runtime import numpy_rng
from icmlkit.lib.solve_decentralized.config import SolveConfig
from icmlkit.lib.solve_decentralized.generate import generate, hfl_logistic, vfl_ridge
from icmlkit.lib.solve_decentralized.reference import reference
from icmlkit.lib.solve_decentralized.solve import solve
from icmlkit.lib.solve_decentralized.sweep import fit_slopes

bench = Bench("solve-decentralized")
SEED = 0
QUIET = 10 ** 9  # trace_every: no trace


def _finite(v):
    """JSON has no inf or NaN (a diverged run's error): those become None."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _pick(s, keys=("iterations", "communications", "floats_sent", "a_mults", "grad_calls", "prox_calls",
                   "local_solves", "oracle_calls", "rel_error", "constraint_residual", "suboptimality", "converged",
                   "seconds")):
    return {k: _finite(s.get(k)) for k in keys if k in s}


# grid labels that are a method with fixed options (the practical APAPC mode, the oracle-matched Tracking-ADMM)
ALIASES = {"apapc-practical": ("apapc-cheb", {"practical": True}),
           "tracking-admm-grad": ("tracking-admm", {})}


def once(fn):
    """(fn(), its time_call record): one timed call of a solve of seconds to minutes, no warm-up."""
    got = {}
    rec = time_call(lambda: got.update(value=fn()), repeats=1, warmup=0)
    return got["value"], rec


def _label(cfg: dict) -> str:
    return "; ".join(f"{k} {v}" for k, v in cfg.items()) or "defaults"


def tuned_methods(ctx, name: str, prob, ref, grids: dict, budget: int, max_iter: dict, **common) -> dict:
    """Every method of ``grids`` tuned by ``tune`` with the same ``budget`` (score: communications to the
    tolerance; a setting that does not converge within its method's ``max_iter`` scores inf). Each run
    is a cached item. Returns {method: {best setting, its counts}, method_grid: {setting: counts}};
    when no setting of a method converged, its entry is the setting with the smallest final error,
    reported as a miss with its communications so far. The tune record goes to the part's provenance."""
    runs = {}

    def evaluate(method, cfg):
        key = f"{name}-{method}-" + "-".join(f"{k}{v}" for k, v in cfg.items())
        real, fixed = ALIASES.get(method, (method, {}))
        s = ctx.cached(key, lambda: _pick(solve(SolveConfig(method=real, max_iter=max_iter[method],
                                                             trace_every=QUIET, **common, **fixed, **cfg), prob,
                                                ref=ref).summary))
        runs[(method, _label(cfg))] = s
        ctx.log(f"{name} {method} {_label(cfg)}: {s['iterations']} it, {s['communications']} comms, "
                f"converged {s['converged']}")
        return s["communications"] if s["converged"] else math.inf

    rec = tune(grids, evaluate, budget=budget, maximize=False)
    for got in rec["methods"].values():  # a setting that did not converge scored inf: None in the JSON record
        got["scores"] = [_finite(v) for v in got["scores"]]
    ctx.record_tuning(name, rec)
    out = {}
    for method, got in rec["methods"].items():
        grid = {_label(c): runs[(method, _label(c))] for c in got["grid"]}
        if got["best"] is not None:
            best = got["best"]
        else:
            def err(c):  # a diverged setting (None or non-finite error) ranks last
                e = runs[(method, _label(c))]["rel_error"]
                return e if e is not None and np.isfinite(e) else np.inf
            best = min(got["grid"], key=err)
        out[method] = {**best, "max_iter": max_iter[method], **runs[(method, _label(best))]}
        out[f"{method}_grid"] = grid
    return out


# --------------------------------------------------------------------------- mixed


MIXED = {"graphs": ("path", "ring"), "nodes": (5, 10, 20), "kappas": (10.0, 100.0, 1000.0)}
MIXED_QUICK = {"graphs": ("path", "ring"), "nodes": (5, 10), "kappas": (10.0, 100.0)}


def mixed_problem(g: str, n: int, kap: float):
    prob = generate("mixed", n, g, seed_rng=numpy_rng(SEED, f"bench-{g}-{n}-{kap}"), kappa=kap)
    return prob, reference(prob)


@bench.part("mixed", doc="APAPC + Chebyshev on the 18-cell mixed grid, log-log slopes vs chi and kappa_f", hours=0.02)
def part_mixed(ctx) -> dict:
    grid = MIXED_QUICK if ctx.quick else MIXED
    rows, probs = [], {}
    for g in grid["graphs"]:
        for n in grid["nodes"]:
            for kap in grid["kappas"]:
                prob, ref = mixed_problem(g, n, kap)
                s = solve(SolveConfig(tol=1e-6, max_iter=200000, trace_every=QUIET), prob, ref=ref).summary
                rows.append({"graph": g, "n_nodes": n, "kappa_f_target": kap, "kappa_f": s["kappa_f"], "chi": s["chi"],
                             "kappa_ac": s["kappa_ac"], "kappa_ct": s["kappa_ct"], "deg_w": s["deg_w"],
                             "deg_k": s["deg_k"], **_pick(s),
                             "predicted_communications": s["predicted_communications"]})
                probs[(g, n, kap)] = (prob, ref)
                ctx.log(f"{g} n={n} kappa={kap}: {s['iterations']} it, {s['communications']} comms, "
                        f"rel. error {s['rel_error']:.1e}")
    slopes = fit_slopes(rows)
    # log-log slope vs kappa_f per (graph, n), averaged
    per_k = []
    for key in sorted({(r["graph"], r["n_nodes"]) for r in rows}):
        sel = sorted((r for r in rows if (r["graph"], r["n_nodes"]) == key and r["converged"]),
                     key=lambda r: r["kappa_f"])
        if len(sel) >= 2:
            per_k.append(np.polyfit(np.log([r["kappa_f"] for r in sel]), np.log([r["communications"] for r in sel]), 1)[0])
    slopes["slope_kappa_f_per_graph_mean"] = float(np.mean(per_k)) if per_k else None
    prob, ref = probs[("ring", 10, 100.0)]  # cvxpy agreement on one cell
    try:
        cv = reference(prob, "cvxpy")
        cvx_gap = float(max(np.abs(cv.x - ref.x).max(), np.abs(cv.xt - ref.xt).max()))
    except Exception as exc:  # noqa: BLE001 - cvxpy is optional
        cvx_gap = None
        ctx.log(f"cvxpy failed: {exc}")
    return {"rows": rows, "slopes": slopes, "cvxpy_vs_kkt_max_abs": cvx_gap}


# --------------------------------------------------------------------------- largest cell


LARGEST, LARGEST_QUICK = ("path", 20, 1000.0), ("path", 5, 100.0)
APAPC_GRID = [{"aug": 0.5}, {"aug": 1.0}, {"aug": 2.0}, {"aug": 1.0, "augment": "all"}]
LARGEST_GRIDS = {  # every method: 4 settings of its own knobs (the budget); aug 1.0 / augment auto is the theory
    "apapc-cheb": APAPC_GRID,
    "apapc": APAPC_GRID,
    "centralized": [{"aug": a} for a in (0.25, 0.5, 1.0, 2.0)],
    "tracking-admm": [{"rho": r} for r in (0.3, 1.0, 3.0, 10.0)],
    "dpmm": [{"rho": r} for r in (10.0, 30.0, 100.0, 300.0)],
    "extra": [{"step": s} for s in (0.75, 1.0, 1.5, 2.0)],
    "gradient-tracking": [{"step": s} for s in (0.25, 0.5, 0.75, 1.0)],
}
LARGEST_MAX_ITER = {"apapc-cheb": 200000, "apapc": 300000, "centralized": 300000, "tracking-admm": 50000,
                    "dpmm": 100000, "extra": 100000, "gradient-tracking": 100000}
FORMULATION = {
    "extra": "on the dual: multiplier copies of the coupled + consensus rows, exact local KKT solves [reconstructed]",
    "gradient-tracking": "on the dual: multiplier copies of the coupled + consensus rows, exact local KKT solves "
                         "[reconstructed]",
    "dpmm": "linearised proximal method of multipliers on the plain node-local reformulation K u = b' [reconstructed]",
}


@bench.part("largest-cell", doc="n=20 path kappa_f=1000: APAPC variants and the baselines, each tuned with budget 4",
            hours=0.1)
def part_largest_cell(ctx) -> dict:
    prob, ref = mixed_problem(*(LARGEST_QUICK if ctx.quick else LARGEST))
    grids = {m: g[:2] for m, g in LARGEST_GRIDS.items()} if ctx.quick else LARGEST_GRIDS
    max_iter = {m: min(v, 20000) for m, v in LARGEST_MAX_ITER.items()} if ctx.quick else LARGEST_MAX_ITER
    out = tuned_methods(ctx, "largest-cell", prob, ref, grids, 2 if ctx.quick else 4, max_iter, tol=1e-6)
    # APAPC + Chebyshev at the theory constants (the mixed part's run of this cell)
    out["apapc-cheb_theory"] = {"aug": 1.0, **out["apapc-cheb_grid"][_label({"aug": 1.0})]}
    for method, text in FORMULATION.items():
        out[method]["formulation"] = text
    out["cell"] = list(LARGEST_QUICK if ctx.quick else LARGEST)
    return out


# --------------------------------------------------------------------------- grid: kappa_f x chi, three costs


GRID = {"nodes": 10, "graphs": ("er", "ring", "path"), "kappas": (10.0, 100.0, 1000.0)}  # chi ~ 6, 10, 40
GRID_QUICK = {"nodes": 5, "graphs": ("er", "path"), "kappas": (10.0, 1000.0)}
GRID_GRIDS = {  # every method: 4 settings of its own knobs (the budget)
    "apapc-cheb": APAPC_GRID,   # the theory constants (aug 1.0 is the theory row); knobs aug / augment only
    # the practical mode (K = gamma W'^{1/2} on the consensus rows): inner Chebyshev degree, eta scale, W' degree
    "apapc-practical": [{"deg_k": 1, "step": 2.0, "deg_w": 2}, {"deg_k": 1, "step": 2.0, "deg_w": 3},
                        {"deg_k": 1, "step": 3.0, "deg_w": 2}, {"deg_k": 2, "step": 2.0, "deg_w": 2}],
    "apapc": APAPC_GRID,
    "tracking-admm": [{"rho": r} for r in (0.3, 1.0, 3.0, 10.0)],
    "tracking-admm-grad": [{"rho": r, "local_steps": t} for t in (3, 10) for r in (1.0, 3.0)],
    "dpmm": [{"rho": r} for r in (10.0, 30.0, 100.0, 300.0)],
    "extra": [{"step": s} for s in (0.75, 1.0, 1.5, 2.0)],
    "gradient-tracking": [{"step": s} for s in (0.25, 0.5, 0.75, 1.0)],
}
GRID_MAX_ITER = 30000
GRID_COSTS = {"rounds": "communications", "floats": "floats_sent", "oracle": "oracle_calls",
              "first-order oracle": "oracle_calls"}
GRID_COST_NOTE = {
    "rounds": "rounds of neighbour exchanges",
    "floats": "floats sent over all directed links",
    "oracle": "local-oracle calls per node (gradient, prox or exact local solve: each counted as one call)",
    "first-order oracle": "gradient calls per node, among the methods that call only gradients (APAPC variants and "
                          "the oracle-matched Tracking-ADMM; the exact-solve and prox methods left out)",
}
FIRST_ORDER = ("apapc-cheb", "apapc-practical", "apapc", "tracking-admm-grad")
APAPC_FAMILY = ("apapc-cheb", "apapc-practical", "apapc")


def _best_by(grid: dict, key: str):
    """(setting, run) of the converged run with the smallest ``key``, or (None, None)."""
    ok = [(lab, r) for lab, r in grid.items() if r.get("converged") and r.get(key) is not None]
    return min(ok, key=lambda t: t[1][key]) if ok else (None, None)


def grid_cell(ctx, graph: str, n: int, kap: float, grids: dict, budget: int, max_iter: int) -> dict:
    from icmlkit.lib.solve_decentralized.spectral import condition_numbers, exact_bounds

    prob = generate("mixed", n, graph, seed_rng=numpy_rng(SEED, f"grid-{graph}-{n}-{kap}"), kappa=kap)
    ref = reference(prob)
    lo, hi = exact_bounds(prob.laplacian())
    name = f"grid-{graph}-{n}-{kap:g}"
    tuned = tuned_methods(ctx, name, prob, ref, grids, budget, {m: max_iter for m in grids}, tol=1e-6)
    cell = {"graph": graph, "n_nodes": n, "kappa_f_target": kap, "kappa_f": condition_numbers(prob)["kappa_f"],
            "chi": hi / lo, "methods": {}, "winner": {}}
    for m in grids:
        grid = tuned[f"{m}_grid"]
        cell["methods"][m] = {"grid": grid}
        for cost, key in GRID_COSTS.items():
            lab, run = _best_by(grid, key)
            cell["methods"][m][cost] = {"setting": lab, "value": None if run is None else run[key],
                                        "iterations": None if run is None else run["iterations"]}
    cell["theory"] = tuned["apapc-cheb_grid"][_label({"aug": 1.0})]
    for cost in GRID_COSTS:
        pool = FIRST_ORDER if cost == "first-order oracle" else tuple(grids)
        vals = {m: cell["methods"][m][cost]["value"] for m in pool if m in grids}
        vals = {m: v for m, v in vals.items() if v is not None}
        cell["winner"][cost] = min(vals, key=vals.get) if vals else None
    return cell


@bench.part("grid", doc="kappa_f x chi grid (n=10: ER, ring, path x kappa_f 10, 100, 1000): every method tuned with "
            "budget 4 beside the theory row; rounds, floats sent, local-oracle calls; winner maps", hours=0.2)
def part_grid(ctx) -> dict:
    g = GRID_QUICK if ctx.quick else GRID
    grids = {m: v[:2] for m, v in GRID_GRIDS.items()} if ctx.quick else GRID_GRIDS
    budget, max_iter = (2, 5000) if ctx.quick else (4, GRID_MAX_ITER)
    cells = []
    for graph in g["graphs"]:
        for kap in g["kappas"]:
            ctx.log(f"cell {graph} n={g['nodes']} kappa_f={kap:g}")
            cells.append(grid_cell(ctx, graph, g["nodes"], kap, grids, budget, max_iter))
    return {"nodes": g["nodes"], "graphs": list(g["graphs"]), "kappas": list(g["kappas"]), "budget": budget,
            "max_iter": max_iter, "tol": 1e-6, "grids": grids, "cells": cells,
            "aliases": {k: {"method": v[0], **v[1]} for k, v in ALIASES.items()}}


# --------------------------------------------------------------------------- breast_cancer (VFL ridge)


def _breast_cancer():
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y.astype(float)


def _vfl_cell(X, y, alpha, method, max_iter, tol):
    from sklearn.linear_model import Ridge

    prob = vfl_ridge(X, y, 4, alpha, "path")
    sk = Ridge(alpha=alpha, solver="cholesky").fit(X, y)
    ref = reference(prob)
    blocks = prob.meta["blocks"]
    refc = np.concatenate([ref.x[i, :len(b)] for i, b in enumerate(blocks)])
    if method is None:   # the formulation only: its exact KKT solution against scikit-learn
        return {"samples": int(X.shape[0]), "reference_kkt_coef_diff_vs_sklearn": float(np.abs(refc - sk.coef_).max()),
                "reference_kkt_intercept_diff_vs_sklearn": float(abs(ref.xt[0] - sk.intercept_))}
    res, rec = once(lambda: solve(SolveConfig(method=method, tol=tol, max_iter=max_iter, trace_every=QUIET), prob,
                                  ref=ref))
    coef = np.concatenate([res.x[i, :len(b)] for i, b in enumerate(blocks)])
    return {"samples": int(X.shape[0]), "method": method,
            "coef_max_abs_diff_vs_sklearn": float(np.abs(coef - sk.coef_).max()),
            "intercept_abs_diff_vs_sklearn": float(abs(res.xt.mean() - sk.intercept_)),
            "reference_kkt_coef_diff_vs_sklearn": float(np.abs(refc - sk.coef_).max()),
            **_pick(res.summary), "kappa_f": res.summary["kappa_f"], "deg_k": res.summary.get("deg_k"),
            "wall_seconds": round(rec["median_s"], 2)}


@bench.part("vfl", doc="breast_cancer VFL ridge: exact KKT on 569 samples, APAPC + Chebyshev on 100", hours=0.01)
def part_vfl(ctx) -> dict:
    X, y = _breast_cancer()
    sub = 40 if ctx.quick else 100
    return {"alpha": 1.0, "parties": 4, "full_formulation": _vfl_cell(X, y, 1.0, None, 0, 0.0),
            "subset100_apapc_cheb": _vfl_cell(X[:sub], y[:sub], 1.0, "apapc-cheb", 4000, 1e-8)}


@bench.part("vfl-full", doc="breast_cancer VFL ridge: APAPC + Chebyshev on all 569 samples", hours=0.25)
def part_vfl_full(ctx) -> dict:
    X, y = _breast_cancer()
    if ctx.quick:
        X, y = X[:60], y[:60]
    return _vfl_cell(X, y, 1.0, "apapc-cheb", 200000, 1e-8)


# --------------------------------------------------------------------------- a9a


def _a9a(quick: bool):
    """(X, y) of a9a's test split (shared/data/a9a/a9a.t; --quick: its first 2,000 rows), or None."""
    from icmlkit.lib.core.io import shared_data_dir
    from icmlkit.lib.solve_decentralized.problem import read_libsvm

    folder = shared_data_dir("a9a")
    if folder is None or not (folder / "a9a.t").exists():
        return None
    X, y = read_libsvm(folder / "a9a.t", 123)
    return (X[:2000], y[:2000]) if quick else (X, y)


A9A_GRIDS = {"apapc-cheb": [{"aug": a} for a in (0.5, 1.0, 2.0)],
             "extra": [{"step": s} for s in (0.5, 1.0, 1.5)],
             "gradient-tracking": [{"step": s} for s in (0.1, 0.25, 0.5)]}


@bench.part("a9a", doc="a9a HFL logistic on 20 nodes (ring, ER): APAPC + Chebyshev vs EXTRA and gradient tracking, "
            "each tuned with budget 3", hours=0.03)
def part_a9a(ctx) -> dict:
    from sklearn.linear_model import LogisticRegression

    data = _a9a(ctx.quick)
    if data is None:
        return {"skipped": "shared/data/a9a/a9a.t not found"}
    X, y = data
    N, lam = X.shape[0], 1e-2
    nodes = 5 if ctx.quick else 20
    sk = LogisticRegression(C=1 / (lam * N), fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, y)
    out = {"samples": N, "features": X.shape[1], "lam": lam, "nodes": nodes}
    grids = {m: g[:2] for m, g in A9A_GRIDS.items()} if ctx.quick else A9A_GRIDS
    for graph in ("ring", "er"):
        prob = hfl_logistic(X, y, nodes, lam, graph, rng=numpy_rng(SEED, "a9a-er"))
        ref = reference(prob)   # Newton: checked against sklearn here
        cell = {"newton_vs_sklearn_max_abs": float(np.abs(ref.xt - sk.coef_[0]).max())}
        cell.update(tuned_methods(ctx, f"a9a-{graph}", prob, ref, grids, 2 if ctx.quick else 3,
                                  {m: 30000 for m in grids}, tol=1e-6, criterion="suboptimality"))
        out[graph] = cell
    return out


A9A_SMALL_LAM = 1e-4
A9A_SMALL_LAM_GRIDS = {  # budget 2 each (CPU); the practical APAPC mode beside the theory constants
    "apapc-cheb": [{"aug": 0.5}, {"aug": 1.0}],
    "apapc-practical": [{"deg_k": 1, "step": 2.0, "deg_w": 2}, {"deg_k": 2, "step": 2.0, "deg_w": 2}],
    "extra": [{"step": 1.0}, {"step": 1.5}],
    "gradient-tracking": [{"step": 0.25}, {"step": 0.5}],
}
A9A_SMALL_LAM_MAX_ITER = 20000


@bench.part("a9a-lam1e-4", doc="a9a HFL logistic on a 20-node ring at lam 1e-4 (kappa_f about 100x that of lam "
            "1e-2): APAPC + Chebyshev, the practical mode, EXTRA and gradient tracking, each tuned with budget 2",
            hours=0.1)
def part_a9a_small_lam(ctx) -> dict:
    from sklearn.linear_model import LogisticRegression

    data = _a9a(ctx.quick)
    if data is None:
        return {"skipped": "shared/data/a9a/a9a.t not found"}
    X, y = data
    N, lam = X.shape[0], A9A_SMALL_LAM
    nodes = 5 if ctx.quick else 20
    sk = LogisticRegression(C=1 / (lam * N), fit_intercept=False, tol=1e-12, max_iter=100000).fit(X, y)
    prob = hfl_logistic(X, y, nodes, lam, "ring", rng=numpy_rng(SEED, "a9a-er"))
    ref = reference(prob)
    grids = {m: g[:1] for m, g in A9A_SMALL_LAM_GRIDS.items()} if ctx.quick else A9A_SMALL_LAM_GRIDS
    cap = 3000 if ctx.quick else A9A_SMALL_LAM_MAX_ITER
    out = {"samples": N, "features": X.shape[1], "lam": lam, "nodes": nodes, "graph": "ring", "max_iter": cap,
           "newton_vs_sklearn_max_abs": float(np.abs(ref.xt - sk.coef_[0]).max())}
    out.update(tuned_methods(ctx, "a9a-lam1e-4-ring", prob, ref, grids, 1 if ctx.quick else 2,
                             {m: cap for m in grids}, tol=1e-6, criterion="suboptimality"))
    return out


A9A_VFL_CELLS = ((4, "path"), (20, "ring"))
A9A_VFL_DPMM_RHO, A9A_VFL_DPMM_ITERS = 10.0, 5000
# methods not run on a cell, with the reason (stored in the cell and shown in the table)
_SLOW_SETUP = ("not run: its matrix-free setup, ARPACK's smallest eigenvalue of K K^T (325,620 dims; the plain "
               "W' = W / lambda_max leaves K far worse conditioned than the Chebyshev W'), had not finished after {} "
               "on one core")
_ELSEWHERE = ("; run instead in the part a9a-vfl-ring20 (one shared matrix-free Lanczos setup, iteration caps), whose "
              "result the report puts in this row")
A9A_VFL_NOT_RUN = {(20, "ring", "apapc"): _SLOW_SETUP.format("45 min (2026-12-04) and 50 min (2026-12-05)") + _ELSEWHERE,
                   (20, "ring", "dpmm"): _SLOW_SETUP.format("15 min (2026-12-05; DPMM uses the plain setup's bounds)")
                   + _ELSEWHERE}


def a9a_vfl_cell(X, y, sk, hfl, parties: int, graph: str, max_iter: int, methods=("apapc-cheb", "apapc", "dpmm"),
                 not_run=None, shared_plain_setup: bool = False, caps: dict | None = None) -> dict:
    from icmlkit.lib.solve_decentralized.generate import vfl_logistic

    from _common import commit, now

    lam = 1e-2
    prob = vfl_logistic(X, y, parties, lam, graph, rng=numpy_rng(SEED, f"a9a-vfl-{parties}-{graph}"))
    ref, t_ref = once(lambda: reference(prob))
    blocks = prob.meta["blocks"]

    def coef(x):
        return np.concatenate([x[i, :len(b)] for i, b in enumerate(blocks)])

    w = coef(ref.x)
    cell = {"parties": parties, "graph": graph, "z_scale": prob.meta["z_scale"], "date": now(), "commit": commit(),
            "reference_seconds": round(t_ref["median_s"], 2),
            "reference_vs_sklearn_max_abs": float(np.abs(w - sk.coef_[0]).max()),
            "reference_vs_hfl_max_abs": float(np.abs(w - hfl.xt).max())}
    not_run = A9A_VFL_NOT_RUN if not_run is None else not_run
    plain = None
    if shared_plain_setup:   # plain APAPC and DPMM share one matrix-free plain setup, timed once
        from icmlkit.lib.solve_decentralized.spectral import make_setup

        plain, t_setup = once(lambda: make_setup(prob, "plain", "exact", rng=np.random.default_rng(0)))
        cell["plain_setup"] = {"seconds": round(t_setup["median_s"], 2), "lanczos": plain.lanczos,
                               "mu_k": plain.mu_k, "L_k": plain.L_k, "mu_g": plain.mu_g, "L_g": plain.L_g}
    caps = caps or {}
    for method, rho, iters in (("apapc-cheb", None, caps.get("apapc-cheb", max_iter)),
                               ("apapc", None, caps.get("apapc", max_iter)),
                               ("dpmm", A9A_VFL_DPMM_RHO, caps.get("dpmm", min(max_iter, A9A_VFL_DPMM_ITERS)))):
        if method not in methods:
            continue
        if (parties, graph, method) in not_run:
            cell[method] = {"not_run": not_run[(parties, graph, method)]}
            continue
        res, rec = once(lambda method=method, rho=rho, iters=iters: solve(SolveConfig(
            method=method, rho=rho, tol=1e-6, criterion="suboptimality", max_iter=iters, trace_every=QUIET),
            prob, ref=ref, setup=plain if method in ("apapc", "dpmm") else None))
        s = res.summary
        cell[method] = {**({"rho": rho} if rho else {}), **_pick(s), "max_iter": iters,
                        "coef_max_abs_diff_vs_sklearn": float(np.abs(coef(res.x) - sk.coef_[0]).max()),
                        "coef_max_abs_diff_vs_reference": float(np.abs(coef(res.x) - w).max()),
                        "loop_seconds": s["loop_seconds"], "deg_k": s.get("deg_k"), "deg_w": s.get("deg_w"),
                        "kappa_ac": s["kappa_ac"], "chi": s["chi"], "wall_seconds": round(rec["median_s"], 2),
                        "setup_seconds": s.get("setup_seconds"), "lanczos": res.setup.get("lanczos")}
    return cell


@bench.part("a9a-vfl", doc="a9a by feature blocks (VFL): APAPC + Chebyshev vs plain APAPC, DPMM beside; resumable "
            "per cell", hours=0.45)
def part_a9a_vfl(ctx) -> dict:
    """EXTRA, gradient tracking and Tracking-ADMM are not run: on a constrained problem their local step
    is an exact solve of a quadratic."""
    from sklearn.linear_model import LogisticRegression

    data = _a9a(ctx.quick)
    if data is None:
        return {"skipped": "shared/data/a9a/a9a.t not found"}
    X, y = data
    N, lam = X.shape[0], 1e-2
    sk, t_sk = once(lambda: LogisticRegression(C=1 / (lam * N), fit_intercept=False, tol=1e-12,
                                               max_iter=10000).fit(X, y))
    hfl, t_hfl = once(lambda: reference(hfl_logistic(X, y, 4, lam, "ring", rng=numpy_rng(SEED, "a9a-vfl-hfl"))))
    out = {"samples": N, "features": X.shape[1], "lam": lam, "sklearn_seconds": round(t_sk["median_s"], 2),
           "hfl_newton_seconds": round(t_hfl["median_s"], 2), "cells": []}
    for parties, graph in A9A_VFL_CELLS[:1] if ctx.quick else A9A_VFL_CELLS:
        ctx.log(f"{parties} parties on a {graph} ...")
        out["cells"].append(ctx.cached(f"cell-{parties}-{graph}", lambda parties=parties, graph=graph: a9a_vfl_cell(
            X, y, sk, hfl, parties, graph, 3000 if ctx.quick else 30000)))
    return out


A9A_VFL_RING20_CAPS = {"apapc": 4000, "dpmm": 2000}   # iteration caps (the CPU budget of the run)


@bench.part("a9a-vfl-ring20", doc="a9a VFL, 20 parties on a ring: plain APAPC and DPMM with the matrix-free Lanczos "
            "setup (its seconds reported); merged into the a9a-vfl table", hours=0.15)
def part_a9a_vfl_ring20(ctx) -> dict:
    """The cell the part a9a-vfl could not run: plain APAPC's and DPMM's setup needs lambda_min(K K^T)
    of the plain K (325,620 dimensions), which ARPACK had not found in 45-50 min; the setup's smallest
    eigenvalues now come from plain Lanczos with a Ritz-residual stop (spectral.lanczos_extremes)."""
    from sklearn.linear_model import LogisticRegression

    data = _a9a(ctx.quick)
    if data is None:
        return {"skipped": "shared/data/a9a/a9a.t not found"}
    X, y = data
    N, lam = X.shape[0], 1e-2
    sk = LogisticRegression(C=1 / (lam * N), fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, y)
    hfl = reference(hfl_logistic(X, y, 4, lam, "ring", rng=numpy_rng(SEED, "a9a-vfl-hfl")))
    caps = {"apapc": 500, "dpmm": 500} if ctx.quick else A9A_VFL_RING20_CAPS
    cell = ctx.cached("cell-20-ring-plain", lambda: a9a_vfl_cell(X, y, sk, hfl, 20, "ring", 0, methods=("apapc", "dpmm"),
                                                                   not_run={}, shared_plain_setup=True, caps=caps))
    return {"samples": N, "features": X.shape[1], "lam": lam, "cell": cell}


# --------------------------------------------------------------------------- dist


@bench.part("dist", doc="4 gloo processes vs the simulator: iterates, wall time, vs cvxpy", hours=0.02)
def part_dist(ctx) -> dict:
    prob = generate("mixed", 4, "ring", seed_rng=numpy_rng(SEED, "bench-dist"), kappa=10.0)
    ref = reference(prob)
    got = {}
    t_sim = time_call(lambda: got.update(sim=solve(SolveConfig(tol=1e-6, trace_every=QUIET), prob, ref=ref)),
                      repeats=5, warmup=1)
    t_dist = time_call(lambda: got.update(dist=solve(SolveConfig(tol=1e-6, backend="dist", trace_every=QUIET), prob,
                                                     ref=ref)), repeats=1 if ctx.quick else 3, warmup=0)
    sim, dst = got["sim"], got["dist"]
    diff = float(max(np.abs(sim.x - dst.x).max(), np.abs(sim.xt - dst.xt).max()))
    try:
        t_cvx = time_call(lambda: reference(prob, "cvxpy"), repeats=5, warmup=1)
    except Exception:  # noqa: BLE001 - cvxpy is optional
        t_cvx = None
    dist_sim = speed_ratio(t_dist, t_sim)
    sim_cvx = speed_ratio(t_sim, t_cvx) if t_cvx else None
    return {"max_abs_diff_dist_vs_sim": diff, "iterations_sim": sim.summary["iterations"],
            "iterations_dist": dst.summary["iterations"], "wall_sim": round(t_sim["median_s"], 3),
            "wall_dist": round(t_dist["median_s"], 3), "wall_ratio_dist_over_sim": round(dist_sim["ratio"], 2),
            "wall_cvxpy": None if t_cvx is None else round(t_cvx["median_s"], 3),
            "sim_time_to_1e-6_over_cvxpy": None if sim_cvx is None else round(sim_cvx["ratio"], 3),
            "communications": sim.summary["communications"],
            "timing": {"sim": t_sim, "dist": t_dist, "cvxpy": t_cvx, "dist_over_sim": dist_sim,
                       "sim_over_cvxpy": sim_cvx}}


# --------------------------------------------------------------------------- report


def _vfl_full_target(full):
    if not full:
        return target(None, 1e-6, False, "not run on all 569 samples (part vfl-full); see the part vfl for the "
                      "100-sample APAPC+Cheb run and the full-data KKT solution")
    gap = max(full["coef_max_abs_diff_vs_sklearn"], full["intercept_abs_diff_vs_sklearn"])
    return target(gap, 1e-6, gap <= 1e-6 and bool(full["converged"]),
                  f"all {full['samples']} samples, 4 parties (path): max |coef - sklearn| and |intercept - sklearn|; "
                  f"{full['iterations']} iterations, {full['communications']} communications, deg_k {full['deg_k']}, "
                  f"{full['wall_seconds']} s")


def _tuned(base: dict) -> str:
    """How the APAPC + Chebyshev entry a ratio divides by was chosen (legacy runs: theory constants)."""
    return "" if "apapc-cheb_grid" not in base else "; every method tuned with the same budget"


def make_targets(res: dict) -> dict:
    targets = {}
    rows, slopes = res.get("mixed"), res.get("slopes")
    if rows:
        targets.update({
            "mixed_all_cells_rel_error_le_1e-6": target(max(r["rel_error"] for r in rows), 1e-6,
                                                        all(r["converged"] for r in rows), f"max over the {len(rows)} cells"),
            "mixed_all_cells_residual_le_1e-6": target(max(r["constraint_residual"] for r in rows), 1e-6,
                                                       max(r["constraint_residual"] for r in rows) <= 1e-6,
                                                       f"max over the {len(rows)} cells"),
            "slope_communications_vs_chi": target(slopes["slope_chi"], [0.4, 0.6],
                                                  slopes["slope_chi"] is not None and 0.4 <= slopes["slope_chi"] <= 0.6,
                                                  "OLS of log comms on log chi, log kappa_f, log(sqrt kAC + sqrt kCt)"),
            "slope_communications_vs_kappa_f": target(slopes["slope_kappa_f"], [0.4, 0.6],
                                                      slopes["slope_kappa_f"] is not None
                                                      and 0.4 <= slopes["slope_kappa_f"] <= 0.6, "same regression"),
        })
    base = res.get("largest_cell")
    if base:
        largest = base["apapc-cheb"]
        ta = base["tracking-admm"]
        ratio = (ta["communications"] / largest["communications"]) if ta.get("converged") and largest["converged"] \
            else None
        targets["comms_tracking_admm_over_apapc_cheb_largest_cell"] = target(
            ratio, 3.0, ratio is not None and ratio >= 3.0,
            "n=20 path kappa_f=1000; Tracking-ADMM at its best rho" + _tuned(base))
        for method in ("dpmm", "extra", "gradient-tracking"):
            b = base.get(method)
            if not isinstance(b, dict):
                continue
            if b.get("converged"):
                r = b["communications"] / largest["communications"]
                note = f"best {'rho' if method == 'dpmm' else 'step'} of the grid; > 1: APAPC+Cheb fewer (no " \
                       "threshold in the issue: reported beside Tracking-ADMM)" + _tuned(base)
            else:
                r = None
                note = (f"did not reach 1e-6 in {b['max_iter']} iterations ({b['communications']} communications, rel. "
                        f"error {b['rel_error']:.2e}); no threshold in the issue: reported beside Tracking-ADMM")
            targets[f"comms_{method.replace('-', '_')}_over_apapc_cheb_largest_cell"] = target(
                r, None, r is not None and r > 1.0, note)
    targets.update(grid_targets(res.get("grid")))
    vfl = res.get("vfl_breast_cancer")
    if vfl:
        sub = vfl["subset100_apapc_cheb"]
        targets.update({
            "vfl_breast_cancer_coef_vs_sklearn_ridge_apapc_cheb_full": _vfl_full_target(vfl.get("full_apapc_cheb")),
            "vfl_breast_cancer_subset100_apapc_cheb_vs_sklearn_ridge": target(
                sub["coef_max_abs_diff_vs_sklearn"], 1e-6,
                sub["coef_max_abs_diff_vs_sklearn"] <= 1e-6 and sub["intercept_abs_diff_vs_sklearn"] <= 1e-6,
                f"first {sub['samples']} samples"),
            "vfl_breast_cancer_full_formulation_kkt_vs_sklearn_ridge": target(
                vfl["full_formulation"]["reference_kkt_coef_diff_vs_sklearn"], 1e-6,
                vfl["full_formulation"]["reference_kkt_coef_diff_vs_sklearn"] <= 1e-6,
                "the VFL formulation's exact KKT solution (569 samples), not an iterative run"),
        })
    dist = res.get("dist")
    if dist:
        targets["dist_4_gloo_vs_sim_iterates"] = target(dist["max_abs_diff_dist_vs_sim"], 1e-10,
                                                        dist["max_abs_diff_dist_vs_sim"] <= 1e-10, "max |x_dist - x_sim|")
    a9a = res.get("a9a") or {}
    if "ring" in a9a:
        for g in ("ring", "er"):
            c = a9a[g]
            ap, ex, gt = c["apapc-cheb"], c["extra"], c["gradient-tracking"]
            best = min((v["communications"] for v in (ex, gt) if v.get("converged")), default=None)
            r = best / ap["communications"] if best and ap.get("converged") else None
            targets[f"a9a_{g}_comms_best_of_extra_gt_over_apapc_cheb"] = target(
                r, 1.0, r is not None and r >= 1.0, "communications to 1e-6 rel. suboptimality; > 1: APAPC+Cheb fewer"
                + _tuned(c))
    small = res.get("a9a_small_lam") or {}
    if "apapc-cheb" in small:
        ours = [small[m] for m in ("apapc-cheb", "apapc-practical") if small.get(m, {}).get("converged")]
        base = [small[m] for m in ("extra", "gradient-tracking") if small.get(m, {}).get("converged")]
        r = min(b["communications"] for b in base) / min(o["communications"] for o in ours) if ours and base else None
        miss = ""
        if ours and not base:
            best = min(o["communications"] for o in ours)
            miss = (f"; neither EXTRA nor gradient tracking reached 1e-6 within {small['max_iter']} rounds (final "
                    f"suboptimality {small['extra']['suboptimality']:.1e} and "
                    f"{small['gradient-tracking']['suboptimality']:.1e}), so they need more than "
                    f"{small['max_iter'] / best:.1f}x the best APAPC's {best} rounds (a lower bound, no value)")
        elif not ours:
            miss = "; no APAPC setting converged within the cap"
        targets["a9a_lam1e-4_ring_comms_best_of_extra_gt_over_best_apapc"] = target(
            r, None, r is not None and r > 1.0 if r is not None else bool(ours and not base),
            "lam 1e-4 (kappa_f about 100x lam 1e-2's), 20-node ring, to 1e-6 rel. suboptimality; best of APAPC + "
            "Chebyshev and the practical mode; > 1: APAPC fewer (reported; budget 2 each)" + miss)
    for c in (res.get("a9a_vfl") or {}).get("cells", []):
        key, ap, pl = f"a9a_vfl_{c['parties']}_{c['graph']}", c["apapc-cheb"], c["apapc"]
        targets[f"{key}_apapc_cheb_suboptimality_le_1e-6"] = target(
            ap["suboptimality"], 1e-6, bool(ap["converged"]),
            f"feature blocks, {c['parties']} parties on a {c['graph']}; {ap['iterations']} iterations, "
            f"{ap['communications']} communications, residual {ap['constraint_residual']:.1e}")
        targets[f"{key}_apapc_cheb_coef_vs_sklearn"] = target(
            ap["coef_max_abs_diff_vs_sklearn"], None, True,
            f"max |w - sklearn| (no threshold in the issue); the exact optimum itself is "
            f"{c['reference_vs_sklearn_max_abs']:.1e} from sklearn and {c['reference_vs_hfl_max_abs']:.1e} from the "
            "horizontal split's")
        r = pl["communications"] / ap["communications"] if ap["converged"] and pl.get("converged") else None
        capped = ""
        if "not_run" not in pl and not pl.get("converged"):
            capped = (f"; plain APAPC ran (part {pl.get('part', 'a9a-vfl')}, its matrix-free Lanczos setup "
                      f"{pl.get('setup_seconds')} s) but did not reach 1e-6 within its cap of {pl.get('max_iter')} "
                      f"iterations ({pl['communications']} communications, suboptimality {pl['suboptimality']:.1e}, "
                      f"residual {pl['constraint_residual']:.1e}): the cap is the CPU budget of the run")
        targets[f"{key}_comms_apapc_over_apapc_cheb"] = target(
            r, None, r is not None and r > 1.0, "plain APAPC's communications over APAPC+Cheb's, both to 1e-6; "
            "> 1: Chebyshev fewer (no threshold in the issue)" + (f"; plain APAPC {pl['not_run']}" if "not_run" in pl
                                                                   else capped))
    return targets


def _e(v) -> str:
    return "" if v is None else f"{v:.2e}"


def _corner(grid: dict) -> dict | None:
    """The high-kappa_f, high-chi cell."""
    cells = grid.get("cells") or []
    return max(cells, key=lambda c: (c["kappa_f_target"], c["chi"])) if cells else None


def grid_targets(grid: dict | None) -> dict:
    if not grid or not grid.get("cells"):
        return {}
    out = {}
    runs = [r for c in grid["cells"] for m in c["methods"].values() for r in m["grid"].values()]
    have = sum(1 for r in runs if r.get("floats_sent") is not None and r.get("oracle_calls") is not None)
    out["floats_sent_reported"] = target(
        have / len(runs), 1.0, have == len(runs),
        f"share of the grid part's {len(runs)} runs ({len(grid['cells'])} cells x {len(grid['grids'])} methods x "
        f"budget {grid['budget']}) whose result carries floats_sent and oracle_calls (every method's summary, --json "
        "and trace carry both)")
    c = _corner(grid)
    best = {m: v["rounds"]["value"] for m, v in c["methods"].items() if v["rounds"]["value"] is not None}
    ours = {m: v for m, v in best.items() if m in APAPC_FAMILY}
    others = {m: v for m, v in best.items() if m not in APAPC_FAMILY}
    where = f"n={c['n_nodes']} {c['graph']} (chi {c['chi']:.1f}), kappa_f {c['kappa_f_target']:g}"
    if ours and others:
        mo, mb = min(ours, key=ours.get), min(others, key=others.get)
        r = others[mb] / ours[mo]
        note = (f"{where}: best baseline {mb} {others[mb]} rounds over best APAPC ({mo}, "
                f"{c['methods'][mo]['rounds']['setting']}) {ours[mo]}; > 1: APAPC fewer; every method tuned with "
                f"budget {grid['budget']}")
    else:
        r, note = None, f"{where}: no converged APAPC or baseline run"
    out["apapc_rounds_best_high_kappa_chi_equal_budget"] = target(r, 1.0, r is not None and r > 1.0, note)
    if ours and best.get("tracking-admm-grad"):
        mo = min(ours, key=ours.get)
        r2 = best["tracking-admm-grad"] / ours[mo]
        out["apapc_rounds_vs_oracle_matched_tracking_admm_high_kappa_chi"] = target(
            r2, None, r2 > 1.0, f"{where}: the oracle-matched Tracking-ADMM (T gradient steps per local problem, "
            f"{c['methods']['tracking-admm-grad']['rounds']['setting']}) {best['tracking-admm-grad']} rounds over best "
            f"APAPC ({mo}) {ours[mo]}; > 1: APAPC fewer (reported)")
    th = c["theory"]
    if th.get("converged") and others:
        mb = min(others, key=others.get)
        out["apapc_theory_rounds_over_best_baseline_high_kappa_chi"] = target(
            th["communications"] / others[mb], None, False,
            f"{where}: APAPC + Chebyshev at the theory constants, {th['communications']} rounds, over {mb}'s "
            f"{others[mb]} (reported; < 1 would be a win)")
    for cost in GRID_COSTS:
        won = sum(1 for cc in grid["cells"] if cc["winner"].get(cost) in APAPC_FAMILY)
        out[f"grid_cells_won_by_apapc_{cost.replace(' ', '_').replace('-', '_')}"] = target(
            won, None, won > 0, f"of {len(grid['cells'])} cells, by {GRID_COST_NOTE[cost]} (reported)")
    return out


def _chi_label(grid: dict, g: str) -> str:
    """The graph's chi over its cells (an Erdos-Renyi graph is drawn per cell, so its chi varies)."""
    v = sorted(c["chi"] for c in grid["cells"] if c["graph"] == g)
    return f"{g} (chi {v[0]:.1f})" if v and v[-1] - v[0] < 0.05 else f"{g} (chi {v[0]:.1f}-{v[-1]:.1f})" if v else g


GRID_SHORT = {"apapc-cheb": "APAPC+Cheb", "apapc-practical": "APAPC practical", "apapc": "APAPC plain",
              "tracking-admm": "T-ADMM exact", "tracking-admm-grad": "T-ADMM grad", "dpmm": "DPMM",
              "extra": "EXTRA (dual)", "gradient-tracking": "GT (dual)"}


def plot_grid(grid: dict, folder) -> list[str]:
    """One heatmap per cost: rows kappa_f, columns chi, colour = the winning method, text = its cost
    and the runner-up's over it."""
    from icmlkit.lib.core.plot import pyplot, save_png

    plt = pyplot(required=False)
    if plt is None or not grid.get("cells"):
        return []
    methods = list(GRID_SHORT)
    cmap = plt.get_cmap("tab10")
    kappas, graphs = grid["kappas"], grid["graphs"]
    names = []
    for cost in GRID_COSTS:
        fig, ax = plt.subplots(figsize=(7.5, 5))
        img = np.ones((len(kappas), len(graphs), 3))
        for c in grid["cells"]:
            i, j = kappas.index(c["kappa_f_target"]), graphs.index(c["graph"])
            w = c["winner"].get(cost)
            if w is None:
                continue
            img[i, j] = cmap(methods.index(w))[:3]
            vals = sorted(v[cost]["value"] for m, v in c["methods"].items() if v[cost]["value"] is not None
                          and (cost != "first-order oracle" or m in FIRST_ORDER))
            ratio = f"\nrunner-up x{vals[1] / vals[0]:.2f}" if len(vals) > 1 and vals[0] else ""
            ax.text(j, i, f"{GRID_SHORT[w]}\n{vals[0]:.3g}{ratio}", ha="center", va="center", fontsize=9)
        ax.imshow(img, aspect="auto")
        ax.set_xticks(range(len(graphs)), [_chi_label(grid, g) for g in graphs])
        ax.set_yticks(range(len(kappas)), [f"kappa_f {k:g}" for k in kappas])
        ax.set_title(f"Winner by {cost} (n={grid['nodes']}, tol {grid['tol']:g}, budget {grid['budget']} each)",
                     fontsize=10)
        used = sorted({c["winner"][cost] for c in grid["cells"] if c["winner"].get(cost)}, key=methods.index)
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(color=cmap(methods.index(m)), label=GRID_SHORT[m]) for m in used],
                  loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
        fig.tight_layout()
        name = f"solve_decentralized_grid_{cost.replace(' ', '_').replace('-', '_')}.png"
        save_png(fig, folder / name)
        names.append(name)
    return names


def grid_markdown(grid: dict, plots: list[str]) -> list[str]:
    c0 = grid["cells"]
    md = [f"## kappa_f x chi grid: who wins where, by each cost (n = {grid['nodes']}, tol {grid['tol']:g})", "",
          f"Every method tuned by `tune` with the same budget ({grid['budget']} settings of its own knobs; the "
          f"grids and scores are in the part's provenance); each method's entry per cost is its best converged "
          f"setting for that cost among the same {grid['budget']} runs; cap {grid['max_iter']} iterations. "
          "APAPC+Cheb = Algorithm 1 at the theory constants (knobs aug/augment); APAPC practical = the practical "
          "mode (K = gamma W'^{1/2} on the consensus rows; inner Chebyshev degree, eta scale and W' degree tuned; "
          "not the theory constants); T-ADMM exact solves its local problem exactly, T-ADMM grad takes T "
          "accelerated gradient steps instead (oracle-matched); EXTRA and GT run on the dual (exact local solves).",
          ""]
    if plots:
        md += ["Heatmaps: " + ", ".join(f"`bench/results/{p}`" for p in plots) + ".", ""]
    for cost in GRID_COSTS:
        rows = []
        for k in grid["kappas"]:
            row = {"kappa_f": f"{k:g}"}
            for g in grid["graphs"]:
                c = next((c for c in c0 if c["graph"] == g and c["kappa_f_target"] == k), None)
                w = c and c["winner"].get(cost)
                row[_chi_label(grid, g)] = "—" if not w else \
                    f"{GRID_SHORT[w]} {c['methods'][w][cost]['value']:.3g}"
            rows.append(row)
        md += [f"### Winner by {cost}: {GRID_COST_NOTE[cost]}", "", table(rows)]
    rows = []
    for c in c0:
        th = c["theory"]
        rows.append({"graph": c["graph"], "chi": f"{c['chi']:.1f}", "kappa_f": f"{c['kappa_f_target']:g}",
                     "method": "APAPC+Cheb theory row (aug 1)", "rounds": th.get("communications") if th.get("converged")
                     else None, "floats": th.get("floats_sent") if th.get("converged") else None,
                     "oracle": th.get("oracle_calls") if th.get("converged") else None, "setting (rounds)": "theory"})
        for m, v in c["methods"].items():
            rows.append({"graph": c["graph"], "chi": f"{c['chi']:.1f}", "kappa_f": f"{c['kappa_f_target']:g}",
                         "method": GRID_SHORT.get(m, m), "rounds": v["rounds"]["value"], "floats": v["floats"]["value"],
                         "oracle": v["oracle"]["value"], "setting (rounds)": v["rounds"]["setting"] or "none converged"})
    md += ["### Every cell: each method's best converged count per cost (— : no setting converged)", "", table(rows)]
    return md


def _setting(v: dict) -> str:
    return "; ".join(f"{k} {v[k]}" for k in ("aug", "augment", "rho", "local_steps", "deg_k", "step", "deg_w")
                     if k in v and v[k] is not None)


def markdown(res: dict, plots: list[str] | None = None) -> str:
    md = []
    if (res.get("grid") or {}).get("cells"):
        md += grid_markdown(res["grid"], plots or [])
    if res.get("mixed"):
        md += ["## Mixed grid (APAPC + Chebyshev, theory constants, tol 1e-6)", "",
               table([{"graph": r["graph"], "n": r["n_nodes"], "kappa_f": f"{r['kappa_f']:.0f}", "chi": f"{r['chi']:.1f}",
                       "deg_w": r["deg_w"], "deg_k": r["deg_k"], "iterations": r["iterations"],
                       "communications": r["communications"], "rel_error": _e(r["rel_error"]),
                       "residual": _e(r["constraint_residual"])} for r in res["mixed"]]),
               "Slopes: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                      for k, v in res["slopes"].items())
               + f"; cvxpy vs the KKT reference on one cell: {_e(res.get('cvxpy_vs_kkt_max_abs'))}.", ""]
    base = res.get("largest_cell")
    if base:
        cell = base.get("cell", list(LARGEST))
        tuned = "apapc-cheb_grid" in base
        md += [f"## Largest cell (n = {cell[1]}, {cell[0]}, kappa_f = {cell[2]:g}), to rel. error and residual 1e-6", "",
               ("Every method tuned by `tune` with the same budget; the grids and scores are in the part's provenance "
                "(tuning)." if tuned else "Legacy run: APAPC + Chebyshev, plain and centralized APAPC at the theory "
                "constants; Tracking-ADMM, DPMM, EXTRA and gradient tracking at the best setting of their grids."), "",
               table([{"method": k, "setting": _setting(v), "iterations": v.get("iterations"),
                       "communications": v.get("communications"), "gradient / local-solve calls": v.get("grad_calls"),
                       "rel_error": _e(v.get("rel_error")), "converged": v.get("converged")}
                      for k in ("apapc-cheb", "apapc-cheb_theory", "apapc-cheb_augment_all", "apapc", "centralized",
                                "tracking-admm", "dpmm", "extra", "gradient-tracking")
                      if isinstance(v := base.get(k), dict)])]
        grids = [{"method": m[:-5], "setting": s, "iterations": v.get("iterations"),
                  "communications": v.get("communications"), "rel_error": _e(v.get("rel_error")),
                  "converged": v.get("converged")}
                 for m, g in base.items() if m.endswith("_grid") for s, v in g.items()]
        if grids:
            md += ["Every setting run (grids):", "", table(grids)]
    a9a = res.get("a9a") or {}
    if "ring" in a9a:
        md += [f"## a9a, horizontal split on {a9a.get('nodes', 20)} nodes ({a9a['samples']} x {a9a['features']}, lam "
               f"{a9a['lam']}), to 1e-6 rel. suboptimality", "",
               table([{"graph": g, "method": m, "setting": _setting(v), "iterations": v.get("iterations"),
                       "communications": v.get("communications"), "suboptimality": _e(v.get("suboptimality")),
                       "converged": v.get("converged")}
                      for g in ("ring", "er") for m, v in a9a[g].items() if isinstance(v, dict) and "_grid" not in m])]
    small = res.get("a9a_small_lam") or {}
    if "apapc-cheb" in small:
        md += ["", f"## a9a, horizontal split on {small['nodes']} nodes (ring), lam {small['lam']:g}, to 1e-6 rel. "
               f"suboptimality (cap {small['max_iter']} iterations; each method tuned with budget 2)", "",
               table([{"method": m, "setting": _setting(v),
                       "iterations": v.get("iterations"), "communications": v.get("communications"),
                       "floats_sent": v.get("floats_sent"), "oracle_calls": v.get("oracle_calls"),
                       "suboptimality": _e(v.get("suboptimality")), "converged": v.get("converged")}
                      for m, v in small.items() if isinstance(v, dict) and "_grid" not in m and "iterations" in v])]
    vfl9 = res.get("a9a_vfl") or {}
    if vfl9.get("cells"):
        rows = []
        for c in vfl9["cells"]:
            for m in ("apapc-cheb", "apapc", "dpmm"):
                v = c[m]
                if "not_run" in v:
                    rows.append({"parties": c["parties"], "graph": c["graph"], "method": m, "iterations": v["not_run"]})
                    continue
                rows.append({"parties": c["parties"], "graph": c["graph"],
                             "method": m + (f" (rho {v['rho']}, {v['max_iter']} it)" if "rho" in v else ""),
                             "iterations": v["iterations"], "communications": v["communications"],
                             "suboptimality": _e(v["suboptimality"]), "residual": _e(v["constraint_residual"]),
                             "max abs w - sklearn": _e(v["coef_max_abs_diff_vs_sklearn"]), "converged": v["converged"],
                             "loop s": v["loop_seconds"], "setup s": v.get("setup_seconds")})
        md += ["", f"## a9a by feature blocks (VFL, sparse A_i; {vfl9['samples']} x {vfl9['features']}, lam "
               f"{vfl9['lam']}), to 1e-6 rel. suboptimality", "",
               f"scikit-learn LogisticRegression {vfl9['sklearn_seconds']} s; horizontal-split Newton reference "
               f"{vfl9['hfl_newton_seconds']} s.", "", table(rows)]
    dist = res.get("dist")
    if dist:
        md += ["## torch.distributed (4 gloo processes) vs the simulator", "",
               f"Iterates differ by at most {dist['max_abs_diff_dist_vs_sim']:.1e} ({dist['iterations_sim']} / "
               f"{dist['iterations_dist']} iterations); wall {dist['wall_dist']} s dist vs {dist['wall_sim']} s sim "
               f"(ratio {dist['wall_ratio_dist_over_sim']}); the simulator to 1e-6 over cvxpy's central solve "
               f"({dist['wall_cvxpy']} s): {dist['sim_time_to_1e-6_over_cvxpy']}.", ""]
    return "\n".join(md)


@bench.report
def report(results: dict) -> tuple[dict, str]:
    res = {}
    if "mixed" in results:
        res.update(mixed=results["mixed"]["rows"], slopes=results["mixed"]["slopes"],
                   cvxpy_vs_kkt_max_abs=results["mixed"]["cvxpy_vs_kkt_max_abs"])
    if "largest-cell" in results:
        res["largest_cell"] = results["largest-cell"]
    if "vfl" in results:
        res["vfl_breast_cancer"] = {**results["vfl"], "full_apapc_cheb": results.get("vfl-full")}
    for part, key in (("a9a", "a9a"), ("a9a-vfl", "a9a_vfl"), ("dist", "dist"), ("grid", "grid"),
                      ("a9a-lam1e-4", "a9a_small_lam")):
        if part in results:
            res[key] = results[part]
    extra20 = (results.get("a9a-vfl-ring20") or {}).get("cell")
    if extra20 and res.get("a9a_vfl", {}).get("cells"):   # the 20-party ring's plain APAPC and DPMM
        cells = [dict(c) for c in res["a9a_vfl"]["cells"]]
        for c in cells:
            if (c["parties"], c["graph"]) == (20, "ring"):
                for m in ("apapc", "dpmm"):
                    if m in extra20:
                        c[m] = {**extra20[m], "part": "a9a-vfl-ring20"}
        res["a9a_vfl"] = {**res["a9a_vfl"], "cells": cells}
    plots = []
    if (res.get("grid") or {}).get("cells"):
        import sys

        import _common

        # the harness gives the report no output folder: a --quick run plots beside its quick results
        folder = _common.QUICK_RESULTS if "--quick" in sys.argv[1:] else _common.RESULTS
        plots = plot_grid(res["grid"], folder)
    return make_targets(res), markdown(res, plots)


if __name__ == "__main__":
    bench.main()
