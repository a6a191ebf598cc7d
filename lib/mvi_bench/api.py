"""One function per ``mvi-bench`` subcommand (config + loaded inputs -> result with ``.summary``).

The CLI, the demo and the benchmark call these same functions.
"""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.mvi_bench.config import RunConfig, ScoreConfig
from icmlkit.lib.mvi_bench.data import Dataset


def run(cfg: RunConfig, data: Dataset, *, seed: int = 0, device="cpu", shard: tuple[int, int] = (1, 1),
        cache_path: str | None = None, resume: bool = False, overwrite: bool = False, model=None,
        stop_after: int | None = None):
    """``mvi-bench run``: load the adapter (unless ``model`` is given) and the optional judge, then
    :func:`icmlkit.lib.mvi_bench.runner.run_bench`."""
    from icmlkit.lib.mvi_bench.models import Judge, load_model
    from icmlkit.lib.mvi_bench.runner import remove_empty, run_bench

    model = model if model is not None else load_model(cfg.model, seed=seed, device=device, cfg=cfg)
    judge = Judge(cfg.judge, seed=seed, timeout=cfg.timeout, max_retries=cfg.max_retries,
                  api_key_env=cfg.api_key_env) if cfg.judge else None
    try:
        return run_bench(cfg, data, model, seed=seed, shard=shard, cache_path=cache_path, resume=resume,
                         overwrite=overwrite, judge=judge, stop_after=stop_after)
    finally:
        remove_empty(cache_path)


def score(cfg: ScoreConfig, records: list[tuple[str, int, dict]], *, seed: int = 0):
    """``mvi-bench score``: per-sample records (file, line, record) of one model -> table + summary."""
    from icmlkit.lib.mvi_bench.metric import score_records

    return score_records(records, cfg, seed=seed)


@dataclass
class ExportResult:
    rows: list[dict]
    summary: dict


def export_vlmeval(data: Dataset, *, seed: int = 0, max_pixels: int = 0) -> ExportResult:
    """``mvi-bench export-vlmeval``: the VLMEvalKit TSV rows of ``data``."""
    from icmlkit.lib.mvi_bench.vlmeval import export_rows

    rows = export_rows(data, seed=seed, max_pixels=max_pixels)
    return ExportResult(rows, {"n_rows": len(rows), "n_pairs": len(rows) // 2, "seed": seed})


@dataclass
class ImportResult:
    records: list[dict]
    summary: dict


def import_vlmeval(path: str, *, model: str = "", parser: str = "robust") -> ImportResult:
    """``mvi-bench import-vlmeval``: a VLMEvalKit prediction file -> per-sample records."""
    from icmlkit.lib.mvi_bench.vlmeval import import_predictions

    recs = import_predictions(path, model=model, parser=parser)
    invalid = sum(not r["valid"] for r in recs)
    return ImportResult(recs, {"n_records": len(recs), "invalid_rate": invalid / len(recs), "model": model})
