"""estimate-fe: absolute and solvation free energies with CARD (radix-decomposed autoregressive proposal + BAR)."""
from __future__ import annotations

import click

from icmlkit.cli._common import (ToolGroup, add_demo, checkpoint_options, config_options, make_main, option_group,
                                 output_option)
from icmlkit.lib.estimate_fe.config import (BaselineConfig, EstimateConfig, MultiTrainConfig, SampleConfig, SolvationConfig,
                                   TrainConfig, TransferConfig)

TOOL = "estimate-fe"
RECONSTRUCTED = (
    "Reconstructed (not confirmed by the paper text): the two-stream wiring of the geometry-aware "
    "decoder, the Stage II weighting, and the frame gauge (atom 1 at the origin, atom 2 on +x, atom 3 "
    "in the xy-plane, Jacobian x2^2*y3, F per volume V) used instead of the paper's principal-axes "
    "gauge, whose measure the paper leaves open; and --coords internal (bond length, angle and dihedral "
    "of each atom relative to its parent in the bond tree, boxes from the force field), not in the paper."
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
.inpcrd beside it or --inpcrd), a .pdb (OpenMM's amber14 force field), freesolv:<compound id>
(read from ../shared/data/freesolv) or alanine-dipeptide (built-in ACE-ALA-NME, amber14).
Molecules run in OpenMM (--env vacuum or obc2 implicit solvent) on the platform of --device
(CPU, or CUDA on a CUDA device); CARD and the analytic energies run on --device.

\b
Examples:
  estimate-fe systems --json
  estimate-fe sample trap4 --frames 4000 -o trap.npz
  estimate-fe train trap4 trap.npz -o trap.pt --steps 1500
  torchrun --nproc_per_node 2 --standalone $(which estimate-fe) train trap4 trap.npz -o trap.pt --device cpu
  estimate-fe estimate trap4 trap.pt trap.npz --json | jq '.f_kT, .f_exact_kT, .overlap'
  estimate-fe sample freesolv:mobley_1636752 --env obc2 --frames 2000 -o meoh.obc2.npz
  estimate-fe solvation freesolv:mobley_1636752 --outdir runs/meoh --json | jq .delta_g_kcal
  estimate-fe baseline freesolv:mobley_1636752 --frames-per-window 400 --json
  estimate-fe baseline freesolv:mobley_1636752 --method endstate-bar --frames-per-window 2000 --json
  estimate-fe baseline freesolv:mobley_1636752 --method vertical-gap --json""",
)



def _system(run, spec: str, env: str = "vacuum", temperature: float = 298.15, inpcrd: str | None = None,
            on_device: bool = True, constraints: str = "none", needs_molecule: str | None = None):
    """The SYSTEM argument on the run's device (else the CPU), its files recorded as inputs.

    --env, --temperature and --inpcrd given on the command line are passed on as ``given``: an
    analytic system refuses them (exit 2) instead of ignoring them; their defaults pass. (An exported
    ICMLKIT_ESTIMATE_FE_* variable is not checked, like ICMLKIT_SEED: it applies to every command of
    a job and the manifest records it with its source.)"""
    from click.core import ParameterSource

    from icmlkit.lib.estimate_fe.api import open_system

    ctx = click.get_current_context()
    given = [k for k in ("env", "temperature", "inpcrd") if ctx.get_parameter_source(k) == ParameterSource.COMMANDLINE]
    strict = on_device and (run.device_spec or "").startswith("cuda")
    sysm = open_system(spec, env=env, temperature=temperature, inpcrd=inpcrd,
                       device=run.device if on_device else "cpu", strict_device=strict, constraints=constraints,
                       given=given, needs_molecule=needs_molecule)
    for path in sysm.files:
        run.input(path)
    return sysm


def _frames(run, path, system):
    from icmlkit.lib.estimate_fe.api import load_frames

    return load_frames(run.input(path), system)


def _bundle(run, path):
    from icmlkit.lib.estimate_fe import card

    return card.load(run.input(path))


env_option = click.option("--env", type=click.Choice(["vacuum", "obc2"]), default="vacuum", show_default=True,
                          help="Molecules: vacuum or OBC2 implicit solvent (an analytic system refuses it).")
temp_option = click.option("--temperature", type=click.FloatRange(min=0, min_open=True), default=298.15,
                           show_default=True, help="Kelvin (molecules; an analytic system, in kT, refuses it).")
inpcrd_option = click.option("--inpcrd", default=None, help="Coordinates for a .prmtop (default: beside it).")
constraints_option = click.option(
    "--constraints", type=click.Choice(["none", "hbonds"]), default="none", show_default=True,
    help="Molecules: hbonds holds every bond to a hydrogen at its force-field length in the MD, the energies and "
         "the baselines (reconstructed, issue 28; models need --coords internal). Frames, models and estimates must "
         "all use the same setting.")
_molecule_options = option_group([inpcrd_option, constraints_option])
_system_options = option_group([env_option, temp_option, _molecule_options])


@cli.command(device=True)
@click.argument("system")
@output_option("Write the frames (x in Angstrom, u = beta U, z, temperature).", suffixes=(".npz",), stdout=False,
               required=True)
@_system_options
@config_options(SampleConfig)
def sample(run, system, output, env, temperature, inpcrd, constraints, cfg):
    """Boltzmann frames of a system: Langevin MD (OpenMM) or exact/MALA draws (analytic).

    \b
    JSON keys: system, env, n_frames, n_atoms, u_mean, energy_evals, seconds_md, openmm_platform
    (null for analytic systems), output.
    Example:  estimate-fe sample freesolv:mobley_1636752 --env obc2 --frames 2000 -o meoh.obc2.npz
    """
    from icmlkit.lib.core.io import write_npz
    from icmlkit.lib.estimate_fe.api import sample as sample_frames

    run.output(output)
    result = sample_frames(cfg, _system(run, system, env, temperature, inpcrd, constraints=constraints), seed=run.seed)
    run.save(output, lambda path: write_npz(path, **result.arrays))
    return {**result.summary, "output": output}


@cli.command(device=True)
@click.argument("system")
@click.argument("frames")
@output_option("Write the model (loaded with weights_only=True).", suffixes=(".pt",), stdout=False, required=True)
@_system_options
@config_options(TrainConfig)
@checkpoint_options()
def train(run, system, frames, output, env, temperature, inpcrd, constraints, cfg, checkpoint_every, resume):
    """Fit CARD to frames: Stage I (NLL), then Stage II (NLL + centred energy matching).

    A checkpoint OUTPUT.ckpt.pt is kept while training (every --checkpoint-every steps); after an
    interruption, the same command with --resume continues from it to the same model file.
    Data-parallel under torchrun (gloo on CPU, NCCL on CUDA): every process draws the same global
    batch of --batch frames and takes its share; the gradients are averaged, so the weights equal
    those of one process with the same --batch. Only rank 0 writes.

    \b
    JSON keys: system, n_atoms, n_free, train_frames, val_frames, val_nll (nats per frame, held-out 10 %),
    box, steps_done, seconds_train, energy_evals_train (Stage III energy calls), device, world_size, output.
    Example:  estimate-fe train freesolv:mobley_1636752 meoh.vac.npz -o meoh.vac.pt --steps 1500
    """
    from icmlkit.lib.estimate_fe import card
    from icmlkit.lib.estimate_fe.api import train as train_model

    ck = run.checkpointer(output, checkpoint_every, resume)
    run.output(output)
    sysm = _system(run, system, env, temperature, inpcrd, constraints=constraints)
    fr = _frames(run, frames, sysm)
    result = train_model(cfg, sysm, fr, seed=run.seed, device=run.device, dist=run.dist, checkpointer=ck)
    run.save(output, card.save, result.bundle)
    ck.done()
    return {**result.summary, "output": output}


@cli.command(device=True)
@click.argument("system")
@click.argument("model")
@click.argument("frames")
@_system_options
@config_options(EstimateConfig)
def estimate(run, system, model, frames, env, temperature, inpcrd, constraints, cfg):
    """Free energy from a model and target frames: BAR/MBAR, both EXP directions, overlap, ESS.

    Frames of the file the model was trained on are skipped (the estimate uses the rest).
    The frames must be of SYSTEM in --env: the system, environment, temperature and force-field
    hash the file records are compared with them, and u is recomputed on 8 frames (tolerance
    0.01 kT + 1e-5 |u|); a mismatch exits 2 naming the file and what differs. Files written
    before the record existed get a warning and the energy check only.
    Exits 3, with f_kT null, when the overlap is below --min-overlap.

    \b
    JSON keys: f_kT, f_err_kT (BAR standard error, kT), f_exp_forward_kT, f_exp_reverse_kT,
    f_exact_kT (analytic systems), error_vs_exact_kT, overlap, ess_forward, ess_reverse (fractions),
    n_model_samples, n_target_frames, nonfinite_model_energies, energy_evals (target-energy calls
    of this estimate), energy_evals_md (from the frames file), seconds_md (null: `sample` reports it),
    seconds_train (null: `train` reports it), seconds_estimate, seconds_energy, seconds_sampling,
    estimator, measure, frames_skipped_as_training, frames_check (record: whether the file had the
    system/env/force-field record; energies_checked, max_abs_du_kT, energy_evals), units, openmm_platform.
    Example:  estimate-fe estimate trap4 trap.pt trap.npz --json | jq '.f_kT, .overlap'
    """
    from icmlkit.lib.estimate_fe.api import estimate as estimate_f

    sysm = _system(run, system, env, temperature, inpcrd, constraints=constraints)
    bundle = _bundle(run, model)
    result = estimate_f(cfg, sysm, bundle, _frames(run, frames, sysm), seed=run.seed, device=run.device)
    if result.check:
        run.fail_check(result.check)
    return result.summary


@cli.command(device=True)
@click.argument("system")
@click.option("--vacuum-model", default=None, help="Model trained on vacuum frames (else the whole pipeline runs).")
@click.option("--vacuum-frames", default=None, help="Vacuum frames (.npz) for the estimate.")
@click.option("--solvent-model", default=None, help="Model trained on OBC2 frames.")
@click.option("--solvent-frames", default=None, help="OBC2 frames (.npz) for the estimate.")
@output_option("Pipeline mode: run folder for frames, models and summary.json.", directory=True,
               flags=("--outdir",), name="outdir")
@temp_option
@_molecule_options
@config_options(SolvationConfig)
def solvation(run, system, vacuum_model, vacuum_frames, solvent_model, solvent_frames, outdir, temperature, inpcrd,
              constraints, cfg):
    """Delta G(vacuum -> OBC2) of one molecule in kcal/mol: CARD in each environment, then the difference.

    Give the four files, or --outdir to run everything (MD, training, estimation) for both.

    \b
    JSON keys: delta_g_kcal, delta_g_err_kcal, f_kT and f_err_kT ([vacuum, obc2]), f_vacuum_kT, f_solvent_kT,
    delta_g_exp_forward_kcal, overlap (the smaller), ess_forward, ess_reverse (the smaller of each),
    energy_evals, energy_evals_estimate, seconds_md, seconds_train, seconds_estimate, temperature,
    units, per_environment, freesolv (expt/calc, when a FreeSolv id), outdir and endstate_bar
    (pipeline mode: end-state BAR on the same frames, the keys of `baseline --method endstate-bar`).
    Example:  estimate-fe solvation freesolv:mobley_1636752 --outdir runs/meoh --json
    """
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.estimate_fe.api import solvation_from_files, solvation_pipeline

    files = {"--vacuum-model": vacuum_model, "--vacuum-frames": vacuum_frames, "--solvent-model": solvent_model,
             "--solvent-frames": solvent_frames}
    if any(files.values()) and not all(files.values()):
        missing = [k for k, v in files.items() if not v]
        raise UsageError(f"give all of --vacuum-model --vacuum-frames --solvent-model --solvent-frames, or none "
                         f"(missing {' '.join(missing)})")
    if all(files.values()):
        if outdir is not None:
            raise UsageError("--outdir is for pipeline mode; with the four model/frames files leave it out")
        systems = {env: _system(run, system, env, temperature, inpcrd, constraints=constraints)
                   for env in ("vacuum", "obc2")}
        bundles = {"vacuum": _bundle(run, vacuum_model), "obc2": _bundle(run, solvent_model)}
        frames = {"vacuum": _frames(run, vacuum_frames, systems["vacuum"]),
                  "obc2": _frames(run, solvent_frames, systems["obc2"])}
        result = solvation_from_files(cfg, system, systems, bundles, frames, temperature=temperature, seed=run.seed,
                                      device=run.device)
        out = result.summary
    else:
        if outdir is None:
            raise UsageError("pipeline mode needs --outdir (or give the four model/frames files)")
        if constraints != "none":
            raise UsageError("pipeline mode trains Cartesian CARD models; with --constraints hbonds give the four files "
                             "(sample and train --coords internal with the same --constraints)")
        # bad SYSTEM fails before the run folder exists (an analytic one: give the four files)
        _system(run, system, "vacuum", temperature, inpcrd, needs_molecule="solvation --outdir")
        with run.run_dir(outdir) as folder:
            result = solvation_pipeline(cfg, system, lambda env: _system(run, system, env, temperature, inpcrd),
                                        folder, seed=run.seed, device=run.device)
        out = {**result.summary, "outdir": outdir}
    if result.check:
        run.fail_check(result.check)
    return out


@cli.command(device=True)
@click.argument("system")
@click.option("--vacuum-frames", default=None, help="endstate-bar: vacuum frames (.npz from `sample --env vacuum`) "
              "instead of new MD.")
@click.option("--solvent-frames", default=None, help="endstate-bar: OBC2 frames (.npz from `sample --env obc2`).")
@temp_option
@_molecule_options
@config_options(BaselineConfig)
def baseline(run, system, vacuum_frames, solvent_frames, temperature, inpcrd, constraints, cfg):
    """The classical baselines for Delta G(vacuum -> OBC2) in kcal/mol, no model.

    \b
    --method lambda-mbar: lambda-window MD (U_vac + lambda U_GB) and MBAR.
    --method endstate-bar: MD of the two end states only (the seed streams and settings of
    `solvation --outdir`, so the same frames CARD trains on), or the frames given with
    --vacuum-frames/--solvent-frames; each decorrelated frame's reduced energy in the other state;
    BAR in log space. The cheap baseline to run first; CARD at equal MD is compared with it.
    --method vertical-gap: U_obc2 - U_vac of the input structure minimised in vacuum, 2 energy
    evaluations, no MD (the baseline `transfer` reports as vertical_gap_kcal; the cheapest one,
    to compare every estimate with).
    --device chooses OpenMM's platform (CUDA on a CUDA device); no torch work is done here.

    \b
    JSON keys: method, delta_g_kcal, delta_g_err_kcal, overlap (lambda-mbar: smallest neighbour;
    endstate-bar: BAR overlap), energy_evals, seconds_md, seconds_estimate, units, openmm_platform,
    freesolv (when a FreeSolv id); lambda-mbar also f_kT (per window), overlap_neighbours,
    n_effective, windows, frames_per_window, interval, md_steps; endstate-bar also
    delta_g_exp_forward_kcal, delta_g_exp_reverse_kcal, ess_forward, ess_reverse, n_effective,
    n_frames, energy_evals_md, energy_evals_estimate, frames_from; vertical-gap also conformer
    (overlap and delta_g_err_kcal null).
    Example:  estimate-fe baseline freesolv:mobley_1636752 --method endstate-bar --frames-per-window 2000 --json
    """
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.estimate_fe.api import baseline as run_baseline

    if bool(vacuum_frames) != bool(solvent_frames):
        raise UsageError("give both --vacuum-frames and --solvent-frames, or neither")
    sysm = _system(run, system, "obc2", temperature, inpcrd, constraints=constraints)
    frames = None
    if vacuum_frames:  # each file is checked against its own environment
        vac = sysm.with_env("vacuum") if sysm.kind == "openmm" else sysm
        frames = {"vacuum": _frames(run, vacuum_frames, vac), "obc2": _frames(run, solvent_frames, sysm)}
    result = run_baseline(cfg, system, sysm, temperature=temperature, seed=run.seed, frames=frames)
    if result.check:
        run.fail_check(result.check)
    return result.summary


@cli.command("train-multi", device=True)
@click.argument("molecules", nargs=-1, required=True)
@output_option("Write the multi-molecule model (loaded with weights_only=True).", suffixes=(".pt",), stdout=False,
               required=True)
@env_option
@temp_option
@constraints_option
@config_options(MultiTrainConfig)
@checkpoint_options()
def train_multi(run, molecules, output, env, temperature, constraints, cfg, checkpoint_every, resume):
    """One CARD model for many molecules in one environment (the paper's transferable model).

    Reconstructed at small scale (the paper trains on 40k molecules): each MOLECULE (freesolv:<id>
    or an AMBER .prmtop) gets --md-frames MD frames and an internal-coordinate chart from its
    minimised input structure; Stage I trains the shared network one molecule per step. Train one
    model per environment (--env vacuum and --env obc2), then `transfer` estimates molecules neither
    saw. A checkpoint OUTPUT.ckpt.pt is kept while training (--checkpoint-every steps); --resume
    continues from it. One process (not data-parallel under torchrun).

    \b
    JSON keys: env, molecules, seconds_md, energy_evals_md, seconds_train, steps_done,
    final_nll_per_coord, frames_per_molecule, output.
    Example:  estimate-fe train-multi freesolv:mobley_1636752 freesolv:mobley_525934 --env obc2 -o multi.obc2.pt
    """
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.estimate_fe import card
    from icmlkit.lib.estimate_fe.transfer import fit

    if run.dist.active:
        raise UsageError("train-multi runs in one process (not under torchrun)")
    ck = run.checkpointer(output, checkpoint_every, resume)
    run.output(output)
    systems = [_system(run, m, env, temperature, constraints=constraints, needs_molecule="train-multi") for m in molecules]
    bundle, summary = fit(systems, md_frames=cfg.md_frames, md_interval=cfg.md_interval, md_equil=cfg.md_equil,
                          seed=run.seed, checkpointer=ck, device=run.device, **cfg.train_kwargs())
    run.save(output, card.save, bundle)
    ck.done()
    return {**summary, "output": output}


@cli.command(device=False)
@click.argument("molecule")
@click.option("--vacuum-model", required=True, help="`train-multi --env vacuum` model.")
@click.option("--obc2-model", required=True, help="`train-multi --env obc2` model.")
@temp_option
@_molecule_options
@config_options(TransferConfig)
def transfer(run, molecule, vacuum_model, obc2_model, temperature, inpcrd, constraints, cfg):
    """Delta G(vacuum -> OBC2) in kcal/mol of a molecule the models never saw, with no MD of it.

    \b
    delta_g_independent_kcal: the paper's route, F of each environment from its own model's samples
    (EXP forward), then the difference. delta_g_paired_kcal (reconstructed, not in the paper): both
    models' samples scored in both environments, each partition function estimated on the same
    pooled samples, so the proposal's errors largely cancel (twice the energy evaluations).
    vertical_gap_kcal: the cheapest baseline, U_obc2 - U_vac at the vacuum-minimised conformer
    (2 evaluations); compare with it. 95 % bootstrap intervals over the samples. The ESS says how
    far to trust a value; --min-ess turns a low one into exit 3. Runs on the CPU.

    \b
    JSON keys: molecule, n_atoms, n_samples, delta_g_independent_kcal, ci_independent_kcal,
    delta_g_paired_kcal, ci_paired_kcal, vertical_gap_kcal, ess_forward (model -> environment ->
    fraction), energy_evals_independent, energy_evals_paired, seconds, seen_in_training.
    Example:  estimate-fe transfer freesolv:mobley_4434915 --vacuum-model multi.vac.pt --obc2-model multi.obc2.pt --json
    """
    from icmlkit.lib.core.io import read_torch
    from icmlkit.lib.estimate_fe.transfer import FORMAT, hydration

    bundles = {env: read_torch(run.input(path), "multi-molecule CARD model", FORMAT)
               for env, path in (("vacuum", vacuum_model), ("obc2", obc2_model))}
    systems = {env: _system(run, molecule, env, temperature, inpcrd, on_device=False, constraints=constraints,
                            needs_molecule="transfer")
               for env in ("vacuum", "obc2")}
    out = hydration(bundles, systems, n_samples=cfg.samples, seed=run.seed)
    for k in ("boot_independent_kcal", "boot_paired_kcal"):
        out.pop(k)
    low = min(out["ess_forward"][e][e] for e in ("vacuum", "obc2"))
    if low < cfg.min_ess:
        run.fail_check(f"forward ESS {low:.4f} is below --min-ess {cfg.min_ess}")
    return out


@cli.command(seed=False)
@click.option("--name", default=None, help="Write this built-in system's JSON spec to -o.")
@output_option("With --name: the spec file.", suffixes=(".json",))
def systems(run, name, output):
    """List the built-in analytic systems with their exact free energies (kT).

    These are the tool's known-answer generators (`sample` draws the Boltzmann frames of any system).

    \b
    JSON keys: systems (name, kind, n_atoms, f_exact_kT, how, spec); with --name and -o: output, name.
    Example:  estimate-fe systems --name triatomic -o tri.json
    """
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.core.io import write_json
    from icmlkit.lib.estimate_fe.api import systems_table
    from icmlkit.lib.estimate_fe.systems import BUILTIN

    if name is None:
        if output is not None:
            raise UsageError("-o needs --name (the built-in system whose spec to write)")
        return {"systems": systems_table()}
    if output is None:
        raise UsageError("--name needs -o FILE.json")
    if name not in BUILTIN:
        raise click.BadParameter(f"unknown system {name!r}; choose from {', '.join(sorted(BUILTIN))}",
                                 param_hint="--name")
    run.output(output)
    run.save(output, write_json, {**BUILTIN[name], "name": name})
    return {"output": output, "name": name}


add_demo(cli, "icmlkit.lib.estimate_fe.demo:run_demo", device=True,
         doc="""CARD on the harmonic triatomic (exact F by quadrature) within the demo budget (60 s of CPU).

    Writes frames, the model, summary.json and manifest.json into OUTDIR.

    \b
    JSON keys: headline, f_kT, f_exact_kT, f_err_kT, error_vs_exact_kT, overlap, ess_forward,
    ess_reverse, seconds_train, seconds_estimate, units, outdir.
    Example:  estimate-fe demo --outdir runs/demo --json | jq .headline
    """,
         options=[click.option("--steps", type=click.IntRange(min=1), default=200, show_default=True,
                               help="Stage I training steps (Stage II adds a quarter; 200 keeps the demo within "
                                    "its budget, the benchmark trains longer).")])


main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
