"""The umbrella command: ``icmlkit list``, ``icmlkit demo``, ``icmlkit completion``, ``--version``.

The tools are read from their manifests (``lib/<module>/tool.toml``, the one registry; setup.cfg's
console scripts are generated from them).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from importlib import import_module
from pathlib import Path

import click

from icmlkit.cli._common import PipeAwareGroup, make_main

UMBRELLA = "icmlkit"


def tools() -> list[tuple[str, str]]:
    """(name, 'module:attr') of every icmlkit executable except this one, sorted by name."""
    from icmlkit.lib.core.tools import tools as manifests

    return [(t.name, t.entry_point) for t in manifests()]


def tool_cli(value: str) -> click.Command:
    module, _, attr = value.partition(":")
    return getattr(import_module(module), attr).cli


def _executable(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


@click.group(cls=PipeAwareGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="icmlkit", prog_name=UMBRELLA)
def cli():
    """icmlkit: one command-line tool per method of nineteen ICML 2026 papers.

    \b
    Examples:
      icmlkit list                      # the installed tools
      icmlkit demo                      # run every tool's demo into outputs/demo/<tool>/
      icmlkit demo --json               # the same summary as JSON
      eval "$(icmlkit completion bash)" # tab completion for every tool
    """


@cli.command("list")
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list of {name, method, description, paper, link, milestone, extra}.")
def list_tools(as_json: bool):
    """List the tools with their method and purpose (from their manifests)."""
    from icmlkit.lib.core.tools import tools as manifests

    rows = [{"name": t.name, "method": t.method, "description": t.purpose, "paper": t.paper, "link": t.link,
             "milestone": t.claimed, "extra": t.extra} for t in manifests()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    width = max((len(r["name"]) for r in rows), default=0)
    for r in rows:
        click.echo(f"{r['name']:<{width}}  {r['method']}: {r['description']}")


@cli.command(hidden=True)
@click.option("--write", is_flag=True, help="Rewrite the stale files instead of only listing them.")
def registry(write: bool):
    """Regenerate setup.cfg's scripts and extras, the Makefile's EXTRAS and the README's tools table
    from the manifests (a checkout only). Exit 3 when a file was stale and --write was not given."""
    from icmlkit.lib.core.errors import CheckFailed
    from icmlkit.lib.core.registry import regenerate

    stale = regenerate(write=write)
    for name in stale:
        click.echo(f"{'rewrote' if write else 'stale'}: {name}", err=True)
    if stale and not write:
        raise CheckFailed(f"generated parts out of date in {', '.join(stale)}; run `make registry`")


# A demo's budget (issue: a newcomer's `make demo` on a busy machine): 60 s of CPU time. A demo is
# stopped when its CPU time passes --cpu-factor times that budget, so a busy machine (which stretches
# wall time, not CPU time) never fails it; --timeout is a wall-clock backstop for a hung demo.
DEMO_CPU_BUDGET_S = 60.0


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a running process and its waited-for children (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks


def _run_demo(exe: str, target: str, cpu_limit: float, wall_limit: float) -> dict:
    """Run one demo; returns status, wall and CPU seconds, its JSON summary or its last stderr line."""
    import resource
    import tempfile

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([exe, "demo", "--outdir", target, "--overwrite", "--json", "--no-progress"],
                                stdout=out, stderr=err, text=True)
        stopped, cpu = None, 0.0
        while proc.poll() is None:
            time.sleep(0.25)
            cpu = _cpu_seconds(proc.pid) or cpu
            if cpu > cpu_limit:
                stopped = f"stopped after {cpu:.0f} s of CPU (limit {cpu_limit:.0f})"
            elif time.perf_counter() - t0 > wall_limit:
                stopped = f"stopped after {wall_limit:.0f} s of wall time (CPU {cpu:.0f} s)"
            if stopped:
                proc.kill()
                proc.wait()
                break
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    wall = round(time.perf_counter() - t0, 1)
    cpu = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)
    last = (stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    row = {"seconds": wall, "cpu_seconds": cpu, "outdir": target}
    if stopped:
        return {**row, "status": "timeout", "headline": f"{stopped}; last progress: {last}"}
    if proc.returncode != 0:
        return {**row, "status": "failed", "headline": last}
    try:
        summary = json.loads(stdout)
    except json.JSONDecodeError:
        return {**row, "status": "failed", "headline": "demo printed no JSON summary"}
    return {**row, "status": "ok", "headline": summary.get("headline", "")}


@cli.command()
@click.option("--outdir", default="outputs/demo", show_default=True, type=click.Path(file_okay=False),
              help="Each tool writes into OUTDIR/<tool>/ (replaced on every run).")
@click.option("--only", multiple=True, help="Run only these tools (repeatable).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as JSON on stdout: a list of {tool, status, seconds, cpu_seconds, "
                   "headline, outdir}.")
@click.option("--cpu-factor", default=5.0, show_default=True, type=click.FloatRange(min=1.0),
              help=f"Stop a demo whose CPU time passes this many times its budget ({DEMO_CPU_BUDGET_S:g} s).")
@click.option("--timeout", default=3600, show_default=True, type=click.IntRange(min=1),
              help="Wall-clock seconds allowed per tool (a backstop for a hung demo; CPU time is the budget).")
def demo(outdir: str, only: tuple[str, ...], as_json: bool, cpu_factor: float, timeout: int):
    """Run every tool's `demo` subcommand and print one summary table with wall and CPU seconds.

    Each demo's budget is 60 s of CPU time; one that passes --cpu-factor times that is stopped and
    reported with its last progress line. Exit status 1 when any demo failed or was stopped.
    """
    chosen = [(n, v) for n, v in tools() if not only or n in only]
    unknown = set(only) - {n for n, _ in chosen}
    if unknown:
        raise click.BadParameter(f"unknown tool(s): {', '.join(sorted(unknown))}", param_hint="--only")
    Path(outdir).mkdir(parents=True, exist_ok=True)
    rows = []
    for name, _ in chosen:
        exe = _executable(name)
        if exe is None:
            rows.append({"tool": name, "status": "missing", "seconds": 0.0, "cpu_seconds": 0.0,
                         "headline": "executable not found"})
            continue
        if not as_json:
            click.echo(f"running {name} demo ...", err=True)
        rows.append({"tool": name, **_run_demo(exe, os.path.join(outdir, name), cpu_factor * DEMO_CPU_BUDGET_S,
                                               float(timeout))})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="icmlkit demo")
        for col in ("tool", "status", "wall s", "CPU s", "headline"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(r["tool"], r["status"], f"{r['seconds']:.1f}", f"{r['cpu_seconds']:.1f}", r["headline"])
        Console(width=max(shutil.get_terminal_size().columns, 100)).print(table)
        total_wall = sum(r["seconds"] for r in rows)
        total_cpu = sum(r["cpu_seconds"] for r in rows)
        click.echo(f"{len(rows)} demos: {total_wall:.0f} s wall, {total_cpu:.0f} s CPU", err=True)
    if any(r["status"] != "ok" for r in rows):
        sys.exit(1)


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str):
    """Print shell completion for every icmlkit tool at once.

    \b
    bash:  eval "$(icmlkit completion bash)"      (or save it under ~/.bash_completion.d/)
    zsh:   eval "$(icmlkit completion zsh)"
    fish:  icmlkit completion fish > ~/.config/fish/completions/icmlkit.fish
    """
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    pieces = []
    for name, value in [(UMBRELLA, f"{__name__}:main")] + tools():
        command = cli if name == UMBRELLA else tool_cli(value)
        var = "_" + name.replace("-", "_").upper() + "_COMPLETE"
        pieces.append(cls(command, {}, name, var).source())
    click.echo("\n".join(pieces))


main = make_main(cli, UMBRELLA)

if __name__ == "__main__":  # pragma: no cover
    main()
