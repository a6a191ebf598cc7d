"""Benchmark of detect-synthetic (RA-Det) against RIGID, a linear probe and a fine-tuned classifier,
on real generated images (issue 27). Every detector sees the same splits.

- T1 aligned: real photographs (the colour photos of scikit-image / scikit-learn / matplotlib and
  the 200 CNNDetection reals) against their TAEF2 reconstructions (the tiny FLUX.2 autoencoder):
  one random 112-px crop per photo at the native resolution, the reconstruction of each crop,
  both classes stored as PNG; split by source photograph (60 % train, 40 % test).
- T2 cross-generator: the CNNDetection ranking sample (20 real + 20 generated 240-px images per
  generator; a display sample, not a random draw). Train on StyleGAN + BigGAN (4 random 112-px
  crops per image at the native resolution), test on the centre crop of every image of the other
  eight; AUROC per generator (its reals vs its fakes) and the mean. Robustness: the same test
  crops after JPEG quality 75 and after 0.5x down-and-up resizing (both classes).
- Detectors: RA-Det (100 steps of 32, AdamW lr 1e-4; 20 % of the training sources held out for
  its per-branch calibration and fusion rule), RIGID (training-free), the linear probe on frozen
  features, and the fine-tuned classifier (CNNDetection's recipe on the same EfficientNet-Lite0;
  100 steps of 32, lr 1e-4, Blur+JPEG 0.5 augmentation). Encoder at 112 px, one torch thread.
- T2 leave-one-generator-out (LOGO): ten folds; fold g trains RA-Det, the linear probe and the
  fine-tuned classifier on the other nine generators (one random 112-px crop per image at the native
  resolution: 180 real + 180 generated crops, about T2's 160 + 160; 50 steps of 32, half T2's, so
  that the twenty trainings fit the machine) and tests on the centre crops of g's 20 reals and 20
  fakes, clean, JPEG 75 and 0.5x. RIGID is training-free (its AUROC does not depend on the training
  set): part logo-rigid evaluates it once on every generator.
- speed: RA-Det training steps/s of the landed loop (commit 27956b6, read with `git show`) vs this
  one, same size and thread count.

The paper reports +12.92 % average over ten detectors on its 14 generators (ICML abstract); that is
the paper's number, measured with DINOv3 on ProGAN-trained models, not ours.

Run in parts (each under 8 minutes on one core): --parts speed,t1-radet,t1-base,t2-radet,t2-base,
logo-rigid, logo-0,...,logo-9 (one fold each, about 3-4 minutes; --budget fits several in one slot);
--parts report rewrites targets and tables from bench/results/detect_synthetic.json. Every part
merges its results into that file. No --parts: all of them.
Needs ../shared/data (cnndetection, taef2); T1's crops are cached in --cache (outside the repo).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch

from _common import RESULTS, commit, machine, target, today, write_results
from icmlkit.lib.core.io import shared_data_dir
from icmlkit.lib.detect_synthetic.config import DetectorConfig
from icmlkit.lib.detect_synthetic.datasets import (CNNDETECTION_GENERATORS, LIBRARY_PHOTOS, aligned_pairs, library_photo,
                                         load_native, native_crops, read_cnndetection, split_by_source)
from icmlkit.lib.detect_synthetic.images import jpeg_roundtrip, resize_roundtrip, to_tensor
from icmlkit.lib.detect_synthetic.pipeline import ImageSet, evaluate, probe_detector, train

SIZE, STEPS, BATCH, LR = 112, 100, 32, 1e-4
TRAIN_GENS = ("stylegan", "biggan")
CONDITIONS = ("clean", "jpeg75", "resize0.5")
BASELINES = ("rigid", "linear-probe", "finetune")
PARTS = ("speed", "t1-radet", "t1-base", "t2-radet", "t2-base", "logo-rigid",
         *(f"logo-{i}" for i in range(len(CNNDETECTION_GENERATORS))))
METHODS = ("ra-det", *BASELINES)
OLD_COMMIT = "27956b6"  # the landed RA-Det training loop (before issue 27)
RESULTS_JSON = RESULTS / "detect_synthetic.json"


LOGO_STEPS = 50  # the ten LOGO trainings per detector run at half T2's steps (the machine's time)


def config(method: str, steps: int = STEPS) -> DetectorConfig:
    return DetectorConfig(method=method, image_size=SIZE, input_size=SIZE, preprocess="crop", steps=steps,
                          batch_size=BATCH, lr=LR)


def perturb(pix: np.ndarray, condition: str) -> np.ndarray:
    if condition == "clean":
        return pix
    return jpeg_roundtrip(pix, 75) if condition == "jpeg75" else resize_roundtrip(pix, 0.5)


def strip(summary: dict) -> dict:
    keys = ("auroc", "ap", "acc_at_0_5", "oracle_threshold_acc", "n_real", "n_fake")
    return {**{k: summary[k] for k in keys},
            "per_generator": {g: {k: v[k] for k in keys} for g, v in summary["per_generator"].items()}}


# --------------------------------------------------------------------------- data


def t2_data(seed: int = 0) -> dict:
    pairs = read_cnndetection(shared_data_dir("cnndetection") / "images")
    tr_real, tr_fake, groups = [], [], []
    for g in TRAIN_GENS:
        for label, files, out in (("real", pairs[g].real, tr_real), ("fake", pairs[g].fake, tr_fake)):
            crops, idx = native_crops(load_native(files), SIZE, 4, seed, stream=f"t2/{g}/{label}")
            out.append(crops)
            groups.append([files[i] for i in idx])
    test = {g: {label: native_crops(load_native(getattr(pairs[g], label)), SIZE, centre=True)[0]
                for label in ("real", "fake")} for g in CNNDETECTION_GENERATORS if g not in TRAIN_GENS}
    real, fake = np.concatenate(tr_real), np.concatenate(tr_fake)
    # reals first, then fakes (the order of pipeline.train); the sources are the image files
    src = groups[0] + groups[2] + groups[1] + groups[3]
    return {"train_real": real, "train_fake": fake, "groups": src, "test": test}


def logo_data(held: str, seed: int = 0) -> dict:
    """Leave-one-generator-out fold ``held``: one random crop of every image of the nine other
    generators for training (reals then fakes, each with its file as its source), the centre crops
    of ``held``'s images for testing."""
    pairs = read_cnndetection(shared_data_dir("cnndetection") / "images")
    out = {}
    for label in ("real", "fake"):
        crops, src = [], []
        for g in CNNDETECTION_GENERATORS:
            if g == held:
                continue
            files = getattr(pairs[g], label)
            c, idx = native_crops(load_native(files), SIZE, 1, seed, stream=f"logo/{g}/{label}")
            crops.append(c)
            src += [files[i] for i in idx]
        out[f"train_{label}"], out[f"src_{label}"] = np.concatenate(crops), src
    test = {label: native_crops(load_native(getattr(pairs[held], label)), SIZE, centre=True)[0]
            for label in ("real", "fake")}
    if any(f"_{held}_" in Path(p).name for p in out["src_real"] + out["src_fake"]):
        raise RuntimeError(f"LOGO fold {held}: a training file of the held-out generator")
    return {"train_real": out["train_real"], "train_fake": out["train_fake"],
            "groups": out["src_real"] + out["src_fake"], "test": test}


def t1_data(cache: Path, seed: int = 0) -> dict:
    f = cache / f"t1_{SIZE}_{seed}.npz"
    if f.exists():
        d = np.load(f, allow_pickle=False)
        return {k: d[k] for k in d.files}
    from icmlkit.lib.detect_synthetic.taef2 import load_taef2

    pairs = read_cnndetection(shared_data_dir("cnndetection") / "images")
    files = [p for g in pairs.values() for p in g.real]
    images = [library_photo(n) for n in LIBRARY_PHOTOS] + load_native(files)
    sources = list(LIBRARY_PHOTOS) + [Path(p).name for p in files]
    t0 = time.perf_counter()
    real, fake, src = aligned_pairs(images, sources, SIZE, 1, load_taef2(shared_data_dir("taef2")), seed)
    train_idx, test_idx = split_by_source(src, [0.6, 0.4], seed, "t1-split")
    out = {"real": real, "fake": fake, "src": src, "train": train_idx, "test": test_idx,
           "seconds_taef2": np.asarray(time.perf_counter() - t0)}
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(f, **out)
    return out


# --------------------------------------------------------------------------- detectors


def run_method(method, enc, train_real, train_fake, groups, test_real, test_fakes, conditions, steps=STEPS) -> dict:
    """Train ``method`` once; evaluate on every condition (``test_real``: uint8 crops or a dict per
    generator; ``test_fakes``: generator -> uint8 crops)."""
    print(f"training {method} ...", file=sys.stderr, flush=True)
    fitted = train(config(method, steps), ImageSet(to_tensor(train_real)), ImageSet(to_tensor(train_fake)), seed=0,
                   encoder=enc, groups=groups)
    det = fitted.detector
    row = {"fit": fitted.summary, "train_minutes": round(fitted.summary["seconds"] / 60, 2)}
    for c in conditions:
        reals = ({g: ImageSet(to_tensor(perturb(v, c))) for g, v in test_real.items()}
                 if isinstance(test_real, dict) else ImageSet(to_tensor(perturb(test_real, c))))
        fakes = {g: ImageSet(to_tensor(perturb(v, c))) for g, v in test_fakes.items()}
        t0 = time.perf_counter()
        ev = evaluate(det, reals, fakes, seed=0)
        n = sum(len(v) for v in fakes.values()) + (sum(len(v) for v in reals.values()) if isinstance(reals, dict)
                                                    else len(reals))
        row[c] = strip(ev.summary)
        row[c]["mean_auroc"] = float(np.mean([v["auroc"] for v in ev.summary["per_generator"].values()]))
        if c == "clean":
            row["images_per_second"] = round(n / (time.perf_counter() - t0), 1)
            if method == "ra-det":
                from sklearn.metrics import roc_auc_score

                row["branch_auroc_clean"] = {}
                for g in fakes:
                    sr = ev.scores[f"real/{g}" if isinstance(reals, dict) else "real"]
                    sf = ev.scores[g]
                    row["branch_auroc_clean"][g] = {
                        b: float(roc_auc_score(np.r_[np.zeros(len(sr[b])), np.ones(len(sf[b]))],
                                               np.r_[sr[b].numpy(), sf[b].numpy()]))
                        for b in ("p_foundation", "p_cnn", "p_l2", "p_diff")}
        print(method, c, json.dumps({g: round(v["auroc"], 4) for g, v in row[c]["per_generator"].items()}),
              file=sys.stderr, flush=True)
    return row


def part_t1(methods, cache) -> dict:
    d = t1_data(cache)
    tr, te = d["train"], d["test"]
    enc = probe_detector(_probe()).encoder
    groups = [str(s) for s in d["src"][tr]] * 2
    out = {"n_train_pairs": int(len(tr)), "n_test_pairs": int(len(te)), "n_sources": int(len(set(d["src"]))),
           "seconds_taef2": float(d["seconds_taef2"]), "methods": {}}
    for m in methods:
        out["methods"][m] = run_method(m, enc, d["real"][tr], d["fake"][tr], groups, d["real"][te],
                                       {"taef2": d["fake"][te]}, ("clean",))
    return out


def part_t2(methods) -> dict:
    d = t2_data()
    enc = probe_detector(_probe()).encoder
    reals = {g: v["real"] for g, v in d["test"].items()}
    fakes = {g: v["fake"] for g, v in d["test"].items()}
    out = {"train_generators": list(TRAIN_GENS), "test_generators": list(fakes),
           "n_train_crops": [int(len(d["train_real"])), int(len(d["train_fake"]))], "methods": {}}
    for m in methods:
        out["methods"][m] = run_method(m, enc, d["train_real"], d["train_fake"], d["groups"], reals, fakes,
                                       CONDITIONS)
    return out


def part_logo(fold: int) -> dict:
    """One LOGO fold: RA-Det, the linear probe and the fine-tuned classifier trained on the nine other
    generators (LOGO_STEPS steps), tested on the held one (RIGID: part ``logo-rigid``)."""
    held = CNNDETECTION_GENERATORS[fold]
    d = logo_data(held)
    enc = probe_detector(_probe()).encoder
    out = {"held_out": held, "steps": LOGO_STEPS, "n_train_crops": [int(len(d["train_real"])), int(len(d["train_fake"]))],
           "methods": {}}
    for m in METHODS:
        if m == "rigid":
            continue
        out["methods"][m] = run_method(m, enc, d["train_real"], d["train_fake"], d["groups"],
                                       {held: d["test"]["real"]}, {held: d["test"]["fake"]}, CONDITIONS, LOGO_STEPS)
    return out


def part_logo_rigid() -> dict:
    """RIGID on every LOGO fold at once. It is training-free: its score is a strictly increasing
    function of the drift (the fit sets only the threshold and scale of that function), so its AUROC
    on a held-out generator does not depend on the training set. Fitted once on fold 0's training
    crops (the nine generators other than StyleGAN), evaluated on each generator's centre crops;
    its acc@0.5 here is not a per-fold figure."""
    d = logo_data(CNNDETECTION_GENERATORS[0])
    pairs = read_cnndetection(shared_data_dir("cnndetection") / "images")
    test = {g: {label: native_crops(load_native(getattr(pairs[g], label)), SIZE, centre=True)[0]
                for label in ("real", "fake")} for g in CNNDETECTION_GENERATORS}
    enc = probe_detector(_probe()).encoder
    row = run_method("rigid", enc, d["train_real"], d["train_fake"], d["groups"],
                     {g: v["real"] for g, v in test.items()}, {g: v["fake"] for g, v in test.items()}, CONDITIONS)
    return row


def logo_summary(logo: dict) -> dict:
    """Per method: AUROC on each held-out generator per condition and their means (complete folds only)."""
    folds = [logo[g] for g in CNNDETECTION_GENERATORS if g in logo and logo[g].get("steps") == LOGO_STEPS]
    rigid = logo.get("rigid")
    if rigid is not None:  # one evaluation, every generator (see part_logo_rigid)
        folds = [{**f, "methods": {**f["methods"], "rigid": {
            **{c: {"per_generator": {f["held_out"]: rigid[c]["per_generator"][f["held_out"]]},
                   "mean_auroc": rigid[c]["per_generator"][f["held_out"]]["auroc"]} for c in CONDITIONS},
            "train_minutes": rigid["train_minutes"]}}} for f in folds]
    out = {}
    for m in METHODS:
        rows = [f["methods"][m] for f in folds if m in f["methods"]]
        out[m] = {c: {"per_generator": {f["held_out"]: f["methods"][m][c]["per_generator"][f["held_out"]]["auroc"]
                                        for f in folds if m in f["methods"]},
                      "mean_auroc": float(np.mean([r[c]["mean_auroc"] for r in rows])) if rows else None}
                  for c in CONDITIONS}
        out[m]["n_folds"] = len(rows)
        out[m]["train_minutes_mean"] = round(float(np.mean([r["train_minutes"] for r in rows])), 2) if rows else None
    return out


def _probe():
    from icmlkit.lib.detect_synthetic.config import ProbeConfig

    return ProbeConfig(image_size=SIZE, input_size=SIZE, preprocess="crop")


def part_speed() -> dict:
    """RA-Det training steps/s: the landed loop (``git show OLD_COMMIT``) vs this one."""
    from icmlkit.lib.detect_synthetic.model import Detector

    root = Path(__file__).resolve().parents[1]

    def old_module(name, path, repl=()):
        src = subprocess.run(["git", "show", f"{OLD_COMMIT}:{path}"], cwd=root, capture_output=True, text=True,
                             check=True).stdout
        for a, b in repl:
            src = src.replace(a, b)
        mod = types.ModuleType(name)
        sys.modules[name] = mod
        exec(compile(src, f"{OLD_COMMIT}:{path}", "exec"), mod.__dict__)  # noqa: S102 - our own history
        return mod

    old_module("detect_old_probe", "lib/detect_synthetic/probe.py")
    old = old_module("detect_old_model", "lib/detect_synthetic/model.py",
                     [("from icmlkit.lib.detect_synthetic.probe import", "from detect_old_probe import")])
    d = t2_data()
    n = 40
    x = to_tensor(np.concatenate([d["train_real"][:n], d["train_fake"][:n]]))
    y = torch.cat([torch.zeros(n), torch.ones(n)])
    out = {"image_size": SIZE, "batch_size": BATCH, "torch_threads": torch.get_num_threads()}
    enc = probe_detector(_probe()).encoder
    for tag, cls in (("landed", old.Detector), ("now", Detector)):
        times = []
        for steps in (2, 8):
            cfg = DetectorConfig(image_size=SIZE, input_size=SIZE, steps=steps, batch_size=BATCH, val_fraction=0)
            det = cls(cfg, encoder=enc)
            t0 = time.perf_counter()
            det.fit(x, y)
            times.append(time.perf_counter() - t0)
        out[tag] = {"steps_per_second": round(6 / (times[1] - times[0]), 3), "fit_2_steps_seconds": round(times[0], 1)}
        print(tag, out[tag], file=sys.stderr, flush=True)
    out["speedup"] = round(out["now"]["steps_per_second"] / out["landed"]["steps_per_second"], 2)
    return out


# --------------------------------------------------------------------------- report


def targets_of(res: dict) -> dict:
    t = {}
    t2 = res.get("t2", {}).get("methods", {})
    t1 = res.get("t1", {}).get("methods", {})
    ra2 = t2.get("ra-det", {}).get("clean", {}).get("mean_auroc")
    base2 = {m: t2[m]["clean"]["mean_auroc"] for m in BASELINES if m in t2}
    if ra2 is not None and len(base2) == len(BASELINES):
        best = max(base2, key=base2.get)
        t["t2_radet_minus_best_baseline_mean_unseen_auroc"] = target(
            round(ra2 - base2[best], 4), 0.02, ra2 - base2[best] >= 0.02,
            f"T2 (train {'+'.join(TRAIN_GENS)}, 8 unseen generators): RA-Det {ra2:.4f}; "
            + ", ".join(f"{m} {v:.4f}" for m, v in base2.items()))
    else:
        t["t2_radet_minus_best_baseline_mean_unseen_auroc"] = target(None, 0.02, False, "T2 parts not run")
    ra1 = t1.get("ra-det", {}).get("clean", {}).get("auroc")
    lp1 = t1.get("linear-probe", {}).get("clean", {}).get("auroc")
    t["t1_radet_minus_linear_probe_auroc"] = target(
        None if ra1 is None or lp1 is None else round(ra1 - lp1, 4), 0.0,
        ra1 is not None and lp1 is not None and ra1 >= lp1,
        "T1 aligned (real vs TAEF2 reconstruction): " + ", ".join(
            f"{m} {v['clean']['auroc']:.4f}" for m, v in t1.items()) if t1 else "T1 parts not run")
    for c in ("jpeg75", "resize0.5"):
        if "ra-det" in t2 and "linear-probe" in t2:
            drop = {m: t2[m]["clean"]["mean_auroc"] - t2[m][c]["mean_auroc"] for m in ("ra-det", "linear-probe")}
            t[f"t2_{c}_radet_drop_below_linear_probe_drop"] = target(
                round(drop["ra-det"], 4), round(drop["linear-probe"], 4), drop["ra-det"] < drop["linear-probe"],
                f"mean unseen AUROC lost under {c} (clean minus {c}): RA-Det {drop['ra-det']:.4f}, linear probe "
                f"{drop['linear-probe']:.4f} (threshold = the linear probe's drop; a difference under 0.001 is a "
                "tie, whatever `met` says: the CNNDetection images are JPEGs already)")
        else:
            t[f"t2_{c}_radet_drop_below_linear_probe_drop"] = target(None, None, False, "T2 parts not run")
    mins = t2.get("ra-det", {}).get("train_minutes")
    t["radet_training_minutes_at_benchmark_size"] = target(
        mins, 10, mins is not None and mins <= 10,
        f"RA-Det training on T2 ({STEPS} steps of {BATCH} at {SIZE} px, caching included; the issue's landed run: "
        "44 minutes for 300 steps on 200 images at 128 px)")
    sp = res.get("speed")
    t["radet_training_speedup_vs_landed_loop"] = target(
        sp and sp["speedup"], 2.0, bool(sp) and sp["speedup"] >= 2.0,
        "steps/s now over steps/s of the landed loop, same data, size, batch and thread count" if sp
        else "speed part not run")
    logo = res.get("logo", {})
    n = sum(1 for g in CNNDETECTION_GENERATORS if logo.get(g, {}).get("steps") == LOGO_STEPS)
    if n and "rigid" in logo:
        ls = logo_summary(logo)
        ra = ls["ra-det"]["clean"]["mean_auroc"]
        base = {m: ls[m]["clean"]["mean_auroc"] for m in BASELINES}
        best = max(base, key=base.get)
        full = n == len(CNNDETECTION_GENERATORS)
        t["logo_radet_minus_best_baseline_mean_auroc"] = target(
            round(ra - base[best], 4), 0.02, full and ra - base[best] >= 0.02,
            f"leave-one-generator-out, {n} of {len(CNNDETECTION_GENERATORS)} folds"
            + ("" if full else " (incomplete: met stays false)") + f", mean held-out AUROC: RA-Det {ra:.4f}; "
            + ", ".join(f"{m} {v:.4f}" for m, v in base.items()))
        for c in ("jpeg75", "resize0.5"):
            drop = {m: ls[m]["clean"]["mean_auroc"] - ls[m][c]["mean_auroc"] for m in ("ra-det", "linear-probe")}
            t[f"logo_{c}_radet_drop_below_linear_probe_drop"] = target(
                round(drop["ra-det"], 4), round(drop["linear-probe"], 4),
                full and drop["ra-det"] < drop["linear-probe"],
                f"LOGO mean held-out AUROC lost under {c}: RA-Det {drop['ra-det']:.4f}, linear probe "
                f"{drop['linear-probe']:.4f}")
    else:
        t["logo_radet_minus_best_baseline_mean_auroc"] = target(None, 0.02, False, "LOGO parts not run")
    return t


def markdown(out: dict) -> str:
    res, m = out["results"], out["machine"]
    lines = [f"detect-synthetic benchmark, {out['date']}, {m['cpu']} ({m['cores']} cores, shared), `{out['command']}`",
             "", "The paper reports +12.92 % average over ten detectors on its 14 generators (its number, "
             "DINOv3 on ProGAN training; not reproduced here).", ""]
    t2 = res.get("t2")
    if t2:
        gens = t2["test_generators"]
        lines += [f"T2: trained on {' + '.join(t2['train_generators'])} ({t2['n_train_crops'][0]} real + "
                  f"{t2['n_train_crops'][1]} generated crops), AUROC per unseen generator (its reals vs its fakes):",
                  "", "| method | condition | " + " | ".join(gens) + " | mean |", "|---|---|" + "---|" * (len(gens) + 1)]
        for meth, row in t2["methods"].items():
            for c in CONDITIONS:
                pg = row[c]["per_generator"]
                lines.append(f"| {meth} | {c} | " + " | ".join(f"{pg[g]['auroc']:.3f}" for g in gens)
                             + f" | **{row[c]['mean_auroc']:.4f}** |")
        lines += ["", "| method | train min | scoring images/s |", "|---|---|---|"]
        for meth, row in t2["methods"].items():
            lines.append(f"| {meth} | {row['train_minutes']} | {row['images_per_second']} |")
        br = t2["methods"].get("ra-det", {}).get("branch_auroc_clean")
        if br:
            f = t2["methods"]["ra-det"]["fit"]
            lines += ["", f"RA-Det branches alone on T2 (calibrated; fusion chosen on validation: {f.get('fusion')}):",
                      "", "| generator | foundation | cnn | l2 | diff |", "|---|---|---|---|---|"]
            lines += [f"| {g} | " + " | ".join(f"{v[b]:.3f}" for b in ("p_foundation", "p_cnn", "p_l2", "p_diff")) + " |"
                      for g, v in br.items()]
    logo = res.get("logo")
    gens = [g for g in CNNDETECTION_GENERATORS if (logo or {}).get(g, {}).get("steps") == LOGO_STEPS]
    if gens and "rigid" in logo:
        ls = logo_summary(logo)
        lines += ["", f"T2 leave-one-generator-out ({len(gens)} of {len(CNNDETECTION_GENERATORS)} folds run): each "
                  "column trains on the other nine generators (180 real + 180 generated crops; RA-Det and the "
                  f"fine-tuned classifier {LOGO_STEPS} steps of {BATCH}, half T2's; RIGID training-free, evaluated "
                  "once) and tests on that one's 20 reals vs its 20 fakes; AUROC:", "",
                  "| method | condition | " + " | ".join(gens) + " | mean | train min |", "|---|---|" + "---|" * (len(gens) + 2)]
        for meth in METHODS:
            for c in CONDITIONS:
                pg = ls[meth][c]["per_generator"]
                lines.append(f"| {meth} | {c} | " + " | ".join(f"{pg[g]:.3f}" if g in pg else "" for g in gens)
                             + f" | **{ls[meth][c]['mean_auroc']:.4f}** | "
                             + (f"{ls[meth]['train_minutes_mean']} |" if c == "clean" else " |"))
    t1 = res.get("t1")
    if t1:
        lines += ["", f"T1 aligned: {t1['n_train_pairs']} train / {t1['n_test_pairs']} test pairs (real crop, TAEF2 "
                  f"reconstruction) from {t1['n_sources']} source photos, split by photo:", "",
                  "| method | AUROC | AP | acc@0.5 | train min | images/s |", "|---|---|---|---|---|---|"]
        for meth, row in t1["methods"].items():
            c = row["clean"]
            lines.append(f"| {meth} | {c['auroc']:.4f} | {c['ap']:.4f} | {c['acc_at_0_5']:.4f} | {row['train_minutes']} | "
                         f"{row['images_per_second']} |")
    sp = res.get("speed")
    if sp:
        lines += ["", f"RA-Det training speed ({sp['image_size']} px, batch {sp['batch_size']}, {sp['torch_threads']} "
                  f"thread): landed loop {sp['landed']['steps_per_second']} steps/s, now {sp['now']['steps_per_second']} "
                  f"steps/s ({sp['speedup']}x)."]
    lines += ["", "| target | value | threshold | met | note |", "|---|---|---|---|---|"]
    for k, t in out["targets"].items():
        lines.append(f"| {k} | {t['value']} | {t['threshold']} | {'yes' if t['met'] else '**no**'} | {t['note']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated: {', '.join(PARTS)}, report")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds: start no further part once the time used plus the longest part so far would pass "
                    "this (parts already written are kept; for running several logo folds inside one time slot)")
    ap.add_argument("--cache", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "icmlkit-detect-bench"),
                    help="folder for T1's crops and reconstructions (outside the repository)")
    args = ap.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    bad = [p for p in parts if p not in (*PARTS, "report")]
    if bad:
        ap.error(f"unknown part(s) {bad}")
    if shared_data_dir("cnndetection") is None or shared_data_dir("taef2") is None:
        sys.exit("detect-synthetic benchmark: ../shared/data/cnndetection and taef2 are needed (skipped)")
    torch.set_num_threads(int(os.environ.get("ICMLKIT_BENCH_THREADS", "1")))
    old = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {}
    res = old.get("results", {}) if "parts" in old.get("results", {}) else {"parts": {}}
    mach = machine()
    t_start, longest = time.perf_counter(), {}  # the longest part so far of each kind (the logo folds are one kind)

    def kind(q):
        return "logo-fold" if q.startswith("logo-") and q != "logo-rigid" else q

    for p in [*[q for q in parts if q != "report"], "report"]:
        t0 = time.perf_counter()
        need = longest.get(kind(p), max(longest.values(), default=0.0))
        if p != "report" and args.budget is not None and t0 - t_start + need > args.budget:
            print(f"part {p} not started: the budget of {args.budget:.0f} s would be passed", file=sys.stderr)
            continue
        if p == "speed":
            res["speed"] = part_speed()
        elif p == "logo-rigid":
            res.setdefault("logo", {})["rigid"] = part_logo_rigid()
        elif p.startswith("logo-"):
            fold = part_logo(int(p.split("-")[1]))
            res.setdefault("logo", {})[fold["held_out"]] = fold
        elif p != "report":
            tier, which = p.split("-")
            methods = ("ra-det",) if which == "radet" else BASELINES
            new = part_t1(methods, Path(args.cache)) if tier == "t1" else part_t2(methods)
            prev = res.get(tier, {})
            new["methods"] = {**prev.get("methods", {}), **new["methods"]}
            res[tier] = new
        if p != "report":
            longest[kind(p)] = max(longest.get(kind(p), 0.0), time.perf_counter() - t0)
            res["parts"][p] = {"date": today(), "seconds": round(time.perf_counter() - t0, 1), "torch_threads":
                               torch.get_num_threads(),
                               "load_average_1min_start": mach["load_average_1min"],
                               "load_average_1min_end": machine()["load_average_1min"]}
        # written after every part, so a part cut short by a time limit loses only itself
        out = {"tool": "detect-synthetic", "date": today(), "commit": commit(),
               "machine": {**mach, "torch_threads": torch.get_num_threads()},
               "command": "python bench/detect_synthetic.py --parts PART[,PART...]  (parts: " + ", ".join(PARTS)
               + ", report; each merges into this file; `make bench TOOL=detect-synthetic` runs all)", "results": res}
        out["targets"] = targets_of(res)
        md = markdown(out)
        write_results("detect_synthetic", out, md)
    print(md)


if __name__ == "__main__":
    main()
