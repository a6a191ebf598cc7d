"""Benchmark of solve-maxecc on the real hypergraphs of Amburg et al. (Brain, DAWN, MAG-10).

Measured side by side in one run, for each data set present under ``../shared/data/maxecc``:
- the LP: ``solve-maxecc lp`` as a process and icmlkit's in-process time (read + row generation
  with HiGHS + extraction), the bare HiGHS solve of the full model (``Highs.run`` only, ipm), and
  the same LP written with cvxpy (vectorised, cvxpy's default LP solver). Two ratios of the CLI
  run: row generation vs HiGHS on the full model (CLI seconds / ``Highs.run`` on the full model,
  a different solve from the tool's), and the wrapper overhead (CLI seconds / the ``Highs.run``
  seconds of the tool's own row-generation solves in that same process, from its ``--json``);
- every algorithm's value and ratio to the LP with 1000 vectorised roundings, and their time;
- the exact ILP (HiGHS MIP) on Brain and DAWN, where the LP is integral (OPT = LP).

Writes bench/results/solve_maxecc.json and bench/results/solve_maxecc.md.
Run:  make bench TOOL=solve-maxecc   (or .venv/bin/python bench/solve_maxecc.py [--quick])
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _common import commit, machine, target, today, write_results
from icmlkit.lib.core.io import shared_data_dir
from icmlkit.lib.core.runtime import generator
from icmlkit.lib.maxecc import (incident_pairs, lp_argmax, majority, paired, paired_derandomized, read_instance,
                                scaled, solve_ilp, solve_lp, threshold_order)
from icmlkit.lib.maxecc.lp import build_model, highs_options, new_highs

TRIALS = 1000
DATASETS = {  # name -> (path under maxecc/, known LP optimum or None)
    "Brain": ("Brain/original_data", 13626.0),
    "DAWN": ("DAWN/colored-DAWN.txt", 45830.0),
    "MAG-10": ("MAG-10/colored-MAG.txt", None),
}
RANDOMIZED = {"threshold-order": threshold_order, "paired": paired, "scaled": scaled}
# wrapper_overhead thresholds: a fixed cost of about 0.35 s (interpreter start-up and imports about
# 0.15 s, reading the instance 0.15-0.35 s) over HiGHS times of 0.13 s (Brain), 0.67 s (DAWN) and
# 4.0 s (MAG-10) measured on this machine (2026-11-30 run: 3.75x, 2.0x, 1.15x).
WRAPPER_LIMIT = {"Brain": 5.0, "DAWN": 3.0, "MAG-10": 1.5}
WRAPPER_WHY = {
    "Brain": "Threshold 5: HiGHS needs only about 0.13 s here, so the fixed start-up and the reading of the two "
             ".mat files (about 0.35 s together) dominate.",
    "DAWN": "Threshold 3: HiGHS takes about 0.7 s, the fixed cost about 0.5 s.",
    "MAG-10": "Threshold 1.5: HiGHS takes about 4 s, so the wrapper's fixed cost should stay a small fraction.",
}


def bare_highs_seconds(H, method: str) -> tuple[float, float]:
    """(seconds of Highs.run alone, objective) for the model icmlkit builds."""
    model = build_model(H)
    h = new_highs(highs_options(method, None, None))
    h.passModel(model.lp)
    t0 = time.perf_counter()
    h.run()
    return time.perf_counter() - t0, float(h.getInfo().objective_function_value)


def cvxpy_lp(H) -> tuple[float, float, str]:
    """The same LP as a Python user would write it with cvxpy: vectorised over the sparse incident
    pairs (no per-edge Python loop), solved with cvxpy's default solver for an LP."""
    import cvxpy as cp
    import scipy.sparse as sp

    t0 = time.perf_counter()
    pairs = incident_pairs(H)
    P = pairs.P
    x = cp.Variable(P)
    z = cp.Variable(H.m)
    at_vertex = sp.csr_matrix((np.ones(P), (pairs.pair_v, np.arange(P))), shape=(H.n, P))
    cons = [x >= 0, x <= 1, z >= 0, z <= 1, at_vertex @ x <= 1, z[H.edge_of] <= x[pairs.of_entry]]
    prob = cp.Problem(cp.Maximize(H.weight @ z), cons)
    prob.solve()
    return time.perf_counter() - t0, float(prob.value), prob.solver_stats.solver_name


def bench_dataset(name: str, path: Path, known: float | None, quick: bool) -> dict:
    row: dict = {"dataset": name}
    t0 = time.perf_counter()
    H = read_instance(path)
    t_read = time.perf_counter() - t0
    sol = solve_lp(H)
    row.update(n=H.n, m=H.m, k=H.k, r=H.r, seconds_read=round(t_read, 3))
    row["seconds_lp_end_to_end"] = round(time.perf_counter() - t0, 3)
    row.update(lp_value=sol.value, lp_status=sol.status, seconds_lp_build=round(sol.seconds_build, 3),
               seconds_lp_solve=round(sol.seconds_solve, 3), lp_over_m=round(sol.value / H.total_weight, 4))
    exe = Path(sys.executable).parent / "solve-maxecc"
    t0 = time.perf_counter()
    cli = subprocess.run([str(exe), "lp", str(path), "--json"], check=True, capture_output=True, text=True)
    row["seconds_cli_lp"] = round(time.perf_counter() - t0, 3)
    row["seconds_cli_highs"] = json.loads(cli.stdout)["seconds_highs"]
    row["cli_over_own_highs"] = round(row["seconds_cli_lp"] / row["seconds_cli_highs"], 3)
    bare, bare_obj = bare_highs_seconds(H, "ipm")
    row["seconds_bare_highs"] = round(bare, 3)
    row["end_to_end_over_bare"] = round(row["seconds_lp_end_to_end"] / bare, 3)
    row["cli_over_bare"] = round(row["seconds_cli_lp"] / bare, 3)
    if name != "MAG-10" or not quick:
        t_cvx, cvx_val, cvx_solver = cvxpy_lp(H)
        row.update(seconds_cvxpy=round(t_cvx, 3), cvxpy_value=cvx_val, cvxpy_solver=cvx_solver,
                   cvxpy_over_end_to_end=round(t_cvx / row["seconds_lp_end_to_end"], 2))

    algos = {}
    for alg, rounds in (("majority", majority(H)), ("lp-argmax", lp_argmax(H, sol)),
                        ("paired-derandomized", paired_derandomized(H, sol))):
        algos[alg] = {"value": rounds.value, "seconds": round(rounds.seconds, 3)}
    trials = 100 if quick else TRIALS
    for alg, fn in RANDOMIZED.items():
        rounds = fn(H, sol, trials, generator(0, alg))  # the stream `solve --seed 0 -a <alg>` uses
        algos[alg] = {"value": rounds.value, "mean": float(rounds.values.mean()), "seconds": round(rounds.seconds, 3),
                      "trials": trials}
    for a in algos.values():
        a["ratio_to_lp"] = round(a["value"] / sol.value, 5) if sol.value else None
        if "mean" in a:
            a["mean_ratio_to_lp"] = round(a["mean"] / sol.value, 5)
    row["algorithms"] = algos
    if known is not None and not quick:
        ilp = solve_ilp(H, time_limit=600)
        row.update(ilp_value=ilp.value, ilp_gap=ilp.gap, ilp_status=ilp.status, seconds_ilp=round(ilp.seconds, 3))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 trials, no ILP, no cvxpy on MAG-10 (smoke run)")
    ap.add_argument("--only", nargs="*", default=None, help="data set names to run")
    args = ap.parse_args()
    root = shared_data_dir("maxecc")
    rows, skipped = [], {}
    for name, (rel, known) in DATASETS.items():
        if args.only and name not in args.only:
            continue
        if root is None or not (root / rel).exists():
            skipped[name] = f"{rel} not found under ../shared/data/maxecc"
            print(f"skip {name}: {skipped[name]}", file=sys.stderr)
            continue
        print(f"{name} ...", file=sys.stderr, flush=True)
        rows.append(bench_dataset(name, root / rel, known, args.quick))
        print(json.dumps(rows[-1]), file=sys.stderr)
    report(rows, skipped, args)


def report(rows: list[dict], skipped: dict, args) -> None:
    by = {r["dataset"]: r for r in rows}
    targets: dict = {}

    for name, (_, known) in DATASETS.items():
        r = by.get(name)
        if r is None:
            continue
        if known is not None:
            targets[f"lp_value_{name}"] = target(r["lp_value"], known, abs(r["lp_value"] - known) < 0.5,
                   "LP optimum equals the published value (LP = ILP on this data set)")
            if "ilp_value" in r:
                targets[f"ilp_confirms_opt_{name}"] = target(r["ilp_value"], known, abs(r["ilp_value"] - known) < 0.5,
                       "HiGHS MIP optimum equals the LP value")
            maj = r["algorithms"]["majority"]["value"]
            worst = min(a["value"] for a in r["algorithms"].values())
            targets[f"every_algorithm_at_least_majority_{name}"] = target(worst, maj, worst >= maj - 1e-9,
                   "the lowest best-of-trials value among all algorithms vs majority vote")
            for alg in ("paired", "threshold-order"):
                v = r["algorithms"][alg]["value"]
                targets[f"{alg}_reaches_opt_{name}"] = target(v, known, abs(v - known) < 0.5, "best of the trials")
        if name in ("Brain", "DAWN"):
            targets[f"rowgen_cli_over_highs_full_model_{name}"] = target(
                r["cli_over_bare"], 1.2, r["cli_over_bare"] <= 1.2,
                "row generation vs HiGHS on the full model: `solve-maxecc lp` as a process (interpreter start, "
                "read, row-generation LP, extraction) over Highs.run alone on the FULL model (ipm, HiGHS's "
                "fastest exact method here), which is not the solve the tool runs")
        limit = WRAPPER_LIMIT[name]
        targets[f"wrapper_overhead_{name}"] = target(
            r["cli_over_own_highs"], limit, r["cli_over_own_highs"] <= limit,
            f"wrapper overhead: `solve-maxecc lp` wall seconds ({r['seconds_cli_lp']}) over the Highs.run seconds "
            f"of the tool's own row-generation solves in that same run ({r['seconds_cli_highs']}, its --json "
            "seconds_highs); the rest is Python start-up and imports, reading the instance, building the model "
            "and extracting the solution. " + WRAPPER_WHY[name])
        extra = round(r["seconds_cli_lp"] - r["seconds_cli_highs"], 3)
        targets[f"wrapper_overhead_seconds_{name}"] = target(
            extra, 1.0, extra <= 1.0,
            "the same overhead in seconds (CLI wall time minus the tool's own HiGHS time): the fixed cost of a "
            "process (start-up, imports, reading, model build, extraction) should stay under a second; on a small "
            "instance like Brain it, not HiGHS, dominates the ratio above")
        if "cvxpy_over_end_to_end" in r:
            targets[f"cvxpy_over_icmlkit_{name}"] = target(r["cvxpy_over_end_to_end"], 3.0, r["cvxpy_over_end_to_end"] >= 3.0,
                   f"same LP written with cvxpy (vectorised, default solver {r.get('cvxpy_solver')}), build + "
                   "solve, over icmlkit in-process end to end")
    if "DAWN" in by:
        slowest = max(a["seconds"] for k, a in by["DAWN"]["algorithms"].items() if "trials" in a)
        trials = next(a["trials"] for a in by["DAWN"]["algorithms"].values() if "trials" in a)
        targets["dawn_1000_roundings_seconds"] = target(slowest, 10.0, slowest <= 10.0 and trials == TRIALS,
               f"slowest randomized algorithm, {trials} trials, rounding + evaluation")
    if "MAG-10" in by:
        r = by["MAG-10"]
        maj = r["algorithms"]["majority"]["value"]
        best = max(a["value"] for a in r["algorithms"].values())
        targets["mag10_end_to_end"] = target(best, None, maj <= best <= r["lp_value"] + 1e-6,
               "ran end to end; majority <= best-of-T <= LP")

    out = {
        "tool": "solve-maxecc",
        "date": today(),
        "commit": commit(),
        "machine": machine(),
        "command": "make bench TOOL=solve-maxecc" + (" (with --quick)" if args.quick else ""),
        "results": rows,
        "skipped": skipped,
        "targets": targets,
    }
    write_results("solve_maxecc", out, markdown(rows, targets, out))
    print(markdown(rows, targets, out))


def markdown(rows: list[dict], targets: dict, out: dict) -> str:
    lines = [f"solve-maxecc benchmark, {out['date']}, {out['machine']['cpu']} ({out['machine']['cores']} cores), "
             f"`{out['command']}`", "",
             "| data set | n | m | k | r | LP | `solve-maxecc lp` s | in-process s | rowgen HiGHS runs s | "
             "tool's own HiGHS s (CLI run) | cli / own HiGHS | bare HiGHS ipm, full model s | cli / full model | "
             "cvxpy s | ILP |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['n']} | {r['m']} | {r['k']} | {r['r']} | {r['lp_value']:.0f} | "
                     f"{r['seconds_cli_lp']:.2f} | {r['seconds_lp_end_to_end']:.2f} | {r['seconds_lp_solve']:.2f} | "
                     f"{r['seconds_cli_highs']:.2f} | {r['cli_over_own_highs']:.2f} | {r['seconds_bare_highs']:.2f} | "
                     f"{r['cli_over_bare']:.2f} | {r.get('seconds_cvxpy', float('nan')):.2f} | "
                     f"{r.get('ilp_value', '—')} |")
    lines += ["", "| data set | algorithm | value | value / LP | mean / LP | seconds |", "|---|---|---|---|---|---|"]
    for r in rows:
        for alg, a in r["algorithms"].items():
            mean = f"{a['mean_ratio_to_lp']:.4f}" if "mean_ratio_to_lp" in a else "—"
            secs = "—" if a["seconds"] is None else f"{a['seconds']:.2f}"
            lines.append(f"| {r['dataset']} | {alg} | {a['value']:.0f} | {a['ratio_to_lp']:.4f} | {mean} | {secs} |")
    lines += ["", "| target | value | threshold | met |", "|---|---|---|---|"]
    for k, t in targets.items():
        lines.append(f"| {k} | {t['value']} | {t['threshold']} | {'yes' if t['met'] else '**no**'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
