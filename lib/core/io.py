"""File input and output: ``-`` for stdin/stdout, transparent ``.gz``, atomic writes.

Every file icmlkit writes goes through :func:`atomic_write` (a temporary file in the same folder,
then ``os.replace``), so a failing run never leaves a partial output behind.
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Iterator

from icmlkit.lib.core.errors import InputError

STDIO = "-"


def is_stdio(path: str | os.PathLike | None) -> bool:
    return str(path) == STDIO


def display_name(path: str | os.PathLike) -> str:
    """The name used in messages: ``<stdin>`` for ``-``."""
    return "<stdin>" if is_stdio(path) else str(path)


def suffix(path: str | os.PathLike) -> str:
    """The format extension, ignoring a trailing ``.gz`` (``a.csv.gz`` -> ``.csv``)."""
    name = str(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return os.path.splitext(name)[1]


@contextlib.contextmanager
def open_text(path: str | os.PathLike) -> Iterator[IO[str]]:
    """Open a text input for reading: ``-`` is stdin, ``.gz`` is decompressed.

    Raises :class:`InputError` naming the file when it is missing or unreadable.
    """
    if is_stdio(path):
        yield sys.stdin
        return
    p = Path(path)
    if not p.exists():
        raise InputError("no such file", str(path))
    if p.is_dir():
        raise InputError("is a folder, expected a file", str(path))
    try:
        if p.name.lower().endswith(".gz"):
            fh: IO[str] = gzip.open(p, "rt", encoding="utf-8")
        else:
            fh = open(p, "r", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror}", str(path)) from None
    try:
        yield fh
    except UnicodeDecodeError:
        raise InputError("is not UTF-8 text", str(path)) from None
    except (OSError, EOFError) as exc:  # e.g. a truncated .gz
        raise InputError(f"cannot read: {exc}", str(path)) from None
    finally:
        fh.close()


def read_bytes(path: str | os.PathLike) -> bytes:
    """Read a whole binary input (``-`` is stdin)."""
    if is_stdio(path):
        return sys.stdin.buffer.read()
    p = Path(path)
    if p.is_dir():
        raise InputError("is a folder, expected a file", str(path))
    if not p.is_file():
        raise InputError("no such file", str(path))
    try:
        return p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", str(path)) from None


def check_writable(path: str | os.PathLike, overwrite: bool) -> None:
    """Refuse to clobber an existing output unless ``overwrite``; check the folder exists."""
    if is_stdio(path):
        return
    p = Path(path)
    if p.exists() and not overwrite:
        raise InputError("exists already; pass --overwrite to replace it", str(path))
    if not p.parent.exists():
        raise InputError(f"folder {p.parent} does not exist", str(path))


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, binary: bool = False) -> Iterator[IO]:
    """Write ``path`` atomically: to a temporary file beside it, renamed on success.

    ``-`` writes to stdout (flushed at the end). On an exception the temporary file is removed
    and ``path`` is left untouched.
    """
    if is_stdio(path):
        stream = sys.stdout.buffer if binary else sys.stdout
        yield stream
        stream.flush()
        return
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent or ".")
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8", "newline": ""})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_write(path, binary=True) as fh:
        fh.write(data)


def torch_bytes(obj) -> bytes:
    """``obj`` (tensors, dicts, lists, numbers, strings) serialised by ``torch.save``."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def write_torch(path: str | os.PathLike, obj) -> None:
    """:func:`torch_bytes` of ``obj``, written atomically."""
    write_bytes(path, torch_bytes(obj))


def torch_load_problem(exc: BaseException, data: bytes) -> str:
    """One line for a failed ``torch.load(weights_only=True)`` of ``data``, never PyTorch's own
    multi-line text: a torch file (a zip archive, or a legacy pickle) holding objects that
    weights-only loading refuses, or not a torch file at all (random bytes, an empty or truncated file)."""
    looks_torch = data[:4] == b"PK\x03\x04" or data[:1] == b"\x80"
    if looks_torch and "Weights only load failed" in str(exc):
        return "holds pickled objects that weights-only loading refuses (no code is unpickled)"
    return "not a torch file, or a truncated one"


def load_torch(path: str | os.PathLike, what: str, data: bytes | None = None):
    """``torch.load(weights_only=True, map_location="cpu")`` of ``path`` (or of ``data``, its bytes
    already read); any failure is an :class:`InputError` naming the file: "not a <what>: <problem>"
    (:func:`torch_load_problem`)."""
    import torch

    if data is None:
        data = read_bytes(path)
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling problem is bad input
        raise InputError(f"not a {what}: {torch_load_problem(exc, data)}", display_name(path)) from None


def read_torch(path: str | os.PathLike, what: str, fmt: str | None = None):
    """A file written by :func:`write_torch`, loaded with ``weights_only=True`` (no pickled code).

    ``what`` names the kind of file in errors ("not a <what>"); with ``fmt`` the content must be a
    dict whose ``"format"`` is ``fmt``. Any failure is an :class:`InputError` naming the file."""
    obj = load_torch(path, what)
    if fmt is not None and (not isinstance(obj, dict) or obj.get("format") != fmt):
        raise InputError(f"not a {what} (format {fmt} expected)", display_name(path))
    return obj


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path) as fh:
        fh.write(text)


def dumps_json(obj) -> str:
    """Stable JSON text (sorted keys are not used: key order is part of each tool's contract)."""
    return json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: str | os.PathLike, obj) -> None:
    write_text(path, dumps_json(obj))


def parse_json(text: str, where: str, expect: type | tuple | None = None, what: str = "JSON", line: int | None = None):
    """``text`` decoded as JSON; an :class:`InputError` naming ``where`` (and the line) otherwise.

    ``expect`` (``dict``, ``list`` or a tuple of types) is the type the top level must have."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        at = line if line is not None else exc.lineno
        raise InputError(f"not valid {what} ({exc.msg}, column {exc.colno})", where, at) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"not valid {what} ({exc})", where, line) from None
    if expect is not None and not isinstance(obj, expect):
        names = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}
        want = " or ".join(names.get(t, t.__name__) for t in (expect if isinstance(expect, tuple) else (expect,)))
        raise InputError(f"expected {want} at the top level of the {what}, found {type(obj).__name__}", where, line)
    return obj


def load_json(path: str | os.PathLike, expect: type | tuple | None = dict, what: str = "JSON"):
    """A JSON file (``-`` is stdin, ``.gz`` is decompressed) through :func:`parse_json`: the one
    wording of every JSON error (missing file, not UTF-8, bad syntax with line and column, wrong
    top-level type)."""
    with open_text(path) as fh:
        text = fh.read()
    return parse_json(text, display_name(path), expect, what)


def read_jsonl(path: str | os.PathLike, what: str = "JSON Lines") -> list[tuple[int, dict]]:
    """``(line number, object)`` of every non-blank line of a JSON Lines file; each must be an object."""
    rows = []
    with open_text(path) as fh:
        for ln, raw in enumerate(fh, 1):
            if raw.strip():
                rows.append((ln, parse_json(raw, display_name(path), dict, what, line=ln)))
    return rows


ROW_FORMATS = (".csv", ".jsonl", ".parquet")


def rows_format(path: str | os.PathLike, default: str = ".csv") -> str:
    """The row format of ``path`` by its suffix (``-``: ``default``); an InputError for others."""
    if is_stdio(path):
        return default
    fmt = suffix(path)
    if fmt not in ROW_FORMATS:
        raise InputError(f"expected a {', '.join(ROW_FORMATS)} file for a table", str(path))
    return fmt


def write_rows(path: str | os.PathLike, rows: list[dict], columns: list[str] | None = None,
               fmt: str | None = None, float_format: str | None = None) -> None:
    """Write a table atomically as CSV, JSON Lines or Parquet, chosen by ``path``'s suffix (or
    ``fmt``; ``-`` writes CSV or JSON Lines to stdout). ``columns`` fixes the column order (default:
    the keys of the first row, then any new keys in order of appearance); a missing value is empty
    in CSV and null in JSON Lines. Floats are written with ``repr`` (exact round trip) unless
    ``float_format`` (e.g. ``"%.6g"``) is given."""
    fmt = fmt if fmt is not None else rows_format(path)
    fmt = fmt if fmt.startswith(".") else "." + fmt
    if columns is None:
        columns = []
        for r in rows:
            columns.extend(k for k in r if k not in columns)
    if fmt == ".parquet":
        if is_stdio(path):
            raise InputError("Parquet cannot be written to stdout; name a .parquet file", "-")
        from icmlkit.lib.core.errors import require_module

        pa = require_module("pyarrow", "backtest-portfolio", "pyarrow")
        import pyarrow.parquet as pq

        table = pa.table({c: [r.get(c) for r in rows] for c in columns})
        buf = pa.BufferOutputStream()
        pq.write_table(table, buf)
        write_bytes(path, buf.getvalue().to_pybytes())
        return
    if fmt == ".jsonl":
        text = "".join(json.dumps({c: r.get(c) for c in columns}, ensure_ascii=False, allow_nan=False) + "\n"
                       for r in rows)
    elif fmt == ".csv":
        import csv

        def cell(v):
            if v is None:
                return ""
            if isinstance(v, float) and float_format is not None:
                return float_format % v
            if isinstance(v, (list, dict)):
                return json.dumps(v, ensure_ascii=False)
            return v

        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows([cell(r.get(c)) for c in columns] for r in rows)
        text = buf.getvalue()
    else:
        raise InputError(f"cannot write a table as {fmt}; expected one of {', '.join(ROW_FORMATS)}", str(path))
    if not is_stdio(path) and str(path).lower().endswith(".gz"):
        write_bytes(path, gzip.compress(text.encode("utf-8"), mtime=0))  # mtime 0: the same bytes every run
        return
    with atomic_write(path) as fh:
        fh.write(text)


def write_npz(path: str | os.PathLike, **arrays) -> None:
    """Save arrays as an uncompressed .npz through :func:`atomic_write` (byte-identical reruns)."""
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_bytes(path, buf.getvalue())


def npy_problem(exc: BaseException, data: bytes, what: str = ".npz archive") -> str:
    """One line for a failed ``numpy.load(allow_pickle=False)`` of ``data``, never numpy's own text
    (its "contains pickled (object) data ... allow_pickle=" advice for random bytes, for instance)."""
    if not data:
        return "empty file"
    if "Object arrays cannot be loaded" in str(exc):
        return "holds pickled Python objects, which are never loaded; expected numeric arrays"
    if data[:4] == b"PK\x03\x04" or data[:6] == b"\x93NUMPY":
        return f"a damaged or truncated {what}"
    return f"not a {what} (expected the zip archive of named arrays that numpy.savez writes)"


def load_npy(path: str | os.PathLike, what: str = ".npy array"):
    """One array from a .npy file, without pickles; any defect is one :class:`InputError` line naming
    the file (:func:`npy_problem`)."""
    import numpy as np

    data = read_bytes(path)
    if data[:6] != b"\x93NUMPY":
        raise InputError(f"not a {what}: " + ("empty file" if not data else "no .npy header (expected a file "
                         "written by numpy.save)"), display_name(path))
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - header, dtype and size errors alike are a bad file
        raise InputError(f"not a readable {what}: {npy_problem(exc, data, '.npy file')}", display_name(path)) from None


def load_npz(path: str | os.PathLike, required: tuple[str, ...] = ()) -> dict:
    """Load a .npz without pickles, checking that ``required`` keys are present. Any defect is one
    :class:`InputError` line naming the file (:func:`npy_problem`)."""
    import numpy as np

    data = read_bytes(path)
    if data[:6] == b"\x93NUMPY":
        raise InputError("a single .npy array, not a .npz archive of named arrays", display_name(path))
    if not data or data[:2] != b"PK":
        raise InputError(npy_problem(ValueError(), data), display_name(path))
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            out = {k: z[k] for k in z.files}
    except Exception as exc:  # noqa: BLE001 - zip, header and dtype errors alike are a bad file
        raise InputError(f"not a readable .npz file: {npy_problem(exc, data)}", display_name(path)) from None
    missing = [k for k in required if k not in out]
    if missing:
        raise InputError(f"missing arrays {missing}; expected {list(required)}", display_name(path))
    return out


# safetensors: 8-byte little-endian header length, a JSON header (``__metadata__`` of strings, then
# name -> dtype, shape, data_offsets), raw little-endian tensor bytes. Written here rather than by the
# ``safetensors`` package, whose metadata order varies from run to run: the same tensors give the same
# bytes. The files load in the ``safetensors`` package and in Hugging Face tools.
_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
              "U8": "|u1", "I8": "|i1", "BOOL": "|b1"}
_ST_CODES = {v: k for k, v in _ST_DTYPES.items()}


def safetensors_bytes(tensors: dict, metadata: dict | None = None) -> bytes:
    """``tensors`` (name -> torch tensor or numpy array) and string ``metadata`` as safetensors
    bytes, names and metadata keys sorted (deterministic)."""
    import numpy as np

    header: dict = {"__metadata__": {str(k): str(v) for k, v in sorted((metadata or {}).items())}}
    chunks, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name]
        try:
            src = t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)
            a = np.ascontiguousarray(src).reshape(src.shape)  # ascontiguousarray makes 0-d arrays 1-d
        except TypeError:  # a torch dtype numpy lacks (bfloat16)
            a = None
        code = None if a is None else _ST_CODES.get(a.dtype.newbyteorder("<").str if a.dtype.byteorder != "|" else a.dtype.str)
        if code is None:
            raise TypeError(f"cannot store tensor {name!r} of dtype {t.dtype} in a .safetensors file")
        raw = a.astype(_ST_DTYPES[code], copy=False).tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(chunks)


def write_safetensors(path: str | os.PathLike, tensors: dict, metadata: dict | None = None) -> None:
    """:func:`safetensors_bytes`, written atomically."""
    write_bytes(path, safetensors_bytes(tensors, metadata))


def read_safetensors(path: str | os.PathLike, fmt: str | None = None, what: str = ".safetensors file"):
    """(name -> numpy array, metadata dict) of a .safetensors file; with ``fmt`` the metadata's
    ``format`` must be ``fmt``. Any defect is an :class:`InputError` naming the file (``what`` names
    the kind of file in the message)."""
    import numpy as np

    where, data = display_name(path), read_bytes(path)
    if len(data) < 8:
        raise InputError(f"not a {what} (too short)", where)
    n = int.from_bytes(data[:8], "little")
    if n > len(data) - 8:
        raise InputError(f"not a {what} (bad header length; truncated?)", where)
    header = parse_json(data[8:8 + n].decode("utf-8", errors="replace"), where, expect=dict, what=f"{what} header")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise InputError(f"not a {what} (its __metadata__ is not an object)", where)
    if fmt is not None and meta.get("format") != fmt:
        raise InputError(f"not a {what} (metadata format {meta.get('format')!r}, expected {fmt!r})", where)
    body, out = data[8 + n:], {}
    for name, info in header.items():
        try:
            lo, hi = (int(v) for v in info["data_offsets"])
            shape = tuple(int(d) for d in info["shape"])
            if not 0 <= lo <= hi <= len(body):
                raise ValueError("data offsets outside the file (truncated?)")
            out[name] = np.frombuffer(body[lo:hi], dtype=_ST_DTYPES[info["dtype"]]).reshape(shape).copy()
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"tensor {name!r} is unreadable ({exc})", where) from None
    return out, meta


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Build a run directory as ``<path>.partial`` and rename it to ``path`` when complete.

    An existing ``path`` is replaced only with ``overwrite``; on an exception the partial folder
    is removed and ``path`` is left as it was.
    """
    import shutil

    final = Path(path)
    if final.exists() and not overwrite:
        raise InputError("exists already; pass --overwrite to replace it", str(path))
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if final.exists():
        shutil.rmtree(final)
    os.replace(partial, final)


def shared_data_dir(name: str = "") -> Path | None:
    """The folder of real data sets that may not be copied into the repository, if present.

    Looked up in order: ``$ICMLKIT_SHARED_DATA``, ``../shared/data`` from the working folder, and
    ``shared/data`` beside the source checkout. Returns ``<dir>/<name>`` or None when absent.
    """
    here = Path(__file__).resolve().parents[2]  # the checkout holding lib/ (editable installs)
    candidates = [os.environ.get("ICMLKIT_SHARED_DATA"), Path.cwd().parent / "shared" / "data",
                  here.parent / "shared" / "data"]
    for c in candidates:
        if c and (Path(c) / name).exists():
            return Path(c) / name
    return None
