"""The demo of detect-synthetic: the offline benchmark at its quick sizes, in about a minute.

Quick generators (DCGAN, DDPM, VAE) on real photo crops; RA-Det, RIGID and the linear probe
trained on real vs DCGAN only, tested on DCGAN, DDPM and VAE (the last two unseen).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from icmlkit.lib.core.console import log
from icmlkit.lib.core.io import write_json
from icmlkit.lib.detect.benchmark import QUICK, evaluate, make_benchmark
from icmlkit.lib.detect.images import generator_groups, list_images, load_images, to_tensor
from icmlkit.lib.detect.metrics import asymmetry_test
from icmlkit.lib.detect.model import METHODS, Detector, DetectorConfig, save_model

DEMO_STEPS = 60


def load_split(folder: Path, size: int = 32):
    """(train x, train y, test reals, {generator: test fakes}) from a make-benchmark folder."""
    def load(paths):
        return to_tensor(load_images(list_images(paths), size).pixels)

    xr, xf = load([folder / "train" / "0_real"]), load([folder / "train" / "1_fake"])
    x = torch.cat([xr, xf])
    y = torch.cat([torch.zeros(len(xr)), torch.ones(len(xf))])
    test_real = load([folder / "test" / "0_real"])
    fakes = {k: to_tensor(load_images(v, size).pixels) for k, v in generator_groups(folder / "test" / "1_fake").items()}
    return x, y, test_real, fakes


def run_demo(folder: Path, seed: int = 0, device="cpu") -> dict:
    folder = Path(folder)
    data = folder / "benchmark"
    info = make_benchmark(data, n_train=QUICK["n_train"], n_test=QUICK["n_test"], steps=QUICK["steps"],
                          sampling_steps=QUICK["sampling_steps"], seed=seed)
    x, y, test_real, fakes = load_split(data)
    rigid = Detector(DetectorConfig(method="rigid"), device=device)
    d_real = 1 - rigid.score(test_real, seed=seed)["cos"].numpy()
    asym = {k: asymmetry_test(d_real, 1 - rigid.score(v, seed=seed)["cos"].numpy())["p_value"] for k, v in fakes.items()}
    methods = {}
    for m in METHODS:
        log.info("demo: training %s on real vs %s ...", m, info["train_generator"])
        det = Detector(DetectorConfig(method=m, steps=DEMO_STEPS, batch_size=32), encoder=rigid.encoder, device=device,
                       seed=seed)
        det.fit(x, y, seed=seed)
        save_model(folder / f"{m}.pt", det)
        res = evaluate(det, test_real, fakes, seed=seed)
        per = {k: round(v["auroc"], 4) for k, v in res["per_generator"].items()}
        unseen = [v for k, v in per.items() if k != info["train_generator"]]
        methods[m] = {"auroc": per, "unseen_mean_auroc": round(float(np.mean(unseen)), 4),
                      "acc_at_0_5": {k: round(v["acc_at_0_5"], 4) for k, v in res["per_generator"].items()}}
    head = ", ".join(f"{m} {methods[m]['unseen_mean_auroc']:.3f}" for m in METHODS)
    summary = {"headline": f"mean AUROC on unseen generators (ddpm, vae; trained on dcgan): {head}",
               "methods": methods, "asymmetry_p": asym, "benchmark": info}
    write_json(folder / "summary.json", summary)
    return summary
