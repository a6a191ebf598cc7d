"""Conformational basins (issue 57; reconstructed: not in the paper).

A free energy is that of the conformers its samples visit. MD and lambda-MBAR that never cross a
barrier (the C=C torsion of (Z)-1,2-dichloroethylene, alanine dipeptide's phi at 300 K) measure one
basin, while a model's samples may visit every basin its chart allows, so the two can disagree while
both are right about different ensembles. This module says which basins each sample set visits and
builds references that cover every basin:

- :func:`torsions`: one heavy-atom dihedral a-b-c-d per non-ring bond b-c whose two ends each carry
  another heavy atom (a and d: the heaviest such neighbour, lowest index on ties). A bond whose two
  ends are both trigonal C or N (three neighbours: a double bond, an amide) is *planar*, with two
  basins, cis (|theta| < 90) and trans; any other bond gets six 60-degree sectors centred at 0, +-60,
  +-120 and 180 degrees (staggered and eclipsed minima each fall at a centre, none on an edge).
- :func:`basin_check`: the basin occupancies of two sample sets (a reference's frames and a model's
  samples, optionally importance-weighted) per torsion, flagged when they differ: total variation
  distance above ``tol`` or a basin holding >= ``min_occ`` in one set and < ``min_occ`` / 10 in the
  other.
- :func:`flip`: a start in the other basin (one side of the bond rotated by 180 degrees).
- :func:`umbrella`: restrained MD windows along one torsion and MBAR over the windows
  (:meth:`~icmlkit.lib.estimate_fe.mm.MMSystem.sample` with ``restraint``); every frame gets its
  unbiased log-weight, so basin populations and free energies follow (:func:`basin_free_energies`).
- Alanine dipeptide: :func:`alanine_phi_psi` (the backbone atoms by name), :func:`assign_alanine`
  (basins by (phi, psi); the partition below is ours), :func:`model_log_weights` (a trained model's
  samples with their importance log-weights, for the model's basin free energies).
"""
from __future__ import annotations

import contextlib
import io
import time
import warnings

import numpy as np

from icmlkit.lib.core.errors import InputError

PLANAR = ("cis", "trans")
SECTORS = ("0", "60", "120", "180", "-120", "-60")  # centres in degrees; sector k covers centre +- 30
TRIGONAL = (6, 7)  # C and N with three neighbours count as trigonal (sp2-like)


def dihedrals(x: np.ndarray, atoms) -> np.ndarray:
    """The dihedral a-b-c-d of frames ``x`` (M, N, 3) in degrees, (-180, 180] (IUPAC sign, the
    convention of the internal-coordinate chart and of OpenMM's torsions)."""
    import torch

    from icmlkit.lib.estimate_fe.internal import _dihedral

    t = torch.as_tensor(np.asarray(x, dtype=np.float64))
    a, b, c, d = (t[:, int(i)] for i in atoms)
    return np.degrees(_dihedral(a, b, c, d).numpy())


def _neighbours(n: int, bonds) -> list[set]:
    nb = [set() for _ in range(n)]
    for i, j in bonds:
        nb[i].add(j)
        nb[j].add(i)
    return nb


def side(n: int, bonds, b: int, c: int) -> set | None:
    """The atoms on c's side of bond b-c (c included); None when b-c is in a ring."""
    nb = _neighbours(n, bonds)
    seen, stack = {c}, [c]
    while stack:
        k = stack.pop()
        for m in nb[k]:
            if k == c and m == b:
                continue
            if m == b:
                return None
            if m not in seen:
                seen.add(m)
                stack.append(m)
    return seen


def torsions(system) -> list[dict]:
    """The heavy-atom torsions of ``system`` (see the module docstring): [{atoms (a, b, c, d), bond
    (b, c), kind ("planar" | "rotor"), basins (labels)}], in bond order."""
    z, bonds = np.asarray(system.z), [tuple(map(int, b)) for b in (system.bonds or [])]
    n = len(z)
    nb = _neighbours(n, bonds)
    out = []
    for b, c in bonds:
        if z[b] <= 1 or z[c] <= 1:
            continue
        heavy_b = sorted((k for k in nb[b] if k != c and z[k] > 1), key=lambda k: (-z[k], k))
        heavy_c = sorted((k for k in nb[c] if k != b and z[k] > 1), key=lambda k: (-z[k], k))
        if not heavy_b or not heavy_c or side(n, bonds, b, c) is None:
            continue
        planar = all(z[k] in TRIGONAL and len(nb[k]) == 3 for k in (b, c))
        out.append({"atoms": (heavy_b[0], b, c, heavy_c[0]), "bond": (b, c), "kind": "planar" if planar else "rotor",
                    "basins": PLANAR if planar else SECTORS})
    return out


def basin_index(theta_deg: np.ndarray, kind: str) -> np.ndarray:
    """Basin of each angle: planar 0 = cis (|theta| < 90), 1 = trans; rotor k = the 60-degree
    sector centred at SECTORS[k]."""
    t = np.asarray(theta_deg, dtype=np.float64)
    if kind == "planar":
        return (np.abs(t) >= 90.0).astype(int)
    return (np.floor(((t + 30.0) % 360.0) / 60.0).astype(int)) % 6


def occupancies(labels: np.ndarray, n_basins: int, log_w: np.ndarray | None = None) -> np.ndarray:
    """Fraction of the samples (importance-weighted when ``log_w`` is given) in each basin."""
    labels = np.asarray(labels)
    if log_w is None:
        w = np.ones(len(labels))
    else:
        lw = np.asarray(log_w, dtype=np.float64)
        lw = np.where(np.isfinite(lw), lw, -np.inf)
        w = np.exp(lw - lw.max())
    tot = w.sum()
    return np.array([w[labels == k].sum() / tot for k in range(n_basins)])


def basin_check(system, x_a: np.ndarray, x_b: np.ndarray, *, log_w_b: np.ndarray | None = None, tol: float = 0.2,
                min_occ: float = 0.05, names=("reference", "model")) -> dict:
    """Compare the torsion basins of two sample sets of ``system`` (e.g. a reference's frames ``x_a``
    and a model's samples ``x_b``, weighted by ``log_w_b`` when given). Per torsion: occupancies of
    both sets, the total variation distance, the basins one set visits and the other misses, and
    ``flag``; ``mismatch`` is true when any torsion is flagged (see the module docstring)."""
    rows = []
    for t in torsions(system):
        k = len(t["basins"])
        oa = occupancies(basin_index(dihedrals(x_a, t["atoms"]), t["kind"]), k)
        ob = occupancies(basin_index(dihedrals(x_b, t["atoms"]), t["kind"]), k, log_w_b)
        tvd = 0.5 * float(np.abs(oa - ob).sum())
        missing = [t["basins"][i] for i in range(k)
                   if (oa[i] >= min_occ and ob[i] < min_occ / 10) or (ob[i] >= min_occ and oa[i] < min_occ / 10)]
        rows.append({"atoms": [int(v) for v in t["atoms"]], "kind": t["kind"], "basins": list(t["basins"]),
                     f"occupancy_{names[0]}": [float(v) for v in oa], f"occupancy_{names[1]}": [float(v) for v in ob],
                     "tvd": tvd, "missing": missing, "flag": bool(tvd > tol or missing)})
    return {"torsions": rows, "mismatch": any(r["flag"] for r in rows), "tol": tol, "min_occ": min_occ,
            "names": list(names), "n": [int(len(x_a)), int(len(x_b))]}


def flip(system, x: np.ndarray, bond) -> np.ndarray:
    """``x`` (N, 3) with the atoms on the second atom's side of ``bond`` rotated by 180 degrees about
    the bond axis: a start in the other basin of that torsion (minimise before use)."""
    b, c = (int(v) for v in bond)
    moving = side(len(system.z), [tuple(map(int, v)) for v in system.bonds], b, c)
    if moving is None:
        raise InputError(f"bond {b}-{c} is in a ring: no flip", system.name)
    x = np.array(x, dtype=np.float64)
    axis = (x[c] - x[b]) / np.linalg.norm(x[c] - x[b])
    idx = sorted(moving)
    r = x[idx] - x[b]
    x[idx] = x[b] + 2.0 * np.outer(r @ axis, axis) - r  # a half turn: r -> 2 (r.a) a - r
    return x


def twist(system, bond) -> list[tuple]:
    """The two dihedrals across a planar bond b-c that share its cis/trans value: (a, b, c, d) of
    :func:`torsions` and (a', b, c, d') with a', d' the other neighbours of b and c. Restraining both
    turns the whole double bond; restraining (a, b, c, d) alone drags a and d past the other
    substituents (a strained branch: an umbrella along it does not give the basins' free energies)."""
    b, c = (int(v) for v in bond)
    t = next((t for t in torsions(system) if t["bond"] == (b, c) and t["kind"] == "planar"), None)
    if t is None:
        raise InputError(f"bond {b}-{c} is not a planar bond with heavy-atom torsions", system.name)
    nb = _neighbours(len(system.z), [tuple(map(int, v)) for v in system.bonds])
    a, _, _, d = t["atoms"]
    a2 = next(k for k in sorted(nb[b]) if k not in (a, c))
    d2 = next(k for k in sorted(nb[c]) if k not in (b, d))
    return [tuple(t["atoms"]), (a2, b, c, d2)]


def umbrella(system, atoms, centres_deg, *, k: float = 300.0, fold: bool = False, frames_per_window: int = 200,
             interval: int = 50, equil: int = 2000, seed: int = 0, x_start: np.ndarray | None = None) -> dict:
    """Umbrella sampling along the dihedral ``atoms`` (or, given a list of quadruples, along all of them
    at once, e.g. :func:`twist`; ``theta`` is the first's): one restrained Langevin MD window per
    centre (bias 0.5 k d^2 per dihedral in kJ/mol/rad^2, d the periodic distance to the centre, or
    |theta| - centre when ``fold``), each window started from the last frame of the one before, then MBAR (pymbar) over
    the windows. Returns {x, u (unbiased beta U), theta (degrees), window, log_w (each frame's
    unbiased MBAR log-weight, normalised), f_k (window free energies, kT), overlap (smallest
    neighbour overlap), energy_evals (MD steps + one energy call per frame; the bias energies of
    MBAR are analytic, no force-field call), seconds}. The frames are all kept (MBAR's point estimate
    needs no decorrelation)."""
    from icmlkit.lib.core.runtime import stream_seed
    from icmlkit.lib.estimate_fe.estimate import import_pymbar

    pymbar = import_pymbar()
    t0 = time.perf_counter()
    centres = np.asarray(centres_deg, dtype=np.float64)
    tors = [tuple(atoms)] if np.ndim(atoms) == 1 else [tuple(a) for a in atoms]
    xs, us, th, win, evals, last = [], [], [], [], 0, x_start
    for j, c in enumerate(centres):
        s = system.sample(frames_per_window, seed=stream_seed(seed, f"umbrella-{j}"), interval=interval, equil=equil,
                          x_start=last, restraint=(tors, float(c), k, fold))
        last = s["x"][-1]
        xs.append(s["x"])
        us.append(s["u"])
        th.append(np.stack([dihedrals(s["x"], t) for t in tors]))
        win.append(np.full(len(s["u"]), j))
        evals += s["energy_evals"]
    thetas, window = np.concatenate(th, axis=1), np.concatenate(win)
    theta = thetas[0]
    # the unbiased energy is common to all windows: it cancels
    u_kn = system.beta * sum(umbrella_bias(t, centres, k, fold) for t in thetas)
    n_k = np.full(len(centres), frames_per_window)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mbar = pymbar.MBAR(u_kn, n_k)
        ov = mbar.compute_overlap()["matrix"]
    f_k = np.asarray(mbar.f_k)
    a = np.log(n_k)[:, None] + f_k[:, None] - u_kn
    amax = a.max(0)
    log_w = -(amax + np.log(np.exp(a - amax).sum(0)))
    log_w -= log_w.max() + np.log(np.exp(log_w - log_w.max()).sum())
    return {"x": np.concatenate(xs), "u": np.concatenate(us), "theta": theta, "window": window, "log_w": log_w,
            "f_k": f_k.tolist(), "overlap": float(min(ov[j, j + 1] for j in range(len(centres) - 1))),
            "energy_evals": int(evals), "seconds": time.perf_counter() - t0, "centres": centres.tolist(), "k": k,
            "fold": fold, "frames_per_window": frames_per_window, "interval": interval, "equil": equil}


def umbrella_bias(theta_deg: np.ndarray, centres_deg: np.ndarray, k: float, fold: bool) -> np.ndarray:
    """The bias of every window on every frame, (K, M) in kJ/mol (see :func:`umbrella`)."""
    t = np.radians(np.asarray(theta_deg, dtype=np.float64))[None, :]
    c = np.radians(np.asarray(centres_deg, dtype=np.float64))[:, None]
    if fold:
        d = np.abs(t) - c
    else:
        dd = np.abs(t - c) % (2 * np.pi)
        d = np.minimum(dd, 2 * np.pi - dd)
    return 0.5 * k * d ** 2


def basin_free_energies(labels: np.ndarray, log_w: np.ndarray, names, reference: str) -> dict:
    """{name: F_basin - F_reference in kT} from the samples' basin labels (indices into ``names``,
    -1 = in no basin) and log-weights (unbiased for the Boltzmann density); a basin without weight
    gets None. Also the basins' populations and Kish effective sample sizes."""
    lw = np.where(np.isfinite(log_w), np.asarray(log_w, dtype=np.float64), -np.inf)
    labels = np.asarray(labels)
    out, pops, ess, lz = {}, {}, {}, {}
    top = lw.max()
    tot = np.exp(lw - top).sum()
    for i, nm in enumerate(names):
        lb = lw[labels == i]
        if lb.size == 0 or not np.isfinite(lb).any():
            pops[nm], ess[nm], lz[nm] = 0.0, 0.0, None
            continue
        m = lb.max()
        w = np.exp(lb - m)  # scaled by the basin's own largest weight: no underflow in the ESS
        pops[nm] = float(np.exp(m - top) * w.sum() / tot)
        ess[nm] = float(w.sum() ** 2 / (w ** 2).sum())
        lz[nm] = float(m + np.log(w.sum()))
    for nm in names:
        out[nm] = None if lz[nm] is None or lz[reference] is None else lz[reference] - lz[nm]
    return {"delta_f_kT": out, "population": pops, "ess": ess, "reference": reference}


# ----------------------------------------------------------------------------- alanine dipeptide

ALANINE_BASINS = ("C7eq", "alphaR", "C7ax", "alphaL")


def alanine_phi_psi(system) -> tuple[tuple, tuple]:
    """phi (C(ACE)-N-CA-C) and psi (N-CA-C-N(NME)) atom indices of ACE-ALA-NME, found by residue and
    atom names in the system's topology (the built-in ``alanine-dipeptide`` or an amber14 .pdb)."""
    top = getattr(getattr(system, "_top", None), "topology", None)
    if top is None:
        raise InputError("no topology with residue names: not an alanine dipeptide", getattr(system, "name", "?"))
    idx = {(a.residue.name, a.name): a.index for a in top.atoms()}
    need = [("ACE", "C"), ("ALA", "N"), ("ALA", "CA"), ("ALA", "C"), ("NME", "N")]
    if any(k not in idx for k in need):
        raise InputError("not ACE-ALA-NME (atoms ACE C, ALA N/CA/C, NME N needed)", system.name)
    c0, n, ca, c, n2 = (idx[k] for k in need)
    return (c0, n, ca, c), (n, ca, c, n2)


def assign_alanine(phi: np.ndarray, psi: np.ndarray) -> np.ndarray:
    """Basin index into ALANINE_BASINS from (phi, psi) in degrees (our partition, reconstructed):
    phi in (0, 120): C7ax (psi <= 0) or alphaL (psi > 0); otherwise (phi < 0 or phi >= 120, the
    left half with its periodic image): alphaR (-120 < psi < 30) or C7eq (the rest: C7eq, C5 and
    the extended beta/PII region, which plain MD in vacuum visits as one basin)."""
    phi, psi = np.asarray(phi, dtype=np.float64), np.asarray(psi, dtype=np.float64)
    right = (phi > 0) & (phi < 120)
    out = np.where((psi > -120) & (psi < 30), 1, 0)
    return np.where(right, np.where(psi <= 0, 2, 3), out)


def model_log_weights(bundle: dict, system, n_samples: int, seed: int = 0, device=None) -> dict:
    """``n_samples`` samples of a trained CARD model with their importance log-weights for the
    Boltzmann density of ``system``: {x (M, N, 3) Angstrom, log_w (= -(u_t + log q), -inf where the
    energy is not finite), ess (Kish, fraction), energy_evals (M), seconds}."""
    import torch

    from icmlkit.lib.estimate_fe import card
    from icmlkit.lib.estimate_fe.estimate import ess_fraction

    t0 = time.perf_counter()
    card.check_system(bundle, system, "model")
    dev = torch.device(device) if device is not None else torch.device("cpu")
    model = card.model_from_bundle(bundle).to(dev)
    evals0 = system.energy_evals
    d = card.draw(model, bundle, system, n_samples, seed, dev)
    lw = -(d["ut"] + d["lq"])
    lw = np.where(np.isfinite(lw), lw, -np.inf)
    return {"x": d["x"], "log_w": lw, "ess": ess_fraction(lw),
            "energy_evals": int(system.energy_evals - evals0), "seconds": time.perf_counter() - t0,
            "seconds_sampling": d["seconds_sampling"]}


__all__ = ["ALANINE_BASINS", "PLANAR", "SECTORS", "alanine_phi_psi", "assign_alanine", "basin_check",
           "basin_free_energies", "basin_index", "dihedrals", "flip", "model_log_weights", "occupancies", "side",
           "torsions", "twist", "umbrella", "umbrella_bias"]
