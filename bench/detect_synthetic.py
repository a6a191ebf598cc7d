"""Benchmark of detect-synthetic (RA-Det) against RIGID and a linear probe, on the offline benchmark.

One run measures, side by side:
- the offline benchmark: real 32-px crops of the scikit-image / scikit-learn photographs (split by
  source photo) vs a DCGAN, a small DDPM (16 px, DDIM 50 steps, x2 upsampled) and a VAE trained
  here on the training crops; every image a 32-px PNG read through the same loader;
- the asymmetry: one-sided Mann-Whitney p that fake drift > real drift, per generator, under the
  fixed Gaussian probe (training-free; RIGID's λ = 0.05 on the encoder's normalised input tensor)
  and under RA-Det's learned probe;
- RA-Det, RIGID and the linear probe, all trained on real vs DCGAN only, tested per generator
  (DDPM and VAE unseen): AUROC, AP, accuracy at 0.5 (and the oracle-threshold accuracy);
- the same on the test images after JPEG quality 75 and after 0.5x resizing (both classes);
- scoring throughput (images/s) of each method on this CPU.

Sizes (chosen so one run takes about 12 minutes on 2 idle cores; the method sheet's 64-px crops do
not fit: the encoder at 128 px runs 36 images/s on one core against 243 at 64 px, which alone
would put one run near 40 minutes): 1200 real training crops and
1200 DCGAN samples; 250 test images per class and generator; DCGAN 1200 steps, DDPM 800, VAE 800;
RA-Det 300 steps of 48 images at the sheet's AdamW lr 1e-4 / weight decay 0.01 (the paper: 1 epoch
of ProGAN at batch 256 on 8 GPUs; 300 = the best of 100/200/300 steps by the fused score's BCE on a
validation split of the TRAINING data: the reals of 2 of the 10 training photos and 20% of the
DCGAN samples; the foundation branch's validation BCE is below 1e-3 from step 100 on). torch runs
with one thread (ICMLKIT_BENCH_THREADS to change): on this shared 2-core machine two threads were
10-60x slower under load (OpenMP spin-waiting).

Writes bench/results/detect_synthetic.json and bench/results/detect_synthetic.md.
Run:  make bench TOOL=detect-synthetic   (or .venv/bin/python bench/detect_synthetic.py [--quick])
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from _common import commit, machine, target, today, write_results
from icmlkit.lib.detect.benchmark import FULL, QUICK, make_benchmark
from icmlkit.lib.detect.config import METHODS, DetectorConfig, ProbeConfig
from icmlkit.lib.detect.demo import load_split
from icmlkit.lib.detect.images import jpeg_roundtrip, resize_roundtrip, to_tensor, to_uint8
from icmlkit.lib.detect.metrics import asymmetry_test
from icmlkit.lib.detect.pipeline import ImageSet, evaluate, probe, probe_detector, train

RADET_STEPS, RADET_BATCH, RADET_LR = 300, 48, 1e-4
CONDITIONS = ("clean", "jpeg75", "resize0.5")


def perturb(images: ImageSet, condition) -> ImageSet:
    if condition == "clean":
        return images
    pix = to_uint8(images.x)
    pix = jpeg_roundtrip(pix, 75) if condition == "jpeg75" else resize_roundtrip(pix, 0.5)
    return ImageSet(to_tensor(pix), images.paths)


def strip(res: dict) -> dict:
    out = {k: res[k] for k in ("auroc", "ap", "acc_at_0_5", "oracle_threshold_acc", "n_real", "n_fake")}
    out["per_generator"] = {g: {k: v[k] for k in ("auroc", "ap", "acc_at_0_5", "oracle_threshold_acc")}
                            for g, v in res["per_generator"].items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the demo's sizes (smoke run; targets not meaningful)")
    ap.add_argument("--data", default=None, help="reuse a folder made by `detect-synthetic generate`")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite the targets and tables from bench/results/detect_synthetic.json (no new measurement)")
    args = ap.parse_args()
    if args.report_only:
        old = json.loads((Path(__file__).resolve().parent / "results" / "detect_synthetic.json").read_text())
        res = old["results"]
        tg = res["benchmark"]["train_generator"]
        args.quick = "--quick" in old["command"]
        report(res, [g for g in res["benchmark"]["generators"] if g != tg], tg, old["machine"], args,
               date=old["date"], sha=old["commit"])
        return
    cfg = QUICK if args.quick else FULL
    torch.set_num_threads(int(os.environ.get("ICMLKIT_BENCH_THREADS", "1")))
    t_start = time.perf_counter()
    mach = machine()
    with tempfile.TemporaryDirectory(prefix="detect-bench-") as tmp:
        folder = Path(args.data) if args.data else Path(tmp) / "bench"
        if not args.data:
            print("building the benchmark (real crops + 3 generators) ...", file=sys.stderr, flush=True)
            info = make_benchmark(folder, n_train=cfg["n_train"], n_test=cfg["n_test"], steps=cfg["steps"],
                                  sampling_steps=cfg["sampling_steps"], seed=0)
        else:
            info = json.loads((folder / "benchmark.json").read_text())
        train_real, train_fake, test_real, fakes = load_split(folder)
    train_gen = info["train_generator"]
    unseen = [g for g in fakes if g != train_gen]
    print(json.dumps(info), file=sys.stderr)

    gauss = ProbeConfig()  # RIGID's lambda 0.05 on the encoder's normalised input, 4 antithetic draws
    encoder_owner = probe_detector(gauss)
    enc = encoder_owner.encoder
    results: dict = {"benchmark": info, "methods": {}, "asymmetry": {}}

    # asymmetry under the fixed Gaussian probe (training-free)
    results["asymmetry"]["gaussian"] = {g: probe(gauss, v, test_real, encoder=enc).summary["mann_whitney"]
                                        for g, v in fakes.items()}

    test_sets = {c: (perturb(test_real, c), {g: perturb(v, c) for g, v in fakes.items()}) for c in CONDITIONS}
    all_clean = torch.cat([test_real.x, *(v.x for v in fakes.values())])
    for m in METHODS:
        steps = RADET_STEPS if not args.quick else 60
        bs = RADET_BATCH if not args.quick else 32
        print(f"training {m} on real vs {train_gen} ...", file=sys.stderr, flush=True)
        fitted = train(DetectorConfig(method=m, steps=steps, batch_size=bs, lr=RADET_LR), train_real, train_fake,
                       seed=0, encoder=enc)
        det = fitted.detector
        row: dict = {"fit": fitted.summary}
        for c in CONDITIONS:
            r_x, f_x = test_sets[c]
            ev = evaluate(det, r_x, f_x, seed=0)
            res = {**ev.summary, "scores": ev.scores}
            row[c] = strip(res)
            row[c]["unseen_mean_auroc"] = float(np.mean([res["per_generator"][g]["auroc"] for g in unseen]))
            if m == "ra-det" and c == "clean":
                rc = 1 - res["scores"]["real"]["cos"].numpy()
                results["asymmetry"]["learned_probe"] = {
                    g: asymmetry_test(rc, 1 - res["scores"][g]["cos"].numpy()) for g in fakes}
                from sklearn.metrics import roc_auc_score

                sr = res["scores"]["real"]
                row["branch_auroc_clean"] = {
                    g: {b: float(roc_auc_score(np.r_[np.zeros(len(sr[b])), np.ones(len(res["scores"][g][b]))],
                                               np.r_[sr[b].numpy(), res["scores"][g][b].numpy()]))
                        for b in ("p_foundation", "p_cnn", "p_l2", "p_diff")} for g in fakes}
        t0 = time.perf_counter()
        det.score(all_clean, seed=1)
        row["images_per_second"] = round(len(all_clean) / (time.perf_counter() - t0), 1)
        results["methods"][m] = row
        print(m, json.dumps({c: row[c]["per_generator"] for c in CONDITIONS}), file=sys.stderr, flush=True)

    mach_end = machine()
    mach["load_average_1min_end"] = mach_end["load_average_1min"]
    mach["torch_threads"] = torch.get_num_threads()
    results["seconds_total"] = round(time.perf_counter() - t_start, 1)
    report(results, unseen, train_gen, mach, args)


def report(results, unseen, train_gen, mach, args, date=None, sha=None) -> None:
    gauss = results["asymmetry"]["gaussian"]
    n_sig = sum(v["p_value"] < 0.01 for v in gauss.values())
    learned = results["asymmetry"].get("learned_probe", {})
    n_sig_unseen = sum(learned[g]["p_value"] < 0.01 for g in unseen if g in learned)
    M = results["methods"]
    ra, rg, lp = (M[m]["clean"]["unseen_mean_auroc"] for m in ("ra-det", "rigid", "linear-probe"))
    targets = {
        "asymmetry_p_lt_0.01_generators": target(
            n_sig, 2, n_sig >= 2, "generators whose fake drift > real drift at Mann-Whitney p < 0.01 (fixed Gaussian "
            "probe, 1 - cosine, training-free: the primary reading of the target); p per generator: "
            + ", ".join(f"{g} {v['p_value']:.2e}" for g, v in gauss.items())),
        "asymmetry_learned_probe_p_lt_0.01_unseen_generators": target(
            n_sig_unseen, 2, n_sig_unseen >= 2,
            "secondary reading: the same test under RA-Det's learned probe (trained on real vs "
            f"{train_gen} only) on the unseen generators; p: "
            + ", ".join(f"{g} {learned[g]['p_value']:.2e}" for g in unseen if g in learned)),
        "radet_minus_rigid_unseen_auroc": target(
            round(ra - rg, 4), 0.05, ra - rg >= 0.05,
            f"mean AUROC on the unseen generators ({', '.join(unseen)}; trained on real vs {train_gen}): "
            f"RA-Det {ra:.4f}, RIGID {rg:.4f}"),
        "radet_minus_linear_probe_unseen_auroc": target(
            round(ra - lp, 4), 0.0, ra - lp >= 0.0,
            f"mean AUROC on the unseen generators: RA-Det {ra:.4f}, linear probe {lp:.4f}"),
    }
    out = {
        "tool": "detect-synthetic",
        "date": date or today(),
        "commit": sha or commit(),
        "machine": mach,
        "command": "make bench TOOL=detect-synthetic" + (" (with --quick)" if args.quick else ""),
        "results": results,
        "targets": targets,
    }
    md = markdown(results, targets, out, unseen)
    write_results("detect_synthetic", out, md)
    print(md)


def markdown(results, targets, out, unseen) -> str:
    info = results["benchmark"]
    m = out["machine"]
    lines = [f"detect-synthetic benchmark, {out['date']}, {m['cpu']} ({m['cores']} cores, load average "
             f"{m['load_average_1min']} at start, {m.get('load_average_1min_end')} at end), `{out['command']}`, "
             f"{results['seconds_total']:.0f} s in all", "",
             f"Real: {info['n_train_real']} training crops from {len(info['train_photos'])} photos, "
             f"{info['n_test_real']} test crops from {len(info['test_photos'])} other photos; 32-px PNGs. "
             f"Detectors trained on real vs **{info['train_generator']}** only; unseen: {', '.join(unseen)}.", "",
             "| generator | steps | samples | train s | sample s | Gaussian-probe MW p | P(fake drift > real) | "
             "learned-probe MW p |", "|---|---|---|---|---|---|---|---|"]
    for g, gi in info["generators"].items():
        a = results["asymmetry"]["gaussian"][g]
        lp = results["asymmetry"].get("learned_probe", {}).get(g, {})
        lines.append(f"| {g} | {gi['steps']} | {gi['samples']} | {gi['seconds_train']:.0f} | {gi['seconds_sample']:.0f} | "
                     f"{a['p_value']:.2e} | {a['effect_p_fake_gt_real']:.3f} | "
                     f"{lp.get('p_value', float('nan')):.2e} |")
    lines += ["", "| method | test images | generator | AUROC | AP | acc@0.5 | oracle-threshold acc |",
              "|---|---|---|---|---|---|---|"]
    for meth, row in results["methods"].items():
        for c in CONDITIONS:
            for g, v in row[c]["per_generator"].items():
                tag = "" if g == info["train_generator"] else " (unseen)"
                lines.append(f"| {meth} | {c} | {g}{tag} | {v['auroc']:.4f} | {v['ap']:.4f} | {v['acc_at_0_5']:.4f} | "
                             f"{v['oracle_threshold_acc']:.4f} |")
    lines += ["", "| method | unseen mean AUROC clean | JPEG 75 | 0.5x resize | scoring images/s (CPU) | train s |",
              "|---|---|---|---|---|---|"]
    for meth, row in results["methods"].items():
        lines.append(f"| {meth} | {row['clean']['unseen_mean_auroc']:.4f} | {row['jpeg75']['unseen_mean_auroc']:.4f} | "
                     f"{row['resize0.5']['unseen_mean_auroc']:.4f} | {row['images_per_second']} | "
                     f"{row['fit']['seconds']:.0f} |")
    br = results["methods"]["ra-det"].get("branch_auroc_clean")
    if br:
        lines += ["", "RA-Det branches alone (clean test images; the score is their max):", "",
                  "| generator | foundation | cnn | l2 | diff |", "|---|---|---|---|---|"]
        for g, v in br.items():
            lines.append(f"| {g} | {v['p_foundation']:.4f} | {v['p_cnn']:.4f} | {v['p_l2']:.4f} | {v['p_diff']:.4f} |")
    lines += ["", "| target | value | threshold | met | note |", "|---|---|---|---|---|"]
    for k, t in targets.items():
        lines.append(f"| {k} | {t['value']} | {t['threshold']} | {'yes' if t['met'] else '**no**'} | {t['note']} |")
    lines += ["", f"Sizes: 32-px images, encoder (EfficientNet-Lite0, ImageNet weights) at 64 px, probe UNet 16 base "
              f"channels / 3 levels, RA-Det {RADET_STEPS} steps of {RADET_BATCH} images (AdamW lr {RADET_LR:g}, wd 0.01); "
              "RIGID lambda 0.05 added to the encoder's normalised input tensor at its input size (RIGID's way), 4 "
              "antithetic draws; one torch thread. Scoring throughput counts decoding-free tensors; ra-det and rigid "
              "each run 5 encoder passes per image, the linear probe 1."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
