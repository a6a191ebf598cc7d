"""Benchmark of attribute-tokens (FlashTrace) against its baselines, on the toy decoder and on
SmolLM2-135M-Instruct (real weights, lib/hf).

Parts (``make bench TOOL=attribute-tokens``; about 2 h in all on 2 CPU cores, every long part resumable:
each example's result is a cached item, the toy training checkpoints every 500 steps):

- ``toy``: the toy decoder (``train-toy`` defaults, 4000 steps, about 17 min when not cached) -- its
  accuracy on both tasks first; then Recall@10%, RISE and RISE+AP on NIAH-KV (40-80 lines) and VT (200
  examples per task, RISE/RISE+AP on the first 60) for flashtrace (hops 1), ifr-span (hops 0), token-wise
  IFR, Captum gradient x input and IG (8 steps), feature ablation (first 10 examples) and a random
  ranking; FlashTrace's VT Recall@10% by number of hops (0-6);
- ``toy_timing``: wall time vs target length M in {8, 32, 128, 512} (the chain padded with filler
  steps; a 200-token prompt) for flashtrace, token-wise IFR and IG (16 steps), and M = 8 / 512 at
  prompts of 200, 1000 and 2000 tokens; every point a ``time_call`` (median of 3), every ratio a
  ``speed_ratio``;
- ``smol_correct``: SmolLM2 on items it answers correctly: short NIAH-KV (3 keys, the prompt ending in
  the queried key) and short VT (2 chains of 1 assignment), greedy, 200 generated per task; its
  accuracy, then every method (RISE/RISE+AP too) on every correct item with its own reply as the
  attributed target (output span = the answer tokens of the reply);
- ``smol_forced``: the gold answer / chain teacher-forced on 200 longer items per task (NIAH-KV 8-12
  lines, VT 3 chains): Recall@10% for every method, RISE/RISE+AP on the first 24;
- ``smol_timing``: M in {8, 32, 128, 512} for flashtrace, token-wise IFR and IG on SmolLM2 (a
  120-token prompt), and FlashTrace at M = 8 / 512 with prompts of 200, 1000 and 2000 tokens.

No method has a knob tuned: each runs at its stated setting (IG 8 steps, 16 in the toy timing;
FlashTrace hops 1). ``--quick``: a 20-step one-layer toy model, 6 toy / 2 teacher-forced / 1 correct
example per task, M in {8, 32} with short prompts, one repeat.
Run:  python bench/attribute_tokens.py [--part P] [--quick] [--report]   (or: make bench TOOL=attribute-tokens)
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re

from _common import Bench, speed_ratio, table, target, time_call
from icmlkit.lib.attribute_tokens import api
from icmlkit.lib.attribute_tokens.config import EvalConfig, TaskConfig, ToyConfig, TraceConfig
from icmlkit.lib.attribute_tokens.tasks import make_task

bench = Bench("attribute-tokens")

ALL = ["flashtrace", "ifr-span", "ifr-tokenwise", "gradxinput", "ig", "random"]
TC = TraceConfig(ig_steps=8)
TC_TIMING_TOY = dataclasses.replace(TC, ig_steps=16)
SIZES = {"toy_n": 200, "toy_faith": 60, "toy_ablation": 10, "correct_n": 200, "correct_max": None,
         "forced_n": 200, "forced_faith": 24, "lengths": [8, 32, 128, 512], "prompts": [200, 1000, 2000],
         "toy_prompt": 200, "smol_prompt": 120, "repeats": 3}
QUICK = {"toy_n": 6, "toy_faith": 3, "toy_ablation": 2, "correct_n": 4, "correct_max": 1,
         "forced_n": 2, "forced_faith": 1, "lengths": [8, 32], "prompts": [40, 80],
         "toy_prompt": 40, "smol_prompt": 40, "repeats": 1}
TOY_QUICK = ToyConfig(steps=20, layers=1, eval_n=4)


def sizes(ctx) -> dict:
    return QUICK if ctx.quick else SIZES


# ----------------------------------------------------------------------------- models and rows


def toy_model(ctx) -> tuple[api.Bundle, dict]:
    """The toy decoder of ``train-toy`` (quick: a 20-step one-layer one), trained once into the bench
    cache (a folder named by its settings; training checkpoints every 500 steps and resumes)."""
    from icmlkit.lib.attribute_tokens.toy import save_toy, train_toy
    from icmlkit.lib.core.checkpoint import Checkpointer
    from icmlkit.lib.core.io import atomic_dir

    cfg = TOY_QUICK if ctx.quick else ToyConfig()
    fp = hashlib.sha256(json.dumps(dataclasses.asdict(cfg), sort_keys=True).encode()).hexdigest()[:8]
    where = ctx.folder.parent / f"toy-model-seed0-{fp}"
    if not (where / "config.json").is_file():
        ckpt = where.parent / f"{where.name}.ckpt"
        ctx.log(f"training the toy model into {where.name} ({cfg.steps} steps)")
        res = train_toy(cfg, seed=0, checkpointer=Checkpointer(ckpt, every=500, resume=ckpt.is_file()))
        with atomic_dir(where, overwrite=True) as tmp:
            save_toy(tmp, res)
    return api.load(str(where)), json.loads((where / "toy_summary.json").read_text())


def run_rows(ctx, bundle, rows, methods, faith_ids, tag: str):
    """Every method on every row (RISE/RISE+AP on the rows whose id is in ``faith_ids``), one cached item
    per example -> (per-example rows, {method: [seconds per example]})."""
    exs = api.prepare_rows(list(enumerate(rows, 1)), bundle.tokenizer, tag, require_gold=True)
    per, secs = [], {m: [] for m in methods}
    for ex in exs:
        faith = ex.id in faith_ids

        def one(ex=ex, faith=faith):
            ev = api.evaluate(bundle, [ex], EvalConfig(methods=methods, faithfulness=faith), TC)
            return {"per": ev.per_example, "secs": {r["method"]: r["seconds_per_example"] for r in ev.summary["methods"]}}

        key = f"{tag}-{ex.id}-{'+'.join(methods)}-ig{TC.ig_steps}{'-faith' if faith else ''}"
        got = ctx.cached(re.sub(r"[^\w.+-]", "_", key), one)
        per += got["per"]
        for m, s in got["secs"].items():
            secs[m].append(s)
    return per, secs


def aggregate(per, secs, methods) -> dict:
    """Mean Recall@10%, RISE, RISE+AP and thinking ratio per method over per-example rows."""
    import numpy as np

    out = {}
    for m in methods:
        mine = [p for p in per if p["method"] == m]

        def mean(key):
            vals = [p[key] for p in mine if p[key] is not None]
            return round(float(np.mean(vals)), 4) if vals else None

        out[m] = {"n": len(mine), "recall_at_10": mean("recall_at_10"), "rise": mean("rise"), "rise_ap": mean("rise_ap"),
                  "n_curves": sum(p["rise"] is not None for p in mine),
                  "thinking_ratio": mean("thinking_ratio"),
                  "seconds_per_example": round(float(np.mean(secs[m])), 4) if secs.get(m) else None}
    return out


def guarded(fn, *a, **kw):
    """Run one stage; an exception is recorded in the results instead of losing the whole part."""
    try:
        return fn(*a, **kw)
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def _niah_key(row) -> str:
    return re.search(r"values of (key\d+)\?", row["prompt"]).group(1)


def correct_items(bundle, task: str, n: int, seed: int = 1) -> list:
    """[SmolLM2's greedy accuracy on short items, the items it answers correctly as rows whose target
    is its own reply] (cut after the answer; output span = the answer's characters, the text before
    it the reasoning span when it holds a word) [reconstructed: the prompt forms].

    NIAH-KV: 3 keys, the prompt ending in `` keyK:`` after the question (a completion, which the
    instruct model answers far more often than in its chat template); correct = the reply's first four
    integers are the needle's values. VT: 2 chains of 1 assignment, 2 filler sentences, plain completion;
    correct = the reply's first integer is the queried value."""
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
        tgt = g.text[:a1]
        base = len(r["prompt"])
        lead = tgt[:a0]
        keep.append(dict(r, id=f"{r['id']}-own", target=tgt, output_span=[base + a0, base + a1 - 1],
                         reasoning_span=[base, base + a0 - 1] if re.search(r"\w", lead) else None))
        example = example or g.text
    acc = {"task": task, "n": n, "correct": len(keep), "accuracy": round(len(keep) / n, 4),
           "example_reply": (example or (gens[0].text if gens else ""))[:80]}
    return [acc, keep]


def hops_sweep(bundle, rows, hops=(0, 1, 2, 3, 4, 6)) -> dict:
    """FlashTrace's VT Recall@10% at several hop counts (the issue asks for hops 1 vs 0 only; more
    hops show whether the mass reaches the statements when the answer is more than one generated
    token away from the chain steps that read them)."""
    exs = api.prepare_rows(list(enumerate(rows, 1)), bundle.tokenizer, "toy-vt", require_gold=True)
    out = {}
    for h in hops:
        method = "flashtrace" if h else "ifr-span"
        ev = api.evaluate(bundle, exs, EvalConfig(methods=[method], faithfulness=False), dataclasses.replace(TC, hops=h))
        out[str(h)] = round(ev.rows[0]["recall_at_10"], 4)
    return out


# ----------------------------------------------------------------------------- timing


def timing(ctx, bundle, methods, lengths, prompt_tokens, tc) -> dict:
    """Wall seconds of each method vs target length M (``api.timing_example``): one ``time_call``
    per point (the first length of each method with one untimed warm-up), ratios by ``speed_ratio``."""
    recs = {m: [] for m in methods}
    n_prompt = None
    for i, M in enumerate(lengths):
        ex = api.timing_example(bundle, M, prompt_tokens)
        n_prompt = ex.n_prompt
        for m in methods:
            c = dataclasses.replace(tc, method=m, hops=max(tc.hops, 1))
            recs[m].append(time_call(lambda: api.attribute(bundle, ex, c), repeats=sizes(ctx)["repeats"],
                                     warmup=1 if i == 0 else 0))
    out = {"target_lengths": list(lengths), "methods": list(methods), "n_prompt_tokens": n_prompt,
           "seconds": {m: [round(r["median_s"], 4) for r in v] for m, v in recs.items()}, "timings": recs}
    for other, key in (("ifr-tokenwise", "speedup_vs_tokenwise"), ("ig", "speedup_vs_ig")):
        if other in recs:
            ratios = [speed_ratio(b, a) for a, b in zip(recs["flashtrace"], recs[other])]
            out[key] = [round(r["ratio"], 3) for r in ratios]
            out[key + "_range"] = [[round(r["low"], 3), round(r["high"], 3)] for r in ratios]
    r = speed_ratio(recs["flashtrace"][-1], recs["flashtrace"][0])
    out["flashtrace_last_over_first"] = round(r["ratio"], 3)
    out["flashtrace_last_over_first_range"] = [round(r["low"], 3), round(r["high"], 3)]
    ctx.log(f"timing (prompt {n_prompt} tokens): {out['seconds']}")
    return out


def timing_parts(ctx, bundle, methods, sweep_methods, prompt_tokens, tc) -> dict:
    s = sizes(ctx)
    return {"timing": timing(ctx, bundle, methods, s["lengths"], prompt_tokens, tc),
            "prompts": {str(p): timing(ctx, bundle, sweep_methods, [s["lengths"][0], s["lengths"][-1]], p, tc)
                        for p in s["prompts"]},
            "ig_steps": tc.ig_steps}


# ----------------------------------------------------------------------------- parts


@bench.part("toy", doc="toy decoder: accuracy; Recall@10%, RISE, RISE+AP of every method on NIAH-KV and VT "
            "(200 each); VT hops sweep", hours=0.35)
def toy(ctx) -> dict:
    s = sizes(ctx)
    bundle, summary = toy_model(ctx)
    ctx.log(f"toy model: {summary}")
    rows = {task: make_task(task, TaskConfig(n=s["toy_n"]), seed=7) for task in ("niah-kv", "vt")}
    agg = {}
    for task, rs in rows.items():
        per, secs = run_rows(ctx, bundle, rs, ALL, {str(r["id"]) for r in rs[:s["toy_faith"]]}, f"toy-{task}")
        agg[task] = aggregate(per, secs, ALL)
        abl = guarded(lambda: aggregate(*run_rows(ctx, bundle, rs[:s["toy_ablation"]], ["ablation"], set(),
                                                  f"toy-{task}"), ["ablation"]))
        agg[task]["ablation"] = abl.get("ablation", abl)
        ctx.log(f"toy {task}: {agg[task]['flashtrace']['n']} examples")
    hops = ctx.cached(f"vt-hops-sweep-n{s['toy_n']}-ig{TC.ig_steps}", lambda: hops_sweep(bundle, rows["vt"]))
    ctx.log(f"toy vt Recall@10% by hops: {hops}")
    return {"toy_model": summary, "aggregate": agg, "vt_hops_sweep": hops, "ig_steps": TC.ig_steps,
            "counts": {k: s[k] for k in ("toy_n", "toy_faith", "toy_ablation")}}


@bench.part("toy_timing", doc="toy decoder: seconds vs target length M for flashtrace, token-wise IFR, IG; "
            "M = 8 / 512 at three prompt lengths", hours=0.05)
def toy_timing(ctx) -> dict:
    bundle, _ = toy_model(ctx)
    return timing_parts(ctx, bundle, ["flashtrace", "ifr-tokenwise", "ig"], ["flashtrace", "ifr-tokenwise"],
                        sizes(ctx)["toy_prompt"], TC_TIMING_TOY)


@bench.part("smol_correct", doc="SmolLM2 on the short items it answers correctly (its own reply attributed): "
            "accuracy, every method with RISE/RISE+AP", hours=0.5)
def smol_correct(ctx) -> dict:
    s = sizes(ctx)
    smol = api.load("smollm2")
    acc, agg = {}, {}
    for task in ("niah-kv", "vt"):
        acc[task], rs = ctx.cached(f"correct-items-{task}-n{s['correct_n']}-seed1",
                                   lambda task=task: correct_items(smol, task, s["correct_n"]))
        ctx.log(f"smollm2 accuracy {task}: {acc[task]}")
        rs = rs[:s["correct_max"]] if s["correct_max"] else rs
        per, secs = run_rows(ctx, smol, rs, ALL, {str(r["id"]) for r in rs}, f"smol-correct-{task}")
        agg[task] = aggregate(per, secs, ALL)
    return {"accuracy": acc, "aggregate": agg, "ig_steps": TC.ig_steps}


@bench.part("smol_forced", doc="SmolLM2, gold answers teacher-forced on 200 longer items per task: Recall@10% "
            "of every method, RISE/RISE+AP on the first 24", hours=1.15)
def smol_forced(ctx) -> dict:
    s = sizes(ctx)
    smol = api.load("smollm2")
    rows = {"niah-kv": make_task("niah-kv", TaskConfig(n=200, lines_min=8, lines_max=12, style="text"), seed=7),
            "vt": make_task("vt", TaskConfig(n=200, chains=3, fillers=4, style="text"), seed=7)}
    agg = {}
    for task, rs in rows.items():
        rs = rs[:s["forced_n"]]
        per, secs = run_rows(ctx, smol, rs, ALL, {str(r["id"]) for r in rs[:s["forced_faith"]]}, f"smol-forced-{task}")
        agg[task] = aggregate(per, secs, ALL)
        ctx.log(f"smol-forced {task}: {agg[task]['flashtrace']['n']} examples")
    return {"aggregate": agg, "counts": {"n": s["forced_n"], "faith": s["forced_faith"]}, "ig_steps": TC.ig_steps}


@bench.part("smol_timing", doc="SmolLM2: seconds vs target length M for flashtrace, token-wise IFR, IG; "
            "FlashTrace at M = 8 / 512 at three prompt lengths", hours=0.2)
def smol_timing(ctx) -> dict:
    smol = api.load("smollm2")
    return timing_parts(ctx, smol, ["flashtrace", "ifr-tokenwise", "ig"], ["flashtrace"], sizes(ctx)["smol_prompt"], TC)


# ----------------------------------------------------------------------------- report


def flatten(results: dict) -> dict:
    """The parts' payloads under the names the targets and tables use."""
    R = {}
    if "toy" in results:
        R["toy_model"], R["toy"] = results["toy"]["toy_model"], results["toy"]["aggregate"]
        R["toy_vt_hops_sweep"] = results["toy"].get("vt_hops_sweep")
    if "toy_timing" in results:
        R["timing_toy"], R["timing_toy_prompts"] = results["toy_timing"]["timing"], results["toy_timing"]["prompts"]
    if "smol_correct" in results:
        R["smollm2_accuracy"], R["smollm2_correct"] = results["smol_correct"]["accuracy"], results["smol_correct"]["aggregate"]
    if "smol_forced" in results:
        R["smollm2"] = results["smol_forced"]["aggregate"]
    if "smol_timing" in results:
        R["timing_smollm2"], R["timing_smollm2_prompts"] = results["smol_timing"]["timing"], results["smol_timing"]["prompts"]
    return R


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
        top = Ms[-1]
        if 512 not in Ms:  # a --quick run: reported, no target
            targets[f"{who}_speedup_vs_tokenwise_at_{top}"] = target(
                t["speedup_vs_tokenwise"][-1], None, True, f"reported only: M = 512 not timed in this run")
            continue
        i8, i512 = Ms.index(8) if 8 in Ms else 0, Ms.index(512)
        flat = (t["flashtrace_last_over_first"] if "timings" in t and i8 == 0 and i512 == len(Ms) - 1
                else round(f[i512] / f[i8], 3))
        targets[f"{who}_timing_flat_512_over_8"] = target(flat, 2.0, flat <= 2.0,
                                                          f"flashtrace seconds at M=512 / at M=8 ({who})")
        sp = t["speedup_vs_tokenwise"][i512]
        targets[f"{who}_speedup_vs_tokenwise_at_512"] = target(sp, 20.0, sp >= 20,
                                                               "token-wise IFR s / flashtrace s, M=512")
        if "speedup_vs_ig" in t:
            targets[f"{who}_speedup_vs_ig_at_512"] = target(t["speedup_vs_ig"][i512], None, True,
                                                            "reported only (IG s / flashtrace s)")
    for name in ("timing_toy_prompts", "timing_smollm2_prompts"):
        who = name.split("_")[1]
        for t in (results.get(name) or {}).values():
            p = t["n_prompt_tokens"]
            ratio = t["flashtrace_last_over_first"]
            targets[f"{who}_timing_flat_512_over_8_prompt_{p}"] = target(
                ratio, 2.0, ratio <= 2.0, f"the same ratio with a {p}-token prompt (reported beside the issue's "
                "setting above)")
    ts = results.get("toy_model")
    if ts:
        targets["toy_accuracy_95"] = target([ts.get("accuracy_niah_kv"), ts.get("accuracy_vt")], 0.95,
                                            bool(ts.get("meets_95")), "toy model greedy accuracy NIAH-KV, VT")
    return targets


def markdown(R: dict) -> str:
    lines = []
    if "toy_model" in R:
        lines += [f"Toy model: {json.dumps(R['toy_model'])}", ""]
    if "smollm2_accuracy" in R:
        lines += ["SmolLM2 greedy accuracy on short items: "
                  + "; ".join(f"{a['task']} {a['correct']}/{a['n']} ({a['accuracy']})"
                              for a in R["smollm2_accuracy"].values()), ""]
    for key, label in (("toy", "toy"), ("smollm2_correct", "smollm2, correct items (own reply attributed)"),
                       ("smollm2", "smollm2, gold teacher-forced (longer items)")):
        for task, rows in R.get(key, {}).items():
            lines += [f"## {label} / {task}", "",
                      table([{"method": m, "n": r.get("n"), "Recall@10%": r.get("recall_at_10"),
                              "RISE (lower better)": r.get("rise"), "RISE+AP (lower better)": r.get("rise_ap"),
                              "curves": r.get("n_curves"), "s/example": r.get("seconds_per_example")}
                             for m, r in rows.items() if isinstance(r, dict) and "n" in r], digits=4)]
    if R.get("toy_vt_hops_sweep"):
        hs = R["toy_vt_hops_sweep"]
        lines += ["## toy / vt: FlashTrace Recall@10% by number of hops (0 = ifr-span)", "",
                  table([{"hops": "Recall@10%", **hs}], digits=4)]
    for key in ("timing_toy", "timing_smollm2"):
        t = R.get(key)
        if not t:
            continue
        rows = []
        for i, m in enumerate(t["target_lengths"]):
            row = {"M": m, **{x: t["seconds"][x][i] for x in t["methods"]},
                   "speedup vs token-wise": t.get("speedup_vs_tokenwise", [None] * 9)[i],
                   "speedup vs IG": t.get("speedup_vs_ig", [None] * 9)[i] if "speedup_vs_ig" in t else None}
            if "speedup_vs_tokenwise_range" in t:
                row["token-wise range"] = "{}-{}".format(*t["speedup_vs_tokenwise_range"][i])
            rows.append(row)
        how = ("median of time_call repeats" if "timings" in t else "minimum of the repeats (legacy)")
        lines += [f"## {key} (prompt {t['n_prompt_tokens']} tokens; seconds, {how})", "", table(rows, digits=4)]
    for key in ("timing_toy_prompts", "timing_smollm2_prompts"):
        sweep = R.get(key)
        if not sweep:
            continue
        rows = []
        for t in sweep.values():
            row = {"prompt tokens": t["n_prompt_tokens"]}
            for m in t["methods"]:
                row |= {f"{m} M={t['target_lengths'][0]}": t["seconds"][m][0],
                        f"{m} M={t['target_lengths'][-1]}": t["seconds"][m][-1]}
            row |= {"flashtrace last/first": t.get("flashtrace_last_over_first"),
                    "speedup vs token-wise at last": (t.get("speedup_vs_tokenwise") or [None])[-1]}
            rows.append(row)
        lines += [f"## {key}: the first and last M at several prompt lengths (seconds)", "", table(rows, digits=4)]
    return "\n".join(lines)


@bench.report
def report(results: dict) -> tuple[dict, str]:
    R = flatten(results)
    return targets_of(R), markdown(R)


if __name__ == "__main__":
    bench.main()
