"""Parity: derive-docalc's do-calculus equivalence classes against an independent enumerator (the authors'
GitLab code is not reachable; tests/data/parity/derive-docalc/README.md). 312 queries P(Y | do(X)) on 60
random ADMGs; both our routes (breadth-first search over rules 1-3, and the canonical four-test
criterion) must give exactly the independent class (set equality: the tolerance of a discrete result)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from icmlkit.lib.causal import ADMG
from icmlkit.lib.causal.parse import Query
from icmlkit.lib.derive_docalc.derivation import equivalence_class, equivalence_class_canonical

DATA = Path(__file__).parent / "data" / "parity" / "derive-docalc"


@pytest.fixture(scope="module")
def cases():
    ref = json.loads((DATA / "classes_independent.json").read_text())
    assert ref["n_queries"] == len(ref["cases"]) == 312
    return ref["cases"]


def _class(case, route) -> set:
    G = ADMG.from_edges(case["directed"], case["bidirected"], nodes=case["nodes"])
    q = Query(frozenset(case["Y"]), frozenset(case["X"]))
    cls = route(G, q)
    assert not cls.capped
    o = cls.oracle
    return {(frozenset(o.set_of(x)), frozenset(o.set_of(w))) for x, w in cls.members}


def _reference(case) -> set:
    return {(frozenset(x), frozenset(w)) for x, w in case["class_independent"]}


@pytest.mark.parametrize("route", [equivalence_class, equivalence_class_canonical], ids=["bfs", "canonical"])
def test_classes_equal_the_independent_enumerator(cases, route):
    sizes = np.load(DATA / "class_sizes.npz")["sizes"]
    bad = []
    for i, case in enumerate(cases):
        ours, ref = _class(case, route), _reference(case)
        assert len(ref) == sizes[i]
        if ours != ref:
            bad.append((i, len(ours), len(ref)))
    assert not bad, f"{len(bad)} of {len(cases)} classes differ (index, ours, reference): {bad[:10]}"


def test_parity_detects_one_wrong_member(cases):
    """The comparison is exact: one member more or less is a failure."""
    case = max(cases, key=lambda c: len(c["class_independent"]))
    ours = _class(case, equivalence_class)
    assert ours == _reference(case)
    some = next(iter(ours))
    assert ours - {some} != _reference(case)
