"""solve-decentralized: Chebyshev contraction, planted optimum, exactness against numpy KKT and cvxpy,
the neighbour-only communicator, torch.distributed = simulator, bad inputs, the fuzz check."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fuzzing import DEFAULT_KINDS, FuzzCase, check_malformed, run_inprocess

from icmlkit.lib.core.errors import IcmlkitError

TOOL = "solve-decentralized"


def _mixed(n=3, graph="path", kappa=10.0, seed=1):
    from icmlkit.lib.solve_decentralized.generate import generate

    return generate("mixed", n, graph, seed_rng=np.random.default_rng(seed), kappa=kappa)


def _cli(capsys, *argv):
    code, out, err = run_inprocess(TOOL, [str(a) for a in argv], capsys)
    return code, out, err


def _js(capsys, *argv):
    code, out, err = _cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


# --------------------------------------------------------------------------- numerics


def test_chebyshev_iteration_contracts_at_the_predicted_rate():
    from icmlkit.lib.solve_decentralized.spectral import cheb_eps, chebyshev_solve

    rng = np.random.default_rng(0)
    U, _ = np.linalg.qr(rng.standard_normal((40, 40)))
    ev = np.linspace(1.0, 400.0, 40)            # spectrum of M^T M: [1, 400]
    M = (U * np.sqrt(ev)) @ U.T
    r = rng.standard_normal(40)
    vs = np.linalg.solve(M, r)
    for deg in (2, 5, 10, 20):
        v = chebyshev_solve(lambda v: M.T @ (M @ v - r), np.zeros(40), 1.0, 400.0, deg)
        err = np.linalg.norm(v - vs) / np.linalg.norm(vs)
        eps = cheb_eps(1.0, 400.0, deg)
        assert err <= eps * (1 + 1e-9), (deg, err, eps)
        assert err >= 0.2 * eps                 # and not much better: the bound is the rate
    # the degree-ceil(sqrt(kappa)) polynomial of the method maps the spectrum into about [11/15, 19/15]
    e = cheb_eps(1.0, 400.0, math.ceil(math.sqrt(400.0)))
    assert 1 - e >= 11 / 15 - 1e-3 and 1 + e <= 19 / 15 + 1e-3


def test_wprime_keeps_the_kernel_and_has_the_predicted_spectrum():
    from icmlkit.lib.solve_decentralized.problem import laplacian, make_graph
    from icmlkit.lib.solve_decentralized.spectral import cheb_eps, exact_bounds, wprime_dense

    W = laplacian(12, make_graph("path", 12))
    lmin, lmax = exact_bounds(W)
    k = math.ceil(math.sqrt(lmax / lmin))
    W1 = wprime_dense(W, lmin, lmax, k)
    assert np.abs(W1 @ np.ones(12)).max() < 1e-10
    mu, L = exact_bounds(W1)
    e = cheb_eps(lmin, lmax, k)
    assert 1 - e - 1e-9 <= mu and L <= 1 + e + 1e-9
    assert L / mu < 19 / 11 + 1e-6 < lmax / lmin


def test_planted_optimum_satisfies_K_u_and_kkt():
    from icmlkit.lib.solve_decentralized.methods import NodeOps
    from icmlkit.lib.solve_decentralized.reference import kkt_residual
    from icmlkit.lib.solve_decentralized.spectral import make_setup, wprime_dense

    prob = _mixed(5, "ring")
    s = make_setup(prob)
    W = prob.laplacian()
    x, xt = prob.solution["x"], prob.solution["xt"]
    kkt = kkt_residual(prob, x, xt)
    assert kkt["stationarity"] < 1e-10 and kkt["feasibility"] < 1e-10
    # y* from A x* - b + alpha W' y* = 0, then K u* = b' exactly
    W1 = wprime_dense(W, s.lam_min, s.lam_max, s.deg_w)
    rhs = (prob.b - np.einsum("nmd,nd->nm", prob.A, x)).reshape(-1)
    y = np.linalg.lstsq(s.alpha * np.kron(W1, np.eye(prob.m)), rhs, rcond=None)[0].reshape(prob.n, prob.m)
    u = np.concatenate([x, y, np.repeat(xt[None], prob.n, 0)], 1)
    ops = NodeOps(prob.A, prob.b, prob.C, prob.c, prob.Ct, prob.ct, prob.grad, s, lambda V: W @ V)
    assert np.abs(ops.K(u) - ops.bprime).max() < 1e-10


@pytest.mark.parametrize("method", ["apapc-cheb", "apapc", "centralized", "tracking-admm", "dpmm"])
def test_three_node_run_equals_numpy_kkt(method):
    from icmlkit.lib.solve_decentralized.config import SolveConfig
    from icmlkit.lib.solve_decentralized.reference import reference
    from icmlkit.lib.solve_decentralized.solve import solve

    prob = _mixed(3, "path")
    ref = reference(prob)
    assert ref.summary["planted_error"] < 1e-10
    res = solve(SolveConfig(method=method, tol=1e-9, max_iter=50000), prob, ref=ref)
    assert res.summary["converged"], res.summary
    assert np.abs(res.x - ref.x).max() < 1e-7 and np.abs(res.xt - ref.xt[None]).max() < 1e-7


def test_dpmm_reaches_the_planted_optimum_and_counts_two_rounds_per_iteration():
    from icmlkit.lib.solve_decentralized.config import SolveConfig
    from icmlkit.lib.solve_decentralized.reference import reference
    from icmlkit.lib.solve_decentralized.solve import solve

    prob = _mixed(4, "ring", kappa=10.0, seed=5)
    ref = reference(prob)
    assert ref.summary["planted_error"] < 1e-10
    res = solve(SolveConfig(method="dpmm", tol=1e-8, max_iter=50000), prob, ref=ref)
    s = res.summary
    assert s["converged"] and s["rel_error"] <= 1e-8 and s["constraint_residual"] <= 1e-8, s
    assert np.abs(res.x - prob.solution["x"]).max() < 1e-6
    assert np.abs(res.xt - prob.solution["xt"][None]).max() < 1e-6
    # accounting: one round for K u^0, then K^T (multipliers) and K u+ (residual): 2 rounds per iteration
    k = s["iterations"]
    assert (s["communications"], s["a_mults"], s["prox_calls"], s["grad_calls"]) == (2 * k + 1, 2 * k + 1, k, 0)
    # floats: every round carries the node's coupled + consensus rows (m + p = 7 floats) on each link
    links = 2 * len(prob.edges)
    assert s["floats_sent"] == (2 * k + 1) * (prob.m + prob.p) * links and s["oracle_calls"] == k
    assert all(r["communications"] == 2 * r["iteration"] + 1 for r in res.trace)
    assert res.setup["dpmm_prox"] == "exact" and res.setup["dpmm_c"] * res.setup["dpmm_rho"] * res.setup["L_k"] < 1
    # a fixed iteration count gives exactly the predicted counters, and a tiny penalty does not converge
    fixed = solve(SolveConfig(method="dpmm", iterations=7), prob, ref=ref).summary
    assert (fixed["iterations"], fixed["communications"], fixed["a_mults"]) == (7, 15, 15)
    slow = solve(SolveConfig(method="dpmm", rho=1e-4, tol=1e-8, max_iter=300), prob, ref=ref).summary
    assert not slow["converged"]


def test_dpmm_on_the_counting_communicator_talks_to_neighbours_only():
    from icmlkit.lib.solve_decentralized.dist import run_threads
    from icmlkit.lib.solve_decentralized.methods import NodeOps, dpmm, dpmm_prox
    from icmlkit.lib.solve_decentralized.solve import dpmm_steps
    from icmlkit.lib.solve_decentralized.spectral import make_setup

    prob = _mixed(5, "path")
    s = make_setup(prob, "plain", require_strong=False)
    rho, c = dpmm_steps(s, 30.0, True)
    W = prob.laplacian()
    calls = []

    def mix(V):
        calls.append(V.shape)
        return W @ V

    ops = NodeOps(prob.A, prob.b, prob.C, prob.c, prob.Ct, prob.ct, prob.grad, s, mix)
    u, k = dpmm(ops, rho, c, 20, dpmm_prox(prob, c))
    assert k == 20 and len(calls) == ops.cnt["rounds"] == 41
    out = run_threads(prob, s, 20, dpmm_steps=(rho, c))
    edges = {(int(a), int(b)) for a, b in prob.edges} | {(int(b), int(a)) for a, b in prob.edges}
    assert out["pairs"] == edges and out["collectives_in_loop"] == 0
    assert np.abs(out["u"] - u).max() < 1e-10
    assert out["counters"] == dict(ops.cnt)


def test_dpmm_linearised_on_logistic_consensus():
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    from icmlkit.lib.solve_decentralized.config import SolveConfig
    from icmlkit.lib.solve_decentralized.generate import hfl_logistic
    from icmlkit.lib.solve_decentralized.solve import solve

    rng = np.random.default_rng(3)
    X = sp.random(120, 6, density=0.5, random_state=3, format="csr")
    y = np.where(rng.standard_normal(120) > 0, 1.0, -1.0)
    prob = hfl_logistic(X, y, 4, lam=0.05, graph="ring")
    sk = LogisticRegression(C=1 / (0.05 * 120), fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, y)
    res = solve(SolveConfig(method="dpmm", rho=1.0, tol=1e-8), prob)
    assert res.summary["converged"] and res.setup["dpmm_prox"] == "linearised", res.summary
    assert np.abs(res.xt.mean(0) - sk.coef_[0]).max() < 1e-5


def test_power_iteration_bounds_are_safe_and_converge():
    from icmlkit.lib.solve_decentralized.config import SolveConfig
    from icmlkit.lib.solve_decentralized.solve import solve
    from icmlkit.lib.solve_decentralized.spectral import make_setup

    prob = _mixed(6, "path", kappa=100.0)
    exact, power = make_setup(prob), make_setup(prob, bounds="power")
    assert power.lam_max >= exact.lam_max and power.lam_min <= exact.lam_min <= 1.05 * power.lam_min
    res = solve(SolveConfig(bounds="power", tol=1e-8), prob)
    assert res.summary["converged"] and res.summary["rel_error"] <= 1e-8


def test_consensus_baselines_and_logistic_newton():
    import scipy.sparse as sp

    from icmlkit.lib.solve_decentralized.config import SolveConfig
    from icmlkit.lib.solve_decentralized.generate import hfl_logistic
    from icmlkit.lib.solve_decentralized.solve import solve

    rng = np.random.default_rng(3)
    X = sp.random(120, 6, density=0.5, random_state=3, format="csr")
    y = np.where(rng.standard_normal(120) > 0, 1.0, -1.0)
    prob = hfl_logistic(X, y, 4, lam=0.05, graph="ring")
    from sklearn.linear_model import LogisticRegression

    sk = LogisticRegression(C=1 / (0.05 * 120), fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, y)
    for method in ("apapc-cheb", "extra", "gradient-tracking"):
        res = solve(SolveConfig(method=method, tol=1e-8), prob)
        assert res.summary["converged"], (method, res.summary)
        assert np.abs(res.xt.mean(0) - sk.coef_[0]).max() < 1e-5


def test_apapc_iterations_grow_like_sqrt_kappa():
    from icmlkit.lib.solve_decentralized.config import SolveConfig
    from icmlkit.lib.solve_decentralized.solve import solve

    its = [solve(SolveConfig(tol=1e-6), _mixed(5, "ring", kappa=k)).summary["iterations"] for k in (10.0, 1000.0)]
    slope = math.log(its[1] / its[0]) / math.log(100.0)
    assert 0.3 < slope < 0.7, its


def test_gradient_sliding_on_an_l1_problem_matches_cvxpy():
    pytest.importorskip("cvxpy")
    from icmlkit.lib.solve_decentralized.config import SolveConfig
    from icmlkit.lib.solve_decentralized.reference import reference
    from icmlkit.lib.solve_decentralized.solve import solve

    prob = _mixed(3, "path", kappa=5.0)
    prob.l1 = np.full(3, 0.5)
    prob.solution = None
    ref = reference(prob)            # auto: cvxpy (non-smooth)
    assert ref.summary["method"] == "cvxpy"
    res = solve(SolveConfig(method="sliding", tol=1e-5, max_iter=5000), prob, ref=ref)
    assert res.summary["converged"], res.summary
    assert res.summary["rel_error"] <= 1e-5
    from icmlkit.lib.core.errors import UsageError

    with pytest.raises(UsageError, match="sliding"):
        solve(SolveConfig(method="apapc-cheb"), prob, ref=ref)


# --------------------------------------------------------------------------- communication


def test_counting_communicator_sees_only_neighbours_and_no_collective():
    from icmlkit.lib.solve_decentralized.dist import ThreadComm, ThreadNetwork, run_threads
    from icmlkit.lib.solve_decentralized.methods import NodeOps, apapc
    from icmlkit.lib.solve_decentralized.spectral import make_setup

    prob = _mixed(5, "path")
    s = make_setup(prob)
    W = prob.laplacian()
    ops = NodeOps(prob.A, prob.b, prob.C, prob.c, prob.Ct, prob.ct, prob.grad, s, lambda V: W @ V)
    u, _ = apapc(ops, s, 25)
    out = run_threads(prob, s, 25)
    edges = {(int(a), int(b)) for a, b in prob.edges} | {(int(b), int(a)) for a, b in prob.edges}
    assert out["pairs"] <= edges and out["pairs"] == edges
    assert out["collectives_in_loop"] == 0
    assert np.abs(out["u"] - u).max() < 1e-10
    assert out["counters"] == dict(ops.cnt)
    # the communicator itself refuses what the algorithm must never do
    net = ThreadNetwork(prob)
    comm = ThreadComm(net, 0)
    with pytest.raises(IcmlkitError, match="non-neighbour"):
        net.send(0, 4, np.zeros((1, 2)))
    comm.in_loop = True
    with pytest.raises(IcmlkitError, match="all_reduce"):
        comm.all_reduce(1.0)


def test_two_gloo_processes_equal_the_simulator(monkeypatch):
    import torch.distributed as dist

    from icmlkit.lib.solve_decentralized.dist import run_dist
    from icmlkit.lib.solve_decentralized.methods import NodeOps, apapc
    from icmlkit.lib.solve_decentralized.spectral import make_setup

    prob = _mixed(2, "path")
    s = make_setup(prob)
    W = prob.laplacian()
    ops = NodeOps(prob.A, prob.b, prob.C, prob.c, prob.Ct, prob.ct, prob.grad, s, lambda V: W @ V)
    u, _ = apapc(ops, s, 30)

    def forbidden(*a, **k):
        raise RuntimeError("collective inside the loop")

    # the workers are forked: a collective anywhere in the loop would raise there
    for name in ("all_reduce", "all_gather", "broadcast", "reduce"):
        monkeypatch.setattr(dist, name, forbidden)
    out = run_dist(prob, s, 30)
    assert np.abs(out["u"] - u).max() < 1e-10
    assert out["counters"] == dict(ops.cnt)


# --------------------------------------------------------------------------- the executable


@pytest.fixture
def problem_dir(tmp_path, capsys):
    out = tmp_path / "p"
    _js(capsys, "generate", "mixed", "--graph", "ring", "--n-nodes", 4, "-o", out)
    return out


def test_generate_solve_reference_through_the_cli(problem_dir, tmp_path, capsys):
    spec = problem_dir / "problem.json"
    ref = _js(capsys, "reference", spec, "-o", tmp_path / "ref.npz")
    assert ref["planted_error"] < 1e-10
    s = _js(capsys, "solve", spec, "-o", tmp_path / "sol.npz", "--trace", tmp_path / "tr.csv",
            "--setup", tmp_path / "setup.json")
    for key in ("method", "backend", "n_nodes", "chi", "kappa_f", "kappa_ac", "kappa_ct", "iterations",
                "communications", "a_mults", "grad_calls", "rel_error", "constraint_residual", "converged", "seconds",
                "floats_sent", "prox_calls", "local_solves", "oracle_calls"):
        assert key in s
    assert s["converged"] and s["rel_error"] <= 1e-6 and s["constraint_residual"] <= 1e-6
    sol = np.load(tmp_path / "sol.npz")
    r = np.load(tmp_path / "ref.npz")
    assert np.abs(sol["x"] - r["x"]).max() < 1e-4
    lines = (tmp_path / "tr.csv").read_text().splitlines()
    assert lines[0].startswith("iteration,communications,a_mults,grad_calls,rel_error")
    assert len(lines) == s["iterations"] + 1
    setup = json.loads((tmp_path / "setup.json").read_text())
    assert setup["deg_w"] == math.ceil(math.sqrt(setup["chi"]))
    # the same seed gives the same bytes
    _js(capsys, "solve", spec, "-o", tmp_path / "sol2.npz")
    assert (tmp_path / "sol.npz").read_bytes() == (tmp_path / "sol2.npz").read_bytes()


def test_require_converged_exits_3_and_usage_errors_exit_2(problem_dir, tmp_path, capsys):
    spec = problem_dir / "problem.json"
    code, _, err = _cli(capsys, "solve", spec, "--max-iter", 3, "--require-converged", "-o", tmp_path / "s.npz")
    assert code == 3 and "not converged" in err and (tmp_path / "s.npz").exists()
    # EXTRA on a constrained problem runs on the dual (one round per iteration)
    s = _js(capsys, "solve", spec, "-m", "extra", "--iterations", 5)
    assert s["communications"] == 5 and s["local_solves"] == 5 and s["grad_calls"] == 0
    code, _, err = _cli(capsys, "solve", spec, "-m", "dpmm", "--backend", "dist")
    assert code == 2 and "simulator" in err
    s = _js(capsys, "solve", spec, "-m", "dpmm", "--rho", 30)
    assert s["method"] == "dpmm" and s["converged"] and s["communications"] == 2 * s["iterations"] + 1
    code, _, err = _cli(capsys, "launch", spec, "--nproc", 3)
    assert code == 2 and "--nproc" in err
    code, _, err = _cli(capsys, "solve", spec, "--backend", "dist", "-m", "tracking-admm")
    assert code == 2


def _edit_node(folder, i, **changes):
    p = folder / f"problem_node{i}.npz"
    z = dict(np.load(p))
    z.update(changes)
    np.savez(p, **z)


@pytest.mark.parametrize("breakage, expect", [
    ("shape", "node 2: matrix A has shape"),
    ("disconnected", "disconnected"),
    ("infeasible", "node 1: C x = c is infeasible"),
    ("nonconvex", "node 0: matrix Q is not positive semi-definite"),
])
def test_bad_problems_exit_1_naming_file_node_and_matrix(problem_dir, tmp_path, capsys, breakage, expect):
    spec = problem_dir / "problem.json"
    if breakage == "shape":
        _edit_node(problem_dir, 2, A=np.ones((2, 5)))
    elif breakage == "disconnected":
        (problem_dir / "problem_graph.csv").write_text("source,target\n0,1\n2,3\n")
    elif breakage == "infeasible":
        _edit_node(problem_dir, 1, C=np.ones((2, 5)), c=np.array([1.0, 2.0]))
    else:
        _edit_node(problem_dir, 0, Q=-np.eye(9))
    code, out, err = _cli(capsys, "solve", spec, "-o", tmp_path / "s.npz")
    assert code == 1 and expect in err and err.startswith("Error:") and err.count("\n") == 1, err
    assert not (tmp_path / "s.npz").exists()


def test_libsvm_reader_is_sparse_and_feeds_from_libsvm(tmp_path, capsys):
    import scipy.sparse as sp

    from icmlkit.lib.solve_decentralized.problem import read_libsvm

    f = tmp_path / "d.t"
    f.write_text("-1 1:1 3:0.5\n+1 2:1 5:2\n-1 4:1\n+1 1:1 5:1\n")
    X, y = read_libsvm(f)
    assert sp.issparse(X) and X.shape == (4, 5) and X.nnz == 7 and list(y) == [-1, 1, -1, 1]
    s = _js(capsys, "from-libsvm", f, "--nodes", 2, "--graph", "path", "-o", tmp_path / "lib")
    assert s["features"] == 5
    r = _js(capsys, "solve", tmp_path / "lib" / "problem.json", "-m", "gradient-tracking")
    assert r["converged"]


def _sparse_binary(N=80, f=12, seed=3):
    """An a9a-like sparse 0/1 design and +-1 labels from a planted logistic model."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    X = sp.random(N, f, density=0.3, random_state=rng, data_rvs=lambda k: np.ones(k), format="csr")
    y = np.where(rng.random(N) < 1 / (1 + np.exp(-(X @ rng.normal(size=f)))), 1.0, -1.0)
    return X, y


def test_vfl_logistic_keeps_a_sparse_and_matches_hfl_and_scikit_learn():
    from sklearn.linear_model import LogisticRegression

    from icmlkit.lib.solve_decentralized.config import SolveConfig
    from icmlkit.lib.solve_decentralized.generate import hfl_logistic, vfl_logistic
    from icmlkit.lib.solve_decentralized.problem import SparseStack
    from icmlkit.lib.solve_decentralized.reference import reference
    from icmlkit.lib.solve_decentralized.solve import solve

    X, y = _sparse_binary()
    lam = 0.05
    vfl = vfl_logistic(X, y, 3, lam, "path", rng=np.random.default_rng(0))
    assert vfl.sparse and isinstance(vfl.A, SparseStack) and vfl.lam.shape == (3, vfl.dmax)
    blocks = vfl.meta["blocks"]
    ref = reference(vfl)
    w = np.concatenate([ref.x[i, :len(b)] for i, b in enumerate(blocks)])
    sk = LogisticRegression(C=1 / (lam * X.shape[0]), fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, y)
    assert np.abs(w - sk.coef_[0]).max() < 1e-5
    # the horizontal split of the same data has the same model
    hfl = reference(hfl_logistic(X.toarray(), y, 4, lam, "ring", rng=np.random.default_rng(0)))
    assert np.abs(w - hfl.xt).max() < 1e-8
    res = solve(SolveConfig(method="apapc-cheb", tol=1e-6), vfl, ref=ref)
    assert res.summary["converged"] and res.summary["rel_error"] <= 1e-6
    assert res.setup["bounds"] == "exact+lanczos" and res.setup["kappa_f"] is None
    for method in ("tracking-admm", "extra", "centralized"):
        with pytest.raises(Exception, match="sparse"):
            solve(SolveConfig(method=method), vfl, ref=ref)


def test_from_libsvm_features_round_trips_csr_a_and_refuses_bad_csr(tmp_path, capsys):
    X, y = _sparse_binary(N=40, f=9)
    f = tmp_path / "d.t"
    f.write_text("".join(f"{int(l):+d} " + " ".join(f"{j + 1}:{v:g}" for j, v in zip(r.indices, r.data)) + "\n"
                         for l, r in zip(y, X)))
    s = _js(capsys, "from-libsvm", f, "--split", "features", "--nodes", 3, "--graph", "path", "--lam", 0.05,
            "--n-features", 9, "-o", tmp_path / "v")
    assert s["split"] == "features" and s["z_scale"] > 0
    z = np.load(tmp_path / "v" / "problem_node0.npz")
    assert "A_data" in z and "A" not in z and tuple(z["A_shape"]) == (40, 3 + 40)
    spec = tmp_path / "v" / "problem.json"
    ref = _js(capsys, "reference", spec, "-o", tmp_path / "ref.npz")
    assert ref["method"] == "newton" and ref["kkt_stationarity"] < 1e-8
    r = _js(capsys, "solve", spec, "--tol", 1e-6, "-o", tmp_path / "s.npz", "--setup", tmp_path / "setup.json")
    assert r["converged"] and r["kappa_f"] is None and r["predicted_communications"] is None
    code, _, err = _cli(capsys, "solve", spec, "-m", "tracking-admm")
    assert code == 2 and "sparse" in err
    code, _, err = _cli(capsys, "from-libsvm", f, "--z-scale", 2.0, "-o", tmp_path / "h")
    assert code == 2 and "--z-scale" in err
    z1 = np.load(tmp_path / "v" / "problem_node1.npz")
    _edit_node(tmp_path / "v", 1, A_indices=np.full_like(z1["A_indices"], 99))   # column 99 of 3
    code, _, err = _cli(capsys, "solve", spec, "-o", tmp_path / "bad.npz")
    assert code == 1 and "problem_node1.npz" in err and "node 1: matrix A (CSR parts) is malformed" in err, err
    assert err.count("\n") == 1 and not (tmp_path / "bad.npz").exists()


def test_from_sklearn_hfl_and_vfl_ridge_match_scikit_learn(tmp_path, capsys):
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler

    X, y = load_diabetes(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    sk = Ridge(alpha=1.0).fit(X, y)
    s = _js(capsys, "from-sklearn", "diabetes", "--split", "samples", "--nodes", 4, "-o", tmp_path / "h")
    assert (s["samples"], s["features"], s["m"]) == (442, 10, 0)
    r = _js(capsys, "solve", tmp_path / "h" / "problem.json", "--tol", 1e-9, "-o", tmp_path / "h.npz")
    assert r["converged"]
    xt = np.load(tmp_path / "h.npz")["xt"]
    assert np.abs(xt[:10] - sk.coef_).max() < 1e-5 * np.abs(sk.coef_).max() and abs(xt[10] - sk.intercept_) < 1e-5
    # by feature blocks: the VFL formulation's optimum (reference) is scikit-learn's Ridge
    s = _js(capsys, "from-sklearn", "diabetes", "--split", "features", "--nodes", 3, "--graph", "path",
            "-o", tmp_path / "v")
    assert s["m"] == 442
    _js(capsys, "reference", tmp_path / "v" / "problem.json", "-o", tmp_path / "v.npz")
    ref = np.load(tmp_path / "v.npz")
    blocks = np.array_split(np.arange(10), 3)
    coef = np.concatenate([ref["x"][i, :len(b)] for i, b in enumerate(blocks)])
    assert np.abs(coef - sk.coef_).max() < 1e-8 and abs(ref["xt"][0] - sk.intercept_) < 1e-8
    code, _, err = _cli(capsys, "from-sklearn", "wine", "--split", "features", "--loss", "logistic",
                        "-o", tmp_path / "w")
    assert code == 2 and "samples" in err and not (tmp_path / "w").exists()


def test_logbarrier_resource_cost_planted_optimum_cvxpy_and_apapc(tmp_path, capsys):
    s = _js(capsys, "generate", "resource", "--cost", "logbarrier", "--graph", "ring", "--n-nodes", 5, "--kappa", 10,
            "-o", tmp_path / "r")
    assert s["objective_check"] < 1e-10
    spec = tmp_path / "r" / "problem.json"
    assert json.loads(spec.read_text())["loss"] == "logbarrier"
    ref = _js(capsys, "reference", spec, "-o", tmp_path / "ref.npz")
    assert ref["method"] == "newton" and ref["planted_error"] < 1e-10
    for method in ("apapc-cheb", "dpmm"):
        r = _js(capsys, "solve", spec, "-m", method, "--tol", 1e-8, "--require-converged")
        assert r["converged"] and r["rel_error"] <= 1e-8
    from icmlkit.lib.solve_decentralized.problem import read_problem
    from icmlkit.lib.solve_decentralized.reference import reference

    prob = read_problem(spec)
    # the planted optimum keeps every slack above bfloor, where the cost is the true log-barrier (cvxpy's)
    assert np.all(prob.solution["x"] - prob.lb >= 2 * prob.bfloor[:, None] - 1e-12)
    if __import__("importlib").util.find_spec("cvxpy") is not None:
        cv = reference(prob, "cvxpy")
        assert np.abs(cv.x - np.load(tmp_path / "ref.npz")["x"]).max() < 1e-6
    # a barrier term is exact-solve-free: tracking-admm refuses it
    code, _, err = _cli(capsys, "solve", spec, "-m", "tracking-admm")
    assert code == 2 and "quadratic" in err
    _edit_node(tmp_path / "r", 2, bw=-np.ones(5))
    code, _, err = _cli(capsys, "solve", spec, "-o", tmp_path / "s.npz")
    assert code == 1 and "node 2" in err and "bw" in err and not (tmp_path / "s.npz").exists()


def test_demo_writes_a_run_folder(tmp_path, capsys):
    s = _js(capsys, "demo", "--outdir", tmp_path / "demo", "--nodes", 4, "--kappa", 10)
    assert s["methods"]["apapc-cheb"]["converged"]
    for name in ("summary.json", "sweep.png", "sweep.csv", "solution.npz", "trace_apapc-cheb.csv", "manifest.json"):
        assert (tmp_path / "demo" / name).exists()


# --------------------------------------------------------------------------- fuzz


def _problem_files(base, node_name=None, graph_name=None):
    from icmlkit.lib.solve_decentralized.generate import generate
    from icmlkit.lib.solve_decentralized.problem import write_problem

    prob = generate("mixed", 3, "path", seed_rng=np.random.default_rng(0))
    spec = write_problem(base / "good", prob)
    d = json.loads(spec.read_text())
    if node_name:
        d["nodes"][1] = f"../{node_name}"
    if graph_name:
        d["graph"] = f"../{graph_name}"
    out = base / "good" / "edited.json"
    out.write_text(json.dumps(d))
    return out


def _spec_with_bad_node(base):
    return {"spec": _problem_files(base, node_name="bad.npz")}


def _spec_with_bad_graph(base):
    return {"spec": _problem_files(base, graph_name="bad.csv")}


JSON_KINDS = DEFAULT_KINDS + ("truncated_json", "garbage_npz")
NPZ_KINDS = DEFAULT_KINDS + ("garbage_npz", "garbage_pt")
CSV_KINDS = DEFAULT_KINDS + ("wrong_csv", "nan_csv")
TEXT_KINDS = DEFAULT_KINDS + ("wrong_csv", "truncated_json")

CASES = [
    FuzzCase("solve", ["solve", "{bad}", "-o", "{out}/s.npz", "--trace", "{out}/t.csv"], suffix=".json",
             kinds=JSON_KINDS),
    FuzzCase("solve", ["solve", "{spec}", "-o", "{out}/s.npz"], suffix=".npz", kinds=NPZ_KINDS,
             setup=_spec_with_bad_node, label="node"),
    FuzzCase("solve", ["solve", "{spec}", "-o", "{out}/s.npz"], suffix=".csv", kinds=CSV_KINDS,
             setup=_spec_with_bad_graph, label="graph"),
    FuzzCase("reference", ["reference", "{bad}", "-o", "{out}/r.npz"], suffix=".json", kinds=JSON_KINDS),
    FuzzCase("reference", ["reference", "{spec}", "-o", "{out}/r.npz"], suffix=".npz", kinds=NPZ_KINDS,
             setup=_spec_with_bad_node, label="node"),
    FuzzCase("launch", ["launch", "{bad}", "--nproc", "3", "-o", "{out}/s.npz"], suffix=".json", kinds=JSON_KINDS),
    FuzzCase("launch", ["launch", "{spec}", "--nproc", "3", "-o", "{out}/s.npz"], suffix=".csv", kinds=CSV_KINDS,
             setup=_spec_with_bad_graph, label="graph"),
    FuzzCase("from-libsvm", ["from-libsvm", "{bad}", "--nodes", "2", "-o", "{out}/lib"], suffix=".t",
             kinds=TEXT_KINDS),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed(TOOL, case, tmp_path, capsys)


def test_torchrun_two_processes_equal_the_simulator(tmp_path, capsys):
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "p"
    _js(capsys, "generate", "mixed", "--graph", "path", "--n-nodes", 2, "-o", out)
    spec = out / "problem.json"
    _js(capsys, "solve", spec, "--iterations", 20, "-o", tmp_path / "sim.npz")
    torchrun = Path(sys.executable).parent / "torchrun"
    r = subprocess.run([str(torchrun), "--nproc_per_node", "2", "--standalone", "-m", "icmlkit.cli.solve_decentralized",
                        "solve", str(spec), "--backend", "dist", "--iterations", "20", "-o", str(tmp_path / "d.npz"),
                        "--no-progress"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    a, b = np.load(tmp_path / "sim.npz"), np.load(tmp_path / "d.npz")
    assert np.abs(a["x"] - b["x"]).max() < 1e-10 and np.abs(a["xt_copies"] - b["xt_copies"]).max() < 1e-10


def test_counters_floats_and_oracle_calls_of_every_method():
    """Floats sent = message width x directed links per round; the local oracle split into gradient
    calls, prox steps and exact local solves, for every method."""
    from icmlkit.lib.solve_decentralized.config import SolveConfig
    from icmlkit.lib.solve_decentralized.reference import reference
    from icmlkit.lib.solve_decentralized.solve import solve

    prob = _mixed(4, "ring", kappa=10.0, seed=5)
    ref = reference(prob)
    links, n, m, p = 2 * len(prob.edges), prob.n, prob.m, prob.p
    got = {}
    for method, kw in (("apapc-cheb", {}), ("apapc", {}), ("centralized", {}), ("tracking-admm", {}),
                       ("tracking-admm", {"local_steps": 3}), ("dpmm", {}), ("extra", {}),
                       ("gradient-tracking", {}), ("sliding", {})):
        s = solve(SolveConfig(method=method, iterations=4, **kw), prob, ref=ref).summary
        got[(method, kw.get("local_steps"))] = s
        assert s["oracle_calls"] == s["grad_calls"] + s["prox_calls"] + s["local_solves"] > 0, (method, s)
        assert s["floats_sent"] > 0, method
    ta = got[("tracking-admm", None)]   # one round of (tracker, multiplier): 2 (m + n p) floats per link
    assert ta["floats_sent"] == 4 * 2 * (m + n * p) * links and ta["local_solves"] == 4 and ta["grad_calls"] == 0
    tg = got[("tracking-admm", 3)]
    assert tg["grad_calls"] == 12 and tg["local_solves"] == 0 and tg["floats_sent"] == ta["floats_sent"]
    assert got[("extra", None)]["local_solves"] == 4   # one dual gradient (exact local solve) per iteration
    assert got[("extra", None)]["floats_sent"] == 4 * (m + n * p) * links
    ap = got[("apapc-cheb", None)]
    assert ap["grad_calls"] == 4 and ap["floats_per_link_round"] <= m + p


def test_oracle_matched_tracking_admm_and_the_practical_apapc_mode_converge():
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.solve_decentralized.config import SolveConfig
    from icmlkit.lib.solve_decentralized.reference import reference
    from icmlkit.lib.solve_decentralized.solve import solve

    prob = _mixed(5, "ring", kappa=30.0, seed=2)
    ref = reference(prob)
    s = solve(SolveConfig(method="tracking-admm", local_steps=4, rho=3.0, tol=1e-7, max_iter=20000), prob, ref=ref)
    assert s.summary["converged"] and s.summary["grad_calls"] == 4 * s.summary["iterations"], s.summary
    theory = solve(SolveConfig(tol=1e-7), prob, ref=ref).summary
    prac = solve(SolveConfig(practical=True, deg_k=2, step=1.0, tol=1e-7), prob, ref=ref)
    ps = prac.summary
    assert ps["converged"] and ps["practical"] and ps["consensus_rows"] == "sqrt" and ps["deg_k"] == 2, ps
    assert not theory["practical"] and theory["consensus_rows"] == "wprime"
    assert np.abs(prac.x - ref.x).max() < 1e-5
    # practical K^T K = the dense K's (consensus rows gamma W'^{1/2})
    from icmlkit.lib.solve_decentralized.methods import NodeOps
    from icmlkit.lib.solve_decentralized.spectral import dense_K, make_setup, sqrt_psd, wprime_dense

    st = make_setup(prob, "cheb", practical=True)
    W = prob.laplacian()
    ops = NodeOps(prob.A, prob.b, prob.C, prob.c, prob.Ct, prob.ct, prob.grad, st, lambda V: W @ V)
    W1 = wprime_dense(W, st.lam_min, st.lam_max, st.deg_w)
    K, _ = dense_K(prob, W1, st.alpha, st.beta, st.gamma, st.s2, sqrt_psd(W1))
    u = np.random.default_rng(0).standard_normal((prob.n, ops.N))
    perm = np.concatenate([np.arange(prob.n * ops.dm).reshape(prob.n, ops.dm),
                           prob.n * ops.dm + np.arange(prob.n * prob.m).reshape(prob.n, prob.m),
                           prob.n * (ops.dm + prob.m) + np.arange(prob.n * prob.p).reshape(prob.n, prob.p)], 1)
    flat = np.zeros(K.shape[1])
    flat[perm.reshape(-1)] = u.reshape(-1)
    want = (K.T @ (K @ flat))[perm.reshape(-1)].reshape(prob.n, ops.N)
    got = ops.residual_grad(u) - ops.residual_grad(np.zeros_like(u))
    assert np.abs(got - want).max() < 1e-8 * np.abs(want).max()
    with pytest.raises(UsageError):
        SolveConfig(method="dpmm", practical=True).check()
    with pytest.raises(UsageError):
        SolveConfig(method="apapc-cheb", local_steps=3).check()


def test_matrix_free_lanczos_bounds_and_a_shared_setup():
    """The matrix-free setup's smallest eigenvalue: plain Lanczos with the Ritz-residual stop brackets
    lambda_min from below (and lambda_max from above); a precomputed setup is reused by solve."""
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.solve_decentralized.config import SolveConfig
    from icmlkit.lib.solve_decentralized.reference import reference
    from icmlkit.lib.solve_decentralized.solve import solve
    from icmlkit.lib.solve_decentralized.spectral import lanczos_bottom, lanczos_extremes, make_setup

    rng = np.random.default_rng(3)
    ev = np.concatenate([[1e-3, 2e-3], rng.uniform(0.01, 10.0, 1998)])
    Q, _ = np.linalg.qr(rng.standard_normal((2000, 2000)))
    M = (Q * ev) @ Q.T
    lo, hi, info = lanczos_extremes(lambda v: M @ v, 2000, tol=1e-6)
    assert info["converged"] and info["steps"] < 2000
    assert lo <= ev.min() <= lo + 1e-6 and hi >= ev.max() >= hi - 1e-5
    assert lanczos_bottom(lambda v: M @ v, 2000) <= ev.min()
    prob = _mixed(4, "ring", kappa=10.0, seed=5)
    ref = reference(prob)
    st = make_setup(prob, "plain")
    assert st.setup_seconds >= 0
    a = solve(SolveConfig(method="dpmm", iterations=30), prob, ref=ref).summary
    b = solve(SolveConfig(method="dpmm", iterations=30), prob, ref=ref, setup=st).summary
    assert a["rel_error"] == pytest.approx(b["rel_error"], rel=1e-9)
    with pytest.raises(UsageError):
        solve(SolveConfig(method="apapc-cheb", iterations=3), prob, ref=ref, setup=st)
