"""Image inputs of detect-synthetic: listing, decoding, the one resizing pipeline, PNG writing.

Every image, real or generated, goes through :func:`load_images`: decoded with Pillow, converted
to RGB, centre-cropped to a square and resized to ``size`` × ``size`` (bicubic, Pillow's
antialiasing filter), or with ``crop=True`` centre-cropped to ``size`` × ``size`` at its native
resolution (resized only when smaller) — the same steps for both classes, so no format or size
shortcut exists.
"""
from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

from icmlkit.lib.core.console import log
from icmlkit.lib.core.errors import InputError, UsageError, require_module

IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff", ".gif")
LIST_EXTS = (".txt", ".lst", ".list")
REAL_NAMES = ("0_real",)
FAKE_NAMES = ("1_fake",)


def _pil():
    return require_module("PIL.Image", "detect-synthetic", "pillow")


def is_image_name(path) -> bool:
    return str(path).lower().endswith(IMAGE_EXTS)


def list_images(items, recursive: bool = True) -> list[str]:
    """Expand files, folders (recursively, sorted) and list files (one path per line, ``#``
    comments; relative paths are taken from the list file's folder) into a deterministic list.

    A missing path is an :class:`InputError`; a list-file line that names no file reports its line.
    """
    out: list[str] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            walker = p.rglob("*") if recursive else p.glob("*")
            out.extend(sorted(str(q) for q in walker if q.is_file() and is_image_name(q)))
        elif p.is_file() and str(p).lower().endswith(LIST_EXTS):
            try:
                lines = p.read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError:
                raise InputError("not a list of image paths (a UTF-8 text file, one path a line)", str(p)) from None
            for i, line in enumerate(lines, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                q = Path(line) if os.path.isabs(line) else p.parent / line
                if not q.is_file():
                    raise InputError(f"no such image file {line!r}", str(p), i)
                out.append(str(q))
        elif p.is_file():
            out.append(str(p))
        else:
            raise InputError("no such file or folder", str(item))
    return out


def _image_problem(exc: Exception, Image) -> str:
    """What is wrong with an image file, in words: Pillow's own message where it describes the file
    (truncated, unsupported compression), never an exception's internals (an in-memory buffer's repr,
    an IndexError from a corrupt header)."""
    text = str(exc).strip()
    if isinstance(exc, Image.DecompressionBombError):
        return "too many pixels: Pillow refuses it as a possible decompression bomb"
    if isinstance(exc, Image.UnidentifiedImageError):
        return "no image format recognised"
    if type(exc) is OSError and text and " object at 0x" not in text:
        return text.splitlines()[0][:200]
    return "corrupt or unsupported image data"


def decode(data: bytes, size: int, name: str = "<bytes>", crop: bool = False):
    """Bytes of an image file -> uint8 array (size, size, 3): RGB, centre square, bicubic resize
    (``crop``: the centre ``size`` square at the native resolution when the image is that large)."""
    import numpy as np

    Image = _pil()
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            rgb = im.convert("RGB")
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types for bad files
        raise InputError(f"not a readable image ({_image_problem(exc, Image)})", name) from None
    w, h = rgb.size
    s = min(w, h)
    if s < 1:
        raise InputError("empty image", name)
    if crop and s >= size:
        s = size
    if w != h or s != min(w, h):
        left, top = (w - s) // 2, (h - s) // 2
        rgb = rgb.crop((left, top, left + s, top + s))
    if s != size:
        rgb = rgb.resize((size, size), Image.Resampling.BICUBIC)
    return np.asarray(rgb, dtype=np.uint8)


@dataclass
class ImageBatch:
    """Decoded images: ``pixels`` uint8 (N, size, size, 3), their ``paths``, and the skipped ones."""

    pixels: object
    paths: list
    skipped: list


def load_images(paths, size: int, skip_bad: bool = False, crop: bool = False) -> ImageBatch:
    """Decode ``paths`` with the one pipeline. A bad file raises :class:`InputError` naming it;
    with ``skip_bad`` it is logged and left out (reported in ``skipped``)."""
    import numpy as np

    arrays, kept, skipped = [], [], []
    for p in paths:
        try:
            data = Path(p).read_bytes()
        except OSError as exc:
            err = InputError(f"cannot read ({exc.strerror})", str(p))
            if not skip_bad:
                raise err from None
            log.warning("skipped %s", err)
            skipped.append(str(p))
            continue
        try:
            arrays.append(decode(data, size, str(p), crop))
            kept.append(str(p))
        except InputError as err:
            if not skip_bad:
                raise
            log.warning("skipped %s", err)
            skipped.append(str(p))
    pixels = np.stack(arrays) if arrays else np.zeros((0, size, size, 3), np.uint8)
    return ImageBatch(pixels, kept, skipped)


def to_tensor(pixels, device="cpu"):
    """uint8 (N, H, W, 3) -> float (N, 3, H, W) in [0, 1]."""
    import numpy as np
    import torch

    return torch.from_numpy(np.ascontiguousarray(pixels)).to(device).permute(0, 3, 1, 2).float().div_(255.0)


def to_uint8(x):
    """float (N, 3, H, W) in [0, 1] -> uint8 (N, H, W, 3) numpy (rounded, clamped)."""
    return (x.clamp(0, 1) * 255.0).round_().to(dtype=__import__("torch").uint8).permute(0, 2, 3, 1).cpu().numpy()


def png_bytes(img) -> bytes:
    """uint8 (H, W, 3) -> PNG bytes (deterministic: no time stamps, fixed compression)."""
    Image = _pil()
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def write_pngs(folder, pixels, prefix: str = "img") -> list[str]:
    """Write each image of uint8 (N, H, W, 3) as ``<prefix>_<i:05d>.png`` into ``folder``."""
    from icmlkit.lib.core.io import write_bytes

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i, img in enumerate(pixels):
        path = folder / f"{prefix}_{i:05d}.png"
        write_bytes(path, png_bytes(img))
        names.append(str(path))
    return names


def jpeg_roundtrip(pixels, quality: int = 75):
    """Re-encode uint8 (N, H, W, 3) images as JPEG at ``quality`` and decode them again."""
    import numpy as np

    Image = _pil()
    out = []
    for img in pixels:
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=int(quality))
        buf.seek(0)
        with Image.open(buf) as im:
            out.append(np.asarray(im.convert("RGB"), dtype=np.uint8))
    return np.stack(out)


def resize_roundtrip(pixels, factor: float = 0.5):
    """Downscale by ``factor`` (bicubic) and bring back to the pipeline size, as a thumbnail that is
    scored by the detector would be (the loader resizes every image to the model's size)."""
    import numpy as np

    Image = _pil()
    n, h, w, _ = pixels.shape
    small = (max(1, round(w * factor)), max(1, round(h * factor)))
    out = []
    for img in pixels:
        im = Image.fromarray(img).resize(small, Image.Resampling.BICUBIC)
        out.append(np.asarray(im.resize((w, h), Image.Resampling.BICUBIC), dtype=np.uint8))
    return np.stack(out)


def split_layout(root) -> tuple[list[str], list[str]]:
    """Folders of the CNNDetection layout under ``root``: every ``0_real`` and ``1_fake`` folder
    (``root/0_real``, or ``root/<class>/0_real`` as in Wang et al. 2020). Returns (reals, fakes)."""
    root = Path(root)
    if not root.is_dir():
        raise InputError("no such folder", str(root))
    reals = sorted(str(p) for p in root.rglob("*") if p.is_dir() and p.name in REAL_NAMES)
    fakes = sorted(str(p) for p in root.rglob("*") if p.is_dir() and p.name in FAKE_NAMES)
    if not reals or not fakes:
        raise UsageError(f"{root}: expected 0_real and 1_fake folders (CNNDetection layout), or give "
                         "REAL_DIR FAKE_DIR")
    return reals, fakes


def generator_groups(fake_dir) -> dict[str, list[str]]:
    """Fake images grouped by generator: one group per immediate sub-folder holding images
    (``fake/<generator>/...``), or the single group named after the folder."""
    root = Path(fake_dir)
    if not root.is_dir():
        return {root.stem: list_images([root])}
    subs = sorted(p for p in root.iterdir() if p.is_dir())
    groups = {p.name: list_images([p]) for p in subs}
    groups = {k: v for k, v in groups.items() if v}
    loose = sorted(str(q) for q in root.glob("*") if q.is_file() and is_image_name(q))
    if not groups:
        return {root.name: list_images([root])}
    if loose:
        groups["(top level)"] = loose
    return groups
