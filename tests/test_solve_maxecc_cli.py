"""solve-maxecc through its executable: subcommands, formats, errors, the demo."""
from __future__ import annotations

import json

import pytest

from conftest import run_tool, shared_maxecc

TOOL = "solve-maxecc"


def js(r):
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_cli_choices_match_the_library():
    from icmlkit.cli import solve_maxecc as cli
    from icmlkit.lib.maxecc import ALGORITHMS, METHODS

    assert tuple(cli.ALGORITHMS) == ALGORITHMS and tuple(cli.LP_METHODS) == METHODS


def test_lp_saved_and_reused_by_solve(tmp_path):
    inst, lpf = tmp_path / "g.txt", tmp_path / "g.lp.npz"
    js(run_tool(TOOL, "generate", "--kind", "rainbow-cycle", "--length", 7, "--k", 7, "--r", 3, "-o", inst, "--json"))
    lp = js(run_tool(TOOL, "lp", inst, "-o", lpf, "--json"))
    assert set(lp) >= {"n", "m", "k", "r", "lp_value", "seconds"} and lp["lp_value"] == pytest.approx(3.5)
    s = js(run_tool(TOOL, "solve", inst, "--lp", lpf, "-a", "scaled", "-t", 200, "--ilp", "--json"))
    for key in ("n", "m", "k", "r", "lp_value", "value", "ratio_to_lp", "ilp_value", "ilp_gap", "algorithm",
                "trials", "seconds_lp", "seconds_rounding", "seconds_total"):
        assert key in s
    assert s["seconds_lp"] == 0 and s["lp_value"] == pytest.approx(3.5)
    assert s["value"] <= s["ilp_value"] <= s["lp_value"] and s["ilp_gap"] == pytest.approx(0, abs=1e-9)
    other = tmp_path / "h.txt"
    assert run_tool(TOOL, "generate", "--kind", "star", "--k", 4, "-o", other).returncode == 0
    bad = run_tool(TOOL, "solve", other, "--lp", lpf)
    assert bad.returncode in (1, 2) and bad.stderr.startswith("Error:")


def test_derandomized_paired_meets_its_factor(tmp_path):
    inst = tmp_path / "g.txt"
    run_tool(TOOL, "generate", "--kind", "rainbow-cycle", "--length", 9, "--k", 5, "--r", 3, "-o", inst)
    s = js(run_tool(TOOL, "solve", inst, "-a", "paired", "--derandomize", "--json"))
    assert s["ratio_to_lp"] >= 1 / 3
    assert run_tool(TOOL, "solve", inst, "-a", "scaled", "--derandomize").returncode == 2


def test_weighted_jsonl_flows_through(tmp_path):
    inst = tmp_path / "w.jsonl"
    inst.write_text('{"nodes": ["a", "b"], "colour": "red", "weight": 5}\n'
                    '{"nodes": ["b", "c"], "colour": "blue", "weight": 2}\n'
                    '{"nodes": ["c"], "colour": "blue"}\n')
    out = tmp_path / "c.csv"
    s = js(run_tool(TOOL, "solve", inst, "-o", out, "--json"))
    assert s["value"] == 6.0 and s["lp_value"] == pytest.approx(6.0)
    assert out.read_text().splitlines() == ["vertex,colour", "a,red", "b,red", "c,blue"]
    assert js(run_tool(TOOL, "evaluate", inst, out, "--json"))["value"] == 6.0


@pytest.mark.parametrize("text,where", [("1,2 1\n3,4\n", "line 2"), ("1,2 1\n\n5,x 2\n", "line 3"),
                                        ("", "no edges"), ("1,2 1\n3,4 2 heavy\n", "line 2")])
def test_bad_instances_exit_1_with_the_line(tmp_path, text, where):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    r = run_tool(TOOL, "lp", p)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("Error: ") and "bad.txt" in r.stderr and where in r.stderr, r.stderr


def test_demo_writes_a_complete_run_folder(tmp_path):
    out = tmp_path / "demo"
    s = js(run_tool(TOOL, "demo", "--outdir", out, "--trials", 100, "--json",
                    env={"ICMLKIT_SHARED_DATA": str(tmp_path / "none")}))
    assert "headline" in s and s["outdir"] == str(out)
    names = {p.name for p in out.iterdir()}
    assert {"planted.txt", "planted.colouring.csv", "summary.json", "manifest.json"} <= names
    assert not (tmp_path / "demo.partial").exists()
    man = json.loads((out / "manifest.json").read_text())
    assert {o["path"] for o in man["outputs"]} >= {str(out / "summary.json")}
    gadget = s["instances"][1]
    for alg in ("threshold-order", "paired", "scaled"):
        assert gadget[f"{alg}_mean_ratio"] >= gadget[f"{alg}_factor"]


@pytest.mark.slow
@pytest.mark.skipif(shared_maxecc() is None, reason="../shared/data/maxecc is absent")
def test_brain_through_the_cli():
    s = js(run_tool(TOOL, "solve", shared_maxecc() / "Brain" / "original_data", "-a", "paired", "--json"))
    assert s["value"] == 13626 and s["lp_value"] == pytest.approx(13626)
