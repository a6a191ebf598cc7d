"""MaMa (Noether, Singla, Radanovic, ICML 2026): Stackelberg search for multi-agent systems that stay
safe when up to eps agents are compromised (method sheet design-safe-agents.md).

Parts the paper's available text does not confirm are marked [reconstructed] in each module: the
runtime, the threat model's details, the objective's scalarisation, parent sampling, the scripted
simulator's behaviour constants and the offline Meta-Agent / Meta-Adversary. The offline mode is a
simulator of the *search*, not of LLMs.
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "Attack": "icmlkit.lib.safeagents.sim",
    "Compiled": "icmlkit.lib.safeagents.sim",
    "attack_harm": "icmlkit.lib.safeagents.sim",
    "enumerate_attacks": "icmlkit.lib.safeagents.sim",
    "quality": "icmlkit.lib.safeagents.sim",
    "Chat": "icmlkit.lib.safeagents.runtime",
    "mc_safety": "icmlkit.lib.safeagents.runtime",
    "mc_quality": "icmlkit.lib.safeagents.runtime",
    "Design": "icmlkit.lib.safeagents.schema",
    "Environment": "icmlkit.lib.safeagents.schema",
    "design_from_obj": "icmlkit.lib.safeagents.schema",
    "design_json": "icmlkit.lib.safeagents.schema",
    "load_env": "icmlkit.lib.safeagents.envs",
    "builtin_env": "icmlkit.lib.safeagents.envs",
    "design_from_bits": "icmlkit.lib.safeagents.envs",
    "env_menu": "icmlkit.lib.safeagents.envs",
    "GameSettings": "icmlkit.lib.safeagents.search",
    "SearchSettings": "icmlkit.lib.safeagents.search",
    "best_response": "icmlkit.lib.safeagents.search",
    "objective": "icmlkit.lib.safeagents.search",
    "run_search": "icmlkit.lib.safeagents.search",
    "baseline_designs": "icmlkit.lib.safeagents.search",
    "refuse_everything": "icmlkit.lib.safeagents.search",
    "search_designs": "icmlkit.lib.safeagents.api",
    "attack_design": "icmlkit.lib.safeagents.api",
    "evaluate_design": "icmlkit.lib.safeagents.api",
    "find_optimum": "icmlkit.lib.safeagents.api",
    "run_episode": "icmlkit.lib.safeagents.api",
    "list_envs": "icmlkit.lib.safeagents.api",
    "presets_table": "icmlkit.lib.safeagents.api",
    "read_env": "icmlkit.lib.safeagents.api",
    "read_design": "icmlkit.lib.safeagents.api",
    "read_attack": "icmlkit.lib.safeagents.api",
    "write_run_files": "icmlkit.lib.safeagents.api",
}

__getattr__ = lazy_exports(__name__, _LAZY)
__all__ = sorted(_LAZY)
