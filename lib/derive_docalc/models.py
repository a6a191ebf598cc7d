"""Graphs and models with known answers: the classic graphs, random ADMGs, random discrete SCMs
with explicit latents (exact P(V) and exact interventional distributions by enumeration), and
linear-Gaussian SCMs (sampling and the exact causal effect)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icmlkit.lib.causal.admg import ADMG
from icmlkit.lib.derive_docalc.config import GenerateConfig  # noqa: F401 - re-exported

CLASSIC = {
    "back-door": "dag { Z -> X; Z -> Y; X -> Y }",
    "front-door": "dag { X -> M; M -> Y; X <-> Y }",
    "front-door+back-door": "dag { Z -> X; Z -> Y; X -> M; M -> Y }",
    "front-door+back-door (latent Z-Y)": "dag { Z -> X; Z <-> Y; X -> M; M -> Y }",
    "instrumental variable": "dag { Z -> X; X -> Y; X <-> Y }",
    "napkin": "dag { W1 -> W2; W2 -> X; X -> Y; W1 <-> X; W1 <-> Y }",
    "M-graph": "dag { A -> M; B -> M; A -> X; B -> Y; X -> Y }",
    "bow (unidentifiable)": "dag { X -> Y; X <-> Y }",
}


def classic(name: str) -> ADMG:
    from icmlkit.lib.causal.parse import parse_dagitty

    return parse_dagitty(CLASSIC[name], name)


def random_admg(n: int, rng: np.random.Generator, p_dir: float = 0.4, p_bid: float = 0.25,
                names: list[str] | None = None) -> ADMG:
    """A random ADMG on n nodes: directed edges i -> j (i < j in a random order) with probability
    p_dir, bidirected edges (latent confounders) with probability p_bid."""
    names = names or [f"V{i}" for i in range(n)]
    perm = rng.permutation(n)
    d = {(names[perm[i]], names[perm[j]]) for i in range(n) for j in range(i + 1, n) if rng.random() < p_dir}
    b = {(names[i], names[j]) for i in range(n) for j in range(i + 1, n) if rng.random() < p_bid}
    return ADMG(list(names), d, b)


# --------------------------------------------------------------------------- discrete SCM


@dataclass
class DiscreteSCM:
    """Binary (or k-ary) variables; each observed V has CPT P(V | pa(V), latents of V); each
    bidirected edge is an explicit latent with its own prior. Tables are float64."""

    G: ADMG
    card: dict
    cpts: dict  # V -> (parents list incl. latents, table with axes (*parents, V))
    latent_prior: dict  # U -> vector

    @classmethod
    def random(cls, G: ADMG, rng: np.random.Generator, card: int = 2, alpha: float = 1.0) -> "DiscreteSCM":
        cards = {v: card for v in G.nodes}
        lat = {}
        lat_of = {v: [] for v in G.nodes}
        for a, b in sorted(G.bidirected):
            u = f"U[{a},{b}]"
            cards[u] = card
            lat[u] = rng.dirichlet(np.full(card, alpha))
            lat_of[a].append(u)
            lat_of[b].append(u)
        cpts = {}
        for v in G.topological_order():
            pa = sorted(G.parents(v), key=G.index.get) + lat_of[v]
            shape = tuple(cards[p] for p in pa)
            t = rng.dirichlet(np.full(card, alpha), size=shape if shape else None)
            cpts[v] = (pa, np.asarray(t))
        return cls(G, cards, cpts, lat)

    def _joint(self, do: dict | None = None) -> np.ndarray:
        """P(V) (or P_do(V)) over G.nodes in order, latents summed out, via one einsum."""
        do = do or {}
        names = list(self.G.nodes) + list(self.latent_prior)
        letter = {v: chr(ord("a") + i) if i < 26 else chr(ord("A") + i - 26) for i, v in enumerate(names)}
        ops, subs = [], []
        for u, p in self.latent_prior.items():
            ops.append(p)
            subs.append(letter[u])
        for v, (pa, t) in self.cpts.items():
            if v in do:
                ind = np.zeros(self.card[v])
                ind[do[v]] = 1.0
                ops.append(ind)
                subs.append(letter[v])
            else:
                ops.append(t)
                subs.append("".join(letter[p] for p in pa) + letter[v])
        out = "".join(letter[v] for v in self.G.nodes)
        return np.einsum(",".join(subs) + "->" + out, *ops, optimize="greedy")

    def joint(self) -> np.ndarray:
        return self._joint()

    def experimental_joint(self, Z) -> np.ndarray:
        """P^(Z)(V): the joint of a randomised experiment on Z, each z drawn uniformly (the do-values
        of Z averaged with equal weights), over G.nodes in order."""
        Zs = sorted(Z, key=self.G.index.get)
        if not Zs:
            return self.joint()
        cells = list(np.ndindex(*[self.card[v] for v in Zs]))
        return sum(self._joint(dict(zip(Zs, c))) for c in cells) / len(cells)

    def interventional(self, Y, X, W) -> np.ndarray:
        """Exact P(y | do(x), w) as an array over sorted-by-graph-order (Y, X, W) axes; NaN where
        P(w | do(x)) = 0."""
        G = self.G
        Y, X, W = [sorted(S, key=G.index.get) for S in (Y, X, W)]
        shape = [self.card[v] for v in Y + X + W]
        out = np.full(shape, np.nan)
        for xv in np.ndindex(*[self.card[v] for v in X]):
            P = self._joint(dict(zip(X, xv)))
            keep = Y + W
            axes = tuple(i for i, v in enumerate(G.nodes) if v not in keep)
            m = P.sum(axis=axes)
            order = [v for v in G.nodes if v in keep]
            m = np.transpose(m, [order.index(v) for v in keep])
            den = m.sum(axis=tuple(range(len(Y))), keepdims=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                c = np.where(den > 0, m / np.where(den > 0, den, 1), np.nan)
            idx = (slice(None),) * len(Y) + tuple(xv)
            out[idx] = c
        return out

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n samples of the observed variables (columns in G.nodes order), vectorised per variable."""
        vals = {}
        for u, p in self.latent_prior.items():
            vals[u] = rng.choice(len(p), size=n, p=p)
        for v in self.G.topological_order():
            pa, t = self.cpts[v]
            probs = t[tuple(vals[p] for p in pa)] if pa else np.broadcast_to(t, (n, len(t)))
            u = rng.random(n)
            vals[v] = (u[:, None] > np.cumsum(probs, axis=1)).sum(1).clip(max=self.card[v] - 1)
        return np.stack([vals[v] for v in self.G.nodes], 1)


# --------------------------------------------------------------------------- linear-Gaussian SCM


@dataclass
class LinearGaussianSCM:
    """V = B^T V + noise: coef[(a, b)] for a -> b; each bidirected edge a <-> b is a latent
    N(0, 1) with loadings lat[(a, b)] = (la, lb); noise standard deviations sd[v]."""

    G: ADMG
    coef: dict
    lat: dict
    sd: dict

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        vals = {}
        U = {e: rng.standard_normal(n) for e in sorted(self.lat)}
        for v in self.G.topological_order():
            x = self.sd[v] * rng.standard_normal(n)
            for a in self.G.parents(v):
                x = x + self.coef[(a, v)] * vals[a]
            for (a, b), (la, lb) in self.lat.items():
                if v == a:
                    x = x + la * U[(a, b)]
                elif v == b:
                    x = x + lb * U[(a, b)]
            vals[v] = x
        return np.stack([vals[v] for v in self.G.nodes], 1)

    def total_effect(self, x: str, y: str) -> float:
        """d E[y | do(x)] / d x: the sum over directed paths of the products of coefficients."""
        order = self.G.topological_order()
        eff = {v: 0.0 for v in order}
        eff[x] = 1.0
        for v in order[order.index(x) + 1:]:
            eff[v] = sum(self.coef[(a, v)] * eff[a] for a in self.G.parents(v))
        return eff[y]


# --------------------------------------------------------------------------- `generate`


@dataclass
class SampledData:
    """The samples (columns in graph order) and the query's true value under the SCM, if known."""

    cfg: GenerateConfig
    names: list
    data: np.ndarray
    truth: float | None
    truth_of: str | None

    def rows(self) -> list[dict]:
        cast = int if self.cfg.kind == "discrete" else float
        return [dict(zip(self.names, map(cast, r))) for r in self.data]

    @property
    def summary(self) -> dict:
        return {"kind": self.cfg.kind, "n": int(len(self.data)), "variables": list(self.names), "truth": self.truth,
                "truth_of": self.truth_of}


def _random_linear_gaussian(G: ADMG, rng: np.random.Generator) -> LinearGaussianSCM:
    def draw(lo, hi):
        return float(rng.choice([-1.0, 1.0]) * rng.uniform(lo, hi))

    coef = {e: draw(0.5, 1.5) for e in sorted(G.directed)}
    lat = {e: (draw(0.5, 1.0), draw(0.5, 1.0)) for e in sorted(G.bidirected)}
    return LinearGaussianSCM(G, coef, lat, {v: 1.0 for v in G.nodes})


def _discrete_truth(scm: DiscreteSCM, q) -> float:
    """P(y | do(x), w) of the SCM at the query's values (an unspecified variable takes its largest
    value, as ``estimate`` does)."""
    from icmlkit.lib.core.errors import UsageError

    G = scm.G
    order = [sorted(S, key=G.index.get) for S in (q.Y, q.X, q.W)]
    values = dict(q.values)
    cell = []
    for v in [u for S in order for u in S]:
        if v not in values:
            cell.append(scm.card[v] - 1)
            continue
        try:
            c = int(float(values[v]))
        except ValueError:
            c = -1
        if not 0 <= c < scm.card[v]:
            raise UsageError(f"query value {v}={values[v]}: the generated values are 0 .. {scm.card[v] - 1}")
        cell.append(c)
    return float(scm.interventional(*order)[tuple(cell)])


def generate_data(cfg: GenerateConfig, G: ADMG, q=None, seed: int = 0) -> SampledData:
    """``cfg.n`` samples of a random SCM on ``G`` (its parameters from the ``scm`` stream of ``seed``,
    the samples from the ``sample`` stream) and, with a query ``q``, its exact value: P(y | do(x), w)
    at the query's values (discrete), or the total effect d E[y | do(x)] / dx of the first action on
    the first outcome (gaussian, queries without w)."""
    from icmlkit.lib.core.runtime import numpy_rng

    scm_rng, sample_rng = numpy_rng(seed, "scm"), numpy_rng(seed, "sample")
    truth = truth_of = None
    if cfg.kind == "discrete":
        scm = DiscreteSCM.random(G, scm_rng, card=cfg.card, alpha=cfg.alpha)
        if q is not None:
            truth, truth_of = _discrete_truth(scm, q), q.text(G.nodes)
            truth = truth if np.isfinite(truth) else None  # P(w | do(x)) = 0: undefined
    else:
        scm = _random_linear_gaussian(G, scm_rng)
        if q is not None and q.X and not q.W:
            y = next(v for v in G.nodes if v in q.Y)
            x = next(v for v in G.nodes if v in q.X)
            truth, truth_of = scm.total_effect(x, y), f"dE[{y} | do({x})]/d{x}"
    return SampledData(cfg, list(G.nodes), scm.sample(cfg.n, sample_rng), truth, truth_of)
