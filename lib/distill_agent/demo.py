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


# The real-teacher experiment (issue 58): Qwen2.5-Coder-1.5B-Instruct corrects the SmolLM2-135M
# student's earliest error vs imitation of its full trajectories at equal teacher (generated) tokens,
# sized to a CPU budget of about 20 minutes per seed on loaded cores [reconstructed sizes].
QWEN_SIZES = {"n_bc": 64, "n_mps": 24, "n_eval": 40, "n_indist": 12, "keys": (2, 2), "key_pool": 16,
              "bc_epochs": 3, "sft_epochs": 1, "lora": 8, "lr": 1e-3, "batch": 4, "max_steps": 6,
              "step_tokens": 32, "imitation_pool": 16, "rl_steps": 4, "rl_prompts": 2, "group": 4,
              "rl_lr": 5e-4, "teacher_tokens": 40, "teacher_batch": 16}


def teacher_pipeline(folder, seeds, sizes: dict, teacher: str = "qwen2.5-coder-1.5b-instruct",
                     student: str = "smollm2", device=None, log=None, stage=None, b_folder=None) -> dict:
    """SCoRe with a real teacher model against imitation of that teacher, one student per seed:

    - tasks: the synthetic toy's natural-language questions (``sizes['keys']`` keys), one task set
      (environment seed 0) for every seed; B is the shared cold start (BC init: LoRA SFT of the
      student on the EXACT teacher's trajectories of ``n_bc`` seed tasks, trained once, seed 0);
    - per seed s: MPS of B on ``n_mps`` tasks (the exact judge finds the earliest wrong step; the
      TEACHER MODEL writes ONE corrected step from the verified prefix; the student resumes; at most
      3 repairs); C = SCoRe-SFT from B on the correct trajectories of the first half; D = C +
      SCoRe-RL (GRPO from the verified prefixes of the second half, key-step reward, the reference
      form: unbiased group std, PPO mini-batches of one prompt, clip 0.2); A = imitation SFT from B on
      the teacher model's own correct full trajectories, taken in order until their generated tokens
      reach the MPS repairs' generated tokens (equal teacher tokens, both counted in the teacher's
      tokenizer; the trajectories are cached and shared by the seeds);
    - A, C and D are evaluated greedily on ``n_eval`` held-out questions (never trained on) and on
      ``n_indist`` training questions (half from C's SFT tasks, half from A's imitation tasks: the
      same items for every run).

    ``stage(name, fn)`` runs ``fn()`` once per name (the benchmark's ``ctx.cached``: a killed run
    resumes at the first stage not done); model folders live under ``folder``."""
    import shutil

    from icmlkit.lib.distill_agent import api
    from icmlkit.lib.distill_agent import loop
    from icmlkit.lib.distill_agent.backends import Counter, make_judge, make_student
    from icmlkit.lib.distill_agent.config import (AgentConfig, EnvConfig, EvalConfig, MPSConfig, RLConfig, SFTConfig,
                                                  ToRLConfig, ToSFTConfig)
    from icmlkit.lib.distill_agent.model import save_student
    from icmlkit.lib.distill_agent.teacher import load_teacher

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    say = log or (lambda *a: None)
    stage = stage or (lambda name, fn: fn())
    t0 = time.time()
    agent = _cfg(AgentConfig, max_steps=sizes["max_steps"], step_tokens=sizes["step_tokens"], batch=64)
    mcfg, ecfg = _cfg(MPSConfig), _cfg(EvalConfig)
    n_bc, n_mps, n_imit = sizes["n_bc"], sizes["n_mps"], sizes["imitation_pool"]
    total = n_bc + n_mps + n_imit
    pool = api.make_env(_cfg(EnvConfig, n_tasks=(total + sizes["n_eval"]) * 3, min_keys=sizes["keys"][0],
                             max_keys=sizes["keys"][1], key_pool=sizes["key_pool"], question="natural"), seed=0).items
    seen, uniq = set(), []
    for t in pool:
        if t["question"] not in seen:
            seen.add(t["question"])
            uniq.append(t)
    if len(uniq) < total + sizes["n_eval"]:
        raise UsageError(f"{len(uniq)} distinct questions; {total + sizes['n_eval']} needed (raise key_pool)")
    bc_t, mps_t, imit_t = uniq[:n_bc], uniq[n_bc:n_bc + n_mps], uniq[n_bc + n_mps:total]
    held = uniq[total:total + sizes["n_eval"]]
    half = sizes["n_indist"] // 2
    indist = mps_t[:min(half, n_mps // 2)] + imit_t[:sizes["n_indist"] - min(half, n_mps // 2)]
    sft_kw = dict(lr=sizes["lr"], batch=sizes["batch"], lora=sizes["lora"], max_len=384)
    counter = Counter()
    cache = folder / "teacher_cache.jsonl"
    tch = {}

    def get_teacher():
        if "t" not in tch:
            tch["t"] = load_teacher(teacher, counter, max_new=sizes["teacher_tokens"], batch=sizes["teacher_batch"],
                                    cache_path=cache, device=device)
        return tch["t"]

    def save(res, path):
        save_student(path, res.model, res.tokenizer, {"run": path.name})
        return res.summary

    # B: the shared cold start (``b_folder``: where it is kept, e.g. shared by runs of other sizes)
    B = Path(b_folder) if b_folder is not None else folder / "B_bc_init"

    def train_b():
        bc = api.bc_init(bc_t, "oracle", agent, mcfg, seed=0)
        data = api.to_sft(bc.items, _cfg(ToSFTConfig, split="all"), seed=0)
        res = api.sft([it["messages"] for it in data.items], _cfg(SFTConfig, init=student, epochs=sizes["bc_epochs"],
                                                                   **sft_kw), seed=0, device=device)
        return save(res, B)

    out = {"sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in sizes.items()}, "teacher": teacher,
           "student": student, "n_eval": len(held), "n_indist": len(indist), "seeds": list(seeds)}
    if not (B / "model.safetensors").is_file():  # a stage result without its folder: train it again
        out["B"] = train_b()
    out["B"] = stage("B", lambda: out.get("B") or train_b())
    say(f"B ready ({time.time() - t0:.0f}s)")

    # the teacher's own trajectories on the imitation pool (shared by every seed), and its accuracy
    def imitation():
        res = get_teacher().solve_many(imit_t, agent)
        from icmlkit.lib.distill_agent.backends import answers_match

        return [{"steps": r["steps"], "final": r["final"], "tokens": r["tokens"],
                 "correct": answers_match(r["final"], t["answer"])} for r, t in zip(res, imit_t)]

    imit = stage("teacher_imitation", imitation)
    out["teacher_solve"] = {"n": len(imit), "accuracy": round(sum(r["correct"] for r in imit) / len(imit), 4),
                            "tokens_per_trajectory": round(sum(r["tokens"] for r in imit) / len(imit), 2)}
    say(f"teacher trajectories {out['teacher_solve']} ({time.time() - t0:.0f}s)")

    out["per_seed"] = []
    for s in seeds:
        sf = folder / f"seed{s}"

        def run_mps(s=s):
            from icmlkit.lib.distill_agent.env import DSLExecutor, replay

            c2 = Counter()
            judge = make_judge("oracle", c2, mcfg, agent, s)
            st = make_student(str(B), c2, agent, s, temperature=mcfg.temperature, top_p=mcfg.top_p,
                              top_k=mcfg.top_k, device=device)
            tt = get_teacher()
            tt.counter, hits, asked = c2, tt.hits, []
            steps_many = tt.steps_many

            def logged(items):
                res = steps_many(items)
                asked.extend(zip(items, res))
                return res

            tt.steps_many = logged
            try:
                m = loop.mps(mps_t, st, tt, judge, mcfg, agent, seed=s, counter=c2)
            finally:
                tt.steps_many = steps_many
            valid = 0  # Qwen steps the exact replay accepts after their verified prefix
            for (task, prefix, _j), step in asked:
                obs = DSLExecutor(task["env"]).run(step["code"])[0] if step["code"] else "None"
                valid += int(replay(task["env"], list(prefix) + [{**step, "observation": obs}])[0] is None)
            return {"records": m.records, "summary": {**m.summary, "teacher_model_tokens": c2.model_tokens,
                                                      "teacher_cache_hits": tt.hits - hits,
                                                      "teacher_steps": len(asked), "teacher_valid_steps": valid}}

        m = stage(f"seed{s}-mps", run_mps)
        budget = m["summary"]["teacher_model_tokens"]
        say(f"seed {s} MPS {m['summary']} ({time.time() - t0:.0f}s)")
        conv_a, used, used_words = [], 0, 0
        from icmlkit.lib.distill_agent.agent import conversation
        from icmlkit.lib.distill_agent.backends import words

        for r, t in zip(imit, imit_t):
            if used >= budget:
                break
            if r["correct"]:
                used += r["tokens"]
                used_words += sum(words(x["thought"]) + words(x["code"]) for x in r["steps"])
                conv_a.append(conversation(t["question"], r["steps"]))
        cont = _cfg(SFTConfig, init=str(B), epochs=sizes["sft_epochs"], **sft_kw)
        C, D, A_ = sf / "C_score_sft", sf / "D_score_rl", sf / "A_imitation"
        c_data = api.to_sft(m["records"], _cfg(ToSFTConfig, split="first"), seed=s)

        def train_c(s=s):
            if not c_data.items:
                shutil.copytree(B, C, dirs_exist_ok=True)
                return {"steps": 0, "note": "no correct MPS trajectory in the SFT half: C is B"}
            return save(api.sft([it["messages"] for it in c_data.items], cont, seed=s, device=device), C)

        def train_a(s=s):
            if not conv_a:
                shutil.copytree(B, A_, dirs_exist_ok=True)
                return {"steps": 0, "note": "no correct teacher trajectory within the budget: A is B"}
            return save(api.sft(conv_a, cont, seed=s, device=device), A_)

        def train_d(s=s):
            items = api.to_rl(m["records"], _cfg(ToRLConfig), seed=s).items
            if not items:
                items = [{"prompt": [{"role": "user", "content": t["question"]}], "chosen": "", "rejected": "",
                          "gt_answer": t["answer"], "env": t["env"]} for t in mps_t[n_mps // 2:]]
            rc = _cfg(RLConfig, reward="score", group=sizes["group"], steps=sizes["rl_steps"],
                      prompts=sizes["rl_prompts"], lr=sizes["rl_lr"], lora=sizes["lora"], adv_std="unbiased",
                      ppo_mini_batch=1)
            res = api.rl(items, str(C), rc, agent, seed=s, device=device)
            return {**save(res, D), "rl_items": len(items), "curve": res.curve}

        per = {"seed": s, "mps": m["summary"], "sft_items_C": len(c_data.items), "imitation_items_A": len(conv_a),
               "teacher_model_tokens": {"C_mps": budget, "A_imitation": used},
               "teacher_words": {"C_mps_teacher_steps": None, "A_imitation": used_words}, "train": {}, "eval": {}}
        for name, path, fn in (("C", C, train_c), ("A", A_, train_a), ("D", D, train_d)):
            key = f"seed{s}-train-{name}"
            if not (path / "model.safetensors").is_file():
                per["train"][name] = fn()
            per["train"][name] = stage(key, lambda v=per["train"].get(name), fn=fn: v or fn())
            say(f"seed {s} {name} trained ({time.time() - t0:.0f}s)")
        for name, path in (("D", D), ("A", A_), ("C", C)):
            if name == "C" and not sizes.get("eval_C", False):
                continue
            for split, tasks in (("held_out", held), ("in_dist", indist)):
                def ev(path=path, tasks=tasks, s=s):
                    r = api.evaluate(str(path), tasks, ecfg, agent, seed=s, device=device)
                    return {**r.summary, "correct": [bool(x["correct"]) for x in r.items]}

                per["eval"].setdefault(name, {})[split] = stage(f"seed{s}-eval-{name}-{split}", ev)
            say(f"seed {s} {name}: held-out {per['eval'][name]['held_out']['accuracy']} in-dist "
                f"{per['eval'][name]['in_dist']['accuracy']} ({time.time() - t0:.0f}s)")
        per["teacher_words"]["C_mps_teacher_steps"] = sum(
            words(rep["teacher_guided_step"]["thought"]) + words(rep["teacher_guided_step"]["code"])
            for r in m["records"] for rep in r["repair_steps"])
        out["per_seed"].append(per)
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


__all__ = ["pipeline", "student_pipeline", "teacher_pipeline", "run_demo", "json"]
