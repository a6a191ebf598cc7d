"""SCoRe (student-centred agent distillation): the agent format, the Python sandbox, the make-env toy,
teacher / judge / student backends, Mentored Problem Solving, SFT / RL converters, SFT and GRPO
training, evaluation (method sheet distill-agent.md).

Parts the paper's text does not give are marked [reconstructed] in each docstring.
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "Result": "icmlkit.lib.distill.api",
    "make_env": "icmlkit.lib.distill.api",
    "bc_init": "icmlkit.lib.distill.api",
    "mps": "icmlkit.lib.distill.api",
    "to_sft": "icmlkit.lib.distill.api",
    "to_rl": "icmlkit.lib.distill.api",
    "sft": "icmlkit.lib.distill.api",
    "rl": "icmlkit.lib.distill.api",
    "evaluate": "icmlkit.lib.distill.api",
    "parse_step": "icmlkit.lib.distill.agent",
    "validate_judgement": "icmlkit.lib.distill.agent",
    "read_trajectories": "icmlkit.lib.distill.agent",
    "read_tasks": "icmlkit.lib.distill.agent",
    "PythonSandbox": "icmlkit.lib.distill.sandbox",
    "reward": "icmlkit.lib.distill.train",
    "group_advantages": "icmlkit.lib.distill.train",
    "grpo_loss": "icmlkit.lib.distill.train",
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
