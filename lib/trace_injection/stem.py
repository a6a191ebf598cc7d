"""The Porter (1980) suffix stemmer for English words, written from the published algorithm
(M. F. Porter, "An algorithm for suffix stripping", Program 14(3), 1980: the rules of its five steps
as the paper gives them, which the Snowball ``porter`` stemmer also implements; words of one or two
letters are left as they are, as in Porter's own reference code).

Used to compare a function name's words with the words of a text (``scheduled`` and ``schedule``
both give ``schedul``; ``messages`` and ``message`` give ``messag``): a standard morphological
normaliser, nothing fitted on any data. :func:`stem` is memoised per word; :func:`stem_all` stems many
words at once. When PyStemmer (the ``trace`` extra) is installed, its C implementation of the same
Snowball ``porter`` algorithm does the work (about 20 times faster; the same stems, tested); without
it this module's Python implementation does.
"""
from __future__ import annotations

from functools import lru_cache

try:  # optional: Snowball's porter in C (PyStemmer); the same stems as :func:`porter`
    import Stemmer as _Stemmer

    _FAST = _Stemmer.Stemmer("porter")
except ImportError:  # pragma: no cover - the Python implementation below
    _FAST = None

_VOWELS = frozenset("aeiou")


def _cons(w: str, i: int) -> bool:
    """Whether w[i] is a consonant (y is a consonant at the start or after a vowel)."""
    c = w[i]
    if c in _VOWELS:
        return False
    if c == "y":
        return i == 0 or not _cons(w, i - 1)
    return True


def _m(w: str) -> int:
    """The measure of a stem: the number of VC sequences in [C](VC)^m[V]."""
    n, i, k = 0, 0, len(w)
    while i < k and _cons(w, i):
        i += 1
    while i < k:
        while i < k and not _cons(w, i):
            i += 1
        if i >= k:
            break
        while i < k and _cons(w, i):
            i += 1
        n += 1
    return n


def _has_vowel(w: str) -> bool:
    return any(not _cons(w, i) for i in range(len(w)))


def _double_cons(w: str) -> bool:
    return len(w) >= 2 and w[-1] == w[-2] and _cons(w, len(w) - 1)


def _cvc(w: str) -> bool:
    """Ends consonant-vowel-consonant, the last not w, x or y (*o)."""
    return (len(w) >= 3 and _cons(w, len(w) - 3) and not _cons(w, len(w) - 2) and _cons(w, len(w) - 1)
            and w[-1] not in "wxy")


_STEP2 = (("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"), ("izer", "ize"),
          ("abli", "able"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous"), ("ization", "ize"),
          ("ation", "ate"), ("ator", "ate"), ("alism", "al"), ("iveness", "ive"), ("fulness", "ful"),
          ("ousness", "ous"), ("aliti", "al"), ("iviti", "ive"), ("biliti", "ble"))
_STEP3 = (("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"), ("ful", ""),
          ("ness", ""))
_STEP4 = ("al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou", "ism",
          "ate", "iti", "ous", "ive", "ize")


def _replace(w: str, table, min_m: int) -> str:
    """The longest suffix of ``table`` that ``w`` ends with is replaced when the stem before it has a
    measure > ``min_m`` (only the longest matching suffix is tried)."""
    best = None
    for suf, rep in table:
        if w.endswith(suf) and (best is None or len(suf) > len(best[0])):
            best = (suf, rep)
    if best is not None:
        stem = w[: len(w) - len(best[0])]
        if _m(stem) > min_m:
            return stem + best[1]
    return w


def _plain(word: str) -> bool:
    """Words the stemmer leaves as they are: up to 2 letters, or a character other than a-z."""
    return len(word) <= 2 or not word.isascii() or not word.isalpha()


@lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """The Porter stem of a lower-case word (words of up to 2 letters, and words with a character
    other than a-z, are returned unchanged)."""
    if _plain(word):
        return word
    return _FAST.stemWord(word) if _FAST is not None else porter(word)


def stem_all(words) -> set:
    """The Porter stems of many lower-case words (as :func:`stem`, one call for all)."""
    words = [w for w in words if not _plain(w)]
    if _FAST is not None:
        return set(_FAST.stemWords(words))
    return {stem(w) for w in words}


def porter(word: str) -> str:
    """The Porter stem of a lower-case word of 3 or more letters a-z (this module's implementation)."""
    w = word
    # step 1a: plurals
    if w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("ies"):
        w = w[:-2]
    elif w.endswith("ss"):
        pass
    elif w.endswith("s"):
        w = w[:-1]
    # step 1b: -eed, -ed, -ing
    if w.endswith("eed"):
        if _m(w[:-3]) > 0:
            w = w[:-1]
    else:
        for suf in ("ed", "ing"):
            if w.endswith(suf) and _has_vowel(w[: -len(suf)]):
                w = w[: -len(suf)]
                if w.endswith(("at", "bl", "iz")):
                    w += "e"
                elif _double_cons(w) and w[-1] not in "lsz":
                    w = w[:-1]
                elif _m(w) == 1 and _cvc(w):
                    w += "e"
                break
    # step 1c: y -> i after a vowel in the stem
    if w.endswith("y") and _has_vowel(w[:-1]):
        w = w[:-1] + "i"
    # steps 2 and 3: double and derivational suffixes
    w = _replace(w, _STEP2, 0)
    w = _replace(w, _STEP3, 0)
    # step 4: drop a suffix when the measure stays > 1 (-ion only after s or t)
    best = max((s for s in _STEP4 if w.endswith(s)), key=len, default=None)
    if best is not None:
        st = w[: -len(best)]
        if _m(st) > 1 and (best != "ion" or st.endswith(("s", "t"))):
            w = st
    # step 5: a final e, and a double l
    if w.endswith("e"):
        st = w[:-1]
        m = _m(st)
        if m > 1 or (m == 1 and not _cvc(st)):
            w = st
    if _m(w) > 1 and w.endswith("ll"):
        w = w[:-1]
    return w
