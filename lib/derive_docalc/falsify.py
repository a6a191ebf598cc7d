"""Graph falsification: the distinct estimands of one do-calculus class are equal functionals of
P(V) whenever the data come from a model Markov to the assumed graph (each equals the same
interventional quantity); data on which they disagree refute the graph.

Test [reconstructed: the paper does not describe a test; this is a standard Wald test with a
bootstrap covariance]:

1. estimate every distinct estimand theta_1 .. theta_K of the class on the data (discrete: the
   plug-in estimand over every cell of the query's variables; linear-Gaussian: the effect of the
   first action on the first outcome);
2. d = (theta_k - theta_1, k = 2..K) stacked; Sigma = the covariance of d over B bootstrap
   resamples (the same resamples for all estimands, so their correlation is kept);
3. T = d' Sigma^+ d over the eigen-directions of Sigma above a relative 1e-9 floor (exact
   linear constraints, such as probabilities summing to one, drop out); under H0 (the graph is
   right) T is asymptotically chi-square with dof = the rank kept; p = P(chi2_dof >= T).

Power comes only from estimands that differ: a class with one distinct estimand has nothing to
test (``testable: false``). The test checks the testable implications the class's estimands
encode (e.g. P(y|x) = sum_z P(y|x,z)P(z) in Z -> X -> Y, i.e. no open back-door through Z), not
the whole graph.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icmlkit.lib.causal.admg import ADMG
from icmlkit.lib.causal.parse import Query
from icmlkit.lib.core.errors import CheckFailed
from icmlkit.lib.derive_docalc.config import FalsifyConfig


@dataclass
class FalsifyResult:
    summary: dict

    @property
    def p_value(self) -> float | None:
        return self.summary["p_value"]


def wald_test(d: np.ndarray, db: np.ndarray, floor: float = 1e-9) -> tuple[float, int, float, float]:
    """(T, dof, p_chi2, p_bootstrap) of H0: E[d] = 0 with the bootstrap covariance of ``db`` (B, p).
    p_bootstrap = (1 + #{T*_b >= T}) / (B + 1) with T*_b the statistic of the centred replicate
    d*_b - mean(d*)."""
    from scipy.stats import chi2

    ok = np.isfinite(d) & np.isfinite(db).all(0)
    d, db = d[ok], db[:, ok]
    if not len(d):
        return 0.0, 0, 1.0, 1.0
    S = np.atleast_2d(np.cov(db, rowvar=False))
    lam, V = np.linalg.eigh(S)
    keep = lam > floor * max(float(lam.max()), 1e-300)
    if not keep.any():
        return 0.0, 0, 1.0, 1.0
    proj = V[:, keep].T @ d
    T = float((proj ** 2 / lam[keep]).sum())
    pb = (db - db.mean(0)) @ V[:, keep]
    Tb = (pb ** 2 / lam[keep]).sum(1)
    dof = int(keep.sum())
    return T, dof, float(chi2.sf(T, dof)), float((1 + (Tb >= T).sum()) / (len(Tb) + 1))


def falsify(cfg: FalsifyConfig, G: ADMG, q: Query, df, seed: int = 0, source: str | None = None) -> FalsifyResult:
    """The bootstrap equality test across the distinct estimands of ``q``'s class on ``df``."""
    from icmlkit.lib.core.runtime import numpy_rng
    from icmlkit.lib.derive_docalc.api import (class_estimands, discrete_data, gaussian_data, gaussian_values,
                                        guess_kind)

    ce = class_estimands(G, q, cap=cfg.cap, projections=cfg.projections, prune=cfg.prune)
    if not ce.identifiable:
        raise CheckFailed(f"{q.text(G.nodes)} is not identifiable ({ce.hedge}); the class has no estimand to test")
    Gr, qr = ce.graph, ce.query
    kind = guess_kind(df[list(Gr.nodes)]) if cfg.kind == "auto" else cfg.kind
    rng = numpy_rng(seed, "bootstrap")
    B = cfg.bootstrap
    rows, pts, bss = [], [], []
    if kind == "discrete":
        dd = discrete_data(Gr, qr, df, B, rng)
        for e in ce.estimands:
            val, bs = dd.values(e.expr)
            pts.append(val.ravel())
            bss.append(bs.reshape(B, -1))
            c = bs[(slice(None), *dd.cell)]
            rows.append({"estimand": e.text, "estimate": float(val[tuple(dd.cell)]),
                         "se": float(np.nanstd(c, ddof=1)), "members": len(e.members)})
        target = {v: dd.labels[v][c] for v, c in zip(dd.target, dd.cell)}
        compared = f"P({', '.join(sorted(qr.Y, key=Gr.index.get))} | ...) on every cell of " \
                   f"{', '.join(dd.target)} (estimate/se at the query's cell)"
    else:
        y, x, M, Mb = gaussian_data(Gr, qr, df, B, rng, source)
        for e in ce.estimands:
            val, bs = gaussian_values(e.expr, y, x, M, Mb, B)
            pts.append(np.array([val]))
            bss.append(np.asarray(bs).reshape(B, 1))
            rows.append({"estimand": e.text, "estimate": val, "se": float(np.nanstd(bs, ddof=1)),
                         "members": len(e.members)})
        target = {"effect_of": x, "on": y}
        compared = f"dE[{y} | do({x})]/d{x}"
    K = len(ce.estimands)
    if K < 2:
        T, dof, p, pb = 0.0, 0, None, None
    else:
        d = np.concatenate([pts[k] - pts[0] for k in range(1, K)])
        db = np.concatenate([bss[k] - bss[0] for k in range(1, K)], axis=1)
        T, dof, pc, pb = wald_test(d, db)
        p = pc
        if dof == 0:
            p = pb = None
    alpha = cfg.fail_under
    summary = {"query": qr.text(Gr.nodes), "kind": kind, "n": int(len(df)), "target": target, "compared": compared,
               "n_members": len(ce.cls.members), "n_estimands": K, "testable": p is not None,
               "statistic": T, "dof": dof, "p_value": p, "p_value_bootstrap": pb, "bootstrap": B, "estimands": rows,
               "rejected": bool(p is not None and alpha is not None and p < alpha), "alpha": alpha,
               "pruned": list(ce.cls.pruned)}
    for r in rows:
        for k, v in r.items():
            if isinstance(v, float) and not np.isfinite(v):
                r[k] = None
    return FalsifyResult(summary)
