"""Synthetic problems with a planted optimum, and builders from real data.

Planting (method sheet, Data): choose x*, x~* and the multipliers first (lambda for the coupled
constraint, nu_i for C_i, omega_i for Ct_i, consensus multipliers pi_i with sum_i pi_i = 0), then
derive the linear terms q_i and the right-hand sides b_i, c_i, ct_i so that the KKT conditions of (P)
hold exactly; f is strictly convex, so the planted point is the unique optimum.
"""
from __future__ import annotations

import math

import numpy as np

from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.solve_decentralized.problem import Problem, make_graph

KINDS = ("mixed", "resource", "hfl", "vfl")


def _spd(rng, D, kappa, lo=1.0):
    """A random D x D SPD matrix with eigenvalues spread geometrically over [lo, lo*kappa]."""
    U, _ = np.linalg.qr(rng.standard_normal((D, D)))
    ev = lo * np.geomspace(1.0, kappa, D) if D > 1 else np.array([lo * kappa])
    return (U * ev) @ U.T


def plant(Q, A, C, Ct, d, p, edges, rng, kind="mixed", scale=1.0) -> Problem:
    """Complete a quadratic problem's structure (Q, A, C, Ct stacked and padded) with a planted
    optimum: returns the Problem whose unique minimiser is the drawn (x*, x~*)."""
    n, m, dmax = A.shape
    mask = np.arange(dmax)[None, :] < np.asarray(d)[:, None]
    x = rng.standard_normal((n, dmax)) * mask * scale
    xt = rng.standard_normal(p) * scale
    lam = rng.standard_normal(m)
    nu = rng.standard_normal((n, C.shape[1])) * (np.abs(C).sum(2) > 0)
    om = rng.standard_normal((n, Ct.shape[1])) * (np.abs(Ct).sum(2) > 0)
    pi = rng.standard_normal((n, p))
    pi -= pi.mean(0, keepdims=True)
    w = np.concatenate([x, np.repeat(xt[None], n, 0)], 1)
    dual = np.concatenate([np.einsum("nmd,m->nd", A, lam) + np.einsum("nrd,nr->nd", C, nu),
                           np.einsum("nsp,ns->np", Ct, om) + pi], 1)
    q = -np.einsum("nij,nj->ni", Q, w) - dual
    q[:, :dmax] *= mask
    e = rng.standard_normal((n, m))
    e -= e.mean(0, keepdims=True)
    b = np.einsum("nmd,nd->nm", A, x) + e
    c = np.einsum("nrd,nd->nr", C, x)
    ct = np.einsum("nsp,p->ns", Ct, xt)
    return Problem(n=n, d=list(map(int, d)), p=p, m=m, loss="quadratic", edges=edges,
                   edge_weights=np.ones(len(edges)), A=A, b=b, C=C, c=c, Ct=Ct, ct=ct, Q=Q, q=q,
                   solution={"x": x, "xt": xt, "lam": lam}, meta={"kind": kind})


def generate(kind: str, n: int, graph: str, *, seed_rng, d: int = 5, m: int = 3, r: int = 1, s: int = 2,
             p: int = 4, kappa: float = 10.0, samples: int = 20, lam: float = 0.1, cost: str = "quadratic") -> Problem:
    """The four planted families of the issue.

    - mixed: d_i = d, m coupled rows, C_i with r rows, Ct_i s x p, quadratic f_i with condition number kappa
      (eigenvalues geometric in [1, kappa] on the joint (x_i, x~)).
    - resource: sum_i x_i = sum_i b_i (A_i = I_d), no shared variable; cost quadratic, or logbarrier:
      quadratic plus -sum_j bw_j log(x_j - lb_j) (bw in [0.5, 1], slack x*_j - lb_j in [1, 2] at the
      planted optimum, bfloor = half the node's smallest planted slack: the region the curvature bound
      L_i = lambda_max(Q_i) + max bw / bfloor^2 assumes [our choice]).
    - hfl: consensus ridge on a shared model of dimension p (Q_i = F_i^T F_i / N + lam/n I), no x_i.
    - vfl: features split across the n parties (d features each), node 0 also holds z (samples); the
      coupled constraint sum_i F_i x_i - z = 0; f_0 = 1/2 ||z + x~ 1||^2-type loss with a shared bias x~
      (p = 1), ridge weight lam on every x_i.
    """
    rng = seed_rng
    edges = make_graph(graph, n, rng)
    if kind == "mixed":
        D = d + p
        Q = np.stack([_spd(rng, D, kappa) for _ in range(n)])
        A = rng.standard_normal((n, m, d)) / np.sqrt(d)
        C = rng.standard_normal((n, r, d)) / np.sqrt(d)
        Ct = rng.standard_normal((n, s, p)) / np.sqrt(p)
        return plant(Q, A, C, Ct, [d] * n, p, edges, rng, kind)
    if kind == "resource":
        Q = np.stack([_spd(rng, d, kappa) for _ in range(n)])
        A = np.repeat(np.eye(d)[None], n, 0)
        prob = plant(Q, A, np.zeros((n, 0, d)), np.zeros((n, 0, 0)), [d] * n, 0, edges, rng, kind)
        if cost == "logbarrier":
            x = prob.solution["x"]
            bw = rng.uniform(0.5, 1.0, (n, d))
            slack = rng.uniform(1.0, 2.0, (n, d))
            prob.lb = x - slack
            prob.bw = bw
            prob.bfloor = 0.5 * slack.min(1)
            prob.q = prob.q + bw / slack     # stationarity at x*: Q x* + q - bw / slack + A^T lam = 0
            prob.loss = "logbarrier"
            prob.meta["kind"] = "resource-logbarrier"
        elif cost != "quadratic":
            raise UsageError(f"unknown cost {cost!r}")
        return prob
    if kind == "hfl":
        N = n * samples
        Q = []
        for _ in range(n):
            F = rng.standard_normal((samples, p))
            Q.append(F.T @ F / N + lam / n * np.eye(p))
        return plant(np.stack(Q), np.zeros((n, 0, 0)), np.zeros((n, 0, 0)), np.zeros((n, 0, p)), [0] * n, p,
                     edges, rng, kind)
    if kind == "vfl":
        S = samples
        dims = [d + S] + [d] * (n - 1)
        dmax = max(dims)
        Fs = [rng.standard_normal((S, d)) / np.sqrt(d) for _ in range(n)]
        Q, A, C, Ct = _vfl_blocks(Fs, lam, dmax)
        return plant(Q, A, C, Ct, dims, 1, edges, rng, kind)
    raise UsageError(f"unknown kind {kind!r}")


def _vfl_blocks(Fs, lam, dmax):
    n = len(Fs)
    S = Fs[0].shape[0]
    D = dmax + 1
    Q = np.zeros((n, D, D))
    A = np.zeros((n, S, dmax))
    for i, F in enumerate(Fs):
        di = F.shape[1]
        Q[i, :di, :di] = lam * np.eye(di)
        A[i, :, :di] = F
    d0 = Fs[0].shape[1]
    A[0, :, d0:d0 + S] = -np.eye(S)
    # f_0 = 1/2 ||z + x~ 1 - y||^2: curvature over (z, x~)
    zi = np.arange(d0, d0 + S)
    Q[0][np.ix_(zi, zi)] += np.eye(S)
    Q[0][zi, dmax] += 1.0
    Q[0][dmax, zi] += 1.0
    Q[0][dmax, dmax] += S
    return Q, A, np.zeros((n, 0, dmax)), np.zeros((n, 0, 1))


def vfl_ridge(X, y, parties: int, alpha: float, graph: str = "path", rng=None) -> Problem:
    """Vertical FL ridge regression: the columns of X split into ``parties`` blocks, node 0 holds the
    labels and z = sum_i X_i x_i, the shared bias is x~ (p = 1):
    min 1/2 ||z + x~ 1 - y||^2 + alpha/2 sum_i ||x_i||^2 s.t. sum_i X_i x_i - z = 0,
    i.e. scikit-learn's Ridge(alpha, fit_intercept=True) objective halved."""
    X = np.asarray(X, float)
    y = np.asarray(y, float)
    S = X.shape[0]
    blocks = np.array_split(np.arange(X.shape[1]), parties)
    Fs = [X[:, b] for b in blocks]
    dims = [len(blocks[0]) + S] + [len(b) for b in blocks[1:]]
    dmax = max(dims)
    Q, A, C, Ct = _vfl_blocks(Fs, alpha, dmax)
    n = parties
    q = np.zeros((n, dmax + 1))
    d0 = len(blocks[0])
    q[0, d0:d0 + S] = -y
    q[0, dmax] = -y.sum()
    edges = make_graph(graph, n, rng)
    return Problem(n=n, d=dims, p=1, m=S, loss="quadratic", edges=edges, edge_weights=np.ones(len(edges)),
                   A=A, b=np.zeros((n, S)), C=C, c=np.zeros((n, 0)), Ct=Ct, ct=np.zeros((n, 0)), Q=Q, q=q,
                   meta={"kind": "vfl-ridge", "blocks": [b.tolist() for b in blocks]})


def hfl_logistic(X, y, n: int, lam: float, graph: str = "ring", rng=None) -> Problem:
    """Horizontal FL l2-logistic regression (consensus on the shared model, p = n_features): the
    rows of the CSR matrix X split into n contiguous blocks;
    sum_i f_i = (1/N) sum_j log(1 + exp(-y_j x_j^T w)) + lam/2 ||w||^2 (no intercept)."""
    import scipy.sparse as sp

    X = sp.csr_matrix(X)
    N, p = X.shape
    parts = np.array_split(np.arange(N), n)
    edges = make_graph(graph, n, rng)
    F = [X[idx] for idx in parts]
    Y = [np.asarray(y)[idx].astype(float) for idx in parts]
    return Problem(n=n, d=[0] * n, p=p, m=0, loss="logistic", edges=edges, edge_weights=np.ones(len(edges)),
                   A=np.zeros((n, 0, 0)), b=np.zeros((n, 0)), C=np.zeros((n, 0, 0)), c=np.zeros((n, 0)),
                   Ct=np.zeros((n, 0, p)), ct=np.zeros((n, 0)), F=F, y=Y, lam=np.full(n, lam / n),
                   weight=np.full(n, 1.0 / N), meta={"kind": "hfl-logistic"})


def vfl_logistic(X, y, parties: int, lam: float, graph: str = "path", rng=None, z_scale: float | None = None) -> Problem:
    """Vertical FL l2-logistic regression (no intercept): the columns of the (sparse) X split into
    ``parties`` blocks, node 0 also holds the labels and z' (one entry per sample); every A_i stays
    sparse (``SparseStack``):

        min (1/N) sum_j log(1 + exp(-y_j c z'_j)) + lam/2 sum_i ||w_i||^2  s.t.  sum_i X_i w_i - c z' = 0,

    the same optimum as ``hfl_logistic(X, y, .., lam)`` and scikit-learn's LogisticRegression(C =
    1/(lam N), fit_intercept=False). z = c z' with c = sqrt(max_i lambda_max(X_i^T X_i)) by default [our
    choice: the z columns of A_0 then weigh as much as the largest feature block, trading kappa_f (the
    loss's curvature c^2/(4N) against lam) for kappa_A (lambda_min(sum_i A_i A_i^T) >= c^2)]."""
    import scipy.sparse as sp

    from icmlkit.lib.solve_decentralized.problem import SparseStack
    from icmlkit.lib.solve_decentralized.spectral import lanczos_top

    X = sp.csr_matrix(X, dtype=float)
    y = np.asarray(y, float)
    N, f = X.shape
    blocks = np.array_split(np.arange(f), parties)
    Xb = [X[:, b].tocsr() for b in blocks]
    c = float(z_scale) if z_scale else math.sqrt(max(lanczos_top(lambda v, M=M: M.T @ (M @ v), M.shape[1])
                                                     for M in Xb))
    d0 = len(blocks[0])
    dims = [d0 + N] + [len(b) for b in blocks[1:]]
    dmax = max(dims)
    A = SparseStack([sp.hstack([Xb[0], -c * sp.identity(N)])] + Xb[1:], N, dmax)
    lam_w = np.zeros((parties, dmax))
    for i, di in enumerate(len(b) for b in blocks):
        lam_w[i, :di] = lam
    F = [sp.csr_matrix((np.full(N, c), (np.arange(N), d0 + np.arange(N))), shape=(N, dmax))]
    F += [sp.csr_matrix((0, dmax)) for _ in blocks[1:]]
    Y = [y] + [np.zeros(0) for _ in blocks[1:]]
    edges = make_graph(graph, parties, rng)
    return Problem(n=parties, d=dims, p=0, m=N, loss="logistic", edges=edges, edge_weights=np.ones(len(edges)),
                   A=A, b=np.zeros((parties, N)), C=np.zeros((parties, 0, dmax)), c=np.zeros((parties, 0)),
                   Ct=np.zeros((parties, 0, 0)), ct=np.zeros((parties, 0)), F=F, y=Y, lam=lam_w,
                   weight=np.full(parties, 1.0 / N),
                   meta={"kind": "vfl-logistic", "blocks": [b.tolist() for b in blocks], "z_scale": c})


SKLEARN_SETS = ("diabetes", "breast_cancer", "wine", "digits")


def hfl_ridge(X, y, n: int, alpha: float, graph: str = "ring", rng=None) -> Problem:
    """Horizontal FL ridge regression with an intercept: the rows of X split into n contiguous blocks,
    consensus on the shared model x~ = (w, b) (p = n_features + 1), sum_i f_i =
    1/2 ||X w + b 1 - y||^2 + alpha/2 ||w||^2 (the intercept unpenalised), i.e. scikit-learn's
    Ridge(alpha, fit_intercept=True) objective halved. Q_i = F_i^T F_i + (alpha/n) diag(1, .., 1, 0)."""
    X = np.asarray(X, float)
    y = np.asarray(y, float)
    N, f = X.shape
    p = f + 1
    F = np.concatenate([X, np.ones((N, 1))], 1)
    reg = np.diag(np.concatenate([np.ones(f), [0.0]])) * alpha / n
    parts = np.array_split(np.arange(N), n)
    Q = np.stack([F[idx].T @ F[idx] + reg for idx in parts])
    q = np.stack([-F[idx].T @ y[idx] for idx in parts])
    edges = make_graph(graph, n, rng)
    return Problem(n=n, d=[0] * n, p=p, m=0, loss="quadratic", edges=edges, edge_weights=np.ones(len(edges)),
                   A=np.zeros((n, 0, 0)), b=np.zeros((n, 0)), C=np.zeros((n, 0, 0)), c=np.zeros((n, 0)),
                   Ct=np.zeros((n, 0, p)), ct=np.zeros((n, 0)), Q=Q, q=q, meta={"kind": "hfl-ridge"})


def from_sklearn(name: str, split: str, n: int, graph: str, lam: float, loss: str = "ridge", rng=None):
    """A problem from one of scikit-learn's bundled sets (standardised features, no download):
    split = samples: horizontal FL (ridge with intercept, or l2-logistic without intercept on labels
    +1 = the last class, -1 = the rest), consensus on the model; split = features: vertical FL ridge
    (feature blocks per party, node 0 holds z and the labels, shared bias x~). Returns (problem, X, y)."""
    from sklearn import datasets
    from sklearn.preprocessing import StandardScaler

    if name not in SKLEARN_SETS:
        raise UsageError(f"unknown scikit-learn set {name!r}")
    X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    y = np.asarray(y, float)
    if loss == "logistic":
        if split != "samples":
            raise UsageError("logistic loss: split by samples only (the VFL problem is ridge)")
        ypm = np.where(y == y.max(), 1.0, -1.0)
        return hfl_logistic(X, ypm, n, lam, graph, rng=rng), X, ypm
    if split == "samples":
        return hfl_ridge(X, y, n, lam, graph, rng=rng), X, y
    return vfl_ridge(X, y, n, lam, graph, rng=rng), X, y
