"""Synthetic tasks with known evidence (method sheet: the demonstration), and the toy vocabulary.

- NIAH-KV: 40-80 lines ``key v1 v2 v3 v4`` and a query ``? key``; the target is the 4-token value
  (a multi-token target); gold = the needle line.
- Variable tracking with a written chain (RULER-VT style, re-implemented): ``X1 = 47 .``
  ``X2 = X1 .`` ``X3 = X2 .`` among distractor chains and filler sentences; the target is the chain
  ``X3 = X2 = X1 = 47`` (reasoning span) then ``ANSWER 47`` (output span: the final number);
  gold = the 3 assignment statements.

The toy style writes an assignment without "=" (``X2 X1 .``; the chain ``X3 X2 X1 47``), so that
each chain step is a single-token induction lookup a 3-layer toy decoder learns (measured: with
``X2 = X1`` as three tokens, 6000 steps of the earlier recipe and VT-only probes stayed at chance
among the chains). ``style="text"`` (SmolLM2) is unchanged: ``X2 = X1``, ``X3 = X2 = X1 = 47``.

``style="ruler"`` (multi-hop variable tracking for an instruction-tuned model, Qwen2.5): RULER-VT's
wording re-implemented -- ``VAR QKZVB = 48213.`` / ``VAR HXLTA = VAR QKZVB.`` (5-letter names,
5-digit values), ``--hops`` assignments per chain (the first binds the number), the other chains
distractors with their own numbers, "The grass is green."-style noise sentences, then a
chain-of-thought question: write the chain ``VAR C = VAR B = VAR A = 48213`` on one line, then
``Answer: 48213``. The reference target is that chain and answer (reasoning span = the chain,
output span = the final number); a model's own reply is judged by :func:`judge_vt_reply`.

Rows: ``{id, task, prompt, target, output_span, reasoning_span, gold_spans, span_unit: "char",
answer}``; spans are inclusive character offsets into ``prompt + target`` (tokenizer-independent;
``trace``/``eval`` map them to tokens). ``style="toy"`` uses the word vocabulary of ``train-toy``'s
tokenizer (one word = one token); ``style="text"`` writes plain text for real tokenizers
(SmolLM2). The templates are [reconstructed] (RULER's are re-implemented, not copied).
"""
from __future__ import annotations

SPECIALS = ["[PAD]", "[UNK]", "[EOS]"]
PUNCT = [".", "=", "?", "ANSWER", "FILL"]
N_KEYS, N_VALUES, N_VARS, N_NUMBERS = 80, 32, 40, 40
N_TOY_VALUES = N_KEYS * 4  # value tokens in the toy vocabulary; the generator draws from the first N_VALUES
# (a unique-value variant was tried: 2000 mixed steps learned nothing either; the trained toy keeps its vocabulary)
FILLER = ["the", "sky", "is", "blue", "grass", "green", "and", "so", "on", "we"]


def toy_vocab() -> list[str]:
    """The toy tokenizer's words, id = index (498 words)."""
    return (SPECIALS + PUNCT + [f"k{i}" for i in range(N_KEYS)] + [f"v{i}" for i in range(N_TOY_VALUES)]
            + [f"X{i}" for i in range(N_VARS)]
            + [str(10 + i) for i in range(N_NUMBERS)] + FILLER)


class _Text:
    """Builds a text from pieces while recording inclusive character spans."""

    def __init__(self, sep: str = " "):
        self.parts: list[str] = []
        self.len = 0
        self.sep = sep

    def add(self, piece: str, glue: bool = False) -> tuple[int, int]:
        if self.parts and not glue:
            self.parts.append(self.sep)
            self.len += len(self.sep)
        start = self.len
        self.parts.append(piece)
        self.len += len(piece)
        return start, self.len - 1

    def text(self) -> str:
        return "".join(self.parts)


def _niah(rng, i: int, lines_min: int, lines_max: int, style: str) -> dict:
    n_lines = int(rng.integers(lines_min, lines_max + 1))
    n_lines = min(n_lines, N_KEYS)
    keys = rng.choice(N_KEYS, size=n_lines, replace=False)
    vals = rng.integers(0, N_VALUES, size=(n_lines, 4))
    needle = int(rng.integers(0, n_lines))
    p = _Text(" " if style == "toy" else "")
    gold = None
    if style == "text":
        p.add("Below are records of keys and their values.\n")
    for li in range(n_lines):
        if style == "toy":
            a, _ = p.add(f"k{keys[li]}")
            for v in vals[li]:
                _, b = p.add(f"v{v}")
        else:
            a, _ = p.add(f"key{keys[li]}:", glue=True)
            for v in vals[li]:
                _, b = p.add(f" {10 + v}", glue=True)
            p.add("\n", glue=True)
        if li == needle:
            gold = [a, b]
    if style == "toy":
        p.add("?")
        p.add(f"k{keys[needle]}")
        answer = " ".join(f"v{v}" for v in vals[needle])
    else:
        p.add(f"What are the four values of key{keys[needle]}?\nAnswer:", glue=True)
        answer = " ".join(str(10 + v) for v in vals[needle])
    prompt = p.text()
    target = " " + answer
    out = [len(prompt) + 1, len(prompt) + len(target) - 1]
    return {"id": f"niah-{i}", "task": "niah-kv", "prompt": prompt, "target": target, "output_span": out,
            "reasoning_span": None, "gold_spans": [gold], "span_unit": "char", "answer": answer}


RULER_NOISE = ["The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.",
               "There and back again."]
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _ruler_names(rng, n: int) -> list[str]:
    """``n`` distinct random 5-letter upper-case names (RULER-VT's variable names)."""
    out: list[str] = []
    while len(out) < n:
        name = "".join(LETTERS[int(j)] for j in rng.integers(0, 26, size=5))
        if name not in out:
            out.append(name)
    return out


def _vt_ruler(rng, i: int, chains: int, hops: int, fillers: int) -> dict:
    """Multi-hop variable tracking with a chain-of-thought question (module docstring, ``ruler``)."""
    names = _ruler_names(rng, chains * hops)
    nums = []
    while len(nums) < chains:
        v = int(rng.integers(10000, 100000))
        if v not in nums:
            nums.append(v)
    chain_vars = [names[c * hops:(c + 1) * hops] for c in range(chains)]
    order = list(rng.permutation([c for c in range(chains) for _ in range(hops)]))
    pos = [0] * chains
    queue = []
    for c in order:
        queue.append(("stmt", int(c), pos[c]))
        pos[c] += 1
    for _ in range(fillers):
        queue.insert(int(rng.integers(0, len(queue) + 1)), ("fill", None, None))
    p = _Text(" ")
    p.add("Memorize the variable assignments below. A variable is assigned either a number or the value of "
          "another variable.\n", glue=True)
    gold = []
    first = True
    for kind, c, h in queue:
        glue = first
        first = False
        if kind == "fill":
            p.add(RULER_NOISE[int(rng.integers(0, len(RULER_NOISE)))], glue=glue)
            continue
        rhs = str(nums[c]) if h == 0 else f"VAR {chain_vars[c][h - 1]}"
        a, b = p.add(f"VAR {chain_vars[c][h]} = {rhs}.", glue=glue)
        if c == 0:
            gold.append([a, b - 1])  # the statement without its full stop
    q = chain_vars[0][-1]
    p.add(f"\nQuestion: what is the value of VAR {q}? Follow the assignments back from VAR {q}: first write "
          "the chain on one line, as in VAR C = VAR B = VAR A = 12345, then write \"Answer:\" and the number.",
          glue=True)
    prompt = p.text()
    cot = " = ".join([f"VAR {v}" for v in reversed(chain_vars[0])] + [str(nums[0])])
    target = cot + "\nAnswer: " + str(nums[0])
    base = len(prompt)
    out = [base + len(target) - len(str(nums[0])), base + len(target) - 1]
    return {"id": f"vt-{i}", "task": "vt", "prompt": prompt, "target": target, "output_span": out,
            "reasoning_span": [base, base + len(cot) - 1], "gold_spans": gold, "span_unit": "char",
            "answer": str(nums[0]), "hops": hops, "chain": [f"VAR {v}" for v in reversed(chain_vars[0])]}


def judge_vt_reply(row: dict, reply: str) -> dict | None:
    """A ``ruler`` VT row whose target is the model's own ``reply`` when the reply is correct, else
    None. Correct: the first number after ``Answer:`` (else the reply's last number) is the queried
    value. The target is cut after that number; output span = its characters, reasoning span = the
    reply before it (the written chain) when that holds a word. ``chain_ok`` records whether the
    reply also writes every variable of the queried chain [reconstructed: the judging rule]."""
    import re

    m = re.search(r"Answer\s*:\s*\**\s*(\d+)", reply)
    if m is None:
        nums = list(re.finditer(r"(?<![\w.])\d+(?!\w)", reply))
        if not nums:
            return None
        a0, a1, val = nums[-1].start(), nums[-1].end(), nums[-1].group()
    else:
        a0, a1, val = m.start(1), m.end(1), m.group(1)
    if val != row["answer"]:
        return None
    target = reply[:a1]
    base = len(row["prompt"])
    lead = target[:a0]
    chain_ok = all(v in lead for v in row.get("chain", []))
    return dict(row, id=f"{row['id']}-own", target=target, output_span=[base + a0, base + a1 - 1],
                reasoning_span=[base, base + a0 - 1] if re.search(r"\w", lead) else None, chain_ok=chain_ok)


def _vt(rng, i: int, chains: int, hops: int, fillers: int, style: str) -> dict:
    if style == "ruler":
        return _vt_ruler(rng, i, chains, hops, fillers)
    n_vars = chains * hops
    names = rng.choice(N_VARS, size=n_vars, replace=False)
    nums = rng.choice(N_NUMBERS, size=chains, replace=False) + 10
    # statements of every chain in order; chains interleaved at random, fillers sprinkled in
    chain_vars = [list(names[c * hops:(c + 1) * hops]) for c in range(chains)]
    queue = []
    pos = [0] * chains
    order = []
    for c in range(chains):
        order += [c] * hops
    order = list(rng.permutation(order))
    for c in order:
        queue.append(("stmt", c, pos[c]))
        pos[c] += 1
    for _ in range(fillers):
        queue.insert(int(rng.integers(0, len(queue) + 1)), ("fill", None, None))
    p = _Text(" ")
    if style == "text":
        p.add("Track the variables.")
    gold = []
    for kind, c, h in queue:
        if kind == "fill":
            words = [FILLER[int(j)] for j in rng.integers(0, len(FILLER), size=4)]
            p.add(" ".join(words))
            p.add(".")
            continue
        var = f"X{chain_vars[c][h]}"
        rhs = str(nums[c]) if h == 0 else f"X{chain_vars[c][h - 1]}"
        a, _ = p.add(var)
        if style == "text":
            p.add("=")
        _, b = p.add(rhs)
        p.add(".")
        if c == 0:
            gold.append([a, b])
    q = f"X{chain_vars[0][-1]}"
    p.add("?")
    p.add(q)
    prompt = p.text()
    chain = [f"X{v}" for v in reversed(chain_vars[0])] + [str(nums[0])]
    cot = " ".join(chain) if style == "toy" else " = ".join(chain)
    target = " " + cot + " ANSWER " + str(nums[0])
    base = len(prompt)
    reasoning = [base + 1, base + len(cot)]
    out = [base + len(target) - len(str(nums[0])), base + len(target) - 1]
    return {"id": f"vt-{i}", "task": "vt", "prompt": prompt, "target": target, "output_span": out,
            "reasoning_span": reasoning, "gold_spans": gold, "span_unit": "char", "answer": str(nums[0])}


def make_task(kind: str, cfg, *, seed: int = 0) -> list[dict]:
    """``cfg.n`` rows of task ``kind`` (niah-kv or vt), deterministic in ``seed``."""
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.core.runtime import numpy_rng

    rng = numpy_rng(seed, f"task/{kind}/{cfg.style}")
    if kind == "niah-kv":
        style = "text" if cfg.style == "ruler" else cfg.style
        return [_niah(rng, i, cfg.lines_min, cfg.lines_max, style) for i in range(cfg.n)]
    if kind == "vt":
        if cfg.chains * cfg.hops > N_VARS and cfg.style != "ruler":
            raise UsageError(f"--chains x --hops must be <= {N_VARS} variables")
        return [_vt(rng, i, cfg.chains, cfg.hops, cfg.fillers, cfg.style) for i in range(cfg.n)]
    raise UsageError(f"task must be niah-kv or vt, not {kind!r}")


def pad_chain(row: dict, m: int) -> dict:
    """A copy of a vt/niah row whose target is padded with filler steps to about ``m`` words before
    the answer (the timing curve: the reasoning span grows, the output span stays)."""
    ans = row["answer"].split()[-1]
    filler = " ".join(["FILL"] * max(0, m - 2))
    target = " " + filler + " ANSWER " + ans if filler else " ANSWER " + ans
    base = len(row["prompt"])
    out = [base + len(target) - len(ans), base + len(target) - 1]
    r = dict(row, target=target, output_span=out,
             reasoning_span=[base + 1, base + len(filler)] if filler else None, id=f"{row['id']}-m{m}")
    return r
