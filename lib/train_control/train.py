"""Training TD3 / SAC / AMS-TD3 / AMS-SAC, evaluating and diagnosing run directories.

The loop (one update per environment step after ``learning_starts``, as in TD3 and SAC):
1. act: uniform in [-1, 1] before ``learning_starts``, then the actor plus N(0, expl_noise^2) (TD3)
   or a sample of the squashed Gaussian (SAC); the environment gets the action rescaled to its bounds;
2. store (s, a, r, s', terminated) in the replay ring (truncation is not termination);
3. update on a minibatch: critics to the point or AMS target, the actor / temperature / targets on
   their schedules (:mod:`icmlkit.lib.train_control.agent`);
4. every ``diag_every`` updates: the Lipschitz diagnostics L1-L4 on a fixed validation batch drawn
   from the buffer by the "diag" stream [reconstructed], L2 from saved simulator states of a probe
   environment; every ``eval_every`` steps: the deterministic actor on ``eval_episodes`` episodes
   with fixed seeds (the same seeds for every algorithm at a given --seed; for dmc:lqr-* also the
   LQR-optimal policy u = K x on the same episodes, giving lqr_optimal_fraction).

Randomness: named streams of the seed ("init" for the weights; "explore", "replay", "target", "ams",
"actor", "diag" as torch generators; episode seeds from ``stream_seed(seed, "episode/i")``).
Checkpoints hold the agent (networks, targets, optimisers, temperature), the replay buffer, every
stream and the log rows; on ``--resume`` the current episode is re-created by resetting it with its
seed and replaying its stored actions (the simulators are deterministic), so a resumed run writes the
same actor, critic and CSV bytes as an uninterrupted one.

Under torchrun (our design for off-policy RL; the paper says nothing about it): the ranks run the
loop in lock step. Each rank steps its own environment copy into its own replay buffer, with its own
episode seeds ("episode/rank<r>/i") and exploration stream ("explore/rank<r>"; rank 0 keeps the
one-process names, and ``rank_envs="replicated"`` gives every rank rank 0's). Each loop step is one
update on a global minibatch of ``batch`` rows: the indices and every random draw of the update come
from the shared streams as in one process, rank r takes rows ``Dist.split(batch)`` of them from its
own buffer, and the gradients are averaged over the ranks (an explicit all_reduce), so the networks
stay identical on every rank (``rank_param_spread`` in the summary measures it). ``total_steps`` is
thus the step count of each rank's environment (``world * total_steps`` transitions in all, one
update per loop step as in one process). Divergence is agreed by all ranks; rank 0 alone evaluates,
runs the diagnostics (on its own buffer and probe environment) and writes checkpoints, which gather
every rank's buffer, episode state, exploration stream and episode rows; ``--resume`` needs the same
world size. With ``rank_envs="replicated"`` every rank holds one process's buffer, so the job
reproduces a one-process run up to the order of the float sums in the averaged gradients.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from icmlkit.lib.train_control.agent import Agent
from icmlkit.lib.train_control.config import DiagnoseConfig, EvalConfig, TrainConfig  # noqa: F401
from icmlkit.lib.train_control.diagnostics import (critic_diagnostics, dynamics_sensitivity, pathway_gain,
                                             probe_states)
from icmlkit.lib.train_control.envs import ControlEnv, env_id, make_env
from icmlkit.lib.train_control.priors import build_prior, with_prior
from icmlkit.lib.train_control.replay import ReplayBuffer
from icmlkit.lib.core.checkpoint import Checkpointer, fingerprint, restore
from icmlkit.lib.core.console import log, progress
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.runtime import Dist, generator, stream_seed

RUN_FORMAT = "icmlkit.control.run/1"
DIAG_COLUMNS = ["update", "step", "l1", "l2", "l3_spectral", "l3_trace", "grad_norm", "l4", "l4_std", "td_std",
                "td_loss", "drift", "pathway_gain"]
EVAL_COLUMNS = ["step", "return_mean", "return_std", "lqr_optimal_fraction", "lqr_normalised"]
EPISODE_COLUMNS = ["step", "rank", "episode", "return", "length"]
STREAMS = ("explore", "replay", "target", "ams", "actor", "diag")


@dataclass
class TrainResult:
    agent: Agent
    run_config: dict
    eval_rows: list
    diag_rows: list
    episode_rows: list
    summary: dict
    extra: dict = field(default_factory=dict)


def _r(x, nd=6):
    return None if x is None else (round(float(x), nd) if math.isfinite(float(x)) else None)


def evaluate_policy(env: ControlEnv, act_fn, episodes: int, seed: int, optimal: bool = False) -> dict:
    """Deterministic returns of ``act_fn`` (obs -> action in [-1, 1]) on ``episodes`` episodes seeded
    ``stream_seed(seed, "eval/i")``; with ``optimal`` (dmc:lqr-*) also the LQR-optimal policy's."""
    def run(policy):
        rets = []
        for i in range(episodes):
            obs = env.reset(stream_seed(seed, f"eval/{i}"))
            ret, done = 0.0, False
            while not done:
                obs, r, term, trunc = env.step(policy(obs))
                ret += r
                done = term or trunc
            rets.append(ret)
        return np.asarray(rets)

    rets = run(act_fn)
    out = {"return_mean": float(rets.mean()), "return_std": float(rets.std()), "returns": rets.tolist(),
           "lqr_optimal_fraction": None}
    if optimal:
        opt = run(env.optimal_action)
        out["lqr_optimal_return"] = float(opt.mean())
        out["lqr_optimal_fraction"] = float(rets.mean() / opt.mean()) if opt.mean() != 0 else None
        zero = run(lambda o: np.zeros(env.act_dim))  # the do-nothing baseline: 0 on the normalised scale
        out["lqr_zero_return"] = float(zero.mean())
        gap = opt.mean() - zero.mean()
        out["lqr_normalised"] = float((rets.mean() - zero.mean()) / gap) if gap != 0 else None
    return out


def actor_policy(agent: Agent):
    dev = agent.device

    def policy(obs):
        with torch.no_grad():
            return agent.actor.mean_action(torch.from_numpy(obs).to(dev).unsqueeze(0))[0].double().cpu().numpy()

    return policy


def _check_env_limits(env: ControlEnv, cfg) -> None:
    if env.max_steps <= 0:
        raise UsageError(f"{env.spec} has no episode length limit; pass --max-episode-steps")


def _rank_stream(name: str, rank: int, replicated: bool) -> str:
    """The stream name of a per-rank random stream: rank 0 (and every rank when replicated) uses the
    one-process name, so rank 0 of a torchrun job steps the episodes of a one-process run."""
    return name if rank == 0 or replicated else f"{name}/rank{rank}"


def _any_rank(dist: Dist, flag: bool) -> bool:
    """True on every rank when ``flag`` is true on any (so all ranks agree, e.g. on divergence)."""
    if not dist.active:
        return bool(flag)
    import torch.distributed as td

    t = torch.tensor([1.0 if flag else 0.0], dtype=torch.float64)
    if dist.backend == "nccl":
        t = t.cuda()
    td.all_reduce(t, op=td.ReduceOp.MAX)
    return bool(t.item() > 0)


def _gather_to_main(dist: Dist, obj) -> list | None:
    """Every rank's ``obj`` (picklable) on rank 0, in rank order (None on the other ranks)."""
    if not dist.active:
        return [obj]
    import torch.distributed as td

    out = [None] * dist.world if dist.is_main else None
    td.gather_object(obj, out, dst=0)
    return out


def _rank_param_spread(agent: Agent, dist: Dist) -> float | None:
    """The largest |difference| of any actor / critic / target parameter between rank 0 and another rank
    (0.0 when the data-parallel updates kept them identical); None for one process."""
    if not dist.active:
        return None
    nets = (agent.actor, agent.critic, agent.actor_targ, agent.critic_targ)
    flat = torch.cat([p.detach().reshape(-1).double() for m in nets for p in m.state_dict().values()]
                     + [agent.log_alpha.detach().reshape(1).double()])
    parts = dist.all_gather(flat)
    return float(max((p - parts[0]).abs().max() for p in parts))


def train(env_spec: str, cfg: TrainConfig, seed: int = 0, device="cpu", checkpointer: Checkpointer | None = None,
          env: ControlEnv | None = None, dist: Dist | None = None) -> TrainResult:
    """Train ``cfg.algo`` on ``env_spec`` for ``cfg.total_steps`` steps (see the module docstring).

    Under torchrun (``dist`` active) every rank runs this loop in lock step: it steps its own
    environment copy into its own replay buffer, takes its ``batch / world`` rows of each global
    minibatch from its own buffer, and the gradients are averaged, so the parameters stay identical on
    every rank; rank 0 alone evaluates, diagnoses and writes checkpoints (which hold every rank's buffer,
    episode state and exploration stream, gathered to rank 0)."""
    cfg.check()
    dist = dist if dist is not None else Dist()
    part = (cfg.batch, dist.split(cfg.batch)) if dist.active else None  # uneven split: a usage error
    main = dist.is_main
    replicated = cfg.rank_envs == "replicated"
    dev = torch.device(device)
    env = env or make_env(env_spec, cfg.max_episode_steps)
    _check_env_limits(env, cfg)
    prior = build_prior(cfg, env.act_dim, seed)  # None unless --action-prior (the agent then acts in z)
    env = with_prior(env, prior)
    eval_env = with_prior(make_env(env_spec, cfg.max_episode_steps), prior) if main else None
    probe_env = with_prior(make_env(env_spec, cfg.max_episode_steps), prior) if cfg.l2_states and main else None
    is_lqr = getattr(env, "is_lqr", False)
    agent = Agent(env.obs_dim, env.act_dim, cfg, cfg.algo, seed, dev)
    if main:
        for note in agent.k_notes():
            log.warning(note)
    buf = ReplayBuffer(env.obs_dim, env.act_dim, min(cfg.buffer_size, cfg.total_steps))
    gens = {k: generator(seed, k) for k in STREAMS if k != "explore"}  # shared by all ranks
    explore = generator(seed, _rank_stream("explore", dist.rank, replicated))  # this rank's own
    ep_stream = _rank_stream("episode", dist.rank, replicated)
    fp = fingerprint({"config": asdict(cfg), "env": env_spec, "seed": int(seed), "format": RUN_FORMAT,
                      "world": dist.world, "action_prior": prior})
    state = checkpointer.load(fp) if checkpointer is not None else None
    eval_rows, diag_rows, ep_rows = [], [], []
    start, ep, ep_len, ep_ret, diverged = 0, 0, 0, 0.0, False
    val_idx, prev_y = None, None
    if state is not None:
        start, extra = restore(state, rng=gens)
        agent.load_state_dict(extra["agent"])
        mine = extra["ranks"][dist.rank]
        buf.load_state(mine["buffer"])
        explore.set_state(mine["explore"])
        ep_rows = list(mine["episode_rows"])
        ep, ep_len, ep_ret = int(mine["ep"]), int(mine["ep_len"]), float(mine["ep_ret"])
        eval_rows, diag_rows, diverged = extra["eval_rows"], extra["diag_rows"], bool(extra["diverged"])
        val_idx = None if extra["val_idx"] is None else np.asarray(extra["val_idx"].numpy())
        prev_y = extra["prev_y"]
    obs = env.reset(stream_seed(seed, f"{ep_stream}/{ep}"))
    if ep_len:  # re-create the interrupted episode: reset with its seed, replay its stored actions
        for a in buf.last_actions(ep_len):
            obs = env.step(a.astype(np.float64))[0]

    def diagnostics(step: int):
        nonlocal val_idx, prev_y
        if buf.size < 2:
            return
        if val_idx is None:
            n = min(cfg.diag_batch, buf.size)
            val_idx = torch.randint(0, buf.size, (n,), generator=gens["diag"]).numpy()
        batch = buf.take(val_idx, dev)
        d = critic_diagnostics(agent, batch, gens, cfg.diag_iters, cfg.diag_probes, prev_y, cfg.hvp_step)
        prev_y = d.pop("_y0").detach().cpu()
        d["l2"] = None
        if probe_env is not None:
            pol = agent.actor.mean_action
            states, obs_l = probe_states(probe_env, lambda s: pol(s.to(dev)).cpu(), cfg.l2_states,
                                         lambda i: stream_seed(seed, f"diag-l2/{i}"))
            d["l2"] = dynamics_sensitivity(probe_env, states, obs_l, lambda s: pol(s.to(dev)).cpu(),
                                           cfg.diag_probes, gens["diag"])
        d["pathway_gain"] = pathway_gain(d)
        diag_rows.append({"update": agent.updates, "step": step, **{k: _r(d.get(k)) for k in DIAG_COLUMNS[2:]}})

    def evaluation(step: int):
        ev = evaluate_policy(eval_env, actor_policy(agent), cfg.eval_episodes, seed, optimal=is_lqr)
        eval_rows.append({"step": step, "return_mean": _r(ev["return_mean"]), "return_std": _r(ev["return_std"]),
                          "lqr_optimal_fraction": _r(ev["lqr_optimal_fraction"]),
                          "lqr_normalised": _r(ev.get("lqr_normalised"))})
        return ev

    t0 = time.perf_counter()
    upd_time, n_upd = 0.0, 0
    steps = range(start, cfg.total_steps)
    for t in (progress(steps, total=cfg.total_steps - start, desc=f"train {cfg.algo}") if main else steps):
        if t < cfg.learning_starts:
            a = (torch.rand(env.act_dim, generator=explore, dtype=torch.float64) * 2 - 1).numpy()
        else:
            a = agent.act(torch.from_numpy(obs).to(dev).unsqueeze(0), explore, True,
                          cfg.expl_noise)[0].double().cpu().numpy()
        a32 = a.astype(np.float32)
        o2, r, term, trunc = env.step(a32.astype(np.float64))
        buf.add(obs, a32, r, o2, term)
        obs, ep_len, ep_ret = o2, ep_len + 1, ep_ret + r
        if term or trunc:
            ep_rows.append({"step": t + 1, "rank": dist.rank, "episode": ep, "return": _r(ep_ret),
                            "length": ep_len})
            ep, ep_len, ep_ret = ep + 1, 0, 0.0
            obs = env.reset(stream_seed(seed, f"{ep_stream}/{ep}"))
        if t + 1 > cfg.learning_starts and buf.size >= cfg.batch and not diverged:
            u0 = time.perf_counter()
            sl = part[1] if part is not None else slice(None)
            info = agent.update(buf.sample(cfg.batch, gens["replay"], dev, sl), gens, dist, part)
            upd_time += time.perf_counter() - u0
            n_upd += 1
            bad = not (math.isfinite(info["critic_loss"]) and info["q_absmax"] < cfg.diverge_q)
            diverged = _any_rank(dist, bad)
            if main and cfg.diag_every and agent.updates % cfg.diag_every == 0 and not diverged:
                diagnostics(t + 1)
        if main and (t + 1) % cfg.eval_every == 0 and t + 1 < cfg.total_steps:
            evaluation(t + 1)
        if checkpointer is not None and checkpointer.due(t + 1, cfg.total_steps):
            ranks = _gather_to_main(dist, {"buffer": buf.state(), "explore": explore.get_state(), "ep": ep,
                                           "ep_len": ep_len, "ep_ret": ep_ret, "episode_rows": ep_rows})
            checkpointer.save(t + 1, fp, rng=gens, extra={
                "agent": agent.state_dict(), "ranks": ranks, "eval_rows": eval_rows,
                "diag_rows": diag_rows, "diverged": diverged,
                "val_idx": None if val_idx is None else torch.from_numpy(val_idx), "prev_y": prev_y})
    wall = time.perf_counter() - t0
    spread = _rank_param_spread(agent, dist)
    all_eps = _gather_to_main(dist, ep_rows)
    summary, ev = {}, None
    if main:
        ep_rows = sorted((row for rows in all_eps for row in rows), key=lambda row: (row["step"], row["rank"]))
        if not diverged and (not diag_rows or diag_rows[-1]["update"] != agent.updates):
            diagnostics(cfg.total_steps)
        ev = evaluation(cfg.total_steps)
        last = diag_rows[-1] if diag_rows else {}
        summary = {"env": env_spec, "algo": cfg.algo, "seed": int(seed), "steps": cfg.total_steps,
                   "return_mean": _r(ev["return_mean"]), "return_std": _r(ev["return_std"]),
                   "l1": last.get("l1"), "l2": last.get("l2"), "l3_spectral": last.get("l3_spectral"),
                   "l3_trace": last.get("l3_trace"), "l4": last.get("l4"), "pathway_gain": last.get("pathway_gain"),
                   "steps_per_s": round(dist.world * (cfg.total_steps - start) / max(wall, 1e-9), 2),
                   "update_ms": round(1000 * upd_time / n_upd, 4) if n_upd else None,
                   "diverged": diverged, "lqr_optimal_fraction": _r(ev["lqr_optimal_fraction"]),
                   "lqr_normalised": _r(ev.get("lqr_normalised")),
                   "episodes": len(ep_rows), "resumed_from": start if state is not None else None,
                   "world_size": dist.world, "env_steps": dist.world * cfg.total_steps,
                   "rank_param_spread": spread, "ams_k_used": agent.ams_k if agent.is_ams else None}
    run_config = {"format": RUN_FORMAT, "env": env_spec, "algo": cfg.algo, "seed": int(seed),
                  "config": asdict(cfg), "env_info": env.info(), "world_size": dist.world}
    for e in (env, eval_env, probe_env):
        if e is not None:
            e.close()
    return TrainResult(agent, run_config, eval_rows, diag_rows, ep_rows, summary)


# --------------------------------------------------------------------------- run directories


def write_run(folder, res: TrainResult) -> None:
    """actor.safetensors, critic.safetensors, config.json, eval.csv, diagnostics.csv, episodes.csv,
    summary.json in ``folder``."""
    from pathlib import Path

    from icmlkit.lib.core.io import write_json, write_rows, write_safetensors

    folder = Path(folder)
    actor, critic = res.agent.weights()
    meta = {"algo": res.run_config["algo"], "env": res.run_config["env"]}
    write_safetensors(folder / "actor.safetensors", actor, {**meta, "format": "icmlkit.control.actor/1"})
    write_safetensors(folder / "critic.safetensors", critic, {**meta, "format": "icmlkit.control.critic/1"})
    write_json(folder / "config.json", res.run_config)
    write_rows(folder / "eval.csv", res.eval_rows, EVAL_COLUMNS)
    write_rows(folder / "diagnostics.csv", res.diag_rows, DIAG_COLUMNS)
    write_rows(folder / "episodes.csv", res.episode_rows, EPISODE_COLUMNS)
    write_json(folder / "summary.json", res.summary)


def load_run(path, device="cpu") -> tuple[Agent, dict]:
    """(agent with the run's actor and critic weights, run config) of a run directory."""
    from pathlib import Path

    from icmlkit.lib.core.io import load_json, read_safetensors

    p = Path(path)
    if not p.exists():
        raise InputError("no such run directory", str(path))
    if not p.is_dir():
        raise InputError("is not a run directory (a folder written by `train-control train`)", str(path))
    cfg_path = p / "config.json"
    if not cfg_path.is_file():
        raise InputError("not a run directory: config.json is missing", str(path))
    rc = load_json(cfg_path)
    if rc.get("format") != RUN_FORMAT:
        raise InputError(f"format {rc.get('format')!r}, expected {RUN_FORMAT!r}", str(cfg_path))
    try:
        known = TrainConfig.__dataclass_fields__
        cfg = TrainConfig(**{k: v for k, v in dict(rc["config"]).items() if k in known})
        cfg.check()
        info = dict(rc["env_info"])
        obs_dim, act_dim = int(info["obs_dim"]), int(info["act_dim"])
        env = str(rc["env"])
    except (KeyError, TypeError, ValueError, UsageError) as exc:
        raise InputError(f"malformed run config ({type(exc).__name__}: {exc})", str(cfg_path)) from None
    agent = Agent(obs_dim, act_dim, cfg, cfg.algo, int(rc.get("seed", 0)), device)
    for name, module in (("actor", agent.actor), ("critic", agent.critic)):
        f = p / f"{name}.safetensors"
        arrs, _ = read_safetensors(f, fmt=f"icmlkit.control.{name}/1", what=f"{name} .safetensors file")
        sd = module.state_dict()
        if set(arrs) != set(sd):
            raise InputError(f"tensors {sorted(set(arrs) ^ set(sd))[:4]} do not match a {cfg.algo} {name}", str(f))
        for k, v in arrs.items():
            if tuple(v.shape) != tuple(sd[k].shape):
                raise InputError(f"tensor {k!r} has shape {v.shape}, expected {tuple(sd[k].shape)}", str(f))
            if not np.all(np.isfinite(v)):
                raise InputError(f"tensor {k!r} holds NaN or infinite values", str(f))
        module.load_state_dict({k: torch.from_numpy(v).to(agent.device) for k, v in arrs.items()})
    agent.actor_targ.load_state_dict(agent.actor.state_dict())
    agent.critic_targ.load_state_dict(agent.critic.state_dict())
    rc["_env"], rc["_path"] = env, str(path)
    return agent, rc


def check_run_env(agent: Agent, rc: dict, env: ControlEnv) -> None:
    """Refuse an environment other than the run's own (issue 59: a policy evaluated, diagnosed or
    collected in another environment is a silent wrong answer, even with the same obs/action dims),
    before any episode: a UsageError naming the run directory and both environments."""
    if env_id(env.spec) != env_id(rc["_env"]):
        raise UsageError(f"{rc.get('_path', 'RUN')}: the run was trained on {rc['_env']}, not {env.spec}")
    if (env.obs_dim, env.act_dim) != (agent.obs_dim, agent.act_dim):
        raise UsageError(f"{env.spec} has obs/action dims {env.obs_dim}/{env.act_dim}; the run was trained with "
                         f"{agent.obs_dim}/{agent.act_dim} ({rc['_env']})")


def run_prior(rc: dict) -> dict | None:
    """The action prior a run was trained with (None: none), from its config.json."""
    prior = rc.get("env_info", {}).get("action_prior")
    if prior is not None and not (isinstance(prior, dict) and {"kind", "matrix", "offset"} <= set(prior)):
        raise InputError("malformed run config: env_info.action_prior needs kind, matrix and offset", "config.json")
    return prior


@dataclass
class EvalResult:
    summary: dict
    returns: list


def evaluate_run(agent: Agent, rc: dict, env_spec: str, cfg: EvalConfig, seed: int = 0) -> EvalResult:
    """The ``eval`` subcommand: the run's deterministic actor on ``cfg.episodes`` fixed-seed episodes."""
    env = make_env(env_spec, cfg.max_episode_steps or int(rc["config"].get("max_episode_steps", 0) or 0))
    _check_env_limits(env, cfg)
    env = with_prior(env, run_prior(rc))
    check_run_env(agent, rc, env)
    ev = evaluate_policy(env, actor_policy(agent), cfg.episodes, seed, optimal=getattr(env, "is_lqr", False))
    env.close()
    summary = {"env": env_spec, "episodes": cfg.episodes, "return_mean": _r(ev["return_mean"]),
               "return_std": _r(ev["return_std"]), "lqr_optimal_fraction": _r(ev["lqr_optimal_fraction"]),
               "lqr_optimal_return": _r(ev.get("lqr_optimal_return")),
               "lqr_normalised": _r(ev.get("lqr_normalised")), "algo": rc["algo"]}
    return EvalResult(summary, [{"episode": i, "return": _r(x)} for i, x in enumerate(ev["returns"])])


def diagnose_run(agent: Agent, rc: dict, cfg: DiagnoseConfig, seed: int = 0, env_spec: str | None = None):
    """The ``diagnose`` subcommand: L1-L4 of a run's actor and critic on a validation batch of fresh
    transitions (the run's actor plus N(0, 0.1^2) exploration noise, episodes seeded by "diagnose/i"),
    L2 from saved simulator states. The target networks are the trained networks themselves (a run
    directory stores no targets), so the drift is not measured (null)."""
    from icmlkit.lib.train_control.config import CollectConfig
    from icmlkit.lib.train_control.replay import collect

    spec = env_spec or rc["_env"]
    env = make_env(spec, cfg.max_episode_steps or int(rc["config"].get("max_episode_steps", 0) or 0))
    _check_env_limits(env, cfg)
    env = with_prior(env, run_prior(rc))
    check_run_env(agent, rc, env)
    pol = agent.actor.mean_action
    col = collect(env, CollectConfig(steps=cfg.diag_batch, noise=0.1), seed, actor=lambda s: pol(s.to(agent.device)).cpu())
    batch = {k: torch.from_numpy(v).to(agent.device) for k, v in col.arrays.items()}
    gens = {"diag": generator(seed, "diag")}
    d = critic_diagnostics(agent, batch, gens, cfg.diag_iters, cfg.diag_probes, h=cfg.hvp_step)
    d.pop("_y0")
    d["l2"] = None
    if cfg.l2_states:
        states, obs_l = probe_states(env, lambda s: pol(s.to(agent.device)).cpu(), cfg.l2_states,
                                     lambda i: stream_seed(seed, f"diag-l2/{i}"))
        d["l2"] = dynamics_sensitivity(env, states, obs_l, lambda s: pol(s.to(agent.device)).cpu(),
                                       cfg.diag_probes, gens["diag"])
    d["pathway_gain"] = pathway_gain(d)
    env.close()
    summary = {"env": spec, "algo": rc["algo"], **{k: _r(d.get(k)) for k in DIAG_COLUMNS[2:]},
               "transitions": cfg.diag_batch}
    return EvalResult(summary, [])
