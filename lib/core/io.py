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
    if not p.is_file():
        raise InputError("no such file", str(path))
    return p.read_bytes()


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


def read_torch(path: str | os.PathLike, what: str, fmt: str | None = None):
    """A file written by :func:`write_torch`, loaded with ``weights_only=True`` (no pickled code).

    ``what`` names the kind of file in errors ("not a <what>"); with ``fmt`` the content must be a
    dict whose ``"format"`` is ``fmt``. Any failure is an :class:`InputError` naming the file."""
    import torch

    data = read_bytes(path)
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling problem is bad input
        raise InputError(f"not a {what} ({type(exc).__name__}: {exc})", display_name(path)) from None
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


def write_npz(path: str | os.PathLike, **arrays) -> None:
    """Save arrays as an uncompressed .npz through :func:`atomic_write` (byte-identical reruns)."""
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_bytes(path, buf.getvalue())


def load_npz(path: str | os.PathLike, required: tuple[str, ...] = ()) -> dict:
    """Load a .npz without pickles, checking that ``required`` keys are present."""
    import numpy as np

    try:
        with np.load(io.BytesIO(read_bytes(path)), allow_pickle=False) as z:
            out = {k: z[k] for k in z.files}
    except (ValueError, OSError) as exc:
        raise InputError(f"not a readable .npz file ({exc})", display_name(path)) from None
    missing = [k for k in required if k not in out]
    if missing:
        raise InputError(f"missing arrays {missing}; expected {list(required)}", display_name(path))
    return out


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
