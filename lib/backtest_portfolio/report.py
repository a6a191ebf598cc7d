"""Reports of back-test runs: a Markdown/CSV table (gross and net of costs) and a PNG with equity
curves and drawdowns of several strategies side by side."""
from __future__ import annotations

from pathlib import Path

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.io import write_json, write_text

COLUMNS = ("strategy", "k", "sharpe", "sharpe_ci", "sharpe_gross", "ann_return", "ann_return_gross", "ann_vol",
           "max_drawdown", "turnover", "cardinality", "cost_bps")


def read_run(path):
    """(name, summary, dates, gross, net) from a run folder of `backtest` or its returns.csv.

    returns.csv must have the columns date,gross,net with increasing dates and finite returns
    > -100 %; summary.json (when present) must be a JSON object. Errors name the file and line."""
    import numpy as np
    import pandas as pd

    from icmlkit.lib.core.io import load_json

    p = Path(path)
    folder = p if p.is_dir() else p.parent
    rets = folder / "returns.csv" if p.is_dir() else p
    summ = folder / "summary.json"
    if not rets.is_file():
        raise InputError("no returns.csv here (expected a run folder written by `backtest-portfolio backtest`)", str(path))
    _check_header(rets)
    try:
        df = pd.read_csv(rets)
    except Exception as exc:  # noqa: BLE001 - pandas' parser errors, binary or empty files
        raise InputError(f"not a readable CSV ({type(exc).__name__}: {exc})", str(rets)) from None
    missing = [c for c in ("date", "gross", "net") if c not in df.columns]
    if missing:
        raise InputError(f"missing columns {missing}; expected date,gross,net", str(rets), 1)
    if len(df) < 2:
        raise InputError("fewer than two daily returns", str(rets))
    dates = pd.to_datetime(df["date"], errors="coerce", format="mixed")
    if dates.isna().any():
        i = int(np.argmax(dates.isna().to_numpy()))
        raise InputError(f"date {df['date'].iloc[i]!r} is not a date", str(rets), i + 2)
    values = {}
    for c in ("gross", "net"):
        v = pd.to_numeric(df[c], errors="coerce").to_numpy(np.float64)
        bad = ~np.isfinite(v) | (v <= -1)
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(f"column {c}: {df[c].iloc[i]!r} is not a finite return > -1", str(rets), i + 2)
        values[c] = v
    summary = load_json(summ, expect=dict, what="run summary") if summ.is_file() else {}
    name = summary.get("strategy", folder.name)
    return name, summary, dates.values.astype("datetime64[D]"), values["gross"], values["net"]


HEADER = ("date", "gross", "net")
HEADER_BYTES = 4096


def _check_header(rets: Path) -> None:
    """Refuse at once a file whose first line is not the ``date,gross,net`` header of `backtest`'s
    returns.csv (reads at most :data:`HEADER_BYTES`: a text file with one 200,000-field line, or a
    binary file, is rejected without being parsed)."""
    try:
        with open(rets, "rb") as fh:
            head = fh.read(HEADER_BYTES)
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", str(rets)) from None
    first = head.split(b"\n", 1)[0].rstrip(b"\r")
    if first.startswith(b"\xef\xbb\xbf"):
        first = first[3:]
    try:
        cols = tuple(c.strip().strip('"') for c in first.decode("utf-8").split(","))
    except UnicodeDecodeError:
        cols = None
    if cols is None or cols[:3] != HEADER or len(cols) > 8 or (b"\n" not in head and len(head) == HEADER_BYTES):
        raise InputError("not a run folder or a returns.csv of `backtest-portfolio backtest` (its first line must be "
                         "the header date,gross,net)", str(rets), 1)


def _fmt(v):
    if v is None:
        return "—"
    if isinstance(v, list):
        return "[" + ", ".join(f"{x:.2f}" for x in v) + "]"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def markdown_table(summaries) -> str:
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    return head + "".join("| " + " | ".join(_fmt(s.get(c)) for c in COLUMNS) + " |\n" for s in summaries)


def plot_runs(path, rows) -> bool:
    """Equity curves (net solid, gross dotted) and net drawdowns; False without matplotlib."""
    import numpy as np

    from icmlkit.lib.core.plot import pyplot, save_png
    from icmlkit.lib.backtest_portfolio.metrics import drawdown_curve

    plt = pyplot(required=False)
    if plt is None:
        return False
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    for i, (name, _, dates, gross, net) in enumerate(rows):
        col = f"C{i % 10}"
        d = dates.astype("datetime64[D]").astype(object)
        a1.plot(d, np.cumprod(1 + net), color=col, label=f"{name} (net)")
        a1.plot(d, np.cumprod(1 + gross), color=col, linestyle=":", linewidth=0.8)
        a2.plot(d, drawdown_curve(net), color=col)
    a1.set_yscale("log")
    a1.set_ylabel("growth of 1 (log; dotted = gross)")
    a1.legend(fontsize=8)
    a2.set_ylabel("drawdown (net)")
    fig.tight_layout()
    save_png(fig, path)
    return True


def write_run_report(folder, rows, compare: bool = False, seed: int = 0):
    """report.md (+ report.csv, summary.json and equity.png when comparing) in ``folder``; returns
    (summaries, paired): with ``compare`` and several runs, ``paired`` holds the paired bootstrap test
    of the net Sharpe difference of every pair (:func:`~icmlkit.lib.backtest_portfolio.metrics.paired_table`)."""
    from icmlkit.lib.backtest_portfolio.metrics import summarize

    folder = Path(folder)
    summaries = []
    for name, summary, dates, gross, net in rows:
        s = dict(summary) if summary else {"strategy": name}
        if not summary:  # a bare returns.csv: recompute what the returns give
            net_s, gross_s = summarize(net), summarize(gross)
            s.update(net_s, sharpe_gross=gross_s["sharpe"], ann_return_gross=gross_s["ann_return"])
        summaries.append(s)
    plotted = plot_runs(folder / "equity.png", rows)
    text = "# Back-test report\n\n" + markdown_table(summaries) + (
        "\nNet figures are after costs; sharpe_ci is the 90 % stationary-bootstrap interval (mean block 21 days).\n")
    if plotted:
        text += "\n![equity curves and drawdowns](equity.png)\n"
    paired = []
    if compare and len(rows) > 1:
        from icmlkit.lib.backtest_portfolio.metrics import paired_table

        paired = paired_table([(s["strategy"], dates, net) for s, (_, _, dates, _, net) in zip(summaries, rows)],
                              seed=seed)
        text += ("\n## Paired test of net Sharpe differences\n\n"
                 "Sharpe(a) − Sharpe(b) on the days both runs share; 90 % CI and two-sided p-value from the paired "
                 "stationary bootstrap (same resampled days for both, mean block 21 days, 2000 draws). Overlapping "
                 "per-run CIs are not a test of a difference; this is.\n\n"
                 "| a | b | Sharpe(a) − Sharpe(b) | 90% CI | p-value | days |\n|---|---|---|---|---|---|\n")
        text += "".join(f"| {r['a']} | {r['b']} | {r['diff']:.3f} | {_fmt(r['ci'])} | {r['p_value']:.3f} | "
                        f"{r['days']} |\n" for r in paired)
    write_text(folder / "report.md", text)
    if compare:
        lines = [",".join(COLUMNS)]
        for s in summaries:
            vals = []
            for c in COLUMNS:
                v = s.get(c)
                vals.append(f"{v[0]:.6g};{v[1]:.6g}" if isinstance(v, list) else ("" if v is None else
                                                                                  f"{v:.6g}" if isinstance(v, float) else str(v)))
            lines.append(",".join(vals))
        write_text(folder / "report.csv", "\n".join(lines) + "\n")
        write_json(folder / "summary.json", {"strategies": summaries, "paired": paired})
    return summaries, paired
