"""Synthetic MaxECC instances (method sheet, "Demonstration"): planted colourings and small
adversarial gadgets whose LP is fractional (LP > OPT), where the roundings' factors are tested."""
from __future__ import annotations

import numpy as np

from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.solve_maxecc.hypergraph import Hypergraph


def planted(n: int, k: int, r: int, m: int, noise: float, seed: int = 0, weighted: bool = False,
            with_labels: bool = False):
    """Amburg-style planted instance.

    A planted colouring puts every vertex in one of k clusters (uniformly at random). Each of the
    m edges picks a size uniformly in 2..r and a cluster (weighted by cluster size); its vertices
    are drawn without replacement from that cluster (from all vertices if the cluster is too
    small) and its colour is the cluster's colour; with probability ``noise`` the colour is
    replaced by a uniformly random other colour. ``weighted`` draws integer weights 1..5.
    Vertex ids are 0..n-1 (all kept, isolated ones too), colour labels 0..k-1. ``with_labels``
    returns (H, planted cluster of every vertex) for ARI/NMI.
    """
    if n < 2 or k < 1 or r < 2 or m < 1 or not 0.0 <= noise <= 1.0:
        raise UsageError("planted needs n >= 2, k >= 1, r >= 2, m >= 1 and 0 <= noise <= 1")
    rng = np.random.default_rng(seed)
    cluster = rng.integers(0, k, size=n)
    members = [np.flatnonzero(cluster == c) for c in range(k)]
    sizes = rng.integers(2, r + 1, size=m)
    # Pick the cluster of each edge by choosing a random vertex (cluster weighted by size).
    edge_cluster = cluster[rng.integers(0, n, size=m)]
    edges = []
    for s, c in zip(sizes.tolist(), edge_cluster.tolist()):  # generator, not a hot path
        pool = members[c] if len(members[c]) >= s else np.arange(n)
        edges.append(rng.choice(pool, size=min(s, len(pool)), replace=False))
    colours = edge_cluster.copy()
    flip = rng.random(m) < noise
    if k > 1:
        shift = rng.integers(1, k, size=m)
        colours = np.where(flip, (colours + shift) % k, colours)
    weights = rng.integers(1, 6, size=m).astype(np.float64) if weighted else None
    H = Hypergraph.from_edges([e.tolist() for e in edges], colours.tolist(), weights,
                              node_ids=list(range(n)), colour_labels=list(range(k)))
    return (H, cluster) if with_labels else H


def odd_cycle(length: int) -> Hypergraph:
    """A cycle of odd ``length`` whose consecutive edges have different colours: colours
    0,1,0,1,...,0,1,2 (an odd cycle needs three). Every vertex splits 1/2-1/2 between its two
    edges: LP = length/2, OPT = (length-1)/2 (a matching)."""
    if length < 3 or length % 2 == 0:
        raise UsageError("odd_cycle needs an odd length >= 3")
    edges = [[i, (i + 1) % length] for i in range(length)]
    colours = [i % 2 for i in range(length - 1)] + [2]
    return Hypergraph.from_edges(edges, colours)


def star(k: int) -> Hypergraph:
    """A star whose centre splits 1/k ways: centre 0 and leaves 1..k; spoke {0, i} has colour
    i-1 (i = 1..k) and a rim edge {1, ..., k} has colour k, so k+1 colours and rank max(2, k).
    LP = 2 - 1/k (x_{0,c} = 1/k, every leaf 1/k on its spoke colour, 1 - 1/k on the rim colour);
    OPT = 1 (a satisfied spoke fixes a leaf off the rim colour). Needs k >= 2."""
    if k < 2:
        raise UsageError("star needs k >= 2")
    edges = [[0, i] for i in range(1, k + 1)] + [list(range(1, k + 1))]
    colours = list(range(k)) + [k]
    return Hypergraph.from_edges(edges, colours)


def rainbow_cycle(length: int, k: int, r: int) -> Hypergraph:
    """``length`` r-uniform hyperedges around a cycle, consecutive edges sharing one vertex, with
    colours 0, 1, ..., k-1 repeating (the last edge's colour is changed when it would equal the
    first's). Each shared vertex splits 1/2-1/2, private vertices are integral: LP = length/2,
    OPT = floor(length/2); the LP is fractional for odd ``length``. n = length * (r - 1)."""
    if length < 3 or r < 2 or k < 2:
        raise UsageError("rainbow_cycle needs length >= 3, r >= 2, k >= 2")
    if length % 2 == 1 and k < 3:
        raise UsageError("an odd rainbow cycle needs k >= 3 (consecutive colours must differ)")
    n = length * (r - 1)
    edges = [[(i * (r - 1) + j) % n for j in range(r)] for i in range(length)]
    colours = [i % k for i in range(length)]
    if colours[-1] == colours[0]:
        colours[-1] = next(c for c in range(k) if c not in (colours[0], colours[-2]))
    return Hypergraph.from_edges(edges, colours, colour_labels=list(range(k)))


def affine_design(p: int, r: int) -> Hypergraph:
    """The lines of the affine plane over Z_p cut to r coordinates, each edge its own colour: vertices
    (a, j) for a in Z_p, j < r (n = p r, vertex id a r + j); edge (a, b) = {(a + b j mod p, j): j < r}
    for a, b in Z_p (m = k = p^2). p prime >= r, so two edges share at most one vertex and every
    vertex lies on p edges. The LP optimum is n / r = p (summing the rows z_e <= x_{v,c(e)} over
    e's vertices gives r sum z <= n), attained both by a parallel class (b fixed: p disjoint edges,
    so OPT = LP) and by the uniform point x = 1/p (:func:`exact.uniform_lp_point`), at which every
    edge has z_e = 1/p and R_e = r - (r - 1)/p: the family on which the factors of ``scaled`` (1/r)
    and ``finite-horizon`` ((1 - e^{-r})/r) are approached as p grows (docs, "Finite horizon")."""
    if r < 2 or p < r or any(p % q == 0 for q in range(2, int(p ** 0.5) + 1)):
        raise UsageError("affine_design needs a prime p >= r >= 2")
    edges = [[((a + b * j) % p) * r + j for j in range(r)] for a in range(p) for b in range(p)]
    return Hypergraph.from_edges(edges, list(range(p * p)), node_ids=list(range(p * r)),
                                 colour_labels=list(range(p * p)))


def perturbed(H: Hypergraph, colour_noise: float = 0.0, lognormal_sigma: float = 0.0, seed: int = 0) -> Hypergraph:
    """A real instance made fractional: each edge's colour is replaced by a uniformly random other
    colour with probability ``colour_noise``, and its weight multiplied by exp(N(0, sigma^2)) when
    ``lognormal_sigma`` > 0. Vertices, ids and labels are kept."""
    if not 0.0 <= colour_noise <= 1.0 or lognormal_sigma < 0 or H.k < 2 and colour_noise > 0:
        raise UsageError("perturbed needs 0 <= colour_noise <= 1 (and k >= 2 to recolour) and sigma >= 0")
    rng = np.random.default_rng(seed)
    colour = H.colour.copy()
    if colour_noise > 0:
        flip = rng.random(H.m) < colour_noise
        colour = np.where(flip, (colour + rng.integers(1, H.k, size=H.m)) % H.k, colour)
    weight = H.weight * np.exp(rng.normal(0.0, lognormal_sigma, size=H.m)) if lognormal_sigma > 0 else H.weight.copy()
    return Hypergraph(H.ptr.copy(), H.nodes.copy(), colour, weight, H.node_ids, H.colour_labels, H.n, H.k)


def disjoint_copies(H: Hypergraph, copies: int) -> Hypergraph:
    """``copies`` disjoint copies of a gadget (vertex ids 0..copies*n-1, the same colours): the
    gadget's LP/OPT gap at the scale of thousands of vertices."""
    if copies < 1:
        raise UsageError("disjoint_copies needs copies >= 1")
    off = np.repeat(np.arange(copies, dtype=np.int64) * H.n, len(H.nodes))
    nodes = np.tile(H.nodes, copies) + off
    ptr = np.concatenate([[0], np.cumsum(np.tile(H.sizes, copies))])
    return Hypergraph(ptr, nodes, np.tile(H.colour, copies), np.tile(H.weight, copies),
                      np.arange(copies * H.n), H.colour_labels, copies * H.n, H.k)
