"""The option dataclasses of train-control (train, eval, diagnose, collect, critic-study), with their
command-line help. Standard library only: the CLI builds its options from these at import time and
``--help`` must not import torch or numpy.

Every default past the abstract of Lin (ICML 2026) is **[reconstructed]**: the TD3/SAC defaults are
the usual ones (CleanRL / Stable-Baselines3); the AMS defaults K = 8, rho = 0.15 follow the method
sheet; the diagnostics' sizes are ours.
"""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.core.config import option as _opt
from icmlkit.lib.core.errors import UsageError

ALGOS = ("td3", "sac", "ams-td3", "ams-sac")


@dataclass
class AmsConfig:
    """The AMS target [reconstructed] (used by ams-td3 / ams-sac and by critic-study's AMS critic)."""

    ams_k: int = _opt(8, "AMS [reconstructed]: K orthonormal directions (antithetic: 2K neighbours); K > d "
                      "stacks independent orthonormal blocks (for 1-D actions K is capped at 1: every pair "
                      "is a' +- rho).", min=1)
    ams_rho: float = _opt(0.15, "AMS [reconstructed]: neighbourhood radius in normalised [-1,1] action units.",
                          min=0.0)
    ams_resample: str = _opt("element", "AMS [reconstructed]: redraw the directions per batch element or once "
                             "per batch.", choices=("element", "batch"))
    ams_directions: str = _opt("orthogonal", "AMS [reconstructed]: QR-orthonormal directions (sign-fixed) or "
                               "i.i.d. unit directions (the ablation).", choices=("orthogonal", "iid"))
    ams_center_weight: float = _opt(0.0, "AMS [reconstructed]: weight w0 of the centre point a' (the "
                                    "neighbours share 1 - w0).", min=0.0, max=1.0)
    ams_td3_noise: bool = _opt(False, "AMS-TD3 [reconstructed]: keep TD3's clipped target noise on top "
                               "(off: the pure AMS target).")
    lambda_nb: float = _opt(0.0, "Local manifold supervision [reconstructed]: weight of regressing "
                            "Q(s, a + rho u_k) to the same target (0: off).", min=0.0)
    nb_k: int = _opt(2, "Local manifold supervision [reconstructed]: directions per transition.", min=1)

    def check_ams(self) -> None:
        if self.ams_k < 1:
            raise UsageError(f"--ams-k must be >= 1, not {self.ams_k}")
        if self.ams_rho < 0:
            raise UsageError(f"--ams-rho must be >= 0, not {self.ams_rho}")
        if self.nb_k < 1:
            raise UsageError(f"--nb-k must be >= 1, not {self.nb_k}")


@dataclass
class AgentConfig(AmsConfig):
    """TD3 / SAC hyper-parameters (the usual defaults) and the reconstructed extensions."""

    lr: float = _opt(3e-4, "Adam learning rate of actor and critics.", min=0.0, min_open=True)
    batch: int = _opt(256, "Minibatch size (global under torchrun: batch / world rows from each rank's own "
                      "replay buffer).", min=1)
    gamma: float = _opt(0.99, "Discount.", min=0.0, max=1.0)
    tau: float = _opt(0.005, "Polyak factor of the target networks.", min=0.0, max=1.0)
    hidden: int = _opt(256, "Width of the two hidden layers of actor and critics (256-256).", min=1)
    policy_noise: float = _opt(0.2, "TD3: target policy noise std.", min=0.0)
    noise_clip: float = _opt(0.5, "TD3: target noise clip.", min=0.0)
    policy_delay: int = _opt(2, "TD3: actor and target update every this many critic updates.", min=1)
    init_alpha: float = _opt(1.0, "SAC: initial entropy temperature (tuned automatically to entropy -d).",
                             min=0.0, min_open=True)
    autotune: bool = _opt(True, "SAC: automatic entropy tuning (target entropy -d).")
    critic_constraint: str = _opt("none", "Lipschitz-constrained critic [reconstructed]: spectral norm on the "
                                  "hidden layers, or a gradient penalty on |grad_a Q|.",
                                  choices=("none", "spectral", "gp"))
    gp_weight: float = _opt(1.0, "Weight of the gradient penalty (--critic-constraint gp).", min=0.0)

    def check(self) -> None:
        self.check_ams()


@dataclass
class TrainConfig(AgentConfig):
    """Options of :func:`~icmlkit.lib.train_control.train.train`."""

    algo: str = _opt("td3", "td3, sac, ams-td3 or ams-sac.", choices=ALGOS)
    total_steps: int = _opt(100_000, "Environment steps (one update per step after --learning-starts); under "
                            "torchrun the steps of each rank's environment (world x steps transitions in all).",
                            min=1)
    learning_starts: int = _opt(25_000, "Uniform random actions (and no updates) for this many steps.", min=0)
    expl_noise: float = _opt(0.1, "TD3: Gaussian exploration noise std (normalised units).", min=0.0)
    buffer_size: int = _opt(1_000_000, "Replay capacity (transitions).", min=1)
    max_episode_steps: int = _opt(0, "Episode length limit (0: the environment's own; dmc:lqr-* uses 300) "
                                  "[reconstructed for lqr].", min=0)
    eval_every: int = _opt(5000, "Evaluate the deterministic actor every this many steps (and at the end).",
                           min=1)
    eval_episodes: int = _opt(5, "Evaluation episodes (fixed seeds).", min=1)
    diag_every: int = _opt(5000, "Lipschitz diagnostics every this many updates (0: only at the end).", min=0)
    diag_batch: int = _opt(256, "Validation batch of the diagnostics.", min=2)
    diag_iters: int = _opt(20, "Power-iteration steps of L1 and L3.", min=1)
    diag_probes: int = _opt(8, "Hutchinson probes (L3 trace), L4 perturbations and L2 finite-difference "
                            "directions.", min=1)
    hvp_step: float = _opt(0.05, "L3 [reconstructed]: HVP by central differences of grad_a Q at this scale (a ReLU "
                           "critic's exact Hessian is 0 a.e.); 0: exact double backward.", min=0.0)
    l2_states: int = _opt(4, "Saved simulator states probed by L2 (0: skip L2).", min=0)
    diverge_q: float = _opt(1e6, "A run counts as diverged when |Q| exceeds this or a loss is not finite.",
                            min=0.0, min_open=True)
    action_prior: str = _opt("none", "Geometric action prior [reconstructed]: the agent acts in a latent z and "
                             "the env gets clip(c + M z): a low-rank basis (lowrank) or left-right sharing "
                             "(symmetric); none: off.", choices=("none", "lowrank", "symmetric"))
    prior_rank: int = _opt(0, "--action-prior lowrank: latent dimension r (0: ceil(d / 2)).", min=0)
    prior_basis: str = _opt("", "--action-prior lowrank: a replay .npz whose actions' top-r principal directions "
                            "(and mean) form the basis; empty: a random orthonormal basis from --seed.")
    prior_pairs: str = _opt("", "--action-prior symmetric: actuator pairs i:j (j copies i) or i:-j (j mirrors "
                            "i with the opposite sign), comma-separated, e.g. 0:3,1:-4.")
    rank_envs: str = _opt("distinct", "Under torchrun: every rank steps its own environment copy with its own "
                          "episode seeds and exploration noise (distinct), or all ranks step rank 0's "
                          "(replicated: the data of one process, so the job reproduces a one-process run; a "
                          "check of the data-parallel path). No effect in one process.",
                          choices=("distinct", "replicated"))

    @property
    def is_ams(self) -> bool:
        return self.algo.startswith("ams-")

    @property
    def base(self) -> str:
        return self.algo.split("-")[-1]

    def check(self) -> None:
        super().check()
        if self.algo not in ALGOS:
            raise UsageError(f"--algo must be one of {', '.join(ALGOS)}, not {self.algo!r}")
        if self.batch > self.buffer_size:
            raise UsageError(f"--batch {self.batch} is larger than --buffer-size {self.buffer_size}")


@dataclass
class EvalConfig:
    """Options of :func:`~icmlkit.lib.train_control.train.evaluate_run`."""

    episodes: int = _opt(10, "Evaluation episodes (deterministic actor, fixed seeds).", min=1)
    max_episode_steps: int = _opt(0, "Episode length limit (0: the run's own).", min=0)


@dataclass
class DiagnoseConfig:
    """Options of :func:`~icmlkit.lib.train_control.train.diagnose_run`."""

    diag_batch: int = _opt(256, "Validation transitions (collected with the run's actor and a fresh seed).",
                           min=2)
    diag_iters: int = _opt(30, "Power-iteration steps of L1 and L3.", min=1)
    diag_probes: int = _opt(16, "Hutchinson probes / L4 perturbations / L2 directions.", min=1)
    hvp_step: float = _opt(0.05, "L3 [reconstructed]: HVP by central differences of grad_a Q at this scale (a ReLU "
                           "critic's exact Hessian is 0 a.e.); 0: exact double backward.", min=0.0)
    l2_states: int = _opt(8, "Saved simulator states probed by L2 (0: skip).", min=0)
    max_episode_steps: int = _opt(0, "Episode length limit (0: the run's own).", min=0)


@dataclass
class CollectConfig:
    """Options of :func:`~icmlkit.lib.train_control.replay.collect`."""

    steps: int = _opt(10_000, "Transitions to collect.", min=1)
    noise: float = _opt(0.3, "With --actor: Gaussian exploration noise std added to the actor's action.", min=0.0)
    max_episode_steps: int = _opt(0, "Episode length limit (0: the environment's own).", min=0)


@dataclass
class CriticStudyConfig(AmsConfig):
    """Options of :func:`~icmlkit.lib.train_control.study.critic_study` (the mechanism study)."""

    updates: int = _opt(20_000, "Gradient updates of each critic.", min=1)
    val_fraction: float = _opt(0.1, "Held-out transitions for the validation TD loss and the diagnostics.",
                               min=0.0, max=0.9, min_open=True)
    lr: float = _opt(3e-4, "Adam learning rate.", min=0.0, min_open=True)
    batch: int = _opt(256, "Minibatch size.", min=1)
    gamma: float = _opt(0.99, "Discount.", min=0.0, max=1.0)
    tau: float = _opt(0.005, "Polyak factor.", min=0.0, max=1.0)
    hidden: int = _opt(256, "Hidden width (256-256).", min=1)
    policy_noise: float = _opt(0.2, "TD3 target noise of the point critic.", min=0.0)
    noise_clip: float = _opt(0.5, "TD3 target noise clip.", min=0.0)
    policy_delay: int = _opt(2, "Actor / target update period.", min=1)
    diag_iters: int = _opt(20, "Power-iteration steps of L3.", min=1)
    diag_probes: int = _opt(16, "Hutchinson probes / L4 perturbations.", min=1)
    hvp_step: float = _opt(0.05, "L3 [reconstructed]: HVP by central differences of grad_a Q at this scale (a ReLU "
                           "critic's exact Hessian is 0 a.e.); 0: exact double backward.", min=0.0)
    diag_every: int = _opt(0, "Diagnostics every this many updates as well (0: only at the end).", min=0)

    def check(self) -> None:
        self.check_ams()
