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


@dataclass
class SyntheticMarket:
    returns: object      # (T, n)
    features: object     # (T, n, 2): (x, j) for the next block, constant within a block
    block_ends: object   # indices of the last day of each block (except the last block)
    sigma: object        # (n,)


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
    return SyntheticMarket(R, feats, ends, sigma)
