"""Content analysis: normalisation, instruction-likeness of untrusted text, overlap tests.

- :func:`normalise` renders values the same way whatever their JSON/YAML/Python rendering was
  (lower case, quotes and brackets dropped, whitespace collapsed), so content overlap is not
  defeated by formatting (method sheet, pitfalls).
- :func:`segments` splits untrusted text into lines/sentences and scores each for
  instruction-likeness (markers such as "ignore previous", imperative verbs at the start, addresses
  to the assistant). Consecutive candidate pieces form one **injection candidate segment**; the
  rest of the text stays with its observation. This segmentation is **reconstructed** (the paper
  names instruction-like untrusted content as the treatment; how it is delimited is not known).
- :func:`overlap` implements edge strategy (d): a value of at least ``min_overlap`` characters
  contained in the source text, or a coverage of its ``min_overlap``-character shingles >= the
  similarity threshold.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache

from icmlkit.lib.trace_injection.config import ACTION_VERBS, GENERIC_TOKENS, MARKER_RE, SYNONYMS

_WS = re.compile(r"\s+")
_PUNCT = re.compile(r"[\"'`{}\[\]]")
_TOKEN = re.compile(r"[a-z0-9][a-z0-9@._-]*[a-z0-9]|[a-z0-9]")
_IMPERATIVE = re.compile(r"^\W*(?:(?:please|kindly|now|first|then|also|and|just)[\s,]+)*(" + "|".join(ACTION_VERBS)
                         + r")\b", re.IGNORECASE)
_YOU = re.compile(r"\byou(r)?\b", re.IGNORECASE)
_IDENT = re.compile(r"[\d@/]|\w\.\w")
_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z<#\[])")


def normalise(v) -> str:
    """Canonical text of a value: JSON-dumped if structured, quotes/brackets dropped, lower case,
    whitespace collapsed."""
    if not isinstance(v, str):
        v = json.dumps(v, sort_keys=True, ensure_ascii=False)
    v = v.replace("\\n", " ").replace("\\t", " ")
    return _WS.sub(" ", _PUNCT.sub(" ", v.lower())).strip()


def tokens(text: str) -> set:
    return set(_TOKEN.findall(text.lower()))


def flat_values(obj) -> list[str]:
    """Every leaf value of an argument object, as text."""
    if isinstance(obj, dict):
        return [v for k, x in obj.items() if not str(k).startswith("_") for v in flat_values(x)]
    if isinstance(obj, (list, tuple)):
        return [v for x in obj for v in flat_values(x)]
    return [] if obj is None else [str(obj)]


def instruction_score(piece: str) -> float:
    """Instruction-likeness of one line or sentence in [0, 1] (reconstructed heuristic)."""
    s = piece.strip()
    if not s:
        return 0.0
    score = 0.0
    hits = len(MARKER_RE.findall(s))
    score += min(0.9, 0.6 * hits)
    if _IMPERATIVE.match(s):
        score += 0.45
    if _YOU.search(s):
        score += 0.15
    return min(1.0, score)


def scored_pieces(text: str, scorer=None) -> list[tuple[tuple[int, int], float]]:
    """((start, end), instruction score) of every line/sentence piece of ``text``; ``scorer(piece,
    score)`` (optional: the LLM judge, or the learned score of :mod:`.instruct`, which has a
    ``batch`` method and is called once per text) rescores them."""
    out = [((a, b), instruction_score(text[a:b])) for a, b in _pieces(text)]
    if scorer is not None and out:
        if hasattr(scorer, "batch"):  # the learned instruction score: all pieces at once
            new = scorer.batch([text[a:b] for (a, b), _ in out], [sc for _, sc in out])
            out = [(sp, float(v)) for (sp, _), v in zip(out, new)]
        else:
            out = [(sp, scorer(text[sp[0]:sp[1]], sc)) for sp, sc in out]
    return out


def _pieces(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the lines and sentences of ``text``."""
    out = []
    pos = 0
    for line in text.splitlines(keepends=True):
        start = pos
        pos += len(line)
        body = line.rstrip("\r\n")
        last = 0
        for m in _SENT.finditer(body):
            out.append((start + last, start + m.start()))
            last = m.end()
        out.append((start + last, start + len(body)))
    return [(a, b) for a, b in out if text[a:b].strip()]


_KEY = re.compile(r"^(\s*)(- )?[\w-]+:(\s|$)(.*)")


def unwrap(text: str) -> str:
    """Join continuation lines onto the line they continue, so a sentence wrapped by a YAML dump is
    one piece again: in YAML, a line indented deeper than the last ``key: value`` line (whose value is
    not empty) continues that value; in plain text, an indented line that is no list item continues
    the previous line. Escaped ``\\n`` in dumped Python/JSON strings become line breaks first."""
    text = re.sub(r"\\\n[ \t]*", "", text)  # YAML double-quoted folding: backslash at the line end
    text = text.replace("\\ ", " ").replace("\\n", "\n").replace("\\t", "\t")
    out: list[str] = []
    key_indent, key_value = None, False
    for line in text.split("\n"):
        ind = len(line) - len(line.lstrip(" \t"))
        body = line.strip()
        if out and body and key_indent is not None and key_value and ind > key_indent:
            out[-1] += " " + body
            continue
        m = _KEY.match(line)
        if m:
            key_indent = len(m.group(1)) + (2 if m.group(2) else 0)
            key_value = bool(m.group(4).strip())
        else:
            if out and body and ind > 0 and out[-1].strip() and not body.startswith("- ") and key_indent is None:
                out[-1] += " " + body
                continue
            if not body:
                key_indent = None
        out.append(line)
    return "\n".join(out)


def segments(text: str, threshold: float = 0.5, scorer=None, scored=None) -> list[dict]:
    """Injection-candidate segments of an untrusted text: a run starts at a piece scoring >=
    ``threshold`` and extends forward over pieces scoring >= 0.3 and short filler lines (hysteresis,
    so the goal sentence inside a marked block joins it); a strong piece carries the rest of its line. Returns [{"start", "end", "text", "score"}]. ``scorer`` (optional) rescores ambiguous pieces
    (the LLM judge); ``scored`` passes the pieces of :func:`scored_pieces` already computed."""
    scored = scored if scored is not None else scored_pieces(text, scorer)
    if not scored:
        return []
    spans = [sp for sp, _ in scored]
    scores = [sc for _, sc in scored]
    out, run = [], []

    def close():
        if run and max(scores[k] for k in run) >= threshold:
            a, b = spans[run[0]][0], spans[run[-1]][1]
            out.append({"start": a, "end": b, "text": text[a:b], "score": max(scores[k] for k in run)})

    # a candidate piece carries the rest of its line (the rest of the same field value) with it
    line_of = [text.count("\n", 0, a) for a, _ in spans]
    strong_line = None
    for k in range(len(scores)):
        if scores[k] >= threshold:
            strong_line = line_of[k]
        elif line_of[k] == strong_line and scores[k] < 0.3:
            scores[k] = 0.3
    # a run starts at a piece >= threshold and extends forward over pieces >= 0.3 and short fillers
    k = 0
    n = len(scores)
    while k < n:
        if scores[k] < threshold:
            k += 1
            continue
        run = [k]
        j, gap = k + 1, 0
        while j < n:
            if scores[j] >= 0.3:
                run.append(j)
                gap = 0
            elif gap < 2 and len(text[spans[j][0]:spans[j][1]]) < 40:
                gap += 1  # short filler lines ("Signed,", a name) inside a block
                run.append(j)
            else:
                break
            j += 1
        while scores[run[-1]] < 0.3:
            run.pop()
        close()
        k = run[-1] + 1
    return out


@lru_cache(maxsize=4096)
def _shingles(text: str, k: int) -> frozenset:
    return frozenset(text[i:i + k] for i in range(max(0, len(text) - k + 1)))


def overlap(value: str, source_norm: str, min_overlap: int = 10, similarity: float = 0.6) -> float:
    """Strength in [0, 1] with which the normalised ``value`` is taken from ``source_norm``: 1 when
    contained (length >= min_overlap), else the fraction of its min_overlap-shingles found in the
    source when that fraction >= ``similarity``, else 0."""
    if len(value) < min_overlap:
        return 0.0
    if value in source_norm:
        return 1.0
    # an identifier-like token of the value (IBAN, e-mail, URL, id: >= min_overlap characters with a
    # digit, '@', '.' or '/') found in the source is a >= min_overlap common substring that cannot be
    # a common word; for short values only (a long composite text is judged by its coverage)
    for tok in (value.split() if len(value) <= 100 else ()):
        tok = tok.strip(".,;:!?()")
        if len(tok) >= min_overlap and _IDENT.search(tok) and tok in source_norm:
            return 1.0
    mine = _shingles(value, min_overlap)
    if not mine:
        return 0.0
    cov = len(mine & _shingles(source_norm, min_overlap)) / len(mine)
    return cov if cov >= similarity else 0.0


def _expand(tok: str) -> set:
    out = {tok, tok.rstrip("s")}
    out.update(SYNONYMS.get(tok, ()))
    out.update(SYNONYMS.get(tok.rstrip("s"), ()))
    return out


@lru_cache(maxsize=4096)
def function_tokens(function: str) -> tuple:
    """The content tokens of a function name (``send_money`` -> send, money), generic ones dropped."""
    parts = [p for p in re.split(r"[^a-z0-9]+", function.lower()) if p]
    keep = [p for p in parts if p not in GENERIC_TOKENS]
    return tuple(keep or parts)


def function_match(function: str, text_tokens: set) -> float:
    """Fraction of the function's content tokens named (or a synonym named) in a text."""
    toks = function_tokens(function)
    if not toks:
        return 0.0
    norm = {t.rstrip("s") for t in text_tokens} | text_tokens
    hit = sum(1 for t in toks if _expand(t) & norm)
    return hit / len(toks)


_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")


def _date_named(v: str, text_tokens: set) -> bool:
    """An ISO date named in words ("the 1st to the 5th of May 2024"): year, month name and day (as a
    number or an ordinal) all among the text's tokens."""
    m = _DATE.match(v)
    if not m:
        return False
    y, mo, d = m.group(1), int(m.group(2)), int(m.group(3))
    if not 1 <= mo <= 12:
        return False
    month = _MONTHS[mo - 1]
    suffix = "th" if 11 <= d % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(d % 10, "th")
    days = {str(d), f"{d}{suffix}", f"{d:02d}"}
    return y in text_tokens and (month in text_tokens or month[:3] in text_tokens) and bool(days & text_tokens)


def value_in(value: str, text_norm: str, text_tokens: set) -> bool:
    """A (possibly short) argument value named in a text: whole-token match for short values,
    containment for longer ones; ISO dates also when written in words."""
    v = normalise(value)
    if not v:
        return False
    if _date_named(v, text_tokens):
        return True
    if len(v) >= 6:
        return v in text_norm
    return v in text_tokens
