"""train-control: TD3 / SAC with Action Manifold Smoothing targets and Lipschitz pathway diagnostics."""
from __future__ import annotations

import click

from icmlkit.cli._common import ToolGroup, add_demo, checkpoint_options, config_options, make_main, output_option
from icmlkit.lib.train_control.config import (CollectConfig, CriticStudyConfig, DiagnoseConfig, EvalConfig,
                                        TrainConfig)

TOOL = "train-control"
RECONSTRUCTED = (
    "RECONSTRUCTED (only the paper's abstract is known): the AMS target's form (QR-orthonormal sign-fixed "
    "directions, antithetic +-rho neighbours clipped after the shift, the mean of min_i Q_targ over the 2K "
    "neighbours; K=8, rho=0.15; per-element redraws; centre weight, TD3 noise on top and i.i.d. directions as "
    "options), the SAC variant, local manifold supervision (--lambda-nb, off), the Lipschitz-constrained critic "
    "(--critic-constraint, off), every diagnostic's definition (L1-L4, the finite-difference HVP scale, the "
    "pathway gain as their product), the LQR action bound 2.0 and horizon 300. The paper's 1M-step dog-run "
    "claim (> 400 return) is NOT reproduced on CPU."
)
_CKPT = {"default_map": {"checkpoint_every": 10000}, "help_option_names": ["-h", "--help"],
         "max_content_width": 100}

cli = ToolGroup(
    TOOL,
    help=f"""TD3 and SAC with Action Manifold Smoothing (AMS) TD targets and Lipschitz diagnostics.

\b
AMS (Lin, ICML 2026) replaces the point-wise TD target min_i Q_targ,i(s', a') by an
average over an orthogonally sampled neighbourhood of a' (implicit Laplacian smoothing of the
critic in the action), and reads instability as four multiplied gains: L1 actor Jacobian,
L2 dynamics sensitivity, L3 Q curvature in the action, L4 TD-target sensitivity.
Actions are always rescaled to [-1, 1].

{RECONSTRUCTED}

\b
ENV: any registered Gymnasium id with a Box action space (Pendulum-v1, Humanoid-v5, Ant-v5,
your own), or dmc:<domain>-<task> (dmc:dog-run) and dmc:lqr-<n> (an n-actuator LQR with its
exact optimum) with the optional extra: pip install 'icmlkit[train-control]'.

\b
Examples:
  train-control train Pendulum-v1 --algo ams-td3 --total-steps 20000 --learning-starts 1000 -o runs/pend
  train-control train dmc:lqr-38 --algo ams-sac --total-steps 50000 -o runs/lqr --json
  train-control train Pendulum-v1 --algo ams-td3 --total-steps 20000 -o runs/pend --resume
  train-control eval runs/pend Pendulum-v1 --episodes 10 --json
  train-control diagnose runs/pend --json | jq .pathway_gain
  train-control collect Humanoid-v5 --steps 50000 -o humanoid.npz
  train-control critic-study humanoid.npz --updates 20000 -o study.csv --json""",
)


@cli.command(device=True, context_settings=_CKPT)
@click.argument("env")
@output_option("Run directory (built as OUTPUT.partial): actor/critic .safetensors, config.json, eval.csv, "
               "diagnostics.csv, episodes.csv, summary.json, manifest.json.", directory=True, required=True)
@checkpoint_options("environment")
@config_options(TrainConfig)
def train(run, env, output, checkpoint_every, resume, cfg):
    """Train td3, sac, ams-td3 or ams-sac on ENV and write a run directory.

    One update per environment step after --learning-starts (uniform random actions before).
    The AMS target and every diagnostic are RECONSTRUCTED (see `train-control --help`).
    Checkpoints OUTPUT.ckpt.pt (networks, targets, optimisers, replay buffer, random streams; default
    every 10000 steps) are removed when the run ends; --resume continues one to the same actor,
    critic and CSV bytes as an uninterrupted run (with the same process count).

    \b
    Under torchrun (gloo on CPU, NCCL on CUDA) each process steps its own copy of ENV (its own
    episode seeds and exploration noise; --rank-envs replicated: rank 0's) into its own replay
    buffer; every step is one update on a global minibatch of --batch rows (--batch / N from each
    process's buffer) with the gradients averaged, so the networks stay identical on every process.
    --total-steps counts each process's steps (N x steps transitions); steps_per_s counts all.
    Rank 0 evaluates, diagnoses and writes the run directory and the checkpoints.

    \b
    JSON keys: env, algo, seed, steps, return_mean, return_std (final deterministic evaluation),
    l1, l2, l3_spectral, l3_trace, l4, pathway_gain (the last diagnostics), steps_per_s, update_ms,
    diverged, lqr_optimal_fraction (dmc:lqr-* only, else null: mean return / the LQR-optimal policy's
    on the same episodes), lqr_normalised ((R - R_zero) / (R_opt - R_zero), R_zero the zero-control
    return), episodes, resumed_from, world_size, env_steps (world_size x steps), rank_param_spread
    (torchrun: the largest parameter difference between processes, 0.0 when in sync; else null),
    ams_k_used (the K drawn: capped at 1 for 1-D actions, where K > 1 repeats a' +- rho; null
    without AMS), output.
    Examples:
      train-control train Pendulum-v1 --algo td3 --total-steps 2000 --learning-starts 500 -o runs/td3 --json
      train-control train Humanoid-v5 --algo ams-td3 --ams-k 8 --ams-rho 0.15 --total-steps 100000 -o runs/h
      torchrun --nproc_per_node 2 --standalone $(which train-control) train Pendulum-v1 --algo ams-td3 -o runs/p2
    """
    from icmlkit.lib.train_control.envs import make_env
    from icmlkit.lib.train_control.train import train as train_agent
    from icmlkit.lib.train_control.train import write_run

    run.output(output)
    dist = run.dist
    if dist.active:
        dist.split(cfg.batch)  # --batch must split evenly over the processes
    e = make_env(env, cfg.max_episode_steps)  # a bad id fails here, before any file exists
    if cfg.prior_basis:
        run.input(cfg.prior_basis)
    ck = run.checkpointer(output, checkpoint_every, resume)
    res = train_agent(env, cfg, seed=run.seed, device=run.device, checkpointer=ck, env=e, dist=dist)
    if run.is_main:
        with run.run_dir(output) as folder:
            write_run(folder, res)
    ck.done()
    return {**res.summary, "output": output}


@cli.command(name="eval", device=True)
@click.argument("run_dir", metavar="RUN")
@click.argument("env")
@output_option("Per-episode returns (CSV or JSON Lines).", suffixes=(".csv", ".jsonl"))
@config_options(EvalConfig)
def eval_(run, run_dir, env, output, cfg):
    """Evaluate a run's deterministic actor on ENV for a fixed number of episodes.

    Episode seeds come from --seed (the same seeds for every run). On dmc:lqr-* the LQR-optimal
    policy u = K x (dm_control's lqr_solver) runs on the same episodes: lqr_optimal_fraction is
    the ratio of the mean returns.

    \b
    JSON keys: env, episodes, return_mean, return_std, lqr_optimal_fraction, lqr_optimal_return,
    lqr_normalised ((R - R_zero) / (R_opt - R_zero), 0 = zero control, 1 = optimal), algo.
    Example:  train-control eval runs/pend Pendulum-v1 --episodes 10 --json
    """
    from icmlkit.lib.train_control.train import evaluate_run, load_run
    from icmlkit.lib.core.io import write_rows

    run.output(output)
    agent, rc = load_run(run.input(run_dir), device=run.device)
    res = evaluate_run(agent, rc, env, cfg, seed=run.seed)
    if output:
        run.save(output, write_rows, res.returns)
    return res.summary


@cli.command(device=True)
@click.argument("run_dir", metavar="RUN")
@click.option("--env", "env", default=None, help="Environment (default: the run's own; another one is "
              "refused, as in eval).")
@output_option("The diagnostics as one JSON object.", suffixes=(".json",))
@config_options(DiagnoseConfig)
def diagnose(run, run_dir, env, output, cfg):
    """The Lipschitz pathway gains L1-L4 of a run (RECONSTRUCTED definitions).

    Validation transitions are collected fresh with the run's actor (+ N(0, 0.1^2) noise); L2 by
    finite differences from saved simulator states (full restore before every probe); L3 by power
    iteration / Hutchinson on finite-difference HVPs (--hvp-step 0: exact double backward).

    \b
    JSON keys: env, algo, l1, l2, l3_spectral, l3_trace, grad_norm, l4, l4_std, td_std, td_loss,
    drift (null: a run stores no target networks), pathway_gain, transitions.
    Example:  train-control diagnose runs/pend --json
    """
    from icmlkit.lib.train_control.train import diagnose_run, load_run
    from icmlkit.lib.core.io import write_json

    run.output(output)
    agent, rc = load_run(run.input(run_dir), device=run.device)
    res = diagnose_run(agent, rc, cfg, seed=run.seed, env_spec=env)
    if output:
        run.save(output, write_json, res.summary)
    return res.summary


@cli.command()
@click.argument("env")
@output_option("The replay buffer (.npz: obs, act in [-1,1], rew, next_obs, done, meta).", suffixes=(".npz",),
               stdout=False, required=True)
@click.option("--actor", "actor_run", default=None, help="A run directory whose actor (plus --noise) acts; "
              "default: uniform random actions.")
@config_options(CollectConfig)
def collect(run, env, output, actor_run, cfg):
    """Collect transitions from ENV into a replay .npz (random or a run's actor plus noise).

    \b
    JSON keys: env, steps, episodes, return_mean, obs_dim, act_dim, policy, output.
    Example:  train-control collect Humanoid-v5 --steps 50000 -o humanoid.npz --json
    """
    from icmlkit.lib.train_control.envs import make_env
    from icmlkit.lib.train_control.priors import with_prior
    from icmlkit.lib.train_control.replay import collect as collect_buffer
    from icmlkit.lib.train_control.replay import write_replay
    from icmlkit.lib.train_control.train import check_run_env, load_run, run_prior

    run.output(output)
    actor = None
    e = make_env(env, cfg.max_episode_steps)
    if actor_run:
        agent, rc = load_run(run.input(actor_run))
        e = with_prior(e, run_prior(rc))  # a run with an action prior acts (and is stored) in its latent z
        check_run_env(agent, rc, e)  # the run's own environment only (and its dims)
        actor = agent.actor.mean_action
    res = collect_buffer(e, cfg, run.seed, actor=actor)
    run.save(output, write_replay, res)
    return {**res.summary, "output": output}


@cli.command(name="critic-study", device=True)
@click.argument("buffer")
@output_option("Diagnostics rows of both learners (CSV or JSON Lines).", suffixes=(".csv", ".jsonl"))
@config_options(CriticStudyConfig)
def critic_study(run, buffer, output, cfg):
    """Point vs AMS TD3 learners on one fixed replay buffer: L3, L4 and validation TD loss.

    Same initial weights and minibatch order for both; a held-out split (--val-fraction) for the
    validation TD loss and the diagnostics. The protocol is RECONSTRUCTED (method sheet (a)).

    \b
    JSON keys: transitions, validation, updates, ams_k, ams_k_used, ams_rho; point_* and ams_* for l1, l3_spectral,
    l3_trace, l3_trace_abs (mean per-state |trace|), grad_norm, l4, l4_std, td_std, val_td_loss (own target), val_td_loss_point (the noiseless
    point target), update_ms, diverged, and where AMS acts: l3_pi_spectral, l3_pi_trace_abs (at pi(s)),
    l3_aprime_spectral, l3_aprime_trace_abs (at a' = pi_targ(s')), l4_pi; reduction_<k> (1 - |AMS|/|point|) for
    l3_spectral, l3_trace, l3_trace_abs, l4, l4_std, l3_pi_spectral, l3_pi_trace_abs, l3_aprime_spectral,
    l3_aprime_trace_abs, l4_pi; td_loss_not_worse, update_time_ratio (AMS/point). --lambda-nb applies to both learners.
    Example:  train-control critic-study humanoid.npz --updates 20000 --ams-k 8 --ams-rho 0.15 -o study.csv --json
    """
    from icmlkit.lib.train_control.replay import read_replay
    from icmlkit.lib.train_control.study import critic_study as study
    from icmlkit.lib.core.io import write_rows

    run.output(output)
    arrs, _ = read_replay(run.input(buffer))
    res = study(arrs, cfg, seed=run.seed, device=run.device)
    if output:
        run.save(output, write_rows, res.rows)
    return res.summary


add_demo(
    cli, "icmlkit.lib.train_control.demo:run_demo", device=True,
    options=[click.option("--steps", type=click.IntRange(min=10), default=1500, show_default=True,
                          help="Environment steps of the short AMS-TD3 Pendulum run.")],
    doc="""A small mechanism study (6-actuator LQR buffer, point vs AMS critics) and a short AMS-TD3 run.

    Sizes far below the paper's (400 updates, 64-64 networks, 1500 Pendulum steps). Writes
    buffer.npz, study.csv, study.json, run/ and summary.json into OUTDIR.

    \b
    JSON keys: headline, study_env, reduction_l3_spectral, reduction_l3_trace, reduction_l4,
    td_loss_not_worse, return_mean, pathway_gain, diverged, outdir.
    Example:  train-control demo --outdir outputs/demo/train-control --json
    """,
)

main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
