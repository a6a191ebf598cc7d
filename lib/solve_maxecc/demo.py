"""The demo of solve-maxecc: a planted instance, an adversarial gadget and (when present) Brain.

Everything is written into a folder given by the caller (the CLI builds it atomically).
"""
from __future__ import annotations

from pathlib import Path

from icmlkit.lib.core.console import log
from icmlkit.lib.core.io import shared_data_dir, write_json
from icmlkit.lib.core.plot import pyplot, save_png
from icmlkit.lib.core.runtime import generator
from icmlkit.lib.solve_maxecc import rounding as R
from icmlkit.lib.solve_maxecc.formats import read_instance, write_colouring, write_instance
from icmlkit.lib.solve_maxecc.generate import planted, rainbow_cycle
from icmlkit.lib.solve_maxecc.lp import solve_lp
from icmlkit.lib.solve_maxecc.solve import solve

BRAIN_OPT = 13626.0  # LP = ILP optimum on Brain (method sheet; confirmed by bench/solve_maxecc.py)


def _row(name: str, summary: dict) -> dict:
    keep = ("n", "m", "k", "r", "lp_value", "value", "ratio_to_lp", "heuristic_value", "ilp_value", "ilp_gap",
            "exact_winner", "winner", "seconds_total")
    return {"instance": name, **{k: summary[k] for k in keep if k in summary}}


def gadget_rounds(trials: int, seed: int, device) -> tuple[dict, dict]:
    """Every randomized rounding on a rainbow-cycle gadget (fractional LP): per-trial ratios."""
    H = rainbow_cycle(7, 7, 3)
    lp = solve_lp(H)
    fac = R.factors(H.r, H.k)
    per_trial, row = {}, {"instance": "rainbow-cycle gadget", "n": H.n, "m": H.m, "k": H.k, "r": H.r,
                          "lp_value": lp.value}
    for name, fn in (("threshold-order", R.threshold_order), ("paired", R.paired), ("scaled", R.scaled)):
        rounds = fn(H, lp, trials, generator(seed, name), device=device)
        ratios = rounds.values / lp.value
        per_trial[name] = ratios
        row[f"{name}_mean_ratio"] = float(ratios.mean())
        row[f"{name}_factor"] = fac[name]
    return row, per_trial


def plot_ratios(path: Path, per_trial: dict, fac: dict) -> bool:
    """Histogram of value/LP per trial with each algorithm's factor; False without matplotlib."""
    plt = pyplot(required=False)
    if plt is None:
        return False
    fig, axes = plt.subplots(1, len(per_trial), figsize=(4 * len(per_trial), 3.2), sharey=True)
    for ax, (name, ratios) in zip(axes, per_trial.items()):
        ax.hist(ratios, bins=20, range=(0, 1), color="#4c78a8")
        ax.axvline(ratios.mean(), color="black", label=f"mean {ratios.mean():.3f}")
        ax.axvline(fac[name], color="#e45756", linestyle="--", label=f"factor {fac[name]:.3f}")
        ax.set_title(name)
        ax.set_xlabel("value / LP per trial")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("trials")
    fig.suptitle("Rounding on a rainbow-cycle gadget (fractional LP): mean vs guaranteed factor")
    fig.tight_layout()
    save_png(fig, path)
    return True


def run_demo(folder: Path, *, seed: int = 0, device="cpu", trials: int = 1000) -> dict:
    """The demo: a planted instance (LP, every rounding, local search, ILP), the rainbow-cycle gadget
    (per-trial ratios against each factor, ratios.png) and Brain when present; writes into ``folder``
    and returns the summary (``headline``, ``instances``, ``plot``)."""
    folder = Path(folder)
    rows = []
    log.info("planted instance (n=300, k=5, r=3, m=1500, noise 0.8: a fractional LP) ...")
    H = planted(n=300, k=5, r=3, m=1500, noise=0.8, seed=seed)
    write_instance(folder / "planted.txt", H)
    res = solve(H, algorithm="best", trials=trials, seed=seed, local_search=True, ilp=True, ilp_time_limit=30,
                device=device)
    write_colouring(folder / "planted.colouring.csv", H, res.sigma)
    rows.append(_row("planted", res.summary))
    planted_row = rows[-1]

    log.info("rainbow-cycle gadget ...")
    grow, per_trial = gadget_rounds(trials, seed, device)
    rows.append(grow)
    plotted = plot_ratios(folder / "ratios.png", per_trial, R.factors(grow["r"], grow["k"]))

    brain = shared_data_dir("maxecc/Brain/original_data")
    if brain is not None:
        log.info("Brain (../shared/data/maxecc) ...")
        HB = read_instance(brain)
        rb = solve(HB, algorithm="best", trials=trials, seed=seed, device=device)
        write_colouring(folder / "brain.colouring.csv", HB, rb.sigma)
        rows.append(_row("Brain", rb.summary))

    ok = all(grow[f"{a}_mean_ratio"] >= grow[f"{a}_factor"] for a in per_trial)
    parts = [f"planted: {planted_row['value']:.0f} = {planted_row['ratio_to_lp']:.3f} of LP"
             + (f", ILP {planted_row['ilp_value']:.0f}" if planted_row.get("ilp_value") is not None else ""),
             f"gadget means {'above' if ok else 'BELOW'} their factors"]
    if brain is not None:
        parts.append(f"Brain {rows[-1]['value']:.0f}/{BRAIN_OPT:.0f}")
    summary = {"headline": "; ".join(parts), "instances": rows, "plot": "ratios.png" if plotted else None}
    write_json(folder / "summary.json", summary)
    return summary
