"""The one benchmark harness: parts registered as functions, one merge, one timing helper, one tuning
helper, one Markdown table writer.

A benchmark script (``bench/<module>.py``, run as ``python bench/<module>.py`` so this module is
imported as ``_common``) declares its parts and its report::

    bench = Bench("train-operator")

    @bench.part("real", doc="real Darcy, 3 seeds", hours=2.5)
    def real(ctx):                      # ctx: Context (quick flag, seeds, checkpoint folder, cache)
        rows = [ctx.cached(f"seed{s}", lambda: run_one(s, epochs=2 if ctx.quick else 300)) for s in ctx.seeds]
        return {"rows": rows}           # the part's payload: JSON data, nothing else

    @bench.report
    def report(results):                # results: {part: payload} of every part run so far
        return {"name": target(...)}, table(results["real"]["rows"])   # (targets, Markdown)

    if __name__ == "__main__":
        bench.main()

``make bench TOOL=x`` runs every part (each one's payload replaces the stored one) and rewrites
``bench/results/<module>.json`` and ``.md``; ``--part P`` runs one part and re-merges with the stored
rest; ``--report`` only re-merges. Every part's provenance is recorded beside its payload: commit,
date (ISO 8601 UTC), machine, the exact command and wall seconds, the tuning grids each method got and
whether it ran ``--quick``. ``--quick`` runs a smoke version of every part in minutes and writes under
``outputs/bench-quick/`` (never over the committed results). A long part is resumable: what it
computes through ``ctx.cached`` is kept under ``outputs/bench/<module>/<part>/`` and reused by the
next run with the same settings (``--fresh`` drops it).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from icmlkit.lib.core.io import write_json, write_text
from icmlkit.lib.core.tools import tool as manifest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
QUICK_RESULTS = ROOT / "outputs" / "bench-quick"
CACHE = ROOT / "outputs" / "bench"


# ----------------------------------------------------------------------------- provenance

def machine() -> dict:
    """Cores, CPU model, GPU (if torch sees one), Python, and the 1-minute load average now
    (benchmarks on a shared 2-core machine are only comparable when it was idle)."""
    cpu = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    gpu = None
    with contextlib.suppress(ImportError):
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cores": os.cpu_count(), "cpu": cpu, "gpu": gpu, "python": platform.python_version(),
            "load_average_1min": round(os.getloadavg()[0], 2)}


def commit() -> str | None:
    """HEAD, with ``-dirty`` when tracked files differ from it (the figures then need a rerun)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if not head:
        return None
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "lib", "cli", "bench/*.py"], cwd=ROOT)
    return head + ("-dirty" if dirty.returncode else "")


def now() -> str:
    """The one date format: ISO 8601 UTC to the second."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on ``path`` (a lock file inside the repository's outputs/)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


# ----------------------------------------------------------------------------- helpers

def target(value, threshold, met: bool, note: str) -> dict:
    """One entry of ``targets``: a missed target stays in the file with met false."""
    return {"value": value, "threshold": threshold, "met": bool(met), "note": note}


def time_call(fn: Callable[[], object], *, repeats: int = 5, warmup: int = 1,
              sync: Callable[[], None] | None = None) -> dict:
    """Wall time of ``fn()``: ``warmup`` untimed calls, then the median of ``repeats`` timed ones,
    with the spread (min, max, and the interquartile range when there are 4 or more repeats).
    ``sync`` (e.g. ``torch.cuda.synchronize``) runs before each clock read. Every timing quoted by a
    benchmark comes from here."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    out = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
           "repeats": repeats, "warmup": warmup}
    if repeats >= 4:
        q = statistics.quantiles(times, n=4)
        out["iqr_s"] = q[2] - q[0]
    return out


def speed_ratio(slow: dict, fast: dict) -> dict:
    """``slow`` median / ``fast`` median from two ``time_call`` records, with the range the spreads
    allow (slow min / fast max .. slow max / fast min)."""
    return {"ratio": slow["median_s"] / fast["median_s"],
            "low": slow["min_s"] / fast["max_s"], "high": slow["max_s"] / fast["min_s"]}


def tune(grids: dict[str, list[dict]], evaluate: Callable[[str, dict], float], *, budget: int,
         maximize: bool = True, seed: int = 0) -> dict:
    """Tune every compared method with the same budget: each method's grid over its own knobs is
    cut to ``budget`` configurations (a seeded sample when it is larger; a grid smaller than the
    budget is refused, so no method is given fewer tries), ``evaluate(method, config)`` scores each
    one, and the record keeps every grid, every score and each method's best. Store the record in
    the part's payload through ``ctx.record_tuning``."""
    if budget < 1:
        raise ValueError("budget must be at least 1")
    short = {m: len(g) for m, g in grids.items() if len(g) < budget}
    if short:
        raise ValueError(f"grids smaller than the budget {budget}: {short}")
    rng = random.Random(seed)
    out = {"budget": budget, "maximize": maximize, "methods": {}}
    for method, grid in grids.items():
        chosen = grid if len(grid) == budget else [grid[i] for i in sorted(rng.sample(range(len(grid)), budget))]
        scores = [float(evaluate(method, cfg)) for cfg in chosen]
        finite = [i for i, s in enumerate(scores) if math.isfinite(s)]
        best = (max if maximize else min)(finite, key=lambda i: scores[i]) if finite else None
        out["methods"][method] = {"grid": chosen, "scores": scores,
                                  "best": None if best is None else chosen[best],
                                  "best_score": None if best is None else scores[best]}
    return out


def _cell(v, digits: int) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.{digits}g}" if abs(v) >= 10 ** digits or (v != 0 and abs(v) < 10 ** -digits) else f"{v:.{digits}f}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict], columns: list[str] | None = None, *, digits: int = 3) -> str:
    """The one Markdown table writer: ``rows`` of dicts, ``columns`` in order (default: the keys of
    the first row, then any new key in order of appearance)."""
    if not rows:
        return "(no rows)\n"
    if columns is None:
        columns = []
        for r in rows:
            columns += [k for k in r if k not in columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(c), digits) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def targets_table(targets: dict) -> str:
    rows = [{"target": k, "value": v.get("value"), "threshold": v.get("threshold"),
             "met": v.get("met"), "note": v.get("note", "")} for k, v in targets.items()]
    return table(rows, ["target", "value", "threshold", "met", "note"])


# ----------------------------------------------------------------------------- parts

@dataclass
class Context:
    """What a part receives: the run's flags, its checkpoint folder and its item cache."""

    part: str
    quick: bool
    seeds: list[int]
    folder: Path
    fresh: bool = False
    tuning: dict = field(default_factory=dict)

    def cached(self, key: str, compute: Callable[[], object]):
        """``compute()`` once: its JSON result is kept under the part's folder and returned by later
        runs (a killed long part resumes at the first item not done). ``key`` must name every
        setting the result depends on that the part's own settings do not."""
        path = self._cache_path(key)
        if self.is_cached(key):
            return json.loads(path.read_text())
        value = compute()
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(path, value)
        return value

    def _cache_path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def is_cached(self, key: str) -> bool:
        """Whether :meth:`cached` would return a stored result for ``key`` without computing."""
        return self._cache_path(key).is_file() and not self.fresh

    def record_tuning(self, name: str, record: dict) -> dict:
        """Keep a ``tune`` record (or any grid a method was given) in the part's provenance."""
        self.tuning[name] = record
        return record

    def log(self, msg: str) -> None:
        print(f"[{self.part}] {msg}", file=sys.stderr, flush=True)


@dataclass
class Part:
    name: str
    fn: Callable[[Context], dict]
    doc: str
    hours: float
    seeds: tuple[int, ...]
    quick_seeds: tuple[int, ...]


class Bench:
    """One tool's benchmark: its parts, its report, and the command line of ``bench/<module>.py``."""

    def __init__(self, tool: str):
        self.tool = manifest(tool)
        self.parts: dict[str, Part] = {}
        self._report: Callable[[dict], tuple[dict, str]] | None = None

    def part(self, name: str, *, doc: str = "", hours: float = 0.1, seeds=(0,), quick_seeds=None):
        """Register ``fn(ctx) -> payload`` as part ``name``; ``hours`` is its full run time on the
        2-core machine (the docs quote it); ``seeds`` the seeds of a full run (``quick_seeds``, by
        default the first, of a ``--quick`` one)."""

        def deco(fn):
            if name in self.parts:
                raise ValueError(f"part {name!r} registered twice")
            self.parts[name] = Part(name, fn, doc or (fn.__doc__ or "").strip().split("\n")[0], hours,
                                    tuple(seeds), tuple(quick_seeds if quick_seeds is not None else seeds[:1]))
            return fn

        return deco

    def report(self, fn: Callable[[dict], tuple[dict, str]]):
        """Register ``fn(results) -> (targets, markdown)``; ``results`` maps each part run so far to
        its payload (a part not run yet is absent: the report states what it lacks)."""
        self._report = fn
        return fn

    # ------------------------------------------------------------------ paths

    def results_path(self, quick: bool) -> Path:
        return (QUICK_RESULTS if quick else RESULTS) / f"{self.tool.module}.json"

    def load(self, quick: bool) -> dict:
        path = self.results_path(quick)
        if path.is_file():
            stored = json.loads(path.read_text())
            if isinstance(stored.get("parts"), dict) and isinstance(stored.get("results"), dict):
                return stored
        return {"tool": self.tool.name, "results": {}, "parts": {}, "targets": {}}

    # ------------------------------------------------------------------ running

    def run(self, names: list[str], *, quick: bool = False, fresh: bool = False, argv: list[str] | None = None) -> dict:
        """Run the named parts, merge their payloads with the stored ones, rebuild the report."""
        unknown = [n for n in names if n not in self.parts]
        if unknown:
            raise SystemExit(f"bench/{self.tool.module}.py: unknown part(s) {unknown}; known: {list(self.parts)}")
        with locked(CACHE / f"{self.tool.module}.lock"):
            stored = self.load(quick)
            for name in names:
                part = self.parts[name]
                seeds = list(part.quick_seeds if quick else part.seeds)
                settings = hashlib.sha256(json.dumps([quick, seeds]).encode()).hexdigest()[:8]
                folder = CACHE / self.tool.module / f"{name}{'-quick' if quick else ''}-{settings}"
                ctx = Context(name, quick, seeds, folder, fresh)
                ctx.log(f"running{' (quick)' if quick else ''}: {part.doc}")
                t0 = time.perf_counter()
                payload = part.fn(ctx)
                seconds = round(time.perf_counter() - t0, 1)
                command = f"python bench/{self.tool.module}.py --part {name}" + (" --quick" if quick else "")
                stored["results"][name] = payload
                stored["parts"][name] = {"date": now(), "commit": commit(), "machine": machine(),
                                         "command": command, "seconds": seconds, "quick": quick,
                                         "seeds": seeds, "tuning": ctx.tuning}
                self._write(stored, quick)  # after every part: a later failure keeps what is done
                ctx.log(f"done in {seconds} s")
            return self._write(stored, quick)

    def _write(self, stored: dict, quick: bool) -> dict:
        results = {k: v for k, v in stored["results"].items() if k in self.parts}
        stored["results"] = results
        stored["parts"] = {k: v for k, v in stored["parts"].items() if k in self.parts}
        targets, markdown = self._report(results) if self._report else ({}, "")
        stored["targets"] = targets
        stored["tool"] = self.tool.name
        missing = [p for p in self.parts if p not in results]
        prov = table([{"part": k, "date": v["date"], "commit": (v["commit"] or "")[:12], "seconds": v["seconds"],
                       "quick": v["quick"], "command": f"`{v['command']}`"} for k, v in stored["parts"].items()],
                      ["part", "date", "commit", "seconds", "quick", "command"])
        head = f"# {self.tool.name} benchmark\n\nGenerated by `make bench TOOL={self.tool.name}` " \
               f"(bench/_common.py); do not edit.\n\n## Targets\n\n{targets_table(targets)}\n"
        tail = f"\n## Provenance\n\n{prov}"
        if missing:
            tail += f"\nParts not run yet: {', '.join(missing)}.\n"
        path = self.results_path(quick)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, stored)
        write_text(path.with_suffix(".md"), head + markdown.rstrip() + "\n" + tail)
        return stored

    def main(self, argv: list[str] | None = None) -> None:
        argv = sys.argv[1:] if argv is None else argv
        ap = argparse.ArgumentParser(prog=f"bench/{self.tool.module}.py",
                                     description=f"The {self.tool.name} benchmark. Parts: " + "; ".join(
                                         f"{p.name} ({p.doc}, ~{p.hours:g} h)" for p in self.parts.values()))
        ap.add_argument("--part", action="append", choices=list(self.parts), help="run only this part (repeatable)")
        ap.add_argument("--quick", action="store_true", help="smoke-run every part in minutes (outputs/bench-quick/)")
        ap.add_argument("--report", action="store_true", help="only rebuild targets and tables from stored parts")
        ap.add_argument("--fresh", action="store_true", help="ignore cached items of earlier runs")
        ap.add_argument("--list", action="store_true", help="list the parts and exit")
        args = ap.parse_args(argv)
        if args.list:
            for p in self.parts.values():
                print(f"{p.name}\t~{p.hours:g} h\tseeds {list(p.seeds)}\t{p.doc}")
            return
        if args.report:
            with locked(CACHE / f"{self.tool.module}.lock"):
                self._write(self.load(args.quick), args.quick)
            return
        self.run(args.part or list(self.parts), quick=args.quick, fresh=args.fresh)

