"""Problem (P) of the method sheet, its file format, validation and graph helpers.

(P): min over x_1..x_n, x~ of sum_i f_i(x_i, x~)  s.t.  sum_i (A_i x_i - b_i) = 0 (coupled),
C_i x_i = c_i (local), Ct_i x~ = ct_i (node-specific constraints on the shared variable), on a
connected graph whose Laplacian W is the gossip matrix.

File format (``icmlkit-decentral/1``): a JSON spec naming one .npz per node and an edge-list CSV::

    {"format": "icmlkit-decentral/1", "loss": "quadratic" | "logistic" | "logbarrier", "n_nodes": 3,
     "dim_shared": 4, "m": 3, "graph": "graph.csv", "nodes": ["node_0.npz", ...],
     "solution": "solution.npz"}                      # optional: the planted optimum

Node .npz arrays: ``A`` (m x d_i, dense, or CSR parts ``A_data``/``A_indices``/``A_indptr``/``A_shape``:
a problem with any CSR ``A`` keeps every A_i sparse, see ``SparseStack``), ``b`` (m), ``C`` (r_i x d_i), ``c`` (r_i), ``Ct`` (s_i x p),
``ct`` (s_i) (all optional: absent = no such constraint) and the loss data over w = (x_i, x~):
quadratic ``Q`` (D_i x D_i, D_i = d_i + p, symmetric positive semi-definite), ``q`` (D_i); logistic
``F`` (samples x D_i, dense) or ``F_data``/``F_indices``/``F_indptr``/``F_shape`` (CSR), ``y`` (+-1),
``lam`` (l2 weight: a scalar, or one weight per coordinate of w_i, length D_i) and ``weight`` (the loss's factor); logbarrier (a resource cost): ``Q``, ``q`` as for
quadratics plus -sum_j bw_j log(x_j - lb_j) on the node's own x: ``bw`` (d_i, >= 0), ``lb`` (d_i) and
``bfloor`` (> 0): below the slack bfloor the barrier is continued by its second-order Taylor polynomial
(f_i is then L-smooth with L_i = lambda_max(Q_i) + max bw / bfloor^2; the cost is the true log-barrier
wherever x_j - lb_j >= bfloor, so a solution whose slacks are all >= bfloor solves the barrier problem). Graph CSV: ``source,target[,weight]``.

Internally every node's arrays are padded to the largest d_i (zero columns: a padded coordinate has
zero gradient and no constraint, so it stays at its initial 0) and stacked, so local operations are
vectorised over nodes. A sparse coupled matrix is kept as one CSR per node (``SparseStack``): the
products ``a_mul``/``a_tmul`` never build the dense (n, m, dmax) array.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.io import display_name, load_json, load_npz, open_text, write_json, write_npz, write_text

FORMAT = "icmlkit-decentral/1"
LOSSES = ("quadratic", "logistic", "logbarrier")
DENSE_GRAM = 2000   # above this many columns Gram spectra are found by Lanczos, not a dense eigen-solve


class SparseStack:
    """The coupled matrices A_i of a problem as one scipy CSR (m, dmax) per node (padded columns):
    indexable like the dense (n, m, dmax) array by node (an int gives the CSR, a slice a SparseStack)."""

    def __init__(self, mats, m: int, dmax: int):
        import scipy.sparse as sp

        self.mats = []
        for M in mats:
            M = sp.csr_matrix(M, copy=True)
            if M.shape[0] != m or M.shape[1] > dmax:
                raise InputError(f"coupled matrix of shape {M.shape}; expected ({m}, <= {dmax})")
            M.resize((m, dmax))   # zero columns up to the padded width
            self.mats.append(M)
        self.shape = (len(self.mats), m, dmax)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return SparseStack(self.mats[k], self.shape[1], self.shape[2])
        return self.mats[k]

    def __len__(self):
        return self.shape[0]


def a_mul(A, x: np.ndarray) -> np.ndarray:
    """Rows A_i x_i (n, m) of the stacked coupled matrices (dense array or SparseStack)."""
    if isinstance(A, SparseStack):
        return np.stack([M @ xi for M, xi in zip(A.mats, x)]) if len(A) else np.zeros((0, A.shape[1]))
    return np.einsum("nmd,nd->nm", A, x)


def a_tmul(A, r: np.ndarray) -> np.ndarray:
    """A_i^T r_i (n, dmax)."""
    if isinstance(A, SparseStack):
        return np.stack([M.T @ ri for M, ri in zip(A.mats, r)]) if len(A) else np.zeros((0, A.shape[2]))
    return np.einsum("nmd,nm->nd", A, r)


def a_block(A, i: int, di: int):
    """Node i's A_i on its d_i real columns (dense array, or CSR for a SparseStack)."""
    return A[i][:, :di]


@dataclass
class Problem:
    """Problem (P) with the nodes' data stacked (padded to ``dmax`` columns)."""

    n: int
    d: list                     # true d_i per node
    p: int                      # dimension of the shared variable x~
    m: int                      # rows of the coupled constraint
    loss: str
    edges: np.ndarray           # (E, 2) int
    edge_weights: np.ndarray    # (E,)
    A: np.ndarray               # (n, m, dmax), or a SparseStack of n CSR (m, dmax)
    b: np.ndarray               # (n, m)
    C: np.ndarray               # (n, rmax, dmax)
    c: np.ndarray               # (n, rmax)
    Ct: np.ndarray              # (n, smax, p)
    ct: np.ndarray              # (n, smax)
    Q: np.ndarray | None = None     # (n, D, D), D = dmax + p
    q: np.ndarray | None = None     # (n, D)
    F: list | None = None           # logistic: per node CSR (S_i, D) in padded columns
    y: list | None = None
    lam: np.ndarray | None = None   # (n, D) l2 weight per coordinate ((n,) is broadcast)
    weight: np.ndarray | None = None
    l1: np.ndarray | None = None    # (n,) weight of a non-smooth l1 term l1_i ||w_i||_1 (Algorithm 2 only)
    bw: np.ndarray | None = None    # logbarrier: (n, D) barrier weights (0 off the barrier coordinates)
    lb: np.ndarray | None = None    # logbarrier: (n, D) lower bounds of the barrier coordinates
    bfloor: np.ndarray | None = None  # logbarrier: (n,) slack floor assumed by the curvature bound
    solution: dict | None = None    # {"x": (n, dmax), "xt": (p,)} when planted
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.lam is not None:
            lam = np.asarray(self.lam, float)
            self.lam = np.repeat(lam[:, None], self.D, 1) if lam.ndim == 1 else lam

    @property
    def dmax(self) -> int:
        return int(self.A.shape[2])

    @property
    def sparse(self) -> bool:
        """True when the coupled matrices are kept sparse (one CSR per node)."""
        return isinstance(self.A, SparseStack)

    @property
    def D(self) -> int:
        return self.dmax + self.p

    def laplacian(self) -> np.ndarray:
        return laplacian(self.n, self.edges, self.edge_weights)

    def neighbours(self) -> list[list[int]]:
        nb = [[] for _ in range(self.n)]
        for (i, j) in self.edges:
            nb[int(i)].append(int(j))
            nb[int(j)].append(int(i))
        return [sorted(set(x)) for x in nb]

    def mask(self) -> np.ndarray:
        """(n, dmax) True on the real (unpadded) coordinates of x."""
        return np.arange(self.dmax)[None, :] < np.asarray(self.d)[:, None]

    def grad(self, w: np.ndarray) -> np.ndarray:
        """Stacked gradients of f_i at w (n, D): the only place the loss is evaluated."""
        if self.loss == "quadratic":
            return np.einsum("nij,nj->ni", self.Q, w) + self.q
        if self.loss == "logbarrier":
            s, se = self._slack(w)
            return np.einsum("nij,nj->ni", self.Q, w) + self.q + self.bw * (-1.0 / se + (s - se) / se ** 2)
        out = np.empty_like(w)
        for i in range(w.shape[0]):
            out[i] = _logistic_grad(self.F[i], self.y[i], w[i], self.lam[i], self.weight[i])
        return out

    def _slack(self, w):
        """logbarrier: slack s = w - lb and se = max(s, bfloor); below bfloor the barrier -log(s) is
        continued by its second-order Taylor polynomial at bfloor (so f_i is L-smooth everywhere with
        L = lambda_max(Q_i) + max bw / bfloor^2 and equals the log-barrier cost where s >= bfloor)."""
        s = w - self.lb
        return s, np.maximum(s, self.bfloor[:, None])

    @property
    def nonsmooth(self) -> bool:
        return self.l1 is not None and bool(np.any(self.l1 > 0))

    def value(self, w: np.ndarray) -> float:
        extra = float(np.sum(self.l1[:, None] * np.abs(w))) if self.nonsmooth else 0.0
        return self._smooth_value(w) + extra

    def _smooth_value(self, w: np.ndarray) -> float:
        if self.loss in ("quadratic", "logbarrier"):
            quad = float(0.5 * np.einsum("ni,nij,nj->", w, self.Q, w) + np.sum(self.q * w))
            if self.loss == "quadratic":
                return quad
            s, se = self._slack(w)
            h = -np.log(se) - (s - se) / se + (s - se) ** 2 / (2 * se ** 2)
            return quad + float(np.sum(self.bw * h))
        tot = 0.0
        for i in range(w.shape[0]):
            z = -self.y[i] * (self.F[i] @ w[i])
            tot += self.weight[i] * float(np.sum(np.logaddexp(0.0, z))) + 0.5 * float(self.lam[i] @ w[i] ** 2)
        return tot

    def smoothness(self) -> tuple[np.ndarray, np.ndarray]:
        """Per node (L_i, mu_i): the extreme curvatures of f_i on its real coordinates."""
        Ls, mus = np.zeros(self.n), np.zeros(self.n)
        for i in range(self.n):
            idx = self.real_w(i)
            if self.loss in ("quadratic", "logbarrier"):
                ev = np.linalg.eigvalsh(self.Q[i][np.ix_(idx, idx)]) if len(idx) else np.zeros(1)
                Ls[i], mus[i] = ev[-1], max(ev[0], 0.0)
                if self.loss == "logbarrier":
                    Ls[i] += float(self.bw[i].max(initial=0.0)) / self.bfloor[i] ** 2
            else:
                Fi = self.F[i]
                top = _sq_norm_top(Fi) if Fi.shape[0] else 0.0
                Ls[i] = self.weight[i] * top / 4 + self.lam[i][idx].max()
                mus[i] = self.lam[i][idx].min()
        return Ls, mus

    def real_w(self, i: int) -> np.ndarray:
        return np.concatenate([np.arange(self.d[i]), self.dmax + np.arange(self.p)]).astype(int)

    def hessian_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(n, D, D) quadratic minorant/majorant curvature matrices of f_i (exact for quadratics)."""
        if self.loss == "quadratic":
            return self.Q, self.Q
        if self.loss == "logbarrier":   # barrier curvature in [0, bw / bfloor^2] on the assumed region
            hi = self.Q + np.einsum("nd,de->nde", self.bw / self.bfloor[:, None] ** 2, np.eye(self.D))
            return self.Q, hi
        lo = np.zeros((self.n, self.D, self.D))
        hi = np.zeros_like(lo)
        for i in range(self.n):
            idx = self.real_w(i)
            lo[i][idx, idx] = self.lam[i][idx]
            G = (self.F[i].T @ self.F[i])
            G = G.toarray() if hasattr(G, "toarray") else np.asarray(G)
            hi[i] = self.weight[i] * G / 4
            hi[i][idx, idx] += self.lam[i][idx]
        return lo, hi

    def curvature_ops(self):
        """(lo, hi): w (n, D) -> H w for the quadratic minorant / majorant curvatures of
        ``hessian_bounds``, without forming the (n, D, D) matrices (the matrix-free setup)."""
        if self.loss in ("quadratic", "logbarrier"):
            def lo(w):
                return np.einsum("nij,nj->ni", self.Q, w)
            if self.loss == "quadratic":
                return lo, lo
            return lo, lambda w: lo(w) + self.bw / self.bfloor[:, None] ** 2 * w

        def lo(w):
            return self.lam * w

        def hi(w):
            return np.stack([self.weight[i] / 4 * (self.F[i].T @ (self.F[i] @ w[i])) for i in range(self.n)]) + lo(w)
        return lo, hi


def _sq_norm_top(F) -> float:
    """lambda_max(F^T F): a dense eigen-solve of the Gram matrix when it is small, else Lanczos."""
    if F.shape[1] > DENSE_GRAM:
        from icmlkit.lib.solve_decentralized.spectral import lanczos_top

        return lanczos_top(lambda v: F.T @ (F @ v), F.shape[1])
    G = F.T @ F
    G = G.toarray() if hasattr(G, "toarray") else np.asarray(G)
    return float(np.linalg.eigvalsh(G)[-1])


def _logistic_grad(F, y, w, lam, weight):
    z = F @ w
    s = -y * _sigmoid(-y * z)
    return weight * (F.T @ s) + lam * w


def _sigmoid(t):
    return np.exp(-np.logaddexp(0.0, -t))


# --------------------------------------------------------------------------- graphs


def laplacian(n: int, edges: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    W = np.zeros((n, n))
    weights = np.ones(len(edges)) if weights is None else weights
    for (i, j), w in zip(edges, weights):
        W[i, j] -= w
        W[j, i] -= w
        W[i, i] += w
        W[j, j] += w
    return W


def connected(n: int, edges: np.ndarray) -> bool:
    parent = list(range(n))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for i, j in edges:
        parent[find(int(i))] = find(int(j))
    return len({find(i) for i in range(n)}) == 1


GRAPHS = ("path", "ring", "grid", "er", "star", "complete")


def make_graph(kind: str, n: int, rng=None, p_edge: float | None = None) -> np.ndarray:
    """Edges of a networkx-style graph (path, ring, grid, Erdos-Renyi resampled until connected, star)."""
    if n < 2:
        raise InputError("a network needs at least 2 nodes")
    if kind == "path":
        e = [(i, i + 1) for i in range(n - 1)]
    elif kind == "ring":
        e = [(i, (i + 1) % n) for i in range(n)] if n > 2 else [(0, 1)]
    elif kind == "star":
        e = [(0, i) for i in range(1, n)]
    elif kind == "complete":
        e = [(i, j) for i in range(n) for j in range(i + 1, n)]
    elif kind == "grid":
        cols = int(np.ceil(np.sqrt(n)))
        e = []
        for i in range(n):
            r, c = divmod(i, cols)
            if c + 1 < cols and i + 1 < n:
                e.append((i, i + 1))
            if i + cols < n:
                e.append((i, i + cols))
    elif kind == "er":
        rng = rng if rng is not None else np.random.default_rng(0)
        pe = p_edge if p_edge is not None else min(1.0, 2.0 * np.log(n) / n)
        for _ in range(1000):
            e = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < pe]
            if e and connected(n, np.array(e)):
                break
        else:  # pragma: no cover
            raise InputError("could not draw a connected Erdos-Renyi graph; raise the edge probability")
    else:
        raise InputError(f"unknown graph {kind!r}; expected one of {', '.join(GRAPHS)}")
    return np.array(e, dtype=int).reshape(-1, 2)


# --------------------------------------------------------------------------- reading


def _fail(path, msg):
    raise InputError(msg, display_name(path))


def read_graph(path, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Edge list CSV ``source,target[,weight]`` (header optional); checks range, loops, connectivity."""
    edges, weights = [], []
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            parts = [t.strip() for t in s.split(",")]
            if lineno == 1 and parts[0].lower() in ("source", "src", "i", "u"):
                if len(parts) < 2:
                    raise InputError("header must be source,target[,weight]", display_name(path), lineno)
                continue
            if len(parts) not in (2, 3):
                raise InputError(f"expected 'source,target[,weight]', got {len(parts)} fields",
                                 display_name(path), lineno)
            try:
                i, j = int(parts[0]), int(parts[1])
                w = float(parts[2]) if len(parts) == 3 else 1.0
            except ValueError:
                raise InputError("node ids must be integers and the weight a number", display_name(path),
                                 lineno) from None
            if not (0 <= i < n and 0 <= j < n):
                raise InputError(f"node id out of range 0..{n - 1}", display_name(path), lineno)
            if i == j:
                raise InputError("self-loop", display_name(path), lineno)
            if not (np.isfinite(w) and w > 0):
                raise InputError("edge weight must be a positive finite number", display_name(path), lineno)
            edges.append((i, j))
            weights.append(w)
    if not edges:
        _fail(path, "no edges")
    E = np.array(edges, dtype=int)
    if not connected(n, E):
        _fail(path, f"the graph is disconnected (n_nodes = {n}); decentralized optimization needs a connected graph")
    return E, np.array(weights)


def _arr(z: dict, key: str, path, node: int, ndim: int, shape=None, default=None):
    if key not in z:
        if default is None:
            _fail(path, f"node {node}: missing matrix {key}")
        return default
    a = z[key]
    if a.dtype.kind not in "fiub":
        _fail(path, f"node {node}: matrix {key} is not numeric (dtype {a.dtype})")
    a = np.asarray(a, dtype=float)
    if a.ndim != ndim:
        _fail(path, f"node {node}: matrix {key} has {a.ndim} dimensions, expected {ndim}")
    if shape is not None:
        for k, (got, want) in enumerate(zip(a.shape, shape)):
            if want is not None and got != want:
                _fail(path, f"node {node}: matrix {key} has shape {a.shape}, expected "
                      f"{tuple('*' if s is None else s for s in shape)}")
    if not np.all(np.isfinite(a)):
        _fail(path, f"node {node}: matrix {key} has NaN or infinite entries")
    return a


def read_problem(path) -> Problem:
    """Read and validate a problem spec (see the module docstring); every error names the file,
    the node and the matrix."""
    spec = load_json(path, expect=dict, what="problem spec")
    base = Path(path).parent
    where = display_name(path)
    if spec.get("format", FORMAT) != FORMAT:
        _fail(path, f"format {spec.get('format')!r}; expected {FORMAT!r}")
    loss = spec.get("loss", "quadratic")
    if loss not in LOSSES:
        _fail(path, f"field loss: {loss!r}; expected one of {', '.join(LOSSES)}")
    nodes = spec.get("nodes")
    if not isinstance(nodes, list) or not nodes or not all(isinstance(x, str) for x in nodes):
        _fail(path, "field nodes: expected a non-empty list of .npz file names")
    n = spec.get("n_nodes", len(nodes))
    p, m = spec.get("dim_shared", 0), spec.get("m", 0)
    for key, val in (("n_nodes", n), ("dim_shared", p), ("m", m)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 0:
            _fail(path, f"field {key}: expected a non-negative integer, got {val!r}")
    if n != len(nodes) or n < 2:
        _fail(path, f"field n_nodes = {n} but {len(nodes)} node files are listed (need >= 2)")
    if not isinstance(spec.get("graph"), str):
        _fail(path, "field graph: expected the edge-list CSV's file name")
    edges, ew = read_graph(base / spec["graph"], n)
    raw = []
    for i, name in enumerate(nodes):
        npath = base / name
        if not npath.exists():
            _fail(path, f"node {i}: file {name} not found")
        z = load_npz(npath)
        raw.append((npath, z))
    d = []
    for i, (npath, z) in enumerate(raw):
        if loss in ("quadratic", "logbarrier"):
            Q = _arr(z, "Q", npath, i, 2)
            if Q.shape[0] != Q.shape[1] or Q.shape[0] < p:
                _fail(npath, f"node {i}: matrix Q has shape {Q.shape}, expected (d_i + p, d_i + p) with p = {p}")
            d.append(Q.shape[0] - p)
        else:
            Fshape = z["F_shape"] if "F_shape" in z else (z["F"].shape if "F" in z else None)
            if Fshape is None or len(Fshape) != 2:
                _fail(npath, f"node {i}: missing matrix F (or F_data/F_indices/F_indptr/F_shape)")
            if int(Fshape[1]) < p:
                _fail(npath, f"node {i}: matrix F has {int(Fshape[1])} columns, fewer than p = {p}")
            d.append(int(Fshape[1]) - p)
    dmax = max(d) if d else 0
    D = dmax + p
    rmax = max(_rows(z, "C") for _, z in raw)
    smax = max(_rows(z, "Ct") for _, z in raw)
    import scipy.sparse as sp

    sparse_a = any("A_data" in z for _, z in raw)
    A = [] if sparse_a else np.zeros((n, m, dmax)); b = np.zeros((n, m))
    C = np.zeros((n, rmax, dmax)); c = np.zeros((n, rmax))
    Ct = np.zeros((n, smax, p)); ct = np.zeros((n, smax))
    Q = np.zeros((n, D, D)) if loss != "logistic" else None
    q = np.zeros((n, D)) if loss != "logistic" else None
    bw, lb, bfloor = (np.zeros((n, D)), np.zeros((n, D)), np.ones(n)) if loss == "logbarrier" else (None, None, None)
    F, Y, lam, weight = ([], [], np.zeros((n, D)), np.ones(n)) if loss == "logistic" else (None, None, None, None)
    l1 = np.zeros(n)
    for i, (npath, z) in enumerate(raw):
        di = d[i]
        cols = np.concatenate([np.arange(di), dmax + np.arange(p)]).astype(int)
        bi = _arr(z, "b", npath, i, 1, (m,), default=np.zeros(m))
        b[i] = bi
        if sparse_a:
            Ai = _read_csr(z, "A", npath, i, (m, di)) if "A_data" in z else \
                _arr(z, "A", npath, i, 2, (m, di), default=np.zeros((m, di)))
            A.append(_pad_cols(sp.csr_matrix(Ai), di, dmax))
        else:
            A[i, :, :di] = _arr(z, "A", npath, i, 2, (m, di), default=np.zeros((m, di)))
        if "C" in z or "c" in z:
            Ci = _arr(z, "C", npath, i, 2, (None, di))
            ci = _arr(z, "c", npath, i, 1, (Ci.shape[0],))
            C[i, :Ci.shape[0], :di] = Ci; c[i, :Ci.shape[0]] = ci
            _feasible(Ci, ci, npath, i, "C", "c")
        if "Ct" in z or "ct" in z:
            Cti = _arr(z, "Ct", npath, i, 2, (None, p))
            cti = _arr(z, "ct", npath, i, 1, (Cti.shape[0],))
            Ct[i, :Cti.shape[0]] = Cti; ct[i, :Cti.shape[0]] = cti
            _feasible(Cti, cti, npath, i, "Ct", "ct")
        if loss in ("quadratic", "logbarrier"):
            Qi = _arr(z, "Q", npath, i, 2)
            qi = _arr(z, "q", npath, i, 1, (di + p,))
            if not np.allclose(Qi, Qi.T, atol=1e-10 * max(1.0, np.abs(Qi).max())):
                _fail(npath, f"node {i}: matrix Q is not symmetric")
            if np.linalg.eigvalsh(Qi)[0] < -1e-9 * max(1.0, np.abs(Qi).max()):
                _fail(npath, f"node {i}: matrix Q is not positive semi-definite (f_{i} not convex)")
            Q[i][np.ix_(cols, cols)] = Qi; q[i][cols] = qi
            if loss == "logbarrier":
                bwi = _arr(z, "bw", npath, i, 1, (di,))
                lbi = _arr(z, "lb", npath, i, 1, (di,))
                bfloor[i] = float(_arr(z, "bfloor", npath, i, 0))
                if np.any(bwi < 0) or not bfloor[i] > 0:
                    _fail(npath, f"node {i}: barrier weights bw must be >= 0 and bfloor > 0")
                bw[i, :di] = bwi; lb[i, :di] = lbi
        else:
            Fi = _read_F(z, npath, i)
            yi = _arr(z, "y", npath, i, 1, (Fi.shape[0],))
            if not np.all(np.isin(yi, (-1.0, 1.0))):
                _fail(npath, f"node {i}: labels y must be -1 or +1")
            lam_i = np.asarray(z["lam"] if "lam" in z else 0.0)
            lam[i][cols] = _arr(z, "lam", npath, i, min(lam_i.ndim, 1), (di + p,) if lam_i.ndim else None,
                                default=lam_i.astype(float))
            weight[i] = float(_arr(z, "weight", npath, i, 0, default=np.array(1.0)))
            if np.any(lam[i] < 0) or weight[i] < 0:
                _fail(npath, f"node {i}: lam and weight must be >= 0")
            F.append(_pad_cols(Fi, di, dmax, p)); Y.append(yi)
        if "l1" in z:
            l1[i] = float(_arr(z, "l1", npath, i, 0))
            if l1[i] < 0:
                _fail(npath, f"node {i}: l1 must be >= 0")
    A = SparseStack(A, m, dmax) if sparse_a else A
    prob = Problem(n=n, d=d, p=p, m=m, loss=loss, edges=edges, edge_weights=ew, A=A, b=b, C=C, c=c, Ct=Ct, ct=ct,
                   Q=Q, q=q, F=F, y=Y, lam=lam, weight=weight, l1=l1, bw=bw, lb=lb, bfloor=bfloor,
                   meta={"spec": where})
    check_feasible(prob, where)
    if isinstance(spec.get("solution"), str):
        spath = base / spec["solution"]
        s = load_npz(spath, required=("x", "xt"))
        x = np.asarray(s["x"], float); xt = np.asarray(s["xt"], float)
        if x.shape != (n, dmax) or xt.shape != (p,):
            _fail(spath, f"solution arrays x {x.shape} / xt {xt.shape}; expected ({n}, {dmax}) / ({p},)")
        prob.solution = {"x": x, "xt": xt}
    return prob


def _rows(z, key):
    a = z.get(key)
    return int(a.shape[0]) if a is not None and a.ndim == 2 else 0


def _feasible(M, v, path, node, mname, vname):
    if M.shape[0] == 0:
        return
    sol = np.linalg.lstsq(M, v, rcond=None)[0]
    if np.linalg.norm(M @ sol - v) > 1e-8 * max(1.0, np.linalg.norm(v)):
        _fail(path, f"node {node}: {mname} x = {vname} is infeasible (no solution)")


def check_feasible(prob: Problem, where: str) -> None:
    """The coupled and the shared constraints must be jointly feasible (checked by least squares)."""
    n, p = prob.n, prob.p
    if p and prob.Ct.shape[1]:
        M = prob.Ct.reshape(-1, p)
        v = prob.ct.reshape(-1)
        sol = np.linalg.lstsq(M, v, rcond=None)[0]
        if np.linalg.norm(M @ sol - v) > 1e-8 * max(1.0, np.linalg.norm(v)):
            raise InputError("matrices Ct of the nodes are jointly infeasible (no shared x~ satisfies "
                             "every Ct_i x~ = ct_i)", where)
    if prob.m and prob.sparse:
        _check_feasible_sparse(prob, where)
    elif prob.m:
        dm = prob.dmax
        # unknowns: every x_i; rows: sum_i A_i x_i = sum_i b_i, and C_i x_i = c_i
        rows = [np.concatenate([prob.A[i] for i in range(n)], axis=1)]
        rhs = [prob.b.sum(0)]
        for i in range(n):
            blk = np.zeros((prob.C.shape[1], n * dm))
            blk[:, i * dm:(i + 1) * dm] = prob.C[i]
            rows.append(blk); rhs.append(prob.c[i])
        M = np.concatenate(rows, 0); v = np.concatenate(rhs)
        sol = np.linalg.lstsq(M, v, rcond=None)[0]
        if np.linalg.norm(M @ sol - v) > 1e-8 * max(1.0, np.linalg.norm(v)):
            raise InputError("matrices A (coupled, sum_i A_i x_i = sum_i b_i) and C of the nodes are jointly "
                             "infeasible", where)


def _check_feasible_sparse(prob: Problem, where: str) -> None:
    """sum_i A_i x_i = sum_i b_i with sparse A_i (and no local C rows): LSQR, no dense copy."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import lsqr

    if np.abs(prob.C).sum():
        raise InputError("a sparse coupled matrix A with local constraints C is not supported (give A dense)", where)
    M = sp.hstack([a_block(prob.A, i, prob.d[i]) for i in range(prob.n)]).tocsr()
    v = prob.b.sum(0)
    sol = lsqr(M, v, atol=1e-14, btol=1e-14, iter_lim=20 * max(M.shape))[0]
    if np.linalg.norm(M @ sol - v) > 1e-8 * max(1.0, np.linalg.norm(v)):
        raise InputError("matrices A (coupled, sum_i A_i x_i = sum_i b_i) of the nodes are jointly infeasible", where)


def _read_csr(z, key, path, node, shape):
    """Matrix ``key`` from its CSR parts key_data/key_indices/key_indptr/key_shape, checked against
    ``shape`` (None = any)."""
    import scipy.sparse as sp

    try:
        got = tuple(int(s) for s in z[f"{key}_shape"])
        M = sp.csr_matrix((np.asarray(z[f"{key}_data"], float), np.asarray(z[f"{key}_indices"]),
                           np.asarray(z[f"{key}_indptr"])), shape=got)
        M.check_format(full_check=True)
    except (KeyError, ValueError, TypeError) as exc:
        _fail(path, f"node {node}: matrix {key} (CSR parts) is malformed ({exc})")
    if not np.all(np.isfinite(M.data)):
        _fail(path, f"node {node}: matrix {key} has NaN or infinite entries")
    if shape is not None and any(w is not None and g != w for g, w in zip(M.shape, shape)):
        _fail(path, f"node {node}: matrix {key} has shape {M.shape}, expected "
              f"{tuple('*' if s is None else s for s in shape)}")
    return M


def _read_F(z, path, node):
    import scipy.sparse as sp

    if "F" in z:
        return sp.csr_matrix(_arr(z, "F", path, node, 2))
    return _read_csr(z, "F", path, node, None)


def _pad_cols(Mi, di, dmax, p=0):
    """CSR with columns (x_i: d_i, x~: p) moved to the padded layout (dmax + p columns)."""
    import scipy.sparse as sp

    coo = Mi.tocoo()
    col = np.where(coo.col < di, coo.col, coo.col - di + dmax)
    return sp.csr_matrix((coo.data, (coo.row, col)), shape=(Mi.shape[0], dmax + p))


# --------------------------------------------------------------------------- writing


def node_arrays(prob: Problem, i: int) -> dict:
    """Node i's arrays in the file format (unpadded)."""
    di = prob.d[i]
    cols = prob.real_w(i)
    Ai = a_block(prob.A, i, di)
    out = {"b": prob.b[i]}
    if prob.sparse:
        out.update(_csr_parts("A", Ai))
    else:
        out["A"] = Ai
    if prob.nonsmooth:
        out["l1"] = np.array(prob.l1[i])
    if prob.C.shape[1]:
        out["C"], out["c"] = prob.C[i, :, :di], prob.c[i]
    if prob.Ct.shape[1]:
        out["Ct"], out["ct"] = prob.Ct[i], prob.ct[i]
    if prob.loss in ("quadratic", "logbarrier"):
        out["Q"], out["q"] = prob.Q[i][np.ix_(cols, cols)], prob.q[i][cols]
        if prob.loss == "logbarrier":
            out.update(bw=prob.bw[i, :di], lb=prob.lb[i, :di], bfloor=np.array(prob.bfloor[i]))
    else:
        lam = prob.lam[i][cols]
        out.update(_csr_parts("F", prob.F[i][:, cols]), y=prob.y[i],
                   lam=np.array(lam[0]) if lam.size and np.all(lam == lam[0]) else lam,
                   weight=np.array(prob.weight[i]))
    return out


def _csr_parts(key: str, M) -> dict:
    M = M.tocsr()
    return {f"{key}_data": M.data, f"{key}_indices": M.indices, f"{key}_indptr": M.indptr,
            f"{key}_shape": np.array(M.shape)}


def write_problem(folder, prob: Problem, name: str = "problem") -> Path:
    """Write ``folder/<name>.json`` with its node files, graph and (when known) solution."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    nodes = []
    for i in range(prob.n):
        fname = f"{name}_node{i}.npz"
        write_npz(folder / fname, **node_arrays(prob, i))
        nodes.append(fname)
    gname = f"{name}_graph.csv"
    lines = ["source,target,weight"] + [f"{int(a)},{int(b)},{repr(float(w))}"
                                        for (a, b), w in zip(prob.edges, prob.edge_weights)]
    write_text(folder / gname, "\n".join(lines) + "\n")
    spec = {"format": FORMAT, "loss": prob.loss, "n_nodes": prob.n, "dim_shared": prob.p, "m": prob.m,
            "graph": gname, "nodes": nodes}
    if prob.solution is not None:
        sname = f"{name}_solution.npz"
        write_npz(folder / sname, x=prob.solution["x"], xt=prob.solution["xt"],
                  **{k: v for k, v in prob.solution.items() if k not in ("x", "xt")})
        spec["solution"] = sname
    spec.update({k: v for k, v in prob.meta.items() if k in ("kind", "graph_kind", "seed", "note")})
    path = folder / f"{name}.json"
    write_json(path, spec)
    return path


def problem_files(spec_path) -> list[str]:
    """The files a spec names (for the manifest)."""
    import json

    try:
        spec = json.loads(Path(spec_path).read_text())
    except (OSError, ValueError):
        return []
    base = Path(spec_path).parent
    out = [str(base / spec["graph"])] if isinstance(spec.get("graph"), str) else []
    out += [str(base / x) for x in spec.get("nodes", []) if isinstance(x, str)]
    return [p for p in out if os.path.isfile(p)]


# --------------------------------------------------------------------------- LIBSVM


def read_libsvm(path, n_features: int | None = None):
    """LIBSVM sparse text (``label idx:val ...``, 1-based indices) -> (scipy CSR X, labels y); built
    from the index lists directly, never through a dense copy."""
    import scipy.sparse as sp

    data, indices, indptr, labels = [], [], [0], []
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            s = line.split("#", 1)[0].strip()
            if not s:
                continue
            parts = s.split()
            try:
                labels.append(float(parts[0]))
                for tok in parts[1:]:
                    k, v = tok.split(":", 1)
                    j = int(k)
                    if j < 1:
                        raise ValueError
                    indices.append(j - 1)
                    data.append(float(v))
            except ValueError:
                raise InputError("expected 'label index:value ...' with 1-based integer indices",
                                 display_name(path), lineno) from None
            indptr.append(len(indices))
    if not labels:
        _fail(path, "no samples")
    nf = max(indices) + 1 if indices else 0
    if n_features is not None:
        if nf > n_features:
            _fail(path, f"feature index {nf} exceeds n_features = {n_features}")
        nf = n_features
    X = sp.csr_matrix((np.array(data), np.array(indices, dtype=np.int64), np.array(indptr, dtype=np.int64)),
                      shape=(len(labels), nf))
    if not np.all(np.isfinite(X.data)):
        _fail(path, "NaN or infinite values")
    y = np.array(labels)
    uniq = np.unique(y)
    if len(uniq) == 2 and not np.array_equal(uniq, [-1.0, 1.0]):
        y = np.where(y == uniq[1], 1.0, -1.0)
    return X, y
