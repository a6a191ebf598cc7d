"""metric-match: Riemannian metric matching, the geometry of data learned by denoising."""
from __future__ import annotations

import click

from icmlkit.cli._common import (ToolGroup, add_demo, checkpoint_options, config_options, make_main, output_option,
                                 shard_option)
from icmlkit.lib.metric_match.config import (EvalConfig, GenerateConfig, InterpolateConfig, KnnConfig, QueryConfig,
                                       TrainConfig)

TOOL = "metric-match"
RECONSTRUCTED = (
    "[reconstructed] (not confirmed by the paper's text): the FiLM MLP's and the small UNet's layouts and "
    "input scaling, the "
    "log-h embedding, the cosine schedule and gradient clipping, the denoiser's preconditioning (--centred), "
    "the eigen-gap / threshold rules for the local dimension, the interpolation step rule, and the 'rms' "
    "standardisation of the data."
)

cli = ToolGroup(
    TOOL,
    help=f"""Riemannian metric matching: learn the carre du champ Gamma of data by denoising.

\b
A network M(y, h) in R^(r x D), Gamma = M^T M, is trained on Y = X + hZ against the target
(X - Y)(X - Y)^T / 2h^2 with a low-rank loss that never forms D x D matrices; h (the noise
level, eps = h^2) is an input, so one model covers all scales. Queries then cost one network
call and an r x r eigen-decomposition per point: spectrum, tangent space, local dimension,
intrinsic gradient Gamma grad f, interpolation by intrinsic-gradient flow. The kNN / kernel
carre du champ baseline (`knn`) gives the same outputs with a graph.

{RECONSTRUCTED}

\b
Inputs: points as .npy / .npz (array 'points') / .csv (N x D), or images as a folder of .png
or an .npz of (N, H, W[, C]) (a small FiLM UNet by default, --net). h is in the units of
the standardised data (centred, RMS radius 1) unless --scale none.

\b
Examples:
  metric-match generate sphere --d 4 --D 16 --rotate --n 10000 -o train.npz
  metric-match generate sphere --d 4 --D 16 --rotate --n 1000 --seed 1 -o test.npz
  metric-match train train.npz -o s4.safetensors --rank 8 --steps 3000 --dim 4
  metric-match query s4.safetensors test.npz --h 0.1 --what tangent -o tan.npz --json
  metric-match eval s4.safetensors test.npz --data train.npz --json
  metric-match knn train.npz test.npz --k 64 --h 0.3 -o knn.npz --json""",
)

TRAIN_KEYS = ("n, D, rank, steps, denoiser_steps, batch, final_loss, h_min, h_max, scale (the RMS radius the "
              "data were divided by), h, n_val, h_criterion, seconds, world_size")


@cli.command(device=True)
@click.argument("data")
@output_option("The trained model (weights + config in its metadata).", suffixes=(".safetensors",), stdout=False,
               required=True)
@output_option("Loss rows (step, stage, loss, lr); default OUTPUT with .loss.csv.", suffixes=(".csv", ".jsonl"),
               stdout=False, flags=("--loss-csv",), name="loss_csv")
@checkpoint_options()
@config_options(TrainConfig)
def train(run, data, output, loss_csv, checkpoint_every, resume, cfg):
    """Train M(y, h) by metric matching on points or images (rank-aware under torchrun).

    Points go through a FiLM MLP, image sets through a small FiLM UNet (--net auto; --net mlp
    flattens them). Both layouts, the input scaling, the schedule and the denoiser's
    preconditioning are [reconstructed]. Under torchrun every process draws the same global batch and takes its part;
    gradients are averaged (gloo on CPU), rank 0 writes.

    The default query h is chosen on a held-out split of DATA (--val-points, never trained on)
    from --h-grid and stored in the model: by projector error when DATA has exact tangents (as
    `generate` writes, the benchmark's criterion), else by the [reconstructed] chord residual.

    \b
    JSON keys: n (training points, the held-out ones excluded), D, rank, steps, denoiser_steps, batch,
    final_loss, h_min, h_max, scale (the RMS radius the data were divided by), h (the default query h),
    n_val, h_criterion (projector | chord), seconds, world_size.
    Examples:
      metric-match train train.npz -o m.safetensors --rank 8 --steps 3000 --json
      metric-match train train.npz -o m.safetensors --resume
      torchrun --nproc-per-node 2 --standalone $(which metric-match) train train.npz -o m.safetensors
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.metric_match.data import read_points
    from icmlkit.lib.metric_match.model import save_model
    from icmlkit.lib.metric_match.train import LOSS_COLUMNS, train as fit

    run.output(output)
    loss_csv = loss_csv or (output[: -len(".safetensors")] + ".loss.csv")
    run.output(loss_csv)
    pts = read_points(run.input(data))
    ck = run.checkpointer(output, checkpoint_every, resume)
    res = fit(cfg, pts, seed=run.seed, device=run.device, dist=run.dist, checkpointer=ck)
    run.save(output, save_model, res.model)
    run.save(loss_csv, write_rows, [dict(zip(LOSS_COLUMNS, r)) for r in res.rows], LOSS_COLUMNS)
    ck.done()
    run.dist.barrier()  # every rank leaves together (a rank exiting early can abort the others' gloo threads)
    return res.summary


def _write_npz(run, output, arrays):
    from icmlkit.lib.core.io import write_npz

    run.save(output, write_npz, **arrays)


@cli.command(device=True, seed=False)
@click.argument("model")
@click.argument("points")
@output_option("Results .npz: spectrum (n, r), local_dim (n,), index (n,), and tangent (n, d, D) | eigvecs and "
               "factor (n, r, D) | gradient (n, D).", suffixes=(".npz",), stdout=False)
@shard_option()
@config_options(QueryConfig)
def query(run, model, points, output, shard, cfg):
    """Geometry of the trained model at POINTS: spectrum, tangents, local dimension, Gamma grad f.

    One network call and an r x r eigen-decomposition per point (never D x D). The local
    dimension rules are [reconstructed]. h must lie in the model's trained range. --what tangent
    without --dim refuses (exit 2) when the eigen-gap is weak: the largest gap under 2x the second
    largest (median over the points), where two dimensions fit about equally well.

    \b
    Without --h it reads the model's default h (chosen on train's validation split).

    \b
    JSON keys: n, D, rank, h, h_source (given | validation), what, median_local_dim, d and
    eigengap_ratio (with --what tangent), seconds, queries_per_s.
    Examples:
      metric-match query m.safetensors test.npz --h 0.1 --what tangent --dim 4 -o tan.npz
      metric-match query m.safetensors test.npz --what tangent --dim 4 -o tan.npz   # the stored h
      metric-match query m.safetensors test.npz --h 0.1 --what dim --shard 2/8 -o part2.npz --json
      metric-match query m.safetensors test.csv --h 0.1 --what gradient --direction 1,0,0 -o g.npz
    """
    from icmlkit.lib.metric_match.api import query as run_query
    from icmlkit.lib.metric_match.data import read_points
    from icmlkit.lib.metric_match.model import load_model

    run.output(output)
    m = load_model(run.input(model), run.device)
    res = run_query(m, read_points(run.input(points)), cfg, shard)
    if output:
        _write_npz(run, output, res.arrays)
    return res.summary


@cli.command(device=True, seed=False)
@click.argument("data")
@click.argument("points")
@output_option("Results .npz with query's arrays (spectrum of length D).", suffixes=(".npz",), stdout=False)
@shard_option()
@config_options(KnnConfig)
@config_options(QueryConfig, arg="qcfg", only=("what", "dim", "dim_rule", "dim_threshold", "direction"))
def knn(run, data, points, output, shard, cfg, qcfg):
    """The kNN / kernel carre du champ baseline: the same outputs as `query`, from DATA's neighbours.

    Brute force (matrix distances + top-k), the query point itself excluded when it is in DATA,
    softmax weights exp(-|y - x|^2 / 2h^2), Gamma divided by h^2: a factor 2 above metric
    matching's target (--halve divides it by 2). Compare projectors and eigen-ratios.

    \b
    --what tangent without --dim warns (as query refuses) when the eigen-gap is weak.

    \b
    JSON keys: n, D, rank, h, k, n_data, convention, what, median_local_dim, d and eigengap_ratio
    (with --what tangent), seconds (queries), seconds_index (data upload), queries_per_s.
    Examples:
      metric-match knn train.npz test.npz --k 64 --h 0.3 --what tangent -o knn.npz --json
      metric-match knn train.npz test.npz --k 32 --h 0.2 --what dim --halve --json
    """
    from icmlkit.lib.metric_match.api import knn_query
    from icmlkit.lib.metric_match.data import read_points

    run.output(output)
    data_pts = read_points(run.input(data))
    res = knn_query(data_pts, read_points(run.input(points)), cfg, qcfg, shard, device=run.device)
    if output:
        _write_npz(run, output, res.arrays)
    return res.summary


@cli.command(device=True, seed=False)
@click.argument("model")
@click.argument("a")
@click.argument("b")
@output_option("The paths: .npz (path (n, S, D), linear (n, S, D), end_gap (n,)) or .png (image models: a grid, "
               "one row per path).", suffixes=(".npz", ".png"), stdout=False, required=True)
@config_options(InterpolateConfig)
def interpolate(run, model, a, b, output, cfg):
    """On-manifold interpolation from each point of A to the paired point of B.

    Intrinsic-gradient flow of f(y) = -|y - b|^2 / 2: y += Gamma(y)(b - y) / (lambda_1 (S - 1 - i));
    the step rule is [reconstructed]. end_gap = |y_S - b| / |a - b| (0 when b is reached).

    \b
    JSON keys: n_paths, steps, h, D, median_end_gap, seconds, image_shape.
    Examples:
      metric-match interpolate m.safetensors a.npz b.npz --h 0.1 --steps 32 -o path.npz --json
      metric-match interpolate digits.safetensors a.npz b.npz --h 0.5 -o path.png
    """
    from icmlkit.lib.core.io import suffix, write_bytes
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.metric_match.api import interpolate as interp, path_png
    from icmlkit.lib.metric_match.data import read_points
    from icmlkit.lib.metric_match.model import load_model

    run.output(output)
    m = load_model(run.input(model), run.device)
    res = interp(m, read_points(run.input(a)), read_points(run.input(b)), cfg)
    if suffix(output) == ".png":
        shape = m.config.get("image_shape")
        if not shape:
            raise UsageError("-o .png needs a model trained on images; this one has no image shape (use .npz)")
        run.save(output, write_bytes, path_png(res.arrays["path"], shape))
    else:
        _write_npz(run, output, res.arrays)
    return res.summary


@cli.command("eval", device=True, seed=False)
@click.argument("model")
@click.argument("testset")
@click.option("--data", default=None, help="The training points: also run the kNN baseline at its best (k, h) "
              "of --knn-k x --h-grid.")
@output_option("Every (method, h, k) row of the grid.", suffixes=(".csv", ".jsonl"))
@config_options(EvalConfig)
def eval_(run, model, testset, data, output, cfg):
    """Projector error and local-dimension accuracy on a test set with exact geometry.

    TESTSET: an .npz with 'points' and 'tangent' (n, d, D) and/or 'dim' (n,), as written by
    `generate`. Without --h the best h of --h-grid (in the trained range) is chosen on TESTSET
    itself and reported. Projector error: mean over points of |P_est - P_true|_F with the top-d
    eigenvectors.

    \b
    JSON keys: n, d, projector_error, knn_projector_error, dim_accuracy, knn_dim_accuracy,
    median_dim_error, h, knn_k, knn_h (knn_* null without --data).
    Examples:
      metric-match eval m.safetensors test.npz --json
      metric-match eval m.safetensors test.npz --data train.npz --knn-k 16,32,64 -o grid.csv --json
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.metric_match.api import evaluate
    from icmlkit.lib.metric_match.data import read_points
    from icmlkit.lib.metric_match.model import load_model

    run.output(output)
    m = load_model(run.input(model), run.device)
    test = read_points(run.input(testset))
    ref = read_points(run.input(data)) if data else None
    res = evaluate(m, test, cfg, ref)
    if output:
        run.save(output, write_rows, res.rows)
    return res.summary


@cli.command()
@click.argument("manifold")
@output_option("The points .npz: points, dim, d, tangent (n, d, D; not for skdim), clean (with --noise).",
               suffixes=(".npz",), stdout=False, required=True)
@config_options(GenerateConfig)
def generate(run, manifold, output, cfg):
    """Sample a manifold with exact geometry: sphere | squiggly-circle | torus | swiss-roll | skdim:M1 ...

    skdim:<id> draws scikit-dimension's BenchmarkManifolds (M1, M5a, M9, M13b, ...; optional extra
    `metric`): known dimension, no tangents.

    \b
    JSON keys: kind, n, D, d, noise, exact_tangents.
    Examples:
      metric-match generate sphere --d 2 --n 10000 -o s2.npz
      metric-match generate sphere --d 4 --D 16 --rotate --n 1000 --seed 1 -o s4_test.npz --json
      metric-match generate skdim:M13b --n 2500 -o spiral.npz
    """
    from icmlkit.lib.core.io import write_npz
    from icmlkit.lib.metric_match.generate import generate as gen

    run.output(output)
    out = gen(manifold, cfg, seed=run.seed)
    run.save(output, write_npz, **out["arrays"])
    return out["summary"]


add_demo(
    cli, "icmlkit.lib.metric_match.demo:run_demo",
    options=[click.option("--steps", type=click.IntRange(min=1), default=600, show_default=True,
                          help="Training steps of the demo model.")],
    doc="""Train on S^2 in R^3, compare tangents with the kNN baseline, read local dimensions.

    Writes train.npz, test.npz, model.safetensors, tangents.npz, eval.csv and summary.json into
    OUTDIR (about a minute on 2 cores).

    \b
    JSON keys: headline, projector_error, knn_projector_error, dim_accuracy, h, knn_k, knn_h,
    queries_per_s, knn_queries_per_s, outdir.
    Example:  metric-match demo --outdir outputs/demo/metric-match --json
    """,
)

main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
