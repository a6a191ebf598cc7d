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
from bisect import bisect_right
from functools import lru_cache

from icmlkit.lib.trace_injection.config import ACTION_VERBS, GENERIC_TOKENS, MARKER_RE, SYNONYMS
from icmlkit.lib.trace_injection.stem import stem, stem_all

_PUNCT_SPACE = str.maketrans({c: " " for c in "\"'`{}[]"})  # quotes and brackets -> a space
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
    # str.split() splits on exactly the characters the regular expression \s matches (str.isspace)
    return " ".join(v.lower().translate(_PUNCT_SPACE).split())


def tokens(text: str) -> set:
    return set(_TOKEN.findall(text.lower()))


def flat_values(obj) -> list[str]:
    """Every leaf value of an argument object, as text."""
    if isinstance(obj, dict):
        return [v for k, x in obj.items() if not str(k).startswith("_") for v in flat_values(x)]
    if isinstance(obj, (list, tuple)):
        return [v for x in obj for v in flat_values(x)]
    return [] if obj is None else [str(obj)]


def instruction_score(piece: str, markers: bool = True, you: bool = True) -> float:
    """Instruction-likeness of one line or sentence in [0, 1] (reconstructed heuristic). ``markers`` /
    ``you`` False: the caller knows the text holding the piece has no marker / no "you" (a piece is a
    line or sentence bounded by whitespace, so a match inside it is a match in the text)."""
    s = piece.strip()
    if not s:
        return 0.0
    score = 0.0
    if markers:
        hits = len(MARKER_RE.findall(s))
        score += min(0.9, 0.6 * hits)
    if _IMPERATIVE.match(s):
        score += 0.45
    if you and _YOU.search(s):
        score += 0.15
    return min(1.0, score)


# a literal every branch of config.MARKERS needs (lower case), and the characters that sre's
# case-insensitive matching folds onto ASCII letters (with one of them present no shortcut is taken)
_MARKER_LITERALS = ("<information>", "</information>", "ignore", "disregard", "###", "system", "todo", "important",
                    "before you", "assistant", "model", "agent", "new instruction")
_FOLDS = re.compile("[\u0130\u0131\u017f\u212a]")


def may_have_marker(text: str) -> bool:
    """False only when no marker of :data:`.config.MARKER_RE` can occur in ``text`` (none of the literals
    its branches need is in the lower-cased text): a fast exact test before the regular expression."""
    if _FOLDS.search(text):
        return MARKER_RE.search(text) is not None
    low = text.lower()
    return any(w in low for w in _MARKER_LITERALS) and MARKER_RE.search(text) is not None


def _holding(spans: list, low: str, words) -> list:
    """For each (start, end) span of ``low`` (in text order), whether one of ``words`` occurs wholly
    inside it (every occurrence found, overlapping ones too, with str.find)."""
    hits = sorted((i, i + len(w)) for w in words for i in _find_all(low, w))
    out, k = [], 0
    for a, b in spans:
        while k < len(hits) and hits[k][0] < a:
            k += 1
        j = k
        while j < len(hits) and hits[j][0] < b and hits[j][1] > b:
            j += 1
        out.append(j < len(hits) and hits[j][0] < b)
    return out


def _find_all(low: str, w: str):
    i = low.find(w)
    while i >= 0:
        yield i
        i = low.find(w, i + 1)


def scored_pieces(text: str, scorer=None) -> list[tuple[tuple[int, int], float]]:
    """((start, end), instruction score) of every line/sentence piece of ``text``; ``scorer(piece,
    score)`` (optional: the LLM judge, or the learned score of :mod:`.instruct`, which has a
    ``batch`` method and is called once per text) rescores them. The marker and "you" patterns run
    only on the pieces that hold one of the literals they need (exact: a match inside a piece holds
    the literal; the lower-cased text keeps the positions unless a character of ``_FOLDS`` is in it)."""
    spans = _pieces(text)
    mk, yo = may_have_marker(text), _YOU.search(text) is not None
    if (mk or yo) and not _FOLDS.search(text):
        low = text.lower()
        mks = _holding(spans, low, _MARKER_LITERALS) if mk else [False] * len(spans)
        yos = _holding(spans, low, ("you",)) if yo else [False] * len(spans)
        out = [((a, b), instruction_score(text[a:b], m, y)) for (a, b), m, y in zip(spans, mks, yos)]
    else:
        out = [((a, b), instruction_score(text[a:b], mk, yo)) for a, b in spans]
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
    line_of, line, last = [], 0, 0
    for a, _ in spans:  # the line of each piece (the pieces are in text order: counted once, not per piece)
        line += text.count("\n", last, a)
        last = a
        line_of.append(line)
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


def _shingles(text: str, k: int) -> dict:
    """The ``k``-character shingles of ``text`` as the keys of a dict (values None): a dict holding only strings
    is never tracked by the garbage collector, a set is (the shingle sets of every text and value of a batch
    made each full collection visit millions of strings); compare them through ``.keys()``."""
    return dict.fromkeys([text[i:i + k] for i in range(max(0, len(text) - k + 1))])


_WHOLE_WORD = re.compile(r"(?= ([^ ]+) )")  # every word between two spaces (overlapping)
LONG_TEXT = 2000  # characters: a text this long gets its shingle set only when a value may reach the threshold


def overlap(value: "Value", source: "Text", min_overlap: int = 10, similarity: float = 0.6) -> tuple[float, str]:
    """(strength in [0, 1], normalisation) with which ``value`` is taken from ``source``: 1 when its
    normalised form is contained (length >= min_overlap), or its canonical form in the source's
    canonical form (the normalisation named, :func:`match`); else the fraction of its
    min_overlap-shingles found in the source when that fraction >= ``similarity`` (never for a
    one-token identifier: ``US133...`` is not ``US122...``), else 0. Kept per pair on the value
    (:func:`overlap_known`)."""
    return overlap_known(value, source, min_overlap, similarity)


def overlap_known(value: "Value", source: "Text", min_overlap: int = 10, similarity: float = 0.6,
                  may_match: bool = True, idents: list | None = None) -> tuple[float, str]:
    """:func:`overlap` when the caller already knows that ``value`` cannot :func:`match` the source
    (``may_match`` False: it occurs in no text of a corpus holding the source, :meth:`Corpus.may_match`)
    and which of its identifier tokens can (``idents``, in order; None: all of them): the same result
    with the containment tests that cannot succeed skipped; kept per (value, source) pair (the same
    tool output and argument value recur across the runs of one task) on the value (:meth:`Value.memo`)."""
    memo = value.memo(("overlap", min_overlap, similarity))
    out = memo.get(source)
    if out is None:
        out = memo[source] = _overlap(value, source, min_overlap, similarity, may_match, idents)
    return out


def clear_caches() -> None:
    """Empty the per-value, per-pair and per-word caches of this module (values, matches, overlaps,
    word forms, stems; the per-pair results live on the cached values and texts, :meth:`Value.memo`)."""
    value.cache_clear()
    _expand.cache_clear()
    stem.cache_clear()


def _overlap(value: "Value", source: "Text", min_overlap: int, similarity: float, may_match: bool,
             idents: list | None) -> tuple[float, str]:
    v, src = value.norm, source.norm
    if len(v) < min_overlap:
        return _NONE
    if may_match:
        if v in src:
            return _FULL[""]
        ok, how = match(value, source, min_overlap)
        if ok:
            return _FULL[how]
    # an identifier-like token of the value (IBAN, e-mail, URL, id: >= min_overlap characters with a
    # digit, '@', '.' or '/') found in the source is a >= min_overlap common substring that cannot be
    # a common word; for short values only (a long composite text is judged by its coverage)
    for tok in (value.idents() if idents is None else idents):
        if len(tok.norm) >= min_overlap:
            ok, how = match(tok, source, min_overlap)
            if ok:
                return _FULL[how]
    if value.identifier():
        return _NONE  # an identifier (IBAN, e-mail, URL, id) matches canonically or not at all
    mine = value.shingles(min_overlap)
    if not mine:
        return _NONE
    if (len(src) >= LONG_TEXT and not source.has_shingles(min_overlap)
            and value.shingle_bound(source, min_overlap) / len(mine) < similarity):
        return _NONE  # (exact: even every shingle the bound allows would fall short of the threshold)
    cov = len(mine.keys() & source.shingles(min_overlap).keys()) / len(mine)
    return ((cov, "") if cov < 1.0 else _FULL[""]) if cov >= similarity else _NONE


@lru_cache(maxsize=4096)
def _expand(tok: str) -> frozenset:
    """A function-name word, its form without a plural s, its synonyms, and the Porter stem of each."""
    out = {tok, tok.rstrip("s")}
    out.update(SYNONYMS.get(tok, ()))
    out.update(SYNONYMS.get(tok.rstrip("s"), ()))
    return frozenset(out | {stem(w) for w in out})


def word_forms(toks) -> set:
    """The words of a text and their forms to compare with :func:`_expand`: without a plural s, and
    their Porter stems (``scheduled`` -> ``schedul``, as ``schedule``)."""
    toks = set(toks)
    return toks | {t.rstrip("s") for t in toks} | stem_all(toks)


@lru_cache(maxsize=4096)
def function_tokens(function: str) -> tuple:
    """The content tokens of a function name (``send_money`` -> send, money), generic ones dropped."""
    parts = [p for p in re.split(r"[^a-z0-9]+", function.lower()) if p]
    keep = [p for p in parts if p not in GENERIC_TOKENS]
    return tuple(keep or parts)


def function_match(function: str, text_tokens) -> float:
    """Fraction of the function's content tokens named (or a synonym named) in a text (its token set,
    or a :class:`Text`: kept per function name on the text, which is read-only)."""
    if isinstance(text_tokens, Text):
        memo = text_tokens._fm
        if memo is None:
            memo = text_tokens._fm = {}
        out = memo.get(function)
        if out is None:
            out = memo[function] = _function_match(function, text_tokens)
        return out
    return _function_match(function, text_tokens)


def _function_match(function: str, text_tokens) -> float:
    toks = function_tokens(function)
    if not toks:
        return 0.0
    norm = text_tokens.stems if isinstance(text_tokens, Text) else word_forms(text_tokens)
    hit = sum(1 for t in toks if _expand(t) & norm)
    return hit / len(toks)


# words of a reading function's name that qualify rather than name the source it reads
SOURCE_MODIFIERS = {"most", "recent", "received", "unread", "sent", "scheduled", "upcoming", "latest", "new", "my",
                    "content", "contents", "details", "daily", "rating", "names", "name", "address", "addresses"}


def names_source(function: str | None, call_values: list, task: "Text") -> bool:
    """Whether a trusted task text names the source a call read (provenance, reconstructed): one of the
    call's argument values (:class:`Value`: the file, URL, channel, e-mail query ...) is named in the
    task after normalisation, or a noun of the function's name (``get_most_recent_transactions`` ->
    transactions; ``read_file`` -> file), or a synonym, is among the task's words."""
    for v in call_values:
        if match(v, task)[0]:
            return True
    toks = [t for t in function_tokens(function or "") if t not in SOURCE_MODIFIERS and t not in ACTION_VERBS]
    if not toks:
        return False
    return any(_expand(t) & task.stems for t in toks)


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


# --------------------------------------------------------------------------- value normalisation
# Canonical forms of values before matching (reconstructed; the paper does not say how values are
# compared). Each step rewrites one kind of value in a normalised text; the steps run cumulatively in
# the order of NORMALISATIONS, and a match names the first step after which the value is found (""
# when the plain normalised text already contains it), so every edge reports the normalisation that
# made it.

# (speed: a pattern that starts with a literal or a character class is searched by sre's fast prefix
# scan, one that starts with a look-behind or \b tries every position; so the look-behind of several
# patterns below sits after their first character, e.g. "(?<![\w-])\d" written "\d(?<![\w-]\d)": the
# same matches, checked on every text and value of the real runs and on random strings by the tests)
_SCHEME = re.compile(r"\b(?:https?|ftp)://")
_WWW = re.compile(r"w(?<![\w.-]w)ww\.(?=[a-z0-9-]+\.[a-z0-9])")
_TSLASH = re.compile(r"/(?<=[a-z0-9]/)/*(?=[\s,;)>]|$)")
_MAILTO = re.compile(r"\bmailto:")
_EMAIL_BR = re.compile(r"<([a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,})>")
# an IBAN matched from its check digits (its two letters hold no space or dash to drop)
_IBAN = re.compile(r"\d(?<=(?<![a-z0-9])[a-z]{2}\d)\d(?:[ -]?[a-z0-9]{4}){2,7}(?:[ -]?[a-z0-9]{1,3})?(?![a-z0-9])")
_GROUPS = re.compile(r"\d(?<![\w-]\d)\d{2,3}(?:[ -]\d{3,4}){2,}(?![\w-])")
# an amount: "(?<![\w.,:/-])(?:[$€£]\s?)?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?:\s?(?:usd|eur|gbp|chf))?(?![\w/:-]|[.,]\d)",
# written from its first character (a currency sign or the first digit, the look-behind after it) so that sre's
# prefix scan applies: group 1 the whole part after a first digit, group 2 the whole part after a sign, 3 the decimals
_AMOUNT = re.compile(r"[$€£\d](?<![\w.,:/-][$€£\d])(?:(?<=\d)(\d{0,2}(?:,\d{3})+|\d*)|(?<=[$€£])\s?(\d{1,3}(?:,\d{3})+|\d+))"
                     r"(?:\.(\d+))?(?:\s?(?:usd|eur|gbp|chf))?(?![\w/:-]|[.,]\d)")
_MONTH_RE = r"(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_DATE_MDY = re.compile(r"\b" + _MONTH_RE + r"\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b")
_DATE_DMY = re.compile(r"(\d(?<!\w\d)\d?)(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MONTH_RE + r",?\s+(\d{4})\b")
_DATE_SLASH = re.compile(r"(\d(?<![\d/.]\d)\d?)[/.](\d{1,2})[/.](\d{4})(?![\d/.])")
_DATE_ISO = re.compile(r"(\d(?<!\d\d)\d{3})[/.](\d{1,2})[/.](\d{1,2})(?!\d)")
_MDY_NEED = re.compile(r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+\d")  # what _DATE_MDY needs
_DIGIT = re.compile(r"\d")
# what a changed amount needs besides a currency sign (tested with str.find): "[$€£]|" + this
_AMOUNT_HINT = re.compile(r"\d(?:,\d{3}|\.\d*0\b|\s?(?:usd|eur|gbp|chf)\b)")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH_ALT = "|".join(_MONTHS)
# what each date substitution needs (exact pre-tests, each on the text it is applied to): a month word followed
# by a number (_DATE_MDY and _DATE_DMY), and a number, a separator, one or two digits, a separator and a digit
# (_DATE_SLASH and _DATE_ISO; written from the separator so that sre's prefix scan applies)
_MONTH_NEED = re.compile(r"(?:" + _MONTH_ALT + r")[a-z]*\.?,?\s+\d")
_SEP_NEED = re.compile(r"[/.](?<=\d[/.])\d{1,2}[/.]\d")
_MON = {m: k + 1 for k, m in enumerate(_MONTHS)}


def _url(s: str) -> str:
    """URLs: scheme and a leading ``www.`` dropped, trailing slashes dropped (case: already lower)."""
    if "/" not in s and "www." not in s:
        return s
    if "://" in s:
        s = _SCHEME.sub("", s)
    if "www." in s:
        s = _WWW.sub("", s)
    return _TSLASH.sub("", s) if "/" in s else s


def _email(s: str) -> str:
    """E-mail addresses: ``mailto:`` and angle brackets dropped (case: already lower)."""
    if "@" not in s:
        return s
    if "mailto:" in s:
        s = _MAILTO.sub("", s)
    return _EMAIL_BR.sub(r"\1", s) if "<" in s else s


def _account(s: str) -> str:
    """IBANs and account numbers: spaces and dashes between their groups dropped."""
    if not _DIGIT.search(s):
        return s
    s = _IBAN.sub(lambda m: m.group(0).replace(" ", "").replace("-", ""), s)
    return _GROUPS.sub(lambda m: m.group(0).replace(" ", "").replace("-", ""), s)


def _amount_sub(m) -> str:
    rest, whole, frac = m.group(1, 2, 3)
    whole = (m.group(0)[0] + rest if rest is not None else whole).replace(",", "")
    frac = (frac or "").rstrip("0")
    return whole + ("." + frac if frac else "")


def _amount(s: str) -> str:
    """Amounts: currency signs and codes, thousands separators and trailing zero decimals dropped
    (``$1,000.00`` -> ``1000``, ``45.50`` -> ``45.5``)."""
    if not ("$" in s or "€" in s or "£" in s or _AMOUNT_HINT.search(s)):
        return s
    return _AMOUNT.sub(_amount_sub, s)


def _iso(y, mo, d) -> str | None:
    y, mo, d = int(y), int(mo), int(d)
    return f"{y:04d}-{mo:02d}-{d:02d}" if 1 <= mo <= 12 and 1 <= d <= 31 else None


def _date(s: str) -> str:
    """Dates: ``May 5, 2024``, ``5th of May 2024``, ``05/05/2024`` (month first), ``2024/5/5`` ->
    ``2024-05-05``."""
    def rep(m, y, mo, d):
        return _iso(y, mo, d) or m.group(0)

    # each substitution in turn, run only when the text it gets holds what it needs (a text a substitution
    # changed is tested again: the same result as running every one)
    if _MONTH_NEED.search(s):
        ok = True
        if _MDY_NEED.search(s):
            t = _DATE_MDY.sub(lambda m: rep(m, m.group(3), _MON[m.group(1)[:3]], m.group(2)), s)
            if t != s:
                s, ok = t, _MONTH_NEED.search(t) is not None
        if ok:
            s = _DATE_DMY.sub(lambda m: rep(m, m.group(3), _MON[m.group(2)[:3]], m.group(1)), s)
    if _SEP_NEED.search(s):
        t = _DATE_SLASH.sub(lambda m: rep(m, m.group(3), m.group(1), m.group(2)), s)
        if t == s or _SEP_NEED.search(t):
            t = _DATE_ISO.sub(lambda m: rep(m, m.group(1), m.group(2), m.group(3)), t)
        s = t
    return s


NORMALISATIONS = (("url", _url), ("email", _email), ("account", _account), ("amount", _amount), ("date", _date))


def canonical_forms(norm_text: str) -> tuple:
    """The cumulative canonical forms of a normalised text: ((step name, text after the step), ...),
    one per step of :data:`NORMALISATIONS` that changed it (a step that changes nothing is left out)."""
    out, cur = [], norm_text
    for name, fn in NORMALISATIONS:
        new = fn(cur)
        if new != cur:
            out.append((name, new))
            cur = new
    return tuple(out)


def canonical_of(norm_text: str) -> str:
    """The fully normalised form of a normalised text (every step of :data:`NORMALISATIONS`)."""
    forms = canonical_forms(norm_text)
    return forms[-1][1] if forms else norm_text


class Text:
    """(Read-only once built; :func:`match` and :func:`overlap` are memoised per object.) A source text prepared for matching: ``norm`` (:func:`normalise`), ``tokens``, ``canon`` (every
    step of :data:`NORMALISATIONS` applied) and ``canon_tokens``, computed once."""

    __slots__ = ("norm", "canon", "_raw", "_forms", "_tokens", "_canon_tokens", "_stems", "_sh", "_words", "_fm")

    def __init__(self, raw: str | None = None, norm: str | None = None):
        self.norm = norm if norm is not None else normalise(raw or "")
        self._raw = raw
        forms = canonical_forms(self.norm)
        self.canon = forms[-1][1] if forms else self.norm
        self._forms = bool(forms)
        self._tokens = self._canon_tokens = None
        self._stems = None
        self._sh = None
        self._words = None
        self._fm = None  # function name -> function_match (a dict of floats: never tracked by the collector)

    @property
    def tokens(self) -> set:
        """The tokens of the text (of the raw text when given; computed on first use)."""
        if self._tokens is None:
            self._tokens = tokens(self._raw if self._raw is not None else self.norm)
            self._raw = None
        return self._tokens

    @property
    def canon_tokens(self) -> set:
        """The tokens of ``canon`` (computed on first use)."""
        if self._canon_tokens is None:
            self._canon_tokens = tokens(self.canon) if self._forms else self.tokens
        return self._canon_tokens

    def shingles(self, k: int) -> dict:
        """The ``k``-character shingles of ``norm``, the keys of a dict (:func:`_shingles`; computed once per text)."""
        if self._sh is None or self._sh[0] != k:
            self._sh = (k, _shingles(self.norm, k))
        return self._sh[1]

    def has_shingles(self, k: int) -> bool:
        return self._sh is not None and self._sh[0] == k

    def words(self) -> set:
        """The words of ``norm`` (it separates them by single spaces; computed once per text)."""
        if self._words is None:
            self._words = set(self.norm.split(" "))
        return self._words

    @property
    def stems(self) -> set:
        """The tokens, their forms without a plural s and their Porter stems (:func:`word_forms`;
        function names against text)."""
        if self._stems is None:
            self._stems = word_forms(self.tokens)
        return self._stems


class Value:
    """An argument value prepared for matching: ``raw``, ``norm``, its cumulative canonical forms and
    ``canon`` (the last one); :meth:`idents` its identifier-like tokens (as values)."""

    __slots__ = ("raw", "norm", "forms", "canon", "_idents", "_sh", "_ident", "_words", "_memo")

    def __init__(self, raw: str):
        self.raw = raw
        self.norm = normalise(raw)
        self.forms = canonical_forms(self.norm)
        self.canon = self.forms[-1][1] if self.forms else self.norm
        self._idents = None
        self._sh = None
        self._ident = None
        self._words = None
        self._memo = None

    def memo(self, kind) -> dict:
        """The results kept for this value against texts, one dict per ``kind`` (a :func:`match` length,
        an :func:`overlap_known` setting) keyed by the :class:`Text`: per-object dicts and shared result
        constants instead of one key tuple and one result tuple per pair, so that the memo of a batch adds
        few objects for the garbage collector to track (read-only objects: a pair's result never changes)."""
        if self._memo is None:
            self._memo = {}
        out = self._memo.get(kind)
        if out is None:
            out = self._memo[kind] = {}
        return out

    def shingles(self, k: int) -> dict:
        """The ``k``-character shingles of ``norm``, the keys of a dict (:func:`_shingles`; computed once per value)."""
        if self._sh is None or self._sh[0] != k:
            self._sh = (k, _shingles(self.norm, k))
        return self._sh[1]

    def shingle_bound(self, text: "Text", k: int) -> int:
        """An upper bound on how many of the ``k``-shingles of ``norm`` occur in ``text.norm``: a shingle
        that holds a whole word between two spaces occurs only where ``text`` has that word (both are
        normalised: words separated by single spaces), so the shingle positions holding a word that
        ``text`` lacks are not counted. Exact as a bound (no shingle that occurs is left out); it
        spares building the shingle set of a long text that cannot reach the similarity threshold."""
        if self._words is None or self._words[0] != k:
            # (word, first and last shingle position that holds " word "): shingle i is [i, i + k),
            # " word " is [start - 1, end + 1), and the last shingle starts at len - k
            last = len(self.norm) - k
            spans = [(m.group(1), max(0, m.end(1) + 1 - k), min(m.start(1) - 1, last))
                     for m in _WHOLE_WORD.finditer(self.norm) if len(m.group(1)) + 2 <= k]
            self._words = (k, spans, frozenset(w for w, _, _ in spans))
        _, spans, mine = self._words
        n = max(0, len(self.norm) - k + 1)
        missing = mine.difference(text.words()) if mine else mine
        if not missing:
            return n
        killed, end = 0, -1
        for w, lo, hi in spans:  # in text order: the intervals come sorted by their start
            if w in missing:
                if lo > end:
                    killed += hi - lo + 1
                    end = hi
                elif hi > end:
                    killed += hi - end
                    end = hi
        return n - killed

    def identifier(self) -> bool:
        """One token with a digit, '@', '.' or '/' (an IBAN, e-mail, URL, id)."""
        if self._ident is None:
            self._ident = " " not in self.norm and bool(_IDENT.search(self.norm))
        return self._ident

    def idents(self) -> list:
        """Tokens of a short value (<= 100 characters) with a digit, '@', '.' or '/' and >= 6
        characters, other than the whole value."""
        if self._idents is None:
            toks = [t.strip(".,;:!?()") for t in self.norm.split()] if len(self.norm) <= 100 else []
            self._idents = [value(t) for t in toks if len(t) >= 6 and t != self.norm and _IDENT.search(t)]
        return self._idents


@lru_cache(maxsize=16384)
def value(raw: str) -> Value:
    """:class:`Value` of ``raw``, cached (argument values repeat across calls and runs; read-only)."""
    return Value(raw)


def _in(v: str, norm: str, toks: set, min_len: int) -> bool:
    return (v in norm) if len(v) >= min_len else (v in toks)


# results as shared constants (a memo of many pairs then holds no tuple of its own)
_NO = (False, "")
_FOUND = {name: (True, name) for name in ("", "date") + tuple(n for n, _ in NORMALISATIONS)}
_NONE = (0.0, "")
_FULL = {name: (1.0, name) for name in _FOUND}


def match(value: Value, text: Text, min_len: int = 6) -> tuple[bool, str]:
    """Whether ``value`` is named in ``text``: (found, normalisation), the normalisation being "" for a
    plain match (containment for values of ``min_len`` characters or more, a whole token for shorter
    ones; an ISO date also when written in words: "date") or the name of the step of
    :data:`NORMALISATIONS` that made it (the value's own first changed form found in the text's
    canonical form; else the text's first step after which the value is found). Kept per (value, text,
    min_len) on the value (:meth:`Value.memo`)."""
    memo = value.memo(min_len)
    out = memo.get(text)
    if out is None:
        out = memo[text] = _match(value, text, min_len)
    return out


def _match(value: Value, text: Text, min_len: int) -> tuple[bool, str]:
    v = value.norm
    if not v:
        return _NO
    if _in(v, text.norm, text.tokens, min_len):
        return _FOUND[""]
    if v[:1].isdigit() and _date_named(v, text.tokens):
        return _FOUND["date"]
    if not _in(value.canon, text.canon, text.canon_tokens, min_len):
        return _NO
    for name, form in value.forms:
        if _in(form, text.canon, text.canon_tokens, min_len):
            return _FOUND[name]
    for name, form in canonical_forms(text.norm):
        if _in(v, form, tokens(form), min_len):
            return _FOUND[name]
    return _FOUND[NORMALISATIONS[-1][0]]


class Corpus:
    """The texts of a trajectory prefix joined (their ``norm`` and ``canon`` forms), to learn with one
    containment test whether a value can :func:`match` any of them: a value of ``min_len`` characters
    or more (plain and canonical) that starts with no digit matches a text only when its ``norm`` is
    in the text's ``norm`` or its ``canon`` in the text's ``canon`` (:func:`match`), so a value found in
    neither joined string matches none of the texts."""

    __slots__ = ("norm", "canon", "_lens", "_starts", "_ends", "_memo")

    def __init__(self, texts):
        texts = list(texts)
        self.norm = "\x00".join(t.norm for t in texts)
        self.canon = "\x00".join(t.canon for t in texts)
        self._lens = ([len(t.norm) for t in texts], [len(t.canon) for t in texts])
        self._starts = self._ends = None
        self._memo = {}

    def _where(self, s: str, canon: bool) -> list:
        """Indices (in order) of the texts whose ``norm`` (``canon``) contains the non-empty ``s``: each
        occurrence in the joined string mapped to its text, one that runs into a separator skipped."""
        if self._starts is None:  # where each text starts and ends in the joined strings
            self._starts, self._ends = ([], []), ([], [])
            for k in (0, 1):
                a = 0
                for n in self._lens[k]:
                    self._starts[k].append(a)
                    self._ends[k].append(a + n)
                    a += n + 1
        k = 1 if canon else 0
        joined = self.canon if canon else self.norm
        starts, ends = self._starts[k], self._ends[k]
        out, n, m = [], len(starts), len(s)
        pos = joined.find(s)
        while pos >= 0:
            i = bisect_right(starts, pos) - 1
            if pos + m <= ends[i]:
                out.append(i)
                if i + 1 >= n:
                    break
                pos = joined.find(s, starts[i + 1])
            else:
                pos = joined.find(s, pos + 1)
        return out

    def matching(self, value: Value, min_len: int = 6):
        """The indices (in order) of the texts that ``value`` can :func:`match` with ``min_len``: those
        whose ``norm`` holds its ``norm`` or whose ``canon`` holds its ``canon`` (for a value of
        ``min_len`` characters or more, plain and canonical, that starts with no digit, :func:`match`
        is True only then; a superset, so exact as a filter); None when it may match any text (a short
        value is matched as a token, a value starting with a digit also as a date in words)."""
        v, c = value.norm, value.canon
        if len(v) < min_len or len(c) < min_len or not (v and c) or v[:1].isdigit():
            return None
        key = (v, c)
        out = self._memo.get(key)
        if out is None:
            a, b = self._where(v, False), self._where(c, True)
            out = self._memo[key] = a if not b or a == b else (b if not a else sorted(set(a) | set(b)))
        return out

    def may_match(self, value: Value, min_len: int = 6) -> bool:
        """False only when ``value`` matches no text of the corpus (a necessary condition; exact)."""
        v, c = value.norm, value.canon
        if len(v) < min_len or len(c) < min_len or v[:1].isdigit():
            return True
        return v in self.norm or c in self.canon
