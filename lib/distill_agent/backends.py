"""Teacher, judge and student backends.

- ``oracle``: the exact programmatic teacher / judge of the tasks of ``generate`` (needs each task's
  ``env`` block).
- ``openai://HOST:PORT/v1?model=NAME`` (``openais://`` for HTTPS): an OpenAI-compatible endpoint
  through lib/llm (key from ``--api-key-env``; never logged). The prompts below are
  [reconstructed] paraphrases of the roles in the upstream prompts (judge with gold answer and
  numbered steps returning JSON; ONE-step repair; plan rewrite when the error is step 1).
- a local model folder or ``smollm2``: a student through :class:`~icmlkit.lib.distill_agent.model.LocalPolicy`.
- a local model as the TEACHER (``qwen2.5-coder-1.5b-instruct`` or a folder):
  :class:`~icmlkit.lib.distill_agent.teacher.LocalTeacher` (greedy, its generated tokens counted).

Teacher tokens are counted as whitespace-separated words of everything the teacher and the judge
wrote [reconstructed: a tokenizer-free proxy that is the same for every backend].
"""
from __future__ import annotations

import json

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.distill_agent import agent as A

SYSTEM_AGENT = (
    "You solve tasks step by step as a code agent. Step 1 is a plan written as "
    "<first_thought>...</first_thought>. Every later step is <thought>...</thought><code>...</code>; the code "
    "runs in Python and its output comes back as 'Observation: ...'. Call final_answer_print(answer) to finish. "
    "Write exactly ONE step per turn.")

JUDGE_PROMPT = (
    "You are a strict judge of an agent's solution. Question:\n{question}\n\nGold answer: {gold}\n"
    "Agent's final answer: {answer}\n\nThe agent's steps (step 1 is the plan):\n{steps}\n"
    "Reply with ONLY a JSON object: {{\"is_correct\": true|false, \"error_analysis\": \"...\", "
    "\"correction_start_step\": N, \"correction_suggestion\": \"...\"}} where correction_start_step is the "
    "1-indexed EARLIEST wrong step (1 = the plan) or -1 when no step can be corrected.")

REPAIR_PROMPT = (
    "A student agent is solving this question:\n{question}\n\nIts verified steps so far:\n{prefix}\n"
    "A judge found this error in step {e}:\n{analysis}\nSuggestion: {suggestion}\n\n"
    "Write ONLY ONE corrected step {e} as <thought>...</thought><code>...</code>. Do not write the full "
    "solution; the student continues after your step.")

PLAN_PROMPT = (
    "A student agent is solving this question:\n{question}\n\nIts plan was judged wrong:\n{analysis}\n"
    "Suggestion: {suggestion}\n\nWrite ONLY a corrected plan as <first_thought>...</first_thought>.")


def words(text) -> int:
    return len(str(text or "").split())


def is_endpoint(spec: str) -> bool:
    return str(spec).startswith(("openai://", "openais://"))


def make_client(spec: str, option: str, cfg, seed: int):
    from icmlkit.lib.llm import ChatClient, parse_endpoint

    base, name = parse_endpoint(spec, option)
    return ChatClient(base, name, api_key_env=cfg.api_key_env, seed=seed, max_workers=cfg.workers)


def normalise_answer(a) -> str:
    """Answer text for exact matching: \\boxed{...} unwrapped, spaces, $ and trailing dots removed
    [reconstructed: the upstream judge is an LLM]."""
    s = str(a if a is not None else "")
    i = s.rfind("\\boxed{")
    if i >= 0:
        j, depth = i + 7, 1
        k = j
        while k < len(s) and depth:
            depth += {"{": 1, "}": -1}.get(s[k], 0)
            k += 1
        s = s[j:k - 1]
    s = s.replace("$", "").replace(" ", "").replace("\\dfrac", "\\frac").rstrip(".")
    return s.lower()


def answers_match(answer, gold) -> bool:
    return answer is not None and normalise_answer(answer) == normalise_answer(gold)


class Counter:
    def __init__(self):
        self.teacher_tokens = 0
        self.model_tokens = 0  # tokens a local teacher model generated (its tokenizer)
        self.llm_calls = 0
        self.judge_failures = 0


class OracleJudge:
    def __init__(self, counter):
        self.counter = counter

    def judge_many(self, items):
        from icmlkit.lib.distill_agent.env import oracle_judgement

        out = []
        for task, steps, answer in items:
            if task.get("env") is None:
                raise UsageError("--judge oracle needs tasks of `distill-agent generate` (rows with an 'env' block); "
                                 f"task {task['id']} has none: use an openai:// judge")
            j = oracle_judgement(task["env"], steps, answer)
            self.counter.teacher_tokens += words(json.dumps(j))
            out.append(j)
        return out


class OracleTeacher:
    def __init__(self, counter):
        self.counter = counter

    def steps_many(self, items):
        """One repair step per (task, prefix, judgement)."""
        from icmlkit.lib.distill_agent.env import teacher_step

        out = []
        for task, prefix, _j in items:
            if task.get("env") is None:
                raise UsageError("--teacher oracle needs tasks of `distill-agent generate` (rows with an 'env' block)")
            s = teacher_step(task["env"], prefix)
            self.counter.teacher_tokens += words(s["thought"]) + words(s["code"])
            out.append(s)
        return out

    def solve_many(self, tasks):
        from icmlkit.lib.distill_agent.env import teacher_trajectory

        out = []
        for t in tasks:
            if t.get("env") is None:
                raise UsageError("--teacher oracle needs tasks of `distill-agent generate` (rows with an 'env' block)")
            steps = teacher_trajectory(t["env"])
            self.counter.teacher_tokens += sum(words(s["thought"]) + words(s["code"]) for s in steps)
            out.append(steps)
        return out


class EndpointJudge:
    def __init__(self, client, counter, cfg):
        self.client, self.counter, self.cfg = client, counter, cfg

    def judge_many(self, items):
        convs = [[{"role": "user", "content": JUDGE_PROMPT.format(
            question=t["question"], gold=t["answer"], answer=a, steps=A.numbered_steps(s))}] for t, s, a in items]
        results: list = [None] * len(items)
        todo = list(range(len(items)))
        for _attempt in range(self.cfg.judge_retries + 1):
            if not todo:
                break
            before = self.client.calls
            answers = self.client.chat_many([convs[i] for i in todo], temperature=self.cfg.teacher_temperature,
                                            max_tokens=1024)
            self.counter.llm_calls += self.client.calls - before
            left = []
            for i, text in zip(todo, answers):
                self.counter.teacher_tokens += words(text)
                try:
                    results[i] = A.validate_judgement(A.extract_json_object(text), len(items[i][1]))
                except A.JudgeFormatError as exc:
                    results[i] = exc
                    left.append(i)
            todo = left
        for i in todo:
            self.counter.judge_failures += 1
            results[i] = {"is_correct": False, "error_analysis": f"judge answer invalid: {results[i]}",
                          "correction_start_step": -1, "correction_suggestion": "", "judge_failed": True}
        return results


class EndpointTeacher:
    def __init__(self, client, counter, cfg, agent_cfg):
        self.client, self.counter, self.cfg, self.agent_cfg = client, counter, cfg, agent_cfg

    def steps_many(self, items):
        convs = []
        for task, prefix, j in items:
            if not prefix:
                p = PLAN_PROMPT.format(question=task["question"], analysis=j.get("error_analysis") or "",
                                       suggestion=j.get("correction_suggestion") or "")
            else:
                p = REPAIR_PROMPT.format(question=task["question"], prefix=A.numbered_steps(prefix),
                                         e=len(prefix) + 1, analysis=j.get("error_analysis") or "",
                                         suggestion=j.get("correction_suggestion") or "")
            convs.append([{"role": "user", "content": p}])
        before = self.client.calls
        texts = self.client.chat_many(convs, temperature=self.cfg.teacher_temperature, max_tokens=1024)
        self.counter.llm_calls += self.client.calls - before
        out = []
        for (task, prefix, _j), text in zip(items, texts):
            self.counter.teacher_tokens += words(text)
            s = A.parse_step(text, first=not prefix)  # only the FIRST step is kept
            if not prefix:
                out.append({"thought": s["thought"], "code": ""})
            else:
                out.append({"thought": s["thought"], "code": s["code"]})
        return out


class EndpointPolicy:
    """A chat endpoint as the agent (a student, or a teacher solving seed tasks)."""

    def __init__(self, client, counter, temperature: float, count_tokens: bool, max_tokens: int = 1024):
        self.client, self.counter, self.temperature = client, counter, temperature
        self.count_tokens, self.max_tokens = count_tokens, max_tokens

    def begin(self, messages, rng=None):
        return [{"role": "system", "content": SYSTEM_AGENT}] + [dict(m) for m in messages]

    def insert(self, ep, text):
        ep.append({"role": "assistant", "content": text})

    def observe(self, ep, obs):
        ep.append({"role": "user", "content": obs})

    def generate(self, eps):
        before = self.client.calls
        texts = self.client.chat_many([list(e) for e in eps], temperature=self.temperature,
                                      max_tokens=self.max_tokens, stop=list(A.STOP_STRINGS))
        self.counter.llm_calls += self.client.calls - before
        out = []
        for e, t in zip(eps, texts):
            t = t or ""
            if "<code>" in t and "</code>" not in t:
                t += "</code>"
            elif "<first_thought>" in t and "</first_thought>" not in t:
                t += "</first_thought>"
            t = A.truncate_at_stop(t)
            if self.count_tokens:
                self.counter.teacher_tokens += words(t)
            e.append({"role": "assistant", "content": t})
            out.append(t)
        return out


def make_judge(spec, counter, mps_cfg, agent_cfg, seed):
    if spec == "oracle":
        return OracleJudge(counter)
    if is_endpoint(spec):
        return EndpointJudge(make_client(spec, "--judge", agent_cfg, seed), counter, mps_cfg)
    raise UsageError(f"--judge {spec!r}: expected oracle or openai://HOST:PORT/v1?model=NAME")


def make_teacher(spec, counter, mps_cfg, agent_cfg, seed, device=None):
    if spec == "oracle":
        return OracleTeacher(counter)
    if is_endpoint(spec):
        return EndpointTeacher(make_client(spec, "--teacher", agent_cfg, seed), counter, mps_cfg, agent_cfg)
    from icmlkit.lib.distill_agent.teacher import is_local_teacher, load_teacher

    if is_local_teacher(spec):
        return load_teacher(spec, counter, max_new=agent_cfg.step_tokens, batch=agent_cfg.batch, device=device)
    raise UsageError(f"--teacher {spec!r}: expected oracle, openai://HOST:PORT/v1?model=NAME, a local model name "
                     "(qwen2.5-coder-1.5b-instruct) or a model folder")


def make_student(spec, counter, agent_cfg, seed, *, temperature, top_p=1.0, top_k=0, device=None):
    """A student policy: an endpoint, or a local model folder / smollm2."""
    if is_endpoint(spec):
        return EndpointPolicy(make_client(spec, "--student", agent_cfg, seed), counter, temperature, False)
    if spec in ("oracle", "tiny"):
        raise UsageError(f"--student {spec!r}: a student is a model folder, smollm2 or an openai:// endpoint "
                         "(train a tiny one with `distill-agent sft --init tiny`)")
    from icmlkit.lib.distill_agent.model import LocalPolicy, load_student

    model, tok = load_student(spec, device=device)
    return LocalPolicy(model, tok, step_tokens=agent_cfg.step_tokens, temperature=temperature, top_p=top_p,
                       top_k=top_k, batch=agent_cfg.batch)


def check_model_spec(spec: str, option: str) -> None:
    if not spec:
        raise UsageError(f"{option} is required")
    if spec.startswith("openai:") and not is_endpoint(spec):
        raise UsageError(f"{option} {spec!r}: write openai://HOST:PORT/v1?model=NAME")


__all__ = ["InputError"]
