"""One call per subcommand of backtest-portfolio (the CLI, the demo and the benchmark use these):

- :func:`train`: config (:class:`TrainConfig`: the model's :class:`~icmlkit.lib.backtest_portfolio.model.Config`
  plus the date windows) + a :class:`~icmlkit.lib.backtest_portfolio.data.Market` -> :class:`TrainResult`;
- :func:`weights_at`: a trained model + a market + a date -> :class:`WeightsResult`;
- :func:`backtest`: :class:`BacktestConfig` + a market (+ a trained model) -> :class:`BacktestRun`.

Every result has ``.summary`` (the command's JSON summary, less the output paths).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, fields
from icmlkit.lib.core.console import log
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.backtest_portfolio.model import Config, TrainedModel, _opt

RECONSTRUCTED = (
    "The pipeline (features -> MLP -> mu/sigma scores -> smooth top-k -> Sharpe layer, trained on the "
    "realised Sharpe of the next holding period) is RECONSTRUCTED from the paper's abstract; the paper's "
    "code was not read. The homogenised max-Sharpe program itself is standard."
)


def check_date(value, option: str) -> None:
    """A ``YYYY-MM-DD`` date (or None); a UsageError naming ``option`` otherwise."""
    import numpy as np

    if value is None:
        return
    try:
        np.datetime64(str(value), "D")
    except ValueError:
        raise UsageError(f"{option} {value!r} is not a date (expected YYYY-MM-DD)") from None


def _check_min_weight(min_weight: float, k: int) -> None:
    if min_weight * k > 1:
        raise UsageError(f"--min-weight {min_weight} × --k {k} exceeds 1")


# --------------------------------------------------------------------------- train


@dataclass
class TrainConfig(Config):
    """The model's settings plus the date windows of training and validation."""

    train_start: str | None = _opt(None, "First date of the training period (default: earliest possible).")
    train_end: str | None = _opt(None, "Last date whose holding period may be used for training (required).")
    val_end: str | None = _opt(None, "Validation period (train-end, val-end] for model selection.")
    stride: int = _opt(5, "Training dates every N trading days (holding periods overlap).", min=1)

    def check(self) -> None:
        if self.train_end is None:
            raise UsageError("--train-end is required")
        for name in ("train_start", "train_end", "val_end"):
            check_date(getattr(self, name), "--" + name.replace("_", "-"))
        _check_min_weight(self.min_weight, self.k)

    def model_config(self) -> Config:
        """The part of the settings that is saved with the model."""
        return Config(**{f.name: getattr(self, f.name) for f in fields(Config)})


@dataclass
class TrainResult:
    trained: TrainedModel
    train_dates: int
    val_dates: int
    history: list
    seconds: float
    gap: dict | None = None   # model.train_test_gap on the validation (else training) dates; dfl only

    def save(self, path) -> None:
        from icmlkit.lib.backtest_portfolio.model import save_model

        save_model(path, self.trained.model, self.trained.config, self.trained.meta)

    @property
    def summary(self) -> dict:
        cfg = self.trained.config
        best = max((h for h in self.history if h.get("kept")), key=lambda h: h["epoch"])
        return {"loss": cfg.loss, "k": cfg.k, "topk": cfg.topk, "score": cfg.score, "epochs": cfg.epochs,
                "train_dates": self.train_dates, "val_dates": self.val_dates, "train_loss": best["train_loss"],
                "val_sharpe": best.get("val_sharpe"), "val_mse": best.get("val_mse"), "best_epoch": best["epoch"],
                "infeasible_steps": int(sum(h["train_infeasible"] for h in self.history)),
                "train_floor": cfg.train_floor, "train_cost_bps": cfg.train_cost_bps,
                "val_sharpe_net": best.get("val_sharpe_net"), "train_test_gap": self.gap,
                "seconds": round(self.seconds, 3), "seconds_per_epoch": round(self.seconds / cfg.epochs, 3)}


def training_dates(cfg: TrainConfig, market):
    """(training indices, validation indices or None) of the date windows.

    Training dates run every ``stride`` days from the first date with the feature history and
    ``window`` days of covariance (or after ``train_start``) to the last date whose ``horizon``
    holding period ends by ``train_end``; validation dates every ``horizon`` days after
    ``train_end`` to the last whose holding period ends by ``val_end``."""
    import numpy as np

    from icmlkit.lib.backtest_portfolio.estimators import FEATURE_LOOKBACK

    need = max(cfg.window, FEATURE_LOOKBACK)
    first = need - 1
    if getattr(cfg, "train_cost_bps", 0) > 0 and cfg.loss == "dfl":
        first += cfg.horizon  # the loss's trade starts from the portfolio one holding period earlier
    if cfg.train_start is not None:  # the first trading day >= train_start (train_start itself if it trades)
        first = max(first, int(np.searchsorted(market.dates, np.datetime64(str(cfg.train_start), "D"), "left")))
    t_end = market.index_of(cfg.train_end)
    last_train = t_end - cfg.horizon
    if last_train < first:
        raise InputError(f"no training dates: --train-end {cfg.train_end} leaves none after {need} days of history "
                         f"and a {cfg.horizon}-day holding period", market.source)
    tr = np.arange(first, last_train + 1, cfg.stride)
    if cfg.val_end is None:
        return tr, None
    va = np.arange(t_end + 1, market.index_of(cfg.val_end) - cfg.horizon + 1, cfg.horizon)
    if len(va) == 0:
        raise InputError(f"no validation dates between --train-end {cfg.train_end} and --val-end {cfg.val_end}",
                         market.source)
    return tr, va


@contextlib.contextmanager
def _deterministic():
    """torch's deterministic algorithms inside the block (the caller's setting restored after), so
    the same seed gives the same model bytes."""
    import torch

    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def train(cfg: TrainConfig, market, seed: int = 0, source: str | None = None) -> TrainResult:
    """Train the predictor end to end (dfl) or by MSE (pfl) on ``market``'s date windows.

    1. the training / validation dates of the windows (:func:`training_dates`);
    2. features, covariance factors and forward returns at those dates (no look-ahead);
    3. :func:`~icmlkit.lib.backtest_portfolio.model.fit` (keeps the epoch with the best validation score),
       with torch's deterministic algorithms on."""
    from icmlkit.lib.backtest_portfolio.data import check_universe
    from icmlkit.lib.backtest_portfolio.model import build_samples, fit

    cfg.check()
    check_universe(market, cfg.k, cfg.window)
    tr, va = training_dates(cfg, market)
    mcfg = cfg.model_config()
    t0 = time.perf_counter()
    with _deterministic():
        S_tr = build_samples(market.returns, tr, cfg.window, cfg.cov, cfg.horizon, factors=cfg.factors)
        S_va = (build_samples(market.returns, va, cfg.window, cfg.cov, cfg.horizon, factors=cfg.factors)
                if va is not None else None)
        prev = None
        if cfg.train_cost_bps > 0 and cfg.loss == "dfl":
            prev = build_samples(market.returns, tr - cfg.horizon, cfg.window, cfg.cov, cfg.horizon, factors=cfg.factors)
        model, history = fit(mcfg, S_tr, S_va, seed=seed, prev=prev)
    seconds = time.perf_counter() - t0
    gap = None
    if cfg.loss == "dfl":  # the training program against the test program, on the validation (else training) dates
        from icmlkit.lib.backtest_portfolio.model import Pipeline, train_test_gap

        ref = S_va if S_va is not None else S_tr.subset(slice(0, 256))
        gap = train_test_gap(model, Pipeline(mcfg, market.n), ref, cfg.eps_end)
        gap["on"] = "validation" if S_va is not None else "training"
    meta = {"tickers": list(market.tickers), "source": str(source if source is not None else market.source),
            "train_start": str(market.dates[tr[0]]), "train_end": str(market.dates[market.index_of(cfg.train_end)]),
            "val_end": str(market.dates[market.index_of(cfg.val_end)]) if cfg.val_end else None,
            "history": history, "train_test_gap": gap, "reconstructed": RECONSTRUCTED}
    return TrainResult(TrainedModel(model, mcfg, meta), int(len(tr)), int(len(va)) if va is not None else 0,
                       history, seconds, gap)


# --------------------------------------------------------------------------- weights


@dataclass
class WeightsResult:
    date: str
    k: int
    tickers: list
    weights: object       # (n,) numpy
    infeasible: bool

    def rows(self) -> list[dict]:
        return [{"ticker": t, "weight": float(w)} for t, w in zip(self.tickers, self.weights)]

    @property
    def summary(self) -> dict:
        held = {t: float(x) for t, x in zip(self.tickers, self.weights) if x > 1e-9}
        return {"date": self.date, "k": self.k, "names": len(held), "infeasible": self.infeasible, "weights": held}


def weights_at(trained: TrainedModel, market, date: str) -> WeightsResult:
    """The model's portfolio at ``date`` (the last trading day <= it): hard top-k of its scores, then
    the re-solve (exactly k names); uses data up to and including that day only."""
    import torch

    from icmlkit.lib.backtest_portfolio.estimators import FEATURE_LOOKBACK
    from icmlkit.lib.backtest_portfolio.model import Pipeline, build_samples

    check_date(date, "--date")
    cfg = trained.config
    t = market.index_of(date)
    need = max(cfg.window, FEATURE_LOOKBACK)
    if t < need - 1:
        raise InputError(f"--date {date}: needs {need} days of history before it", market.source)
    s = build_samples(market.returns, [t], cfg.window, cfg.cov, horizon=None, factors=cfg.factors)
    with torch.no_grad():
        w, _, inf = Pipeline(cfg, market.n).hard(trained.model(s.X), s)
    return WeightsResult(str(market.dates[t]), cfg.k, list(market.tickers), w[0].numpy(), bool(inf[0]))


# --------------------------------------------------------------------------- back-test


def check_rebalance(value) -> str | int:
    """``monthly``, ``weekly``, ``daily`` or a number of trading days >= 1."""
    s = str(value).strip()
    if s.isdigit() and int(s) >= 1:
        return int(s)
    if s in ("monthly", "weekly", "daily"):
        return s
    raise UsageError(f"--rebalance must be monthly, weekly, daily or a number of trading days >= 1, not {value!r}")


@dataclass
class BacktestConfig:
    """A walk-forward back-test (pfl/dfl take k, window, cov and min_weight from the model)."""

    strategy: str = "equal-weight"  # equal-weight | historical-topk | pfl | dfl | exact (backtest.STRATEGIES)
    k: int = _opt(5, "Cardinality: the number of names held.", min=1)
    start: str | None = _opt(None, "First rebalancing date (default: the first with enough history).")
    end: str | None = _opt(None, "Last date of the back-test (default: the end of the data).")
    rebalance: str = _opt("monthly", "monthly (last trading day of each month), weekly (last trading day of "
                          "each Monday-Sunday week), daily, or every N trading days.")
    cost_bps: float = _opt(10.0, "Transaction cost in basis points of the traded value.", min=0)
    window: int = _opt(252, "Trailing days for the covariance (and the historical mean).", min=2)
    cov: str = _opt("ledoit-wolf", "Covariance estimate on the trailing window (pca-factor: --factors principal "
                    "components + a diagonal, for universes of hundreds of names).",
                    choices=("ledoit-wolf", "sample", "pca-factor"))
    factors: int = _opt(5, "pca-factor: principal components of the trailing window.", min=1)
    rf: float = _opt(0.0, "Annual risk-free rate (constant); daily = rf/252.")
    min_weight: float = _opt(0.01, "Floor on each selected name at test time, so exactly k names are held (0 lets "
                             "long-only zero some out).", min=0, max=1)

    def check(self) -> None:
        check_date(self.start, "--start")
        check_date(self.end, "--end")
        check_rebalance(self.rebalance)


@dataclass
class BacktestRun:
    result: object          # backtest.BacktestResult
    seconds: float
    seed: int
    model_seen: str | None  # the last date of the model's training/validation data

    @property
    def model_data_overlap(self) -> bool | None:
        """True when the model saw data after the first rebalance (not out of sample).

        The first rebalance at date D trades at the close of D and earns the returns of the days
        after D, so a model whose data end on D itself is out of sample (``<``, not ``<=``)."""
        if self.model_seen is None:
            return None
        return str(self.result.rebalance_dates[0]) < self.model_seen

    @property
    def summary(self) -> dict:
        s = {**self.result.summary(seed=self.seed), "seconds": round(self.seconds, 3)}
        if self.model_seen is not None:
            s["model_data_overlap"] = self.model_data_overlap
        return s

    def write(self, folder) -> dict:
        """returns.csv, holdings.csv, summary.json, report.md (and equity.png) into ``folder``."""
        from pathlib import Path

        from icmlkit.lib.core.io import write_json
        from icmlkit.lib.backtest_portfolio.backtest import write_holdings_csv, write_returns_csv
        from icmlkit.lib.backtest_portfolio.report import write_run_report

        folder = Path(folder)
        summary = self.summary
        r = self.result
        write_returns_csv(folder / "returns.csv", r)
        write_holdings_csv(folder / "holdings.csv", r)
        write_json(folder / "summary.json", summary)
        write_run_report(folder, [(r.strategy, summary, r.dates, r.gross, r.net)])
        return summary


def backtest(cfg: BacktestConfig, market, trained: TrainedModel | None = None, seed: int = 0,
             model_name: str = "the model file") -> BacktestRun:
    """Walk-forward back-test of ``cfg.strategy`` (pfl/dfl with ``trained``, which must have been trained
    with that loss: else a UsageError naming ``model_name``); ``seed`` seeds the bootstrap of the Sharpe CI."""
    from icmlkit.lib.backtest_portfolio.backtest import run_backtest
    from icmlkit.lib.backtest_portfolio.model import check_loss

    cfg.check()
    if cfg.strategy in ("pfl", "dfl") and trained is None:
        raise UsageError(f"--strategy {cfg.strategy} needs --model (make one with `backtest-portfolio train "
                         f"--loss {cfg.strategy}`)")
    if cfg.strategy not in ("pfl", "dfl") and trained is not None:
        raise UsageError(f"--model is used by the pfl and dfl strategies only, not {cfg.strategy}")
    if trained is not None:
        check_loss(trained.config, cfg.strategy, model_name)
    mcfg = trained.config if trained is not None else None
    t0 = time.perf_counter()
    res = run_backtest(market, cfg.strategy, k=cfg.k, start=cfg.start, end=cfg.end, window=cfg.window, cov=cfg.cov,
                       rebalance=check_rebalance(cfg.rebalance), cost_bps=cfg.cost_bps, rf=cfg.rf, factors=cfg.factors,
                       min_weight=cfg.min_weight if mcfg is None else mcfg.min_weight,
                       model=trained.model if trained is not None else None, cfg=mcfg)
    seen = None
    if trained is not None:
        seen = str(trained.meta.get("val_end") or trained.meta.get("train_end"))
    out = BacktestRun(res, time.perf_counter() - t0, seed, seen)
    if out.model_data_overlap:
        log.warning("the model's training/validation data reach %s, after the first rebalance %s: "
                    "the back-test is not out of sample", seen, res.rebalance_dates[0])
    return out
