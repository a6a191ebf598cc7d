"""SCoRe (student-centred agent distillation): the agent format, the Python sandbox, the synthetic toy (``generate``),
teacher / judge / student backends, Mentored Problem Solving, SFT / RL converters, SFT and GRPO
training, evaluation (method sheet distill-agent.md).

Parts the paper's text does not give are marked [reconstructed] in each docstring.
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "Result": "icmlkit.lib.distill_agent.api",
    "make_env": "icmlkit.lib.distill_agent.api",
    "bc_init": "icmlkit.lib.distill_agent.api",
    "mps": "icmlkit.lib.distill_agent.api",
    "to_sft": "icmlkit.lib.distill_agent.api",
    "to_rl": "icmlkit.lib.distill_agent.api",
    "sft": "icmlkit.lib.distill_agent.api",
    "rl": "icmlkit.lib.distill_agent.api",
    "evaluate": "icmlkit.lib.distill_agent.api",
    "parse_step": "icmlkit.lib.distill_agent.agent",
    "validate_judgement": "icmlkit.lib.distill_agent.agent",
    "read_trajectories": "icmlkit.lib.distill_agent.agent",
    "read_tasks": "icmlkit.lib.distill_agent.agent",
    "PythonSandbox": "icmlkit.lib.distill_agent.sandbox",
    "reward": "icmlkit.lib.distill_agent.train",
    "group_advantages": "icmlkit.lib.distill_agent.train",
    "grpo_loss": "icmlkit.lib.distill_agent.train",
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
