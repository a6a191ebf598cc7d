"""train-control: TD3 / SAC with Action Manifold Smoothing (AMS) targets and the Lipschitz pathway
diagnostics L1-L4 (Lin, ICML 2026; only the abstract is known: everything past it is
**[reconstructed]**, see docs/train-control.md)."""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "AgentConfig": "icmlkit.lib.control.config",
    "AmsConfig": "icmlkit.lib.control.config",
    "TrainConfig": "icmlkit.lib.control.config",
    "EvalConfig": "icmlkit.lib.control.config",
    "DiagnoseConfig": "icmlkit.lib.control.config",
    "CollectConfig": "icmlkit.lib.control.config",
    "CriticStudyConfig": "icmlkit.lib.control.config",
    "ALGOS": "icmlkit.lib.control.config",
    "orthonormal_directions": "icmlkit.lib.control.ams",
    "neighbours": "icmlkit.lib.control.ams",
    "neighbourhood_mean": "icmlkit.lib.control.ams",
    "Agent": "icmlkit.lib.control.agent",
    "TwinQ": "icmlkit.lib.control.agent",
    "make_env": "icmlkit.lib.control.envs",
    "build_prior": "icmlkit.lib.control.priors",
    "PriorEnv": "icmlkit.lib.control.priors",
    "ReplayBuffer": "icmlkit.lib.control.replay",
    "collect": "icmlkit.lib.control.replay",
    "read_replay": "icmlkit.lib.control.replay",
    "write_replay": "icmlkit.lib.control.replay",
    "train": "icmlkit.lib.control.train",
    "write_run": "icmlkit.lib.control.train",
    "load_run": "icmlkit.lib.control.train",
    "evaluate_run": "icmlkit.lib.control.train",
    "diagnose_run": "icmlkit.lib.control.train",
    "evaluate_policy": "icmlkit.lib.control.train",
    "critic_study": "icmlkit.lib.control.study",
    "run_demo": "icmlkit.lib.control.demo",
}
__getattr__ = lazy_exports(__name__, _LAZY)
__all__ = sorted(_LAZY)
