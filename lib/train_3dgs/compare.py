"""Adam vs 3DGS2-TR from the same initialisation: PSNR-vs-iteration table and plot; the demo."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from icmlkit.lib.core.console import log
from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.io import write_json, write_rows, write_text
from icmlkit.lib.core.plot import pyplot, save_png
from icmlkit.lib.train_3dgs.model import Gaussians
from icmlkit.lib.train_3dgs.ply import read_ply, write_ply
from icmlkit.lib.train_3dgs.scene import Scene, make_synthetic_scene, read_scene
from icmlkit.lib.train_3dgs.train import METRIC_COLUMNS, FitConfig, FitResult, InitConfig, fit, psnr_at, starting_gaussians


def write_metrics(path, res: FitResult) -> None:
    """The metric rows of a fit as CSV (6 significant digits; empty where not evaluated)."""
    write_rows(path, res.metric_rows(), columns=METRIC_COLUMNS, float_format="%.6g")


@dataclass
class CompareResult:
    """Both fits (``runs``: name -> :class:`FitResult`), the summary (the CLI's JSON) and the
    ``table`` of test PSNR per evaluated iteration."""

    runs: dict
    summary: dict
    table: list


def curves_table(runs: dict) -> list[dict]:
    """Rows (iteration, psnr_test per optimizer) at every iteration where both were evaluated."""
    steps = sorted(set.intersection(*({r[0] for r in res.rows if r[4] is not None} for res in runs.values())))
    return [{"iter": s, **{f"psnr_{name}": round(psnr_at(res.rows, s), 4) for name, res in runs.items()}}
            for s in steps]


def plot_curves(path: Path, runs: dict, title: str) -> bool:
    plt = pyplot(required=False)
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    colors = {"adam": "#4c78a8", "tr": "#e45756"}
    for name, res in runs.items():
        pts = [(r[0], r[4]) for r in res.rows if r[4] is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, color=colors.get(name),
                label={"adam": "Adam (3DGS lrs)", "tr": "3DGS2-TR"}.get(name, name))
    ax.set_xlabel("iteration")
    ax.set_ylabel("test PSNR (dB)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_png(fig, path)
    return True


def compare(scene: Scene, cfg: FitConfig, folder: Path, init: InitConfig | None = None, seed: int = 0,
            device="cpu", ply: Gaussians | None = None, gt: Gaussians | None = None, title: str = "") -> CompareResult:
    """Fit Adam then TR with ``cfg`` (its optimizer field is ignored) from the same start
    (:func:`~icmlkit.lib.train_3dgs.train.starting_gaussians` of ``init``, ``ply``, ``gt``); write into
    ``folder``: adam.ply, tr.ply, adam.metrics.csv, tr.metrics.csv, compare.csv, compare.md,
    compare.png (with matplotlib) and summary.json."""
    if len(scene.test_cams) == 0:
        raise InputError("has no test views; compare scores both fits on them (add transforms_test.json)",
                         scene.path)
    init = init if init is not None else InitConfig()
    init.check()
    start = starting_gaussians(scene, init, cfg.sh_degree, seed, ply=ply, gt=gt)
    folder = Path(folder)
    half = cfg.iters // 2
    runs = {}
    for name in ("adam", "tr"):
        log.info("fit with %s (%d iterations) ...", name, cfg.iters)
        c = replace(cfg, optimizer=name, eval_iters=sorted(set(cfg.eval_iters) | {half}))
        runs[name] = fit(scene, start, c, seed=seed, device=device)
        write_ply(folder / f"{name}.ply", runs[name].gaussians)
        write_metrics(folder / f"{name}.metrics.csv", runs[name])
    table = curves_table(runs)
    write_rows(folder / "compare.csv", table, columns=["iter", "psnr_adam", "psnr_tr"])
    md = "| iteration | Adam test PSNR | TR test PSNR |\n|---:|---:|---:|\n" + "".join(
        f"| {r['iter']} | {r['psnr_adam']:.2f} | {r['psnr_tr']:.2f} |\n" for r in table)
    write_text(folder / "compare.md", md)
    plotted = plot_curves(folder / "compare.png", runs, title or f"{Path(scene.path).name}: Adam vs 3DGS2-TR")
    a, t = runs["adam"], runs["tr"]
    tr_half = psnr_at(t.rows, half)
    summary = {
        "psnr_test_adam": a.summary["psnr_test"], "psnr_test_tr": t.summary["psnr_test"],
        "psnr_test_tr_half": tr_half, "tr_half_ge_adam_full": bool(tr_half is not None and tr_half >= a.summary["psnr_test"]),
        "ssim_test_adam": a.summary["ssim_test"], "ssim_test_tr": t.summary["ssim_test"],
        "iters": cfg.iters, "n_gaussians": start.n,
        "seconds_per_iter_adam": a.summary["seconds_per_iter"], "seconds_per_iter_tr": t.summary["seconds_per_iter"],
        "time_ratio_tr_over_adam": round(t.summary["seconds_per_iter"] / max(a.summary["seconds_per_iter"], 1e-12), 3),
        "table": table, "plot": "compare.png" if plotted else None,
    }
    write_json(folder / "summary.json", summary)
    return CompareResult(runs, {k: v for k, v in summary.items() if k != "table"}, table)


def run_demo(folder: Path, *, seed: int = 0, device="cpu", iters: int = 120) -> dict:
    """A small synthetic scene of known Gaussians (300 Gaussians, 32x32, 16 + 4 views), then Adam vs
    TR from noisy known means; everything is written into ``folder``."""
    folder = Path(folder)
    log.info("make a synthetic scene of 300 known Gaussians ...")
    make_synthetic_scene(folder / "scene", n_gaussians=300, size=32, n_train=16, n_test=4, sh_degree=1, seed=seed,
                         fov_deg=40.0)
    scene = read_scene(folder / "scene")
    gt = read_ply(folder / "scene" / "gt.ply")
    cfg = FitConfig(iters=iters, batch=4, sh_degree=1, sh_every=iters // 3, eval_every=max(iters // 6, 1))
    s = compare(scene, cfg, folder, init=InitConfig(init="gt-noise"), seed=seed, device=device, gt=gt,
                title="demo: 300 known Gaussians, 32x32").summary
    head = (f"TR {s['psnr_test_tr']:.2f} dB vs Adam {s['psnr_test_adam']:.2f} dB test PSNR after {iters} iterations "
            f"(TR at {iters // 2}: {s['psnr_test_tr_half']:.2f}); TR/Adam time per iteration {s['time_ratio_tr_over_adam']:.2f}")
    return {"headline": head, **s}
