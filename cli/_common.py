"""What every icmlkit executable shares, in one place.

- :class:`ToolGroup` / :class:`ToolCommand`: a tool is a click group whose subcommands all get the
  shared options (``--seed --device --config -q/-v --debug --overwrite --no-manifest --json
  --no-progress``) and an ``ICMLKIT_<TOOL>_<OPTION>`` environment variable for each own option.
- Precedence: flag > environment (``ICMLKIT_SEED``, ``ICMLKIT_DEVICE``, ``ICMLKIT_<TOOL>_<OPTION>``)
  > ``--config`` file (TOML or JSON) > default. This is click's own order (command line, envvar,
  ``default_map``, default); the config file fills ``default_map``.
- :class:`Run`: what a subcommand's function receives first: the seed, the device, output
  registration (``--overwrite`` checks, removal of this run's outputs when it fails), and the
  manifest, written last.
- :func:`make_main`: maps errors to exit codes (0 ok, 1 runtime/data error, 2 usage, 3 a check the
  user asked for failed, 4 environment problem, 130 interrupted) and prints one-line messages; the
  traceback only with ``--debug`` or ``ICMLKIT_DEBUG=1``.

This module imports only click and the standard library, so ``--help`` stays fast.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

import click
from click.core import ParameterSource

from icmlkit.lib.core import console
from icmlkit.lib.core.errors import CheckFailed, IcmlkitError, UsageError
from icmlkit.lib.core.io import atomic_dir, check_writable, dumps_json, is_stdio
from icmlkit.lib.core.manifest import Manifest, manifest_path_for

# 2 (usage), 3 (check failed) and 4 (environment) come from the error classes in lib/core/errors.py.
EXIT_OK, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 130

_SOURCES = {
    ParameterSource.COMMANDLINE: "flag",
    ParameterSource.ENVIRONMENT: "env",
    ParameterSource.DEFAULT_MAP: "config",
    ParameterSource.DEFAULT: "default",
    ParameterSource.PROMPT: "prompt",
}
_state = {"debug": False}


def _debug_wanted() -> bool:
    return _state["debug"] or os.environ.get("ICMLKIT_DEBUG", "") not in ("", "0")


# --------------------------------------------------------------------------- config files


def read_config(path: str) -> dict:
    """Read a TOML or JSON config file into a dict (``-`` is not accepted: stdin is for data)."""
    p = Path(path)
    if not p.is_file():
        raise click.BadParameter(f"{path}: no such file", param_hint="--config")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import tomllib

            data = tomllib.loads(text)
    except (ValueError, json.JSONDecodeError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise click.BadParameter(f"{path}: not valid {'JSON' if p.suffix == '.json' else 'TOML'}: {exc}",
                                 param_hint="--config") from None
    if not isinstance(data, dict):
        raise click.BadParameter(f"{path}: expected a table of option = value", param_hint="--config")
    return data


def _load_config(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Eager callback of ``--config``: fill ``ctx.default_map`` before the other options resolve.

    Keys are option names (``lp-method`` or ``lp_method``). Top-level keys apply to every
    subcommand that has such an option; a table named after a subcommand (``[solve]``) applies to
    it alone and wins. A key no subcommand knows is a usage error (it is most likely a typo).
    """
    if not value:
        return value
    data = read_config(value)
    command = ctx.command
    group = ctx.parent.command if ctx.parent is not None else None
    siblings = dict(getattr(group, "commands", {}) or {command.name: command})
    known = {p.name for c in siblings.values() for p in c.params}

    def norm(d: dict, where: str, allowed: set) -> dict:
        out = {}
        for k, v in d.items():
            key = str(k).replace("-", "_")
            if isinstance(v, dict):
                continue
            if key not in allowed:
                raise click.BadParameter(f"{value}: unknown option {k!r}{where}", param_hint="--config")
            out[key] = v
        return out

    top = norm({k: v for k, v in data.items() if k not in siblings}, "", known)
    own = {p.name for p in command.params}
    merged = {k: v for k, v in top.items() if k in own}
    section = data.get(command.name)
    if isinstance(section, dict):
        merged.update(norm(section, f" in [{command.name}]", own))
    ctx.default_map = {**(ctx.default_map or {}), **merged}
    return value


# --------------------------------------------------------------------------- shared options

SHARED = ("seed", "device", "config", "quiet", "verbose", "debug", "overwrite", "no_manifest",
          "json_out", "no_progress")


def _shared_params() -> list[click.Parameter]:
    return [
        click.Option(["--seed"], type=int, default=0, show_default=True, envvar="ICMLKIT_SEED",
                     help="Random seed; the same seed gives the same output bytes on CPU."),
        click.Option(["--device"], default="auto", show_default=True, envvar="ICMLKIT_DEVICE",
                     help="auto, cpu, cuda or cuda:N."),
        click.Option(["--config"], type=click.Path(dir_okay=False), is_eager=True, envvar="ICMLKIT_CONFIG",
                     callback=_load_config, help="TOML or JSON file of option defaults (flags and "
                     "environment variables win over it)."),
        click.Option(["-q", "--quiet"], count=True, help="Less logging on stderr."),
        click.Option(["-v", "--verbose"], count=True, help="More logging on stderr."),
        click.Option(["--debug"], is_flag=True, envvar="ICMLKIT_DEBUG",
                     help="Show the traceback of an error."),
        click.Option(["--overwrite"], is_flag=True, help="Replace existing output files."),
        click.Option(["--no-manifest"], is_flag=True, help="Do not write <output>.manifest.json."),
        click.Option(["--json", "json_out"], is_flag=True,
                     help="Print one JSON summary object on stdout."),
        click.Option(["--no-progress"], is_flag=True, envvar="ICMLKIT_NO_PROGRESS",
                     help="No progress bars (they show only on a terminal anyway)."),
    ]


def output_option(help_text: str, required: bool = False) -> Callable:
    """``-o/--output PATH`` (``-`` = stdout)."""
    return click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True),
                        required=required, default=None, help=help_text + " '-' writes to stdout.")


def option_group(options: list[Callable]) -> Callable:
    """One decorator applying a list of click options in the listed order (options shared by
    several subcommands)."""

    def deco(f: Callable) -> Callable:
        for opt in reversed(options):
            f = opt(f)
        return f

    return deco


def shard_option() -> Callable:
    """``--shard K/N``: process the K-th of N deterministic slices (1-based) of the items."""
    return click.option("--shard", default="1/1", show_default=True, callback=_parse_shard,
                        help="Process slice K of N (1-based) of the items, for job arrays; the "
                        "outputs of all slices concatenate.")


def _parse_shard(ctx, param, value: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in str(value).split("/"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not K/N (e.g. 2/8)") from None
    if not (n >= 1 and 1 <= k <= n):
        raise click.BadParameter(f"{value!r}: need 1 <= K <= N")
    return k, n


def checkpoint_file(output: str, resume: bool) -> Path:
    """The training checkpoint kept beside OUTPUT (``OUTPUT.ckpt.pt``); with ``resume`` it must exist."""
    ckpt = Path(str(output) + ".ckpt.pt")
    if resume and not ckpt.is_file():
        raise click.BadParameter(f"{ckpt} does not exist (nothing to resume)", param_hint="--resume")
    return ckpt


def shard_slice(count: int, shard: tuple[int, int]) -> range:
    """The items of ``shard`` = (K, N) among ``count`` items: contiguous, deterministic slices."""
    k, n = shard
    return range((k - 1) * count // n, k * count // n)


# --------------------------------------------------------------------------- the run


class Run:
    """Passed as the first argument to every subcommand function."""

    def __init__(self, ctx: click.Context, tool: str, shared: dict):
        self.tool = tool
        self.command = ctx.info_name
        self.seed: int = shared["seed"]
        self.device_spec: str = shared["device"]
        self.json: bool = shared["json_out"]
        self.overwrite: bool = shared["overwrite"]
        self.write_manifest: bool = not shared["no_manifest"]
        self.manifest = Manifest(tool, self.command, sys.argv[1:])
        self.manifest.seed = self.seed
        self.stdout_is_data = False
        self._outputs: list[str] = []
        self._device = None
        self._check_failure: str | None = None

    @property
    def device(self):
        """The torch device (resolved on first use, so commands without torch never import it)."""
        if self._device is None:
            from icmlkit.lib.core.runtime import resolve_device

            self._device = resolve_device(self.device_spec)
            self.manifest.device = str(self._device)
        return self._device

    def input(self, path):
        """Record an input for the manifest; returns ``path``."""
        self.manifest.add_input(path)
        return path

    def output(self, path):
        """Declare an output before computing: checks ``--overwrite`` and the folder; returns it.

        Call it for every output before the work starts, so a bad path fails fast.
        """
        if path is None:
            return None
        if is_stdio(path):
            if self.json:
                raise UsageError("--json and -o - both write to stdout; choose one")
            self.stdout_is_data = True
            return path
        check_writable(path, self.overwrite)
        if self.write_manifest:
            check_writable(manifest_path_for(path), self.overwrite)
        return path

    def wrote(self, path) -> None:
        """Mark ``path`` as written by this run (removed again if the run fails later)."""
        if path is not None and not is_stdio(path):
            self._outputs.append(str(path))
            self.manifest.add_output(path)

    @contextlib.contextmanager
    def run_dir(self, path):
        """Build the run folder ``path`` atomically (as ``<path>.partial``); yields the folder to
        write into. Every file in it is recorded, and ``manifest.json`` is written in it last."""
        with atomic_dir(path, overwrite=self.overwrite) as tmp:
            yield tmp
            if self.write_manifest:
                for p in sorted(tmp.rglob("*")):
                    if p.is_file():
                        self.manifest.add_output(p, recorded_as=Path(path) / p.relative_to(tmp))
                self.manifest.write(tmp / "manifest.json")

    def fail_check(self, message: str) -> None:
        """Finish normally (outputs and manifest kept) but exit 3 with ``message``."""
        self._check_failure = message

    # called by ToolCommand ------------------------------------------------------------
    def _rollback(self) -> None:
        import shutil

        for p in self._outputs:
            path = Path(p)
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def _finish(self, summary: dict | None) -> None:
        status = "check_failed" if self._check_failure else "ok"
        if self.write_manifest and self._outputs:
            self.manifest.write(manifest_path_for(self._outputs[0]), status)
        if summary is not None:
            emit_summary(summary, self.json, to_stderr=self.stdout_is_data)
        if self._check_failure:
            raise CheckFailed(self._check_failure)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, default=str)
    return "null" if v is None else str(v)


def emit_summary(summary: dict, as_json: bool, to_stderr: bool = False) -> None:
    """``--json``: one JSON object on stdout; otherwise ``key: value`` lines."""
    stream = sys.stderr if to_stderr else sys.stdout
    if as_json:
        stream.write(dumps_json(summary))
    else:
        width = max((len(k) for k in summary), default=0)
        stream.write("".join(f"{k:<{width}}  {_fmt(v)}\n" for k, v in summary.items()))
    stream.flush()


class PipeClosed(Exception):
    """The reader of stdout went away (``| head``)."""


class ToolCommand(click.Command):
    """A subcommand with the shared options; its function gets a :class:`Run` first."""

    def __init__(self, *args, tool: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.tool = tool
        prefix = "ICMLKIT_" + tool.upper().replace("-", "_") + "_"
        for p in self.params:
            if isinstance(p, click.Option) and p.envvar is None:
                p.envvar = prefix + p.name.upper()
        self.params.extend(_shared_params())

    def invoke(self, ctx: click.Context):
        sources = {name: _SOURCES.get(ctx.get_parameter_source(name), "default") for name in ctx.params}
        params = dict(ctx.params)
        shared = {name: ctx.params.pop(name) for name in SHARED}
        _state["debug"] = bool(shared["debug"])
        console.configure(shared["verbose"] - shared["quiet"], progress=not shared["no_progress"])
        run = Run(ctx, self.tool, shared)
        run.manifest.set_params(params, sources)
        try:
            summary = ctx.invoke(self.callback, run, **ctx.params)
            run._finish(summary)
        except BrokenPipeError:
            # click would turn this into exit 1; the reader closing the pipe is no failure.
            raise PipeClosed() from None
        except CheckFailed:
            raise
        except BaseException:
            run._rollback()
            raise
        return summary


class ToolGroup(click.Group):
    """The click group of one tool; ``@group.command()`` makes :class:`ToolCommand` subcommands."""

    def __init__(self, tool: str, **kwargs):
        kwargs.setdefault("context_settings", {"help_option_names": ["-h", "--help"], "max_content_width": 100})
        super().__init__(name=tool, **kwargs)
        self.tool = tool
        click.version_option(package_name="icmlkit", prog_name=tool)(self)

    def command(self, *args, **kwargs):
        kwargs.setdefault("cls", ToolCommand)
        kwargs.setdefault("tool", self.tool)
        kwargs.setdefault("context_settings", {"help_option_names": ["-h", "--help"], "max_content_width": 100})
        return super().command(*args, **kwargs)


# --------------------------------------------------------------------------- entry point


def make_main(cli: click.Command, prog_name: str) -> Callable[..., None]:
    """The console-script function for ``cli``: runs it and exits with the contract's codes."""

    def main(argv: list[str] | None = None) -> None:
        sys.exit(run_cli(cli, prog_name, argv))

    main.cli = cli  # type: ignore[attr-defined]
    return main


def run_cli(cli: click.Command, prog_name: str, argv: list[str] | None = None) -> int:
    try:
        rv = cli.main(args=argv, prog_name=prog_name, standalone_mode=False)
        return rv if isinstance(rv, int) and not isinstance(rv, bool) else EXIT_OK
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        sys.stderr.write("Interrupted\n")
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except IcmlkitError as exc:
        return _error(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted\n")
        return EXIT_INTERRUPTED
    except (BrokenPipeError, PipeClosed):
        # The reader went away (e.g. `| head -1`): stop quietly, as head's users expect.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except MemoryError:
        return _error("out of memory; try a smaller input or fewer trials", EXIT_ERROR)
    except Exception as exc:  # anything the library did not anticipate: still one line
        return _error(f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback)", EXIT_ERROR)


def _error(message: str, code: int) -> int:
    if _debug_wanted():
        traceback.print_exc(file=sys.stderr)
    first = " ".join(str(message).split("\n"))
    sys.stderr.write(f"Error: {first}\n")
    return code
