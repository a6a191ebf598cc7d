"""derive-docalc: the rules, the derivation graph, the canonical criterion, ID/IDC, estimation, the
parsers' errors and the command line."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run_tool
from fuzzing import FuzzCase, MismatchCase, check_malformed
from icmlkit.lib.causal import ADMG, parse_dagitty, parse_json_graph, parse_query, rule1, rule2, rule3, z_of_w
from icmlkit.lib.causal.parse import Query
from icmlkit.lib.core.errors import InputError
from icmlkit.lib.derive_docalc import expr as E
from icmlkit.lib.derive_docalc.api import class_estimands
from icmlkit.lib.derive_docalc.derivation import (RuleOracle, all_expressions, canonical_all_pairs, canonical_test,
                                           components, equivalence_class)
from icmlkit.lib.derive_docalc.estimate import DiscreteTables, GaussianMoments, evaluate_table, gaussian_effect
from icmlkit.lib.derive_docalc.identify import NotIdentifiable, identify
from icmlkit.lib.derive_docalc.models import CLASSIC, DiscreteSCM, LinearGaussianSCM, classic, random_admg

NAPKIN = "dag { W1 -> W2; W2 -> X; X -> Y; W1 <-> X; W1 <-> Y }"


def G_(text: str) -> ADMG:
    return parse_dagitty(text)


# --------------------------------------------------------------------------- the three rules


def test_rule1_textbook():
    G = G_("dag { X -> Z -> Y }")
    assert not rule1(G, {"Y"}, {"X"}, {"Z"}, set())          # the mediator is informative under do(x)
    assert rule1(G, {"Y"}, {"X"}, {"Z"}, set()) is False
    G2 = G_("dag { X -> Y; Z }")
    assert rule1(G2, {"Y"}, set(), {"Z"}, set())              # an unrelated observation can be dropped
    G3 = G_("dag { Z -> X -> Y }")
    assert rule1(G3, {"Y"}, {"X"}, {"Z"}, set())              # under do(x) the cause of x says nothing


def test_rule2_textbook():
    bd = G_("dag { Z -> X; Z -> Y; X -> Y }")
    assert not rule2(bd, {"Y"}, set(), {"X"}, set())          # P(y|do(x)) != P(y|x): open back door
    assert rule2(bd, {"Y"}, set(), {"X"}, {"Z"})              # P(y|do(x),z) = P(y|x,z)
    fd = G_("dag { X -> M -> Y; X <-> Y }")
    assert rule2(fd, {"M"}, set(), {"X"}, set())              # P(m|do(x)) = P(m|x)
    assert rule2(fd, {"Y"}, set(), {"M"}, {"X"})              # P(y|do(m),x) = P(y|m,x)
    assert not rule2(fd, {"Y"}, set(), {"X"}, set())


def test_rule3_textbook_and_sets():
    G = G_("dag { X -> Y; Z }")
    assert rule3(G, {"Y"}, {"X"}, {"Z"}, set())
    G2 = G_("dag { X -> Y; Z -> Y }")
    assert not rule3(G2, {"Y"}, {"X"}, {"Z"}, set())
    fd = G_("dag { X -> M -> Y; X <-> Y }")
    assert rule3(fd, {"Y"}, {"M"}, {"X"}, set())              # P(y|do(m),do(x)) = P(y|do(m))
    # set-valued Z: {A, B} deletable together
    G3 = G_("dag { A -> X; B -> X; X -> Y }")
    assert rule3(G3, {"Y"}, {"X"}, {"A", "B"}, set())


def test_rule3_ancestors_taken_in_G_bar_X():
    """Z(W) = Z minus An(W) in G_{bar X}: Z -> X -> W makes Z an ancestor of W in G but not once X's
    incoming edges are cut. With ancestors in G the valid deletion of do(z) would be refused."""
    G = G_("dag { Z -> X; X -> W; Z <-> Y }")
    assert z_of_w(G, {"X"}, {"Z"}, {"W"}) == {"Z"}
    assert "Z" in G.ancestors({"W"})                           # the trap: in G, Z IS an ancestor of W
    assert rule3(G, {"Y"}, {"X"}, {"Z"}, {"W"})
    wrong = G.d_separated({"Y"}, {"Z"}, {"X", "W"}, bar={"X"})  # Z(W) from An in G is empty
    assert not wrong
    # and the equality holds numerically on an exact SCM
    scm = DiscreteSCM.random(G, np.random.default_rng(3))
    a = scm.interventional({"Y"}, {"X", "Z"}, {"W"})           # axes Y, X, Z, W
    b = scm.interventional({"Y"}, {"X"}, {"W"})                # axes Y, X, W
    assert np.allclose(a, b[:, :, None, :], atol=1e-12)


def test_rule3_refuses_an_invalid_deletion():
    # Z -> W <- Y... W a collider descendant: conditioning on W opens Z - Y; Z(W) = {} so no cut
    G = G_("dag { X -> Y; Z -> W; Y -> W }")
    assert z_of_w(G, {"X"}, {"Z"}, {"W"}) == frozenset()
    assert not rule3(G, {"Y"}, {"X"}, {"Z"}, {"W"})
    scm = DiscreteSCM.random(G, np.random.default_rng(4))
    a = scm.interventional({"Y"}, {"X", "Z"}, {"W"})
    b = scm.interventional({"Y"}, {"X"}, {"W"})
    assert not np.allclose(a, b[:, :, None, :], atol=1e-6)


# --------------------------------------------------------------------------- derivation graph


def test_napkin_class_and_paths():
    G = G_(NAPKIN)
    cls = equivalence_class(G, parse_query("P(y | do(x))", G), edges=True)
    texts = {cls.oracle.text(*m) for m in cls.members}
    assert len(texts) == 9 and "P(Y | do(W1), X)" in texts and "P(Y | X)" not in texts
    for m in cls.members:  # every path is a chain of valid steps from the query to the member
        path = cls.path(m)
        assert len(path) == cls.depth[m]
        if path:
            assert path[0]["from"] == "P(Y | do(X))" and path[-1]["to"] == cls.oracle.text(*m)
    assert "graph derivation" in cls.to_dot() and "R3" in cls.to_dot()


def test_canonical_route_gives_the_same_class():
    from icmlkit.lib.derive_docalc.derivation import equivalence_class_canonical

    rng = np.random.default_rng(8)
    for G in [G_(NAPKIN), classic("M-graph")] + [random_admg(5, rng) for _ in range(5)]:
        y = "Y" if "Y" in G.nodes else G.nodes[-1]
        x = "X" if "X" in G.nodes else G.nodes[0]
        q = Query(frozenset({y}), frozenset({x}))
        a = equivalence_class(G, q)
        b = equivalence_class_canonical(G, q, edges=True)
        assert set(a.members) == set(b.members) and a.members[0] == b.members[0]
        assert all(len(b.path(m)) == b.depth[m] <= 4 for m in b.members)
        assert b.to_dot().count("--") == len(b.edges)


def test_bfs_cap_is_reported():
    G = G_(NAPKIN)
    cls = equivalence_class(G, parse_query("P(y | do(x))", G), cap=3)
    assert cls.capped and len(cls.members) == 3


def test_r1_adds_no_connectivity_and_canonical_matches_exhaustive():
    rng = np.random.default_rng(11)
    graphs = [classic(n) for n in CLASSIC] + [random_admg(int(rng.integers(4, 6)), rng) for _ in range(14)]
    for G in graphs:
        y = G.nodes[-1] if "Y" not in G.nodes else "Y"
        o = RuleOracle(G, {y})
        comp = components(o)
        comp23 = components(RuleOracle(G, {y}), rules=(2, 3))
        same = comp[:, None] == comp[None, :]
        assert (same == (comp23[:, None] == comp23[None, :])).all()
        assert (canonical_all_pairs(RuleOracle(G, {y})) == same).all(), G.to_json()


def test_canonical_test_four_tests_and_witness():
    G = G_(NAPKIN)
    o = RuleOracle(G, {"Y"})
    a = (o.mask_of({"X"}), 0)
    b = (o.mask_of({"W1"}), o.mask_of({"X", "W2"}))
    ok, tests = canonical_test(o, a, b)
    assert ok and len(tests) == 4 and [t["rule"] for t in tests] == ["R2\u2191", "R3\u2191", "R3\u2193", "R2\u2193"]
    ok2, tests2 = canonical_test(o, a, (0, o.mask_of({"X"})))
    assert not ok2 and not all(t["holds"] for t in tests2)


def test_class_members_have_the_same_interventional_value():
    rng = np.random.default_rng(5)
    for _ in range(6):
        G = random_admg(5, rng)
        scm = DiscreteSCM.random(G, rng)
        y, x = G.nodes[-1], G.nodes[0]
        q = Query(frozenset({y}), frozenset({x}))
        cls = equivalence_class(G, q)
        ref = scm.interventional({y}, {x}, set())
        order = [v for v in G.nodes if v != y]
        for m in cls.members:
            mq = cls.query(m)
            val = scm.interventional(mq.Y, mq.X, mq.W)
            # bring the member's axes (Y, X', W') to (Y, all others) and compare where defined
            names = [y] + sorted(mq.X, key=G.index.get) + sorted(mq.W, key=G.index.get)
            full = np.moveaxis(val.reshape(val.shape + (1,) * (len(G.nodes) - len(names))),
                               list(range(len(G.nodes))),
                               [([y] + order).index(v) for v in names] +
                               [([y] + order).index(v) for v in [y] + order if v not in names])
            ref_full = ref.reshape((2, 2) + (1,) * (len(G.nodes) - 2))
            ref_full = np.moveaxis(ref_full, [0, 1], [0, 1 + order.index(x)]) if order.index(x) else ref_full
            diff = np.abs(np.broadcast_to(full, [2] * len(G.nodes)) - np.broadcast_to(ref_full, [2] * len(G.nodes)))
            assert np.nanmax(diff) < 1e-9, (G.to_json(), mq.text())


# --------------------------------------------------------------------------- identification


def test_napkin_estimand_numerically():
    G = G_(NAPKIN)
    rng = np.random.default_rng(0)
    for _ in range(3):
        scm = DiscreteSCM.random(G, rng)
        T = DiscreteTables(scm.joint(), G.nodes)
        e = identify(G, parse_query("P(y | do(x))", G))
        assert E.free(e) == {"X", "Y", "W2"}  # the napkin ratio keeps w2 free (its value does not matter)
        val = evaluate_table(e, T, ["Y", "X"])[0]
        assert np.nanmax(np.abs(val - scm.interventional({"Y"}, {"X"}, set()))) < 1e-9


def test_unidentifiable_gives_a_hedge():
    for name in ("bow (unidentifiable)", "instrumental variable"):
        G = classic(name)
        with pytest.raises(NotIdentifiable, match="hedge"):
            identify(G, parse_query("P(y | do(x))", G))


def test_front_door_and_idc_exact():
    rng = np.random.default_rng(1)
    for text, q in ((CLASSIC["front-door"], "P(y | do(x))"), (CLASSIC["back-door"], "P(y | do(x), z)"),
                    (CLASSIC["M-graph"], "P(y | do(x), m)"), (CLASSIC["front-door"], "P(y | do(x), m)")):
        G = G_(text)
        qq = parse_query(q, G)
        scm = DiscreteSCM.random(G, rng)
        e = identify(G, qq)
        tg = [*sorted(qq.Y, key=G.index.get), *sorted(qq.X, key=G.index.get), *sorted(qq.W, key=G.index.get)]
        val = evaluate_table(e, DiscreteTables(scm.joint(), G.nodes), tg)[0]
        assert np.nanmax(np.abs(val - scm.interventional(qq.Y, qq.X, qq.W))) < 1e-9, q


def test_agrees_with_causaleffect():
    pytest.importorskip("causaleffect", reason="install the derive-docalc extra")
    from icmlkit.lib.derive_docalc.oracle import causaleffect_identify

    rng = np.random.default_rng(2)
    graphs = [classic(n) for n in CLASSIC] + [random_admg(5, rng) for _ in range(8)]
    n_id = 0
    for G in graphs:
        y = "Y" if "Y" in G.nodes else G.nodes[-1]
        x = "X" if "X" in G.nodes else G.nodes[0]
        T = DiscreteTables(DiscreteSCM.random(G, rng).joint(), G.nodes)
        try:
            ours = identify(G, Query(frozenset({y}), frozenset({x})))
        except NotIdentifiable:
            ours = None
        theirs = causaleffect_identify(G, {y}, {x})
        assert (ours is None) == (theirs is None), G.to_json()
        if ours is not None:
            n_id += 1
            a = evaluate_table(ours, T, [y, x])[0]
            b = evaluate_table(E.canonical(theirs), T, [y, x])[0]
            assert np.nanmax(np.abs(a - b)) < 1e-9
    assert n_id >= 5


def test_canonical_form_dedupes_and_is_idempotent():
    a = E.Sum(("Z",), E.Prod((E.Prob(("Z",)), E.Prob(("Y",), ("X", "Z")))))
    b = E.Sum(("Z",), E.Prod((E.Prob(("Y",), ("Z", "X")), E.Prod((E.Prob(("Z",)), E.ONE)))))
    assert E.text(E.canonical(a)) == E.text(E.canonical(b)) == "sum_{Z} (P(Y | X, Z) P(Z))"
    c = E.canonical(a)
    assert E.canonical(c) == c
    # marginalisation and the chain rule
    assert E.canonical(E.Sum(("M",), E.Prob(("M", "Y"), ("X",)))) == E.Prob(("Y",), ("X",))
    assert E.canonical(E.Prod((E.Prob(("A",), ("B", "C")), E.Prob(("B",), ("C",))))) == E.Prob(("A", "B"), ("C",))
    assert E.from_json(E.to_json(c)) == c
    assert E.latex(c) == "\\sum_{Z} \\left(P(Y \\mid X, Z) P(Z)\\right)"


def test_printed_estimands_never_reuse_a_free_variable_as_a_bound_one():
    # the front-door formula as ID writes it: the inner sum binds X, which is free outside it
    fd = E.Sum(("M",), E.Prod((E.Prob(("M",), ("X",)),
                               E.Sum(("X",), E.Prod((E.Prob(("X",)), E.Prob(("Y",), ("M", "X"))))))))
    assert E.text(fd) == "sum_{M} (P(M | X) sum_{X'} (P(X') P(Y | M, X')))"
    assert "sum_{X'}" in E.latex(fd) and "P(X')" in E.latex(fd)
    assert E.rename_bound(fd) != fd and E.free(E.rename_bound(fd)) == E.free(fd)
    nested = E.Sum(("Z",), E.Prod((E.Prob(("Z",)), E.Sum(("Z",), E.Prob(("Y",), ("Z",))))))
    assert E.text(nested) == "sum_{Z} (P(Z) sum_{Z'} P(Y | Z'))"
    G = classic("front-door")
    for e in class_estimands(G, parse_query("P(y | do(x))", G)).estimands:
        def check(x, scope):
            if isinstance(x, E.Sum):
                assert not set(x.over) & scope, e.text
                check(x.body, scope | set(x.over))
            for child in getattr(x, "factors", ()) + tuple(getattr(x, a) for a in ("num", "den") if hasattr(x, a)):
                check(child, scope)
        check(E.rename_bound(e.expr), set(E.free(e.expr)))


def test_m_graph_gives_several_estimands_all_exact():
    G = classic("M-graph")
    ce = class_estimands(G, parse_query("P(y | do(x))", G))
    texts = [e.text for e in ce.estimands]
    assert "P(Y | X)" in texts and len(texts) >= 3
    scm = DiscreteSCM.random(G, np.random.default_rng(6))
    T = DiscreteTables(scm.joint(), G.nodes)
    truth = scm.interventional({"Y"}, {"X"}, set())
    for e in ce.estimands:
        assert np.nanmax(np.abs(evaluate_table(e.expr, T, ["Y", "X"])[0] - truth)) < 1e-9, e.text


def test_front_door_back_door_projection_gives_both_estimands_gaussian_exact():
    G = classic("front-door+back-door")
    ce = class_estimands(G, parse_query("P(y | do(x))", G), projections=True)
    assert len(ce.estimands) == 2
    scm = LinearGaussianSCM(G, {("Z", "X"): 0.7, ("Z", "Y"): -1.2, ("X", "M"): 1.5, ("M", "Y"): 0.8}, {},
                            {v: 1.0 for v in G.nodes})
    # exact moments from the SCM via a huge sample is slow; use the closed form covariance instead
    order = G.nodes
    B = np.zeros((4, 4))
    for (a, b), c in scm.coef.items():
        B[order.index(b), order.index(a)] = c
    A = np.linalg.inv(np.eye(4) - B)
    cov = A @ A.T
    M = GaussianMoments(np.zeros(4), cov, order)
    for e in ce.estimands:
        assert abs(gaussian_effect(e.expr, M, "Y", "X")[0] - scm.total_effect("X", "Y")) < 1e-10


# --------------------------------------------------------------------------- parsers and errors


def test_dagitty_cycle_error_names_line_and_column():
    with pytest.raises(InputError, match=r"g.dag, line 3: column 4: edge Y -> X closes the directed cycle"):
        parse_dagitty("dag {\n X -> Y\n Y -> X\n}", "g.dag")


def test_dagitty_bad_operator_and_latent_projection():
    with pytest.raises(InputError, match=r"line 1: column 9: edge operator '--'"):
        parse_dagitty("dag { X -- Y }")
    G = parse_dagitty('dag { U [latent]\n U -> X; U -> Y; X -> Y; bb="0,0,1,1" }')
    G2 = parse_dagitty('dag{X->Y<-Z\n"my var" -> X}')
    assert G2.directed == {("X", "Y"), ("Z", "Y"), ("my var", "X")}
    assert G.nodes == ["X", "Y"] and G.bidirected == {("X", "Y")} and G.directed == {("X", "Y")}


def test_json_graph_errors_name_the_field():
    G = parse_json_graph('{"edges": ["X -> Y", ["Y", "<->", "Z"]], "latent": []}')
    assert ("X", "Y") in G.directed and ("Y", "Z") in G.bidirected
    with pytest.raises(InputError, match=r"field edges\[1\]"):
        parse_json_graph('{"edges": ["X -> Y", "X => Z"]}')
    with pytest.raises(InputError, match="closes the directed cycle"):
        parse_json_graph('{"directed": [["A","B"],["B","C"],["C","A"]]}')


def test_query_errors_give_the_column():
    G = G_("dag { X -> Y }")
    q = parse_query("P(y=1 | do(x=0))", G)
    assert q.Y == {"Y"} and q.X == {"X"} and dict(q.values) == {"X": "0", "Y": "1"}
    with pytest.raises(InputError, match=r"column 14: unknown variable 'q'"):
        parse_query("P(y | do(x), q)", G)
    with pytest.raises(InputError, match=r"column 5: unexpected character '\?'"):
        parse_query("P(y ? x)", G)
    with pytest.raises(InputError, match="appears twice"):
        parse_query("P(y | do(y))", G)


# --------------------------------------------------------------------------- the command line


def test_cli_equivalents_check_identify(tmp_path):
    g = tmp_path / "napkin.dag"
    g.write_text(NAPKIN.replace("; ", "\n"))
    r = run_tool("derive-docalc", "equivalents", g, "P(y | do(x))", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["n_members"] == 9 and out["capped"] is False and "seconds" in out
    assert all("path" in m for m in out["members"])
    dot = tmp_path / "d.dot"
    r = run_tool("derive-docalc", "equivalents", g, "P(y | do(x))", "--format", "dot", "-o", dot)
    assert r.returncode == 0 and dot.read_text().startswith("graph derivation")
    r = run_tool("derive-docalc", "equivalents", g, "P(y | do(x))", "--method", "canonical", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["n_members"] == 9
    r = run_tool("derive-docalc", "check", g, "P(y|do(x))", "P(y | do(w1), x)", "--json", "--exhaustive")
    assert r.returncode == 0 and json.loads(r.stdout)["equivalent"] is True and json.loads(r.stdout)["agree"]
    r = run_tool("derive-docalc", "check", g, "P(y|do(x))", "P(y | x)", "--json")  # an answer, not an error
    assert r.returncode == 0 and json.loads(r.stdout)["equivalent"] is False and len(json.loads(r.stdout)["tests"]) == 4
    assert "Error" not in r.stderr
    r = run_tool("derive-docalc", "check", g, "P(y|do(x))", "P(y | x)", "--json", "--require-equivalent")
    assert r.returncode == 3 and json.loads(r.stdout)["equivalent"] is False
    r = run_tool("derive-docalc", "identify", g, "P(y|do(x))", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["identifiable"] and out["n_estimands"] == 1 and isinstance(out["estimands"][0], str)


def test_cli_errors(tmp_path):
    g = tmp_path / "cyc.dag"
    g.write_text("dag {\n X -> Y\n Y -> X\n}\n")
    r = run_tool("derive-docalc", "equivalents", g, "P(y|do(x))")
    assert r.returncode == 1 and "line 3" in r.stderr and "cycle" in r.stderr and r.stdout == ""
    r = run_tool("derive-docalc", "identify", "dag { X -> Y }", "P(y | do(q))")
    assert r.returncode == 1 and "column 10" in r.stderr and "unknown variable 'q'" in r.stderr


def test_cli_estimate_discrete_and_gaussian(tmp_path):
    import pandas as pd

    rng = np.random.default_rng(0)
    G = classic("M-graph")
    scm = DiscreteSCM.random(G, rng)
    pd.DataFrame(scm.sample(3000, rng), columns=G.nodes).to_csv(tmp_path / "m.csv", index=False)
    (tmp_path / "m.dag").write_text(G.to_dagitty())
    r = run_tool("derive-docalc", "estimate", tmp_path / "m.dag", "P(y=1 | do(x=1))", tmp_path / "m.csv",
                 "-B", "50", "--json", "-o", tmp_path / "ranked.csv")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    truth = scm.interventional({"Y"}, {"X"}, set())[1, 1]
    assert out["kind"] == "discrete" and out["n_estimands"] >= 3
    assert [e["rank"] for e in out["estimates"]] == list(range(1, out["n_estimands"] + 1))
    assert all(abs(e["estimate"] - truth) < 5 * e["se"] + 0.02 for e in out["estimates"])
    assert (tmp_path / "ranked.csv").read_text().startswith("rank,estimate")
    Gf = classic("front-door+back-door")
    from icmlkit.lib.derive_docalc.demo import FDBD_FRONT_DOOR_WINS

    c, s = FDBD_FRONT_DOOR_WINS
    pd.DataFrame(LinearGaussianSCM(Gf, c, {}, s).sample(500, rng), columns=Gf.nodes).to_csv(tmp_path / "f.csv", index=False)
    (tmp_path / "f.dag").write_text(Gf.to_dagitty())
    r = run_tool("derive-docalc", "estimate", tmp_path / "f.dag", "P(y | do(x))", tmp_path / "f.csv",
                 "--projections", "--json", "-B", "100")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["kind"] == "gaussian" and out["n_estimands"] == 2
    assert out["best"].startswith("sum_{M}") and out["plain_id_rank"] == 2  # front-door wins in this regime
    bad = tmp_path / "bad.csv"
    bad.write_text("X,Y,M\n1,2,3\n")
    r = run_tool("derive-docalc", "estimate", tmp_path / "f.dag", "P(y | do(x))", bad)
    assert r.returncode == 1 and "column 'Z'" in r.stderr


def test_cli_demo(tmp_path):
    r = run_tool("derive-docalc", "demo", "--outdir", tmp_path / "d", "--json", "--no-progress")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["napkin_max_error"] < 1e-9 and "napkin" in out["headline"]
    assert (tmp_path / "d" / "manifest.json").exists() and (tmp_path / "d" / "napkin.dot").exists()


def test_same_seed_same_bytes(tmp_path):
    G = classic("M-graph")
    rng = np.random.default_rng(0)
    import pandas as pd

    pd.DataFrame(DiscreteSCM.random(G, rng).sample(500, rng), columns=G.nodes).to_csv(tmp_path / "m.csv", index=False)
    (tmp_path / "m.dag").write_text(G.to_dagitty())
    outs = []
    for i in range(2):
        o = tmp_path / f"r{i}.csv"
        r = run_tool("derive-docalc", "estimate", tmp_path / "m.dag", "P(y|do(x))", tmp_path / "m.csv", "-B", "30",
                     "-o", o, "--seed", "7", "--no-manifest")
        assert r.returncode == 0, r.stderr
        outs.append(o.read_bytes())
    assert outs[0] == outs[1]


def test_all_expressions_enumeration():
    ex = all_expressions(3)
    assert len(ex) == 27 and len({tuple(r) for r in ex.tolist()}) == 27 and not (ex[:, 0] & ex[:, 1]).any()


# --------------------------------------------------------------------------- generate, options, fuzz


def call(capsys, *args):
    """The command in process (no interpreter start-up per call)."""
    from icmlkit.cli._common import run_cli
    from icmlkit.cli.derive_docalc import cli

    capsys.readouterr()
    code = run_cli(cli, "derive-docalc", [str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_generate_discrete_truth_is_the_scm_value_and_estimate_finds_it(tmp_path, capsys):
    g = tmp_path / "napkin.dag"
    g.write_text(NAPKIN)
    code, out, err = call(capsys, "generate", g, "P(y=1 | do(x=0))", "--n", "20000", "--seed", "4",
                          "-o", tmp_path / "d.csv", "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["n"] == 20000 and s["variables"] == ["W1", "W2", "X", "Y"] and 0 < s["truth"] < 1
    code, out, err = call(capsys, "estimate", g, "P(y=1 | do(x=0))", tmp_path / "d.csv", "-B", "50", "--json")
    assert code == 0, err
    best = json.loads(out)["estimates"][0]
    assert abs(best["estimate"] - s["truth"]) < 5 * best["se"] + 0.01
    code, again, _ = call(capsys, "generate", g, "--n", "5", "--seed", "4", "-o", "-")
    assert code == 0 and again.splitlines()[0] == "W1,W2,X,Y" and len(again.splitlines()) == 6


def test_generate_gaussian_truth_is_the_total_effect(tmp_path, capsys):
    from icmlkit.lib.derive_docalc.models import GenerateConfig, generate_data

    G = classic("front-door+back-door")
    q = parse_query("P(y | do(x))", G)
    res = generate_data(GenerateConfig(kind="gaussian", n=4000), G, q, seed=1)
    d = res.data
    # back-door adjustment for Z by least squares recovers the total effect
    A = np.c_[d[:, G.nodes.index("X")], d[:, G.nodes.index("Z")], np.ones(len(d))]
    coef = np.linalg.lstsq(A, d[:, G.nodes.index("Y")], rcond=None)[0][0]
    assert res.truth is not None and abs(coef - res.truth) < 0.1 * max(1, abs(res.truth))
    code, _, err = call(capsys, "generate", "dag { X -> Y }", "P(y=3 | do(x))", "-o", tmp_path / "x.csv")
    assert code == 2 and "y=3" in err.lower() and not (tmp_path / "x.csv").exists()


def test_options_device_seed_json_keys_and_output_suffixes(tmp_path, capsys):
    from icmlkit.cli.derive_docalc import cli

    for name, command in cli.commands.items():
        opts = {o for p in command.params for o in p.opts}
        assert "--device" not in opts, name
        assert ("--seed" in opts) == (name in ("estimate", "falsify", "generate", "demo")), name
        assert "JSON keys:" in command.help and "Example" in command.help, name
    code, _, err = call(capsys, "equivalents", "dag { X -> Y }", "P(y|do(x))", "--device", "cuda")
    assert code == 2 and "--device" in err
    code, _, err = call(capsys, "equivalents", "dag { X -> Y }", "P(y|do(x))", "--format", "dot",
                        "-o", tmp_path / "c.json")
    assert code == 2 and "--format dot" in err
    code, _, err = call(capsys, "identify", "dag { X -> Y }", "P(y|do(x))", "-o", tmp_path / "c.txt")
    assert code == 2 and ".json" in err


def _graph_and_data(base):
    (base / "g.dag").write_text("dag { a -> b -> c; a -> c }")
    rng = np.random.default_rng(0)
    (base / "d.csv").write_text("a,b,c\n" + "".join(f"{x},{y},{z}\n" for x, y, z in rng.integers(0, 2, (50, 3))))
    return {"graph": base / "g.dag", "data": base / "d.csv"}


def _data_of_other_columns(base):
    """The graph a -> b -> c, a -> c and data of it with b renamed q (another graph's variables)."""
    files = _graph_and_data(base)
    head, _, rest = files["data"].read_text().partition("\n")
    (base / "q.csv").write_text("a,q,c\n" + rest)
    return {**files, "other": base / "q.csv"}


# issue 59 (tests/test_mismatch_sweep.py): data without a column for each of the graph's variables are refused
_COLS = ("q.csv", "column 'b': missing", "found a, q, c")
MISMATCH = [
    MismatchCase("estimate", ["estimate", "{graph}", "P(c|do(a))", "{other}", "-o", "{out}/r.csv"],
                 _data_of_other_columns, _COLS, "columns"),
    MismatchCase("falsify", ["falsify", "{graph}", "P(c|do(a))", "{other}"], _data_of_other_columns, _COLS, "columns"),
]

GRAPH_KINDS = ("missing", "empty", "binary", "folder")
CSV_KINDS = ("missing", "empty", "binary", "folder", "wrong_csv", "nan_csv")
FUZZ = [case for cmd, argv in (("equivalents", ["equivalents", "{bad}", "P(c|do(a))", "-o", "{out}/c.json"]),
                              ("check", ["check", "{bad}", "P(c|do(a))", "P(c|a)"]),
                              ("identify", ["identify", "{bad}", "P(c|do(a))", "-o", "{out}/e.json"]),
                              ("estimate", ["estimate", "{bad}", "P(c|do(a))", "{data}", "-o", "{out}/r.csv"]),
                              ("generate", ["generate", "{bad}", "P(c|do(a))", "-o", "{out}/s.csv"]),
                              ("falsify", ["falsify", "{bad}", "P(c|do(a))", "{data}"]),
                              ("experiments", ["experiments", "{bad}", "P(c|do(a))"]))
        for case in (FuzzCase(cmd, argv, ".dag", GRAPH_KINDS, _graph_and_data, "dagitty"),
                     FuzzCase(cmd, argv, ".json", GRAPH_KINDS + ("truncated_json",), _graph_and_data, "json"))]
FUZZ.append(FuzzCase("estimate", ["estimate", "{graph}", "P(c|do(a))", "{bad}", "-o", "{out}/r.csv"], ".csv",
                     CSV_KINDS, _graph_and_data, "data"))
FUZZ.append(FuzzCase("estimate", ["estimate", "{graph}", "P(c|do(a))", "{bad}", "--kind", "gaussian",
                                  "-o", "{out}/r.csv"], ".csv", CSV_KINDS, _graph_and_data, "gaussian-data"))
FUZZ.append(FuzzCase("falsify", ["falsify", "{graph}", "P(c|do(a))", "{bad}"], ".csv", CSV_KINDS, _graph_and_data,
                     "data"))
FUZZ.append(FuzzCase("falsify", ["falsify", "{graph}", "P(c|do(a))", "{bad}", "--kind", "gaussian"], ".csv",
                     CSV_KINDS, _graph_and_data, "gaussian-data"))


@pytest.mark.parametrize("case", FUZZ, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed("derive-docalc", case, tmp_path, capsys)


# --------------------------------------------------------------------------- issue 30: efficiency, baselines, scale


CHAIN = "dag { Z -> X -> Y }"
FDBD_IV = "dag { I -> X; Z -> X; Z -> Y; X -> M; M -> Y }"


def test_chain_class_contains_p_y_given_x_and_plain_id_keeps_z():
    G = G_(CHAIN)
    ce = class_estimands(G, parse_query("P(y | do(x))", G), baselines=True)
    assert "P(Y | X)" in {m["member"] for m in ce.members}
    texts = {e.text: e for e in ce.estimands}
    assert E.text(ce.plain_id) == "P(Y | X, Z)" and texts["P(Y | X)"].in_class
    assert E.text(ce.simplified_id) == "P(Y | X)" and ce.optimal_set == frozenset()


def _prob_factors(e):
    if isinstance(e, E.Prob):
        return [e]
    kids = getattr(e, "factors", ()) or tuple(getattr(e, a) for a in ("body", "num", "den") if hasattr(e, a))
    return [f for k in kids for f in _prob_factors(k)]


# what d-separation simplification gives on the classic graphs, written by hand (Tikka & Karvanen 2017);
# the Python port of causaleffect only simplifies algebraically, so its output is the numerical peer
SIMPLIFIED = {"back-door": "sum_{Z} (P(Y | X, Z) P(Z))", "front-door+back-door": "sum_{Z} (P(Y | X, Z) P(Z))",
              "M-graph": "sum_{B} (P(B) P(Y | B, X))", "chain": "P(Y | X)", "fdbd+iv": "sum_{Z} (P(Y | X, Z) P(Z))",
              "front-door": "sum_{M} (P(M | X) sum_{X'} (P(X') P(Y | M, X')))"}


def test_simplified_id_matches_causaleffect_on_the_classic_graphs():
    pytest.importorskip("causaleffect", reason="install the derive-docalc extra")
    from icmlkit.lib.derive_docalc.identify import simplify
    from icmlkit.lib.derive_docalc.oracle import causaleffect_identify

    graphs = {**CLASSIC, "chain": CHAIN, "fdbd+iv": FDBD_IV}
    rng = np.random.default_rng(30)
    n = 0
    for name, text in graphs.items():
        G = G_(text)
        theirs = causaleffect_identify(G, {"Y"}, {"X"}, simplify=True)  # what its printLatex prints
        try:
            raw = identify(G, Query(frozenset({"Y"}), frozenset({"X"})))
        except NotIdentifiable:
            assert theirs is None, name
            continue
        simp = simplify(G, raw)
        if name in SIMPLIFIED:
            assert E.text(simp) == SIMPLIFIED[name], name
        # never more conditioning than the raw ID nor than causaleffect's (simplified) output
        size = lambda e: sum(len(f.cond) for f in _prob_factors(e))  # noqa: E731
        assert size(simp) <= min(size(raw), size(E.canonical(theirs))), name
        for _ in range(2):
            scm = DiscreteSCM.random(G, rng)
            T = DiscreteTables(scm.joint(), G.nodes)
            a = evaluate_table(simp, T, ["Y", "X"])[0]
            b = evaluate_table(E.canonical(theirs), T, ["Y", "X"])[0]
            assert np.nanmax(np.abs(a - b)) < 1e-10, name
            assert np.nanmax(np.abs(a - scm.interventional({"Y"}, {"X"}, set()))) < 1e-10, name
        n += 1
    assert n >= 7


def test_optimal_adjustment_sets_and_their_estimands_are_exact():
    from icmlkit.lib.causal.adjust import is_adjustment_set, optimal_adjustment_set
    from icmlkit.lib.derive_docalc.api import adjustment_estimand

    want = {"back-door": {"Z"}, "front-door+back-door": {"Z"}, "M-graph": {"B"}, "front-door": None,
            "napkin": None}
    for name, o in want.items():
        got = optimal_adjustment_set(classic(name), {"X"}, {"Y"})
        assert (got if got is None else set(got)) == o, name
    assert optimal_adjustment_set(G_(FDBD_IV), {"X"}, {"Y"}) == {"Z"}
    G = G_("dag { X -> W; U -> W; U -> Y; X -> Y }")     # conditioning on W opens X -> W <- U -> Y
    assert not is_adjustment_set(G, {"X"}, {"Y"}, {"W"}) and is_adjustment_set(G, {"X"}, {"Y"}, set())
    rng = np.random.default_rng(31)
    checked = 0
    for _ in range(25):
        G = random_admg(6, rng, p_bid=0.0, names=["A", "B", "C", "X", "D", "Y"])
        O = optimal_adjustment_set(G, {"X"}, {"Y"})
        if O is None:
            continue
        scm = DiscreteSCM.random(G, rng)
        e = adjustment_estimand(["Y"], ["X"], sorted(O))
        val = evaluate_table(e, DiscreteTables(scm.joint(), G.nodes), ["Y", "X"])[0]
        assert np.nanmax(np.abs(val - scm.interventional({"Y"}, {"X"}, set()))) < 1e-10, G.to_json()
        checked += 1
    assert checked >= 5


def test_pruning_leaves_the_class_of_the_relevant_variables_unchanged():
    import time

    from icmlkit.lib.derive_docalc.derivation import prune

    cases = [("dag { X -> Y; A; B; C }", "P(y | do(x))"),
             (NAPKIN[:-1] + "; P -> Q; Q <-> R }", "P(y | do(x))"),
             ("dag { Z -> X -> Y; A -> B; C }", "P(y | do(x), a)")]
    for text, query in cases:
        G = G_(text)
        q = parse_query(query, G)
        full = equivalence_class(G, q)
        small = equivalence_class(G, q, pruning=True)
        Gr, qr, pruned = prune(G, q)
        assert small.pruned == pruned and pruned and small.n_expressions == len(full.members)
        # the full class restricted to expressions without pruned variables is the pruned class
        o = full.oracle
        none_pruned = {(o.set_of(x), o.set_of(w)) for x, w in full.members
                       if not (o.set_of(x) | o.set_of(w)) & set(pruned)}
        so = small.oracle
        assert none_pruned == {(so.set_of(x), so.set_of(w)) for x, w in small.members}
        ce_full = class_estimands(G, q, prune=False)
        ce_small = class_estimands(G, q)
        assert {e.text for e in ce_small.estimands} <= {e.text for e in ce_full.estimands}
    G = G_("dag { X -> Y; A; B; C; D; E; F; G; H }")
    t0 = time.perf_counter()
    ce = class_estimands(G, parse_query("P(y | do(x))", G))
    assert time.perf_counter() - t0 < 1.0
    assert len(ce.cls.members) == 2 and ce.cls.n_expressions == 2 * 3 ** 8 and len(ce.estimands) == 1


def test_estimate_contrasts_with_cis(tmp_path, capsys):
    import pandas as pd

    rng = np.random.default_rng(32)
    G = classic("M-graph")
    scm = DiscreteSCM.random(G, rng)
    pd.DataFrame(scm.sample(4000, rng), columns=G.nodes).to_csv(tmp_path / "m.csv", index=False)
    (tmp_path / "m.dag").write_text(G.to_dagitty())
    code, out, err = call(capsys, "estimate", tmp_path / "m.dag", "P(y | do(x))", tmp_path / "m.csv", "-B", "100",
                          "--contrast", "1,0", "--json", "-o", tmp_path / "r.csv")
    assert code == 0, err
    s = json.loads(out)
    p = scm.interventional({"Y"}, {"X"}, set())
    ate = p[1, 1] - p[1, 0]  # Y in {0, 1}: E[Y | do(x)] = P(Y=1 | do(x))
    assert s["contrast_of"] == "E[Y | do(X=1)] - E[Y | do(X=0)]"
    assert all(abs(r["contrast"] - ate) < 5 * r["contrast_se"] + 0.02 for r in s["estimates"])
    assert all(r["contrast_ci_low"] < r["contrast"] < r["contrast_ci_high"] for r in s["estimates"])
    v = [r["contrast_variance"] for r in s["estimates"]]
    assert v == sorted(v) and s["optimal_adjustment_set"] == ["B"]
    assert {r["in_class"] for r in s["estimates"]} == {True, False}
    assert "contrast_ci_low" in (tmp_path / "r.csv").read_text().splitlines()[0]
    # gaussian: the contrast is the slope times A - B
    Gf = classic("front-door+back-door")
    from icmlkit.lib.derive_docalc.demo import FDBD_FRONT_DOOR_WINS

    c, sd = FDBD_FRONT_DOOR_WINS
    pd.DataFrame(LinearGaussianSCM(Gf, c, {}, sd).sample(400, rng), columns=Gf.nodes).to_csv(tmp_path / "f.csv",
                                                                                          index=False)
    (tmp_path / "f.dag").write_text(Gf.to_dagitty())
    code, out, err = call(capsys, "estimate", tmp_path / "f.dag", "P(y | do(x))", tmp_path / "f.csv", "-B", "50",
                          "--contrast", "2,0.5", "--json")
    assert code == 0, err
    for r in json.loads(out)["estimates"]:
        assert abs(r["contrast"] - 1.5 * r["estimate"]) < 1e-9 and abs(r["contrast_se"] - 1.5 * r["se"]) < 1e-9
    for bad in ("1", "1,1", "a,b"):
        code, _, err = call(capsys, "estimate", tmp_path / "f.dag", "P(y | do(x))", tmp_path / "f.csv",
                            "--contrast", bad)
        assert code == 2 and "--contrast" in err, bad
    code, _, err = call(capsys, "estimate", tmp_path / "m.dag", "P(y | do(x))", tmp_path / "m.csv", "--contrast", "1,7")
    assert code == 2 and "--contrast value X=7" in err


def _gauss_df(G, coef, n, seed):
    import pandas as pd

    scm = LinearGaussianSCM(G, coef, {}, {v: 1.0 for v in G.nodes})
    return pd.DataFrame(scm.sample(n, np.random.default_rng(seed)), columns=G.nodes)


def test_falsify_level_on_the_true_graph_and_power_on_a_wrong_one(tmp_path, capsys):
    from icmlkit.lib.derive_docalc.config import FalsifyConfig
    from icmlkit.lib.derive_docalc.falsify import falsify

    G = G_(CHAIN)
    q = parse_query("P(y | do(x))", G)
    alpha, R = 0.05, 100
    ps = np.array([falsify(FalsifyConfig(bootstrap=200), G, q,
                           _gauss_df(G, {("Z", "X"): 1.0, ("X", "Y"): 1.0}, 1000, r), seed=r).p_value
                   for r in range(R)])
    assert (ps < alpha).mean() <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / R)
    assert ps.min() > 0 and np.median(ps) > 0.2  # not degenerate
    # data from the front-door + back-door model, Z -> X -> Y assumed: P(Y|X) and P(Y|X,Z) disagree
    Gf = classic("front-door+back-door")
    df = _gauss_df(Gf, {("Z", "X"): 1.0, ("Z", "Y"): 0.5, ("X", "M"): 1.0, ("M", "Y"): 0.8}, 5000, 7)
    df.to_csv(tmp_path / "fdbd.csv", index=False)
    code, out, err = call(capsys, "falsify", CHAIN, "P(y | do(x))", tmp_path / "fdbd.csv", "--json",
                          "--fail-under", "0.05", "-B", "200")
    s = json.loads(out)
    assert code == 3 and s["rejected"] and s["p_value"] < 1e-6 and s["n_estimands"] == 2 and s["testable"]
    # the right graph on the same data: not rejected (one distinct estimand: nothing to test, exit 0)
    (tmp_path / "fdbd.dag").write_text(Gf.to_dagitty())
    code, out, err = call(capsys, "falsify", tmp_path / "fdbd.dag", "P(y | do(x))", tmp_path / "fdbd.csv",
                          "--json", "--fail-under", "0.05")
    s = json.loads(out)
    assert code == 0 and s["testable"] is False and s["p_value"] is None and s["n_estimands"] == 1
    # discrete data through the command line
    scm = DiscreteSCM.random(Gf, np.random.default_rng(3), alpha=0.5)
    import pandas as pd

    pd.DataFrame(scm.sample(5000, np.random.default_rng(4)), columns=Gf.nodes).to_csv(tmp_path / "d.csv", index=False)
    code, out, err = call(capsys, "falsify", CHAIN, "P(y | do(x))", tmp_path / "d.csv", "--json")
    assert code == 0 and json.loads(out)["kind"] == "discrete" and json.loads(out)["p_value"] < 1e-3


@pytest.mark.parametrize("command", ["falsify", "estimate"])
def test_graph_query_data_order_and_the_old_order_with_a_warning(tmp_path, capsys, command):
    """One order everywhere, GRAPH QUERY DATA; falsify's old GRAPH DATA QUERY (told by the file kinds)
    still runs, to the same result, after one deprecation line on stderr."""
    G = G_(CHAIN)
    _gauss_df(G, {("Z", "X"): 1.0, ("X", "Y"): 1.0}, 500, 0).to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "g.dag").write_text(G.to_dagitty())
    opts = ["--json", "-B", "50", "--seed", "1"]
    code, new, err = call(capsys, command, tmp_path / "g.dag", "P(y | do(x))", tmp_path / "d.csv", *opts)
    assert code == 0 and "deprecated" not in err, err
    code, old, err = call(capsys, command, tmp_path / "g.dag", tmp_path / "d.csv", "P(y | do(x))", *opts)
    assert code == 0 and json.loads(old) == json.loads(new)
    warn = [ln for ln in err.splitlines() if "deprecated" in ln]
    assert len(warn) == 1 and "GRAPH QUERY DATA" in warn[0] and "GRAPH DATA QUERY" in warn[0]
    # a query where data belongs (and no data file): still the query's own error, not a silent swap
    code, _, err = call(capsys, command, tmp_path / "g.dag", "P(y | do(x))", "P(y | x)", *opts)
    assert code != 0 and "deprecated" not in err


def test_experiments_surrogates_are_exact():
    from icmlkit.lib.derive_docalc.experiments import experiments, identify_from_experiment

    G = G_(NAPKIN)
    ce = class_estimands(G, parse_query("P(y | do(x))", G))
    s = experiments(ce).summary
    exps = {tuple(e["experiment"]): e for e in s["experiments"]}
    assert s["observationally_identifiable"] and () in exps and ("W1",) in exps and ("X",) in exps
    assert exps[("W1",)]["estimand"] == "P_do{W1}(Y | X)"
    # an experiment on W1 answers P(y | do(x)): P(y | x) in the experiment's distribution, exactly
    scm = DiscreteSCM.random(G, np.random.default_rng(33))
    truth = scm.interventional({"Y"}, {"X"}, set())
    for w in (0, 1):
        P = scm._joint({"W1": w})  # axes W1, W2, X, Y
        pxy = P.sum(axis=(0, 1))
        assert np.abs(pxy / pxy.sum(1, keepdims=True) - truth.T).max() < 1e-10
    # the IV graph: only an experiment on X itself; restricted to the available ones
    Giv = classic("instrumental variable")
    ce = class_estimands(Giv, parse_query("P(y | do(x))", Giv))
    s = experiments(ce).summary
    assert not s["observationally_identifiable"] and [e["experiment"] for e in s["experiments"]] == [["X"]]
    assert experiments(ce, [frozenset({"Z"})]).summary["experiments"] == []
    m = Query(frozenset({"Y"}), frozenset({"X", "Z"}))
    assert identify_from_experiment(Giv, m, frozenset({"Z"})) is None
    assert identify_from_experiment(Giv, m, frozenset({"X"})) is not None


def test_cli_experiments_and_identify_baselines(capsys):
    code, out, err = call(capsys, "experiments", NAPKIN, "P(y | do(x))", "--available", "w2;W1", "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["available"] == [["W2"], ["W1"]] and {tuple(e["experiment"]) for e in s["experiments"]} == {("W1",),
                                                                                                      ("W2",)}
    code, _, err = call(capsys, "experiments", NAPKIN, "P(y | do(x))", "--available", "Q")
    assert code == 2 and "--available" in err and "'Q'" in err
    code, out, err = call(capsys, "identify", "dag { Z -> X -> Y; A; B }", "P(y | do(x))", "--json")
    s = json.loads(out)
    assert code == 0 and s["pruned"] == ["A", "B"] and s["n_expressions"] == s["n_members"] * 9
    assert s["plain_id"] == "P(Y | X, Z)" and s["simplified_id"] == "P(Y | X)" and s["optimal_adjustment_set"] == []
    code, out, err = call(capsys, "equivalents", "dag { X -> Y; A; B; C; D; E; F }", "P(y | do(x))", "--json")
    s = json.loads(out)
    assert code == 0 and s["n_members"] == 2 and s["n_expressions"] == 1458
    code, out, err = call(capsys, "equivalents", "dag { X -> Y; A; B }", "P(y | do(x))", "--no-prune", "--json")
    assert json.loads(out)["n_members"] == 18 and json.loads(out)["pruned"] == []
