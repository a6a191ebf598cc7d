"""Performance metrics of daily portfolio returns and the stationary bootstrap (numpy)."""
from __future__ import annotations

import math

PERIODS = 252


def sharpe(r, periods: int = PERIODS) -> float:
    import numpy as np

    r = np.asarray(r, dtype=np.float64)
    sd = r.std(ddof=1)
    return float(r.mean() / sd * math.sqrt(periods)) if sd > 0 else float("nan")


def stationary_bootstrap_indices(T: int, n_boot: int, mean_block: float, seed: int = 0):
    """(n_boot, T) indices of the Politis-Romano stationary bootstrap: blocks start at uniform
    positions, have geometric lengths with mean ``mean_block`` and wrap around; vectorised."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p = 1.0 / mean_block
    new = rng.random((n_boot, T)) < p
    new[:, 0] = True
    pos = np.arange(T)[None, :]
    block_start = np.maximum.accumulate(np.where(new, pos, 0), axis=1)
    starts = rng.integers(0, T, size=(n_boot, T))
    start_of_block = np.take_along_axis(starts, block_start, axis=1)
    return (start_of_block + pos - block_start) % T


def sharpe_ci(r, level: float = 0.90, n_boot: int = 2000, mean_block: float = 21.0, seed: int = 0):
    """Two-sided ``level`` percentile CI of the annualised Sharpe by the stationary bootstrap."""
    import numpy as np

    r = np.asarray(r, dtype=np.float64)
    if len(r) < 3:
        return [float("nan"), float("nan")]
    idx = stationary_bootstrap_indices(len(r), n_boot, mean_block, seed)
    x = r[idx]
    sd = x.std(axis=1, ddof=1)
    s = np.where(sd > 0, x.mean(axis=1) / np.where(sd > 0, sd, 1) * math.sqrt(PERIODS), np.nan)
    a = (1 - level) / 2
    lo, hi = np.nanquantile(s, [a, 1 - a])
    return [float(lo), float(hi)]


def max_drawdown(r) -> float:
    """Largest peak-to-trough loss of the compounded equity curve, as a positive fraction."""
    import numpy as np

    eq = np.cumprod(1 + np.asarray(r, dtype=np.float64))
    peak = np.maximum.accumulate(np.r_[1.0, eq])[1:]
    return float((1 - eq / peak).max()) if len(eq) else 0.0


def drawdown_curve(r):
    import numpy as np

    eq = np.cumprod(1 + np.asarray(r, dtype=np.float64))
    peak = np.maximum.accumulate(np.r_[1.0, eq])[1:]
    return eq / peak - 1


def summarize(r, periods: int = PERIODS, ci_level: float = 0.90, seed: int = 0) -> dict:
    import numpy as np

    r = np.asarray(r, dtype=np.float64)
    years = len(r) / periods
    growth = float(np.prod(1 + r))
    return {
        "sharpe": sharpe(r, periods),
        "sharpe_ci": sharpe_ci(r, ci_level, seed=seed),
        "ann_return": growth ** (1 / years) - 1 if years > 0 else float("nan"),
        "ann_vol": float(r.std(ddof=1) * math.sqrt(periods)),
        "max_drawdown": max_drawdown(r),
    }
