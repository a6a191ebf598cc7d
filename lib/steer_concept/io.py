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


# --------------------------------------------------------------------------- `steer-concept merge`

SHARD_KEYS = ("shard", "text_range", "texts_total")


@dataclass
class MergeResult:
    """The joined activation file: ``arrays`` (without ``meta``), ``meta`` and ``summary``."""

    arrays: dict
    meta: dict
    summary: dict


def merge_shards(files: list) -> MergeResult:
    """Join the ``embed --shard K/N`` outputs ``files`` (:class:`ActivationFile`, any order) into the
    file that ``embed`` without ``--shard`` writes.

    Each shard's meta records ``shard`` [K, N], ``text_range`` [first, stop) and ``texts_total``:
    the shards must come from one run (equal meta otherwise: model, site, pool, layers, ...), cover
    1..N exactly once and tile the texts. Rows are concatenated in shard order; ``text_index`` (with
    ``--pool all``) is offset to the joined texts. Files without shard meta (written before merge
    existed) are joined in the order given. Errors name the file."""
    import numpy as np

    if not files:
        raise InputError("no shards given", "SHARDS")
    with_meta = [f for f in files if "shard" in f.meta]
    if with_meta and len(with_meta) != len(files):
        odd = next(f for f in files if "shard" not in f.meta)
        raise InputError("has no shard in its meta (not written by `embed --shard K/N`), unlike the other files",
                         odd.name)
    if with_meta:
        n_total = files[0].meta["shard"][1]
        seen = {}
        for f in files:
            try:
                k, n = (int(x) for x in f.meta["shard"])
                a, b = (int(x) for x in f.meta["text_range"])
                int(f.meta["texts_total"])
            except (KeyError, TypeError, ValueError):
                raise InputError("field 'meta': bad shard, text_range or texts_total", f.name) from None
            if n != n_total:
                raise InputError(f"is shard {k}/{n}, the first file is one of {n_total}", f.name)
            if k in seen:
                raise InputError(f"shard {k}/{n} given twice (also {seen[k].name})", f.name)
            seen[k] = f
        missing = [k for k in range(1, n_total + 1) if k not in seen]
        if missing:
            raise InputError(f"shard {missing[0]}/{n_total} is missing (given: {sorted(seen)})", files[0].name)
        files = [seen[k] for k in range(1, n_total + 1)]
    ref = {k: v for k, v in files[0].meta.items() if k not in SHARD_KEYS}
    for f in files[1:]:
        other = {k: v for k, v in f.meta.items() if k not in SHARD_KEYS}
        diff = sorted(k for k in set(ref) | set(other) if ref.get(k) != other.get(k))
        if diff:
            raise InputError(f"comes from a different embed run than {files[0].name}: meta differs in "
                             f"{', '.join(diff)}", f.name)
        if set(f.arrays) != set(files[0].arrays):
            raise InputError(f"holds arrays {sorted(f.arrays)}, {files[0].name} holds {sorted(files[0].arrays)}",
                             f.name)
    if with_meta:
        stop = 0
        for f in files:
            a, b = f.meta["text_range"]
            if a != stop:
                raise InputError(f"texts [{a}, {b}) do not follow the previous shard's (ending at {stop})", f.name)
            stop = b
        if stop != files[0].meta["texts_total"]:
            raise InputError(f"the shards cover {stop} of {files[0].meta['texts_total']} texts", files[-1].name)
    out, offset = {}, 0
    n_texts = []
    for f in files:
        if "text_index" in f.arrays:
            ti = np.asarray(f.arrays["text_index"])
            n = int(f.meta["text_range"][1] - f.meta["text_range"][0]) if with_meta else (int(ti.max()) + 1 if ti.size
                                                                                           else 0)
        else:
            n = int(np.asarray(f.arrays["pooled"]).shape[0]) if "pooled" in f.arrays else \
                int(np.asarray(next(iter(f.arrays.values()))).shape[0])
        n_texts.append(n)
    for key in files[0].arrays:
        parts = []
        for f, n in zip(files, n_texts):
            x = np.asarray(f.arrays[key])
            if x.ndim == 0:
                raise InputError(f"field {key!r}: a scalar cannot be joined", f.name)
            if key == "text_index":
                x = x + offset
                offset += n
            parts.append(x)
        try:
            out[key] = np.concatenate(parts, axis=0)
        except ValueError as exc:
            raise InputError(f"field {key!r}: shapes do not join ({exc})", files[-1].name) from None
    meta = dict(ref)
    rows = {k: int(v.shape[0]) for k, v in out.items()}
    summary = {"shards": len(files), "texts": int(sum(n_texts)), "rows": rows,
               "inputs": [f.name for f in files]}
    return MergeResult(out, meta, summary)
