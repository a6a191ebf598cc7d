"""Performance metrics of daily portfolio returns and the stationary bootstrap (numpy)."""
from __future__ import annotations

import math

from icmlkit.lib.core.errors import InputError

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


def paired_sharpe_test(a, b, n_boot: int = 2000, mean_block: float = 21.0, level: float = 0.90,
                       seed: int = 0) -> dict:
    """Paired test of the difference of two annualised Sharpe ratios, Sharpe(a) - Sharpe(b), of
    daily returns on the same dates.

    The paired stationary bootstrap (Politis & Romano 1994; the same index draws for both series,
    so their correlation and serial dependence are kept; mean block ``mean_block`` days) gives the
    distribution of the difference. ``ci``: its two-sided ``level`` percentile interval; ``p_value``:
    two-sided, from the bootstrap distribution centred at the observed difference (the null
    difference 0 is as far from the centre as the observed one: p = (1 + #{|Δ* - Δ| >= |Δ|}) /
    (n_boot + 1)). This is the bootstrap route of Ledoit & Wolf (2008) without their studentisation
    [our choice of the simpler variant]."""
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise InputError(f"paired series must have the same length, got {a.shape} and {b.shape}")
    diff = sharpe(a) - sharpe(b)
    out = {"diff": float(diff), "ci": [float("nan"), float("nan")], "p_value": float("nan"), "days": int(len(a)),
           "n_boot": n_boot, "mean_block": mean_block, "ci_level": level}
    if len(a) < 3 or not np.isfinite(diff):
        return out
    idx = stationary_bootstrap_indices(len(a), n_boot, mean_block, seed)

    def sh(x):
        sd = x.std(axis=1, ddof=1)
        return np.where(sd > 0, x.mean(axis=1) / np.where(sd > 0, sd, 1) * math.sqrt(PERIODS), np.nan)

    d = sh(a[idx]) - sh(b[idx])
    d = d[np.isfinite(d)]
    if len(d) == 0:
        return out
    q = (1 - level) / 2
    out["ci"] = [float(np.quantile(d, q)), float(np.quantile(d, 1 - q))]
    out["p_value"] = float((1 + np.sum(np.abs(d - diff) >= abs(diff))) / (len(d) + 1))
    return out


def paired_table(named_series, **kw) -> list[dict]:
    """:func:`paired_sharpe_test` of every pair (i < j) of ``named_series`` = [(name, dates, returns)],
    on the dates the two share (a net-return series each)."""
    import numpy as np

    rows = []
    for i in range(len(named_series)):
        for j in range(i + 1, len(named_series)):
            na, da, ra = named_series[i]
            nb, db, rb = named_series[j]
            common, ia, ib = np.intersect1d(np.asarray(da), np.asarray(db), return_indices=True)
            res = paired_sharpe_test(np.asarray(ra)[ia], np.asarray(rb)[ib], **kw)
            rows.append({"a": na, "b": nb, **res,
                         "start": str(common[0]) if len(common) else None,
                         "end": str(common[-1]) if len(common) else None})
    return rows
