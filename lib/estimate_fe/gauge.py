"""Gauge fixing and atom ordering (method sheet steps 1-2, and the Pitfalls on the measure).

Frame gauge (exact, used for molecules whose energy is invariant under rigid motions): atom 1 at
the origin, atom 2 on the +x axis, atom 3 in the xy-plane with y > 0. The 3N-6 free coordinates
q = (x2; x3, y3; x4, y4, z4; ...) parametrise the quotient by translations and rotations and

    Z = integral over R^{3N} of exp(-beta U) = V * 8 pi^2 * integral of J(q) exp(-beta U(q)) dq,
    J(q) = x2^2 * y3,

(4 pi x2^2 from atom 2's sphere, 2 pi y3 from atom 3's circle about the x-axis). So the target
density on the free coordinates has reduced energy u(q) = beta U(q) - log J(q), and a normalised
model q_theta on the free coordinates gives, by BAR, f = -log integral J exp(-beta U) dq; the
reported absolute free energy is F/kT = f - log(8 pi^2), per volume V in A^3 (lengths in Angstrom).
The triatomic quadrature test checks this measure. The paper's principal-axes gauge is not used
(its section Jacobian is only reconstructed in the method sheet; the frame gauge is exact).

External-field systems (traps) are not invariant: their gauge is the identity, J = 1.

Atom order: with a bond graph, depth-first search from the highest-priority atom of largest degree,
neighbours visited in element priority C, N, O, others, H (ties by index); without bonds, atoms
sorted by the mean variance of their distances to the others over the reference frames (most
rigid first). In the frame gauge the third atom is the first one in that order that is never
(near-)collinear with the first two in the frames (sin of the angle >= 0.15), moved to third place.
"""
from __future__ import annotations

import math

import numpy as np

from icmlkit.lib.core.errors import InputError

LOG_8PI2 = math.log(8 * math.pi ** 2)
PRIORITY = {6: 0, 7: 1, 8: 2, 1: 4}  # C, N, O, others (3), H


def _prio(z: int) -> int:
    return PRIORITY.get(int(z), 3)


def dfs_order(z, bonds) -> list[int]:
    """Depth-first order over the bond graph with element priority C>N>O>others>H."""
    n = len(z)
    nbr = [[] for _ in range(n)]
    for i, j in bonds:
        nbr[int(i)].append(int(j))
        nbr[int(j)].append(int(i))
    key = lambda i: (_prio(z[i]), i)  # noqa: E731
    seen, order = [False] * n, []
    while len(order) < n:
        rest = [i for i in range(n) if not seen[i]]
        start = min(rest, key=lambda i: (_prio(z[i]), -len(nbr[i]), i))
        stack = [start]
        while stack:
            i = stack.pop()
            if seen[i]:
                continue
            seen[i] = True
            order.append(i)
            for j in sorted(nbr[i], key=key, reverse=True):  # pushed in reverse: best popped first
                if not seen[j]:
                    stack.append(j)
    return order


def variance_order(frames: np.ndarray) -> list[int]:
    """Atoms sorted by the mean variance of their pairwise distances over ``frames`` (M,N,3)."""
    d = np.linalg.norm(frames[:, :, None, :] - frames[:, None, :, :], axis=-1)
    v = d.var(0).sum(1) / max(frames.shape[1] - 1, 1)
    return [int(i) for i in np.argsort(v, kind="stable")]


def choose_order(z, bonds, frames: np.ndarray, invariant: bool) -> list[int]:
    order = dfs_order(z, bonds) if bonds is not None and len(bonds) else variance_order(frames)
    if invariant:
        if len(order) < 3:
            raise InputError("the frame gauge needs at least 3 atoms")
        x = frames[:, order]
        e = x[:, 1] - x[:, 0]
        for k in range(2, len(order)):
            w = x[:, k] - x[:, 0]
            s = np.linalg.norm(np.cross(e, w), axis=-1) / (np.linalg.norm(e, axis=-1) * np.linalg.norm(w, axis=-1) + 1e-30)
            if s.min() >= 0.15:
                order = order[:2] + [order[k]] + [o for i, o in enumerate(order[2:], 2) if i != k]
                break
        else:
            raise InputError("no atom is off the line of the first two in every frame; the frame gauge "
                             "is undefined for (near-)linear molecules")
    return order


def to_frame(x: np.ndarray) -> np.ndarray:
    """Rigidly move frames (M,N,3) (already in model order) into the frame gauge (float64)."""
    x = np.asarray(x, dtype=np.float64)
    x = x - x[:, :1]
    e1 = x[:, 1] / np.linalg.norm(x[:, 1], axis=-1, keepdims=True)
    v = x[:, 2] - (x[:, 2] * e1).sum(-1, keepdims=True) * e1
    e2 = v / np.linalg.norm(v, axis=-1, keepdims=True)
    e3 = np.cross(e1, e2)
    R = np.stack([e1, e2, e3], 1)  # rows: new axes
    y = np.einsum("mij,mnj->mni", R, x)
    y[:, 0] = 0.0
    y[:, 1, 1:] = 0.0
    y[:, 2, 2] = 0.0
    return y


def log_jacobian(y: np.ndarray) -> np.ndarray:
    """log J = 2 log x2 + log y3 of gauge-fixed frames (M,N,3); -inf where the gauge is violated."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lj = 2 * np.log(np.where(y[:, 1, 0] > 0, y[:, 1, 0], 0.0)) + np.log(np.where(y[:, 2, 1] > 0, y[:, 2, 1], 0.0))
    return lj


def free_mask(n: int, invariant: bool) -> np.ndarray:
    free = np.ones((n, 3), dtype=bool)
    if invariant:
        free[0] = False
        free[1, 1:] = False
        free[2, 2] = False
    return free


def box_for(y: np.ndarray, free: np.ndarray, invariant: bool, margin: float = 1.5, a: float | None = None):
    """Lower corners ``lo`` (N,3) and box size ``a`` such that every frame lies well inside.

    Frame gauge: x2 and y3 are positive, so their boxes start at 0; every other free axis is
    centred on the origin (invariant) or on the frames' mean (traps). ``a`` (when not given) is
    ``margin`` times the largest extent needed.
    """
    n = y.shape[1]
    lower0 = np.zeros((n, 3), dtype=bool)
    if invariant:
        lower0[1, 0] = True
        lower0[2, 1] = True
        centre = np.zeros((n, 3))
    else:
        centre = np.round(y.mean(0), 3)
    need = 0.0
    for_half = np.abs(y - centre)[:, free & ~lower0]
    if for_half.size:
        need = max(need, 2 * float(for_half.max()))
    if lower0.any():
        need = max(need, float(y[:, lower0].max()))
    if a is None:
        a = float(np.ceil(margin * need * 10) / 10)
    lo = np.where(lower0, 0.0, centre - a / 2)
    lo = np.where(free, lo, 0.0)
    return lo, float(a)
