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
3. Per-iteration wall-time ratio TR/Adam and peak-memory ratio, measured in the same run: each fit
   runs in its own worker process (one torch thread each; the three synthetic fits of a seed run
   concurrently, so they share the machine alike). The memory target uses the deterministic tensor
   meter of lib/gs/memory.py (parameters + gradients + optimizer state + the peak of the tensors
   saved for backward, training graph and Hutchinson double-backward graph alike: what a GPU
   allocator's peak is made of, without the allocator and the process); each process's peak RSS
   growth during the training loop is reported beside it (noisy).
4. The trust-region **travel budget**: the opacity clip ``|d alpha| <= sqrt(4 alpha eps_t)`` gives
   ``d sqrt(alpha) <= sqrt(eps_t)`` per step, so the highest opacity reachable from the 0.1 init in T
   steps of the actual radius schedule is computed exactly (and the analogous scale and mean
   budgets at o_bar = 0.1), and compared with the known Gaussians' opacities (0.5..0.95).
   The per-group fraction of clipped elements of each TR run is logged.
5. Optional ``--long L`` (reported, not a target): one seed, Adam vs TR at the paper's radius with the
   schedules stretched over L iterations (the TR radius and Adam's means-lr decay), evaluated at L/2
   and L; two single-thread fits at once (about 15 minutes for L = 3000 here). ``--long-only L`` runs
   just this check and merges it into the existing results files.

Size: the issue's protocol, 3 seeds x 1000 iterations on the synthetic scene, is the default (about 14
minutes on this shared 2-core CPU), then the lego comparison at the sheet's 5000 Gaussians x 1000
iterations but 50x50 (about 10 minutes; 100x100 would take about 35 minutes per fit here);
``--seeds 1`` is a quicker single-seed run, ``--lego-only`` reruns just the lego comparison.

Writes bench/results/train_3dgs.json, bench/results/train_3dgs.md and bench/results/train_3dgs.png.
Run:  make bench TOOL=train-3dgs   (or .venv/bin/python bench/train_3dgs.py [--seeds N] [--long 3000]
      [--long-only 3000] [--quick])
"""
from __future__ import annotations

import argparse
import json
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
    from icmlkit.lib.gs.train import FitConfig, InitConfig, fit_scene

    sc = read_scene(spec["scene"], downscale=spec.get("downscale", 1))
    gt = read_ply(Path(spec["scene"]) / "gt.ply") if spec["init"] == "gt-noise" else None
    init = InitConfig(init=spec["init"], n_gaussians=spec["n"])
    cfg = FitConfig(optimizer=spec["optimizer"], iters=spec["iters"], batch=4, sh_degree=spec["sh_degree"],
                    sh_every=spec["sh_every"], eval_every=spec["eval_every"], radius=spec.get("radius", 1e-6),
                    radius_final=spec.get("radius_final", 1e-8), eval_iters=[spec["iters"] // 2])
    t0 = time.perf_counter()
    res = fit_scene(sc, cfg, init, seed=spec["seed"], gt=gt)
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
        sm = r["summary"]
        out["runs"].append({"name": key, "seed": r["spec"]["seed"], "psnr_half": psnr_at(r["rows"], half),
                            "psnr_full": psnr_at(r["rows"], iters), "init_psnr": r["init_psnr"],
                            "ssim_full": sm["ssim_test"], "seconds_per_iter": sm["seconds_per_iter"],
                            "peak_tensor_memory_mb": sm["peak_tensor_memory_mb"],
                            "memory_parts_mb": {k: v for k, v in sm.items()
                                                if k.startswith("peak_saved") or k == "static_memory_mb"},
                            "peak_train_memory_mb": sm["peak_train_memory_mb"],
                            "peak_memory_mb": sm["peak_memory_mb"], "clip_fraction": sm.get("clip_fraction"),
                            "curve": [(x[0], round(x[4], 3)) for x in r["rows"] if x[4] is not None]})

    def clip_mean(v):
        fr = [r["summary"].get("clip_fraction") for r in v]
        if not all(fr):
            return None
        return {k: round(mean([f[k] for f in fr]), 4) for k in fr[0]}

    out["mean"] = {k: {"psnr_half": mean([psnr_at(r["rows"], half) for r in v]),
                       "psnr_full": mean([psnr_at(r["rows"], iters) for r in v]),
                       "ssim_full": mean([r["summary"]["ssim_test"] for r in v]),
                       "seconds_per_iter": mean([r["summary"]["seconds_per_iter"] for r in v]),
                       "peak_tensor_memory_mb": mean([r["summary"]["peak_tensor_memory_mb"] for r in v]),
                       "peak_train_memory_mb": mean([r["summary"]["peak_train_memory_mb"] for r in v]),
                       "clip_fraction": clip_mean(v), "seeds": len(v)} for k, v in by.items()}
    return out


def travel_budget(radius: float, radius_final: float, total: int, horizons, alpha0: float = 0.1,
                  obar: float = 0.1) -> dict:
    """The largest moves the trust region allows in the first h steps of a ``total``-step run with the
    radius schedule of GaussianTrustRegion (step t uses exp_schedule(radius, radius_final, t, total)).

    - opacity: the exact maximum of alpha_{t+1} = min(alpha_t + sqrt(4 alpha_t eps_t), 1 - 1e-5) from
      ``alpha0`` (the clip's upper end at every step), and the sqrt-space bound
      sqrt(alpha0) + sum_t sqrt(eps_t) (since (sqrt(a) + sqrt(e))^2 >= a + 2 sqrt(a e));
    - scale: the largest total change of log s, sum_t -ln(1 - sqrt(4 eps_t / (9 o_bar))) (shrinking;
      growing is slower), with o_bar held at ``obar``;
    - means: the largest per-axis travel in units of the Gaussian's standard deviation along that
      axis, sum_t sqrt(8 (-ln(1 - eps_t / (3 o_bar)))), o_bar held at ``obar``.
    """
    import math

    from icmlkit.lib.gs.optim import exp_schedule

    eps = [exp_schedule(radius, radius_final, t, total) for t in range(total)]
    out = {}
    for h in horizons:
        a, sq, ls, mu = alpha0, 0.0, 0.0, 0.0
        for e in eps[:h]:
            a = min(a + math.sqrt(4 * a * e), 1 - 1e-5)
            sq += math.sqrt(e)
            ls += -math.log1p(-math.sqrt(4 * e / (9 * obar)))
            mu += math.sqrt(8 * -math.log1p(-e / (3 * obar)))
        out[str(h)] = {"max_opacity": round(a, 4), "sqrt_alpha_budget": round(sq, 4),
                       "max_opacity_sqrt_bound": round(min((math.sqrt(alpha0) + sq) ** 2, 1.0), 4),
                       "max_log_scale_change": round(ls, 3), "max_mean_travel_sigmas": round(mu, 3)}
    return {"radius": [radius, radius_final], "total_steps": total, "alpha0": alpha0, "obar_for_scale_and_means": obar,
            "by_horizon": out}


def scene_needs(scene_dir: Path, seed: int = 0) -> dict:
    """What the known scene asks of the optimizer from the gt-noise init: its opacities, the change of
    (mean over axes of) log-scale from the kNN init, and the init's mean error in units of its scale."""
    import torch

    from icmlkit.lib.gs.ply import read_ply
    from icmlkit.lib.gs.scene import read_scene
    from icmlkit.lib.gs.train import initial_gaussians

    gt = read_ply(scene_dir / "gt.ply")
    sc = read_scene(scene_dir)
    init = initial_gaussians(sc, "gt-noise", gt.n, gt.sh_degree, seed, gt=gt)
    op = torch.sigmoid(gt.opacity_logits.double())
    dls = (gt.log_scales.double().mean(1) - init.log_scales.double().mean(1)).abs()
    err = ((init.means.double() - gt.means.double()).abs() / init.log_scales.double().exp()).flatten()
    q = lambda x, p: round(float(torch.quantile(x, p)), 4)  # noqa: E731
    return {"opacity": {"min": q(op, 0.0), "median": q(op, 0.5), "max": q(op, 1.0)},
            "abs_log_scale_change": {"median": q(dls, 0.5), "p90": q(dls, 0.9)},
            "init_mean_error_sigmas": {"median": q(err, 0.5), "p90": q(err, 0.9)},
            "opacity_values": op.tolist()}


def travel_block(scene_dir: Path, iters: int, long_iters: int | None = None) -> dict:
    """Travel budgets for the benchmark's schedules and horizons, with the scene's needs."""
    needs = scene_needs(scene_dir)
    ops = needs.pop("opacity_values")
    h = [iters // 2, iters]
    sched = {"tr (1e-6 -> 1e-8)": travel_budget(1e-6, 1e-8, iters, h),
             "tr-1e-5 (1e-5 -> 1e-7)": travel_budget(1e-5, 1e-7, iters, h)}
    if long_iters:
        sched[f"long tr (1e-6 -> 1e-8 over {long_iters})"] = travel_budget(1e-6, 1e-8, long_iters,
                                                                           [long_iters // 2, long_iters])
    for b in sched.values():
        for v in b["by_horizon"].values():
            v["gt_opacity_fraction_above_reach"] = round(sum(o > v["max_opacity"] for o in ops) / len(ops), 4)
    return {"scene_needs": needs, "schedules": sched}


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


def long_check(scene_dir: Path, iters: int) -> dict:
    """Reported, not a target: one seed, Adam vs TR (paper radius) with schedules stretched over ``iters``."""
    base = dict(scene=str(scene_dir), init="gt-noise", n=SYN["n_gaussians"], sh_degree=1, seed=0, iters=iters,
                sh_every=max(iters // 4, 1), eval_every=max(iters // 20, 1))
    t0 = time.perf_counter()
    block = summarise(run_jobs([dict(base, optimizer="adam", name="adam"), dict(base, optimizer="tr", name="tr")], 2),
                      f"long horizon (reported, not a target): synthetic scene, 1 seed, {iters} iterations, TR radius "
                      f"1e-6 -> 1e-8 and Adam's means-lr decay stretched over {iters}", iters)
    block["seconds"] = round(time.perf_counter() - t0, 1)
    m = block["mean"]
    block["verdict"] = {"tr_half_ge_adam_full": m["tr"]["psnr_half"] >= m["adam"]["psnr_full"],
                        "tr_full_gt_adam_full": m["tr"]["psnr_full"] > m["adam"]["psnr_full"]}
    return block


def render_md(result: dict) -> str:
    r, targets, info, cmd = result["results"], result["targets"], result["machine"], result["command"]

    def row(b, name):
        mm = b["mean"][name]
        return (f"| {name} | {mm['seeds']} | {mm['psnr_half']:.2f} | {mm['psnr_full']:.2f} | {mm['ssim_full']:.3f} | "
                f"{mm['seconds_per_iter']:.3f} | {mm['peak_tensor_memory_mb']:.1f} | {mm['peak_train_memory_mb']:.0f} |")

    md = [f"# train-3dgs benchmark ({result['date']}, {info['cpu']}, {info['cores']} cores, load "
          f"{info['load_average_1min']})", "", f"Command: `{cmd}`; total {r['seconds_total'] / 60:.1f} min.", ""]
    for b in (r["synthetic"], r["lego"], r.get("long")):
        if b is None:
            continue
        md += [f"**{b['label']}**", "",
               f"| optimizer | seeds | test PSNR @ {b['iters'] // 2} | test PSNR @ {b['iters']} | SSIM @ {b['iters']} | "
               "s / iter | peak tensor memory (MB) | peak RSS growth (MB) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        md += [row(b, n) for n in b["mean"]] + [""]
        if "verdict" in b:
            v = b["verdict"]
            md += [f"Long run ({b['seconds'] / 60:.1f} min" + (f", `{b['command']}`" if b.get("command") else "")
                   + f"): TR @ {b['iters'] // 2} >= Adam @ {b['iters']}: "
                   f"{'yes' if v['tr_half_ge_adam_full'] else 'no'}; TR @ {b['iters']} > Adam @ {b['iters']}: "
                   f"{'yes' if v['tr_full_gt_adam_full'] else 'no'} (reported, not a target).", ""]
        elif b.get("command"):
            md += [f"Run separately ({b['seconds'] / 60:.1f} min, `{b['command']}`) and merged into these files.", ""]
    md += ["| target | value | threshold | met |", "|---|---:|---:|---|"]
    md += [f"| {k} | {v['value']} | {v['threshold']} | {'yes' if v['met'] else '**no**'} |" for k, v in targets.items()]
    md += ["", "tr = 3DGS2-TR with the paper's radius 1e-6 -> 1e-8 (the target run); tr-1e-5 = the same with "
           "1e-5 -> 1e-7 (reported, not a target). Fixed N, no densification, same init and view order for all. "
           "Peak tensor memory = parameters + gradients + optimizer state + the peak of the tensors saved for "
           "backward (training graph, and for TR the per-view Hutchinson double-backward graph), counted "
           "deterministically (lib/gs/memory.py; transients never saved for backward are not counted); peak RSS "
           "growth = the process's peak RSS growth during the loop (noisy, shown for reference)."]
    clip_rows = [(b["label"].split(":")[0], n, mm["clip_fraction"]) for b in (r["synthetic"], r["lego"], r.get("long"))
                 if b is not None for n, mm in b["mean"].items() if mm.get("clip_fraction")]
    if clip_rows:
        groups = list(clip_rows[0][2])
        md += ["", "Fraction of elements clipped by the trust region (mean over steps and seeds):", "",
               "| block | run | " + " | ".join(groups) + " |", "|---|---|" + "---:|" * len(groups)]
        md += [f"| {blk} | {n} | " + " | ".join(f"{c[g]:.3f}" for g in groups) + " |" for blk, n, c in clip_rows]
    tb = r.get("travel_budget")
    if tb:
        nd = tb["scene_needs"]
        md += ["", "Travel budget of the trust region (the most it lets a Gaussian move in the first h steps of the "
               "schedule; opacity from the 0.1 init, exact; scale and means with o_bar held at the init's 0.1):", "",
               "| schedule | h | max opacity | GT opacities above it | max d log s | max mean travel (sigma) |",
               "|---|---:|---:|---:|---:|---:|"]
        for name, b in tb["schedules"].items():
            for h, v in b["by_horizon"].items():
                md.append(f"| {name} | {h} | {v['max_opacity']:.3f} | {100 * v['gt_opacity_fraction_above_reach']:.1f} % | "
                          f"{v['max_log_scale_change']:.2f} | {v['max_mean_travel_sigmas']:.2f} |")
        md += ["", f"The known scene asks for: opacities {nd['opacity']['min']:.2f}..{nd['opacity']['max']:.2f} "
               f"(median {nd['opacity']['median']:.2f}) from 0.1; |d log s| (mean over axes) median "
               f"{nd['abs_log_scale_change']['median']:.2f}, 90th percentile {nd['abs_log_scale_change']['p90']:.2f}; "
               f"init mean error median {nd['init_mean_error_sigmas']['median']:.2f} sigma (90th percentile "
               f"{nd['init_mean_error_sigmas']['p90']:.2f})."]
    return "\n".join(md) + "\n"


def lego_check(args) -> dict | None:
    """Reported: the lego subset (read in place) from a uniform random init, Adam vs TR, 1 seed."""
    from icmlkit.lib.core.io import shared_data_dir

    lego_dir = shared_data_dir("nerf_lego_100")
    if lego_dir is None:
        return None
    li, side = args.lego_iters, 100 // args.lego_downscale
    base = dict(scene=str(lego_dir), init="random", n=args.lego_n, sh_degree=1, seed=0, iters=li,
                sh_every=max(li // 4, 1), eval_every=max(li // 10, 1), downscale=args.lego_downscale)
    return summarise(run_jobs([dict(base, optimizer="adam", name="adam"), dict(base, optimizer="tr", name="tr")],
                              min(args.workers, 2)),
                     f"lego subset ({side}x{side}), {args.lego_n} random-init Gaussians, 1 seed", li)


def lego_targets(lego: dict, args) -> dict:
    lm, li, side = lego["mean"], args.lego_iters, 100 // args.lego_downscale
    size = f"{args.lego_n} random-init Gaussians, {side}x{side}, 1 seed"
    if (li, args.lego_n, side) != (1000, 5000, 100):
        size += "; smaller than the sheet's 5000 Gaussians x 1000 iterations at 100x100, to fit the CPU time"
    return {"lego_tr_half_ge_adam_full": target(
                round(lm["tr"]["psnr_half"], 3), round(lm["adam"]["psnr_full"], 3),
                lm["tr"]["psnr_half"] >= lm["adam"]["psnr_full"],
                f"reported: lego, TR at {li // 2} vs Adam at {li} iterations ({size})"),
            "lego_tr_full_gt_adam_full": target(
                round(lm["tr"]["psnr_full"], 3), round(lm["adam"]["psnr_full"], 3),
                lm["tr"]["psnr_full"] > lm["adam"]["psnr_full"], f"reported: lego, both at {li} iterations ({size})")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--lego-iters", type=int, default=1000)
    ap.add_argument("--lego-n", type=int, default=5000)
    ap.add_argument("--lego-downscale", type=int, default=2)
    ap.add_argument("--workers", type=int, default=3, help="concurrent fits for the synthetic scene (the lego "
                    "pair runs two at a time)")
    ap.add_argument("--long", type=int, default=0, metavar="L", help="also the long-horizon check at L iterations "
                    "(reported, not a target)")
    ap.add_argument("--long-only", type=int, default=0, metavar="L", help="run only the long-horizon check and merge "
                    "it into the existing bench/results/train_3dgs.{json,md}")
    ap.add_argument("--lego-only", action="store_true", help="run only the lego comparison (with the --lego-* "
                    "settings) and merge it into the existing bench/results/train_3dgs.{json,md}")
    ap.add_argument("--quick", action="store_true", help="a smoke run (60 iterations, small lego); not written")
    args = ap.parse_args()
    if args.quick:
        args.iters, args.lego_iters, args.lego_n = 60, 20, 300
        args.long = 60 if args.long else 0
    from icmlkit.lib.gs.scene import make_synthetic_scene

    t_start = time.perf_counter()
    info = machine()
    if args.lego_only:  # needs no synthetic scene
        result = json.loads((RESULTS / "train_3dgs.json").read_text())
        t0 = time.perf_counter()
        lego = lego_check(args)
        if lego is None:
            sys.exit("bench/train_3dgs.py --lego-only: ../shared/data/nerf_lego_100 is not there")
        lego["seconds"] = round(time.perf_counter() - t0, 1)
        lego["machine"] = info
        lego["command"] = (f"python bench/train_3dgs.py --lego-only --lego-n {args.lego_n} --lego-iters "
                           f"{args.lego_iters} --lego-downscale {args.lego_downscale}")
        result["results"]["lego"] = lego
        result["results"]["settings"].update(lego_iters=args.lego_iters, lego_n=args.lego_n,
                                             lego_downscale=args.lego_downscale)
        result["targets"].update(lego_targets(lego, args))
        if not args.quick:
            plot(RESULTS / "train_3dgs.png", [b for b in (result["results"]["synthetic"], lego) if b is not None])
        emit(result, args.quick)
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench-3dgs-"))
    make_synthetic_scene(tmp / "synth", seed=0, **SYN)
    if args.long_only:
        result = json.loads((RESULTS / "train_3dgs.json").read_text())
        it = result["results"]["settings"]["iters"]
        result["results"]["long"] = long_check(tmp / "synth", args.long_only)
        result["results"]["travel_budget"] = travel_block(tmp / "synth", it, args.long_only)
        result["results"]["long"]["machine"] = info
        result["results"]["long"]["command"] = f"python bench/train_3dgs.py --long-only {args.long_only}"
        emit(result, args.quick)
        return
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
    lego = lego_check(args)
    long = long_check(tmp / "synth", args.long) if args.long else None
    travel = travel_block(tmp / "synth", it, args.long or None)
    seconds = time.perf_counter() - t_start

    m = syn["mean"]
    tr_half, tr_full, ad_full = m["tr"]["psnr_half"], m["tr"]["psnr_full"], m["adam"]["psnr_full"]
    time_ratio = m["tr"]["seconds_per_iter"] / m["adam"]["seconds_per_iter"]
    mem_a, mem_t = m["adam"]["peak_tensor_memory_mb"], m["tr"]["peak_tensor_memory_mb"]
    mem_ratio = mem_t / mem_a if mem_a else None
    rss_a, rss_t = m["adam"]["peak_train_memory_mb"], m["tr"]["peak_train_memory_mb"]
    rss_ratio = rss_t / rss_a if rss_a else None
    seeds_note = (f"{args.seeds} seed(s) x {it} iterations (the issue asks for 3 seeds x 1000)" if args.seeds < 3 else
                  f"{args.seeds} seeds x {it} iterations")
    targets = {
        "synthetic_tr_half_ge_adam_full": target(round(tr_half, 3), round(ad_full, 3), tr_half >= ad_full,
                                                 f"mean test PSNR of TR (radius 1e-6 -> 1e-8) at {it // 2} iterations vs "
                                                 f"Adam at {it}; {seeds_note}"),
        "synthetic_tr_full_gt_adam_full": target(round(tr_full, 3), round(ad_full, 3), tr_full > ad_full,
                                                 f"mean test PSNR of TR vs Adam, both at {it} iterations; {seeds_note}"),
        "time_ratio_tr_over_adam": target(round(time_ratio, 3), 3.0, time_ratio <= 3.0,
                                          "seconds per iteration TR / Adam, measured in the same run (the sheet "
                                          "expects about 2-3x); the fits ran concurrently, one thread each"),
        "peak_memory_ratio_tr_over_adam": target(
            None if mem_ratio is None else round(mem_ratio, 3), 1.17, mem_ratio is not None and mem_ratio <= 1.17,
            "deterministic peak tensor memory TR / Adam (parameters + gradients + optimizer state + peak of the "
            "tensors saved for backward, training and Hutchinson double-backward graphs; lib/gs/memory.py), the "
            "paper's +17 % GPU memory vs Adam; peak RSS growth ratio (noisy) "
            f"{None if rss_ratio is None else round(rss_ratio, 3)}, reported only"),
    }
    if lego is not None:
        targets.update(lego_targets(lego, args))
    plotted = plot(RESULTS / "train_3dgs.png", [b for b in (syn, lego) if b is not None]) if not args.quick else False
    cmd = "make bench TOOL=train-3dgs" + ("" if args.seeds == 3 and not args.long else
                                          f"  (python bench/train_3dgs.py --seeds {args.seeds}"
                                          + (f" --long {args.long})" if args.long else ")"))
    result = {"tool": "train-3dgs", "date": today(), "commit": commit(), "machine": info, "command": cmd,
              "results": {"synthetic": syn, "lego": lego, "long": long, "travel_budget": travel,
                          "memory_ratio_rss_growth": None if rss_ratio is None else round(rss_ratio, 3),
                          "seconds_total": round(seconds, 1),
                          "seconds_synthetic": round(t_syn, 1), "plot": "train_3dgs.png" if plotted else None,
                          "settings": {"seeds": args.seeds, "iters": it, "lego_iters": args.lego_iters,
                                       "lego_n": args.lego_n, "lego_downscale": args.lego_downscale,
                                       "batch_views": 4, "tr_hessian_every": 10, "tr_betas": [0.9, 0.999], "tr_radius": [1e-6, 1e-8],
                                       "curvature": "hutchinson hvp, 1 probe, block-averaged, one view per curvature pass",
                                       "workers": args.workers, "long": args.long or None}},
              "targets": targets}
    emit(result, args.quick)


def emit(result: dict, quick: bool) -> None:
    """Print the Markdown; write bench/results unless it is a --quick smoke run."""
    text = render_md(result)
    if not quick:
        write_results("train_3dgs", result, text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
