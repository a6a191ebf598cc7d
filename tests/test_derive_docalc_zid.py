"""derive-docalc: identification from experiments (gID / z-identification) and estimand-level
simplification of the class members."""
from __future__ import annotations

import json

import numpy as np
import pytest

from test_derive_docalc import call
from icmlkit.lib.causal import parse_dagitty, parse_query
from icmlkit.lib.causal.parse import Query
from icmlkit.lib.derive_docalc import expr as E
from icmlkit.lib.derive_docalc.api import class_estimands
from icmlkit.lib.derive_docalc.estimate import DiscreteTables, evaluate_table
from icmlkit.lib.derive_docalc.experiments import gid, gid_query
from icmlkit.lib.derive_docalc.identify import identify, simplify
from icmlkit.lib.derive_docalc.models import DiscreteSCM, classic

OBS = frozenset()
# Bareinboim & Pearl (2012), as y0's example z_identifiability_1: not identifiable from P(V), identifiable
# from an experiment on Z (which cuts both Z <-> X and Z <-> Y)
ZID1 = "dag { Z -> X; X -> Y; Z <-> X; Z <-> Y }"
# two experiments, each useless alone, identify P(y | do(x)) together: Q[B] from do(C, X), Q[C, Y] from do(B, X)
COMBINE = "dag { X -> B; X -> C; X -> Y; B -> Y; C -> Y; A <-> X; B <-> X; C <-> X; C <-> Y; X <-> Y }"


def _exact_error(G, est, Y, X, W=(), seed=0, experiments=()):
    """max |estimand on exact (experimental) joints - exact P(y | do(x), w)| on a random binary SCM."""
    scm = DiscreteSCM.random(G, np.random.default_rng(seed))
    names = list(G.nodes)
    T = DiscreteTables(scm.joint(), names, {frozenset(Z): scm.experimental_joint(Z) for Z in experiments if Z})
    Ys, Xs, Ws = (sorted(S, key=G.index.get) for S in (Y, X, W))
    have = Ys + Xs + Ws
    tg = [v for v in names if v in set(E.free(est)) | set(have)]
    val = evaluate_table(est, T, tg)[0].reshape([2 if v in tg else 1 for v in names])
    ref = scm.interventional(Y, X, W)
    ref = np.moveaxis(ref, list(range(len(have))), [sorted(have, key=names.index).index(v) for v in have])
    ref = ref.reshape([2 if v in have else 1 for v in names])
    a, b = np.broadcast_arrays(val, ref)
    ok = np.isfinite(b)
    return float(np.abs(a - b)[ok].max())


def test_zid_textbook_surrogate_experiment():
    G = parse_dagitty(ZID1)
    assert not gid(G, {"Y"}, {"X"}, [OBS]).identifiable
    r = gid(G, {"Y"}, {"X"}, [OBS, frozenset({"Z"})])
    assert r.identifiable and E.text(r.estimand) == "P_do{Z}(Y | X)"
    assert r.components == [(frozenset({"Y"}), frozenset({"Z"}))]
    assert _exact_error(G, r.estimand, {"Y"}, {"X"}, experiments=[{"Z"}]) < 1e-12
    # the estimand is NOT the observational P(y | x): reading it from P(V) is wrong
    obs = E.Prob(("Y",), ("X",))
    assert _exact_error(G, obs, {"Y"}, {"X"}) > 1e-3
    # IV: an experiment on the instrument does not help, one on X does
    iv = classic("instrumental variable")
    assert not gid(iv, {"Y"}, {"X"}, [OBS, frozenset({"Z"})]).identifiable
    assert gid(iv, {"Y"}, {"X"}, [frozenset({"X"})]).identifiable
    # Z <-> Y stays when only X's confounding is cut: not identifiable (y0's z_identifiability_2)
    G2 = parse_dagitty("dag { Z -> X; X -> Y; X <-> Y; Z <-> Y }")
    r2 = gid(G2, {"Y"}, {"X"}, [OBS, frozenset({"Z"})])
    assert not r2.identifiable and r2.failed == frozenset({"Y"})


def test_gid_combines_experiments():
    G = parse_dagitty(COMBINE)
    a, b = frozenset({"B", "X"}), frozenset({"C", "X"})
    assert not gid(G, {"Y"}, {"X"}, [OBS, a]).identifiable
    assert not gid(G, {"Y"}, {"X"}, [OBS, b]).identifiable
    r = gid(G, {"Y"}, {"X"}, [OBS, a, b])
    assert r.identifiable
    assert {frozenset(Z) for _, Z in r.components} == {a, b}
    for seed in range(3):
        assert _exact_error(G, r.estimand, {"Y"}, {"X"}, seed=seed, experiments=[a, b]) < 1e-12


def test_gid_conditional_query():
    # W (a child of Y) cannot be moved into the actions: gID(y u w, x) / sum_y gID(y u w, x)
    G = parse_dagitty(ZID1.replace("}", "; Y -> W }"))
    q = parse_query("P(y | do(x), w)", G)
    assert not gid_query(G, q, [OBS]).identifiable
    r = gid_query(G, q, [frozenset({"Z"})])  # the experiment alone, no observational data
    assert r.identifiable and all(p.do == ("Z",) for p in _probs(r.estimand))
    assert isinstance(r.estimand, E.Frac) or "W" in E.text(r.estimand)
    for seed in range(2):
        assert _exact_error(G, r.estimand, {"Y"}, {"X"}, {"W"}, seed=seed, experiments=[{"Z"}]) < 1e-12
    # the napkin's P(y | do(x)) from the experiment on W1 alone (no observational data)
    N = parse_dagitty("dag { W1 -> W2; W2 -> X; X -> Y; W1 <-> X; W1 <-> Y }")
    r = gid_query(N, Query(frozenset({"Y"}), frozenset({"X"})), [frozenset({"W1"})])
    assert r.identifiable and _exact_error(N, r.estimand, {"Y"}, {"X"}, experiments=[{"W1"}]) < 1e-12


def _probs(e):
    if isinstance(e, E.Prob):
        return [e]
    if isinstance(e, E.Prod):
        return [p for f in e.factors for p in _probs(f)]
    if isinstance(e, E.Sum):
        return _probs(e.body)
    if isinstance(e, E.Frac):
        return _probs(e.num) + _probs(e.den)
    return []


def test_experimental_factors_render_roundtrip_and_do_not_merge():
    e = E.Prod((E.Prob(("Y",), ("X",), ("Z",)), E.Prob(("X",), (), ())))
    c = E.canonical(e)
    assert isinstance(c, E.Prod) and len(c.factors) == 2  # a chain rule across two distributions is no merge
    assert E.text(c) == "P(X) P_do{Z}(Y | X)"
    assert E.from_json(json.loads(json.dumps(E.to_json(c)))) == c
    assert "P_{do(Z)}" in E.latex(c)
    assert E.canonical(E.Prod((E.Prob(("Y",), ("X",), ("Z",)), E.Prob(("X",), (), ("Z",))))) == \
        E.Prob(("X", "Y"), (), ("Z",))


def test_simplification_shrinks_and_keeps_values():
    G = parse_dagitty("dag { Z -> X -> Y }")
    raw = identify(G, parse_query("P(y | do(x))", G))
    s = simplify(G, raw)
    assert E.text(raw) == "P(Y | X, Z)" and E.text(s) == "P(Y | X)"
    assert E.size(raw)["max_arity"] == 3 and E.size(s)["max_arity"] == 2
    # the M-graph: the class's smallest (members simplified) is below simplified ID, and all are exact
    M = classic("M-graph")
    q = parse_query("P(y | do(x))", M)
    ce = class_estimands(M, q, baselines=True, simplify_members=True)
    assert E.text(ce.simplified_id) == "sum_{B} (P(B) P(Y | B, X))"
    assert E.text(ce.simplest) == "P(Y | X)"
    assert E.size_key(ce.simplest) < E.size_key(ce.simplified_id)
    rows = [m for m in ce.members if m.get("size") is not None]
    assert rows and all(m["size_simplified"]["summed"] <= m["size"]["summed"] for m in rows)
    assert any(m["size_simplified"]["max_arity"] < m["size"]["max_arity"] for m in rows)
    for est in ce.estimands:
        assert _exact_error(ce.graph, est.expr, {"Y"}, {"X"}, seed=4) < 1e-12
    # a summed variable that vanishes: sum_{W} P(W) P(Y | X, W) with W an isolated parent of nothing relevant
    G3 = parse_dagitty("dag { W -> X -> Y; W -> V }")
    e3 = E.canonical(E.Sum(("W",), E.Prod((E.Prob(("W",)), E.Prob(("Y",), ("W", "X"))))))
    assert E.text(simplify(G3, e3)) == "P(Y | X)"
    assert E.size(e3)["summed"] == 1 and E.size(simplify(G3, e3))["summed"] == 0


def test_simplify_uses_the_experiments_graph():
    # Y _||_ Z | X holds in G_{bar Z} (Z <-> Y cut) but not in G: only the experimental factor is pruned
    G = parse_dagitty(ZID1)
    e = E.Prob(("Y",), ("X", "Z"), ("Z",))
    assert E.text(simplify(G, e)) == "P_do{Z}(Y | X)"
    assert E.text(simplify(G, E.Prob(("Y",), ("X", "Z")))) == "P(Y | X, Z)"


def test_cli_experiments_reports_gid(capsys):
    code, out, err = call(capsys, "experiments", ZID1, "P(y | do(x))", "--json")
    assert code == 0, err
    s = json.loads(out)
    assert not s["observationally_identifiable"]
    exps = {tuple(e["experiment"]): e for e in s["experiments"]}
    assert exps[("Z",)]["estimand"] == "P_do{Z}(Y | X)" and ("X",) in exps
    code, out, err = call(capsys, "experiments", COMBINE, "P(y | do(x))",
                              "--available", "B,X;C,X", "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["experiments"] == [] and s["combined"]["identifiable"]
    assert {frozenset(c["experiment"]) for c in s["combined"]["components"]} == {frozenset("BX"), frozenset("CX")}


def test_gid_agrees_with_y0_trso():
    pytest.importorskip("y0")
    from icmlkit.lib.derive_docalc.oracle import y0_trso

    cases = [(ZID1, [{"Z"}], True), (ZID1, [], False), ("dag { Z -> X; X -> Y; X <-> Y; Z <-> Y }", [{"Z"}], False),
             ("dag { W1 -> W2; W2 -> X; X -> Y; W1 <-> X; W1 <-> Y }", [{"W1"}], True),
             ("dag { Z -> X; X -> Y; X <-> Y }", [{"Z"}], False)]
    for text, coll, want in cases:
        G = parse_dagitty(text)
        ours = gid(G, {"Y"}, {"X"}, [OBS] + [frozenset(z) for z in coll]).identifiable
        theirs, _, expr = y0_trso(G, {"Y"}, {"X"}, [frozenset(z) for z in coll])
        assert ours == theirs == want, text
        if expr is not None:  # y0's estimand, read as ours, is exact here too
            assert _exact_error(G, expr, {"Y"}, {"X"}, experiments=coll) < 1e-12, text


def test_cli_identify_simplify(capsys):
    code, out, err = call(capsys, "identify", "dag { A -> M; B -> M; A -> X; B -> Y; X -> Y }", "P(y | do(x))",
                          "--simplify", "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["simplest"] == "P(Y | X)" and s["simplest_size"] == {"summed": 0, "max_arity": 2, "factors": 1}
    first = s["members"][0]
    assert first["estimand"] == "sum_{B} (P(B) P(Y | A, B, X))"
    assert first["estimand_simplified"] == "sum_{B} (P(B) P(Y | B, X))"
    assert first["size"]["max_arity"] == 4 and first["size_simplified"]["max_arity"] == 3
    assert "sum_{B} (P(B) P(Y | B, X))" in s["estimands"]


def test_estimate_with_simplified_members_ranks_them():
    import pandas as pd

    from icmlkit.lib.derive_docalc.api import estimate
    from icmlkit.lib.derive_docalc.config import EstimateConfig

    M = classic("M-graph")
    scm = DiscreteSCM.random(M, np.random.default_rng(3))
    df = pd.DataFrame(scm.sample(3000, np.random.default_rng(4)), columns=list(M.nodes))
    q = parse_query("P(y=1 | do(x=1))", M)
    plain = estimate(EstimateConfig(bootstrap=20), M, q, df)
    simp = estimate(EstimateConfig(bootstrap=20, simplify=True), M, q, df)
    texts = {r["estimand"]: r for r in simp.table_rows()}
    assert "sum_{B} (P(B) P(Y | B, X))" in texts and texts["sum_{B} (P(B) P(Y | B, X))"]["in_class"]
    assert len(simp.table_rows()) >= len(plain.table_rows())
    truth = float(scm.interventional({"Y"}, {"X"}, set())[1, 1])
    assert all(abs(r["estimate"] - truth) < 0.06 for r in simp.table_rows())
