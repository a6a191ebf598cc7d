"""Geometric action priors [reconstructed]: a structured linear action map applied before the env.

The abstract says the paper characterises when "geometric action priors" help; which priors and how
they enter is not known. Ours (off by default, ``action_prior="none"``) is a fixed linear map from a
latent action z in [-1, 1]^m, which the agent (actor, critics, AMS neighbours, replay buffer) sees as
its action, to the environment's normalised action a = clip(c + M z, -1, 1):

- ``lowrank``: M is a d x r basis with orthonormal columns, r = ``prior_rank`` (0: ceil(d / 2)):
  a random orthonormal basis (QR of a Gaussian from the named stream "prior" of the seed), or, with
  ``prior_basis`` (a replay .npz), the top r principal directions of that buffer's actions with c
  their mean (a PCA action basis, e.g. from a buffer collected by a trained actor);
- ``symmetric``: left-right sharing for legged bodies. ``prior_pairs`` "i:j,k:-l" makes actuator j
  copy actuator i (``-l``: mirror it with the opposite sign); every pair and every unpaired actuator
  is one latent coordinate, so m = d - (number of pairs).

The map is stored in the run's config.json (``env_info.action_prior``: kind, matrix, offset), so
``eval``, ``diagnose`` and ``collect --actor`` rebuild it. L2 is then measured with respect to z.
On ``dmc:lqr-*`` the optimal policy's action is projected to the latent space by least squares.
"""
from __future__ import annotations

import math

import numpy as np

from icmlkit.lib.train_control.envs import ControlEnv
from icmlkit.lib.core.errors import InputError, UsageError

PRIORS = ("none", "lowrank", "symmetric")


def parse_pairs(text: str, d: int) -> list[tuple[int, int, float]]:
    """``"0:3,1:-4"`` -> [(0, 3, 1.0), (1, 4, -1.0)]; indices in [0, d), each actuator in one pair at most."""
    pairs, seen = [], set()
    for item in [p.strip() for p in str(text).split(",") if p.strip()]:
        try:
            left, right = item.split(":")
            i, j = int(left), int(right.strip())
            sign = -1.0 if right.strip().startswith("-") else 1.0
            j = abs(j)
        except ValueError:
            raise UsageError(f"--prior-pairs: {item!r} is not i:j or i:-j (actuator indices)") from None
        if not (0 <= i < d and 0 <= j < d) or i == j:
            raise UsageError(f"--prior-pairs: {item!r} needs two different actuator indices in [0, {d})")
        if i in seen or j in seen:
            raise UsageError(f"--prior-pairs: actuator {i if i in seen else j} appears in two pairs")
        seen.update((i, j))
        pairs.append((i, j, sign))
    if not pairs:
        raise UsageError("--action-prior symmetric needs --prior-pairs, e.g. 0:3,1:4 (actuator j copies i)")
    return pairs


def symmetric_map(d: int, pairs: list[tuple[int, int, float]]) -> np.ndarray:
    """The d x m 0/+-1 matrix of left-right sharing (latent order: actuators in index order, the
    follower of each pair dropped)."""
    follower = {j: (i, s) for i, j, s in pairs}
    leaders = [k for k in range(d) if k not in follower]
    col = {k: n for n, k in enumerate(leaders)}
    m = np.zeros((d, len(leaders)))
    for k in range(d):
        if k in follower:
            i, s = follower[k]
            m[k, col[i]] = s
        else:
            m[k, col[k]] = 1.0
    return m


def lowrank_map(d: int, rank: int, seed: int, actions: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(M, c): a d x rank basis with orthonormal columns, random or the PCA of ``actions`` (N, d)."""
    if actions is None:
        from icmlkit.lib.core.runtime import numpy_rng

        g = numpy_rng(seed, "prior").standard_normal((d, rank))
        q, r = np.linalg.qr(g)
        return q * np.sign(np.where(np.diag(r) == 0, 1.0, np.diag(r))), np.zeros(d)
    c = actions.mean(axis=0)
    _, _, vt = np.linalg.svd(actions - c, full_matrices=False)
    m = vt[:rank].T
    m = m * np.where(m[np.abs(m).argmax(axis=0), np.arange(rank)] < 0, -1.0, 1.0)  # sign fix: largest entry > 0
    return m, c


def build_prior(cfg, d: int, seed: int) -> dict | None:
    """The prior of ``cfg`` (``action_prior``, ``prior_rank``, ``prior_pairs``, ``prior_basis``) for a
    d-dimensional action: {"kind", "matrix" (d x m list), "offset" (d list)}, or None."""
    kind = getattr(cfg, "action_prior", "none")
    if kind == "none":
        return None
    if kind == "symmetric":
        m, c = symmetric_map(d, parse_pairs(cfg.prior_pairs, d)), np.zeros(d)
    elif kind == "lowrank":
        rank = cfg.prior_rank or math.ceil(d / 2)
        if not 1 <= rank <= d:
            raise UsageError(f"--prior-rank must be in [1, {d}] (the action dimension), not {rank}")
        acts = None
        if cfg.prior_basis:
            from icmlkit.lib.train_control.replay import read_replay

            arrs, _ = read_replay(cfg.prior_basis)
            acts = arrs["act"].astype(np.float64)
            if acts.shape[1] != d:
                raise InputError(f"its actions are {acts.shape[1]}-D; the environment's are {d}-D",
                                 str(cfg.prior_basis))
            if acts.shape[0] < rank:
                raise InputError(f"{acts.shape[0]} transitions cannot give a rank-{rank} basis", str(cfg.prior_basis))
        m, c = lowrank_map(d, rank, seed, acts)
    else:
        raise UsageError(f"--action-prior must be one of {', '.join(PRIORS)}, not {kind!r}")
    return {"kind": kind, "matrix": m.tolist(), "offset": c.tolist()}


class PriorEnv(ControlEnv):
    """``inner`` seen through the action map a = clip(c + M z): actions z in [-1, 1]^m."""

    def __init__(self, inner: ControlEnv, prior: dict):
        self.inner = inner
        self.prior = prior
        self.matrix = np.asarray(prior["matrix"], dtype=np.float64)
        self.offset = np.asarray(prior["offset"], dtype=np.float64)
        if self.matrix.ndim != 2 or self.matrix.shape[0] != inner.act_dim or self.offset.shape != (inner.act_dim,):
            raise InputError(f"the action prior's matrix {self.matrix.shape} does not fit {inner.spec}'s "
                             f"{inner.act_dim}-D action", "action_prior")
        m = self.matrix.shape[1]
        super().__init__(inner.spec, -np.ones(m), np.ones(m), inner.obs_dim, inner.max_steps)
        self.kind = inner.kind
        self.is_lqr = getattr(inner, "is_lqr", False)

    def env_action(self, z) -> np.ndarray:
        z = np.clip(np.asarray(z, dtype=np.float64), -1.0, 1.0)
        return np.clip(self.offset + self.matrix @ z, -1.0, 1.0)

    def info(self) -> dict:
        return {**self.inner.info(), "act_dim": self.act_dim, "env_act_dim": self.inner.act_dim,
                "action_prior": self.prior}

    def reset(self, seed: int) -> np.ndarray:
        return self.inner.reset(seed)

    def step(self, z):
        return self.inner.step(self.env_action(z))

    def get_sim_state(self):
        return self.inner.get_sim_state()

    def set_sim_state(self, st) -> None:
        self.inner.set_sim_state(st)

    def optimal_action(self, obs) -> np.ndarray:
        """The LQR-optimal action projected to the latent space (least squares), clipped to [-1, 1]."""
        u = self.inner.optimal_action(obs)
        z, *_ = np.linalg.lstsq(self.matrix, u - self.offset, rcond=None)
        return np.clip(z, -1.0, 1.0)

    def close(self):
        self.inner.close()


def with_prior(env: ControlEnv, prior: dict | None) -> ControlEnv:
    return env if prior is None else PriorEnv(env, prior)
