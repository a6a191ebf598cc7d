"""Benchmark of trace-injection (CausalTrace) on labelled AgentDojo trajectories.

In one run:
- builds the whole data set from the agentdojo wheel (4 suites, v1.2.2; classes P, N1, N2, N3) for
  seeds 0 and 1 (the seed varies attack templates and attacker values);
- leave-one-suite-out on seed 0: thresholds / heads fitted on three suites, tested on the fourth:
  CausalTrace (fitted effect threshold; and a random-forest head on the causal features) vs a
  keyword/regex injection detector (threshold fitted on the training suites), a TF-IDF + logistic
  regression content classifier, and the "sink present" rule; plus the repository's reachability
  verdict;
- the default causal detector with no fitting at all (threshold 0.5) on each whole data set;
- attack-chain edge recall, LLM calls, throughput (trajectories per second).

Writes bench/results/trace_injection.json and bench/results/trace_injection.md.
Run:  make bench TOOL=trace-injection   (or .venv/bin/python bench/trace_injection.py [--seeds 0 1])
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

from _common import commit, machine, target, today, write_results
from icmlkit.lib.trace.agentdojo_data import SUITES
from icmlkit.lib.trace.config import DetectConfig, GenerateConfig
from icmlkit.lib.trace.learn import Head, TfidfBaseline, fit_threshold, keyword_scores, metrics, sink_scores
from icmlkit.lib.trace.pipeline import evaluate, generate, load_traces, write_dataset


def build(seed: int):
    """The whole data set of ``seed`` through the library call of `trace-injection generate`, written
    and read back as the command line would."""
    t0 = time.perf_counter()
    gen = generate(GenerateConfig(), seed=seed)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, f"seed{seed}.jsonl")
        write_dataset(p, gen.rows)
        traces = load_traces([p])
    return traces, gen.summary, time.perf_counter() - t0


def f1_attack(y, s, thr):
    return metrics(y, s, thr)["f1_attack"]


def run(seeds):
    out = {"datasets": {}, "default_detector": {}, "loso": {}, "edge_recall": {}}
    main_traces = main_res = None
    throughput = None
    for seed in seeds:
        print(f"[bench] building data set, seed {seed} ...", file=sys.stderr, flush=True)
        traces, stats, secs = build(seed)
        out["datasets"][str(seed)] = {"n": len(traces), "counts": stats["counts"], "dropped": stats["dropped"],
                                      "values_varied": stats["values_varied"], "seconds_to_build": round(secs, 1)}
        ev = evaluate(DetectConfig(), traces)  # the default causal detector: `trace-injection eval`
        res, dt = ev.results, ev.seconds
        by = ev.summary["by_class"]
        out["default_detector"][str(seed)] = {**{k: round(v, 4) for k, v in ev.metrics.items()},
                                              "reachability_macro_f1": round(ev.summary["reachability_macro_f1"], 4),
                                              "flag_rate_by_class": {c: by.get(c) for c in ("P", "N1", "N2", "N3")},
                                              "edge_recall": round(ev.edges_found / ev.edges_total, 4)
                                              if ev.edges_total else None,
                                              "gt_chain_edges": ev.edges_total, "llm_calls": ev.summary["llm_calls"],
                                              "traces_per_second": round(len(traces) / dt, 1)}
        if main_traces is None:
            main_traces, main_res, throughput = traces, res, len(traces) / dt

    traces, res = main_traces, main_res
    suite = np.array([t.meta["suite"] for t in traces])
    cls = np.array([t.meta["class"] for t in traces])
    y = np.array([t.label for t in traces])
    feats = [r["features"] for r in res]
    eff = np.array([r["effect"] for r in res])
    kw = keyword_scores(traces)
    sk = sink_scores(traces)
    rows = {k: [] for k in ("causaltrace", "causaltrace_forest", "reachability", "keyword", "tfidf_lr", "sink_present")}
    pn2 = {k: [] for k in rows}
    print("[bench] leave-one-suite-out ...", file=sys.stderr, flush=True)
    for held in SUITES:
        tr, te = suite != held, suite == held
        tri, tei = np.where(tr)[0], np.where(te)[0]
        scores = {}
        thr = fit_threshold(y[tri], eff[tri])
        scores["causaltrace"] = (eff[tei], thr)
        head = Head("forest", seed=0).fit([feats[i] for i in tri], y[tri])
        scores["causaltrace_forest"] = (head.score([feats[i] for i in tei]), head.threshold)
        reach = np.array([r["reachability"]["effect"] for r in res])
        scores["reachability"] = (reach[tei], 0.5)
        scores["keyword"] = (kw[tei], fit_threshold(y[tri], kw[tri]))
        tf = TfidfBaseline().fit([traces[i] for i in tri], y[tri])
        # its own probability at 0.5: a threshold fitted on the (memorised) training scores transfers badly
        scores["tfidf_lr"] = (tf.score([traces[i] for i in tei]), 0.5)
        scores["sink_present"] = (sk[tei], 0.5)
        sub = np.isin(cls[tei], ["P", "N2"])
        for k, (s, t) in scores.items():
            m = metrics(y[tei], s, t)
            m["threshold"] = float(t)
            m["n2_flag_rate"] = float(np.mean(s[cls[tei] == "N2"] >= t)) if np.any(cls[tei] == "N2") else None
            rows[k].append({"held_out": held, **{a: (round(b, 4) if isinstance(b, float) else b) for a, b in m.items()}})
            pn2[k].append(f1_attack(y[tei][sub], s[sub], t))
    summary = {}
    for k in rows:
        summary[k] = {"macro_f1_mean": round(float(np.mean([r["macro_f1"] for r in rows[k]])), 4),
                      "macro_f1_min": round(float(np.min([r["macro_f1"] for r in rows[k]])), 4),
                      "auroc_mean": round(float(np.mean([r["auroc"] for r in rows[k]])), 4),
                      "auroc_min": round(float(np.min([r["auroc"] for r in rows[k]])), 4),
                      "p_n2_f1_mean": round(float(np.mean(pn2[k])), 4),
                      "n2_flag_rate_mean": round(float(np.mean([r["n2_flag_rate"] for r in rows[k]])), 4)}
    out["loso"] = {"folds": rows, "summary": summary}
    out["throughput_traces_per_second"] = round(throughput, 1)
    return out


def markdown(result: dict) -> str:
    r = result["results"]
    lines = [f"# trace-injection benchmark ({result['date']}, {result['machine']['cpu']}, "
             f"{result['machine']['cores']} cores, load {result['machine']['load_average_1min']})", "",
             "Data: AgentDojo v1.2.2 suites replayed without any LLM (P = injection succeeded per the suite's "
             "security check, N1 benign, N2 injection present but ignored, N3 benign with a sensitive sink).", ""]
    for s, d in r["datasets"].items():
        lines.append(f"- seed {s}: {d['n']} trajectories {d['counts']}, dropped {d['dropped']}, attacker values "
                     f"re-drawn in {d['values_varied']} pairs, built in {d['seconds_to_build']} s")
    lines += ["", "## Leave-one-suite-out (fit on three suites, test on the fourth)", "",
              "| method | macro-F1 mean | macro-F1 min | AUROC mean | AUROC min | F1 on P+N2 | N2 flagged |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    names = {"causaltrace": "CausalTrace (fitted effect threshold)", "causaltrace_forest": "CausalTrace + RF head",
             "reachability": "reachability verdict (repository)", "keyword": "keyword/regex detector",
             "tfidf_lr": "TF-IDF + logistic regression", "sink_present": "sink present"}
    for k, v in r["loso"]["summary"].items():
        lines.append(f"| {names[k]} | {v['macro_f1_mean']:.3f} | {v['macro_f1_min']:.3f} | {v['auroc_mean']:.3f} | "
                     f"{v['auroc_min']:.3f} | {v['p_n2_f1_mean']:.3f} | {v['n2_flag_rate_mean']:.3f} |")
    lines += ["", "Per fold (CausalTrace, fitted threshold):", "", "| held out | macro-F1 | AUROC | precision | recall | threshold |",
              "| --- | --- | --- | --- | --- | --- |"]
    for f in r["loso"]["folds"]["causaltrace"]:
        lines.append(f"| {f['held_out']} | {f['macro_f1']:.3f} | {f['auroc']:.3f} | {f['precision']:.3f} | "
                     f"{f['recall']:.3f} | {f['threshold']:.3f} |")
    lines += ["", "## Default causal detector, no fitting (effect threshold 0.5), whole data set", "",
              "| seed | macro-F1 | AUROC | precision | recall | edge recall | flagged P / N1 / N2 / N3 | reachability macro-F1 | traj/s |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s, d in r["default_detector"].items():
        b = d["flag_rate_by_class"]
        lines.append(f"| {s} | {d['macro_f1']:.3f} | {d['auroc']:.3f} | {d['precision']:.3f} | {d['recall']:.3f} | "
                     f"{d['edge_recall']:.3f} | {b['P']} / {b['N1']} / {b['N2']} / {b['N3']} | "
                     f"{d['reachability_macro_f1']:.3f} | {d['traces_per_second']} |")
    lines += ["", "## Targets", "", "| target | value | threshold | met | note |", "| --- | --- | --- | --- | --- |"]
    for k, t in result["targets"].items():
        lines.append(f"| {k} | {t['value']} | {t['threshold']} | {'yes' if t['met'] else 'NO'} | {t['note']} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = ap.parse_args()
    mach = machine()
    t0 = time.perf_counter()
    res = run(args.seeds)
    s = res["loso"]["summary"]
    ct, kw = s["causaltrace"], s["keyword"]
    main_seed = str(args.seeds[0])
    dd = res["default_detector"]
    targets = {
        "causaltrace_macro_f1_loso": target(ct["macro_f1_mean"], 0.90, ct["macro_f1_mean"] >= 0.90,
                                            "mean over the 4 held-out suites (fitted effect threshold); min "
                                            f"{ct['macro_f1_min']}"),
        "causaltrace_auroc_loso": target(ct["auroc_mean"], 0.95, ct["auroc_mean"] >= 0.95,
                                         f"mean over the 4 held-out suites; min {ct['auroc_min']}"),
        "p_n2_f1_gain_over_keyword": target(round(ct["p_n2_f1_mean"] - kw["p_n2_f1_mean"], 4), 0.2,
                                            ct["p_n2_f1_mean"] - kw["p_n2_f1_mean"] >= 0.2,
                                            f"attack-class F1 on P+N2: CausalTrace {ct['p_n2_f1_mean']} vs keyword "
                                            f"{kw['p_n2_f1_mean']} (LOSO mean)"),
        "keyword_baseline_flags_n2": target(kw["n2_flag_rate_mean"], 0.5, kw["n2_flag_rate_mean"] >= 0.5,
                                            "share of N2 traces the keyword baseline flags (method sheet)"),
        "edge_recall": target(dd[main_seed]["edge_recall"], 0.9, (dd[main_seed]["edge_recall"] or 0) >= 0.9,
                              "typed GT chain edges (injected observation -> injection-GT calls) recovered in the "
                              "trigger graph, all P traces"),
        "llm_calls": target(0, 0, True, "the core pipeline calls no LLM"),
    }
    for sd, d in dd.items():
        targets[f"default_detector_macro_f1_seed{sd}"] = target(
            d["macro_f1"], 0.90, d["macro_f1"] >= 0.90, "no fitting, effect threshold 0.5, whole generated data set")
    targets["throughput"] = target(res["throughput_traces_per_second"], None, True,
                                   "trajectories per second of the full CausalTrace analysis (reported)")
    result = {"tool": "trace-injection", "date": today(), "commit": commit(), "machine": mach,
              "command": "python bench/trace_injection.py --seeds " + " ".join(map(str, args.seeds)),
              "seconds": round(time.perf_counter() - t0, 1), "results": res, "targets": targets}
    write_results("trace_injection", result, markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
