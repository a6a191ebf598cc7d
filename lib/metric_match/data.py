"""Reading point clouds and image sets: .npy / .npz / .csv (N x D), a folder of PNG images, or an
.npz of images (N, H, W[, C]); every defect is one InputError naming the file (and row)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.io import display_name, load_npy, load_npz, open_text, suffix

POINT_KEYS = ("points", "x", "X", "data", "images")


@dataclass
class Points:
    """``x`` (N, D) float64; ``image_shape`` (H, W[, C]) for image sets; ``arrays``: the other arrays of
    an .npz (e.g. ``tangent``, ``dim`` of a test set)."""

    x: np.ndarray
    path: str
    image_shape: tuple | None = None
    arrays: dict = field(default_factory=dict)


def _check_finite(x: np.ndarray, where: str, row_offset: int = 0) -> None:
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise InputError(f"row {r + row_offset} has NaN or infinite values (every coordinate must be finite)", where)


def _as_points(a: np.ndarray, where: str) -> tuple[np.ndarray, tuple | None]:
    if a.dtype.kind not in "fiub":
        raise InputError(f"expected a numeric array, found dtype {a.dtype}", where)
    image_shape = None
    if a.ndim >= 3:
        image_shape = tuple(int(s) for s in a.shape[1:])
        a = a.reshape(a.shape[0], -1)
    if a.ndim == 1:
        raise InputError(f"expected an N x D array of points, found shape {a.shape}", where)
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise InputError(f"expected an N x D array of points with N, D >= 1, found shape {a.shape}", where)
    return a.astype(np.float64), image_shape


def _read_csv(path, where: str) -> np.ndarray:
    rows, width, first = [], None, None
    with open_text(path) as fh:
        for ln, raw in enumerate(fh, 1):
            line = raw.strip()
            if not line:
                continue
            cells = [c.strip() for c in line.split(",")]
            try:
                vals = [float(c) for c in cells]
            except ValueError:
                if first is None and not rows:
                    first = ln  # a header line
                    continue
                raise InputError(f"row has a non-numeric value ({line[:60]!r})", where, ln) from None
            if width is None:
                width = len(vals)
            elif len(vals) != width:
                raise InputError(f"row has {len(vals)} values, expected {width}", where, ln)
            if not all(np.isfinite(vals)):
                raise InputError("row has NaN or infinite values (every coordinate must be finite)", where, ln)
            rows.append(vals)
    if not rows:
        raise InputError("no data rows (expected N x D numbers, comma-separated)", where)
    return np.asarray(rows, dtype=np.float64)


def _read_png_folder(p: Path, where: str) -> tuple[np.ndarray, tuple]:
    files = sorted(f for f in p.iterdir() if f.suffix.lower() == ".png")
    if not files:
        raise InputError("is a folder without .png images", where)
    from PIL import Image

    imgs = []
    for f in files:
        try:
            with Image.open(f) as im:
                imgs.append(np.asarray(im.convert("L"), dtype=np.float64) / 255.0)
        except Exception as exc:  # noqa: BLE001 - any PIL failure is a bad image
            raise InputError(f"not a readable PNG image ({type(exc).__name__})", str(f)) from None
    shapes = {a.shape for a in imgs}
    if len(shapes) != 1:
        raise InputError(f"images of different sizes {sorted(shapes)[:3]}", where)
    a = np.stack(imgs)
    return a.reshape(len(a), -1), a.shape[1:]


def read_points(path, what: str = "points") -> Points:
    """Points from .npy, .npz (array ``points``/``x``/``data``/``images``, or the only array), .csv
    (numbers, optional header), a folder of .png images (grey levels in [0, 1]) or '-' (CSV on stdin)."""
    where = display_name(path)
    p = Path(str(path))
    if str(path) != "-" and p.is_dir():
        x, shape = _read_png_folder(p, where)
        return Points(x, where, shape)
    fmt = suffix(path)
    arrays: dict = {}
    image_shape = None
    if fmt == ".npy":
        a = load_npy(path, ".npy file")
        if not isinstance(a, np.ndarray):
            raise InputError("not a .npy array", where)
        x, image_shape = _as_points(a, where)
    elif fmt == ".npz":
        arrays = load_npz(path)
        key = next((k for k in POINT_KEYS if k in arrays), None)
        if key is None and len(arrays) == 1:
            key = next(iter(arrays))
        if key is None:
            raise InputError(f"no array named {', '.join(POINT_KEYS[:4])} (found {sorted(arrays)[:6]})", where)
        x, image_shape = _as_points(arrays.pop(key), where)
    elif fmt in (".csv", ".txt") or str(path) == "-":
        x = _read_csv(path, where)
    else:
        raise InputError("expected a .npy, .npz or .csv file, or a folder of .png images", where)
    _check_finite(x, where)
    return Points(x, where, image_shape, arrays)


def parse_direction(text: str, D: int):
    """The vector v of f(y) = v . y: D comma-separated numbers or a .npy file of D numbers."""
    from icmlkit.lib.core.errors import UsageError

    if str(text).lower().endswith(".npy"):
        a = load_npy(text, ".npy vector")
        try:
            v = a.astype(np.float64).ravel()
        except (TypeError, ValueError):
            raise InputError(f"not a numeric .npy vector (dtype {a.dtype})", str(text)) from None
    else:
        try:
            v = np.asarray([float(t) for t in str(text).split(",") if t.strip()])
        except ValueError:
            raise UsageError(f"--direction {text!r} is not D comma-separated numbers or a .npy file") from None
    if v.shape != (D,) or not np.isfinite(v).all():
        raise UsageError(f"--direction needs {D} finite numbers (the model's D), got {v.size}")
    return v
