"""Tests of icmlkit.lib.solve_maxecc: exact answers (brute force, ILP), the reconstructed roundings'
guarantees on gadgets with a fractional LP, invariants, parsers and round trips."""
from __future__ import annotations

import gzip
import io
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.runtime import generator
from icmlkit.lib.solve_maxecc import (
    Hypergraph,
    brute_force,
    edge_bounds,
    evaluate,
    incident_pairs,
    load_lp,
    local_search,
    lp_argmax,
    majority,
    odd_cycle,
    paired,
    paired_derandomized,
    planted,
    rainbow_cycle,
    read_colouring,
    read_instance,
    save_lp,
    scaled,
    solve,
    solve_ilp,
    solve_lp,
    star,
    threshold_order,
    write_colouring,
    write_instance,
)
from icmlkit.lib.solve_maxecc.solve import SUMMARY_KEYS

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "maxecc"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"real MaxECC data not found at {DATA}")
Z99 = 2.33  # one-sided 99% normal quantile

RANDOMIZED = {"threshold_order": threshold_order, "paired": paired, "scaled": scaled}


def factor(name: str, H: Hypergraph) -> float:
    """The proven (reconstructed) factor of each randomized rounding."""
    return {
        "threshold_order": 1.0 / (H.r + 1),
        "paired": 1.0 / math.ceil(H.k / 2),
        "scaled": (1.0 - math.exp(-H.r)) / H.r,
    }[name]


def random_instance(seed: int, n: int = 7, k: int = 3, m: int = 8, r: int = 3, weighted: bool = True) -> Hypergraph:
    rng = np.random.default_rng(seed)
    edges, colours = [], []
    for _ in range(m):
        s = int(rng.integers(1, r + 1))
        edges.append(rng.choice(n, size=s, replace=False).tolist())
        colours.append(int(rng.integers(0, k)))
    w = rng.integers(1, 4, size=m).astype(float) if weighted else None
    return Hypergraph.from_edges(edges, colours, w, node_ids=list(range(n)), colour_labels=list(range(k)))


def recount(H: Hypergraph, sigma) -> float:
    """Direct Python recount of the satisfied weight (independent of the vectorised code)."""
    total = 0.0
    for e, verts in enumerate(H.edges()):
        if all(sigma[v] == H.colour[e] for v in verts):
            total += H.weight[e]
    return total


# ------------------------------------------------------------------------------ hypergraph
def test_from_edges_relabels_sorted_and_dedups():
    H = Hypergraph.from_edges([[30, 10, 10], [20], [10, 30]], ["b", "a", "b"], [2.0, 1.0, 3.0])
    assert H.node_ids.tolist() == [10, 20, 30]
    assert H.colour_labels.tolist() == ["a", "b"]
    assert H.edges() == [[0, 2], [1], [0, 2]]
    assert H.colour.tolist() == [1, 0, 1]
    assert (H.n, H.m, H.k, H.r) == (3, 3, 2, 2)
    assert H.edge_of.tolist() == [0, 0, 1, 2, 2]
    assert H.total_weight == 6.0


def test_empty_edge_and_bad_weight_rejected():
    with pytest.raises(InputError, match="empty"):
        Hypergraph.from_edges([[1, 2], []], [0, 1])
    with pytest.raises(InputError, match="positive"):
        Hypergraph.from_edges([[1, 2]], [0], [0.0])


# ------------------------------------------------------------------------------ evaluate
@pytest.mark.parametrize("seed", range(5))
def test_evaluate_matches_python_recount(seed):
    H = random_instance(seed)
    rng = np.random.default_rng(100 + seed)
    sig = rng.integers(-2, H.k, size=(20, H.n))
    values, counts = evaluate(H, sig)
    for t in range(20):
        assert values[t] == pytest.approx(recount(H, sig[t]))
        assert counts[t] == sum(all(sig[t][v] == H.colour[e] for v in verts) for e, verts in enumerate(H.edges()))
    v1, _ = evaluate(H, sig[3])
    assert v1 == pytest.approx(values[3])


# ------------------------------------------------------------------------------ exactness
@pytest.mark.parametrize("seed", range(12))
def test_small_random_instances_against_brute_force(seed):
    H = random_instance(seed, n=6 + seed % 3, k=2 + seed % 2)
    opt, opt_sigma = brute_force(H)
    assert recount(H, opt_sigma) == pytest.approx(opt)
    lp = solve_lp(H)
    assert lp.optimal
    assert opt <= lp.value + 1e-7
    assert solve_ilp(H, time_limit=30).value == pytest.approx(opt)
    for name, fn in RANDOMIZED.items():
        r = fn(H, lp, 64, generator(seed))
        assert r.values.max() <= opt + 1e-9, name
        assert r.value == pytest.approx(recount(H, r.sigma))
    for r in (majority(H), lp_argmax(H, lp), paired_derandomized(H, lp)):
        assert r.value <= opt + 1e-9
        assert r.value == pytest.approx(recount(H, r.sigma))
    # Algorithm 2's derandomisation is deterministic and >= LP / ceil(k/2).
    assert paired_derandomized(H, lp).value >= lp.value / math.ceil(H.k / 2) - 1e-9
    # The Poissonised analysis implies OPT >= LP / r (integrality gap at most r).
    assert opt >= lp.value / H.r - 1e-9


def brute_force_dense(H):
    """A second, loop-based brute force (cross-checks the vectorised one)."""
    best = -1.0
    for sig in itertools.product(range(H.k), repeat=H.n):
        best = max(best, recount(H, sig))
    return best


def test_brute_force_matches_itertools():
    H = random_instance(7, n=6, k=3)
    assert brute_force(H)[0] == pytest.approx(brute_force_dense(H))
    with pytest.raises(UsageError):
        brute_force(random_instance(0, n=30, k=3))


@pytest.mark.parametrize("seed", range(4))
def test_two_colours_are_solved_exactly(seed):
    H = planted(40, 2, 4, 120, 0.45, seed=seed, weighted=True)
    lp = solve_lp(H)
    ilp = solve_ilp(H, time_limit=30)
    assert ilp.optimal
    assert lp.value == pytest.approx(ilp.value, abs=1e-6)  # k = 2: the LP is integral
    assert paired_derandomized(H, lp).value == pytest.approx(ilp.value)
    r = paired(H, lp, 200, generator(seed))
    assert np.allclose(r.values, ilp.value)  # every trial, not just the best


def all_optima(H):
    """Every optimal colouring and OPT (itertools; tiny instances)."""
    sig = [np.array(s) for s in itertools.product(range(H.k), repeat=H.n)]
    vals = np.array([recount(H, s) for s in sig])
    return [s for s, v in zip(sig, vals) if v == vals.max()], float(vals.max())


def test_paired_is_exact_for_two_colours_on_a_fractional_optimum():
    """k = 2: with x the average of two optimal colourings (a fractional LP optimum), every trial
    of Algorithm 2 reaches OPT. The instance is built so that the majority fallback is NOT optimal:
    a wrong first stage (e.g. b chosen by x_b >= theta instead of 1 - theta) fails here."""
    from icmlkit.lib.solve_maxecc import incident_pairs
    from icmlkit.lib.solve_maxecc.lp import LPSolution

    # Found by a small search: optima s1 and s2 differ on vertices 0, 1, 3, 4, and colouring
    # those four by majority (keeping vertex 2) is worse than OPT.
    H = Hypergraph.from_edges([[3, 4], [1, 3], [1, 4], [0, 1], [2, 4], [0, 1]], [1, 0, 1, 1, 0, 0])
    optima, opt = all_optima(H)
    s1, s2 = np.array([0, 0, 0, 0, 0]), np.array([1, 1, 0, 1, 1])
    mixed = np.where(s1 != s2, majority(H).sigma, s1)
    assert opt == 3.0 and recount(H, s1) == recount(H, s2) == opt and recount(H, mixed) < opt
    pairs = incident_pairs(H)
    x = ((s1[pairs.pair_v] == pairs.pair_c).astype(float) + (s2[pairs.pair_v] == pairs.pair_c)) / 2
    z = np.minimum.reduceat(x[pairs.of_entry], H.ptr[:-1])
    lp = LPSolution(pairs.pair_v, pairs.pair_c, x, z, float(H.weight @ z), "Optimal", True, 0, 0, "test")
    assert lp.value == pytest.approx(opt) == pytest.approx(solve_lp(H).value)
    r = paired(H, lp, 500, generator(0))
    assert np.allclose(r.values, opt)
    assert paired_derandomized(H, lp).value == opt


# ------------------------------------------------------------------------------ guarantees
GADGETS = {
    "odd_cycle(7)": lambda: odd_cycle(7),
    "star(5)": lambda: star(5),
    "rainbow_cycle(7,7,2)": lambda: rainbow_cycle(7, 7, 2),
    "rainbow_cycle(9,5,3)": lambda: rainbow_cycle(9, 5, 3),
    "rainbow_cycle(5,5,4)": lambda: rainbow_cycle(5, 5, 4),
}


@pytest.mark.parametrize("gadget", list(GADGETS))
def test_gadget_lp_is_fractional(gadget):
    H = GADGETS[gadget]()
    lp = solve_lp(H)
    if H.n * math.log2(H.k) <= 22:
        opt, _ = brute_force(H)
        assert solve_ilp(H, time_limit=30).value == pytest.approx(opt)
    else:
        ilp = solve_ilp(H, time_limit=30)
        assert ilp.optimal
        opt = ilp.value
    assert lp.value > opt + 0.25


@pytest.mark.parametrize("gadget", list(GADGETS))
@pytest.mark.parametrize("name", list(RANDOMIZED))
def test_rounding_factor_on_gadgets(gadget, name):
    H = GADGETS[gadget]()
    lp = solve_lp(H)
    T = 4000
    r = RANDOMIZED[name](H, lp, T, generator(11))
    ratio = r.values / lp.value
    lower = ratio.mean() - Z99 * ratio.std(ddof=1) / math.sqrt(T)
    assert lower >= factor(name, H), (name, gadget, ratio.mean())
    # The proofs' per-edge bounds are sharper than the factors; check them too (upper 99% bound).
    if name in ("scaled", "threshold_order"):
        bound = float((edge_bounds(H, lp)[name] * H.weight).sum()) / lp.value
        upper = ratio.mean() + Z99 * ratio.std(ddof=1) / math.sqrt(T)
        assert upper >= bound, (name, gadget, ratio.mean(), bound)


def test_per_vertex_sampling_would_fail_the_bound_check():
    """Power check: independent per-vertex sampling (the sheet's pitfall: P(sigma(v)=c) = x_{v,c})
    satisfies a rainbow-cycle edge with probability 1/4, and the per-edge-bound check used above
    rejects it, so that check can fail."""
    H = rainbow_cycle(7, 7, 2)
    lp = solve_lp(H)
    rng = np.random.default_rng(0)
    T = 4000
    dense = np.zeros((H.n, H.k))
    dense[lp.pair_v, lp.pair_c] = lp.x
    cum = np.cumsum(dense, axis=1)
    u = rng.random((T, H.n, 1))
    sigma = np.minimum((u > cum[None]).sum(axis=2), H.k - 1)
    values, _ = evaluate(H, sigma)
    ratio = values / lp.value
    upper = ratio.mean() + Z99 * ratio.std(ddof=1) / math.sqrt(T)
    bound = float((edge_bounds(H, lp)["scaled"] * H.weight).sum()) / lp.value
    assert upper < bound
    r = scaled(H, lp, T, generator(0)).values / lp.value
    assert r.mean() + Z99 * r.std(ddof=1) / math.sqrt(T) >= bound


def test_rounding_is_deterministic_given_the_seed():
    H = rainbow_cycle(9, 5, 3)
    lp = solve_lp(H)
    for fn in RANDOMIZED.values():
        a, b = fn(H, lp, 300, generator(5)), fn(H, lp, 300, generator(5))
        assert np.array_equal(a.values, b.values) and np.array_equal(a.sigma, b.sigma)
        c = fn(H, lp, 300, generator(6))
        assert not np.array_equal(a.values, c.values)


# ------------------------------------------------------------------------------ local search
@pytest.mark.parametrize("seed", range(6))
def test_local_search_never_lowers_and_is_a_local_optimum(seed):
    H = planted(60, 4, 4, 150, 0.5, seed=seed, weighted=True)
    rng = np.random.default_rng(seed)
    sigma = rng.integers(0, H.k, size=H.n)
    before, _ = evaluate(H, sigma)
    out, rounds = local_search(H, sigma)
    after, _ = evaluate(H, out)
    assert after >= before - 1e-9
    assert rounds >= 1
    # No single-vertex recolouring improves the result.
    for v in range(H.n):
        for c in range(H.k):
            s2 = out.copy()
            s2[v] = c
            assert recount(H, s2) <= after + 1e-9


def test_local_search_improves_majority_on_rainbow_cycle():
    H = rainbow_cycle(9, 5, 2)
    maj = majority(H).value
    out, _ = local_search(H, majority(H).sigma)
    assert evaluate(H, out)[0] > maj


def test_ilp_warm_start_is_kept_when_optimal():
    H = rainbow_cycle(9, 5, 2)
    opt, sigma = brute_force(H)
    res = solve_ilp(H, time_limit=20, start=sigma)
    assert res.value == pytest.approx(opt) and res.optimal and res.gap == pytest.approx(0.0, abs=1e-9)


def test_exact_mode_never_loses_to_the_heuristic():
    """Issue 57: a time-limited cold MIP can end below the heuristic (here far below); the exact mode
    (solve(ilp=True): rounding + local search, then the MIP warm-started with it) returns the better
    of the two, says which won, and its bound is a proven one."""
    H = planted(1000, 8, 3, 2000, 0.9, seed=0, weighted=True)
    cold = solve_ilp(H, time_limit=0.5)
    res = solve(H, algorithm="best", trials=50, seed=0, ilp=True, ilp_time_limit=0.5)
    s = res.summary
    assert cold.value < s["heuristic_value"]  # the case: the cold MIP loses
    assert s["value"] >= s["heuristic_value"] and s["value"] == pytest.approx(recount(H, res.sigma))
    assert s["value"] == max(s["heuristic_value"], s["ilp_value"] if s["ilp_value"] is not None else -1.0)
    assert s["exact_winner"] == ("mip" if s["value"] > s["heuristic_value"] else "heuristic")
    if s["exact_winner"] == "heuristic":
        assert s["value"] == s["heuristic_value"]
    assert s["value"] <= s["ilp_bound"] <= s["lp_value"] + 1e-6 and s["ilp_gap"] >= 0
    assert s["ilp_gap"] == pytest.approx((s["ilp_bound"] - s["value"]) / s["ilp_bound"])
    # never below the heuristic, solved or not, on the gadgets and a small planted instance
    for G in (rainbow_cycle(9, 5, 2), odd_cycle(7), star(5), planted(60, 4, 3, 150, 0.6, seed=1, weighted=True)):
        g = solve(G, algorithm="best", trials=20, seed=0, ilp=True, ilp_time_limit=10).summary
        assert g["value"] >= g["heuristic_value"] and g["ilp_optimal"] and g["ilp_gap"] == pytest.approx(0, abs=1e-9)
        if G.n <= 12:
            assert g["value"] == pytest.approx(brute_force(G)[0])
    # the start is kept when HiGHS's own incumbent is worse (solve_ilp directly)
    poor = majority(H).sigma
    low = solve_ilp(H, time_limit=0.5, start=res.sigma)
    assert low.value >= s["value"] and low.start_value == pytest.approx(s["value"]) and low.winner in ("mip", "start")
    assert solve_ilp(H, time_limit=0.5, start=poor).value >= evaluate(H, poor)[0]


def test_majority_and_lp_argmax_baselines():
    H = Hypergraph.from_edges([[1, 2], [2, 3], [2, 4], [5]], [0, 1, 1, 0], node_ids=[1, 2, 3, 4, 5, 6])
    sig = majority(H).sigma
    assert sig.tolist() == [0, 1, 1, 1, 0, 0]  # vertex 2: colour 1 (weight 2); 6 isolated -> 0
    lp = solve_lp(H)
    assert lp_argmax(H, lp).value == pytest.approx(lp.value)


# ------------------------------------------------------------------------------ facade
def test_solve_summary_keys_and_best():
    H = rainbow_cycle(9, 5, 2)
    res = solve(H, algorithm="best", trials=50, seed=0, local_search=True, ilp=True, ilp_time_limit=20)
    assert set(SUMMARY_KEYS) <= set(res.summary)
    s = res.summary
    assert s["value"] == pytest.approx(recount(H, res.sigma))
    assert s["value"] >= max(s["values"].values()) - 1e-9
    assert s["ilp_value"] == pytest.approx(brute_force(H)[0]) and s["value"] == pytest.approx(s["ilp_value"])
    assert s["value"] <= s["ilp_bound"] + 1e-9 <= s["lp_value"] + 1e-9 and s["exact_winner"] in ("mip", "heuristic")
    only = solve(H, algorithm="majority")
    assert only.summary["lp_value"] is None and only.summary["value"] == majority(H).value
    with pytest.raises(UsageError):
        solve(H, algorithm="nope")


# ------------------------------------------------------------------------------ formats
def test_text_parser_and_errors(tmp_path):
    p = tmp_path / "h.txt"
    p.write_text("# comment\n5,7 2\n\n7,9,5 1 2.5\n9 2\n")
    H = read_instance(p)
    assert H.node_ids.tolist() == [5, 7, 9] and H.colour_labels.tolist() == [1, 2]
    assert H.edges() == [[0, 1], [0, 1, 2], [2]] and H.weight.tolist() == [1.0, 2.5, 1.0]
    cases = {
        "1,2 1\n3,4\n": (2, "missing colour"),
        "1,2 1\n1,x 2\n": (2, "not an integer"),
        "1,2 1\n\n1,3 2 abc\n": (3, "not a number"),
        "1,2 1\n1,,3 2\n": (2, "empty"),
        "1,2 1\n1,3 2 -1\n": (2, "positive"),
    }
    for text, (line, msg) in cases.items():
        p.write_text(text)
        with pytest.raises(InputError, match=msg) as exc:
            read_instance(p)
        assert exc.value.line == line and str(p) in str(exc.value)
    p.write_text("# nothing\n\n")
    with pytest.raises(InputError, match="no edges"):
        read_instance(p)


def test_jsonl_parser_and_errors(tmp_path):
    p = tmp_path / "h.jsonl"
    p.write_text('{"nodes": ["a", "b"], "color": "x"}\n{"nodes": ["b"], "colour": "y", "weight": 3}\n')
    H = read_instance(p)
    assert H.node_ids.tolist() == ["a", "b"] and H.weight.tolist() == [1.0, 3.0]
    cases = {
        '{"nodes": [1], "colour": 1}\n{"nodes": [1, 2]\n': (2, "not valid JSON"),
        '{"nodes": [1], "colour": 1}\n{"nodes": [], "colour": 1}\n': (2, "empty"),
        '{"nodes": [1, 2]}\n': (1, "colour"),
        '{"nodes": [1], "colour": 1, "weight": "heavy"}\n': (1, "not a number"),
    }
    for text, (line, msg) in cases.items():
        p.write_text(text)
        with pytest.raises(InputError, match=msg) as exc:
            read_instance(p)
        assert exc.value.line == line


def test_gzip_and_stdin(tmp_path, monkeypatch):
    p = tmp_path / "h.txt.gz"
    with gzip.open(p, "wt") as fh:
        fh.write("1,2 1\n2,3 2\n")
    assert read_instance(p).m == 2
    monkeypatch.setattr("sys.stdin", io.StringIO("1,2 1\n"))
    assert read_instance("-").m == 1


@pytest.mark.parametrize("ext", [".txt", ".jsonl"])
@pytest.mark.parametrize("weighted", [False, True])
def test_instance_round_trip(tmp_path, ext, weighted):
    H = planted(30, 4, 4, 50, 0.3, seed=3, weighted=weighted)
    H = Hypergraph.from_csr(H.ptr, H.node_ids[H.nodes] * 7 + 100, H.colour_labels[H.colour] + 1, H.weight)
    p = tmp_path / f"out{ext}"
    write_instance(p, H)
    G = read_instance(p)
    for f in ("ptr", "nodes", "colour", "weight", "node_ids", "colour_labels"):
        assert np.array_equal(getattr(G, f), getattr(H, f)), f


def test_colouring_round_trip_and_errors(tmp_path):
    H = Hypergraph.from_edges([[10, 20], [20, 30]], ["red", "blue"], node_ids=[10, 20, 30, 40])
    sigma = np.array([1, 0, -1, 1])
    p = tmp_path / "c.csv"
    write_colouring(p, H, sigma)
    assert p.read_text().splitlines()[:3] == ["vertex,colour", "10,red", "20,blue"]
    assert read_colouring(p, H).tolist() == sigma.tolist()
    p.write_text("vertex,colour\n10,red\n20,\n")
    assert read_colouring(p, H).tolist() == [1, -1, -1, -1]
    p.write_text("vertex,colour\n10,red\n20,green\n")  # a colour the instance lacks: a typo, refused
    with pytest.raises(InputError, match="'green' is not a colour of the instance") as exc:
        read_colouring(p, H)
    assert exc.value.line == 3
    p.write_text("vertex,colour\n10,red\n99,red\n")
    with pytest.raises(InputError, match="not in the instance") as exc:
        read_colouring(p, H)
    assert exc.value.line == 3


def test_lp_save_load(tmp_path):
    H = rainbow_cycle(5, 5, 3)
    lp = solve_lp(H)
    p = tmp_path / "lp.npz"
    save_lp(p, lp)
    back = load_lp(p, H)
    assert np.array_equal(back.x, lp.x) and back.value == lp.value and back.optimal
    with pytest.raises(InputError, match="pairs"):
        load_lp(p, rainbow_cycle(7, 5, 3))
    keep = dict(np.load(p))

    def tampered(**changes):
        np.savez(p, **{**keep, **changes})
        return p

    pairs_of_0 = np.flatnonzero(keep["pair_v"] == 0)
    x = keep["x"].copy()
    x[pairs_of_0] = 1.0  # vertex 0 takes every one of its colours at once
    with pytest.raises(InputError, match=r"infeasible LP: sum_c x"):
        load_lp(tampered(x=x), H)
    with pytest.raises(InputError, match="infeasible LP: z of edge"):
        load_lp(tampered(x=np.zeros_like(keep["x"])), H)
    with pytest.raises(InputError, match="is not w.z"):
        load_lp(tampered(value=np.float64(keep["value"] + 1.0)), H)


def test_local_search_summary_keeps_both_values():
    """-a best --local-search: `values` are the roundings' own values, `value` the searched one,
    and `value_before_local_search` says which of them it started from."""
    H = rainbow_cycle(9, 5, 2)
    res = solve(H, algorithm="majority", local_search=True).summary
    assert res["value_before_local_search"] == majority(H).value
    assert res["value"] > res["value_before_local_search"]  # the rainbow cycle is improvable
    best = solve(H, algorithm="best", trials=20, seed=0, local_search=True).summary
    assert best["value_before_local_search"] == best["values"][best["winner"]]
    assert "value_before_local_search" not in solve(H, algorithm="best", trials=20).summary


# ------------------------------------------------------------------------------ real data
@pytest.mark.slow
@needs_data
def test_brain_is_solved_exactly():
    H = read_instance(DATA / "Brain" / "original_data")
    assert (H.n, H.m, H.k, H.r) == (638, 21180, 2, 2)
    lp = solve_lp(H)
    assert lp.value == pytest.approx(13626, abs=1e-6)
    assert majority(H).value == 13531
    assert paired_derandomized(H, lp).value == 13626
    assert threshold_order(H, lp, 20, generator(0)).value == 13626


@pytest.mark.slow
@needs_data
def test_dawn_and_mag_parse():
    H = read_instance(DATA / "DAWN" / "colored-DAWN.txt")
    assert (H.n, H.m, H.k, H.r) == (2109, 87104, 10, 22)
    assert majority(H).value == 42115
    G = read_instance(DATA / "MAG-10" / "colored-MAG.txt")
    assert (G.n, G.m, G.k, G.r) == (80198, 51889, 10, 25)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_matches_cpu_bit_for_bit():
    H = rainbow_cycle(9, 5, 3)
    lp = solve_lp(H)
    for fn in RANDOMIZED.values():
        a = fn(H, lp, 500, generator(3), device="cpu")
        b = fn(H, lp, 500, generator(3), device="cuda")
        assert np.array_equal(a.values, b.values) and np.array_equal(a.sigma, b.sigma)
    s_cpu, _ = local_search(H, majority(H).sigma, device="cpu")
    s_gpu, _ = local_search(H, majority(H).sigma, device="cuda")
    assert np.array_equal(s_cpu, s_gpu)


@pytest.mark.parametrize("seed", range(4))
def test_row_generation_matches_the_full_lp(seed):
    """rowgen (the default) must reach the optimum of the full model and satisfy all its rows."""
    H = planted(n=120, k=5, r=4, m=400, noise=0.8, seed=seed, weighted=True)
    full = solve_lp(H, method="simplex")
    rg = solve_lp(H, method="rowgen")
    assert rg.method == "rowgen" and rg.optimal
    assert rg.value == pytest.approx(full.value, rel=1e-9)
    pairs = incident_pairs(H)
    assert np.all(rg.z[H.edge_of] <= rg.x[pairs.of_entry] + 1e-9)
    assert np.all(np.bincount(pairs.pair_v, weights=rg.x, minlength=H.n) <= 1 + 1e-9)


# ------------------------------------------------------------------------------ exact expectations
from icmlkit.lib.solve_maxecc.exact import adversarial_search, exact_edge_probabilities  # noqa: E402


def _random_small(seed: int, n: int = 7, m: int = 9, k: int = 4, r: int = 3) -> Hypergraph:
    rng = np.random.default_rng(seed)
    edges = [sorted(rng.choice(n, size=int(rng.integers(2, r + 1)), replace=False).tolist()) for _ in range(m)]
    return Hypergraph.from_edges(edges, rng.integers(k, size=m).tolist(), np.exp(rng.normal(size=m)),
                                 node_ids=list(range(n)), colour_labels=list(range(k)))


@pytest.mark.parametrize("name", ["scaled", "threshold_order"])
@pytest.mark.parametrize("gadget", ["rainbow_cycle(7,7,2)", "rainbow_cycle(9,5,3)", "star(5)"])
def test_exact_expectation_equals_the_sampled_mean(gadget, name):
    H = GADGETS[gadget]()
    lp = solve_lp(H)
    exact = float(exact_edge_probabilities(H, lp, name.replace("_", "-")) @ H.weight)
    v = RANDOMIZED[name](H, lp, 8000, generator(5)).values
    half = 3.3 * v.std(ddof=1) / math.sqrt(len(v)) + 1e-12  # two-sided 99.9 %
    assert abs(v.mean() - exact) <= half, (gadget, name, v.mean(), exact)


@pytest.mark.parametrize("seed", range(6))
def test_exact_scaled_meets_the_per_edge_bound_and_one_over_r(seed):
    """The theorem of docs/solve-maxecc.md: P(e) >= z/(z + r_e(1 - z)) >= z/r on every edge."""
    H = _random_small(seed)
    lp = solve_lp(H)
    p = exact_edge_probabilities(H, lp, "scaled")
    b = edge_bounds(H, lp)
    z, r_e = b["z"], H.sizes
    assert np.all(p >= b["scaled"] - 1e-12)
    assert np.all(p >= z / (z + r_e * (1 - z)) - 1e-12)
    assert float(p @ H.weight) >= lp.value / H.r - 1e-12
    # threshold-order's per-edge bound z / (1 + S_e) holds too
    assert np.all(exact_edge_probabilities(H, lp, "threshold-order") >= b["threshold_order"] - 1e-12)


def test_star_attains_the_per_edge_bound_exactly():
    """On star(k) every rim vertex splits between the spoke and the rim colour, and the bound
    z / R_e is attained exactly: the analysis of scaled is tight edge by edge."""
    H = star(5)
    lp = solve_lp(H)
    p = exact_edge_probabilities(H, lp, "scaled")
    assert p == pytest.approx(edge_bounds(H, lp)["scaled"], abs=1e-12)


def test_exact_probability_by_hand():
    """An edge {a, b} of colour 0 with x_a = (0.5, 0.5, 0), x_b = (0.25, 0, 0.75): first c-arrival
    rates; solved by hand: P(U={a,b}) = [0.25 * 1 + 0.25 * P({b})] / (0.5 + 0.5 + 0.75),
    P({b}) = 0.25 / (0.25 + 0.75)."""
    from icmlkit.lib.solve_maxecc.exact import _scaled_edge

    xe = np.array([[0.5, 0.5, 0.0], [0.25, 0.0, 0.75]])
    want = (0.25 * 1 + 0.25 * (0.25 / 1.0)) / 1.75
    assert _scaled_edge(xe, 0, np.array([1, 2])) == pytest.approx(want, abs=1e-15)


def test_adversarial_search_finds_nothing_below_one_over_r():
    for r in (2, 3):
        res = adversarial_search("scaled", r=r, n=7, k=4, m=10, restarts=2, steps=40, seed=r,
                                 starts=[star(3)] if r == 3 else [odd_cycle(5)])
        assert res.min_ratio >= 1 / r
        assert res.min_ratio < 1.0  # it did find a fractional instance
    # a power check: the search does lower the ratio from its random starts
    res = adversarial_search("threshold-order", r=2, n=6, k=4, m=10, restarts=3, steps=40, seed=0)
    assert any(end < start - 0.01 for start, end in res.history)
    assert res.min_ratio == min(end for _, end in res.history) and res.min_ratio >= 1 / 3


def test_exact_refuses_large_edges():
    H = Hypergraph.from_edges([list(range(13))], [0])
    with pytest.raises(UsageError, match="at most 12"):
        exact_edge_probabilities(H, solve_lp(H))


# ------------------------------------------------------------------------------ MinECC
from icmlkit.lib.solve_maxecc.minecc import combinatorial, min_factors, veldt_threshold  # noqa: E402


@pytest.mark.parametrize("seed", range(8))
def test_minecc_baselines_keep_their_factors(seed):
    """Veldt's threshold rounding: E[cost] <= factor (W - LP); the combinatorial algorithm:
    cost <= 2 OPT and its certificate <= OPT (brute-forced optimum)."""
    H = _random_small(seed, n=7, m=10, k=3, r=3 if seed % 2 else 2)
    lp = solve_lp(H)
    opt_max, _ = brute_force(H)
    opt_min, lp_min = H.total_weight - opt_max, H.total_weight - lp.value
    v = veldt_threshold(H, lp, 4000, generator(seed)).values
    cost = H.total_weight - v
    f = min_factors(H.r, H.k)
    assert cost.mean() - Z99 * cost.std(ddof=1) / math.sqrt(len(cost)) <= f["veldt-threshold"] * lp_min + 1e-9
    comb = combinatorial(H)
    assert H.total_weight - comb.value <= 2 * opt_min + 1e-9
    assert comb.min_lower_bound <= opt_min + 1e-9


def test_combinatorial_on_a_conflict_triangle():
    """Three edges of three colours through one vertex, weights 1, 2, 4: the 4-edge absorbs the
    other two (mass 3 <= 4): cost 3 = OPT, certificate 3, the 4-edge satisfied."""
    H = Hypergraph.from_edges([[0, 1], [0, 2], [0, 3]], [0, 1, 2], [1.0, 2.0, 4.0])
    r = combinatorial(H)
    assert r.value == 4.0 and r.min_lower_bound == 3.0
    # no colour holds half of the mass: every edge at the vertex is zeroed, certificate T/2
    H = Hypergraph.from_edges([[0, 1], [0, 2], [0, 3]], [0, 1, 2], [1.0, 1.0, 1.0])
    r = combinatorial(H)
    assert r.min_lower_bound == 1.5 and H.total_weight - r.value <= 2 * 2.0


def test_score_colouring_both_objectives_and_labels():
    from icmlkit.lib.solve_maxecc import score_colouring

    H, truth = planted(200, 4, 3, 400, 0.2, seed=1, with_labels=True)
    lp = solve_lp(H)
    sigma = lp_argmax(H, lp).sigma
    s = score_colouring(H, sigma, truth)
    assert s["value"] + s["unsatisfied_weight"] == pytest.approx(H.total_weight)
    assert 0.5 < s["ari"] <= 1.0 and 0.5 < s["nmi"] <= 1.0
    assert score_colouring(H, truth, truth)["ari"] == pytest.approx(1.0)


# ------------------------------------------------------------------------------ first-order LP
from icmlkit.lib.solve_maxecc.pdhg import solve_lp_pdhg  # noqa: E402


@pytest.mark.parametrize("seed,dtype", [(0, torch.float32), (1, torch.float32), (2, torch.float32), (0, torch.float64)])
def test_pdhg_dual_bound_is_valid_and_primal_feasible(seed, dtype):
    """float32 iterations (the default) certify in float64: the bounds hold as for float64."""
    H = planted(400, 5, 3, 900, 0.85, seed=seed, weighted=True)
    ref = solve_lp(H)
    sol, info = solve_lp_pdhg(H, tol=1e-4, dtype=dtype)
    assert info.relative_gap <= 1e-4
    assert info.upper_bound >= ref.value - 1e-9  # weak duality: never below the optimum
    assert sol.value <= ref.value + 1e-9 and sol.value >= ref.value * (1 - 1e-4) - 1e-9
    pairs = incident_pairs(H)
    assert np.bincount(pairs.pair_v, weights=sol.x, minlength=H.n).max() <= 1 + 1e-12
    assert np.all(sol.z[H.edge_of] <= sol.x[pairs.of_entry] + 1e-12)
    assert float(H.weight @ sol.z) == pytest.approx(sol.value)


def test_highs_at_a_loose_tolerance():
    """ipm at 1e-4 without crossover (the benchmark's equal-accuracy peer) lands near the optimum;
    a tolerance for a method that has none is a usage error."""
    H = planted(400, 5, 3, 900, 0.85, seed=0, weighted=True)
    ref = solve_lp(H)
    loose = solve_lp(H, method="ipm", tolerance=1e-4)
    assert ref.value * (1 - 1e-3) <= loose.value <= ref.value + 1e-6
    with pytest.raises(UsageError):
        solve_lp(H, method="rowgen", tolerance=1e-4)


def test_pdhg_early_stop_still_certifies():
    """Stopped after 64 iterations, far from optimal: the interval [value, upper_bound] still
    contains the optimum (the certificate does not depend on convergence)."""
    H = planted(400, 5, 3, 900, 0.85, seed=0, weighted=True)
    ref = solve_lp(H)
    sol, info = solve_lp_pdhg(H, tol=1e-12, max_iter=64)
    assert info.relative_gap > 1e-4
    assert sol.value - 1e-9 <= ref.value <= info.upper_bound + 1e-9


def test_pdhg_through_solve_and_save(tmp_path):
    from icmlkit.lib.solve_maxecc import load_lp, save_lp, solve as solve_instance

    H = rainbow_cycle(9, 5, 3)
    res = solve_instance(H, algorithm="scaled", trials=50, lp_method="pdhg")
    assert res.lp.method == "pdhg" and res.lp.upper_bound >= 4.5 - 1e-9
    save_lp(tmp_path / "l.npz", res.lp)
    assert load_lp(tmp_path / "l.npz", H).upper_bound == pytest.approx(res.lp.upper_bound)
