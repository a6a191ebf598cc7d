"""A synthetic multivariate series with known structure (daily and weekly cycles with per-channel
phases and amplitudes, a shared AR(1) factor, channel couplings), written as a Time-Series-Library
CSV by ``defend-tsf generate``."""
from __future__ import annotations

import numpy as np

from icmlkit.lib.core.runtime import numpy_rng
from icmlkit.lib.defend_tsf.config import SynthConfig
from icmlkit.lib.defend_tsf.data import Series


def synthetic_series(cfg: SynthConfig, seed: int) -> Series:
    rng = numpy_rng(seed, "synth")
    T, C = cfg.rows, cfg.channels
    t = np.arange(T, dtype=np.float64)
    amp = rng.uniform(0.5, 2.0, size=(2, C))
    ph = rng.uniform(0, 2 * np.pi, size=(2, C))
    base = amp[0] * np.sin(2 * np.pi * t[:, None] / 24 + ph[0]) + amp[1] * np.sin(2 * np.pi * t[:, None] / 168 + ph[1])
    f = np.zeros(T)
    e = rng.standard_normal(T)
    for i in range(1, T):
        f[i] = 0.9 * f[i - 1] + e[i]
    load = rng.uniform(-1, 1, size=C)
    own = rng.standard_normal((T, C))
    values = base + cfg.noise * (f[:, None] * load[None, :] * 0.5 + own) + rng.uniform(-3, 10, size=C)
    start = np.datetime64(cfg.start.replace(" ", "T"), "s")
    dates = start + np.arange(T) * np.timedelta64(3600, "s")
    raw = [str(d).replace("T", " ") for d in dates]
    return Series(dates, [f"ch{i}" for i in range(C)], values, "<synthetic>", "date", raw)
