"""The controlled experiment on the synthetic toy (used by ``demo`` at a small size and by the benchmark):

A imitation SFT on full teacher trajectories (Agent Distillation / FireAct style), from B, with as
many teacher tokens as C's MPS used; B BC init only; C SCoRe-SFT (B + MPS data of the first half);
D C + SCoRe-RL (GRPO from the verified prefixes of the second half, key-step reward); E outcome-only
GRPO from the question (B + the same rollout budget, 1/0 reward). Every run goes through the same
library calls as the CLI. [reconstructed] sizes and learning rates.
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from icmlkit.lib.core.io import write_json, write_rows
from icmlkit.lib.core.errors import UsageError

# The demo's sizes keep it within its 60-s CPU budget: B (BC init, 30 epochs on 150 seed tasks) is the
# shipped data/distill_agent/demo_bc_init (seed 0; `distill-agent demo --train-bc` trains it again), MPS on
# 50 tasks, 3 RL steps, 40 held-out tasks, and run_demo leaves out E (outcome-only GRPO: the benchmark's).
# BENCH_SIZES keeps the benchmark's sizes as they were.
DEMO_SIZES = {"n_seed": 150, "n_mps": 50, "n_eval": 40, "train_keys": (2, 3), "eval_keys": (4, 4),
              "bc_epochs": 30, "sft_epochs": 6, "rl_steps": 3, "rl_prompts": 8, "group": 8, "layers": 2,
              "max_steps": 12, "imitation_pool": 600, "rl_lr": 3e-4, "key_pool": 8}
BENCH_SIZES = {**DEMO_SIZES, "n_seed": 300, "n_mps": 160, "n_eval": 200, "bc_epochs": 40, "sft_epochs": 8,
               "rl_steps": 12}
DEMO_BC = Path(__file__).resolve().parents[2] / "data" / "distill_agent" / "demo_bc_init"
DEMO_BC_SEED = 0  # the seed the shipped B student was trained with


def _cfg(cls, **kw):
    from icmlkit.lib.core.config import build_config

    names = {f.name for f in dataclasses.fields(cls)}
    return build_config(cls, {k: v for k, v in kw.items() if k in names})


def _imitation_conversations(rows, budget: int) -> tuple[list, int]:
    """Baseline A's SFT data: the teacher's trajectories in order until their thought + code words reach
    ``budget`` (C's MPS teacher tokens), so A and C get equal teacher tokens; returns (conversations,
    teacher words used)."""
    from icmlkit.lib.distill_agent.agent import conversation
    from icmlkit.lib.distill_agent.backends import words
    from icmlkit.lib.distill_agent.convert import row_steps

    conv, used = [], 0
    for row in rows:
        if used >= budget:
            break
        st = row_steps(row)
        used += sum(words(s["thought"]) + words(s["code"]) for s in st)
        conv.append(conversation(row["original_task_info"]["question"], st))
    return conv, used


def pipeline(folder, seed: int, sizes: dict, device=None, log=None, bc_student=None) -> dict:
    """Runs A-E (A-D without ``sizes["outcome_grpo"]``) for one seed; returns {run: eval summary} plus
    the MPS summary and token counts. ``bc_student``: a B student trained before with these sizes
    and seed (the demo's shipped one), copied instead of training B."""
    from icmlkit.lib.distill_agent import api
    from icmlkit.lib.distill_agent.config import (AgentConfig, EnvConfig, EvalConfig, MPSConfig, RLConfig, SFTConfig,
                                            ToRLConfig, ToSFTConfig)
    from icmlkit.lib.distill_agent.model import save_student

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    lo, hi = sizes["train_keys"]
    agent = _cfg(AgentConfig, max_steps=sizes["max_steps"], step_tokens=16, batch=256)
    mcfg = _cfg(MPSConfig)
    say = log or (lambda *a: None)

    def env(n, seed_, keys):
        return api.make_env(_cfg(EnvConfig, n_tasks=n, min_keys=keys[0], max_keys=keys[1],
                                 key_pool=sizes.get("key_pool", 16)), seed=seed_).items

    def save(res, name):
        p = folder / name
        save_student(p, res.model, res.tokenizer, {"run": name})
        return str(p)

    # the same private-key set for every split: make_tasks draws it from the seed's "env/private" stream,
    # so every split uses the seed itself and the task stream differs by taking disjoint slices
    pool = env(sizes["n_seed"] + sizes["n_mps"] + sizes["imitation_pool"], seed, (lo, hi))
    seeds_t = pool[:sizes["n_seed"]]
    mps_t = pool[sizes["n_seed"]:sizes["n_seed"] + sizes["n_mps"]]
    imit_t = pool[sizes["n_seed"] + sizes["n_mps"]:]
    held = env(sizes["n_eval"] * 4, seed, sizes["eval_keys"])
    seen = {t["question"] for t in pool}
    held = [t for t in held if t["question"] not in seen][:sizes["n_eval"]]

    # B: BC init
    bc = api.bc_init(seeds_t, "oracle", agent, mcfg, seed=seed)
    bc_sft = api.to_sft(bc.items, _cfg(ToSFTConfig, split="all"), seed=seed)
    sft_tiny = _cfg(SFTConfig, init="tiny", epochs=sizes["bc_epochs"], layers=sizes["layers"], lr=3e-3, batch=32)
    if bc_student is not None:
        import shutil

        B = str(folder / "B_bc_init")
        shutil.copytree(bc_student, B, dirs_exist_ok=True)
        say(f"B: the shipped {Path(bc_student).name}")
    else:
        B = save(api.sft([it["messages"] for it in bc_sft.items], sft_tiny, seed=seed, device=device), "B_bc_init")
        say(f"B trained ({time.time() - t0:.0f}s)")

    # MPS with the B student
    m = api.mps(mps_t, B, "oracle", "oracle", mcfg, agent, seed=seed, device=device)
    write_rows(folder / "mps.jsonl", m.items, fmt=".jsonl")
    say(f"MPS {m.summary} ({time.time() - t0:.0f}s)")

    # C: SCoRe-SFT from B
    c_data = api.to_sft(m.items, _cfg(ToSFTConfig, split="first"), seed=seed)
    sft_cont = _cfg(SFTConfig, init=B, epochs=sizes["sft_epochs"], lr=1e-3)
    if c_data.items:
        C = save(api.sft([it["messages"] for it in c_data.items], sft_cont, seed=seed, device=device), "C_score_sft")
    else:  # no correct MPS trajectory in the SFT half: C is B (reported as sft_items_C = 0)
        C = B

    # A: imitation SFT from B with the same teacher tokens as C's MPS
    budget = m.summary["teacher_tokens"]
    imit = api.bc_init(imit_t, "oracle", agent, mcfg, seed=seed)
    conv_a, used = _imitation_conversations(imit.items, budget)
    A = save(api.sft(conv_a, sft_cont, seed=seed, device=device), "A_imitation")
    say(f"A, C trained ({time.time() - t0:.0f}s)")

    # D: SCoRe-RL from C; E: outcome-only GRPO from B (same rollout budget)
    rl_items = api.to_rl(m.items, _cfg(ToRLConfig), seed=seed).items
    rcfg = dict(group=sizes["group"], steps=sizes["rl_steps"], prompts=sizes["rl_prompts"], lr=sizes["rl_lr"])
    if not rl_items:  # no repaired correct trajectory: RL from the plain questions of the RL half
        rl_items = [{"prompt": [{"role": "user", "content": t["question"]}], "chosen": "", "rejected": "",
                     "gt_answer": t["answer"], "env": t["env"]} for t in mps_t[len(mps_t) // 2:]]
    D_res = api.rl(rl_items, C, _cfg(RLConfig, reward="score", **rcfg), agent, seed=seed, device=device)
    D = save(D_res, "D_score_rl")
    plain = [{"prompt": [{"role": "user", "content": t["question"]}], "chosen": "", "rejected": "",
              "chosen_observation": "", "rejected_observation": "", "correct_step": "", "gt_answer": t["answer"],
              "env": t["env"]} for t in mps_t[len(mps_t) // 2:]]
    E_res = E = None
    if sizes.get("outcome_grpo", True):
        E_res = api.rl(plain, B, _cfg(RLConfig, reward="outcome", **rcfg), agent, seed=seed, device=device)
        E = save(E_res, "E_outcome_grpo")
    say(f"D{', E' if E else ''} trained ({time.time() - t0:.0f}s)")

    ecfg = _cfg(EvalConfig)
    out = {"mps": m.summary, "rl_items": len(rl_items), "sft_items_C": len(c_data.items), "imitation_items_A": len(conv_a),
           "teacher_tokens": {"C_mps": budget, "A_imitation": used, "B_bc": bc.summary["teacher_tokens_kept"]},
           "teacher_tokens_per_trajectory": {
               "mps": round(budget / max(1, len(mps_t)), 3),
               "imitation": round(used / max(1, len(conv_a)), 3)},
           "rl": {"D": D_res.summary, "D_curve": D_res.curve,
                  **({"E": E_res.summary, "E_curve": E_res.curve} if E_res else {})},
           "eval": {}, "n_eval": len(held)}
    for name, path in (("A", A), ("B", B), ("C", C), ("D", D), ("E", E)):
        if path is None:
            continue
        ev = api.evaluate(path, held, ecfg, agent, seed=seed, device=device)
        out["eval"][name] = ev.summary
    out["seconds"] = round(time.time() - t0, 1)
    return out


SMOLLM2_SIZES = {"n_seed": 64, "n_mps": 24, "n_eval": 40, "keys": (2, 2), "key_pool": 16, "bc_epochs": 3,
                 "sft_epochs": 1, "lora": 8, "lr": 1e-3, "batch": 4, "max_steps": 6, "step_tokens": 40,
                 "imitation_pool": 96}


def student_pipeline(folder, seed: int, sizes: dict, student: str = "smollm2", device=None, log=None) -> dict:
    """The same pipeline with a real Hugging Face student (SmolLM2-135M-Instruct by default) on
    synthetic-toy tasks written as natural-language questions, the exact programmatic teacher and judge:
    B BC init (SFT of the student on teacher trajectories), MPS with B, C SCoRe-SFT from B, A imitation
    SFT from B with C's teacher tokens; held-out accuracy of the untouched student, B (before SCoRe), C
    (after) and A. LoRA (peft) when ``sizes['lora']`` > 0, else full fine-tuning. SCoRe-RL is not run at
    this size (the rollouts of a 135M model dominate the CPU time) [reconstructed sizes]."""
    from icmlkit.lib.distill_agent import api
    from icmlkit.lib.distill_agent.config import AgentConfig, EnvConfig, EvalConfig, MPSConfig, SFTConfig, ToSFTConfig
    from icmlkit.lib.distill_agent.model import save_student

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    say = log or (lambda *a: None)
    agent = _cfg(AgentConfig, max_steps=sizes["max_steps"], step_tokens=sizes["step_tokens"], batch=64)
    mcfg = _cfg(MPSConfig)
    ecfg = _cfg(EvalConfig)
    total = sizes["n_seed"] + sizes["n_mps"] + sizes["imitation_pool"]
    pool = api.make_env(_cfg(EnvConfig, n_tasks=total + sizes["n_eval"] * 3, min_keys=sizes["keys"][0],
                             max_keys=sizes["keys"][1], key_pool=sizes["key_pool"], question="natural"),
                        seed=seed).items
    seen, uniq = set(), []
    for t in pool:  # held-out questions never seen in training
        if t["question"] not in seen:
            seen.add(t["question"])
            uniq.append(t)
    seeds_t, mps_t = uniq[:sizes["n_seed"]], uniq[sizes["n_seed"]:sizes["n_seed"] + sizes["n_mps"]]
    imit_t = uniq[sizes["n_seed"] + sizes["n_mps"]:total]
    held = uniq[total:total + sizes["n_eval"]]
    if len(held) < sizes["n_eval"]:  # the key pool admits too few distinct questions: never evaluate on fewer
        raise UsageError(f"the synthetic toy with {sizes['keys']} keys from a pool of {sizes['key_pool']} gave {len(uniq)} "
                         f"distinct questions; {total + sizes['n_eval']} are needed (raise key_pool)")
    sft_kw = dict(epochs=sizes["bc_epochs"], lr=sizes["lr"], batch=sizes["batch"], lora=sizes["lora"], max_len=384)

    def save(res, name):
        p = folder / name
        save_student(p, res.model, res.tokenizer, {"run": name})
        return str(p)

    out = {"sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in sizes.items()}, "student": student,
           "eval": {}, "n_eval": len(held), "train": {}}
    ev = api.evaluate(student, held, ecfg, agent, seed=seed, device=device)
    out["eval"]["base"] = ev.summary
    say(f"base student evaluated ({time.time() - t0:.0f}s): {ev.summary['accuracy']}")
    bc = api.bc_init(seeds_t, "oracle", agent, mcfg, seed=seed)
    bc_sft = api.to_sft(bc.items, _cfg(ToSFTConfig, split="all"), seed=seed)
    res = api.sft([it["messages"] for it in bc_sft.items], _cfg(SFTConfig, init=student, **sft_kw), seed=seed,
                  device=device)
    out["train"]["B"] = res.summary
    B = save(res, "B_bc_init")
    say(f"B trained ({time.time() - t0:.0f}s)")
    m = api.mps(mps_t, B, "oracle", "oracle", mcfg, agent, seed=seed, device=device)
    out["mps"] = m.summary
    say(f"MPS {m.summary} ({time.time() - t0:.0f}s)")
    cont = dict(sft_kw, epochs=sizes["sft_epochs"])
    c_data = api.to_sft(m.items, _cfg(ToSFTConfig, split="first"), seed=seed)
    if c_data.items:
        res = api.sft([it["messages"] for it in c_data.items], _cfg(SFTConfig, init=B, **cont), seed=seed,
                      device=device)
        out["train"]["C"] = res.summary
        C = save(res, "C_score_sft")
    else:
        C = B
    budget = m.summary["teacher_tokens"]
    imit = api.bc_init(imit_t, "oracle", agent, mcfg, seed=seed)
    conv_a, used = _imitation_conversations(imit.items, budget)
    if conv_a:
        res = api.sft(conv_a, _cfg(SFTConfig, init=B, **cont), seed=seed, device=device)
        out["train"]["A"] = res.summary
        A = save(res, "A_imitation")
    else:
        A = B
    say(f"A, C trained ({time.time() - t0:.0f}s)")
    out["teacher_tokens"] = {"C_mps": budget, "A_imitation": used}
    out["sft_items_C"], out["imitation_items_A"] = len(c_data.items), len(conv_a)
    for name, path in (("B", B), ("C", C), ("A", A)):
        out["eval"][name] = api.evaluate(path, held, ecfg, agent, seed=seed, device=device).summary
        say(f"{name} evaluated ({time.time() - t0:.0f}s): {out['eval'][name]['accuracy']}")
    out["seconds"] = round(time.time() - t0, 1)
    return out


def run_demo(folder, seed: int = 0, device=None, train_bc: bool = False) -> dict:
    """``distill-agent demo``: the A-D experiment at a small size (one seed), B the shipped student
    for seed 0 (``train_bc``: trained here, as it was made)."""
    shipped = not train_bc and seed == DEMO_BC_SEED and (DEMO_BC / "model.safetensors").is_file()
    res = pipeline(Path(folder) / "runs", seed, {**DEMO_SIZES, "outcome_grpo": False}, device=device,
                   bc_student=DEMO_BC if shipped else None)
    res["bc_student"] = "shipped (data/distill_agent/demo_bc_init)" if shipped else "trained here"
    acc = {k: v["accuracy"] for k, v in res["eval"].items()}
    hall = {k: v["hallucination_rate"] for k, v in res["eval"].items()}
    write_json(Path(folder) / "summary.json", res)
    head = (f"held-out accuracy A (imitation) {acc['A']:.2f}, B (BC init) {acc['B']:.2f}, C (SCoRe-SFT) "
            f"{acc['C']:.2f}, D (SCoRe-RL) {acc['D']:.2f}; hallucination rate A {hall['A']:.2f} B {hall['B']:.2f} "
            f"C {hall['C']:.2f} D {hall['D']:.2f} on {res['n_eval']} longer tasks")
    return {"headline": head, "accuracy": acc, "hallucination_rate": hall, "mps": res["mps"],
            "bc_student": res["bc_student"]}


__all__ = ["pipeline", "run_demo", "json"]
