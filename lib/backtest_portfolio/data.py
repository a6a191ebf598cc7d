"""Price and return tables: reading, validation, the NaN rule, and the S&P-20 data set.

A table is wide: one row per trading date (the first column, or the index of a Parquet file),
one column per ticker. Prices become simple daily returns r_t = P_t / P_{t-1} - 1.

The NaN rule (documented in the README and ``--help``; never silent):
- a gap of at most ``max_gap`` consecutive missing prices *inside* a ticker's history is
  forward-filled (the price is carried, so the return over the gap is booked on the day the price
  reappears); the number of filled cells is returned in :class:`Market` and logged;
- a longer interior gap, a missing price on the first row (a ticker that is not yet listed), or any
  missing value in a returns table is an :class:`InputError` naming the file, the line and the
  ticker. Drop such tickers (or trim the dates) before calling the tool.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from icmlkit.lib.core.errors import EnvironmentProblem, InputError, UsageError, require_module
from icmlkit.lib.core.io import display_name, suffix

SP500 = "skfolio:sp500"  # the built-in data set (20 S&P 500 stocks, daily, 1990-2022, skfolio's wheel)


@dataclass
class Market:
    """Daily simple returns ``returns`` (T x n, float64 numpy) on ``dates`` (numpy datetime64[D])."""

    dates: object
    tickers: list
    returns: object
    source: str = ""
    filled: int = 0
    notes: list = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.tickers)

    @property
    def T(self) -> int:
        return len(self.dates)

    def index_of(self, date) -> int:
        """Index of the last trading date <= ``date`` (-1 if none)."""
        import numpy as np

        d = np.datetime64(str(date), "D")
        return int(np.searchsorted(self.dates, d, side="right")) - 1

    def slice(self, start=None, end=None) -> "Market":
        import numpy as np

        lo = 0 if start is None else int(np.searchsorted(self.dates, np.datetime64(str(start), "D"), "left"))
        hi = self.T if end is None else int(np.searchsorted(self.dates, np.datetime64(str(end), "D"), "right"))
        return Market(self.dates[lo:hi], list(self.tickers), self.returns[lo:hi], self.source, self.filled,
                      list(self.notes))


def _read_frame(path: str):
    import pandas as pd

    name = display_name(path)
    if str(path) == "-":
        import sys

        try:
            return pd.read_csv(sys.stdin, index_col=0)
        except Exception as exc:
            raise InputError(f"not a readable CSV table ({type(exc).__name__}: {exc})", name) from None
    if Path(path).is_dir():
        raise InputError("is a folder, expected a prices file", name)
    if not Path(path).is_file():
        raise InputError("no such file", name)
    ext = suffix(path)
    try:
        if ext == ".parquet":
            df = pd.read_parquet(path)
            if not isinstance(df.index, pd.DatetimeIndex):
                df = df.set_index(df.columns[0])
        elif ext in (".csv", ".txt", ""):
            df = pd.read_csv(path, index_col=0)
        else:
            raise InputError(f"unknown format {ext!r}; expected a wide .csv(.gz) or .parquet table", name)
    except InputError:
        raise
    except ImportError:
        raise EnvironmentProblem(f"{name}: reading Parquet needs pyarrow; install it with: pip install pyarrow "
                                 "(or convert the table to CSV)") from None
    except Exception as exc:  # pandas parser errors
        raise InputError(f"not a readable table ({type(exc).__name__}: {exc})", name) from None
    return df


def load_sp500():
    """The 20-stock S&P 500 price table shipped in skfolio's wheel (the ``portfolio`` extra)."""
    datasets = require_module("skfolio.datasets", "backtest-portfolio", "skfolio")
    return datasets.load_sp500_dataset()


def read_market(path: str, returns: bool = False, max_gap: int = 5) -> Market:
    """Read a wide table of prices (or of simple returns with ``returns=True``) and validate it.

    Errors (one line, naming the file and line or ticker): unparsable or non-monotone dates
    (repeated or decreasing), non-numeric cells, non-positive prices, missing prices beyond the
    NaN rule (module docstring), fewer than two dates or no ticker.
    """
    import numpy as np
    import pandas as pd

    if str(path) == SP500:
        df, name = load_sp500(), SP500
    else:
        df, name = _read_frame(path), display_name(path)
    if df.shape[1] == 0:
        raise InputError("no ticker columns (expected: date, then one column per ticker)", name)
    if df.shape[0] < 2:
        raise InputError("fewer than two dates", name)
    try:
        idx = pd.to_datetime(pd.Index(df.index), errors="raise", format="mixed")
        if idx.isna().any():  # 'nan' or an empty cell parses as NaT
            raise ValueError("not a date")
    except (ValueError, TypeError) as exc:
        bad = next((i for i, v in enumerate(df.index) if pd.isna(pd.to_datetime(v, errors="coerce"))), 0)
        raise InputError(f"date column: cannot parse {str(df.index[bad])!r} as a date ({exc})", name, bad + 2) from None
    d = idx.values.astype("datetime64[D]")
    steps = np.diff(d.astype(np.int64))
    if (steps <= 0).any():
        i = int(np.argmax(steps <= 0)) + 1
        what = "repeats" if steps[i - 1] == 0 else "goes back from"
        raise InputError(f"dates are not strictly increasing: {d[i]} {what} {d[i - 1]} on the line before",
                         name, i + 2)
    values = df.apply(pd.to_numeric, errors="coerce")
    nonnum = values.isna() & df.notna()
    if nonnum.values.any():
        r, c = np.argwhere(nonnum.values)[0]
        raise InputError(f"ticker {df.columns[c]}: {df.iat[r, c]!r} is not a number", name, int(r) + 2)
    X = values.to_numpy(dtype=np.float64)
    tickers = [str(c) for c in df.columns]
    filled = 0
    notes: list = []
    missing = np.isnan(X)
    if missing.any():
        if returns:
            r, c = np.argwhere(missing)[0]
            raise InputError(f"ticker {tickers[c]}: missing return (returns tables must be complete)", name, int(r) + 2)
        first = missing[0]
        if first.any():
            c = int(np.argmax(first))
            raise InputError(f"ticker {tickers[c]}: missing price on the first date {d[0]} (a ticker that is not yet "
                             "listed must be dropped or the dates trimmed)", name, 2)
        # runs of consecutive NaN per column
        for c in np.flatnonzero(missing.any(axis=0)):
            col = missing[:, c]
            starts = np.flatnonzero(col & ~np.r_[False, col[:-1]])
            ends = np.flatnonzero(col & ~np.r_[col[1:], False])
            lengths = ends - starts + 1
            worst = int(np.argmax(lengths))
            if lengths[worst] > max_gap:
                raise InputError(f"ticker {tickers[c]}: {int(lengths[worst])} consecutive missing prices from {d[starts[worst]]} "
                                 f"(at most --max-gap {max_gap} are forward-filled)", name, int(starts[worst]) + 2)
            filled += int(col.sum())
        X = pd.DataFrame(X).ffill().to_numpy()
        notes.append(f"forward-filled {filled} missing prices (gaps of at most {max_gap} days)")
    if returns:
        R = X
        if (R <= -1).any():
            r, c = np.argwhere(R <= -1)[0]
            raise InputError(f"ticker {tickers[c]}: return {R[r, c]} <= -100%", name, int(r) + 2)
        dates = d
    else:
        if (X <= 0).any():
            r, c = np.argwhere(X <= 0)[0]
            raise InputError(f"ticker {tickers[c]}: price {X[r, c]} is not positive (use --returns for a returns table)",
                             name, int(r) + 2)
        R = X[1:] / X[:-1] - 1.0
        dates = d[1:]
    if not np.isfinite(R).all():
        r, c = np.argwhere(~np.isfinite(R))[0]
        raise InputError(f"ticker {tickers[c]}: non-finite value", name, int(r) + 2 + (0 if returns else 1))
    return Market(dates, tickers, np.ascontiguousarray(R), name, filled, notes)


def check_universe(market: Market, k: int, window: int, start_index: int | None = None) -> None:
    """Fewer assets than k, or a window longer than the history, are errors naming the input."""
    if k < 1:
        raise UsageError(f"--k must be at least 1, not {k}")
    if market.n < k:
        raise InputError(f"{market.n} tickers but --k {k}: need at least k assets", market.source)
    if window + 1 > market.T:
        raise InputError(f"--window {window} days is longer than the history ({market.T} daily returns)",
                         market.source)
    if start_index is not None and start_index < window - 1:
        raise InputError(f"the first date asked for ({market.dates[max(start_index, 0)]}) has only "
                         f"{max(start_index + 1, 0)} days of history; --window needs {window}", market.source)
