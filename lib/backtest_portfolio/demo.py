"""The demo of backtest-portfolio: DFL and PFL trained briefly on S&P-20 (skfolio's wheel; a synthetic
market when skfolio is not installed), back-tested 2016-2022 against equal-weight and
historical-topk, k = 5, 10 bps. Everything is written into a folder given by the caller."""
from __future__ import annotations

from pathlib import Path

from icmlkit.lib.core.console import log
from icmlkit.lib.core.io import write_json


def _market():
    import numpy as np

    from icmlkit.lib.backtest_portfolio.data import SP500, Market, read_market

    try:
        import skfolio.datasets  # noqa: F401

        return read_market(SP500), "S&P-20 (skfolio)", ("2005-01-01", "2012-12-31", "2015-12-31", "2016-01-01")
    except ImportError:
        from icmlkit.lib.backtest_portfolio.synthetic import planted_market

        sm = planted_market(n=20, blocks=150, seed=0)
        dates = np.datetime64("2008-01-01") + np.arange(sm.returns.shape[0]).astype("timedelta64[D]")
        return (Market(dates, [f"A{i:02d}" for i in range(20)], sm.returns, "synthetic"), "synthetic (skfolio absent)",
                (str(dates[260]), str(dates[1900]), str(dates[2300]), str(dates[2301])))


def run_demo(folder: Path, *, seed: int = 0, epochs: int = 6) -> dict:
    """1. DFL and PFL trained with :func:`~icmlkit.lib.backtest_portfolio.api.train` (train to 2012, validate
    2013-2015 on S&P-20); 2. each strategy back-tested 2016-2022 with
    :func:`~icmlkit.lib.backtest_portfolio.api.backtest`; 3. the comparison report."""
    from icmlkit.lib.backtest_portfolio.api import BacktestConfig, TrainConfig, backtest, train
    from icmlkit.lib.backtest_portfolio.backtest import write_returns_csv
    from icmlkit.lib.backtest_portfolio.report import write_run_report

    folder = Path(folder)
    market, name, (t0, t1, t2, test_start) = _market()
    rows, summaries = [], []
    for strategy in ("equal-weight", "historical-topk", "pfl", "dfl"):
        trained = None
        if strategy in ("pfl", "dfl"):
            cfg = TrainConfig(loss=strategy, k=5, epochs=epochs, eps_start=0.5, eps_end=0.1, train_start=t0,
                              train_end=t1, val_end=t2, stride=10)
            log.info("training %s (%d epochs) ...", strategy, epochs)
            trained = train(cfg, market, seed=seed).trained
        log.info("back-testing %s ...", strategy)
        run = backtest(BacktestConfig(strategy=strategy, k=5, start=test_start, cost_bps=10.0), market, trained,
                       seed=seed)
        s = run.result.summary(seed=seed)
        write_returns_csv(folder / f"{strategy}.returns.csv", run.result)
        rows.append((strategy, s, run.result.dates, run.result.gross, run.result.net))
        summaries.append(s)
    write_run_report(folder, rows, compare=True)
    best = max(summaries, key=lambda s: s["sharpe"])
    parts = [f"{s['strategy']} {s['sharpe']:.2f}" for s in summaries]
    headline = f"{name}, k=5, net Sharpe: " + ", ".join(parts) + f" (best {best['strategy']})"
    out = {"headline": headline, "data": name,
           "strategies": [{k: s[k] for k in ("strategy", "sharpe", "sharpe_ci", "turnover", "cardinality")}
                          for s in summaries]}
    write_json(folder / "demo.json", out)
    return out
