"""estimate-fe: absolute and solvation free energies with CARD (radix-decomposed autoregressive proposal + BAR)."""
from __future__ import annotations

import click

from icmlkit.cli._common import ToolGroup, checkpoint_file, make_main, option_group, output_option

TOOL = "estimate-fe"
RECONSTRUCTED = (
    "Reconstructed (not confirmed by the paper text): the two-stream wiring of the geometry-aware "
    "decoder, the Stage II weighting, and the frame gauge (atom 1 at the origin, atom 2 on +x, atom 3 "
    "in the xy-plane, Jacobian x2^2*y3, F per volume V) used instead of the paper's principal-axes "
    "gauge, whose measure the paper leaves open."
)

cli = ToolGroup(
    TOOL,
    help=f"""Absolute free energies with CARD, and solvation free energies as their difference.

\b
CARD is a normalised coarse-to-fine autoregressive density over radix-decomposed coordinates
(base r, depth L, box a: digit tokens of all atoms level by level, then Beta-mixture residuals),
used as a zero-free-energy proposal: BAR between model samples and Boltzmann frames gives
F = -kT log Z directly. Units: f_kT in kT at the system's temperature (analytic systems are
in kT; molecules: F/kT = -log(Z/V), lengths in Angstrom), delta_g_kcal in kcal/mol.

{RECONSTRUCTED}

\b
Systems (SYSTEM argument): a JSON spec of an analytic potential (see `estimate-fe systems`),
the name of a built-in one (trap4, dw4, triatomic, lj6-trap), an AMBER .prmtop (with the
.inpcrd beside it or --inpcrd), or freesolv:<compound id> (read from ../shared/data/freesolv).
Molecules run in OpenMM (--env vacuum or obc2 implicit solvent; CPU platform, CUDA when asked).

\b
Examples:
  estimate-fe systems --json
  estimate-fe sample trap4 --frames 4000 -o trap.npz
  estimate-fe train trap4 trap.npz -o trap.pt --steps 1500
  estimate-fe estimate trap4 trap.pt trap.npz --json | jq '.f_kT, .f_exact_kT, .overlap'
  estimate-fe sample freesolv:mobley_1636752 --env obc2 --frames 2000 -o meoh.obc2.npz
  estimate-fe solvation freesolv:mobley_1636752 --outdir runs/meoh --json | jq .delta_g_kcal
  estimate-fe baseline freesolv:mobley_1636752 --frames-per-window 400 --json""",
)


def _system(run, spec: str, env: str = "vacuum", temperature: float = 298.15, inpcrd: str | None = None,
            platform: str = "CPU"):
    from pathlib import Path

    from icmlkit.lib.fe.systems import BUILTIN, builtin, load_analytic

    if spec in BUILTIN:
        return builtin(spec)
    if spec.startswith("freesolv:"):
        from icmlkit.lib.fe.mm import load_molecule

        return load_molecule(spec, env=env, temperature=temperature, platform=platform)
    if spec.endswith(".json"):
        return load_analytic(run.input(spec))
    if spec.endswith(".prmtop") or spec.endswith(".parm7"):
        from icmlkit.lib.fe.mm import load_molecule

        sysm = load_molecule(run.input(spec), env=env, temperature=temperature, inpcrd=inpcrd, platform=platform)
        run.input(sysm.inpcrd)
        return sysm
    from icmlkit.lib.core.errors import InputError

    if not Path(spec).exists():
        raise InputError("no such file (expected a .json spec, a .prmtop, a built-in name or freesolv:<id>)", spec)
    raise InputError("unknown system format (expected .json or .prmtop)", spec)


def _platform(run) -> str:
    if run.device_spec == "cpu":
        return "CPU"
    if run.device_spec.startswith("cuda"):
        run.device  # noqa: B018 - exit 4 when CUDA is absent
        return "CUDA"
    try:
        import openmm

        names = [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())]
        return "CUDA" if "CUDA" in names and run.device.type == "cuda" else "CPU"
    except ImportError:
        return "CPU"


env_option = click.option("--env", type=click.Choice(["vacuum", "obc2"]), default="vacuum", show_default=True,
                          help="Molecules: vacuum or OBC2 implicit solvent (ignored by analytic systems).")
temp_option = click.option("--temperature", type=click.FloatRange(min=0, min_open=True), default=298.15,
                           show_default=True, help="Kelvin (molecules).")
inpcrd_option = click.option("--inpcrd", default=None, help="Coordinates for a .prmtop (default: beside it).")


def _load_frames(run, path, system):
    from icmlkit.lib.core.io import load_npz

    d = load_npz(run.input(path), required=("x", "u"))
    x, u = d["x"].astype("float64"), d["u"].astype("float64")
    system.check_frames(x, path)
    if u.shape != (x.shape[0],):
        from icmlkit.lib.core.errors import InputError

        raise InputError(f"field 'u' has shape {u.shape}, expected ({x.shape[0]},)", path)
    return x, u, d


@cli.command()
@click.argument("system")
@output_option("Write the frames (.npz: x in Angstrom, u = beta U, z, temperature).", required=True)
@env_option
@temp_option
@inpcrd_option
@click.option("--frames", "n_frames", type=click.IntRange(min=10), default=2000, show_default=True)
@click.option("--interval", type=click.IntRange(min=1), default=50, show_default=True,
              help="MD steps between frames (molecules).")
@click.option("--equil", type=click.IntRange(min=0), default=5000, show_default=True, help="Equilibration MD steps.")
@click.option("--timestep", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="fs; no constraints, so keep it at 1 fs or below.")
@click.option("--method", type=click.Choice(["auto", "exact", "mala"]), default="auto", show_default=True,
              help="Analytic systems: exact draws (separable traps) or MALA chains.")
def sample(run, system, output, env, temperature, inpcrd, n_frames, interval, equil, timestep, method):
    """Boltzmann frames of a system: Langevin MD (OpenMM) or exact/MALA draws (analytic).

    \b
    JSON keys: system, env, n_frames, n_atoms, u_mean, energy_evals, seconds_md, output.
    Example:  estimate-fe sample freesolv:mobley_1636752 --env obc2 --frames 2000 -o meoh.obc2.npz
    """
    import numpy as np

    from icmlkit.lib.core.io import write_npz

    run.output(output)
    sysm = _system(run, system, env, temperature, inpcrd, _platform(run))
    if sysm.kind == "openmm":
        fr = sysm.sample(n_frames, seed=run.seed, interval=interval, equil=equil, timestep_fs=timestep)
    else:
        fr = sysm.sample(n_frames, seed=run.seed, method=method)
    write_npz(output, x=fr["x"], u=fr["u"], z=np.asarray(sysm.z), temperature=np.float64(sysm.temperature or 0.0),
              env=np.str_(getattr(sysm, "env", "analytic")), system=np.str_(sysm.name),
              energy_evals_md=np.int64(fr["energy_evals"]))  # no timings: same seed, same bytes
    run.wrote(output)
    return {"system": sysm.name, "env": getattr(sysm, "env", None), "n_frames": n_frames, "n_atoms": sysm.n_atoms,
            "u_mean": float(np.mean(fr["u"])), "energy_evals": fr["energy_evals"],
            "seconds_md": round(fr["seconds_md"], 3), "output": output}


arch_options = [
    click.option("--radix", "r", type=click.IntRange(min=2, max=8), default=4, show_default=True, help="Base r."),
    click.option("--depth", "L", type=click.IntRange(min=1, max=6), default=3, show_default=True, help="Depth L."),
    click.option("--components", "K", type=click.IntRange(min=1), default=8, show_default=True,
                 help="Beta-mixture components per residual axis."),
    click.option("--width", "d", type=click.IntRange(min=8), default=64, show_default=True, help="Model width d."),
    click.option("--layers", type=click.IntRange(min=1), default=2, show_default=True,
                 help="Encoder and decoder layers (each)."),
    click.option("--box", type=click.FloatRange(min=0, min_open=True), default=None,
                 help="Box size a in Angstrom (default: margin x the frames' extent)."),
    click.option("--margin", type=click.FloatRange(min=1.0), default=1.5, show_default=True),
]


_arch = option_group(arch_options)


@cli.command()
@click.argument("system")
@click.argument("frames")
@output_option("Write the model (.pt; loaded with weights_only=True).", required=True)
@env_option
@temp_option
@inpcrd_option
@_arch
@click.option("--steps", type=click.IntRange(min=1), default=2000, show_default=True, help="Stage I (NLL) steps.")
@click.option("--stage2-steps", type=click.IntRange(min=0), default=500, show_default=True,
              help="Stage II steps (NLL + centred energy matching).")
@click.option("--batch", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=2e-3, show_default=True)
@click.option("--energy-weight", type=click.FloatRange(min=0), default=1.0, show_default=True)
@click.option("--train-fraction", type=click.FloatRange(0, 1, min_open=True), default=0.5, show_default=True,
              help="Use the first part of FRAMES for training; `estimate` uses the rest of the same file.")
@click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), default=None, help="Seconds of training at most.")
@click.option("--checkpoint-every", type=click.IntRange(min=0), default=500, show_default=True,
              help="Write OUTPUT.ckpt.pt every N steps (0: never); removed when training ends.")
@click.option("--resume", is_flag=True, help="Continue from OUTPUT.ckpt.pt with the same settings and frames; the "
              "weights equal those of an uninterrupted run.")
def train(run, system, frames, output, env, temperature, inpcrd, r, L, K, d, layers, box, margin, steps,
          stage2_steps, batch, lr, energy_weight, train_fraction, time_limit, checkpoint_every, resume):
    """Fit CARD to frames: Stage I (NLL), then Stage II (NLL + centred energy matching).

    A checkpoint OUTPUT.ckpt.pt is kept while training (every --checkpoint-every steps); after an
    interruption, the same command with --resume continues from it.

    \b
    JSON keys: system, n_atoms, n_free, train_frames, val_frames, val_nll (nats per frame, held-out 10 %),
    box, steps_done, seconds_train, output.
    Example:  estimate-fe train freesolv:mobley_1636752 meoh.vac.npz -o meoh.vac.pt --steps 1500
    """
    from icmlkit.lib.fe import card

    if output == "-":
        raise click.BadParameter("the model is a binary file: give a path", param_hint="-o")
    ckpt = checkpoint_file(output, resume)
    state = card.load(run.input(ckpt), checkpoint=True) if resume else None
    run.output(output)
    sysm = _system(run, system, env, temperature, inpcrd, "CPU")
    x, u, _ = _load_frames(run, frames, sysm)
    n_train = max(10, int(len(x) * train_fraction))
    bundle, info = card.train(sysm, x[:n_train], u[:n_train], steps=steps, stage2_steps=stage2_steps, batch=batch,
                              lr=lr, energy_weight=energy_weight, seed=run.seed, time_limit=time_limit, r=r, L=L,
                              K=K, d=d, enc_layers=layers, dec_layers=layers, box=box, margin=margin, resume=state,
                              checkpoint=lambda st: card.save(ckpt, st), checkpoint_every=checkpoint_every)
    bundle["frames_file_digest"] = card.frames_digest(x)
    card.save(output, bundle)
    run.wrote(output)
    ckpt.unlink(missing_ok=True)
    return {"system": sysm.name, "n_atoms": sysm.n_atoms, "n_free": info["n_free"], "train_frames": info["train_frames"],
            "val_frames": info["val_frames"], "val_nll": info["val_nll"], "box": info["box"], "steps_done": info["steps_done"],
            "seconds_train": round(info["seconds_train"], 3), "output": output}


def _estimate(run, sysm, model_path, frames_path, n_samples, estimator):
    from icmlkit.lib.fe import card

    bundle = card.load(run.input(model_path))
    x, u, d = _load_frames(run, frames_path, sysm)
    skip = bundle["n_frames_used"] if bundle.get("frames_file_digest") == card.frames_digest(x) else 0
    res = card.estimate(bundle, sysm, x, u, n_samples=n_samples, seed=run.seed, estimator=estimator,
                        skip_frames=skip, frames_name=frames_path)
    res["frames_skipped_as_training"] = skip
    res["seconds_md"] = float(d["seconds_md"]) if "seconds_md" in d else None
    res["energy_evals_md"] = int(d["energy_evals_md"]) if "energy_evals_md" in d else None
    res["seconds_train"] = bundle.get("info", {}).get("seconds_train")
    return res


estimator_options = [
    click.option("--samples", "n_samples", type=click.IntRange(min=10), default=2000, show_default=True,
                 help="Model samples M."),
    click.option("--estimator", type=click.Choice(["bar", "mbar"]), default="bar", show_default=True),
    click.option("--min-overlap", type=click.FloatRange(0, 1), default=0.03, show_default=True,
                 help="Refuse to report a free energy (exit 3) when pymbar's BAR overlap is below this."),
]


_est = option_group(estimator_options)


@cli.command(seed=False)
@click.argument("system")
@click.argument("model")
@click.argument("frames")
@env_option
@temp_option
@inpcrd_option
@_est
def estimate(run, system, model, frames, env, temperature, inpcrd, n_samples, estimator, min_overlap):
    """Free energy from a model and target frames: BAR/MBAR, both EXP directions, overlap, ESS.

    Frames of the file the model was trained on are skipped (the estimate uses the rest).
    Exits 3, with f_kT null, when the overlap is below --min-overlap.

    \b
    JSON keys: f_kT, f_err_kT (BAR standard error, kT), f_exp_forward_kT, f_exp_reverse_kT,
    f_exact_kT (analytic systems), error_vs_exact_kT, overlap, ess_forward, ess_reverse (fractions),
    n_model_samples, n_target_frames, energy_evals (target-energy calls of this estimate),
    energy_evals_md (from the frames file), seconds_md (null: `sample` reports it),
    seconds_train (from the model), seconds_estimate, frames_skipped_as_training, units, measure.
    Example:  estimate-fe estimate trap4 trap.pt trap.npz --json | jq '.f_kT, .overlap'
    """
    sysm = _system(run, system, env, temperature, inpcrd, _platform(run))
    res = _estimate(run, sysm, model, frames, n_samples, estimator)
    fx = sysm.f_exact() if sysm.kind == "analytic" else None
    out = {**res, "f_exact_kT": fx, "error_vs_exact_kT": None if fx is None else res["f_kT"] - fx,
           "units": "kT" + ("" if sysm.temperature is None else f" at {sysm.temperature} K")}
    _refuse(run, out, min_overlap)
    return out


def _refuse(run, out: dict, min_overlap: float) -> None:
    if not (out["overlap"] >= min_overlap):
        run.fail_check(f"BAR overlap {out['overlap']:.3g} is below --min-overlap {min_overlap}: the model's samples "
                       f"and the Boltzmann frames barely overlap (ESS forward {out['ess_forward']:.3g}, reverse "
                       f"{out['ess_reverse']:.3g}), so no free energy is reported; train longer or on more frames")
        for k in ("f_kT", "f_err_kT", "error_vs_exact_kT", "delta_g_kcal", "delta_g_err_kcal"):
            if k in out:
                out[k] = None


@cli.command()
@click.argument("system")
@click.option("--vacuum-model", default=None, help="Model trained on vacuum frames (else the whole pipeline runs).")
@click.option("--vacuum-frames", default=None)
@click.option("--solvent-model", default=None)
@click.option("--solvent-frames", default=None)
@click.option("--outdir", default=None, type=click.Path(file_okay=False),
              help="Pipeline mode: run folder for frames, models and summary.json.")
@temp_option
@inpcrd_option
@click.option("--frames", "n_frames", type=click.IntRange(min=20), default=2000, show_default=True,
              help="Pipeline mode: MD frames per environment (half train, half estimate).")
@click.option("--interval", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=1500, show_default=True)
@click.option("--stage2-steps", type=click.IntRange(min=0), default=300, show_default=True)
@_est
def solvation(run, system, vacuum_model, vacuum_frames, solvent_model, solvent_frames, outdir, temperature, inpcrd,
              n_frames, interval, steps, stage2_steps, n_samples, estimator, min_overlap):
    """Delta G(vacuum -> OBC2) of one molecule in kcal/mol: CARD in each environment, then the difference.

    Give the four files, or --outdir to run everything (MD, training, estimation) for both.

    \b
    JSON keys: delta_g_kcal, delta_g_err_kcal, f_kT and f_err_kT ([vacuum, obc2]), f_vacuum_kT, f_solvent_kT,
    overlap (the smaller), ess_forward, ess_reverse (the smaller of each), energy_evals,
    seconds_md, seconds_train, seconds_estimate, freesolv (expt/calc, when a FreeSolv id), units.
    Example:  estimate-fe solvation freesolv:mobley_1636752 --outdir runs/meoh --json
    """
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.fe import pipeline

    files = [vacuum_model, vacuum_frames, solvent_model, solvent_frames]
    plat = _platform(run)
    if any(files) and not all(files):
        raise UsageError("give all of --vacuum-model --vacuum-frames --solvent-model --solvent-frames, or none")
    if all(files):
        per = {}
        for env, m, f in (("vacuum", vacuum_model, vacuum_frames), ("obc2", solvent_model, solvent_frames)):
            sysm = _system(run, system, env, temperature, inpcrd, plat)
            r = _estimate(run, sysm, m, f, n_samples, estimator)
            per[env] = {**r, "seconds_md": r["seconds_md"] or 0.0, "seconds_train": r["seconds_train"] or 0.0,
                        "energy_evals_md": r["energy_evals_md"] or 0}
        out = pipeline.combine(per, temperature)
    else:
        if outdir is None:
            raise UsageError("pipeline mode needs --outdir (or give the four model/frames files)")
        with run.run_dir(outdir) as folder:
            out = pipeline.solvation(lambda env: _system(run, system, env, temperature, inpcrd, plat), folder,
                                     n_frames=n_frames, interval=interval, steps=steps, stage2_steps=stage2_steps,
                                     n_samples=n_samples, estimator=estimator, seed=run.seed)
        out["outdir"] = outdir
    if system.startswith("freesolv:"):
        from icmlkit.lib.fe.mm import freesolv_entry

        out["freesolv"] = freesolv_entry(system.split(":", 1)[1])
    _refuse(run, out, min_overlap)
    return out


@cli.command()
@click.argument("system")
@temp_option
@inpcrd_option
@click.option("--windows", type=click.IntRange(min=2), default=11, show_default=True)
@click.option("--frames-per-window", type=click.IntRange(min=10), default=500, show_default=True)
@click.option("--interval", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--equil", type=click.IntRange(min=0), default=5000, show_default=True)
@click.option("--timestep", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True)
@click.option("--min-overlap", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Exit 3 when the smallest neighbour overlap of the MBAR matrix is below this.")
def baseline(run, system, temperature, inpcrd, windows, frames_per_window, interval, equil, timestep, min_overlap):
    """The classical baseline: lambda-window MD (U_vac + lambda U_GB) and MBAR, Delta G in kcal/mol.

    \b
    JSON keys: delta_g_kcal, delta_g_err_kcal, f_kT (per window), overlap (smallest neighbour),
    n_effective, energy_evals, seconds_md, seconds_estimate, windows, units.
    Example:  estimate-fe baseline freesolv:mobley_1636752 --windows 11 --frames-per-window 400 --json
    """
    from icmlkit.lib.fe.mm import freesolv_entry, lambda_window_mbar

    sysm = _system(run, system, "obc2", temperature, inpcrd, _platform(run))
    out = lambda_window_mbar(sysm.prmtop, sysm.inpcrd, temperature=temperature, windows=windows,
                             frames_per_window=frames_per_window, interval=interval, equil=equil,
                             timestep_fs=timestep, seed=run.seed, platform=sysm.platform)
    out["units"] = "kcal/mol (delta_g), kT (f_kT)"
    if system.startswith("freesolv:"):
        out["freesolv"] = freesolv_entry(system.split(":", 1)[1])
    if out["overlap"] < min_overlap:
        run.fail_check(f"smallest neighbour overlap {out['overlap']:.3g} is below --min-overlap {min_overlap}")
    return out


@cli.command(seed=False)
@click.option("--name", default=None, help="Write this built-in system's JSON spec to -o.")
@output_option("With --name: the spec file (.json).")
def systems(run, name, output):
    """List the built-in analytic systems with their exact free energies (kT).

    \b
    JSON keys: systems (name, kind, n_atoms, f_exact_kT, how, spec); with --name and -o: output.
    Example:  estimate-fe systems --name triatomic -o tri.json
    """
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.core.io import write_json
    from icmlkit.lib.fe.systems import BUILTIN, builtin

    how = {"harmonic-trap": "closed form", "double-well": "1-D quadrature", "triatomic": "3-D quadrature (x 8 pi^2, per V)",
           "lj-trap": "none (no closed form)"}
    rows = []
    for n, spec in BUILTIN.items():
        s = builtin(n)
        rows.append({"name": n, "kind": spec["kind"], "n_atoms": s.n_atoms, "f_exact_kT": s.f_exact(),
                     "how": how[spec["kind"]], "spec": spec})
    if name is not None:
        if output is None:
            raise UsageError("--name needs -o FILE.json")
        if name not in BUILTIN:
            raise UsageError(f"unknown system {name!r}; choose from {sorted(BUILTIN)}")
        run.output(output)
        write_json(output, {**BUILTIN[name], "name": name})
        run.wrote(output)
        return {"output": output, "name": name}
    return {"systems": rows}


@cli.command()
@click.option("--outdir", default="outputs/demo/estimate-fe", show_default=True, type=click.Path(file_okay=False),
              help="Run directory (built as <outdir>.partial).")
@click.option("--steps", type=click.IntRange(min=1), default=400, show_default=True,
              help="Stage I training steps (Stage II adds a quarter).")
def demo(run, outdir, steps):
    """CARD on the harmonic triatomic (exact F by quadrature) in about a minute.

    Writes frames, the model, summary.json and manifest.json into OUTDIR.
    JSON keys: headline, outdir, f_kT, f_exact_kT, f_err_kT, overlap, ess_forward, ess_reverse.
    """
    from icmlkit.lib.fe.demo import run_demo

    with run.run_dir(outdir) as folder:
        summary = run_demo(folder, seed=run.seed, steps=steps)
    return {**summary, "outdir": outdir}


main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
