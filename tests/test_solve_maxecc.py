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
    from icmlkit.lib.solve_maxecc import ALGORITHMS, METHODS

    opts = {p.name: p for p in cli.cli.commands["solve"].params}  # one source: lib/solve_maxecc/config.py
    assert tuple(opts["algorithm"].type.choices) == ALGORITHMS and tuple(opts["lp_method"].type.choices) == METHODS


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
    assert s["value"] >= s["heuristic_value"] and s["exact_winner"] in ("mip", "heuristic") and s["ilp_optimal"]
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
    assert js(run_tool(TOOL, "eval", inst, out, "--json"))["value"] == 6.0


def test_generate_labels_and_evaluate_both_objectives(tmp_path):
    inst, truth, col = tmp_path / "p.txt", tmp_path / "truth.csv", tmp_path / "c.csv"
    js(run_tool(TOOL, "generate", "--n", 300, "--noise", 0.3, "-o", inst, "--labels", truth, "--json"))
    s = js(run_tool(TOOL, "solve", inst, "-a", "best", "-t", 50, "-o", col, "--json"))
    assert set(s["values"]) >= {"veldt-threshold", "combinatorial"} and s["min_lower_bound"] > 0
    e = js(run_tool(TOOL, "eval", inst, col, "--labels", truth, "--json"))
    assert e["value"] == pytest.approx(s["value"]) and e["unsatisfied_weight"] == pytest.approx(s["unsatisfied_weight"])
    assert 0.3 < e["ari"] <= 1 and 0.3 < e["nmi"] <= 1
    # a label file that misses a vertex of the instance is refused, naming the file
    truth.write_text("\n".join(truth.read_text().splitlines()[:-1]) + "\n")
    r = run_tool(TOOL, "eval", inst, col, "--labels", truth)
    assert r.returncode == 1 and "truth.csv" in r.stderr and "no label" in r.stderr
    assert run_tool(TOOL, "generate", "--kind", "star", "-o", tmp_path / "s.txt", "--labels", truth).returncode == 2
    comb = js(run_tool(TOOL, "solve", inst, "-a", "combinatorial", "--json"))
    assert comb["seconds_lp"] == 0 and comb["lp_value"] is None and comb["ratio_to_lp_min"] is None


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


# --------------------------------------------------------------------------- malformed inputs

from fuzzing import DEFAULT_KINDS, FuzzCase, MismatchCase, check_malformed  # noqa: E402

TEXT_KINDS = DEFAULT_KINDS + ("wrong_csv", "nan_csv")
JSON_KINDS = DEFAULT_KINDS + ("truncated_json", "truncated_jsonl")


def _instance(base):
    p = base / "inst.txt"
    p.write_text("10,20 1\n20,30 1\n30,10 1\n10,40 2\n40,50 3\n")
    return {"inst": p}


def _instance_and_colouring(base):
    files = _instance(base)
    col = base / "col.csv"
    col.write_text("vertex,colour\n10,1\n20,1\n30,1\n40,3\n50,3\n")
    return {**files, "col": col}


def _brain_folder(base):
    """A Brain folder whose first .mat file is valid and whose second is the broken input."""
    import numpy as np
    import scipy.io

    folder = base / "bad"
    folder.mkdir()
    scipy.io.savemat(str(folder / "a.mat"), {"A": np.ones((3, 3))})
    return {"brain": folder}


def _lp_case(suffix, kinds):
    return FuzzCase("lp", ["lp", "{bad}", "-o", "{out}/l.npz"], suffix=suffix, kinds=kinds)


def _lp_of_another_instance(base):
    """The LP of :func:`_instance` and two other instances: one with another colour on an edge (other
    (vertex, colour) pairs), one with the same pairs and another weight."""
    from icmlkit.cli._common import run_cli
    from icmlkit.cli.solve_maxecc import cli

    files = _instance(base)
    assert run_cli(cli, TOOL, ["lp", str(files["inst"]), "-o", str(base / "lp.npz"), "-q", "--no-manifest"]) == 0
    text = files["inst"].read_text()
    (base / "recoloured.txt").write_text(text.replace("40,50 3", "40,50 2"))
    (base / "reweighted.txt").write_text(text.replace("10,20 1", "10,20 1 5"))
    return {"lp": base / "lp.npz", "recoloured": base / "recoloured.txt", "reweighted": base / "reweighted.txt"}


# issue 59 (tests/test_mismatch_sweep.py): an LP solution of another instance is refused before any rounding
MISMATCH = [
    MismatchCase("solve", ["solve", "{recoloured}", "--lp", "{lp}", "-o", "{out}/c.csv", "-t", "5"],
                 _lp_of_another_instance, ("lp.npz", "do not match the instance"), "pairs"),
    MismatchCase("solve", ["solve", "{reweighted}", "--lp", "{lp}", "-o", "{out}/c.csv", "-t", "5"],
                 _lp_of_another_instance, ("lp.npz",), "weights"),
]

FUZZ = [
    _lp_case(".txt", TEXT_KINDS),
    _lp_case(".jsonl", JSON_KINDS),
    _lp_case(".json", JSON_KINDS),
    FuzzCase("lp", ["lp", "{brain}", "-o", "{out}/l.npz"], suffix="/b.mat", setup=_brain_folder,
             kinds=DEFAULT_KINDS + ("garbage_npz",), label="brain-folder"),
    FuzzCase("solve", ["solve", "{bad}", "-o", "{out}/c.csv", "-t", "5"], suffix=".txt", kinds=TEXT_KINDS),
    FuzzCase("solve", ["solve", "{bad}", "-o", "{out}/c.csv", "-t", "5"], suffix=".jsonl", kinds=JSON_KINDS),
    FuzzCase("solve", ["solve", "{inst}", "--lp", "{bad}", "-o", "{out}/c.csv", "-t", "5"], suffix=".npz",
             setup=_instance, kinds=DEFAULT_KINDS + ("garbage_npz", "garbage_pt"), label="--lp"),
    FuzzCase("eval", ["eval", "{bad}", "{inst}"], suffix=".txt", setup=_instance, kinds=TEXT_KINDS),
    FuzzCase("eval", ["eval", "{inst}", "{bad}"], suffix=".csv", setup=_instance,
             kinds=TEXT_KINDS + ("truncated_json",), label="colouring"),
    FuzzCase("eval", ["eval", "{inst}", "{col}", "--labels", "{bad}"], suffix=".csv",
             setup=_instance_and_colouring, kinds=TEXT_KINDS, label="--labels"),
]


@pytest.mark.parametrize("case", FUZZ, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed(TOOL, case, tmp_path, capsys)


def test_lp_output_suffix_and_demo_options_are_usage_errors(tmp_path, tiny_instance):
    r = run_tool(TOOL, "lp", tiny_instance, "-o", tmp_path / "x.csv")
    assert r.returncode == 2 and "-o" in r.stderr and ".npz" in r.stderr
    r = run_tool(TOOL, "demo", "--outdir", "-")
    assert r.returncode == 2 and "--outdir" in r.stderr


def test_lp_reports_its_own_highs_seconds(tiny_instance):
    s = js(run_tool(TOOL, "lp", tiny_instance, "--json"))
    assert 0 < s["seconds_highs"] <= s["seconds"]
