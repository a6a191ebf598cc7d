"""The demo of detect-synthetic: the offline benchmark at its quick sizes, within a 60-s CPU budget.

Real photo crops vs three quick generators (DCGAN, DDPM, VAE; half the quick benchmark's crops:
:data:`DEMO_SIZES`); RA-Det (30 steps), RIGID and the linear probe trained on real vs DCGAN only, tested on DCGAN, DDPM and VAE (the last two unseen). The generated
images are the ones shipped in ``data/detect_synthetic/quick_generated.npz`` (seed 0's quick
generators; ``detect-synthetic demo --train-generators`` trains them again, as that file was made,
and writes OUTDIR/generated.npz); other seeds train their own. RA-Det's calibration and fusion rule
come from 20 % of the training photos' crops held out, so its accuracy at 0.5 is meaningful; the
headline gives it on the training generator. The fine-tuned classifier, longer trainings and the
real benchmark (CNNDetection, TAEF2) are bench/detect_synthetic.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from icmlkit.lib.core.console import log
from icmlkit.lib.core.io import load_npz, write_json, write_npz
from icmlkit.lib.detect_synthetic.benchmark import QUICK, make_benchmark
from icmlkit.lib.detect_synthetic.config import TOY_SIZES, DetectorConfig, ProbeConfig
from icmlkit.lib.detect_synthetic.images import generator_groups, list_images
from icmlkit.lib.detect_synthetic.model import save_model
from icmlkit.lib.detect_synthetic.metrics import asymmetry_test
from icmlkit.lib.detect_synthetic.pipeline import ImageSet, evaluate, probe_detector, train

DEMO_STEPS = 30
DEMO_METHODS = ("ra-det", "rigid", "linear-probe")  # finetune (an 18 MB model) is the benchmark's
# the quick benchmark's generators (steps, sampling) on half its crops: 120 training crops a class,
# 40 test crops per class and generator
DEMO_SIZES = {"n_train": QUICK["n_train"] // 2, "n_test": QUICK["n_test"] // 2}
GENERATED = Path(__file__).resolve().parents[2] / "data" / "detect_synthetic" / "quick_generated.npz"
GENERATED_SEED = 0  # the seed the shipped generated images were made with


def load_split(folder: Path, size: int = 32):
    """(train reals, train fakes, test reals, {generator: test fakes}) as :class:`ImageSet` from a
    folder written by ``detect-synthetic generate``."""
    def load(path):
        return ImageSet.load(list_images([path]), size)

    fakes = {k: ImageSet.load(v, size) for k, v in generator_groups(folder / "test" / "1_fake").items()}
    return load(folder / "train" / "0_real"), load(folder / "train" / "1_fake"), load(folder / "test" / "0_real"), fakes


def _read_pixels(files) -> np.ndarray:
    from PIL import Image

    return np.stack([np.asarray(Image.open(f).convert("RGB"), dtype=np.uint8) for f in files])


def _generated_arrays(data: Path, info: dict) -> dict:
    """The generated images of a benchmark folder as the arrays of ``generated.npz``."""
    fakes = generator_groups(data / "test" / "1_fake")
    arrays = {g: _read_pixels(sorted(map(str, fakes[g]))) for g in info["generators"]}
    tg = info["train_generator"]
    arrays[tg] = np.concatenate([_read_pixels(sorted(map(str, list_images([data / "train" / "1_fake"])))), arrays[tg]])
    kept = {k: v for k, v in info.items() if k not in ("seconds", "generated")}  # no clock: the same bytes
    kept["generators"] = {g: {"steps": v["steps"], "samples": v["samples"]} for g, v in info["generators"].items()}
    return {**arrays, "info": np.array(json.dumps(kept, sort_keys=True))}


def _shipped(seed: int) -> dict | None:
    """The shipped generated images as ``make_benchmark``'s ``samples``, or None (another seed, or
    a checkout without them)."""
    if seed != GENERATED_SEED or not GENERATED.is_file():
        return None
    z = load_npz(GENERATED, required=("info",))
    info = json.loads(str(z["info"]))
    return {**{g: z[g] for g in info["generators"]}, "info": info}


def run_demo(folder: Path, *, seed: int = 0, device="cpu", train_generators: bool = False) -> dict:
    """The quick benchmark (shipped generated images, or trained here), RA-Det and two baselines
    trained on real vs DCGAN, evaluated on every generator; writes the images, the models and
    summary.json into ``folder`` (with ``train_generators``, also generated.npz)."""
    folder = Path(folder)
    data = folder / "benchmark"
    samples = None if train_generators else _shipped(seed)
    if samples is None:
        log.info("demo: training the quick generators (seed %d; about 30 s) ...", seed)
    info = make_benchmark(data, n_train=DEMO_SIZES["n_train"], n_test=DEMO_SIZES["n_test"], steps=QUICK["steps"],
                          sampling_steps=QUICK["sampling_steps"], seed=seed, samples=samples)
    info["generated"] = "trained here" if samples is None else f"shipped (data/detect_synthetic/{GENERATED.name})"
    if train_generators:
        write_npz(folder / "generated.npz", **_generated_arrays(data, info))
    train_real, train_fake, test_real, fakes = load_split(data)
    encoder = probe_detector(ProbeConfig(**TOY_SIZES), device).encoder
    methods, asym = {}, {}
    for m in DEMO_METHODS:
        log.info("demo: training %s on real vs %s ...", m, info["train_generator"])
        cfg = DetectorConfig(method=m, steps=DEMO_STEPS, batch_size=32, **TOY_SIZES)
        det = train(cfg, train_real, train_fake, seed=seed, device=device, encoder=encoder).detector
        save_model(folder / f"{m}.pt", det)
        ev = evaluate(det, test_real, fakes, seed=seed)
        res = ev.summary
        if m == "rigid":  # its drift is `probe`'s under the default Gaussian probe: the asymmetry test
            asym = {k: asymmetry_test(1 - ev.scores["real"]["cos"].numpy(), 1 - ev.scores[k]["cos"].numpy())["p_value"]
                    for k in fakes}
        per = {k: round(v["auroc"], 4) for k, v in res["per_generator"].items()}
        unseen = [v for k, v in per.items() if k != info["train_generator"]]
        methods[m] = {"auroc": per, "unseen_mean_auroc": round(float(np.mean(unseen)), 4),
                      "acc_at_0_5": {k: round(v["acc_at_0_5"], 4) for k, v in res["per_generator"].items()}}
    head = ", ".join(f"{m} {methods[m]['unseen_mean_auroc']:.3f}" for m in DEMO_METHODS)
    tg = info["train_generator"]
    ra = methods["ra-det"]
    summary = {"headline": f"ra-det on {tg} (its training generator): AUROC {ra['auroc'][tg]:.3f}, accuracy at 0.5 "
               f"{ra['acc_at_0_5'][tg]:.3f}; mean AUROC on unseen generators (ddpm, vae): {head} "
               f"({DEMO_STEPS} steps, 32-px toy images)",
               "methods": methods, "asymmetry_p": asym, "benchmark": info}
    write_json(folder / "summary.json", summary)
    return summary
