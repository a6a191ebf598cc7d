"""CausalTrace: causal detection of multi-step prompt injection in LLM-agent trajectories
(method sheet trace-injection.md; Mothukuri & Parizi, ICML 2026).

Steps: readers (CausalBench JSON, AgentDojo messages, generic JSONL) -> typed graph (graph.py) ->
noisy-OR SCM and do(I = blocked) counterfactuals (scm.py) -> bidirectional slicing and the attack
chain (detect.py); optional learned head and baselines (learn.py), optional LLM judge (judge.py),
optional learned instruction score (instruct.py), EM fit of the edge confidences (em.py),
labelled data from AgentDojo (agentdojo_data.py). The noisy-OR SCM, the edge confidences and the
segmentation of injection candidates are RECONSTRUCTED (the paper text is not known).
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {  # submodules load on first use, so the CLI's config import stays light
    **dict.fromkeys(["FEATURES", "analyse", "verdict_record"], "icmlkit.lib.trace_injection.detect"),
    "read_traces": "icmlkit.lib.trace_injection.readers",
}
__getattr__ = lazy_exports(__name__, _LAZY)
__all__ = sorted(_LAZY)
