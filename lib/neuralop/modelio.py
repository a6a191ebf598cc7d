"""Model files: the safetensors format (8-byte little-endian header length, a JSON header, raw
little-endian tensor bytes), written and read here without the ``safetensors`` package (an optional
extra of the project) and loadable by it. The header's ``__metadata__`` carries the model's
configuration as JSON strings (``format``, ``config``, ``meta``), so one file is the whole model."""
from __future__ import annotations

import json
import struct

import numpy as np

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.io import display_name, read_bytes, write_bytes

FORMAT = "icmlkit.neuralop/1"
_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "BOOL": np.bool_,
           "F16": np.float16, "U8": np.uint8}
_NAMES = {np.dtype(v).str: k for k, v in _DTYPES.items()}


def safetensors_bytes(tensors: dict, metadata: dict[str, str]) -> bytes:
    """``tensors`` (name -> torch tensor or array) and string ``metadata`` as safetensors bytes (names
    sorted: the same inputs give the same bytes)."""
    header: dict = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}}
    chunks, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name]
        a = t.detach().cpu().contiguous().numpy() if hasattr(t, "detach") else np.ascontiguousarray(t)
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        code = _NAMES.get(a.dtype.str) or _NAMES.get(np.dtype(a.dtype.type).str)
        if code is None:
            raise TypeError(f"cannot store {name} of dtype {a.dtype}")
        raw = a.tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def parse_safetensors(data: bytes, where: str) -> tuple[dict, dict]:
    """(name -> numpy array, metadata) of safetensors bytes; an InputError naming ``where`` otherwise."""
    if len(data) < 8:
        raise InputError("not a safetensors model file (too short)", where)
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8 or n > 100_000_000:
        raise InputError("not a safetensors model file (bad header length)", where)
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InputError("not a safetensors model file (the header is not JSON)", where) from None
    if not isinstance(header, dict):
        raise InputError("not a safetensors model file (the header is not an object)", where)
    meta = header.pop("__metadata__", {}) or {}
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        try:
            dtype = _DTYPES[info["dtype"]]
            lo, hi = (int(v) for v in info["data_offsets"])
            shape = tuple(int(s) for s in info["shape"])
            if not 0 <= lo <= hi <= len(body):
                raise ValueError("offsets outside the file (truncated?)")
            arr = np.frombuffer(body[lo:hi], dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"tensor {name!r} is unreadable ({exc})", where) from None
        out[name] = arr.astype(dtype)
    return out, meta


def write_model(path, tensors: dict, config: dict, meta: dict) -> None:
    """A model file: the weights and the JSON ``config`` / ``meta`` in the header."""
    write_bytes(path, safetensors_bytes(tensors, {"format": FORMAT, "config": json.dumps(config, sort_keys=True),
                                                  "meta": json.dumps(meta, sort_keys=True)}))


def read_model_file(path) -> tuple[dict, dict, dict]:
    """(tensors, config, meta) of a file written by :func:`write_model`."""
    where = display_name(path)
    tensors, md = parse_safetensors(read_bytes(path), where)
    if md.get("format") != FORMAT:
        raise InputError(f"not a train-operator model file (format {FORMAT} expected in the safetensors "
                         "metadata)", where)
    try:
        config, meta = json.loads(md["config"]), json.loads(md["meta"])
    except (KeyError, json.JSONDecodeError):
        raise InputError("the model's config metadata is unreadable", where) from None
    if not isinstance(config, dict) or not isinstance(meta, dict):
        raise InputError("the model's config metadata is not an object", where)
    return tensors, config, meta
