"""mvi-bench: MVI-Bench, MVI-Sensitivity of vision-language models on misleading images."""
from __future__ import annotations

import click

from icmlkit.cli._common import ToolGroup, add_demo, config_options, make_main, output_option, shard_option
from icmlkit.lib.mvi_bench.config import PARSERS, FORMATS, RunConfig, ScoreConfig, SynthConfig

TOOL = "mvi-bench"
RECONSTRUCTED = (
    "[reconstructed] (not confirmed by the paper text): the levels of mirror (attribute) and occlusion "
    "(relationship); the pair key of the official annotations; per-level pooling; the flip-rate "
    "definition; the EfficientNet-Lite0 option scorer and its ImageNet keyword table; the scenes of `generate`."
)

cli = ToolGroup(
    TOOL,
    help=f"""MVI-Bench: how misleading images break a vision-language model (MVI-Sensitivity).

\b
Pairs of (normal, misleading) images share one multiple-choice question. Per category
(concept: resemblance, representation; attribute: material, mirror; relationship:
occlusion, illusion), level and overall: Acc_n, Acc_m and MVI-S = (Acc_n - Acc_m) / Acc_n
(pooled accuracies; NaN when Acc_n = 0), with a bootstrap CI over pairs, the flip rate
and McNemar's exact p. Options are shuffled per pair with a seed (the same order for both
images; the official shuffle is unseeded), prompted with the official template (image
first), greedy, 5 new tokens.

{RECONSTRUCTED}

\b
Data: official annotations.json + images, the Hugging Face parquet layout, or the FILM
folder (illusion/control pairs -> misleading/normal).

\b
Examples:
  mvi-bench generate synth/
  mvi-bench run synth/annotations.json --model effnet -o effnet.jsonl
  mvi-bench run synth/ --model 'openai://127.0.0.1:8000/v1?model=Qwen2.5-VL-7B' --concurrency 8 -o q.jsonl
  mvi-bench score effnet.jsonl -o table.md --json
  mvi-bench export-vlmeval synth/ -o MVI.tsv""",
)


@cli.command("run", device=True)
@click.argument("data")
@output_option("Per-sample predictions (JSON Lines); replies are cached in <output>.cache.jsonl.",
               suffixes=(".jsonl",), required=True)
@shard_option()
@click.option("--resume", is_flag=True, help="Reuse the replies cached in <output>.cache.jsonl by a killed run "
              "(same model, template, settings and seed): the same records and tables as an uninterrupted run.")
@config_options(RunConfig)
def run_command(run, data, output, shard, resume, cfg):
    """Ask a model every pair (seeded option order, official prompt) and write per-sample records.

    --device applies to the local models (effnet, hf:PATH). Endpoint keys come from
    $OPENAI_API_KEY (or --api-key-env) and never reach logs or the manifest.
    The manifest records the model id, template hash, seed, temperature and image resizing.

    \b
    JSON keys: model, n_pairs, n_prompts, n_cached, acc_normal, acc_misleading, mvi_sensitivity,
    circular_consistency, vanilla_accuracy (--circular; null otherwise), invalid_rate, n_judged,
    seconds, prompts_per_second, template_hash, output.
    Record fields: id, pair_id, category, level, subcategory, type, rotation, permutation, reply,
    letter, answer_letter, valid, correct, latency_s, model, template_hash.
    Examples:
      mvi-bench run synth/ --model random -o random.jsonl --json
      mvi-bench run MVI-Bench/annotations.json --model 'openai://127.0.0.1:8000/v1?model=qwen' \\
          --concurrency 8 --circular --shard 1/4 -o part1.jsonl
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.mvi_bench import api, read_dataset
    from icmlkit.lib.mvi_bench.runner import RECORD_COLUMNS, default_cache_path

    run.output(output)
    ds = read_dataset(run.input(data), cfg.format, pairing=cfg.pairing)
    device = run.device if cfg.model in ("effnet",) or cfg.model.startswith("hf:") else "cpu"
    res = api.run(cfg, ds, seed=run.seed, device=device, shard=shard, cache_path=default_cache_path(output),
                  resume=resume, overwrite=run.overwrite)
    run.save(output, write_rows, res.records, columns=RECORD_COLUMNS, fmt=".jsonl")
    run.manifest.params["model"] = res.settings["model"]  # the sanitised id (no credentials in a URL)
    run.manifest.params["run_settings"] = res.settings
    return {**res.summary, "output": output}


@cli.command()
@click.argument("predictions", nargs=-1, required=True)
@output_option("The table: .md (Markdown), .csv or .jsonl; '-' writes CSV.", suffixes=(".md", ".csv", ".jsonl"))
@config_options(ScoreConfig)
def score(run, predictions, output, cfg):
    """Score per-sample records (shards concatenate) per category / level / overall.

    The seed drives the bootstrap. Per-level values pool the level's pairs (our choice, not the
    paper's); MVI-S is NaN (null) when Acc_n = 0. flip_rate [reconstructed definition]: among pairs
    whose normal item is right, the share whose misleading item is wrong.

    \b
    JSON keys: model, n_pairs, acc_normal, acc_misleading, mvi_sensitivity, mvi_sensitivity_ci,
    flip_rate, mcnemar_p, invalid_rate, circular_consistency, vanilla_accuracy, per_category,
    per_level (per_subcategory for FILM).
    Table columns: group_by, group, level, n_pairs, acc_normal, acc_misleading, mvi_sensitivity,
    ci_low, ci_high, flip_rate, n_flip, n_reverse, mcnemar_p, invalid_rate, circular_consistency,
    vanilla_accuracy.
    circular_consistency (circular runs; null otherwise): the share of items right under every
    cyclic shift of the options (MMBench CircularEval); vanilla_accuracy: right at the seeded
    order (shift 0).
    Examples:
      mvi-bench score effnet.jsonl -o table.md --json
      mvi-bench score part1.jsonl part2.jsonl part3.jsonl part4.jsonl -o table.csv
    """
    from icmlkit.lib.core.io import write_rows, write_text
    from icmlkit.lib.mvi_bench import api
    from icmlkit.lib.mvi_bench.metric import COLUMNS, markdown_table, read_records

    run.output(output)
    records = read_records([run.input(p) for p in predictions])
    res = api.score(cfg, records, seed=run.seed)
    if str(output).lower().endswith(".md"):
        run.save(output, write_text, markdown_table(res.rows, res.summary["model"]))
    else:  # nothing when output is None
        run.save(output, write_rows, res.rows, columns=COLUMNS, fmt=".jsonl" if str(output).endswith(".jsonl") else ".csv")
    return res.summary


@cli.command("export-vlmeval")
@click.argument("data")
@output_option("The VLMEvalKit dataset TSV.", suffixes=(".tsv",), required=True)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="Data layout (see `run --format`).")
@click.option("--max-pixels", type=click.IntRange(min=0), default=0, show_default=True,
              help="Downscale images above this many pixels before encoding (0: keep).")
def export_vlmeval(run, data, output, fmt, max_pixels):
    """Write a VLMEvalKit dataset TSV (options in the same seeded order as `run`).

    \b
    Columns: index, image (base64), question, A-D, answer (letter), category, l2-category (level),
    item_id, pair_id, type, subcategory, permutation.
    JSON keys: n_rows, n_pairs, seed, output.
    Example:  mvi-bench export-vlmeval synth/ -o MVI_SYNTH.tsv --seed 0
    """
    from icmlkit.lib.core.io import write_text
    from icmlkit.lib.mvi_bench import api, read_dataset
    from icmlkit.lib.mvi_bench.vlmeval import tsv_text

    run.output(output)
    ds = read_dataset(run.input(data), fmt)
    res = api.export_vlmeval(ds, seed=run.seed, max_pixels=max_pixels)
    run.save(output, write_text, tsv_text(res.rows))
    return {**res.summary, "output": output}


@cli.command("import-vlmeval", seed=False)
@click.argument("predictions")
@output_option("Per-sample records (JSON Lines) for `score`.", suffixes=(".jsonl",), required=True)
@click.option("--model-name", default="vlmeval", show_default=True, help="Model id written into the records.")
@click.option("--parser", type=click.Choice(PARSERS), default="robust", show_default=True,
              help="Answer parser for the prediction column (see `run --parser`).")
def import_vlmeval(run, predictions, output, model_name, parser):
    """Read VLMEvalKit predictions (.tsv, or .xlsx with openpyxl) back as records for `score`.

    The file must carry the columns written by export-vlmeval (VLMEvalKit keeps them) and its
    `prediction` column.

    \b
    JSON keys: n_records, invalid_rate, model, output.
    Example:  mvi-bench import-vlmeval Qwen2-VL_MVI_SYNTH.xlsx -o qwen.jsonl && mvi-bench score qwen.jsonl
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.mvi_bench import api
    from icmlkit.lib.mvi_bench.runner import RECORD_COLUMNS

    run.output(output)
    res = api.import_vlmeval(run.input(predictions), model=model_name, parser=parser)
    run.save(output, write_rows, res.records, columns=RECORD_COLUMNS, fmt=".jsonl")
    return {**res.summary, "output": output}


@cli.command()
@click.argument("out_dir", type=click.Path(file_okay=False))
@config_options(SynthConfig)
def generate(run, out_dir, cfg):
    """Write synthetic pairs in the official schema (annotations.json + images/) [reconstructed].

    Real-photo pairs (scikit-image, scikit-learn) for resemblance, representation and mirror;
    rendered PIL scenes for material, occlusion and illusions (Mueller-Lyer, Ebbinghaus); answers
    known by construction. The folder is built as OUT_DIR.partial and renamed when complete.

    \b
    JSON keys: n_pairs, n_items, per_category, annotations, outdir.
    Example:  mvi-bench generate synth/ --pairs 120 --seed 0
    """
    from icmlkit.lib.mvi_bench import make_synth as make

    if out_dir == "-":
        raise click.BadParameter("'-' (stdout) is not possible here: name a folder", param_hint="OUT_DIR")
    with run.run_dir(out_dir) as folder:
        summary = make(cfg, folder, seed=run.seed)
    return {**summary, "annotations": f"{out_dir}/annotations.json", "outdir": out_dir}


cli.alias("make-synth", "generate")


add_demo(
    cli, "icmlkit.lib.mvi_bench.demo:run_demo", device=True,
    options=[click.option("--pairs", type=click.IntRange(min=6), default=36, show_default=True,
                          help="Synthetic pairs (a multiple of 6).")],
    doc="""Make synthetic pairs; run oracle, random, the EfficientNet scorer and the same scorer behind a
    loopback OpenAI-compatible server (127.0.0.1); score them and FILM when present.

    Writes synth/, one predictions JSONL and one table per model, tables.md, summary.json and
    manifest.json into OUTDIR.

    \b
    JSON keys: headline, models (per model: acc_normal, acc_misleading, mvi_sensitivity,
    mvi_sensitivity_ci, flip_rate, mcnemar_p), http_equals_local, film (or null), outdir.
    Example:  mvi-bench demo --outdir outputs/demo/mvi-bench --pairs 60 --json   # more pairs than the default
    """,
)


main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
