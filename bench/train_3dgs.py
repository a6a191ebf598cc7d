"""Benchmark of train-3dgs: 3DGS2-TR vs the reference Adam at fixed N, from the same initialisation.

In one run:
1. **Synthetic scene of known Gaussians** (800 Gaussians, SH degree 1, 64x64 views, 32 train + 8
   test, written in the NeRF-synthetic layout and read back): init = known means + N(0, 0.05 extent)
   with the 3DGS defaults for the rest; Adam and TR with batches of 4 views; test PSNR every 50
   iterations. Claim (the paper's "50 % fewer iterations"): mean TR PSNR at iters/2 >= Adam's at
   iters, and TR's at iters > Adam's. The paper's radius schedule 1e-6 -> 1e-8 is the target run;
   TR with a 1e-5 start (which the rebuttal reported better) is reported beside it.
2. **The lego subset** (../shared/data/nerf_lego_100, read in place), uniform random init (no SfM
   points), the same comparison, reported.
3. Per-iteration wall-time ratio TR/Adam and peak training-memory ratio, measured in the same run:
   each fit runs in its own worker process (one torch thread each; the three synthetic fits of a
   seed run concurrently, so they share the machine alike), and each process's peak RSS growth
   during the training loop is that optimizer's memory.

Size: the issue asks for 3 seeds x 1000 iterations; one seed of 1000 iterations is what fits in about
10 minutes on this shared 2-core CPU (about 0.3-0.5 s per Adam step at 800 Gaussians), so the default
is ``--seeds 1`` and the lego comparison is shortened (see the notes in the results). ``--seeds 3``
runs the full protocol (about 30 minutes here).

Writes bench/results/train_3dgs.json, bench/results/train_3dgs.md and bench/results/train_3dgs.png.
Run:  make bench TOOL=train-3dgs   (or .venv/bin/python bench/train_3dgs.py [--seeds 3] [--quick])
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

from _common import RESULTS, commit, machine, target, today, write_results

SYN = dict(n_gaussians=800, size=64, n_train=32, n_test=8, sh_degree=1)


def _job(spec: dict) -> dict:
    """One fit in a fresh worker process (one thread): returns its rows and summary."""
    import torch

    torch.set_num_threads(1)
    from icmlkit.lib.gs.ply import read_ply
    from icmlkit.lib.gs.scene import read_scene
    from icmlkit.lib.gs.train import FitConfig, fit, initial_gaussians

    sc = read_scene(spec["scene"], downscale=spec.get("downscale", 1))
    gt = read_ply(Path(spec["scene"]) / "gt.ply") if spec["init"] == "gt-noise" else None
    init = initial_gaussians(sc, spec["init"], spec["n"], spec["sh_degree"], spec["seed"], gt=gt)
    cfg = FitConfig(optimizer=spec["optimizer"], iters=spec["iters"], batch=4, sh_degree=spec["sh_degree"],
                    sh_every=spec["sh_every"], eval_every=spec["eval_every"], radius=spec.get("radius", 1e-6),
                    radius_final=spec.get("radius_final", 1e-8), eval_iters=[spec["iters"] // 2])
    t0 = time.perf_counter()
    res = fit(sc, init, cfg, seed=spec["seed"])
    return {"spec": spec, "rows": res.rows, "summary": res.summary, "wall": time.perf_counter() - t0,
            "init_psnr": res.rows[0][4]}


def run_jobs(specs: list[dict], workers: int) -> list[dict]:
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers, maxtasksperchild=1) as pool:
        return pool.map(_job, specs, chunksize=1)


def psnr_at(rows, step):
    for r in rows:
        if r[0] == step:
            return r[4]
    return None


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def summarise(results: list[dict], label: str, iters: int) -> dict:
    half = iters // 2
    out = {"label": label, "iters": iters, "runs": []}
    by = {}
    for r in results:
        key = r["spec"]["name"]
        by.setdefault(key, []).append(r)
        out["runs"].append({"name": key, "seed": r["spec"]["seed"], "psnr_half": psnr_at(r["rows"], half),
                            "psnr_full": psnr_at(r["rows"], iters), "init_psnr": r["init_psnr"],
                            "ssim_full": r["summary"]["ssim_test"],
                            "seconds_per_iter": r["summary"]["seconds_per_iter"],
                            "peak_train_memory_mb": r["summary"]["peak_train_memory_mb"],
                            "peak_memory_mb": r["summary"]["peak_memory_mb"],
                            "curve": [(x[0], round(x[4], 3)) for x in r["rows"] if x[4] is not None]})
    out["mean"] = {k: {"psnr_half": mean([psnr_at(r["rows"], half) for r in v]),
                       "psnr_full": mean([psnr_at(r["rows"], iters) for r in v]),
                       "ssim_full": mean([r["summary"]["ssim_test"] for r in v]),
                       "seconds_per_iter": mean([r["summary"]["seconds_per_iter"] for r in v]),
                       "peak_train_memory_mb": mean([r["summary"]["peak_train_memory_mb"] for r in v]),
                       "seeds": len(v)} for k, v in by.items()}
    return out


def plot(path: Path, blocks: list[dict]) -> bool:
    from icmlkit.lib.core.plot import pyplot, save_png

    plt = pyplot(required=False)
    if plt is None:
        return False
    fig, axes = plt.subplots(1, len(blocks), figsize=(5.5 * len(blocks), 3.8))
    axes = axes if len(blocks) > 1 else [axes]
    colors = {"adam": "#4c78a8", "tr": "#e45756", "tr-1e-5": "#f58518"}
    for ax, b in zip(axes, blocks):
        seen = set()
        for run in b["runs"]:
            xs, ys = zip(*run["curve"])
            ax.plot(xs, ys, color=colors.get(run["name"], "grey"), alpha=0.8,
                    label=None if run["name"] in seen else run["name"])
            seen.add(run["name"])
        ax.axvline(b["iters"] // 2, color="black", lw=0.5, ls=":")
        ax.set_title(b["label"], fontsize=9)
        ax.set_xlabel("iteration")
        ax.set_ylabel("test PSNR (dB)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--lego-iters", type=int, default=200)
    ap.add_argument("--lego-n", type=int, default=2000)
    ap.add_argument("--lego-downscale", type=int, default=2)
    ap.add_argument("--workers", type=int, default=3, help="concurrent fits for the synthetic scene (the lego "
                    "pair runs two at a time)")
    ap.add_argument("--quick", action="store_true", help="a smoke run (60 iterations, small lego); not written")
    args = ap.parse_args()
    if args.quick:
        args.iters, args.lego_iters, args.lego_n = 60, 20, 300
    from icmlkit.lib.core.io import shared_data_dir
    from icmlkit.lib.gs.scene import make_synthetic_scene

    t_start = time.perf_counter()
    info = machine()
    tmp = Path(tempfile.mkdtemp(prefix="bench-3dgs-"))
    make_synthetic_scene(tmp / "synth", seed=0, **SYN)
    it = args.iters
    specs = []
    for seed in range(args.seeds):
        base = dict(scene=str(tmp / "synth"), init="gt-noise", n=SYN["n_gaussians"], sh_degree=1, seed=seed,
                    iters=it, sh_every=max(it // 4, 1), eval_every=max(it // 20, 1))
        specs += [dict(base, optimizer="adam", name="adam"), dict(base, optimizer="tr", name="tr"),
                  dict(base, optimizer="tr", name="tr-1e-5", radius=1e-5, radius_final=1e-7)]
    syn = summarise(run_jobs(specs, args.workers), f"synthetic: {SYN['n_gaussians']} known Gaussians, "
                    f"{SYN['size']}x{SYN['size']}, {SYN['n_train']}+{SYN['n_test']} views, {args.seeds} seed(s)", it)
    t_syn = time.perf_counter() - t_start
    lego_dir = shared_data_dir("nerf_lego_100")
    lego = None
    if lego_dir is not None:
        li = args.lego_iters
        base = dict(scene=str(lego_dir), init="random", n=args.lego_n, sh_degree=1, seed=0, iters=li,
                    sh_every=max(li // 4, 1), eval_every=max(li // 10, 1), downscale=args.lego_downscale)
        lego = summarise(run_jobs([dict(base, optimizer="adam", name="adam"), dict(base, optimizer="tr", name="tr")],
                                  min(args.workers, 2)),
                         f"lego subset ({100 // args.lego_downscale}x{100 // args.lego_downscale}), {args.lego_n} "
                         "random-init Gaussians, 1 seed", li)
    seconds = time.perf_counter() - t_start

    m = syn["mean"]
    tr_half, tr_full, ad_full = m["tr"]["psnr_half"], m["tr"]["psnr_full"], m["adam"]["psnr_full"]
    time_ratio = m["tr"]["seconds_per_iter"] / m["adam"]["seconds_per_iter"]
    mem_a, mem_t = m["adam"]["peak_train_memory_mb"], m["tr"]["peak_train_memory_mb"]
    mem_ratio = mem_t / mem_a if mem_a else None
    seeds_note = (f"{args.seeds} seed(s) x {it} iterations (the issue asks for 3 seeds x 1000; "
                  "fewer seeds to fit ~10 minutes on this shared 2-core CPU)" if args.seeds < 3 else
                  f"{args.seeds} seeds x {it} iterations")
    targets = {
        "synthetic_tr_half_ge_adam_full": target(round(tr_half, 3), round(ad_full, 3), tr_half >= ad_full,
                                                 f"mean test PSNR of TR (radius 1e-6 -> 1e-8) at {it // 2} iterations vs "
                                                 f"Adam at {it}; {seeds_note}"),
        "synthetic_tr_full_gt_adam_full": target(round(tr_full, 3), round(ad_full, 3), tr_full > ad_full,
                                                 f"mean test PSNR of TR vs Adam, both at {it} iterations; {seeds_note}"),
        "time_ratio_tr_over_adam": target(round(time_ratio, 3), 3.0, time_ratio <= 3.0,
                                          "seconds per iteration TR / Adam, measured in the same run (the sheet "
                                          "expects about 2-3x); the two fits ran concurrently, one thread each"),
        "peak_memory_ratio_tr_over_adam": target(None if mem_ratio is None else round(mem_ratio, 3), 1.17,
                                                 mem_ratio is not None and mem_ratio <= 1.17,
                                                 "peak RSS growth during the training loop, TR / Adam (the paper: +17 % "
                                                 "GPU memory vs Adam); CPU process memory here, a proxy"),
    }
    if lego is not None:
        lm = lego["mean"]
        li = args.lego_iters
        targets["lego_tr_half_ge_adam_full"] = target(
            round(lm["tr"]["psnr_half"], 3), round(lm["adam"]["psnr_full"], 3),
            lm["tr"]["psnr_half"] >= lm["adam"]["psnr_full"],
            f"reported: lego, TR at {li // 2} vs Adam at {li} iterations ({args.lego_n} random-init Gaussians, "
            f"{100 // args.lego_downscale}x{100 // args.lego_downscale}, 1 seed; shortened to fit the time budget)")
        targets["lego_tr_full_gt_adam_full"] = target(
            round(lm["tr"]["psnr_full"], 3), round(lm["adam"]["psnr_full"], 3),
            lm["tr"]["psnr_full"] > lm["adam"]["psnr_full"], f"reported: lego, both at {li} iterations")
    plotted = plot(RESULTS / "train_3dgs.png", [b for b in (syn, lego) if b is not None]) if not args.quick else False
    cmd = "make bench TOOL=train-3dgs" + ("" if args.seeds == 1 else f"  (python bench/train_3dgs.py --seeds {args.seeds})")
    result = {"tool": "train-3dgs", "date": today(), "commit": commit(), "machine": info, "command": cmd,
              "results": {"synthetic": syn, "lego": lego, "seconds_total": round(seconds, 1),
                          "seconds_synthetic": round(t_syn, 1), "plot": "train_3dgs.png" if plotted else None,
                          "settings": {"seeds": args.seeds, "iters": it, "lego_iters": args.lego_iters,
                                       "lego_n": args.lego_n, "lego_downscale": args.lego_downscale,
                                       "batch_views": 4, "tr_hessian_every": 10, "tr_betas": [0.9, 0.999], "tr_radius": [1e-6, 1e-8],
                                       "curvature": "hutchinson hvp, 1 probe, block-averaged, one view per curvature pass",
                                       "workers": args.workers}},
                "targets": targets}

    def row(b, name):
        mm = b["mean"][name]
        return (f"| {name} | {mm['seeds']} | {mm['psnr_half']:.2f} | {mm['psnr_full']:.2f} | {mm['ssim_full']:.3f} | "
                f"{mm['seconds_per_iter']:.3f} | {mm['peak_train_memory_mb']:.0f} |")

    md = [f"# train-3dgs benchmark ({today()}, {info['cpu']}, {info['cores']} cores, load {info['load_average_1min']})",
          "", f"Command: `{cmd}`; total {seconds / 60:.1f} min.", ""]
    for b in (syn, lego):
        if b is None:
            continue
        md += [f"**{b['label']}**", "",
               f"| optimizer | seeds | test PSNR @ {b['iters'] // 2} | test PSNR @ {b['iters']} | SSIM @ {b['iters']} | "
               "s / iter | peak train memory (MB) |", "|---|---:|---:|---:|---:|---:|---:|"]
        md += [row(b, n) for n in b["mean"]] + [""]
    md += ["| target | value | threshold | met |", "|---|---:|---:|---|"]
    md += [f"| {k} | {v['value']} | {v['threshold']} | {'yes' if v['met'] else '**no**'} |" for k, v in targets.items()]
    md += ["", "tr = 3DGS2-TR with the paper's radius 1e-6 -> 1e-8 (the target run); tr-1e-5 = the same with "
           "1e-5 -> 1e-7 (reported, not a target). Fixed N, no densification, same init and view order for all."]
    text = "\n".join(md) + "\n"
    if args.quick:
        sys.stdout.write(text)
        return
    write_results("train_3dgs", result, text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
