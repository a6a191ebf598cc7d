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


# --------------------------------------------------------------------------- factor market (large universes)


@dataclass
class FactorCalibration:
    """What :func:`factor_market` draws from, estimated on a real market (the S&P-20 set).

    ``factor_returns`` (T, K): the real daily returns of the market's first K principal components,
    scaled to unit variance (their drift kept); ``loading_mean`` / ``loading_cov``: the mean and
    covariance of the assets' loadings on them (daily return units); ``idio_log_mean`` /
    ``idio_log_std``: a lognormal fit of the residual daily volatilities; ``alpha_std_measured``:
    the noise-corrected cross-sectional std of the residual drift within ``period``-day periods
    (mean over periods; 0 when the dispersion is indistinguishable from noise)."""

    factors: int
    factor_returns: object
    loading_mean: object
    loading_cov: object
    idio_log_mean: float
    idio_log_std: float
    alpha_mean: float
    alpha_std_measured: float
    alpha_std_by_period: list
    period: int
    source: str
    days: int

    @property
    def summary(self) -> dict:
        import math

        import numpy as np

        fr = np.asarray(self.factor_returns)
        return {"source": self.source, "days": self.days, "factors": self.factors,
                "factor_drift_annual": [float(x) for x in fr.mean(0) * PERIODS],
                "loading_mean": [float(x) for x in self.loading_mean],
                "loading_std": [float(x) for x in np.sqrt(np.diag(self.loading_cov))],
                "idio_vol_annual_median": float(math.exp(self.idio_log_mean) * math.sqrt(PERIODS)),
                "idio_log_std": self.idio_log_std, "alpha_mean_annual": self.alpha_mean * PERIODS,
                "alpha_std_measured_annual": self.alpha_std_measured * PERIODS,
                "alpha_std_by_period_annual": [x * PERIODS for x in self.alpha_std_by_period], "period": self.period}


def calibrate_factor_market(returns, factors: int = 3, period: int = 756, source: str = "") -> FactorCalibration:
    """Estimate a K-factor model on real daily returns (T, n): principal components of the
    covariance, loadings, residual volatilities and the dispersion of the residual drift."""
    import numpy as np

    R = np.asarray(returns, dtype=np.float64)
    T, n = R.shape
    if not 1 <= factors < n:
        raise UsageError(f"factors must be in [1, {n - 1}] for {n} assets, got {factors}")
    Rc = R - R.mean(0)
    _, _, Vt = np.linalg.svd(Rc / np.sqrt(T - 1), full_matrices=False)
    V = Vt[:factors].T                                    # (n, K) principal directions
    f = R @ V                                             # factor returns, drift kept
    scale = f.std(0, ddof=1)
    ft = f / scale                                        # unit variance
    L = V * scale                                         # (n, K) loadings in daily return units
    e = R - ft @ L.T                                      # residual incl. the asset's own drift
    sig = e.std(0, ddof=1)
    periods = T // period
    A = np.array([e[p * period:(p + 1) * period].mean(0) for p in range(periods)])   # (P, n) drift per period
    noise = float((sig ** 2 / period).mean())
    disp = [float(np.sqrt(max(v - noise, 0.0))) for v in A.var(1, ddof=1)]
    measured = float(np.sqrt(max(float(np.mean(A.var(1, ddof=1))) - noise, 0.0)))
    return FactorCalibration(factors, ft, L.mean(0), np.cov(L.T).reshape(factors, factors),
                             float(np.log(sig).mean()), float(np.log(sig).std(ddof=1)), float(A.mean()), measured,
                             disp, period, source, T)


def factor_market(cal: FactorCalibration, n: int, days: int, seed: int = 0, alpha_annual: float = 0.05,
                  alpha_rho: float = 0.95, block: int = 21, start: str = "2000-01-03"):
    """A SYNTHETIC market of ``n`` assets and ``days`` daily returns from a calibration:

        r_t,i = α_i,m(t) + L_iᵀ f_t + σ_i ε_t,i,

    f_t: days of the real factor returns drawn by the stationary bootstrap (mean block 21 days, so
    volatility clusters and crashes of the real market recur); L_i ~ N(loading mean, loading cov);
    σ_i lognormal as fitted; ε Gaussian; α: a persistent drift per asset, constant within blocks of
    ``block`` days and AR(1) across blocks (persistence ``alpha_rho``), stationary std
    ``alpha_annual``/252 around the calibrated mean. The planted drift is OUR choice: on the S&P-20
    set its noise-corrected dispersion is indistinguishable from zero on average (see
    ``alpha_std_measured``), and with no drift no strategy has anything to learn. Streams of
    ``seed``: ``factor-market`` (assets, drift, noise) and ``factor-days`` (the bootstrap).
    Returns a :class:`~icmlkit.lib.backtest_portfolio.data.Market` labelled synthetic."""
    import numpy as np

    from icmlkit.lib.backtest_portfolio.data import Market
    from icmlkit.lib.backtest_portfolio.metrics import stationary_bootstrap_indices
    from icmlkit.lib.core.runtime import numpy_rng, stream_seed

    if n < 2 or days < 2:
        raise UsageError(f"a factor market needs n >= 2 and days >= 2, got n={n}, days={days}")
    rng = numpy_rng(seed, "factor-market")
    K = cal.factors
    L = rng.multivariate_normal(np.asarray(cal.loading_mean), np.asarray(cal.loading_cov), size=n)   # (n, K)
    sig = np.exp(cal.idio_log_mean + cal.idio_log_std * rng.standard_normal(n))
    fr = np.asarray(cal.factor_returns)
    idx = stationary_bootstrap_indices(len(fr), 1, 21.0, seed=stream_seed(seed, "factor-days"))[0][:days] \
        if days <= len(fr) else np.concatenate([stationary_bootstrap_indices(len(fr), 1, 21.0, seed=stream_seed(
            seed, f"factor-days-{j}"))[0] for j in range(-(-days // len(fr)))])[:days]
    f = fr[idx]                                                                          # (days, K)
    blocks = -(-days // block)
    a = np.empty((blocks, n))
    a[0] = rng.standard_normal(n)
    for b in range(1, blocks):
        a[b] = alpha_rho * a[b - 1] + np.sqrt(1 - alpha_rho ** 2) * rng.standard_normal(n)
    alpha = cal.alpha_mean + alpha_annual / PERIODS * np.repeat(a, block, axis=0)[:days]
    R = alpha + f @ L.T + sig * rng.standard_normal((days, n))
    R = np.maximum(R, -0.95)   # a simple return cannot fall below -100 %
    dates = np.busday_offset(np.datetime64(start, "D"), np.arange(days), roll="forward")
    label = (f"synthetic:factor-market(n={n}, K={K}, alpha={alpha_annual}, rho={alpha_rho}, seed={seed}; "
             f"calibrated on {cal.source or 'a real market'})")
    return Market(dates, [f"S{i:03d}" for i in range(n)], R, label,
                  notes=["SYNTHETIC: a factor-model market calibrated on real returns; not real prices"])
