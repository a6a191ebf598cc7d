"""The paired bootstrap every comparison in the benchmarks (and fed-stream's ``compare``) quotes.

One implementation: the percentile interval of the mean of paired differences ``a - b``, resampling the
pairs with a named NumPy generator, so the same inputs and seed give the same interval everywhere.
"""
from __future__ import annotations

import numpy as np


def paired_bootstrap(a, b, *, n_boot: int = 10000, seed: int = 0, level: float = 0.95) -> dict:
    """Mean of the paired differences ``a - b`` and its ``level`` percentile bootstrap interval.

    Keys: mean, low, high (None with no pairs), level, n, n_boot, wins (a > b), losses (a < b).
    """
    d = np.asarray(a, dtype=np.float64).ravel() - np.asarray(b, dtype=np.float64).ravel()
    n = int(d.size)
    out = {"mean": None, "low": None, "high": None, "level": level, "n": n, "n_boot": int(n_boot),
           "wins": int((d > 0).sum()), "losses": int((d < 0).sum())}
    if n == 0:
        return out
    means = d[np.random.default_rng(seed).integers(0, n, size=(n_boot, n))].mean(1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return out | {"mean": float(d.mean()), "low": float(lo), "high": float(hi)}
