"""attribute-tokens: FlashTrace span-wise and recursive token attribution (IFR) for decoder LLMs."""
from __future__ import annotations

import click

from icmlkit.cli._common import (ToolGroup, add_demo, checkpoint_options, config_options, make_main, output_option,
                                 shard_option, shard_slice)
from icmlkit.lib.attribute_tokens.config import EvalConfig, TaskConfig, TimingConfig, ToyConfig, TraceConfig

TOOL = "attribute-tokens"
RECONSTRUCTED = (
    "[reconstructed] steps (not confirmed by the paper's text; the official repository was read, never copied): "
    "the span/index conventions (char or token spans of prompt + target; G = hull of the reasoning and output "
    "spans), the stop-token list, the renorm threshold's form, the RISE normalisation and the RISE+AP density, the "
    "Recall@10% denominator (|gold|), the Captum baselines' target function, the synthetic task templates and the "
    "toy model's training recipe.")

cli = ToolGroup(
    TOOL,
    help=f"""FlashTrace: attribute a generated span to the prompt in one pass per layer (IFR).

\b
One forward pass caches every layer's residuals, attention probabilities (recomputed from q, k
with RoPE and GQA, or eager), values with the norm folded in and W_O; span-wise proximity shares
e_l(j) summed over layers give the token scores (ifr-span); recursive hops route the mass the
reasoning tokens absorbed back to the prompt (flashtrace). Baselines: token-wise IFR, Captum
gradient x input / integrated gradients / feature ablation (extra attrib), random; AttnLRP needs
lxt (optional, exit 4 without it).

\b
Models: a local Hugging Face folder of a Llama, Qwen2 or Qwen3 decoder, a .gguf file, or
`smollm2` (SmolLM2-135M-Instruct, packaged); other architectures are refused. The method reads the
model's internals, so HTTP endpoints (OpenAI-compatible servers) cannot serve it.

{RECONSTRUCTED}

\b
Examples:
  attribute-tokens generate vt --n 50 --style text -o vt.jsonl
  attribute-tokens trace smollm2 --input vt.jsonl --method flashtrace --hops 1 -o vt.trace.jsonl --html vt.html
  attribute-tokens trace toy/ --prompt "X1 47 . X2 X1 . ? X2" --target " X2 X1 47 ANSWER 47" \\
      --output-span 12:12 --reasoning-span 8:10 --json
  attribute-tokens eval smollm2 vt.jsonl --methods flashtrace,ifr-span,random --limit 10 -o eval.csv
  attribute-tokens train-toy -o toy/ && attribute-tokens timing toy/ --json""",
)

SPAN_UNIT = click.option("--span-unit", type=click.Choice(["token", "char"]), default="token", show_default=True,
                         help="Units of the spans: inclusive token indices of the formatted prompt + target, or "
                         "inclusive character offsets (`generate` writes char spans and says so per row).")
MODEL_ARG = click.argument("model")


def _load(run, model):
    from icmlkit.lib.attribute_tokens.api import load

    return load(model, device=run.device)


def _read_text(value: str) -> str:
    """--prompt TEXT|FILE: an existing file's text, else the text itself."""
    from pathlib import Path

    p = Path(value)
    if len(value) < 4096 and "\n" not in value and p.is_file():
        from icmlkit.lib.core.io import open_text

        with open_text(p) as fh:
            return fh.read()
    return value


@cli.command(device=True)
@MODEL_ARG
@click.option("--prompt", default=None, help="The prompt text, or a file holding it.")
@click.option("--target", default=None, help="The target text (teacher-forced; what is attributed).")
@click.option("--generate", "n_generate", type=click.IntRange(min=1), default=None,
              help="Generate N tokens greedily and attribute them (instead of --target).")
@click.option("--output-span", default=None, help="a:b, inclusive: the attributed span (default: the whole target).")
@click.option("--reasoning-span", default=None, help="c:d, inclusive: the reasoning (CoT) tokens hops go through.")
@click.option("--gold-span", "gold_spans", multiple=True, help="a:b in the prompt (repeatable): gold evidence, "
              "only echoed for Recall in eval.")
@click.option("--input", "input_path", default=None, help="Batch input: JSON Lines of {id, prompt, target, "
              "output_span, reasoning_span, gold_spans[, span_unit]}.")
@SPAN_UNIT
@shard_option()
@output_option("Per-example attributions: .jsonl (tokens, scores, hop_scores, thinking_ratios) or .npz.",
               suffixes=(".jsonl", ".npz"), stdout=True)
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Also write an HTML heatmap of the prompt tokens.")
@config_options(TraceConfig)
def trace(run, model, prompt, target, n_generate, output_span, reasoning_span, gold_spans, input_path, span_unit,
          shard, output, html_path, cfg):
    """Attribute a target span to the prompt (one example or a batch).

    \b
    --method flashtrace (hops >= 1), ifr-span (hop 0), ifr-tokenwise, gradxinput, ig, ablation,
    attnlrp (needs lxt), random. Spans are inclusive token indices of the formatted text
    (--span-unit char for offsets); a span outside the sequence or overlapping the prompt exits 1.
    [reconstructed] index conventions: see the group help.

    \b
    JSON keys: method, hops, n_examples, n_prompt_tokens, n_target_tokens, thinking_ratios (per hop;
    lists per example for a batch), seconds.
    Examples:
      attribute-tokens trace smollm2 --prompt "The capital of France is" --generate 4 --json
      attribute-tokens trace toy/ --input vt.jsonl --shard 2/4 -o part2.jsonl --html part2.html
    """
    from icmlkit.lib.attribute_tokens.api import generate_target, prepare, prepare_rows, read_rows, trace_rows, write_html, \
        write_trace
    from icmlkit.lib.core.io import suffix

    if (input_path is None) == (prompt is None):
        raise click.UsageError("give exactly one of --prompt or --input")
    if input_path is None and (target is None) == (n_generate is None):
        raise click.UsageError("with --prompt, give exactly one of --target or --generate")
    if input_path is not None and (target or n_generate or output_span or reasoning_span or gold_spans):
        raise click.UsageError("--input rows carry their own target and spans; drop --target/--generate/--*-span")
    if output == "-" and suffix(output or "") == ".npz":
        raise click.UsageError("-o -: .npz cannot go to stdout")
    run.output(output)
    run.output(html_path)
    if html_path is not None and suffix(html_path) != ".html":
        raise click.BadParameter(f"{html_path}: expected a .html file", param_hint="--html")
    if input_path is not None:
        rows = read_rows(run.input(input_path))
        rows = [rows[i] for i in shard_slice(len(rows), shard)]
        bundle = _load(run, model)
        examples = prepare_rows(rows, bundle.tokenizer, input_path, span_unit=span_unit, chat=cfg.chat)
    else:
        text = _read_text(prompt)
        bundle = _load(run, model)
        if n_generate is not None:
            target = generate_target(bundle, text, n_generate, chat=cfg.chat)
        row = {"id": "example", "prompt": text, "target": target, "output_span": output_span,
               "reasoning_span": reasoning_span, "gold_spans": list(gold_spans) or None}
        examples = [prepare(row, bundle.tokenizer, where="--prompt/--target", span_unit=span_unit, chat=cfg.chat)]
    if not examples:
        raise click.UsageError(f"--shard {shard[0]}/{shard[1]} selects no rows")
    res = trace_rows(bundle, examples, cfg, seed=run.seed)
    if output is not None:
        run.save(output, write_trace, res)
    if html_path is not None:
        run.save(html_path, write_html, res)
    return res.summary


@cli.command("eval", device=True)
@MODEL_ARG
@click.argument("data")
@SPAN_UNIT
@shard_option()
@output_option("Per-method table (.csv, .jsonl).", suffixes=(".csv", ".jsonl"))
@click.option("--examples-out", type=click.Path(dir_okay=False), default=None,
              help="Also write one row per (example, method) (.csv or .jsonl).")
@config_options(EvalConfig)
@config_options(TraceConfig, arg="tcfg", exclude=("method",))
def eval_cmd(run, model, data, span_unit, shard, output, examples_out, cfg, tcfg):
    """Faithfulness of several methods on gold-labelled examples: Recall@10%, RISE, RISE+AP.

    \b
    Recall@10%: share of the gold prompt tokens among the top 10% attributed prompt tokens (stop
    tokens excluded). RISE / RISE+AP: guided deletion in 20 groups by descending score, pad
    replacement on the formatted prompt, the fixed generation scored by log p (lower = more
    faithful). RISE+AP = RISE plus the alignment penalty |curve - remaining
    attribution share| (the official "RISE + AP", not its MAS). [reconstructed] RISE normalisation,
    the density: see docs/attribute-tokens.md.

    \b
    JSON keys: n, top_frac, groups, methods (one row each: method, n, recall_at_10, rise, rise_ap,
    n_curves, seconds_per_example).
    Example:  attribute-tokens eval toy/ vt.jsonl --methods flashtrace,ifr-span,ig,random -o eval.csv --json
    """
    from icmlkit.lib.attribute_tokens.api import evaluate, prepare_rows, read_rows
    from icmlkit.lib.core.io import rows_format, write_rows

    run.output(output)
    run.output(examples_out)
    if examples_out is not None:
        rows_format(examples_out)
    rows = read_rows(run.input(data))
    rows = [rows[i] for i in shard_slice(len(rows), shard)]
    bundle = _load(run, model)
    examples = prepare_rows(rows, bundle.tokenizer, data, span_unit=span_unit, chat=tcfg.chat, require_gold=True)
    if not examples:
        raise click.UsageError(f"--shard {shard[0]}/{shard[1]} selects no rows")
    res = evaluate(bundle, examples, cfg, tcfg, seed=run.seed)
    if output is not None:
        run.save(output, write_rows, res.rows)
    if examples_out is not None:
        run.save(examples_out, write_rows, res.per_example)
    return res.summary


@cli.command(device=True)
@MODEL_ARG
@output_option("Table of seconds per method and target length (.csv, .jsonl).", suffixes=(".csv", ".jsonl"))
@config_options(TimingConfig)
@config_options(TraceConfig, arg="tcfg", only=("hops", "chunk_tokens", "sink_chunk", "ig_steps", "attention"))
def timing(run, model, output, cfg, tcfg):
    """Wall time vs target length M (the chain padded with filler steps), FlashTrace vs baselines.

    \b
    JSON keys: target_lengths, methods, seconds (method -> list), n_prompt_tokens,
    speedup_vs_tokenwise, speedup_vs_ig (ratios measured in this run), flashtrace_last_over_first.
    Example:  attribute-tokens timing toy/ --lengths 8,32,128,512 --methods flashtrace,ifr-tokenwise --json
    """
    from icmlkit.lib.attribute_tokens.api import timing as run_timing
    from icmlkit.lib.core.io import write_rows

    run.output(output)
    bundle = _load(run, model)
    res = run_timing(bundle, cfg, tcfg, seed=run.seed)
    if output is not None:
        rows = [{"method": m, "target_length": L, "seconds": s}
                for m in res["methods"] for L, s in zip(res["target_lengths"], res["seconds"][m])]
        run.save(output, write_rows, rows)
    return res


@cli.command()
@click.argument("kind", type=click.Choice(["niah-kv", "vt"]))
@output_option("The examples as JSON Lines.", suffixes=(".jsonl",), required=True)
@config_options(TaskConfig)
def generate(run, kind, output, cfg):
    """Generate a task with gold evidence: NIAH-KV or variable tracking with a written chain.

    \b
    Rows {id, task, prompt, target, output_span, reasoning_span, gold_spans, span_unit: char,
    answer}. [reconstructed] templates (RULER-style, re-implemented).
    JSON keys: kind, n, output, mean_prompt_chars.
    Examples:
      attribute-tokens generate niah-kv --n 200 -o niah.jsonl
      attribute-tokens generate vt --style text --n 50 -o vt.jsonl
    """
    from icmlkit.lib.attribute_tokens.tasks import make_task
    from icmlkit.lib.core.io import write_rows

    run.output(output)
    rows = make_task(kind, cfg, seed=run.seed)
    run.save(output, write_rows, rows, fmt=".jsonl")
    return {"kind": kind, "n": len(rows), "output": output,
            "mean_prompt_chars": round(sum(len(r["prompt"]) for r in rows) / len(rows), 1)}


cli.alias("make-task", "generate")


@cli.command("train-toy", device=True)
@output_option("The Hugging Face model folder (config.json, model.safetensors, tokenizer).", directory=True,
               required=True)
@checkpoint_options()
@config_options(ToyConfig)
def train_toy_cmd(run, output, checkpoint_every, resume, cfg):
    """Train the tiny Llama decoder on NIAH-KV and VT; report its accuracy (must be >= 95%).

    \b
    LlamaConfig, eager attention, RoPE, RMSNorm, a word-level tokenizer (498 words); under
    torchrun each rank takes its slice of every batch. --resume continues OUTPUT.ckpt.pt.
    [reconstructed] recipe; the defaults (seed 0) reached NIAH-KV 1.00 and VT 0.99 in about
    17 minutes on 2 CPU cores.
    JSON keys: steps, final_loss, accuracy_niah_kv, accuracy_vt, chain_exact_vt, meets_95, seconds,
    parameters.
    Example:  attribute-tokens train-toy -o toy/ --json
    """
    from icmlkit.lib.attribute_tokens.toy import save_toy, train_toy

    output = output.rstrip("/") or output
    run.output(output)
    ckpt = run.checkpointer(output, checkpoint_every, resume)
    res = train_toy(cfg, seed=run.seed, device=run.device, dist=run.dist, checkpointer=ckpt)
    if run.is_main:
        with run.run_dir(output) as folder:
            save_toy(folder, res)
        ckpt.done()
    return res.summary


add_demo(
    cli, "icmlkit.lib.attribute_tokens.demo:run_demo", device=True,
    options=[click.option("--model", default="smollm2", show_default=True, help="The decoder (a local folder, "
                          ".gguf or smollm2)."),
             click.option("--n", type=click.IntRange(min=1), default=4, show_default=True,
                          help="Examples per task.")],
    doc="""Attribute SmolLM2's teacher-forced VT chains and NIAH answers; hops 1 vs hops 0.

    Writes the tasks, traces (.jsonl), a heatmap (.html), eval.csv and manifest.json into OUTDIR.

    \b
    JSON keys: headline, model, recall (method -> task -> Recall@10%), thinking_ratio_vt, outdir.
    Example:  attribute-tokens demo --outdir outputs/demo/attribute-tokens --n 4 --json
    """,
)

main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
