"""The offline benchmark of detect-synthetic: real photo crops vs three in-process generators.

- Real: random square crops (side 48 px to half the photo's short side, resized to 32 px with
  Pillow's bicubic filter) of the photographs shipped with scikit-image and scikit-learn, split by
  **source photograph** (:data:`TRAIN_PHOTOS` / :data:`TEST_PHOTOS`): no photo gives crops to both.
- Generated: a DCGAN, a small DDPM (DDIM sampling) and a VAE, trained in-process on the training
  crops only (:mod:`icmlkit.lib.detect_synthetic.generators`).
- Both classes are written as 32-px PNGs and read back through the one loader
  (:func:`icmlkit.lib.detect_synthetic.images.load_images`): same format, same size, same resizing.

Layout written by :func:`make_benchmark` (CNNDetection style)::

    OUT/train/0_real/*.png   OUT/train/1_fake/*.png          (real vs the training generator)
    OUT/test/0_real/*.png    OUT/test/1_fake/<generator>/*.png  (every generator, unseen ones included)
    OUT/benchmark.json
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from icmlkit.lib.core.console import log
from icmlkit.lib.core.errors import EnvironmentProblem, UsageError, require_module
from icmlkit.lib.core.io import write_json
from icmlkit.lib.core.runtime import numpy_rng
from icmlkit.lib.detect_synthetic.generators import GENERATORS, train_and_sample
from icmlkit.lib.detect_synthetic.images import to_tensor, to_uint8, write_pngs

TRAIN_PHOTOS = ("astronaut", "coffee", "chelsea", "hubble_deep_field", "immunohistochemistry", "china",
                "camera", "brick", "gravel", "coins")
TEST_PHOTOS = ("rocket", "motorcycle_left", "retina", "flower", "grass", "moon", "clock")

FULL = {"size": 32, "n_train": 1200, "n_test": 250, "sampling_steps": 50,
        "steps": {"dcgan": 1200, "ddpm": 800, "vae": 800}}
QUICK = {"size": 32, "n_train": 240, "n_test": 80, "sampling_steps": 20,
         "steps": {"dcgan": 150, "ddpm": 100, "vae": 200}}


def load_photo(name: str) -> np.ndarray:
    """One source photograph as uint8 (H, W, 3) (grey ones are repeated over the channels)."""
    if name in ("china", "flower"):
        require_module("sklearn.datasets", "detect-synthetic", "scikit-learn")
        from sklearn.datasets import load_sample_image

        img = load_sample_image(f"{name}.jpg")
    else:
        data = require_module("skimage.data", "detect-synthetic", "scikit-image")
        if name == "motorcycle_left":
            img = data.stereo_motorcycle()[0]
        else:
            try:
                img = getattr(data, name)()
            except Exception as exc:  # noqa: BLE001 - e.g. a data file that would need a download
                raise EnvironmentProblem(f"scikit-image photo {name!r} is not available offline ({exc}); "
                                         "pip install 'icmlkit[detect-synthetic]'") from None
    img = np.asarray(img)
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    return np.ascontiguousarray(img[:, :, :3]).astype(np.uint8)


def real_crops(photos, n: int, size: int = 32, seed: int = 0, min_side: int = 48,
               stream: str = "crops") -> tuple[np.ndarray, list]:
    """``n`` random crops spread evenly over ``photos`` (positions and sides from the named
    ``stream`` of ``seed``); returns (uint8 (n, size, size, 3), source names)."""
    from PIL import Image

    rng = numpy_rng(seed, stream)
    out, src = [], []
    per = np.full(len(photos), n // len(photos))
    per[: n - per.sum()] += 1
    for name, k in zip(photos, per):
        img = load_photo(name)
        h, w = img.shape[:2]
        hi = max(min_side + 1, min(h, w) // 2)
        sides = rng.integers(min_side, hi, size=k)
        ys = rng.integers(0, h - sides + 1)
        xs = rng.integers(0, w - sides + 1)
        pil = Image.fromarray(img)
        for s, y, x in zip(sides, ys, xs):
            crop = pil.crop((int(x), int(y), int(x + s), int(y + s))).resize((size, size), Image.Resampling.BICUBIC)
            out.append(np.asarray(crop, dtype=np.uint8))
            src.append(name)
    return np.stack(out), src


def make_benchmark(out_dir, train_generator: str = "dcgan", generators=GENERATORS, size: int = 32,
                   n_train: int = 1200, n_test: int = 300, steps: dict | None = None,
                   sampling_steps: int = 50, seed: int = 0, samples: dict | None = None) -> dict:
    """Build the benchmark folder ``out_dir`` (see the module docstring). Returns its description.

    ``samples`` (generator -> uint8 (n, size, size, 3), the training generator's ``n_train`` first):
    generated images made before (the demo's shipped ones) written instead of training the
    generators; their description is then ``samples["info"]``'s (a dict, as returned before)."""
    if train_generator not in generators:
        raise UsageError(f"--train-generator {train_generator!r} must be one of {', '.join(generators)}")
    if size != 32:
        raise UsageError("the in-process generators produce 32-px images; --size must be 32")
    steps = {**FULL["steps"], **(steps or {})}
    out = Path(out_dir)
    t0 = time.perf_counter()
    log.info("real crops: %d train from %d photos, %d test from %d other photos", n_train, len(TRAIN_PHOTOS),
             n_test, len(TEST_PHOTOS))
    train_real, _ = real_crops(TRAIN_PHOTOS, n_train, size, seed, stream="train-crops")
    test_real, _ = real_crops(TEST_PHOTOS, n_test, size, seed, stream="test-crops")
    write_pngs(out / "train" / "0_real", train_real, "real")
    write_pngs(out / "test" / "0_real", test_real, "real")
    x_train = to_tensor(train_real)
    info: dict = {"size": size, "train_photos": list(TRAIN_PHOTOS), "test_photos": list(TEST_PHOTOS),
                  "n_train_real": n_train, "n_test_real": n_test, "train_generator": train_generator,
                  "generators": {}, "seed": seed}
    made = dict((samples or {}).get("info", {}).get("generators", {}))
    for name in generators:  # each generator draws from its own named streams of the seed
        n = n_test + (n_train if name == train_generator else 0)
        if samples is not None:
            pix = np.asarray(samples[name], dtype=np.uint8)
            if pix.shape != (n, size, size, 3):
                raise UsageError(f"the given {name} samples have shape {pix.shape}, not {(n, size, size, 3)}")
        else:
            gen, t_train, t_sample = train_and_sample(name, x_train, n, steps[name], seed=seed,
                                                      sampling_steps=sampling_steps)
            pix = to_uint8(gen)
            made[name] = {"steps": steps[name], "samples": n, "seconds_train": round(t_train, 2),
                          "seconds_sample": round(t_sample, 2)}
        if name == train_generator:
            write_pngs(out / "train" / "1_fake", pix[:n_train], name)
            pix = pix[n_train:]
        write_pngs(out / "test" / "1_fake" / name, pix, name)
        info["generators"][name] = made[name]
    info["seconds"] = round(time.perf_counter() - t0, 2)
    write_json(out / "benchmark.json", info)
    return info

