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
    "CATEGORIES": "icmlkit.lib.mvi_bench.config",
    "LEVELS": "icmlkit.lib.mvi_bench.config",
    "RunConfig": "icmlkit.lib.mvi_bench.config",
    "ScoreConfig": "icmlkit.lib.mvi_bench.config",
    "SynthConfig": "icmlkit.lib.mvi_bench.config",
    "Dataset": "icmlkit.lib.mvi_bench.data",
    "Item": "icmlkit.lib.mvi_bench.data",
    "read_dataset": "icmlkit.lib.mvi_bench.data",
    "permutation": "icmlkit.lib.mvi_bench.protocol",
    "build_prompt": "icmlkit.lib.mvi_bench.protocol",
    "parse_reply": "icmlkit.lib.mvi_bench.protocol",
    "template_hash": "icmlkit.lib.mvi_bench.protocol",
    "mvi_sensitivity": "icmlkit.lib.mvi_bench.metric",
    "mcnemar_exact": "icmlkit.lib.mvi_bench.metric",
    "score_pairs": "icmlkit.lib.mvi_bench.metric",
    "markdown_table": "icmlkit.lib.mvi_bench.metric",
    "load_model": "icmlkit.lib.mvi_bench.models",
    "run_bench": "icmlkit.lib.mvi_bench.runner",
    "make_synth": "icmlkit.lib.mvi_bench.synth",
    "serve": "icmlkit.lib.mvi_bench.server",
    "run": "icmlkit.lib.mvi_bench.api",
    "score": "icmlkit.lib.mvi_bench.api",
    "export_vlmeval": "icmlkit.lib.mvi_bench.api",
    "import_vlmeval": "icmlkit.lib.mvi_bench.api",
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
