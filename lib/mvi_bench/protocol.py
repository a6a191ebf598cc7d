"""The evaluation protocol: seeded option permutations, the prompt, and answer parsing.

1. Options are shuffled with a permutation seeded by ``(seed, pair id)`` and labelled A, B, ...;
   both images of a pair get the SAME permutation, so only the image differs. (The official
   scripts draw an unseeded ``np.random.permutation`` per item, so their MVI-S is not reproducible.)
   With circular evaluation every cyclic shift of that permutation is asked too.
2. Prompt (the official builder, re-implemented): ``question + "\\nChoices:\\n" + "A. opt"`` lines
   ``+ "\\nAnswer with the letter from the given choices directly."``; image first, then the text,
   in one user turn; greedy decoding, 5 new tokens.
3. Parsing, ``robust`` (default): an exact letter reply > ``Answer: X`` / ``(X)`` / ``X.`` at the start >
   a unique option text found in the reply > invalid (counted wrong, rate reported). ``official``:
   the evaluation scripts' rule, the first word-bounded capital A-D anywhere ("A cat ..." parses as A;
   no letter is invalid here, where the official ``findall(...)[0]`` crashes); ``official-extract``:
   the answers of the official utils.extract_choice_letter (any stray A-D letter counts, so
   "I cannot tell" parses as C). Both are this project's own character scans, written from the
   behaviour (no text of the unlicensed official repository is here); the parity test
   (tests/test_parity_mvi_bench.py) checks them against the official outputs on 22 replies.
   A letter beyond the item's options is invalid.
"""
from __future__ import annotations

import hashlib
import random
import re

from icmlkit.lib.mvi_bench.config import INSTRUCTION, LETTERS

TEMPLATE = "{question}\nChoices:\n{options}\n" + INSTRUCTION


def template_hash(system_prompt: str = "") -> str:
    """A short hash of the prompt template (and system prompt) for cache keys and manifests."""
    return hashlib.sha256((TEMPLATE + "\x00" + system_prompt).encode()).hexdigest()[:12]


def permutation(seed: int, pair_id: str, k: int) -> list[int]:
    """The option order of a pair: ``perm[j]`` = index (in ``choices``) of the option shown as letter j.

    Seeded by ``(seed, pair_id)`` only, so both images of a pair and every run with that seed get it."""
    digest = hashlib.sha256(f"mvi-perm/{int(seed)}/{pair_id}".encode()).digest()
    perm = list(range(k))
    random.Random(int.from_bytes(digest[:8], "little")).shuffle(perm)
    return perm


def rotations(perm: list[int], circular: bool) -> list[list[int]]:
    """The permutations asked: ``perm`` alone, or all its cyclic shifts (circular evaluation)."""
    if not circular:
        return [list(perm)]
    return [perm[r:] + perm[:r] for r in range(len(perm))]


def build_prompt(question: str, options: list[str]) -> str:
    """The official prompt text for the options in display order."""
    lines = "\n".join(f"{LETTERS[j]}. {o}" for j, o in enumerate(options))
    return TEMPLATE.format(question=question, options=lines)


_OPTION_LINE = re.compile(r"^([A-H])\. (.*)$")


def options_from_prompt(prompt: str) -> tuple[str, list[str]]:
    """(question, options) back from a prompt made by :func:`build_prompt` (used by servers that
    wrap a local scorer behind the HTTP protocol)."""
    head, sep, rest = prompt.partition("\nChoices:\n")
    if not sep:
        return prompt, []
    opts = []
    for line in rest.split("\n"):
        m = _OPTION_LINE.match(line)
        if m and m.group(1) == LETTERS[len(opts)]:
            opts.append(m.group(2))
        elif opts:
            break
    return head, opts


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s]", " ", s.lower())).strip()


_CHOICES = "ABCD"
_GLUE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")  # characters that make a letter part of a token


def _is_word_char(ch: str) -> bool:
    """A Unicode word character: alphanumeric or the underscore."""
    return ch.isalnum() or ch == "_"


def _alone(s: str, i: int, joins) -> bool:
    """True when neither neighbour of ``s[i]`` satisfies ``joins`` (the string's ends count as free)."""
    return not ((i > 0 and joins(s[i - 1])) or (i + 1 < len(s) and joins(s[i + 1])))


def parse_official(reply: str, k: int) -> str | None:
    """The official evaluation scripts' rule (eval_qwen2.5vl.py), as a scan: the first capital A-D
    (case kept) with no word character (letter, digit, underscore) on either side; None when there is
    none (where the official ``findall(...)[0]`` crashes)."""
    s = str(reply or "")
    return next((ch for i, ch in enumerate(s) if ch in _CHOICES and _alone(s, i, _is_word_char)), None)


def _after_answer(s: str) -> str | None:
    """The A-D that follows the first 'ANSWER' whose run of colons and whitespace ends on one."""
    at = s.find("ANSWER")
    while at >= 0:
        j = at + len("ANSWER")
        while j < len(s) and (s[j] == ":" or s[j].isspace()):
            j += 1
        if j < len(s) and s[j] in _CHOICES:
            return s[j]
        at = s.find("ANSWER", at + 1)
    return None


def parse_official_extract(reply: str, k: int) -> str | None:
    """The answers of the official extractor (evaluation/utils.py ``extract_choice_letter``), by our
    own scan of the upper-cased, stripped reply, in this order of preference: the first A-D with no
    ASCII letter, digit or underscore beside it; the A-D after 'ANSWER' (colons and whitespace
    between); the first A-D followed by a decimal digit; the first A-D anywhere ("I cannot tell"
    -> C). (The official cascade's word-bounded step can never fire after the first one fails: a
    letter with no word character beside it has no ASCII one either.) None only when the reply holds
    no A-D at all."""
    s = str(reply or "").strip().upper()
    spots = [i for i, ch in enumerate(s) if ch in _CHOICES]
    if not spots:
        return None
    for i in spots:
        if _alone(s, i, _GLUE.__contains__):
            return s[i]
    letter = _after_answer(s)
    if letter is not None:
        return letter
    for i in spots:
        if i + 1 < len(s) and s[i + 1].isdecimal():
            return s[i]
    return s[spots[0]]


def parse_robust(reply: str, options: list[str]) -> str | None:
    """exact letter > 'Answer: X' / '(X)' / 'X.' or 'X)' at the start > unique option text > None."""
    k = len(options)
    allowed = LETTERS[:k]
    text = (reply or "").strip()
    if not text:
        return None
    bare = text.strip(" \t\n.:;,!*\"'`")
    if len(bare) == 1 and bare.upper() in allowed:
        return bare.upper()
    m = re.search(rf"(?i)\banswer\s*(?:is)?\s*[:：]?\s*\(?\s*([{allowed}])\b\)?", text)
    if m and m.group(1).upper() in allowed and (m.group(1).isupper() or len(text) < 40):
        return m.group(1).upper()
    m = re.search(rf"\(([{allowed}])\)", text)
    if m:
        return m.group(1)
    m = re.match(rf"^\s*\**([{allowed}])[.):](?:\s|$)", text)
    if m:
        return m.group(1)
    t = _norm(text)
    hits = [j for j, o in enumerate(options) if _norm(o) and re.search(rf"(?:^| ){re.escape(_norm(o))}(?:$| )", t)]
    if len(hits) > 1:  # drop an option whose text is part of another matched option's text
        hits = [j for j in hits if not any(i != j and _norm(options[j]) in _norm(options[i]) for i in hits)]
    if len(hits) == 1:
        return LETTERS[hits[0]]
    return None


def parse_reply(reply: str, options: list[str], parser: str = "robust") -> str | None:
    """The letter a reply chooses, or None (invalid)."""
    if parser in ("official", "official-extract"):
        fn = parse_official if parser == "official" else parse_official_extract
        letter = fn(reply, len(options))
        return letter if letter is not None and LETTERS.index(letter) < len(options) else None
    return parse_robust(reply, options)
