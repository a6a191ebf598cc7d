"""Internal coordinates for CARD (issue 28, "better proposals on stiff molecules"; reconstructed: not in
the paper, which decomposes Cartesian coordinates).

Every atom after the first is placed relative to its parent in the bond tree (a Z-matrix built from
the depth-first atom order, so a parent always precedes its children):

- atom 1: bond length r1 to atom 0 (the frame gauge's x2);
- atom 2: bond length r2 to its parent p and the bond angle theta2 at p towards the other of
  atoms 0, 1 (the frame gauge's (x3, y3) in polar form, y3 > 0 <=> theta2 in (0, pi));
- atom i >= 3: bond length r_i to its parent p, bond angle theta_i = angle(i, p, g) with g the
  parent of p (or another earlier neighbour of p), and the dihedral phi_i = dihedral(d, g, p, i)
  with d the first earlier sibling of i (another child of p: the three hydrogens of a methyl group
  then sit at about +-120 degrees from each other whatever the rotor's angle, a narrow density),
  else an earlier atom bonded to g (else to p, else the first earlier atom not in {p, g}).

These are the free coordinates of the frame gauge in another chart, so the measure is
Z = 8 pi^2 V * integral J exp(-beta U) with J = prod_{i>=1} r_i^2 * prod_{i>=2} sin(theta_i)
(atom 1's sphere and atom 2's circle give 8 pi^2, each later atom r^2 sin(theta) dr dtheta dphi).

X-H constraints (issue 28; reconstructed, not in the paper): when the system constrains a bond to
a hydrogen (``MMSystem(constraints="hbonds")``: the MD runs with the same constraints), an atom whose
bond to its parent is constrained gets r_i fixed at the constraint length, a non-free axis (the
``fixed`` mask): the model no longer decomposes the stiffest coordinate, and log J keeps the
constant 2 log r_i. This is the measure of delta(r_i - d_i) dx in the chart; constrained MD samples
it up to the Fixman factor of the mass-metric, which for bonds to terminal hydrogens varies with the
H-X-H angles by well under 1 % and is the same in both environments, so it is neglected
[reconstructed].

Each internal coordinate q is then scaled into t = (q - lo) / width in [0, 1), the unit box the radix
map decomposes (so the radix map runs with lo = 0, a = 1), adding sum log width to log J. The boxes
of bond lengths and angles come from the force field when the system provides its harmonic terms
(:meth:`bonded_params`: r0 +- SIGMAS sigma with sigma = sqrt(kT / k), angles clipped to [0, pi]),
else from the frames (their range widened by the margin); dihedrals always span [-pi, pi). With the
force-field boxes a molecule needs no MD to get its coordinate map (the transfer route). The finest
radix cell of a bond length is then 2 SIGMAS sigma / r^L (0.25 sigma at r = 4, L = 3), against 3-4x
the bond-length spread for the Cartesian box.

All maps are vectorised torch float64 code (numpy in, numpy out through :meth:`ZMatrix.to_free` /
:meth:`ZMatrix.to_cartesian`); the tests check the round trip and log J against autograd.
"""
from __future__ import annotations

import math

import numpy as np

from icmlkit.lib.core.errors import InputError

SIGMAS = 8.0  # half-width of a force-field bond/angle box in thermal standard deviations


def zmatrix_refs(n: int, bonds) -> tuple[list[int], list[int], list[int]]:
    """(parent, angle reference, dihedral reference) of every atom, in model order (atoms 0..n-1
    already in a depth-first order of the bond graph); -1 where not used. InputError when an atom
    has no earlier bonded atom (a disconnected graph)."""
    nbr = [set() for _ in range(n)]
    for i, j in bonds:
        nbr[int(i)].add(int(j))
        nbr[int(j)].add(int(i))
    parent, gref, dref = [-1] * n, [-1] * n, [-1] * n
    for i in range(1, n):
        earlier = sorted(j for j in nbr[i] if j < i)
        if not earlier:
            raise InputError(f"atom {i} of the model order has no earlier bonded atom: internal coordinates need a "
                             "connected bond graph (use --coords cartesian)")
        parent[i] = p = earlier[0]
        if i == 1:
            continue
        g = parent[p] if p > 0 else min(j for j in nbr[p] if j < i and j != p)
        gref[i] = g
        if i == 2:
            continue
        cands = [j for j in range(i) if j not in (p, g)]
        sibling = next((j for j in cands if parent[j] == p), None)
        dref[i] = sibling if sibling is not None else next(
            (j for j in cands if j in nbr[g]), next((j for j in cands if j in nbr[p]), cands[0]))
    return parent, gref, dref


class ZMatrix:
    """The internal-coordinate chart of one molecule (model order) with its unit-box scaling;
    ``fixed`` (N, 3) marks constrained axes (bond lengths held at ``lo``), which are not free."""

    def __init__(self, parent, gref, dref, lo, width, fixed=None):
        self.parent, self.gref, self.dref = list(parent), list(gref), list(dref)
        self.lo = np.asarray(lo, dtype=np.float64)
        self.width = np.asarray(width, dtype=np.float64)
        self.n = len(self.parent)
        self.fixed = np.zeros((self.n, 3), dtype=bool) if fixed is None else np.asarray(fixed, dtype=bool)
        self.free = free_mask(self.n) & ~self.fixed
        if self.lo.shape != (self.n, 3) or self.width.shape != (self.n, 3) or self.fixed.shape != (self.n, 3) \
                or not (self.width[self.free] > 0).all():
            raise InputError("internal-coordinate boxes must be (N, 3) with positive widths on the free axes")
        if self.fixed[:, 1:].any() or self.fixed[0].any() or not (self.lo[self.fixed] > 0).all():
            raise InputError("only bond lengths can be fixed, at a positive length")
        # the value of every non-free axis: the constraint length, or 0 on the gauge-fixed axes
        self.held = np.where(self.fixed, self.lo, 0.0)

    # -------------------------------------------------------------- raw internal coordinates
    def internal(self, x):
        """Cartesian (B, N, 3) torch float64 -> internal q (B, N, 3): (r, theta, phi) per atom (0 on fixed axes)."""
        import torch

        q = torch.zeros_like(x)
        for i in range(1, self.n):
            p = self.parent[i]
            b = x[:, i] - x[:, p]
            q[:, i, 0] = b.norm(dim=-1)
            if i >= 2:
                q[:, i, 1] = _angle(x[:, i], x[:, p], x[:, self.gref[i]])
            if i >= 3:
                q[:, i, 2] = _dihedral(x[:, self.dref[i]], x[:, self.gref[i]], x[:, p], x[:, i])
        return q

    def cartesian(self, q):
        """Internal q (B, N, 3) -> Cartesian frames in the frame gauge (atom 0 at the origin, atom 1 on
        +x, atom 2 in the xy-plane with y > 0), torch float64 (NeRF placement, atom by atom)."""
        import torch

        B = q.shape[0]
        pos = [torch.zeros(B, 3, dtype=q.dtype, device=q.device)]
        zero = torch.zeros(B, dtype=q.dtype, device=q.device)
        pos.append(torch.stack([q[:, 1, 0], zero, zero], -1))
        for i in range(2, self.n):
            p, g = self.parent[i], self.gref[i]
            r, th = q[:, i, 0], q[:, i, 1]
            if i == 2:  # in the xy-plane: the angle at p measured from the direction p -> g
                e = pos[g] - pos[p]
                e = e / e.norm(dim=-1, keepdim=True)  # +-x
                perp = torch.stack([-e[:, 1], e[:, 0].abs(), zero], -1)  # (0, 1, 0): y > 0
                pos.append(pos[p] + r[:, None] * (torch.cos(th)[:, None] * e + torch.sin(th)[:, None] * perp))
                continue
            d, ph = self.dref[i], q[:, i, 2]
            bc = pos[p] - pos[g]
            bc = bc / bc.norm(dim=-1, keepdim=True)
            n = torch.linalg.cross(pos[g] - pos[d], bc)
            n = n / n.norm(dim=-1, keepdim=True)
            m = torch.linalg.cross(n, bc)
            loc = (-r * torch.cos(th))[:, None] * bc + (r * torch.sin(th) * torch.cos(ph))[:, None] * m \
                + (r * torch.sin(th) * torch.sin(ph))[:, None] * n
            pos.append(pos[p] + loc)
        return torch.stack(pos, 1)

    def log_jacobian_q(self, q):
        """log J of the chart: sum_{i>=1} 2 log r_i + sum_{i>=2} log sin(theta_i) (B,)."""
        import torch

        lj = 2 * torch.log(q[:, 1:, 0]).sum(1)
        if self.n > 2:
            lj = lj + torch.log(torch.sin(q[:, 2:, 1])).sum(1)
        return lj

    # -------------------------------------------------------------- unit-box coordinates
    def log_width(self) -> float:
        return float(np.log(self.width[self.free]).sum())

    def to_free(self, x_ordered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Frames in model order (M, N, 3) -> unit-box coordinates t (M, N, 3) and log J (M,) such that
        Z = 8 pi^2 V integral exp(-beta U) J dt; frames outside a box get t outside [0, 1)."""
        import torch

        x = torch.as_tensor(np.asarray(x_ordered, dtype=np.float64))
        q = self.internal(x)
        lo, w = torch.as_tensor(self.lo), torch.as_tensor(self.width)
        t = torch.where(torch.as_tensor(self.free), (q - lo) / w, torch.zeros_like(q))
        q = torch.where(torch.as_tensor(self.fixed), torch.as_tensor(self.held), q)  # J on the constraint manifold
        lj = self.log_jacobian_q(q) + self.log_width()
        return t.numpy(), lj.numpy()

    def to_cartesian(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Inverse of :meth:`to_free`: (frames in model order in the frame gauge, log J)."""
        import torch

        t = torch.as_tensor(np.asarray(t, dtype=np.float64))
        q = self.from_unit(t)
        return self.cartesian(q).numpy(), (self.log_jacobian_q(q) + self.log_width()).numpy()

    def from_unit(self, t):
        import torch

        q = torch.as_tensor(self.lo) + torch.as_tensor(self.width) * t
        return torch.where(torch.as_tensor(self.free), q, torch.as_tensor(self.held))

    def state(self) -> dict:
        s = {"kind": "internal", "parent": self.parent, "gref": self.gref, "dref": self.dref,
             "lo": self.lo.tolist(), "width": self.width.tolist()}
        if self.fixed.any():
            s["fixed"] = self.fixed.tolist()
        return s

    @classmethod
    def from_state(cls, s: dict) -> "ZMatrix":
        return cls(s["parent"], s["gref"], s["dref"], s["lo"], s["width"], s.get("fixed"))


def free_mask(n: int) -> np.ndarray:
    """The free axes: (r) for atom 1, (r, theta) for atom 2, (r, theta, phi) for the rest."""
    free = np.zeros((n, 3), dtype=bool)
    free[1:, 0] = True
    free[2:, 1] = True
    free[3:, 2] = True
    return free


def _angle(a, b, c):
    import torch

    u, v = a - b, c - b
    return torch.atan2(torch.linalg.cross(u, v).norm(dim=-1), (u * v).sum(-1))


def _dihedral(a, b, c, d):
    """Dihedral a-b-c-d in (-pi, pi] (the NeRF convention of :meth:`ZMatrix.cartesian`)."""
    import torch

    b0, b1, b2 = a - b, c - b, d - c
    b1n = b1 / b1.norm(dim=-1, keepdim=True)
    v = b0 - (b0 * b1n).sum(-1, keepdim=True) * b1n
    w = b2 - (b2 * b1n).sum(-1, keepdim=True) * b1n
    x = (v * w).sum(-1)
    y = (torch.linalg.cross(b1n, v) * w).sum(-1)
    return torch.atan2(y, x)


def build_zmatrix(system, order, x: np.ndarray, margin: float = 1.5) -> ZMatrix:
    """The chart of ``system`` in model order ``order`` (a depth-first order of its bond graph).

    Bond-length and angle boxes from the system's harmonic terms (:meth:`bonded_params`, in kT
    units: k such that beta U = k (q - q0)^2 / 2) when it has them, else from the frames ``x``
    (their range widened by ``margin``); dihedral boxes [-pi, pi). A bond the system constrains
    (``bonded_params()["constraints"]``) is fixed at its constraint length."""
    import torch

    n = system.n_atoms
    pos = {int(a): k for k, a in enumerate(order)}
    bonds = [(pos[int(i)], pos[int(j)]) for i, j in (system.bonds or [])]
    parent, gref, dref = zmatrix_refs(n, bonds)
    lo, width = np.zeros((n, 3)), np.ones((n, 3))
    fixed = np.zeros((n, 3), dtype=bool)
    lo[3:, 2], width[3:, 2] = -math.pi, 2 * math.pi
    params = system.bonded_params() if hasattr(system, "bonded_params") else None
    if params is not None:
        inv = {k: int(a) for a, k in pos.items()}  # model position -> system atom
        held = params.get("constraints", {})
        for i in range(1, n):
            key = (inv[parent[i]], inv[i])
            d = held.get(key, held.get(key[::-1]))
            if d is not None:
                lo[i, 0], fixed[i, 0] = d, True
            else:
                r0, s = _lookup(params["bonds"], key, "bond", system.name)
                lo[i, 0] = max(r0 - SIGMAS * s, 1e-3)
                width[i, 0] = r0 + SIGMAS * s - lo[i, 0]
            if i >= 2:
                t0, s = _lookup(params["angles"], (inv[gref[i]], inv[parent[i]], inv[i]), "angle", system.name)
                a, b = max(t0 - SIGMAS * s, 0.0), min(t0 + SIGMAS * s, math.pi)
                lo[i, 1], width[i, 1] = a, b - a
    else:
        zm = ZMatrix(parent, gref, dref, lo, width)
        q = zm.internal(torch.as_tensor(np.asarray(x, dtype=np.float64)[:, order])).numpy()
        for ax, top in ((0, math.inf), (1, math.pi)):
            sel = slice(1 + ax, n)
            mn, mx = q[:, sel, ax].min(0), q[:, sel, ax].max(0)
            half = 0.5 * margin * np.maximum(mx - mn, 1e-3)
            mid = 0.5 * (mn + mx)
            a, b = np.maximum(mid - half, 1e-3 if ax == 0 else 0.0), np.minimum(mid + half, top)
            lo[sel, ax], width[sel, ax] = a, b - a
    return ZMatrix(parent, gref, dref, lo, width, fixed)


def _lookup(table: dict, key: tuple, what: str, name: str) -> tuple[float, float]:
    for k in (key, key[::-1]):
        if k in table:
            return table[k]
    raise InputError(f"no harmonic {what} term between atoms {key} in the force field of {name}")
