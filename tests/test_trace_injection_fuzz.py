"""trace-injection guard-suite with malformed files in its input slots (issue 14's fuzz check): the
gate's model, the sink table and the config file. They are read before any suite runs."""
from __future__ import annotations

import pytest
from fuzzing import DEFAULT_KINDS, FuzzCase, check_malformed

TOOL = "trace-injection"
_JS = DEFAULT_KINDS + ("truncated_json",)
_CFG = ("missing", "binary", "folder", "truncated_json")  # an empty TOML file is a valid (empty) config
_OUT = ["--limit", "1", "-o", "{out}/g.jsonl"]

GUARD_SUITE_CASES = [
    FuzzCase("guard-suite", ["guard-suite", "--model", "{bad}", *_OUT], suffix=".json", kinds=_JS, label="model"),
    FuzzCase("guard-suite", ["guard-suite", "--sinks", "{bad}", *_OUT], suffix=".json", kinds=_JS, label="sinks-json"),
    FuzzCase("guard-suite", ["guard-suite", "--sinks", "{bad}", *_OUT], suffix=".toml", kinds=_CFG, label="sinks-toml"),
    FuzzCase("guard-suite", ["guard-suite", "--config", "{bad}", *_OUT], suffix=".toml", kinds=_CFG,
             label="config-toml"),
]


@pytest.mark.parametrize("case", GUARD_SUITE_CASES, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed(TOOL, case, tmp_path, capsys)
