"""backtest-portfolio: decision-focused sparse (exactly k assets) tangency portfolios, back-tested."""
from __future__ import annotations

import click

from icmlkit.cli._common import ToolGroup, add_demo, config_options, make_main, option_group, output_option
from icmlkit.lib.backtest_portfolio.api import BacktestConfig, TrainConfig  # light modules: no torch at import
from icmlkit.lib.backtest_portfolio.synthetic import GenerateConfig

TOOL = "backtest-portfolio"
RECONSTRUCTED = (
    "The pipeline (features -> MLP -> mu/sigma scores -> smooth top-k -> Sharpe layer, trained on the "
    "realised Sharpe of the next holding period) is RECONSTRUCTED from the paper's abstract; the paper's "
    "code was not read. The homogenised max-Sharpe program itself is standard."
)  # the same text as icmlkit.lib.backtest_portfolio.api.RECONSTRUCTED (not imported: --help stays fast)
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
(1990-2022; `pip install 'icmlkit[backtest-portfolio]'`; today's constituents: survivorship bias).
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
  backtest-portfolio generate --n 20 --blocks 150 -o planted.csv --truth planted.truth.csv
  backtest-portfolio demo""",
)



class IsoDate(click.DateTime):
    """A ``YYYY-MM-DD`` date, handed on as that string (exit 2 naming the option otherwise)."""

    name = "date"

    def __init__(self):
        super().__init__(formats=["%Y-%m-%d"])

    def convert(self, value, param, ctx):
        return None if value is None else super().convert(value, param, ctx).date().isoformat()


DATE = {"type": IsoDate()}
STRATEGIES = ["equal-weight", "historical-topk", "pfl", "dfl", "exact"]
STRATEGY_HELP = ("equal-weight (1/N), historical-topk (truncate-and-resolve), pfl / dfl (need --model), exact "
                 "(enumeration, small universes).")
# model settings that `train` does not offer (the defaults are the reconstructed pipeline's)
NOT_OPTIONS = ("features", "layers", "weight_decay")

prices_options = option_group([
    click.argument("prices"),
    click.option("--returns", "is_returns", is_flag=True, help="PRICES holds simple daily returns, not prices."),
    click.option("--max-gap", type=click.IntRange(min=0), default=5, show_default=True,
                 help="Longest run of missing prices that is forward-filled (see the NaN rule)."),
])


def _market(run, prices, is_returns, max_gap):
    from icmlkit.lib.core.console import log
    from icmlkit.lib.backtest_portfolio.data import SP500, read_market

    if prices == SP500:
        run.builtin_input(SP500, "skfolio")
    else:
        run.input(prices)
    market = read_market(prices, returns=is_returns, max_gap=max_gap)
    for note in market.notes:
        log.warning("%s: %s", market.source, note)
    return market


def _model(run, model_path, market):
    from icmlkit.lib.backtest_portfolio.model import load_model

    trained = load_model(run.input(model_path))
    trained.check_market(market, model_path)
    return trained


@cli.command()
@prices_options
@output_option("Write the trained model.", suffixes=(".pt",), stdout=False, required=True)
@config_options(TrainConfig, exclude=NOT_OPTIONS, train_start=DATE, train_end=DATE, val_end=DATE)
def train(run, prices, output, is_returns, max_gap, cfg):
    """Train the predictor end to end (dfl) or by MSE (pfl) and save it as a .pt model.

    Training dates run every --stride days from the first date with 252 days of features and
    --window days of covariance, to the last date whose --horizon holding period ends by
    --train-end (required); validation dates likewise up to --val-end. The epoch with the best
    validation score (Sharpe for dfl, MSE for pfl) is kept.

    \b
    Train/test consistency: training solves the layer on a soft mask (without the --min-weight
    floor unless --train-floor); the test holds the hard top-k with the floor. train_test_gap
    reports the difference on the validation dates (dfl).

    \b
    JSON keys: loss, k, topk, score, epochs, train_dates, val_dates, train_loss, val_sharpe, val_mse,
    best_epoch, infeasible_steps, train_floor, train_cost_bps, val_sharpe_net (with
    --train-cost-bps), train_test_gap (dfl: eps, dates, soft_sharpe, hard_sharpe, gap, mask_distance,
    soft_names, hard_at_floor_share, on), seconds, seconds_per_epoch, output.
    Example:  backtest-portfolio train skfolio:sp500 --train-end 2012-12-31 --val-end 2015-12-31 -o dfl.pt
    """
    from icmlkit.lib.backtest_portfolio.api import train as train_model

    run.output(output)
    market = _market(run, prices, is_returns, max_gap)
    result = train_model(cfg, market, seed=run.seed, source=prices)
    run.save(output, result.save)
    return {**result.summary, "output": output}


@cli.command(seed=False)
@click.argument("model_path", metavar="MODEL")
@prices_options
@click.option("--date", "date", type=IsoDate(), required=True,
              help="Rebalancing date D (the last trading day <= D is used).")
@output_option("Write the weights (ticker,weight).", suffixes=(".csv", ".jsonl", ".parquet"))
def weights(run, model_path, prices, date, output, is_returns, max_gap):
    """The model's portfolio at one date: hard top-k of its scores + re-solve (exactly k names).

    Uses data up to and including D only.

    \b
    JSON keys: date, k, names, infeasible, weights (ticker -> weight, non-zero only), output.
    Example:  backtest-portfolio weights dfl.pt skfolio:sp500 --date 2020-03-31 -o - | sort -t, -k2 -gr
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.backtest_portfolio.api import weights_at

    run.output(output)
    market = _market(run, prices, is_returns, max_gap)
    result = weights_at(_model(run, model_path, market), market, date)
    run.save(output, write_rows, result.rows(), ["ticker", "weight"], float_format="%.10g")
    return {**result.summary, "output": output}


@cli.command()
@prices_options
@click.option("--model", "model_path", default=None, help="A model from `train` (strategies pfl, dfl).")
@output_option("Run folder: returns.csv, holdings.csv, summary.json, report.md, equity.png.", directory=True,
               required=True)
@config_options(BacktestConfig, start=DATE, end=DATE,
                strategy={"flags": ("-s", "--strategy"), "required": True, "choices": STRATEGIES, "help": STRATEGY_HELP})
def backtest(run, prices, model_path, output, is_returns, max_gap, cfg):
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
    from icmlkit.lib.backtest_portfolio.api import backtest as run_backtest

    with run.run_dir(output) as folder:
        market = _market(run, prices, is_returns, max_gap)
        trained = _model(run, model_path, market) if model_path is not None else None
        summary = run_backtest(cfg, market, trained, seed=run.seed, model_name=model_path).write(folder)
    return {**summary, "outdir": output}


@cli.command(seed=False)
@click.argument("results", nargs=-1, required=True)
@output_option("Folder for report.md, report.csv, summary.json, equity.png.", directory=True, required=True)
def report(run, results, output):
    """Compare back-test runs side by side: table (gross and net) and PNG equity curves / drawdowns.

    RESULTS are run folders written by `backtest` (or their returns.csv files); anything else is
    refused at once (its first line must be the header date,gross,net). With several runs, every
    pair gets a paired test of the net Sharpe difference on the days both share (paired stationary
    bootstrap, mean block 21 days, 2000 draws: 90 % CI and two-sided p-value) -- overlapping per-run
    CIs are not a test of a difference.

    \b
    JSON keys: strategies (list of each run's summary), best (strategy with the highest net Sharpe),
    paired (per pair: a, b, diff = Sharpe(a) - Sharpe(b), ci, p_value, days, n_boot, mean_block,
    ci_level, start, end), outdir.
    Example:  backtest-portfolio report runs/* -o runs/compare --json | jq .best
    """
    from icmlkit.lib.backtest_portfolio.report import read_run, write_run_report

    rows = [read_run(run.input(p)) for p in results]
    with run.run_dir(output) as folder:
        summaries, paired = write_run_report(folder, rows, compare=True)
    best = max(summaries, key=lambda s: s["sharpe"])
    return {"strategies": summaries, "best": best["strategy"], "paired": paired, "outdir": output}


@cli.command()
@output_option("Write the prices (date, A00, A01, ...; CSV or Parquet by suffix).", suffixes=(".csv", ".parquet"),
               required=True)
@click.option("--truth", default=None, type=click.Path(dir_okay=False),
              help="Also write the known answer (.csv, .jsonl or .parquet): per block end and ticker the "
              "signals revealed for the next block, its planted mean, volatility and Sharpe, the rank and "
              "top_k (the planted best k).")
@config_options(GenerateConfig)
def generate(run, output, truth, cfg):
    """Write the planted synthetic market (known answer: the best k assets of every block) as prices.

    Blocks of --block business days; at the close of each block end two per-asset signals for the
    next block are revealed: x (an asset's mean return is sigma*alpha*x, its Sharpe grows with x)
    and an event flag (a higher mean with much more risk). Mean-squared-error prediction favours the
    event assets; the planted best k by Sharpe does not. Back-test with `--rebalance <block>` and
    `--start <first_block_end>` to trade at the block ends. This is our test design, not the paper's.

    \b
    JSON keys: n, days, blocks, block, k, start, end, block_ends, first_block_end,
    planted_top_k_first (the planted best k at the first block end), planted_top_k_sharpe (mean
    annualised Sharpe of the planted best k over the block ends), output, truth.
    Example:  backtest-portfolio generate --n 20 --k 5 --seed 1 -o planted.csv --truth truth.csv --json
    """
    from icmlkit.lib.core.io import rows_format, write_rows
    from icmlkit.lib.backtest_portfolio.synthetic import generate as planted

    run.output(output)
    if truth is not None:
        if truth == "-":
            raise click.BadParameter("name a file ('-' is stdout, which the prices may use)", param_hint="--truth")
        rows_format(truth)
        run.output(truth)
    result = planted(cfg, seed=run.seed)
    run.save(output, write_rows, result.price_rows())
    if truth is not None:
        run.save(truth, write_rows, result.truth_rows())
    return {**result.summary, "output": output, "truth": truth}


add_demo(cli, "icmlkit.lib.backtest_portfolio.demo:run_demo",
         doc="""Train DFL and PFL briefly on the S&P-20 data (synthetic prices without skfolio) and back-test
    them against equal-weight and historical-topk (k = 5, 10 bps), about a minute.

    Writes each strategy's returns, a comparison table, equity.png and manifest.json into OUTDIR.

    \b
    JSON keys: headline, data, strategies, outdir.
    Example:  backtest-portfolio demo --epochs 3 --outdir /tmp/demo --json | jq -r .headline
    """,
         options=[click.option("--epochs", type=click.IntRange(min=1), default=6, show_default=True,
                               help="Training epochs of DFL and PFL.")])


main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
