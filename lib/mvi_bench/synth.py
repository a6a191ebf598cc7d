"""``mvi-bench generate``: an offline stand-in for MVI-Bench in the official schema **[reconstructed]**.

Pairs spread evenly over the six categories, answers known by construction (both images of a pair
share question, options and gold answer; only the misleading cue differs):

- resemblance (real photos): the object's photo vs the same photo blended (35 %) with a photo of a
  distractor object, which the image then partly resembles;
- representation (real photos): the photo vs the photo with a framed 2-D picture (a "poster") of a
  distractor object pinned into it;
- mirror (real photos): the photo vs the photo beside a framed, darkened mirror that reflects
  (horizontally flips) a distractor object; the question asks for the object, not its reflection;
- material (rendered): a solid shape vs the same shape made of a texture (brick, grass, gravel from
  scikit-image) on a background of similar texture;
- occlusion (rendered): N discs vs the same N discs with an opaque bar hiding part of one;
- illusion (rendered): Mueller-Lyer lines (plain vs with fins that push the wrong way) and
  Ebbinghaus discs (plain vs with large / small surrounding discs that push the wrong way).

Photos: scikit-image's chelsea, coffee, rocket, motorcycle_left, camera and scikit-learn's china
and flower images (all shipped in the wheels). Images are PNG, ``size`` x ``size``.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from icmlkit.lib.core.io import write_bytes, write_text
from icmlkit.lib.core.runtime import numpy_rng
from icmlkit.lib.mvi_bench.config import CATEGORIES, SynthConfig

PHOTOS = {  # label -> (loader key, option text)
    "cat": ("skimage:chelsea.png", "a cat"),
    "cup": ("skimage:coffee.png", "a coffee cup"),
    "rocket": ("skimage:rocket.jpg", "a rocket"),
    "motorcycle": ("skimage:motorcycle_left.png", "a motorcycle"),
    "camera": ("skimage:camera.png", "a camera on a tripod"),
    "palace": ("sklearn:china.jpg", "a palace"),
    "flower": ("sklearn:flower.jpg", "a flower"),
}
QUESTIONS = {
    "resemblance": "What is the main object in this image?",
    "representation": "Which real object (not a picture of one) is in this image?",
    "mirror": "Which object is really in the scene (not its reflection in the mirror)?",
    "material": "Which shape is shown in the image?",
    "occlusion": "How many discs are in the image?",
    "illusion": None,  # per construction
}
SHAPES = ("circle", "square", "triangle", "diamond")


def _photo(key: str) -> np.ndarray:
    src, name = key.split(":")
    if src == "skimage":
        import skimage.data
        import skimage.io

        a = skimage.io.imread(Path(skimage.data.__file__).parent / name)
    else:
        from sklearn.datasets import load_sample_image

        a = load_sample_image(name)
    a = np.asarray(a)
    if a.ndim == 2:
        a = np.stack([a] * 3, -1)
    return np.ascontiguousarray(a[..., :3].astype(np.uint8))


def _crop(a: np.ndarray, size: int, rng) -> "object":
    from PIL import Image

    h, w = a.shape[:2]
    s = int(min(h, w) * rng.uniform(0.8, 1.0))
    y, x = int(rng.integers(0, h - s + 1)), int(rng.integers(0, w - s + 1))
    return Image.fromarray(a[y:y + s, x:x + s]).resize((size, size), Image.BICUBIC)


def _png(img) -> bytes:
    import io

    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _photo_pair(cat: str, i: int, size: int, rng, cache: dict):
    from PIL import Image, ImageDraw, ImageOps

    labels = list(PHOTOS)
    gold = labels[i % len(labels)]
    others = [lbl for lbl in labels if lbl != gold]
    picks = list(rng.permutation(len(others))[:3])
    distractors = [others[j] for j in picks]
    cue = distractors[0]
    for lbl in (gold, cue):
        if lbl not in cache:
            cache[lbl] = _photo(PHOTOS[lbl][0])
    normal = _crop(cache[gold], size, rng)
    other = _crop(cache[cue], size, rng)
    if cat == "resemblance":
        mis = Image.blend(normal, other, 0.35)
    elif cat == "representation":
        mis = normal.copy()
        s = int(size * 0.45)
        poster = ImageOps.expand(other.resize((s, s), Image.BICUBIC), border=max(2, size // 40), fill=(245, 245, 240))
        x, y = int(rng.integers(0, size - poster.size[0])), int(rng.integers(0, size // 3))
        mis.paste(poster, (x, y))
    else:  # mirror
        mis = Image.new("RGB", (size, size), (200, 200, 205))
        left = normal.resize((int(size * 0.58), size), Image.BICUBIC)
        mis.paste(left, (0, 0))
        mw = size - left.size[0] - 6
        refl = ImageOps.mirror(other.resize((mw, int(size * 0.8)), Image.BICUBIC))
        refl = Image.blend(refl, Image.new("RGB", refl.size, (150, 170, 190)), 0.25)
        mis.paste(refl, (left.size[0] + 3, int(size * 0.1)))
        d = ImageDraw.Draw(mis)
        d.rectangle([left.size[0] + 1, int(size * 0.1) - 2, size - 2, int(size * 0.9) + 2], outline=(120, 120, 130),
                    width=3)
    choices = [PHOTOS[lbl][1] for lbl in [gold, *distractors]]
    return normal, mis, QUESTIONS[cat], choices, PHOTOS[gold][1]


def _shape(d, kind: str, cx: float, cy: float, r: float, fill) -> None:
    if kind == "circle":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif kind == "square":
        d.rectangle([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif kind == "triangle":
        d.polygon([(cx, cy - r), (cx - r, cy + r * 0.8), (cx + r, cy + r * 0.8)], fill=fill)
    else:
        d.polygon([(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)], fill=fill)


def _texture(name: str, size: int, shift: int) -> "object":
    from PIL import Image

    a = _photo(f"skimage:{name}.png").astype(np.int16)
    a = np.clip(a + shift, 0, 255).astype(np.uint8)
    return Image.fromarray(a).resize((size, size), Image.BICUBIC)


def _material_pair(i: int, size: int, rng):
    from PIL import Image, ImageDraw

    kind = SHAPES[i % len(SHAPES)]
    cx, cy, r = size / 2 + rng.uniform(-size / 10, size / 10), size / 2 + rng.uniform(-size / 10, size / 10), size * 0.28
    colour = tuple(int(c) for c in rng.integers(30, 200, 3))
    normal = Image.new("RGB", (size, size), (235, 235, 235))
    _shape(ImageDraw.Draw(normal), kind, cx, cy, r, colour)
    tex = ("brick", "grass", "gravel")[i % 3]
    mis = _texture(tex, size, -25)
    mask = Image.new("L", (size, size), 0)
    _shape(ImageDraw.Draw(mask), kind, cx, cy, r, 255)
    mis.paste(_texture(tex, size, 25), (0, 0), mask)
    return normal, mis, QUESTIONS["material"], list(SHAPES), kind


def _occlusion_pair(i: int, size: int, rng):
    from PIL import Image, ImageDraw

    n = 2 + i % 4
    r = size * 0.09
    pts = []
    while len(pts) < n:
        p = (rng.uniform(r * 1.5, size - r * 1.5), rng.uniform(r * 1.5, size - r * 1.5))
        if all((p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2 > (3 * r) ** 2 for q in pts):
            pts.append(p)
    colour = tuple(int(c) for c in rng.integers(20, 160, 3))
    normal = Image.new("RGB", (size, size), (245, 245, 245))
    for p in pts:
        _shape(ImageDraw.Draw(normal), "circle", p[0], p[1], r, colour)
    mis = normal.copy()
    cx, cy = pts[int(rng.integers(0, n))]
    ImageDraw.Draw(mis).rectangle([cx - 0.2 * r, cy - 2.2 * r, cx + 1.6 * r, cy + 2.2 * r], fill=(90, 90, 90))
    choices = [str(k) for k in (2, 3, 4, 5)]
    return normal, mis, QUESTIONS["occlusion"], choices, str(n)


def _illusion_pair(i: int, size: int, rng):
    from PIL import Image, ImageDraw

    rel = (0.0, 0.08, -0.08)[i % 3]  # second element's size relative to the first
    if (i // 3) % 2 == 0:  # Mueller-Lyer
        q = "Which horizontal line is longer?"
        choices = ["The top line", "The bottom line", "Both lines have the same length"]
        gold = choices[2] if rel == 0 else choices[1] if rel > 0 else choices[0]
        L1 = size * 0.5
        L2 = L1 * (1 + rel)
        ys = (size * 0.3, size * 0.7)
        imgs = []
        for fins in (False, True):
            im = Image.new("RGB", (size, size), (250, 250, 250))
            d = ImageDraw.Draw(im)
            for y, L, out in ((ys[0], L1, rel >= 0), (ys[1], L2, rel < 0)):
                # the misleading fins make the truly longer line look shorter (inward arrowheads),
                # and the other one look longer (outward tails); equal lines get opposite fins
                x0, x1 = size / 2 - L / 2, size / 2 + L / 2
                d.line([(x0, y), (x1, y)], fill=(0, 0, 0), width=3)
                if fins:
                    f = size * 0.07 * (1 if out else -1)
                    for x, sgn in ((x0, 1), (x1, -1)):
                        d.line([(x, y), (x - sgn * f, y - abs(f))], fill=(0, 0, 0), width=3)
                        d.line([(x, y), (x - sgn * f, y + abs(f))], fill=(0, 0, 0), width=3)
            imgs.append(im)
        return imgs[0], imgs[1], q, choices, gold
    q = "Which orange disc is bigger?"
    choices = ["The left disc", "The right disc", "Both discs are the same size"]
    gold = choices[2] if rel == 0 else choices[1] if rel > 0 else choices[0]
    r1 = size * 0.07
    r2 = r1 * (1 + rel)
    centres = ((size * 0.27, size / 2), (size * 0.73, size / 2))
    imgs = []
    for rings in (False, True):
        im = Image.new("RGB", (size, size), (250, 250, 250))
        d = ImageDraw.Draw(im)
        for k, ((cx, cy), r) in enumerate(zip(centres, (r1, r2))):
            if rings:  # big surround on the truly bigger (or the left) disc, small on the other
                big = (rel > 0) == (k == 1) if rel != 0 else k == 0
                sr, dist, m = (r * 0.9, r * 2.3, 6) if big else (r * 0.35, r * 1.6, 8)
                for t in range(m):
                    a = 2 * np.pi * t / m
                    _shape(d, "circle", cx + dist * np.cos(a), cy + dist * np.sin(a), sr, (120, 120, 130))
            _shape(d, "circle", cx, cy, r, (240, 140, 30))
        imgs.append(im)
    return imgs[0], imgs[1], q, choices, gold


def make_synth(cfg: SynthConfig, outdir: str | Path, seed: int = 0) -> dict:
    """Write ``outdir/annotations.json`` and ``outdir/images/*.png``; returns the summary."""
    out = Path(outdir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    per = cfg.pairs // len(CATEGORIES)
    records = []
    cache: dict = {}
    for cat in CATEGORIES:
        rng = numpy_rng(seed, f"synth/{cat}")
        for i in range(per):
            if cat in ("resemblance", "representation", "mirror"):
                n, m, q, choices, ans = _photo_pair(cat, i, cfg.size, rng, cache)
                source = "edited"
            elif cat == "material":
                n, m, q, choices, ans = _material_pair(i, cfg.size, rng)
                source = "synthetic"
            elif cat == "occlusion":
                n, m, q, choices, ans = _occlusion_pair(i, cfg.size, rng)
                source = "synthetic"
            else:
                n, m, q, choices, ans = _illusion_pair(i, cfg.size, rng)
                source = "synthetic"
            for typ, img in (("normal", n), ("misleading", m)):
                name = f"images/{cat}_{i:03d}_{typ}.png"
                write_bytes(out / name, _png(img))
                records.append({"id": f"{cat}_{i:03d}_{typ}", "image": name, "question": q, "choices": choices,
                                "answer": ans, "category": cat, "type": typ, "source": source})
    write_text(out / "annotations.json", json.dumps(records, indent=1, ensure_ascii=False) + "\n")
    return {"n_pairs": per * len(CATEGORIES), "n_items": len(records), "per_category": per,
            "annotations": str(out / "annotations.json")}
