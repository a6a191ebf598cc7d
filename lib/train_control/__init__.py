"""train-control: TD3 / SAC with Action Manifold Smoothing (AMS) targets and the Lipschitz pathway
diagnostics L1-L4 (Lin, ICML 2026; only the abstract is known: everything past it is
**[reconstructed]**, see docs/train-control.md)."""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "AgentConfig": "icmlkit.lib.train_control.config",
    "AmsConfig": "icmlkit.lib.train_control.config",
    "TrainConfig": "icmlkit.lib.train_control.config",
    "EvalConfig": "icmlkit.lib.train_control.config",
    "DiagnoseConfig": "icmlkit.lib.train_control.config",
    "CollectConfig": "icmlkit.lib.train_control.config",
    "CriticStudyConfig": "icmlkit.lib.train_control.config",
    "ALGOS": "icmlkit.lib.train_control.config",
    "orthonormal_directions": "icmlkit.lib.train_control.ams",
    "neighbours": "icmlkit.lib.train_control.ams",
    "neighbourhood_mean": "icmlkit.lib.train_control.ams",
    "Agent": "icmlkit.lib.train_control.agent",
    "TwinQ": "icmlkit.lib.train_control.agent",
    "make_env": "icmlkit.lib.train_control.envs",
    "build_prior": "icmlkit.lib.train_control.priors",
    "PriorEnv": "icmlkit.lib.train_control.priors",
    "ReplayBuffer": "icmlkit.lib.train_control.replay",
    "collect": "icmlkit.lib.train_control.replay",
    "read_replay": "icmlkit.lib.train_control.replay",
    "write_replay": "icmlkit.lib.train_control.replay",
    "train": "icmlkit.lib.train_control.train",
    "write_run": "icmlkit.lib.train_control.train",
    "load_run": "icmlkit.lib.train_control.train",
    "evaluate_run": "icmlkit.lib.train_control.train",
    "diagnose_run": "icmlkit.lib.train_control.train",
    "evaluate_policy": "icmlkit.lib.train_control.train",
    "critic_study": "icmlkit.lib.train_control.study",
    "run_demo": "icmlkit.lib.train_control.demo",
}
__getattr__ = lazy_exports(__name__, _LAZY)
__all__ = sorted(_LAZY)
