"""TD3 and SAC with point or AMS targets (actions in [-1, 1]).

TD3 (Fujimoto et al. 2018) and SAC (Haarnoja et al. 2018) with the usual defaults: Adam 3e-4, batch
256, 256-256 ReLU MLPs, twin critics, tau 0.005; TD3 target noise 0.2 clipped 0.5 and policy delay 2;
SAC with a tanh-squashed Gaussian (log-std clamped to [-5, 2]) and automatic entropy tuning to the
target entropy -d. Written from the papers, not copied from any implementation.

AMS targets and the other extensions are **[reconstructed]** (see :mod:`icmlkit.lib.train_control.ams`):
- ``ams-td3``: a' = pi_targ(s') (plus TD3's clipped noise only with ``ams_td3_noise``), then the
  neighbourhood mean of min_i Q_targ,i;
- ``ams-sac``: a' ~ pi(.|s') (post-tanh), the same neighbours, alpha log pi(a'|s') subtracted once;
- local manifold supervision (``lambda_nb`` > 0): the critics also regress Q(s, clip(a + rho u_k)) to
  the same y for ``nb_k`` random orthonormal directions;
- Lipschitz-constrained critic: spectral norm on the hidden layers, or a penalty gp_weight * |grad_a Q|^2.

Data parallel (torchrun): :meth:`Agent.update` takes this rank's rows of a global minibatch
(``part``: the global row count and this rank's slice) and a :class:`~icmlkit.lib.core.runtime.Dist`.
Every random draw of an update (TD3 target noise, SAC samples, AMS directions, neighbour directions) is
made for the whole global batch from the shared streams and sliced, and every gradient is averaged
over the ranks before its optimiser step, so all ranks apply the same update and their parameters stay
identical; with the same rows on each rank the update equals one process's on the global batch up to
the order of the float sums.
"""
from __future__ import annotations

import copy
import math

import torch
from torch import nn

from icmlkit.lib.train_control.ams import directions_used, k_note, neighbourhood_mean, neighbours, orthonormal_directions
from icmlkit.lib.core.runtime import seeded

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def mlp(n_in: int, n_out: int, hidden: int, spectral: bool = False) -> nn.Sequential:
    layers = [nn.Linear(n_in, hidden), nn.Linear(hidden, hidden)]
    if spectral:
        layers = [nn.utils.parametrizations.spectral_norm(layer) for layer in layers]
    return nn.Sequential(layers[0], nn.ReLU(), layers[1], nn.ReLU(), nn.Linear(hidden, n_out))


class TwinQ(nn.Module):
    """Two independent Q networks Q_i(s, a) (the input is the concatenation [s, a])."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int, spectral: bool = False):
        super().__init__()
        self.q1 = mlp(obs_dim + act_dim, 1, hidden, spectral)
        self.q2 = mlp(obs_dim + act_dim, 1, hidden, spectral)

    def forward(self, s, a):
        x = torch.cat([s, a], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)

    def q_min(self, s, a):
        q1, q2 = self(s, a)
        return torch.minimum(q1, q2)

    def q_first(self, s, a):
        return self.q1(torch.cat([s, a], dim=-1)).squeeze(-1)


class DeterministicActor(nn.Module):
    """TD3's actor: a = tanh(f(s)) in [-1, 1]^d."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int):
        super().__init__()
        self.net = mlp(obs_dim, act_dim, hidden)

    def forward(self, s):
        return torch.tanh(self.net(s))

    def mean_action(self, s):
        return self(s)


class GaussianActor(nn.Module):
    """SAC's actor: a = tanh(mu + sigma eps); ``mean_action`` is tanh(mu) (the evaluation action)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int):
        super().__init__()
        self.net = mlp(obs_dim, 2 * act_dim, hidden)
        self.act_dim = act_dim

    def dist_params(self, s):
        out = self.net(s)
        mu, log_std = out[..., :self.act_dim], out[..., self.act_dim:]
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
        return mu, log_std

    def forward(self, s):
        return self.mean_action(s)

    def mean_action(self, s):
        return torch.tanh(self.dist_params(s)[0])

    def sample(self, s, eps: torch.Tensor):
        """(action, log pi(action | s)) for standard-normal ``eps`` (reparameterised)."""
        mu, log_std = self.dist_params(s)
        std = log_std.exp()
        pre = mu + std * eps
        a = torch.tanh(pre)
        logp = (-0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - (2 * (math.log(2) - pre - nn.functional.softplus(-2 * pre))).sum(-1)
        return a, logp


def randn(shape, gen: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """Standard normal draws from a CPU generator, moved to ``like``'s device and dtype."""
    return torch.randn(shape, generator=gen).to(device=like.device, dtype=like.dtype)


def average_gradients(params, dist) -> None:
    """Each gradient replaced by its mean over the torchrun ranks (nothing for one process or no job)."""
    if dist is not None:
        dist.average_gradients(params)


class Agent:
    """Actor, twin critics, their targets, optimisers and (SAC) the log-temperature.

    ``cfg`` is an :class:`~icmlkit.lib.train_control.config.AgentConfig`-like object with ``algo``
    (td3 / sac / ams-td3 / ams-sac)."""

    def __init__(self, obs_dim: int, act_dim: int, cfg, algo: str, seed: int, device="cpu"):
        self.cfg, self.algo = cfg, algo
        self.base = algo.split("-")[-1]
        self.is_ams = algo.startswith("ams-")
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.device = torch.device(device)
        spectral = getattr(cfg, "critic_constraint", "none") == "spectral"
        with seeded(seed, "init"):
            actor_cls = GaussianActor if self.base == "sac" else DeterministicActor
            self.actor = actor_cls(obs_dim, act_dim, cfg.hidden).to(self.device)
            self.critic = TwinQ(obs_dim, act_dim, cfg.hidden, spectral).to(self.device)
        self.actor_targ = copy.deepcopy(self.actor)
        self.critic_targ = copy.deepcopy(self.critic)
        for p in [*self.actor_targ.parameters(), *self.critic_targ.parameters()]:
            p.requires_grad_(False)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.lr)
        self.log_alpha = torch.tensor(math.log(getattr(cfg, "init_alpha", 1.0)), device=self.device,
                                      requires_grad=True)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=cfg.lr)
        self.target_entropy = -float(act_dim)
        self.updates = 0
        self._part = None  # (global rows, this rank's slice) during a data-parallel update

    @property
    def ams_k(self) -> int:
        """AMS's K actually drawn (orthogonal directions in 1-D repeat a' +- rho: capped, see
        :func:`~icmlkit.lib.train_control.ams.directions_used`)."""
        return directions_used(self.cfg.ams_k, self.act_dim, self.cfg.ams_directions)

    @property
    def nb_k(self) -> int:
        return directions_used(self.cfg.nb_k, self.act_dim, "orthogonal")

    def k_notes(self) -> list[str]:
        """One warning line per K that was capped (AMS's --ams-k, the manifold loss's --nb-k)."""
        notes = [k_note("--ams-k", self.cfg.ams_k, self.act_dim, self.cfg.ams_directions) if self.is_ams else None,
                 k_note("--nb-k", self.cfg.nb_k, self.act_dim) if self.cfg.lambda_nb > 0 else None]
        return [n for n in notes if n]

    def _rows(self, n: int) -> tuple[int, slice]:
        """Rows to draw random numbers for and the slice of them that belongs to this batch: the whole
        global batch under torchrun (so every rank's draws are those of one process), else ``n``."""
        return self._part if self._part is not None else (n, slice(None))

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def act(self, obs: torch.Tensor, gen: torch.Generator, explore: bool, expl_noise: float = 0.1) -> torch.Tensor:
        """Actions in [-1, 1] for a batch of observations (exploration noise from ``gen``)."""
        if not explore:
            return self.actor.mean_action(obs)
        if self.base == "sac":
            a, _ = self.actor.sample(obs, randn((obs.shape[0], self.act_dim), gen, obs))
            return a
        a = self.actor(obs)
        return (a + expl_noise * randn(a.shape, gen, a)).clamp(-1.0, 1.0)

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    # ------------------------------------------------------------------ targets
    def next_action(self, s2: torch.Tensor, gens: dict, noise: bool):
        """a' (and log pi(a'|s') for SAC, else None)."""
        n, part = self._rows(s2.shape[0])
        if self.base == "sac":
            return self.actor.sample(s2, randn((n, self.act_dim), gens["target"], s2)[part])
        a2 = self.actor_targ(s2)
        if noise:
            eps = (self.cfg.policy_noise * randn((n, self.act_dim), gens["target"], a2)[part]).clamp(
                -self.cfg.noise_clip, self.cfg.noise_clip)
            a2 = (a2 + eps).clamp(-1.0, 1.0)
        return a2, None

    def next_value(self, s2: torch.Tensor, a2: torch.Tensor, gens: dict, ams: bool | None = None) -> torch.Tensor:
        """The bootstrap value at (s', a'): min_i Q_targ,i (point) or its AMS neighbourhood mean."""
        ams = self.is_ams if ams is None else ams
        if not ams:
            return self.critic_targ.q_min(s2, a2)
        c = self.cfg
        n, part = self._rows(s2.shape[0])
        u = orthonormal_directions(n, self.act_dim, self.ams_k, gens["ams"], per=c.ams_resample,
                                   kind=c.ams_directions, dtype=s2.dtype, device=s2.device)[part]
        return neighbourhood_mean(self.critic_targ.q_min, s2, a2, u, c.ams_rho, c.ams_center_weight)

    @torch.no_grad()
    def td_target(self, batch: dict, gens: dict, ams: bool | None = None) -> torch.Tensor:
        """y = r + gamma (1 - done) [V(s', a') - alpha log pi] with the point or AMS value."""
        ams = self.is_ams if ams is None else ams
        noise = self.base == "td3" and (not ams or self.cfg.ams_td3_noise)
        a2, logp = self.next_action(batch["next_obs"], gens, noise)
        v = self.next_value(batch["next_obs"], a2, gens, ams)
        if logp is not None:
            v = v - self.alpha * logp
        return batch["rew"] + self.cfg.gamma * (1.0 - batch["done"]) * v

    # ------------------------------------------------------------------ updates
    def critic_loss(self, batch: dict, y: torch.Tensor, gens: dict) -> tuple[torch.Tensor, dict]:
        s, a = batch["obs"], batch["act"]
        c = self.cfg
        gp = getattr(c, "critic_constraint", "none") == "gp"
        if gp:
            a = a.clone().requires_grad_(True)
        q1, q2 = self.critic(s, a)
        loss = (q1 - y).pow(2).mean() + (q2 - y).pow(2).mean()
        info = {"q_mean": float(q1.detach().mean()), "q_absmax": float(torch.maximum(q1.detach().abs().max(),
                                                                                   q2.detach().abs().max()))}
        if c.lambda_nb > 0:
            n, part = self._rows(s.shape[0])
            u = orthonormal_directions(n, self.act_dim, self.nb_k, gens["ams"], kind="orthogonal",
                                       dtype=s.dtype, device=s.device)[part]
            nb = neighbours(a.detach(), u, c.ams_rho)  # (B, 2 nb_k, d)
            m = nb.shape[1]
            ss = s.unsqueeze(1).expand(-1, m, -1).reshape(-1, s.shape[-1])
            n1, n2 = self.critic(ss, nb.reshape(-1, self.act_dim))
            yy = y.unsqueeze(1).expand(-1, m).reshape(-1)
            loss = loss + c.lambda_nb * ((n1 - yy).pow(2).mean() + (n2 - yy).pow(2).mean())
        if gp:
            g = torch.autograd.grad((q1 + q2).sum(), a, create_graph=True)[0]
            loss = loss + c.gp_weight * g.pow(2).sum(-1).mean()
        return loss, info

    def soft_update(self) -> None:
        tau = self.cfg.tau
        with torch.no_grad():
            for net, targ in ((self.actor, self.actor_targ), (self.critic, self.critic_targ)):
                for p, pt in zip(net.parameters(), targ.parameters()):
                    pt.mul_(1.0 - tau).add_(p.detach(), alpha=tau)
                for b, bt in zip(net.buffers(), targ.buffers()):
                    bt.copy_(b)

    def update(self, batch: dict, gens: dict, dist=None, part: tuple[int, slice] | None = None) -> dict:
        """One critic update (and the actor / temperature / targets on their schedule); returns this
        rank's losses. Under torchrun ``batch`` holds this rank's rows ``part[1]`` of a global batch of
        ``part[0]`` rows and ``dist`` averages the gradients (see the module docstring)."""
        self._part = part
        try:
            return self._update(batch, gens, dist)
        finally:
            self._part = None

    def _update(self, batch: dict, gens: dict, dist) -> dict:
        y = self.td_target(batch, gens)
        loss, info = self.critic_loss(batch, y, gens)
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        average_gradients(self.critic.parameters(), dist)
        self.critic_opt.step()
        info["critic_loss"] = float(loss.detach())
        self.updates += 1
        s = batch["obs"]
        if self.base == "td3":
            if self.updates % self.cfg.policy_delay == 0:
                a_loss = -self.critic.q_first(s, self.actor(s)).mean()
                self.actor_opt.zero_grad(set_to_none=True)
                a_loss.backward()
                average_gradients(self.actor.parameters(), dist)
                self.actor_opt.step()
                info["actor_loss"] = float(a_loss.detach())
                self.soft_update()
        else:
            n, part = self._rows(s.shape[0])
            a_pi, logp = self.actor.sample(s, randn((n, self.act_dim), gens["actor"], s)[part])
            a_loss = (self.alpha * logp - self.critic.q_min(s, a_pi)).mean()
            self.actor_opt.zero_grad(set_to_none=True)
            a_loss.backward()
            average_gradients(self.actor.parameters(), dist)
            self.actor_opt.step()
            info["actor_loss"] = float(a_loss.detach())
            if getattr(self.cfg, "autotune", True):
                al = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
                self.alpha_opt.zero_grad(set_to_none=True)
                al.backward()
                average_gradients([self.log_alpha], dist)
                self.alpha_opt.step()
            info["alpha"] = float(self.alpha)
            self.soft_update()
        self.critic.zero_grad(set_to_none=True)
        return info

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                "actor_targ": self.actor_targ.state_dict(), "critic_targ": self.critic_targ.state_dict(),
                "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
                "alpha_opt": self.alpha_opt.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
                "updates": self.updates}

    def load_state_dict(self, sd: dict) -> None:
        self.actor.load_state_dict(sd["actor"])
        self.critic.load_state_dict(sd["critic"])
        self.actor_targ.load_state_dict(sd["actor_targ"])
        self.critic_targ.load_state_dict(sd["critic_targ"])
        self.actor_opt.load_state_dict(sd["actor_opt"])
        self.critic_opt.load_state_dict(sd["critic_opt"])
        self.alpha_opt.load_state_dict(sd["alpha_opt"])
        with torch.no_grad():
            self.log_alpha.copy_(sd["log_alpha"])
        self.updates = int(sd["updates"])

    def weights(self) -> tuple[dict, dict]:
        """(actor tensors, critic tensors) for the run directory's .safetensors files."""
        actor = {k: v.detach().cpu().contiguous() for k, v in self.actor.state_dict().items()}
        critic = {k: v.detach().cpu().contiguous() for k, v in self.critic.state_dict().items()}
        return actor, critic
