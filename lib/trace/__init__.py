"""CausalTrace: causal detection of multi-step prompt injection in LLM-agent trajectories
(method sheet trace-injection.md; Mothukuri & Parizi, ICML 2026).

Steps: readers (CausalBench JSON, AgentDojo messages, generic JSONL) -> typed graph (graph.py) ->
noisy-OR SCM and do(I = blocked) counterfactuals (scm.py) -> bidirectional slicing and the attack
chain (detect.py); optional learned head and baselines (learn.py), optional LLM judge (judge.py),
labelled data from AgentDojo (agentdojo_data.py). The noisy-OR SCM, the edge confidences and the
segmentation of injection candidates are RECONSTRUCTED (the paper text is not known).
"""
from icmlkit.lib.trace.detect import FEATURES, analyse, verdict_record
from icmlkit.lib.trace.readers import read_traces

__all__ = ["FEATURES", "analyse", "read_traces", "verdict_record"]
