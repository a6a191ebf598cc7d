"""MVI-Bench (mvi-bench): robustness of vision-language models to misleading visual inputs, scored
with MVI-Sensitivity (method sheet mvi-bench.md; Chen et al., ICML 2026).

Readers (official annotations.json + images, the Hugging Face parquet layout, FILM), the seeded
protocol and parsers, the metric with bootstrap CIs, flip rate and McNemar p, model adapters
(oracle, random, EfficientNet-Lite0 option scorer, OpenAI-compatible endpoints, local Hugging Face
folders), a JSONL response cache, the synthetic generator and VLMEvalKit interchange. Parts the
paper text does not confirm are marked [reconstructed] in each module's docstring.
Submodules load on first use (``--help`` never imports numpy or torch).
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "CATEGORIES": "icmlkit.lib.mvi.config",
    "LEVELS": "icmlkit.lib.mvi.config",
    "RunConfig": "icmlkit.lib.mvi.config",
    "ScoreConfig": "icmlkit.lib.mvi.config",
    "SynthConfig": "icmlkit.lib.mvi.config",
    "Dataset": "icmlkit.lib.mvi.data",
    "Item": "icmlkit.lib.mvi.data",
    "read_dataset": "icmlkit.lib.mvi.data",
    "permutation": "icmlkit.lib.mvi.protocol",
    "build_prompt": "icmlkit.lib.mvi.protocol",
    "parse_reply": "icmlkit.lib.mvi.protocol",
    "template_hash": "icmlkit.lib.mvi.protocol",
    "mvi_sensitivity": "icmlkit.lib.mvi.metric",
    "mcnemar_exact": "icmlkit.lib.mvi.metric",
    "score_pairs": "icmlkit.lib.mvi.metric",
    "markdown_table": "icmlkit.lib.mvi.metric",
    "load_model": "icmlkit.lib.mvi.models",
    "run_bench": "icmlkit.lib.mvi.runner",
    "make_synth": "icmlkit.lib.mvi.synth",
    "serve": "icmlkit.lib.mvi.server",
    "run": "icmlkit.lib.mvi.api",
    "score": "icmlkit.lib.mvi.api",
    "export_vlmeval": "icmlkit.lib.mvi.api",
    "import_vlmeval": "icmlkit.lib.mvi.api",
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
