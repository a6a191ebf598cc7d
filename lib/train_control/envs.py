"""Environments behind one small interface: Gymnasium ids (any registered continuous-action id,
a user's own included) and dm_control suite tasks (``dmc:<domain>-<task>``, e.g. ``dmc:dog-run``,
and ``dmc:lqr-<n>`` / ``dmc:lqr-<bodies>-<actuators>``, the procedurally generated LQR of
``dm_control.suite.lqr._make_lqr`` with its exact optimum from ``lqr_solver``).

Actions are always in [-1, 1]^d and rescaled affinely to the environment's bounds (sfujim/TD3 #19:
an action-scale bug made TD3 "fail" on Humanoid). The LQR's motors are unbounded: ``LQR_BOUND``
(2.0, above the largest optimal control seen on lqr-38, 1.33) is the bound used **[reconstructed]**.
Observations are flattened to float32 vectors (a dm_control dict in its key order).

Simulator states for the L2 diagnostic (:meth:`ControlEnv.get_sim_state` / ``set_sim_state``): a
Gymnasium MuJoCo env through ``env.unwrapped.set_state(qpos, qvel)`` plus act, ctrl, time and the
solver warm start; dm_control through ``physics.get_state()/set_state()`` plus time and warm start;
classic-control envs (Pendulum) through their ``state`` attribute. Each restore is a full reset.
"""
from __future__ import annotations

import contextlib
import copy
import difflib
import re
import warnings

import numpy as np

from icmlkit.lib.core.errors import EnvironmentProblem, UsageError, require_module

LQR_BOUND = 2.0
LQR_HORIZON = 300
LQR_MODEL_SEED = 0
LQR_CONTROL_COST = 0.1
_LQR = re.compile(r"^lqr-(\d+)(?:-(\d+))?$")


def env_id(spec: str) -> str:
    """An environment spec in one spelling, for comparing a run's environment with the one it is given
    (``dmc:lqr-N`` is ``dmc:lqr-N-N``)."""
    spec = str(spec).strip()
    m = _LQR.match(spec[4:]) if spec.startswith("dmc:") else None
    return f"dmc:lqr-{m.group(1)}-{m.group(2) or m.group(1)}" if m else spec


@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _gym():
    with _quiet():
        return require_module("gymnasium", "train-control", "gymnasium[mujoco]")


def _dmc_suite():
    require_module("mujoco", "train-control", "mujoco==3.17.0")
    with _quiet():
        require_module("dm_control", "train-control", "dm-control==1.0.50")
        from dm_control import suite
    return suite


class ControlEnv:
    """One environment with actions in [-1, 1]^d; ``reset(seed)``, ``step(a)``, simulator states."""

    kind = "base"

    def __init__(self, spec: str, act_low: np.ndarray, act_high: np.ndarray, obs_dim: int, max_steps: int):
        self.spec = spec
        self.low = np.asarray(act_low, dtype=np.float64)
        self.high = np.asarray(act_high, dtype=np.float64)
        self.act_dim = int(self.low.shape[0])
        self.obs_dim = int(obs_dim)
        self.max_steps = int(max_steps)
        self.t = 0

    def scale(self, a) -> np.ndarray:
        a = np.clip(np.asarray(a, dtype=np.float64), -1.0, 1.0)
        return self.low + (a + 1.0) * 0.5 * (self.high - self.low)

    def info(self) -> dict:
        return {"env": self.spec, "kind": self.kind, "obs_dim": self.obs_dim, "act_dim": self.act_dim,
                "act_low": self.low.tolist(), "act_high": self.high.tolist(), "max_episode_steps": self.max_steps}

    # lqr only
    lqr_gain = None

    def optimal_action(self, obs) -> np.ndarray:
        raise UsageError(f"{self.spec} has no known optimal policy (only dmc:lqr-* does)")


class GymEnv(ControlEnv):
    kind = "gymnasium"

    def __init__(self, spec: str, max_episode_steps: int = 0):
        gym = _gym()
        kw = {"max_episode_steps": max_episode_steps} if max_episode_steps else {}
        try:
            with _quiet():
                env = gym.make(spec, disable_env_checker=True, **kw)
        except gym.error.DependencyNotInstalled as exc:
            raise EnvironmentProblem(f"{spec} needs a package that is not installed ({exc})") from None
        except gym.error.Error as exc:
            known = sorted(gym.registry.keys())
            close = difflib.get_close_matches(spec, known, n=5, cutoff=0.5)
            hint = f"; close matches: {', '.join(close)}" if close else "; see `python -m gymnasium list` or use dmc:<domain>-<task>"
            raise UsageError(f"unknown environment id {spec!r} ({type(exc).__name__}){hint}") from None
        except TypeError as exc:  # an id whose constructor rejects the keyword
            raise UsageError(f"cannot make environment {spec!r}: {exc}") from None
        space = env.action_space
        if not isinstance(space, gym.spaces.Box):
            env.close()
            raise UsageError(f"{spec} has a {type(space).__name__} action space ({space}); train-control needs a "
                             "continuous (Box) action space")
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            env.close()
            raise UsageError(f"{spec} has unbounded actions; train-control rescales actions to [-1, 1] and needs "
                             "finite bounds")
        self.env = env
        self.obs_space = env.observation_space
        obs_dim = int(gym.spaces.flatdim(self.obs_space))
        limit = max_episode_steps or (env.spec.max_episode_steps if env.spec else 0) or 0
        super().__init__(spec, space.low.reshape(-1), space.high.reshape(-1), obs_dim, limit)
        self.uw = env.unwrapped
        self._gym_mod = gym

    def _flat(self, obs) -> np.ndarray:
        return np.asarray(self._gym_mod.spaces.flatten(self.obs_space, obs), dtype=np.float32).reshape(-1)

    def reset(self, seed: int) -> np.ndarray:
        self.t = 0
        with _quiet():
            obs, _ = self.env.reset(seed=int(seed) % (2 ** 32))
        return self._flat(obs)

    def step(self, a):
        with _quiet():
            obs, r, term, trunc, _ = self.env.step(self.scale(a).astype(self.env.action_space.dtype))
        self.t += 1
        return self._flat(obs), float(r), bool(term), bool(trunc)

    def get_sim_state(self):
        uw = self.uw
        if hasattr(uw, "set_state") and hasattr(uw, "data"):
            d = uw.data
            return {"qpos": d.qpos.copy(), "qvel": d.qvel.copy(), "act": d.act.copy(), "ctrl": d.ctrl.copy(),
                    "time": float(d.time), "qacc_warmstart": d.qacc_warmstart.copy()}
        if hasattr(uw, "state"):
            return {"state": copy.deepcopy(uw.state)}
        return None

    def set_sim_state(self, st) -> None:
        uw = self.uw
        if "qpos" in st:
            uw.set_state(st["qpos"], st["qvel"])
            d = uw.data
            d.act[:] = st["act"]
            d.ctrl[:] = st["ctrl"]
            d.qacc_warmstart[:] = st["qacc_warmstart"]
            d.time = st["time"]
        else:
            uw.state = copy.deepcopy(st["state"])

    def close(self):
        self.env.close()


class DmcEnv(ControlEnv):
    kind = "dm_control"

    def __init__(self, spec: str, max_episode_steps: int = 0):
        suite = _dmc_suite()
        name = spec[4:]
        m = _LQR.match(name)
        if m:
            nb = int(m.group(1))
            na = int(m.group(2) or nb)
            if not 1 <= na <= nb:
                raise UsageError(f"{spec}: need 1 <= actuators <= bodies")
            from dm_control.suite import lqr

            with _quiet():
                env = lqr._make_lqr(n_bodies=nb, n_actuators=na, control_cost_coef=LQR_CONTROL_COST,
                                    time_limit=float("inf"), random=LQR_MODEL_SEED, environment_kwargs=None)
            limit = max_episode_steps or LQR_HORIZON
            self.is_lqr = True
        else:
            known = [f"{d}-{t}" for d, t in suite.ALL_TASKS]
            parts = None
            for d, t in suite.ALL_TASKS:
                if name == f"{d}-{t}":
                    parts = (d, t)
            if parts is None:
                close = difflib.get_close_matches(name, known + ["lqr-38"], n=5, cutoff=0.5)
                hint = f"; close matches: {', '.join('dmc:' + c for c in close)}" if close else ""
                raise UsageError(f"unknown dm_control task {spec!r}{hint}")
            with _quiet():
                env = suite.load(parts[0], parts[1], task_kwargs={"random": 0})
            limit = max_episode_steps or 0
            self.is_lqr = False
        self.env = env
        spec_a = env.action_spec()
        low, high = np.asarray(spec_a.minimum, np.float64).reshape(-1), np.asarray(spec_a.maximum, np.float64).reshape(-1)
        low = np.broadcast_to(low, spec_a.shape).copy() if low.size == 1 else low
        high = np.broadcast_to(high, spec_a.shape).copy() if high.size == 1 else high
        if self.is_lqr:
            low, high = np.full(spec_a.shape, -LQR_BOUND), np.full(spec_a.shape, LQR_BOUND)
        obs_dim = sum(int(np.prod(v.shape)) for v in env.observation_spec().values())
        super().__init__(spec, low, high, obs_dim, limit)
        self.physics = env.physics
        self._gain = None
        if self.is_lqr:  # the optimal gain needs the mass matrix of a forwarded state: compute it once, now
            from dm_control.suite import lqr_solver

            with _quiet():
                env.reset()
                self._gain = np.asarray(lqr_solver.solve(env)[1])

    def _flat(self, obs) -> np.ndarray:
        return np.concatenate([np.asarray(v, dtype=np.float32).reshape(-1) for v in obs.values()])

    def reset(self, seed: int) -> np.ndarray:
        self.t = 0
        self.env.task._random = np.random.RandomState(int(seed) % (2 ** 32))
        with _quiet():
            ts = self.env.reset()
        return self._flat(ts.observation)

    def step(self, a):
        with _quiet():
            ts = self.env.step(self.scale(a))
        self.t += 1
        term = bool(ts.last() and ts.discount is not None and ts.discount == 0)
        trunc = bool(ts.last() and not term) or (self.max_steps > 0 and self.t >= self.max_steps)
        return self._flat(ts.observation), float(ts.reward or 0.0), term, trunc

    def get_sim_state(self):
        p = self.physics
        return {"state": p.get_state().copy(), "time": float(p.data.time),
                "qacc_warmstart": p.data.qacc_warmstart.copy(), "ctrl": p.data.ctrl.copy()}

    def set_sim_state(self, st) -> None:
        p = self.physics
        with p.reset_context():
            p.set_state(st["state"])
            p.data.qacc_warmstart[:] = st["qacc_warmstart"]
            p.data.ctrl[:] = st["ctrl"]
        p.data.time = st["time"]

    @property
    def lqr_gain(self):
        return self._gain

    def optimal_action(self, obs) -> np.ndarray:
        """The LQR-optimal control u = K x (x = [qpos, qvel] = the observation), normalised to [-1, 1]."""
        if not self.is_lqr:
            return super().optimal_action(obs)
        u = self.lqr_gain @ np.asarray(obs, dtype=np.float64)
        return np.clip(u / LQR_BOUND, -1.0, 1.0)

    def close(self):
        with contextlib.suppress(Exception):
            self.env.close()


def make_env(spec: str, max_episode_steps: int = 0) -> ControlEnv:
    """A Gymnasium id (``Pendulum-v1``, ``Humanoid-v5``, any registered one) or ``dmc:<domain>-<task>``
    / ``dmc:lqr-<n>``. Unknown ids are a usage error naming close matches; a discrete action space
    too; a missing gymnasium / mujoco / dm-control exits 4 with the install hint."""
    spec = str(spec).strip()
    if not spec:
        raise UsageError("ENV is empty; give a Gymnasium id (e.g. Pendulum-v1) or dmc:<domain>-<task>")
    if spec.startswith("dmc:"):
        return DmcEnv(spec, max_episode_steps)
    return GymEnv(spec, max_episode_steps)
