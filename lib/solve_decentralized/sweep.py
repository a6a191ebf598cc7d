"""``sweep``: communications of a method across graphs, sizes and condition numbers, with fitted
log-log slopes (the complexity claim: communications ~ sqrt(kappa_f) (sqrt(kappa_AC) +
sqrt(kappa_Ct)) sqrt(chi) log(1/eps))."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from icmlkit.lib.core.runtime import numpy_rng
from icmlkit.lib.solve_decentralized.config import SolveConfig, SweepConfig


@dataclass
class SweepResult:
    rows: list
    slopes: dict
    summary: dict


def fit_slopes(rows: list) -> dict:
    """OLS of log(communications) on [1, log chi, log kappa_f, log(sqrt kappa_AC + sqrt kappa_Ct)] over the
    converged cells; each slope is the exponent of that factor (0.5 for chi and kappa_f in theory, 1 for
    the mixed term). With a single value of a factor its column is dropped (slope None)."""
    ok = [r for r in rows if r["converged"] and r["communications"] > 0]
    out = {"slope_chi": None, "slope_kappa_f": None, "slope_mixed": None, "cells_fitted": len(ok)}
    if len(ok) < 3:
        return out
    y = np.log([r["communications"] for r in ok])
    cols = {"slope_chi": np.log([r["chi"] for r in ok]), "slope_kappa_f": np.log([r["kappa_f"] for r in ok]),
            "slope_mixed": np.log([math.sqrt(r["kappa_ac"]) + math.sqrt(r["kappa_ct"]) for r in ok])}
    names = [k for k, v in cols.items() if np.ptp(v) > 1e-9]
    X = np.column_stack([np.ones(len(ok))] + [cols[k] for k in names])
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    for k, c in zip(names, coef[1:]):
        out[k] = float(c)
    return out


def sweep(cfg: SweepConfig, *, seed: int = 0, progress=None) -> SweepResult:
    """Generate a planted mixed problem per (graph, n, kappa_f) cell (d_i = 5, m = 3, C_i one row,
    Ct_i 2 x 4) and solve it with ``cfg.method`` to ``cfg.tol``."""
    from icmlkit.lib.solve_decentralized.generate import generate
    from icmlkit.lib.solve_decentralized.solve import solve

    rows = []
    for g in cfg.graphs:
        for n in cfg.nodes:
            for kap in cfg.kappas:
                prob = generate("mixed", int(n), g, seed_rng=numpy_rng(seed, f"sweep-{g}-{n}-{kap}"), kappa=float(kap))
                res = solve(SolveConfig(method=cfg.method, tol=cfg.tol, max_iter=cfg.max_iter, trace_every=10 ** 9),
                            prob)
                s = res.summary
                rows.append({"graph": g, "n_nodes": int(n), "kappa_f_target": float(kap), "chi": s["chi"],
                             "kappa_f": s["kappa_f"], "kappa_ac": s["kappa_ac"], "kappa_ct": s["kappa_ct"],
                             "iterations": s["iterations"], "communications": s["communications"],
                             "a_mults": s["a_mults"], "grad_calls": s["grad_calls"], "rel_error": s["rel_error"],
                             "constraint_residual": s["constraint_residual"], "converged": s["converged"],
                             "predicted_communications": s.get("predicted_communications"),
                             "seconds": s["seconds"]})
                if progress is not None:
                    progress(rows[-1])
    slopes = fit_slopes(rows)
    summary = {"cells": len(rows), "converged_cells": sum(r["converged"] for r in rows), **slopes,
               "max_rel_error": max((r["rel_error"] or math.inf) for r in rows),
               "max_constraint_residual": max((r["constraint_residual"] or math.inf) for r in rows)}
    return SweepResult(rows=rows, slopes=slopes, summary=summary)


def plot_sweep(path, rows: list) -> None:
    """PNG at ``path``: communications vs chi (one line per kappa_f) and vs kappa_f (one line per graph/n)."""
    from icmlkit.lib.core.plot import pyplot, save_png

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for kap in sorted({r["kappa_f_target"] for r in rows}):
        sel = sorted((r for r in rows if r["kappa_f_target"] == kap), key=lambda r: r["chi"])
        axes[0].loglog([r["chi"] for r in sel], [r["communications"] for r in sel], "o-", label=f"kappa_f={kap:g}")
    for key in sorted({(r["graph"], r["n_nodes"]) for r in rows}):
        sel = sorted((r for r in rows if (r["graph"], r["n_nodes"]) == key), key=lambda r: r["kappa_f"])
        axes[1].loglog([r["kappa_f"] for r in sel], [r["communications"] for r in sel], "o-", label=f"{key[0]} n={key[1]}")
    axes[0].set_xlabel("chi"); axes[0].set_ylabel("communications to tol"); axes[0].legend(fontsize=7)
    axes[1].set_xlabel("kappa_f"); axes[1].legend(fontsize=7)
    from matplotlib.ticker import NullFormatter

    for ax in axes:
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
    fig.tight_layout()
    save_png(fig, path, dpi=90)
