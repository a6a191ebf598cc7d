"""``distill-agent generate``: the synthetic lookup + arithmetic environment with a built-in knowledge gap
[reconstructed from the method sheet's demonstration; the paper has no such toy].

A task is "compute k3 + k7 - k1" over a hidden key -> value table. The agent's code is a tiny DSL:

- ``LOOKUP k``      -> the value of key ``k`` (the environment's table)
- ``CALC x op y``   -> ``x op y`` for integers x, y and op in {+, -}
- ``ANSWER v``      -> ends the episode with answer v (the DSL's ``final_answer_print``;
  ``final_answer_print(v)`` is accepted too)

Step 1 is the plan ``PLAN k3 k7 k1``. The correct completions fold left:
``acc_1 = T[k_1]``, ``acc_i = acc_{i-1} op_{i-1} T[k_i]``; a task with n keys takes 2n + 1 steps.

- **Exact teacher with private recall**: the teacher's OWN trajectories skip ``LOOKUP`` for the keys
  it "recalls" (``env.private``) and write their values directly, as a large model recalls facts a
  small one cannot: imitating them teaches hallucination.
- **Earliest-error oracle by replay**: the student's steps are replayed; a step is wrong when the
  state it leads to is inconsistent with every correct completion (wrong key, repeated lookup, wrong
  arithmetic, a hallucinated value that is wrong, a premature or wrong ANSWER, a malformed step).
- **Correction**: the teacher's best executable step at that state (a LOOKUP / CALC / ANSWER call,
  never a private recall); a plan rewrite when the error is step 1.
- **Functional step equivalence** (for the RL reward): equal environment state after the step.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from icmlkit.lib.core.errors import InputError

OPS = ("+", "-")
NUM_RE = re.compile(r"-?\d+")


def check_env_task(env, path, line) -> dict:
    """Validate a task's ``env`` block (InputError naming the file, line and field)."""
    if not isinstance(env, dict):
        raise InputError("field 'env': expected an object", path, line)
    keys, ops, table = env.get("keys"), env.get("ops"), env.get("table")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
        raise InputError("field 'env.keys': expected a non-empty list of strings", path, line)
    if len(set(keys)) != len(keys):
        raise InputError("field 'env.keys': keys must be distinct", path, line)
    if not isinstance(ops, list) or len(ops) != len(keys) - 1 or not all(o in OPS for o in ops):
        raise InputError(f"field 'env.ops': expected {len(keys) - 1} of '+', '-'", path, line)
    if not isinstance(table, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in table.values()):
        raise InputError("field 'env.table': expected an object of integers", path, line)
    missing = [k for k in keys if k not in table]
    if missing:
        raise InputError(f"field 'env.table': no value for key {missing[0]}", path, line)
    private = env.get("private", [])
    if not isinstance(private, list) or not all(isinstance(k, str) for k in private):
        raise InputError("field 'env.private': expected a list of keys", path, line)
    return {"keys": list(keys), "ops": list(ops), "table": dict(table), "private": list(private)}


def fold(env: dict) -> list[int]:
    """acc_1..acc_n of the task."""
    t, k, o = env["table"], env["keys"], env["ops"]
    acc = [t[k[0]]]
    for i in range(1, len(k)):
        acc.append(acc[-1] + t[k[i]] if o[i - 1] == "+" else acc[-1] - t[k[i]])
    return acc


def question_of(env: dict, style: str = "dsl") -> str:
    """The task's question: ``compute k3 + k7 - k1`` (dsl) or the same in plain English (natural:
    "What is the value of k3, plus the value of k7, minus the value of k1?")."""
    if style == "natural":
        words = {"+": "plus", "-": "minus"}
        parts = [f"the value of {env['keys'][0]}"]
        parts += [f"{words[op]} the value of {k}" for op, k in zip(env["ops"], env["keys"][1:])]
        return "What is " + ", ".join(parts) + "?"
    parts = [env["keys"][0]]
    for op, k in zip(env["ops"], env["keys"][1:]):
        parts += [op, k]
    return "compute " + " ".join(parts)


def make_tasks(cfg, seed: int) -> list[dict]:
    """``cfg.n_tasks`` random tasks (EnvConfig); the same seed gives the same tasks."""
    from icmlkit.lib.core.runtime import stream_seed
    import random

    vocab = [f"k{i}" for i in range(cfg.key_pool)]
    rng_p = random.Random(stream_seed(seed, "env/private"))
    order = list(vocab)
    rng_p.shuffle(order)
    private = set(order[:round(cfg.private_frac * cfg.key_pool)])
    rng = random.Random(stream_seed(seed, "env/tasks"))
    rows = []
    for i in range(cfg.n_tasks):
        n = rng.randint(cfg.min_keys, cfg.max_keys)
        keys = rng.sample(vocab, n)
        table = {k: rng.randint(0, cfg.max_value) for k in keys}
        ops = [rng.choice(OPS) for _ in range(n - 1)]
        env = {"keys": keys, "ops": ops, "table": table, "private": sorted(k for k in keys if k in private)}
        rows.append({"id": f"env-{seed}-{i}", "question": question_of(env, cfg.question), "answer": str(fold(env)[-1]),
                     "env": env})
    return rows


# --------------------------------------------------------------------------- the DSL


def parse_code(code: str):
    """DSL code -> ("lookup", key) | ("calc", x, op, y) | ("answer", v) | ("error", message)."""
    c = " ".join(str(code).split())
    m = re.fullmatch(r"final_answer_print\(\s*\"?(-?\d+)\"?\s*\)", c)
    if m:
        return ("answer", int(m.group(1)))
    parts = c.split(" ")
    if len(parts) == 2 and parts[0] == "LOOKUP":
        return ("lookup", parts[1])
    if len(parts) == 4 and parts[0] == "CALC" and NUM_RE.fullmatch(parts[1]) and NUM_RE.fullmatch(parts[3]) \
            and parts[2] in OPS:
        return ("calc", int(parts[1]), parts[2], int(parts[3]))
    if len(parts) == 2 and parts[0] == "ANSWER" and NUM_RE.fullmatch(parts[1]):
        return ("answer", int(parts[1]))
    return ("error", f"Error: cannot parse {c[:40]!r}")


class DSLExecutor:
    """Runs DSL code cells for one task; ``run(code) -> (observation, final)`` (final: the answer
    string when the cell ended the episode, else None)."""

    def __init__(self, env: dict):
        self.env = env

    def run(self, code: str, allow_final: bool = True):
        cmd = parse_code(code)
        if cmd[0] == "lookup":
            if cmd[1] in self.env["table"]:
                return str(self.env["table"][cmd[1]]), None
            return f"Error: unknown key {cmd[1]}", None
        if cmd[0] == "calc":
            return str(cmd[1] + cmd[3] if cmd[2] == "+" else cmd[1] - cmd[3]), None
        if cmd[0] == "answer":
            return str(cmd[1]), (str(cmd[1]) if allow_final else None)
        return cmd[1], None

    def close(self):
        pass


def plan_keys(thought: str) -> list[str] | None:
    parts = str(thought).split()
    if not parts or parts[0] != "PLAN":
        return None
    return parts[1:]


# --------------------------------------------------------------------------- replay oracle


@dataclass
class State:
    """Where a (valid) prefix left the task: keys looked up, CALCs done, and grounded numbers."""

    looked: frozenset = frozenset()
    calcs: int = 0
    finished: bool = False
    grounded: frozenset = frozenset()

    def key(self):
        return (self.looked, self.calcs, self.finished)


def step_valid(env: dict, state: State, index: int, step: dict):
    """Is ``step`` (0-based ``index``) consistent with a correct completion from ``state``?
    Returns (valid, new_state, hallucinated: bool, reason)."""
    keys, ops = env["keys"], env["ops"]
    acc = fold(env)
    n = len(keys)
    thought, code = step.get("thought", ""), step.get("code", "")
    if index == 0:
        pk = plan_keys(thought) if not code else None
        if pk == keys:
            return True, state, False, ""
        return False, state, False, "the plan does not list the task's keys in order"
    if not code:
        return False, state, False, "no code"
    cmd = parse_code(code)
    grounded = state.grounded
    obs = str(step.get("observation", ""))
    if cmd[0] == "lookup":
        k = cmd[1]
        consumed = set(keys[:state.calcs + 1]) if state.calcs else set()
        if k not in keys:
            return False, state, False, f"key {k} is not in the question"
        if k in state.looked or k in consumed:
            return False, state, False, f"key {k} is looked up again"
        g = grounded | {int(obs)} if NUM_RE.fullmatch(obs.strip() or "x") else grounded
        return True, State(state.looked | {k}, state.calcs, False, g), False, ""
    if cmd[0] == "calc":
        _, x, op, y = cmd
        hall = (x not in grounded) or (y not in grounded)
        c = state.calcs
        if c >= n - 1:
            return False, state, hall, "no CALC is left to do"
        if (x, op, y) != (acc[c], ops[c], env["table"][keys[c + 1]]):
            return False, state, hall, f"expected CALC {acc[c]} {ops[c]} {env['table'][keys[c + 1]]}"
        g = grounded | {int(obs)} if NUM_RE.fullmatch(obs.strip() or "x") else grounded
        return True, State(state.looked, c + 1, False, g), hall, ""
    if cmd[0] == "answer":
        hall = cmd[1] not in grounded
        if state.calcs == n - 1 and cmd[1] == acc[-1]:
            return True, State(state.looked, state.calcs, True, grounded), hall, ""
        return False, state, hall, "premature or wrong ANSWER"
    return False, state, False, "malformed code"


def replay(env: dict, steps: list[dict]):
    """Replay ``steps``; returns (earliest wrong step, 1-indexed, or None; final State; hallucinated count).
    The state is that after the last VALID step before the first error."""
    state = State()
    hall_total = 0
    first_err, reason, good_state = None, "", None
    for i, s in enumerate(steps):
        ok, new, hall, why = step_valid(env, state, i, s)
        hall_total += int(hall)
        if not ok and first_err is None:
            first_err, reason, good_state = i + 1, why, state
        if ok:
            state = new
    return first_err, reason, (good_state if first_err is not None else state), hall_total


def hallucinated(env: dict, steps: list[dict]) -> int:
    """Operands of CALC / ANSWER that no earlier observation showed (values the agent made up)."""
    grounded: set = set()
    count = 0
    for s in steps[1:]:
        cmd = parse_code(s.get("code", ""))
        if cmd[0] == "calc":
            count += int(cmd[1] not in grounded) + int(cmd[3] not in grounded)
        elif cmd[0] == "answer":
            count += int(cmd[1] not in grounded)
        obs = str(s.get("observation", "")).strip()
        if NUM_RE.fullmatch(obs or "x"):
            grounded.add(int(obs))
    return count


def oracle_judgement(env: dict, steps: list[dict], answer) -> dict:
    """The exact judge: ``{is_correct, error_analysis, correction_start_step, correction_suggestion}``."""
    correct = answer is not None and str(answer).strip() == str(fold(env)[-1])
    e, why, state, _ = replay(env, steps)
    if correct and e is None:
        return {"is_correct": True, "error_analysis": None, "correction_start_step": None,
                "correction_suggestion": None}
    if e is None:
        return {"is_correct": False, "error_analysis": "every step is consistent but the task is unfinished",
                "correction_start_step": -1, "correction_suggestion": ""}
    sug = teacher_step(env, steps[:e - 1])
    return {"is_correct": False, "error_analysis": f"Step {e}: {why}.", "correction_start_step": e,
            "correction_suggestion": sug["code"] or sug["thought"]}


def teacher_step(env: dict, prefix: list[dict]) -> dict:
    """The teacher's best executable next step after a valid ``prefix`` (never a private recall)."""
    keys, ops = env["keys"], env["ops"]
    if not prefix:
        return {"thought": "PLAN " + " ".join(keys), "code": ""}
    _, _, state, _ = replay(env, prefix)
    acc = fold(env)
    c, n = state.calcs, len(keys)
    if c == 0 and keys[0] not in state.looked:
        return {"thought": f"need {keys[0]}", "code": f"LOOKUP {keys[0]}"}
    if c < n - 1:
        if keys[c + 1] not in state.looked:
            return {"thought": f"need {keys[c + 1]}", "code": f"LOOKUP {keys[c + 1]}"}
        return {"thought": f"combine {ops[c]} {keys[c + 1]}",
                "code": f"CALC {acc[c]} {ops[c]} {env['table'][keys[c + 1]]}"}
    return {"thought": "finish", "code": f"ANSWER {acc[-1]}"}


def teacher_trajectory(env: dict) -> list[dict]:
    """The teacher's OWN solution: private keys are recalled (no LOOKUP), the rest looked up."""
    keys, ops, t = env["keys"], env["ops"], env["table"]
    private = set(env.get("private", []))
    acc = fold(env)
    steps = [{"thought": "PLAN " + " ".join(keys), "code": "", "observation": "None", "is_finished": False}]

    def look(k):
        if k not in private:
            steps.append({"thought": f"need {k}", "code": f"LOOKUP {k}", "observation": str(t[k]),
                          "is_finished": False})

    look(keys[0])
    for i in range(1, len(keys)):
        look(keys[i])
        steps.append({"thought": f"combine {ops[i - 1]} {keys[i]}", "code": f"CALC {acc[i - 1]} {ops[i - 1]} {t[keys[i]]}",
                      "observation": str(acc[i]), "is_finished": False})
    steps.append({"thought": "finish", "code": f"ANSWER {acc[-1]}", "observation": str(acc[-1]),
                  "is_finished": True})
    return steps


def equivalent(env: dict, prefix: list[dict], a: dict, b: dict) -> bool:
    """Functional equivalence of two steps after ``prefix``: equal environment state and observation."""
    _, _, state, _ = replay(env, prefix)
    i = len(prefix)
    ex = DSLExecutor(env)
    oa = ex.run(a.get("code", ""))[0] if a.get("code") else "None"
    ob = ex.run(b.get("code", ""))[0] if b.get("code") else "None"
    va, sa, _, _ = step_valid(env, state, i, {**a, "observation": oa})
    vb, sb, _, _ = step_valid(env, state, i, {**b, "observation": ob})
    if va != vb:
        return False
    if va:
        return sa.key() == sb.key() and oa == ob
    return parse_code(a.get("code", "")) == parse_code(b.get("code", "")) and oa == ob


def vocabulary(key_pool: int = 64, num_range: int = 100) -> list[str]:
    """Every word the toy format can contain (the tiny student's WordLevel vocabulary)."""
    words = ["[PAD]", "[UNK]", "[Q]", "[A]", "[O]", "[EOS]",
             "<first_thought>", "</first_thought>", "<thought>", "</thought>", "<code>", "</code>",
             "PLAN", "LOOKUP", "CALC", "ANSWER", "+", "-", "compute", "need", "combine", "finish", "None",
             "Error:", "unknown", "key", "cannot", "parse"]
    words += [f"k{i}" for i in range(key_pool)]
    words += [str(v) for v in range(-num_range, num_range + 1)]
    return words
