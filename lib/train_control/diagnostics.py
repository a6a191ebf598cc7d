"""The four Lipschitz pathway gains [reconstructed]: the abstract names the stages (L1 action
parameterisation, L2 dynamics sensitivity, L3 Q-network curvature, L4 TD-target stability) and says
they multiply; how each is measured here is ours (method sheet train-control.md).

- L1: ||da/ds||_2 of the actor (tanh and scale included; SAC: its mean action), per state by power
  iteration on J^T J with forward-mode (JVP) and reverse-mode (VJP) products, batched (the actor acts
  on each row independently, so the batch Jacobian is block diagonal). Reported: the mean over states.
- L2: ||s'(a + delta) - s'(a)|| / ||delta|| by finite differences from saved simulator states (a full
  restore before every probe), delta = eps * random unit direction in normalised action units.
- L3: the spectral norm of the action Hessian of Q_1 (power iteration on HVPs), its Hutchinson trace
  (Rademacher probes; the action Laplacian), and ||grad_a Q_1||. The usual ReLU critic is piecewise
  linear, so its exact (double-backward) Hessian is zero almost everywhere: by default the HVP is the
  central difference of the action gradient at scale h = 0.05 (``hvp_step``; 0 gives the exact one).
- L4: the target's sensitivity to its action: mean |y(a' + delta) - y(a')| / ||delta|| (||delta|| = rho,
  the method's own target: the AMS neighbourhood mean for ams-*), std_delta y(a' + delta), the TD-error
  std, and the drift of y on the validation batch between two diagnostics.
- Where: L3 at the dataset actions (s, a) of the batch (``l3_*``), and where the policy and AMS act
  [reconstructed]: at (s, pi(s)) (``l3_pi_*``, pi the deterministic actor or SAC's mean action) and at
  (s', a') with a' = pi_targ(s') (``l3_aprime_*``; SAC: its mean action at s'), the point whose value
  AMS replaces by the neighbourhood mean. Every L3 is of the online critic Q_1. L4 at (s, pi(s))
  (``l4_pi``): the same sensitivity of the method's own value V(s, .) (AMS: the neighbourhood mean) at
  a fixed probe radius 0.15 for every learner, scaled by gamma.
- pathway gain = L1 * L2 * L3_spectral * L4.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch.func import jvp, vjp

L4_PI_RADIUS = 0.15  # the probe radius of l4_pi, the same for every learner


def _unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm(dim=-1, keepdim=True).clamp_min(1e-30)


def actor_jacobian_norm(actor_fn, s: torch.Tensor, iters: int, gen: torch.Generator) -> torch.Tensor:
    """Per-row spectral norm of d actor_fn(s) / ds (B,) by power iteration on J^T J (JVP then VJP)."""
    s = s.detach()
    v = _unit(torch.randn(s.shape, generator=gen).to(s))
    _, pullback = vjp(actor_fn, s)
    sigma = torch.zeros(s.shape[0], dtype=s.dtype, device=s.device)
    for _ in range(iters):
        _, jv = jvp(actor_fn, (s,), (v,))
        (w,) = pullback(jv)
        sigma = jv.norm(dim=-1)
        v = _unit(w)
    _, jv = jvp(actor_fn, (s,), (v,))
    return jv.norm(dim=-1)


def _action_grad(q_fn, s, a) -> torch.Tensor:
    a = a.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(q_fn(s, a).sum(), a)
    return g.detach()


def _grad_and_hvp(q_fn, s, a, h: float = 0.0):
    """(grad_a Q, v -> H v). ``h`` = 0: the exact HVP by double backward (zero almost everywhere for a
    ReLU critic, whose action Hessian is a sum of kinks); ``h`` > 0: the central difference
    (grad Q(a + h v) - grad Q(a - h v)) / 2h, the curvature at scale h (exact for a quadratic Q)."""
    if h > 0:
        g0 = _action_grad(q_fn, s, a)

        def hvp_fd(v):
            g = _action_grad(q_fn, torch.cat([s, s]), torch.cat([a + h * v, a - h * v]))
            return (g[: a.shape[0]] - g[a.shape[0]:]) / (2 * h)

        return g0, hvp_fd
    a = a.detach().clone().requires_grad_(True)
    q = q_fn(s, a)
    (g,) = torch.autograd.grad(q.sum(), a, create_graph=True)

    def hvp(v):
        (hv,) = torch.autograd.grad((g * v).sum(), a, retain_graph=True)
        return hv

    return g.detach(), hvp


def hessian_spectral_norm(q_fn, s, a, iters: int, gen: torch.Generator, h: float = 0.0) -> torch.Tensor:
    """Per-row max |eigenvalue| of the action Hessian of q_fn(s, a) (B,), by power iteration on HVPs."""
    _, hvp = _grad_and_hvp(q_fn, s, a, h)
    v = _unit(torch.randn(a.shape, generator=gen).to(a))
    lam = torch.zeros(a.shape[0], dtype=a.dtype, device=a.device)
    for _ in range(iters):
        hv = hvp(v)
        lam = hv.norm(dim=-1)
        v = _unit(hv)
    return lam.detach()


def hessian_trace(q_fn, s, a, probes: int, gen: torch.Generator, h: float = 0.0) -> torch.Tensor:
    """Per-row Hutchinson estimate of tr(H) = Laplacian of Q in the action (B,) with Rademacher probes."""
    _, hvp = _grad_and_hvp(q_fn, s, a, h)
    tot = torch.zeros(a.shape[0], dtype=a.dtype, device=a.device)
    for _ in range(probes):
        z = (torch.randint(0, 2, a.shape, generator=gen) * 2 - 1).to(a)
        tot = tot + (z * hvp(z)).sum(-1)
    return (tot / probes).detach()


def action_grad_norm(q_fn, s, a) -> torch.Tensor:
    return _action_grad(q_fn, s, a).norm(dim=-1)


def value_sensitivity(agent, s: torch.Tensor, a: torch.Tensor, scale: torch.Tensor, gens: dict, probes: int,
                      r: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """scale * V(s, a) with V the method's own bootstrap value (:meth:`Agent.next_value`: min_i Q_targ,i,
    or its AMS neighbourhood mean), and over ``probes`` random directions delta of norm ``r``:
    (v0 (B,), |v(a + delta) - v0| / r (probes, B), v(a + delta) (probes, B))."""
    v0 = agent.next_value(s, a, gens) * scale
    ys, ratios = [], []
    for _ in range(probes):
        d = _unit(torch.randn(a.shape, generator=gens["diag"]).to(a)) * r
        v = agent.next_value(s, (a + d).clamp(-1, 1), gens) * scale
        ys.append(v)
        ratios.append((v - v0).abs() / r)
    return v0, torch.stack(ratios), torch.stack(ys)


def target_sensitivity(agent, batch: dict, gens: dict, probes: int, rho: float) -> dict:
    """L4: |y(a'+delta) - y(a')| / ||delta|| and std_delta y(a'+delta), with ||delta|| = rho (0.15 when
    rho = 0), TD3 noise off (a' = pi_targ(s') or SAC's mean action), the method's own value."""
    s2 = batch["next_obs"]
    a2 = next_actions(agent, s2)
    scale = agent.cfg.gamma * (1.0 - batch["done"])
    r = rho if rho > 0 else 0.15
    v0, ratios, ys = value_sensitivity(agent, s2, a2, scale, gens, probes, r)
    return {"l4": float(ratios.detach().mean()), "l4_std": float(ys.detach().std(dim=0).mean()),
            "y0": (v0 + batch["rew"]).detach()}


def next_actions(agent, s2: torch.Tensor) -> torch.Tensor:
    """a' = pi_targ(s') without TD3's target noise (SAC: the mean action of pi at s')."""
    with torch.no_grad():
        return agent.actor_targ.mean_action(s2) if agent.base == "td3" else agent.actor.mean_action(s2)


def curvature(q_fn, s, a, iters: int, probes: int, gen: torch.Generator, h: float, tag: str = "") -> dict:
    """L3 of ``q_fn`` at (s, a): the mean over rows of the Hessian spectral norm, of the signed and the
    absolute Hutchinson trace, and ||grad_a Q||; keys ``l3{tag}_spectral``, ``l3{tag}_trace``,
    ``l3{tag}_trace_abs``, ``grad_norm{tag}``."""
    out = {f"l3{tag}_spectral": float(hessian_spectral_norm(q_fn, s, a, iters, gen, h).mean())}
    tr = hessian_trace(q_fn, s, a, probes, gen, h)
    out[f"l3{tag}_trace"] = float(tr.mean())
    out[f"l3{tag}_trace_abs"] = float(tr.abs().mean())  # per-state |tr H|: the signed mean can cancel
    out[f"grad_norm{tag}"] = float(action_grad_norm(q_fn, s, a).mean())
    return out


def dynamics_sensitivity(env, states: list, obs_list: list, actor_fn, probes: int, gen: torch.Generator,
                         eps: float = 1e-2) -> float | None:
    """L2: mean over saved states and random directions of ||s'(a+delta) - s'(a)|| / ||delta||, with
    ||delta|| = eps (normalised action units), a = the actor's action; a full restore before each probe."""
    if not states:
        return None
    ratios = []
    for st, obs in zip(states, obs_list):
        with torch.no_grad():
            a = actor_fn(torch.from_numpy(obs).unsqueeze(0))[0].double().numpy()
        a = np.clip(a, -1 + eps, 1 - eps)
        env.set_sim_state(st)
        base = env.step(a)[0].astype(np.float64)
        for _ in range(probes):
            d = torch.randn(env.act_dim, generator=gen, dtype=torch.float64).numpy()
            d = eps * d / max(np.linalg.norm(d), 1e-30)
            env.set_sim_state(st)
            o = env.step(a + d)[0].astype(np.float64)
            ratios.append(np.linalg.norm(o - base) / eps)
    return float(np.mean(ratios))


def probe_states(env, actor_fn, n: int, seed_fn, warmup: int = 10):
    """``n`` saved simulator states (and their observations) reached by the deterministic actor after
    ``warmup`` steps from episode starts seeded by ``seed_fn(i)``."""
    states, obs_list = [], []
    for i in range(n):
        obs = env.reset(seed_fn(i))
        for _ in range(warmup + i):
            with torch.no_grad():
                a = actor_fn(torch.from_numpy(obs).unsqueeze(0))[0].double().numpy()
            obs, _, term, trunc = env.step(a)
            if term or trunc:
                obs = env.reset(seed_fn(i) + 1)
        states.append(env.get_sim_state())
        obs_list.append(obs.copy())
    return states, obs_list


def critic_diagnostics(agent, batch: dict, gens: dict, iters: int, probes: int, prev_y=None, h: float = 0.05) -> dict:
    """L1, L3 (spectral, trace, |grad|), L4 and the TD-error std of ``agent`` on ``batch``."""
    s, a = batch["obs"], batch["act"]
    g = gens["diag"]
    gens = {"diag": g, "ams": g, "target": g, "actor": g}  # the training streams stay untouched
    out = {}
    out["l1"] = float(actor_jacobian_norm(agent.actor.mean_action, s, iters, gens["diag"]).detach().mean())
    out.update(curvature(agent.critic.q_first, s, a, iters, probes, gens["diag"], h))
    rho = agent.cfg.ams_rho if agent.is_ams else 0.15
    t = target_sensitivity(agent, batch, gens, probes, rho)
    out["l4"], out["l4_std"] = t["l4"], t["l4_std"]
    with torch.no_grad():
        y = agent.td_target(batch, gens)
        q1, _ = agent.critic(s, a)
        out["td_std"] = float((q1 - y).std())
        out["td_loss"] = float((q1 - y).pow(2).mean())
    out["drift"] = None if prev_y is None else float((t["y0"] - prev_y).abs().mean())
    out["_y0"] = t["y0"]
    # where the policy and AMS act (drawn after the figures above, so those keep their random draws)
    with torch.no_grad():
        a_pi = agent.actor.mean_action(s)
    out.update(curvature(agent.critic.q_first, s, a_pi, iters, probes, gens["diag"], h, "_pi"))
    out.update(curvature(agent.critic.q_first, batch["next_obs"], next_actions(agent, batch["next_obs"]), iters,
                         probes, gens["diag"], h, "_aprime"))
    with torch.no_grad():
        _, ratios, _ = value_sensitivity(agent, s, a_pi, torch.full_like(batch["rew"], agent.cfg.gamma), gens,
                                         probes, L4_PI_RADIUS)
    out["l4_pi"] = float(ratios.mean())
    return out


def pathway_gain(d: dict) -> float | None:
    vals = [d.get("l1"), d.get("l2"), d.get("l3_spectral"), d.get("l4")]
    if any(v is None or not math.isfinite(v) for v in vals):
        return None
    return float(np.prod(vals))
