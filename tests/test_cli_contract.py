"""The CLI contract exercised through solve-maxecc: stdout, manifests, atomicity, precedence, exits."""
from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from conftest import exe, run_tool

TOOL = "solve-maxecc"


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_dash_output_writes_only_data_to_stdout(tiny_instance):
    r = run_tool(TOOL, "solve", tiny_instance, "-o", "-", "--no-manifest")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "vertex,colour"
    assert lines[1:] == ["10,1", "20,1", "30,1", "40,3", "50,3"]  # nothing but the optimal CSV rows
    assert "value" in r.stderr  # the summary went to stderr


def test_json_and_dash_output_conflict(tiny_instance):
    r = run_tool(TOOL, "solve", tiny_instance, "-o", "-", "--json")
    assert r.returncode == 2 and r.stdout == ""


def test_manifest_records_inputs_params_and_sources(tiny_instance, tmp_path):
    out = tmp_path / "col.csv"
    cfg = tmp_path / "cfg.toml"
    cfg.write_text('trials = 7\n[solve]\nalgorithm = "paired"\n')
    r = run_tool(TOOL, "solve", tiny_instance, "-o", out, "--config", cfg, "--seed", "3",
                 env={"ICMLKIT_SOLVE_MAXECC_LOCAL_SEARCH": "1"})
    assert r.returncode == 0, r.stderr
    man = json.loads((tmp_path / "col.csv.manifest.json").read_text())
    assert man["tool"] == TOOL and man["command"] == "solve" and man["status"] == "ok"
    assert man["inputs"][0]["sha256"] == sha(tiny_instance)
    assert man["outputs"][0]["sha256"] == sha(out)
    p, s = man["parameters"], man["parameter_sources"]
    assert (p["trials"], s["trials"]) == (7, "config")
    assert (p["algorithm"], s["algorithm"]) == ("paired", "config")
    assert (p["seed"], s["seed"]) == (3, "flag")
    assert (p["local_search"], s["local_search"]) == (True, "env")
    assert s["time_limit"] == "default"
    for key in ("version", "argv", "environment", "started_utc", "ended_utc", "wall_seconds", "git_commit"):
        assert key in man


def test_precedence_flag_over_env_over_config(tiny_instance, tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"trials": 5}))
    out = tmp_path / "c.csv"
    r = run_tool(TOOL, "solve", tiny_instance, "-o", out, "--config", cfg, "--trials", "9", "--json",
                 env={"ICMLKIT_SOLVE_MAXECC_TRIALS": "8"})
    assert json.loads(r.stdout)["trials"] == 9
    r = run_tool(TOOL, "solve", tiny_instance, "--config", cfg, "--json",
                 env={"ICMLKIT_SOLVE_MAXECC_TRIALS": "8"})
    assert json.loads(r.stdout)["trials"] == 8
    r = run_tool(TOOL, "solve", tiny_instance, "--config", cfg, "--json")
    assert json.loads(r.stdout)["trials"] == 5


def test_config_typo_is_a_usage_error(tiny_instance, tmp_path):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text("trails = 5\n")
    r = run_tool(TOOL, "solve", tiny_instance, "--config", cfg)
    assert r.returncode == 2 and "trails" in r.stderr


def test_same_seed_same_bytes(tmp_path):
    inst = tmp_path / "p.txt"
    assert run_tool(TOOL, "generate", "--n", 120, "--k", 4, "--r", 3, "-o", inst, "--seed", 5).returncode == 0
    outs = []
    for i in range(2):
        out = tmp_path / f"c{i}.csv"
        r = run_tool(TOOL, "solve", inst, "-a", "scaled", "-t", 50, "--seed", 11, "-o", out)
        assert r.returncode == 0, r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    again = tmp_path / "p2.txt"
    run_tool(TOOL, "generate", "--n", 120, "--k", 4, "--r", 3, "-o", again, "--seed", 5)
    assert again.read_bytes() == inst.read_bytes()


def test_failing_run_leaves_no_partial_output(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("1,2 1\n3,x 2\n")
    out = tmp_path / "col.csv"
    r = run_tool(TOOL, "solve", bad, "-o", out)
    assert r.returncode == 1
    assert r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1
    assert "bad.txt" in r.stderr and "line 2" in r.stderr
    assert list(tmp_path.iterdir()) == [bad]


def test_outputs_are_not_clobbered_without_overwrite(tiny_instance, tmp_path):
    out = tmp_path / "col.csv"
    out.write_text("keep me")
    r = run_tool(TOOL, "solve", tiny_instance, "-o", out)
    assert r.returncode == 1 and "--overwrite" in r.stderr and out.read_text() == "keep me"
    r = run_tool(TOOL, "solve", tiny_instance, "-o", out, "--overwrite")
    assert r.returncode == 0 and out.read_text().startswith("vertex,colour")


def test_head_closes_the_pipe_without_traceback(tmp_path):
    inst = tmp_path / "p.txt"
    run_tool(TOOL, "generate", "--n", 20000, "--m", 20000, "--k", 3, "--r", 2, "-o", inst)
    cmd = f"{exe(TOOL)} solve {inst} -a majority -o - --no-progress | head -1"
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=300)
    assert r.stdout == "vertex,colour\n"
    assert "Traceback" not in r.stderr and "Error" not in r.stderr
    assert r.returncode == 0


def test_exit_codes(tiny_instance, tmp_path):
    assert run_tool(TOOL, "solve", tmp_path / "missing.txt").returncode == 1
    r = run_tool(TOOL, "solve", tiny_instance, "--device", "cuda")
    import torch

    if not torch.cuda.is_available():
        assert r.returncode == 4 and "cuda" in r.stderr.lower()
    r = run_tool(TOOL, "solve", tiny_instance, "-a", "majority", "--fail-under", "1.01", "-o", tmp_path / "c.csv")
    assert r.returncode == 3 and (tmp_path / "c.csv").exists()
    man = json.loads((tmp_path / "c.csv.manifest.json").read_text())
    assert man["status"] == "check_failed"
    r = run_tool(TOOL, "solve", tiny_instance, "--trials", "0")
    assert r.returncode == 2


def test_debug_shows_the_traceback(tmp_path):
    bad = tmp_path / "empty.txt"
    bad.write_text("")
    assert "Traceback" not in run_tool(TOOL, "lp", bad).stderr
    assert "Traceback" in run_tool(TOOL, "lp", bad, "--debug").stderr
    assert "Traceback" in run_tool(TOOL, "lp", bad, env={"ICMLKIT_DEBUG": "1"}).stderr


def test_stdin_instance_and_pipeline(tiny_instance, tmp_path):
    text = tiny_instance.read_text()
    r = run_tool(TOOL, "solve", "-", "-o", "-", "--no-manifest", input=text)
    assert r.returncode == 0, r.stderr
    col = tmp_path / "c.csv"
    col.write_text(r.stdout)
    ev = run_tool(TOOL, "eval", tiny_instance, col, "--json")
    assert json.loads(ev.stdout) == {"value": 4.0, "unsatisfied_weight": 1.0, "satisfied": 4, "m": 5, "uncoloured": 0}


def test_a_renamed_subcommand_keeps_its_old_name_as_a_hidden_deprecated_alias(tiny_instance, tmp_path):
    col = tmp_path / "c.csv"
    col.write_text("vertex,colour\n10,1\n20,1\n30,1\n40,3\n50,3\n")
    new = run_tool(TOOL, "eval", tiny_instance, col, "--json")
    old = run_tool(TOOL, "evaluate", tiny_instance, col, "--json")
    assert old.returncode == new.returncode == 0 and old.stdout == new.stdout and new.stderr == ""
    assert old.stderr == "Warning: `solve-maxecc evaluate` is deprecated; use `solve-maxecc eval` (same arguments " \
                         "and options).\n"
    helped = run_tool(TOOL, "--help").stdout
    assert " eval " in helped and "evaluate" not in helped
    r = run_tool(TOOL, "evaluate", tiny_instance, col, "-o", tmp_path / "x.csv")  # eval has no -o: usage error
    assert r.returncode == 2 and "Usage: solve-maxecc eval " in r.stderr


@pytest.mark.parametrize("shard,count,expected", [((1, 1), 5, [0, 1, 2, 3, 4]), ((2, 3), 7, [2, 3]),
                                                   ((3, 3), 7, [4, 5, 6])])
def test_shard_slices_partition(shard, count, expected):
    from icmlkit.cli._common import shard_slice

    assert list(shard_slice(count, shard)) == expected
    n = shard[1]
    assert sorted(i for k in range(1, n + 1) for i in shard_slice(count, (k, n))) == list(range(count))


def test_missing_or_broken_optional_module_is_an_environment_problem(tmp_path, monkeypatch):
    """A module that is absent, or installed but failing to import (e.g. a torchvision wheel built for
    another torch, which raises RuntimeError), becomes exit-4 EnvironmentProblem with a hint."""
    from icmlkit.lib.core.errors import EnvironmentProblem, require_module

    (tmp_path / "icmlkit_broken_mod.py").write_text("raise RuntimeError('operator x::nms does not exist')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EnvironmentProblem, match="fails to import .*RuntimeError: operator x::nms"):
        require_module("icmlkit_broken_mod", "detect-synthetic")
    with pytest.raises(EnvironmentProblem, match=r"pip install 'icmlkit\[detect-synthetic\]'"):
        require_module("icmlkit_no_such_module_here", "detect-synthetic")
