"""Benchmark of train-3dgs (issue 31): the horizon-aware schedule, the prototype's options, Adam at fixed N.

The paper's radius schedule 1e-6 -> 1e-8 was set for 30k iterations. With nearly every element on
its trust-region bound, a step moves by ~sqrt(radius), so a run's travel budget is the sum of
sqrt(radius): 0.39 over 1000 iterations against 11.7 over 30k. ``--schedule scaled`` multiplies
both ends by c^2, c = S(30000) / S(iters) (lib/train_3dgs/optim.py::scaled_radii; derived, not tuned).

Parts (fits run two at a time in worker processes, one torch thread each; every fit is a resumable item):

- ``travel``: the travel budgets of the schedules, computed exactly (no fitting);
- ``synthetic`` (seeds 0, 1, 2): the sheet's synthetic scene (800 known Gaussians, 64x64, 32 + 8
  views, SH degree 1, init = known means + N(0, 0.05 extent), kNN scales, opacity 0.1): Adam (3DGS
  learning rates) and TR with the scaled schedule, 1000 iterations, batches of 4 views. Target:
  mean TR test PSNR at 500 >= Adam's at 1000 over the 3 seeds;
- ``lego``: shared/data/nerf_lego_100 (read in place) at 50x50 (downscale 2), 2000 uniform
  random-init Gaussians (the sheet's 5000 at 100x100 did not fit a locked job here), 1 seed, the
  same pair and target;
- ``knn``: a synthetic scene whose known scales follow the kNN init (``--scales knn``), 1 seed, the
  same pair (reported);
- ``ablate``: 200 iterations, seed 0, sheet's scene: TR alone and with each option of the authors'
  prototype switched on singly, all of them together, and Adam at both initial opacities. TR's
  schedule is scaled with a 6000-step horizon (30 x the run, as 30k is for 1000 steps);
- ``sweep``: the literal schedule (start -> start/100 over 200 iterations) at starts 1e-6 (the
  paper's setting), 1e-5, 1e-4, 1e-3;
- ``tune``: both optimizers tuned with the same budget (``tune``, 5 configurations each) on a
  separate tuning scene (the sheet's recipe, scene seed 1), 200 iterations, scored by its test PSNR:
  TR over the radius (the four literal starts of ``sweep`` and the scaled schedule), Adam over a
  multiplier of every reference learning rate (0.25 .. 4);
- ``speed``: seconds per iteration of TR and Adam on the sheet scene (a 40-iteration fit, one thread,
  each a ``time_call``) and their ``speed_ratio``;
- ``literal``: the paper's literal schedule 1e-6 -> 1e-8 against Adam: the sheet scene, 3 seeds x 1000
  iterations; lego 50x50 with 5000 random-init Gaussians; and a 3000-iteration check (reported).

Run:  make bench TOOL=train-3dgs   (or .venv/bin/python bench/train_3dgs.py [--part P] [--quick])
"""
from __future__ import annotations

import math
import multiprocessing as mp
import re
import sys
from pathlib import Path

from _common import CACHE, QUICK_RESULTS, RESULTS, Bench, speed_ratio, table, target, time_call, tune

bench = Bench("train-3dgs")
SYN = dict(n_gaussians=800, size=64, n_train=32, n_test=8, sh_degree=1)
PROTOTYPE = {"gn-train": dict(curvature="gn-train"), "probes20": dict(initial_probes=20),
             "abs-before-ema": dict(abs_before_ema=True), "no-block-average": dict(block_average=False),
             "renorm-quats": dict(renorm_quats_every=10), "color-caps": dict(color_caps=True),
             "opacity-radius-x10": {"opacity_radius": 1e-5}}
WORKERS = 2
RADII = (1e-6, 1e-5, 1e-4, 1e-3)
ADAM_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)


def sizes(quick: bool) -> dict:
    return {"pair": 40, "short": 20, "long": 60, "lego_n": 300, "literal_lego_n": 300, "speed": 10} if quick else \
        {"pair": 1000, "short": 200, "long": 3000, "lego_n": 2000, "literal_lego_n": 5000, "speed": 40}


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


def run_jobs(specs: list[dict], workers: int) -> list[dict]:
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers, maxtasksperchild=1) as pool:
        return pool.map(_job, specs, chunksize=1)


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
            "curve": [(x[0], round(x[4], 3)) for x in r["rows"] if x[4] is not None]}


def run_specs(ctx, specs: list[dict]) -> list[dict]:
    """Every fit of ``specs`` as a resumable item of the part: the ones not cached yet run two at a
    time in worker processes (one torch thread each), then each is stored."""
    def key(s):
        return re.sub(r"[^A-Za-z0-9=.+-]+", "_", f"{s['name']}-seed{s['seed']}-{s['iters']}")

    done = {key(s) for s in specs if (ctx.folder / f"{key(s)}.json").is_file() and not ctx.fresh}
    todo = [s for s in specs if key(s) not in done]
    fresh = dict(zip(map(key, todo), (run_record(x) for x in run_jobs(todo, WORKERS)))) if todo else {}
    out = []
    for s in specs:
        rec = ctx.cached(key(s), lambda k=key(s): fresh[k])
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


def synthetic_scene(quick: bool, scales: str = "fixed", scene_seed: int = 0) -> Path:
    from icmlkit.lib.train_3dgs.scene import make_synthetic_scene

    folder = CACHE / "train_3dgs" / "scenes" / (f"synth-{scales}" + ("" if scene_seed == 0 else f"-seed{scene_seed}"))
    if not (folder / "gt.ply").is_file():
        make_synthetic_scene(folder, seed=scene_seed, scales=scales, **SYN)
    return folder


def lego_dir() -> str:
    from icmlkit.lib.core.io import shared_data_dir

    lego = shared_data_dir("nerf_lego_100")
    if lego is None:
        raise SystemExit("bench/train_3dgs.py: shared/data/nerf_lego_100 is not there")
    return str(lego)


def _pair(ctx, scene: str, init: str, n: int, seed: int, iters: int, horizon: int, downscale: int = 1) -> list:
    base = dict(scene=scene, init=init, n=n, seed=seed, iters=iters, eval_every=max(iters // 10, 1), downscale=downscale)
    scaled = dict(schedule="scaled", schedule_horizon=horizon)
    return [dict(base, optimizer="adam", name="adam"), dict(base, optimizer="tr", name="tr-scaled", cfg=scaled)]


# --------------------------------------------------------------------------- parts


@bench.part("travel", doc="travel budgets of the literal and scaled schedules, exact (no fitting)", hours=0.001)
def travel(ctx) -> dict:
    from icmlkit.lib.train_3dgs.optim import scaled_radii

    iters = 1000
    h = [iters // 2, iters]
    r0, r1 = scaled_radii(1e-6, 1e-8, iters, 30000)
    return {"literal 1e-6 -> 1e-8 over 30000 (the paper)": travel_budget(1e-6, 1e-8, 30000, [30000]),
            f"literal 1e-6 -> 1e-8 over {iters}": travel_budget(1e-6, 1e-8, iters, h),
            f"scaled {r0:.3g} -> {r1:.3g} over {iters}": travel_budget(r0, r1, iters, h)}


@bench.part("synthetic", doc="the sheet scene, Adam vs scaled TR, 1000 iterations", hours=0.22, seeds=(0, 1, 2))
def synthetic(ctx) -> dict:
    z = sizes(ctx.quick)
    specs = [s for seed in ctx.seeds for s in _pair(ctx, str(synthetic_scene(ctx.quick)), "gt-noise",
                                                     SYN["n_gaussians"], seed, z["pair"], 1000 if ctx.quick else 30000)]
    return {"label": f"synthetic (the sheet scene): 800 known Gaussians, 64x64, 32+8 views, seeds {list(ctx.seeds)}, "
                     f"{z['pair']} iterations", "runs": run_specs(ctx, specs)}


@bench.part("lego", doc="lego 50x50, 2000 random-init Gaussians, Adam vs scaled TR, 1000 iterations", hours=0.08)
def lego(ctx) -> dict:
    z = sizes(ctx.quick)
    specs = _pair(ctx, lego_dir(), "random", z["lego_n"], 0, z["pair"], 1000 if ctx.quick else 30000, downscale=2)
    return {"label": f"lego subset (50x50, 40 train + 10 test views), {z['lego_n']} random-init Gaussians, seed 0, "
                     f"{z['pair']} iterations", "runs": run_specs(ctx, specs)}


@bench.part("knn", doc="a synthetic scene with kNN-matched scales, Adam vs scaled TR (reported)", hours=0.07)
def knn(ctx) -> dict:
    z = sizes(ctx.quick)
    specs = _pair(ctx, str(synthetic_scene(ctx.quick, "knn")), "gt-noise", SYN["n_gaussians"], 0, z["pair"],
                  1000 if ctx.quick else 30000)
    return {"label": f"synthetic (kNN-matched scales): 800 known Gaussians, 64x64, 32+8 views, seed 0, {z['pair']} "
                     "iterations", "runs": run_specs(ctx, specs)}


def _short_base(ctx, scene_seed: int = 0) -> dict:
    it = sizes(ctx.quick)["short"]
    return dict(scene=str(synthetic_scene(ctx.quick, scene_seed=scene_seed)), init="gt-noise", n=SYN["n_gaussians"],
                seed=0, iters=it, eval_every=max(it // 4, 1))


@bench.part("ablate", doc="each option of the authors' prototype alone on scaled TR, 200 iterations, seed 0",
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


@bench.part("sweep", doc="the literal schedule at starts 1e-6 .. 1e-3, 200 iterations, seed 0", hours=0.03)
def sweep(ctx) -> dict:
    base = _short_base(ctx)
    specs = [dict(base, optimizer="tr", name=f"literal {r:g}", cfg=dict(radius=r, radius_final=r / 100)) for r in RADII]
    return {"label": f"radius sweep: sheet scene, seed 0, {base['iters']} iterations, literal start -> start/100",
            "runs": run_specs(ctx, specs)}


def _tune_spec(base: dict, method: str, cfg: dict) -> dict:
    if method == "adam":
        return dict(base, optimizer="adam", name=f"adam lr x{cfg['adam_lr_scale']:g}", cfg=cfg)
    if cfg["schedule"] == "scaled":
        return dict(base, optimizer="tr", name="tr scaled", cfg=dict(cfg, schedule_horizon=30 * base["iters"]))
    return dict(base, optimizer="tr", name=f"tr literal {cfg['radius']:g}",
                cfg=dict(cfg, radius_final=cfg["radius"] / 100))


@bench.part("tune", doc="TR's radius and Adam's learning-rate multiplier, 5 configurations each, on a separate "
            "tuning scene, 200 iterations", hours=0.06)
def tune_part(ctx) -> dict:
    base = _short_base(ctx, scene_seed=1)
    grids = {"tr": [{"schedule": "literal", "radius": r} for r in RADII] + [{"schedule": "scaled"}],
             "adam": [{"adam_lr_scale": m} for m in ADAM_SCALES]}
    budget = 2 if ctx.quick else 5
    # tune() draws the configurations (all of them when a grid has `budget` entries); run them two at a time
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
    return {"label": f"tuning: the sheet's synthetic recipe with scene seed 1 (not a scene any other part uses), seed 0, "
                     f"{base['iters']} iterations, test PSNR at the end; budget {budget} configurations per optimizer",
            "runs": list(recs.values()), "tuning": rec}


@bench.part("speed", doc="seconds per iteration, TR vs Adam, sheet scene, one thread, time_call each", hours=0.02)
def speed(ctx) -> dict:
    import torch

    from icmlkit.lib.train_3dgs.ply import read_ply
    from icmlkit.lib.train_3dgs.scene import read_scene
    from icmlkit.lib.train_3dgs.train import FitConfig, InitConfig, fit_scene

    torch.set_num_threads(1)
    folder = synthetic_scene(ctx.quick)
    sc, gt = read_scene(str(folder)), read_ply(folder / "gt.ply")
    init = InitConfig(init="gt-noise", n_gaussians=SYN["n_gaussians"])
    it = sizes(ctx.quick)["speed"]
    rec = {}
    # TR at the 1000-step runs' radius (horizon 30 x the run, as ablate); the full 30k budget over a short fit
    # would exceed the trust region's closed forms
    for opt, extra in (("adam", {}), ("tr", dict(schedule="scaled", schedule_horizon=30 * it))):
        cfg = FitConfig(optimizer=opt, iters=it, batch=4, sh_degree=1, sh_every=max(it // 4, 1), eval_every=it, **extra)
        t = time_call(lambda cfg=cfg: fit_scene(sc, cfg, init, seed=0, gt=gt), repeats=1 if ctx.quick else 3)
        rec[opt] = {k: (v / it if k.endswith("_s") else v) for k, v in t.items()}  # per iteration
    return {"iters": it, "timings": rec, "ratio": speed_ratio(rec["tr"], rec["adam"]),
            "note": f"a {it}-iteration fit (its two test evaluations included), one thread, per iteration"}


@bench.part("literal", doc="the paper's literal schedule 1e-6 -> 1e-8 vs Adam: sheet scene 3 seeds, lego 5000 "
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
                     "radius (start, end)": f"{rs[0]:.3g}, {rs[1]:.3g}" if rs else ""})
    return table(rows, ["run", "PSNR init", "PSNR @ half", "PSNR @ end", "SSIM @ end", "s / iter", "radius (start, end)"])


def plot(path: Path, parts: dict) -> bool:
    """Test PSNR curves of the pair parts, one panel per scene and seed."""
    from icmlkit.lib.core.plot import pyplot, save_png

    plt = pyplot(required=False)
    panels = [(f"{p} seed {s}", [r for r in parts[p]["runs"] if r["seed"] == s])
              for p in ("synthetic", "lego", "knn") if p in parts for s in sorted({r["seed"] for r in parts[p]["runs"]})]
    if plt is None or not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (title, runs) in zip(axes[0], panels):
        for run in runs:
            if not run["curve"]:  # a diverged fit has no curve (its table row says so)
                continue
            xs, ys = zip(*run["curve"])
            ax.plot(xs, ys, marker="o", ms=2, label=run["name"])
        lost = [run["name"] for run in runs if not run["curve"]]
        ax.set_title(title + (f" ({', '.join(lost)} diverged)" if lost else ""), fontsize=9)
        ax.set_xlabel("iteration")
        ax.set_ylabel("test PSNR (dB)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
    return True


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


@bench.report
def report(R: dict) -> tuple[dict, str]:
    out, md = {}, []
    if "synthetic" in R:
        runs = R["synthetic"]["runs"]
        by = {n: [r for r in runs if r["name"] == n] for n in ("adam", "tr-scaled")}
        tr_half, ad_full = _mean([r["psnr_half"] for r in by["tr-scaled"]]), _mean([r["psnr_full"] for r in by["adam"]])
        tr_full = _mean([r["psnr_full"] for r in by["tr-scaled"]])
        ns = len(by["adam"])
        note = f"mean test PSNR over seeds {sorted(r['seed'] for r in by['adam'])} (the issue asks for 3)"
        out["synthetic_scaled_tr_half_ge_adam_full"] = target(
            _r(tr_half), _r(ad_full), ns == 3 and None not in (tr_half, ad_full) and tr_half >= ad_full,
            f"TR (scaled schedule) at 500 vs Adam at 1000 iterations; {note}")
        out["synthetic_scaled_tr_full_gt_adam_full"] = target(
            _r(tr_full), _r(ad_full), ns == 3 and None not in (tr_full, ad_full) and tr_full > ad_full,
            f"TR (scaled) vs Adam, both at 1000 iterations (the sheet's second criterion); {note}")
        if "speed" in R:
            sp = R["speed"]
            ratio = sp["ratio"]["ratio"]
            out["time_ratio_tr_over_adam"] = target(round(ratio, 3), 3.0, ratio <= 3.0,
                                                    f"seconds per iteration TR / Adam, medians of repeated timings of "
                                                    f"{sp['note']} (range {sp['ratio']['low']:.2f}-{sp['ratio']['high']:.2f}; "
                                                    "the sheet expects 2-3x)")
        else:
            ratio = _mean([r["seconds_per_iter"] for r in by["tr-scaled"]]) / _mean([r["seconds_per_iter"]
                                                                                     for r in by["adam"]])
            out["time_ratio_tr_over_adam"] = target(round(ratio, 3), 3.0, ratio <= 3.0,
                                                    "seconds per iteration TR / Adam (the pair ran concurrently, one "
                                                    "thread each; the sheet expects 2-3x)")
        mem = _mean([r["peak_tensor_memory_mb"] for r in by["tr-scaled"]]) / _mean([r["peak_tensor_memory_mb"]
                                                                                     for r in by["adam"]])
        out["peak_memory_ratio_tr_over_adam"] = target(round(mem, 3), 1.17, mem <= 1.17,
                                                       "deterministic peak tensor memory TR / Adam (lib/train_3dgs/memory.py); "
                                                       "the paper's +17 %")
    for p, key, what in (("lego", "lego_scaled_tr_half_ge_adam_full", "lego 50x50, 2000 random-init Gaussians, 1 seed "
                                                                      "(smaller than the sheet's 5000 at 100x100)"),
                         ("knn", "knn_scene_scaled_tr_half_ge_adam_full", "reported: kNN-matched synthetic scene, 1 seed")):
        if p in R:
            rr = {r["name"]: r for r in R[p]["runs"]}
            a, t = rr["adam"]["psnr_full"], rr["tr-scaled"]["psnr_half"]
            out[key] = target(_r(t), _r(a), None not in (t, a) and t >= a, f"TR (scaled) at 500 vs Adam at 1000; {what}")
    if "literal" in R:
        L = R["literal"]
        for blk, key, what in (("synthetic", "literal_synthetic_tr_half_ge_adam_full",
                                f"{len({r['seed'] for r in L['synthetic']['runs']})} seeds x {L['synthetic']['iters']} "
                                "iterations"),
                               ("lego", "literal_lego_tr_half_ge_adam_full", "reported: " + L["lego"]["label"])):
            runs = L[blk]["runs"]
            th = _mean([r["psnr_half"] for r in runs if r["name"] == "tr"])
            af = _mean([r["psnr_full"] for r in runs if r["name"] == "adam"])
            out[key] = target(_r(th), _r(af), None not in (th, af) and th >= af,
                              f"the paper's literal schedule 1e-6 -> 1e-8: mean test PSNR of TR at 500 iterations vs "
                              f"Adam at 1000; {what}")
    for p in ("synthetic", "lego", "knn", "ablate", "sweep", "tune"):
        if p in R:
            md += [f"**{p}: {R[p]['label']}**", "", runs_md(R[p]), ""]
    if "tune" in R:
        t = R["tune"]["tuning"]
        md += ["**Tuning, the same budget for both optimizers** (test PSNR of the tuning scene at the end; best "
               "per optimizer):", "",
               table([{"optimizer": m, "configurations": len(v["grid"]),
                       "best": ", ".join(f"{k}={x:g}" if isinstance(x, float) else f"{k}={x}" for k, x in v["best"].items())
                       if v["best"] else "—", "best PSNR": v["best_score"],
                       "scores": ", ".join("diverged" if x is None else f"{x:.2f}" for x in v["scores"])}
                      for m, v in t["methods"].items()]), ""]
    if "speed" in R:
        sp = R["speed"]
        md += [f"**speed** ({sp['note']}; median of repeats after a warm-up):", "",
               table([{"optimizer": k, "s / iter (median)": v["median_s"], "min": v["min_s"], "max": v["max_s"],
                       "repeats": v["repeats"]} for k, v in sp["timings"].items()], digits=4), ""]
    if "literal" in R:
        for blk in ("synthetic", "lego", "long"):
            if blk in R["literal"]:
                md += [f"**literal ({blk}): {R['literal'][blk]['label']}, {R['literal'][blk]['iters']} iterations**", "",
                       runs_md(R["literal"][blk]), ""]
    if "travel" in R:
        md += ["Travel budget (exact, no fitting; opacity from 0.1, scale and means at o_bar = 0.1):", "",
               table([{"schedule": name, "h": h, "sum sqrt(radius)": f"{v['sqrt_radius_sum']:.3f}",
                       "max opacity": f"{v['max_opacity']:.3f}", "max d log s": f"{v['max_log_scale_change']:.2f}",
                       "max mean travel (sigma)": f"{v['max_mean_travel_sigmas']:.2f}"}
                      for name, b in R["travel"].items() for h, v in b["by_horizon"].items()]), ""]
    # the PSNR curves (the harness has no hook for figures: written beside the results the report goes to)
    if plot((QUICK_RESULTS if "--quick" in sys.argv else RESULTS) / "train_3dgs.png", R):
        md += ["Test PSNR curves: `bench/results/train_3dgs.png`.", ""]
    return out, re.sub(r"\n{3,}", "\n\n", "\n".join(md))


if __name__ == "__main__":
    bench.main()
