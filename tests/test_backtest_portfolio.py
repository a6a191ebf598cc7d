"""backtest-portfolio: the Sharpe layer against closed forms and finite differences, the smooth top-k
operators, the exact enumeration, no look-ahead, exact cardinality, the costs arithmetic, bad input
and the command line."""
from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch

from conftest import run_tool
from fuzzing import FuzzCase, MismatchCase, check_malformed
from icmlkit.lib.backtest_portfolio import estimators as E
from icmlkit.lib.backtest_portfolio.backtest import rebalance_indices, run_backtest, simulate
from icmlkit.lib.backtest_portfolio.data import Market, read_market
from icmlkit.lib.backtest_portfolio.layer import SharpeLayer, best_excess_return, solve_tangency_cvxpy
from icmlkit.lib.backtest_portfolio.metrics import max_drawdown, sharpe, sharpe_ci, stationary_bootstrap_indices
from icmlkit.lib.backtest_portfolio.model import Config, build_samples, fit
from icmlkit.lib.backtest_portfolio.synthetic import planted_market
from icmlkit.lib.backtest_portfolio.topk import hard_topk, soft_topk

TOOL = "backtest-portfolio"
D = torch.float64


def _interior_problem(n=6, seed=0):
    """μ = 3Σw_true with w_true > 0: the tangency portfolio is w_true (long-only does not bind)."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, 2 * n, generator=g, dtype=D) * 0.01
    S = A @ A.T / (2 * n) + 1e-5 * torch.eye(n, dtype=D)
    w = torch.rand(n, generator=g, dtype=D) + 0.2
    w = w / w.sum()
    return S @ w * 3, S, w


# --------------------------------------------------------------------------- the layer


def test_layer_matches_closed_form_and_cvxpy():
    mu, S, w_true = _interior_problem()
    w, inf = SharpeLayer(6)(mu[None], E.factor(S[None]))
    assert not bool(inf[0])
    closed = E.closed_form_tangency(mu, S)
    torch.testing.assert_close(closed, w_true)
    np.testing.assert_allclose(w[0].numpy(), closed.numpy(), rtol=1e-5, atol=1e-7)
    w_cvx, _ = solve_tangency_cvxpy(mu.numpy(), S.numpy())
    np.testing.assert_allclose(w_cvx, closed.numpy(), rtol=1e-5, atol=1e-7)


def test_layer_respects_mask_and_floor():
    mu, S, _ = _interior_problem(8, seed=1)
    m = torch.zeros(1, 8, dtype=D)
    m[0, [1, 4, 6]] = 1
    w, _ = SharpeLayer(8, min_weight=0.05)(mu[None], E.factor(S[None]), m)
    assert (w[0][m[0] == 0].abs() < 1e-9).all()
    assert (w[0][m[0] == 1] >= 0.05 - 1e-7).all()
    assert abs(float(w.sum()) - 1) < 1e-12


def test_layer_gradient_matches_finite_differences():
    mu, S, _ = _interior_problem(4, seed=2)
    F = E.factor(S[None])
    layer = SharpeLayer(4)
    m0 = torch.tensor([[0.12, 0.9, 0.1, 0.8]], dtype=D)  # caps that bind (w_true is about 1/4 each)
    probe = torch.tensor([0.3, -1.0, 0.5, 0.2], dtype=D)

    def f(mu_, m_):
        w, _ = layer(mu_, F, m_)
        return (w * probe).sum()

    x_mu = mu[None].clone().requires_grad_(True)
    x_m = m0.clone().requires_grad_(True)
    f(x_mu, x_m).backward()
    for x, g in ((mu[None], x_mu.grad), (m0, x_m.grad)):
        fd = torch.zeros_like(x)
        for i in range(x.shape[1]):
            h = 1e-5 * max(float(x[0, i].abs()), 1e-3)
            e = torch.zeros_like(x)
            e[0, i] = h
            fd[0, i] = (f(*((x + e, m0) if x is not m0 else (mu[None], x + e)))
                        - f(*((x - e, m0) if x is not m0 else (mu[None], x - e)))) / (2 * h)
        scale = float(fd.abs().max())
        assert scale > 0
        assert float((g - fd).abs().max()) <= 1e-3 * scale + 1e-8, (g, fd)


def test_layer_infeasible_case_falls_back_to_min_variance():
    mu, S, _ = _interior_problem(5, seed=3)
    layer = SharpeLayer(5)
    bad = -mu.abs()[None]                                  # no asset beats the risk-free rate
    assert float(best_excess_return(bad, torch.ones_like(bad))) < 0
    w, inf = layer(bad, E.factor(S[None]))
    assert bool(inf[0])
    z = torch.linalg.solve(S, torch.ones(5, dtype=D))
    if (z > 0).all():                                      # min-variance is interior: compare closed form
        np.testing.assert_allclose(w[0].numpy(), (z / z.sum()).numpy(), rtol=1e-5, atol=1e-7)
    # feasible on the full set but not on a mask of the losers only
    mixed = mu.clone()
    mixed[:3] = -mixed[:3].abs()
    m = torch.tensor([[1, 1, 1, 0, 0]], dtype=D)
    _, inf2 = layer(mixed[None], E.factor(S[None]), m)
    _, inf3 = layer(mixed[None], E.factor(S[None]))
    assert bool(inf2[0]) and not bool(inf3[0])
    # the gradient through an infeasible row is zero in μ, and finite
    x = bad.clone().requires_grad_(True)
    w, _ = layer(x, E.factor(S[None]))
    w[0, 0].backward()
    assert torch.isfinite(x.grad).all() and float(x.grad.abs().max()) == 0


# --------------------------------------------------------------------------- top-k


@pytest.mark.parametrize("method", ["capped-simplex", "sinkhorn", "perturbed"])
def test_soft_topk_sums_to_k_and_tends_to_hard(method):
    g = torch.Generator().manual_seed(0)
    s = torch.randn(4, 20, generator=g, dtype=D)
    hard = hard_topk(s, 5)
    assert (hard.sum(-1) == 5).all()
    gaps = []
    for eps in (1.0, 0.1, 0.01, 0.001):
        m = soft_topk(s, 5, eps, method, generator=torch.Generator().manual_seed(1))
        assert float((m.sum(-1) - 5).abs().max()) < 1e-9
        gaps.append(float((m - hard).abs().max()))
    assert gaps[-1] < 0.1 and gaps[-1] < gaps[0]


def test_capped_simplex_implicit_gradient():
    s = torch.randn(3, 7, dtype=D, generator=torch.Generator().manual_seed(4)).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: soft_topk(x, 3, 0.3), (s,))


# --------------------------------------------------------------------------- estimators


def test_ledoit_wolf_matches_sklearn():
    from sklearn.covariance import LedoitWolf

    X = np.random.default_rng(0).standard_normal((60, 7)) * 0.01
    S, _ = E.ledoit_wolf(torch.tensor(X)[None])
    np.testing.assert_allclose(S[0].numpy(), LedoitWolf().fit(X).covariance_, rtol=1e-9, atol=1e-14)


def test_exact_enumeration_matches_brute_force_over_masks():
    rng = np.random.default_rng(5)
    n, k = 6, 2
    A = rng.standard_normal((n, 3 * n)) * 0.01
    S = torch.tensor(A @ A.T / (3 * n) + 1e-5 * np.eye(n))
    mu = torch.tensor(rng.normal(3e-4, 4e-4, n))
    w, sh, support = E.exact_sparse_tangency(mu, S, k)
    layer = SharpeLayer(n)
    masks = torch.zeros(sum(math.comb(n, j) for j in (1, 2)), n, dtype=D)
    for r, T in enumerate(c for j in (1, 2) for c in itertools.combinations(range(n), j)):
        masks[r, list(T)] = 1
    ok = best_excess_return(mu.expand(len(masks), n), masks) > 0
    ws, _ = layer(mu.expand(int(ok.sum()), n), E.factor(S[None]).expand(int(ok.sum()), n, n), masks[ok])
    brute = float(E.sharpe_of(ws, mu, S, periods=1).max())
    assert sh == pytest.approx(brute, rel=1e-6)
    assert int((w > 0).sum()) <= k and float(E.sharpe_of(w, mu, S, periods=1)) == pytest.approx(sh, rel=1e-9)


# --------------------------------------------------------------------------- back-test


def _market(n=8, blocks=30, seed=0) -> Market:
    sm = planted_market(n=n, blocks=blocks, seed=seed)
    dates = np.datetime64("2010-01-04") + np.arange(sm.returns.shape[0]).astype("timedelta64[D]")
    return Market(dates, [f"T{i}" for i in range(n)], sm.returns, "synthetic")


@pytest.fixture(scope="module")
def tiny_model():
    mk = _market()
    cfg = Config(loss="dfl", k=3, window=60, epochs=2, batch=8, min_weight=0.02)
    tr = build_samples(mk.returns, np.arange(260, 420, 8), 60, "ledoit-wolf", 21)
    model, _ = fit(cfg, tr, None, seed=0)
    return mk, model, cfg


@pytest.mark.parametrize("topk,score", [("sinkhorn", "ratio"), ("perturbed", "ratio"), ("capped-simplex", "tangency")])
def test_training_moves_the_predictor_with_every_operator(topk, score):
    mk = _market(n=6, blocks=20)
    cfg = Config(loss="dfl", k=2, window=40, epochs=1, batch=8, topk=topk, score=score, eps_start=0.3, eps_end=0.3)
    tr = build_samples(mk.returns, np.arange(260, 340, 10), 40, "ledoit-wolf", 21)
    from icmlkit.lib.backtest_portfolio.model import new_model

    init = new_model(cfg, tr.X.shape[-1], 0).state_dict()
    model, hist = fit(cfg, tr, None, seed=0)
    moved = max(float((model.state_dict()[k] - init[k]).abs().max()) for k in init if k.startswith("net."))
    assert moved > 0 and math.isfinite(hist[0]["train_loss"])


def test_no_lookahead(tiny_model):
    mk, model, cfg = tiny_model
    t = 470
    shuffled = mk.returns.copy()
    rng = np.random.default_rng(1)
    shuffled[t + 1:] = shuffled[t + 1:][rng.permutation(len(shuffled) - t - 1)] * 1.7
    mk2 = Market(mk.dates, mk.tickers, shuffled, "shuffled")
    from icmlkit.lib.backtest_portfolio.backtest import target_weights

    for strategy, kw in (("historical-topk", {}), ("dfl", {"model": model, "cfg": cfg}), ("exact", {})):
        w1, _ = target_weights(strategy, mk, [t, t - 21], 3, 60, **kw)
        w2, _ = target_weights(strategy, mk2, [t, t - 21], 3, 60, **kw)
        np.testing.assert_array_equal(w1, w2)


def test_exactly_k_names_at_test_time(tiny_model):
    mk, model, cfg = tiny_model
    for strategy, kw in (("dfl", {"model": model, "cfg": cfg}), ("historical-topk", {})):
        res = run_backtest(mk, strategy, k=3, start=str(mk.dates[300]), window=60, min_weight=0.02, **kw)
        names = (res.weights > 1e-9).sum(axis=1)
        assert (names == 3).all(), names
        assert np.allclose(res.weights.sum(axis=1), 1)
        assert res.summary()["cardinality"] == 3


def test_costs_arithmetic_hand_example():
    # two assets, rebalance at index 0 (into 50/50) and at index 2 (into 100 % asset 0)
    R = np.array([[0.0, 0.0], [0.10, -0.10], [0.0, 0.0], [0.05, 0.0]])
    W = np.array([[0.5, 0.5], [1.0, 0.0]])
    gross, net, traded = simulate(R, np.array([0, 2]), 3, W, cost_bps=10)
    # day 1: 0.5*0.1 + 0.5*(-0.1) = 0; the initial purchase trades 1.0 -> net (1+0)(1-0.001)-1
    # drifted weights after day 2: (0.55, 0.45); trade to (1, 0): |0.45| + |0.45| = 0.9
    assert traded == pytest.approx([1.0, 0.9])
    assert gross == pytest.approx([0.0, 0.0, 0.05])
    assert net == pytest.approx([-0.001, 0.0, 1.05 * (1 - 0.0009) - 1])


def test_rebalance_indices_monthly():
    dates = np.arange(np.datetime64("2020-01-01"), np.datetime64("2020-04-15"))
    idx = rebalance_indices(dates, 0, len(dates) - 1)
    assert [str(dates[i]) for i in idx] == ["2020-01-31", "2020-02-29", "2020-03-31"]


def test_metrics():
    r = np.random.default_rng(0).normal(0.0005, 0.01, 1000)
    lo, hi = sharpe_ci(r)
    assert lo < sharpe(r) < hi
    idx = stationary_bootstrap_indices(50, 10, 5.0)
    assert idx.shape == (10, 50) and idx.min() >= 0 and idx.max() < 50
    assert max_drawdown([0.1, -0.5, 0.2]) == pytest.approx(0.5)


# --------------------------------------------------------------------------- input validation


def _write_prices(path, n=6, days=400, seed=0):
    rng = np.random.default_rng(seed)
    P = 100 * np.cumprod(1 + rng.normal(0.0004, 0.01, (days, n)), axis=0)
    dates = np.datetime64("2015-01-01") + np.arange(days).astype("timedelta64[D]")
    lines = ["date," + ",".join(f"S{i}" for i in range(n))]
    lines += [f"{d}," + ",".join(f"{x:.4f}" for x in row) for d, row in zip(dates, P)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_read_market_errors_and_nan_rule(tmp_path):
    from icmlkit.lib.core.errors import InputError

    p = _write_prices(tmp_path / "p.csv", days=30)
    lines = p.read_text().splitlines()
    bad = lines.copy()
    bad[5], bad[6] = bad[6], bad[5]
    (tmp_path / "order.csv").write_text("\n".join(bad))
    with pytest.raises(InputError, match=r"order.csv, line 7: dates are not strictly increasing"):
        read_market(tmp_path / "order.csv")
    first = lines.copy()
    first[1] = first[1].split(",", 1)[0] + "," + ",".join([""] + first[1].split(",")[2:])
    (tmp_path / "first.csv").write_text("\n".join(first))
    with pytest.raises(InputError, match=r"line 2: ticker S0: missing price on the first date"):
        read_market(tmp_path / "first.csv")
    gap = [ln if not 10 <= i <= 17 else ln.split(",", 1)[0] + ",," + ln.split(",", 2)[2] for i, ln in enumerate(lines)]
    (tmp_path / "gap.csv").write_text("\n".join(gap))
    with pytest.raises(InputError, match=r"line 11: ticker S0: 8 consecutive missing prices"):
        read_market(tmp_path / "gap.csv")
    mk = read_market(tmp_path / "gap.csv", max_gap=8)
    assert mk.filled == 8 and "forward-filled 8" in mk.notes[0] and np.isfinite(mk.returns).all()


def test_parquet_reads_like_csv(tmp_path):
    import pandas as pd

    csv = _write_prices(tmp_path / "p.csv", days=30)
    df = pd.read_csv(csv, index_col=0)
    df.index = pd.to_datetime(df.index)
    df.to_parquet(tmp_path / "p.parquet")
    a, b = read_market(csv), read_market(tmp_path / "p.parquet")
    assert list(a.tickers) == list(b.tickers) and np.array_equal(a.returns, b.returns)


def call(capsys, *args):
    """The command in process (no interpreter start-up per call)."""
    from icmlkit.cli._common import run_cli
    from icmlkit.cli.backtest_portfolio import cli

    capsys.readouterr()
    code = run_cli(cli, TOOL, [str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_subprocess_bad_inputs_exit_codes(tmp_path):
    p = _write_prices(tmp_path / "p.csv", n=4, days=300)
    r = run_tool(TOOL, "backtest", p, "-s", "historical-topk", "--k", "5", "-o", tmp_path / "run")
    assert r.returncode == 1 and "4 tickers but --k 5" in r.stderr and str(p) in r.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "run.partial").exists()
    r = run_tool(TOOL, "backtest", p, "-s", "dfl", "-o", tmp_path / "run")
    assert r.returncode == 2 and "needs --model" in r.stderr


def test_cli_bad_inputs_in_process(tmp_path, capsys):
    p = _write_prices(tmp_path / "p.csv", n=4, days=300)
    code, _, err = call(capsys, "backtest", p, "-s", "equal-weight", "--window", "400", "-o", tmp_path / "run")
    assert code == 1 and "--window 400 days is longer than the history" in err
    code, _, err = call(capsys, "backtest", tmp_path / "nope.csv", "-s", "equal-weight", "-o", tmp_path / "run")
    assert code == 1 and "nope.csv: no such file" in err
    assert not (tmp_path / "run").exists()


def test_cli_train_weights_backtest_report(tmp_path, capsys):
    p = _write_prices(tmp_path / "p.csv", n=6, days=560)
    common = ["--k", "3", "--window", "60", "--seed", "3", "--no-progress"]
    args = ["train", p, "--train-end", "2015-12-31", "--val-end", "2016-03-31", "--epochs", "2", "--stride", "10",
            "--batch", "8", *common, "--json"]
    code, out, err = call(capsys, *args, "-o", tmp_path / "m1.pt")
    assert code == 0, err
    s = json.loads(out)
    assert s["loss"] == "dfl" and s["train_dates"] > 0 and s["val_dates"] > 0
    assert call(capsys, *args, "-o", tmp_path / "m2.pt")[0] == 0
    assert (tmp_path / "m1.pt").read_bytes() == (tmp_path / "m2.pt").read_bytes()   # same seed, same bytes
    code, out, err = call(capsys, "weights", tmp_path / "m1.pt", p, "--date", "2016-04-15", "-o", "-")
    assert code == 0, err
    rows = [ln.split(",") for ln in out.strip().splitlines()[1:]]
    assert len(rows) == 6 and sum(float(x) > 0 for _, x in rows) == 3
    assert sum(float(x) for _, x in rows) == pytest.approx(1)
    code, out, err = call(capsys, "backtest", p, "--model", tmp_path / "m1.pt", "-s", "dfl", "--start", "2016-04-01",
                          "-o", tmp_path / "dfl", "--json")
    assert code == 0, err
    sb = json.loads(out)
    for key in ("sharpe", "sharpe_ci", "ann_return", "ann_vol", "max_drawdown", "turnover", "cardinality",
                "cost_bps", "strategy"):
        assert key in sb
    assert sb["cardinality"] == 3 and sb["strategy"] == "dfl" and len(sb["sharpe_ci"]) == 2
    assert sb["model_data_overlap"] is False
    assert {"returns.csv", "holdings.csv", "summary.json", "report.md", "manifest.json"} <= \
        {f.name for f in (tmp_path / "dfl").iterdir()}
    code, _, err = call(capsys, "backtest", p, "-s", "equal-weight", "--start", "2016-04-01", "-o", tmp_path / "ew")
    assert code == 0, err
    code, out, err = call(capsys, "report", tmp_path / "dfl", tmp_path / "ew", "-o", tmp_path / "cmp", "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert [s["strategy"] for s in rep["strategies"]] == ["dfl", "equal-weight"]
    assert "| dfl |" in (tmp_path / "cmp" / "report.md").read_text()
    code, _, err = call(capsys, "backtest", p, "--model", tmp_path / "m1.pt", "-s", "pfl", "-o", tmp_path / "x")
    assert code == 2 and "trained with --loss dfl" in err


# --------------------------------------------------------------------------- usage errors, generate, fuzz


def test_usage_mistakes_exit_2_naming_the_option(tmp_path, capsys):
    p = _write_prices(tmp_path / "p.csv", n=4, days=300)
    run = ["backtest", p, "-s", "equal-weight", "-o", tmp_path / "run"]
    for extra, option in ((["--rebalance", "0"], "--rebalance"), (["--rebalance", "fortnightly"], "--rebalance"),
                          (["--start", "notadate"], "--start"), (["--end", "2016-02-30"], "--end"),
                          (["--cost-bps", "-1"], "--cost-bps"), (["--min-weight", "2"], "--min-weight")):
        code, _, err = call(capsys, *run, *extra)
        assert code == 2 and option in err and "Error" in err and "ValueError" not in err, (extra, err)
    assert not (tmp_path / "run").exists()
    code, _, err = call(capsys, "backtest", p, "-s", "equal-weight", "-o", "-")
    assert code == 2 and "'-' (stdout) is not possible here" in err and not (tmp_path / "-").exists()
    train = ["train", p, "--k", "2", "--window", "60"]
    for extra, option in ((["-o", tmp_path / "m.txt", "--train-end", "2015-06-30"], "-o"),
                          (["-o", tmp_path / "m.pt"], "--train-end"),
                          (["-o", tmp_path / "m.pt", "--train-end", "31/12/2015"], "--train-end"),
                          (["-o", tmp_path / "m.pt", "--train-end", "2015-06-30", "--min-weight", "0.6"], "--min-weight"),
                          (["-o", tmp_path / "m.pt", "--train-end", "2015-06-30", "--lr", "0"], "--lr")):
        code, _, err = call(capsys, *train, *extra)
        assert code == 2 and option in err, (extra, err)
    assert not (tmp_path / "m.pt").exists()
    code, _, err = call(capsys, "weights", tmp_path / "m.pt", p, "--date", "2016-13-01")
    assert code == 2 and "--date" in err


def test_no_device_option_and_seed_only_where_random():
    from icmlkit.cli.backtest_portfolio import cli

    for name, command in cli.commands.items():
        opts = {o for p in command.params for o in p.opts}
        assert "--device" not in opts, name
        assert ("--seed" in opts) == (name in ("train", "backtest", "generate", "demo")), name
        assert "JSON keys:" in command.help and "Example" in command.help, name


def test_builtin_data_set_is_a_manifest_input(tmp_path, capsys):
    pytest.importorskip("skfolio")
    code, _, err = call(capsys, "backtest", "skfolio:sp500", "-s", "equal-weight", "--start", "2022-06-01",
                        "-o", tmp_path / "ew")
    assert code == 0, err
    inputs = json.loads((tmp_path / "ew" / "manifest.json").read_text())["inputs"]
    import skfolio

    assert {"path": "skfolio:sp500", "kind": "builtin", "package": "skfolio", "version": skfolio.__version__} in inputs


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_generate_writes_the_planted_market_and_its_answer(tmp_path, capsys, suffix):
    out, truth = tmp_path / f"m{suffix}", tmp_path / "truth.csv"
    code, stdout, err = call(capsys, "generate", "--n", "6", "--blocks", "6", "--k", "2", "--seed", "3",
                             "-o", out, "--truth", truth, "--json")
    assert code == 0, err
    s = json.loads(stdout)
    mk = read_market(out)
    sm = planted_market(n=6, blocks=6, seed=3)
    np.testing.assert_allclose(mk.returns, sm.returns, rtol=1e-12, atol=1e-15)   # prices give back the returns
    assert mk.tickers == [f"A{i:02d}" for i in range(6)] and s["days"] == 6 * 21 + 1 and s["block_ends"] == 5
    import pandas as pd

    t = pd.read_csv(truth)
    assert len(t) == 5 * 6 and (t.groupby("date")["top_k"].sum() == 2).all()
    first = t[t["date"] == s["first_block_end"]]
    assert sorted(first[first["top_k"]]["ticker"]) == sorted(s["planted_top_k_first"])
    assert list(first.sort_values("sharpe", ascending=False)["rank"]) == list(range(1, 7))
    # the signals revealed at a block end are the next block's: x is the feature of that date
    e = sm.block_ends[0]
    np.testing.assert_allclose(first["x"].to_numpy(), sm.features[e, :, 0])
    assert str(mk.dates[e]) == s["first_block_end"]
    code, again, _ = call(capsys, "generate", "--n", "6", "--blocks", "6", "--k", "2", "--seed", "3", "-o", "-")
    assert code == 0 and again.splitlines()[0] == "date," + ",".join(mk.tickers)
    code, _, err = call(capsys, "generate", "--n", "3", "--k", "4", "-o", tmp_path / "x.csv")
    assert code == 2 and "--k 4 exceeds --n 3" in err
    code, _, err = call(capsys, "generate", "-o", tmp_path / "x.json")
    assert code == 2 and ".csv or .parquet" in err


def test_report_rejects_a_truncated_summary(tmp_path, capsys):
    p = _write_prices(tmp_path / "p.csv", n=4, days=300)
    assert call(capsys, "backtest", p, "-s", "equal-weight", "-o", tmp_path / "ew")[0] == 0
    (tmp_path / "ew" / "summary.json").write_text('{"strategy": "equal-')
    code, _, err = call(capsys, "report", tmp_path / "ew", "-o", tmp_path / "cmp")
    assert code == 1 and "summary.json, line 1: not valid run summary" in err and not (tmp_path / "cmp").exists()


def _valid_inputs(base):
    """Prices (6 tickers S0..S5, 300 days), an untrained model file on those tickers, a returns.csv."""
    from icmlkit.lib.backtest_portfolio.model import new_model, save_model

    p = _write_prices(base / "p.csv", n=6, days=300)
    cfg = Config(loss="dfl", k=3, window=60)
    save_model(base / "m.pt", new_model(cfg, len(cfg.features)), cfg, {"tickers": [f"S{i}" for i in range(6)]})
    (base / "r.csv").write_text("date,gross,net\n2016-01-04,0.01,0.009\n2016-01-05,-0.02,-0.02\n")
    return {"prices": p, "model": base / "m.pt", "rets": base / "r.csv"}


def _prices_of_five(base):
    """The files of :func:`_valid_inputs` (a model of tickers S0..S5) and prices of S0..S4."""
    return {**_valid_inputs(base), "five": _write_prices(base / "five.csv", n=5, days=300)}


# issue 59 (tests/test_mismatch_sweep.py): prices of other tickers than the model's are refused
_TICKERS = ("m.pt", "trained on tickers ['S0', 'S1', 'S2', 'S3', 'S4', 'S5']", "'S4']")
MISMATCH = [
    MismatchCase("weights", ["weights", "{model}", "{five}", "--date", "2015-10-01", "-o", "{out}/w.csv"],
                 _prices_of_five, _TICKERS, "tickers"),
    MismatchCase("backtest", ["backtest", "{five}", "-s", "dfl", "--model", "{model}", "-o", "{out}/run"],
                 _prices_of_five, _TICKERS, "tickers"),
    # a model trained with --loss dfl back-tested as --strategy pfl
    MismatchCase("backtest", ["backtest", "{prices}", "-s", "pfl", "--model", "{model}", "-o", "{out}/run"],
                 _valid_inputs, ("m.pt", "--loss dfl", "--strategy pfl"), "loss"),
]

CSV_KINDS = ("missing", "empty", "binary", "folder", "wrong_csv", "nan_csv")
PT_KINDS = ("missing", "empty", "binary", "folder", "garbage_pt")
FUZZ = [
    FuzzCase("train", ["train", "{bad}", "--train-end", "2015-06-30", "--window", "60", "-o", "{out}/m.pt"],
             ".csv", CSV_KINDS),
    FuzzCase("train", ["train", "{bad}", "--train-end", "2015-06-30", "--window", "60", "-o", "{out}/m.pt"],
             ".parquet", ("missing", "empty", "binary", "folder", "garbage_npz")),
    FuzzCase("weights", ["weights", "{bad}", "{prices}", "--date", "2015-10-01", "-o", "{out}/w.csv"],
             ".pt", PT_KINDS, _valid_inputs, "model"),
    FuzzCase("weights", ["weights", "{model}", "{bad}", "--date", "2015-10-01", "-o", "{out}/w.csv"],
             ".csv", CSV_KINDS, _valid_inputs, "prices"),
    FuzzCase("backtest", ["backtest", "{bad}", "-s", "historical-topk", "--k", "3", "--window", "60",
                          "-o", "{out}/run"], ".csv", CSV_KINDS),
    FuzzCase("backtest", ["backtest", "{prices}", "-s", "dfl", "--model", "{bad}", "-o", "{out}/run"],
             ".pt", PT_KINDS, _valid_inputs, "model"),
    FuzzCase("report", ["report", "{bad}", "-o", "{out}/cmp"], ".csv", CSV_KINDS, label="returns"),
    FuzzCase("report", ["report", "{rets}", "{bad}", "-o", "{out}/cmp"], "", ("missing", "empty", "folder"),
             _valid_inputs, "run-folder"),
]


@pytest.mark.parametrize("case", FUZZ, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed(TOOL, case, tmp_path, capsys)


# --------------------------------------------------------------------------- issue 32: bugs found by using the tool


def test_out_of_sample_check_is_strict():
    """A model validated to D and a back-test whose first rebalance is D (trading at its close, earning
    from the next day on) is out of sample: the help's own example must not be flagged."""
    from types import SimpleNamespace

    from icmlkit.lib.backtest_portfolio.api import BacktestRun

    res = SimpleNamespace(rebalance_dates=np.array(["2015-12-31", "2016-01-29"], dtype="datetime64[D]"))
    assert BacktestRun(res, 0.0, 0, "2015-12-31").model_data_overlap is False
    assert BacktestRun(res, 0.0, 0, "2016-01-04").model_data_overlap is True
    assert BacktestRun(res, 0.0, 0, "2015-12-30").model_data_overlap is False


def test_weekly_rebalancing_is_the_last_trading_day_of_each_week():
    import pandas as pd

    dates = pd.bdate_range("2021-01-04", "2021-03-31").values.astype("datetime64[D]")
    dates = dates[dates != np.datetime64("2021-02-12")]  # a Friday holiday: that week ends on Thursday
    idx = rebalance_indices(dates, 0, len(dates) - 1, "weekly")
    days = pd.DatetimeIndex(dates[idx])
    assert len(idx) == 12
    assert all(d.dayofweek == 4 for d in days if d != pd.Timestamp("2021-02-11")), list(days.day_name())
    assert pd.Timestamp("2021-02-11") in days
    # each chosen day is the last trading day of its Monday-to-Sunday week
    for i in idx:
        nxt = pd.Timestamp(dates[i + 1])
        assert nxt.isocalendar()[1] != pd.Timestamp(dates[i]).isocalendar()[1]


def test_train_start_on_a_trading_day_is_included():
    from icmlkit.lib.backtest_portfolio.api import TrainConfig, training_dates

    mk = _market(n=6, blocks=30)
    d = str(mk.dates[300])
    cfg = TrainConfig(k=2, window=60, train_start=d, train_end=str(mk.dates[500]))
    tr, _ = training_dates(cfg, mk)
    assert str(mk.dates[tr[0]]) == d
    # a date that is not a trading day starts at the next trading day
    import pandas as pd

    bd = pd.bdate_range("2000-01-03", periods=mk.T).values.astype("datetime64[D]")
    mk2 = Market(bd, mk.tickers, mk.returns, "synthetic")
    sat = bd[300] + np.timedelta64(1, "D")
    while pd.Timestamp(sat).dayofweek != 5:
        sat += np.timedelta64(1, "D")
    cfg2 = TrainConfig(k=2, window=60, train_start=str(sat), train_end=str(bd[500]))
    tr2, _ = training_dates(cfg2, mk2)
    assert mk2.dates[tr2[0]] > sat and mk2.dates[tr2[0] - 1] < sat


def test_backtest_dash_output_creates_nothing_in_the_working_folder(tmp_path, capsys, monkeypatch):
    p = _write_prices(tmp_path / "p.csv", n=4, days=300)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for argv in (["-o", "-"], ["--output", "-"], ["--output=-"]):
        code, _, err = call(capsys, "backtest", p, "-s", "equal-weight", *argv)
        assert code == 2 and "'-' (stdout) is not possible here" in err, err
    assert list(work.iterdir()) == []


def test_report_refuses_a_non_results_file_at_once(tmp_path, capsys):
    import time

    wide = tmp_path / "wide.txt"
    wide.write_text(",".join(str(i) for i in range(200_000)) + "\n" + ",".join("1" for _ in range(200_000)) + "\n")
    t0 = time.perf_counter()
    code, _, err = call(capsys, "report", wide, "-o", tmp_path / "cmp")
    assert time.perf_counter() - t0 < 1.5
    assert code == 1 and len(err.strip().splitlines()) == 1 and "wide.txt" in err and "date,gross,net" in err, err
    (tmp_path / "noline.csv").write_bytes(b"x" * 300_000)
    t0 = time.perf_counter()
    code, _, err = call(capsys, "report", tmp_path / "noline.csv", "-o", tmp_path / "cmp")
    assert time.perf_counter() - t0 < 1.5 and code == 1 and "noline.csv" in err, err
    assert not (tmp_path / "cmp").exists()


# --------------------------------------------------------------------------- issue 32: statistics and consistency


def test_paired_sharpe_test():
    from icmlkit.lib.backtest_portfolio.metrics import paired_sharpe_test, paired_table

    rng = np.random.default_rng(0)
    c = rng.normal(0.0004, 0.01, 1500)
    a, b = c + rng.normal(0, 0.002, 1500), c + rng.normal(0, 0.002, 1500)
    same = paired_sharpe_test(a, a)
    assert same["diff"] == 0 and same["p_value"] == 1.0
    far = paired_sharpe_test(a + 0.001, b)
    assert far["diff"] > 0.5 and far["p_value"] < 0.01 and far["ci"][0] > 0
    near = paired_sharpe_test(a, b)
    assert near["ci"][0] < near["diff"] < near["ci"][1]
    # pairs on the shared dates only
    d = np.arange(np.datetime64("2020-01-01"), np.datetime64("2020-01-01") + 1500)
    rows = paired_table([("a", d, a), ("b", d[100:], b[100:]), ("c", d, c)])
    assert [(r["a"], r["b"]) for r in rows] == [("a", "b"), ("a", "c"), ("b", "c")]
    assert rows[0]["days"] == 1400 and rows[0]["start"] == str(d[100])


def test_report_has_the_paired_test(tmp_path, capsys):
    p = _write_prices(tmp_path / "p.csv", n=4, days=400)
    for s in ("equal-weight", "historical-topk"):
        assert call(capsys, "backtest", p, "-s", s, "--k", "2", "--window", "60", "-o", tmp_path / s)[0] == 0
    code, out, err = call(capsys, "report", tmp_path / "equal-weight", tmp_path / "historical-topk",
                          "-o", tmp_path / "cmp", "--json")
    assert code == 0, err
    pr = json.loads(out)["paired"]
    assert len(pr) == 1 and pr[0]["a"] == "equal-weight" and 0 < pr[0]["p_value"] <= 1
    sh = {s["strategy"]: s["sharpe"] for s in json.loads(out)["strategies"]}
    assert pr[0]["diff"] == pytest.approx(sh["equal-weight"] - sh["historical-topk"])
    assert "Paired test of net Sharpe differences" in (tmp_path / "cmp" / "report.md").read_text()


def test_parametrised_cvxpy_problem_matches_the_layer():
    from icmlkit.lib.backtest_portfolio.layer import CvxpyTangency

    mu, S, _ = _interior_problem(6, seed=7)
    F = E.factor(S[None])
    m = torch.tensor([[1, 0, 1, 1, 0, 1]], dtype=D)
    w, _ = SharpeLayer(6, min_weight=0.05)(mu[None], F, m)
    prob = CvxpyTangency(6, min_weight=0.05)
    for _ in range(2):  # re-solved with new parameter values, compiled once
        wc, inf = prob.solve(mu.numpy(), F[0].numpy(), m[0].numpy())
        assert not inf
        np.testing.assert_allclose(wc, w[0].numpy(), atol=1e-6)


def test_net_of_costs_is_the_backtest_cost_model():
    from icmlkit.lib.backtest_portfolio.model import drifted, net_of_costs

    R = np.array([[0.0, 0.0], [0.10, -0.10], [0.0, 0.0], [0.05, 0.0]])
    W = np.array([[0.5, 0.5], [1.0, 0.0]])
    _, net, traded = simulate(R, np.array([0, 2]), 3, W, cost_bps=10)
    fwd0 = torch.tensor(R[None, 1:3])                      # first holding period: days 1, 2
    start = drifted(torch.tensor(W[:1]), fwd0)
    tr = (torch.tensor(W[1:]) - start).abs().sum(-1)
    assert float(tr) == pytest.approx(traded[1])
    port = (torch.tensor(R[None, 3:4]) * torch.tensor(W[1:])[:, None, :]).sum(-1)
    assert float(net_of_costs(port, tr, 10)[0, 0]) == pytest.approx(net[2])


def test_train_floor_and_near_hard_mask_close_the_train_test_gap(tiny_model):
    from icmlkit.lib.backtest_portfolio.model import Pipeline, train_test_gap

    mk, model, cfg = tiny_model
    s = build_samples(mk.returns, np.arange(300, 500, 10), 60, "ledoit-wolf", 21)
    import dataclasses

    loose = train_test_gap(model, Pipeline(cfg, mk.n), s, 0.5)
    tight_cfg = dataclasses.replace(cfg, train_floor=True)
    pipe = Pipeline(tight_cfg, mk.n)
    assert pipe.train_floor == tight_cfg.min_weight  # training solves the test program
    tight = train_test_gap(model, pipe, s, 1e-4)
    assert loose["mask_distance"] > 0.05 and tight["mask_distance"] < 1e-3
    assert abs(tight["gap"]) < 1e-3 * max(1.0, abs(tight["hard_sharpe"]))
    assert tight["soft_names"] == pytest.approx(cfg.k)


def test_train_with_the_cost_penalty(tmp_path, capsys):
    p = _write_prices(tmp_path / "p.csv", n=6, days=560)
    args = ["train", p, "--k", "3", "--window", "60", "--train-end", "2015-12-31", "--val-end", "2016-05-31",
            "--epochs", "2", "--stride", "10", "--batch", "8", "--no-progress", "--json"]
    code, out, err = call(capsys, *args, "--train-cost-bps", "50", "--train-floor", "-o", tmp_path / "c.pt")
    assert code == 0, err
    s = json.loads(out)
    assert s["train_cost_bps"] == 50 and s["train_floor"] is True and s["val_sharpe_net"] is not None
    assert s["val_sharpe_net"] < s["val_sharpe"]
    g = s["train_test_gap"]
    assert g["on"] == "validation" and {"soft_sharpe", "hard_sharpe", "gap", "mask_distance"} <= set(g)
    code, out, err = call(capsys, *args, "-o", tmp_path / "b.pt")
    assert code == 0 and json.loads(out)["val_sharpe_net"] is None and json.loads(out)["train_dates"] > s["train_dates"]
