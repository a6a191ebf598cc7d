"""Covariate adjustment: causal nodes, forbidden nodes, the generalized adjustment criterion and the
optimal adjustment set O(X, Y) of Henckel, Perkovic & Maathuis (2022, JRSS-B).

Definitions (Perkovic et al. 2018; Henckel et al. 2022), for disjoint X, Y:

- cn(X, Y): the nodes, other than X, on proper causal paths X -> ... -> Y (directed paths that meet
  X only at their first node) = (De(X) and An(Y), both in G_{bar X}) minus X;
- forb(X, Y) = De(cn(X, Y)) u X;
- Z is a valid adjustment set iff Z avoids forb(X, Y) and (X _||_ Y | Z) in the proper back-door
  graph (G with the first edge X -> c, c in cn(X, Y), of every proper causal path removed);
- O(X, Y) = pa(cn(X, Y)) minus forb(X, Y): in a DAG, valid whenever any valid set exists, and the
  valid set with the smallest asymptotic variance of the adjusted estimator (linear models; and
  among regular estimators of the adjustment functional).

In an ADMG (bidirected edges = latent confounders) d-separation runs on the explicit-latent DAG.
There O(X, Y) is returned only when it passes the adjustment criterion, and it is NOT guaranteed
optimal (nor to exist when another valid set does; Runge 2021 treats the latent case)
[reconstructed scope: the DAG result applied as a check-and-use rule].
"""
from __future__ import annotations

from typing import Iterable

import networkx as nx

from icmlkit.lib.causal.admg import ADMG


def causal_nodes(G: ADMG, X: Iterable[str], Y: Iterable[str]) -> set[str]:
    X, Y = set(X), set(Y)
    return (G.descendants(X, bar=X) & G.ancestors(Y, bar=X)) - X


def forbidden(G: ADMG, X: Iterable[str], Y: Iterable[str]) -> set[str]:
    return G.descendants(causal_nodes(G, X, Y)) | set(X)


def is_adjustment_set(G: ADMG, X: Iterable[str], Y: Iterable[str], Z: Iterable[str]) -> bool:
    """The generalized adjustment criterion (Perkovic et al. 2018) on the explicit-latent DAG."""
    X, Y, Z = set(X), set(Y), set(Z)
    cn = causal_nodes(G, X, Y)
    if Z & forbidden(G, X, Y):
        return False
    g, _ = G.latent_dag()
    g = g.copy()
    g.remove_edges_from([(a, b) for a, b in G.directed if a in X and b in cn])
    return nx.is_d_separator(g, X, Y, Z)


def optimal_adjustment_set(G: ADMG, X: Iterable[str], Y: Iterable[str]) -> frozenset | None:
    """O(X, Y) = pa(cn(X, Y)) \\ forb(X, Y) when it is a valid adjustment set, else None."""
    X, Y = set(X), set(Y)
    cn = causal_nodes(G, X, Y)
    if not cn:
        return None  # no causal path: the effect is null, there is nothing to adjust for
    pa = set().union(*(G.parents(c) for c in cn))
    O = frozenset(pa - forbidden(G, X, Y))
    return O if is_adjustment_set(G, X, Y, O) else None
