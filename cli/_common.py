"""What every icmlkit executable shares, in one place.

- :class:`ToolGroup` / :class:`ToolCommand`: a tool is a click group whose subcommands all get the
  shared options (``--config -q/-v --debug --overwrite --no-manifest --json --no-progress``,
  ``--threads`` (CPU threads, applied before any torch work; a command's own ``--threads`` stands in
  for it), plus ``--seed`` unless ``seed=False`` and ``--device`` only with ``device=True``) and an
  ``ICMLKIT_<TOOL>_<OPTION>`` environment variable for each own option. ``group.alias(old, name)``
  keeps a renamed subcommand's old name as a hidden, deprecated alias.
- Declared once: :func:`config_options` (a config dataclass's fields as options), :func:`output_option`
  (one suffix check), :func:`checkpoint_options`, :func:`shard_option`, :func:`add_demo`.
- Precedence: flag > environment (``ICMLKIT_SEED``, ``ICMLKIT_DEVICE``, ``ICMLKIT_<TOOL>_<OPTION>``)
  > ``--config`` file (TOML or JSON) > default. This is click's own order (command line, envvar,
  ``default_map``, default); the config file fills ``default_map``.
- :class:`Run`: what a subcommand's function receives first: the seed, the device, the torchrun
  rank, output registration (``--overwrite`` checks, removal of this run's outputs when it fails),
  checkpoints, and the manifest, written last (on rank 0 only).
- No accepted flag is silently ignored (issue 59). ``--json``, ``-q/-v``, ``--no-progress``,
  ``--overwrite``, ``--no-manifest``, ``--config`` and ``--debug`` change only presentation or
  bookkeeping, and ``--threads`` only speed (recorded in the manifest); ``--device`` is offered only
  where honoured (``cuda`` without a GPU exits 4); ``--seed`` only where something is random
  (``seed=False`` drops it), and a ``--seed`` given on the command line to a run that finishes
  without reading ``run.seed`` is a usage error (exit 2, outputs removed).
- :func:`make_main`: maps errors to exit codes (0 ok, 1 runtime/data error, 2 usage, 3 a check the
  user asked for failed, 4 environment problem, 130 interrupted) and prints one-line messages; the
  traceback only with ``--debug`` or ``ICMLKIT_DEBUG=1``.

This module imports only click, the standard library and lib/core's light modules, so ``--help``
stays fast.
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
from icmlkit.lib.core.config import build_config
from icmlkit.lib.core.errors import CheckFailed, IcmlkitError, UsageError
from icmlkit.lib.core.io import atomic_dir, check_writable, dumps_json, is_stdio, suffix
from icmlkit.lib.core.manifest import Manifest, manifest_path_for
from icmlkit.lib.core.runtime import DEFAULT_THREADS, THREADS_ENV, limit_threads, resolve_threads

# 2 (usage), 3 (check failed) and 4 (environment) come from the error classes in lib/core/errors.py.
EXIT_OK, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 130

_SOURCES = {
    ParameterSource.COMMANDLINE: "flag",
    ParameterSource.ENVIRONMENT: "env",
    ParameterSource.DEFAULT_MAP: "config",
    ParameterSource.DEFAULT: "default",
    ParameterSource.PROMPT: "prompt",
}
_state: dict = {"debug": False, "argv": sys.argv[1:]}  # argv: what run_cli parsed (recorded in the manifest)


def _debug_wanted() -> bool:
    return _state["debug"] or os.environ.get("ICMLKIT_DEBUG", "") not in ("", "0")


# --------------------------------------------------------------------------- config files


def read_config(path: str) -> dict:
    """Read a TOML or JSON config file into a dict (``-`` is not accepted: stdin is for data)."""
    p = Path(path)
    if not p.is_file():
        raise click.BadParameter(f"{path}: no such file", param_hint="--config")
    try:
        text = p.read_text(encoding="utf-8")  # not UTF-8: a ValueError (UnicodeDecodeError), reported below
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
                raise click.BadParameter(f"{value}: unknown table [{k}]{where}; tables are named after a "
                                         f"subcommand ({', '.join(sorted(siblings))})", param_hint="--config")
            if key not in allowed:
                raise click.BadParameter(f"{value}: unknown option {k!r}{where}", param_hint="--config")
            out[key] = v
        return out

    top = norm({k: v for k, v in data.items() if k not in siblings}, "", known)
    for name in siblings:
        if name in data and not isinstance(data[name], dict):
            raise click.BadParameter(f"{value}: {name!r} names a subcommand; write its options as a table [{name}]",
                                     param_hint="--config")
    own = {p.name for p in command.params}
    merged = {k: v for k, v in top.items() if k in own}
    section = data.get(command.name)
    if isinstance(section, dict):
        merged.update(norm(section, f" in [{command.name}]", own))
    ctx.default_map = {**(ctx.default_map or {}), **merged}
    return value


# --------------------------------------------------------------------------- shared options

SHARED = ("seed", "device", "threads", "config", "quiet", "verbose", "debug", "overwrite", "no_manifest",
          "json_out", "no_progress")
# A command leaves out shared options (csvkit's override_flags) through ToolCommand: ``--device`` is
# offered only where the command runs torch on a device and honours it (``device=True``), ``--seed``
# only where something is random (``seed=False`` drops it; an explicit seed the run never read is a
# usage error, Run.seed_unread). The others change no number: json_out, quiet, verbose, no_progress
# (presentation), overwrite, no_manifest, config, debug (bookkeeping), threads (speed; in the manifest).


def _shared_params(omit: tuple[str, ...] = ()) -> list[click.Parameter]:
    params = [
        click.Option(["--seed"], type=int, default=0, show_default=True, envvar="ICMLKIT_SEED",
                     help="Random seed; the same seed gives the same output bytes on CPU."),
        click.Option(["--device"], default="auto", show_default=True, envvar="ICMLKIT_DEVICE",
                     help="auto, cpu, cuda or cuda:N (cuda without a GPU: exit 4)."),
        click.Option(["--threads"], type=click.IntRange(min=0), default=DEFAULT_THREADS, show_default=True,
                     envvar=THREADS_ENV, help="CPU threads for torch and BLAS (0: one per core). 1 by default: the "
                     "same bytes whatever the core count (not across counts), no collapse on a busy machine."),
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
    return [p for p in params if p.name not in omit]


def output_option(help_text: str, suffixes: tuple[str, ...] | None = None, stdout: bool = True,
                  required: bool = False, directory: bool = False, flags: tuple[str, ...] = ("-o", "--output"),
                  name: str | None = None, default: str | None = None) -> Callable:
    """``-o/--output PATH``: one suffix check and one wording for every tool.

    ``suffixes``: the extensions accepted (``.gz`` after them is allowed); ``stdout``: ``-`` writes
    to stdout (text formats only); ``directory``: the output is a run folder (never ``-``)."""
    if directory:
        stdout = False

    def check(ctx, param, value):
        if value is None:
            return value
        if str(value) == "-":
            if not stdout:
                what = "a folder" if directory else "a file"
                raise click.BadParameter(f"'-' (stdout) is not possible here: name {what}", ctx, param)
            return value
        if suffixes and suffix(value) not in suffixes:
            raise click.BadParameter(f"{value}: expected a {' or '.join(suffixes)} file", ctx, param)
        return value

    check.suffixes = suffixes  # type: ignore[attr-defined] - read by the registry tests
    dash = " '-' writes to stdout." if stdout else ""
    if suffixes:
        dash = f" ({', '.join(suffixes)})" + dash
    ptype = click.Path(file_okay=not directory, dir_okay=directory, allow_dash=stdout)
    decls = list(flags) + ([name] if name else [])
    return click.option(*decls, type=ptype, required=required, default=default, callback=check,
                        show_default=default is not None, help=help_text + dash)


def option_group(options: list[Callable]) -> Callable:
    """One decorator applying a list of click options in the listed order (options shared by
    several subcommands)."""

    def deco(f: Callable) -> Callable:
        for opt in reversed(options):
            f = opt(f)
        return f

    return deco


class CommaList(click.ParamType):
    """``a,b,c`` -> a tuple of ``item`` values (a list or tuple given by a config file is accepted)."""

    name = "list"

    def __init__(self, item: type = float, length: int | None = None):
        self.item, self.length = item, length

    def convert(self, value, param, ctx):
        if isinstance(value, (list, tuple)):
            parts = list(value)
        else:
            parts = [p for p in str(value).split(",") if p.strip()]
        try:
            out = tuple(self.item(p) for p in parts)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a comma-separated list of {self.item.__name__}", param, ctx)
        if self.length is not None and len(out) != self.length:
            self.fail(f"{value!r}: expected {self.length} comma-separated values", param, ctx)
        return out


def _field_option(f, hint, overrides: dict) -> click.Option:
    """The click option of one dataclass field (see :func:`config_options`)."""
    import dataclasses
    import types
    import typing

    meta = {**dict(f.metadata or {}), **overrides}
    flags = meta.get("flags", (meta.get("flag", "--" + f.name.replace("_", "-")),))
    flags = (flags,) if isinstance(flags, str) else tuple(flags)
    opt = next(x for x in flags if x.startswith("--"))
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        default = f.default_factory()  # type: ignore[misc]
    else:
        default = None
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)  # X | None, not list[X]
    args = [t for t in typing.get_args(hint) if t is not type(None)] if union else [hint]
    base = args[0] if len(args) == 1 else hint
    kw: dict = {"default": default, "help": meta.get("help"), "required": bool(meta.get("required", False))}
    if not kw["help"]:
        raise TypeError(f"config_options: field {f.name!r} has no help text")
    if kw["required"]:
        kw["default"] = default = None  # click lets a default satisfy a required option
    if "choices" in meta:
        kw["type"] = click.Choice(list(meta["choices"]))
    elif "type" in meta:
        kw["type"] = meta["type"]
    elif base is bool:
        return click.Option([f"{opt}/--no-{opt[2:]}", *[x for x in flags if not x.startswith("--")], f.name],
                            default=bool(default), show_default=True, help=kw["help"])
    elif base in (int, float):
        lo, hi = meta.get("min"), meta.get("max")
        if lo is not None or hi is not None:
            rng = click.IntRange if base is int else click.FloatRange
            kw["type"] = rng(min=lo, max=hi, min_open=meta.get("min_open", False))
        else:
            kw["type"] = base
    elif typing.get_origin(base) in (list, tuple) or base in (list, tuple):
        inner = (typing.get_args(base) or (float,))[0]
        kw["type"] = CommaList(inner if inner is not Ellipsis else float)
        kw["default"] = ",".join(map(str, default)) if default else None
    else:
        kw["type"] = str
    return click.Option([*flags, f.name], show_default=default is not None and default != "", **kw)


def config_options(cls, arg: str = "cfg", exclude: tuple[str, ...] = (), only: tuple[str, ...] | None = None,
                   **overrides: dict) -> Callable:
    """Declare a config dataclass's fields as click options once, and hand the command ``cfg``.

    Every field ``name`` becomes ``--name`` (underscores as dashes) with the field's default and
    type (bool -> ``--x/--no-x``; ``X | None`` -> X with default None; a list/tuple -> comma-separated
    values). The field's ``metadata`` (or a keyword ``name={...}`` here) gives ``help`` (required),
    and optionally ``choices``, ``min``/``max``, a click ``type``, ``required``, or other ``flags``
    (``("-s", "--strategy")``). The command
    receives ``arg=cls(**values)``, already ``check()``-ed; the manifest still records every option.
    """
    import dataclasses
    import functools
    import typing

    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls)
              if f.init and f.name not in exclude and (only is None or f.name in only)]
    unknown = set(overrides) - {f.name for f in fields}
    if unknown:
        raise TypeError(f"config_options({cls.__name__}): no fields {sorted(unknown)}")
    options = [_field_option(f, hints[f.name], overrides.get(f.name, {})) for f in fields]
    names = [f.name for f in fields]

    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            values = {n: kwargs.pop(n) for n in names}
            kwargs[arg] = build_config(cls, values)
            return fn(*args, **kwargs)

        wrapper.__click_params__ = list(getattr(fn, "__click_params__", []))  # type: ignore[attr-defined]
        wrapper.__click_params__.extend(reversed(options))  # type: ignore[attr-defined]
        return wrapper

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


def checkpoint_options(what: str = "training") -> Callable:
    """``--checkpoint-every N`` and ``--resume``, declared once for every training command; the
    command gets them as ``checkpoint_every`` and ``resume`` and passes them to
    :meth:`Run.checkpointer`."""
    return option_group([
        click.option("--checkpoint-every", type=click.IntRange(min=0), default=100, show_default=True,
                     help=f"Write OUTPUT.ckpt.pt every N {what} steps (0: never); removed when the run ends."),
        click.option("--resume", is_flag=True, help="Continue from OUTPUT.ckpt.pt (same inputs, options and "
                     "seed) to the same output bytes as an uninterrupted run."),
    ])


def shard_slice(count: int, shard: tuple[int, int]) -> range:
    """The items of ``shard`` = (K, N) among ``count`` items: contiguous, deterministic slices."""
    k, n = shard
    return range((k - 1) * count // n, k * count // n)


def add_demo(group: "ToolGroup", runner: str, doc: str, options: list[Callable] = (), device: bool = False,
             **command_kw) -> click.Command:
    """The tool's ``demo`` subcommand, built once for every tool: ``--outdir`` (default
    ``outputs/demo/<tool>``, built atomically as ``<outdir>.partial``), the given options, and one
    call ``runner(folder, seed=..., [device=...,] **options)`` (``runner`` is ``"module:function"``,
    imported only when the demo runs) whose summary is returned with ``outdir`` added."""

    def demo(run, outdir, **opts):
        from importlib import import_module

        module, _, fn = runner.partition(":")
        call = getattr(import_module(module), fn)
        extra = {"device": run.device} if device else {}
        with run.run_dir(outdir) as folder:
            summary = call(folder, seed=run.seed, **extra, **opts)
        return {**summary, "outdir": outdir}

    demo.__doc__ = doc
    demo = option_group([output_option("Run directory (built as <outdir>.partial).", directory=True,
                                       flags=("--outdir",), name="outdir", default=f"outputs/demo/{group.tool}"),
                         *options])(demo)
    return group.command("demo", device=device, **command_kw)(demo)


# --------------------------------------------------------------------------- the run


class Run:
    """Passed as the first argument to every subcommand function.

    Under ``torchrun`` (``WORLD_SIZE`` > 1) only rank 0 checks, writes and records outputs and the
    manifest; the other ranks compute and take part in the collective operations."""

    def __init__(self, ctx: click.Context, tool: str, shared: dict):
        from icmlkit.lib.core.runtime import env_rank

        self.tool = tool
        self.command = ctx.info_name
        self._seed: int = shared.get("seed", 0)
        # --seed given on the command line and never read: a usage error after the command (see
        # seed_unread). ICMLKIT_SEED is not checked: one exported for a whole cron job applies to every
        # command that draws random numbers and is recorded in each manifest with its source.
        self._seed_explicit = "seed" in shared and ctx.get_parameter_source("seed") == ParameterSource.COMMANDLINE
        self._seed_read = False
        self.device_spec: str | None = shared.get("device")
        self.json: bool = shared["json_out"]
        self.overwrite: bool = shared["overwrite"]
        self.is_main = env_rank() == 0
        self.write_manifest: bool = not shared["no_manifest"] and self.is_main
        self.manifest = Manifest(tool, self.command, _state["argv"])
        self.manifest.seed = self._seed if "seed" in shared else None  # the manifest's copy is no read
        self.stdout_is_data = False
        self._outputs: list[str] = []
        self._dirs: list[str] = []  # run folders (run_dir): rolled back too, but no manifest beside them
        self._device = None
        self._dist = None
        self._check_failure: str | None = None

    @property
    def seed(self) -> int:
        """The seed (``--seed``); reading it marks the seed as used. A command that was given
        ``--seed`` on the command line and finished without reading it fails with a usage
        error (its outputs removed): an accepted flag must change the output (issue 59)."""
        self._seed_read = True
        return self._seed

    def seed_unread(self) -> str | None:
        """The usage error of an explicit seed the command never read, or None."""
        if self._seed_explicit and not self._seed_read:
            return f"--seed has no effect on `{self.tool} {self.command}` (it draws no random numbers)"
        return None

    @property
    def device(self):
        """The torch device (resolved on first use, so commands without torch never import it)."""
        if self.device_spec is None:
            raise RuntimeError(f"{self.tool} {self.command} uses a device: declare it with "
                               "@group.command(device=True)")
        if self._device is None:
            from icmlkit.lib.core.runtime import resolve_device

            self._device = resolve_device(self.device_spec)
            self.manifest.device = str(self._device)
        return self._device

    @property
    def dist(self):
        """This process's :class:`~icmlkit.lib.core.runtime.Dist` (torch.distributed is initialised
        on first use under torchrun: NCCL on a CUDA device, gloo otherwise)."""
        if self._dist is None:
            from icmlkit.lib.core.runtime import distributed

            self._dist = distributed(self.device if self.device_spec is not None else None)
            if self._dist.active:
                self.manifest.distributed = {"world_size": self._dist.world, "backend": self._dist.backend}
        return self._dist

    def input(self, path):
        """Record an input for the manifest; returns ``path``."""
        self.manifest.add_input(path)
        return path

    def builtin_input(self, name: str, package: str) -> str:
        """Record a data set shipped by a package (e.g. ``skfolio:sp500``) with the package's version."""
        self.manifest.add_builtin(name, package)
        return name

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
        if self.is_main:
            check_writable(path, self.overwrite)
            if self.write_manifest:
                check_writable(manifest_path_for(path), self.overwrite)
        return path

    def wrote(self, path) -> None:
        """Mark ``path`` as written by this run (removed again if the run fails later)."""
        if path is not None and not is_stdio(path) and self.is_main:
            self._outputs.append(str(path))
            self.manifest.add_output(path)

    def save(self, path, writer: Callable, *args, **kwargs) -> None:
        """``writer(path, *args, **kwargs)`` then :meth:`wrote` on the main process only (the one
        call for writing an output of a command that may run under torchrun)."""
        if path is not None and self.is_main:
            writer(path, *args, **kwargs)
            self.wrote(path)

    def checkpointer(self, output, every: int, resume: bool):
        """The :class:`~icmlkit.lib.core.checkpoint.Checkpointer` of ``OUTPUT.ckpt.pt`` (recorded as an
        input when resuming)."""
        from icmlkit.lib.core.checkpoint import Checkpointer

        ckpt = Checkpointer(str(output) + ".ckpt.pt", every=every, resume=resume, is_main=self.is_main)
        if resume:
            self.input(ckpt.path)
        return ckpt

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
        if self.is_main:
            self._dirs.append(str(path))  # removed again if the run fails after the folder is built

    def fail_check(self, message: str) -> None:
        """Finish normally (outputs and manifest kept) but exit 3 with ``message``."""
        self._check_failure = message

    # called by ToolCommand ------------------------------------------------------------
    def _rollback(self) -> None:
        import shutil

        for p in [*self._outputs, *self._dirs]:
            path = Path(p)
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def _finish(self, summary: dict | None) -> None:
        status = "check_failed" if self._check_failure else "ok"
        # render first: a summary that cannot be written (a non-finite float in --json) fails the run
        # before the manifest exists, so the rollback leaves no partial output
        text = format_summary(summary, self.json) if summary is not None and self.is_main else None
        if self.write_manifest and self._outputs:
            self.manifest.write(manifest_path_for(self._outputs[0]), status)
        if text is not None:
            stream = sys.stderr if self.stdout_is_data else sys.stdout
            stream.write(text)
            stream.flush()
        if self._check_failure:
            raise CheckFailed(self._check_failure)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, default=str)
    return "null" if v is None else str(v)


def format_summary(summary: dict, as_json: bool) -> str:
    """``--json``: one JSON object; otherwise ``key: value`` lines."""
    if as_json:
        return dumps_json(summary)
    width = max((len(k) for k in summary), default=0)
    return "".join(f"{k:<{width}}  {_fmt(v)}\n" for k, v in summary.items())


class PipeClosed(Exception):
    """The reader of stdout went away (``| head``)."""


def suggest_options(given: str, options: list[str]) -> list[str]:
    """The flags to suggest for an unknown ``given``: those it begins as whole words
    (``--n`` -> ``--n-tasks``), else those it begins (``--over`` -> ``--overwrite``), else click's
    close matches by spelling."""
    from difflib import get_close_matches

    longs = sorted(o for o in options if o.startswith("--"))
    for test in (lambda o: o.startswith(given + "-"), lambda o: o.startswith(given)):
        hits = [o for o in longs if test(o)]
        if hits and given.startswith("--") and len(given) > 2:
            return hits[:3]
    return get_close_matches(given, options)


class ToolCommand(click.Command):
    """A subcommand with the shared options; its function gets a :class:`Run` first."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            if exc.option_name.startswith("--"):
                flags = [o for p in self.get_params(ctx) if isinstance(p, click.Option) for o in p.opts + p.secondary_opts]
                object.__setattr__(exc, "possibilities", suggest_options(exc.option_name, flags) or None)
            raise

    def __init__(self, *args, tool: str, device: bool = False, seed: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.tool = tool
        prefix = "ICMLKIT_" + tool.upper().replace("-", "_") + "_"
        for p in self.params:
            if isinstance(p, click.Option) and p.envvar is None:
                p.envvar = prefix + p.name.upper()
        own = {p.name for p in self.params}
        if "threads" in own:  # a tool's own --threads (e.g. in its config) stands in for the shared one
            p = next(p for p in self.params if p.name == "threads")
            capped = isinstance(p.type, click.IntRange) and p.type.max is not None  # ICMLKIT_THREADS=8 must not break it
            p.envvar = [p.envvar, THREADS_ENV] if isinstance(p.envvar, str) and not capped else p.envvar
        self.omitted = tuple(n for n, keep in (("device", device), ("seed", seed), ("threads", "threads" not in own))
                             if not keep)
        self.params.extend(_shared_params(self.omitted))

    def invoke(self, ctx: click.Context):
        sources = {name: _SOURCES.get(ctx.get_parameter_source(name), "default") for name in ctx.params}
        params = dict(ctx.params)
        threads = resolve_threads(ctx.params.get("threads"))  # the shared --threads or the command's own
        shared = {name: ctx.params.pop(name) for name in SHARED if name in ctx.params and name not in
                  (("threads",) if "threads" in self.omitted else ())}
        _state["debug"] = bool(shared["debug"])
        console.configure(shared["verbose"] - shared["quiet"], progress=not shared["no_progress"])
        run = Run(ctx, self.tool, shared)
        run.manifest.set_params(params, sources)
        run.manifest.threads = threads
        # before any torch work (resolving the device imports torch); other libraries' bars off unless ours show
        with limit_threads(threads), console.library_bars():
            return self._invoke(ctx, run)

    def _invoke(self, ctx: click.Context, run: "Run"):
        if run.device_spec is not None:
            run.device  # noqa: B018 - resolve now: --device cuda without a GPU exits 4 before any work
        try:
            summary = ctx.invoke(self.callback, run, **ctx.params)
            unread = run.seed_unread()
            if unread:  # before the manifest and the summary: rolled back below like any failure
                raise UsageError(unread)
            run._finish(summary)
        except BrokenPipeError:
            # click would turn this into exit 1; the reader closing the pipe is no failure.
            raise PipeClosed() from None
        except CheckFailed:
            raise
        except EOFError as exc:
            # click would report an EOFError as an interruption (exit 130): it is a truncated input
            run._rollback()
            raise IcmlkitError(f"unexpected end of an input file (empty or truncated?): {exc}") from None
        except BaseException:
            run._rollback()
            raise
        return summary


class PipeAwareGroup(click.Group):
    """A click group under which a closed stdout (``| head -1``) ends the run with exit 0 (click alone
    turns the broken pipe into exit 1)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise PipeClosed() from None


class ToolGroup(PipeAwareGroup):
    """The click group of one tool; ``@group.command()`` makes :class:`ToolCommand` subcommands
    (``device=True`` adds ``--device``, ``seed=False`` drops ``--seed``)."""

    def __init__(self, tool: str, **kwargs):
        kwargs.setdefault("context_settings", {"help_option_names": ["-h", "--help"], "max_content_width": 100})
        super().__init__(name=tool, **kwargs)
        self.tool = tool
        self.aliases: dict[str, str] = {}  # old name -> subcommand (see alias())
        click.version_option(package_name="icmlkit", prog_name=tool)(self)

    def command(self, *args, **kwargs):
        kwargs.setdefault("cls", ToolCommand)
        kwargs.setdefault("tool", self.tool)
        kwargs.setdefault("context_settings", {"help_option_names": ["-h", "--help"], "max_content_width": 100})
        return super().command(*args, **kwargs)

    def alias(self, old: str, name: str) -> None:
        """Keep ``old`` as a deprecated name of the subcommand ``name`` (after a rename): it is hidden
        (not in ``--help``, not in :attr:`commands`), prints one warning line on stderr and runs the
        same command, which its manifest records under ``name``."""
        if name not in self.commands or old in self.commands or old in self.aliases:
            raise TypeError(f"{self.tool}: cannot alias {old!r} to {name!r}")
        self.aliases[old] = name

    def get_command(self, ctx: click.Context, cmd_name: str):
        return super().get_command(ctx, self.aliases.get(cmd_name, cmd_name))

    def resolve_command(self, ctx: click.Context, args: list[str]):
        cmd_name, cmd, rest = super().resolve_command(ctx, args)
        if cmd_name in self.aliases:
            new = self.aliases[cmd_name]
            if not ctx.resilient_parsing:  # not while the shell completes a word
                sys.stderr.write(f"Warning: `{self.tool} {cmd_name}` is deprecated; use `{self.tool} {new}` "
                                 "(same arguments and options).\n")
            cmd_name = new
        return cmd_name, cmd, rest


# --------------------------------------------------------------------------- entry point


def make_main(cli: click.Command, prog_name: str) -> Callable[..., None]:
    """The console-script function for ``cli``: runs it and exits with the contract's codes."""

    def main(argv: list[str] | None = None) -> None:
        sys.exit(run_cli(cli, prog_name, argv))

    main.cli = cli  # type: ignore[attr-defined]
    return main


def run_cli(cli: click.Command, prog_name: str, argv: list[str] | None = None) -> int:
    _state["argv"] = list(argv) if argv is not None else sys.argv[1:]
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
    finally:
        from icmlkit.lib.core.runtime import close_distributed

        close_distributed()


def _error(message: str, code: int) -> int:
    if _debug_wanted():
        traceback.print_exc(file=sys.stderr)
    first = " ".join(str(message).split("\n"))
    sys.stderr.write(f"Error: {first}\n")
    return code
