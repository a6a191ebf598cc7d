"""Benchmark of train-operator: FuncAttn vs Transolver vs a parameter-matched FNO on Darcy flow.

Sized for the shared 2-core machine (one torch thread). Parts (``make bench TOOL=train-operator``
runs every one; each (seed, model) run is a resumable item, and the 300-epoch runs also checkpoint
every 10 epochs under outputs/bench/train_operator/models/):

- ``real``: real Darcy (data/darcy, neuraloperator 0.3.0): 16 epochs on 500 samples, train at 16x16,
  test at 16x16 and zero-shot at 32x32; FuncAttn (Linear projections, 4 blocks, C = 64, 4 heads,
  k = 32), Transolver (the identical net with softmax over the slice tokens), FNO (our own, width
  matched to FuncAttn's parameter count); relative L2 x 100 per sample, averaged, on decoded outputs;
- ``ablations``: the same protocol for the Conv2d-projection variant, fixed Fourier bases, no inverse
  transform, and the shared-basis variant;
- ``generated`` (and ``generated-conv``): generated Darcy (our FD solver) solved at 129x129 nodes,
  subsampled to 33 (train), 65 and 129 (test): the issue's 128 -> 32 / 64, 128 protocol, 16 epochs;
- ``fewshot``: few-shot sine regression with 4 context points: FuncAttn (sliced bases with a softmax
  over points, ridge 1e-4) vs softmax cross-attention (and the ridge-over-points regressor);
- ``speed``: one training epoch of each model on real Darcy and inference seconds per sample at
  16^2 ... 128^2 points (fresh nets of the benchmark's config), each a ``time_call``; ratios by
  ``speed_ratio``; the slope of log time vs log n (1 = linear);
- ``real-full``: ``real`` at the issue's size, 300 epochs on all 1000 training samples (about 23
  minutes per FuncAttn or Transolver run on one core);
- ``generated-full``: ``generated`` with 300 epochs (about 30 minutes per FuncAttn or Transolver run);
- ``generated-trapezoid``: the same with trapezoid point weights in T (``quadrature="trapezoid"``, our
  addition) for FuncAttn (3 seeds) and Transolver (seed 0);
- ``probe``: why the zero-shot error grows, on the saved generated-full FuncAttn of seed 0;
- ``burgers``: the paper's own zero-shot test, periodic viscous Burgers (nu 0.1, FNO's initial field,
  our ETDRK4 solve at 8192 points): train at 1024 points, test at 1024 and zero-shot at 4096 (4x) and
  8192, every grid a subsample of the same solve; FuncAttn, Transolver, FNO (16 modes, width matched),
  3 seeds, and FuncAttn with periodic position features (seed 0), one shared budget (the official
  Burgers loss: rel-L2 + 0.1 x the rel-L2 of the derivative, batch mean, PyTorch's initialisation,
  ``--recipe h1``; lr 1e-3, OneCycleLR); each run also records its 1024 prediction interpolated
  (trigonometric and linear) onto the finer grids;
- ``burgers-timing``: seconds per training sample of each model at 1024 and at the paper's 2048 points
  (why the ``burgers`` part trains at 1024; run under both CPU locks).

Every run also records ``interp_errors``: its prediction at the training resolution bilinearly
interpolated onto each finer test grid of the same samples (``superres``'s simple baseline). No method
is tuned on a grid: every model runs at one shared setting (lr 2e-3, batch 8, the architecture below).

Run:  make bench TOOL=train-operator   (or .venv/bin/python bench/train_operator.py [--part P] [--quick])
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import torch

from _common import CACHE, Bench, speed_ratio, table, target, time_call
from icmlkit.lib.core.io import load_npz, write_npz
from icmlkit.lib.core.stats import paired_bootstrap
from icmlkit.lib.train_operator.config import BurgersConfig, DarcyConfig, FewShotConfig, ModelConfig, TrainConfig
from icmlkit.lib.train_operator.data import fieldset, grid_coords, read_fields
from icmlkit.lib.train_operator.demo import darcy_files
from icmlkit.lib.train_operator.fewshot import few_shot
from icmlkit.lib.train_operator.solvers import generate_burgers, generate_darcy
from icmlkit.lib.train_operator.train import (Normaliser, OperatorModel, evaluate_model, rel_l2, set_threads, superres,
                                              train, upsample_periodic)

bench = Bench("train-operator")
SEEDS = (0, 1, 2)
ARCH = dict(width=64, heads=4, layers=4, bases=32)
BATCH, LR, FNO_MODES = 8, 2e-3, 6
GEN = dict(solve=129, train=33, tests=(33, 65, 129), seed=7)
ABLATIONS = {"funcattn-conv": dict(model="funcattn-conv"), "funcattn-fourier": dict(model="funcattn", basis="fourier"),
             "funcattn-no-inverse": dict(model="funcattn", inverse=False),
             "funcattn-shared": dict(model="funcattn", shared=True)}
MODELS = ("funcattn", "transolver", "fno")
# part generated-trapezoid: the generated-full protocol with trapezoid point weights in T (our addition)
TRAPEZOID = {"funcattn-trapezoid": dict(model="funcattn", quadrature="trapezoid"),
             "transolver-trapezoid": dict(model="transolver", quadrature="trapezoid")}


def sizes(quick: bool) -> dict:
    """Every size of the benchmark; ``--quick`` takes seconds-long smoke sizes."""
    if quick:
        return {"epochs": 1, "ntrain": 16, "full_epochs": 2, "full_ntrain": 16, "gen_train": 16, "gen_test": 4,
                "fewshot_steps": 20, "fewshot_tasks": 20, "speed_sides": (16, 32, 64), "repeats": 1}
    return {"epochs": 16, "ntrain": 500, "full_epochs": 300, "full_ntrain": 1000, "gen_train": 300, "gen_test": 50,
            "fewshot_steps": 1500, "fewshot_tasks": 500, "speed_sides": (16, 32, 64, 128), "repeats": 3}


def settings(quick: bool, epochs_key: str = "epochs") -> dict:
    z = sizes(quick)
    return {"epochs": z[epochs_key], "batch": BATCH, "lr": LR, "arch": ARCH, "fno_modes": FNO_MODES, "threads": 1}


def models_dir(quick: bool):
    return CACHE / "train_operator" / ("models-quick" if quick else "models")


def fit_eval(name: str, tr, tests, tc: TrainConfig, seed: int, checkpointer=None, save=None, extra=None, **kw) -> dict:
    """Train, then evaluate on ``tests`` (the first at the training resolution) with ``superres``: the
    zero-shot errors, and on nested grids of the same samples the first grid's prediction interpolated
    (``interp_errors``, None where the grids are not nested). ``save``: also write the final model there;
    ``extra(model, tests)``: a dict of further fields of the run."""
    kw.setdefault("model", name)
    got = []
    wall = time_call(lambda: got.append(train(ModelConfig(**{**ARCH, "modes": FNO_MODES, **kw}), tc, tr, None, seed=seed,
                                               checkpointer=checkpointer)), repeats=1, warmup=0)  # one training
    res = got[0]
    if save is not None:
        res.model.save(save)
    sr = superres(res.model, tests).rows
    errs = [r["rel_l2_x100"] for r in sr]
    return {"model": name, "seed": seed, "params": res.summary["params"], "errors": errs,
            "interp_errors": [r["interp_rel_l2_x100"] for r in sr],
            "seconds_per_epoch": res.summary["seconds_per_epoch"], "seconds": wall["median_s"],
            "epochs": tc.epochs, "n_train": res.summary["n_train"], "resumed_from": res.summary["resumed_from"],
            "final_train_rel_l2": res.summary["final_train_rel_l2"], **(extra(res.model, tests) if extra else {})}


def summarise(runs: list[dict], names: list[str]) -> dict:
    out = {}
    for model in sorted({r["model"] for r in runs}):
        rs = sorted((r for r in runs if r["model"] == model), key=lambda r: r["seed"])
        e = np.array([r["errors"] for r in rs])
        out[model] = {"seeds": [r["seed"] for r in rs], "params": rs[0]["params"],
                      **{f"rel_l2_x100_{n}": float(e[:, i].mean()) for i, n in enumerate(names)},
                      **{f"rel_l2_x100_{n}_std": float(e[:, i].std()) for i, n in enumerate(names)},
                      "per_seed": e.tolist(),
                      "final_train_rel_l2": float(np.mean([r["final_train_rel_l2"] for r in rs]))
                      if all(r.get("final_train_rel_l2") is not None for r in rs) else None,  # older runs lack it
                      "ratios_per_seed": [[float(row[i] / row[0]) for i in range(1, len(names))] for row in e],
                      **_interp_means(rs, names),
                      "seconds_per_epoch": float(np.mean([r["seconds_per_epoch"] for r in rs]))}
    return out


def _interp_means(rs: list[dict], names: list[str]) -> dict:
    """Mean error of the training-resolution prediction interpolated onto each finer test grid, where
    every run of the model recorded it (older runs did not)."""
    out = {}
    for i, n in enumerate(names[1:], start=1):
        vals = [r.get("interp_errors", [None] * len(names))[i] for r in rs]
        if all(v is not None for v in vals):
            out[f"interp_rel_l2_x100_{n}"] = float(np.mean(vals))
    return out


def _fresh_model(name: str, tr):
    cfg = ModelConfig(model=name, modes=FNO_MODES, **ARCH).to_dict()
    if name == "fno":
        from icmlkit.lib.train_operator.nets import matched_fno_width
        cfg["fno_width"] = matched_fno_width(cfg, 1, 1, 2)
    torch.manual_seed(0)
    return OperatorModel(cfg, 1, 1, 2, Normaliser.fit(tr), [0, 0], [1, 1], "16x16")


@torch.no_grad()
def inference_seconds(sides, repeats: int) -> dict:
    """Seconds per sample of a forward pass at s x s points (a time_call: warm-up, median of
    ``repeats``), fresh nets of the benchmark's config (times do not depend on the weights)."""
    out = {}
    x16 = (np.random.default_rng(0).random((8, 16, 16)) > 0.5).astype(np.float32)
    tr = fieldset(x16, x16.copy(), None)
    for name in MODELS:
        model = _fresh_model(name, tr)
        row, recs = {}, {}
        for s in sides:
            x = (np.random.default_rng(0).random((2, s, s)) > 0.5).astype(np.float32)
            fs = fieldset(x, None, None)
            rec = time_call(lambda: model.predict(fs, torch.device("cpu"), batch=2), repeats=repeats)
            recs[str(s * s)] = {k: (v / 2 if k.endswith("_s") else v) for k, v in rec.items()}  # per sample
            row[s * s] = recs[str(s * s)]["median_s"]
        slope = float(np.polyfit(np.log(list(row))[1:], np.log(list(row.values()))[1:], 1)[0])
        out[name] = {"seconds_per_sample": {str(k): v for k, v in row.items()}, "loglog_slope": slope,
                     "timings": recs}
    return out


def real_sets():
    files = darcy_files()
    if files is None:
        raise SystemExit("data/darcy is missing")
    return read_fields(files["train_16"]), [read_fields(files["test_16"]), read_fields(files["test_32"])]


def generated_sets(quick: bool):
    """The generated Darcy sets (one solve at 129 nodes, subsampled), cached under outputs/bench/."""
    z = sizes(quick)
    ntr, n = z["gen_train"], z["gen_train"] + z["gen_test"]
    cache = CACHE / "train_operator" / f"darcy129-{n}.npz"
    cache.parent.mkdir(parents=True, exist_ok=True)
    if cache.is_file():
        arrays = dict(np.load(cache))
        seconds = float(arrays.pop("seconds"))
    else:
        got = []
        t = time_call(lambda: got.append(generate_darcy(DarcyConfig(n=n, solve_resolution=GEN["solve"],
                                                                    resolution=GEN["solve"]), seed=GEN["seed"]).arrays),
                      repeats=1, warmup=0)
        seconds = t["median_s"]
        arrays = {"x": got[0]["x"], "y": got[0]["y"]}
        np.savez(cache, x=arrays["x"], y=arrays["y"], seconds=seconds)
    out = {}
    for r in GEN["tests"]:
        step = (GEN["solve"] - 1) // (r - 1)
        out[r] = (arrays["x"][:, :, ::step, ::step], arrays["y"][:, :, ::step, ::step])
    gtr = fieldset(out[GEN["train"]][0][:ntr], out[GEN["train"]][1][:ntr], None)
    gte = [fieldset(out[r][0][ntr:], out[r][1][ntr:], None) for r in GEN["tests"]]
    return gtr, gte, seconds


# --------------------------------------------------------------------------- parts


def _runs(ctx, todo: dict, tr, te, tc: TrainConfig, seeds=None, full_stem: str | None = None, extra=None) -> list:
    """One resumable item per (seed, model); with ``full_stem`` also a checkpoint every 10 epochs and the
    final model under models_dir (the probe reads generated-full's)."""
    runs = []
    for seed in ctx.seeds if seeds is None else seeds:
        for name, kw in todo.items():
            def one(seed=seed, name=name, kw=kw):
                if full_stem is None:
                    return fit_eval(name, tr, te, tc, seed, extra=extra, **kw)
                from icmlkit.lib.core.checkpoint import Checkpointer

                ckpt = models_dir(ctx.quick) / f"{full_stem}_{seed}_{name}.pt"
                ckpt.parent.mkdir(parents=True, exist_ok=True)
                ck = Checkpointer(ckpt, every=10, resume=ckpt.is_file())
                return fit_eval(name, tr, te, tc, seed, checkpointer=ck, save=ckpt.with_suffix(".safetensors"),
                                extra=extra, **kw)

            run = ctx.cached(f"seed{seed}-{name}", one)
            ctx.log(f"{name} seed {seed}: {[round(e, 3) for e in run['errors']]}")
            runs.append(run)
    return runs


@bench.part("real", doc="real Darcy 16 -> 32, 16 epochs on 500 samples: FuncAttn, Transolver, FNO", hours=0.07,
            seeds=SEEDS)
def real(ctx) -> dict:
    set_threads("cpu", 1)
    z = sizes(ctx.quick)
    tr, te = real_sets()
    tc = TrainConfig(epochs=z["epochs"], batch=BATCH, ntrain=z["ntrain"], val_fraction=0, lr=LR)
    return {"settings": {**settings(ctx.quick), "ntrain": z["ntrain"]},
            "runs": _runs(ctx, {m: dict(model=m) for m in MODELS}, tr, te, tc)}


@bench.part("ablations", doc="real Darcy, the Conv2d, Fourier-basis, no-inverse and shared-basis variants",
            hours=0.04, seeds=(0,))
def ablations(ctx) -> dict:
    set_threads("cpu", 1)
    z = sizes(ctx.quick)
    tr, te = real_sets()
    tc = TrainConfig(epochs=z["epochs"], batch=BATCH, ntrain=z["ntrain"], val_fraction=0, lr=LR)
    return {"settings": {**settings(ctx.quick), "ntrain": z["ntrain"]}, "runs": _runs(ctx, ABLATIONS, tr, te, tc)}


def _generated(ctx, todo) -> dict:
    set_threads("cpu", 1)
    z = sizes(ctx.quick)
    gtr, gte, gen_seconds = generated_sets(ctx.quick)
    tc = TrainConfig(epochs=z["epochs"], batch=BATCH, val_fraction=0, lr=LR)
    return {"settings": {**settings(ctx.quick), "n_train": z["gen_train"], "n_test": z["gen_test"]},
            "runs": _runs(ctx, todo, gtr, gte, tc), "generate_seconds": gen_seconds}


@bench.part("generated", doc="generated Darcy 33 -> 65, 129 (solved at 129), 16 epochs: FuncAttn, Transolver, FNO",
            hours=0.2, seeds=SEEDS)
def generated(ctx) -> dict:
    return _generated(ctx, {m: {} for m in MODELS})


@bench.part("generated-conv", doc="generated Darcy, 16 epochs: the Conv2d variant", hours=0.17, seeds=SEEDS)
def generated_conv(ctx) -> dict:
    return _generated(ctx, {"funcattn-conv": {}})


@bench.part("fewshot", doc="few-shot sine, K = 4: FuncAttn (sliced bases) vs softmax cross-attention vs ridge",
            hours=0.03, seeds=SEEDS)
def fewshot(ctx) -> dict:
    set_threads("cpu", 1)
    z = sizes(ctx.quick)
    per = []
    for seed in ctx.seeds:
        fs = ctx.cached(f"seed{seed}", lambda seed=seed: few_shot(
            FewShotConfig(steps=z["fewshot_steps"], test_tasks=z["fewshot_tasks"]), seed=seed).summary)
        ctx.log(f"seed {seed}: FuncAttn {fs['mse_funcattn']:.4f} softmax {fs['mse_softmax']:.4f}")
        per.append(fs)
    return {"per_seed": per}


@bench.part("speed", doc="one training epoch (real Darcy) and inference per sample at 16^2..128^2, time_call each",
            hours=0.03)
def speed(ctx) -> dict:
    set_threads("cpu", 1)
    z = sizes(ctx.quick)
    tr, _ = real_sets()
    epoch = {}
    for name in MODELS:  # one epoch on the real part's training set (its seconds per epoch, timed here)
        tc = TrainConfig(epochs=1, batch=BATCH, ntrain=z["ntrain"], val_fraction=0, lr=LR)
        cfg = ModelConfig(**{**ARCH, "modes": FNO_MODES, "model": name})
        epoch[name] = time_call(lambda cfg=cfg, tc=tc: train(cfg, tc, tr, None, seed=0), repeats=z["repeats"])
    inf = inference_seconds(z["speed_sides"], z["repeats"])
    big = str(max(int(k) for k in inf["funcattn"]["seconds_per_sample"]))
    ratios = {"epoch_funcattn_over_transolver": speed_ratio(epoch["funcattn"], epoch["transolver"]),
              "epoch_funcattn_over_fno": speed_ratio(epoch["funcattn"], epoch["fno"]),
              "inference_funcattn_over_transolver": speed_ratio(inf["funcattn"]["timings"][big],
                                                                inf["transolver"]["timings"][big]),
              "inference_funcattn_over_fno": speed_ratio(inf["funcattn"]["timings"][big], inf["fno"]["timings"][big])}
    return {"epoch": epoch, "epoch_ntrain": z["ntrain"], "inference": inf, "ratios": ratios}


@bench.part("real-full", doc="real Darcy at the issue's size: 300 epochs on 1000 samples, 3 models x 3 seeds",
            hours=3.5, seeds=SEEDS)
def real_full(ctx) -> dict:
    set_threads("cpu", 1)
    z = sizes(ctx.quick)
    tr, te = real_sets()
    tc = TrainConfig(epochs=z["full_epochs"], batch=BATCH, ntrain=z["full_ntrain"], val_fraction=0, lr=LR)
    return {"settings": {**settings(ctx.quick, "full_epochs"), "ntrain": z["full_ntrain"]},
            "runs": _runs(ctx, {m: {} for m in MODELS}, tr, te, tc, full_stem="full")}


def _generated_full(ctx, todo: dict, stem: str, seeds_of=None) -> dict:
    set_threads("cpu", 1)
    z = sizes(ctx.quick)
    gtr, gte, _ = generated_sets(ctx.quick)
    tc = TrainConfig(epochs=z["full_epochs"], batch=BATCH, val_fraction=0, lr=LR)  # every generated sample
    runs = []
    for name, kw in todo.items():
        runs += _runs(ctx, {name: kw}, gtr, gte, tc, seeds=(seeds_of or {}).get(name), full_stem=stem)
    return {"settings": {**settings(ctx.quick, "full_epochs"), "n_train": z["gen_train"], "n_test": z["gen_test"]},
            "runs": runs}


@bench.part("generated-full", doc="generated Darcy, 300 epochs (the issue's protocol), 3 models x 3 seeds", hours=2.5,
            seeds=SEEDS)
def generated_full(ctx) -> dict:
    return _generated_full(ctx, {m: {} for m in MODELS}, "generated_full")


@bench.part("generated-trapezoid", doc="generated Darcy, 300 epochs, trapezoid weights in T: FuncAttn x 3 seeds, "
            "Transolver seed 0", hours=2.3, seeds=SEEDS)
def generated_trapezoid(ctx) -> dict:
    return _generated_full(ctx, TRAPEZOID, "generated_trapezoid", {"transolver-trapezoid": ctx.seeds[:1]})


@bench.part("probe", doc="why zero-shot error grows: the saved generated-full FuncAttn (seed 0) with coarse-share "
            "weights", hours=0.01, seeds=(0,))
def probe(ctx) -> dict:
    set_threads("cpu", 1)
    return {str(seed): quadrature_probe(models_dir(ctx.quick) / f"generated_full_{seed}_funcattn.safetensors",
                                        ctx.quick) for seed in ctx.seeds}


def quadrature_probe(path, quick: bool) -> dict:
    """Why zero-shot error grows (part ``probe``): the saved generated-full FuncAttn model of ``seed``
    (paper's uniform point weights) at 65 and 129, against its own 33 prediction at the shared nodes
    (self-consistency) and against the truth, once as trained and once with every fine node weighted by
    1 / (the number of fine nodes nearest the same 33 node), which gives each 33 node's neighbourhood the
    share of T it had at 33; and once with the 33 input repeated blockwise onto the fine grid (uniform
    weights), which rules the finer input in or out. If the growth comes from the edge nodes' shrinking
    share under the uniform sum, the coarse-share numbers drop."""
    from icmlkit.lib.train_operator import nets
    from icmlkit.lib.train_operator.train import load_model, rel_l2

    if not path.is_file():
        raise SystemExit(f"{path.name} is missing: run --part generated-full first")
    model = load_model(path)
    _, tests, _ = generated_sets(quick)
    coarse = tests[0]
    n = GEN["train"]
    p_coarse = torch.from_numpy(model.predict(coarse, torch.device("cpu")).reshape(-1, n, n))
    original = nets.quadrature_weights
    out = {}
    for data in tests[1:]:
        r = data.grid[0]
        step = (r - 1) // (n - 1)
        owner = np.rint(np.arange(r) / step).astype(int)  # the nearest coarse node along an axis
        w = 1.0 / np.bincount(owner)[owner]
        blocky = dataclasses.replace(  # the 33 input repeated blockwise onto the fine grid
            data, x=coarse.x.reshape(-1, n, n, coarse.x.shape[2])[:, owner][:, :, owner].reshape(data.x.shape))
        row = {}
        for label, q, inputs in (("uniform", None, data), ("uniform_blocky_input", None, blocky),
                                 ("coarse_share", torch.tensor(np.outer(w, w).reshape(-1) * r * r / n / n), data)):
            nets.quadrature_weights = (lambda grid, rule, q=q: q) if q is not None else original
            try:
                pred = torch.from_numpy(model.predict(inputs, torch.device("cpu")))
            finally:
                nets.quadrature_weights = original
            shared = pred.reshape(-1, r, r)[:, ::step, ::step]
            row[label] = {"self_consistency_x100": float(100 * rel_l2(shared, p_coarse).mean()),
                          "rel_l2_x100": float(100 * rel_l2(pred, torch.from_numpy(data.y)).mean())}
        out[str(r)] = row
    return out


# --------------------------------------------------------------------------- periodic Burgers (the paper's test)

# The official Burgers-Super-Res run trains on 2048 points of FNO's 8192-point solve and tests on all 8192,
# 1024 training samples, 100 epochs, lr 1e-3 (OneCycleLR), loss rel-L2 + 0.1 x rel-L2 of the derivative
# (--recipe h1; the Darcy recipe's trunc_normal(0.02) initialisation, --recipe paper, left FuncAttn and
# Transolver at 49-50 % here after 50 epochs, FNO at 0.16 %: not the Burgers run's initialisation).
# Here: the same PDE and field distribution from our own solve, 4x coarser than the solve's finest
# test grid as there, at 1024 points (part burgers-timing: a 2048-point sample costs twice as much) on
# 200 samples for 50 epochs, the same for every model.
BURGERS = dict(solve=8192, train=1024, tests=(1024, 4096, 8192), nu=0.1, dt=1e-3, seed=11, lr=1e-3, batch=8,
               modes=16)
BURGERS_MODELS = {"funcattn": dict(model="funcattn"), "transolver": dict(model="transolver"),
                  "fno": dict(model="fno"), "funcattn-periodic-pos": dict(model="funcattn", pos="periodic")}


def burgers_sizes(quick: bool) -> dict:
    if quick:
        return {"solve": 256, "train": 64, "tests": (64, 256), "ntrain": 16, "ntest": 4, "epochs": 1}
    return {"solve": BURGERS["solve"], "train": BURGERS["train"], "tests": BURGERS["tests"], "ntrain": 200,
            "ntest": 50, "epochs": 50}


def burgers_arrays(quick: bool) -> tuple[dict, float]:
    """u0 and u(1) of ntrain + ntest samples at the solve resolution (cached under outputs/bench/), and
    the seconds the solve took."""
    z = burgers_sizes(quick)
    n = z["ntrain"] + z["ntest"]
    cache = CACHE / "train_operator" / f"burgers{z['solve']}-{n}-dt{BURGERS['dt']:g}-seed{BURGERS['seed']}.npz"
    cache.parent.mkdir(parents=True, exist_ok=True)
    if cache.is_file():
        arrays = load_npz(cache, ("x", "y", "seconds"))
        return arrays, float(arrays.pop("seconds"))
    got = []
    cfg = BurgersConfig(n=n, solve_resolution=z["solve"], resolution=z["solve"], nu=BURGERS["nu"], dt=BURGERS["dt"])
    t = time_call(lambda: got.append(generate_burgers(cfg, seed=BURGERS["seed"]).arrays), repeats=1, warmup=0)
    arrays = {"x": got[0]["x"], "y": got[0]["y"]}
    write_npz(cache, x=arrays["x"], y=arrays["y"], seconds=t["median_s"])
    return arrays, t["median_s"]


def burgers_sets(quick: bool):
    """The training set at the training resolution and the test sets at each test resolution, every one
    a subsample of the same solve (periodic grids, points i / s)."""
    z = burgers_sizes(quick)
    a, seconds = burgers_arrays(quick)
    ntr = z["ntrain"]
    return (burgers_fieldset(a, z["solve"], z["train"], slice(0, ntr)),
            [burgers_fieldset(a, z["solve"], s, slice(ntr, None)) for s in z["tests"]], seconds)


def burgers_fieldset(a: dict, solve: int, s: int, rows):
    """Samples ``rows`` of the solve ``a`` subsampled to ``s`` periodic points (i / s)."""
    step = solve // s
    return fieldset(a["x"][rows, ::step], a["y"][rows, ::step], grid_coords((s,), "periodic"), convention="periodic")


def burgers_extra(model, tests) -> dict:
    """Per-sample errors (x 100) at every test grid (for the paired bootstrap), and the training-grid
    prediction interpolated onto each finer grid, trigonometric and linear (errors x 100)."""
    cpu = torch.device("cpu")
    coarse = model.predict(tests[0], cpu)
    out = {"per_sample": [(100 * evaluate_model(model, t, cpu)).tolist() for t in tests],
           "interp_fourier": [None], "interp_linear": [None]}
    for t in tests[1:]:
        for mode in ("fourier", "linear"):
            up = torch.from_numpy(upsample_periodic(coarse, tests[0].grid, t.grid, mode))
            out[f"interp_{mode}"].append(float(100 * rel_l2(up, torch.from_numpy(t.y)).mean()))
    return out


def burgers_train_config(quick: bool) -> TrainConfig:
    return TrainConfig(epochs=burgers_sizes(quick)["epochs"], batch=BURGERS["batch"], lr=BURGERS["lr"], val_fraction=0,
                       recipe="h1")


@bench.part("burgers", doc="periodic Burgers (nu 0.1, solved at 8192): train 1024 -> zero-shot 4096, 8192; FuncAttn, "
            "Transolver, FNO x 3 seeds, FuncAttn with periodic positions seed 0; one budget", hours=0.5, seeds=SEEDS)
def burgers(ctx) -> dict:
    set_threads("cpu", 1)
    z = burgers_sizes(ctx.quick)
    tr, te, gen_seconds = burgers_sets(ctx.quick)
    tc = burgers_train_config(ctx.quick)
    shared = {"epochs": tc.epochs, "n_train": z["ntrain"], "batch": tc.batch, "lr": tc.lr, "recipe": tc.recipe,
              "arch": ARCH, "fno_modes": BURGERS["modes"], "threads": 1}
    ctx.record_tuning("burgers", {"budget": 1, "note": "no method is tuned: every model trains once per seed at the "
                                  "one shared setting (same samples, epochs, batch, lr, loss, schedule)",
                                  "methods": {m: {"grid": [{**shared, **kw}]} for m, kw in BURGERS_MODELS.items()}})
    todo = {m: {**kw, "modes": BURGERS["modes"]} for m, kw in BURGERS_MODELS.items()}
    runs = []
    for seed in ctx.seeds:  # seed by seed; the periodic-position ablation on the first seed only (CPU budget)
        now = {m: kw for m, kw in todo.items() if m != "funcattn-periodic-pos" or seed == ctx.seeds[0]}
        runs += _runs(ctx, now, tr, te, tc, seeds=[seed], full_stem="burgers_h1", extra=burgers_extra)
    return {"settings": {**shared, "n_test": z["ntest"], "solve": z["solve"], "train_resolution": z["train"],
                         "tests": list(z["tests"]), "nu": BURGERS["nu"], "dt": BURGERS["dt"], "data_seed": BURGERS["seed"]},
            "generate_seconds": gen_seconds, "runs": runs}


@bench.part("burgers-timing", doc="seconds per training sample at 1024 and 2048 points (why burgers trains at 1024)",
            hours=0.01)
def burgers_timing(ctx) -> dict:
    set_threads("cpu", 1)
    quick = ctx.quick
    a, _ = burgers_arrays(quick)
    z = burgers_sizes(quick)
    n = 8 if quick else 32
    sizes_ = (z["train"], 2 * z["train"])
    out = {}
    tc = dataclasses.replace(burgers_train_config(quick), epochs=1)
    for s in sizes_:
        fs = burgers_fieldset(a, z["solve"], s, slice(0, n))
        for name, kw in BURGERS_MODELS.items():
            if name == "funcattn-periodic-pos":
                continue
            cfg = ModelConfig(**{**ARCH, **kw, "modes": BURGERS["modes"]})
            rec = time_call(lambda cfg=cfg, tc=tc, fs=fs: train(cfg, tc, fs, None, seed=0), repeats=1 if quick else 3)
            out.setdefault(name, {})[str(s)] = {**rec, "seconds_per_sample": rec["median_s"] / n}
            ctx.log(f"{name} at {s}: {rec['median_s'] / n * 1e3:.1f} ms per sample")
    return {"samples_per_epoch": n, "timings": out}


def paired_bootstrap_ci(a, b, *, n_boot: int = 10000, seed: int = 0, level: float = 0.95) -> dict:
    """Mean of a - b and its percentile bootstrap interval, resampling the pairs (the last axis: test
    samples; earlier axes, the seeds, averaged within each pair first; lib.core.stats.paired_bootstrap)."""
    d = (np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    d = d.reshape(-1, d.shape[-1]).mean(0)
    ci = paired_bootstrap(d, np.zeros_like(d), n_boot=n_boot, seed=seed, level=level)
    return {"mean": ci["mean"], "low": ci["low"], "high": ci["high"], "level": level, "n_pairs": ci["n"],
            "n_boot": n_boot}


def burgers_report(R: dict, targets: dict) -> list:
    """The Burgers section and its targets (added to ``targets``); [] when the part has not run."""
    if "burgers" not in R:
        return []
    b = R["burgers"]
    st = b["settings"]
    names = [str(t) for t in st["tests"]]
    runs = b["runs"]
    models = summarise(runs, names)
    by = {m: sorted((r for r in runs if r["model"] == m), key=lambda r: r["seed"]) for m in models}
    tr_, fine = names[0], names[1]

    def pm(vals):
        return f"{np.mean(vals):.3f} ± {np.std(vals):.3f}"

    rows = []
    for m, v in models.items():
        ratios = [row[0] for row in v["ratios_per_seed"]]
        row = {"model": m, "params": v["params"], "seeds": str(v["seeds"]),
               **{f"{n}{' (train)' if i == 0 else ' zero-shot'}": pm([r["errors"][i] for r in by[m]])
                  for i, n in enumerate(names)},
               f"ratio {fine}/{tr_}": pm(ratios),
               "final train rel L2": f"{v['final_train_rel_l2']:.4f}", "s/epoch": f"{v['seconds_per_epoch']:.1f}"}
        rows.append(row)
    best = min(models, key=lambda m: models[m][f"rel_l2_x100_{tr_}"])
    interp_rows = []
    for m in dict.fromkeys(["funcattn", best]):
        if m not in by:
            continue
        for mode, label in (("fourier", "trigonometric"), ("linear", "linear")):
            interp_rows.append({"baseline": f"{m}'s {tr_} prediction, {label} interpolation", "seeds": str(models[m]["seeds"]),
                                **{f"{n}": pm([r[f"interp_{mode}"][i] for r in by[m]]) for i, n in enumerate(names) if i},
                                f"ratio {fine}/{tr_}": pm([r[f"interp_{mode}"][1] / r["errors"][0] for r in by[m]])})
    lines = [f"## Periodic Burgers, the paper's zero-shot test (nu = {st['nu']}, FNO's initial field, our ETDRK4 solve at "
             f"{st['solve']} points, dt {st['dt']:g}; train {st['n_train']} samples at {st['train_resolution']} points, test "
             f"{st['n_test']} at {', '.join(names)}, subsamples of the same solve; {st['epochs']} epochs, batch {st['batch']}, "
             f"lr {st['lr']}, loss rel-L2 + 0.1 x rel-L2 of the central-difference derivative (--recipe {st['recipe']}), the "
             f"same for every model; C = 64, 4 heads, 4 blocks, k = 32; FNO {st['fno_modes']} modes, width matched)", "",
             "Relative L2 x 100 on decoded outputs, mean ± sd over seeds; the ratio is per seed, then averaged.", "",
             table(rows), "",
             f"The simple baseline: the model's own {tr_}-point prediction interpolated onto the finer grid "
             f"(trigonometric: zero-padded spectrum; linear: with wrap-around); the ratio is to that model's {tr_} error.",
             "", table(interp_rows), ""]
    if "funcattn" in models:
        ratios = [row[0] for row in models["funcattn"]["ratios_per_seed"]]
        r = float(np.mean(ratios))
        targets["burgers_zero_shot_4x_ratio"] = target(
            r, 1.3, r <= 1.3, f"FuncAttn rel L2 at {fine} points / at the training resolution {tr_}, zero-shot on "
            f"subsamples of one {st['solve']}-point solve, mean of per-seed ratios over seeds {models['funcattn']['seeds']} "
            f"(per seed {', '.join(f'{x:.3f}' for x in ratios)}); {st['epochs']} epochs on {st['n_train']} samples "
            "(the paper: 2048 -> 8192, 100 epochs on 1024)")
    if "funcattn" in models and "transolver" in models:
        fa, trn = models["funcattn"], models["transolver"]
        seeds = [s for s in fa["seeds"] if s in trn["seeds"]]
        a = [next(r for r in by["funcattn"] if r["seed"] == s)["per_sample"][0] for s in seeds]
        c = [next(r for r in by["transolver"] if r["seed"] == s)["per_sample"][0] for s in seeds]
        ci = paired_bootstrap_ci(a, c)
        v, ref = fa[f"rel_l2_x100_{tr_}"], trn[f"rel_l2_x100_{tr_}"]
        targets["burgers_funcattn_le_transolver"] = target(
            v, ref, v <= ref, f"rel L2 x 100 at the training resolution {tr_}, mean of seeds {seeds} "
            f"(FuncAttn {_pm(fa, f'rel_l2_x100_{tr_}')}, Transolver {_pm(trn, f'rel_l2_x100_{tr_}')}); paired "
            f"bootstrap over the {ci['n_pairs']} test samples of FuncAttn - Transolver: {ci['mean']:.3f} "
            f"[{ci['low']:.3f}, {ci['high']:.3f}] ({ci['level']:.0%})")
        targets["burgers_funcattn_minus_transolver_ci"] = target(
            [ci["mean"], ci["low"], ci["high"]], None, True,
            f"FuncAttn - Transolver rel L2 x 100 at {tr_}: mean and {ci['level']:.0%} paired bootstrap interval "
            f"(test samples resampled, {ci['n_boot']} draws, seeds averaged within a sample); reported, no threshold")
        lines += [f"FuncAttn - Transolver at {tr_} (rel L2 x 100): {ci['mean']:.3f}, {ci['level']:.0%} paired bootstrap "
                  f"interval [{ci['low']:.3f}, {ci['high']:.3f}] over {ci['n_pairs']} test samples (seeds {seeds} "
                  "averaged within each sample).", ""]
    for m in ("fno", "funcattn-periodic-pos"):
        if m in models:
            v = models[m]
            ratios = [row[0] for row in v["ratios_per_seed"]]
            targets[f"burgers_{m.replace('-', '_')}_reported"] = target(
                [v[f"rel_l2_x100_{tr_}"], v[f"rel_l2_x100_{fine}"], float(np.mean(ratios))], None, True,
                f"{m}: rel L2 x 100 at {tr_} ({_pm(v, f'rel_l2_x100_{tr_}')}), zero-shot at {fine} "
                f"({_pm(v, f'rel_l2_x100_{fine}')}), ratio {pm(ratios)}, seeds {v['seeds']}; reported, no threshold")
    if "funcattn" in by:
        fi = [r["interp_fourier"][1] for r in by["funcattn"]]
        li = [r["interp_linear"][1] for r in by["funcattn"]]
        zs = [r["errors"][1] for r in by["funcattn"]]
        targets["burgers_interpolation_baseline_reported"] = target(
            [float(np.mean(fi)), float(np.mean(li)), float(np.mean(zs))], None, True,
            f"FuncAttn's {tr_} prediction interpolated to {fine}: trigonometric {pm(fi)}, linear {pm(li)}, against "
            f"FuncAttn zero-shot at {fine} {pm(zs)} (rel L2 x 100, seeds {models['funcattn']['seeds']}); best model at "
            f"{tr_}: {best}; reported, no threshold")
    if "burgers-timing" in R:
        t = R["burgers-timing"]["timings"]
        sizes_ = list(next(iter(t.values())))
        lines += [f"Seconds per training sample (one epoch of {R['burgers-timing']['samples_per_epoch']} samples, median "
                  "of 3 after a warm-up, part `burgers-timing`; why the part trains at "
                  f"{sizes_[0]} rather than the paper's {sizes_[1]}):", "",
                  table([{"model": m, **{f"{s} points": f"{v[s]['seconds_per_sample'] * 1e3:.1f} ms" for s in sizes_},
                          "ratio": f"{v[sizes_[1]]['median_s'] / v[sizes_[0]]['median_s']:.2f}"} for m, v in t.items()]), ""]
    return lines


# --------------------------------------------------------------------------- report


def _fmt(v):
    return ", ".join(f"{x:.3f}" for x in v) if isinstance(v, list) else (f"{v:.3f}" if isinstance(v, float) else str(v))


def _pm(v, key) -> str:
    return f"{v[key]:.2f} ± {v[key + '_std']:.2f}"


@bench.report
def report(R: dict) -> tuple[dict, str]:
    targets, lines = {}, []
    real_runs = R.get("real", {}).get("runs", []) + R.get("ablations", {}).get("runs", [])
    real_ = summarise(real_runs, ["16", "32"])
    st = R.get("real", R.get("ablations", {})).get("settings", {})
    if real_:
        lines += [f"## Real Darcy (neuraloperator 0.3.0 files): {st.get('epochs')} epochs on {st.get('ntrain')} "
                  f"samples, batch {st.get('batch')}, lr {st.get('lr')}, C = 64, 4 heads, 4 blocks, k = 32; FNO modes 6, "
                  "width matched; train 16x16, relative L2 x 100 (mean ± sd over seeds)", "",
                  table([{"model": m, "params": v["params"], "seeds": len(v["seeds"]), "16x16": _pm(v, "rel_l2_x100_16"),
                          "32x32 zero-shot": _pm(v, "rel_l2_x100_32"),
                          "ratio 32/16": f"{v['rel_l2_x100_32'] / v['rel_l2_x100_16']:.3f}",
                          "s/epoch": f"{v['seconds_per_epoch']:.2f}"} for m, v in real_.items()]), ""]
    if "funcattn" in real_ and "transolver" in real_:
        fa, trn = real_["funcattn"], real_["transolver"]
        ns = len(fa["seeds"])
        targets["funcattn_le_transolver_16"] = target(
            fa["rel_l2_x100_16"], trn["rel_l2_x100_16"], fa["rel_l2_x100_16"] <= trn["rel_l2_x100_16"],
            f"rel L2 x100 at 16x16, mean of {ns} seeds ({fa['seeds']}), {st['epochs']} epochs on {st['ntrain']} samples "
            "(the issue asks ~300 epochs on 1000)")
        r = fa["rel_l2_x100_32"] / fa["rel_l2_x100_16"]
        targets["zero_shot_32_le_1.3x_16"] = target(r, 1.3, r <= 1.3,
                                                    f"FuncAttn error at 32x32 / at 16x16, no retraining, mean of {ns} seeds")
    if "real-full" in R:
        fs_ = R["real-full"]["settings"]
        full = summarise(R["real-full"]["runs"], ["16", "32"])
        lines += [f"## Real Darcy, the issue's protocol: {fs_['epochs']} epochs on {fs_['ntrain']} samples (train 16x16; "
                  "relative L2 x 100, mean ± sd over seeds)", "",
                  table([{"model": m, "params": v["params"], "seeds": str(v["seeds"]), "16x16": _pm(v, "rel_l2_x100_16"),
                          "32x32 zero-shot": _pm(v, "rel_l2_x100_32"),
                          "ratio 32/16": f"{v['rel_l2_x100_32'] / v['rel_l2_x100_16']:.3f}",
                          "final train rel L2": f"{v['final_train_rel_l2']:.4f}",
                          "s/epoch": f"{v['seconds_per_epoch']:.2f}"} for m, v in full.items()]), ""]
        if "funcattn" in full and "transolver" in full:
            fa, trn = full["funcattn"], full["transolver"]
            targets["funcattn_le_transolver_16_full_protocol"] = target(
                fa["rel_l2_x100_16"], trn["rel_l2_x100_16"], fa["rel_l2_x100_16"] <= trn["rel_l2_x100_16"],
                f"rel L2 x100 at 16x16, {fs_['epochs']} epochs on {fs_['ntrain']} samples (the issue's protocol), "
                f"seeds {fa['seeds']} (Transolver seeds {trn['seeds']})")
            r = fa["rel_l2_x100_32"] / fa["rel_l2_x100_16"]
            targets["zero_shot_32_le_1.3x_16_full_protocol"] = target(
                r, 1.3, r <= 1.3, f"FuncAttn 32x32 / 16x16 error, {fs_['epochs']} epochs on {fs_['ntrain']} samples, "
                f"seeds {fa['seeds']}")
    for name in ABLATIONS:
        if name in real_:
            v = real_[name]
            targets[f"{name.replace('funcattn-', '')}_variant_reported"] = target(
                v["rel_l2_x100_32"] / v["rel_l2_x100_16"], None, True,
                f"{name}: 32x32 / 16x16 error ratio, 16x16 error {v['rel_l2_x100_16']:.2f}, seeds {v['seeds']} "
                "(reported, no threshold)")
    t = [str(r) for r in GEN["tests"]]
    gen_runs = R.get("generated", {}).get("runs", []) + R.get("generated-conv", {}).get("runs", [])
    gen = summarise(gen_runs, t)
    full_runs = R.get("generated-full", {}).get("runs", []) + R.get("generated-trapezoid", {}).get("runs", [])
    gfull = summarise(full_runs, t)
    gs = R.get("generated", R.get("generated-conv", {})).get("settings", {})
    gfs = R.get("generated-full", R.get("generated-trapezoid", {})).get("settings", {})
    for title, models_, s_ in ((f"{gs.get('epochs')} epochs", gen, gs),
                               (f"the issue's protocol, {gfs.get('epochs')} epochs", gfull, gfs)):
        if not models_:
            continue
        lines += [f"## Generated Darcy, {title} (solved at {GEN['solve']}x{GEN['solve']} nodes; train {s_['n_train']} at "
                  f"{GEN['train']}, test {s_['n_test']} at 33, 65, 129, subsampled)", "",
                  table([{"model": m, "seeds": str(v["seeds"]), "33x33": _pm(v, "rel_l2_x100_33"),
                          "65x65": _pm(v, "rel_l2_x100_65"), "129x129": _pm(v, "rel_l2_x100_129"),
                          "ratio 65/33": f"{v['rel_l2_x100_65'] / v['rel_l2_x100_33']:.3f}",
                          "ratio 129/33": f"{v['rel_l2_x100_129'] / v['rel_l2_x100_33']:.3f}",
                          "33 interpolated to 65": f"{v['interp_rel_l2_x100_65']:.2f}" if "interp_rel_l2_x100_65" in v else "-",
                          "to 129": f"{v['interp_rel_l2_x100_129']:.2f}" if "interp_rel_l2_x100_129" in v else "-",
                          "s/epoch": f"{v['seconds_per_epoch']:.2f}"} for m, v in models_.items()]), ""]
    full_how = f"{gfs.get('epochs')} epochs (the issue's protocol)"
    for models_, suffix, how, fa_name, trn_name in (
            (gen, "", f"{gs.get('epochs')} epochs", "funcattn", "transolver"),
            (gfull, "_full_protocol", full_how, "funcattn", "transolver"),
            (gfull, "_full_protocol_trapezoid", full_how + ", trapezoid weights in T (our addition)",
             "funcattn-trapezoid", "transolver-trapezoid")):
        if fa_name not in models_:
            continue
        g = models_[fa_name]
        ratios = [g[f"rel_l2_x100_{t[1]}"] / g[f"rel_l2_x100_{t[0]}"], g[f"rel_l2_x100_{t[2]}"] / g[f"rel_l2_x100_{t[0]}"]]
        targets[f"generated_zero_shot_65_129_le_1.3x_33{suffix}"] = target(
            ratios, 1.3, max(ratios) <= 1.3,
            f"generated Darcy solved at {GEN['solve']}, train {GEN['train']} -> test 65 and 129, {how}, mean of "
            f"seeds {g['seeds']}")
        if all(f"interp_rel_l2_x100_{n}" in g for n in t[1:]):
            vs = [g[f"rel_l2_x100_{n}"] / g[f"interp_rel_l2_x100_{n}"] for n in t[1:]]
            targets[f"generated_zero_shot_le_interpolation{suffix}"] = target(
                vs, 1.0, max(vs) <= 1.0,
                f"{fa_name} zero-shot error at 65 and 129 / the error of its {t[0]}x{t[0]} prediction bilinearly "
                f"interpolated there (the simple baseline; not an issue target), {how}, seeds {g['seeds']}")
        if trn_name in models_:
            v, ref = g[f"rel_l2_x100_{t[0]}"], models_[trn_name][f"rel_l2_x100_{t[0]}"]
            targets[f"generated_funcattn_le_transolver_33{suffix}"] = target(
                v, ref, v <= ref, f"generated Darcy at the training resolution, {how}, seeds {g['seeds']} "
                f"({trn_name} seeds {models_[trn_name]['seeds']})")
    for seed, pr in R.get("probe", {}).items():
        cols = ("uniform", "uniform_blocky_input", "coarse_share")
        lines += [f"## Why the zero-shot error grows: generated-full FuncAttn, seed {seed} (part `probe`)", "",
                  "Self-consistency: the fine prediction at the nodes shared with 33x33 against the 33x33 prediction "
                  "(relative L2 x 100). Coarse-share weights: every fine node weighted by 1 / (fine nodes nearest the "
                  "same 33 node) in T, so each 33 node's neighbourhood keeps the share of T it had in training.", "",
                  table([{"grid": f"{res}x{res}",
                          **{f"self-consistency, {lab}": f"{v[c]['self_consistency_x100']:.2f}" for c, lab in zip(
                              cols, ("as trained", "33 input blockwise", "coarse-share weights"))},
                          **{f"error, {lab}": f"{v[c]['rel_l2_x100']:.2f}" for c, lab in zip(
                              cols, ("as trained", "33 input blockwise", "coarse-share weights"))}}
                         for res, v in pr.items()]), ""]
    fs = R.get("fewshot", {}).get("per_seed", [])
    if fs:
        mf, ms_, mr = (float(np.mean([f[k] for f in fs])) for k in ("mse_funcattn", "mse_softmax", "mse_ridge"))
        ratio = mf / ms_
        targets["few_shot_mse_le_0.1x_softmax"] = target(
            ratio, 0.1, ratio <= 0.1, f"query MSE ratio FuncAttn (sliced, softmax over points) / softmax, K = 4, "
            f"mean MSE over {len(fs)} seeds")
        lines += [f"## Few-shot sine (K = {fs[0]['context']}), query MSE, mean over {len(fs)} seeds", "",
                  f"FuncAttn (sliced bases, softmax over points, ridge 1e-4) {mf:.4f}; ridge over the context points "
                  f"(Intention-style) {mr:.4f}; softmax cross-attention {ms_:.4f}; ratio FuncAttn / softmax {ratio:.4f}.",
                  ""]
    if "speed" in R and ("epoch" in R["speed"] or all(m in real_ for m in MODELS)):
        sp = R["speed"]
        inf = sp["inference"]
        big = str(max(int(k) for k in inf["funcattn"]["seconds_per_sample"]))
        if "ratios" in sp:  # timed in the speed part: medians of time_call, ratios by speed_ratio
            rr = sp["ratios"]
            vals = [rr[k]["ratio"] for k in ("epoch_funcattn_over_transolver", "epoch_funcattn_over_fno",
                                             "inference_funcattn_over_transolver", "inference_funcattn_over_fno")]
            how = (f"epoch time (one epoch on {sp['epoch_ntrain']} real samples) and inference at {big} points, each "
                   "the median of repeated timings after a warm-up (speed part); ranges " +
                   ", ".join(f"{rr[k]['low']:.2f}-{rr[k]['high']:.2f}" for k in rr))
        else:  # legacy: epoch times from the real part's training runs, inference best of 3
            ep = {m: real_[m]["seconds_per_epoch"] for m in MODELS}
            vals = [ep["funcattn"] / ep["transolver"], ep["funcattn"] / ep["fno"],
                    inf["funcattn"]["seconds_per_sample"][big] / inf["transolver"]["seconds_per_sample"][big],
                    inf["funcattn"]["seconds_per_sample"][big] / inf["fno"]["seconds_per_sample"][big]]
            how = ("epoch time FuncAttn/Transolver, FuncAttn/FNO (real part), inference at 128^2 FuncAttn/Transolver, "
                   "FuncAttn/FNO (speed part); reported, no threshold")
        targets["speed_ratios_reported"] = target(vals, None, True, how if "ratios" not in sp else
                                                  "FuncAttn/Transolver and FuncAttn/FNO: " + how + "; reported, no threshold")
        targets["time_linear_in_n"] = target(inf["funcattn"]["loglog_slope"], 1.2, inf["funcattn"]["loglog_slope"] <= 1.2,
                                             "slope of log(inference time) vs log(n) for FuncAttn from 32^2 to 128^2")
        sides = list(inf["funcattn"]["seconds_per_sample"])
        lines += ["## Speed (CPU, 1 thread)", "",
                  f"Epoch time ratio FuncAttn/Transolver {vals[0]:.2f}, FuncAttn/FNO {vals[1]:.2f}; inference at "
                  f"{big} points: FuncAttn/Transolver {vals[2]:.2f}, FuncAttn/FNO {vals[3]:.2f}"
                  + (" (legacy timing: epoch times from the real part's runs, inference the best of 3)"
                     if "ratios" not in sp else " (medians of time_call)") + ".", "",
                  table([{"model": m, **{f"n={k}": f"{v['seconds_per_sample'][k] * 1e3:.1f} ms" for k in sides},
                          "log-log slope": f"{v['loglog_slope']:.2f}"} for m, v in inf.items()]), ""]
    lines += burgers_report(R, targets)
    order = ["burgers_zero_shot_4x_ratio", "burgers_funcattn_le_transolver",
             "funcattn_le_transolver_16", "zero_shot_32_le_1.3x_16", "funcattn_le_transolver_16_full_protocol",
             "zero_shot_32_le_1.3x_16_full_protocol"]
    targets = {**{k: targets[k] for k in order if k in targets}, **{k: v for k, v in targets.items() if k not in order}}
    return targets, re.sub(r"\n{3,}", "\n\n", "\n".join(lines))


if __name__ == "__main__":
    bench.main()
