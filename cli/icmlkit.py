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


@cli.command()
@click.option("--outdir", default="outputs/demo", show_default=True, type=click.Path(file_okay=False),
              help="Each tool writes into OUTDIR/<tool>/ (replaced on every run).")
@click.option("--only", multiple=True, help="Run only these tools (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("--timeout", default=900, show_default=True, help="Seconds allowed per tool.")
def demo(outdir: str, only: tuple[str, ...], as_json: bool, timeout: int):
    """Run every tool's `demo` subcommand and print one summary table.

    Exit status 1 when any demo failed.
    """
    chosen = [(n, v) for n, v in tools() if not only or n in only]
    unknown = set(only) - {n for n, _ in chosen}
    if unknown:
        raise click.BadParameter(f"unknown tool(s): {', '.join(sorted(unknown))}", param_hint="--only")
    Path(outdir).mkdir(parents=True, exist_ok=True)
    rows = []
    for name, _ in chosen:
        exe = _executable(name)
        target = os.path.join(outdir, name)
        t0 = time.perf_counter()
        if exe is None:
            rows.append({"tool": name, "status": "missing", "seconds": 0.0, "headline": "executable not found"})
            continue
        if not as_json:
            click.echo(f"running {name} demo ...", err=True)
        try:
            proc = subprocess.run([exe, "demo", "--outdir", target, "--overwrite", "--json", "--no-progress"],
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            rows.append({"tool": name, "status": "timeout", "seconds": round(time.perf_counter() - t0, 1),
                         "headline": f"no result within {timeout} s"})
            continue
        seconds = round(time.perf_counter() - t0, 1)
        if proc.returncode == 0:
            try:
                summary = json.loads(proc.stdout)
                headline = summary.get("headline", "")
            except json.JSONDecodeError:
                summary, headline = None, "demo printed no JSON summary"
            rows.append({"tool": name, "status": "ok" if summary is not None else "failed",
                         "seconds": seconds, "headline": headline, "outdir": target})
        else:
            last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            rows.append({"tool": name, "status": "failed", "seconds": seconds, "headline": last})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="icmlkit demo")
        for col in ("tool", "status", "seconds", "headline"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(r["tool"], r["status"], f"{r['seconds']:.1f}", r["headline"])
        Console(width=max(shutil.get_terminal_size().columns, 100)).print(table)
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
