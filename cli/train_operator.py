"""train-operator: resolution-invariant neural operators with Functional Attention (FuncAttn)."""
from __future__ import annotations

import click

from icmlkit.cli._common import (ToolGroup, add_demo, checkpoint_options, config_options, make_main, option_group,
                                 output_option)
from icmlkit.lib.train_operator.config import GRIDS, PDES, FewShotConfig, GenerateConfig, ModelConfig, TrainConfig

TOOL = "train-operator"
RECONSTRUCTED = (
    "RECONSTRUCTED (not confirmed by the paper's text or code): the fixed-Fourier-basis ablation (cosine bases of the "
    "coordinates, quadrature 1/n), the no-inverse-transform ablation (the bases' mean broadcast to the points), the "
    "FNO width matching rule, the Burgers and Navier-Stokes GRF normalisations, and the few-shot setup (tasks, "
    "encoders, decoder, schedule)."
)
DATA_FORMATS = (".pt", ".npz", ".mat")

cli = ToolGroup(
    TOOL,
    help=f"""Learn maps between function spaces with FuncAttn layers; predict on any grid.

\b
FuncAttn (Xiao et al., ICML 2026): per block, learned soft bases W = softmax(Lin(P_x LN(x)) / tau)
over k basis functions, coefficients T = diag(1/sum_n W) W^T P_f LN(x), and a least-squares
functional map C = Q((1-a)K^T K + aI)^-1 K^T between them (a batched d_h x d_h solve in float32)
instead of softmax attention; out = W C V. Baselines in the same tool: Transolver (the identical
net with softmax over the slice tokens) and a parameter-matched FNO of our own.

{RECONSTRUCTED}

\b
Data: neuraloperator-style .pt dicts (x, y as N x 1 x H x W, column-major files read correctly),
.npz or .mat with x, y and optional coords (n x d) for point sets. Models: one .safetensors file
holding the weights and the config (normalisers, training box) in its metadata.

\b
Examples:
  train-operator generate darcy -o darcy33.npz --n 200 --resolution 33
  train-operator train data/darcy/darcy_train_16.pt -o fa.safetensors --model funcattn --epochs 50 --json
  train-operator eval fa.safetensors data/darcy/darcy_test_32.pt --json | jq .rel_l2_x100
  train-operator superres fa.safetensors data/darcy/darcy_test_16.pt data/darcy/darcy_test_32.pt -o sr.csv --plot sr.png
  train-operator predict fa.safetensors data/darcy/darcy_test_32.pt -o pred.npz
  train-operator few-shot --context 4 --json
  torchrun --nproc_per_node 2 $(which train-operator) train data.npz -o m.safetensors --batch 8""",
)

_data_keys = option_group([
    click.option("--x-key", default="x", show_default=True, help="Name of the input field in the data files."),
    click.option("--y-key", default="y", show_default=True, help="Name of the output field in the data files."),
    click.option("--grid", type=click.Choice(GRIDS), default="auto", show_default=True,
                 help="Where a grid's points lie on [0, 1]^d (position features and quadrature): node "
                      "(linspace(0, 1, s), boundaries included), cell (i/s: neuraloperator's Darcy .pt), periodic "
                      "(i/s on [0, 1)); auto: the file's grid key, else its coords, else .pt 2-D cell / 1-D "
                      "periodic and .npz/.mat node."),
])


def _read(run, path, x_key, y_key, grid="auto", need_y=True):
    from icmlkit.lib.train_operator.data import read_fields

    return read_fields(run.input(path), x_key, y_key, need_y=need_y, grid=None if grid == "auto" else grid)


@cli.command()
@click.argument("pde", type=click.Choice(PDES))
@output_option("The data set (.npz with x, y, coords).", suffixes=(".npz",), stdout=False, required=True)
@config_options(GenerateConfig)
def generate(run, pde, output, cfg):
    """Exact data: Darcy (FD + spsolve), periodic Burgers (ETDRK4) or 2-D Navier-Stokes vorticity
    (pseudo-spectral Crank-Nicolson), solved fine and subsampled.

    darcy: -div(a grad u) = 1 on [0,1]^2, u = 0 on the boundary, a = 12 / 3 from a thresholded GRF
    with covariance (-Laplacian + 9 I)^-2; x, y: N x 1 x H x W; coords: H*W x 2 (row-major nodes).
    burgers: nu = 0.1, u0 ~ N(0, 625 (-Laplacian + 25 I)^-2), u(1) by ETDRK4 at 8192 points; x, y: N x L,
    coords L x 1. ns: w_t + u.grad w = nu Lap w + f (f = 0.1(sin 2pi(x+y) + cos 2pi(x+y)), nu 1e-3) on the
    periodic unit square at 64 x 64, Crank-Nicolson diffusion and Heun advection (2/3 dealiasing), w0 ~
    N(0, 7^3 (-Laplacian + 49 I)^-2.5); x = w at t = 1..10 (N x 10 x H x W), y = w at t = 11..20; coords the
    periodic nodes. Test sets at another resolution: the same --seed and --n with another --resolution
    (the same fine solves, subsampled).

    \b
    JSON keys: pde, n, solve_resolution, resolution, y_mean, y_max, seconds (burgers and ns also nu;
    ns also t_in, t_out, record_dt), output.
    Examples:
      train-operator generate darcy -o train33.npz --n 1000 --resolution 33
      train-operator generate darcy -o test129.npz --n 50 --resolution 129 --seed 1
      train-operator generate burgers -o burgers.npz --n 200 --resolution 1024
      train-operator generate ns -o ns64.npz --n 100 --nu 1e-3
    """
    from icmlkit.lib.core.io import write_npz
    from icmlkit.lib.train_operator.solvers import generate_burgers, generate_darcy, generate_ns

    run.output(output)
    sub = cfg.for_pde(pde)
    res = {"darcy": generate_darcy, "burgers": generate_burgers, "ns": generate_ns}[pde](sub, seed=run.seed)
    run.save(output, write_npz, **res.arrays)
    return {**res.summary, "output": output}


@cli.command(device=True)
@click.argument("data")
@output_option("The model (.safetensors: weights + config in the metadata; the config also in OUTPUT.config.json).",
               suffixes=(".safetensors",), stdout=False, required=True)
@output_option("Per-epoch table (default: OUTPUT with .epochs.csv).", suffixes=(".csv",), stdout=False,
               flags=("--epochs-csv",), name="epochs_csv")
@click.option("--val", "val_path", default=None, type=click.Path(dir_okay=False),
              help="Validation data (default: the last --val-fraction of DATA).")
@_data_keys
@checkpoint_options("epoch")
@config_options(ModelConfig, arg="mcfg")
@config_options(TrainConfig, arg="tcfg")
def train(run, data, output, epochs_csv, val_path, x_key, y_key, grid, checkpoint_every, resume, mcfg, tcfg):
    """Train FuncAttn, its Conv2d variant, Transolver or FNO on DATA.

    Global scalar normalisers, relative-L2 loss on decoded outputs, AdamW + OneCycleLR, gradient clip
    (default 0.1). Under torchrun every process takes its part of each global batch and the gradients
    are averaged (rank 0 writes). A checkpoint OUTPUT.ckpt.pt is written every --checkpoint-every
    epochs and removed at the end; --resume continues to the same bytes. The final weights are saved
    (not the best validation epoch). The epoch CSV: epoch, train_rel_l2, val_rel_l2, lr. Ablations:
    --basis fourier and --no-inverse are RECONSTRUCTED.

    \b
    JSON keys: model, epochs, params, best_val_rel_l2, final_val_rel_l2, final_train_rel_l2,
    seconds_per_epoch, n_train, n_val, resolution, resumed_from, world_size, fno_width (fno), output,
    epochs_csv, config_json (OUTPUT.config.json: the model config, its metadata and the training options).
    Examples:
      train-operator train data/darcy/darcy_train_16.pt -o fa.safetensors --epochs 100 --json
      train-operator train train33.npz --val test33.npz -o tr.safetensors --model transolver
      train-operator train data/darcy/darcy_train_16.pt -o fa.safetensors --epochs 100 --resume
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.train_operator.train import train as train_model

    from dataclasses import asdict

    from icmlkit.lib.core.io import write_json

    stem = str(output)[: -len(".safetensors")]
    epochs_csv = epochs_csv or stem + ".epochs.csv"
    config_json = stem + ".config.json"
    run.output(output)
    run.output(epochs_csv)
    run.output(config_json)
    ck = run.checkpointer(output, checkpoint_every, resume)
    ds = _read(run, data, x_key, y_key, grid)
    val = _read(run, val_path, x_key, y_key, grid) if val_path else None
    res = train_model(mcfg, tcfg, ds, val, seed=run.seed, device=run.device, dist=run.dist, checkpointer=ck)
    run.save(output, res.model.save)
    run.save(epochs_csv, write_rows, res.rows, ["epoch", "train_rel_l2", "val_rel_l2", "lr"])
    run.save(config_json, write_json, {"model": res.model.cfg, "meta": res.model.meta(), "train": asdict(tcfg)})
    ck.done()
    return {**res.summary, "output": output, "epochs_csv": epochs_csv, "config_json": config_json}


@cli.command(name="eval", device=True, seed=False)
@click.argument("model")
@click.argument("data")
@_data_keys
@click.option("--batch", type=click.IntRange(min=1), default=16, show_default=True, help="Samples per forward pass.")
@click.option("--fail-above", type=float, default=None, help="Exit 3 when rel_l2_x100 is above this.")
def eval_(run, model, data, x_key, y_key, grid, batch, fail_above):
    """Relative L2 x 100 (per sample, averaged, on decoded outputs) of MODEL on DATA, at any resolution.

    \b
    JSON keys: model, resolution, n, rel_l2_x100, rel_l2_std, params, seconds, train_resolution.
    Example:  train-operator eval fa.safetensors data/darcy/darcy_test_32.pt --json
    """
    from icmlkit.lib.train_operator.train import evaluate, load_model

    m = load_model(run.input(model))
    res = evaluate(m, _read(run, data, x_key, y_key, grid), device=run.device, batch=batch)
    if fail_above is not None and res.summary["rel_l2_x100"] > fail_above:
        run.fail_check(f"rel_l2_x100 {res.summary['rel_l2_x100']:.4f} is above --fail-above {fail_above}")
    return res.summary


@cli.command(device=True, seed=False)
@click.argument("model")
@click.argument("inputs")
@output_option("Predictions (.npz: y in the layout of INPUTS' x, and coords).", suffixes=(".npz",), stdout=False,
               required=True)
@_data_keys
@click.option("--batch", type=click.IntRange(min=1), default=16, show_default=True, help="Samples per forward pass.")
def predict(run, model, inputs, output, x_key, y_key, grid, batch):
    """Predict the output fields of INPUTS (y is not needed) at INPUTS' own points.

    \b
    JSON keys: n, resolution, points, channels, seconds, output.
    Example:  train-operator predict fa.safetensors data/darcy/darcy_test_32.pt -o pred32.npz
    """
    from icmlkit.lib.core.io import write_npz
    from icmlkit.lib.train_operator.train import load_model, predict as predict_fields

    run.output(output)
    m = load_model(run.input(model))
    res = predict_fields(m, _read(run, inputs, x_key, y_key, grid, need_y=False), device=run.device, batch=batch)
    run.save(output, write_npz, y=res.y, coords=res.coords)
    return {**res.summary, "output": output}


@cli.command(device=True, seed=False)
@click.argument("model")
@click.argument("data", nargs=-1, required=True)
@output_option("The table (one row per DATA).", suffixes=(".csv", ".jsonl"), required=True)
@output_option("The figure: error vs points and sample 0 per grid (input, truth, prediction, error).",
               suffixes=(".png",), stdout=False, flags=("--plot",), name="plot")
@_data_keys
@click.option("--batch", type=click.IntRange(min=1), default=16, show_default=True, help="Samples per forward pass.")
@click.option("--max-ratio", type=float, default=None,
              help="Exit 3 when an error exceeds this multiple of the first DATA's (e.g. 1.3).")
def superres(run, model, data, output, plot, x_key, y_key, grid, batch, max_ratio):
    """One model at several resolutions (zero-shot, no retraining): a table and a figure.

    Columns: data, resolution, n, rel_l2_x100, rel_l2_std, seconds, points, interp_rel_l2_x100,
    ratio_to_first. interp_rel_l2_x100 is the simple baseline: the first DATA's prediction interpolated
    onto this grid (bilinear on node grids, trigonometric on periodic ones), when it nests the first grid
    and holds the same samples (else empty).

    \b
    JSON keys: model, train_resolution, params, resolutions, rel_l2_x100, interp_rel_l2_x100,
    max_ratio_to_first, output, plot.
    Example:  train-operator superres fa.safetensors test16.pt test32.pt -o sr.csv --plot sr.png --max-ratio 1.3
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.train_operator.train import load_model, plot_superres, superres as run_superres

    run.output(output)
    run.output(plot)
    m = load_model(run.input(model))
    sets = [_read(run, p, x_key, y_key, grid) for p in data]
    res = run_superres(m, sets, device=run.device, batch=batch)
    run.save(output, write_rows, res.rows)
    if plot:
        run.save(plot, plot_superres, res)
    if max_ratio is not None and res.summary["max_ratio_to_first"] > max_ratio:
        run.fail_check(f"an error is {res.summary['max_ratio_to_first']:.3f}x the first data set's "
                       f"(--max-ratio {max_ratio})")
    return {**res.summary, "output": output, "plot": plot}


@cli.command(name="few-shot", device=True)
@config_options(FewShotConfig)
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True, help="torch CPU threads.")
def few_shot(run, cfg, threads):
    """Few-shot sine regression: FuncAttn vs the ridge map over the points vs softmax cross-attention.

    FuncAttn slices the context into --bases soft bases with a softmax over the points (learned tau),
    and its least-squares map (ridge 1e-4) sends each query to the bases' value coefficients; "ridge"
    is the same map over the context points directly (Intention-style). All three get the same
    encoders, decoder, task stream and test tasks; only the attention differs. The setup beyond
    "4-layer MLP encoders, ridge 1e-4, softmax over points" is RECONSTRUCTED.

    \b
    JSON keys: context, bases, mse_funcattn, mse_ridge, mse_softmax, ratio (funcattn / softmax), target_met
    (ratio <= 0.1), steps, seconds_funcattn, seconds_ridge, seconds_softmax.
    Example:  train-operator few-shot --context 4 --steps 2000 --json
    """
    import torch

    from icmlkit.lib.train_operator.fewshot import few_shot as run_few_shot

    torch.set_num_threads(threads)
    return run_few_shot(cfg, seed=run.seed, device=run.device).summary


add_demo(
    cli, "icmlkit.lib.train_operator.demo:run_demo", device=True,
    options=[click.option("--epochs", type=click.IntRange(min=1), default=5, show_default=True,
                          help="Training epochs of each model (5 keeps the demo within its 60-s CPU budget).")],
    doc="""Train FuncAttn and Transolver on the shipped Darcy set (16x16), test both at 16x16 and 32x32,
    and run the few-shot sine check; writes the models, superres tables and figure, and summary.json.

    \b
    JSON keys: headline, funcattn_16, funcattn_32, transolver_16, transolver_32, fewshot_ratio, outdir.
    Example:  train-operator demo --outdir outputs/demo/train-operator --epochs 10 --json
    """,
)

main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
