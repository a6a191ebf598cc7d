"""Plug-in evaluation of estimand trees on data, bootstrap variances and ranking.

Discrete data: every node evaluates to a probability table (numpy, float64) over its free
variables with a leading batch axis (bootstrap replicates); products are one ``np.einsum`` over the
factors' axes, sums are axis sums, fractions divide with 0/0 := 0 (a cell with no data gets weight
zero). Tables of the joint come from counts; bootstrap replicates resample the counts
multinomially, all replicates evaluated at once.

Linear-Gaussian data: every node evaluates to a Gaussian potential exp(-v'Kv/2 + h'v) over its
free variables (batched K, h). P(A | C) of the empirical Gaussian is the joint potential over A u C
minus the marginal potential over C; products add potentials, sums integrate variables out (Schur
complement), fractions subtract. The estimand's E[y | x, w] is then linear in (x, w) and the
effect of x on y is -K_yy^{-1} K_yx. Bootstrap replicates resample rows (vectorised).
"""
from __future__ import annotations

import string

import numpy as np

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.derive_docalc.expr import Expr, Frac, One, Prob, Prod, Sum

_LETTERS = string.ascii_letters


# --------------------------------------------------------------------------- discrete


class DiscreteTables:
    """Batched joint tables P(V) (shape (B, *cards)) over ``names``; marginals are cached.
    ``experiments`` maps an experiment's variable set (frozenset) to the tables of its joint
    P^(Z)(V) (what a factor P_do{Z}(.) is evaluated on)."""

    def __init__(self, joint: np.ndarray, names: list[str], experiments: dict | None = None):
        self.joint = np.asarray(joint, dtype=np.float64)
        if self.joint.ndim == len(names):
            self.joint = self.joint[None]
        self.names = list(names)
        self._marg: dict = {}
        self.experiments = {frozenset(k): v if isinstance(v, DiscreteTables) else DiscreteTables(v, names)
                            for k, v in (experiments or {}).items()}

    def of(self, do) -> "DiscreteTables":
        """The tables of experiment ``do`` (these tables when ``do`` is empty)."""
        if not do:
            return self
        try:
            return self.experiments[frozenset(do)]
        except KeyError:
            raise InputError(f"no data from the experiment do({', '.join(sorted(do))})") from None

    def marginal(self, S) -> tuple[np.ndarray, list[str]]:
        key = frozenset(S)
        if key not in self._marg:
            keep = [v for v in self.names if v in key]
            axes = tuple(1 + i for i, v in enumerate(self.names) if v not in key)
            self._marg[key] = (self.joint.sum(axis=axes) if axes else self.joint, keep)
        return self._marg[key]


def _align(arr: np.ndarray, names: list[str], target: list[str]) -> np.ndarray:
    """Transpose/expand a (B, *names) array to broadcast against (B, *target)."""
    perm = [0] + [1 + names.index(v) for v in target if v in names]
    a = np.transpose(arr, perm)
    shape = [a.shape[0]]
    it = iter(a.shape[1:])
    for v in target:
        shape.append(next(it) if v in names else 1)
    return a.reshape(shape)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(b > 0, a / np.where(b > 0, b, 1.0), 0.0)
    return out


def eval_discrete(e: Expr, T: DiscreteTables) -> tuple[np.ndarray, list[str]]:
    """Evaluate an estimand on batched joint tables; returns (array (B, *vars), vars)."""
    if isinstance(e, One):
        return np.ones((T.joint.shape[0],)), []
    if isinstance(e, Prob):
        Te = T.of(e.do)
        num, nv = Te.marginal(set(e.vars) | set(e.cond))
        if not e.cond:
            return num, nv
        den, dv = Te.marginal(e.cond)
        return _div(num, _align(den, dv, nv)), nv
    if isinstance(e, Prod):
        parts = [eval_discrete(f, T) for f in e.factors]
        allv = []
        for _, v in parts:
            allv += [x for x in v if x not in allv]
        if len(allv) + 1 > len(_LETTERS):
            raise InputError(f"too many variables for einsum (at most {len(_LETTERS) - 1})")
        let = {v: _LETTERS[i + 1] for i, v in enumerate(allv)}
        subs = ",".join("a" + "".join(let[x] for x in v) for _, v in parts)
        out = np.einsum(subs + "->a" + "".join(let[x] for x in allv), *[p for p, _ in parts], optimize="greedy")
        return out, allv
    if isinstance(e, Sum):
        arr, v = eval_discrete(e.body, T)
        axes = tuple(1 + i for i, x in enumerate(v) if x in e.over)
        return arr.sum(axis=axes), [x for x in v if x not in e.over]
    if isinstance(e, Frac):
        n, nv = eval_discrete(e.num, T)
        d, dv = eval_discrete(e.den, T)
        allv = nv + [x for x in dv if x not in nv]
        return _div(_align(n, nv, allv), _align(d, dv, allv)), allv
    raise TypeError(e)


def evaluate_table(e: Expr, T: DiscreteTables, target: list[str], weights: dict | None = None) -> np.ndarray:
    """The estimand as an array (B, *target). Target variables the estimand does not mention are
    broadcast; estimand variables outside ``target`` (e.g. an inserted action, on which the value
    does not depend in the population) are averaged with ``weights`` (their empirical marginal)."""
    arr, v = eval_discrete(e, T)
    extra = [x for x in v if x not in target]
    if extra:
        if weights is None:
            w, wv = T.marginal(extra)
        else:
            w, wv = weights[frozenset(extra)]
        arr = (arr * _align(w, wv, v)).sum(axis=tuple(1 + v.index(x) for x in extra))
        v = [x for x in v if x not in extra]
    out = _align(arr, v, target)
    return np.broadcast_to(out, (out.shape[0],) + tuple(T.joint.shape[1 + T.names.index(t)] for t in target))


def counts_table(data: np.ndarray, cards: list[int]) -> np.ndarray:
    """Joint counts of integer-coded columns (vectorised with ravel_multi_index + bincount)."""
    flat = np.ravel_multi_index(tuple(data.T), cards)
    return np.bincount(flat, minlength=int(np.prod(cards))).reshape(cards).astype(np.float64)


def bootstrap_tables(counts: np.ndarray, B: int, rng: np.random.Generator) -> np.ndarray:
    """B multinomial resamples of a counts table, normalised: (B, *shape)."""
    n = int(counts.sum())
    p = (counts / n).ravel()
    draws = rng.multinomial(n, p, size=B).astype(np.float64) / n
    return draws.reshape((B,) + counts.shape)


def fingerprint(e: Expr, names: list[str], target: list[str], card: int = 3, seed: int = 12345) -> np.ndarray:
    """The estimand evaluated on a fixed random joint over ``names`` (all cells positive; it need not
    be Markov to any graph): two estimands with equal fingerprints are algebraically the same
    functional (with probability one), which deduplicates beyond the canonical form."""
    rng = np.random.default_rng(seed)
    joint = rng.dirichlet(np.ones(card ** len(names))).reshape([card] * len(names))
    T = DiscreteTables(joint, names)
    return evaluate_table(e, T, target)[0]


# --------------------------------------------------------------------------- linear-Gaussian


class GaussianMoments:
    """Batched means (B, p) and covariances (B, p, p) of the observed variables ``names``."""

    def __init__(self, mean: np.ndarray, cov: np.ndarray, names: list[str]):
        self.mean = np.asarray(mean, dtype=np.float64)
        self.cov = np.asarray(cov, dtype=np.float64)
        if self.mean.ndim == 1:
            self.mean, self.cov = self.mean[None], self.cov[None]
        self.names = list(names)

    @classmethod
    def from_data(cls, data: np.ndarray, names: list[str]) -> "GaussianMoments":
        d = np.asarray(data, dtype=np.float64)
        mu = d.mean(0)
        c = d - mu
        return cls(mu, c.T @ c / (len(d) - 1), names)

    @classmethod
    def bootstrap(cls, data: np.ndarray, names: list[str], B: int, rng: np.random.Generator) -> "GaussianMoments":
        d = np.asarray(data, dtype=np.float64)
        n = len(d)
        idx = rng.integers(0, n, size=(B, n))
        X = d[idx]  # (B, n, p)
        mu = X.mean(1)
        c = X - mu[:, None, :]
        return cls(mu, np.einsum("bni,bnj->bij", c, c) / (n - 1), names)

    def potential(self, A, C) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """The log-potential (K, h) of P(A | C) over A u C (sorted by ``names`` order)."""
        S = [v for v in self.names if v in set(A) | set(C)]
        ix = [self.names.index(v) for v in S]
        Sig = self.cov[:, ix][:, :, ix]
        mu = self.mean[:, ix]
        K = np.linalg.inv(Sig)
        h = np.einsum("bij,bj->bi", K, mu)
        Cs = [v for v in S if v in set(C)]
        if Cs:
            jx = [S.index(v) for v in Cs]
            Kc = np.linalg.inv(Sig[:, jx][:, :, jx])
            hc = np.einsum("bij,bj->bi", Kc, mu[:, jx])
            K = K.copy()
            h = h.copy()
            K[:, np.ix_(jx, jx)[0], np.ix_(jx, jx)[1]] -= Kc
            h[:, jx] -= hc
        return K, h, S


def _embed(K, h, v, allv):
    B = K.shape[0]
    n = len(allv)
    K2 = np.zeros((B, n, n))
    h2 = np.zeros((B, n))
    ix = [allv.index(x) for x in v]
    K2[:, np.ix_(ix, ix)[0], np.ix_(ix, ix)[1]] = K
    h2[:, ix] = h
    return K2, h2


def eval_gaussian(e: Expr, M: GaussianMoments):
    """Evaluate an estimand on Gaussian moments: returns (K, h, vars) of its log-potential."""
    B = M.mean.shape[0]
    if isinstance(e, One):
        return np.zeros((B, 0, 0)), np.zeros((B, 0)), []
    if isinstance(e, Prob):
        return M.potential(e.vars, e.cond)
    if isinstance(e, (Prod, Frac)):
        parts = [eval_gaussian(f, M) for f in (e.factors if isinstance(e, Prod) else (e.num, e.den))]
        allv = []
        for _, _, v in parts:
            allv += [x for x in v if x not in allv]
        K = np.zeros((B, len(allv), len(allv)))
        h = np.zeros((B, len(allv)))
        for i, (k, hh, v) in enumerate(parts):
            k2, h2 = _embed(k, hh, v, allv)
            sign = -1.0 if (isinstance(e, Frac) and i == 1) else 1.0
            K += sign * k2
            h += sign * h2
        return K, h, allv
    if isinstance(e, Sum):
        K, h, v = eval_gaussian(e.body, M)
        out = [i for i, x in enumerate(v) if x in e.over]
        keep = [i for i, x in enumerate(v) if x not in e.over]
        if not out:
            return K, h, v
        Kbb = K[:, out][:, :, out]
        Kab = K[:, keep][:, :, out]
        sol_K = np.linalg.solve(Kbb, np.transpose(Kab, (0, 2, 1)))
        sol_h = np.linalg.solve(Kbb, h[:, out][..., None])[..., 0]
        Kn = K[:, keep][:, :, keep] - Kab @ sol_K
        hn = h[:, keep] - np.einsum("bij,bj->bi", Kab, sol_h)
        return Kn, hn, [v[i] for i in keep]
    raise TypeError(e)


def gaussian_effect(e: Expr, M: GaussianMoments, y: str, x: str) -> np.ndarray:
    """d E[y | do(x), w] / d x under the estimand (one value per batch element); 0 when the
    estimand does not mention x."""
    K, h, v = eval_gaussian(e, M)
    if y not in v:
        raise UsageError(f"the estimand does not mention the outcome {y}")
    if x not in v:
        return np.zeros(K.shape[0])
    Y = [i for i, u in enumerate(v) if u == y]
    # condition on everything else: E[y | rest] = K_yy^{-1}(h_y - K_y,rest rest)
    return -K[:, Y[0], v.index(x)] / K[:, Y[0], Y[0]]


# --------------------------------------------------------------------------- ranking


def rank(estimates: list[dict], key: str = "variance") -> list[dict]:
    """Sort estimand rows by bootstrap variance (``key``; NaN last), ties by text; adds ``rank`` (1 = best)."""
    rows = sorted(estimates, key=lambda r: (not np.isfinite(r[key]), r[key] if np.isfinite(r[key]) else 0.0,
                                            r["estimand"]))
    for i, r in enumerate(rows):
        r["rank"] = i + 1
        for k, v in r.items():  # JSON has no NaN: an undefined value is null
            if isinstance(v, float) and not np.isfinite(v):
                r[k] = None
    return rows
