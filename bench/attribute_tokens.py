"""Benchmark of attribute-tokens (FlashTrace) against its baselines, in parts that each fit one locked
job of <= 8 minutes on 2 shared CPU cores; every part writes bench/results/attribute_tokens_parts/<part>.json
(the per-example rows) and the results are merged from all parts present. The toy part runs the issue's 200
examples per task; SmolLM2 runs fewer (the counts are in the results; more shards can be added
with --part smol-forced --shard K/N and merged).

Parts:
- ``toy``: the toy decoder (``train-toy``; reused from outputs/attribute-tokens/toy when present, else
  trained here) -- its accuracy on both tasks first; then Recall@10%, RISE and MAS on NIAH-KV (40-80
  lines) and VT for flashtrace (hops 1), ifr-span (hops 0), token-wise IFR, Captum gradient x input and
  IG, feature ablation (first examples only) and a random ranking; wall time vs target length M in
  {8, 32, 128, 512} (the chain padded with filler steps) for flashtrace, token-wise IFR and IG;
- ``smol-correct``: SmolLM2-135M-Instruct (real weights, lib/hf) on items it answers correctly: short
  NIAH-KV (3 keys, the prompt ending in the queried key) and short VT (2 chains of 1 assignment),
  greedy; its accuracy, then every method (RISE/MAS too) on the correct items with its own reply as
  the attributed target (output span = the answer tokens of the reply);
- ``smol-forced``: the gold answer / chain teacher-forced on longer items (NIAH-KV 8-12 lines, VT 3
  chains): Recall@10% for every method, RISE/MAS for every method on the first rows;
- ``smol-timing``: M in {8, 32, 128, 512} for flashtrace, token-wise IFR and IG on SmolLM2.

Writes bench/results/attribute_tokens.json and bench/results/attribute_tokens.md (from the parts).
Run:  .venv/bin/python bench/attribute_tokens.py   (every part in one run, about 25 min here), or part by part:
      flock /work/notes/cpu.lock timeout 480 .venv/bin/python bench/attribute_tokens.py --part toy-train
      (then smol-correct, smol-forced, smol-timing; --merge alone rebuilds the results from the parts)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from _common import commit, machine, target, today, write_results
from icmlkit.lib.attribute_tokens import api
from icmlkit.lib.attribute_tokens.config import EvalConfig, TaskConfig, TimingConfig, ToyConfig, TraceConfig
from icmlkit.lib.attribute_tokens.tasks import make_task

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "outputs" / "attribute-tokens" / "toy"
PARTS = ROOT / "bench" / "results" / "attribute_tokens_parts"
_START = [0.0]
ALL = ["flashtrace", "ifr-span", "ifr-tokenwise", "gradxinput", "ig", "random"]


def toy_model(log, cfg=None, folder=None) -> tuple[api.Bundle, dict, float]:
    t0 = time.perf_counter()
    where = Path(folder) if folder else TOY
    if not (where / "config.json").is_file():
        from icmlkit.lib.attribute_tokens.toy import save_toy, train_toy
        from icmlkit.lib.core.io import atomic_dir

        log("training the toy model (not cached)")
        res = train_toy(cfg or ToyConfig(), seed=0)
        where.parent.mkdir(parents=True, exist_ok=True)
        with atomic_dir(where, overwrite=True) as tmp:
            save_toy(tmp, res)
    summary = json.loads((where / "toy_summary.json").read_text())
    return api.load(str(where)), summary, time.perf_counter() - t0


def run_rows(bundle, rows, methods, faith_ids, trace_cfg, where, deadline=None):
    """Per-example results of every method on every row (RISE/MAS on the rows whose id is in
    ``faith_ids``); examples are taken one at a time and the loop stops at ``deadline`` (the counts
    say how many ran). Returns (per-example rows, {method: [seconds]})."""
    exs = api.prepare_rows(list(enumerate(rows, 1)), bundle.tokenizer, where, require_gold=True)
    per, secs = [], {m: [] for m in methods}
    for ex in exs:
        if deadline is not None and time.perf_counter() > deadline:
            break
        ev = api.evaluate(bundle, [ex], EvalConfig(methods=methods, faithfulness=ex.id in faith_ids), trace_cfg)
        per += ev.per_example
        for r in ev.summary["methods"]:
            secs[r["method"]].append(r["seconds_per_example"])
    return per, secs


def aggregate(per, secs, methods) -> dict:
    """Mean Recall@10%, RISE, MAS and thinking ratio per method over per-example rows."""
    import numpy as np

    out = {}
    for m in methods:
        mine = [p for p in per if p["method"] == m]

        def mean(key):
            vals = [p[key] for p in mine if p[key] is not None]
            return round(float(np.mean(vals)), 4) if vals else None

        out[m] = {"n": len(mine), "recall_at_10": mean("recall_at_10"), "rise": mean("rise"), "mas": mean("mas"),
                  "n_curves": sum(p["rise"] is not None for p in mine),
                  "thinking_ratio": mean("thinking_ratio"),
                  "seconds_per_example": round(float(np.mean(secs[m])), 4) if secs.get(m) else None}
    return out


def run_eval(bundle, rows, methods, n_faith, trace_cfg, where, deadline=None):
    """Recall@10% of every method on every row, RISE/MAS on the first ``n_faith`` rows."""
    per, secs = run_rows(bundle, rows, methods, {str(r["id"]) for r in rows[:n_faith]}, trace_cfg, where, deadline)
    return aggregate(per, secs, methods)


def guarded(fn, *a, **kw):
    """Run one stage; an exception is recorded in the results instead of losing the whole run."""
    try:
        return fn(*a, **kw)
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def _niah_key(row) -> str:
    import re

    return re.search(r"values of (key\d+)\?", row["prompt"]).group(1)


def correct_items(bundle, task: str, n: int, seed: int = 1) -> tuple[dict, list]:
    """SmolLM2's greedy accuracy on short items, and the items it answers correctly as rows whose
    target is its own reply (cut after the answer; output span = the answer's characters, the text
    before it the reasoning span when it holds a word) [reconstructed: the prompt forms].

    NIAH-KV: 3 keys, the prompt ending in `` keyK:`` after the question (a completion, which the
    instruct model answers far more often than in its chat template); correct = the reply's first four
    integers are the needle's values. VT: 2 chains of 1 assignment, 2 filler sentences, plain completion;
    correct = the reply's first integer is the queried value."""
    import re

    from icmlkit.lib.hf import greedy_generate

    if task == "niah-kv":
        rows = make_task("niah-kv", TaskConfig(n=n, lines_min=3, lines_max=3, style="text"), seed=seed)
        rows = [dict(r, prompt=r["prompt"] + " " + _niah_key(r) + ":") for r in rows]
        need = 4
    else:
        rows = make_task("vt", TaskConfig(n=n, chains=2, hops=1, fillers=2, style="text"), seed=seed)
        need = 1
    gens = greedy_generate(bundle.model, bundle.tokenizer, [r["prompt"] for r in rows], max_new_tokens=12)
    keep, example = [], None
    for r, g in zip(rows, gens):
        nums = list(re.finditer(r"(?<![\w.])\d+(?![\w])", g.text))
        if [m.group() for m in nums[:need]] != r["answer"].split()[-need:] or len(nums) < need:
            continue
        a0, a1 = nums[0].start(), nums[need - 1].end()
        target = g.text[:a1]
        base = len(r["prompt"])
        lead = target[:a0]
        out = dict(r, id=f"{r['id']}-own", target=target, output_span=[base + a0, base + a1 - 1],
                   reasoning_span=[base, base + a0 - 1] if re.search(r"\w", lead) else None)
        keep.append(out)
        example = example or g.text
    acc = {"task": task, "n": n, "correct": len(keep), "accuracy": round(len(keep) / n, 4),
           "example_reply": (example or (gens[0].text if gens else ""))[:80]}
    return acc, keep


def _save_part(name: str, data: dict) -> None:
    from icmlkit.lib.core.io import write_json

    PARTS.mkdir(parents=True, exist_ok=True)
    write_json(PARTS / f"{name}.json", {"part": name, "date": today(), "commit": commit(), "machine": machine(),
                                        "seconds": round(time.perf_counter() - _START[0], 1), **data})
    _START[0] = time.perf_counter()


def _toy_args(args):
    if args.quick:
        return dict(cfg=ToyConfig(steps=20, layers=1, eval_n=4), folder=PARTS / "toy-model")
    return {}


def part_toy_train(args, tc, log) -> None:
    """Train (or find) the toy model only: outputs/attribute-tokens/toy (about 17 min for the default 4000 steps on 2 cores)."""
    toy_model(log, **_toy_args(args))


def part_toy(args, tc, log) -> None:
    toy, toy_summary, toy_s = toy_model(log, **_toy_args(args))
    log(f"toy model: {toy_summary}")
    rows = {"niah-kv": make_task("niah-kv", TaskConfig(n=args.toy_n), seed=7),
            "vt": make_task("vt", TaskConfig(n=args.toy_n), seed=7)}
    per, secs = {}, {}
    for task, rs in rows.items():
        per[task], secs[task] = run_rows(toy, rs, ALL, {str(r["id"]) for r in rs[:args.toy_faith]}, tc, f"toy-{task}")
        abl = guarded(run_eval, toy, rs[:args.toy_ablation], ["ablation"], 0, tc, f"toy-{task}")
        secs[task]["ablation_summary"] = abl.get("ablation", abl)
        log(f"toy {task}: {len(per[task]) // len(ALL)} examples")
    t = api.timing(toy, TimingConfig(lengths=[8, 32, 128, 512], methods=["flashtrace", "ifr-tokenwise", "ig"],
                                     prompt_tokens=200, repeats=2), dataclasses.replace(tc, ig_steps=16))
    log(f"toy timing: {t['seconds']}")
    sweep = prompt_sweep(toy, ["flashtrace", "ifr-tokenwise"], dataclasses.replace(tc, ig_steps=16), log)
    hop_sweep = hops_sweep(toy, rows["vt"], tc)
    log(f"toy vt Recall@10% by hops: {hop_sweep}")
    _save_part("toy", {"toy_model": {**toy_summary, "seconds_load_or_train": round(toy_s, 1)}, "per": per,
                       "secs": secs, "timing_toy": t, "timing_toy_prompts": sweep, "vt_hops_sweep": hop_sweep,
                       "counts": {"toy_n": args.toy_n, "toy_faith": args.toy_faith, "toy_ablation": args.toy_ablation}})


def hops_sweep(bundle, rows, tc, hops=(0, 1, 2, 3, 4, 6)) -> dict:
    """FlashTrace's VT Recall@10% at several hop counts (the issue asks for hops 1 vs 0 only; more
    hops show whether the mass reaches the statements when the answer is more than one generated
    token away from the chain steps that read them)."""
    exs = api.prepare_rows(list(enumerate(rows, 1)), bundle.tokenizer, "toy-vt", require_gold=True)
    out = {}
    for h in hops:
        method = "flashtrace" if h else "ifr-span"
        ev = api.evaluate(bundle, exs, EvalConfig(methods=[method], faithfulness=False),
                          dataclasses.replace(tc, hops=h))
        out[str(h)] = round(ev.rows[0]["recall_at_10"], 4)
    return out


def prompt_sweep(bundle, methods, tc, log, prompts=(200, 1000, 2000)) -> dict:
    """FlashTrace's M = 512 / M = 8 time ratio at several prompt lengths: the forward pass and the
    per-layer passes over all N tokens grow with N = prompt + M, so "flat in M" depends on how
    long the prompt is next to the target."""
    out = {}
    for p in prompts:
        t = api.timing(bundle, TimingConfig(lengths=[8, 512], methods=methods, prompt_tokens=p, repeats=2), tc)
        out[str(p)] = t
        log(f"prompt {t['n_prompt_tokens']} tokens: {t['seconds']}")
    return out


def run_part_rows(name: str, bundle, rows: dict, faith: dict, args, tc, log, **extra) -> None:
    """Every method on the rows of each task (RISE/MAS on the ids in ``faith[task]``) within
    ``args.budget`` seconds, saved as part ``name``. --extend keeps the rows the part already ran
    and runs only the others (ids are stable: the rows are generated from fixed seeds)."""
    old = json.loads((PARTS / f"{name}.json").read_text()) if args.extend and (PARTS / f"{name}.json").exists() else {}
    per, secs = old.get("per", {}), old.get("secs", {})
    t0 = time.perf_counter()
    for j, (task, rs) in enumerate(rows.items()):
        done = {p["id"] for p in per.get(task, [])}
        new_per, new_secs = run_rows(bundle, [r for r in rs if str(r["id"]) not in done], ALL, faith[task], tc,
                                     f"{name}-{task}", t0 + (j + 1) * args.budget / len(rows))
        per[task] = per.get(task, []) + new_per
        secs[task] = {m: secs.get(task, {}).get(m, []) + v for m, v in new_secs.items()}
        log(f"{name} {task}: {len(per[task]) // len(ALL)} examples ({len(new_per) // len(ALL)} new)")
    _save_part(name, {"per": per, "secs": secs, **extra,
                      "extended": old.get("extended", []) + ([old["date"]] if old else [])})


def part_smol_correct(args, tc, log) -> None:
    smol = api.load("smollm2")
    acc, rows = {}, {}
    for task in ("niah-kv", "vt"):
        acc[task], rs = correct_items(smol, task, args.correct_n)
        log(f"smollm2 accuracy {task}: {acc[task]}")
        rows[task] = rs[:args.correct_max]
    faith = {task: {str(r["id"]) for r in rs} for task, rs in rows.items()}
    run_part_rows("smol-correct", smol, rows, faith, args, tc, log, accuracy=acc)


def part_smol_forced(args, tc, log) -> None:
    smol = api.load("smollm2")
    k, n_shards = args.shard
    rows = {"niah-kv": make_task("niah-kv", TaskConfig(n=200, lines_min=8, lines_max=12, style="text"), seed=7),
            "vt": make_task("vt", TaskConfig(n=200, chains=3, fillers=4, style="text"), seed=7)}
    mine = {task: [r for i, r in enumerate(rs) if i % n_shards == k - 1][:args.smol_n] for task, rs in rows.items()}
    faith = {task: {str(r["id"]) for r in rs[:args.smol_faith]} for task, rs in mine.items()}
    run_part_rows(f"smol-forced-{k}of{n_shards}", smol, mine, faith, args, tc, log, shard=[k, n_shards])


def part_smol_timing(args, tc, log) -> None:
    smol = api.load("smollm2")
    ts = api.timing(smol, TimingConfig(lengths=[8, 32, 128, 512], methods=["flashtrace", "ifr-tokenwise", "ig"],
                                       prompt_tokens=120), tc)
    log(f"smollm2 timing: {ts['seconds']}")
    sweep = prompt_sweep(smol, ["flashtrace"], tc, log)
    _save_part("smol-timing", {"timing_smollm2": ts, "timing_smollm2_prompts": sweep})


def _merge_per(parts: list[dict]) -> dict:
    """{task: aggregate} over the per-example rows of several parts (shards concatenate)."""
    per, secs = {}, {}
    for d in parts:
        for task, rows in d["per"].items():
            per.setdefault(task, []).extend(rows)
            for m, v in d["secs"][task].items():
                if isinstance(v, list):
                    secs.setdefault(task, {}).setdefault(m, []).extend(v)
    return {task: aggregate(per[task], secs.get(task, {}), ALL) for task in per}


def merge() -> dict:
    """The results from the parts present. A part of this script's current form replaces the
    ``legacy-*`` part of the same kind (aggregates of the earlier one-run benchmark, kept until the
    part is rerun; the results say which parts are legacy)."""
    parts = {p.stem: json.loads(p.read_text()) for p in sorted(PARTS.glob("*.json")) if p.stem != "merged"}
    forced = [v for k, v in parts.items() if k.startswith("smol-forced")]
    for kind, present in (("toy", "toy" in parts), ("smol-forced", bool(forced)),
                          ("smol-timing", "smol-timing" in parts)):
        if present:
            parts.pop(f"legacy-{kind}", None)
    results: dict = {"parts": {k: {"date": v["date"], "commit": v["commit"],
                                   "load_average_1min": v["machine"].get("load_average_1min"),
                                   "seconds": v.get("seconds"), "legacy": v.get("legacy")}
                               for k, v in parts.items()},
                     "ig_steps": 8, "ig_steps_timing_toy": 16}
    for key in ("toy", "legacy-toy"):
        if key in parts:
            d = parts[key]
            results["toy_model"] = d["toy_model"]
            results["counts"] = d["counts"]
            results["toy"] = d["aggregate"] if "aggregate" in d else _merge_per([d])
            if "per" in d:
                for task in results["toy"]:
                    results["toy"][task]["ablation"] = d["secs"][task].get("ablation_summary")
            results["timing_toy"] = d["timing_toy"]
            if "timing_toy_prompts" in d:
                results["timing_toy_prompts"] = d["timing_toy_prompts"]
            if "vt_hops_sweep" in d:
                results["toy_vt_hops_sweep"] = d["vt_hops_sweep"]
    if "smol-correct" in parts:
        d = parts["smol-correct"]
        results["smollm2_accuracy"] = d["accuracy"]
        results["smollm2_correct"] = _merge_per([d])
    if forced:
        results["smollm2"] = _merge_per(forced)
        results["smollm2_forced_shards"] = [v["shard"] for v in forced]
    elif "legacy-smol-forced" in parts:
        results["smollm2"] = parts["legacy-smol-forced"]["aggregate"]
        results["smollm2_accuracy_chat_prompt"] = parts["legacy-smol-forced"]["accuracy_chat_prompt"]
    for key in ("smol-timing", "legacy-smol-timing"):
        if key in parts:
            results["timing_smollm2"] = parts[key]["timing_smollm2"]
            if "timing_smollm2_prompts" in parts[key]:
                results["timing_smollm2_prompts"] = parts[key]["timing_smollm2_prompts"]
    return results


def targets_of(results: dict) -> dict:
    targets = {}
    for model, key in (("toy", "toy"), ("smollm2", "smollm2"), ("smollm2_correct", "smollm2_correct")):
        R = results.get(key)
        if not R:
            continue
        vt = R["vt"]
        h1, h0 = vt["flashtrace"]["recall_at_10"], vt["ifr-span"]["recall_at_10"]
        if h1 is not None and h0 is not None:
            diff = h1 - h0
            targets[f"{model}_vt_recall_hops1_minus_hops0"] = target(
                round(diff, 4), 0.2, diff >= 0.2, f"FlashTrace(hops 1) - FlashTrace(hops 0) on VT, "
                f"n={vt['flashtrace']['n']}")
        for task in ("niah-kv", "vt"):
            ft = R[task]["flashtrace"]["recall_at_10"]
            for base in ("ifr-tokenwise", "gradxinput", "ig"):
                b = R[task][base]["recall_at_10"]
                if ft is not None and b is not None:
                    targets[f"{model}_{task}_recall_flashtrace_ge_{base}"] = target(
                        round(ft, 4), round(b, 4), ft >= b, f"Recall@10% flashtrace vs {base}, n={R[task][base]['n']}")
            fr = R[task]["flashtrace"].get("rise")
            for base in ("ifr-span", "ifr-tokenwise", "gradxinput", "ig", "random"):
                br = R[task].get(base, {}).get("rise")
                if fr is not None and br is not None:
                    targets[f"{model}_{task}_rise_flashtrace_le_{base}"] = target(
                        round(fr, 4), round(br, 4), fr <= br,
                        f"RISE (lower is better) flashtrace vs {base}, {R[task][base]['n_curves']} curves")
    for name in ("timing_toy", "timing_smollm2"):
        t = results.get(name)
        if not t:
            continue
        who = name.split("_")[1]
        Ms = t["target_lengths"]
        f = t["seconds"]["flashtrace"]
        if 512 not in Ms:  # a legacy part (SmolLM2 was timed up to M = 128 only): reported, no target
            targets[f"{who}_speedup_vs_tokenwise_at_{Ms[-1]}"] = target(
                t["speedup_vs_tokenwise"][-1], None, True, f"reported only: M = 512 not timed in this part")
            continue
        i8, i512 = Ms.index(8) if 8 in Ms else 0, Ms.index(512)
        targets[f"{who}_timing_flat_512_over_8"] = target(round(f[i512] / f[i8], 3), 2.0, f[i512] <= 2 * f[i8],
                                                          f"flashtrace seconds at M=512 / at M=8 ({who})")
        sp = t["speedup_vs_tokenwise"][i512]
        targets[f"{who}_speedup_vs_tokenwise_at_512"] = target(sp, 20.0, sp >= 20,
                                                               "token-wise IFR s / flashtrace s, M=512")
        if "speedup_vs_ig" in t:
            targets[f"{who}_speedup_vs_ig_at_512"] = target(t["speedup_vs_ig"][i512], None, True,
                                                            "reported only (IG s / flashtrace s)")
    for name in ("timing_toy_prompts", "timing_smollm2_prompts"):
        who = name.split("_")[1]
        for t in results.get(name, {}).values():
            f, p = t["seconds"]["flashtrace"], t["n_prompt_tokens"]
            targets[f"{who}_timing_flat_512_over_8_prompt_{p}"] = target(
                round(f[-1] / f[0], 3), 2.0, f[-1] <= 2 * f[0], f"the same ratio with a {p}-token prompt (reported "
                "beside the issue's setting above)")
    ts = results.get("toy_model")
    if ts:
        targets["toy_accuracy_95"] = target([ts.get("accuracy_niah_kv"), ts.get("accuracy_vt")], 0.95,
                                            bool(ts.get("meets_95")), "toy model greedy accuracy NIAH-KV, VT")
    return targets


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=["toy-train", "toy", "smol-correct", "smol-forced", "smol-timing", "all"],
                    default="all", help="run one part (writes bench/results/attribute_tokens_parts/), then merge; "
                    "all (default): every part in one run")
    ap.add_argument("--merge", action="store_true", help="run no part: rebuild the results from the parts present")
    ap.add_argument("--toy-n", type=int, default=200, help="examples per task on the toy model")
    ap.add_argument("--toy-faith", type=int, default=60, help="of which with RISE/MAS")
    ap.add_argument("--toy-ablation", type=int, default=10, help="of which with feature ablation")
    ap.add_argument("--correct-n", type=int, default=30, help="short items generated per task (smol-correct)")
    ap.add_argument("--correct-max", type=int, default=12, help="correct items attributed per task")
    ap.add_argument("--smol-n", type=int, default=14, help="teacher-forced examples per task in this shard")
    ap.add_argument("--smol-faith", type=int, default=3, help="of which with RISE/MAS (every method)")
    ap.add_argument("--shard", default="1/1", help="K/N of the 200 teacher-forced rows per task (smol-forced)")
    ap.add_argument("--extend", action="store_true",
                    help="smol-forced, smol-correct: keep the part's stored rows and run only the rows it has not run")
    ap.add_argument("--budget", type=float, default=400.0, help="seconds after which remaining examples are skipped")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, parts and results under --scratch")
    ap.add_argument("--scratch", default=None, help="write the parts here and do not touch bench/results")
    args = ap.parse_args()
    global PARTS
    if args.scratch:
        PARTS = Path(args.scratch)
    args.shard = tuple(int(x) for x in args.shard.split("/"))
    if args.quick:
        args.toy_n, args.toy_faith, args.toy_ablation, args.smol_n, args.smol_faith = 6, 3, 2, 2, 1
        args.correct_n, args.correct_max = 4, 1
    t_start = time.perf_counter()
    _START[0] = t_start
    logs = []

    def log(msg):
        logs.append(f"{time.perf_counter() - t_start:7.1f}s {msg}")
        print(logs[-1], flush=True)

    tc = TraceConfig(ig_steps=8)
    fns = {"toy-train": part_toy_train, "toy": part_toy, "smol-correct": part_smol_correct, "smol-forced": part_smol_forced,
           "smol-timing": part_smol_timing}
    for name in ([] if args.merge else fns if args.part == "all" else [args.part]):
        fns[name](args, tc, log)
    if args.part == "toy-train" and not args.merge:
        return
    if not PARTS.is_dir() or not any(PARTS.glob("*.json")):
        raise SystemExit(f"no parts in {PARTS}: run --part first")
    results = merge()
    targets = targets_of(results)
    out = {"tool": "attribute-tokens", "date": today(), "commit": commit(), "machine": machine(),
           "command": "flock /work/notes/cpu.lock timeout 480 .venv/bin/python bench/attribute_tokens.py --part P "
                      "(P = toy, smol-correct, smol-forced [--shard K/N], smol-timing; each part <= 8 min)",
           "results": results, "targets": targets, "log": logs}
    if args.scratch:
        (PARTS / "merged.md").write_text(markdown(out))
    else:
        write_results("attribute_tokens", out, markdown(out))
    print(json.dumps({k: v["met"] for k, v in targets.items()}, indent=1))


def _table(lines, title, rows):
    lines += [f"## {title}", "", "| method | n | Recall@10% | RISE (lower better) | MAS (lower better) "
              "| curves | s/example |", "|---|---|---|---|---|---|---|"]
    for m, r in rows.items():
        if not isinstance(r, dict):
            continue
        lines.append(f"| {m} | {r.get('n')} | {r.get('recall_at_10')} | {r.get('rise')} | {r.get('mas')} | "
                     f"{r.get('n_curves')} | {r.get('seconds_per_example')} |")
    lines.append("")


def markdown(out: dict) -> str:
    R = out["results"]
    lines = [f"# attribute-tokens benchmark ({out['date']}, {out['machine']['cpu']}, {out['machine']['cores']} cores)",
             "", f"Command: `{out['command']}`.", "",
             "Parts (date, 1-minute load average when the part ran): "
             + "; ".join(f"{k} {v['date']} load {v['load_average_1min']}" for k, v in R["parts"].items()), ""]
    legacy = [f"- {k}: {v['legacy']}" for k, v in R["parts"].items() if v.get("legacy")]
    if legacy:
        lines += ["Legacy parts (not yet rerun with this script's sizes):", *legacy, ""]
    if "toy_model" in R:
        lines += [f"Toy model: {json.dumps(R['toy_model'])}", ""]
    if "smollm2_accuracy" in R:
        lines += ["SmolLM2 greedy accuracy on short items: "
                  + "; ".join(f"{a['task']} {a['correct']}/{a['n']} ({a['accuracy']})"
                              for a in R["smollm2_accuracy"].values()), ""]
    for key, label in (("toy", "toy"), ("smollm2_correct", "smollm2, correct items (own reply attributed)"),
                       ("smollm2", "smollm2, gold teacher-forced (longer items)")):
        for task, rows in R.get(key, {}).items():
            _table(lines, f"{label} / {task}", rows)
    if "toy_vt_hops_sweep" in R:
        hs = R["toy_vt_hops_sweep"]
        lines += ["## toy / vt: FlashTrace Recall@10% by number of hops (0 = ifr-span)", "",
                  "| hops | " + " | ".join(hs) + " |", "|---" * (len(hs) + 1) + "|",
                  "| Recall@10% | " + " | ".join(str(v) for v in hs.values()) + " |", ""]
    for key in ("timing_toy", "timing_smollm2"):
        t = R.get(key)
        if not t:
            continue
        lines += [f"## {key} (prompt {t['n_prompt_tokens']} tokens)", "",
                  "| M | " + " | ".join(t["methods"]) + " | speedup vs token-wise | speedup vs IG |",
                  "|---" * (len(t["methods"]) + 3) + "|"]
        for i, m in enumerate(t["target_lengths"]):
            sv = t.get("speedup_vs_tokenwise", [None] * 9)[i]
            si = t.get("speedup_vs_ig", [None] * 9)[i] if "speedup_vs_ig" in t else None
            lines.append(f"| {m} | " + " | ".join(str(t["seconds"][x][i]) for x in t["methods"]) + f" | {sv} | {si} |")
        lines.append("")
    for key in ("timing_toy_prompts", "timing_smollm2_prompts"):
        sweep = R.get(key)
        if not sweep:
            continue
        methods = next(iter(sweep.values()))["methods"]
        lines += [f"## {key}: M = 8 and 512 at several prompt lengths (seconds)", "",
                  "| prompt tokens | " + " | ".join(f"{m} M=8 | {m} M=512" for m in methods)
                  + " | flashtrace 512/8 | speedup vs token-wise at 512 |", "|---" * (2 * len(methods) + 3) + "|"]
        for t in sweep.values():
            sec = t["seconds"]
            sp = t.get("speedup_vs_tokenwise", [None, None])[-1]
            lines.append(f"| {t['n_prompt_tokens']} | " + " | ".join(f"{sec[m][0]} | {sec[m][-1]}" for m in methods)
                         + f" | {t.get('flashtrace_last_over_first')} | {sp} |")
        lines.append("")
    lines += ["## Targets", "", "| target | value | threshold | met | note |", "|---|---|---|---|---|"]
    for k, v in out["targets"].items():
        lines.append(f"| {k} | {v['value']} | {v['threshold']} | {v['met']} | {v['note']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
