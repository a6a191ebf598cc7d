"""backtest-portfolio: decision-focused sparse (exactly k assets) tangency portfolios, back-tested."""
from __future__ import annotations

import click

from icmlkit.cli._common import ToolGroup, make_main, output_option

TOOL = "backtest-portfolio"
STRATEGIES = ["equal-weight", "historical-topk", "pfl", "dfl", "exact"]
TOPK = ["capped-simplex", "sinkhorn", "perturbed"]
RECONSTRUCTED = (
    "The pipeline (features -> MLP -> mu/sigma scores -> smooth top-k -> Sharpe layer, trained on the "
    "realised Sharpe of the next holding period) is RECONSTRUCTED from the paper's abstract; the paper's "
    "code was not read. The homogenised max-Sharpe program itself is standard."
)
NAN_RULE = ("NaN rule: interior gaps of at most --max-gap missing prices are forward-filled (counted in the "
            "summary and logged); longer gaps, a missing first price, or any missing return are errors.")

cli = ToolGroup(
    TOOL,
    help=f"""Sparse tangency portfolios with exactly k assets, learned end to end and back-tested.

\b
prediction (MLP on trailing returns and volatility) -> smooth top-k selection (Σm = k exactly)
-> convex re-optimisation (a differentiable max-Sharpe layer, cvxpylayers), trained on realised
Sharpe (decision-focused, dfl) or on MSE (prediction-focused, pfl); walk-forward back-tests with
monthly rebalancing, transaction costs, and baselines (equal-weight, historical-topk, exact).

{RECONSTRUCTED}

\b
PRICES: a wide CSV(.gz)/Parquet table ('-' = CSV on stdin), first column the date, one column per ticker (prices, or
simple returns with --returns), or `skfolio:sp500` for the 20 S&P 500 stocks of skfolio's wheel
(1990-2022; `pip install 'icmlkit[portfolio]'`; today's constituents: survivorship bias).
{NAN_RULE}

\b
Examples:
  backtest-portfolio train skfolio:sp500 --k 5 --loss dfl --train-end 2012-12-31 \\
      --val-end 2015-12-31 -o dfl.pt --json
  backtest-portfolio weights dfl.pt skfolio:sp500 --date 2016-01-29 -o w.csv
  backtest-portfolio backtest skfolio:sp500 --model dfl.pt --strategy dfl --start 2016-01-01 \\
      --cost-bps 10 -o runs/dfl --json | jq .sharpe
  backtest-portfolio backtest prices.csv --strategy historical-topk --k 5 -o runs/hist
  backtest-portfolio report runs/dfl runs/hist -o runs/compare
  backtest-portfolio demo""",
)

k_option = click.option("--k", type=click.IntRange(min=1), default=5, show_default=True,
                        help="Cardinality: the number of names held.")
returns_option = click.option("--returns", "is_returns", is_flag=True,
                              help="PRICES holds simple daily returns, not prices.")
gap_option = click.option("--max-gap", type=click.IntRange(min=0), default=5, show_default=True,
                          help="Longest run of missing prices that is forward-filled (see the NaN rule).")
window_option = click.option("--window", type=click.IntRange(min=2), default=252, show_default=True,
                             help="Trailing days for the covariance (and the historical mean).")
cov_option = click.option("--cov", type=click.Choice(["ledoit-wolf", "sample"]), default="ledoit-wolf",
                          show_default=True, help="Covariance estimate on the trailing window.")
rf_option = click.option("--rf", type=float, default=0.0, show_default=True,
                         help="Annual risk-free rate (constant); daily = rf/252.")
minw_option = click.option("--min-weight", type=click.FloatRange(0, 1), default=0.01, show_default=True,
                           help="Floor on each selected name at test time, so exactly k names are held "
                           "(0 lets long-only zero some out).")


def _market(run, prices, is_returns, max_gap):
    from icmlkit.lib.portfolio.data import SP500, read_market

    if prices not in (SP500, "-"):
        run.input(prices)
    market = read_market(prices, returns=is_returns, max_gap=max_gap)
    from icmlkit.lib.core.console import log

    for note in market.notes:
        log.warning("%s: %s", market.source, note)
    return market


@cli.command()
@click.argument("prices")
@output_option("Write the trained model (.pt).", required=True)
@returns_option
@gap_option
@k_option
@click.option("--loss", type=click.Choice(["dfl", "pfl"]), default="dfl", show_default=True,
              help="dfl: minus realised Sharpe through the selection and layer; pfl: MSE of the prediction.")
@click.option("--topk", type=click.Choice(TOPK), default="capped-simplex", show_default=True,
              help="Smooth top-k operator used in training (reconstructed choice; all give Σm = k).")
@click.option("--score", type=click.Choice(["ratio", "tangency"]), default="ratio", show_default=True,
              help="Selection scores: z-scored mu/sigma, or the dense tangency weights (one more layer solve); "
              "reconstructed choice.")
@click.option("--train-start", default=None, help="First date of the training period (default: earliest possible).")
@click.option("--train-end", required=True, help="Last date whose holding period may be used for training.")
@click.option("--val-end", default=None, help="Validation period (train-end, val-end] for model selection.")
@window_option
@cov_option
@click.option("--horizon", type=click.IntRange(min=2), default=21, show_default=True,
              help="Holding period in days for the loss.")
@click.option("--stride", type=click.IntRange(min=1), default=5, show_default=True,
              help="Training dates every N trading days (holding periods overlap).")
@click.option("--epochs", type=click.IntRange(min=1), default=30, show_default=True)
@click.option("--batch", type=click.IntRange(min=2), default=32, show_default=True, help="Dates per step.")
@click.option("--lr", type=float, default=1e-3, show_default=True)
@click.option("--hidden", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--eps-start", type=float, default=1.0, show_default=True, help="Top-k temperature at the start.")
@click.option("--eps-end", type=float, default=0.05, show_default=True, help="... annealed geometrically to this.")
@click.option("--pooled", is_flag=True, help="dfl: Sharpe of the batch's pooled returns instead of the mean per date.")
@rf_option
@minw_option
def train(run, prices, output, is_returns, max_gap, k, loss, topk, score, train_start, train_end, val_end, window, cov,
          horizon, stride, epochs, batch, lr, hidden, eps_start, eps_end, pooled, rf, min_weight):
    """Train the predictor end to end (dfl) or by MSE (pfl) and save it as a .pt model.

    Training dates run every --stride days from the first date with 252 days of features and
    --window days of covariance, to the last date whose --horizon holding period ends by
    --train-end; validation dates likewise up to --val-end. The epoch with the best validation
    score (Sharpe for dfl, MSE for pfl) is kept.

    \b
    JSON keys: loss, k, topk, score, epochs, train_dates, val_dates, train_loss, val_sharpe, val_mse,
    best_epoch, infeasible_steps, seconds, seconds_per_epoch, output.
    Example:  backtest-portfolio train skfolio:sp500 --train-end 2012-12-31 --val-end 2015-12-31 -o dfl.pt
    """
    import time

    import numpy as np

    from icmlkit.lib.core.errors import InputError, UsageError
    from icmlkit.lib.portfolio.data import check_universe
    from icmlkit.lib.portfolio.estimators import FEATURE_LOOKBACK
    from icmlkit.lib.portfolio.model import Config, build_samples, fit, save_model

    if not str(output).endswith(".pt"):
        raise click.BadParameter(f"{output}: the model is saved as .pt", param_hint="-o")
    if min_weight * k > 1:
        raise UsageError(f"--min-weight {min_weight} × --k {k} exceeds 1")
    run.output(output)
    import torch

    torch.use_deterministic_algorithms(True)
    market = _market(run, prices, is_returns, max_gap)
    check_universe(market, k, window)
    first = max(window, FEATURE_LOOKBACK) - 1
    if train_start is not None:
        first = max(first, market.index_of(train_start) + 1)
    t_end = market.index_of(train_end)
    last_train = t_end - horizon
    if last_train < first:
        raise InputError(f"no training dates: --train-end {train_end} leaves none after {max(window, FEATURE_LOOKBACK)} "
                         f"days of history and a {horizon}-day holding period", market.source)
    tr = np.arange(first, last_train + 1, stride)
    va = None
    if val_end is not None:
        v_end = market.index_of(val_end) - horizon
        va = np.arange(t_end + 1, v_end + 1, horizon)
        if len(va) == 0:
            raise InputError(f"no validation dates between --train-end {train_end} and --val-end {val_end}",
                             market.source)
    cfg = Config(loss=loss, k=k, topk=topk, score=score, window=window, cov=cov, horizon=horizon, hidden=hidden, epochs=epochs,
                 batch=batch, lr=lr, eps_start=eps_start, eps_end=eps_end, rf=rf, min_weight=min_weight,
                 pooled=pooled)
    t0 = time.perf_counter()
    S_tr = build_samples(market.returns, tr, window, cov, horizon)
    S_va = build_samples(market.returns, va, window, cov, horizon) if va is not None else None
    model, history = fit(cfg, S_tr, S_va, seed=run.seed)
    seconds = time.perf_counter() - t0
    best = max((h for h in history if h.get("kept")), key=lambda h: h["epoch"])
    meta = {"tickers": list(market.tickers), "source": str(prices), "train_start": str(market.dates[tr[0]]),
            "train_end": str(market.dates[t_end]), "val_end": str(market.dates[market.index_of(val_end)]) if val_end else None,
            "history": history, "reconstructed": RECONSTRUCTED}
    save_model(output, model, cfg, meta)
    run.wrote(output)
    return {"loss": loss, "k": k, "topk": topk, "score": score, "epochs": epochs, "train_dates": int(len(tr)),
            "val_dates": int(len(va)) if va is not None else 0, "train_loss": best["train_loss"],
            "val_sharpe": best.get("val_sharpe"), "val_mse": best.get("val_mse"), "best_epoch": best["epoch"],
            "infeasible_steps": int(sum(h["train_infeasible"] for h in history)),
            "seconds": round(seconds, 3), "seconds_per_epoch": round(seconds / epochs, 3), "output": output}


def _load(run, model_path, market):
    from icmlkit.lib.core.errors import InputError
    from icmlkit.lib.portfolio.model import load_model

    model, cfg, meta = load_model(run.input(model_path))
    if list(meta.get("tickers", [])) != list(market.tickers):
        raise InputError(f"the model was trained on tickers {meta.get('tickers')}, but the prices have "
                         f"{market.tickers}", model_path)
    return model, cfg, meta


@cli.command(seed=False)
@click.argument("model_path", metavar="MODEL")
@click.argument("prices")
@click.option("--date", "date", required=True, help="Rebalancing date D (the last trading day <= D is used).")
@output_option("Write the weights as CSV (ticker,weight).")
@returns_option
@gap_option
def weights(run, model_path, prices, date, output, is_returns, max_gap):
    """The model's portfolio at one date: hard top-k of its scores + re-solve (exactly k names).

    Uses data up to and including D only.

    \b
    JSON keys: date, k, names, infeasible, weights (ticker -> weight, non-zero only), output.
    Example:  backtest-portfolio weights dfl.pt skfolio:sp500 --date 2020-03-31 -o - | sort -t, -k2 -gr
    """
    from icmlkit.lib.core.errors import InputError
    from icmlkit.lib.portfolio.backtest import write_weights_csv
    from icmlkit.lib.portfolio.estimators import FEATURE_LOOKBACK
    from icmlkit.lib.portfolio.model import Pipeline, build_samples

    run.output(output)
    market = _market(run, prices, is_returns, max_gap)
    model, cfg, meta = _load(run, model_path, market)
    t = market.index_of(date)
    need = max(cfg.window, FEATURE_LOOKBACK)
    if t < need - 1:
        raise InputError(f"--date {date}: needs {need} days of history before it", market.source)
    import torch

    s = build_samples(market.returns, [t], cfg.window, cfg.cov, horizon=None)
    with torch.no_grad():
        w, _, inf = Pipeline(cfg, market.n).hard(model(s.X), s)
    w = w[0].numpy()
    if output is not None:
        write_weights_csv(output, market.tickers, w)
        run.wrote(output)
    held = {tk: float(x) for tk, x in zip(market.tickers, w) if x > 1e-9}
    return {"date": str(market.dates[t]), "k": cfg.k, "names": len(held), "infeasible": bool(inf[0]),
            "weights": held, "output": output}


@cli.command()
@click.argument("prices")
@click.option("--strategy", "-s", type=click.Choice(STRATEGIES), required=True,
              help="equal-weight (1/N), historical-topk (truncate-and-resolve), pfl / dfl (need --model), "
              "exact (enumeration, small universes).")
@click.option("--model", "model_path", default=None, help="A model from `train` (strategies pfl, dfl).")
@output_option("Run folder: returns.csv, holdings.csv, summary.json, report.md, equity.png.", required=True)
@returns_option
@gap_option
@k_option
@click.option("--start", default=None, help="First rebalancing date (default: the first with enough history).")
@click.option("--end", default=None, help="Last date of the back-test (default: the end of the data).")
@click.option("--rebalance", default="monthly", show_default=True,
              help="monthly (last trading day of each month), weekly, or every N trading days.")
@click.option("--cost-bps", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Transaction cost in basis points of the traded value.")
@window_option
@cov_option
@rf_option
@minw_option
def backtest(run, prices, strategy, model_path, output, is_returns, max_gap, k, start, end, rebalance, cost_bps,
             window, cov, rf, min_weight):
    """Walk-forward back-test with no look-ahead (weights at t use data <= t; trades at the close of t).

    pfl/dfl use the model's own k, window and covariance settings.

    \b
    JSON keys: strategy, sharpe, sharpe_ci (90 % stationary bootstrap), ann_return, ann_vol,
    max_drawdown, turnover (mean traded fraction per rebalance), cardinality (most names held at a
    rebalance), cardinality_min, cost_bps, k, sharpe_gross, sharpe_ci_gross, ann_return_gross,
    ann_vol_gross, max_drawdown_gross, start, end, days, rebalances, infeasible_rebalances,
    ci_level, seconds, outdir; with --model also model_data_overlap (true when the model saw data
    after the first rebalance: not out of sample). The first group is net of costs.
    Example:  backtest-portfolio backtest skfolio:sp500 -s exact --k 5 --start 2016-01-01 -o runs/exact
    """
    import time

    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.core.io import write_json
    from icmlkit.lib.portfolio.backtest import run_backtest, write_holdings_csv, write_returns_csv
    from icmlkit.lib.portfolio.report import write_run_report

    if strategy in ("pfl", "dfl") and model_path is None:
        raise UsageError(f"--strategy {strategy} needs --model (make one with `backtest-portfolio train --loss {strategy}`)")
    if strategy not in ("pfl", "dfl") and model_path is not None:
        raise UsageError(f"--model is used by the pfl and dfl strategies only, not {strategy}")
    every = int(rebalance) if str(rebalance).isdigit() else rebalance
    with run.run_dir(output) as folder:
        market = _market(run, prices, is_returns, max_gap)
        model = cfg = meta = None
        if model_path is not None:
            model, cfg, meta = _load(run, model_path, market)
        t0 = time.perf_counter()
        res = run_backtest(market, strategy, k=k, start=start, end=end, window=window, cov=cov, rebalance=every,
                           cost_bps=cost_bps, rf=rf, min_weight=min_weight if cfg is None else cfg.min_weight,
                           model=model, cfg=cfg)
        seconds = time.perf_counter() - t0
        summary = {**res.summary(seed=run.seed), "seconds": round(seconds, 3)}
        if meta is not None:
            seen = str(meta.get("val_end") or meta.get("train_end"))
            summary["model_data_overlap"] = str(res.rebalance_dates[0]) <= seen
            if summary["model_data_overlap"]:
                from icmlkit.lib.core.console import log

                log.warning("the model's training/validation data reach %s, after the first rebalance %s: "
                            "the back-test is not out of sample", seen, res.rebalance_dates[0])
        write_returns_csv(folder / "returns.csv", res)
        write_holdings_csv(folder / "holdings.csv", res)
        write_json(folder / "summary.json", summary)
        write_run_report(folder, [(strategy, summary, res.dates, res.gross, res.net)])
    return {**summary, "outdir": output}


@cli.command(seed=False)
@click.argument("results", nargs=-1, required=True)
@output_option("Folder for report.md, report.csv, summary.json, equity.png.", required=True)
def report(run, results, output):
    """Compare back-test runs side by side: table (gross and net) and PNG equity curves / drawdowns.

    RESULTS are run folders written by `backtest` (or their returns.csv files).

    \b
    JSON keys: strategies (list of each run's summary), best (strategy with the highest net Sharpe),
    outdir.
    Example:  backtest-portfolio report runs/* -o runs/compare --json | jq .best
    """
    from icmlkit.lib.portfolio.report import read_run, write_run_report

    with run.run_dir(output) as folder:
        rows = [read_run(run.input(p)) for p in results]
        summaries = write_run_report(folder, rows, compare=True)
    best = max(summaries, key=lambda s: s["sharpe"])
    return {"strategies": summaries, "best": best["strategy"], "outdir": output}


@cli.command()
@click.option("--outdir", default="outputs/demo/backtest-portfolio", show_default=True,
              type=click.Path(file_okay=False), help="Run directory (built as <outdir>.partial).")
@click.option("--epochs", type=click.IntRange(min=1), default=6, show_default=True)
def demo(run, outdir, epochs):
    """Train DFL and PFL briefly on the S&P-20 data (synthetic prices without skfolio) and back-test
    them against equal-weight and historical-topk (k = 5, 10 bps), about a minute.

    Writes each strategy's returns, a comparison table, equity.png and manifest.json into OUTDIR.
    JSON keys: headline, data, strategies, outdir.
    """
    from icmlkit.lib.portfolio.demo import run_demo

    with run.run_dir(outdir) as folder:
        summary = run_demo(folder, epochs=epochs, seed=run.seed)
    return {**summary, "outdir": outdir}


main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
