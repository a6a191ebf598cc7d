"""Benchmark of train-operator: FuncAttn vs Transolver vs a parameter-matched FNO on Darcy flow.

Measured side by side in one run (sized for <= 10 minutes on the shared 2-core machine, so far fewer
epochs and training samples than the paper's 500 epochs, and fewer seeds than the issue's 3 where
noted in the results):

1. real Darcy (data/darcy, neuraloperator 0.3.0): train at 16x16, test at 16x16 and zero-shot at 32x32;
   FuncAttn (Linear projections, 4 blocks, C = 64, 4 heads, k = 32), Transolver (the identical net with
   softmax over the slice tokens), FNO (our own, width matched to FuncAttn's parameter count), and the
   Conv2d-projection variant; relative L2 x 100 per sample, averaged, on decoded outputs;
2. generated Darcy (our FD solver): solved at 65x65 and subsampled to 17 (train), 33 and 65 (test):
   a 2x-scaled-down version of the issue's 128 -> 32 / 64 / 128 (a solve at 129 and training at 33 do
   not fit the time budget);
3. few-shot sine regression with 4 context points: FuncAttn's ridge map vs softmax cross-attention;
4. speed: seconds per epoch (from the training runs) and inference seconds per sample at 16^2 ... 128^2
   points, as ratios to Transolver and FNO, and the slope of log time vs log n (1 = linear).

Writes bench/results/train_operator.json and bench/results/train_operator.md.
Run:  flock /work/notes/cpu.lock timeout 900 .venv/bin/python bench/train_operator.py [--quick]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from _common import commit, machine, target, today, write_results
from icmlkit.lib.neuralop.config import DarcyConfig, FewShotConfig, ModelConfig, TrainConfig
from icmlkit.lib.neuralop.data import fieldset, read_fields
from icmlkit.lib.neuralop.demo import darcy_files
from icmlkit.lib.neuralop.fewshot import few_shot
from icmlkit.lib.neuralop.solvers import generate_darcy
from icmlkit.lib.neuralop.train import evaluate, set_threads, train

ARCH = dict(width=64, heads=4, layers=4, bases=32)


def fit_eval(model: str, tr, tests, tc: TrainConfig, seed: int, **kw) -> dict:
    t0 = time.perf_counter()
    res = train(ModelConfig(model=model, **{**ARCH, **kw}), tc, tr, None, seed=seed)
    errs = [evaluate(res.model, te).summary["rel_l2_x100"] for te in tests]
    return {"model": model, "seed": seed, "params": res.summary["params"], "errors": errs,
            "seconds_per_epoch": res.summary["seconds_per_epoch"], "seconds": time.perf_counter() - t0,
            "net": res.model}


def summarise(runs: list[dict], names: list[str]) -> dict:
    out = {}
    for model in sorted({r["model"] for r in runs}):
        rs = [r for r in runs if r["model"] == model]
        e = np.array([r["errors"] for r in rs])
        out[model] = {"seeds": len(rs), "params": rs[0]["params"],
                      **{f"rel_l2_x100_{n}": float(e[:, i].mean()) for i, n in enumerate(names)},
                      **{f"rel_l2_x100_{n}_std": float(e[:, i].std()) for i, n in enumerate(names)},
                      "per_seed": e.tolist(), "seconds_per_epoch": float(np.mean([r["seconds_per_epoch"] for r in rs]))}
    return out


@torch.no_grad()
def inference_seconds(net_by_model: dict, sizes=(16, 32, 64, 128), reps=3) -> dict:
    """Seconds per sample of a forward pass at s x s points (the best of ``reps``)."""
    out = {}
    for name, model in net_by_model.items():
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="A smoke run (minutes are not comparable).")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--ntrain", type=int, default=None)
    args = ap.parse_args(argv)
    set_threads("cpu", 1)
    t_start = time.perf_counter()
    epochs = args.epochs or (1 if args.quick else 16)
    ntrain = args.ntrain or (32 if args.quick else 500)
    seeds = (0,) if args.quick else (0, 1, 2)
    tc = TrainConfig(epochs=epochs, batch=8, ntrain=ntrain, val_fraction=0, lr=2e-3)
    results: dict = {"settings": {"epochs": epochs, "ntrain": ntrain, "batch": 8, "lr": 2e-3, "seeds": list(seeds),
                                  "arch": ARCH, "fno_modes": 6, "threads": 1}}

    # 1. real Darcy ---------------------------------------------------------------------------------
    files = darcy_files()
    if files is None:
        print("data/darcy is missing", file=sys.stderr)
        return 1
    tr = read_fields(files["train_16"])
    te = [read_fields(files["test_16"]), read_fields(files["test_32"])]
    runs = []
    for seed in seeds:
        for model in ("funcattn", "transolver", "fno"):
            r = fit_eval(model, tr, te, tc, seed, modes=6)
            print(f"[{time.perf_counter() - t_start:.0f}s] real {model} seed {seed}: {r['errors']}", file=sys.stderr)
            runs.append(r)
    conv = fit_eval("funcattn-conv", tr, te, tc, seeds[0])
    print(f"[{time.perf_counter() - t_start:.0f}s] real conv: {conv['errors']}", file=sys.stderr)
    real = summarise(runs + [conv], ["16", "32"])
    results["real_darcy"] = real
    nets = {m: next(r["net"] for r in runs if r["model"] == m) for m in ("funcattn", "transolver", "fno")}

    # 2. generated Darcy -------------------------------------------------------------------------------
    n_gen_train, n_gen_test = (16, 4) if args.quick else (300, 50)
    gen = {}
    t0 = time.perf_counter()
    for res_ in (17, 33, 65):
        gen[res_] = generate_darcy(DarcyConfig(n=n_gen_train + n_gen_test, solve_resolution=65, resolution=res_),
                                   seed=7).arrays
    gen_seconds = time.perf_counter() - t0
    gtr = fieldset(gen[17]["x"][:n_gen_train], gen[17]["y"][:n_gen_train], None)
    gte = [fieldset(gen[r]["x"][n_gen_train:], gen[r]["y"][n_gen_train:], None) for r in (17, 33, 65)]
    gtc = TrainConfig(epochs=epochs, batch=8, val_fraction=0, lr=2e-3)
    gruns = [fit_eval(m, gtr, gte, gtc, seeds[0], modes=6) for m in ("funcattn", "transolver", "funcattn-conv", "fno")]
    for r in gruns:
        print(f"[{time.perf_counter() - t_start:.0f}s] generated {r['model']}: {r['errors']}", file=sys.stderr)
    generated = summarise(gruns, ["17", "33", "65"])
    results["generated_darcy"] = {"models": generated, "n_train": n_gen_train, "n_test": n_gen_test,
                                  "solve_resolution": 65, "generate_seconds": gen_seconds}

    # 3. few-shot --------------------------------------------------------------------------------------
    fs = few_shot(FewShotConfig(steps=50 if args.quick else 1500, test_tasks=500), seed=0).summary
    results["few_shot"] = fs
    print(f"[{time.perf_counter() - t_start:.0f}s] few-shot: {fs}", file=sys.stderr)

    # 4. speed -----------------------------------------------------------------------------------------
    inf = inference_seconds(nets, sizes=(16, 32, 48) if args.quick else (16, 32, 64, 128))
    ep = {m: real[m]["seconds_per_epoch"] for m in ("funcattn", "transolver", "fno")}
    speed = {"seconds_per_epoch": ep,
             "epoch_ratio_funcattn_over_transolver": ep["funcattn"] / ep["transolver"],
             "epoch_ratio_funcattn_over_fno": ep["funcattn"] / ep["fno"],
             "inference": inf}
    big = str(max(int(k) for k in inf["funcattn"]["seconds_per_sample"]))
    speed["inference_ratio_funcattn_over_transolver"] = (inf["funcattn"]["seconds_per_sample"][big]
                                                         / inf["transolver"]["seconds_per_sample"][big])
    speed["inference_ratio_funcattn_over_fno"] = (inf["funcattn"]["seconds_per_sample"][big]
                                                  / inf["fno"]["seconds_per_sample"][big])
    results["speed"] = speed

    # targets ------------------------------------------------------------------------------------------
    fa, trn = real["funcattn"], real["transolver"]
    g = generated
    targets = {
        "funcattn_le_transolver_16": target(fa["rel_l2_x100_16"], trn["rel_l2_x100_16"],
                                            fa["rel_l2_x100_16"] <= trn["rel_l2_x100_16"],
                                            f"rel L2 x100 at 16x16, mean of {len(seeds)} seeds, {epochs} epochs "
                                            f"on {ntrain} samples (the issue asks ~300 epochs on 1000)"),
        "zero_shot_32_le_1.3x_16": target(fa["rel_l2_x100_32"] / fa["rel_l2_x100_16"], 1.3,
                                          fa["rel_l2_x100_32"] <= 1.3 * fa["rel_l2_x100_16"],
                                          "FuncAttn error at 32x32 / at 16x16, no retraining"),
        "conv2d_variant_reported": target(real["funcattn-conv"]["rel_l2_x100_32"] / real["funcattn-conv"]["rel_l2_x100_16"],
                                          None, True, "Conv2d-projection FuncAttn: 32x32 / 16x16 error ratio "
                                          "(reported, expected to degrade; one seed)"),
        "generated_zero_shot_33_65_le_1.3x_17": target(
            [g["funcattn"]["rel_l2_x100_33"] / g["funcattn"]["rel_l2_x100_17"],
             g["funcattn"]["rel_l2_x100_65"] / g["funcattn"]["rel_l2_x100_17"]], 1.3,
            max(g["funcattn"]["rel_l2_x100_33"], g["funcattn"]["rel_l2_x100_65"]) <= 1.3 * g["funcattn"]["rel_l2_x100_17"],
            "generated Darcy, solved at 65, train 17 -> test 33 and 65 (2x scaled down from 129 -> 33/65/129); one seed"),
        "generated_funcattn_le_transolver_17": target(g["funcattn"]["rel_l2_x100_17"], g["transolver"]["rel_l2_x100_17"],
                                                      g["funcattn"]["rel_l2_x100_17"] <= g["transolver"]["rel_l2_x100_17"],
                                                      "generated Darcy at the training resolution; one seed"),
        "few_shot_mse_le_0.1x_softmax": target(fs["ratio"], 0.1, fs["ratio"] <= 0.1,
                                               "query MSE ratio FuncAttn / softmax, K = 4 context points"),
        "time_linear_in_n": target(inf["funcattn"]["loglog_slope"], 1.2, inf["funcattn"]["loglog_slope"] <= 1.2,
                                   "slope of log(inference time) vs log(n) for FuncAttn from 32^2 to the largest grid"),
    }
    elapsed = time.perf_counter() - t_start
    for r in runs + [conv] + gruns:
        r.pop("net", None)
    out = {"tool": "train-operator", "date": today(), "commit": commit(), "machine": machine(),
           "command": "flock /work/notes/cpu.lock timeout 900 .venv/bin/python bench/train_operator.py"
                      + (" --quick" if args.quick else ""),
           "seconds": elapsed, "results": results, "targets": targets}
    md = markdown(out)
    write_results("train_operator", out, md)
    print(md)
    return 0


def markdown(out: dict) -> str:
    r = out["results"]
    s = r["settings"]
    lines = [f"# train-operator benchmark ({out['date']}, {out['machine']['cpu']}, {out['machine']['cores']} cores, "
             f"{out['seconds']:.0f} s)", "",
             f"Settings: {s['epochs']} epochs, {s['ntrain']} training samples, batch {s['batch']}, lr {s['lr']}, "
             f"seeds {s['seeds']}, C = 64, 4 heads, 4 blocks, k = 32; FNO modes 6, width matched.", "",
             "## Real Darcy (neuraloperator 0.3.0 files): train 16x16, relative L2 x 100", "",
             "| model | params | seeds | 16x16 | 32x32 zero-shot | ratio 32/16 | s/epoch |", "|---|---|---|---|---|---|---|"]
    for m, v in r["real_darcy"].items():
        lines.append(f"| {m} | {v['params']} | {v['seeds']} | {v['rel_l2_x100_16']:.2f} ± {v['rel_l2_x100_16_std']:.2f} "
                     f"| {v['rel_l2_x100_32']:.2f} ± {v['rel_l2_x100_32_std']:.2f} | "
                     f"{v['rel_l2_x100_32'] / v['rel_l2_x100_16']:.3f} | {v['seconds_per_epoch']:.2f} |")
    g = r["generated_darcy"]
    lines += ["", f"## Generated Darcy (solved at 65x65; train {g['n_train']} at 17x17, test {g['n_test']}), one seed", "",
              "| model | 17x17 | 33x33 | 65x65 | ratio 65/17 |", "|---|---|---|---|---|"]
    for m, v in g["models"].items():
        lines.append(f"| {m} | {v['rel_l2_x100_17']:.2f} | {v['rel_l2_x100_33']:.2f} | {v['rel_l2_x100_65']:.2f} | "
                     f"{v['rel_l2_x100_65'] / v['rel_l2_x100_17']:.3f} |")
    fs = r["few_shot"]
    lines += ["", f"## Few-shot sine (K = {fs['context']}): query MSE FuncAttn {fs['mse_funcattn']:.4f}, softmax "
              f"{fs['mse_softmax']:.4f}, ratio {fs['ratio']:.4f}", ""]
    sp = r["speed"]
    lines += ["## Speed (CPU, 1 thread)", "",
              f"Epoch time ratio FuncAttn/Transolver {sp['epoch_ratio_funcattn_over_transolver']:.2f}, "
              f"FuncAttn/FNO {sp['epoch_ratio_funcattn_over_fno']:.2f}; inference at the largest grid: "
              f"FuncAttn/Transolver {sp['inference_ratio_funcattn_over_transolver']:.2f}, "
              f"FuncAttn/FNO {sp['inference_ratio_funcattn_over_fno']:.2f}.", "",
              "| model | " + " | ".join(f"n={k}" for k in sp["inference"]["funcattn"]["seconds_per_sample"]) +
              " | log-log slope |", "|---" * (2 + len(sp["inference"]["funcattn"]["seconds_per_sample"])) + "|"]
    for m, v in sp["inference"].items():
        lines.append(f"| {m} | " + " | ".join(f"{t * 1e3:.1f} ms" for t in v["seconds_per_sample"].values())
                     + f" | {v['loglog_slope']:.2f} |")
    lines += ["", "## Targets", "", "| target | value | threshold | met | note |", "|---|---|---|---|---|"]
    for k, t in out["targets"].items():
        val = t["value"]
        val = ", ".join(f"{v:.3f}" for v in val) if isinstance(val, list) else f"{val:.3f}"
        lines.append(f"| {k} | {val} | {t['threshold']} | {'yes' if t['met'] else 'NO'} | {t['note']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
