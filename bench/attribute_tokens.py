"""Benchmark of attribute-tokens (FlashTrace) against its baselines, in one run, sized to <= 8 minutes
on 2 CPU cores (far fewer examples than the issue's 200 per task; the counts are in the results).

Measured side by side:
- the toy decoder (``train-toy``; reused from outputs/attribute-tokens/toy when present, else trained
  here) -- its accuracy on both tasks first; then Recall@10%, RISE and MAS on NIAH-KV (40-80 lines)
  and VT for flashtrace (hops 1), ifr-span (hops 0), token-wise IFR, Captum gradient x input and
  IG, feature ablation (first examples only) and a random ranking;
- SmolLM2-135M-Instruct (real weights, lib/hf): greedy accuracy on short NIAH-KV (3 keys), then the
  gold answer / chain teacher-forced on longer items: Recall@10% for every method, RISE/MAS for a
  few methods on a few examples (each deletion curve is 21 forward passes);
- wall time vs target length M in {8, 32, 128, 512} (the chain padded with filler steps) for
  flashtrace, token-wise IFR and IG on the toy model (ratios measured in this run), and M in
  {8, 32, 128} for flashtrace vs token-wise IFR on SmolLM2.

Writes bench/results/attribute_tokens.json and bench/results/attribute_tokens.md.
Run:  flock /work/notes/cpu.lock timeout 600 .venv/bin/python bench/attribute_tokens.py
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from _common import commit, machine, target, today, write_results
from icmlkit.lib.attrib import api
from icmlkit.lib.attrib.config import EvalConfig, TaskConfig, TimingConfig, ToyConfig, TraceConfig
from icmlkit.lib.attrib.tasks import make_task

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "outputs" / "attribute-tokens" / "toy"
ALL = ["flashtrace", "ifr-span", "ifr-tokenwise", "gradxinput", "ig", "random"]


def toy_model(log) -> tuple[api.Bundle, dict, float]:
    t0 = time.perf_counter()
    if not (TOY / "config.json").is_file():
        from icmlkit.lib.attrib.toy import save_toy, train_toy
        from icmlkit.lib.core.io import atomic_dir

        log("training the toy model (not cached)")
        res = train_toy(ToyConfig(), seed=0)
        TOY.parent.mkdir(parents=True, exist_ok=True)
        with atomic_dir(TOY, overwrite=True) as tmp:
            save_toy(tmp, res)
    summary = json.loads((TOY / "toy_summary.json").read_text())
    return api.load(str(TOY)), summary, time.perf_counter() - t0


def run_eval(bundle, rows, methods, n_faith, trace_cfg, where, deadline=None):
    """Recall@10% of every method on every row, RISE/MAS on the first ``n_faith`` rows; examples are
    taken one at a time and the loop stops at ``deadline`` (the counts say how many ran)."""
    import numpy as np

    exs = api.prepare_rows(list(enumerate(rows, 1)), bundle.tokenizer, where, require_gold=True)
    per, secs = [], {m: [] for m in methods}
    for i, ex in enumerate(exs):
        if deadline is not None and time.perf_counter() > deadline:
            break
        ev = api.evaluate(bundle, [ex], EvalConfig(methods=methods, faithfulness=i < n_faith), trace_cfg)
        per += ev.per_example
        for r in ev.summary["methods"]:
            secs[r["method"]].append(r["seconds_per_example"])
    out = {}
    for m in methods:
        mine = [p for p in per if p["method"] == m]

        def mean(key):
            vals = [p[key] for p in mine if p[key] is not None]
            return round(float(np.mean(vals)), 4) if vals else None

        out[m] = {"n": len(mine), "recall_at_10": mean("recall_at_10"), "rise": mean("rise"), "mas": mean("mas"),
                  "n_curves": sum(p["rise"] is not None for p in mine),
                  "thinking_ratio": mean("thinking_ratio"),
                  "seconds_per_example": round(float(np.mean(secs[m])), 4) if secs[m] else None}
    return out


def guarded(fn, *a, **kw):
    """Run one stage; an exception is recorded in the results instead of losing the whole run."""
    try:
        return fn(*a, **kw)
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def smollm2_accuracy(bundle, n: int) -> dict:
    from icmlkit.lib.hf import apply_chat_template, greedy_generate

    rows = make_task("niah-kv", TaskConfig(n=n, lines_min=3, lines_max=3, style="text"), seed=1)
    prompts = [apply_chat_template(bundle.tokenizer, [{"role": "user", "content": r["prompt"] + " Reply with the "
                                                       "four numbers only."}]) for r in rows]
    gens = greedy_generate(bundle.model, bundle.tokenizer, prompts, max_new_tokens=14, add_special_tokens=False)
    import re

    # correct = the first four stand-alone integers of the reply are the needle's values, in order
    ok = sum(re.findall(r"(?<!\w)\d+(?!\w)", g.text)[:4] == r["answer"].split() for g, r in zip(gens, rows))
    return {"n": n, "correct": ok, "accuracy": round(ok / n, 4), "keys": 3,
            "example_reply": gens[0].text[:80] if gens else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--toy-n", type=int, default=60, help="examples per task on the toy model")
    ap.add_argument("--toy-faith", type=int, default=30, help="of which with RISE/MAS")
    ap.add_argument("--smol-n", type=int, default=14, help="examples per task on SmolLM2")
    ap.add_argument("--smol-faith", type=int, default=4, help="of which with RISE/MAS")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds after which remaining examples are skipped")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.toy_n, args.toy_faith, args.smol_n, args.smol_faith = 6, 3, 2, 1
    t_start = time.perf_counter()
    deadline = t_start + args.budget
    logs = []

    def log(msg):
        logs.append(f"{time.perf_counter() - t_start:7.1f}s {msg}")
        print(logs[-1], flush=True)

    tc = TraceConfig(ig_steps=8)
    results: dict = {"counts": {"toy_n": args.toy_n, "toy_faith": args.toy_faith, "smol_n": args.smol_n,
                                "smol_faith": args.smol_faith}, "ig_steps": tc.ig_steps}

    # ---------------------------------------------------------------- toy model
    toy, toy_summary, toy_s = toy_model(log)
    results["toy_model"] = {**toy_summary, "seconds_load_or_train": round(toy_s, 1)}
    log(f"toy model: {toy_summary}")
    toy_rows = {"niah-kv": make_task("niah-kv", TaskConfig(n=args.toy_n), seed=7),
                "vt": make_task("vt", TaskConfig(n=args.toy_n), seed=7)}
    results["toy"] = {}
    for k, (task, rows) in enumerate(toy_rows.items()):
        results["toy"][task] = run_eval(toy, rows, ALL, args.toy_faith, tc, f"toy-{task}",
                                        t_start + (0.2 + 0.18 * k) * args.budget)
        abl = guarded(run_eval, toy, rows[:max(2, args.toy_n // 6)], ["ablation"], 0, tc, f"toy-{task}")
        results["toy"][task]["ablation"] = abl.get("ablation", abl)
        log(f"toy {task}: " + ", ".join(f"{m} R@10={r['recall_at_10']}" for m, r in results["toy"][task].items()))
    t = api.timing(toy, TimingConfig(lengths=[8, 32, 128, 512], methods=["flashtrace", "ifr-tokenwise", "ig"],
                                     prompt_tokens=200), dataclasses.replace(tc, ig_steps=16))
    results["timing_toy"] = t
    log(f"toy timing: {t['seconds']}")

    # ---------------------------------------------------------------- SmolLM2
    smol = api.load("smollm2")
    results["smollm2_accuracy_short_niah"] = guarded(smollm2_accuracy, smol, 15 if not args.quick else 2)
    log(f"smollm2 accuracy: {results['smollm2_accuracy_short_niah']}")
    smol_rows = {"niah-kv": make_task("niah-kv", TaskConfig(n=args.smol_n, lines_min=8, lines_max=12, style="text"),
                                      seed=7),
                 "vt": make_task("vt", TaskConfig(n=args.smol_n, chains=3, fillers=4, style="text"), seed=7)}
    results["smollm2"] = {}
    for k, (task, rows) in enumerate(smol_rows.items()):
        res = run_eval(smol, rows, ALL, 0, tc, f"smol-{task}", deadline - (0.2 if k == 0 else 0.0) * args.budget)
        if args.smol_faith:
            faith = run_eval(smol, rows[:args.smol_faith], ["flashtrace", "ifr-span", "gradxinput", "random"],
                             args.smol_faith, tc, f"smol-{task}", deadline + 30)
            for m, r in faith.items():
                res[m].update(rise=r.get("rise"), mas=r.get("mas"), n_curves=r.get("n_curves"))
        results["smollm2"][task] = res
        log(f"smollm2 {task}: " + ", ".join(f"{m} R@10={r['recall_at_10']}" for m, r in res.items()))
    if time.perf_counter() < deadline + 60:
        ts = api.timing(smol, TimingConfig(lengths=[8, 32, 128], methods=["flashtrace", "ifr-tokenwise"],
                                           prompt_tokens=120), tc)
        log(f"smollm2 timing: {ts['seconds']}")
    else:
        ts = {"skipped": "time budget spent", "target_lengths": [], "methods": [], "seconds": {},
              "n_prompt_tokens": None}
    results["timing_smollm2"] = ts
    results["seconds_total"] = round(time.perf_counter() - t_start, 1)

    # ---------------------------------------------------------------- targets
    targets = {}
    for model in ("toy", "smollm2"):
        R = results[model]
        vt = R["vt"]
        diff = (vt["flashtrace"]["recall_at_10"] or 0) - (vt["ifr-span"]["recall_at_10"] or 0)
        targets[f"{model}_vt_recall_hops1_minus_hops0"] = target(round(diff, 4), 0.2, diff >= 0.2,
                                                                 f"FlashTrace(hops 1) - FlashTrace(hops 0) on VT, "
                                                                 f"n={len(toy_rows['vt']) if model == 'toy' else args.smol_n}")
        for task in ("niah-kv", "vt"):
            ft = R[task]["flashtrace"]["recall_at_10"] or 0
            for base in ("ifr-tokenwise", "gradxinput", "ig"):
                b = R[task][base]["recall_at_10"] or 0
                targets[f"{model}_{task}_recall_flashtrace_ge_{base}"] = target(
                    round(ft, 4), round(b, 4), ft >= b, f"Recall@10% flashtrace vs {base}")
            fr = R[task]["flashtrace"].get("rise")
            for base in ("ifr-span", "ifr-tokenwise", "gradxinput", "ig", "random"):
                br = R[task].get(base, {}).get("rise")
                if fr is not None and br is not None:
                    targets[f"{model}_{task}_rise_flashtrace_le_{base}"] = target(
                        round(fr, 4), round(br, 4), fr <= br, f"RISE (lower is better) flashtrace vs {base}")
    f = t["seconds"]["flashtrace"]
    targets["toy_timing_flat_512_over_8"] = target(round(f[-1] / f[0], 3), 2.0, f[-1] <= 2 * f[0],
                                                   "flashtrace seconds at M=512 / at M=8 (toy)")
    sp = t["speedup_vs_tokenwise"][-1]
    targets["toy_speedup_vs_tokenwise_at_512"] = target(sp, 20.0, sp >= 20, "token-wise IFR s / flashtrace s, M=512")
    targets["toy_speedup_vs_ig_at_512"] = target(t["speedup_vs_ig"][-1], None, True, "reported only (IG 16 steps)")
    targets["toy_accuracy_95"] = target([toy_summary.get("accuracy_niah_kv"), toy_summary.get("accuracy_vt")], 0.95,
                                        bool(toy_summary.get("meets_95")), "toy model greedy accuracy NIAH-KV, VT")

    out = {"tool": "attribute-tokens", "date": today(), "commit": commit(), "machine": machine(),
           "command": "flock /work/notes/cpu.lock timeout 600 .venv/bin/python bench/attribute_tokens.py",
           "results": results, "targets": targets, "log": logs}
    write_results("attribute_tokens", out, markdown(out))
    print(json.dumps({k: v["met"] for k, v in targets.items()}, indent=1))


def markdown(out: dict) -> str:
    R = out["results"]
    lines = [f"# attribute-tokens benchmark ({out['date']}, {out['machine']['cpu']}, {out['machine']['cores']} cores)",
             "", f"Command: `{out['command']}`; total {R['seconds_total']} s.", "",
             f"Toy model: {json.dumps(R['toy_model'])}", "",
             f"SmolLM2 greedy accuracy (NIAH-KV, 3 keys): {json.dumps(R['smollm2_accuracy_short_niah'])}", ""]
    for model in ("toy", "smollm2"):
        for task, rows in R[model].items():
            lines += [f"## {model} / {task}", "", "| method | n | Recall@10% | RISE (lower better) | MAS (lower better) "
                      "| curves | s/example |", "|---|---|---|---|---|---|---|"]
            for m, r in rows.items():
                lines.append(f"| {m} | {r.get('n')} | {r.get('recall_at_10')} | {r.get('rise')} | {r.get('mas')} | "
                             f"{r.get('n_curves')} | {r.get('seconds_per_example')} |")
            lines.append("")
    for key in ("timing_toy", "timing_smollm2"):
        t = R[key]
        lines += [f"## {key} (prompt {t['n_prompt_tokens']} tokens)", "",
                  "| M | " + " | ".join(t["methods"]) + " | speedup vs token-wise | speedup vs IG |",
                  "|---" * (len(t["methods"]) + 3) + "|"]
        for i, m in enumerate(t["target_lengths"]):
            sv = t.get("speedup_vs_tokenwise", [None] * 9)[i]
            si = t.get("speedup_vs_ig", [None] * 9)[i] if "speedup_vs_ig" in t else None
            lines.append(f"| {m} | " + " | ".join(str(t["seconds"][x][i]) for x in t["methods"]) + f" | {sv} | {si} |")
        lines.append("")
    lines += ["## Targets", "", "| target | value | threshold | met | note |", "|---|---|---|---|---|"]
    for k, v in out["targets"].items():
        lines.append(f"| {k} | {v['value']} | {v['threshold']} | {v['met']} | {v['note']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
