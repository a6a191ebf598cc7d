"""The agent format (CodeAct / ReAct as in the SCoRe code) and the upstream trajectory schema.

- Step 1 is a plan ``<first_thought>...</first_thought>`` (no code, observation ``None``).
- Every later step is ``<thought>...</thought><code>...</code>``; the code runs in a sandbox and its
  output comes back as a user turn ``Observation: ...``; ``final_answer_print(...)`` ends the episode.
- A trajectory record (one JSON Lines row, the upstream MPS schema) holds ``steps`` (``thought``,
  ``code``, ``observation``, ``is_finished``), ``original_task_info`` (``question``, ``true_answer``),
  ``evaluation_result`` (the judge's JSON), ``repair_steps`` (one record per teacher repair) and
  ``is_hard_sample``.

Everything here is pure Python (no torch).
"""
from __future__ import annotations

import json
import re

from icmlkit.lib.core.errors import InputError

PLAN_RE = re.compile(r"<first_thought>\s*(.*?)\s*(?:</first_thought>|$)", re.S)
STEP_RE = re.compile(r"<thought>\s*(.*?)\s*</thought>\s*<code>\s*(.*?)\s*(?:</code>|$)", re.S)
CODE_FENCE_RE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)
STOP_STRINGS = ("</code>", "</first_thought>")


def render_plan(thought: str) -> str:
    return f"<first_thought>{thought}</first_thought>"


def render_step(thought: str, code: str) -> str:
    return f"<thought>{thought}</thought><code>{code}</code>"


def render_observation(observation) -> str:
    return f"Observation: {str(observation).strip()}"


def step_text(step: dict, index: int) -> str:
    """The assistant text of ``step`` (0-based ``index``; index 0 is the plan)."""
    if index == 0 and not step.get("code"):
        return render_plan(step.get("thought", ""))
    return render_step(step.get("thought", ""), step.get("code", ""))


def parse_step(text: str, *, first: bool = False) -> dict:
    """One assistant turn -> ``{"kind": "plan"|"step"|"invalid", "thought", "code"}``.

    Only the FIRST step in ``text`` is kept (a teacher asked for one step that writes a whole
    solution gets one step). A plan is accepted as step 1 (``first``) or anywhere it is written; a
    fenced ```python block stands in for missing ``<code>`` tags [reconstructed]."""
    text = text or ""
    m_plan, m_step = PLAN_RE.search(text), STEP_RE.search(text)
    if m_plan and (not m_step or m_plan.start() < m_step.start()):
        return {"kind": "plan", "thought": m_plan.group(1).strip(), "code": ""}
    if m_step:
        return {"kind": "step", "thought": m_step.group(1).strip(), "code": m_step.group(2).strip()}
    fence = CODE_FENCE_RE.search(text)
    if fence:
        return {"kind": "step", "thought": text[:fence.start()].strip(), "code": fence.group(1).strip()}
    if first and text.strip():
        return {"kind": "plan", "thought": text.strip(), "code": ""}
    return {"kind": "invalid", "thought": text.strip(), "code": ""}


def truncate_at_stop(text: str) -> str:
    """``text`` up to and including the first closing tag of a step."""
    cut = len(text)
    for s in STOP_STRINGS:
        i = text.find(s)
        if i >= 0:
            cut = min(cut, i + len(s))
    return text[:cut]


def conversation(question: str, steps: list[dict]) -> list[dict]:
    """Chat messages of a trajectory: the question, then per step an assistant turn and an
    ``Observation:`` user turn (observations are user turns: never trained on)."""
    msgs = [{"role": "user", "content": str(question)}]
    for i, s in enumerate(steps):
        msgs.append({"role": "assistant", "content": step_text(s, i)})
        msgs.append({"role": "user", "content": render_observation(s.get("observation", ""))})
    return msgs


def numbered_steps(steps: list[dict]) -> str:
    """The judge's view: ``Step 1:`` (the plan) ... ``Step n:`` with code and observation (1-indexed)."""
    out = []
    for i, s in enumerate(steps):
        if i == 0 and not s.get("code"):
            out.append(f"Step {i + 1}:\nFirst Thought: {s.get('thought', '')}\n")
        else:
            out.append(f"Step {i + 1}:\nThought: {s.get('thought', '')}\nCode:\n{s.get('code', '')}\n"
                       f"Observation: {str(s.get('observation', '')).strip()}\n")
    return "\n".join(out)


# --------------------------------------------------------------------------- the judge's JSON


class JudgeFormatError(ValueError):
    """The judge's answer does not follow the schema."""


def extract_json_object(text: str) -> dict:
    """The first JSON object in ``text`` (a fenced block or bare braces); JudgeFormatError otherwise."""
    text = text or ""
    fence = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    candidates = [fence.group(1)] if fence else []
    start = text.find("{")
    while start >= 0:
        depth, instr, esc = 0, False, False
        for j in range(start, len(text)):
            c = text[j]
            if instr:
                esc = (c == "\\" and not esc)
                if c == '"' and not esc:
                    instr = False
                continue
            if c == '"':
                instr = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    candidates.append(text[start:j + 1])
                    break
        start = text.find("{", start + 1) if not candidates else -1
    for cand in candidates:
        try:
            obj = json.loads(cand)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            return obj
    raise JudgeFormatError("no JSON object in the judge's answer")


def validate_judgement(obj, n_steps: int) -> dict:
    """The judge's JSON checked against the schema ``{is_correct, error_analysis,
    correction_start_step (1-indexed; step 1 = the plan; -1: no correctable step), correction_suggestion}``.

    Returns the normalised dict; raises :class:`JudgeFormatError` naming the field."""
    if not isinstance(obj, dict):
        raise JudgeFormatError("the judgement is not a JSON object")
    ok = obj.get("is_correct")
    if isinstance(ok, str) and ok.strip().lower() in ("true", "false"):
        ok = ok.strip().lower() == "true"
    if not isinstance(ok, bool):
        raise JudgeFormatError("field is_correct: expected true or false")
    analysis = obj.get("error_analysis")
    suggestion = obj.get("correction_suggestion")
    for name, v in (("error_analysis", analysis), ("correction_suggestion", suggestion)):
        if v is not None and not isinstance(v, str):
            raise JudgeFormatError(f"field {name}: expected a string or null")
    e = obj.get("correction_start_step")
    if ok:
        return {"is_correct": True, "error_analysis": analysis, "correction_start_step": None,
                "correction_suggestion": suggestion}
    if isinstance(e, str) and re.fullmatch(r"-?\d+", e.strip()):
        e = int(e.strip())
    if isinstance(e, bool) or not isinstance(e, int):
        raise JudgeFormatError("field correction_start_step: expected an integer (1-indexed step, or -1)")
    if e != -1 and not 1 <= e <= n_steps:
        raise JudgeFormatError(f"field correction_start_step: {e} is out of range 1..{n_steps} (or -1)")
    return {"is_correct": False, "error_analysis": analysis or "", "correction_start_step": e,
            "correction_suggestion": suggestion or ""}


# --------------------------------------------------------------------------- trajectory files


def _bad(path, line, msg):
    return InputError(msg, path, line)


def check_step(s, path, line, where) -> dict:
    if not isinstance(s, dict):
        raise _bad(path, line, f"{where}: expected an object with thought, code, observation")
    if "error" in s and "thought" not in s:  # upstream error records inside steps
        return {"error": str(s.get("error"))}
    for k in ("thought", "code"):
        if not isinstance(s.get(k, ""), str):
            raise _bad(path, line, f"{where}.{k}: expected a string")
    if "thought" not in s:
        raise _bad(path, line, f"{where}: field 'thought' missing")
    obs = s.get("observation", "")
    return {"thought": s["thought"], "code": s.get("code", "") or "",
            "observation": "" if obs is None else str(obs), "is_finished": bool(s.get("is_finished", False))}


def check_trajectory(row: dict, path, line) -> dict:
    """One upstream trajectory row, validated (InputError naming file, line and field)."""
    steps = row.get("steps")
    if not isinstance(steps, list) or not steps:
        raise _bad(path, line, "field 'steps': expected a non-empty list of steps")
    steps = [check_step(s, path, line, f"steps[{i}]") for i, s in enumerate(steps)]
    info = row.get("original_task_info")
    if not isinstance(info, dict) or not isinstance(info.get("question"), str):
        raise _bad(path, line, "field 'original_task_info.question': expected a string")
    ev = row.get("evaluation_result", {})
    if isinstance(ev, str):  # upstream BC-init rows hold the judge's JSON text, e.g. '{"equivalent": true}'
        try:
            ev = json.loads(ev)
        except ValueError:
            raise _bad(path, line, "field 'evaluation_result': not valid JSON text") from None
    if isinstance(ev, dict) and "is_correct" not in ev and isinstance(ev.get("equivalent"), bool):
        ev = {**ev, "is_correct": ev["equivalent"]}
    if not isinstance(ev, dict):
        raise _bad(path, line, "field 'evaluation_result': expected an object")
    e = ev.get("correction_start_step")
    n = sum(1 for s in steps if "error" not in s)
    if e is not None and (isinstance(e, bool) or not isinstance(e, int) or (e != -1 and not 1 <= e <= max(n, 1))):
        raise _bad(path, line, f"field 'evaluation_result.correction_start_step': {e!r} is out of range "
                               f"1..{n} (or -1)")
    reps = row.get("repair_steps", [])
    if not isinstance(reps, list):
        raise _bad(path, line, "field 'repair_steps': expected a list")
    out_reps = []
    for j, r in enumerate(reps):
        w = f"repair_steps[{j}]"
        if not isinstance(r, dict):
            raise _bad(path, line, f"{w}: expected an object")
        mi = r.get("mistake_step_index")
        if isinstance(mi, bool) or not isinstance(mi, int) or not 0 <= mi < len(steps):
            raise _bad(path, line, f"{w}.mistake_step_index: {mi!r} is out of range 0..{len(steps) - 1} "
                                   "(0-based; correction_start_step - 1)")
        tg = check_step(r.get("teacher_guided_step"), path, line, f"{w}.teacher_guided_step")
        sm = r.get("student_mistake", [])
        if isinstance(sm, dict):
            sm = [sm]
        if not isinstance(sm, list):
            raise _bad(path, line, f"{w}.student_mistake: expected a list of steps")
        sm = [check_step(s, path, line, f"{w}.student_mistake[{k}]") for k, s in enumerate(sm)]
        out_reps.append({**r, "mistake_step_index": mi, "teacher_guided_step": tg, "student_mistake": sm,
                         "correction_suggestion": str(r.get("correction_suggestion") or ""),
                         "is_valid": bool(r.get("is_valid", True))})
    return {**row, "steps": steps, "original_task_info": info, "evaluation_result": ev, "repair_steps": out_reps,
            "_line": line}


def read_trajectories(path) -> list[dict]:
    """Every row of a trajectory JSON Lines file (MPS or BC-init schema), validated."""
    from icmlkit.lib.core.io import display_name, read_jsonl

    name = display_name(path)
    rows = [check_trajectory(r, name, ln) for ln, r in read_jsonl(path, "trajectory JSON Lines")]
    if not rows:
        raise InputError("no trajectories (the file has no rows)", name)
    return rows


def clean_steps(steps: list[dict]) -> list[dict]:
    """Steps without upstream error records."""
    return [s for s in steps if "error" not in s]


def read_tasks(path) -> list[dict]:
    """Task rows ``{"question", "answer"|"true_answer", ["id"], ["env"]}`` (``generate`` output, a seed set
    or a benchmark file), validated; returns ``{"id", "question", "answer", "env"}``."""
    from icmlkit.lib.core.io import display_name, read_jsonl

    name = display_name(path)
    out = []
    for ln, r in read_jsonl(path, "task JSON Lines"):
        if "original_task_info" in r and isinstance(r["original_task_info"], dict):
            r = {**r["original_task_info"], **{k: v for k, v in r.items() if k == "env"}}
        q = r.get("question", r.get("Question"))
        if not isinstance(q, str) or not q.strip():
            raise InputError("field 'question': expected a non-empty string", name, ln)
        ans = None
        for k in ("answer", "true_answer", "gt_answer", "Final answer", "final_answer"):
            if k in r:
                ans = r[k]
                break
        if ans is None:
            raise InputError("field 'answer' (or true_answer): missing", name, ln)
        env = r.get("env")
        if env is not None:
            from icmlkit.lib.distill_agent.env import check_env_task

            env = check_env_task(env, name, ln)
        out.append({"id": str(r.get("id", ln)), "question": q, "answer": ans, "env": env})
    if not out:
        raise InputError("no tasks (the file has no rows)", name)
    return out
