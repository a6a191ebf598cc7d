"""One library call per estimate-fe subcommand: a config dataclass plus loaded inputs -> a result
with ``.summary``. The CLI (``cli/estimate_fe.py``), the demo and ``bench/estimate_fe.py`` call these.

- :func:`open_system` / :func:`load_frames`: the SYSTEM argument (built-in name, analytic .json,
  AMBER .prmtop, a .pdb, ``freesolv:<id>``, ``alanine-dipeptide``) and a frames .npz, checked against each other;
- :func:`sample` (:class:`SampleConfig`), :func:`train` (:class:`TrainConfig`), :func:`estimate`
  (:class:`EstimateConfig`), :func:`solvation_from_files` / :func:`solvation_pipeline`
  (:class:`SolvationConfig`), :func:`baseline` (:class:`BaselineConfig`), :func:`systems_table`.

Devices: the torch work (CARD, analytic energies and MALA) runs on ``device``; OpenMM runs on the
platform of that device (:func:`~icmlkit.lib.estimate_fe.mm.openmm_platform`), reported as ``openmm_platform``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.runtime import stream_seed
from icmlkit.lib.estimate_fe import card
from icmlkit.lib.estimate_fe.config import BaselineConfig, EstimateConfig, SampleConfig, SolvationConfig, TrainConfig
from icmlkit.lib.estimate_fe.frames import arrays as frames_arrays
from icmlkit.lib.estimate_fe.frames import check as check_frames_record


# --------------------------------------------------------------------------- inputs


# what an analytic system lacks, per molecule option it cannot honour (its energies are in kT)
_MOLECULE_ONLY = {"env": "no solvent environment", "temperature": "no temperature (its energies are in kT)",
                  "inpcrd": "no coordinates file"}


def open_system(spec: str, *, env: str = "vacuum", temperature: float = 298.15, inpcrd: str | None = None,
                device="cpu", strict_device: bool = False, constraints: str = "none", given=(),
                needs_molecule: str | None = None):
    """The system named by ``spec``; ``system.files`` lists the files it was read from. ``constraints``
    ("none" or "hbonds", molecules only) holds bonds to hydrogens at their force-field length.
    ``given``: the names of the molecule options (env, temperature, inpcrd) the caller set explicitly;
    an analytic system cannot honour them, so one given for it is a usage error (issue 59: they were
    silently ignored), while their defaults pass. ``needs_molecule``: the command (and mode) that only
    molecules serve (solvation --outdir, train-multi, transfer); an analytic system is refused naming it.

    OpenMM molecules run on :func:`~icmlkit.lib.estimate_fe.mm.openmm_platform` of ``device`` (``strict_device``:
    a CUDA device without OpenMM's CUDA platform is an environment error instead of the CPU)."""
    from icmlkit.lib.estimate_fe.mm import BUILTIN_MOLECULES
    from icmlkit.lib.estimate_fe.systems import BUILTIN, builtin, load_analytic

    named = spec.startswith("freesolv:") or spec in BUILTIN_MOLECULES
    is_molecule = named or spec.endswith((".prmtop", ".parm7", ".pdb"))
    if needs_molecule and not is_molecule:
        raise UsageError(f"`{needs_molecule}` needs a molecule (a .prmtop, a .pdb or freesolv:<id>), not {spec}")
    if constraints != "none" and not is_molecule:
        raise UsageError(f"--constraints {constraints} is for molecules (a .prmtop, a .pdb or freesolv:<id>), not {spec}")
    unhonoured = [k for k in _MOLECULE_ONLY if k in given]
    if unhonoured and (spec in BUILTIN or spec.endswith(".json")):
        value = {"env": env, "temperature": f"{temperature:g}", "inpcrd": inpcrd}
        raise UsageError(f"{', '.join(f'--{k} {value[k]}' for k in unhonoured)}: the analytic system {spec} has "
                         f"{' and '.join(_MOLECULE_ONLY[k] for k in unhonoured)}; "
                         f"{'this option is' if len(unhonoured) == 1 else 'these options are'} for molecules "
                         f"(a .prmtop, a .pdb or freesolv:<id>): leave {'it' if len(unhonoured) == 1 else 'them'} out")
    if spec in BUILTIN:
        sysm = builtin(spec)
    elif is_molecule:
        from icmlkit.lib.estimate_fe.mm import load_molecule, openmm_platform

        if not named and not Path(spec).is_file():
            raise InputError("no such file (expected an AMBER .prmtop or a .pdb)", spec)
        platform = openmm_platform(device, strict_device)
        index = getattr(device, "index", None) if platform == "CUDA" else None
        sysm = load_molecule(spec, env=env, temperature=temperature, inpcrd=inpcrd, platform=platform,
                             device_index=index, constraints=constraints)
        sysm.files = [] if named else [spec] + ([sysm.inpcrd] if sysm.inpcrd else [])
    elif spec.endswith(".json"):
        if not Path(spec).is_file():
            raise InputError("no such file (expected a JSON spec of an analytic system)", spec)
        sysm = load_analytic(spec)
        sysm.files = [spec]
    elif not Path(spec).exists():
        raise InputError("no such file (expected a .json spec, a .prmtop, a .pdb, a built-in name or freesolv:<id>)", spec)
    else:
        raise InputError("unknown system format (expected .json, .prmtop or .pdb)", spec)
    sysm.device = str(device)
    return sysm


def _platform(system) -> str | None:
    return getattr(system, "platform", None) if system.kind == "openmm" else None


@dataclass
class Frames:
    """Boltzmann frames: ``x`` (M, N, 3) Angstrom, ``u`` (M,) = beta U, the other arrays of the file."""

    x: np.ndarray
    u: np.ndarray
    extra: dict
    name: str
    check: dict | None = None  # what :func:`icmlkit.lib.estimate_fe.frames.check` verified


def load_frames(path, system) -> Frames:
    """A frames .npz (arrays x and u) checked against ``system``: shape, finite values, then its record
    (system, environment, temperature, force-field hash) and u recomputed on a few frames
    (:func:`icmlkit.lib.estimate_fe.frames.check`; a mismatch is a UsageError, exit 2)."""
    from icmlkit.lib.core.io import load_npz

    where = str(path)
    d = load_npz(path, required=("x", "u"))
    x, u = d.pop("x"), d.pop("u")
    if not (np.issubdtype(x.dtype, np.number) and np.issubdtype(u.dtype, np.number)):
        raise InputError(f"arrays 'x' and 'u' must be numeric (found {x.dtype} and {u.dtype})", where)
    x, u = x.astype("float64"), u.astype("float64")
    system.check_frames(x, where)
    if u.shape != (x.shape[0],):
        raise InputError(f"field 'u' has shape {u.shape}, expected ({x.shape[0]},)", where)
    if not np.isfinite(x).all():
        raise InputError("frames contain non-finite coordinates (field 'x')", where)
    card.check_energies(u, where)
    if len(x) < 10:
        raise InputError(f"only {len(x)} frames (need >= 10)", where)
    if system.kind == "openmm":
        from icmlkit.lib.estimate_fe.mm import check_constraints

        check_constraints(str(d.get("constraints", "none")), system, "these frames (field 'constraints')", where)
    checked = check_frames_record(d, x, u, system, where)
    return Frames(x=x, u=u, extra=d, name=where, check=checked)


# --------------------------------------------------------------------------- sample


@dataclass
class SampleResult:
    arrays: dict  # what the frames .npz holds
    summary: dict


def sample(cfg: SampleConfig, system, *, seed: int = 0) -> SampleResult:
    """Boltzmann frames of ``system``: Langevin MD (OpenMM) or exact/MALA draws (analytic)."""
    if system.kind == "openmm":
        fr = system.sample(cfg.frames, seed=seed, interval=cfg.interval, equil=cfg.equil, timestep_fs=cfg.timestep)
    else:
        fr = system.sample(cfg.frames, seed=seed, method=cfg.method)
    arrays = frames_arrays(system, fr["x"], fr["u"],
                           energy_evals_md=np.int64(fr["energy_evals"]))  # no timings: same seed, same bytes
    summary = {"system": system.name, "env": getattr(system, "env", None), "n_frames": cfg.frames,
               "n_atoms": system.n_atoms, "u_mean": float(np.mean(fr["u"])), "energy_evals": fr["energy_evals"],
               "seconds_md": round(fr["seconds_md"], 3), "openmm_platform": _platform(system)}
    return SampleResult(arrays, summary)


# --------------------------------------------------------------------------- train


@dataclass
class TrainResult:
    bundle: dict  # the model file's content (:func:`icmlkit.lib.estimate_fe.card.save`)
    info: dict
    summary: dict


def train(cfg: TrainConfig, system, frames: Frames, *, seed: int = 0, device="cpu", dist=None,
          checkpointer=None) -> TrainResult:
    """Fit CARD to the first ``train_fraction`` of the frames (:func:`icmlkit.lib.estimate_fe.card.train`)."""
    n_train = max(10, int(len(frames.x) * cfg.train_fraction))
    bundle, info = card.train(system, frames.x[:n_train], frames.u[:n_train], steps=cfg.steps,
                              stage2_steps=cfg.stage2_steps, batch=cfg.batch, lr=cfg.lr,
                              energy_weight=cfg.energy_weight, kl_steps=cfg.kl_steps, seed=seed, time_limit=cfg.time_limit,
                              threads=cfg.threads, precision=cfg.precision, device=device, dist=dist,
                              checkpointer=checkpointer, **cfg.arch())
    bundle["frames_file_digest"] = card.frames_digest(frames.x)
    summary = {"system": system.name, "n_atoms": system.n_atoms, "n_free": info["n_free"],
               "train_frames": info["train_frames"], "val_frames": info["val_frames"], "val_nll": info["val_nll"],
               "box": info["box"], "steps_done": info["steps_done"], "seconds_train": round(info["seconds_train"], 3),
               "energy_evals_train": info["energy_evals_train"],
               "device": info["device"], "world_size": info["world_size"]}
    return TrainResult(bundle, info, summary)


# --------------------------------------------------------------------------- estimate


@dataclass
class Result:
    """``summary`` and ``check``: why a check the user asked for failed (exit 3), or None."""

    summary: dict
    check: str | None = None


def _estimate_one(cfg: EstimateConfig, system, bundle: dict, frames: Frames, seed: int, device) -> dict:
    card.check_system(bundle, system, frames.name)
    skip = bundle["n_frames_used"] if bundle.get("frames_file_digest") == card.frames_digest(frames.x) else 0
    res = card.estimate(bundle, system, frames.x, frames.u, n_samples=cfg.samples, seed=seed,
                        estimator=cfg.estimator, skip_frames=skip, frames_name=frames.name, device=device)
    e = frames.extra
    res["frames_skipped_as_training"] = skip
    res["frames_check"] = frames.check
    res["seconds_md"] = float(e["seconds_md"]) if "seconds_md" in e else None
    res["energy_evals_md"] = int(e["energy_evals_md"]) if "energy_evals_md" in e else None
    res["seconds_train"] = bundle.get("info", {}).get("seconds_train")
    return res


def refusal(out: dict, min_overlap: float) -> str | None:
    """Below ``min_overlap`` the free energies in ``out`` are set to None and the reason is returned."""
    if out["overlap"] >= min_overlap:
        return None
    for k in ("f_kT", "f_err_kT", "error_vs_exact_kT", "delta_g_kcal", "delta_g_err_kcal"):
        if k in out:
            out[k] = None
    return (f"BAR overlap {out['overlap']:.3g} is below --min-overlap {min_overlap}: the model's samples "
            f"and the Boltzmann frames barely overlap (ESS forward {out['ess_forward']:.3g}, reverse "
            f"{out['ess_reverse']:.3g}), so no free energy is reported; train longer or on more frames")


def estimate(cfg: EstimateConfig, system, bundle: dict, frames: Frames, *, seed: int = 0, device="cpu") -> Result:
    """Free energy from a model and target frames: BAR/MBAR, both EXP directions, overlap, ESS."""
    res = _estimate_one(cfg, system, bundle, frames, seed, device)
    fx = system.f_exact() if system.kind == "analytic" else None
    out = {**res, "f_exact_kT": fx, "error_vs_exact_kT": None if fx is None or res["f_kT"] is None else res["f_kT"] - fx,
           "units": "kT" + ("" if system.temperature is None else f" at {system.temperature} K"),
           "openmm_platform": _platform(system)}
    return Result(out, refusal(out, cfg.min_overlap))


# --------------------------------------------------------------------------- solvation


def _freesolv(spec: str, out: dict) -> dict:
    if spec.startswith("freesolv:"):
        from icmlkit.lib.estimate_fe.mm import freesolv_entry

        out["freesolv"] = freesolv_entry(spec.split(":", 1)[1])
    return out


def solvation_from_files(cfg: SolvationConfig, spec: str, systems: dict, bundles: dict, frames: dict, *,
                         temperature: float, seed: int = 0, device="cpu") -> Result:
    """Delta G(vacuum -> OBC2) from a trained model and frames per environment (keys vacuum, obc2);
    each environment's samples come from the stream ``stream_seed(seed, env)``."""
    from icmlkit.lib.estimate_fe.pipeline import combine

    per = {}
    for env in ("vacuum", "obc2"):
        r = _estimate_one(cfg, systems[env], bundles[env], frames[env], stream_seed(seed, env), device)
        per[env] = {**r, "seconds_md": r["seconds_md"] or 0.0, "seconds_train": r["seconds_train"] or 0.0,
                    "energy_evals_md": r["energy_evals_md"] or 0}
    out = _freesolv(spec, combine(per, temperature))
    return Result(out, refusal(out, cfg.min_overlap))


def solvation_pipeline(cfg: SolvationConfig, spec: str, make_system, folder: Path | None, *, seed: int = 0,
                       device="cpu") -> Result:
    """MD, training and estimation in both environments (:func:`icmlkit.lib.estimate_fe.pipeline.solvation`)."""
    from icmlkit.lib.estimate_fe.pipeline import solvation

    out = solvation(make_system, folder, n_frames=cfg.frames, interval=cfg.interval, steps=cfg.steps,
                    stage2_steps=cfg.stage2_steps, n_samples=cfg.samples, estimator=cfg.estimator, seed=seed,
                    device=device)
    out = _freesolv(spec, out)
    return Result(out, refusal(out, cfg.min_overlap))


# --------------------------------------------------------------------------- baseline


def baseline(cfg: BaselineConfig, spec: str, system, *, temperature: float, seed: int = 0,
             frames: dict | None = None) -> Result:
    """The classical baselines, Delta G(vacuum -> OBC2) in kcal/mol: ``cfg.method`` "lambda-mbar"
    (lambda-window MD, U_vac + lambda U_GB, and MBAR), "endstate-bar" (BAR on end-state frames,
    :func:`~icmlkit.lib.estimate_fe.mm.endstate_bar`: the given ``frames`` {"vacuum": Frames, "obc2": Frames},
    or MD of both end states on the seed streams of a CARD solvation run) or "vertical-gap"
    (:func:`~icmlkit.lib.estimate_fe.mm.vertical_gap_kT` at the vacuum-minimised input structure, the
    baseline `transfer` reports; no MD, no overlap)."""
    from icmlkit.lib.estimate_fe.mm import ENVIRONMENTS, endstate_bar, endstate_md, lambda_window_mbar

    if system.kind != "openmm":
        raise InputError("the baselines need a molecule (a .prmtop, a .pdb or freesolv:<id>), not an analytic system",
                         system.name)
    if frames is not None and cfg.method != "endstate-bar":
        raise UsageError("--vacuum-frames/--solvent-frames are for --method endstate-bar")
    if cfg.method == "vertical-gap":
        import time

        from icmlkit.lib.estimate_fe.mm import kcal_per_kT, vertical_gap_kT

        t0 = time.perf_counter()
        systems = {"obc2": system, "vacuum": system.with_env("vacuum")}
        x_min = systems["vacuum"].minimised()
        gap = vertical_gap_kT(systems, x_min)
        out = {"method": "vertical-gap", "delta_g_kcal": gap * kcal_per_kT(temperature), "delta_g_err_kcal": None,
               "overlap": None, "energy_evals": 2, "seconds_md": 0.0, "seconds_estimate": time.perf_counter() - t0,
               "conformer": "the input structure minimised in vacuum (OpenMM LocalEnergyMinimizer, at most 200 "
                            "iterations, not counted in energy_evals)"}
        what = None
    elif cfg.method == "endstate-bar":
        systems = {"obc2": system, "vacuum": system.with_env("vacuum")}
        if frames is None:
            fr = endstate_md(systems, cfg.frames_per_window, seed=seed, interval=cfg.interval, equil=cfg.equil,
                             timestep_fs=cfg.timestep)
        else:
            for env in ENVIRONMENTS:
                got = str(frames[env].extra.get("env", env))
                if got != env:
                    raise InputError(f"these frames were sampled in {got!r}, expected {env!r} (field 'env')",
                                     frames[env].name)
            fr = {env: {"x": frames[env].x, "u": frames[env].u,
                        "energy_evals": int(frames[env].extra.get("energy_evals_md", 0)),
                        "seconds_md": float(frames[env].extra.get("seconds_md", 0.0))} for env in ENVIRONMENTS}
        out = endstate_bar(systems, fr, temperature)
        out["frames_from"] = "files" if frames is not None else "md"
        what = "BAR overlap"
    else:
        out = lambda_window_mbar(system.prmtop, system.inpcrd, temperature=temperature, windows=cfg.windows,
                                 frames_per_window=cfg.frames_per_window, interval=cfg.interval, equil=cfg.equil,
                                 timestep_fs=cfg.timestep, seed=seed, platform=system.platform,
                                 device_index=system.device_index, constraints=system.constraints)
        out["method"] = "lambda-mbar"
        what = "smallest neighbour overlap"
    out["units"] = "kcal/mol (delta_g)" + (", kT (f_kT)" if cfg.method == "lambda-mbar" else "")
    out["openmm_platform"] = system.platform
    out = _freesolv(spec, out)
    check = None
    if what is not None and out["overlap"] < cfg.min_overlap:
        check = f"{what} {out['overlap']:.3g} is below --min-overlap {cfg.min_overlap}"
    return Result(out, check)


# --------------------------------------------------------------------------- systems

HOW = {"harmonic-trap": "closed form", "double-well": "1-D quadrature", "triatomic": "3-D quadrature (x 8 pi^2, per V)",
       "lj-trap": "none (no closed form)"}


def systems_table() -> list[dict]:
    """The built-in analytic systems with their exact free energies (kT)."""
    from icmlkit.lib.estimate_fe.systems import BUILTIN, builtin

    return [{"name": n, "kind": spec["kind"], "n_atoms": builtin(n).n_atoms, "f_exact_kT": builtin(n).f_exact(),
             "how": HOW[spec["kind"]], "spec": spec} for n, spec in BUILTIN.items()]


__all__ = ["BaselineConfig", "EstimateConfig", "Frames", "Result", "SampleConfig", "SampleResult", "SolvationConfig",
           "TrainConfig", "TrainResult", "baseline", "estimate", "load_frames", "open_system", "refusal",
           "sample", "solvation_from_files", "solvation_pipeline", "systems_table", "train"]
