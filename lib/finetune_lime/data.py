"""Task data: JSONL / CSV rows of (task, prompt, target), the conflicting synthetic tasks of the
benchmark (task identity only in the prompt), the toy pretraining mixture, and tokenisation.

Prompt formats (character level, so the toy tokenizer covers them): ``"<code> <operand>="`` with a
two-character task code, e.g. ``"sa 3142="`` -> ``"1234"`` (sort ascending), ``"sd 3142="`` -> ``"4321"``,
``"ad 12 34="`` -> ``"46"``, ``"sb 34 12="`` -> ``"22"``, ``"c1 abc="`` -> ``"bcd"`` (Caesar +1), ...
The pretraining mixture of ``pretrain-toy`` uses other codes (``C:`` copy, ``R:`` reverse, ``S:`` sort,
``P:`` add) so the fine-tuning tasks are new to the backbone [reconstructed task design].
"""
from __future__ import annotations

import csv
import io
import string
from dataclasses import dataclass

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.io import display_name, open_text, read_jsonl, suffix

COLUMNS = ("task", "prompt", "target")
CODES = {"sort_asc": "sa", "sort_desc": "sd", "add": "ad", "sub": "sb", "caesar1": "c1", "caesar2": "c2",
         "caesar3": "c3", "caesar_m1": "cm", "reverse": "rv", "rotate": "ro", "max": "mx", "min": "mn"}
LETTERS = string.ascii_lowercase
VOCAB_CHARS = string.digits + string.ascii_lowercase + string.ascii_uppercase[:8] + " :=+-"


@dataclass
class Row:
    task: str
    prompt: str
    target: str


def read_rows(path, *, need_target: bool = True) -> list[Row]:
    """Rows of a .jsonl or .csv file (``-``: JSON Lines on stdin) with task, prompt, target (target
    optional with ``need_target=False``). Errors name the file, the line and the field."""
    where = display_name(path)
    fmt = ".jsonl" if str(path) == "-" else suffix(path)
    want = COLUMNS if need_target else ("task", "prompt")
    rows: list[Row] = []
    if fmt == ".jsonl":
        items = read_jsonl(path, "task rows (JSON Lines)")
    elif fmt == ".csv":
        with open_text(path) as fh:
            text = fh.read()
        if "\x00" in text:
            raise InputError("is not a text CSV file (NUL bytes)", where)
        reader = csv.DictReader(io.StringIO(text))
        header = reader.fieldnames or []
        missing = [c for c in want if c not in header]
        if missing:
            raise InputError(f"CSV header lacks column(s) {', '.join(missing)} (needs {', '.join(want)}); found "
                             f"{', '.join(map(str, header)) or 'no header'}", where)
        items = []
        try:
            for i, r in enumerate(reader):
                items.append((i + 2, r))
        except csv.Error as exc:
            raise InputError(f"not a readable CSV ({exc})", where) from None
    else:
        raise InputError("expected a .jsonl or .csv file of task, prompt, target rows", where)
    for ln, r in items:
        vals = {}
        for c in COLUMNS:
            v = r.get(c)
            if v is None or (isinstance(v, str) and v == "" and c != "target"):
                if c in want:
                    raise InputError(f"row has no {c!r} field (needs {', '.join(want)})", where, ln)
                v = ""
            if not isinstance(v, (str, int, float)) or isinstance(v, bool):
                raise InputError(f"field {c!r} must be a string, not {type(v).__name__}", where, ln)
            vals[c] = str(v)
        if need_target and vals["target"] == "":
            raise InputError("row has an empty 'target' field", where, ln)
        rows.append(Row(vals["task"], vals["prompt"], vals["target"]))
    if not rows:
        raise InputError("holds no rows", where)
    return rows


def write_task_rows(path, rows: list[Row]) -> None:
    from icmlkit.lib.core.io import write_rows

    write_rows(path, [{"task": r.task, "prompt": r.prompt, "target": r.target} for r in rows], list(COLUMNS))


# --------------------------------------------------------------------------- synthetic tasks


def _caesar(s: str, k: int) -> str:
    return "".join(LETTERS[(LETTERS.index(c) + k) % 26] for c in s)


def make_example(task: str, rng, min_len: int, max_len: int) -> Row:
    """One row of ``task`` drawn from the numpy generator ``rng``."""
    n = int(rng.integers(min_len, max_len + 1))
    digits = "".join(str(int(d)) for d in rng.integers(0, 10, n))
    letters = "".join(LETTERS[int(i)] for i in rng.integers(0, 26, n))
    code = CODES[task]
    if task in ("sort_asc", "sort_desc"):
        tgt = "".join(sorted(digits, reverse=task == "sort_desc"))
        return Row(task, f"{code} {digits}=", tgt)
    if task in ("add", "sub"):
        hi = 10 ** max(1, min(n, 4)) - 1
        a, b = int(rng.integers(0, hi + 1)), int(rng.integers(0, hi + 1))
        if task == "sub" and a < b:
            a, b = b, a
        return Row(task, f"{code} {a} {b}=", str(a + b if task == "add" else a - b))
    if task.startswith("caesar"):
        k = {"caesar1": 1, "caesar2": 2, "caesar3": 3, "caesar_m1": -1}[task]
        return Row(task, f"{code} {letters}=", _caesar(letters, k))
    if task == "reverse":
        return Row(task, f"{code} {letters}=", letters[::-1])
    if task == "rotate":
        return Row(task, f"{code} {letters}=", letters[1:] + letters[:1])
    if task in ("max", "min"):
        return Row(task, f"{code} {digits}=", max(digits) if task == "max" else min(digits))
    raise UsageError(f"unknown task {task!r}")


def make_tasks(cfg, *, seed: int) -> list[Row]:
    """``cfg.n_per_task`` rows of each task of ``cfg.tasks`` (TasksConfig), interleaved in one stream."""
    from icmlkit.lib.core.runtime import numpy_rng

    cfg.check()
    rng = numpy_rng(seed, "tasks")
    per = [[make_example(t, rng, cfg.min_len, cfg.max_len) for _ in range(cfg.n_per_task)] for t in cfg.tasks]
    return [per[j][i] for i in range(cfg.n_per_task) for j in range(len(per))]


PRETRAIN = {"copy": "C:", "reverse": "R:", "sort": "S:", "add": "P:"}


def pretrain_example(task: str, rng, max_len: int) -> Row:
    n = int(rng.integers(2, max_len + 1))
    pool = string.digits if task in ("sort", "add") else string.digits + LETTERS
    s = "".join(pool[int(i)] for i in rng.integers(0, len(pool), n))
    code = PRETRAIN[task]
    if task == "copy":
        return Row(task, f"{code}{s}=", s)
    if task == "reverse":
        return Row(task, f"{code}{s}=", s[::-1])
    if task == "sort":
        return Row(task, f"{code}{s}=", "".join(sorted(s)))
    a, b = int(rng.integers(0, 10 ** min(n, 4))), int(rng.integers(0, 10 ** min(n, 4)))
    return Row(task, f"{code}{a}+{b}=", str(a + b))


# --------------------------------------------------------------------------- tokenisation


def char_tokenizer():
    """The toy backbone's character-level tokenizer (a transformers PreTrainedTokenizerFast that
    save_pretrained / AutoTokenizer round-trip): <pad>, <s>, </s>, <unk> and :data:`VOCAB_CHARS`."""
    from icmlkit.lib.hf.tiny import word_tokenizer

    return word_tokenizer(["<pad>", "<s>", "</s>", "<unk>", *VOCAB_CHARS], unk="<unk>", pad="<pad>", bos="<s>",
                          eos="</s>", split="chars", decoder="fuse")


@dataclass
class Encoded:
    """Token ids of each row: ``prompt`` ids, ``target`` ids (with the end-of-sequence token)."""

    prompt: list
    target: list
    tasks: list


def encode_rows(tokenizer, rows: list[Row], *, max_length: int | None = None, where: str = "data") -> Encoded:
    eos = tokenizer.eos_token_id
    if eos is None:
        raise UsageError("the model's tokenizer has no end-of-sequence token")
    P, Tg = [], []
    for i, r in enumerate(rows):
        p = list(tokenizer(r.prompt, add_special_tokens=False)["input_ids"])
        bos = tokenizer.bos_token_id
        if bos is not None and getattr(tokenizer, "add_bos_token", False):
            p = [bos] + p
        t = list(tokenizer(r.target, add_special_tokens=False)["input_ids"]) + [eos] if r.target else []
        if not p:
            raise InputError(f"row {i + 1}: the prompt has no tokens", where)
        if max_length is not None and len(p) + len(t) > max_length:
            raise InputError(f"row {i + 1}: prompt + target is {len(p) + len(t)} tokens, more than --max-length "
                             f"{max_length}", where)
        P.append(p)
        Tg.append(t)
    return Encoded(P, Tg, [r.task for r in rows])


def teacher_batch(enc: Encoded, idx: list[int], pad: int, length: int | None = None):
    """(ids, mask, labels) of rows ``idx``: prompt + target right-padded to ``length`` (default the
    longest); labels -100 except the target tokens (shifted by the caller)."""
    from icmlkit.lib.hf.tiny import lm_batch

    seqs = [enc.prompt[i] + enc.target[i] for i in idx]
    targets = [[0] * len(enc.prompt[i]) + [1] * len(enc.target[i]) for i in idx]
    ids, mask, target = lm_batch(seqs, targets, pad, length=length)
    return ids, mask, ids.masked_fill(target == 0, -100)
