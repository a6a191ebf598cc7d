"""Walk-forward back-test: rebalancing dates, the strategies' target weights, costs and metrics.

Timing (no look-ahead): at a rebalancing date t the weights use returns up to and including day
t (known at the close of t); the portfolio trades at the close of t and earns the returns of days
t+1 .. t' (the next rebalancing date), drifting with prices in between (buy and hold).

Costs: ``cost_bps`` basis points of the traded value, charged on the rebalancing trade:
traded_j = Σ_i |w_j,i - w̃_j,i| where w̃ are the weights drifted since the previous rebalance (zero
before the first one: the initial purchase from cash counts). The net value is multiplied by
(1 - cost_bps/1e4 · traded_j), booked on the first day of the holding period:
net_day1 = (1 + gross_day1)(1 - c·traded) - 1. ``turnover`` is the mean of traded_j over rebalances
(after the first purchase), in fractions of the portfolio value (1.0 = 100 %).
"""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.core.console import log, progress
from icmlkit.lib.core.errors import InputError, UsageError

STRATEGIES = ("equal-weight", "historical-topk", "pfl", "dfl", "exact")


@dataclass
class BacktestResult:
    strategy: str
    dates: object          # (L,) datetime64[D] of the daily returns
    gross: object          # (L,)
    net: object            # (L,)
    rebalance_dates: object
    weights: object        # (R, n) target weights at each rebalance
    traded: object         # (R,)
    tickers: list
    infeasible: int
    cost_bps: float
    k: int | None

    def summary(self, seed: int = 0) -> dict:
        import numpy as np

        from icmlkit.lib.backtest_portfolio.metrics import summarize

        net = summarize(self.net, seed=seed)
        gross = summarize(self.gross, seed=seed)
        names = (np.abs(self.weights) > 1e-9).sum(axis=1)
        tr = self.traded[1:] if len(self.traded) > 1 else self.traded
        return {
            "strategy": self.strategy,
            "sharpe": net["sharpe"], "sharpe_ci": net["sharpe_ci"], "ann_return": net["ann_return"],
            "ann_vol": net["ann_vol"], "max_drawdown": net["max_drawdown"],
            "turnover": float(np.mean(tr)) if len(tr) else 0.0,
            "cardinality": int(names.max()), "cardinality_min": int(names.min()),
            "cost_bps": self.cost_bps, "k": self.k,
            "sharpe_gross": gross["sharpe"], "sharpe_ci_gross": gross["sharpe_ci"],
            "ann_return_gross": gross["ann_return"], "ann_vol_gross": gross["ann_vol"],
            "max_drawdown_gross": gross["max_drawdown"],
            "start": str(self.dates[0]), "end": str(self.dates[-1]), "days": int(len(self.dates)),
            "rebalances": int(len(self.rebalance_dates)), "infeasible_rebalances": int(self.infeasible),
            "ci_level": 0.90,
        }


def rebalance_indices(dates, first: int, last: int, every: str | int = "monthly"):
    """Indices in [first, last) at which to rebalance: the last trading day of each month
    (``monthly``), of each Monday-to-Sunday week (``weekly``: Friday, or the last trading day
    before it), or every N trading days (an int)."""
    import numpy as np

    idx = np.arange(first, last)
    if isinstance(every, int) or str(every).isdigit():
        return idx[::int(every)]
    unit = {"monthly": "M", "weekly": "W", "daily": "D"}.get(str(every))
    if unit is None:
        raise UsageError(f"--rebalance must be monthly, weekly, daily or a number of days, not {every!r}")
    if unit == "W":
        # numpy's datetime64[W] weeks start on Thursday (1970-01-01); count Monday-to-Sunday weeks instead
        days = dates.astype("datetime64[D]").astype(np.int64)
        per = (days + 3) // 7
    else:
        per = dates.astype(f"datetime64[{unit}]")
    ends = np.flatnonzero(per[:-1] != per[1:])  # last day of each period (the final period is open)
    return ends[(ends >= first) & (ends < last)]


def simulate(returns, reb, end: int, W, cost_bps: float):
    """Daily gross/net returns of target weights W (R, n) set at indices ``reb`` and held (drifting)
    until the next rebalance; the last period runs to index ``end`` inclusive.
    Returns (gross (L,), net (L,), traded (R,)); the returns start at reb[0] + 1."""
    import numpy as np

    R = np.asarray(returns, dtype=np.float64)
    c = cost_bps / 1e4
    gross, net, traded = [], [], []
    drift = np.zeros(R.shape[1])
    bounds = list(reb[1:]) + [end]
    for j, (t, t_next) in enumerate(zip(reb, bounds)):
        w = W[j]
        tr = float(np.abs(w - drift).sum())
        traded.append(tr)
        block = R[t + 1:t_next + 1]
        if len(block) == 0:
            continue
        G = np.cumprod(1 + block, axis=0)
        V = G @ w
        g = V / np.r_[1.0, V[:-1]] - 1
        n_ = g.copy()
        n_[0] = (1 + g[0]) * (1 - c * tr) - 1
        gross.append(g)
        net.append(n_)
        drift = w * G[-1] / V[-1]
    return np.concatenate(gross), np.concatenate(net), np.asarray(traded)


def target_weights(strategy: str, market, reb, k: int, window: int = 252, cov: str = "ledoit-wolf",
                   rf: float = 0.0, min_weight: float = 0.01, model=None, cfg=None, factors: int = 5):
    """Target weights (R, n) at the rebalancing indices ``reb`` and the count of infeasible dates.

    - equal-weight: 1/N over all N assets;
    - historical-topk: trailing-mean μ̂ and Σ̂ -> dense long-only tangency -> keep its k largest
      weights -> re-solve on them (truncate-and-resolve);
    - pfl / dfl: the trained predictor's μ̂ -> hard top-k of the scores -> re-solve;
    - exact: the exact best long-only Sharpe with at most k names for the historical μ̂, Σ̂
      (enumeration; small universes).
    pfl/dfl/historical-topk hold exactly k names (floor ``min_weight`` on the selected names).
    """
    import numpy as np
    import torch

    from icmlkit.lib.backtest_portfolio import estimators as E
    from icmlkit.lib.backtest_portfolio.layer import SharpeLayer, layer_for, solve_on_support
    from icmlkit.lib.backtest_portfolio.model import Pipeline, build_samples, check_loss
    from icmlkit.lib.backtest_portfolio.topk import hard_topk

    n = market.n
    reb = np.asarray(reb)
    if strategy == "equal-weight":
        return np.full((len(reb), n), 1.0 / n), 0
    rf_daily = rf / 252
    if strategy in ("pfl", "dfl"):
        if model is None:
            raise UsageError(f"strategy {strategy} needs --model (make one with `backtest-portfolio train "
                             f"--loss {strategy}`)")
        check_loss(cfg, strategy)
        s = build_samples(market.returns, reb, cfg.window, cfg.cov, horizon=None, factors=cfg.factors)
        pipe = Pipeline(cfg, n)
        with torch.no_grad():
            mu = model(s.X)
        w, _, inf = pipe.hard(mu, s)
        return w.numpy(), int(inf.sum())
    mu = E.historical_mean(market.returns, reb, window) - rf_daily
    if strategy == "historical-topk":
        F, d = E.factor_model(market.returns, reb, window, cov, factors)
        with torch.no_grad():
            w0, _ = layer_for(n, F.shape[1], 0.0, d is not None)(mu, F, None, d)
            ratio = mu / torch.sqrt((F ** 2).sum(1) + (0 if d is None else d ** 2))
            srank = w0 + 1e-9 * (ratio - ratio.mean(-1, keepdim=True)) / ratio.std(-1, keepdim=True).clamp_min(1e-12)
            m = hard_topk(srank, k)
            w, inf = solve_on_support(mu, F, m, d, min_weight)
        return w.numpy(), int(inf.sum())
    S = E.covariance(market.returns, reb, window, cov, factors=factors)
    if strategy == "exact":
        if E.n_supports(n, k) > 400_000:
            raise UsageError(f"strategy exact enumerates {E.n_supports(n, k)} supports for n={n}, k={k}; "
                             "too many (limit 400000): use a smaller universe or k")
        out = np.zeros((len(reb), n))
        inf = 0
        for j in progress(range(len(reb)), total=len(reb), desc="exact"):
            w, _, _ = E.exact_sparse_tangency(mu[j], S[j], k)
            if w is None:  # no asset beats r_f: the minimum-variance portfolio (flagged)
                inf += 1
                wmv, _ = SharpeLayer(n)(torch.ones(1, n, dtype=torch.float64), E.factor(S[j:j + 1]))
                w = wmv[0]
            out[j] = w.numpy()
        return out, inf
    raise UsageError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")


def run_backtest(market, strategy: str, k: int = 5, start=None, end=None, window: int = 252,
                 cov: str = "ledoit-wolf", rebalance="monthly", cost_bps: float = 10.0, rf: float = 0.0,
                 min_weight: float = 0.01, model=None, cfg=None, factors: int = 5) -> BacktestResult:
    """Walk-forward back-test of ``strategy`` on ``market`` between ``start`` and ``end``."""
    import numpy as np

    from icmlkit.lib.backtest_portfolio.data import check_universe
    from icmlkit.lib.backtest_portfolio.estimators import FEATURE_LOOKBACK

    if cfg is not None:
        window, cov, k, factors = cfg.window, cfg.cov, cfg.k, cfg.factors
        if cfg.min_weight != min_weight:
            log.info("using the model's min_weight %s", cfg.min_weight)
    check_universe(market, k if strategy != "equal-weight" else 1, window)
    if strategy != "equal-weight" and min_weight * k > 1:
        raise UsageError(f"--min-weight {min_weight} × --k {k} exceeds 1")
    need = max(window, FEATURE_LOOKBACK if strategy in ("pfl", "dfl") else window) - 1
    first = need if start is None else max(market.index_of(start), 0)
    if start is not None and market.index_of(start) < need:
        first_ok = market.dates[need] if need < market.T else None
        raise InputError(f"--start {start} leaves fewer than {need + 1} days of history for --window {window}"
                         + (f"; the first possible start is {first_ok}" if first_ok is not None else ""), market.source)
    last = market.T - 1 if end is None else market.index_of(end)
    if last <= first:
        raise InputError(f"no trading days between the first possible rebalance {market.dates[min(first, market.T - 1)]} "
                         f"and the end {market.dates[last] if last >= 0 else end}", market.source)
    reb = rebalance_indices(market.dates, first, last, rebalance)
    if len(reb) == 0 or reb[0] != first:
        reb = np.r_[first, reb[reb > first]]
    W, inf = target_weights(strategy, market, reb, k, window, cov, rf, min_weight, model, cfg, factors)
    gross, net, traded = simulate(market.returns, reb, last, W, cost_bps)
    dates = market.dates[reb[0] + 1:last + 1]
    return BacktestResult(strategy, dates, gross, net, market.dates[reb], W, traded, list(market.tickers), inf,
                          float(cost_bps), None if strategy == "equal-weight" else k)


# --------------------------------------------------------------------------- files


def write_returns_csv(path, res: BacktestResult) -> None:
    from icmlkit.lib.core.io import atomic_write

    with atomic_write(path) as fh:
        fh.write("date,gross,net\n")
        fh.write("".join(f"{d},{g:.10g},{n:.10g}\n" for d, g, n in zip(res.dates, res.gross, res.net)))


def write_holdings_csv(path, res: BacktestResult) -> None:
    """One row per (rebalance date, held ticker): date,ticker,weight (zero weights omitted)."""
    import numpy as np

    from icmlkit.lib.core.io import atomic_write

    with atomic_write(path) as fh:
        fh.write("date,ticker,weight\n")
        for d, w in zip(res.rebalance_dates, res.weights):
            for i in np.flatnonzero(np.abs(w) > 1e-9):
                fh.write(f"{d},{res.tickers[i]},{w[i]:.10g}\n")


def write_weights_csv(path, tickers, w) -> None:
    from icmlkit.lib.core.io import atomic_write

    with atomic_write(path) as fh:
        fh.write("ticker,weight\n")
        fh.write("".join(f"{t},{x:.10g}\n" for t, x in zip(tickers, w)))
