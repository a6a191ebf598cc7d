"""Field data sets: neuraloperator-style ``.pt`` dicts, ``.npz`` and MATLAB ``.mat`` files.

Layouts accepted for ``x`` and ``y`` (``y`` optional for ``predict``):

- 2-D grids without coordinates: ``N x C x H x W`` (neuraloperator's ``N x 1 x H x W``) or ``N x H x W``;
- 1-D grids without coordinates: ``N x L``; ``y`` may be ``N x C x L`` (C output channels, e.g.
  neuraloperator's ``burgers_lowres.pt``: ``input`` N x 16, ``output`` N x 17 x 16, the solution at 17
  times);
- point sets: ``N x n`` or ``N x n x C`` with ``coords`` of shape ``n x d`` (d = 1, 2 or 3), the same
  points for every sample.

Every grid has a convention (:data:`CONVENTIONS`) that places its points on the unit box [0, 1]^d, row-major,
and decides the position features (the coordinates, with the box [0, 1]^d as the training box) and the
quadrature (``--quadrature trapezoid`` is the rule of node grids only):

- ``node``: ``linspace(0, 1, s)`` per axis, both boundaries included (our ``generate darcy``; FNO's Darcy
  ``.mat`` files, 421 nodes);
- ``cell``: ``i / s``, i < s: the nodes of a finer grid's every other node, the boundary at 0 included and
  the one at 1 not (neuraloperator's Darcy ``.pt`` files: ``darcy_test_16`` is exactly ``darcy_test_32``'s
  even nodes, which linspace(0, 1, s) would misplace by up to 0.031);
- ``periodic``: ``i / s`` on the periodic [0, 1) (neuraloperator's ``burgers_lowres.pt``; our ``generate
  burgers`` and ``ns``).

The convention is the file's ``grid`` key when it has one (a string), else the ``coords`` it lists (node or
i / s points; ``generate`` writes both), else by format: ``.pt`` files follow neuraloperator's (2-D
``cell``, 1-D ``periodic``), ``.npz`` and ``.mat`` files are ``node``; ``read_fields(grid=...)`` (the
commands' ``--grid``) overrides it.

The ``.pt`` files shipped with neuraloperator 0.3.0 store column-major tensors; they are loaded with
``torch.load(weights_only=True)`` and made contiguous before any reshape. Every problem is an
:class:`~icmlkit.lib.core.errors.InputError` naming the file and the key.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.io import display_name, load_npz, load_torch, read_bytes, suffix

FORMATS = (".pt", ".npz", ".mat")
CONVENTIONS = ("node", "cell", "periodic")


@dataclass
class FieldSet:
    """Samples of an input field ``x`` (N, n, cx) and optionally an output field ``y`` (N, n, cy) at the
    points ``coords`` (n, d). ``grid`` is the grid shape ((H, W) or (L,)) when the points form a regular
    row-major grid, else None; ``convention`` (:data:`CONVENTIONS`) places a grid's points on [0, 1]^d
    (None for a point set); ``layout`` records the file's layout so that predictions are written back in
    it."""

    x: np.ndarray
    y: np.ndarray | None
    coords: np.ndarray
    grid: tuple | None
    layout: str  # "nchw", "nhw", "nl" or "points"
    path: str = ""
    extra: dict = field(default_factory=dict)
    convention: str | None = None  # "node", "cell" or "periodic" for a grid; None for a point set

    @property
    def n_samples(self) -> int:
        return int(self.x.shape[0])

    @property
    def n_points(self) -> int:
        return int(self.coords.shape[0])

    @property
    def dim(self) -> int:
        return int(self.coords.shape[1])

    @property
    def resolution(self) -> str:
        """``32x32`` for a grid, ``n=1234`` for a point set."""
        return "x".join(map(str, self.grid)) if self.grid else f"n={self.n_points}"

    def head(self, n: int) -> "FieldSet":
        return FieldSet(self.x[:n], None if self.y is None else self.y[:n], self.coords, self.grid, self.layout,
                        self.path, convention=self.convention)

    def tail(self, start: int) -> "FieldSet":
        return FieldSet(self.x[start:], None if self.y is None else self.y[start:], self.coords, self.grid,
                        self.layout, self.path, convention=self.convention)

    def box(self) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) of the domain: [0, 1]^d for a grid (whatever its convention), the points' bounding box
        for a point set. The position features are measured in it."""
        if self.convention is not None:
            return np.zeros(self.dim, dtype=np.float32), np.ones(self.dim, dtype=np.float32)
        return self.coords.min(0), self.coords.max(0)

    def to_layout(self, values: np.ndarray) -> np.ndarray:
        """(N, n, c) values in this set's file layout."""
        N, n, c = values.shape
        if self.layout == "nchw":
            return values.reshape(N, *self.grid, c).transpose(0, 3, 1, 2).copy()
        if self.layout == "nhw":
            return values.reshape(N, *self.grid, c)[..., 0].copy() if c == 1 else \
                values.reshape(N, *self.grid, c).transpose(0, 3, 1, 2).copy()
        if self.layout == "nl":
            return values[..., 0].copy() if c == 1 else values.transpose(0, 2, 1).copy()
        return values[..., 0].copy() if c == 1 else values.copy()


def grid_axis(s: int, convention: str = "node") -> np.ndarray:
    """The s positions of one axis: ``linspace(0, 1, s)`` (node) or ``i / s`` (cell, periodic)."""
    if convention not in CONVENTIONS:
        raise InputError(f"grid convention {convention!r} is not one of {', '.join(CONVENTIONS)}")
    return np.linspace(0.0, 1.0, s) if convention == "node" else np.arange(s, dtype=np.float64) / s


def grid_coords(shape: tuple, convention: str = "node") -> np.ndarray:
    """The points of a grid of ``convention`` (:func:`grid_axis` per axis), row-major, as
    (prod(shape), len(shape)) float32."""
    axes = [grid_axis(s, convention) for s in shape]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1).astype(np.float32)


def _as_array(value, where: str, key: str) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor (possibly column-major): contiguous first
        value = value.detach().cpu().contiguous()
        if value.is_complex():
            raise InputError(f"key {key!r} is complex; expected a real field", where)
        value = value.numpy()
    try:
        arr = np.asarray(value)
    except Exception:  # noqa: BLE001
        raise InputError(f"key {key!r} is not an array", where) from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise InputError(f"key {key!r} is not a numeric array (dtype {arr.dtype})", where)
    if np.iscomplexobj(arr):
        raise InputError(f"key {key!r} is complex; expected a real field", where)
    return np.ascontiguousarray(arr)


def _read_pt(path) -> dict:
    data = read_bytes(path)
    if not data:
        raise InputError("empty file; expected a torch.save dict with x and y", display_name(path))
    obj = load_torch(path, "readable torch .pt file", data)
    if not isinstance(obj, dict):
        raise InputError(f"expected a dict of tensors (x, y), found {type(obj).__name__}", display_name(path))
    return obj


def _read_mat(path) -> dict:
    import scipy.io

    data = read_bytes(path)
    if not data:
        raise InputError("empty file; expected a MATLAB .mat file", display_name(path))
    try:
        obj = scipy.io.loadmat(io.BytesIO(data))
    except NotImplementedError:
        raise InputError("MATLAB v7.3 (HDF5) files are not read; save with -v7 or convert to .npz",
                         display_name(path)) from None
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"not a readable .mat file ({str(exc)[:160]})", display_name(path)) from None
    return {k: v for k, v in obj.items() if not k.startswith("__")}


def read_raw(path) -> dict:
    """The arrays of a .pt, .npz or .mat file as a dict (torch tensors made contiguous numpy arrays later)."""
    fmt = suffix(path)
    if fmt == ".pt":
        return _read_pt(path)
    if fmt == ".npz":
        return load_npz(path)
    if fmt == ".mat":
        return _read_mat(path)
    raise InputError(f"expected a {', '.join(FORMATS)} file", display_name(path))


def _grid_key(raw: dict, where: str) -> str | None:
    """The file's own ``grid`` key (a string naming its convention), or None."""
    if "grid" not in raw:
        return None
    value = raw["grid"]
    value = value.item() if isinstance(value, np.ndarray) and value.shape == () else value
    if not isinstance(value, str) or value not in CONVENTIONS:
        raise InputError(f"key 'grid' must be one of {', '.join(CONVENTIONS)}, found {str(value)[:40]!r}", where)
    return value


def read_fields(path, x_key: str = "x", y_key: str = "y", need_y: bool = True, grid: str | None = None) -> FieldSet:
    """Read ``x`` (and ``y``, and optional ``coords`` and ``grid``) from ``path`` and check them (see the module
    doc). ``grid`` (a convention name) overrides the file's ``grid`` key, its coords and the format's default."""
    where = display_name(path)
    raw = read_raw(path)
    if x_key not in raw:
        raise InputError(f"missing key {x_key!r} (keys: {sorted(map(str, raw))[:10]})", where)
    x = _as_array(raw[x_key], where, x_key)
    y = None
    if y_key in raw:
        y = _as_array(raw[y_key], where, y_key)
    elif need_y:
        raise InputError(f"missing key {y_key!r} (keys: {sorted(map(str, raw))[:10]})", where)
    coords = _as_array(raw["coords"], where, "coords") if "coords" in raw else None
    convention = grid if grid is not None else _grid_key(raw, where)
    return fieldset(x, y, coords, where, x_key, y_key, convention=convention,
                    default="neuraloperator" if suffix(path) == ".pt" else "node")


def _infer_convention(coords: np.ndarray, grid: tuple) -> str | None:
    """node or cell when ``coords`` are that grid's points (to float32 round-off), else None."""
    for conv in ("node", "cell"):
        ref = grid_coords(grid, conv)
        if coords.shape == ref.shape and np.allclose(coords, ref, rtol=0, atol=1e-6):
            return conv
    return None


def fieldset(x: np.ndarray, y: np.ndarray | None, coords: np.ndarray | None, where: str = "<arrays>",
             x_key: str = "x", y_key: str = "y", *, convention: str | None = None,
             default: str = "node") -> FieldSet:
    """Arrays in one of the accepted layouts -> a checked :class:`FieldSet`.

    A grid's convention is ``convention`` when given (its points then come from it, whatever ``coords``
    say), else the one its ``coords`` match, else ``default`` (a convention, or ``neuraloperator``: 2-D
    cell, 1-D periodic); grid ``coords`` that match no convention are kept, with convention None."""
    if convention is not None and convention not in CONVENTIONS:
        raise InputError(f"grid convention {convention!r} is not one of {', '.join(CONVENTIONS)}", where)
    if x.ndim < 2 or x.shape[0] < 1 or x.size == 0:
        raise InputError(f"key {x_key!r} has shape {tuple(x.shape)}; expected N x ... with N >= 1 and points",
                         where)
    if coords is not None:
        if coords.ndim != 2 or coords.shape[1] not in (1, 2, 3) or coords.shape[0] < 1:
            raise InputError(f"key 'coords' has shape {tuple(coords.shape)}; expected n x d with d = 1, 2 or 3", where)
        n = coords.shape[0]
        grid_like = (x.ndim == 4 and x.shape[2] * x.shape[3] == n) or \
            (x.ndim == 3 and x.shape[1] != n and x.shape[1] * x.shape[2] == n)
        line_like = convention is not None and x.ndim == 2 and coords.shape[1] == 1 and x.shape[1] == n
        if grid_like or line_like:  # a grid file (as `generate` writes) with its nodes listed in coords
            if grid_like and coords.shape[1] != 2:
                raise InputError(f"key 'coords' has shape {tuple(coords.shape)}; a 2-D grid needs n x 2", where)
            c = np.ascontiguousarray(coords, dtype=np.float32)
            if not np.isfinite(c).all():
                raise InputError("key 'coords' holds NaN or infinite values", where)
            fs = fieldset(x, y, None, where, x_key, y_key, convention=convention or "node")
            if convention is None:
                fs.convention = _infer_convention(c, fs.grid)
                fs.coords = c if fs.convention is None else grid_coords(fs.grid, fs.convention)
            return fs
        if convention is not None:
            raise InputError(f"a grid convention ({convention}) was given, but this file holds a point set "
                             f"(coords n x {coords.shape[1]}, {x_key!r} {tuple(x.shape)})", where)
        if x.ndim not in (2, 3) or x.shape[1] != n:
            raise InputError(f"key 'coords' has {n} points but {x_key!r} has shape {tuple(x.shape)}; expected "
                             f"N x {n} or N x {n} x C", where)
        layout, grid = "points", None
        xs = x.reshape(x.shape[0], n, -1)
        c = coords.astype(np.float32)
    else:
        if x.ndim == 4:
            layout, grid = "nchw", tuple(x.shape[2:])
            xs = x.reshape(x.shape[0], x.shape[1], -1).transpose(0, 2, 1)
        elif x.ndim == 3:
            layout, grid = "nhw", tuple(x.shape[1:])
            xs = x.reshape(x.shape[0], -1, 1)
        elif x.ndim == 2:
            layout, grid = "nl", (x.shape[1],)
            xs = x.reshape(x.shape[0], -1, 1)
        else:
            raise InputError(f"key {x_key!r} has shape {tuple(x.shape)}; expected N x C x H x W, N x H x W, N x L, "
                             "or N x n (x C) with coords", where)
        if min(grid) < 2:
            raise InputError(f"key {x_key!r} has shape {tuple(x.shape)}: a grid needs at least 2 points per axis",
                             where)
        if convention is None:
            convention = default if default != "neuraloperator" else ("cell" if len(grid) >= 2 else "periodic")
        c = grid_coords(grid, convention)
    ys = None
    if y is not None:
        ys = _match_y(x, y, layout, grid, where, x_key, y_key)
    xs = np.ascontiguousarray(xs, dtype=np.float32)
    if not np.isfinite(xs).all():
        raise InputError(f"key {x_key!r} holds NaN or infinite values", where)
    if ys is not None and not np.isfinite(ys).all():
        raise InputError(f"key {y_key!r} holds NaN or infinite values", where)
    if not np.isfinite(c).all():
        raise InputError("key 'coords' holds NaN or infinite values", where)
    return FieldSet(xs, ys, np.ascontiguousarray(c), grid, layout, where,
                    convention=None if grid is None else convention)


def _match_y(x, y, layout, grid, where, x_key, y_key) -> np.ndarray:
    if y.shape[:1] != x.shape[:1]:
        raise InputError(f"keys {x_key!r} {tuple(x.shape)} and {y_key!r} {tuple(y.shape)} disagree: "
                         "different numbers of samples", where)
    N = x.shape[0]
    if layout == "points":
        n = x.shape[1]
        if y.ndim not in (2, 3) or y.shape[1] != n:
            raise InputError(f"keys {x_key!r} {tuple(x.shape)} and {y_key!r} {tuple(y.shape)} disagree: expected "
                             f"{y_key!r} N x {n} or N x {n} x C", where)
        return np.ascontiguousarray(y.reshape(N, n, -1), dtype=np.float32)
    if y.ndim == 4 and tuple(y.shape[2:]) == grid:
        return np.ascontiguousarray(y.reshape(N, y.shape[1], -1).transpose(0, 2, 1), dtype=np.float32)
    if layout == "nl" and y.ndim == 3 and tuple(y.shape[2:]) == grid:  # N x C x L, e.g. a trajectory in time
        return np.ascontiguousarray(y.transpose(0, 2, 1), dtype=np.float32)
    if tuple(y.shape[1:]) == grid:
        return np.ascontiguousarray(y.reshape(N, -1, 1), dtype=np.float32)
    raise InputError(f"keys {x_key!r} {tuple(x.shape)} and {y_key!r} {tuple(y.shape)} disagree: the output "
                     f"must be on the same grid {grid}", where)
