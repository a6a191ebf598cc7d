"""The three rules of the do-calculus (Pearl 1995) with set-valued Z, as d-separation tests.

For disjoint X, Z, W (all disjoint from the outcome set Y):

- Rule 1 (insert/delete observations): P(y | do(x), z, w) = P(y | do(x), w)
  iff (Y _||_ Z | X, W) in G_{\\bar X}.
- Rule 2 (action/observation exchange): P(y | do(x), do(z), w) = P(y | do(x), z, w)
  iff (Y _||_ Z | X, W) in G_{\\bar X, \\underline Z}.
- Rule 3 (insert/delete actions): P(y | do(x), do(z), w) = P(y | do(x), w)
  iff (Y _||_ Z | X, W) in G_{\\bar X, \\bar{Z(W)}}, with Z(W) = Z \\ An(W) where the ancestors
  are taken in G_{\\bar X} (not in G: with the ancestors of W in G a node of Z that reaches W only
  through X would wrongly keep its incoming edges and admit invalid deletions).

Each function returns True when the rule licenses the equality. They are the sufficient
conditions of the do-calculus (complete for identification, Shpitser & Pearl 2006).
"""
from __future__ import annotations

from typing import Iterable

from icmlkit.lib.causal.admg import ADMG
from icmlkit.lib.core.errors import UsageError


def _sets(*args):
    return tuple(frozenset(a) for a in args)


def _check(Y, X, Z, W):
    if Y & (X | Z | W) or X & Z or X & W or Z & W:
        raise UsageError(f"do-calculus rules need disjoint sets: Y={sorted(Y)}, X={sorted(X)}, "
                         f"Z={sorted(Z)}, W={sorted(W)}")


def rule1(G: ADMG, Y: Iterable, X: Iterable, Z: Iterable, W: Iterable) -> bool:
    """P(y|do(x),z,w) = P(y|do(x),w)  iff  (Y _||_ Z | X,W) in G_{bar X}."""
    Y, X, Z, W = _sets(Y, X, Z, W)
    _check(Y, X, Z, W)
    return G.d_separated(Y, Z, X | W, bar=X)


def rule2(G: ADMG, Y: Iterable, X: Iterable, Z: Iterable, W: Iterable) -> bool:
    """P(y|do(x),do(z),w) = P(y|do(x),z,w)  iff  (Y _||_ Z | X,W) in G_{bar X, underline Z}."""
    Y, X, Z, W = _sets(Y, X, Z, W)
    _check(Y, X, Z, W)
    return G.d_separated(Y, Z, X | W, bar=X, under=Z)


def z_of_w(G: ADMG, X: Iterable, Z: Iterable, W: Iterable) -> frozenset:
    """Z(W) = Z minus the ancestors of W in G_{bar X} (rule 3)."""
    X, Z, W = _sets(X, Z, W)
    return Z - G.ancestors(W, bar=X)


def rule3(G: ADMG, Y: Iterable, X: Iterable, Z: Iterable, W: Iterable) -> bool:
    """P(y|do(x),do(z),w) = P(y|do(x),w)  iff  (Y _||_ Z | X,W) in G_{bar X, bar Z(W)}."""
    Y, X, Z, W = _sets(Y, X, Z, W)
    _check(Y, X, Z, W)
    return G.d_separated(Y, Z, X | W, bar=X | z_of_w(G, X, Z, W))


RULES = {1: rule1, 2: rule2, 3: rule3}
