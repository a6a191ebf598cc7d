"""backtest-portfolio, the large-universe path (issue 57): the synthetic factor market, the pca-factor
covariance, the sparse layer form against the dense one, the hard mask re-solved on its k names, and
train + back-test on a universe above the sparse threshold, in seconds."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from icmlkit.lib.backtest_portfolio import estimators as E
from icmlkit.lib.backtest_portfolio.layer import SPARSE_ABOVE, SharpeLayer, solve_on_support
from icmlkit.lib.backtest_portfolio.synthetic import calibrate_factor_market, factor_market

D = torch.float64
N = SPARSE_ABOVE + 6   # above the threshold: the default layer is the sparse form


@pytest.fixture(scope="module")
def calibration():
    rng = np.random.default_rng(0)
    T, n = 1600, 12
    f = rng.normal(0.0004, 0.01, (T, 2))
    L = rng.uniform(0.5, 1.5, (n, 2))
    R = f @ L.T + rng.normal(0, 0.012, (T, n)) + rng.normal(0, 0.0004, n)
    return calibrate_factor_market(R, factors=2, period=400, source="test")


def test_factor_market_is_seeded_labelled_and_calibrated(calibration):
    a = factor_market(calibration, N, 600, seed=1)
    b = factor_market(calibration, N, 600, seed=1)
    c = factor_market(calibration, N, 600, seed=2)
    assert a.returns.shape == (600, N) and a.n == N and a.T == 600
    np.testing.assert_array_equal(a.returns, b.returns)
    assert not np.allclose(a.returns, c.returns)
    assert a.source.startswith("synthetic:") and any("SYNTHETIC" in x for x in a.notes)
    s = calibration.summary
    assert s["factors"] == 2 and s["alpha_std_measured_annual"] >= 0 and len(s["alpha_std_by_period_annual"]) == 4
    json.dumps(s)
    # the generated volatility is of the calibrated order (idiosyncratic ~ 19 %, factors on top)
    vol = float(np.median(a.returns.std(0)) * np.sqrt(252))
    assert 0.1 < vol < 0.6


def test_pca_factor_covariance(calibration):
    mk = factor_market(calibration, N, 400, seed=0)
    idx = np.array([300, 399])
    F, d = E.factor_model(mk.returns, idx, 252, "pca-factor", factors=3)
    assert F.shape == (2, 3, N) and d.shape == (2, N) and (d > 0).all()
    S = E.covariance(mk.returns, idx, 252, "pca-factor", factors=3)
    X = E.windows(mk.returns, idx, 252)
    var = X.var(dim=1)  # ddof 1: the diagonal is the sample variance (the floor does not bind here)
    torch.testing.assert_close(torch.diagonal(S, dim1=1, dim2=2), var, rtol=1e-6, atol=0)
    assert (torch.linalg.eigvalsh(S) > 0).all()


def test_sparse_form_and_support_solve_match_the_dense_program(calibration):
    mk = factor_market(calibration, N, 400, seed=0)
    idx = np.arange(300, 396, 24)
    F, d = E.factor_model(mk.returns, idx, 252, "pca-factor", factors=3)
    mu = E.historical_mean(mk.returns, idx, 252).abs() + 1e-4      # some name beats r_f everywhere
    g = torch.Generator().manual_seed(0)
    m = torch.rand(len(idx), N, generator=g, dtype=D)
    sparse = SharpeLayer(N, 3, diag=True)
    dense = SharpeLayer(N, 3, diag=True, sparse=False)
    assert sparse.sparse and not dense.sparse
    ws, _ = sparse(mu, F, m, d)
    wd, _ = dense(mu, F, m, d)
    assert float((ws - wd).abs().max()) < 1e-4
    # a hard mask of k names: the k-name re-solve is the n-name program's solution
    hard = torch.zeros(len(idx), N, dtype=D)
    hard[:, :7] = 1
    hard = hard[:, torch.randperm(N, generator=g)]
    w_full, inf_full = SharpeLayer(N, 3, min_weight=0.02, diag=True, sparse=False)(mu, F, hard, d)
    w_k, inf_k = solve_on_support(mu, F, hard, d, min_weight=0.02)
    assert torch.equal(inf_full, inf_k)
    assert float((w_full - w_k).abs().max()) < 1e-5
    assert ((w_k > 0).sum(-1) == 7).all() and (w_k[hard == 0] == 0).all()
    with pytest.raises(ValueError):
        solve_on_support(mu, F, m, d)   # not a 0/1 mask


def test_train_and_backtest_a_large_universe(calibration):
    from icmlkit.lib.backtest_portfolio.api import BacktestConfig, TrainConfig, backtest, train

    mk = factor_market(calibration, N, 252 * 3, seed=3)
    cfg = TrainConfig(loss="dfl", k=10, epochs=1, batch=8, stride=42, cov="pca-factor", factors=3,
                      train_end="2001-12-31", val_end="2002-06-30", eps_start=0.5, eps_end=0.1)
    res = train(cfg, mk, seed=0)
    assert res.trained.config.cov == "pca-factor" and res.trained.config.factors == 3
    run = backtest(BacktestConfig(strategy="dfl", k=10, start="2002-07-01", cost_bps=10), mk, res.trained)
    s = run.summary
    assert s["cardinality"] == 10 and s["cardinality_min"] == 10 and np.isfinite(s["sharpe"])
    hist = backtest(BacktestConfig(strategy="historical-topk", k=10, start="2002-07-01", cov="pca-factor",
                                   factors=3), mk)
    assert hist.summary["cardinality"] == 10
