"""The run manifest: what ran, with which parameters (and where each came from), on what.

A command that writes outputs writes ``<output>.manifest.json`` last (or ``manifest.json`` inside a
run directory). Secrets are never recorded: parameters whose name suggests one are redacted.
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import subprocess
import time
from importlib import metadata
from pathlib import Path

from icmlkit.lib.core.io import is_stdio, sha256_file, write_json

# Secrets are recognised by the *option name*, never by a substring of a value or a path: a parameter
# named key, api_key, token, password, secret (or ending in _key, _token, _password, _secret) is
# redacted, and so is the argv value after such a flag (``--api-key VALUE`` or ``--api-key=VALUE``).
_SECRET_NAME = re.compile(r"^(?:.*[_-])?(key|token|password|passwd|secret|credentials?)$", re.I)
REDACTED = "<redacted>"


def is_secret_name(name: str) -> bool:
    """True for a parameter or flag name that holds a secret (``api_key``, ``--hf-token``, ...)."""
    return bool(_SECRET_NAME.match(str(name).lstrip("-")))


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with the value of every secret flag replaced (both ``--x V`` and ``--x=V``)."""
    out, hide = [], False
    for a in argv:
        if hide:
            out.append(REDACTED)
            hide = False
        elif a.startswith("-") and "=" in a and is_secret_name(a.split("=", 1)[0]):
            out.append(a.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(a)
            hide = a.startswith("-") and is_secret_name(a)
    return out


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    """The commit of the source checkout icmlkit runs from, when it is a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def file_record(path: str | os.PathLike) -> dict:
    p = Path(path)
    if p.is_dir():
        files = sorted(q for q in p.rglob("*") if q.is_file())
        return {"path": str(path), "kind": "folder", "files": [file_record(q) for q in files]}
    return {"path": str(path), "sha256": sha256_file(p), "bytes": p.stat().st_size}


def _redact(name: str, value):
    return REDACTED if is_secret_name(name) and value not in (None, "", False) else value


class Manifest:
    """Collects a run's facts; :meth:`write` puts them in a JSON file (atomically)."""

    def __init__(self, tool: str, command: str, argv: list[str]):
        self.tool = tool
        self.command = command
        self.argv = list(argv)
        self.params: dict = {}
        self.sources: dict = {}
        self.inputs: list[str] = []
        self.builtins: list[dict] = []
        self.distributed: dict | None = None
        self.outputs: list[tuple[str, str]] = []  # (path recorded, path read now)
        self.seed: int | None = None
        self.device: str | None = None
        self.threads: int | None = None  # CPU threads of torch / BLAS (--threads, ICMLKIT_THREADS)
        self.started = _utc_now()
        self._t0 = time.perf_counter()

    def set_params(self, params: dict, sources: dict) -> None:
        self.params = {k: _redact(k, _jsonable(v)) for k, v in params.items()}
        self.sources = dict(sources)

    def add_input(self, path) -> None:
        if path is not None and not is_stdio(path) and str(path) not in self.inputs:
            self.inputs.append(str(path))

    def add_builtin(self, name: str, package: str) -> None:
        """Record a data set shipped by a package (``skfolio:sp500``) with that package's version."""
        entry = {"path": name, "kind": "builtin", "package": package, "version": _version(package)}
        if entry not in self.builtins:
            self.builtins.append(entry)

    def add_output(self, path, recorded_as=None) -> None:
        """Record an output; ``recorded_as`` names it where it will end up (e.g. a run folder
        that is still ``<dir>.partial`` while the manifest is written)."""
        if path is not None and not is_stdio(path):
            entry = (str(recorded_as if recorded_as is not None else path), str(path))
            if entry not in self.outputs:
                self.outputs.append(entry)

    def to_dict(self, status: str) -> dict:
        return {
            "tool": self.tool,
            "command": self.command,
            "version": _version("icmlkit"),
            "argv": redact_argv(self.argv),
            "parameters": self.params,
            "parameter_sources": self.sources,
            "seed": self.seed,
            "device": self.device,
            "threads": self.threads,
            "distributed": self.distributed,
            "environment": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "torch": _version("torch"),
                "numpy": _version("numpy"),
            },
            "git_commit": git_commit(),
            "inputs": [file_record(p) for p in self.inputs if Path(p).exists()] + self.builtins,
            "outputs": [{**file_record(p), "path": shown} for shown, p in self.outputs if Path(p).exists()],
            "started_utc": self.started,
            "ended_utc": _utc_now(),
            "wall_seconds": round(time.perf_counter() - self._t0, 3),
            "status": status,
        }

    def write(self, path, status: str = "ok") -> None:
        write_json(path, self.to_dict(status))


def _jsonable(v):
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


def manifest_path_for(output) -> str:
    """``out.csv`` -> ``out.csv.manifest.json``; a folder -> ``folder/manifest.json``."""
    p = Path(output)
    return str(p / "manifest.json") if p.is_dir() else str(p) + ".manifest.json"


__all__ = ["Manifest", "manifest_path_for", "file_record", "git_commit", "is_secret_name", "redact_argv"]
