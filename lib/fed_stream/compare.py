"""``compare``: strategies x oracles x seeds on one stream, paired differences against a
reference strategy with 95% t confidence intervals, and a PNG."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from icmlkit.lib.core.console import log
from icmlkit.lib.core.stats import paired_bootstrap
from icmlkit.lib.fed_stream.sim import checked_oracle, run_stream


@dataclass
class CompareResult:
    runs: list        # one row per (oracle, strategy, seed)
    paired: list      # one row per (oracle, metric, strategy != reference)
    curves: dict      # (oracle, strategy) -> (T,) acc_current averaged over clients and seeds
    summary: dict


def paired_ci(a, b, level: float = 0.95, boot: int = 0, seed: int = 0) -> dict:
    """Mean of a - b over paired seeds with a two-sided t interval (n = 1: no interval); with
    ``boot`` > 0 also the percentile interval of ``boot`` paired bootstrap resamples of the seeds
    (boot_low, boot_high; with 5 seeds it is narrower than the t interval, which decides)."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    n = len(d)
    mean = float(d.mean())
    if n < 2:
        return {"diff": mean, "ci_low": None, "ci_high": None, "n": n}
    from scipy import stats

    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * d.std(ddof=1) / math.sqrt(n))
    out = {"diff": mean, "ci_low": mean - half, "ci_high": mean + half, "n": n}
    if boot > 0:
        ci = paired_bootstrap(a, b, n_boot=boot, seed=seed, level=level)
        out.update(boot_low=ci["low"], boot_high=ci["high"], boot=int(boot))
    return out


def compare(cfg, ccfg, stream, *, device=None, progress=None, seeds=None) -> CompareResult:
    """Run every (oracle, strategy, seed) with :func:`~icmlkit.lib.fed_stream.sim.run_stream` (the
    same function as ``run``) and pair the seeds against ``ccfg.reference``."""
    ccfg.check()
    seeds = list(range(ccfg.seeds)) if seeds is None else list(seeds)
    # every oracle resolved (auto) and checked (known-future on a user stream) before any run
    future = {}
    for o in ccfg.oracles:
        c, label = checked_oracle(dataclasses.replace(cfg, oracle=o), stream)
        future[c.oracle] = label
    oracles = list(future)
    runs, curves, warnings = [], {}, []
    for oracle in oracles:
        for strat in ccfg.strategies:
            acc = []
            for s in seeds:
                c = dataclasses.replace(cfg, strategy=strat, oracle=oracle)
                res = run_stream(c, stream, seed=s, device=device, warn=False)
                sm = res.summary
                seen = {x.split(":")[0] for x in warnings}  # one line per strategy (the first seed's)
                warnings += [w for w in sm.get("warnings", []) if w.split(":")[0] not in seen]
                runs.append({"oracle": oracle, "strategy": strat, "seed": s, "acc_time_avg": sm["acc_time_avg"],
                             "acc_next_time_avg": sm["acc_next_time_avg"], "acc_final": sm["acc_final"],
                             "oracle_tv_error": sm["oracle_tv_error"], "seconds_per_round": sm["seconds_per_round"]})
                cur = np.zeros(stream.periods)
                for r in res.rows:
                    cur[r["period"]] += r["acc_current"] / stream.clients
                acc.append(cur)
                if progress is not None:
                    progress(f"{oracle} {strat} seed {s}: acc {sm['acc_time_avg']:.4f}")
            curves[(oracle, strat)] = np.mean(acc, 0)
    paired = []
    for oracle in oracles:
        ref = {r["seed"]: r for r in runs if r["oracle"] == oracle and r["strategy"] == ccfg.reference}
        for strat in ccfg.strategies:
            if strat == ccfg.reference:
                continue
            mine = {r["seed"]: r for r in runs if r["oracle"] == oracle and r["strategy"] == strat}
            for metric in ("acc_time_avg", "acc_next_time_avg"):
                a = [mine[s][metric] for s in seeds]
                b = [ref[s][metric] for s in seeds]
                paired.append({"oracle": oracle, "metric": metric, "strategy": strat, "reference": ccfg.reference,
                               **paired_ci(a, b)})
    means = {}
    for oracle in oracles:
        for strat in ccfg.strategies:
            v = [r["acc_time_avg"] for r in runs if r["oracle"] == oracle and r["strategy"] == strat]
            means[f"{oracle}/{strat}"] = float(np.mean(v))
    best = max(means, key=means.get)
    for w in warnings:
        log.warning(w)
    summary = {"strategies": list(ccfg.strategies), "oracles": oracles, "seeds": len(seeds),
               "reference": ccfg.reference, "mean_acc_time_avg": means, "best": best,
               "paired": [{k: p[k] for k in ("oracle", "metric", "strategy", "diff", "ci_low", "ci_high")}
                          for p in paired if p["metric"] == "acc_time_avg"],
               "runs": len(runs), "hist_source": stream.hist_source, "oracle_future": future,
               "allow_future_oracle": bool(cfg.allow_future_oracle), "warnings": warnings}
    return CompareResult(runs=runs, paired=paired, curves=curves, summary=summary)


def plot_compare(res: CompareResult, path, title: str = "") -> None:
    """Bars of the time-averaged accuracy (mean and seed range) and the per-period curves."""
    from icmlkit.lib.core.plot import pyplot, save_png

    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    keys = list(res.curves)
    vals = [[r["acc_time_avg"] for r in res.runs if (r["oracle"], r["strategy"]) == k] for k in keys]
    m = [np.mean(v) for v in vals]
    lo = [np.mean(v) - np.min(v) for v in vals]
    hi = [np.max(v) - np.mean(v) for v in vals]
    a1.bar(range(len(keys)), m, yerr=[lo, hi], color="tab:blue", capsize=3)
    a1.set_xticks(range(len(keys)))
    a1.set_xticklabels([f"{s}\n{o}" for o, s in keys], rotation=60, fontsize=7)
    a1.set_ylim(max(0.0, min(m) - 0.1), min(1.0, max(m) + 0.05))
    a1.set_ylabel("time-averaged accuracy (current distribution)")
    for k in keys:
        a2.plot(res.curves[k], label=f"{k[1]} ({k[0]})", lw=1)
    a2.set_xlabel("period")
    a2.set_ylabel("accuracy on D_k^t (mean over clients, seeds)")
    a2.legend(fontsize=6)
    fig.suptitle(title or "fed-stream compare")
    fig.tight_layout()
    save_png(fig, path)
