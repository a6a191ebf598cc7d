"""The malformed-input check every subcommand must pass (issue 14's fuzz check), in one place.

A tool's test file lists its cases; each case is a subcommand's argv with one input slot ``{bad}``
and the valid files it needs (made in ``tmp_path``). :func:`check_malformed` fills the slot with each
kind of broken file (missing, empty, binary, a folder, truncated JSON / JSON Lines, a CSV with the
wrong columns, NaN values, garbage .npz / .pt / .png / .safetensors / .ply) and asserts what the
contract asks: exit 1 or 2, one ``Error:`` line (or click's usage message) on stderr with no
traceback and no "rerun with --debug" fallback (an exception the library did not anticipate), and
no output file left behind.

The commands run in-process through the tool's ``run_cli`` (a subprocess per case would cost two
seconds of imports each).

Usage in ``tests/test_<tool>.py``::

    from fuzzing import FuzzCase, check_malformed, KINDS
    CASES = [FuzzCase("solve", ["solve", "{bad}", "-o", "{out}/c.csv"], suffix=".txt"), ...]

    @pytest.mark.parametrize("case", CASES, ids=str)
    def test_malformed_inputs(case, tmp_path, capsys):
        check_malformed("solve-maxecc", case, tmp_path, capsys)
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Callable

# every kind of broken file; each is (name, writer(path) -> None); "missing" writes nothing
_GARBAGE = bytes(range(256)) * 4


def _pickled_npz(path: Path) -> None:
    """A real .npz archive whose array holds pickled Python objects (numpy's object dtype)."""
    import numpy as np

    with open(path, "wb") as fh:
        np.savez(fh, x=np.array([{"a": 1}, None], dtype=object), y=np.arange(3.0))


def _truncate(text: str) -> str:
    return text[: max(1, len(text) // 2)]


KINDS: dict[str, Callable[[Path], None]] = {
    "missing": lambda p: None,
    "empty": lambda p: p.write_bytes(b""),
    "binary": lambda p: p.write_bytes(b"\x00\xff\xfe" + _GARBAGE),
    "folder": lambda p: p.mkdir(),
    "truncated_json": lambda p: p.write_text('{"nodes": [1, 2], "colour": '),
    "truncated_jsonl": lambda p: p.write_text('{"a": 1}\n{"a": 2, "b": [1, 2'),
    "wrong_csv": lambda p: p.write_text("foo,bar\nx,y\n1\n"),
    "nan_csv": lambda p: p.write_text("a,b,c\nnan,1,2\n1,nan,inf\n"),
    "garbage_npz": lambda p: p.write_bytes(b"PK\x03\x04" + _GARBAGE),
    "garbage_pt": lambda p: p.write_bytes(b"PK\x03\x04\x14\x00" + _GARBAGE),
    "garbage_png": lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + _GARBAGE),
    "pickled_npz": lambda p: _pickled_npz(p),
}
# the issue-59 sweep (tests/test_fuzz_sweep.py): every file input gets these five
SWEEP_KINDS = ("binary", "folder", "empty", "truncated_json", "pickled_npz")
# text that is a library's, not ours: an error line holding any of these leaks internals
LEAKS = ("Traceback", "object at 0x", "rerun with --debug", "Weights only load failed", "weights_only",
         "pop from empty list", "allow_pickle", "pickled (object) data", "PytorchStreamReader", "Unpickler",
         "File \"", "zipfile", "BadZipFile")
MAX_ERROR_CHARS = 400  # a longer one-line message is most likely a library's joined text
DEFAULT_KINDS = ("missing", "empty", "binary", "folder")


@dataclass
class FuzzCase:
    """One input slot of one subcommand.

    ``argv``: the subcommand's arguments; ``{bad}`` is the broken input, ``{out}`` a fresh output
    folder (every file the command would write must go under it), ``{name}`` any valid file made by
    ``setup``. ``suffix``: the broken file's extension. ``kinds``: the kinds of breakage to try
    (the four basic ones plus those that fit the format). ``setup(tmp_path) -> {name: path}`` makes
    the valid inputs the command needs besides the broken one."""

    command: str
    argv: list[str]
    suffix: str = ""
    kinds: tuple[str, ...] = DEFAULT_KINDS
    setup: Callable[[Path], dict] | None = None
    label: str = ""
    extra: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.command}:{self.label or self.suffix or 'input'}"


def _tool_cli(tool: str):
    module = import_module(f"icmlkit.cli.{tool.replace('-', '_')}")
    return module.cli


def tool_test_modules(tool: str) -> list:
    """The imported test modules of ``tool``: ``tests/test_<module>.py`` and ``tests/test_<module>_fuzz.py``
    (where they exist), in which the sweeps look for a tool's declared cases."""
    module = tool.replace("-", "_")
    mods = []
    for name in (f"test_{module}", f"test_{module}_fuzz"):
        try:
            mods.append(import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    return mods


def run_inprocess(tool: str, argv: list[str], capsys) -> tuple[int, str, str]:
    """``tool argv`` through the contract's ``run_cli``; returns (exit code, stdout, stderr)."""
    from icmlkit.cli._common import run_cli

    os.environ["ICMLKIT_NO_PROGRESS"] = "1"
    capsys.readouterr()
    code = run_cli(_tool_cli(tool), tool, [*argv, "--no-progress"])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def check_malformed(tool: str, case: FuzzCase, tmp_path: Path, capsys) -> None:
    """Run ``case`` with every kind of broken input and assert the contract for each."""
    problems = []
    for kind in case.kinds:
        base = tmp_path / kind
        base.mkdir()
        named = {k: str(v) for k, v in (case.setup(base) if case.setup else {}).items()}
        out = base / "out"
        out.mkdir()
        bad = base / f"bad{case.suffix}"
        KINDS[kind](bad)
        argv = [a.format(bad=bad, out=out, **named) for a in case.argv]
        code, stdout, stderr = run_inprocess(tool, argv, capsys)
        left = sorted(p.name for p in out.iterdir())
        why = []
        if code not in (1, 2):
            why.append(f"exit {code}")
        if "Traceback" in stderr or "rerun with --debug" in stderr:
            why.append("unanticipated exception")
        if code == 1 and not stderr.startswith("Error:"):
            why.append("no 'Error:' line")
        if left:
            why.append(f"left outputs {left}")
        if why:
            problems.append(f"{kind}: {', '.join(why)}: {stderr.strip()[:300]!r}")
    assert not problems, f"{tool} {' '.join(case.argv)}:\n" + "\n".join(problems)


def contract_problems(code: int, stderr: str, left: list[str]) -> list[str]:
    """What breaks the issue-59 contract for a malformed input: exit 1 or 2; one ``Error:`` line (an
    exit-2 usage error may carry click's ``Usage:`` / ``Try ...`` lines around it) with no traceback,
    no ``object at 0x`` repr, no library's own text (:data:`LEAKS`, :data:`MAX_ERROR_CHARS`); no output."""
    why = []
    if code not in (1, 2):
        why.append(f"exit {code}")
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("Error:")]
    usage: list[str] = []  # click's usage block (it may wrap): "Usage: ..." up to "Try '... --help'"
    tries = [i for i, ln in enumerate(lines) if ln.startswith("Try '")]
    if code == 2 and lines and lines[0].startswith("Usage:") and tries:
        usage = lines[: tries[0] + 1]
    if len(errors) != 1 or len(lines) != len(errors) + len(usage):
        why.append(f"{len(lines)} stderr lines, {len(errors)} 'Error:'")
    leaks = [w for w in LEAKS if w in stderr]
    if leaks:
        why.append(f"leaks {leaks}")
    if any(len(ln) > MAX_ERROR_CHARS for ln in errors):
        why.append(f"an error line over {MAX_ERROR_CHARS} characters")
    if left:
        why.append(f"left outputs {left}")
    return why


def check_kinds(tool: str, case: FuzzCase, tmp_path: Path, capsys, kinds=SWEEP_KINDS,
                named: dict | None = None) -> list[str]:
    """Run ``case`` once per kind in ``kinds`` (one ``setup`` shared by all: the sweep's budget) with
    ``-q`` and return the :func:`contract_problems` of each, as lines."""
    problems = []
    shared = "/" not in case.suffix  # a file inside a folder the setup makes: one setup per kind
    files = {}
    if shared:
        valid = tmp_path / "valid"
        valid.mkdir(parents=True, exist_ok=True)
        files = {k: str(v) for k, v in (case.setup(valid) if case.setup else {}).items()}
    for kind in kinds:
        base = tmp_path / kind
        base.mkdir(parents=True)
        if not shared:
            files = {k: str(v) for k, v in (case.setup(base) if case.setup else {}).items()}
        files = {**(named or {}), **files}
        out = base / "out"
        out.mkdir()
        bad = base / f"bad{case.suffix}"
        bad.parent.mkdir(parents=True, exist_ok=True)
        KINDS[kind](bad)
        argv = [a.format(bad=bad, out=out, **files) for a in case.argv]
        code, _, stderr = run_inprocess(tool, [*argv, "-q"], capsys)
        left = sorted(p.name for p in out.iterdir())
        why = contract_problems(code, stderr, left)
        if why:
            problems.append(f"{tool} {' '.join(case.argv)} [{kind}]: {', '.join(why)}: {stderr.strip()[:300]!r}")
    return problems


# ----------------------------------------------------------------------------- issue 59: mismatched inputs


@dataclass
class MismatchCase:
    """A subcommand given a model (or another artefact) made under one recorded setting and an input
    made under another (system, environment, grid, layer, width, columns, ...): it must be refused
    before any number is printed (tests/test_mismatch_sweep.py).

    ``build(base) -> {name: path}`` writes the model (setting A) and the input (setting B) under
    ``base``; ``argv`` names them as ``{name}`` (``{out}``: an output folder that must stay empty).
    ``expect``: what the one error line must hold: the file's name and both settings."""

    command: str
    argv: list[str]
    build: Callable[[Path], dict]
    expect: tuple[str, ...]
    label: str = ""

    def __str__(self) -> str:
        return f"{self.command}:{self.label or 'mismatch'}"


def check_mismatch(tool: str, case: MismatchCase, tmp_path: Path, capsys) -> list[str]:
    """Run ``case`` and return what breaks the contract: exit 1 or 2, one ``Error:`` line that names
    everything in ``case.expect`` (and no library's text), nothing on stdout, no output file."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    files = {k: str(v) for k, v in case.build(tmp_path).items()}
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(out=out, **files) for a in case.argv]
    code, stdout, stderr = run_inprocess(tool, [*argv, "-q"], capsys)
    left = sorted(p.name for p in out.iterdir())
    why = contract_problems(code, stderr, left)
    if stdout.strip():
        why.append(f"printed {stdout.strip()[:80]!r}")
    line = next((ln for ln in stderr.splitlines() if ln.startswith("Error:")), "")
    missing = [e for e in case.expect if e not in line]
    if missing:
        why.append(f"the error line does not name {missing}")
    return [f"{tool} {case} {' '.join(case.argv)}: {', '.join(why)}: {stderr.strip()[:300]!r}"] if why else []
