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
  120-token prompt), and FlashTrace at M = 8 / 512 with prompts of 200, 1000 and 2000 tokens;
- ``qwen_vt_hops``: Qwen2.5-Coder-1.5B-Instruct (``qwen2.5-coder-1.5b-instruct``, lib/hf) on 40 RULER-style
  VT items with 3 hops per chain (``--style ruler``: 3 chains, 3 noise sentences, ~220 prompt tokens in its
  chat template) and a chain-of-thought question; greedy replies (48 new tokens) judged by
  ``judge_vt_reply``; on each correct item its own reply attributed (output span = the answer's digits,
  reasoning = the chain it wrote): FlashTrace hops 0/1/2 and token-wise IFR (one capture), gradient x
  input and random on all, IG (4 steps) on the first 8, RISE/RISE+AP (10 deletion groups) on the first 2;
  paired bootstrap CIs of the Recall@10% differences; single-threaded (~25 min);
- ``qwen_timing``: FlashTrace (hops 1) vs token-wise IFR on Qwen at M in {32, 128, 512} (a ~200-token
  prompt); token-wise at 512 measured, or extrapolated (linear in M x N through the smaller M) when the fit
  predicts more than ``qwen_tokenwise_max_s`` (the payload says which); glibc's malloc set to reuse freed
  memory first (``steady_allocator``: under its defaults token-wise IFR's large temporaries spent most of
  their time in page faults); run holding both CPU locks (~6 min).

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
from icmlkit.lib.core.stats import paired_bootstrap
from icmlkit.lib.attribute_tokens import api
from icmlkit.lib.attribute_tokens.config import EvalConfig, TaskConfig, ToyConfig, TraceConfig
from icmlkit.lib.attribute_tokens.tasks import make_task

bench = Bench("attribute-tokens")

ALL = ["flashtrace", "ifr-span", "ifr-tokenwise", "gradxinput", "ig", "random"]
TC = TraceConfig(ig_steps=8)
TC_TIMING_TOY = dataclasses.replace(TC, ig_steps=16)
SIZES = {"toy_n": 200, "toy_faith": 60, "toy_ablation": 10, "correct_n": 200, "correct_max": None,
         "forced_n": 200, "forced_faith": 24, "lengths": [8, 32, 128, 512], "prompts": [200, 1000, 2000],
         "toy_prompt": 200, "smol_prompt": 120, "repeats": 3,
         "qwen_screen": 40, "qwen_batch": 8, "qwen_max": 20, "qwen_ig_n": 4, "qwen_faith_n": 4, "qwen_groups": 10,
         "qwen_lengths": [32, 128, 512], "qwen_prompt": 200, "qwen_repeats": 2, "qwen_tokenwise_max_s": 1000}
QUICK = {"toy_n": 6, "toy_faith": 3, "toy_ablation": 2, "correct_n": 4, "correct_max": 1,
         "forced_n": 2, "forced_faith": 1, "lengths": [8, 32], "prompts": [40, 80],
         "toy_prompt": 40, "smol_prompt": 40, "repeats": 1,
         "qwen_screen": 2, "qwen_batch": 2, "qwen_max": 1, "qwen_ig_n": 1, "qwen_faith_n": 1, "qwen_groups": 2,
         "qwen_lengths": [8, 16, 32], "qwen_prompt": 40, "qwen_repeats": 1, "qwen_tokenwise_max_s": 60}
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
    allocator = steady_allocator()  # every timing part under the same allocator setting as qwen_timing
    bundle, _ = toy_model(ctx)
    return {**timing_parts(ctx, bundle, ["flashtrace", "ifr-tokenwise", "ig"], ["flashtrace", "ifr-tokenwise"],
                           sizes(ctx)["toy_prompt"], TC_TIMING_TOY), "allocator": allocator}


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
    allocator = steady_allocator()  # every timing part under the same allocator setting as qwen_timing
    smol = api.load("smollm2")
    return {**timing_parts(ctx, smol, ["flashtrace", "ifr-tokenwise", "ig"], ["flashtrace"], sizes(ctx)["smol_prompt"],
                           TC), "allocator": allocator}


# ----------------------------------------------------------------------------- Qwen: multi-hop VT, timing

QWEN = "qwen2.5-coder-1.5b-instruct"
QWEN_HOPS = (0, 1, 2)
QWEN_METHODS = [api.hop_method(h) for h in QWEN_HOPS] + ["ifr-tokenwise", "gradxinput", "ig", "random"]
QWEN_TC = TraceConfig(ig_steps=4)
QWEN_NEW_TOKENS = 48
QWEN_SEED = 11


def qwen_task(ctx) -> TaskConfig:
    """3 chains (1 queried + 2 distractors) of 3 assignments each, 3 noise sentences: about 220 prompt
    tokens with Qwen's chat template."""
    return TaskConfig(n=sizes(ctx)["qwen_screen"], chains=3, hops=3, fillers=3, style="ruler")


def qwen_replies(ctx, bundle, rows) -> list[str]:
    """Qwen's greedy replies (chat template, at most 48 new tokens), one cached item per batch of 8."""
    b = sizes(ctx)["qwen_batch"]
    out = []
    for k in range(0, len(rows), b):
        chunk = rows[k:k + b]
        key = f"qwen-vt-replies-seed{QWEN_SEED}-{chunk[0]['id']}-{chunk[-1]['id']}-new{QWEN_NEW_TOKENS}"
        out += ctx.cached(key, lambda chunk=chunk: api.generate_replies(bundle, [r["prompt"] for r in chunk],
                                                                         QWEN_NEW_TOKENS, chat=True, batch_size=b))
    return out


def bootstrap_diff(a, b, *, n_boot: int = 2000, seed: int = 0) -> dict:
    """Mean of the paired differences a - b with a 95 % percentile bootstrap interval over items."""
    ci = paired_bootstrap(a, b, n_boot=n_boot, seed=seed)
    if ci["n"] == 0:
        return {"mean": None, "ci95": None, "n": 0}
    return {"mean": round(ci["mean"], 4), "ci95": [round(ci["low"], 4), round(ci["high"], 4)], "n": ci["n"],
            "wins": ci["wins"], "losses": ci["losses"]}


def _qwen_items(ctx, bundle, rows, ig_n: int, faith_n: int, groups: int) -> tuple[list, list]:
    """Every method on the correct items, in three passes so that a killed run keeps the cheap ones:
    (1) on every item the IFR family (hops 0/1/2 and token-wise from one capture), random and
    gradient x input, one cached item each; (2) IG (4 steps) on the first ``ig_n``; (3) RISE /
    RISE+AP of every method on the first ``faith_n`` (``groups`` deletion groups), one cached item
    per (item, method). Returns (per-example rows, token counts per item)."""
    import numpy as np

    exs = [api.prepare(r, bundle.tokenizer, where="qwen-vt", chat=True, require_gold=True) for r in rows]
    ec = EvalConfig(methods=QWEN_METHODS, faithfulness=False)
    tags = [re.sub(r"[^\w.+-]", "_", f"qwen-vt-seed{QWEN_SEED}-{ex.id}") for ex in exs]

    def att_row(ex, att):
        r = api.score_attribution(bundle, att, ec, 0, faithfulness=False)
        return dict(r, seconds=round(att.seconds, 3), scores=[round(float(x), 7) for x in att.scores[:ex.n_prompt]])

    def base(ex):
        atts = list(api.attribute_ifr_family(bundle, ex, QWEN_TC, hops=QWEN_HOPS).values())
        atts += [api.attribute(bundle, ex, dataclasses.replace(QWEN_TC, method=m)) for m in ("random", "gradxinput")]
        return [att_row(ex, a) for a in atts]

    got = []
    for i, (ex, tag) in enumerate(zip(exs, tags)):
        got.append(ctx.cached(f"{tag}-base", lambda ex=ex: base(ex)))
        ctx.log(f"qwen item {i + 1}/{len(exs)} {ex.id}: " + ", ".join(f"{p['method']} {p['recall_at_10']:.3f}"
                                                                      for p in got[-1]))
    for i, (ex, tag) in enumerate(zip(exs[:ig_n], tags)):
        got[i] = got[i] + [ctx.cached(f"{tag}-ig{QWEN_TC.ig_steps}", lambda ex=ex: att_row(
            ex, api.attribute(bundle, ex, dataclasses.replace(QWEN_TC, method="ig"))))]
        ctx.log(f"qwen item {i + 1} IG: {got[i][-1]['recall_at_10']:.3f}")
    fc = EvalConfig(groups=groups)
    pad = api.pad_id(bundle)
    for i, (ex, tag) in enumerate(zip(exs[:faith_n], tags)):
        out = []
        for r in got[i]:
            def curve(r=r, ex=ex):
                att = api.Attribution(ex, r["method"], np.asarray(r["scores"] + [0.0] * (ex.n - ex.n_prompt)),
                                      [], [], 0.0)
                c = api.score_attribution(bundle, att, fc, pad, faithfulness=True)
                return {"rise": c["rise"], "rise_ap": c["rise_ap"]}
            out.append(dict(r, **ctx.cached(f"{tag}-rise-g{groups}-{r['method']}", curve)))
        got[i] = out
        ctx.log(f"qwen item {i + 1} RISE: " + ", ".join(f"{p['method']} {p['rise']}" for p in out))
    per = [{k: v for k, v in r.items() if k != "scores"} for g in got for r in g]
    shapes = [{"n_tokens": ex.n, "n_prompt": ex.n_prompt, "n_eligible": int(ex.eligible.sum()),
               "n_gold": int(ex.gold.sum())} for ex in exs]
    return per, shapes


@bench.part("qwen_vt_hops", doc="Qwen2.5-Coder-1.5B-Instruct on 3-hop RULER-style VT with chain-of-thought: "
            "accuracy; Recall@10% of FlashTrace hops 0/1/2, token-wise IFR, gradient x input, IG (4 steps), random "
            "on the items it answers correctly; RISE/RISE+AP on the first few", hours=0.6)
def qwen_vt_hops(ctx) -> dict:
    """Single-threaded (the shared 2-core machine). Screening: ``qwen_screen`` items, Qwen's greedy
    reply judged by ``judge_vt_reply``; its own reply is the attributed target (output span = the
    answer's digits, reasoning span = the written chain before it: the span FlashTrace's hops go
    through). Every correct item gets the IFR family, random and gradient x input; the first
    ``qwen_ig_n`` IG (4 steps); the first ``qwen_faith_n`` RISE/RISE+AP with ``qwen_groups`` deletion
    groups (the budget's cut; 20 groups cost 210 s per method and item here)."""
    from icmlkit.lib.core.runtime import limit_threads

    s = sizes(ctx)
    with limit_threads(1):
        qwen = api.load(QWEN)
        rows = make_task("vt", qwen_task(ctx), seed=QWEN_SEED)
        replies = qwen_replies(ctx, qwen, rows)
        from icmlkit.lib.attribute_tokens.tasks import judge_vt_reply

        judged = [judge_vt_reply(r, t) for r, t in zip(rows, replies)]
        keep = [j for j in judged if j is not None]
        acc = {"n": len(rows), "correct": len(keep), "accuracy": round(len(keep) / len(rows), 4),
               "chain_ok": sum(bool(j["chain_ok"]) for j in keep), "example_reply": replies[0][:120]}
        ctx.log(f"qwen VT accuracy: {acc}")
        keep = keep[:s["qwen_max"]] if s["qwen_max"] else keep
        per, shapes = _qwen_items(ctx, qwen, keep, s["qwen_ig_n"], s["qwen_faith_n"], s["qwen_groups"])
    secs = {m: [p["seconds"] for p in per if p["method"] == m] for m in QWEN_METHODS}
    agg = aggregate(per, secs, QWEN_METHODS)
    rec = {m: {p["id"]: p["recall_at_10"] for p in per if p["method"] == m} for m in QWEN_METHODS}
    ids = list(rec["ifr-span"])
    diffs = {f"{a}_minus_{b}": bootstrap_diff([rec[a][i] for i in ids], [rec[b][i] for i in ids])
             for a, b in (("flashtrace", "ifr-span"), ("flashtrace-hops2", "ifr-span"),
                          ("flashtrace", "ifr-tokenwise"), ("flashtrace-hops2", "ifr-tokenwise"),
                          ("flashtrace", "gradxinput"), ("flashtrace", "random"))}
    ig_ids = list(rec["ig"])
    diffs["flashtrace_minus_ig"] = bootstrap_diff([rec["flashtrace"][i] for i in ig_ids], [rec["ig"][i] for i in ig_ids])
    import numpy as np

    return {"model": QWEN, "task": dataclasses.asdict(qwen_task(ctx)), "task_seed": QWEN_SEED,
            "max_new_tokens": QWEN_NEW_TOKENS, "accuracy": acc, "aggregate": agg, "recall_differences": diffs,
            "ig_steps": QWEN_TC.ig_steps, "threads": 1,
            "counts": {"items": len(keep), "ig_items": min(len(keep), s["qwen_ig_n"]),
                       "faith_items": min(len(keep), s["qwen_faith_n"]), "deletion_groups": s["qwen_groups"]},
            "tokens": {k: round(float(np.mean([x[k] for x in shapes])), 1) if shapes else None
                       for k in ("n_tokens", "n_prompt", "n_eligible", "n_gold")},
            "per_example": per}


def steady_allocator() -> str:
    """Have glibc's malloc keep and reuse freed memory (``mallopt``: M_MMAP_MAX 0, so no block gets
    its own mmap; M_TRIM_THRESHOLD 2 GiB, so the heap is not given back), for the rest of the process.
    Under glibc's defaults every block over 32 MB is a fresh mmap whose pages the kernel faults in and
    zeroes on first touch: token-wise IFR's [H, 32, 128, d] temporaries (302 MB on Qwen) then spent most
    of their time in the kernel (measured, Qwen M = 512, 2 layers: 71 s wall, 40.6 M minor faults, 89 s
    of system time; 14.3 s and 0.3 M faults with this setting), and whether a later block reused freed
    memory depended on what ran before it in the process. Returns the setting, recorded in the payload."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(-4, 0) == 1 and libc.mallopt(-1, 2 ** 31 - 1) == 1   # M_MMAP_MAX, M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        ok = False
    return "glibc mallopt M_MMAP_MAX=0, M_TRIM_THRESHOLD=2^31-1" if ok else "default (mallopt unavailable)"


@bench.part("qwen_timing", doc="Qwen2.5-Coder-1.5B-Instruct: seconds of FlashTrace (hops 1) and token-wise IFR vs "
            "target length M up to 512 (token-wise at 512 measured, or extrapolated when it would pass the "
            "budget)", hours=0.25)
def qwen_timing(ctx) -> dict:
    """``api.timing_example`` at M in ``qwen_lengths`` (a ~200-token prompt, the target padded with
    filler, the whole target as output span). FlashTrace: a ``time_call`` per M (median of 2, one
    warm-up at the first M); token-wise IFR: one timed run per M (no repeat: at M = 512 it takes
    minutes). When the fit through token-wise's measured smaller M predicts more than
    ``qwen_tokenwise_max_s`` at the largest M, that point is not run and its figure is extrapolated
    (the payload says which): linear in M x N, the (sink, source) pairs token-wise IFR scores, with
    N = prompt + M (its intercept ~ one forward pass); the straight line in M alone is recorded as a
    lower bound. Threads: torch's default (2 on this machine; run it holding
    both CPU locks). Each time_call is a cached item (a killed run resumes). Both methods run under
    :func:`steady_allocator` (set first, for the whole process)."""
    import numpy as np
    import torch

    allocator = steady_allocator()
    s = sizes(ctx)
    qwen = api.load(QWEN)
    lengths, P = s["qwen_lengths"], s["qwen_prompt"]
    ft, tw, how, n_prompt, ns = [], [], [], None, []
    for i, M in enumerate(lengths):
        ex = api.timing_example(qwen, M, P)
        n_prompt = ex.n_prompt
        ns.append(ex.n)
        c_ft = dataclasses.replace(QWEN_TC, method="flashtrace", hops=1)
        c_tw = dataclasses.replace(QWEN_TC, method="ifr-tokenwise")
        ft.append(ctx.cached(f"qwen-time-flashtrace-M{M}-p{P}", lambda: time_call(
            lambda: api.attribute(qwen, ex, c_ft), repeats=s["qwen_repeats"], warmup=1 if i == 0 else 0)))
        if i == len(lengths) - 1 and len(tw) >= 2:
            # token-wise IFR scores every (sink, source) pair: its time is fitted as a + b * M * N
            # (N = prompt + M tokens) through the measured smaller M; a straight line in M alone
            # (N held fixed) is kept beside it as a lower bound
            done = lengths[:len(tw)]
            y = [r["median_s"] for r in tw]
            a, b = np.polyfit([m * n for m, n in zip(done, ns)], y, 1)[::-1]
            a_m, b_m = np.polyfit(done, y, 1)[::-1]
            pred = float(a + b * M * ex.n)
            if pred > s["qwen_tokenwise_max_s"]:
                tw.append({"median_s": pred, "min_s": pred, "max_s": pred, "repeats": 0, "warmup": 0,
                           "extrapolated_from": done, "model": "a + b * M * N, N = prompt + M tokens",
                           "fit_a_s": round(float(a), 3), "fit_b_s_per_pair": round(float(b), 7),
                           "linear_in_M_s": round(float(a_m + b_m * M), 3)})
                how.append("extrapolated")
                continue
        tw.append(ctx.cached(f"qwen-time-tokenwise-M{M}-p{P}", lambda: time_call(
            lambda: api.attribute(qwen, ex, c_tw), repeats=1, warmup=0)))
        how.append("measured")
        ctx.log(f"qwen timing M={M}: flashtrace {ft[-1]['median_s']:.2f} s, token-wise {tw[-1]['median_s']:.2f} s")
    ratios = [speed_ratio(b, a) for a, b in zip(ft, tw)]
    return {"model": QWEN, "target_lengths": list(lengths), "n_prompt_tokens": n_prompt, "n_tokens": ns,
            "threads": torch.get_num_threads(), "allocator": allocator,
            "methods": ["flashtrace", "ifr-tokenwise"],
            "seconds": {"flashtrace": [round(r["median_s"], 3) for r in ft],
                        "ifr-tokenwise": [round(r["median_s"], 3) for r in tw]},
            "tokenwise_how": how, "timings": {"flashtrace": ft, "ifr-tokenwise": tw},
            "speedup_vs_tokenwise": [round(r["ratio"], 3) for r in ratios],
            "speedup_vs_tokenwise_range": [[round(r["low"], 3), round(r["high"], 3)] for r in ratios]}


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
    if "qwen_vt_hops" in results:
        R["qwen_vt"] = results["qwen_vt_hops"]
    if "qwen_timing" in results:
        R["timing_qwen"] = results["qwen_timing"]
    return R


def qwen_targets(R: dict) -> dict:
    """The issue's three Qwen targets (met or missed)."""
    out = {}
    q = R.get("qwen_vt")
    if q:
        c = q["counts"]
        for name, key, thr in (("qwen_hops1_minus_hops0", "flashtrace_minus_ifr-span", 0.05),
                               ("qwen_flashtrace_minus_tokenwise", "flashtrace_minus_ifr-tokenwise", 0.0)):
            d = q["recall_differences"][key]
            if d["mean"] is None:
                continue
            out[name] = target(d["mean"], thr, d["mean"] >= thr, (
                f"Recall@10% on {QWEN}'s correct 3-hop VT items (own chain-of-thought reply attributed): "
                f"{key.replace('_minus_', ' - ')}, n={d['n']}, 95% bootstrap CI {d['ci95']}, "
                f"{d['wins']} wins / {d['losses']} losses; accuracy {q['accuracy']['correct']}/{q['accuracy']['n']}; "
                f"IG on {c['ig_items']}, RISE on {c['faith_items']} items"))
    t = R.get("timing_qwen")
    if t and 512 in t["target_lengths"]:
        i = t["target_lengths"].index(512)
        how = t["tokenwise_how"][i]
        sp = t["speedup_vs_tokenwise"][i]
        note = (f"token-wise IFR s / FlashTrace (hops 1) s at M=512 on {QWEN}, {t['threads']} threads, "
                f"prompt {t['n_prompt_tokens']} tokens; token-wise {t['seconds']['ifr-tokenwise'][i]} s ")
        if how == "extrapolated":
            tw = t["timings"]["ifr-tokenwise"][i]
            fs = t["seconds"]["flashtrace"][i]
            note += (f"EXTRAPOLATED (not run at 512): linear in M x N (N = prompt + M) through token-wise measured "
                     f"at M={tw['extrapolated_from']}; a straight line in M alone gives {tw['linear_in_M_s']} s "
                     f"({round(tw['linear_in_M_s'] / fs, 1)}x, a lower bound); FlashTrace {fs} s measured (median)")
        else:
            note += f"measured (one run), FlashTrace {t['seconds']['flashtrace'][i]} s measured (median)"
        out["qwen_speedup_vs_tokenwise_at_512"] = target(sp, 50.0, sp >= 50, note)
    elif t:
        out[f"qwen_speedup_vs_tokenwise_at_{t['target_lengths'][-1]}"] = target(
            t["speedup_vs_tokenwise"][-1], None, True, "reported only: M = 512 not timed in this run")
    return out


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
    targets.update(qwen_targets(results))
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
    q = R.get("qwen_vt")
    if q:
        a, c = q["accuracy"], q["counts"]
        lines += [f"## {q['model']} / 3-hop VT with chain-of-thought (own reply attributed)", "",
                  f"Greedy accuracy {a['correct']}/{a['n']} ({a['accuracy']}; chain written in full on "
                  f"{a['chain_ok']}); {c['items']} correct items attributed, IG ({q['ig_steps']} steps) on "
                  f"{c['ig_items']}, RISE/RISE+AP on {c['faith_items']} ({c['deletion_groups']} deletion groups); "
                  f"mean tokens {q['tokens']}; single-threaded.", "",
                  table([{"method": m, "n": r.get("n"), "Recall@10%": r.get("recall_at_10"),
                          "RISE (lower better)": r.get("rise"), "RISE+AP (lower better)": r.get("rise_ap"),
                          "curves": r.get("n_curves"), "thinking ratio": r.get("thinking_ratio"),
                          "s/example": r.get("seconds_per_example")} for m, r in q["aggregate"].items()], digits=4),
                  "Paired Recall@10% differences (95 % bootstrap CI over items):", "",
                  table([{"difference": k.replace("_minus_", " - "), **v} for k, v in q["recall_differences"].items()],
                        digits=4)]
    t = R.get("timing_qwen")
    if t:
        rows = [{"M": m, "flashtrace s": t["seconds"]["flashtrace"][i],
                 "ifr-tokenwise s": t["seconds"]["ifr-tokenwise"][i], "token-wise": t["tokenwise_how"][i],
                 "speedup": t["speedup_vs_tokenwise"][i],
                 "range": "{}-{}".format(*t["speedup_vs_tokenwise_range"][i])} for i, m in enumerate(t["target_lengths"])]
        lines += [f"## timing_qwen ({t['model']}, prompt {t['n_prompt_tokens']} tokens, {t['threads']} threads; "
                  "FlashTrace median of time_call repeats, token-wise one run)", "", table(rows, digits=4)]
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
