"""Logging and progress for the library: everything goes to stderr, never stdout.

Progress bars show only when stderr is a terminal and neither ``--no-progress`` nor
``ICMLKIT_NO_PROGRESS`` is set. Off a terminal (cron, a pipe, a log file) there is never a bar, but
long work is never silent either: :func:`progress` writes one plain line at least every
:data:`LINE_EVERY` seconds (``train ra-det: step 120/500 (24%), loss 0.6931, 2m00s elapsed, ~6m20s
left``), from a watcher thread, so the line comes even while one step runs for minutes. Loops that
finish within the interval print nothing; ``-q`` silences the lines (they are INFO log records).
A loop reports its loss (or any number) with :func:`report`. The CLI sets the verbosity with
:func:`configure`.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")

log = logging.getLogger("icmlkit")
_state: dict = {"progress": None, "clock": time.monotonic}
LINE_EVERY = 60.0  # seconds between two progress lines off a terminal
_WATCH_POLL = 5.0  # how often the watcher thread looks at the clock
_active: list["_Lines"] = []  # the running progress loops, innermost last


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
    """True when a bar may show: stderr is a terminal and progress is not turned off."""
    if _state["progress"] is False or os.environ.get("ICMLKIT_NO_PROGRESS", "") not in ("", "0"):
        return False
    return sys.stderr.isatty()


# other libraries' bars (transformers' "Writing model shards", hub downloads, any tqdm) follow ours
_LIBRARY_BAR_VARS = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


@contextlib.contextmanager
def library_bars():
    """Run a command with other libraries' progress bars off unless :func:`progress_enabled` (a
    terminal, no ``--no-progress``): sets ``TQDM_DISABLE`` and ``HF_HUB_DISABLE_PROGRESS_BARS``, which
    tqdm and Hugging Face read when they are imported (inside the command: the CLI imports them
    lazily), and turns transformers' bars off when it is already imported; restored afterwards."""
    if progress_enabled():
        yield
        return
    saved = {k: os.environ.get(k) for k in _LIBRARY_BAR_VARS}
    os.environ.update(_LIBRARY_BAR_VARS)
    hf_logging = None
    if "transformers" in sys.modules:
        try:
            from transformers.utils import logging as hf_logging

            was_on = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()
        except Exception:  # noqa: BLE001 - an old or broken transformers: its bars stay as they are
            hf_logging = None
    try:
        yield
    finally:
        if hf_logging is not None and was_on:
            hf_logging.enable_progress_bar()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _clock() -> float:
    return _state["clock"]()


def _duration(seconds: float) -> str:
    s = int(round(max(seconds, 0.0)))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def _number(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


class _Lines:
    """The plain progress lines of one loop (off a terminal): :meth:`tick` writes a line when
    :data:`LINE_EVERY` seconds passed since the last one (or the start)."""

    def __init__(self, desc: str, total: int | None, every: float = LINE_EVERY):
        self.desc, self.total, self.every = desc or "progress", total, every
        self.done = 0
        self.values: dict = {}
        self.t0 = self.last = _clock()
        self.lines = 0
        self._lock = threading.Lock()

    def line(self, final: bool = False) -> str:
        elapsed = _clock() - self.t0
        step = f"step {self.done}/{self.total}" if self.total else f"step {self.done}"
        parts = [f"{self.desc}: {'done, ' if final else ''}{step}"]
        if self.total and not final:
            parts[0] += f" ({100 * self.done // max(self.total, 1)}%)"
        parts += [f"{k} {_number(v)}" for k, v in self.values.items()]
        parts.append(f"{_duration(elapsed)} elapsed")
        if self.total and self.done and not final and self.done < self.total:
            parts.append(f"~{_duration(elapsed / self.done * (self.total - self.done))} left")
        return ", ".join(parts)

    def tick(self) -> bool:
        """Write a line if one is due; True when it wrote one."""
        with self._lock:
            now = _clock()
            if now - self.last < self.every:
                return False
            self.last = now
            self.lines += 1
            log.info(self.line())
            return True

    def finish(self) -> None:
        """A closing line, only for a loop that already wrote one (short loops stay silent)."""
        with self._lock:
            if self.lines:
                log.info(self.line(final=True))


def _watch(lines: _Lines, stop: threading.Event, poll: float) -> None:
    while not stop.wait(poll):
        lines.tick()


def report(**values) -> None:
    """Attach numbers (``loss=0.69``) to the innermost running :func:`progress` loop; they appear in
    its next line (or the bar's postfix on a terminal). A no-op outside a progress loop."""
    if _active:
        _active[-1].values.update(values)
        bar = getattr(_active[-1], "bar", None)
        if bar is not None:
            bar.set_postfix({k: _number(v) for k, v in values.items()}, refresh=False)


def progress(iterable: Iterable[T], total: int | None = None, desc: str = "") -> Iterator[T]:
    """Wrap ``iterable``: a tqdm bar on stderr when :func:`progress_enabled`; otherwise a plain line
    at least every :data:`LINE_EVERY` seconds while the loop runs (steps done, the numbers given to
    :func:`report`, elapsed time, an estimate of the time left)."""
    if total is None:
        try:
            total = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    lines = _Lines(desc, total)
    _active.append(lines)
    stop = None
    try:
        if progress_enabled():
            from tqdm import tqdm

            bar = tqdm(iterable, total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)
            lines.bar = bar  # type: ignore[attr-defined]
            yield from bar
            return
        stop = threading.Event()
        threading.Thread(target=_watch, args=(lines, stop, min(_WATCH_POLL, lines.every)), daemon=True,
                         name=f"icmlkit-progress {lines.desc}").start()
        for item in iterable:
            yield item
            lines.done += 1
            lines.tick()
        lines.finish()
    finally:
        if stop is not None:
            stop.set()
        if lines in _active:
            _active.remove(lines)
