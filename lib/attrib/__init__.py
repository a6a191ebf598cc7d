"""attribute-tokens: FlashTrace (Pan et al., ICML 2026) -- span-wise and recursive token attribution
with the IFR operator on Llama / Qwen2 / Qwen3 decoders, its baselines (token-wise IFR, Captum
gradient x input / IG / feature ablation, random), faithfulness metrics (Recall@10%, RISE, MAS),
synthetic tasks with gold evidence and a toy decoder trainer. Steps not confirmed by the paper are
marked [reconstructed] in each module's docstring."""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "TraceConfig": "icmlkit.lib.attrib.config", "EvalConfig": "icmlkit.lib.attrib.config",
    "TimingConfig": "icmlkit.lib.attrib.config", "TaskConfig": "icmlkit.lib.attrib.config",
    "ToyConfig": "icmlkit.lib.attrib.config", "METHODS": "icmlkit.lib.attrib.config",
    "capture": "icmlkit.lib.attrib.ifr", "span_shares": "icmlkit.lib.attrib.ifr",
    "tokenwise_rows": "icmlkit.lib.attrib.ifr", "recursive": "icmlkit.lib.attrib.ifr",
    "prox": "icmlkit.lib.attrib.ifr", "sink_probs": "icmlkit.lib.attrib.ifr",
    "load": "icmlkit.lib.attrib.api", "prepare": "icmlkit.lib.attrib.api", "attribute": "icmlkit.lib.attrib.api",
    "trace_rows": "icmlkit.lib.attrib.api", "evaluate": "icmlkit.lib.attrib.api", "timing": "icmlkit.lib.attrib.api",
    "make_task": "icmlkit.lib.attrib.tasks", "train_toy": "icmlkit.lib.attrib.toy", "save_toy": "icmlkit.lib.attrib.toy",
    "topk_recall": "icmlkit.lib.attrib.metrics", "rise": "icmlkit.lib.attrib.metrics", "mas": "icmlkit.lib.attrib.metrics",
}

__getattr__ = lazy_exports(__name__, _LAZY)
__all__ = sorted(_LAZY)
