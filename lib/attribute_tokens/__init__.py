"""attribute-tokens: FlashTrace (Pan et al., ICML 2026) -- span-wise and recursive token attribution
with the IFR operator on Llama / Qwen2 / Qwen3 decoders, its baselines (token-wise IFR, Captum
gradient x input / IG / feature ablation, random), faithfulness metrics (Recall@10%, RISE, RISE+AP),
synthetic tasks with gold evidence and a toy decoder trainer. Steps not confirmed by the paper are
marked [reconstructed] in each module's docstring."""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "TraceConfig": "icmlkit.lib.attribute_tokens.config", "EvalConfig": "icmlkit.lib.attribute_tokens.config",
    "TimingConfig": "icmlkit.lib.attribute_tokens.config", "TaskConfig": "icmlkit.lib.attribute_tokens.config",
    "ToyConfig": "icmlkit.lib.attribute_tokens.config", "METHODS": "icmlkit.lib.attribute_tokens.config",
    "capture": "icmlkit.lib.attribute_tokens.ifr", "span_shares": "icmlkit.lib.attribute_tokens.ifr",
    "tokenwise_rows": "icmlkit.lib.attribute_tokens.ifr", "recursive": "icmlkit.lib.attribute_tokens.ifr",
    "prox": "icmlkit.lib.attribute_tokens.ifr", "sink_probs": "icmlkit.lib.attribute_tokens.ifr",
    "load": "icmlkit.lib.attribute_tokens.api", "prepare": "icmlkit.lib.attribute_tokens.api", "attribute": "icmlkit.lib.attribute_tokens.api",
    "trace_rows": "icmlkit.lib.attribute_tokens.api", "evaluate": "icmlkit.lib.attribute_tokens.api", "timing": "icmlkit.lib.attribute_tokens.api",
    "make_task": "icmlkit.lib.attribute_tokens.tasks", "train_toy": "icmlkit.lib.attribute_tokens.toy", "save_toy": "icmlkit.lib.attribute_tokens.toy",
    "topk_recall": "icmlkit.lib.attribute_tokens.metrics", "rise": "icmlkit.lib.attribute_tokens.metrics", "rise_ap": "icmlkit.lib.attribute_tokens.metrics",
}

__getattr__ = lazy_exports(__name__, _LAZY)
__all__ = sorted(_LAZY)
