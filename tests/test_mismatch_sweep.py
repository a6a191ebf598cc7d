"""Issue 59: no silent wrong answers from mismatched inputs, as a sweep over every tool.

A command that reads a model or another artefact made under a recorded setting (a system, an
environment, a grid, a layer, a width, the columns or tickers it was fitted on, ...) together with a
separate input must refuse an input made under another setting before any number is printed: exit 1
or 2, one ``Error:`` line naming the file and both settings, nothing on stdout, no output file
(:func:`fuzzing.check_mismatch`).

- The cases are declared beside each tool's tests: module-level lists of
  :class:`fuzzing.MismatchCase` in ``tests/test_<module>.py`` (or ``test_<module>_fuzz.py``) (each with a cheap ``build`` that makes a
  tiny model under setting A and the input under setting B).
- :func:`test_every_tool_declares_its_mismatches` fails for a tool with no case, unless :data:`NO_PAIRS`
  says why it has no such pair.

Everything runs in-process (``run_cli``); the whole sweep takes well under a minute.
"""
from __future__ import annotations


import pytest
from fuzzing import MismatchCase, check_mismatch, tool_test_modules

from icmlkit.lib.core.tools import tools

TOOLS = [t.name for t in tools()]
# tools whose commands read no artefact made under a setting that a separate input could contradict
NO_PAIRS = {
    "attribute-tokens": "rows are text: generate writes character spans (any tokenizer reads them); a row's token "
                        "spans record no tokenizer, so another model's token spans cannot be told apart (not covered)",
    "train-3dgs": "a .ply is the standard 3DGS format and records no scene, background or resolution (eval of "
                  "splats on any scene is a measurement, if a poor one; --background is not recorded: not covered)",
    "fed-stream": "every command reads one stream; no model file is read back",
    "mvi-bench": "score reads the records run wrote (they carry their own pair ids); no model file",
    "solve-decentralized": "solve, launch and reference read one problem spec; no solution is read back",
}


def mismatch_cases(tool: str) -> list[MismatchCase]:
    """The MismatchCases of ``tests/test_<module>.py`` and ``tests/test_<module>_fuzz.py``."""
    return [c for mod in tool_test_modules(tool) for value in vars(mod).values()
            if isinstance(value, list) and value and all(isinstance(c, MismatchCase) for c in value) for c in value]


def test_every_tool_declares_its_mismatches():
    missing = [t for t in TOOLS if not mismatch_cases(t) and t not in NO_PAIRS]
    assert not missing, f"tools with no MismatchCase and no NO_PAIRS reason: {missing}"
    assert not [t for t in NO_PAIRS if mismatch_cases(t)], "a tool with cases is listed in NO_PAIRS"


@pytest.mark.parametrize("tool", [t for t in TOOLS if t not in NO_PAIRS])
def test_mismatched_inputs_are_refused(tool, tmp_path, capsys):
    problems = []
    for i, case in enumerate(mismatch_cases(tool)):
        problems += check_mismatch(tool, case, tmp_path / f"m{i}", capsys)
    assert not problems, "\n".join(problems)
