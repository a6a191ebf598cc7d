"""``to-sft`` and ``to-rl``: MPS trajectories -> SCoRe-SFT conversations and SCoRe-RL items.

- SFT (phase 2): the first half of the MPS tasks (file order); only trajectories whose final answer
  is correct; those that needed no repair are kept with probability p = 0.5; teacher and student
  steps mixed as they ran. BC-init trajectories (rows with ``first_thought``) are kept when correct.
  Written as JSON Lines ``{"id", "messages"}`` or LLaMA-Factory ShareGPT JSON (``.json``:
  ``[{"conversations": [{"from": "human"|"gpt", "value"}]}]``).
- RL (phase 3): the other half. One item per repaired, correct trajectory: the question plus the
  verified prefix before its LAST repair as ``prompt``, the teacher step (``chosen``) and the
  student's mistake (``rejected``) with their observations, the judge's analysis and correct step
  (``correct_step``) and ``gt_answer``; plus plain-question items from repair-free trajectories, kept
  with p = 0.5 when wrong ("hard") and 0.1 when correct ("easy").
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from icmlkit.lib.distill_agent import agent as A


@dataclass
class ConvertResult:
    items: list
    summary: dict = field(default_factory=dict)


def _half(rows: list, split: str) -> list:
    n = len(rows)
    if split == "first":
        return rows[: n // 2]
    if split == "second":
        return rows[n // 2:]
    return list(rows)


def _task_info(row) -> dict:
    return row.get("original_task_info") or {}


def row_steps(row) -> list[dict]:
    """A row's steps with the plan first (BC-init rows keep the plan in ``first_thought``)."""
    steps = A.clean_steps(row["steps"])
    if isinstance(row.get("first_thought"), str):
        steps = [{"thought": row["first_thought"], "code": "", "observation": "None", "is_finished": False}] + steps
    return steps


def is_correct(row) -> bool:
    return bool((row.get("evaluation_result") or {}).get("is_correct"))


def to_sft(rows: list[dict], cfg, seed: int) -> ConvertResult:
    """SCoRe-SFT conversations (see the module docstring)."""
    from icmlkit.lib.core.runtime import stream_seed

    rng = random.Random(stream_seed(seed, "to-sft/keep"))
    part = _half(rows, cfg.split)
    items, n_rep, n_free, n_bc = [], 0, 0, 0
    for row in part:
        bc = "first_thought" in row or "repair_steps" not in row
        if not is_correct(row):
            continue
        if not bc and not row.get("repair_steps"):
            if rng.random() >= cfg.keep_repair_free:
                continue
            n_free += 1
        elif bc:
            n_bc += 1
        else:
            n_rep += 1
        info = _task_info(row)
        items.append({"id": str(info.get("id", row.get("_line"))),
                      "messages": A.conversation(info["question"], row_steps(row))})
    return ConvertResult(items, {"n_in": len(rows), "n_split": len(part), "n_items": len(items),
                                 "n_repaired": n_rep, "n_repair_free": n_free, "n_bc": n_bc})


def sharegpt(items: list[dict]) -> list[dict]:
    """LLaMA-Factory ShareGPT records of SFT conversations."""
    role = {"user": "human", "assistant": "gpt"}
    return [{"conversations": [{"from": role[m["role"]], "value": m["content"]} for m in it["messages"]]}
            for it in items]


def _suggestion(text: str) -> str:
    return re.sub(r"\n?Correction Start Step:.*$", "", str(text or ""), flags=re.S).rstrip()


def rl_item(row) -> dict | None:
    """The RL item of one repaired, correct trajectory (prefix before its LAST valid repair)."""
    reps = [r for r in row.get("repair_steps", []) if r.get("is_valid", True)]
    if not reps or not is_correct(row):
        return None
    r = reps[-1]
    e = r["mistake_step_index"]  # 0-based index of the corrected step (correction_start_step - 1)
    steps = A.clean_steps(row["steps"])
    info = _task_info(row)
    tg = r["teacher_guided_step"]
    sm = r["student_mistake"][0] if r["student_mistake"] else {"thought": "", "code": "", "observation": ""}
    item = {
        "prompt": A.conversation(info["question"], steps[:e]),
        "chosen": A.step_text(tg, e),
        "chosen_observation": A.render_observation(tg.get("observation", "")),
        "rejected": A.step_text(sm, e),
        "rejected_observation": A.render_observation(sm.get("observation", "")),
        "correct_step": "<thought>" + _suggestion(r.get("correction_suggestion")) + "\nCorrect Step: "
                        + tg.get("thought", "") + "</thought><code>" + tg.get("code", "") + "</code>",
        "gt_answer": str(info.get("true_answer", "")),
    }
    if info.get("env") is not None:
        item["env"] = info["env"]
    return item


def to_rl(rows: list[dict], cfg, seed: int) -> ConvertResult:
    """SCoRe-RL items (see the module docstring)."""
    from icmlkit.lib.core.runtime import stream_seed

    rng = random.Random(stream_seed(seed, "to-rl/plain"))
    part = _half(rows, cfg.split)
    items, n_rep, n_plain = [], 0, 0
    for row in part:
        it = rl_item(row)
        if it is not None:
            items.append(it)
            n_rep += 1
            continue
        if row.get("repair_steps"):
            continue  # repaired but still wrong: no item
        p = cfg.p_easy if is_correct(row) else cfg.p_hard
        if rng.random() < p:
            info = _task_info(row)
            plain = {"prompt": [{"role": "user", "content": info["question"]}], "chosen": "",
                     "chosen_observation": "", "rejected": "", "rejected_observation": "", "correct_step": "",
                     "gt_answer": str(info.get("true_answer", ""))}
            if info.get("env") is not None:
                plain["env"] = info["env"]
            items.append(plain)
            n_plain += 1
    return ConvertResult(items, {"n_in": len(rows), "n_split": len(part), "n_items": len(items),
                                 "n_repair_items": n_rep, "n_plain_items": n_plain})


def mps_counts(rows: list[dict]) -> dict:
    """The example counts of an MPS file: tasks, with >= 1 repair, correct, hard."""
    return {"n_tasks": len(rows), "n_repaired": sum(1 for r in rows if r.get("repair_steps")),
            "n_correct": sum(1 for r in rows if is_correct(r)),
            "n_hard": sum(1 for r in rows if r.get("is_hard_sample"))}


def read_rl_items(path) -> list[dict]:
    """RL items (a JSON list or JSON Lines), validated (InputError naming file, item and field)."""
    from icmlkit.lib.core.errors import InputError
    from icmlkit.lib.core.io import display_name, load_json, read_jsonl, suffix

    name = display_name(path)
    if suffix(path) == ".json":
        data = load_json(path, expect=list, what="RL items JSON")
        rows = list(enumerate(data, 1))
        where = "item"
    else:
        rows = read_jsonl(path, "RL items JSON Lines")
        where = "line"
    out = []
    for ln, it in rows:
        if not isinstance(it, dict):
            raise InputError(f"{where} {ln}: expected an object", name)
        pr = it.get("prompt")
        if not isinstance(pr, list) or not pr or not all(
                isinstance(m, dict) and isinstance(m.get("content"), str) and m.get("role") in ("user", "assistant")
                for m in pr):
            raise InputError(f"{where} {ln}: field 'prompt': expected a non-empty list of user/assistant messages",
                             name)
        for k in ("chosen", "rejected", "chosen_observation", "rejected_observation"):
            if not isinstance(it.get(k, ""), str):
                raise InputError(f"{where} {ln}: field {k!r}: expected a string", name)
        if "gt_answer" not in it:
            raise InputError(f"{where} {ln}: field 'gt_answer' missing", name)
        env = it.get("env")
        if env is not None:
            from icmlkit.lib.distill_agent.env import check_env_task

            env = check_env_task(env, name, ln)
        out.append({**it, "env": env})
    if not out:
        raise InputError("no RL items", name)
    return out


def read_sft(path) -> list[list[dict]]:
    """SFT conversations: JSON Lines ``{"messages"}`` or LLaMA-Factory ShareGPT JSON."""
    from icmlkit.lib.core.errors import InputError
    from icmlkit.lib.core.io import display_name, load_json, read_jsonl, suffix

    name = display_name(path)
    convs = []
    if suffix(path) == ".json":
        data = load_json(path, expect=list, what="ShareGPT JSON")
        role = {"human": "user", "gpt": "assistant", "user": "user", "assistant": "assistant"}
        for i, rec in enumerate(data, 1):
            c = rec.get("conversations") if isinstance(rec, dict) else None
            if not isinstance(c, list) or not c or not all(
                    isinstance(m, dict) and m.get("from") in role and isinstance(m.get("value"), str) for m in c):
                raise InputError(f"item {i}: field 'conversations': expected a list of {{from, value}}", name)
            convs.append([{"role": role[m["from"]], "content": m["value"]} for m in c])
    else:
        for ln, rec in read_jsonl(path, "SFT JSON Lines"):
            msgs = rec.get("messages")
            if not isinstance(msgs, list) or not msgs or not all(
                    isinstance(m, dict) and m.get("role") in ("user", "assistant", "system")
                    and isinstance(m.get("content"), str) for m in msgs):
                raise InputError("field 'messages': expected a non-empty list of {role, content}", name, ln)
            convs.append(msgs)
    if not convs:
        raise InputError("no conversations", name)
    if not any(m["role"] == "assistant" for c in convs for m in c):
        raise InputError("no assistant turns to train on", name)
    return convs
