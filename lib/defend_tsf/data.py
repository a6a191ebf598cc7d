"""Time-Series-Library CSV input (``date`` then channels), NaN policy, the standard splits, z-scoring
with training statistics, and sliding windows.

Errors name the file, the data row (1-based, header excluded), the line and the column; nothing here
writes a file."""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass

import numpy as np

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.io import display_name, open_text
from icmlkit.lib.defend_tsf.config import DataConfig, parse_split

_NAN_TOKENS = {"", "nan", "NaN", "NAN", "na", "NA", "null", "NULL", "None"}


@dataclass
class Series:
    """A multivariate series: ``dates`` (numpy datetime64[s], T), ``columns`` (C names), ``values``
    (T x C float64, raw scale; NaN only where the file had gaps and no fill was asked), ``path``."""

    dates: np.ndarray
    columns: list
    values: np.ndarray
    path: str
    date_header: str = "date"
    raw_dates: list | None = None  # the date strings as written (kept for byte-faithful CSV output)

    @property
    def T(self) -> int:
        return int(self.values.shape[0])

    @property
    def C(self) -> int:
        return int(self.values.shape[1])


def read_series(path, fill: str = "none") -> Series:
    """Read a CSV with a ``date`` column and numeric channel columns.

    Bad input raises :class:`InputError` with one line naming file, row and column: no ``date``
    column, a row with the wrong number of cells, an unparseable date, a non-numeric or infinite
    cell, a NaN gap without ``fill`` (``ffill`` or ``linear``), fewer than two rows."""
    name = display_name(path)
    with open_text(path) as fh:
        text = fh.read()
    if "\x00" in text:
        raise InputError("is not a text CSV (NUL bytes)", name)
    reader = csv.reader(text.splitlines())
    try:
        header = next(reader)
    except StopIteration:
        raise InputError("empty file, expected a CSV with a 'date' column then channel columns", name) from None
    except csv.Error as exc:
        raise InputError(f"not a CSV ({exc})", name, 1) from None
    header = [h.strip() for h in header]
    lower = [h.lower() for h in header]
    if "date" not in lower:
        raise InputError(f"no 'date' column (header: {','.join(header)[:120]}); expected the Time-Series-Library "
                         "layout: date, then one column per channel", name, 1)
    di = lower.index("date")
    chans = [h for i, h in enumerate(header) if i != di]
    if not chans:
        raise InputError("no channel columns besides 'date'", name, 1)
    if len(set(header)) != len(header):
        dup = next(h for h in header if header.count(h) > 1)
        raise InputError(f"column {dup!r} appears twice", name, 1)
    dates, rows = [], []
    try:
        for r, cells in enumerate(reader, 1):
            line = r + 1
            if not cells or all(not c.strip() for c in cells):
                if len(cells) <= 1:
                    continue
            if len(cells) != len(header):
                raise InputError(f"row {r}: {len(cells)} cells, expected {len(header)} ({','.join(header)[:80]})",
                                 name, line)
            dates.append(cells[di].strip())
            vals = []
            for i, c in enumerate(cells):
                if i == di:
                    continue
                c = c.strip()
                if c in _NAN_TOKENS:
                    vals.append(math.nan)
                    continue
                try:
                    v = float(c)
                except ValueError:
                    raise InputError(f"row {r}, column {header[i]!r}: {c[:40]!r} is not a number", name, line) from None
                if math.isinf(v):
                    raise InputError(f"row {r}, column {header[i]!r}: infinite value", name, line)
                vals.append(v)
            rows.append(vals)
    except csv.Error as exc:
        raise InputError(f"not a CSV ({exc})", name) from None
    if len(rows) < 2:
        raise InputError(f"{len(rows)} data rows; a series needs at least 2", name)
    parsed = _parse_dates(dates, name, header[di])
    values = np.asarray(rows, dtype=np.float64)
    values = apply_fill(values, fill, name, chans)
    return Series(dates=parsed, columns=chans, values=values, path=name, date_header=header[di], raw_dates=dates)


def _parse_dates(dates: list, name: str, col: str) -> np.ndarray:
    import pandas as pd

    ts = pd.to_datetime(pd.Series(dates), errors="coerce", format="mixed")
    bad = np.flatnonzero(ts.isna().to_numpy())
    if bad.size:
        r = int(bad[0]) + 1
        raise InputError(f"row {r}, column {col!r}: {dates[r - 1][:40]!r} is not a date", name, r + 1)
    arr = ts.to_numpy().astype("datetime64[s]")
    back = np.flatnonzero(np.diff(arr) <= np.timedelta64(0, "s"))
    if back.size:
        r = int(back[0]) + 2
        raise InputError(f"row {r}, column {col!r}: dates must increase ({dates[r - 1][:40]!r} follows "
                         f"{dates[r - 2][:40]!r})", name, r + 1)
    return arr


def apply_fill(values: np.ndarray, fill: str, name: str, chans: list) -> np.ndarray:
    """The NaN policy: ``none`` rejects the first gap (row and column named), ``ffill`` carries the last
    value forward (a leading gap takes the first value), ``linear`` interpolates in the row index."""
    nan = np.isnan(values)
    if not nan.any():
        return values
    if fill == "none":
        r, c = (int(x) for x in np.argwhere(nan)[0])
        raise InputError(f"row {r + 1}, column {chans[c]!r}: NaN gap ({int(nan.sum())} missing cells in all); "
                         "pass --fill ffill or --fill linear", name, r + 2)
    out = values.copy()
    idx = np.arange(values.shape[0])
    for c in range(values.shape[1]):
        m = nan[:, c]
        if not m.any():
            continue
        if m.all():
            raise InputError(f"column {chans[c]!r} has no values at all", name)
        good = np.flatnonzero(~m)
        if fill == "linear":
            out[m, c] = np.interp(idx[m], good, values[good, c])
        else:  # ffill: index of the last good value at or before each row; leading gap -> first good
            last = np.maximum.accumulate(np.where(~m, idx, -1))
            last[last < 0] = good[0]
            out[:, c] = values[last, c]
    return out


@dataclass
class Splits:
    """Row borders: train [0, a), validation [a - L, b), test [b - L, T_used) (Time-Series-Library style:
    the validation and test windows may look back into the previous split)."""

    train_end: int
    val_end: int
    test_end: int
    seq_len: int
    pred_len: int

    def rows(self, which: str) -> tuple[int, int]:
        L = self.seq_len
        return {"train": (0, self.train_end), "val": (self.train_end - L, self.val_end),
                "test": (self.val_end - L, self.test_end)}[which]

    def n_windows(self, which: str) -> int:
        a, b = self.rows(which)
        return b - a - self.seq_len - self.pred_len + 1


def rows_per_month(dates: np.ndarray) -> int:
    """30 days in rows, from the median date step (720 for hourly data, 2880 for 15-minute data)."""
    step = np.median(np.diff(dates).astype("timedelta64[s]").astype(np.int64))
    return max(1, int(round(30 * 86400 / max(step, 1))))


def make_splits(series: Series, cfg: DataConfig) -> Splits:
    """The train / val / test borders of ``cfg.split`` for ``series``; a split too short for L + H
    windows is an :class:`InputError` naming the file and the split."""
    kind, (a, b, c) = parse_split(cfg.split)
    T = series.T
    if kind == "months":
        m = rows_per_month(series.dates)
        n = (int(round(a * m)), int(round(b * m)), int(round(c * m)))
    elif kind == "fractions":
        n1, n2 = int(T * a), int(T * b)
        n = (n1, n2, min(T - n1 - n2, int(round(T * c))) if abs(a + b + c - 1) > 1e-9 else T - n1 - n2)
    else:
        n = (int(a), int(b), int(c))
    if sum(n) > T:
        raise InputError(f"--split {cfg.split} needs {sum(n)} rows (train {n[0]}, val {n[1]}, test {n[2]}) but the "
                         f"file has {T}", series.path)
    sp = Splits(n[0], n[0] + n[1], n[0] + n[1] + n[2], cfg.seq_len, cfg.pred_len)
    for which in ("train", "val", "test"):
        lo, hi = sp.rows(which)
        if lo < 0 or sp.n_windows(which) < 1:
            raise InputError(f"the {which} split (rows {max(lo, 0) + 1}-{hi}) is shorter than L + H = "
                             f"{cfg.seq_len} + {cfg.pred_len} (--seq-len/--pred-len/--split)", series.path)
    return sp


@dataclass
class Scaler:
    """Per-channel z-scoring with the training split's mean and std (std 0 -> 1)."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, values: np.ndarray) -> "Scaler":
        mean = values.mean(axis=0)
        std = values.std(axis=0)
        return cls(mean, np.where(std > 0, std, 1.0))

    def transform(self, v):
        return (v - self.mean) / self.std

    def inverse(self, v):
        return v * self.std + self.mean


def window_starts(lo: int, hi: int, L: int, H: int) -> np.ndarray:
    """Start rows n of the windows x = [n, n+L), y = [n+L, n+L+H) inside rows [lo, hi)."""
    return np.arange(lo, hi - L - H + 1)


def check_channels(series: Series, columns: list, what: str) -> None:
    if list(series.columns) != list(columns):
        raise InputError(f"channels {','.join(series.columns)[:100]} differ from the {what}'s "
                         f"{','.join(columns)[:100]}", series.path)


def check_lengths(cfg: DataConfig) -> None:
    if cfg.seq_len + cfg.pred_len < 2:
        raise UsageError("--seq-len + --pred-len must be >= 2")
