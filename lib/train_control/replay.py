"""The replay buffer (a ring of float32 arrays), its .npz format, and ``collect``.

.npz layout (``collect``'s output, ``critic-study``'s input): ``obs`` (N, obs_dim), ``act`` (N, d) in
[-1, 1], ``rew`` (N,), ``next_obs`` (N, obs_dim), ``done`` (N,) 1.0 where the episode terminated
(not merely truncated), and ``meta`` a JSON string (env, obs_dim, act_dim, policy, steps).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import torch

from icmlkit.lib.core.errors import InputError

FIELDS = ("obs", "act", "rew", "next_obs", "done")
FORMAT = "icmlkit.control.replay/1"


class ReplayBuffer:
    def __init__(self, obs_dim: int, act_dim: int, capacity: int):
        self.capacity = int(capacity)
        self.obs = np.zeros((self.capacity, obs_dim), np.float32)
        self.act = np.zeros((self.capacity, act_dim), np.float32)
        self.rew = np.zeros(self.capacity, np.float32)
        self.next_obs = np.zeros((self.capacity, obs_dim), np.float32)
        self.done = np.zeros(self.capacity, np.float32)
        self.ptr = 0
        self.size = 0

    def add(self, o, a, r, o2, d) -> None:
        i = self.ptr
        self.obs[i], self.act[i], self.rew[i], self.next_obs[i], self.done[i] = o, a, r, o2, float(d)
        self.ptr = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def last_actions(self, n: int) -> np.ndarray:
        """The ``n`` most recent actions, oldest first."""
        idx = (self.ptr - n + np.arange(n)) % self.capacity
        return self.act[idx]

    def sample(self, batch: int, gen: torch.Generator, device="cpu", part: slice = slice(None)) -> dict:
        """A uniform minibatch of ``batch`` indices drawn from ``gen``; ``part``: keep only these rows of
        it (a torchrun rank's share of a global batch, the indices drawn as one process would)."""
        idx = torch.randint(0, self.size, (batch,), generator=gen).numpy()[part]
        return self.take(idx, device)

    def take(self, idx, device="cpu") -> dict:
        return {k: torch.from_numpy(getattr(self, k)[idx]).to(device) for k in FIELDS}

    def state(self) -> dict:
        n = self.size
        return {"ptr": self.ptr, "size": n, **{k: torch.from_numpy(getattr(self, k)[:n].copy()) for k in FIELDS}}

    def load_state(self, st: dict) -> None:
        n = int(st["size"])
        for k in FIELDS:
            getattr(self, k)[:n] = st[k].numpy()
        self.ptr, self.size = int(st["ptr"]), n

    def arrays(self) -> dict:
        """The stored transitions in insertion order."""
        idx = np.arange(self.size) if self.size < self.capacity else (self.ptr + np.arange(self.size)) % self.capacity
        return {k: getattr(self, k)[idx] for k in FIELDS}

    @classmethod
    def from_arrays(cls, arrs: dict) -> "ReplayBuffer":
        n, od = arrs["obs"].shape
        buf = cls(od, arrs["act"].shape[1], n)
        for k in FIELDS:
            getattr(buf, k)[:] = arrs[k]
        buf.size, buf.ptr = n, 0
        return buf


def read_replay(path) -> tuple[dict, dict]:
    """(arrays, meta) of a replay .npz, checked: names, shapes, finiteness, actions in [-1, 1]."""
    from icmlkit.lib.core.io import load_npz

    z = load_npz(path, required=FIELDS)
    where = str(path)
    try:
        arrs = {k: np.asarray(z[k], dtype=np.float32) for k in FIELDS}
    except (TypeError, ValueError) as exc:
        raise InputError(f"arrays are not numeric ({exc})", where) from None
    n = arrs["obs"].shape[0] if arrs["obs"].ndim == 2 else -1
    if n < 2:
        raise InputError("'obs' must be an (N, obs_dim) array with N >= 2", where)
    if arrs["next_obs"].shape != arrs["obs"].shape:
        raise InputError(f"'next_obs' has shape {arrs['next_obs'].shape}, expected {arrs['obs'].shape}", where)
    if arrs["act"].ndim != 2 or arrs["act"].shape[0] != n or arrs["act"].shape[1] < 1:
        raise InputError(f"'act' has shape {arrs['act'].shape}, expected ({n}, d)", where)
    for k in ("rew", "done"):
        if arrs[k].shape != (n,):
            raise InputError(f"'{k}' has shape {arrs[k].shape}, expected ({n},)", where)
    for k in FIELDS:
        if not np.all(np.isfinite(arrs[k])):
            raise InputError(f"'{k}' holds NaN or infinite values", where)
    if np.abs(arrs["act"]).max() > 1.0 + 1e-6:
        raise InputError("'act' must be normalised to [-1, 1]", where)
    meta = {}
    if "meta" in z:
        try:
            meta = json.loads(str(z["meta"]))
        except (ValueError, TypeError):
            raise InputError("'meta' is not a JSON string", where) from None
        if not isinstance(meta, dict):
            raise InputError("'meta' is not a JSON object", where)
    return arrs, meta


@dataclass
class CollectResult:
    arrays: dict
    meta: dict
    summary: dict


def collect(env, cfg, seed: int, actor=None) -> CollectResult:
    """``cfg.steps`` transitions from ``env``: uniform random actions in [-1, 1], or ``actor``
    (a torch module s -> a in [-1, 1]) plus N(0, cfg.noise^2) noise. Episodes reset with seeds from
    the named stream "collect" of ``seed``."""
    from icmlkit.lib.core.runtime import generator, stream_seed

    gen = generator(seed, "collect-actions")
    buf = ReplayBuffer(env.obs_dim, env.act_dim, cfg.steps)
    ep = 0
    obs = env.reset(stream_seed(seed, f"collect/{ep}"))
    returns, ret = [], 0.0
    for _ in range(cfg.steps):
        if actor is None:
            a = (torch.rand(env.act_dim, generator=gen, dtype=torch.float64) * 2 - 1).numpy()
        else:
            with torch.no_grad():
                a = actor(torch.from_numpy(obs).unsqueeze(0))[0].double().numpy()
            a = np.clip(a + cfg.noise * torch.randn(env.act_dim, generator=gen, dtype=torch.float64).numpy(), -1, 1)
        o2, r, term, trunc = env.step(a)
        buf.add(obs, a, r, o2, term)
        ret += r
        obs = o2
        if term or trunc:
            returns.append(ret)
            ret, ep = 0.0, ep + 1
            obs = env.reset(stream_seed(seed, f"collect/{ep}"))
    meta = {"format": FORMAT, "env": env.spec, "obs_dim": env.obs_dim, "act_dim": env.act_dim,
            "policy": "random" if actor is None else "actor", "steps": cfg.steps}
    summary = {"env": env.spec, "steps": cfg.steps, "episodes": len(returns),
               "return_mean": float(np.mean(returns)) if returns else None, "obs_dim": env.obs_dim,
               "act_dim": env.act_dim, "policy": meta["policy"]}
    return CollectResult(buf.arrays(), meta, summary)


def write_replay(path, res: CollectResult) -> None:
    from icmlkit.lib.core.io import write_npz

    write_npz(path, **res.arrays, meta=np.array(json.dumps(res.meta)))
