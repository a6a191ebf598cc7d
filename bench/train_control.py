"""Benchmark of train-control (AMS for TD3/SAC) on the CPU. Parts:

- ``speed``: the update time AMS / point at the usual sizes (256-256, batch 256, Humanoid dims), each a
  ``time_call`` (warm-up, median of repeats) and the ratios ``speed_ratio``s; dm_control dog-run
  environment steps/s with random actions. The paper's 1M-step dog-run claim (AMS > 400 return) is
  NOT reproduced on CPU.
- ``mechanism``: a fixed buffer of 10k uniform-random Humanoid-v5 transitions, TD3 learners with point
  vs AMS targets (K = 8, rho = 0.15) for 1500 updates, 64-64 networks and batch 128 (reduced from the
  issue's 50k / 20k / 256-256 / 256), 3 seeds; L3 (Hessian trace and spectral norm by
  finite-difference HVPs at h = 0.05) and L4 on held-out transitions; validation TD loss. L3 also at
  pi(s) and at a' = pi_targ(s') (where AMS acts), and three more learners on the same split, weights
  and minibatch order: a noise-free point critic, AMS with rho matched to TD3's mean perturbation
  norm (E||clip(N(0, 0.2^2 I_17), +-0.5)|| ~ 0.80, computed), AMS with the local manifold supervision
  (lambda_nb = 1); they decide ``l3_aprime_reduction_vs_matched_point``;
- ``mechanism_lqr``: the same study on a random dmc:lqr-38 buffer (extra: its Q has real action curvature);
- ``lqr``: dmc:lqr-38 (38 actuators, the exact optimum from dm_control's lqr_solver, 300-step
  episodes), TD3 vs AMS-TD3 and SAC vs AMS-SAC for 3000 environment steps (64-64, batch 128),
  3 seeds, mean +- std of the final fraction of the LQR-optimal return (never the best seed), also
  normalised as (R - R_zero) / (R_opt - R_zero);
- ``ablation`` (3 seeds, mean +- std, 600 updates on the mechanism buffer): K in {1, 2, 4, 8, 17 = d},
  i.i.d. vs orthogonal directions, per-batch directions, rho in {0.05, 0.15, 0.3};
- ``mechanism_full``: the issue's mechanism protocol (50k transitions, 20k updates, 256-256, batch 256),
  3 seeds, each seed a resumable item (13-25 min each); it decides the mechanism targets, the reduced
  ``mechanism`` stays as an extra table;
- ``sb3``: our TD3 against Stable-Baselines3's TD3 (the bench extra) on Hopper-v5 and HalfCheetah-v5
  with the same settings (rl-zoo's MuJoCo TD3: 256-256, lr 1e-3, batch 256, 10k random steps, N(0, 0.1)
  exploration), 35k steps, seeds 0 and 1, both evaluated by our ``evaluate_policy`` on the same 10
  seeded episodes; one cached item per run, and an invocation starts no new run after 5 minutes, so
  the part is rerun until it reports no pending runs; decides ``td3_return_vs_sb3``;
- ``lqr_full``: the issue's return protocol (15k steps, 2.5k of them random, 256-256 / batch 256, the
  sheet's ~10 min per run), 4 algorithms x 3 seeds, each run a resumable item; it decides the return
  targets (learning curves in train_control_lqr.png), the reduced ``lqr`` stays as an extra table.

No method is tuned on a grid: every learner runs at the library's defaults (AMS at the paper's K = 8,
rho = 0.15); the ablation reports AMS's knobs and selects nothing.
Run:  make bench TOOL=train-control   (or .venv/bin/python bench/train_control.py [--part P] [--quick])
"""
from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("ICMLKIT_NO_PROGRESS", "1")

import numpy as np
import torch

from _common import QUICK_RESULTS, RESULTS, Bench, speed_ratio, table, target, time_call
from icmlkit.lib.core.runtime import generator
from icmlkit.lib.train_control.agent import Agent
from icmlkit.lib.train_control.config import AgentConfig, CollectConfig, CriticStudyConfig, TrainConfig
from icmlkit.lib.train_control.envs import make_env
from icmlkit.lib.train_control.replay import ReplayBuffer, collect
from icmlkit.lib.train_control.ams import td3_noise_norm
from icmlkit.lib.train_control.study import KEYS as STUDY_KEYS, _split, critic_study, final_figures, train_critic
from icmlkit.lib.train_control.train import train

bench = Bench("train-control")
SEEDS = (0, 1, 2)
ALGOS = ("td3", "ams-td3", "sac", "ams-sac")
SMALL = dict(hidden=64, batch=128)
LAMBDA_NB = 1.0  # the manifold-supervision weight of the mechanism row (the sheet gives none): equal to the point fit's


def sizes(quick: bool) -> dict:
    """Every size of the benchmark; ``--quick`` takes seconds-long smoke sizes."""
    if quick:
        return {"mech_transitions": 300, "mech_updates": 10, "ablation_updates": 5, "lqr_steps": 150,
                "lqr_learning_starts": 140, "hidden": 64, "batch": 128,
                "full": dict(transitions=300, updates=10, hidden=256, batch=256),
                "lqr_full": dict(total_steps=600, learning_starts=300, eval_every=300)}
    return {"mech_transitions": 10_000, "mech_updates": 1500, "ablation_updates": 600, "lqr_steps": 3000,
            "lqr_learning_starts": 1000, "hidden": 64, "batch": 128,
            # the mechanism protocol (20k updates of each critic, 13-25 min per seed here)
            "full": dict(transitions=50_000, updates=20_000, hidden=256, batch=256),
            # the return protocol (the sheet's "~10 min per run"): the library defaults (256-256, batch 256)
            "lqr_full": dict(total_steps=15_000, learning_starts=2_500, eval_every=2_500)}


def mean_std(xs):
    xs = [x for x in xs if x is not None]
    return (float(np.mean(xs)), float(np.std(xs))) if xs else (None, None)


# --------------------------------------------------------------------------- parts


@bench.part("speed", doc="update ms AMS / point (256-256, batch 256, Humanoid dims) and dog-run env steps/s",
            hours=0.02)
def speed(ctx) -> dict:
    """Update time (ms) of point TD3 vs AMS-TD3 (and SAC) at the usual sizes, and dog-run env steps/s."""
    out, rec = {}, {}
    obs_dim, act_dim = 348, 17
    g = generator(0, "bench")
    buf = ReplayBuffer(obs_dim, act_dim, 2048)
    for _ in range(2048):
        buf.add(torch.randn(obs_dim, generator=g).numpy(), (torch.rand(act_dim, generator=g) * 2 - 1).numpy(),
                0.0, torch.randn(obs_dim, generator=g).numpy(), 0.0)
    repeats = 3 if ctx.quick else 15
    for algo in ALGOS:
        agent = Agent(obs_dim, act_dim, AgentConfig(), algo, 0)
        gens = {k: generator(0, k) for k in ("replay", "target", "ams", "actor")}
        rec[algo] = time_call(lambda: agent.update(buf.sample(256, gens["replay"]), gens), repeats=repeats, warmup=2)
        out[f"update_ms_{algo}"] = round(1000 * rec[algo]["median_s"], 4)
    r_td3, r_sac = speed_ratio(rec["ams-td3"], rec["td3"]), speed_ratio(rec["ams-sac"], rec["sac"])
    out["update_time_ratio_td3"], out["update_time_ratio_sac"] = round(r_td3["ratio"], 3), round(r_sac["ratio"], 3)
    out["ratios"] = {"td3": r_td3, "sac": r_sac}
    try:
        env = make_env("dmc:dog-run")
        env.reset(0)
        gd = generator(0, "dog")
        n = 20 if ctx.quick else 100

        def steps():
            for _ in range(n):
                env.step((torch.rand(env.act_dim, generator=gd, dtype=torch.float64) * 2 - 1).numpy())

        rec["dog_run"] = time_call(steps, repeats=3)
        out["dog_run_steps_per_s"] = round(n / rec["dog_run"]["median_s"], 1)
        out["dog_run_hours_per_1M_env_steps"] = round(1e6 / out["dog_run_steps_per_s"] / 3600, 2)
        out["dog_act_dim"] = env.act_dim
    except Exception as exc:  # noqa: BLE001 - dm-control absent
        out["dog_run_steps_per_s"] = None
        out["dog_error"] = str(exc)
    out["timings"] = rec
    return out


def _mechanism(ctx, spec: str, full: bool, variants: bool = False) -> dict:
    z = sizes(ctx.quick)
    n = z["full"]["transitions"] if full else z["mech_transitions"]
    col = []

    def buffer():
        if not col:
            col.append(collect(make_env(spec), CollectConfig(steps=n), 0))
        return col[0]

    study = dict(updates=z["full"]["updates"], hidden=z["full"]["hidden"], batch=z["full"]["batch"]) if full else \
        dict(updates=z["mech_updates"], **SMALL)
    rows = []
    for s in ctx.seeds:
        # "-where": the summaries that also hold L3 at pi(s) and a' (older cached items lack them)
        row = ctx.cached(f"{spec.replace(':', '_')}-seed{s}" + ("-where" if variants else ""),
                         lambda s=s: critic_study(buffer().arrays, CriticStudyConfig(diag_probes=16, **study), seed=s).summary)
        ctx.log(f"{spec} seed {s}: reduction L3 |trace| {row['reduction_l3_trace_abs']}, L4 {row['reduction_l4']}")
        rows.append(row)
    out = {"env": spec, "sizes": {"transitions": n, **study}, "rows": rows}
    if variants:
        out["variants"] = _mechanism_variants(ctx, spec, buffer, study)
    return out


def _mechanism_variants(ctx, spec: str, buffer, study: dict) -> dict:
    """The rows beside point (TD3 noise) and AMS (rho = 0.15) of critic_study: a noise-free point
    critic, AMS with rho matched to TD3's mean perturbation norm E||clip(N(0, 0.2^2 I_d), +-0.5)||
    (computed by Monte Carlo, ~0.80 for d = 17), and AMS with the local manifold supervision at dataset
    actions (lambda_nb = LAMBDA_NB, nb_k = 2, radius rho = 0.15). Each (variant, seed) one cached item on
    the same split, initial weights and minibatch order as critic_study's two learners."""
    base = CriticStudyConfig(diag_probes=16, **study)
    d = int(buffer().arrays["act"].shape[1])
    rho_m = round(td3_noise_norm(d, base.policy_noise, base.noise_clip), 4)
    variants = {"point_noise_free": ("td3", dict(policy_noise=0.0)),
                "ams_rho_matched": ("ams-td3", dict(ams_rho=rho_m)),
                "ams_manifold": ("ams-td3", dict(lambda_nb=LAMBDA_NB))}
    rows = []
    for name, (algo, kw) in variants.items():
        for s in ctx.seeds:
            def one(s=s, algo=algo, kw=kw):
                tr, val = _split(buffer().arrays, base.val_fraction, s)
                _, _, fin = train_critic(tr, val, replace(base, **kw), algo, s)
                return final_figures(fin)

            row = ctx.cached(f"{spec.replace(':', '_')}-{name}-seed{s}", one)
            ctx.log(f"{spec} {name} seed {s}: L3 spectral at a' {row['l3_aprime_spectral']}")
            rows.append({"variant": name, "seed": s, **row})
    return {"act_dim": d, "rho_matched": rho_m, "lambda_nb": LAMBDA_NB, "nb_k": base.nb_k, "rows": rows}


@bench.part("mechanism", doc="point vs AMS critics on a random Humanoid-v5 buffer, reduced size (10k, 1500, 64-64), "
            "L3 at a, pi(s) and a', with noise-free point, rho-matched AMS and lambda_nb rows", hours=0.06, seeds=SEEDS)
def mechanism(ctx) -> dict:
    return _mechanism(ctx, "Humanoid-v5", full=False, variants=True)


@bench.part("mechanism_lqr", doc="the same study on a random dmc:lqr-38 buffer (extra), reduced size", hours=0.03,
            seeds=SEEDS)
def mechanism_lqr(ctx) -> dict:
    return _mechanism(ctx, "dmc:lqr-38", full=False)


def lqr_run(algo: str, seed: int, run_sizes: dict) -> dict:
    cfg = TrainConfig(algo=algo, eval_episodes=3, diag_every=0, diag_batch=256, l2_states=2, diag_probes=8,
                      **run_sizes)
    r = train("dmc:lqr-38", cfg, seed=seed)
    s = r.summary
    return {"algo": algo, "seed": seed, **{k: s[k] for k in ("return_mean", "lqr_optimal_fraction", "lqr_normalised",
                                                              "l1", "l2", "l3_spectral", "l3_trace", "l4",
                                                              "pathway_gain", "steps_per_s", "update_ms", "diverged")},
            "curve": [[e["step"], e["lqr_optimal_fraction"]] for e in r.eval_rows]}


def _lqr(ctx, run_sizes: dict, tag: str) -> list:
    rows = []
    for algo in ALGOS:
        for s in ctx.seeds:
            row = ctx.cached(f"{tag}-{algo}-seed{s}", lambda a=algo, s=s: lqr_run(a, s, run_sizes))
            ctx.log(f"lqr {algo} seed {s}: fraction {row['lqr_optimal_fraction']} normalised {row['lqr_normalised']}")
            rows.append(row)
    return rows


@bench.part("lqr", doc="dmc:lqr-38 return, TD3/AMS-TD3/SAC/AMS-SAC, reduced size (3000 steps, 64-64)", hours=0.05,
            seeds=SEEDS)
def lqr(ctx) -> dict:
    z = sizes(ctx.quick)
    run_sizes = dict(total_steps=z["lqr_steps"], learning_starts=z["lqr_learning_starts"], eval_every=z["lqr_steps"],
                     **SMALL)
    return {"sizes": run_sizes, "rows": _lqr(ctx, run_sizes, "reduced")}


@bench.part("ablation", doc="AMS knobs on the mechanism buffer: K, directions, per-batch, rho (600 updates)",
            hours=0.03, seeds=SEEDS)
def ablation(ctx) -> dict:
    z = sizes(ctx.quick)
    col = collect(make_env("Humanoid-v5"), CollectConfig(steps=z["mech_transitions"]), 0)  # the mechanism buffer
    d = col.arrays["act"].shape[1]
    base = dict(updates=z["ablation_updates"], diag_probes=16, **SMALL)
    variants = [("point (TD3 target noise)", "td3", {})]
    variants += [(f"K={k}", "ams-td3", dict(ams_k=k)) for k in (1, 2, 4, 8, d)]
    variants += [("K=8 iid", "ams-td3", dict(ams_k=8, ams_directions="iid")),
                 ("K=8 per-batch", "ams-td3", dict(ams_k=8, ams_resample="batch")),
                 ("K=8 rho=0.05", "ams-td3", dict(ams_k=8, ams_rho=0.05)),
                 ("K=8 rho=0.3", "ams-td3", dict(ams_k=8, ams_rho=0.3))]
    keys = ("l3_spectral", "l3_trace_abs", "l4", "val_td_loss_point")
    rows = []
    for name, algo, kw in variants:
        def one(s, algo=algo, kw=kw):
            tr, val = _split(col.arrays, 0.1, s)
            _, _, f = train_critic(tr, val, CriticStudyConfig(**base, **kw), algo, s)
            return {k: f[k] for k in keys}

        per = [ctx.cached(re.sub(r"[^A-Za-z0-9=.-]+", "_", f"{name}-seed{s}"), lambda s=s: one(s)) for s in ctx.seeds]
        row = {"variant": name, "seeds": len(per), "per_seed": per}
        for k in keys:
            row[k], row[f"{k}_std"] = mean_std([p[k] for p in per])
        rows.append(row)
        ctx.log(f"ablation {name}: L4 {row['l4']} L3 spectral {row['l3_spectral']}")
    return {"sizes": {"transitions": z["mech_transitions"], **base}, "rows": rows}


@bench.part("mechanism_full", doc="the issue's mechanism protocol: 50k Humanoid transitions, 20k updates, 256-256, "
            "batch 256; one resumable item per seed", hours=0.9, seeds=SEEDS)
def mechanism_full(ctx) -> dict:
    return _mechanism(ctx, "Humanoid-v5", full=True)


@bench.part("lqr_full", doc="the issue's return protocol on dmc:lqr-38: 15k steps, 256-256, batch 256; one "
            "resumable item per (algorithm, seed)", hours=1.4, seeds=SEEDS)
def lqr_full(ctx) -> dict:
    run_sizes = sizes(ctx.quick)["lqr_full"]
    rows = _lqr(ctx, run_sizes, "full")
    plot = plot_lqr((QUICK_RESULTS if ctx.quick else RESULTS) / "train_control_lqr.png", rows)
    return {"sizes": run_sizes, "threads": torch.get_num_threads(), "rows": rows,
            "plot": "train_control_lqr.png" if plot else None}


# --------------------------------------------------------------------------- SB3 validation

SB3_ENVS = ("Hopper-v5", "HalfCheetah-v5")
SB3_SEEDS = (0, 1)
SB3_IMPLS = ("ours", "sb3")
SB3_CHUNK_S = 300  # one invocation starts no new run after this many seconds (each run is one cached item)


def sb3_hparams(quick: bool) -> dict:
    """TD3 on MuJoCo as the rl-zoo runs it (256-256, lr 1e-3, batch 256, 10k random steps, N(0, 0.1)
    exploration, target noise 0.2 clipped 0.5, policy delay 2, tau 0.005, gamma 0.99, one update per
    step), the same for both implementations; the step budget is what a CPU part allows."""
    z = dict(hidden=256, lr=1e-3, batch=256, learning_starts=10_000, expl_noise=0.1, policy_noise=0.2, noise_clip=0.5,
             policy_delay=2, tau=0.005, gamma=0.99, total_steps=35_000, eval_every=10_000, eval_episodes=10)
    if quick:
        z.update(learning_starts=300, total_steps=600, eval_every=300, eval_episodes=2, hidden=64)
    return z


def ours_td3_run(env_id: str, seed: int, hp: dict) -> dict:
    """Our TD3 (icmlkit.lib.train_control) with ``hp``; the final and intermediate returns of the
    deterministic actor on ``eval_episodes`` episodes seeded stream_seed(seed, "eval/i")."""
    import time

    cfg = TrainConfig(algo="td3", diag_every=0, l2_states=0, buffer_size=hp["total_steps"], **hp)
    t0 = time.perf_counter()
    r = train(env_id, cfg, seed=seed)
    return {"impl": "ours", "env": env_id, "seed": seed, "return_mean": r.summary["return_mean"],
            "return_std": r.summary["return_std"], "seconds": round(time.perf_counter() - t0, 1),
            "curve": [[e["step"], e["return_mean"]] for e in r.eval_rows]}


def sb3_td3_run(env_id: str, seed: int, hp: dict) -> dict:
    """Stable-Baselines3's TD3 with the same ``hp``, evaluated by the same function on the same episodes
    (our environment wrapper, the same seeds; SB3's deterministic action mapped to [-1, 1])."""
    import time

    try:
        import gymnasium as gym
        from stable_baselines3 import TD3
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.noise import NormalActionNoise
    except ImportError as exc:  # the bench extra: pip install -e .[bench]
        raise SystemExit(f"part sb3 needs stable-baselines3 (the bench extra): {exc}") from None
    from icmlkit.lib.train_control.train import evaluate_policy

    eval_env = make_env(env_id)
    lo, hi = eval_env.low, eval_env.high

    def policy(model):
        def act(obs):
            a = model.predict(np.asarray(obs, dtype=np.float32), deterministic=True)[0]
            return 2.0 * (np.asarray(a, dtype=np.float64) - lo) / (hi - lo) - 1.0
        return act

    curve = []

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            n = self.num_timesteps
            if n % hp["eval_every"] == 0 and n < hp["total_steps"]:
                ev = evaluate_policy(eval_env, policy(self.model), hp["eval_episodes"], seed)
                curve.append([n, ev["return_mean"]])
            return True

    env = gym.make(env_id)
    d = env.action_space.shape[0]
    model = TD3("MlpPolicy", env, learning_rate=hp["lr"], buffer_size=hp["total_steps"],
                learning_starts=hp["learning_starts"], batch_size=hp["batch"], tau=hp["tau"], gamma=hp["gamma"],
                train_freq=1, gradient_steps=1, policy_delay=hp["policy_delay"],
                target_policy_noise=hp["policy_noise"], target_noise_clip=hp["noise_clip"],
                action_noise=NormalActionNoise(np.zeros(d), hp["expl_noise"] * np.ones(d)),
                policy_kwargs={"net_arch": [hp["hidden"], hp["hidden"]]}, seed=seed, device="cpu", verbose=0)
    t0 = time.perf_counter()
    model.learn(total_timesteps=hp["total_steps"], callback=Evaluate())
    ev = evaluate_policy(eval_env, policy(model), hp["eval_episodes"], seed)
    curve.append([hp["total_steps"], ev["return_mean"]])
    env.close()
    eval_env.close()
    import stable_baselines3

    return {"impl": "sb3", "env": env_id, "seed": seed, "return_mean": ev["return_mean"], "return_std": ev["return_std"],
            "seconds": round(time.perf_counter() - t0, 1), "curve": curve, "sb3_version": stable_baselines3.__version__}


@bench.part("sb3", doc="our TD3 vs Stable-Baselines3's TD3 on Hopper-v5 and HalfCheetah-v5, rl-zoo settings, 35k "
            "steps, 2 seeds; one cached item per run, an invocation starts no new run after 5 min (rerun until "
            "complete)", hours=0.75, seeds=SB3_SEEDS)
def sb3(ctx) -> dict:
    import time

    hp = sb3_hparams(ctx.quick)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    t0, rows, pending = time.perf_counter(), [], 0
    try:
        for env_id in SB3_ENVS:
            for s in ctx.seeds:
                for impl in SB3_IMPLS:
                    key = f"{impl}-{env_id}-seed{s}"
                    if not ctx.quick and time.perf_counter() - t0 > SB3_CHUNK_S and not ctx.is_cached(key):
                        pending += 1
                        continue
                    fn = ours_td3_run if impl == "ours" else sb3_td3_run
                    row = ctx.cached(key, lambda fn=fn, e=env_id, s=s: fn(e, s, hp))
                    ctx.log(f"{impl} {env_id} seed {s}: return {row['return_mean']:.1f} ({row['seconds']} s)")
                    rows.append(row)
    finally:
        torch.set_num_threads(threads)
    if pending:
        ctx.log(f"{pending} runs left: run the part again")
    return {"hparams": hp, "threads": 1, "seeds": list(ctx.seeds), "rows": rows, "pending": pending}


def sb3_table(p: dict) -> list:
    out = []
    for env_id in SB3_ENVS:
        row = {"env": env_id}
        for impl in SB3_IMPLS:
            rr = [r for r in p["rows"] if r["env"] == env_id and r["impl"] == impl]
            m, sd = mean_std([r["return_mean"] for r in rr])
            row[impl] = (m, sd, len(rr), [round(r["return_mean"], 1) for r in rr])
        out.append(row)
    return out


def plot_lqr(path: Path, rows: list) -> bool:
    """Learning curves of the issue-size return runs: fraction of the LQR-optimal return vs steps, mean
    +- std over seeds per algorithm (False without matplotlib)."""
    from icmlkit.lib.core.plot import pyplot, save_png

    plt = pyplot(required=False)
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for algo in ALGOS:
        curves = [r["curve"] for r in rows if r["algo"] == algo and r.get("curve")]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        xs = [step for step, _ in curves[0][:n]]
        ys = np.array([[frac for _, frac in c[:n]] for c in curves], dtype=float)
        m, sd = ys.mean(0), ys.std(0)
        ax.plot(xs, m, marker="o", ms=3, label=f"{algo} ({len(curves)} seeds)")
        ax.fill_between(xs, m - sd, m + sd, alpha=0.15)
    ax.axhline(1.0, color="k", lw=0.8, ls="--", label="LQR optimum")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("fraction of the LQR-optimal return")
    ax.set_title("dmc:lqr-38, deterministic actor (mean ± std over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
    return True


# --------------------------------------------------------------------------- report

KEYS = ("l3_spectral", "l3_trace", "l3_trace_abs", "l4", "l4_std", "val_td_loss", "val_td_loss_point")


def mech_table(rows: list) -> dict:
    tab = {}
    for k in KEYS:
        for v in ("point", "ams"):
            tab[f"{v}_{k}"] = mean_std([m[f"{v}_{k}"] for m in rows])
    for k in ("l3_spectral", "l3_trace_abs", "l4"):
        tab[f"reduction_{k}"] = mean_std([m[f"reduction_{k}"] for m in rows])
    return tab


def lqr_table(rows: list) -> dict:
    out = {}
    for algo in ALGOS:
        rr = [r for r in rows if r["algo"] == algo]
        out[algo] = {"fraction": mean_std([r["lqr_optimal_fraction"] for r in rr]),
                     "normalised": mean_std([r["lqr_normalised"] for r in rr]),
                     "diverged": sum(bool(r["diverged"]) for r in rr), "seeds": len(rr)}
    return out


def f(x):
    return "n/a" if x is None else f"{x:.4g}"


def _pm(m_s) -> str:
    return f"{f(m_s[0])} ± {f(m_s[1])}"


def _mech_md(tab: dict) -> str:
    return table([{"quantity": k, "point": _pm(tab[f"point_{k}"]), "AMS (K=8, rho=0.15)": _pm(tab[f"ams_{k}"])}
                  for k in KEYS])


def _lqr_md(tab: dict) -> str:
    return table([{"algo": a, "fraction": _pm(v["fraction"]), "normalised": _pm(v["normalised"]),
                   "diverged seeds": v["diverged"]} for a, v in tab.items()])


def _mech_size(p: dict) -> str:
    z = p["sizes"]
    return f"{z['transitions']} random {p.get('env', 'Humanoid-v5')} transitions, {z['updates']} updates, " \
           f"{z['hidden']}-{z['hidden']}, batch {z['batch']}"


WHERE_KEYS = (("L3 spec. a", "l3_spectral"), ("L3 spec. pi(s)", "l3_pi_spectral"), ("L3 spec. a'", "l3_aprime_spectral"),
              ("L3 abs tr. a", "l3_trace_abs"), ("L3 abs tr. pi(s)", "l3_pi_trace_abs"),
              ("L3 abs tr. a'", "l3_aprime_trace_abs"), ("L4 a'", "l4"), ("L4 pi(s)", "l4_pi"),
              ("val TD loss (point target)", "val_td_loss_point"))


def where_rows(mp: dict) -> dict:
    """{label: [per-seed dict]} of the five learners of the mechanism part: critic_study's point and AMS
    and the part's variants (None when the part predates the variants)."""
    var = mp.get("variants")
    if not var or "point_l3_aprime_spectral" not in mp["rows"][0]:
        return None
    seeds = sorted({v["seed"] for v in var["rows"]})  # critic_study's rows are in the same (the part's) seed order
    pick = lambda pre: [{k: r.get(f"{pre}_{k}") for k in STUDY_KEYS} for r in mp["rows"]]  # noqa: E731
    by = lambda name: [next(v for v in var["rows"] if v["variant"] == name and v["seed"] == s)  # noqa: E731
                       for s in seeds]
    return {"point (TD3 noise 0.2, clip 0.5)": pick("point"),
            "point, noise-free": by("point_noise_free"),
            "AMS K=8, rho=0.15": pick("ams"),
            f"AMS K=8, rho={var['rho_matched']:.3g} (matched)": by("ams_rho_matched"),
            f"AMS K=8, rho=0.15, lambda_nb={var['lambda_nb']:g} (nb_k={var['nb_k']})": by("ams_manifold"),
            "_seeds": seeds}


def reduction(a, p):
    return None if a is None or p is None or p == 0 else 1.0 - abs(a) / abs(p)


@bench.report
def report(R: dict) -> tuple[dict, str]:
    targets, md = {}, []
    mech_part = "mechanism_full" if "mechanism_full" in R else "mechanism" if "mechanism" in R else None
    if mech_part:
        mp = R[mech_part]
        tab = mech_table(mp["rows"])
        size = _mech_size(mp) + (" (the issue's protocol)" if mech_part == "mechanism_full" else
                                 " (reduced; issue: 50k, 20k, 256-256, 256)")

        def red_ok(k):
            m = tab[f"reduction_{k}"][0]
            return target(m, 0.30, m is not None and m >= 0.30,
                          f"mean over {len(mp['rows'])} seeds of 1 - |AMS|/|point|; {size}")

        p, a = tab["point_val_td_loss"][0], tab["ams_val_td_loss"][0]
        pp, ap = tab["point_val_td_loss_point"][0], tab["ams_val_td_loss_point"][0]
        targets["mechanism_l3_trace_reduction"] = red_ok("l3_trace_abs")
        targets["mechanism_l3_spectral_reduction"] = red_ok("l3_spectral")
        targets["mechanism_l4_reduction"] = red_ok("l4")
        targets["mechanism_val_td_loss_not_worse"] = target(
            a, p, a <= p, f"each learner against its own target (mean over seeds); against the noiseless point "
            f"target: AMS {ap:.4g} vs point {pp:.4g}")
        md += [f"## Mechanism (fixed random buffer; {size}; mean ± std over seeds)", "", _mech_md(tab)]
        if mech_part == "mechanism_full" and "mechanism" in R:
            md += [f"## Mechanism at the reduced size ({_mech_size(R['mechanism'])})", "",
                   _mech_md(mech_table(R["mechanism"]["rows"]))]
    wr = where_rows(R["mechanism"]) if "mechanism" in R else None
    if wr:
        seeds = wr.pop("_seeds")
        labels = list(wr)
        pt, ams_m = wr[labels[0]], wr[labels[3]]
        red = [reduction(a["l3_aprime_spectral"], p["l3_aprime_spectral"]) for a, p in zip(ams_m, pt)]
        red_tr = [reduction(a["l3_aprime_trace_abs"], p["l3_aprime_trace_abs"]) for a, p in zip(ams_m, pt)]
        ok = sorted((r for r in red if r is not None), reverse=True)
        need = 2 if len(red) >= 3 else len(red)
        val = ok[need - 1] if len(ok) >= need else None
        nf, a15 = wr[labels[1]], wr[labels[2]]
        red_nf = [reduction(a["l3_aprime_spectral"], p["l3_aprime_spectral"]) for a, p in zip(a15, nf)]
        fmt = lambda xs: ", ".join(f(x) for x in xs)  # noqa: E731
        targets["l3_aprime_reduction_vs_matched_point"] = target(
            None if val is None else round(val, 4), 0.30, val is not None and val >= 0.30,
            f"per seed {seeds}: 1 - |L3(a')| of AMS (K=8, rho={R['mechanism']['variants']['rho_matched']:.3g} = "
            f"E||clip(N(0, 0.2^2 I_{R['mechanism']['variants']['act_dim']}), +-0.5)||, TD3 noise off) / |L3(a')| of "
            f"the point critic trained with TD3's target noise (0.2, clip 0.5); L3 = spectral norm of Q_1's action "
            f"Hessian (finite-difference HVPs, h = 0.05) at a' = pi_targ(s') on held-out transitions: [{fmt(red)}] "
            f"(value: the reduction reached on {need} of {len(red)} seeds; met at >= 0.30); the same with the mean "
            f"abs Hutchinson trace: [{fmt(red_tr)}]; AMS rho=0.15 vs the noise-free point critic: [{fmt(red_nf)}]; "
            f"{_mech_size(R['mechanism'])}")
        md += [f"## Mechanism where AMS acts (L3 at the dataset action a, at pi(s) and at a' = pi_targ(s'); "
               f"{_mech_size(R['mechanism'])}; mean ± std over {len(seeds)} seeds)", "",
               "L4 at a' probes the method's own value at radius rho (0.15 for the point critics, "
               f"{R['mechanism']['variants']['rho_matched']:.3g} for the matched AMS row); L4 at pi(s) at radius 0.15 "
               "for every learner.", "",
               table([{"learner": lab, **{col: _pm(mean_std([r.get(k) for r in per])) for col, k in WHERE_KEYS}}
                      for lab, per in wr.items()])]
    if "mechanism_lqr" in R:
        tab = mech_table(R["mechanism_lqr"]["rows"])
        for k in ("l3_spectral", "l3_trace_abs", "l4"):
            m = tab[f"reduction_{k}"][0]
            targets[f"mechanism_lqr38_{k}_reduction"] = target(m, 0.30, m is not None and m >= 0.30,
                                                               "the same study on a random dmc:lqr-38 buffer (extra; "
                                                               "not in the issue)")
        md += [f"## Mechanism on a random dmc:lqr-38 buffer (extra; {_mech_size(R['mechanism_lqr'])})", "",
               _mech_md(tab)]
    lqr_part = "lqr_full" if "lqr_full" in R else "lqr" if "lqr" in R else None
    if lqr_part:
        z = R[lqr_part]["sizes"]
        lq = lqr_table(R[lqr_part]["rows"])
        size = (f"{z['total_steps']} steps ({z['learning_starts']} random), "
                + (f"{z['hidden']}-{z['hidden']}, batch {z['batch']}" if "hidden" in z else "256-256, batch 256")
                + ((" (the sheet's ~10 min runs" + (", one thread each)" if R[lqr_part].get("threads") == 1 else
                                                    f", {R[lqr_part].get('threads')} threads)"))
                   if lqr_part == "lqr_full" else " (reduced; issue: ~10 min runs)"))
        for base in ("td3", "sac"):
            pm, ps = lq[base]["fraction"]
            am, as_ = lq[f"ams-{base}"]["fraction"]
            targets[f"lqr_fraction_ams_{base}_ge_{base}"] = target(
                am, pm, am >= pm, f"mean fraction of the LQR-optimal return, {lq[base]['seeds']} seeds, {size}; "
                f"normalised: AMS {lq[f'ams-{base}']['normalised'][0]:.3g} vs {lq[base]['normalised'][0]:.3g}")
            targets[f"lqr_seed_std_ams_{base}_lt_{base}"] = target(as_, ps, as_ < ps, "std over seeds of the fraction")
        md += [f"## LQR-38 return ({size}; fraction of the LQR-optimal return; normalised 0 = zero control, "
               "1 = optimal)", "", _lqr_md(lq)]
        if lqr_part == "lqr_full" and R["lqr_full"].get("plot"):
            md += ["Learning curves: `bench/results/train_control_lqr.png`.", ""]
        if lqr_part == "lqr_full" and "lqr" in R:
            z = R["lqr"]["sizes"]
            md += [f"## LQR-38 return at the reduced size ({z['total_steps']} steps, {z['hidden']}-{z['hidden']}, "
                   f"batch {z['batch']})", "", _lqr_md(lqr_table(R["lqr"]["rows"]))]
    if "sb3" in R:
        p = R["sb3"]
        hp = p["hparams"]
        tab = sb3_table(p)
        ratios = {r["env"]: (r["ours"][0] / r["sb3"][0] if r["ours"][0] is not None and r["sb3"][0] else None)
                  for r in tab}
        done = not p.get("pending") and all(r[i][2] == len(p.get("seeds", SB3_SEEDS)) for r in tab for i in SB3_IMPLS)
        vals = [v for v in ratios.values() if v is not None]
        mn = min(vals) if vals and done else None
        size = (f"{hp['total_steps']} steps ({hp['learning_starts']} random), {hp['hidden']}-{hp['hidden']}, lr "
                f"{hp['lr']:g}, batch {hp['batch']}, N(0, {hp['expl_noise']}) exploration, {hp['eval_episodes']} "
                "deterministic eval episodes")
        targets["td3_return_vs_sb3"] = target(
            None if mn is None else round(mn, 4), 0.9, mn is not None and mn >= 0.9,
            "min over envs of our TD3's mean final return / SB3 TD3's (same settings, seeds, steps and eval "
            "episodes): " + ", ".join(f"{e} {f(v)}" for e, v in ratios.items()) + f"; {size}"
            + ("" if done else f"; INCOMPLETE: {p.get('pending')} runs pending"))
        md += [f"## TD3 validation against Stable-Baselines3 ({size}; final return, mean ± std over seeds)", "",
               table([{"env": r["env"], **{f"{lab} ({r[i][2]} seeds)": f"{_pm(r[i][:2])} {r[i][3]}"
                                          for i, lab in (("ours", "our TD3"), ("sb3", "SB3 TD3"))},
                       "ours / SB3": f(ratios[r["env"]])} for r in tab]),
               "Published rl-zoo TD3 figures exist only at 1M steps (benchmark.md: Hopper-v3 3606 ± 4, "
               "HalfCheetah-v3 9656 ± 970, one trained agent each); none at this step count.", ""]
    if "ablation" in R:
        ab = R["ablation"]
        md += [f"## Ablation (mechanism buffer, {ab['sizes']['updates']} updates; mean ± std over seeds)", "",
               table([{"variant": r["variant"], **{lab: f"{f(r[k])} ± {f(r[k + '_std'])}" for lab, k in (
                   ("L3 spectral", "l3_spectral"), ("L3 mean abs trace", "l3_trace_abs"), ("L4", "l4"),
                   ("val TD loss (point target)", "val_td_loss_point"))}} for r in ab["rows"]])]
    if "speed" in R:
        sp = R["speed"]
        how = "median of repeats after a warm-up; ratios of medians" if "timings" in sp else \
            "legacy: mean of 10 updates after 2 warm-up updates"
        upd_h = round(1e6 * sp["update_ms_ams-td3"] / 1000 / 3600, 1)
        targets["dog_run_1M_claim"] = target(None, 400, False, "not reproduced on CPU: 1M dog-run steps need "
                                             f"{sp.get('dog_run_hours_per_1M_env_steps')} h of simulation and "
                                             f"about {upd_h} h of AMS-TD3 updates (256-256) here")
        rng = "".join(f" ({k.upper()} range {v['low']:.2f}-{v['high']:.2f})" for k, v in sp.get("ratios", {}).items())
        md += ["## Speed", "", f"Update ms at 256-256 / batch 256 / Humanoid dims ({how}): TD3 {sp['update_ms_td3']}, "
               f"AMS-TD3 {sp['update_ms_ams-td3']} (ratio {sp['update_time_ratio_td3']}), SAC {sp['update_ms_sac']}, "
               f"AMS-SAC {sp['update_ms_ams-sac']} (ratio {sp['update_time_ratio_sac']}){rng}. dog-run: "
               f"{sp.get('dog_run_steps_per_s')} env steps/s (random actions).", ""]
    order = ["mechanism_l3_trace_reduction", "mechanism_l3_spectral_reduction", "mechanism_l4_reduction",
             "mechanism_val_td_loss_not_worse", "l3_aprime_reduction_vs_matched_point", "td3_return_vs_sb3", "mechanism_lqr38_l3_spectral_reduction",
             "mechanism_lqr38_l3_trace_abs_reduction", "mechanism_lqr38_l4_reduction"]
    targets = {**{k: targets[k] for k in order if k in targets}, **{k: v for k, v in targets.items() if k not in order}}
    return targets, re.sub(r"\n{3,}", "\n\n", "\n".join(md))


if __name__ == "__main__":
    bench.main()
