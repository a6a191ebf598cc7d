"""train-3dgs: 3D Gaussian Splatting with the 3DGS2-TR second-order trust-region optimizer (pure PyTorch)."""
from __future__ import annotations

import click

from icmlkit.cli._common import ToolGroup, checkpoint_file, make_main, option_group

TOOL = "train-3dgs"
RECONSTRUCTED = (
    "RECONSTRUCTED (the paper's text beyond its abstract is unknown): that the final method is the "
    "Sophia-style diagonal step followed by the Hellinger clip; beta1/beta2/k/eps (0.9/0.999/10/1e-15, the "
    "toy's); o_min/o_max (0.01/1), tau_q (0.05) and the colour floor (1e-3); one multi-view batch with the "
    "same probe for g and Hz."
)

cli = ToolGroup(
    TOOL,
    help=f"""Fit 3D Gaussian Splatting scenes with 3DGS2-TR or Adam, at a fixed number of Gaussians.

\b
3DGS2-TR (Hsiao et al., ICML 2026): momentum preconditioned by a Hutchinson estimate of the
Hessian diagonal (Rademacher probes, HVPs by double backward through a pure-PyTorch
rasterizer, or the Gauss-Newton J^T J z), refreshed every k steps with an EMA, then a
per-Gaussian element-wise trust-region clip that keeps the squared Hellinger distance of
each Gaussian under a radius decaying 1e-6 -> 1e-8. The baseline is Adam with the reference
3DGS learning rates. No densification or pruning.

{RECONSTRUCTED}

\b
Scenes: a folder in the NeRF-synthetic layout (transforms_train.json, transforms_test.json,
RGBA images) or a COLMAP text model (cameras.txt, images.txt, points3D.txt; images/).
Outputs: the standard 3DGS .ply (loadable by the common splat viewers), metrics CSV, PNGs.

\b
Examples:
  train-3dgs make-scene -o synth --n-gaussians 800 --size 64 --train 32 --test 8
  train-3dgs fit synth -o synth.tr.ply --optimizer tr --iters 1000 --init gt-noise --json
  train-3dgs fit ../shared/data/nerf_lego_100 -o lego.ply --init random --n-gaussians 5000
  train-3dgs fit synth -o synth.tr.ply --iters 1000 --resume      # continue after an interruption
  train-3dgs eval synth.tr.ply synth --json | jq .psnr_test
  train-3dgs render synth.tr.ply synth/transforms_test.json --outdir renders
  train-3dgs compare synth --outdir cmp --iters 1000 --init gt-noise""",
)


_fit_options = option_group([
    click.option("--iters", type=click.IntRange(min=1), default=1000, show_default=True, help="Optimizer steps."),
    click.option("--batch", type=click.IntRange(min=1), default=4, show_default=True, help="Views per step."),
    click.option("--init", "init_mode", type=click.Choice(["auto", "random", "sfm", "gt-noise"]), default="auto",
                 show_default=True, help="auto: COLMAP points when present, else random; random: uniform in the "
                 "box the cameras look at; gt-noise: known means (gt.ply of make-scene) + noise."),
    click.option("--init-ply", default=None, help="Start from this .ply instead (overrides --init)."),
    click.option("--n-gaussians", type=click.IntRange(min=1), default=5000, show_default=True,
                 help="N for --init random."),
    click.option("--noise", type=click.FloatRange(min=0), default=0.05, show_default=True,
                 help="--init gt-noise: std of the noise on the means, times the extent of the known means."),
    click.option("--sh-degree", type=click.IntRange(0, 3), default=3, show_default=True, help="Maximum SH degree."),
    click.option("--sh-every", type=click.IntRange(min=1), default=1000, show_default=True,
                 help="Raise the active SH degree every this many steps (3DGS)."),
    click.option("--curvature", type=click.Choice(["hvp", "gn"]), default="hvp", show_default=True,
                 help="TR: Hutchinson with Hessian-vector products (L2 loss) or Gauss-Newton J^T J z."),
    click.option("--curvature-views", type=click.IntRange(min=0), default=1, show_default=True,
                 help="TR: views per curvature pass (rendered, differentiated twice and freed in turn; the "
                 "same probe z); 0: the whole batch in one graph (more memory)."),
    click.option("--hessian-every", type=click.IntRange(min=1), default=10, show_default=True,
                 help="TR: refresh the curvature diagonal every k steps."),
    click.option("--probes", type=click.IntRange(min=1), default=1, show_default=True,
                 help="TR: Rademacher probes per refresh."),
    click.option("--radius", type=click.FloatRange(min=0, min_open=True), default=1e-6, show_default=True,
                 help="TR: initial squared-Hellinger radius."),
    click.option("--radius-final", type=click.FloatRange(min=0, min_open=True), default=1e-8, show_default=True,
                 help="TR: final radius (exponential decay)."),
    click.option("--beta1", type=click.FloatRange(0, 1, max_open=True), default=0.9, show_default=True),
    click.option("--beta2", type=click.FloatRange(0, 1, max_open=True), default=0.999, show_default=True),
    click.option("--eps", "eps_", type=click.FloatRange(min=0), default=1e-15, show_default=True,
                 help="TR: added to the curvature diagonal."),
    click.option("--no-block-average", is_flag=True, help="TR: do not average the diagonal over each Gaussian's "
                 "parameter block."),
    click.option("--tile-size", type=click.IntRange(min=0), default=4, show_default=True,
                 help="Tile culling with tiles of this many pixels; 0: dense (every Gaussian on every pixel)."),
    click.option("--eval-every", type=click.IntRange(min=1), default=100, show_default=True,
                 help="Evaluate PSNR/SSIM on the test views every this many steps."),
    click.option("--background", type=click.Choice(["white", "black"]), default="white", show_default=True),
    click.option("--downscale", type=click.IntRange(min=1), default=1, show_default=True,
                 help="Average-pool the images by this factor."),
])


def _bg(name):
    return (1.0, 1.0, 1.0) if name == "white" else (0.0, 0.0, 0.0)


def _scene(run, path, background, downscale):
    from pathlib import Path

    from icmlkit.lib.gs.scene import read_scene

    for name in ("transforms_train.json", "transforms_test.json"):
        if (Path(path) / name).is_file():
            run.input(Path(path) / name)
    return read_scene(path, background=_bg(background), downscale=downscale)


def _config(optimizer, kw):
    from icmlkit.lib.gs.train import FitConfig

    return FitConfig(optimizer=optimizer, iters=kw["iters"], batch=kw["batch"], sh_degree=kw["sh_degree"],
                     sh_every=kw["sh_every"], eval_every=kw["eval_every"], tile_size=kw["tile_size"] or None,
                     curvature=kw["curvature"], curvature_views=kw["curvature_views"],
                     hessian_every=kw["hessian_every"], radius=kw["radius"],
                     radius_final=kw["radius_final"], beta1=kw["beta1"], beta2=kw["beta2"], eps=kw["eps_"],
                     block_average=not kw["no_block_average"], probes=kw["probes"])


def _init(run, scene, kw):
    from pathlib import Path

    from icmlkit.lib.gs.ply import read_ply
    from icmlkit.lib.gs.train import initial_gaussians

    if kw["init_ply"]:
        g = read_ply(run.input(kw["init_ply"]))
        return g if g.sh_degree >= kw["sh_degree"] else _pad_sh(g, kw["sh_degree"])
    gt = None
    if kw["init_mode"] == "gt-noise":
        p = Path(scene.path) / "gt.ply"
        gt = read_ply(run.input(p)) if p.is_file() else None
    return initial_gaussians(scene, kw["init_mode"], kw["n_gaussians"], kw["sh_degree"], run.seed,
                             noise=kw["noise"], gt=gt)


def _pad_sh(g, degree):
    import torch

    from icmlkit.lib.gs.sh import n_coeffs

    extra = torch.zeros(g.n, n_coeffs(degree) - 1 - g.shN.shape[1], 3, dtype=g.shN.dtype)
    return g.replace(shN=torch.cat([g.shN, extra], 1), sh_degree=degree)


@cli.command(device=True)
@click.argument("scene")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The fitted scene as a standard 3DGS .ply (a file, not stdout).")
@click.option("--optimizer", type=click.Choice(["tr", "adam"]), default="tr", show_default=True,
              help="tr: 3DGS2-TR; adam: the reference 3DGS Adam (per-group learning rates).")
@click.option("--metrics", default=None, help="Metrics per iteration as CSV (default: OUTPUT with .metrics.csv).")
@click.option("--resume", is_flag=True, help="Continue from OUTPUT.ckpt.pt (written every --checkpoint-every steps).")
@click.option("--checkpoint-every", type=click.IntRange(min=0), default=200, show_default=True,
              help="Save parameters, optimizer state, step and RNG states to OUTPUT.ckpt.pt; 0: never.")
@_fit_options
def fit(run, scene, output, optimizer, metrics, resume, checkpoint_every, **kw):
    """Fit a scene with 3DGS2-TR or Adam; write the .ply and the metrics CSV.

    TR's final assembly (diagonal step, then the Hellinger clip) and several of its constants are
    RECONSTRUCTED (see `train-3dgs --help`).

    The metrics CSV has one row per iteration: iter, loss (0.8 L1 + 0.2 D-SSIM of the batch),
    psnr_batch, step_size (TR radius or Adam's means lr), psnr_test and ssim_test (filled every
    --eval-every steps). Same seed -> same bytes on CPU. A checkpoint OUTPUT.ckpt.pt is kept while
    the run is incomplete (removed on success) for --resume.

    \b
    JSON keys: psnr_test, ssim_test, iters, seconds, seconds_per_iter, peak_memory_mb (peak RSS on
    CPU, allocator peak on CUDA), peak_train_memory_mb, peak_tensor_memory_mb (deterministic:
    parameters + gradients + optimizer state + peak of the tensors saved for backward),
    static_memory_mb, peak_saved_mb, peak_saved_train_mb, peak_saved_curvature_mb (TR),
    clip_fraction (TR: per group, mean over steps), n_gaussians, optimizer, output, metrics,
    resumed_from.
    Examples:
      train-3dgs fit synth -o synth.ply --optimizer tr --init gt-noise --sh-degree 1 --json
      train-3dgs fit colmap_scene -o s.ply --optimizer adam --iters 7000 --downscale 4
    """
    from icmlkit.lib.core.io import write_bytes, write_text
    from icmlkit.lib.gs.ply import write_ply
    from icmlkit.lib.gs.train import checkpoint_bytes, fit as fit_scene, load_checkpoint, metrics_csv

    if not str(output).endswith(".ply") or output == "-":
        raise click.BadParameter(f"{output}: the scene is written as a .ply file", param_hint="-o")
    metrics = metrics or str(output)[:-4] + ".metrics.csv"
    ckpt = checkpoint_file(output, resume)
    state = load_checkpoint(run.input(ckpt)) if resume else None
    run.output(output)
    run.output(metrics)
    sc = _scene(run, scene, kw["background"], kw["downscale"])
    init = _init(run, sc, kw)
    cfg = _config(optimizer, kw)

    def save(st):
        write_bytes(ckpt, checkpoint_bytes(st))

    res = fit_scene(sc, init, cfg, seed=run.seed, device=run.device, resume=state, checkpoint=save,
                    checkpoint_every=checkpoint_every)
    write_ply(output, res.gaussians)
    run.wrote(output)
    write_text(metrics, metrics_csv(res.rows))
    run.wrote(metrics)
    ckpt.unlink(missing_ok=True)
    return {**res.summary, "output": output, "metrics": metrics, "resumed_from": state["step"] if state else None}


@cli.command(device=True, seed=False)
@click.argument("splats")
@click.argument("cameras")
@click.option("--outdir", required=True, type=click.Path(file_okay=False), help="Folder of PNGs (built atomically).")
@click.option("--background", type=click.Choice(["white", "black"]), default="white", show_default=True)
@click.option("--size", default=None, help="WxH for a transforms .json without w/h (default: its images' size, "
              "else 800x800).")
@click.option("--tile-size", type=click.IntRange(min=0), default=8, show_default=True)
def render(run, splats, cameras, outdir, background, size, tile_size):
    """Render a .ply from cameras (a transforms_*.json, or a scene folder's test views) to PNGs.

    \b
    JSON keys: outdir, n_views, width, height.
    Example:  train-3dgs render lego.ply ../shared/data/nerf_lego_100/transforms_test.json --outdir renders
    """
    import io

    import numpy as np
    import torch
    from PIL import Image

    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.core.io import write_bytes
    from icmlkit.lib.gs.ply import read_ply
    from icmlkit.lib.gs.rasterize import render as render_views
    from icmlkit.lib.gs.scene import read_cameras

    wh = None
    if size:
        try:
            wh = tuple(int(x) for x in size.lower().split("x"))
            assert len(wh) == 2 and min(wh) > 0
        except (ValueError, AssertionError):
            raise UsageError(f"--size {size!r}: expected WxH, e.g. 800x800") from None
    g = read_ply(run.input(splats)).to(device=run.device)
    cams = read_cameras(run.input(cameras), size=wh).to(device=run.device)
    with run.run_dir(outdir) as folder:
        with torch.no_grad():
            for i in range(0, len(cams), 4):
                ids = list(range(i, min(i + 4, len(cams))))
                imgs = render_views(g, cams[ids], background=_bg(background), tile_size=tile_size or None)
                for k, img in zip(ids, imgs):
                    arr = (img.clamp(0, 1).cpu().double().numpy() * 255 + 0.5).astype(np.uint8)
                    buf = io.BytesIO()
                    Image.fromarray(arr, "RGB").save(buf, format="PNG")
                    name = cams.names[k] if cams.names else f"view_{k:04d}"
                    write_bytes(folder / f"{name}.png", buf.getvalue())
    return {"outdir": outdir, "n_views": len(cams), "width": cams.width, "height": cams.height}


@cli.command(name="eval", device=True, seed=False)
@click.argument("splats")
@click.argument("scene")
@click.option("--split", type=click.Choice(["test", "train"]), default="test", show_default=True)
@click.option("--background", type=click.Choice(["white", "black"]), default="white", show_default=True)
@click.option("--downscale", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--fail-under", type=float, default=None, help="Exit 3 when the PSNR is below this (dB).")
def eval_(run, splats, scene, split, background, downscale, fail_under):
    """PSNR and SSIM of a .ply on a scene's test (or train) views.

    \b
    JSON keys: psnr_test, ssim_test, n_views, split, n_gaussians.
    Example:  train-3dgs eval lego.ply ../shared/data/nerf_lego_100 --json
    """
    from icmlkit.lib.gs.ply import read_ply
    from icmlkit.lib.gs.train import evaluate

    g = read_ply(run.input(splats)).to(device=run.device)
    sc = _scene(run, scene, background, downscale)
    cams, imgs = (sc.test_cams, sc.test_images) if split == "test" else (sc.train_cams, sc.train_images)
    if len(cams) == 0:
        raise click.BadParameter(f"{scene} has no {split} views", param_hint="--split")
    ev = evaluate(g.to(dtype=imgs.dtype), cams.to(run.device), imgs.to(run.device), sc.background)
    if fail_under is not None and ev["psnr"] < fail_under:
        run.fail_check(f"PSNR {ev['psnr']:.3f} dB is below --fail-under {fail_under}")
    return {"psnr_test": ev["psnr"], "ssim_test": ev["ssim"], "n_views": len(cams), "split": split, "n_gaussians": g.n}


@cli.command(name="make-scene")
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False),
              help="Folder of the scene (NeRF-synthetic layout, built atomically).")
@click.option("--n-gaussians", type=click.IntRange(min=1), default=800, show_default=True)
@click.option("--size", type=click.IntRange(min=8), default=64, show_default=True, help="Image width = height.")
@click.option("--train", "n_train", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--test", "n_test", type=click.IntRange(min=0), default=8, show_default=True)
@click.option("--sh-degree", type=click.IntRange(0, 3), default=1, show_default=True)
@click.option("--fov", type=click.FloatRange(5, 150), default=40.0, show_default=True, help="Horizontal field of view (deg).")
def make_scene(run, output, n_gaussians, size, n_train, n_test, sh_degree, fov):
    """A synthetic scene of known Gaussians rendered from cameras on a sphere.

    Writes transforms_train.json, transforms_test.json, train/r_*.png, test/r_*.png (RGBA) and
    gt.ply (the known Gaussians) into OUTPUT.

    \b
    JSON keys: output, n_gaussians, size, n_train, n_test, sh_degree, camera_radius, fov_deg.
    Example:  train-3dgs make-scene -o synth --n-gaussians 800 --size 64
    """
    from icmlkit.lib.gs.scene import make_synthetic_scene

    if output == "-":
        raise click.BadParameter("the scene is a folder, not a stream", param_hint="-o")
    with run.run_dir(output) as folder:
        info = make_synthetic_scene(folder, n_gaussians=n_gaussians, size=size, n_train=n_train, n_test=n_test,
                                    sh_degree=sh_degree, seed=run.seed, fov_deg=fov)
    return {"output": output, **info}


@cli.command(device=True)
@click.argument("scene")
@click.option("--outdir", required=True, type=click.Path(file_okay=False), help="Run folder (built atomically).")
@_fit_options
def compare(run, scene, outdir, **kw):
    """Adam vs 3DGS2-TR from the same initialisation and the same view order.

    Writes adam.ply, tr.ply, their metrics CSVs, compare.csv / compare.md (test PSNR per evaluated
    iteration), compare.png (PSNR vs iteration) and summary.json into OUTDIR.

    \b
    JSON keys: psnr_test_adam, psnr_test_tr, psnr_test_tr_half (TR at iters/2),
    tr_half_ge_adam_full, ssim_test_adam, ssim_test_tr, iters, n_gaussians, seconds_per_iter_adam,
    seconds_per_iter_tr, time_ratio_tr_over_adam, plot, outdir.
    Example:  train-3dgs compare synth --outdir cmp --init gt-noise --sh-degree 1 --sh-every 250 --json
    """
    from icmlkit.lib.gs.compare import compare as run_compare

    sc = _scene(run, scene, kw["background"], kw["downscale"])
    init = _init(run, sc, kw)
    cfg = _config("tr", kw)
    with run.run_dir(outdir) as folder:
        s = run_compare(sc, init, cfg, folder, seed=run.seed, device=run.device)
    return {**{k: v for k, v in s.items() if k != "table"}, "outdir": outdir}


@cli.command(device=True)
@click.option("--outdir", default="outputs/demo/train-3dgs", show_default=True, type=click.Path(file_okay=False),
              help="Run directory (built as <outdir>.partial).")
@click.option("--iters", type=click.IntRange(min=2), default=120, show_default=True)
def demo(run, outdir, iters):
    """Make a small synthetic scene of known Gaussians and compare Adam and TR on it.

    Writes the scene, both .ply files, metrics, compare.png and summary.json into OUTDIR.
    JSON keys: headline, psnr_test_adam, psnr_test_tr, psnr_test_tr_half, ..., outdir.
    """
    from icmlkit.lib.gs.compare import run_demo

    with run.run_dir(outdir) as folder:
        s = run_demo(folder, seed=run.seed, device=run.device, iters=iters)
    return {**s, "outdir": outdir}


main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
