"""What every benchmark script shares: the machine description, the commit, and the results files.

Benchmarks run as scripts (``python bench/<tool>.py``), so this module is imported as ``_common``.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import subprocess
from pathlib import Path

from icmlkit.lib.core.io import write_json, write_text

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    """Cores, CPU model, GPU (if torch sees one), Python, and the 1-minute load average now
    (benchmarks on a shared 2-core machine are only comparable when it was idle)."""
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = None
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        pass
    return {"cores": os.cpu_count(), "cpu": cpu, "gpu": gpu, "python": platform.python_version(),
            "load_average_1min": round(os.getloadavg()[0], 2)}


def commit() -> str | None:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=RESULTS.parent, capture_output=True, text=True)
    return out.stdout.strip() or None


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on ``path`` (a lock file) for a read-modify-write of a results file that
    parts run side by side also write."""
    import fcntl

    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def today() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")


def target(value, threshold, met: bool, note: str) -> dict:
    """One entry of ``targets``: a missed target stays in the file with met false."""
    return {"value": value, "threshold": threshold, "met": bool(met), "note": note}


def write_results(name: str, result: dict, markdown: str) -> None:
    """bench/results/<name>.json and .md, written atomically."""
    RESULTS.mkdir(exist_ok=True)
    write_json(RESULTS / f"{name}.json", result)
    write_text(RESULTS / f"{name}.md", markdown)
