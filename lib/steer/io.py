"""Activation files (.npz) of steer-concept: what ``embed`` writes and ``fit``/``apply`` read.

An activation file holds ``layer_<L>`` arrays (one row per text, or per token with ``pool=all`` and
then ``text_index``), ``pooled`` (the sentence embedding), ``texts`` (with one row per text) and
``meta`` (a JSON string: model, site, pool, layers, max_length, dtype). Plain arrays are accepted
too: any 2-D float array, picked with ``--key`` or, when there is only one, by itself.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from icmlkit.lib.core.errors import InputError

LAYER_KEY = re.compile(r"^layer_(-?\d+)$")


def save_activations(path, result: dict, texts: list[str] | None, meta: dict) -> None:
    import numpy as np

    from icmlkit.lib.core.io import write_npz

    arrays = dict(result)
    if texts is not None and "text_index" not in arrays:
        arrays["texts"] = np.array(texts, dtype=str)
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    write_npz(path, **arrays)


def load_activations(path) -> tuple[dict, dict]:
    """(arrays, meta) of an activation file; ``meta`` is {} for plain arrays."""
    from icmlkit.lib.core.io import display_name, load_npz

    arrays = load_npz(path)
    meta = {}
    if "meta" in arrays:
        try:
            meta = json.loads(str(arrays.pop("meta")[()]))
        except (ValueError, TypeError, IndexError):
            raise InputError("field 'meta' is not a JSON string", display_name(path)) from None
        if not isinstance(meta, dict):
            raise InputError("field 'meta': expected a JSON object", display_name(path))
    return arrays, meta


@dataclass
class ActivationFile:
    """A loaded activation file: its display ``name``, ``arrays`` and ``meta`` (what ``fit`` takes)."""

    name: str
    arrays: dict
    meta: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path) -> "ActivationFile":
        from icmlkit.lib.core.io import display_name

        arrays, meta = load_activations(path)
        return cls(display_name(path), arrays, meta)


def layer_keys(arrays: dict) -> dict[int, str]:
    """{layer index: key} of the ``layer_<L>`` arrays."""
    return {int(m.group(1)): k for k in arrays if (m := LAYER_KEY.match(k))}


def pick_array(arrays: dict, key: str | None, path) -> tuple[str, object]:
    """The array named ``key``, or the only 2-D floating-point array when ``key`` is None."""
    import numpy as np

    from icmlkit.lib.core.io import display_name

    name = display_name(path)
    if key is not None:
        if key not in arrays:
            raise InputError(f"has no array {key!r} (it has {sorted(arrays)})", name)
        return key, arrays[key]
    cands = [k for k, v in arrays.items() if isinstance(v, np.ndarray) and v.ndim == 2
             and np.issubdtype(v.dtype, np.floating) and k != "pooled"]
    if len(cands) != 1:
        raise InputError(f"cannot tell which array to use (2-D float arrays: {cands}); pass --key", name)
    return cands[0], arrays[cands[0]]


def check_matrix(x, name: str, field: str, dim: int | None = None):
    """A 2-D finite float array with ``dim`` columns, else an InputError naming the file and field."""
    import numpy as np

    if not isinstance(x, np.ndarray) or not np.issubdtype(x.dtype, np.floating):
        raise InputError(f"field {field!r}: expected floating-point values, got "
                         f"{getattr(x, 'dtype', type(x).__name__)}", name)
    if x.ndim != 2:
        raise InputError(f"field {field!r}: expected a 2-D array (rows x features), got shape {x.shape}", name)
    if x.shape[0] == 0:
        raise InputError(f"field {field!r}: has no rows", name)
    if dim is not None and x.shape[1] != dim:
        raise InputError(f"field {field!r}: has {x.shape[1]} features, expected {dim}", name)
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        raise InputError(f"field {field!r}: row {int(np.argmax(bad))} holds a NaN or infinite value", name)
    return x
