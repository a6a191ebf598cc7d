"""A local causal LM as the teacher (``--teacher qwen2.5-coder-1.5b-instruct`` or a model folder)
[reconstructed: the upstream teacher is Qwen2.5-72B-Instruct behind an OpenAI-compatible endpoint].

- **Correction** (``steps_many``, the MPS step): the judge names the earliest wrong step e of the
  student's trajectory; the teacher sees the question and the verified prefix (steps < e) and writes
  ONE assistant turn greedily (a plan when e = 1); only that step is kept and the student resumes.
  The judge's analysis is not shown to the teacher (the exact judge of the synthetic toy names the
  expected step itself, so showing it would make the correction the judge's, not the teacher's).
- **Imitation** (``solve_many``): the teacher solves tasks end to end (one greedy turn at a time,
  each executed in the task's executor); the baseline SFTs on its full trajectories.
- Both render conversations in the students' plain format (``[Q]``/``[A]``/``[O]``) behind a fixed
  worked example (:data:`HEADER`); the example's keys and values are computed once and kept in the
  model's key-value cache, so every request pays only for its own question and prefix.
- Teacher tokens are the tokens the teacher model GENERATED (its own tokenizer), counted on both
  sides of the equal-teacher-token comparison; ``Counter.model_tokens`` holds them
  (``Counter.teacher_tokens`` keeps the whitespace-word proxy every backend counts).
- Every generation is cached per (question, prefix) in memory and, with ``cache_path``, in a JSONL
  file written after each batch (a killed run resumes; greedy decoding makes a cached answer the
  one the model would give again); a cached answer counts its recorded tokens again.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

from icmlkit.lib.distill_agent import agent as A
from icmlkit.lib.hf.generate import cache_keywords, cache_of, pad_batch

HEADER = (
    "Solve the task with a tiny tool language, ONE step per turn. Step 1 is always the plan "
    "<first_thought>PLAN keys in order</first_thought>. Every later step is <thought>...</thought><code>...</code> "
    "where code is LOOKUP key (returns the key's value), CALC x + y or CALC x - y (integers), or ANSWER v "
    "(ends the task).\n"
    "[Q] What is the value of k9, minus the value of k2?\n"
    "[A] <first_thought>PLAN k9 k2</first_thought>\n[O] None\n"
    "[A] <thought>need k9</thought><code>LOOKUP k9</code>\n[O] 7\n"
    "[A] <thought>need k2</thought><code>LOOKUP k2</code>\n[O] 3\n"
    "[A] <thought>combine - k2</thought><code>CALC 7 - 3</code>\n[O] 4\n"
    "[A] <thought>finish</thought><code>ANSWER 4</code>\n[O] 4\n\n")


def _step_key(steps: list[dict]) -> list:
    return [[s.get("thought", ""), s.get("code", ""), str(s.get("observation", ""))] for s in steps]


class HeaderLM:
    """Greedy turns of a causal LM after a fixed header whose key-value cache is computed once.

    ``turns(rows)``: ``rows`` are token-id lists (each continuing the header); every row decodes
    greedily until a step's closing tag or EOS, at most ``max_new`` tokens; returns the new ids per
    row. ``episodes(rows, on_turn)``: many turns per row in one key-value cache: when row i ends a
    turn, ``on_turn(i, ids)`` returns the token ids to feed before its next turn (the observation and
    the next assistant marker) or None (the row is done). Rows are left-padded after the header
    (attention mask 0 on the pads, positions counting real tokens only), ``batch`` rows at a time."""

    def __init__(self, model, tok, header: str, *, max_new: int = 40, batch: int = 16):
        import torch

        from icmlkit.lib.distill_agent.model import Codec

        self.model, self.codec, self.max_new, self.batch = model, Codec(tok), max_new, batch
        self.device = next(model.parameters()).device
        self.header = self.codec.enc(header) if header else []
        self._past = None
        self._kw, self._keep = cache_keywords(model)
        if self.header:
            with torch.no_grad():
                out = model(input_ids=torch.tensor([self.header], device=self.device), use_cache=True, **self._keep)
            self._past = cache_of(out, self._kw)

    def turns(self, rows: list[list[int]]) -> list[list[int]]:
        got: dict = {}

        def keep(i, ids):
            got[i] = ids
            return None

        self.episodes(rows, keep)
        return [got[i] for i in range(len(rows))]

    def episodes(self, rows: list[list[int]], on_turn) -> None:
        for k in range(0, len(rows), self.batch):
            self._episodes(rows[k:k + self.batch], lambda i, ids, k=k: on_turn(k + i, ids))

    def _episodes(self, rows, on_turn):
        from collections import deque

        import torch

        n, H = len(rows), len(self.header)
        tok = self.codec.tok
        pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
        x, rmask = pad_batch(rows, pad, side="left")
        pos = H + (rmask.cumsum(-1) - 1).clamp_min(0)
        mask = torch.cat([torch.ones((n, H), dtype=torch.long), rmask], dim=1)
        past = None
        if self._past is not None:
            past = copy.deepcopy(self._past)
            past.batch_repeat_interleave(n)
        inp, mask, pos = x.to(self.device), mask.to(self.device), pos.to(self.device)
        cur = [[] for _ in range(n)]
        forced = [deque() for _ in range(n)]
        done = [False] * n
        with torch.no_grad():
            while True:
                o = self.model(input_ids=inp, attention_mask=mask, position_ids=pos, use_cache=True,
                               **{self._kw: past}, **self._keep)
                past = cache_of(o, self._kw)
                best = o.logits[:, -1].argmax(-1).tolist()
                feed = [pad] * n
                for i in range(n):
                    if done[i]:
                        continue
                    if forced[i]:
                        feed[i] = forced[i].popleft()
                        continue
                    t = int(best[i])
                    cur[i].append(t)
                    feed[i] = t
                    if self.codec.turn_ended(cur[i]) or len(cur[i]) >= self.max_new:
                        nxt = on_turn(i, cur[i])
                        cur[i] = []
                        if nxt is None:
                            done[i] = True
                        else:
                            forced[i].extend(nxt)
                if all(done):
                    break
                inp = torch.tensor([[t] for t in feed], dtype=torch.long, device=self.device)
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                pos = pos[:, -1:] + 1


class LocalTeacher:
    """The teacher backend of a local model (see the module docstring): ``steps_many`` (ONE corrected
    step after each verified prefix) and ``solve_many`` (whole trajectories)."""

    def __init__(self, lm: HeaderLM, counter, *, cache_path=None):
        self.lm, self.counter = lm, counter
        self.cache_path = Path(cache_path) if cache_path else None
        self.cache: dict = {}
        self.hits = 0
        if self.cache_path is not None and self.cache_path.is_file():
            for line in self.cache_path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.cache[row["key"]] = row["value"]

    def _save(self) -> None:
        if self.cache_path is None:
            return
        from icmlkit.lib.core.io import write_text

        write_text(self.cache_path, "".join(json.dumps({"key": k, "value": v}, sort_keys=True) + "\n"
                                            for k, v in self.cache.items()))

    def _ids(self, question: str, steps: list[dict]) -> list[int]:
        ids, _ = self.lm.codec.encode(A.conversation(question, steps), train_assistant=False)
        return ids + self.turn_mark

    @property
    def turn_mark(self) -> list[int]:
        """The assistant marker the teacher continues from, WITHOUT its trailing space: a BPE model
        (Qwen) writes the space with the next word (" <first_thought>"); a prompt that ends in a
        space made Qwen skip the plan or echo the example in 7 of 16 trajectories."""
        from icmlkit.lib.distill_agent.model import MARKER

        return self.lm.codec.enc(MARKER["assistant"].rstrip(" ")) if not self.lm.codec.word \
            else self.lm.codec.mark["assistant"]

    def _turns(self, requests: list[tuple[str, list[dict]]]) -> list[dict]:
        """{"text", "tokens"} of one greedy turn per (question, steps), through the cache."""
        keys = [json.dumps(["turn/2", q, _step_key(s)]) for q, s in requests]
        todo = [i for i, k in enumerate(keys) if k not in self.cache]
        self.hits += len(keys) - len(todo)
        for k in range(0, len(todo), self.lm.batch):  # the cache file is written after every batch
            part = todo[k:k + self.lm.batch]
            for i, ids in zip(part, self.lm.turns([self._ids(*requests[i]) for i in part])):
                self.cache[keys[i]] = {"text": A.truncate_at_stop(self.lm.codec.decode(ids)), "tokens": len(ids)}
            self._save()
        out = [self.cache[k] for k in keys]
        from icmlkit.lib.distill_agent.backends import words

        self.counter.model_tokens += sum(o["tokens"] for o in out)
        self.counter.teacher_tokens += sum(words(o["text"]) for o in out)  # the words proxy of every backend
        return out

    def steps_many(self, items):
        """ONE step per (task, verified prefix, judgement): a plan when the prefix is empty."""
        out = []
        for (task, prefix, _j), o in zip(items, self._turns([(t["question"], p) for t, p, _j in items])):
            s = A.parse_step(o["text"], first=not prefix)
            out.append({"thought": s["thought"], "code": "" if not prefix else s["code"], "tokens": o["tokens"]})
        return out

    def solve_many(self, tasks, agent_cfg, search=None) -> list[dict]:
        """Whole teacher trajectories: {"steps", "final", "tokens"} per task, each turn executed in the
        task's executor and its observation fed back (one key-value cache per trajectory); cached per
        question."""
        from icmlkit.lib.distill_agent import loop
        from icmlkit.lib.distill_agent.backends import words

        keys = [json.dumps(["solve/2", t["question"], agent_cfg.max_steps]) for t in tasks]
        todo = [i for i, k in enumerate(keys) if k not in self.cache]
        self.hits += len(keys) - len(todo)
        for k in range(0, len(todo), self.lm.batch):  # the cache file is written after every batch
            self._solve([tasks[i] for i in todo[k:k + self.lm.batch]], [keys[i] for i in todo[k:k + self.lm.batch]],
                        agent_cfg, search)
        out = [self.cache[k] for k in keys]
        self.counter.model_tokens += sum(o["tokens"] for o in out)
        self.counter.teacher_tokens += sum(words(s["thought"]) + words(s["code"]) for o in out for s in o["steps"])
        return [dict(o) for o in out]

    def _solve(self, tasks, keys, agent_cfg, search) -> None:
        from icmlkit.lib.distill_agent import loop

        runs = [loop.Run(t) for t in tasks]
        toks = [0] * len(tasks)
        codec = self.lm.codec
        try:
            for r in runs:
                r.ex = loop.make_executor(r.task, agent_cfg, search)

            def on_turn(j, ids):
                r = runs[j]
                toks[j] += len(ids)
                step = loop.execute(r, A.truncate_at_stop(codec.decode(ids)))
                if r.done or len(r.steps) >= agent_cfg.max_steps:
                    return None
                obs = A.render_observation(step["observation"])[len("Observation:"):].strip()
                return codec.mark["observation"] + codec.enc(obs) + self.turn_mark

            if runs:
                self.lm.episodes([self._ids(r.task["question"], []) for r in runs], on_turn)
        finally:
            loop.close(runs)
        for key, r, k in zip(keys, runs, toks):
            self.cache[key] = {"steps": r.steps, "final": r.final, "tokens": k}
        self._save()


def is_local_teacher(spec: str) -> bool:
    """A local model name of lib/hf (qwen2.5-coder-1.5b-instruct, smollm2, ...) or a model folder."""
    from icmlkit.lib.hf.models import MODEL_NAMES, QWEN_NAMES, SMOLLM2_NAMES

    s = str(spec)
    return s in (*MODEL_NAMES, *QWEN_NAMES, *SMOLLM2_NAMES) or Path(s).is_dir()


def load_teacher(spec: str, counter, *, max_new: int = 40, batch: int = 16, cache_path=None, device=None,
                 header: str = HEADER) -> LocalTeacher:
    """A :class:`LocalTeacher` of ``spec`` (a lib/hf model name or a model folder)."""
    from icmlkit.lib.distill_agent.model import TINY_MARK, load_student

    p = Path(str(spec))
    if p.is_dir() and (p / TINY_MARK).is_file():
        model, tok = load_student(str(p), device=device)
    else:
        from icmlkit.lib.hf import load_causal_lm

        lm = load_causal_lm(str(spec), device=device)
        model, tok = lm.model, lm.tokenizer
    model.eval()
    return LocalTeacher(HeaderLM(model, tok, header, max_new=max_new, batch=batch), counter, cache_path=cache_path)
