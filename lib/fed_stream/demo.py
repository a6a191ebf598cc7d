"""``fed-stream demo``: a small digits stream, DDS+SAW vs FedAvg+FIFO/reservoir over 2 seeds."""
from __future__ import annotations

from pathlib import Path

from icmlkit.lib.core.io import write_json, write_rows
from icmlkit.lib.fed_stream.compare import compare, plot_compare
from icmlkit.lib.fed_stream.config import CompareConfig, RunConfig, StreamConfig
from icmlkit.lib.fed_stream.streams import make_stream, write_stream


def run_demo(folder, seed: int = 0, device=None, periods: int = 24) -> dict:
    folder = Path(folder)
    scfg = StreamConfig(dataset="digits", clients=10, periods=periods, arrivals=30)
    stream = make_stream(scfg, seed=seed)
    write_stream(folder / "stream.npz", stream)
    cfg = RunConfig(buffer=90, lr=0.2)  # lr 0.2: the 24-round demo model is not left under-trained
    ccfg = CompareConfig(strategies=["dds-saw", "fedavg-fifo", "fedavg-reservoir"], oracles=["true"], seeds=2)
    res = compare(cfg, ccfg, stream, device=device, seeds=[seed, seed + 1])
    write_rows(folder / "runs.csv", res.runs)
    write_rows(folder / "paired.csv", res.paired)
    plot = None
    try:
        plot_compare(res, folder / "compare.png", "fed-stream demo: digits, 10 clients")
        plot = "compare.png"
    except Exception:  # noqa: BLE001 - the figure is optional (matplotlib is the plot extra)
        plot = None
    write_json(folder / "summary.json", res.summary)
    m = res.summary["mean_acc_time_avg"]
    headline = (f"acc_time_avg dds-saw {m['true/dds-saw']:.4f} vs fedavg-fifo {m['true/fedavg-fifo']:.4f} "
                f"vs fedavg-reservoir {m['true/fedavg-reservoir']:.4f} (2 seeds, {periods} periods)")
    return {"headline": headline, "mean_acc_time_avg": m, "paired": res.summary["paired"], "plot": plot}
