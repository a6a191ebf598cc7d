"""Agent episodes, Mentored Problem Solving (``mps``), teacher trajectories (``bc-init``) and ``eval``.

An episode: the policy writes one assistant turn at a time; a plan (step 1) observes ``None``; a
``<thought>/<code>`` step runs in the task's executor (the DSL of the synthetic toy, or the Python sandbox);
the observation returns as a user turn; ``final_answer_print`` (DSL: ``ANSWER``) ends it; at most
``max_steps`` steps. Many episodes advance together (one batched generation per turn).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from icmlkit.lib.distill_agent import agent as A
from icmlkit.lib.distill_agent.backends import answers_match, words


def make_executor(task: dict, agent_cfg, search: dict | None = None):
    if task.get("env") is not None:
        from icmlkit.lib.distill_agent.env import DSLExecutor

        return DSLExecutor(task["env"])
    from icmlkit.lib.distill_agent.sandbox import PythonSandbox

    return PythonSandbox(agent_cfg.step_timeout, agent_cfg.memory_mb, search)


def replay_prefix(executor, steps: list[dict]) -> None:
    """Re-run a prefix's code cells so the executor's state matches it (outputs discarded)."""
    from icmlkit.lib.distill_agent.sandbox import PythonSandbox

    if isinstance(executor, PythonSandbox):
        for s in steps:
            if s.get("code"):
                executor.run(s["code"], allow_final=False)


@dataclass
class Run:
    task: dict
    steps: list = field(default_factory=list)
    final: str | None = None
    done: bool = False
    ep: object = None
    ex: object = None
    gen_steps: int = 0
    first_gen: int = 0  # index of the first step the policy generated in the current segment


def start(policy, run: Run, prefix: list[dict], rng=None, agent_cfg=None, search=None,
          messages: list[dict] | None = None) -> None:
    """(Re)start ``run`` after ``prefix`` (the policy resumes there)."""
    if run.ex is not None:
        run.ex.close()
    run.ex = make_executor(run.task, agent_cfg, search)
    replay_prefix(run.ex, prefix)
    run.steps = [dict(s) for s in prefix]
    run.final, run.done, run.gen_steps, run.first_gen = None, False, 0, len(prefix)
    run.ep = policy.begin(messages if messages is not None else A.conversation(run.task["question"], prefix), rng)


def execute(run: Run, text: str, allow_final: bool = True) -> dict:
    """Parse one assistant turn, run it, append it to the run; returns the step."""
    s = A.parse_step(text, first=not run.steps)
    final = None
    if s["kind"] == "plan":
        obs = "None"
    elif s["kind"] == "step":
        obs, final = run.ex.run(s["code"], allow_final=allow_final) if s["code"] else ("Error: empty code", None)
    else:
        obs = "Error: no <thought>...</thought><code>...</code> step found"
    step = {"thought": s["thought"], "code": s["code"], "observation": obs, "is_finished": final is not None}
    run.steps.append(step)
    if final is not None:
        run.final, run.done = final, True
    return step


def rollout(policy, runs: list[Run], max_steps: int, max_turns: int | None = None) -> None:
    """Advance every unfinished run until it answers or hits ``max_steps`` (or ``max_turns`` new turns)."""
    active = [r for r in runs if not r.done]
    while active:
        texts = policy.generate([r.ep for r in active])
        for r, text in zip(active, texts):
            step = execute(r, text)
            r.gen_steps += 1
            if r.done:
                continue
            if len(r.steps) >= max_steps or (max_turns is not None and r.gen_steps >= max_turns):
                r.done = True
            else:
                policy.observe(r.ep, A.render_observation(step["observation"]))
        active = [r for r in active if not r.done]


def close(runs):
    for r in runs:
        if r.ex is not None:
            r.ex.close()
            r.ex = None


def _rng(seed, name):
    from icmlkit.lib.core.runtime import generator

    return generator(seed, name)


# --------------------------------------------------------------------------- MPS


@dataclass
class MPSResult:
    records: list
    summary: dict


def mps(tasks: list[dict], student, teacher, judge, cfg, agent_cfg, *, seed: int, counter, search=None) -> MPSResult:
    """Mentored Problem Solving, per task:

    1. the student rolls out (sampling T, top-p, top-k);
    2. the judge sees question, gold answer, the student's answer and the numbered steps and returns
       validated JSON {is_correct, error_analysis, correction_start_step e (1-indexed, step 1 = plan),
       correction_suggestion};
    3. wrong: keep steps < e, the teacher writes ONE step for step e (a plan rewrite when e = 1; only
       the first step of a longer answer is kept), it is executed and the STUDENT resumes after it
       (unless that one step called ``final_answer_print``);
    4. re-judge; at most ``cfg.max_repairs`` repairs; e = -1 and wrong: a hard sample, stop.
    """
    runs = [Run(t) for t in tasks]
    repairs: list[list] = [[] for _ in tasks]
    judged: list = [None] * len(tasks)
    hard = [False] * len(tasks)
    try:
        for i, r in enumerate(runs):
            start(student, r, [], _rng(seed, f"mps/{i}/0"), agent_cfg, search)
        rollout(student, runs, agent_cfg.max_steps)
        open_ = list(range(len(runs)))
        for rnd in range(cfg.max_repairs + 1):
            js = judge.judge_many([(runs[i].task, runs[i].steps, runs[i].final) for i in open_])
            need = []
            for i, j in zip(open_, js):
                judged[i] = j
                if j["is_correct"]:
                    continue
                if j["correction_start_step"] == -1:
                    hard[i] = True
                    continue
                if rnd < cfg.max_repairs:
                    need.append(i)
            if not need:
                break
            items = []
            for i in need:
                e = judged[i]["correction_start_step"]
                items.append((runs[i].task, runs[i].steps[:e - 1], judged[i]))
            tsteps = teacher.steps_many(items)
            for i, (task, prefix, j), ts in zip(need, items, tsteps):
                r = runs[i]
                e = len(prefix) + 1
                mistake = [dict(s) for s in r.steps[e - 1:]]
                start(student, r, prefix, _rng(seed, f"mps/{i}/{rnd + 1}"), agent_cfg, search)
                text = A.render_plan(ts["thought"]) if e == 1 else A.render_step(ts["thought"], ts["code"])
                step = execute(r, text)
                sug = f"Error Analysis: {j.get('error_analysis') or ''}\nCorrection Suggestion: " \
                      f"{j.get('correction_suggestion') or ''}\nCorrection Start Step: {e}"
                repairs[i].append({
                    "mistake_step_index": e - 1, "teacher_guided_step": dict(step), "student_mistake": mistake,
                    "correction_suggestion": sug,
                    "context_before_intervention": A.numbered_steps(prefix) if prefix else "None",
                    "is_valid": True})
                if len(r.steps) >= agent_cfg.max_steps:
                    r.done = True
                if not r.done:
                    r.ep = student.begin(A.conversation(task["question"], r.steps), _rng(seed, f"mps/{i}/{rnd + 1}"))
                    r.first_gen = len(r.steps)
            rollout(student, [runs[i] for i in need], agent_cfg.max_steps)
            open_ = need
    finally:
        close(runs)
    records = []
    for i, r in enumerate(runs):
        info = {"id": r.task["id"], "question": r.task["question"], "true_answer": r.task["answer"]}
        if r.task.get("env") is not None:
            info["env"] = r.task["env"]
        rec = {"timestamp": None, "steps": r.steps, "original_task_info": info,
               "evaluation_result": {k: v for k, v in judged[i].items() if k != "judge_failed"},
               "repair_steps": repairs[i]}
        if hard[i]:
            rec["is_hard_sample"] = True
        records.append(rec)
    summary = {"n_tasks": len(tasks), "n_repaired": sum(1 for x in repairs if x),
               "n_repairs": sum(len(x) for x in repairs),
               "n_correct": sum(1 for j in judged if j["is_correct"]), "n_hard": sum(hard),
               "teacher_tokens": counter.teacher_tokens, "llm_calls": counter.llm_calls,
               "judge_failures": counter.judge_failures}
    if counter.model_tokens:
        summary["teacher_model_tokens"] = counter.model_tokens
    return MPSResult(records, summary)


# --------------------------------------------------------------------------- BC init


def bc_init(tasks: list[dict], teacher_spec: str, teacher, agent_cfg, *, seed: int, counter, policy=None,
            search=None) -> MPSResult:
    """Phase 1 data: the teacher solves the seed tasks end to end (the exact teacher of the synthetic toy with its
    private recall, or an endpoint teacher as the agent); only correct trajectories are kept."""
    from icmlkit.lib.distill_agent.env import DSLExecutor

    if teacher_spec == "oracle":
        all_steps = teacher.solve_many(tasks)
        # run them through the environment so observations are the real ones
        for t, steps in zip(tasks, all_steps):
            ex = DSLExecutor(t["env"])
            for s in steps[1:]:
                s["observation"], fin = ex.run(s["code"])
                s["is_finished"] = fin is not None
        finals = [s[-1]["observation"] if s[-1]["is_finished"] else None for s in all_steps]
        model_toks = None
    elif policy is None:  # a local teacher model (teacher.LocalTeacher): whole greedy trajectories
        sol = teacher.solve_many(tasks, agent_cfg, search)
        all_steps, finals, model_toks = [x["steps"] for x in sol], [x["final"] for x in sol], [x["tokens"] for x in sol]
    else:
        model_toks = None
        runs = [Run(t) for t in tasks]
        try:
            for i, r in enumerate(runs):
                start(policy, r, [], _rng(seed, f"bc/{i}"), agent_cfg, search)
            rollout(policy, runs, agent_cfg.max_steps)
        finally:
            close(runs)
        all_steps = [r.steps for r in runs]
        finals = [r.final for r in runs]
    rows, toks, mtoks = [], 0, 0
    for i, (t, steps, fin) in enumerate(zip(tasks, all_steps, finals)):
        if not answers_match(fin, t["answer"]):
            continue
        toks += sum(words(s["thought"]) + words(s["code"]) for s in steps)
        mtoks += model_toks[i] if model_toks else 0
        info = {"id": t["id"], "question": t["question"], "true_answer": t["answer"]}
        if t.get("env") is not None:
            info["env"] = t["env"]
        plan = steps[0] if steps and not steps[0]["code"] else None
        rows.append({"timestamp": None, "steps": steps[1:] if plan else steps,
                     "first_thought": plan["thought"] if plan else "", "original_task_info": info,
                     "evaluation_result": {"is_correct": True, "error_analysis": None}})
        if model_toks:
            rows[-1]["teacher_model_tokens"] = model_toks[i]
    summary = {"n_tasks": len(tasks), "n_kept": len(rows), "teacher_tokens": counter.teacher_tokens,
               "teacher_tokens_kept": toks, "llm_calls": counter.llm_calls}
    if model_toks:
        summary.update(teacher_model_tokens=sum(model_toks), teacher_model_tokens_kept=mtoks)
    return MPSResult(rows, summary)


# --------------------------------------------------------------------------- eval


def wilson(k: int, n: int, z: float = 1.96) -> list:
    if n == 0:
        return [0.0, 0.0]
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [round(max(0.0, c - h), 6), round(min(1.0, c + h), 6)]


def evaluate(tasks: list[dict], policy, agent_cfg, *, seed: int, search=None) -> MPSResult:
    """Pass@1 of the policy on ``tasks``: exact match after normalisation (synthetic toy: the integer), the
    hallucinated-value rate (synthetic toy only: episodes using a CALC/ANSWER operand no observation showed)."""
    from icmlkit.lib.distill_agent.env import hallucinated

    runs = [Run(t) for t in tasks]
    try:
        for i, r in enumerate(runs):
            start(policy, r, [], _rng(seed, f"eval/{t_id(r.task, i)}"), agent_cfg, search)
        rollout(policy, runs, agent_cfg.max_steps)
    finally:
        close(runs)
    rows, k, hall, n_env = [], 0, 0, 0
    for r in runs:
        ok = answers_match(r.final, r.task["answer"])
        k += int(ok)
        h = None
        if r.task.get("env") is not None:
            n_env += 1
            h = hallucinated(r.task["env"], r.steps)
            hall += int(h > 0)
        rows.append({"id": r.task["id"], "correct": ok, "answer": r.final, "gold": str(r.task["answer"]),
                     "n_steps": len(r.steps), "hallucinated_values": h})
    n = len(runs)
    summary = {"n": n, "accuracy": round(k / n, 6) if n else None, "accuracy_ci": wilson(k, n),
               "hallucination_rate": round(hall / n_env, 6) if n_env else None,
               "mean_steps": round(sum(x["n_steps"] for x in rows) / n, 4) if n else 0.0}
    return MPSResult(rows, summary)


def t_id(task, i):
    return str(task.get("id", i))
