"""MaMa (Noether, Singla, Radanovic, ICML 2026): Stackelberg search for multi-agent systems that stay
safe when up to eps agents are compromised (method sheet design-safe-agents.md).

Parts the paper's available text does not confirm are marked [reconstructed] in each module: the
runtime, the threat model's details, the objective's scalarisation, parent sampling, the scripted
simulator's behaviour constants and the offline Meta-Agent / Meta-Adversary. The offline mode is a
simulator of the *search*, not of LLMs.
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "Attack": "icmlkit.lib.design_safe_agents.sim",
    "Compiled": "icmlkit.lib.design_safe_agents.sim",
    "attack_harm": "icmlkit.lib.design_safe_agents.sim",
    "enumerate_attacks": "icmlkit.lib.design_safe_agents.sim",
    "quality": "icmlkit.lib.design_safe_agents.sim",
    "Chat": "icmlkit.lib.design_safe_agents.runtime",
    "mc_safety": "icmlkit.lib.design_safe_agents.runtime",
    "mc_quality": "icmlkit.lib.design_safe_agents.runtime",
    "Design": "icmlkit.lib.design_safe_agents.schema",
    "Environment": "icmlkit.lib.design_safe_agents.schema",
    "design_from_obj": "icmlkit.lib.design_safe_agents.schema",
    "design_json": "icmlkit.lib.design_safe_agents.schema",
    "load_env": "icmlkit.lib.design_safe_agents.envs",
    "builtin_env": "icmlkit.lib.design_safe_agents.envs",
    "design_from_bits": "icmlkit.lib.design_safe_agents.envs",
    "env_menu": "icmlkit.lib.design_safe_agents.envs",
    "GameSettings": "icmlkit.lib.design_safe_agents.search",
    "SearchSettings": "icmlkit.lib.design_safe_agents.search",
    "best_response": "icmlkit.lib.design_safe_agents.search",
    "objective": "icmlkit.lib.design_safe_agents.search",
    "run_search": "icmlkit.lib.design_safe_agents.search",
    "ComposingAdversary": "icmlkit.lib.design_safe_agents.search",
    "MultiEditMetaAgent": "icmlkit.lib.design_safe_agents.search",
    "attack_knobs": "icmlkit.lib.design_safe_agents.search",
    "attack_text": "icmlkit.lib.design_safe_agents.compose",
    "classify": "icmlkit.lib.design_safe_agents.compose",
    "enterprise_env": "icmlkit.lib.design_safe_agents.enterprise",
    "baseline_designs": "icmlkit.lib.design_safe_agents.search",
    "refuse_everything": "icmlkit.lib.design_safe_agents.search",
    "search_designs": "icmlkit.lib.design_safe_agents.api",
    "attack_design": "icmlkit.lib.design_safe_agents.api",
    "evaluate_design": "icmlkit.lib.design_safe_agents.api",
    "find_optimum": "icmlkit.lib.design_safe_agents.api",
    "run_episode": "icmlkit.lib.design_safe_agents.api",
    "list_envs": "icmlkit.lib.design_safe_agents.api",
    "presets_table": "icmlkit.lib.design_safe_agents.api",
    "read_env": "icmlkit.lib.design_safe_agents.api",
    "read_design": "icmlkit.lib.design_safe_agents.api",
    "read_attack": "icmlkit.lib.design_safe_agents.api",
    "write_run_files": "icmlkit.lib.design_safe_agents.api",
}

__getattr__ = lazy_exports(__name__, _LAZY)
__all__ = sorted(_LAZY)
