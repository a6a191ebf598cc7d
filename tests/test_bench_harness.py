"""The one benchmark harness (bench/_common.py): parts, one merge with provenance, resumable items,
the timing and tuning helpers, the table writer; and every bench script registers the manifest's parts."""
from __future__ import annotations

import importlib
import json
import sys

import pytest

from conftest import REPO
from icmlkit.lib.core.tools import tools

sys.path.insert(0, str(REPO / "bench"))
_common = importlib.import_module("_common")


@pytest.fixture
def harness(tmp_path, monkeypatch):
    monkeypatch.setattr(_common, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(_common, "QUICK_RESULTS", tmp_path / "quick")
    monkeypatch.setattr(_common, "CACHE", tmp_path / "cache")
    return tmp_path


def _toy_bench(calls):
    bench = _common.Bench("solve-maxecc")

    @bench.part("a", seeds=(0, 1, 2))
    def a(ctx):
        calls.append(("a", ctx.quick))
        return {"rows": [ctx.cached(f"seed{s}", lambda s=s: {"seed": s, "x": s * 2.0}) for s in ctx.seeds]}

    @bench.part("b")
    def b(ctx):
        calls.append(("b", ctx.quick))
        return {"y": 1}

    @bench.report
    def report(results):
        got = sum(r["x"] for r in results.get("a", {}).get("rows", []))
        return {"sum": _common.target(got, 6.0, got >= 6.0, "toy")}, _common.table(results.get("a", {}).get("rows", []))

    return bench


def test_parts_merge_with_provenance_and_resume(harness):
    calls = []
    bench = _toy_bench(calls)
    bench.main([])
    stored = json.loads((harness / "results" / "solve_maxecc.json").read_text())
    assert set(stored["results"]) == {"a", "b"} and stored["targets"]["sum"]["met"] is True
    for prov in stored["parts"].values():
        assert {"date", "commit", "machine", "command", "seconds", "tuning"} <= set(prov)
        assert prov["date"].endswith("Z") and prov["command"].startswith("python bench/solve_maxecc.py --part")
    md = (harness / "results" / "solve_maxecc.md").read_text()
    assert "| seed | x |" in md and "## Provenance" in md
    # one part rerun: the other part's payload stays, the cached seeds are not recomputed
    bench.main(["--part", "b"])
    bench.main(["--part", "a"])
    again = json.loads((harness / "results" / "solve_maxecc.json").read_text())
    assert again["results"]["a"] == stored["results"]["a"] and calls == [("a", False), ("b", False), ("b", False), ("a", False)]
    assert len(list((harness / "cache" / "solve_maxecc").rglob("seed*.json"))) == 3


def test_quick_never_touches_the_committed_results(harness):
    bench = _toy_bench([])
    bench.main(["--quick"])
    quick = json.loads((harness / "quick" / "solve_maxecc.json").read_text())
    assert quick["parts"]["a"]["quick"] is True and quick["parts"]["a"]["seeds"] == [0]
    assert not (harness / "results").exists()
    assert quick["targets"]["sum"]["met"] is False  # the report sees only what ran


def test_time_call_reports_median_and_spread():
    ticks = []
    rec = _common.time_call(lambda: ticks.append(1), repeats=5, warmup=2)
    assert len(ticks) == 7 and rec["min_s"] <= rec["median_s"] <= rec["max_s"] and "iqr_s" in rec
    r = _common.speed_ratio({"median_s": 4.0, "min_s": 3.0, "max_s": 5.0}, {"median_s": 2.0, "min_s": 1.0, "max_s": 2.5})
    assert r == {"ratio": 2.0, "low": 1.2, "high": 5.0}


def test_tune_gives_every_method_the_same_budget():
    grids = {"ours": [{"r": r} for r in range(10)], "baseline": [{"lr": lr} for lr in (1, 2, 3, 4)]}
    rec = _common.tune(grids, lambda m, c: -abs(c.get("r", c.get("lr")) - 3), budget=4, seed=1)
    assert [len(v["grid"]) for v in rec["methods"].values()] == [4, 4]
    assert rec["methods"]["baseline"]["best"] == {"lr": 3} and rec["methods"]["baseline"]["best_score"] == 0
    with pytest.raises(ValueError, match="smaller than the budget"):
        _common.tune(grids, lambda m, c: 0.0, budget=5)


def test_table_writer():
    md = _common.table([{"a": 1, "b": 0.123456}, {"a": 2, "c": True}])
    assert md.splitlines()[0] == "| a | b | c |" and "| 2 | — | yes |" in md and "0.123" in md


@pytest.mark.parametrize("t", tools(), ids=lambda t: t.name)
def test_bench_script_registers_the_manifests_parts(t):
    """bench/<module>.py runs through the harness, and its parts are the manifest's bench.parts."""
    mod = importlib.import_module(t.module)
    assert isinstance(getattr(mod, "bench", None), _common.Bench), f"bench/{t.module}.py has no Bench"
    assert tuple(mod.bench.parts) == t.parts, f"bench/{t.module}.py parts differ from lib/{t.module}/tool.toml"
