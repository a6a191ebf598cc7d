"""Real benchmark data of detect-synthetic: the CNNDetection ranking sample, the TAEF2-aligned
tier, crops, and splits that never share a source photograph.

- :func:`read_cnndetection`: a flat folder of ``N_<generator>_<real|fake>.<ext>`` files (the
  ``../shared/data/cnndetection/images`` sample of Wang et al. 2020, CC BY-NC-SA: read in place,
  never copied) -> per generator its real and its generated files. A name that does not follow
  the pattern, or names a generator outside :data:`CNNDETECTION_GENERATORS`, is an
  :class:`InputError` naming the file (exit 1).
- :func:`split_by_source`: disjoint train / validation / test parts of items grouped by their
  source (a photograph and every crop or reconstruction made from it stay in one part).
- :func:`native_crops`: square crops at the native resolution (no resizing, so the generators'
  pixel-level traces survive), random for training, centred for testing.
- :func:`aligned_pairs`: tier T1, real photo crops and their TAEF2 reconstructions, both classes
  through the same PNG (or JPEG) round trip.
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.runtime import numpy_rng

# the ten generators of the sample, by the names its files use (seeingdark = SITD, deepfake = FaceForensics++)
CNNDETECTION_GENERATORS = ("stylegan", "biggan", "cyclegan", "stargan", "gaugan", "crn", "imle", "seeingdark",
                           "san", "deepfake")
_NAME = re.compile(r"^(\d+)_([a-z0-9]+)_(real|fake)$")
# colour photographs shipped with scikit-image, scikit-learn and matplotlib (tier T1's other reals;
# the grey ones are left out: a reconstruction that tints a grey photo would be a trivial cue)
LIBRARY_PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "motorcycle_left", "hubble_deep_field",
                  "immunohistochemistry", "retina", "china", "flower", "grace_hopper")


@dataclass
class GeneratorFiles:
    """One generator's files of the CNNDetection sample (sorted by their number)."""

    real: list = field(default_factory=list)
    fake: list = field(default_factory=list)


def read_cnndetection(folder, generators=None) -> dict[str, GeneratorFiles]:
    """Pair the files of a CNNDetection ranking folder by generator.

    ``generators``: the names to keep (each must be one of :data:`CNNDETECTION_GENERATORS`);
    None keeps all. Every file must be named ``N_<generator>_<real|fake>.<ext>`` with a known
    generator, else an :class:`InputError` naming it; a kept generator without reals or without
    fakes is an error too."""
    from icmlkit.lib.detect_synthetic.images import is_image_name

    root = Path(folder)
    if not root.is_dir():
        raise InputError("no such folder (a CNNDetection folder of N_<generator>_<real|fake>.jpg files)", str(root))
    wanted = list(CNNDETECTION_GENERATORS if generators is None else generators)
    for g in wanted:
        if g not in CNNDETECTION_GENERATORS:
            raise InputError(f"unknown generator {g!r}; the CNNDetection sample has {', '.join(CNNDETECTION_GENERATORS)}",
                             str(root))
    found: dict[str, GeneratorFiles] = {}
    numbered = []
    for p in sorted(root.iterdir()):
        if not p.is_file() or not is_image_name(p):
            continue
        m = _NAME.match(p.stem.lower())
        if m is None:
            raise InputError("not a CNNDetection file name (expected N_<generator>_<real|fake>.<ext>)", str(p))
        num, gen, label = int(m.group(1)), m.group(2), m.group(3)
        if gen not in CNNDETECTION_GENERATORS:
            raise InputError(f"unknown generator {gen!r} in the file name (known: {', '.join(CNNDETECTION_GENERATORS)})",
                             str(p))
        numbered.append((num, gen, label, str(p)))
    for num, gen, label, path in sorted(numbered):
        if gen in wanted:
            getattr(found.setdefault(gen, GeneratorFiles()), label).append(path)
    for g in wanted:
        got = found.get(g, GeneratorFiles())
        if not got.real or not got.fake:
            raise InputError(f"generator {g!r} needs real and fake files (found {len(got.real)} real, "
                             f"{len(got.fake)} fake)", str(root))
    return {g: found[g] for g in wanted}


def split_by_source(sources, fractions, seed: int = 0, stream: str = "split") -> list[np.ndarray]:
    """Indices of ``sources`` (one source id per item) in ``len(fractions)`` disjoint parts: the
    distinct sources are shuffled (named stream ``stream`` of ``seed``) and cut by ``fractions``
    (normalised; every part with a positive fraction gets at least one source when there are
    enough), so all items of one source land in the same part."""
    sources = np.asarray([str(s) for s in sources])
    uniq = np.unique(sources)
    order = numpy_rng(seed, stream).permutation(len(uniq))
    fr = np.asarray(fractions, dtype=np.float64)
    fr = fr / fr.sum()
    n = len(uniq)
    counts = np.round(fr * n).astype(int)
    if n >= int((fr > 0).sum()):
        counts[(fr > 0) & (counts == 0)] = 1  # a positive fraction gets a source when there are enough
    while counts.sum() > n:
        counts[int(np.argmax(counts))] -= 1
    while counts.sum() < n:
        counts[int(np.argmax(fr))] += 1
    cuts = np.cumsum(counts)
    parts, lo = [], 0
    for hi in cuts:
        chosen = set(uniq[order[lo:hi]])
        parts.append(np.flatnonzero([s in chosen for s in sources]))
        lo = hi
    return parts


def load_native(paths) -> list[np.ndarray]:
    """Decode image files as uint8 RGB arrays at their own size (an :class:`InputError` naming a bad file)."""
    from icmlkit.lib.detect_synthetic.images import _image_problem, _pil

    Image = _pil()
    out = []
    for p in paths:
        try:
            with Image.open(p) as im:
                out.append(np.asarray(im.convert("RGB"), dtype=np.uint8))
        except Exception as exc:  # noqa: BLE001 - Pillow raises many types for bad files
            raise InputError(f"not a readable image ({_image_problem(exc, Image)})", str(p)) from None
    return out


def native_crops(images, size: int, per_image: int = 1, seed: int = 0, stream: str = "crops",
                 centre: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Square ``size`` crops of uint8 (H, W, 3) images at their native resolution: ``per_image``
    random positions each (named stream), or the centre crop. Returns (uint8 (N, size, size, 3),
    index of the source image of each crop)."""
    rng = numpy_rng(seed, stream)
    out, src = [], []
    for i, img in enumerate(images):
        h, w = img.shape[:2]
        if h < size or w < size:
            raise InputError(f"image of {w}x{h} px is smaller than the {size}-px crop", f"image {i}")
        for _ in range(1 if centre else per_image):
            y, x = ((h - size) // 2, (w - size) // 2) if centre else (int(rng.integers(0, h - size + 1)),
                                                                         int(rng.integers(0, w - size + 1)))
            out.append(img[y:y + size, x:x + size])
            src.append(i)
    return np.stack(out), np.asarray(src)


def roundtrip(pixels, fmt: str = "png", quality: int = 95) -> np.ndarray:
    """Store uint8 (N, H, W, 3) images as PNG or JPEG and decode them again (both classes alike)."""
    from icmlkit.lib.detect_synthetic.images import _image_problem, _pil

    Image = _pil()
    out = []
    for img in pixels:
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="PNG" if fmt == "png" else "JPEG",
                                  **({"compress_level": 6} if fmt == "png" else {"quality": int(quality)}))
        buf.seek(0)
        with Image.open(buf) as im:
            out.append(np.asarray(im.convert("RGB"), dtype=np.uint8))
    return np.stack(out)


def library_photo(name: str) -> np.ndarray:
    """A photograph shipped with scikit-image, scikit-learn or matplotlib (uint8 (H, W, 3))."""
    if name == "grace_hopper":
        from icmlkit.lib.core.errors import require_module

        cbook = require_module("matplotlib.cbook", "bench", "matplotlib")
        with cbook.get_sample_data("grace_hopper.jpg") as f:
            return load_native([f.name])[0]
    from icmlkit.lib.detect_synthetic.benchmark import load_photo

    return load_photo(name)


def aligned_pairs(images, sources, size: int, per_image: int, taef2, seed: int = 0, fmt: str = "png"):
    """Tier T1: ``per_image`` random ``size`` crops of each real image, and the TAEF2 reconstruction
    of each crop (the same content, decoded by the generator); both classes stored through the same
    ``fmt`` round trip. Returns (real uint8, fake uint8, source id per crop)."""
    import torch

    from icmlkit.lib.detect_synthetic.images import to_tensor, to_uint8

    reals, srcs = [], []
    for k, (img, s) in enumerate(zip(images, sources)):
        n = per_image if min(img.shape[:2]) >= 2 * size else 1
        crops, _ = native_crops([img], size, n, seed, stream=f"t1-crops/{s}")
        reals.append(crops)
        srcs += [s] * len(crops)
    real = np.concatenate(reals)
    with torch.no_grad():
        fake = to_uint8(taef2.reconstruct(to_tensor(real)))
    return roundtrip(real, fmt), roundtrip(fake, fmt), np.asarray(srcs)
