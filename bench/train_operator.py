"""Benchmark of train-operator: FuncAttn vs Transolver vs a parameter-matched FNO on Darcy flow.

Sized for the shared 2-core machine (one torch thread): far fewer epochs and training samples than
the paper's 500 epochs. It runs in parts (each well under 8 minutes), every part writing its rows to
bench/results/train_operator_parts.json; ``--part merge`` (also run after every part) builds
bench/results/train_operator.json and .md from the parts present:

1. ``real --seed S``: real Darcy (data/darcy, neuraloperator 0.3.0): train at 16x16, test at 16x16 and
   zero-shot at 32x32; FuncAttn (Linear projections, 4 blocks, C = 64, 4 heads, k = 32), Transolver (the
   identical net with softmax over the slice tokens), FNO (our own, width matched to FuncAttn's
   parameter count); relative L2 x 100 per sample, averaged, on decoded outputs;
2. ``ablations --seed S``: the same protocol for the Conv2d-projection variant, fixed Fourier bases,
   no inverse transform, and the shared-basis variant;
3. ``generated --seed S`` (and ``generated-conv``): generated Darcy (our FD solver) solved at 129x129
   nodes, subsampled to 33 (train), 65 and 129 (test): the issue's 128 -> 32 / 64, 128 protocol;
4. ``fewshot --seed S``: few-shot sine regression with 4 context points: FuncAttn (sliced bases with a
   softmax over points, ridge 1e-4) vs softmax cross-attention (and the ridge-over-points regressor);
5. ``speed``: inference seconds per sample at 16^2 ... 128^2 points (fresh nets of the benchmark's
   config), as ratios to Transolver and FNO, and the slope of log time vs log n (1 = linear); the epoch
   time ratios come from the ``real`` runs;
6. ``real-full --seed S [--models M]``: part 1 at the issue's size, 300 epochs on all 1000 training
   samples (about 23 minutes per FuncAttn or Transolver run on one core); ``generated-full``: part 3
   with 300 epochs (about 30 minutes per FuncAttn or Transolver run); ``generated-trapezoid``: the same
   with trapezoid point weights in T (``quadrature="trapezoid"``, our addition) for FuncAttn and
   Transolver. Each model run checkpoints every 10 epochs to outputs/bench-cache, resumes from there and
   saves its final model beside the checkpoint; finished runs are kept (``--refresh`` reruns them from
   their checkpoints, which must reproduce the stored errors).

Every run also records ``interp_errors``: its prediction at the training resolution bilinearly
interpolated onto each finer test grid of the same samples (``superres``'s simple baseline).

Run (each under the CPU lock):
  flock /work/notes/cpu.lock timeout 480 .venv/bin/python bench/train_operator.py --part real --seed 0
  ... --part ablations --seed 0, --part generated --seed 0,1,2, --part fewshot --seed 0,1,2, --part speed,
  --part merge (several parts and seeds may be given comma-separated; each job stays under 8 minutes)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from _common import RESULTS, commit, locked, machine, target, today, write_results
from icmlkit.lib.core.io import write_json
from icmlkit.lib.train_operator.config import DarcyConfig, FewShotConfig, ModelConfig, TrainConfig
from icmlkit.lib.train_operator.data import fieldset, read_fields
from icmlkit.lib.train_operator.demo import darcy_files
from icmlkit.lib.train_operator.fewshot import few_shot
from icmlkit.lib.train_operator.solvers import generate_darcy
from icmlkit.lib.train_operator.train import Normaliser, OperatorModel, set_threads, superres, train

ARCH = dict(width=64, heads=4, layers=4, bases=32)
EPOCHS, NTRAIN, BATCH, LR, FNO_MODES = 16, 500, 8, 2e-3, 6
FULL = dict(epochs=300, ntrain=1000)  # the protocol for part real-full
GEN = dict(solve=129, train=33, tests=(33, 65, 129), n_train=300, n_test=50, seed=7)
PARTS = RESULTS / "train_operator_parts.json"
ABLATIONS = {"funcattn-conv": dict(model="funcattn-conv"), "funcattn-fourier": dict(model="funcattn", basis="fourier"),
             "funcattn-no-inverse": dict(model="funcattn", inverse=False),
             "funcattn-shared": dict(model="funcattn", shared=True)}


def fit_eval(name: str, tr, tests, tc: TrainConfig, seed: int, checkpointer=None, save=None, **kw) -> dict:
    """Train, then evaluate on ``tests`` (the first at the training resolution) with ``superres``: the
    zero-shot errors, and on nested grids of the same samples the first grid's prediction interpolated
    (``interp_errors``, None where the grids are not nested). ``save``: also write the final model there."""
    t0 = time.perf_counter()
    kw.setdefault("model", name)
    res = train(ModelConfig(**{**ARCH, "modes": FNO_MODES, **kw}), tc, tr, None, seed=seed, checkpointer=checkpointer)
    if save is not None:
        res.model.save(save)
    sr = superres(res.model, tests).rows
    errs = [r["rel_l2_x100"] for r in sr]
    return {"model": name, "seed": seed, "params": res.summary["params"], "errors": errs,
            "interp_errors": [r["interp_rel_l2_x100"] for r in sr],
            "seconds_per_epoch": res.summary["seconds_per_epoch"], "seconds": time.perf_counter() - t0,
            "epochs": tc.epochs, "n_train": res.summary["n_train"], "resumed_from": res.summary["resumed_from"],
            "final_train_rel_l2": res.summary["final_train_rel_l2"]}


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
                      if all(r.get("final_train_rel_l2") is not None for r in rs) else None,  # older parts lack it
                      "ratios_per_seed": [[float(row[i] / row[0]) for i in range(1, len(names))] for row in e],
                      **_interp_means(rs, names),
                      "seconds_per_epoch": float(np.mean([r["seconds_per_epoch"] for r in rs]))}
    return out


def _interp_means(rs: list[dict], names: list[str]) -> dict:
    """Mean error of the training-resolution prediction interpolated onto each finer test grid, where
    every run of the model recorded it (older parts did not)."""
    out = {}
    for i, n in enumerate(names[1:], start=1):
        vals = [r.get("interp_errors", [None] * len(names))[i] for r in rs]
        if all(v is not None for v in vals):
            out[f"interp_rel_l2_x100_{n}"] = float(np.mean(vals))
    return out


@torch.no_grad()
def inference_seconds(sizes=(16, 32, 64, 128), reps=3) -> dict:
    """Seconds per sample of a forward pass at s x s points (the best of ``reps``), fresh nets of the
    benchmark's config (times do not depend on the weights)."""
    out = {}
    x16 = (np.random.default_rng(0).random((8, 16, 16)) > 0.5).astype(np.float32)
    tr = fieldset(x16, x16.copy(), None)
    for name in ("funcattn", "transolver", "fno"):
        cfg = ModelConfig(model=name, modes=FNO_MODES, **ARCH).to_dict()
        if name == "fno":
            from icmlkit.lib.train_operator.nets import matched_fno_width
            cfg["fno_width"] = matched_fno_width(cfg, 1, 1, 2)
        torch.manual_seed(0)
        model = OperatorModel(cfg, 1, 1, 2, Normaliser.fit(tr), [0, 0], [1, 1], "16x16")
        row = {}
        for s in sizes:
            x = (np.random.default_rng(0).random((2, s, s)) > 0.5).astype(np.float32)
            fs = fieldset(x, None, None)
            best = None
            for _ in range(reps):
                t0 = time.perf_counter()
                model.predict(fs, torch.device("cpu"), batch=2)
                dt = (time.perf_counter() - t0) / 2
                best = dt if best is None else min(best, dt)
            row[s * s] = best
        slope = float(np.polyfit(np.log(list(row))[1:], np.log(list(row.values()))[1:], 1)[0])
        out[name] = {"seconds_per_sample": {str(k): v for k, v in row.items()}, "loglog_slope": slope}
    return out


def real_sets():
    files = darcy_files()
    if files is None:
        raise SystemExit("data/darcy is missing")
    return read_fields(files["train_16"]), [read_fields(files["test_16"]), read_fields(files["test_32"])]


def generated_sets():
    """The generated Darcy sets (one solve at 129 nodes, subsampled), cached in outputs/ (git-ignored)."""
    cache = RESULTS.parent.parent / "outputs" / "bench-cache" / "train_operator_darcy129.npz"
    cache.parent.mkdir(parents=True, exist_ok=True)
    n = GEN["n_train"] + GEN["n_test"]
    if cache.is_file():
        z = dict(np.load(cache))
        seconds = float(z.pop("seconds"))
    else:
        t0 = time.perf_counter()
        full = generate_darcy(DarcyConfig(n=n, solve_resolution=GEN["solve"], resolution=GEN["solve"]),
                              seed=GEN["seed"]).arrays
        seconds = time.perf_counter() - t0
        z = {"x": full["x"], "y": full["y"]}
        np.savez(cache, x=z["x"], y=z["y"], seconds=seconds)
    out = {}
    for r in GEN["tests"]:
        step = (GEN["solve"] - 1) // (r - 1)
        out[r] = (z["x"][:, :, ::step, ::step], z["y"][:, :, ::step, ::step])
    ntr = GEN["n_train"]
    gtr = fieldset(out[GEN["train"]][0][:ntr], out[GEN["train"]][1][:ntr], None)
    gte = [fieldset(out[r][0][ntr:], out[r][1][ntr:], None) for r in GEN["tests"]]
    return gtr, gte, seconds


def quadrature_probe(seed: int = 0) -> dict:
    """Why zero-shot error grows (part ``probe``): the saved generated-full FuncAttn model of ``seed``
    (paper's uniform point weights) at 65 and 129, against its own 33 prediction at the shared nodes
    (self-consistency) and against the truth, once as trained and once with every fine node weighted by
    1 / (the number of fine nodes nearest the same 33 node), which gives each 33 node's neighbourhood the
    share of T it had at 33; and once with the 33 input repeated blockwise onto the fine grid (uniform
    weights), which rules the finer input in or out. If the growth comes from the edge nodes' shrinking
    share under the uniform sum, the coarse-share numbers drop."""
    from icmlkit.lib.train_operator import nets
    from icmlkit.lib.train_operator.train import load_model, rel_l2

    path = RESULTS.parent.parent / "outputs" / "bench-cache" / f"train_operator_generated_full_{seed}_funcattn.safetensors"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run --part generated-full --seed {seed} (--refresh) first")
    model = load_model(path)
    _, tests, _ = generated_sets()
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


def load_parts() -> dict:
    return json.loads(PARTS.read_text()) if PARTS.is_file() else {}


def save_part(part: str, key: str, value) -> None:
    """Add one row to the parts file; a lock file serialises parts run side by side."""
    with locked(PARTS.with_suffix(".lock")):
        parts = load_parts()
        parts.setdefault(part, {})[key] = {"value": value, "date": today(), "commit": commit(), "machine": machine()}
        write_json(PARTS, parts)


def import_committed(path: Path) -> None:
    """Seed the parts file with the real-Darcy runs of an earlier single-run results file (the same
    code, settings and seeds): part ``real``, the Conv2d variant of part ``ablations``, and its inference
    timings as part ``speed`` when there is none yet."""
    old = json.loads(path.read_text())
    real = old["results"]["real_darcy"]
    stamp = {"date": old["date"], "commit": old["commit"], "machine": old["machine"], "imported_from": str(path)}
    parts = load_parts()
    for model, v in real.items():
        part = "real" if model in ("funcattn", "transolver", "fno") else "ablations"
        for i, errs in enumerate(v["per_seed"]):
            seed = old["results"]["settings"]["seeds"][i]
            key = f"{seed}:{model}"
            run = {"model": model, "seed": seed, "params": v["params"], "errors": errs,
                   "seconds_per_epoch": v["seconds_per_epoch"], "seconds": None}
            parts.setdefault(part, {})[key] = {"value": [run], **stamp}
    if "speed" in old["results"] and "speed" not in parts:
        parts["speed"] = {"0": {"value": old["results"]["speed"]["inference"], **stamp}}
    write_json(PARTS, parts)


PART_NAMES = ("real", "real-full", "ablations", "generated", "generated-conv", "generated-full", "generated-trapezoid",
              "probe", "fewshot", "speed", "merge")
# part generated-trapezoid: the generated-full protocol with trapezoid point weights in T (our addition)
TRAPEZOID = {"funcattn-trapezoid": dict(model="funcattn", quadrature="trapezoid"),
             "transolver-trapezoid": dict(model="transolver", quadrature="trapezoid")}


def run_part(part: str, seed: int, models: list[str] | None = None, refresh: bool = False) -> None:
    set_threads("cpu", 1)
    tc = TrainConfig(epochs=EPOCHS, batch=BATCH, ntrain=NTRAIN, val_fraction=0, lr=LR)
    t0 = time.perf_counter()
    if part in ("real", "ablations"):
        tr, te = real_sets()
        todo = {m: dict(model=m) for m in ("funcattn", "transolver", "fno")} if part == "real" else ABLATIONS
        todo = {m: kw for m, kw in todo.items() if models is None or m in models}
        runs = []
        for name, kw in todo.items():
            runs.append(fit_eval(name, tr, te, tc, seed, **kw))
            print(f"[{time.perf_counter() - t0:.0f}s] {part} {name} seed {seed}: {runs[-1]['errors']}", file=sys.stderr)
        save_part(part, f"{seed}:{','.join(todo)}", runs)
    elif part in ("real-full", "generated-full", "generated-trapezoid"):
        from icmlkit.lib.core.checkpoint import Checkpointer

        if part == "real-full":
            tr, te = real_sets()
            ftc = TrainConfig(epochs=FULL["epochs"], batch=BATCH, ntrain=FULL["ntrain"], val_fraction=0, lr=LR)
        else:  # every generated training sample (GEN["n_train"]), 300 epochs
            tr, te, _ = generated_sets()
            ftc = TrainConfig(epochs=FULL["epochs"], batch=BATCH, val_fraction=0, lr=LR)
        stored = load_parts().get(part, {})
        todo = TRAPEZOID if part == "generated-trapezoid" else {m: {} for m in ("funcattn", "transolver", "fno")}
        for name, kw in [(m, kw) for m, kw in todo.items() if models is None or m in models]:
            if f"{seed}:{name}" in stored and not refresh:
                print(f"{part} {name} seed {seed}: stored, kept", file=sys.stderr)
                continue
            stem = {"real-full": "full", "generated-full": "generated_full"}.get(part, part.replace("-", "_"))
            ckpt = RESULTS.parent.parent / "outputs" / "bench-cache" / f"train_operator_{stem}_{seed}_{name}.pt"
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            ck = Checkpointer(ckpt, every=10, resume=ckpt.is_file())
            run = fit_eval(name, tr, te, ftc, seed, checkpointer=ck, save=ckpt.with_suffix(".safetensors"), **kw)
            old = stored.get(f"{seed}:{name}")
            if old is not None and not np.allclose(old["value"][0]["errors"], run["errors"], rtol=1e-5):
                raise SystemExit(f"{part} {name} seed {seed}: the rerun from the checkpoint gives {run['errors']}, "
                                 f"the stored run {old['value'][0]['errors']}")
            print(f"[{time.perf_counter() - t0:.0f}s] {part} {name} seed {seed}: {run['errors']}", file=sys.stderr)
            save_part(part, f"{seed}:{name}", [run])
    elif part in ("generated", "generated-conv"):
        gtr, gte, gen_seconds = generated_sets()
        gtc = TrainConfig(epochs=EPOCHS, batch=BATCH, val_fraction=0, lr=LR)
        models = ("funcattn", "transolver", "fno") if part == "generated" else ("funcattn-conv",)
        runs = []
        for m in models:
            runs.append(fit_eval(m, gtr, gte, gtc, seed))
            print(f"[{time.perf_counter() - t0:.0f}s] {part} {m} seed {seed}: {runs[-1]['errors']}", file=sys.stderr)
        save_part(part, str(seed), {"runs": runs, "generate_seconds": gen_seconds})
    elif part == "fewshot":
        fs = few_shot(FewShotConfig(steps=1500, test_tasks=500), seed=seed).summary
        print(f"[{time.perf_counter() - t0:.0f}s] few-shot seed {seed}: {fs}", file=sys.stderr)
        save_part(part, str(seed), fs)
    elif part == "probe":
        pr = quadrature_probe(seed)
        print(f"probe seed {seed}: {pr}", file=sys.stderr)
        save_part(part, str(seed), pr)
    elif part == "speed":
        inf = inference_seconds()
        save_part(part, "0", inf)
    else:
        raise SystemExit(f"unknown part {part}")


def merge() -> dict | None:
    parts = load_parts()
    results: dict = {"settings": {"epochs": EPOCHS, "ntrain": NTRAIN, "batch": BATCH, "lr": LR, "arch": ARCH,
                                  "fno_modes": FNO_MODES, "threads": 1, "generated": GEN},
                     "parts": {p: {k: {kk: v[kk] for kk in ("date", "commit")} | {"load_average_1min":
                                                                                   v["machine"]["load_average_1min"]}
                                   for k, v in d.items()} for p, d in parts.items()}}
    targets: dict = {}

    def runs_of(part):
        out = []
        for v in parts.get(part, {}).values():
            val = v["value"]
            out += val["runs"] if isinstance(val, dict) else val
        return out

    real = summarise(runs_of("real") + runs_of("ablations"), ["16", "32"])
    results["real_darcy"] = real
    gen = summarise(runs_of("generated") + runs_of("generated-conv"), [str(r) for r in GEN["tests"]])
    gsec = [v["value"]["generate_seconds"] for v in parts.get("generated", {}).values()]
    results["generated_darcy"] = {"models": gen, "n_train": GEN["n_train"], "n_test": GEN["n_test"],
                                  "solve_resolution": GEN["solve"], "train_resolution": GEN["train"],
                                  "generate_seconds": gsec[0] if gsec else None}
    gfull = summarise(runs_of("generated-full") + runs_of("generated-trapezoid"), [str(r) for r in GEN["tests"]])
    results["generated_darcy_full"] = {"epochs": FULL["epochs"], "n_train": GEN["n_train"], "models": gfull}
    if parts.get("probe"):
        results["quadrature_probe"] = {k: v["value"] for k, v in sorted(parts["probe"].items())}
    fs = [v["value"] for _, v in sorted(parts.get("fewshot", {}).items())]
    results["few_shot"] = {"per_seed": fs}
    if "funcattn" in real and "transolver" in real:
        fa, trn = real["funcattn"], real["transolver"]
        ns = len(fa["seeds"])
        targets["funcattn_le_transolver_16"] = target(
            fa["rel_l2_x100_16"], trn["rel_l2_x100_16"], fa["rel_l2_x100_16"] <= trn["rel_l2_x100_16"],
            f"rel L2 x100 at 16x16, mean of {ns} seeds ({fa['seeds']}), {EPOCHS} epochs on {NTRAIN} samples "
            "(the issue asks ~300 epochs on 1000)")
        r = fa["rel_l2_x100_32"] / fa["rel_l2_x100_16"]
        targets["zero_shot_32_le_1.3x_16"] = target(r, 1.3, r <= 1.3,
                                                    f"FuncAttn error at 32x32 / at 16x16, no retraining, mean of {ns} seeds")
    full = summarise(runs_of("real-full"), ["16", "32"])
    results["real_darcy_full"] = {"epochs": FULL["epochs"], "ntrain": FULL["ntrain"], "models": full}
    if "funcattn" in full and "transolver" in full:
        fa, trn = full["funcattn"], full["transolver"]
        targets["funcattn_le_transolver_16_full_protocol"] = target(
            fa["rel_l2_x100_16"], trn["rel_l2_x100_16"], fa["rel_l2_x100_16"] <= trn["rel_l2_x100_16"],
            f"rel L2 x100 at 16x16, {FULL['epochs']} epochs on {FULL['ntrain']} samples (the issue's protocol), "
            f"seeds {fa['seeds']} (Transolver seeds {trn['seeds']})")
        r = fa["rel_l2_x100_32"] / fa["rel_l2_x100_16"]
        targets["zero_shot_32_le_1.3x_16_full_protocol"] = target(
            r, 1.3, r <= 1.3, f"FuncAttn 32x32 / 16x16 error, {FULL['epochs']} epochs on {FULL['ntrain']} samples, "
            f"seeds {fa['seeds']}")
    for name in ABLATIONS:
        if name in real:
            v = real[name]
            targets[f"{name.replace('funcattn-', '')}_variant_reported"] = target(
                v["rel_l2_x100_32"] / v["rel_l2_x100_16"], None, True,
                f"{name}: 32x32 / 16x16 error ratio, 16x16 error {v['rel_l2_x100_16']:.2f}, seeds {v['seeds']} "
                "(reported, no threshold)")
    full_how = f"{FULL['epochs']} epochs (the issue's protocol)"
    for models_, suffix, how, fa_name, trn_name in (
            (gen, "", f"{EPOCHS} epochs", "funcattn", "transolver"),
            (gfull, "_full_protocol", full_how, "funcattn", "transolver"),
            (gfull, "_full_protocol_trapezoid", full_how + ", trapezoid weights in T (our addition)",
             "funcattn-trapezoid", "transolver-trapezoid")):
        if fa_name not in models_:
            continue
        g = models_[fa_name]
        t = [str(r) for r in GEN["tests"]]
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
    if fs:
        ratio = float(np.mean([f["mse_funcattn"] for f in fs]) / np.mean([f["mse_softmax"] for f in fs]))
        results["few_shot"].update({"mse_funcattn": float(np.mean([f["mse_funcattn"] for f in fs])),
                                    "mse_softmax": float(np.mean([f["mse_softmax"] for f in fs])),
                                    "mse_ridge": float(np.mean([f["mse_ridge"] for f in fs])), "ratio": ratio,
                                    "context": fs[0]["context"]})
        targets["few_shot_mse_le_0.1x_softmax"] = target(
            ratio, 0.1, ratio <= 0.1, f"query MSE ratio FuncAttn (sliced, softmax over points) / softmax, K = 4, "
            f"mean MSE over {len(fs)} seeds")
    if "speed" in parts and all(m in real for m in ("funcattn", "transolver", "fno")):
        inf = parts["speed"]["0"]["value"]
        ep = {m: real[m]["seconds_per_epoch"] for m in ("funcattn", "transolver", "fno")}
        big = str(max(int(k) for k in inf["funcattn"]["seconds_per_sample"]))
        sp = {"seconds_per_epoch": ep, "epoch_ratio_funcattn_over_transolver": ep["funcattn"] / ep["transolver"],
              "epoch_ratio_funcattn_over_fno": ep["funcattn"] / ep["fno"], "inference": inf,
              "inference_ratio_funcattn_over_transolver": inf["funcattn"]["seconds_per_sample"][big]
              / inf["transolver"]["seconds_per_sample"][big],
              "inference_ratio_funcattn_over_fno": inf["funcattn"]["seconds_per_sample"][big]
              / inf["fno"]["seconds_per_sample"][big]}
        results["speed"] = sp
        targets["speed_ratios_reported"] = target(
            [sp["epoch_ratio_funcattn_over_transolver"], sp["epoch_ratio_funcattn_over_fno"],
             sp["inference_ratio_funcattn_over_transolver"], sp["inference_ratio_funcattn_over_fno"]], None, True,
            "epoch time FuncAttn/Transolver, FuncAttn/FNO (real part), inference at 128^2 FuncAttn/Transolver, "
            "FuncAttn/FNO (speed part); reported, no threshold")
        targets["time_linear_in_n"] = target(inf["funcattn"]["loglog_slope"], 1.2, inf["funcattn"]["loglog_slope"] <= 1.2,
                                             "slope of log(inference time) vs log(n) for FuncAttn from 32^2 to 128^2")
    out = {"tool": "train-operator", "date": today(), "commit": commit(), "machine": machine(),
           "command": "bench/train_operator.py --part real|real-full|ablations|generated|generated-conv|generated-full|"
                      "fewshot --seed S, "
                      "--part speed, --part merge (each under flock /work/notes/cpu.lock timeout 480)",
           "results": results, "targets": targets}
    md = markdown(out)
    write_results("train_operator", out, md)
    return out


def _fmt(v):
    return ", ".join(f"{x:.3f}" for x in v) if isinstance(v, list) else (f"{v:.3f}" if isinstance(v, float) else str(v))


def markdown(out: dict) -> str:
    r = out["results"]
    s = r["settings"]
    lines = [f"# train-operator benchmark ({out['date']}, {out['machine']['cpu']}, {out['machine']['cores']} cores, "
             "1 torch thread; run in parts, see `parts` in the JSON)", "",
             f"Settings: {s['epochs']} epochs, {s['ntrain']} training samples, batch {s['batch']}, lr {s['lr']}, "
             "C = 64, 4 heads, 4 blocks, k = 32; FNO modes 6, width matched.", "",
             "## Real Darcy (neuraloperator 0.3.0 files): train 16x16, relative L2 x 100 (mean ± sd over seeds)", "",
             "| model | params | seeds | 16x16 | 32x32 zero-shot | ratio 32/16 | s/epoch |", "|---|---|---|---|---|---|---|"]
    for m, v in r["real_darcy"].items():
        lines.append(f"| {m} | {v['params']} | {len(v['seeds'])} | {v['rel_l2_x100_16']:.2f} ± {v['rel_l2_x100_16_std']:.2f} "
                     f"| {v['rel_l2_x100_32']:.2f} ± {v['rel_l2_x100_32_std']:.2f} | "
                     f"{v['rel_l2_x100_32'] / v['rel_l2_x100_16']:.3f} | {v['seconds_per_epoch']:.2f} |")
    rf = r.get("real_darcy_full", {})
    if rf.get("models"):
        lines += ["", f"## Real Darcy, the issue's protocol: {rf['epochs']} epochs on {rf['ntrain']} samples "
                  "(train 16x16; relative L2 x 100, mean ± sd over seeds)", "",
                  "| model | params | seeds | 16x16 | 32x32 zero-shot | ratio 32/16 | final train rel L2 | s/epoch |",
                  "|---|---|---|---|---|---|---|---|"]
        for m, v in rf["models"].items():
            lines.append(f"| {m} | {v['params']} | {v['seeds']} | {v['rel_l2_x100_16']:.2f} ± "
                         f"{v['rel_l2_x100_16_std']:.2f} | {v['rel_l2_x100_32']:.2f} ± {v['rel_l2_x100_32_std']:.2f} | "
                         f"{v['rel_l2_x100_32'] / v['rel_l2_x100_16']:.3f} | {v['final_train_rel_l2']:.4f} | "
                         f"{v['seconds_per_epoch']:.2f} |")
    g = r["generated_darcy"]
    for title, models_ in ((f"{s['epochs']} epochs", g["models"]),
                           (f"the issue's protocol, {r['generated_darcy_full']['epochs']} epochs",
                            r["generated_darcy_full"]["models"])):
        if not models_:
            continue
        lines += ["", f"## Generated Darcy, {title} (solved at {g['solve_resolution']}x{g['solve_resolution']} nodes; "
                  f"train {g['n_train']} at {g['train_resolution']}, test {g['n_test']} at 33, 65, 129, subsampled)", "",
                  "| model | seeds | 33x33 | 65x65 | 129x129 | ratio 65/33 | ratio 129/33 | 33 interpolated to 65 "
                  "| to 129 | s/epoch |", "|---|---|---|---|---|---|---|---|---|---|"]
        for m, v in models_.items():
            interp = " | ".join(f"{v[k]:.2f}" if k in v else "-" for k in ("interp_rel_l2_x100_65",
                                                                            "interp_rel_l2_x100_129"))
            lines.append(f"| {m} | {v['seeds']} | {v['rel_l2_x100_33']:.2f} ± {v['rel_l2_x100_33_std']:.2f} | "
                         f"{v['rel_l2_x100_65']:.2f} ± {v['rel_l2_x100_65_std']:.2f} | "
                         f"{v['rel_l2_x100_129']:.2f} ± {v['rel_l2_x100_129_std']:.2f} | "
                         f"{v['rel_l2_x100_65'] / v['rel_l2_x100_33']:.3f} | "
                         f"{v['rel_l2_x100_129'] / v['rel_l2_x100_33']:.3f} | {interp} | {v['seconds_per_epoch']:.2f} |")
    for seed, pr in r.get("quadrature_probe", {}).items():
        lines += ["", f"## Why the zero-shot error grows: generated-full FuncAttn, seed {seed} (part `probe`)", "",
                  "Self-consistency: the fine prediction at the nodes shared with 33x33 against the 33x33 prediction "
                  "(relative L2 x 100). Coarse-share weights: every fine node weighted by 1 / (fine nodes nearest the "
                  "same 33 node) in T, so each 33 node's neighbourhood keeps the share of T it had in training.", "",
                  "| grid | self-consistency, as trained | 33 input blockwise | with coarse-share weights "
                  "| error, as trained | 33 input blockwise | with coarse-share weights |", "|---|---|---|---|---|---|---|"]
        for res, v in pr.items():
            cols = ("uniform", "uniform_blocky_input", "coarse_share")
            lines.append(f"| {res}x{res} | " + " | ".join(f"{v[c]['self_consistency_x100']:.2f}" for c in cols) + " | "
                         + " | ".join(f"{v[c]['rel_l2_x100']:.2f}" for c in cols) + " |")
    fs = r["few_shot"]
    if fs.get("per_seed"):
        lines += ["", f"## Few-shot sine (K = {fs['context']}), query MSE, mean over {len(fs['per_seed'])} seeds", "",
                  f"FuncAttn (sliced bases, softmax over points, ridge 1e-4) {fs['mse_funcattn']:.4f}; ridge over the "
                  f"context points (Intention-style) {fs['mse_ridge']:.4f}; softmax cross-attention {fs['mse_softmax']:.4f}; "
                  f"ratio FuncAttn / softmax {fs['ratio']:.4f}."]
    sp = r.get("speed")
    if sp:
        lines += ["", "## Speed (CPU, 1 thread)", "",
                  f"Epoch time ratio FuncAttn/Transolver {sp['epoch_ratio_funcattn_over_transolver']:.2f}, "
                  f"FuncAttn/FNO {sp['epoch_ratio_funcattn_over_fno']:.2f}; inference at 128^2: "
                  f"FuncAttn/Transolver {sp['inference_ratio_funcattn_over_transolver']:.2f}, "
                  f"FuncAttn/FNO {sp['inference_ratio_funcattn_over_fno']:.2f}.", "",
                  "| model | " + " | ".join(f"n={k}" for k in sp["inference"]["funcattn"]["seconds_per_sample"]) +
                  " | log-log slope |", "|---" * (2 + len(sp["inference"]["funcattn"]["seconds_per_sample"])) + "|"]
        for m, v in sp["inference"].items():
            lines.append(f"| {m} | " + " | ".join(f"{t * 1e3:.1f} ms" for t in v["seconds_per_sample"].values())
                         + f" | {v['loglog_slope']:.2f} |")
    lines += ["", "## Targets", "", "| target | value | threshold | met | note |", "|---|---|---|---|---|"]
    for k, t in out["targets"].items():
        lines.append(f"| {k} | {_fmt(t['value'])} | {_fmt(t['threshold'])} | {'yes' if t['met'] else 'NO'} | {t['note']} |")
    lines += ["", "Parts (date, commit, load average at the start): " + "; ".join(
        f"{p} {k}: {v['date']} {str(v['commit'])[:8]} load {v['load_average_1min']}"
        for p, d in r["parts"].items() for k, v in sorted(d.items()))]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", default="merge",
                    help=f"{' | '.join(PART_NAMES)}, or several "
                         "comma-separated (run in order)")
    ap.add_argument("--seed", default="0", help="a seed, or several comma-separated")
    ap.add_argument("--models", default=None, help="a comma-separated subset of the part's models (real, ablations, *-full, generated-trapezoid).")
    ap.add_argument("--refresh", action="store_true",
                    help="real-full / generated-full: rerun stored model runs (from their checkpoints, which must "
                         "reproduce the stored errors) to add what newer code records, e.g. interp_errors.")
    ap.add_argument("--import-committed", default=None, metavar="JSON",
                    help="Seed the parts with the real-Darcy runs (and timings) of an earlier results file, then merge.")
    args = ap.parse_args(argv)
    if args.import_committed:
        import_committed(Path(args.import_committed))
    else:
        for part in args.part.split(","):
            if part not in PART_NAMES:
                ap.error(f"--part {part!r}: one of {', '.join(PART_NAMES)}")
            if part == "merge":
                continue
            for seed in [int(x) for x in args.seed.split(",")]:
                run_part(part, seed, args.models.split(",") if args.models else None, args.refresh)
    out = merge()
    print(markdown(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
