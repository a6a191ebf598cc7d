"""The mechanism study (``critic-study``) [reconstructed protocol, after the method sheet's (a)]:
TD3 learners with point targets and with AMS targets trained on the SAME fixed replay buffer, from
the same initial weights and the same minibatch order, for ``updates`` gradient steps; then, on
held-out transitions: the validation TD loss (each critic against its own target, and both against
the noiseless point target), L3 (action-Hessian spectral norm and Hutchinson trace, |grad_a Q|) at the
dataset actions, at pi(s) and at a' = pi_targ(s') (where AMS changes the target), L4 (target
sensitivity and spread at a', and at pi(s)) and L1 of the actor. The claim checked: AMS lowers L3 and L4 with a
validation TD loss that is not worse.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import torch

from icmlkit.lib.train_control.agent import Agent
from icmlkit.lib.train_control.ams import directions_used
from icmlkit.lib.train_control.config import CriticStudyConfig  # noqa: F401
from icmlkit.lib.train_control.diagnostics import critic_diagnostics
from icmlkit.lib.train_control.replay import ReplayBuffer
from icmlkit.lib.core.console import log, progress
from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.runtime import generator

KEYS = ("l1", "l3_spectral", "l3_trace", "l3_trace_abs", "grad_norm", "l4", "l4_std", "td_std", "val_td_loss", "val_td_loss_point",
        "update_ms", "diverged", "l3_pi_spectral", "l3_pi_trace_abs", "l3_aprime_spectral", "l3_aprime_trace_abs", "l4_pi")
REDUCED = ("l3_spectral", "l3_trace", "l3_trace_abs", "l4", "l4_std", "l3_pi_spectral", "l3_pi_trace_abs",
           "l3_aprime_spectral", "l3_aprime_trace_abs", "l4_pi")


@dataclass
class StudyResult:
    rows: list
    summary: dict


def _split(arrs: dict, val_fraction: float, seed: int):
    n = arrs["obs"].shape[0]
    n_val = max(1, int(round(val_fraction * n)))
    if n - n_val < 2:
        raise InputError(f"the buffer has {n} transitions: too few to hold out {n_val} and train on the rest")
    perm = torch.randperm(n, generator=generator(seed, "split")).numpy()
    val, tr = perm[:n_val], np.sort(perm[n_val:])
    return {k: v[tr] for k, v in arrs.items()}, {k: v[val] for k, v in arrs.items()}


@torch.no_grad()
def _val_losses(agent: Agent, val: dict, seed: int) -> tuple[float, float]:
    g = generator(seed, "val")
    gens = {"target": g, "ams": g, "actor": g}
    y_own = agent.td_target(val, gens)
    y_point = val["rew"] + agent.cfg.gamma * (1 - val["done"]) * agent.critic_targ.q_min(
        val["next_obs"], agent.actor_targ(val["next_obs"]))
    q1, _ = agent.critic(val["obs"], val["act"])
    return float((q1 - y_own).pow(2).mean()), float((q1 - y_point).pow(2).mean())


def train_critic(arrs_train: dict, val: dict, cfg: CriticStudyConfig, algo: str, seed: int, device="cpu",
                 label: str = "") -> tuple[Agent, list, dict]:
    """One TD3 learner (``algo`` td3 or ams-td3) on the fixed buffer; returns (agent, rows, final)."""
    dev = torch.device(device)
    buf = ReplayBuffer.from_arrays(arrs_train)
    obs_dim, act_dim = arrs_train["obs"].shape[1], arrs_train["act"].shape[1]
    agent = Agent(obs_dim, act_dim, cfg, algo, seed, dev)
    for note in agent.k_notes():
        log.warning(note)
    gens = {k: generator(seed, k) for k in ("replay", "target", "ams", "actor")}
    vb = {k: torch.from_numpy(v).to(dev) for k, v in val.items()}
    n_diag = min(1024, vb["obs"].shape[0])
    diag_batch = {k: v[:n_diag] for k, v in vb.items()}
    rows, diverged, t_upd = [], False, 0.0

    def measure(step):
        d = critic_diagnostics(agent, diag_batch, {"diag": generator(seed, "diag")}, cfg.diag_iters,
                               cfg.diag_probes, h=cfg.hvp_step)
        d.pop("_y0")
        d["val_td_loss"], d["val_td_loss_point"] = _val_losses(agent, vb, seed)
        rows.append({"algo": algo, "update": step, **{k: d.get(k) for k in KEYS if k in d}})
        return d

    for i in progress(range(cfg.updates), total=cfg.updates, desc=f"critic-study {label or algo}"):
        t0 = time.perf_counter()
        info = agent.update(buf.sample(cfg.batch, gens["replay"], dev), gens)
        t_upd += time.perf_counter() - t0
        if not (np.isfinite(info["critic_loss"]) and info["q_absmax"] < 1e6):
            diverged = True
            break
        if cfg.diag_every and (i + 1) % cfg.diag_every == 0 and i + 1 < cfg.updates:
            measure(i + 1)
    final = measure(agent.updates) if not diverged else {k: None for k in KEYS}
    final["update_ms"] = 1000 * t_upd / max(agent.updates, 1)
    final["diverged"] = diverged
    rows[-1:] = [{**rows[-1], "update_ms": final["update_ms"], "diverged": diverged}] if rows else []
    return agent, rows, final


def final_figures(final: dict) -> dict:
    """The ``KEYS`` of a learner's final diagnostics (:func:`train_critic`), floats rounded to 6 digits."""
    return {k: round(float(v), 6) if isinstance(v := final.get(k), float) else v for k in KEYS}


def critic_study(arrs: dict, cfg: CriticStudyConfig, seed: int = 0, device="cpu") -> StudyResult:
    """Point-target vs AMS-target TD3 learners on one fixed buffer (see the module docstring)."""
    cfg.check()
    tr, val = _split(arrs, cfg.val_fraction, seed)
    out, rows = {}, []
    for algo in ("td3", "ams-td3"):
        _, r, final = train_critic(tr, val, replace(cfg), algo, seed, device)
        rows += r
        out[algo] = final

    def red(k):
        p, a = out["td3"].get(k), out["ams-td3"].get(k)
        if p is None or a is None or p == 0:
            return None
        return round(1.0 - abs(a) / abs(p), 4)

    s = {"transitions": int(arrs["obs"].shape[0]), "validation": int(val["obs"].shape[0]), "updates": cfg.updates,
         "ams_k": cfg.ams_k, "ams_k_used": directions_used(cfg.ams_k, int(arrs["act"].shape[1]), cfg.ams_directions),
         "ams_rho": cfg.ams_rho}
    for algo, name in (("td3", "point"), ("ams-td3", "ams")):
        s.update({f"{name}_{k}": v for k, v in final_figures(out[algo]).items()})
    for k in REDUCED:
        s[f"reduction_{k}"] = red(k)
    p, a = s["point_val_td_loss"], s["ams_val_td_loss"]  # each learner against its own target
    s["td_loss_not_worse"] = None if p is None or a is None else bool(a <= p)
    s["update_time_ratio"] = (round(s["ams_update_ms"] / s["point_update_ms"], 3)
                              if s["point_update_ms"] else None)
    return StudyResult(rows, s)
