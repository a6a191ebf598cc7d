"""Graphs and models with known answers: the classic graphs, random ADMGs, random discrete SCMs
with explicit latents (exact P(V) and exact interventional distributions by enumeration), and
linear-Gaussian SCMs (sampling and the exact causal effect)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icmlkit.lib.causal.admg import ADMG

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
