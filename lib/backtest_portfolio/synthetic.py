"""A synthetic market with a planted predictable signal where MSE and Sharpe disagree.

Time is cut into blocks of ``block`` trading days. At the close of the last day of block b two
per-asset signals for block b+1 are revealed (they are the features at that date):

- x ~ N(0, 1): a Sharpe signal; in block b+1 the asset's mean daily return is σ_i·alpha·x (its
  Sharpe is proportional to x);
- j ~ Bernoulli(p_event): an "event" flag; an asset with j = 1 earns an extra mean ``event_mean``
  per day in block b+1 but with extra noise of std ``event_vol`` (e.g. an announcement).

Returns: r_t,i = β_i f_t + σ_i (alpha·x_i + ε_t,i) + j_i (event_mean + event_vol·η_t,i), with a market
factor f_t ~ N(market_mean, market_vol²). The MSE-optimal prediction ranks event assets first
(their mean is largest), but their extra risk is not in the trailing covariance when they are
picked, so a prediction-focused pipeline holds them and its realised Sharpe suffers; a
decision-focused pipeline can learn to down-weight the flag. This is our test design, not the
paper's protocol.
"""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.backtest_portfolio.model import PERIODS, _opt


@dataclass
class SyntheticMarket:
    returns: object      # (T, n)
    features: object     # (T, n, 2): (x, j) for the next block, constant within a block
    block_ends: object   # indices of the last day of each block (except the last block)
    sigma: object        # (n,)
    beta: object = None  # (n,) market loadings


def planted_market(n: int = 20, blocks: int = 300, block: int = 21, seed: int = 0, alpha: float = 0.06,
                   p_event: float = 0.15, event_mean: float = 0.0025, event_vol: float = 0.12,
                   market_mean: float = 0.0003, market_vol: float = 0.006) -> SyntheticMarket:
    import numpy as np

    rng = np.random.default_rng(seed)
    T = blocks * block
    sigma = rng.uniform(0.01, 0.02, n)
    beta = rng.uniform(0.6, 1.4, n)
    x = rng.standard_normal((blocks, n))
    j = (rng.random((blocks, n)) < p_event).astype(np.float64)
    xd = np.repeat(x, block, axis=0)
    jd = np.repeat(j, block, axis=0)
    f = market_mean + market_vol * rng.standard_normal(T)
    eps = rng.standard_normal((T, n))
    eta = rng.standard_normal((T, n))
    R = beta * f[:, None] + sigma * (alpha * xd + eps) + jd * (event_mean + event_vol * eta)
    feats = np.zeros((T, n, 2))
    # at the close of the last day of block b the signals of block b+1 are known
    nxt = np.concatenate([x[1:], np.zeros((1, n))])
    nj = np.concatenate([j[1:], np.zeros((1, n))])
    feats[:, :, 0] = np.repeat(nxt, block, axis=0)
    feats[:, :, 1] = np.repeat(nj, block, axis=0)
    ends = np.arange(block - 1, T - block, block)
    return SyntheticMarket(R, feats, ends, sigma, beta)


# --------------------------------------------------------------------------- `generate`


@dataclass
class GenerateConfig:
    """The planted market written as a prices file (``backtest-portfolio generate``)."""

    n: int = _opt(20, "Assets (tickers A00, A01, ...).", min=2)
    blocks: int = _opt(150, "Blocks of --block trading days.", min=2)
    block: int = _opt(21, "Trading days per block (the planted signals change at each block end).", min=2)
    k: int = _opt(5, "Size of the planted best set reported per block end (the known answer).", min=1)
    alpha: float = _opt(0.06, "Sharpe signal strength: an asset's mean daily return is sigma*alpha*x.", min=0)
    p_event: float = _opt(0.15, "Probability of an event flag per asset and block.", min=0, max=1)
    event_mean: float = _opt(0.0025, "Extra mean daily return of an event asset.")
    event_vol: float = _opt(0.12, "Extra daily volatility of an event asset.", min=0)
    market_mean: float = _opt(0.0003, "Mean daily return of the market factor.")
    market_vol: float = _opt(0.006, "Daily volatility of the market factor.", min=0)
    start: str = _opt("2000-01-03", "First date (business days follow).")

    def check(self) -> None:
        from icmlkit.lib.backtest_portfolio.api import check_date

        if self.k > self.n:
            raise UsageError(f"--k {self.k} exceeds --n {self.n}")
        check_date(self.start, "--start")


@dataclass
class PlantedPrices:
    """The planted market as prices (100 on the first date) and its known answer per block end."""

    cfg: GenerateConfig
    market: SyntheticMarket
    dates: object        # (T + 1,) datetime64[D]: the first is the base date of the prices
    tickers: list
    prices: object       # (T + 1, n)

    def price_rows(self) -> list[dict]:
        return [{"date": str(d), **dict(zip(self.tickers, map(float, row)))} for d, row in zip(self.dates, self.prices)]

    def truth_rows(self) -> list[dict]:
        """One row per (block end, ticker): the signals revealed at that close for the next block
        (x, event), the planted daily mean and volatility of the next block, its annualised
        Sharpe, the rank by it and whether the asset is in the planted best k."""
        import numpy as np

        c, sm = self.cfg, self.market
        rows = []
        for e in sm.block_ends:
            x, j = sm.features[e, :, 0], sm.features[e, :, 1]
            mean = sm.beta * c.market_mean + sm.sigma * c.alpha * x + j * c.event_mean
            vol = np.sqrt((sm.beta * c.market_vol) ** 2 + sm.sigma ** 2 + j * c.event_vol ** 2)
            sh = mean / vol * np.sqrt(PERIODS)
            rank = np.empty(len(sh), dtype=int)
            rank[np.argsort(-sh, kind="stable")] = np.arange(1, len(sh) + 1)
            date = str(self.dates[e + 1])  # returns index e is the price row e + 1
            rows += [{"date": date, "ticker": t, "x": float(x[i]), "event": int(j[i]), "mean": float(mean[i]),
                      "vol": float(vol[i]), "sharpe": float(sh[i]), "rank": int(rank[i]), "top_k": bool(rank[i] <= c.k)}
                     for i, t in enumerate(self.tickers)]
        return rows

    @property
    def summary(self) -> dict:
        import numpy as np

        truth = self.truth_rows()
        top = [r["sharpe"] for r in truth if r["top_k"]]
        first = [r["ticker"] for r in truth[: self.cfg.n] if r["top_k"]]
        return {"n": self.cfg.n, "days": int(len(self.dates)), "blocks": self.cfg.blocks, "block": self.cfg.block,
                "k": self.cfg.k, "start": str(self.dates[0]), "end": str(self.dates[-1]),
                "block_ends": int(len(self.market.block_ends)), "first_block_end": str(self.dates[self.market.block_ends[0] + 1]),
                "planted_top_k_first": first, "planted_top_k_sharpe": float(np.mean(top))}


def generate(cfg: GenerateConfig, seed: int = 0) -> PlantedPrices:
    """The planted market of ``cfg`` (:func:`planted_market`) as prices on business days."""
    import numpy as np

    cfg.check()
    sm = planted_market(n=cfg.n, blocks=cfg.blocks, block=cfg.block, seed=seed, alpha=cfg.alpha,
                        p_event=cfg.p_event, event_mean=cfg.event_mean, event_vol=cfg.event_vol,
                        market_mean=cfg.market_mean, market_vol=cfg.market_vol)
    growth = np.cumprod(1 + sm.returns, axis=0)
    if not (growth > 0).all():
        raise UsageError("the planted returns drive a price to zero; lower --event-vol or --market-vol")
    prices = 100.0 * np.vstack([np.ones((1, cfg.n)), growth])
    dates = np.busday_offset(np.datetime64(cfg.start, "D"), np.arange(len(prices)), roll="forward")
    return PlantedPrices(cfg, sm, dates, [f"A{i:02d}" for i in range(cfg.n)], prices)
