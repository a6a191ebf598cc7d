"""Benchmark of train-3dgs (issues 31, 55): best-tuned TR against best-tuned Adam at fixed N.

Issue 55: both optimizers get the same tuning budget (``tune`` of the harness, 5 configurations each) on a
tuning scene that no other part uses; the test parts then run each optimizer at its best setting. The
kNN-matched synthetic scene (``--scales knn``: the 3DGS kNN init is right on average) is the main
synthetic case. TR runs with the authors' prototype's opacity floor 0.1 and quaternion radius 0.01 (the
defaults of FitConfig since issue 53).

Sizes are shrunk to fit a shared 2-core machine (a CPU budget of about 45 minutes for the whole issue):
the main synthetic scene has 400 known Gaussians at 32x32 (24 train + 8 test views) instead of the sheet's
800 at 64x64 (32 + 8), lego runs at 50x50 with 1000 random-init Gaussians instead of the sheet's 5000 at
100x100; every fit keeps the sheet's 1000 iterations and batches of 4 views.

Parts (fits run two at a time in worker processes, one torch thread each; every fit is a resumable item):

- ``travel``: the travel budgets of the literal and scaled schedules, computed exactly (no fitting);
- ``tune``: the tuning scene (the main recipe with scene seed 1), seed 0, 1000 iterations, scored by its
  test PSNR at the end: TR over the radius (start -> start/100 over the run at starts 3e-5, 1e-4, 3e-4,
  1e-3, 3e-3; the scaled schedule of issue 31 is 8.99e-4 -> 8.99e-6, next to 1e-3; a first grid
  1e-4 .. 1e-2 had its best at its lower edge, so it was shifted down a step), Adam over a multiplier of
  every reference learning rate (x1, x2, x5, x10, x30);
- ``synthetic`` (seeds 0, 1, 2): the main kNN-matched scene, best Adam vs best TR (the ``tune`` part's
  picks), each also with pruning of collapsed Gaussians (opacity below 0.005 every 100 steps, as 3DGS
  prunes between densification steps). Target: mean TR test PSNR at 500 >= best Adam's at 1000;
- ``lego``: shared/data/nerf_lego_100 (read in place) at 50x50, 1000 uniform random-init Gaussians,
  seed 0: best Adam vs best TR; the same target;
- ``knn_full``: the issue-31 kNN-matched scene at the sheet's size (800 Gaussians, 64x64, 32 + 8 views),
  seed 0, TR with the scaled schedule at the current defaults: the fit that diverged at step 582 with the
  former floor 0.01 and quaternion radius 0.05;
- ``speed``: seconds per iteration of best TR and best Adam on the main scene (a 40-iteration fit, one
  thread, ``time_call`` medians of 5) and their ``speed_ratio``;
- legacy, not rerun (payloads from their commits; the former opacity floor 0.01 and quaternion radius
  0.05, the sheet scene with fixed scales): ``ablate`` (each prototype option alone, 200 iterations) and
  ``literal`` (the paper's literal schedule 1e-6 -> 1e-8 against Adam).

Run:  make bench TOOL=train-3dgs   (or .venv/bin/python bench/train_3dgs.py [--part P] [--quick])
"""
from __future__ import annotations

import json
import math
import multiprocessing as mp
import re
import sys
from pathlib import Path

from _common import CACHE, QUICK_RESULTS, RESULTS, Bench, speed_ratio, table, target, time_call, tune

bench = Bench("train-3dgs")
SYN = dict(n_gaussians=800, size=64, n_train=32, n_test=8, sh_degree=1)     # the sheet's scene (legacy parts)
MAIN = dict(n_gaussians=400, size=32, n_train=24, n_test=8, sh_degree=1)    # the main kNN-matched scene (shrunk)
PROTOTYPE = {"gn-train": dict(curvature="gn-train"), "probes20": dict(initial_probes=20),
             "abs-before-ema": dict(abs_before_ema=True), "no-block-average": dict(block_average=False),
             "renorm-quats": dict(renorm_quats_every=10), "color-caps": dict(color_caps=True),
             "opacity-radius-x10": {"opacity_radius": 1e-5}}
WORKERS = 2
TR_STARTS = (3e-5, 1e-4, 3e-4, 1e-3, 3e-3)      # TR's radius grid: start -> start/100 over the run
ADAM_SCALES = (1.0, 2.0, 5.0, 10.0, 30.0)        # Adam's grid: a multiplier of every reference rate
PRUNE = dict(prune_opacity=0.005, prune_every=100)  # 3DGS's min opacity and densification interval


def sizes(quick: bool) -> dict:
    return {"pair": 40, "short": 20, "long": 60, "lego_n": 200, "literal_lego_n": 300, "speed": 10} if quick else \
        {"pair": 1000, "short": 200, "long": 3000, "lego_n": 1000, "literal_lego_n": 5000, "speed": 40}


def _job(spec: dict) -> dict:
    """One fit in a fresh worker process (one thread): returns its rows and summary."""
    import torch

    torch.set_num_threads(1)
    from icmlkit.lib.train_3dgs.ply import read_ply
    from icmlkit.lib.train_3dgs.scene import read_scene
    from icmlkit.lib.train_3dgs.train import FitConfig, InitConfig, fit_scene

    sc = read_scene(spec["scene"], downscale=spec.get("downscale", 1))
    gt = read_ply(Path(spec["scene"]) / "gt.ply") if spec["init"] == "gt-noise" else None
    init = InitConfig(init=spec["init"], n_gaussians=spec["n"], init_opacity=spec.get("init_opacity", 0.1))
    it = spec["iters"]
    cfg = FitConfig(optimizer=spec["optimizer"], iters=it, batch=4, sh_degree=1, sh_every=max(it // 4, 1),
                    eval_every=spec["eval_every"], eval_iters=[it // 2], **spec.get("cfg", {}))
    try:
        res = fit_scene(sc, cfg, init, seed=spec["seed"], gt=gt)
    except FloatingPointError as exc:  # a diverged fit is a result, reported as such
        return {"spec": spec, "error": str(exc)}
    return {"spec": spec, "rows": res.rows, "summary": res.summary}


def psnr_at(rows, step):
    for r in rows:
        if r[0] == step:
            return r[4]
    return None


def run_record(r: dict) -> dict:
    if "error" in r:
        return {"name": r["spec"]["name"], "seed": r["spec"]["seed"], "iters": r["spec"]["iters"], "error": r["error"],
                "psnr_init": None, "psnr_half": None, "psnr_full": None, "ssim_full": None, "seconds_per_iter": None,
                "peak_tensor_memory_mb": None, "radius_schedule": None, "clip_fraction": None, "curve": []}
    it, sm = r["spec"]["iters"], r["summary"]
    return {"name": r["spec"]["name"], "seed": r["spec"]["seed"], "iters": it,
            "psnr_init": psnr_at(r["rows"], 0), "psnr_half": psnr_at(r["rows"], it // 2),
            "psnr_full": psnr_at(r["rows"], it), "ssim_full": sm["ssim_test"],
            "seconds_per_iter": sm["seconds_per_iter"], "peak_tensor_memory_mb": sm["peak_tensor_memory_mb"],
            "radius_schedule": sm.get("radius_schedule"), "clip_fraction": sm.get("clip_fraction"),
            "n_gaussians_end": sm["n_gaussians"], "pruned": sm.get("pruned"),
            "curve": [(x[0], round(x[4], 3)) for x in r["rows"] if x[4] is not None]}


def run_specs(ctx, specs: list[dict]) -> list[dict]:
    """Every fit of ``specs`` as a resumable item of the part: the ones not cached yet run two at a
    time in worker processes (one torch thread each), then each is stored."""
    def key(s):
        return re.sub(r"[^A-Za-z0-9=.+-]+", "_", f"{s['name']}-seed{s['seed']}-{s['iters']}")

    done = {key(s) for s in specs if ctx.is_cached(key(s))}
    todo = [s for s in specs if key(s) not in done]
    if todo:  # each fit is stored as it finishes: a killed part resumes with the fits not done
        ctx_mp = mp.get_context("spawn")
        with ctx_mp.Pool(min(WORKERS, len(todo)), maxtasksperchild=1) as pool:
            for x in pool.imap_unordered(_job, todo, chunksize=1):
                rec = run_record(x)
                ctx.cached(key(x["spec"]), lambda rec=rec: rec)  # computed: stored (--fresh too)
    out = []
    for s in specs:
        rec = json.loads((ctx.folder / f"{key(s)}.json").read_text())
        ctx.log(f"{rec['name']} seed {rec['seed']}: " + (f"diverged ({rec['error']})" if rec.get("error") else
                                                          f"PSNR {rec['psnr_half']:.2f} at half, {rec['psnr_full']:.2f} at end"))
        out.append(rec)
    return out


def travel_budget(radius: float, radius_final: float, total: int, horizons, alpha0: float = 0.1,
                  obar: float = 0.1) -> dict:
    """The largest moves the trust region allows in the first h steps of a ``total``-step run with the
    radius schedule of GaussianTrustRegion (step t uses exp_schedule(radius, radius_final, t, total)).

    - opacity: the exact maximum of alpha_{t+1} = min(alpha_t + sqrt(4 alpha_t eps_t), 1 - 1e-5) from
      ``alpha0`` (the clip's upper end at every step), and the budget sum_t sqrt(eps_t);
    - scale: the largest total change of log s, sum_t -ln(1 - sqrt(4 eps_t / (9 o_bar))) (shrinking),
      with o_bar held at ``obar``;
    - means: the largest per-axis travel in units of the Gaussian's standard deviation along that
      axis, sum_t sqrt(8 (-ln(1 - eps_t / (3 o_bar)))), o_bar held at ``obar``.
    """
    from icmlkit.lib.train_3dgs.optim import exp_schedule

    eps = [exp_schedule(radius, radius_final, t, total) for t in range(total)]
    out = {}
    for h in horizons:
        a, sq, ls, mu = alpha0, 0.0, 0.0, 0.0
        for e in eps[:h]:
            a = min(a + math.sqrt(4 * a * e), 1 - 1e-5)
            sq += math.sqrt(e)
            ls += -math.log1p(-min(math.sqrt(4 * e / (9 * obar)), 1 - 1e-12))
            mu += math.sqrt(8 * -math.log1p(-min(e / (3 * obar), 1 - 1e-12)))
        out[str(h)] = {"max_opacity": round(a, 4), "sqrt_radius_sum": round(sq, 4),
                       "max_log_scale_change": round(ls, 3), "max_mean_travel_sigmas": round(mu, 3)}
    return {"radius": [radius, radius_final], "total_steps": total, "by_horizon": out}


def synthetic_scene(quick: bool, scales: str = "fixed", scene_seed: int = 0, spec: dict | None = None) -> Path:
    """The cached synthetic scene: ``spec`` (default the sheet's ``SYN``) with these scales and seed."""
    from icmlkit.lib.train_3dgs.scene import make_synthetic_scene

    spec = SYN if spec is None else spec
    size = "" if spec == SYN else f"-{spec['n_gaussians']}x{spec['size']}"
    folder = CACHE / "train_3dgs" / "scenes" / (f"synth-{scales}{size}" + ("" if scene_seed == 0 else f"-seed{scene_seed}"))
    if not (folder / "gt.ply").is_file():
        make_synthetic_scene(folder, seed=scene_seed, scales=scales, **spec)
    return folder


def lego_dir() -> str:
    from icmlkit.lib.core.io import shared_data_dir

    lego = shared_data_dir("nerf_lego_100")
    if lego is None:
        raise SystemExit("bench/train_3dgs.py: shared/data/nerf_lego_100 is not there")
    return str(lego)


def tr_cfg(start: float) -> dict:
    """TR's radius setting of the grid: start -> start/100 over the run (the literal schedule's shape)."""
    return {"radius": start, "radius_final": start / 100}


def adam_name(m: float) -> str:
    return f"adam x{m:g}"


def tr_name(start: float) -> str:
    return f"tr {start:g}"


def tuned(ctx) -> dict:
    """The ``tune`` part's picks (stored results of the same --quick flag): {"adam": multiplier, "tr": start}."""
    stored = bench.load(ctx.quick)["results"].get("tune")
    if not stored:
        raise SystemExit("bench/train_3dgs.py: run --part tune first (the test parts use its picks)")
    best = {m: v["best"] for m, v in stored["tuning"]["methods"].items()}
    if None in best.values():
        raise SystemExit("bench/train_3dgs.py: a method of the tune part has no finite score")
    return {"adam": best["adam"]["adam_lr_scale"], "tr": best["tr"]["radius"]}


def _best_pair(base: dict, picks: dict, prune: bool = False) -> list:
    """Best Adam and best TR on ``base`` (with pruning: the names say so)."""
    extra, tag = (PRUNE, " +prune") if prune else ({}, "")
    return [dict(base, optimizer="adam", name=adam_name(picks["adam"]) + tag,
                 cfg={"adam_lr_scale": picks["adam"], **extra}),
            dict(base, optimizer="tr", name=tr_name(picks["tr"]) + tag, cfg={**tr_cfg(picks["tr"]), **extra})]


# --------------------------------------------------------------------------- parts


@bench.part("travel", doc="travel budgets of the literal and scaled schedules, exact (no fitting)", hours=0.001)
def travel(ctx) -> dict:
    from icmlkit.lib.train_3dgs.optim import scaled_radii

    iters = 1000
    h = [iters // 2, iters]
    r0, r1 = scaled_radii(1e-6, 1e-8, iters, 30000)
    return {"literal 1e-6 -> 1e-8 over 30000 (the paper)": travel_budget(1e-6, 1e-8, 30000, [30000]),
            f"literal 1e-6 -> 1e-8 over {iters}": travel_budget(1e-6, 1e-8, iters, h),
            f"scaled {r0:.3g} -> {r1:.3g} over {iters}": travel_budget(r0, r1, iters, h),
            **{f"grid {r:g} -> {r / 100:g} over {iters}": travel_budget(r, r / 100, iters, h) for r in TR_STARTS}}


def _main_base(ctx, seed: int, scene_seed: int = 0) -> dict:
    it = sizes(ctx.quick)["pair"]
    return dict(scene=str(synthetic_scene(ctx.quick, "knn", scene_seed, MAIN)), init="gt-noise", n=MAIN["n_gaussians"],
                seed=seed, iters=it, eval_every=max(it // 20, 1))


def _tune_spec(base: dict, method: str, cfg: dict) -> dict:
    if method == "adam":
        return dict(base, optimizer="adam", name=adam_name(cfg["adam_lr_scale"]), cfg=cfg)
    return dict(base, optimizer="tr", name=tr_name(cfg["radius"]), cfg=cfg)


@bench.part("tune", doc="TR's radius and Adam's learning-rate multiplier (x1 .. x30), 5 configurations each, on a "
            "separate tuning scene, 1000 iterations", hours=0.1)
def tune_part(ctx) -> dict:
    base = _main_base(ctx, seed=0, scene_seed=1)
    grids = {"tr": [tr_cfg(r) for r in TR_STARTS], "adam": [{"adam_lr_scale": m} for m in ADAM_SCALES]}
    budget = 5
    # tune() takes every configuration (each grid has `budget` entries); the fits run two at a time first
    chosen = tune(grids, lambda m, c: 0.0, budget=budget)
    specs = [_tune_spec(base, m, c) for m, v in chosen["methods"].items() for c in v["grid"]]
    recs = {r["name"]: r for r in run_specs(ctx, specs)}

    def score(method, cfg):
        r = recs[_tune_spec(base, method, cfg)["name"]]
        return float("nan") if r.get("error") else r["psnr_full"]

    rec = tune(grids, score, budget=budget)
    for v in rec["methods"].values():  # a diverged fit scores nan: null in JSON
        v["scores"] = [x if math.isfinite(x) else None for x in v["scores"]]
    ctx.record_tuning("psnr_test_tuning_scene", rec)
    return {"label": f"tuning: the main kNN-matched recipe ({MAIN['n_gaussians']} Gaussians, {MAIN['size']}x"
                     f"{MAIN['size']}) with scene seed 1 (no other part uses it), seed 0, {base['iters']} iterations, "
                     f"test PSNR at the end; budget {budget} configurations per optimizer",
            "runs": list(recs.values()), "tuning": rec}


@bench.part("synthetic", doc="the main kNN-matched scene (400 Gaussians, 32x32), best Adam vs best TR, each with and "
            "without pruning, 1000 iterations", hours=0.2, seeds=(0, 1, 2))
def synthetic(ctx) -> dict:
    picks = tuned(ctx)
    specs = [s for seed in ctx.seeds for prune in (False, True) for s in _best_pair(_main_base(ctx, seed), picks, prune)]
    return {"label": f"main synthetic scene (kNN-matched scales): {MAIN['n_gaussians']} known Gaussians, "
                     f"{MAIN['size']}x{MAIN['size']}, {MAIN['n_train']}+{MAIN['n_test']} views, seeds "
                     f"{list(ctx.seeds)}, {sizes(ctx.quick)['pair']} iterations; the tune part's picks",
            "picks": picks, "runs": run_specs(ctx, specs)}


@bench.part("lego", doc="lego 50x50, 1000 random-init Gaussians, best Adam vs best TR, 1000 iterations",
            hours=0.1)
def lego(ctx) -> dict:
    picks = tuned(ctx)
    z = sizes(ctx.quick)
    it = z["pair"]
    base = dict(scene=lego_dir(), init="random", n=z["lego_n"], seed=0, iters=it, eval_every=max(it // 20, 1),
                downscale=2)
    specs = _best_pair(base, picks)
    return {"label": f"lego subset (50x50, 40 train + 10 test views), {z['lego_n']} random-init Gaussians, seed 0, "
                     f"{it} iterations; the tune part's picks",
            "picks": picks, "runs": run_specs(ctx, specs)}


@bench.part("knn_full", doc="the issue-31 kNN-matched scene at the sheet's size, TR scaled at the current defaults "
            "(the step-582 divergence check), seed 0", hours=0.08)
def knn_full(ctx) -> dict:
    it = sizes(ctx.quick)["pair"]
    spec = dict(scene=str(synthetic_scene(ctx.quick, "knn")), init="gt-noise", n=SYN["n_gaussians"], seed=0, iters=it,
                eval_every=max(it // 10, 1), optimizer="tr", name="tr-scaled",
                cfg=dict(schedule="scaled", schedule_horizon=1000 if ctx.quick else 30000))
    return {"label": f"the issue-31 kNN-matched scene (800 known Gaussians, 64x64, 32+8 views), seed 0, {it} "
                     "iterations, TR scaled schedule, opacity floor 0.1 and quaternion radius 0.01 (the former run "
                     "with 0.01 and 0.05 diverged at step 582)", "runs": run_specs(ctx, [spec])}


def _short_base(ctx, scene_seed: int = 0) -> dict:
    it = sizes(ctx.quick)["short"]
    return dict(scene=str(synthetic_scene(ctx.quick, scene_seed=scene_seed)), init="gt-noise", n=SYN["n_gaussians"],
                seed=0, iters=it, eval_every=max(it // 4, 1))


@bench.part("ablate", doc="legacy: each option of the authors' prototype alone on scaled TR, 200 iterations, seed 0",
            hours=0.07)
def ablate(ctx) -> dict:
    base = _short_base(ctx)
    it = base["iters"]
    scaled = dict(schedule="scaled", schedule_horizon=30 * it)  # the 1000-step runs' radius (c ~ 30)
    allopts = {k: v for d in PROTOTYPE.values() for k, v in d.items()}
    specs = [dict(base, optimizer="tr", name="tr-scaled", cfg=scaled)]
    specs += [dict(base, optimizer="tr", name=f"+{k}", cfg={**scaled, **v}) for k, v in PROTOTYPE.items()]
    specs += [dict(base, optimizer="tr", name="+init-opacity-0.5", cfg=scaled, init_opacity=0.5),
              dict(base, optimizer="tr", name="+all-prototype", cfg={**scaled, **allopts}, init_opacity=0.5),
              dict(base, optimizer="adam", name="adam"),
              dict(base, optimizer="adam", name="adam init-opacity-0.5", init_opacity=0.5)]
    return {"label": f"ablation: sheet scene, seed 0, {it} iterations, TR scaled over {it} for a {30 * it}-step horizon",
            "runs": run_specs(ctx, specs)}


@bench.part("speed", doc="seconds per iteration, best TR vs best Adam, main scene, one thread, time_call medians",
            hours=0.02)
def speed(ctx) -> dict:
    import torch

    from icmlkit.lib.train_3dgs.ply import read_ply
    from icmlkit.lib.train_3dgs.scene import read_scene
    from icmlkit.lib.train_3dgs.train import FitConfig, InitConfig, fit_scene

    torch.set_num_threads(1)
    picks = tuned(ctx)
    folder = synthetic_scene(ctx.quick, "knn", 0, MAIN)
    sc, gt = read_scene(str(folder)), read_ply(folder / "gt.ply")
    init = InitConfig(init="gt-noise", n_gaussians=MAIN["n_gaussians"])
    it = sizes(ctx.quick)["speed"]
    rec = {}
    for opt, extra in (("adam", {"adam_lr_scale": picks["adam"]}), ("tr", tr_cfg(picks["tr"]))):
        cfg = FitConfig(optimizer=opt, iters=it, batch=4, sh_degree=1, sh_every=max(it // 4, 1), eval_every=it, **extra)
        t = time_call(lambda cfg=cfg: fit_scene(sc, cfg, init, seed=0, gt=gt), repeats=2 if ctx.quick else 5)
        rec[opt] = {k: (v / it if k.endswith("_s") else v) for k, v in t.items()}  # per iteration
    return {"iters": it, "timings": rec, "ratio": speed_ratio(rec["tr"], rec["adam"]), "picks": picks,
            "note": f"a {it}-iteration fit of the main scene at the tuned settings (its two test evaluations "
                    "included), one thread, per iteration"}



@bench.part("literal", doc="legacy: the paper's literal schedule 1e-6 -> 1e-8 vs Adam: sheet scene 3 seeds, lego 5000 "
            "Gaussians, a 3000-iteration check", hours=0.7, seeds=(0, 1, 2))
def literal(ctx) -> dict:
    z = sizes(ctx.quick)
    it, li = z["pair"], z["long"]
    syn = str(synthetic_scene(ctx.quick))
    pair = lambda base: [dict(base, optimizer="adam", name="adam"), dict(base, optimizer="tr", name="tr")]  # noqa: E731
    s_specs = [s for seed in ctx.seeds for s in pair(dict(scene=syn, init="gt-noise", n=SYN["n_gaussians"], seed=seed,
                                                          iters=it, eval_every=max(it // 20, 1)))]
    l_specs = pair(dict(scene=lego_dir(), init="random", n=z["literal_lego_n"], seed=0, iters=it,
                        eval_every=max(it // 10, 1), downscale=2))
    g_specs = pair(dict(scene=syn, init="gt-noise", n=SYN["n_gaussians"], seed=0, iters=li, eval_every=max(li // 20, 1)))
    for s in l_specs:
        s["name"] = "lego " + s["name"]
    for s in g_specs:
        s["name"] = "long " + s["name"]
    runs = run_specs(ctx, s_specs + l_specs + g_specs)
    strip = lambda rs, p: [dict(r, name=r["name"][len(p):]) for r in rs]  # noqa: E731
    return {"synthetic": {"label": f"synthetic: 800 known Gaussians, 64x64, 32+8 views, {len(ctx.seeds)} seed(s)",
                          "iters": it, "runs": runs[:len(s_specs)]},
            "lego": {"label": f"lego subset (50x50), {z['literal_lego_n']} random-init Gaussians, 1 seed", "iters": it,
                     "runs": strip(runs[len(s_specs):len(s_specs) + 2], "lego ")},
            "long": {"label": f"long horizon (reported, not a target): synthetic scene, 1 seed, {li} iterations, TR radius "
                              f"1e-6 -> 1e-8 and Adam's means-lr decay stretched over {li}", "iters": li,
                     "runs": strip(runs[len(s_specs) + 2:], "long ")}}


# --------------------------------------------------------------------------- report


def _r(x):
    return None if x is None else round(x, 3)


def runs_md(block: dict) -> str:
    rows = []
    for x in block["runs"]:
        init = x.get("psnr_init", x.get("init_psnr"))
        if x.get("error"):
            rows.append({"run": x["name"] + (f" (seed {x['seed']})" if "seed" in x else ""),
                         "PSNR init": f"diverged: {x['error']}"})
            continue
        rs = x.get("radius_schedule")
        rows.append({"run": x["name"] + (f" (seed {x['seed']})" if "seed" in x else ""), "PSNR init": f"{init:.2f}",
                     "PSNR @ half": f"{x['psnr_half']:.2f}", "PSNR @ end": f"{x['psnr_full']:.2f}",
                     "SSIM @ end": f"{x['ssim_full']:.3f}", "s / iter": f"{x['seconds_per_iter']:.3f}",
                     "radius (start, end)": f"{rs[0]:.3g}, {rs[1]:.3g}" if rs else "",
                     "N end": x.get("n_gaussians_end")})
    return table(rows, ["run", "PSNR init", "PSNR @ half", "PSNR @ end", "SSIM @ end", "s / iter", "radius (start, end)",
                        "N end"])


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _by_name(runs: list, name: str) -> list:
    return [r for r in runs if r["name"] == name]


def plot(path: Path, parts: dict) -> bool:
    """Test PSNR against iterations, best Adam vs best TR: one panel per scene and seed (a dashed line at
    best Adam's PSNR at the end, a dotted one at half the run: the target reads TR there)."""
    from icmlkit.lib.core.plot import pyplot, save_png

    plt = pyplot(required=False)
    panels = [(f"{p} seed {s}", [r for r in parts[p]["runs"] if r["seed"] == s])
              for p in ("lego", "synthetic", "knn_full") if p in parts and (p == "knn_full" or "picks" in parts[p])
              for s in sorted({r["seed"] for r in parts[p]["runs"]})]
    if plt is None or not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(4.3 * len(panels), 3.6), squeeze=False)
    for ax, (title, runs) in zip(axes[0], panels):
        for run in runs:
            if not run["curve"]:  # a diverged fit has no curve (its table row says so)
                continue
            xs, ys = zip(*run["curve"])
            ax.plot(xs, ys, marker="o", ms=1.5, lw=1.2, ls="--" if "prune" in run["name"] else "-",
                    color="#e45756" if run["name"].startswith("tr") else
                    ("#9ecae9" if run["name"] == "adam x1" and len(runs) > 2 else "#4c78a8"), label=run["name"])
            if run["name"].startswith("adam") and "prune" not in run["name"] and run["name"] != "adam x1" or (
                    run["name"] == "adam x1" and not any(r["name"].startswith("adam x") and r["name"] != "adam x1"
                                                         for r in runs)):
                ax.axhline(run["psnr_full"], color="#4c78a8", lw=0.6, ls=":")
        it = max(r["iters"] for r in runs)
        ax.axvline(it // 2, color="grey", lw=0.6, ls=":")
        lost = [run["name"] for run in runs if not run["curve"]]
        ax.set_title(title + (f" ({', '.join(lost)} diverged)" if lost else ""), fontsize=9)
        ax.set_xlabel("iteration")
        ax.set_ylabel("test PSNR (dB)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, path)
    return True


def _pair_target(runs: list, picks: dict, seeds_needed: int, what: str) -> tuple[dict, dict]:
    """(TR at half >= Adam at the end, TR at the end > Adam at the end) over the best pair's runs (means over seeds)."""
    ad, tr = _by_name(runs, adam_name(picks["adam"])), _by_name(runs, tr_name(picks["tr"]))
    tr_half, tr_full = _mean([r["psnr_half"] for r in tr]), _mean([r["psnr_full"] for r in tr])
    ad_full = _mean([r["psnr_full"] for r in ad])
    ok = len(ad) == len(tr) == seeds_needed and None not in (tr_half, ad_full)
    diverged = [r["name"] + f" seed {r['seed']}" for r in ad + tr if r.get("error")]
    note = (f"best TR ({tr_name(picks['tr'])} -> {picks['tr'] / 100:g}) at half vs best Adam "
            f"({adam_name(picks['adam'])}) at the end of {tr[0]['iters'] if tr else '?'} iterations; {what}" +
            (f"; diverged: {', '.join(diverged)}" if diverged else ""))
    half = target(_r(tr_half), _r(ad_full), ok and not diverged and tr_half >= ad_full, note)
    full = target(_r(tr_full), _r(ad_full), ok and not diverged and tr_full is not None and tr_full > ad_full,
                  note.replace("at half vs", "at the end vs"))
    return half, full


@bench.report
def report(R: dict) -> tuple[dict, str]:
    out, md = {}, []
    if "picks" in R.get("synthetic", {}):  # (a payload of an earlier version has no picks: not reported)
        S = R["synthetic"]
        picks, runs = S["picks"], S["runs"]
        ns = len({r["seed"] for r in runs})
        out["tr500_ge_tuned_adam1000_knn_scene"], out["tr1000_gt_tuned_adam1000_knn_scene"] = _pair_target(
            runs, picks, 3, f"main kNN-matched scene, no pruning (the default), mean test PSNR over {ns} seeds "
                            "(3 required)")
        ad, tr = _by_name(runs, adam_name(picks["adam"])), _by_name(runs, tr_name(picks["tr"]))
        mem_a, mem_t = _mean([r["peak_tensor_memory_mb"] for r in ad]), _mean([r["peak_tensor_memory_mb"] for r in tr])
        if None not in (mem_a, mem_t):
            mem = mem_t / mem_a
            out["peak_memory_ratio_tr_over_adam"] = target(
                round(mem, 3), 1.17, mem <= 1.17, "deterministic peak tensor memory TR / Adam at the tuned settings, main "
                                                  "scene (lib/train_3dgs/memory.py); the paper's +17 %")
        rows = []
        for name in (adam_name(picks["adam"]), tr_name(picks["tr"])):
            for tag in ("", " +prune"):
                rs = _by_name(runs, name + tag)
                f = lambda x, d=2: None if x is None else f"{x:.{d}f}"  # noqa: E731
                rows.append({"run": name + tag, "seeds": len(rs), "diverged": sum(bool(r.get("error")) for r in rs),
                             "mean PSNR @ 100": f(_mean([dict(r["curve"]).get(100) for r in rs])),
                             "mean PSNR @ half": f(_mean([r["psnr_half"] for r in rs])),
                             "mean PSNR @ end": f(_mean([r["psnr_full"] for r in rs])),
                             "mean N end": f(_mean([r.get("n_gaussians_end") for r in rs]), 0)})
        md += [f"**synthetic: {S['label']}** (means over seeds)", "", table(rows), "", runs_md(S), ""]
    if "picks" in R.get("lego", {}):
        L = R["lego"]
        out["tr500_ge_tuned_adam1000_lego"], _ = _pair_target(L["runs"], L["picks"], 1, L["label"])
        md += [f"**lego: {L['label']}**", "", runs_md(L), ""]
    if "speed" in R:
        sp = R["speed"]
        ratio = sp["ratio"]["ratio"]
        out["time_ratio_tr_over_adam"] = target(round(ratio, 3), 3.0, ratio <= 3.0,
                                                f"seconds per iteration TR / Adam, medians of {sp['timings']['tr']['repeats']} "
                                                f"timings of {sp['note']} (range {sp['ratio']['low']:.2f}-"
                                                f"{sp['ratio']['high']:.2f}; the sheet expects 2-3x)")
    if "literal" in R:
        Lt = R["literal"]
        for blk, key, what in (("synthetic", "literal_synthetic_tr_half_ge_adam_full",
                                f"legacy: the sheet scene, {len({r['seed'] for r in Lt['synthetic']['runs']})} seeds x "
                                f"{Lt['synthetic']['iters']} iterations, opacity floor 0.01"),
                               ("lego", "literal_lego_tr_half_ge_adam_full", "legacy, reported: " + Lt["lego"]["label"])):
            runs = Lt[blk]["runs"]
            th = _mean([r["psnr_half"] for r in runs if r["name"] == "tr"])
            af = _mean([r["psnr_full"] for r in runs if r["name"] == "adam"])
            out[key] = target(_r(th), _r(af), None not in (th, af) and th >= af,
                              f"the paper's literal schedule 1e-6 -> 1e-8: mean test PSNR of TR at 500 iterations vs "
                              f"Adam (reference rates) at 1000; {what}")
    if "tune" in R:
        t = R["tune"]["tuning"]
        md = [f"**tune: {R['tune']['label']}** (the same budget for both optimizers; test PSNR of the tuning scene at "
              "the end, best per optimizer):", "",
              table([{"optimizer": m, "configurations": len(v["grid"]),
                      "grid": ", ".join(f"x{c['adam_lr_scale']:g}" if m == "adam" else
                                        f"{c['radius']:g} -> {c['radius_final']:g}" for c in v["grid"]),
                      "scores": ", ".join("diverged" if x is None else f"{x:.2f}" for x in v["scores"]),
                      "best": (f"x{v['best']['adam_lr_scale']:g}" if m == "adam" else f"{v['best']['radius']:g}")
                      if v["best"] else "—", "best PSNR": v["best_score"]}
                     for m, v in t["methods"].items()]), "", runs_md(R["tune"]), ""] + md
    if "knn_full" in R:
        md += [f"**knn_full: {R['knn_full']['label']}**", "", runs_md(R["knn_full"]), ""]
    if "speed" in R:
        sp = R["speed"]
        md += [f"**speed** ({sp['note']}; median of repeats after a warm-up):", "",
               table([{"optimizer": k, "s / iter (median)": v["median_s"], "min": v["min_s"], "max": v["max_s"],
                       "repeats": v["repeats"]} for k, v in sp["timings"].items()], digits=4), ""]
    if "ablate" in R:
        md += [f"**ablate (legacy: opacity floor 0.01, quaternion radius 0.05): {R['ablate']['label']}**", "",
               runs_md(R["ablate"]), ""]
    if "literal" in R:
        for blk in ("synthetic", "lego", "long"):
            if blk in R["literal"]:
                md += [f"**literal ({blk}; legacy: opacity floor 0.01, quaternion radius 0.05): "
                       f"{R['literal'][blk]['label']}, {R['literal'][blk]['iters']} iterations**", "",
                       runs_md(R["literal"][blk]), ""]
    if "travel" in R:
        md += ["Travel budget (exact, no fitting; opacity from 0.1, scale and means at o_bar = 0.1):", "",
               table([{"schedule": name, "h": h, "sum sqrt(radius)": f"{v['sqrt_radius_sum']:.3f}",
                       "max opacity": f"{v['max_opacity']:.3f}", "max d log s": f"{v['max_log_scale_change']:.2f}",
                       "max mean travel (sigma)": f"{v['max_mean_travel_sigmas']:.2f}"}
                      for name, b in R["travel"].items() for h, v in b["by_horizon"].items()]), ""]
    # the PSNR curves (the harness has no hook for figures: written beside the results the report goes to)
    if plot((QUICK_RESULTS if "--quick" in sys.argv else RESULTS) / "train_3dgs.png", R):
        md += ["Test PSNR curves (best Adam vs best TR, pruned runs dashed): `bench/results/train_3dgs.png`.", ""]
    return out, re.sub(r"\n{3,}", "\n\n", "\n".join(md))


if __name__ == "__main__":
    bench.main()
