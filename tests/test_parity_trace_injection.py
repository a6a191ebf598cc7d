"""Parity: trace-injection's deterministic reachability verdict against the official
``StructuralCausalModel.counterfactual_query`` (decentralizedsciencelab/CausalTrace @ b328568, run in a
scratch folder; fixture in tests/data/parity/trace-injection/, see its README). Exact (values in
{0, 0.5, 1}).

Ours differs by design on 3 of the 8 graphs (G3 other candidates' paths, G4 non-candidate roots, G8 the
0.5 confidence cut; docs/trace-injection.md, Departures): the test pins our values, the official values
through the same function with the official settings, and the verdict at 0.5 on all 8."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from icmlkit.lib.trace_injection.graph import TRIGGER_TYPES
from icmlkit.lib.trace_injection.scm import reachability_effect

FIX = Path(__file__).parent / "data" / "parity" / "trace-injection"
DIFFER = {"G3_two_injections_into_sink", "G4_untrusted_noncandidate_root", "G8_low_confidence_task_edge"}

_DATA = json.loads((FIX / "results.json").read_text())
CASES = _DATA["cases"]
RESULTS = {r["case"]: r for r in _DATA["results"]}


def _parents(case: dict) -> dict:
    """The trigger parents as TraceGraph.trigger_parents builds them (state_enablement left out)."""
    out: dict = {n: {} for n in case["nodes"]}
    for src, dst, kind, conf in case["edges"]:
        if kind in TRIGGER_TYPES:
            prev = out[dst].get(src, 0.0)
            out[dst][src] = 1 - (1 - prev) * (1 - conf)
    return out


def _ours(case: dict) -> float:
    cand, sink = case["query"]
    return reachability_effect(_parents(case), case["task_roots"] + case["candidates"], cand, sink)


def _official(case: dict) -> float:
    cand, sink = case["query"]
    parents = _parents(case)
    has_parent = {dst for _, dst, _, _ in case["edges"]}
    roots = [n for n in case["nodes"] if n not in has_parent]  # every in-degree-0 node
    return reachability_effect(parents, roots, cand, sink, min_conf=0.0, exclude=case["candidates"])


def test_fixture_is_complete():
    assert set(CASES) == set(RESULTS) and len(CASES) == 8
    assert {c for c, r in RESULTS.items() if r["ours_effect"] != r["official_effect"]} == DIFFER


@pytest.mark.parametrize("name", sorted(CASES))
def test_ours_pinned(name):
    assert _ours(CASES[name]) == RESULTS[name]["ours_effect"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_official_settings_reproduce_official(name):
    assert _official(CASES[name]) == RESULTS[name]["official_effect"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_verdict_at_half_agrees(name):
    assert (_ours(CASES[name]) >= 0.5) == (RESULTS[name]["official_effect"] >= 0.5)
