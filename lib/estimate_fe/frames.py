"""What a frames file says it holds, and the check that it holds it (issue 57).

Every frames .npz written by estimate-fe (``sample``, the pipeline's run folders) records, beside
``x`` (M, N, 3) Angstrom and ``u`` (M,) = beta U:

- ``system``: the system's name (built-in name, the spec's name, the prmtop/pdb stem or the
  FreeSolv compound id); ``env``: vacuum / obc2 (molecules) or "analytic"; ``temperature`` (K, 0
  for analytic systems, whose energies are in kT); ``constraints``;
- ``ff_hash``: 16 hex digits of SHA-256 over the potential: the analytic spec (its ``name`` left
  out) or OpenMM's serialised System of the molecule in its environment (the ``openmmVersion``
  attribute left out), so parameters, charges, the GB force and constraints all enter it;
  ``ff_hash_source`` says which (``analytic-spec`` or ``openmm-system-xml <version>``).

:func:`check` compares a file's record with the system given on the command line (a differing
system, environment, temperature, constraints or force field is a :class:`UsageError`, exit 2, one
line naming the file and what differs) and then recomputes ``u`` on :data:`N_CHECK` frames drawn
from the stream ``numpy_rng(0, "frames-check")``: a frame whose recorded u differs from the system's
reduced energy by more than ``ENERGY_TOL_ABS + ENERGY_TOL_REL * |u|`` kT is refused the same way.
Files written before the record existed are accepted with one warning line: their system, environment
and force field cannot be checked, but their energies still are.
"""
from __future__ import annotations

import hashlib
import json
import re

import numpy as np

from icmlkit.lib.core.console import log
from icmlkit.lib.core.errors import UsageError

N_CHECK = 8
ENERGY_TOL_ABS = 1e-2  # kT: above OpenMM's CPU/CUDA mixed-precision differences, far below any wrong system
ENERGY_TOL_REL = 1e-5
RECORD_KEYS = ("system", "env", "temperature", "constraints", "ff_hash", "ff_hash_source")


def ff_hash(system) -> tuple[str, str]:
    """(hash, source) of ``system``'s potential (see the module docstring)."""
    if system.kind == "openmm":
        from icmlkit.lib.estimate_fe.mm import _openmm

        openmm, _, _ = _openmm()
        xml = openmm.XmlSerializer.serialize(system.build_system())
        text = re.sub(r'\sopenmmVersion="[^"]*"', "", xml)
        source = f"openmm-system-xml {openmm.__version__}"
    else:
        text = json.dumps({k: v for k, v in system.spec.items() if k != "name"}, sort_keys=True)
        source = "analytic-spec"
    return hashlib.sha256(text.encode()).hexdigest()[:16], source


def record(system) -> dict:
    """The identity of ``system`` as stored in a frames file (numpy scalars, for ``write_npz``)."""
    h, source = ff_hash(system)
    return {"system": np.str_(system.name), "env": np.str_(getattr(system, "env", "analytic")),
            "temperature": np.float64(system.temperature or 0.0),
            "constraints": np.str_(getattr(system, "constraints", "none")),
            "ff_hash": np.str_(h), "ff_hash_source": np.str_(source)}


def arrays(system, x: np.ndarray, u: np.ndarray, **extra) -> dict:
    """What a frames .npz of ``system`` holds: x, u, z, the record and ``extra``."""
    return {"x": x, "u": u, "z": np.asarray(system.z), **record(system), **extra}


def check(extra: dict, x: np.ndarray, u: np.ndarray, system, where: str) -> dict:
    """Refuse frames (``extra``: the file's other arrays) that are not of ``system``; returns what was
    checked: {"record": bool, "energies_checked": n, "max_abs_du_kT": float, "energy_evals": n}."""
    have = record(system)
    got = {k: extra[k].item() if hasattr(extra[k], "item") else extra[k] for k in RECORD_KEYS if k in extra}
    has_record = all(k in got for k in ("system", "env", "ff_hash"))
    if has_record:
        diffs = []
        for key in ("system", "env", "constraints"):
            if key in got and str(got[key]) != str(have[key]):
                diffs.append(f"{key} {str(got[key])!r}, not {str(have[key])!r}")
        if "temperature" in got and abs(float(got["temperature"]) - float(have["temperature"])) > 1e-9:
            diffs.append(f"temperature {float(got['temperature']):g} K, not {float(have['temperature']):g} K")
        if str(got["ff_hash"]) != str(have["ff_hash"]):
            if str(got.get("ff_hash_source", "")) == str(have["ff_hash_source"]):
                diffs.append(f"force field {got['ff_hash']}, not {have['ff_hash']}")
            else:  # another OpenMM version serialises differently: the energies decide
                log.warning("%s: force-field hash written by %s, not %s; checked by recomputed energies only", where,
                            got.get("ff_hash_source", "an unknown source"), have["ff_hash_source"])
        if diffs:
            raise UsageError(f"{where}: these frames are not of the system given ({'; '.join(diffs)}); give the "
                             f"system, --env, --temperature and --constraints they were sampled with")
    else:
        log.warning("%s: written before frames files recorded their system, environment and force field; those "
                    "cannot be checked, only %d recomputed energies", where, min(N_CHECK, len(x)))
    from icmlkit.lib.core.runtime import numpy_rng

    idx = np.sort(numpy_rng(0, "frames-check").choice(len(x), size=min(N_CHECK, len(x)), replace=False))
    evals0 = system.energy_evals
    u_new = np.asarray(system.reduced_energy(x[idx]), dtype=np.float64)
    evals = int(system.energy_evals - evals0)
    du = np.abs(u_new - u[idx])
    bad = ~(du <= ENERGY_TOL_ABS + ENERGY_TOL_REL * np.abs(u[idx]))  # NaN counts as a mismatch
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise UsageError(f"{where}: the recorded energy of frame {int(idx[k])} is u = {u[idx[k]]:.6g} kT but the "
                         f"system {system.name} ({have['env']}) gives {u_new[k]:.6g} kT ({int(bad.sum())} of {len(idx)} "
                         f"checked frames differ by more than {ENERGY_TOL_ABS:g} + {ENERGY_TOL_REL:g}|u| kT); give the "
                         "system, --env and --temperature they were sampled with")
    return {"record": has_record, "energies_checked": int(len(idx)), "max_abs_du_kT": float(du.max()) if len(du) else 0.0,
            "energy_evals": evals}


__all__ = ["ENERGY_TOL_ABS", "ENERGY_TOL_REL", "N_CHECK", "arrays", "check", "ff_hash", "record"]
