"""Issue 59's fuzz sweep: every subcommand of the 19 tools, fed malformed files.

The five malformed inputs (:data:`fuzzing.SWEEP_KINDS`): garbage bytes, a folder, an empty file, a
truncated JSON document and a .npz archive holding pickled Python objects. For each the contract is
(:func:`fuzzing.contract_problems`): exit 1 or 2, one ``Error:`` line on stderr (click's usage lines
around it for exit 2) that holds no traceback, no ``object at 0x`` repr and no library's own text,
and no output file left behind.

- The tools and their subcommands come from the manifests (``lib/core/tools.py``) and the click
  groups, so a new tool or subcommand is swept without editing this file.
- ``--config FILE`` is a file input of every subcommand (demo and generate included): swept here.
- Every other file input: the malformed-input cases each tool's own test module declares
  (module-level lists of :class:`fuzzing.FuzzCase`, or ``*fuzz*cases()`` functions) give the argv
  and the valid companion files; the sweep runs each with the five kinds (one setup per case).
  :func:`test_every_file_input_is_swept` fails for a file argument or option that no case covers,
  unless :data:`NOT_FILES` says why the value is not (only) a file.

Everything runs in-process (``run_cli``); the slowest tool takes a few seconds.
"""
from __future__ import annotations

import dataclasses
import inspect
from importlib import import_module

import click
import pytest
from fuzzing import SWEEP_KINDS, FuzzCase, check_kinds, contract_problems, run_inprocess, tool_test_modules
from test_steer_concept import tiny_model  # noqa: F401 - the fixture steer-concept's cases need

from icmlkit.lib.core.tools import tools

TOOLS = [t.name for t in tools()]
# placeholders of a tool's cases that its test fills from a fixture (not from the case's setup)
FIXTURES = {"steer-concept": {"model": "tiny_model"}}
BAD = "@@BAD@@"


def _cli(tool: str) -> click.Group:
    return import_module(f"icmlkit.cli.{tool.replace('-', '_')}").cli


def tool_cases(tool: str) -> list[FuzzCase]:
    """The FuzzCases of ``tests/test_<module>.py`` and ``tests/test_<module>_fuzz.py``."""
    cases: list[FuzzCase] = []
    for mod in tool_test_modules(tool):
        for key, value in vars(mod).items():
            if isinstance(value, list) and value and all(isinstance(c, FuzzCase) for c in value):
                cases.extend(value)
            elif (inspect.isfunction(value) and "fuzz" in key and key.endswith("cases")
                  and value.__module__ == mod.__name__ and not inspect.signature(value).parameters):
                cases.extend(value())
    seen, unique = set(), []
    for c in cases:
        key = (c.command, tuple(c.argv), c.suffix)
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique


# ----------------------------------------------------------------------------- --config of every subcommand


@pytest.mark.parametrize("tool", TOOLS)
def test_config_file_of_every_subcommand(tool, tmp_path, capsys):
    problems = []
    for name in sorted(_cli(tool).commands):
        case = FuzzCase(name, [name, "--config", "{bad}"], suffix=".json", label="config")
        problems += check_kinds(tool, case, tmp_path / name, capsys)
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- every file input


@pytest.mark.parametrize("tool", TOOLS)
def test_file_inputs_of_every_subcommand(tool, tmp_path, capsys, request):
    named = {k: str(request.getfixturevalue(f)) for k, f in FIXTURES.get(tool, {}).items()}
    problems = []
    for i, case in enumerate(tool_cases(tool)):
        if "{bad}" in " ".join(case.argv):
            problems += check_kinds(tool, case, tmp_path / f"c{i}", capsys, kinds=sweep_kinds(case), named=named)
    assert not problems, "\n".join(problems)


def sweep_kinds(case: FuzzCase) -> tuple[str, ...]:
    """The five kinds, less a basic one (garbage bytes, a folder, an empty file) that the case's own
    kinds leave out: there it is a valid value (an empty TOML config is an empty table; a folder is
    what a scene or image argument takes)."""
    basic = ("binary", "folder", "empty")
    return tuple(k for k in SWEEP_KINDS if k not in basic or k in case.kinds)


# ----------------------------------------------------------------------------- file inputs the tools' own cases miss


def _setup(ref: str):
    """A setup function of a tool's test module, by ``module:function`` (imported when it runs)."""

    def run(base):
        module, _, fn = ref.partition(":")
        return getattr(import_module(module), fn)(base)

    return run


def _jsonl(base):
    p = base / "ok.jsonl"
    p.write_text('{"a": 1}\n')
    return {"jsonl": p}


_DSA = _setup("test_design_safe_agents:_setup")
_DA = _setup("test_distill_agent:_valid_model")
_TI = _setup("test_trace_injection:_traces")
_FL = _setup("test_finetune_lime:_setup_adapter")
EXTRA: dict[str, list[FuzzCase]] = {
    "attribute-tokens": [FuzzCase("demo", ["demo", "--model", "{bad}", "--outdir", "{out}/d"], label="model")],
    "design-safe-agents": [
        FuzzCase(cmd, [cmd, "{design}", "{env}", "--replay", "{bad}", *out], ".jsonl", ("binary", "folder"),
                 setup=_DSA, label="replay")  # an empty cassette is valid (no recorded exchange)
        for cmd, out in (("attack", ["-o", "{out}/a.jsonl"]), ("eval", ["--episodes", "2"]),
                         ("run", ["-o", "{out}/t.jsonl"]))],
    "detect-synthetic": [FuzzCase("eval", ["eval", "{model}", "--cnndetection", "{bad}", "-o", "{out}/e.csv"],
                                  setup=_setup("test_detect_synthetic_fuzz:_valid"), label="cnndetection")],
    "distill-agent": [
        FuzzCase("bc-init", ["bc-init", "{tasks}", "--teacher", "oracle", "--search", "{bad}", "-o",
                             "{out}/b.jsonl"], ".json", setup=_DA, label="search-file"),
        FuzzCase("eval", ["eval", "{model}", "{tasks}", "--search", "{bad}", "-o", "{out}/e.jsonl"], ".json",
                 setup=_DA, label="search-file"),
        FuzzCase("sft", ["sft", "{tasks}", "--init", "{bad}", "-o", "{out}/m"], setup=_DA, label="init"),
        FuzzCase("rl", ["rl", "{tasks}", "--init", "{bad}", "-o", "{out}/m"], setup=_DA, label="init"),
    ],
    "finetune-lime": [FuzzCase(cmd, [cmd, "{bad}", "{adapter}", "{data}", "-o", "{out}/x" + ext], setup=_FL,
                               label="model") for cmd, ext in (("predict", ".jsonl"), ("routing", ".csv"))],
    "trace-injection": [
        FuzzCase("fit-instruction", ["fit-instruction", "{bad}", "-o", "{out}/i.json"], ".jsonl", label="traces"),
        *[FuzzCase(cmd, [cmd, "{traces}", "--instruction-model", "{bad}", "-o", "{out}/x" + ext], ".json",
                   setup=_TI, label="instruction-model")
          for cmd, ext in (("fit", ".json"), ("detect", ".jsonl"), ("eval", ".csv"))]],
    "train-control": [FuzzCase("train", ["train", "Pendulum-v1", "--action-prior", "lowrank", "--prior-basis",
                                         "{bad}", "--total-steps", "10", "-o", "{out}/run"], ".npz", label="prior-basis")],
}
# A text argument or option the coverage check would take for a file input, and why it is not one
# (or where a case covering the same reader already is).
NOT_FILES = {
    "*": {"shard": "K/N", "api_key_env": "a variable's name", "cassette": "an output (records exchanges)",
          "judge_url": "a URL", "column": "a column name", "layers": "layer indices", "key": "an array name",
          "x_key": "an array name", "y_key": "an array name", "site": "a hook site", "split": "ratios",
          "start": "a date", "end": "a date", "date": "a date", "train_start": "a date", "train_end": "a date",
          "val_end": "a date", "rebalance": "a frequency", "query": "a formula", "query1": "a formula",
          "query2": "a formula", "contrast": "values", "available": "variable names", "oracle": "a forecaster spec",
          "reference": "a strategy name", "model_name": "a name", "system_prompt": "text", "task": "a task id",
          "trace_id": "an id", "size": "W,H", "h_grid": "numbers", "knn_k": "numbers", "concepts": "names",
          "shrinkage": "a number or auto", "backbone": "a model name", "generators": "generator names",
          "prompt": "text", "target": "text", "output_span": "a:b", "reasoning_span": "a:b",
          "gold_spans": "a:b", "teacher": "oracle or an endpoint URL", "judge": "oracle or an endpoint URL",
          "lora_targets": "module names", "prior_pairs": "i:j pairs", "name": "a built-in name",
          "show": "a built-in name", "manifold": "a built-in name", "meta_agent_model": "a model spec",
          "adversary_model": "a model spec", "agent_model": "a model spec", "judge_model": "a model spec",
          "state_dir": "an output folder", "truth": "an output", "labels_out": "an output",
          "html_path": "an output", "examples_out": "an output", "design_out": "an output", "png": "an output",
          "out_dir": "an output folder", "direction": "numbers or a .npy file (lib/core/io.load_npy, tested in "
          "test_core)"},
    ("design-safe-agents", "*"): {"replay": "swept in search; EXTRA sweeps attack, eval and run"},
    ("estimate-fe", "*"): {"inpcrd": "coordinates beside a .prmtop: the AMBER reader of the system cases",
                          "molecule": "a freesolv:ID name (real data, slow)", "obc2_model": "same reader as "
                          "--vacuum-model (swept)", "solvent_model": "same reader as --vacuum-model (swept)",
                          "vacuum_frames": "same reader as --solvent-frames (swept)"},
    ("distill-agent", "*"): {"search_file": "one reader (load_json), swept in bc-init and eval"},
    ("fed-stream", "*"): {"model": "logreg, mlp or module:factory"},
    ("mvi-bench", "*"): {"model": "a model spec"},
    ("steer-concept", "*"): {"model": "a Hugging Face folder or name (swept through run/embed's MODEL)",
                            "args": "MODEL then files: swept in run and embed; complete needs a causal LM"},
    ("train-control", "*"): {"env": "a Gymnasium / dm_control name"},
    ("attribute-tokens", "*"): {"model": "swept in eval, trace, timing and demo"},
    ("finetune-lime", "*"): {},
}


@pytest.mark.parametrize("tool", [t for t in TOOLS if t in EXTRA])
def test_file_inputs_the_tools_own_cases_miss(tool, tmp_path, capsys, request):
    named = {k: str(request.getfixturevalue(f)) for k, f in FIXTURES.get(tool, {}).items()}
    problems = []
    for i, case in enumerate(EXTRA[tool]):
        problems += check_kinds(tool, case, tmp_path / f"x{i}", capsys, kinds=sweep_kinds(case), named=named)
    assert not problems, "\n".join(problems)


def _is_candidate(p: click.Parameter) -> bool:
    """A parameter that may name a file: an argument or option taking text or a path (not a number,
    a choice, a flag or an output built by ``output_option``)."""
    from icmlkit.cli._common import SHARED

    if p.name in SHARED or isinstance(p, click.Option) and (p.is_flag or hasattr(p.callback, "suffixes")):
        return False
    return isinstance(p.type, (click.Path, click.types.StringParamType))


def _slot_of(cmd: click.Command, case: FuzzCase) -> str | None:
    """The parameter of ``cmd`` that receives ``{bad}`` in ``case``'s argv."""
    import re

    args = [re.sub(r"\{[a-z_0-9]+\}", "x", a.replace("{bad}", BAD)) for a in case.argv[1:]]
    if "--config" in args and args[args.index("--config") + 1] == BAD:
        return "config"
    ctx = cmd.make_context(case.command, args, resilient_parsing=True)
    for name, value in ctx.params.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, str) and BAD in v for v in values):
            return name
    return None


@pytest.mark.parametrize("tool", TOOLS)
def test_every_file_input_is_swept(tool):
    """Every argument or text option of every subcommand is covered by a case (the tool's own or
    :data:`EXTRA`) or named in :data:`NOT_FILES` with the reason."""
    group = _cli(tool)
    covered: dict[str, set] = {}
    for case in [*tool_cases(tool), *EXTRA.get(tool, [])]:
        if "{bad}" in " ".join(case.argv):
            covered.setdefault(case.command, set()).add(_slot_of(group.commands[case.command], case))
    missing = []
    for name, cmd in sorted(group.commands.items()):
        allowed = {**NOT_FILES["*"], **NOT_FILES.get((tool, "*"), {}), **NOT_FILES.get((tool, name), {})}
        for p in cmd.params:
            if _is_candidate(p) and p.name not in covered.get(name, set()) and p.name not in allowed:
                missing.append(f"{tool} {name} {p.name}")
    assert not missing, "file inputs no fuzz case covers (add a case, or a NOT_FILES reason):\n" + "\n".join(missing)
