"""Molecular systems through OpenMM: AMBER prmtop/inpcrd, vacuum or OBC2 implicit solvent.

- No constraints by default (the model and the MD must share the measure: all 3N coordinates
  move); ``constraints="hbonds"`` (issue 28, reconstructed: not in the paper) fixes every bond to a
  hydrogen at the force field's length in the MD, the energies and the baselines alike, and the
  internal-coordinate chart drops those bond lengths (:mod:`icmlkit.lib.estimate_fe.internal`). No
  cutoff, the CMMotionRemover dropped; Langevin-middle dynamics; the OpenMM platform follows the
  run's device (:func:`openmm_platform`: CUDA on a CUDA device, CPU otherwise). MD seeds are the
  named streams ``stream_seed(seed, "langevin")`` / ``"velocities"`` (and ``window-<k>`` per lambda
  window of the baseline). Lengths cross the boundary in Angstrom (the model) <-> nm (OpenMM).
- The lambda-window baseline (the classical reference the method sheet calls MFES): the GBSA-OBC
  force is wrapped in a CustomCVForce with energy ``lambda_gb * gb``, so U_lambda = U_vac +
  lambda U_GB; 11 windows (lambda = 0, 0.1, ..., 1) of MD, each frame's U_vac and U_GB recorded,
  MBAR (pymbar) over the windows gives Delta G(vacuum -> OBC2).
- End-state BAR (:func:`endstate_bar`): the cheap baseline on the two end states' frames only
  (vacuum and OBC2 MD, each frame's reduced energy in both states, BAR), the one a free-energy user
  runs first; with CARD's own end-state frames it is the comparison at equal MD.
- A ``.pdb`` file is read with OpenMM's ``amber14-all.xml`` (ff14SB; ``implicit/obc2.xml`` added for
  OBC2) instead of an AMBER prmtop; ``alanine-dipeptide`` names the built-in ACE-ALA-NME
  (:func:`alanine_dipeptide_pdb`: heavy atoms placed from standard peptide geometry in the extended
  beta region, phi -150 / psi 150, L-alanine, hydrogens added by OpenMM's Modeller; reconstructed,
  written once to a temporary cache), the harder single system of issue 28.
- FreeSolv molecules are named ``freesolv:<compound id>``: prmtop and inpcrd are read from
  ``../shared/data/freesolv/amber.tar.gz`` (unpacked into a temporary cache folder, never into the
  repository); :func:`freesolv_entry` reads the database's experimental and calculated values.
"""
from __future__ import annotations

import contextlib
import io
import os
import random
import tarfile
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from icmlkit.lib.core.errors import EnvironmentProblem, InputError, UsageError, require_module
from icmlkit.lib.core.io import write_bytes
from icmlkit.lib.core.runtime import stream_seed
from icmlkit.lib.estimate_fe.systems import System

KB_KJ = 0.0083144626181532  # kJ/mol/K
KJ_PER_KCAL = 4.184
ENVIRONMENTS = ("vacuum", "obc2")
CONSTRAINTS = ("none", "hbonds")


def check_constraints(recorded: str, system, what: str, where: str) -> None:
    """InputError when ``what`` (frames, a model) was made with another --constraints setting than
    ``system`` has (systems and files without the setting count as "none")."""
    got = getattr(system, "constraints", "none")
    if recorded != got:
        raise InputError(f"{what}: constraints '{recorded}', but the system {system.name} has --constraints {got}; "
                         f"use --constraints {recorded}", where)


def _openmm():
    require_module("openmm", "estimate-fe")
    import openmm
    import openmm.app as app
    import openmm.unit as unit

    return openmm, app, unit


def openmm_platform(device, strict: bool = False) -> str:
    """The OpenMM platform of a torch ``device``: "CUDA" on a CUDA device, "CPU" otherwise.

    Without OpenMM's CUDA platform a CUDA device falls back to "CPU" (the summary reports the
    platform used), unless ``strict`` (``--device cuda`` asked for explicitly): then exit 4."""
    if getattr(device, "type", str(device).split(":")[0]) != "cuda":
        return "CPU"
    openmm, _, _ = _openmm()
    names = [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())]
    if "CUDA" in names:
        return "CUDA"
    if strict:
        raise EnvironmentProblem("--device cuda: this OpenMM has no CUDA platform; install OpenMM's CUDA build "
                                 "(pip install 'openmm[cuda12]') or use --device cpu")
    return "CPU"


def _md_seed(seed: int, stream: str) -> int:
    """An OpenMM random seed (a positive 31-bit int; 0 would mean 'random') of a named stream."""
    return stream_seed(seed, stream) % 2_000_000_000 + 1


def freesolv_dir() -> Path | None:
    from icmlkit.lib.core.io import shared_data_dir

    return shared_data_dir("freesolv")


def freesolv_files(compound: str) -> tuple[Path, Path]:
    """(prmtop, inpcrd) of a FreeSolv compound, unpacked from the shared tarball into a cache."""
    d = freesolv_dir()
    if d is None or not (d / "amber.tar.gz").exists():
        raise InputError("FreeSolv is not present (looked for ../shared/data/freesolv/amber.tar.gz; set "
                         "ICMLKIT_SHARED_DATA)", f"freesolv:{compound}")
    cache = _cache_dir("freesolv")
    out = (cache / f"{compound}.prmtop", cache / f"{compound}.inpcrd")
    if all(p.exists() for p in out):
        return out
    cache.mkdir(parents=True, exist_ok=True)
    with tarfile.open(d / "amber.tar.gz") as tar:
        for p in out:
            try:
                member = tar.getmember(f"amber/{p.name}")
            except KeyError:
                raise InputError(f"no such compound in FreeSolv (amber/{p.name} missing)", f"freesolv:{compound}") from None
            write_bytes(p, tar.extractfile(member).read())
    return out


def freesolv_entry(compound: str) -> dict:
    """The FreeSolv database line of ``compound``: smiles, name, expt and calc (kcal/mol)."""
    d = freesolv_dir()
    if d is None:
        raise InputError("FreeSolv is not present", "freesolv")
    for line in (d / "database.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        f = [s.strip() for s in line.split(";")]
        if f[0] == compound:
            return {"compound": f[0], "smiles": f[1], "name": f[2], "expt_kcal": float(f[3]),
                    "expt_err_kcal": float(f[4]), "calc_kcal": float(f[5]), "calc_err_kcal": float(f[6])}
    raise InputError(f"compound {compound!r} not found", str(d / "database.txt"))


BUILTIN_MOLECULES = ("alanine-dipeptide",)
PDB_FORCEFIELD = "amber14-all.xml"


def _cache_dir(kind: str) -> Path:
    return Path(tempfile.gettempdir()) / f"icmlkit-{kind}-{os.getuid()}"


def place_atom(a, b, c, bond: float, angle: float, torsion: float) -> np.ndarray:
    """The point d with |cd| = bond, angle(b, c, d) = angle and dihedral(a, b, c, d) = torsion (degrees)."""
    angle, torsion = np.radians(angle), np.radians(torsion)
    bc = (c - b) / np.linalg.norm(c - b)
    n = np.cross(b - a, bc)
    n /= np.linalg.norm(n)
    m = np.cross(n, bc)
    return c - bond * np.cos(angle) * bc + bond * np.sin(angle) * (np.cos(torsion) * m + np.sin(torsion) * n)


def alanine_dipeptide_pdb() -> Path:
    """ACE-ALA-NME as a .pdb in a temporary cache (built once, deterministically; reconstructed):
    the ten heavy atoms from standard peptide bond lengths and angles, trans peptide bonds, phi -150,
    psi 150 and the L configuration at CA; the 12 hydrogens added by OpenMM's Modeller for
    amber14-all.xml (its random placement seeded, so the file is the same on every run here). No
    further minimisation (MD and ``minimised()`` minimise)."""
    out = _cache_dir("molecules") / "alanine-dipeptide.pdb"
    if out.exists():
        return out
    openmm, app, unit = _openmm()
    X = {("ACE", "CH3"): np.zeros(3), ("ACE", "C"): np.array([1.52, 0.0, 0.0])}
    X[("ALA", "N")] = X[("ACE", "C")] + 1.33 * np.array([np.cos(np.radians(64)), np.sin(np.radians(64)), 0.0])
    X[("ALA", "CA")] = place_atom(X[("ACE", "CH3")], X[("ACE", "C")], X[("ALA", "N")], 1.46, 122, 180)
    X[("ACE", "O")] = place_atom(X[("ALA", "CA")], X[("ALA", "N")], X[("ACE", "C")], 1.23, 123, 0)
    X[("ALA", "C")] = place_atom(X[("ACE", "C")], X[("ALA", "N")], X[("ALA", "CA")], 1.52, 111, -150)  # phi
    X[("NME", "N")] = place_atom(X[("ALA", "N")], X[("ALA", "CA")], X[("ALA", "C")], 1.33, 116, 150)  # psi
    X[("ALA", "O")] = place_atom(X[("NME", "N")], X[("ALA", "CA")], X[("ALA", "C")], 1.23, 121, 180)
    X[("ALA", "CB")] = place_atom(X[("ALA", "C")], X[("ALA", "N")], X[("ALA", "CA")], 1.53, 110, -122.5)  # L-Ala
    X[("NME", "C")] = place_atom(X[("ALA", "CA")], X[("ALA", "C")], X[("NME", "N")], 1.46, 122, 180)
    residues = ("ACE", "ALA", "NME")
    atoms = sorted(X.items(), key=lambda kv: residues.index(kv[0][0]))  # stable: the order above within a residue
    lines = [f"ATOM  {k:5d} {name:<4s} {res} A{residues.index(res) + 1:4d}    {x:8.3f}{y:8.3f}{z:8.3f}  1.00  0.00"
             f"          {name[0]:>2s}" for k, ((res, name), (x, y, z)) in enumerate(atoms, 1)]
    pdb = app.PDBFile(io.StringIO("\n".join(lines + ["END"])))
    mod = app.Modeller(pdb.topology, pdb.positions)
    state = random.getstate()  # Modeller places new hydrogens at random before minimising them: seed it, then restore
    random.seed(0)
    try:
        mod.addHydrogens(app.ForceField(PDB_FORCEFIELD))
    finally:
        random.setstate(state)
    text = io.StringIO()
    app.PDBFile.writeFile(mod.topology, mod.positions, text)
    body = "".join(line for line in text.getvalue().splitlines(True) if not line.startswith("REMARK"))  # no date
    out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(out, body.encode())
    return out


class _PdbSource:
    """A .pdb with OpenMM's amber14 force field, offering AmberPrmtopFile's ``topology`` and
    ``createSystem`` (OBC2: ``implicit/obc2.xml`` added)."""

    def __init__(self, path):
        openmm, app, unit = _openmm()
        self.pdb = app.PDBFile(str(path))
        self.topology = self.pdb.topology
        self._ff = {}

    def createSystem(self, nonbondedMethod, rigidWater, constraints, implicitSolvent=None):  # noqa: N802 - OpenMM's name
        openmm, app, unit = _openmm()
        files = (PDB_FORCEFIELD,) + (("implicit/obc2.xml",) if implicitSolvent is not None else ())
        if files not in self._ff:
            self._ff[files] = app.ForceField(*files)
        return self._ff[files].createSystem(self.topology, nonbondedMethod=nonbondedMethod, constraints=constraints,
                                            rigidWater=rigidWater)


class MMSystem(System):
    """A molecule (AMBER prmtop + inpcrd, or a .pdb with amber14) in one environment (``vacuum`` or
    ``obc2``) at ``temperature`` K."""

    def __init__(self, prmtop, inpcrd, env: str = "vacuum", temperature: float = 298.15, platform: str = "CPU",
                 name: str | None = None, device_index: int | None = None, constraints: str = "none"):
        openmm, app, unit = _openmm()
        if env not in ENVIRONMENTS:
            raise UsageError(f"--env must be one of {ENVIRONMENTS}, not {env!r}")
        if constraints not in CONSTRAINTS:
            raise UsageError(f"--constraints must be one of {CONSTRAINTS}, not {constraints!r}")
        pdb = str(prmtop).endswith(".pdb")
        for p in (prmtop,) if pdb else (prmtop, inpcrd):
            if not Path(p).is_file():
                raise InputError("no such file", str(p))
        if pdb:
            top, pos = self._read_pdb(prmtop)
        else:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    top = app.AmberPrmtopFile(str(prmtop))
            except Exception as exc:  # noqa: BLE001 - any parser failure is bad input
                raise InputError(f"not a readable AMBER prmtop ({type(exc).__name__}: {exc})", str(prmtop)) from None
            try:
                crd = app.AmberInpcrdFile(str(inpcrd))
                pos = np.array(crd.getPositions(asNumpy=True).value_in_unit(unit.angstrom), dtype=np.float64)
            except Exception as exc:  # noqa: BLE001
                raise InputError(f"not a readable AMBER inpcrd ({type(exc).__name__}: {exc})", str(inpcrd)) from None
        n = top.topology.getNumAtoms()
        if pos.shape != (n, 3):
            raise InputError(f"{pos.shape[0]} coordinates but the prmtop {Path(prmtop).name} has {n} atoms", str(inpcrd))
        z = np.array([a.element.atomic_number if a.element is not None else 0 for a in top.topology.atoms()])
        bonds = [(b[0].index, b[1].index) for b in top.topology.bonds()]
        super().__init__(name=name or Path(prmtop).stem, z=z, bonds=bonds, invariant=True, kind="openmm",
                         temperature=float(temperature),
                         spec={"env": env, "prmtop": str(prmtop), "constraints": constraints})
        self.env, self.prmtop, self.inpcrd, self.x0 = env, str(prmtop), None if pdb else str(inpcrd), pos
        self.constraints = constraints
        self._top = top
        self.platform, self.device_index = platform, device_index
        self.beta = 1.0 / (KB_KJ * self.temperature)  # mol/kJ
        self._ctx = None

    @staticmethod
    def _read_pdb(path):
        """(source, positions in Angstrom) of a .pdb read with amber14; InputError when the file does not
        parse or the force field has no template for a residue."""
        openmm, app, unit = _openmm()
        try:
            src = _PdbSource(path)
            pos = np.array(src.pdb.getPositions(asNumpy=True).value_in_unit(unit.angstrom), dtype=np.float64)
            src.createSystem(nonbondedMethod=app.NoCutoff, rigidWater=False, constraints=None)
        except Exception as exc:  # noqa: BLE001 - any parser or template failure is bad input
            raise InputError(f"not a .pdb that {PDB_FORCEFIELD} can parametrise ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''})", str(path)) from None
        return src, pos

    # ---------------------------------------------------------------- OpenMM objects
    def build_system(self, env: str | None = None, lambda_gb: bool = False):
        openmm, app, unit = _openmm()
        env = env or self.env
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sys_ = self._top.createSystem(nonbondedMethod=app.NoCutoff, rigidWater=False,
                                          constraints=app.HBonds if self.constraints == "hbonds" else None,
                                          implicitSolvent=app.OBC2 if env == "obc2" or lambda_gb else None)
        for i in reversed(range(sys_.getNumForces())):
            if isinstance(sys_.getForce(i), openmm.CMMotionRemover):
                sys_.removeForce(i)
        if lambda_gb:
            for i in range(sys_.getNumForces()):
                f = sys_.getForce(i)
                if isinstance(f, (openmm.GBSAOBCForce, openmm.CustomGBForce)):
                    gb = openmm.XmlSerializer.clone(f)
                    sys_.removeForce(i)
                    break
            else:  # pragma: no cover
                raise InputError("no GB force in the OBC2 system", self.prmtop)
            cv = openmm.CustomCVForce("lambda_gb*gb")
            cv.addGlobalParameter("lambda_gb", 1.0)
            cv.addCollectiveVariable("gb", gb)
            cv.setForceGroup(1)
            sys_.addForce(cv)
        return sys_

    def minimised(self, max_iterations: int = 200) -> np.ndarray:
        """The input structure after OpenMM's local energy minimisation in this environment, (N, 3)
        Angstrom (no MD; the reference conformer of a molecule a transferable model has not seen)."""
        openmm, app, unit = _openmm()
        ctx, _ = self.context(self.build_system())
        ctx.setPositions(self.x0 / 10.0)
        openmm.LocalEnergyMinimizer.minimize(ctx, 1.0, max_iterations)
        return np.array(ctx.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(unit.angstrom))

    def with_env(self, env: str) -> "MMSystem":
        """The same molecule (files, temperature, platform) in another environment."""
        return MMSystem(self.prmtop, self.inpcrd, env=env, temperature=self.temperature, platform=self.platform,
                        name=self.name, device_index=self.device_index, constraints=self.constraints)

    def bonded_params(self) -> dict:
        """The force field's harmonic terms for internal coordinates (:mod:`icmlkit.lib.estimate_fe.internal`):
        {"bonds": {(i, j): (r0 in Angstrom, sigma in Angstrom)}, "angles": {(i, j, k): (theta0,
        sigma) in rad}, "constraints": {(i, j): length in Angstrom}} with sigma = sqrt(kT / k) (OpenMM's
        harmonic terms are k (q - q0)^2 / 2); a constrained bond is in "constraints", not in "bonds"."""
        openmm, app, unit = _openmm()
        sys_ = self.build_system()
        out = {"bonds": {}, "angles": {}, "constraints": {}}
        for c in range(sys_.getNumConstraints()):
            i, j, d = sys_.getConstraintParameters(c)
            out["constraints"][(i, j)] = d.value_in_unit(unit.angstrom)
        for f in sys_.getForces():
            if isinstance(f, openmm.HarmonicBondForce):
                for b in range(f.getNumBonds()):
                    i, j, r0, k = f.getBondParameters(b)
                    k = k.value_in_unit(unit.kilojoule_per_mole / unit.angstrom ** 2)
                    out["bonds"][(i, j)] = (r0.value_in_unit(unit.angstrom), 1.0 / np.sqrt(self.beta * max(k, 1e-12)))
            elif isinstance(f, openmm.HarmonicAngleForce):
                for a in range(f.getNumAngles()):
                    i, j, k_, t0, k = f.getAngleParameters(a)
                    k = k.value_in_unit(unit.kilojoule_per_mole / unit.radian ** 2)
                    out["angles"][(i, j, k_)] = (t0.value_in_unit(unit.radian), 1.0 / np.sqrt(self.beta * max(k, 1e-12)))
        return out

    def context(self, system, integrator=None, seed: int = 0):
        openmm, app, unit = _openmm()
        if integrator is None:
            integrator = openmm.VerletIntegrator(1.0 * unit.femtosecond)
        plat = openmm.Platform.getPlatformByName(self.platform)
        props = {"Threads": "1"} if self.platform == "CPU" else (
            {} if self.device_index is None else {"DeviceIndex": str(self.device_index)})
        ctx = openmm.Context(system, integrator, plat, props)
        return ctx, integrator

    def reduced_energy(self, x: np.ndarray) -> np.ndarray:
        """beta U of frames (M,N,3) in Angstrom; NaN energies come back as NaN (the caller decides)."""
        openmm, app, unit = _openmm()
        if self._ctx is None:
            self._ctx, self._integ = self.context(self.build_system())
        out = np.empty(len(x))
        nm = np.asarray(x, dtype=np.float64) / 10.0
        for m in range(len(x)):  # OpenMM evaluates one configuration per call
            self._ctx.setPositions(nm[m])
            out[m] = self._ctx.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
        self.energy_evals += len(x)
        return out * self.beta

    # ---------------------------------------------------------------- MD
    def sample(self, n_frames: int, seed: int = 0, interval: int = 50, equil: int = 5000, timestep_fs: float = 1.0,
               friction: float = 1.0, env: str | None = None, lambda_value: float | None = None,
               x_start: np.ndarray | None = None, restraint: tuple | None = None) -> dict:
        """Langevin MD frames of this molecule: {x (Angstrom), u (beta U of this env), seconds_md,
        energy_evals (force evaluations = MD steps, plus one energy call per frame)}.

        With ``lambda_value`` the GB term is scaled (the baseline's windows) and the frames also
        carry ``u_vac`` and ``u_gb`` (beta U_vac and beta U_GB) for MBAR re-evaluation. With
        ``restraint`` = (four atom indices or a list of such quadruples, theta0 in degrees, k in
        kJ/mol/rad^2, fold) an umbrella bias 0.5 k d^2 on each of their dihedrals theta is added (d the periodic distance theta - theta0, or
        |theta| - theta0 when ``fold``: a bias symmetric under theta -> -theta); it is in its own force
        group, so ``u`` stays the unbiased energy (:func:`icmlkit.lib.estimate_fe.basins.umbrella`).
        """
        openmm, app, unit = _openmm()
        t0 = time.perf_counter()
        lam = lambda_value is not None
        system = self.build_system(env, lambda_gb=lam)
        if not lam:
            for i in range(system.getNumForces()):
                system.getForce(i).setForceGroup(0)
        if restraint is not None:
            atoms, theta0, k_r, fold = restraint
            d = "abs(theta)-theta0" if fold else "min(dd, 2*pi-dd); dd = abs(theta-theta0)"
            bias = openmm.CustomTorsionForce(f"0.5*k_r*d^2; d = {d}; pi = 3.141592653589793")
            bias.addPerTorsionParameter("theta0")
            bias.addPerTorsionParameter("k_r")
            for tor in ([atoms] if np.ndim(atoms) == 1 else atoms):
                bias.addTorsion(*[int(a) for a in tor], [float(np.radians(theta0)), float(k_r)])
            bias.setForceGroup(2)
            system.addForce(bias)
        integ = openmm.LangevinMiddleIntegrator(self.temperature * unit.kelvin, friction / unit.picosecond,
                                                timestep_fs * unit.femtosecond)
        integ.setRandomNumberSeed(_md_seed(seed, "langevin"))
        ctx, _ = self.context(system, integ)
        if lam:
            ctx.setParameter("lambda_gb", float(lambda_value))
            cv = next(system.getForce(i) for i in range(system.getNumForces())
                      if isinstance(system.getForce(i), openmm.CustomCVForce))
        ctx.setPositions((self.x0 if x_start is None else x_start) / 10.0)
        openmm.LocalEnergyMinimizer.minimize(ctx, 1.0, 200)
        ctx.setVelocitiesToTemperature(self.temperature * unit.kelvin, _md_seed(seed, "velocities"))
        integ.step(int(equil))
        xs = np.empty((n_frames, self.n_atoms, 3))
        e0 = np.empty(n_frames)
        egb = np.empty(n_frames) if lam else None
        for m in range(n_frames):
            integ.step(int(interval))
            st = ctx.getState(getPositions=True, getEnergy=True, groups={0})
            xs[m] = st.getPositions(asNumpy=True).value_in_unit(unit.angstrom)
            e0[m] = st.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
            if lam:
                egb[m] = cv.getCollectiveVariableValues(ctx)[0]
        steps = int(equil) + n_frames * int(interval)
        out = {"x": xs, "seconds_md": time.perf_counter() - t0, "energy_evals": steps + n_frames * (2 if lam else 1),
               "md_steps": steps}
        if lam:
            out["u_vac"], out["u_gb"] = e0 * self.beta, egb * self.beta
            out["u"] = out["u_vac"] + lambda_value * out["u_gb"]
        else:
            out["u"] = e0 * self.beta
        return out


def lambda_window_mbar(prmtop, inpcrd, temperature: float = 298.15, windows: int = 11, frames_per_window: int = 500,
                       interval: int = 50, equil: int = 5000, timestep_fs: float = 1.0, seed: int = 0,
                       platform: str = "CPU", device_index: int | None = None, constraints: str = "none",
                       x_start: np.ndarray | None = None) -> dict:
    """The classical baseline: Delta G(vacuum -> OBC2) by lambda-window MD and MBAR (the first window
    starts from ``x_start`` (N, 3) Angstrom when given, else from the inpcrd; each later window from
    the last frame of the one before).

    Returns delta_g_kcal, delta_g_err_kcal, f_kT (per window), min neighbour overlap, energy_evals,
    seconds_md, seconds_estimate, n_effective (decorrelated frames per window).
    """
    from icmlkit.lib.estimate_fe.estimate import import_pymbar

    pymbar = import_pymbar()
    from pymbar import timeseries

    sysm = MMSystem(prmtop, inpcrd, env="obc2", temperature=temperature, platform=platform, device_index=device_index,
                    constraints=constraints)
    lams = np.linspace(0.0, 1.0, windows)
    t0 = time.perf_counter()
    u_vac, u_gb, evals, x_last = [], [], 0, x_start
    for k, lam in enumerate(lams):
        s = sysm.sample(frames_per_window, seed=stream_seed(seed, f"window-{k}"), interval=interval, equil=equil, timestep_fs=timestep_fs,
                        lambda_value=float(lam), x_start=x_last)
        x_last = s["x"][-1]
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idx = timeseries.subsample_correlated_data(s["u"])
        u_vac.append(s["u_vac"][idx])
        u_gb.append(s["u_gb"][idx])
        evals += s["energy_evals"]
    seconds_md = time.perf_counter() - t0
    t1 = time.perf_counter()
    uv, ug = np.concatenate(u_vac), np.concatenate(u_gb)
    n_k = np.array([len(a) for a in u_vac])
    u_kn = uv[None, :] + lams[:, None] * ug[None, :]
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mbar = pymbar.MBAR(u_kn, n_k)
        res = mbar.compute_free_energy_differences()
        ov = mbar.compute_overlap()["matrix"]
    kT = KB_KJ * temperature / KJ_PER_KCAL
    neigh = [float(ov[k, k + 1]) for k in range(windows - 1)]
    return {"delta_g_kcal": float(res["Delta_f"][0, -1] * kT), "delta_g_err_kcal": float(res["dDelta_f"][0, -1] * kT),
            "f_kT": [float(v) for v in res["Delta_f"][0]], "overlap": min(neigh), "overlap_neighbours": neigh,
            "n_effective": n_k.tolist(), "energy_evals": int(evals + u_kn.size), "seconds_md": seconds_md,
            "seconds_estimate": time.perf_counter() - t1, "windows": windows, "frames_per_window": frames_per_window,
            "interval": interval, "md_steps": int(windows * (equil + frames_per_window * interval)),
            "constraints": constraints}


def endstate_bar(systems: dict, frames: dict, temperature: float) -> dict:
    """End-state BAR for Delta G(vacuum -> OBC2) on end-state frames alone (no model, no lambda windows).

    ``systems`` and ``frames`` map "vacuum" and "obc2" to an :class:`MMSystem` of that environment and
    to its Boltzmann frames {x (Angstrom), u (beta U of that environment), energy_evals (MD cost)}:
    each frame set is decorrelated (pymbar's statistical inefficiency of its energy series), the
    other state's reduced energy is evaluated on the kept frames, and BAR runs on the works
    w_F = u_obc2 - u_vac (vacuum frames) and w_R = u_vac - u_obc2 (OBC2 frames), in log space
    (:func:`~icmlkit.lib.estimate_fe.estimate.bar_estimate`). With the frames of a CARD solvation run this
    is the baseline at equal MD."""
    from icmlkit.lib.estimate_fe.estimate import bar_estimate, decorrelate

    t0 = time.perf_counter()
    kept, cross = {}, {}
    evals0 = {e: systems[e].energy_evals for e in ENVIRONMENTS}
    for env, other in (("vacuum", "obc2"), ("obc2", "vacuum")):
        idx = decorrelate(frames[env]["u"])
        kept[env] = idx
        cross[env] = systems[other].reduced_energy(frames[env]["x"][idx])
    evals = int(sum(systems[e].energy_evals - evals0[e] for e in ENVIRONMENTS))
    w_F = cross["vacuum"] - frames["vacuum"]["u"][kept["vacuum"]]
    w_R = cross["obc2"] - frames["obc2"]["u"][kept["obc2"]]
    r = bar_estimate(w_F, w_R)
    kT = kcal_per_kT(temperature)
    md = int(sum(int(frames[e].get("energy_evals", 0)) for e in ENVIRONMENTS))
    fin = lambda v: None if v is None or not np.isfinite(v) else float(v)  # noqa: E731
    return {"method": "endstate-bar", "delta_g_kcal": fin(r["delta_f"] * kT), "delta_g_err_kcal": fin(r["delta_f_err"] * kT),
            "delta_g_exp_forward_kcal": fin(r["exp_forward"] * kT), "delta_g_exp_reverse_kcal": fin(r["exp_reverse"] * kT),
            "overlap": r["overlap"], "ess_forward": r["ess_forward"], "ess_reverse": r["ess_reverse"],
            "n_effective": [int(len(kept["vacuum"])), int(len(kept["obc2"]))],
            "n_frames": [int(len(frames["vacuum"]["u"])), int(len(frames["obc2"]["u"]))],
            "energy_evals_estimate": evals, "energy_evals_md": md, "energy_evals": evals + md,
            "seconds_md": float(sum(float(frames[e].get("seconds_md", 0.0)) for e in ENVIRONMENTS)),
            "seconds_estimate": time.perf_counter() - t0}


def endstate_md(systems: dict, n_frames: int, seed: int = 0, interval: int = 50, equil: int = 5000,
                timestep_fs: float = 1.0) -> dict:
    """MD of both end states on the seed streams of a CARD solvation run (``stream_seed(seed, env)``),
    so the same --seed and MD settings give the same frames as ``estimate-fe solvation --outdir``."""
    return {env: systems[env].sample(n_frames, seed=stream_seed(seed, env), interval=interval, equil=equil,
                                     timestep_fs=timestep_fs) for env in ENVIRONMENTS}


def load_molecule(path: str, env: str = "vacuum", temperature: float = 298.15, inpcrd: str | None = None,
                  platform: str = "CPU", device_index: int | None = None, constraints: str = "none") -> MMSystem:
    """``freesolv:<id>``, a built-in molecule (:data:`BUILTIN_MOLECULES`), a .pdb (amber14) or a .prmtop
    (inpcrd: given, or beside it with the same stem)."""
    if path in BUILTIN_MOLECULES:
        return MMSystem(alanine_dipeptide_pdb(), None, env=env, temperature=temperature, platform=platform, name=path,
                        device_index=device_index, constraints=constraints)
    if path.endswith(".pdb"):
        return MMSystem(path, None, env=env, temperature=temperature, platform=platform, device_index=device_index,
                        constraints=constraints)
    if path.startswith("freesolv:"):
        pt, ic = freesolv_files(path.split(":", 1)[1])
        return MMSystem(pt, ic, env=env, temperature=temperature, platform=platform, name=path.split(":", 1)[1],
                        device_index=device_index, constraints=constraints)
    p = Path(path)
    if not p.is_file():
        raise InputError("no such file", path)
    ic = Path(inpcrd) if inpcrd else next((c for c in (p.with_suffix(".inpcrd"), p.with_suffix(".rst7"),
                                                        p.with_suffix(".crd")) if c.exists()), None)
    if ic is None:
        raise InputError("no coordinates beside it (.inpcrd/.rst7/.crd); give --inpcrd", path)
    return MMSystem(p, ic, env=env, temperature=temperature, platform=platform, device_index=device_index,
                    constraints=constraints)


def vertical_gap_kT(systems: dict, x: np.ndarray) -> float:
    """The cheapest hydration baseline (ForceBalance #208: with implicit solvent a vertical gap):
    u_obc2 - u_vac of one conformer ``x`` (N, 3) Angstrom, in kT; 2 energy evaluations, no model, no MD."""
    x = np.asarray(x, dtype=np.float64)[None]
    return float(systems["obc2"].reduced_energy(x)[0] - systems["vacuum"].reduced_energy(x)[0])


def kcal_per_kT(temperature: float) -> float:
    return KB_KJ * temperature / KJ_PER_KCAL


__all__ = ["BUILTIN_MOLECULES", "CONSTRAINTS", "ENVIRONMENTS", "alanine_dipeptide_pdb", "check_constraints", "MMSystem", "endstate_bar", "endstate_md", "freesolv_entry", "freesolv_files", "kcal_per_kT", "lambda_window_mbar",
           "load_molecule", "openmm_platform", "vertical_gap_kT"]
