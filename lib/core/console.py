"""Logging and progress for the library: everything goes to stderr, never stdout.

Progress bars show only when stderr is a terminal and ``ICMLKIT_NO_PROGRESS`` is unset, so cron
jobs and pipes stay silent. The CLI sets the verbosity with :func:`configure`.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")

log = logging.getLogger("icmlkit")
_state = {"progress": None}


def configure(verbosity: int = 0, progress: bool | None = None) -> None:
    """Set the log level (-1 quiet, 0 warnings+info, 1 debug) and whether bars may show."""
    level = logging.WARNING if verbosity < 0 else logging.INFO if verbosity == 0 else logging.DEBUG
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.handlers[0].stream = sys.stderr  # this run's stderr (in-process runs replace it; the old one may be closed)
    log.setLevel(level)
    _state["progress"] = progress


def progress_enabled() -> bool:
    if _state["progress"] is False or os.environ.get("ICMLKIT_NO_PROGRESS", "") not in ("", "0"):
        return False
    return sys.stderr.isatty()


def progress(iterable: Iterable[T], total: int | None = None, desc: str = "") -> Iterator[T]:
    """Wrap ``iterable`` in a tqdm bar on stderr when :func:`progress_enabled`."""
    if not progress_enabled():
        yield from iterable
        return
    from tqdm import tqdm

    yield from tqdm(iterable, total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)
