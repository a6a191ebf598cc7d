"""The demo of detect-synthetic: the offline benchmark at its quick sizes, in about a minute.

Quick generators (DCGAN, DDPM, VAE) on real photo crops; RA-Det, RIGID, the linear probe and the
fine-tuned classifier trained on real vs DCGAN only, tested on DCGAN, DDPM and VAE (the last two
unseen). RA-Det's calibration and fusion rule come from 20 % of the training photos' crops held
out, so its accuracy at 0.5 is meaningful; the headline gives it on the training generator.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from icmlkit.lib.core.console import log
from icmlkit.lib.core.io import write_json
from icmlkit.lib.detect_synthetic.benchmark import QUICK, make_benchmark
from icmlkit.lib.detect_synthetic.config import METHODS, DetectorConfig, ProbeConfig
from icmlkit.lib.detect_synthetic.images import generator_groups, list_images
from icmlkit.lib.detect_synthetic.model import save_model
from icmlkit.lib.detect_synthetic.pipeline import ImageSet, evaluate, probe, probe_detector, train

DEMO_STEPS = 60


def load_split(folder: Path, size: int = 32):
    """(train reals, train fakes, test reals, {generator: test fakes}) as :class:`ImageSet` from a
    folder written by ``detect-synthetic generate``."""
    def load(path):
        return ImageSet.load(list_images([path]), size)

    fakes = {k: ImageSet.load(v, size) for k, v in generator_groups(folder / "test" / "1_fake").items()}
    return load(folder / "train" / "0_real"), load(folder / "train" / "1_fake"), load(folder / "test" / "0_real"), fakes


def run_demo(folder: Path, *, seed: int = 0, device="cpu") -> dict:
    """The quick benchmark, RA-Det and the three baselines trained on real vs DCGAN, evaluated on
    every generator; writes the images, the four models and summary.json into ``folder``."""
    folder = Path(folder)
    data = folder / "benchmark"
    info = make_benchmark(data, n_train=QUICK["n_train"], n_test=QUICK["n_test"], steps=QUICK["steps"],
                          sampling_steps=QUICK["sampling_steps"], seed=seed)
    train_real, train_fake, test_real, fakes = load_split(data)
    gauss = ProbeConfig()
    encoder = probe_detector(gauss, device).encoder
    asym = {k: probe(gauss, v, test_real, seed=seed, encoder=encoder).summary["mann_whitney"]["p_value"]
            for k, v in fakes.items()}
    methods = {}
    for m in METHODS:
        log.info("demo: training %s on real vs %s ...", m, info["train_generator"])
        cfg = DetectorConfig(method=m, steps=DEMO_STEPS if m == "ra-det" else DEMO_STEPS // 2, batch_size=32)
        det = train(cfg, train_real, train_fake, seed=seed, device=device, encoder=encoder).detector
        save_model(folder / f"{m}.pt", det)
        res = evaluate(det, test_real, fakes, seed=seed).summary
        per = {k: round(v["auroc"], 4) for k, v in res["per_generator"].items()}
        unseen = [v for k, v in per.items() if k != info["train_generator"]]
        methods[m] = {"auroc": per, "unseen_mean_auroc": round(float(np.mean(unseen)), 4),
                      "acc_at_0_5": {k: round(v["acc_at_0_5"], 4) for k, v in res["per_generator"].items()}}
    head = ", ".join(f"{m} {methods[m]['unseen_mean_auroc']:.3f}" for m in METHODS)
    tg = info["train_generator"]
    ra = methods["ra-det"]
    summary = {"headline": f"ra-det on {tg} (its training generator): AUROC {ra['auroc'][tg]:.3f}, accuracy at 0.5 "
               f"{ra['acc_at_0_5'][tg]:.3f}; mean AUROC on unseen generators (ddpm, vae): {head}",
               "methods": methods, "asymmetry_p": asym, "benchmark": info}
    write_json(folder / "summary.json", summary)
    return summary
