"""The optional learned instruction score: a small classifier of untrusted text pieces that the SCM
takes as its instruction-likeness input in place of the phrase heuristic (``content.instruction_score``).

**Reconstructed** (the paper names instruction-like untrusted content as the treatment, not how it is
scored). The classifier is a logistic regression on hashed character 3-5-grams (within word bounds)
and word 1-2-grams of the normalised piece; hashing keeps the model a fixed-size vector with no
vocabulary, so it is saved as JSON (``icmlkit-trace-instruction/1``) and never as a pickle.

Training pieces and their labels come from labelled trajectories only, weakly: every line or
sentence of an untrusted tool output (``content.scored_pieces``' pieces) of an **attacked**
trajectory (class P or N2, else its label) whose normalised text never occurs in the tool outputs of
the **non-attacked** ones is a positive; every piece of a non-attacked trajectory is a negative.
Nothing of the test side enters: the benchmark fits it on the training pipelines (or template
families) of each fold. A piece of text that an attack merely displaced (a changed file size, a
review next to the injected one) becomes a noisy positive; the regularised regression tolerates that.

As a scorer for :func:`.graph.build_graph` (``scorer(piece, heuristic_score) -> score``) it returns
the learned probability; :meth:`InstructionScorer.batch` scores all pieces of a text at once, with
a cache of pieces already seen (recorded tool outputs repeat across runs).
"""
from __future__ import annotations

import numpy as np

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.trace_injection import content as C

FORMAT = "icmlkit-trace-instruction/1"
CHAR_BITS = 15  # 2^15 hashed character n-gram features
WORD_BITS = 15  # 2^15 hashed word n-gram features
CACHE = 200_000  # pieces kept in the score cache


def attacked_of(trace) -> bool:
    """Whether ``trace`` carries an injection: class P or N2 (attacked, complied or not), N1 / N3 not;
    without a class, its label."""
    c = trace.meta.get("class")
    if c in ("P", "N2"):
        return True
    if c in ("N1", "N3"):
        return False
    return bool(trace.label)


def untrusted_pieces(trace) -> list[str]:
    """The normalised lines and sentences of the untrusted tool outputs of ``trace`` (the pieces the
    graph scores)."""
    out = []
    for e in trace.events:
        if e.kind == "OBSERVATION" and not e.trusted and e.text:
            text = C.unwrap(e.text)
            out += [C.normalise(text[a:b]) for a, b in C._pieces(text)]
    return [p for p in out if p]


def weak_labels(traces, attacked) -> tuple[list[str], np.ndarray]:
    """Unique pieces and their weak labels (see the module docstring): 1 = occurs only in attacked
    trajectories, 0 = occurs in a non-attacked one."""
    neg, pos = set(), set()
    for t, a in zip(traces, attacked):
        (pos if a else neg).update(untrusted_pieces(t))
    pos -= neg
    texts = sorted(neg) + sorted(pos)
    return texts, np.r_[np.zeros(len(neg), dtype=int), np.ones(len(pos), dtype=int)]


def _vectorizers():
    from sklearn.feature_extraction.text import HashingVectorizer

    common = {"alternate_sign": False, "norm": "l2", "lowercase": True}
    return (HashingVectorizer(analyzer="char_wb", ngram_range=(3, 5), n_features=2 ** CHAR_BITS, **common),
            HashingVectorizer(analyzer="word", ngram_range=(1, 2), n_features=2 ** WORD_BITS,
                              token_pattern=r"(?u)\b\w+\b", **common))


class InstructionScorer:
    """Logistic regression on hashed n-grams of a piece: P(the piece is injected instruction text)."""

    def __init__(self, coef=None, intercept: float = 0.0, c: float = 1.0, info: dict | None = None):
        self.coef = None if coef is None else np.asarray(coef, dtype=np.float64)
        self.intercept = float(intercept)
        self.c = float(c)
        self.info = dict(info or {})
        self._vec = _vectorizers()
        self._cache: dict[str, float] = {}
        self.calls = 0  # no LLM calls: the count the judge interface reports

    def _X(self, texts):
        from scipy.sparse import hstack

        return hstack([v.transform(texts) for v in self._vec]).tocsr()

    def fit(self, traces, attacked=None) -> "InstructionScorer":
        """Fit on labelled ``traces`` (``attacked``: one bool per trace; default :func:`attacked_of`).
        InputError when the weak labels have a single class."""
        from sklearn.linear_model import LogisticRegression

        attacked = [attacked_of(t) for t in traces] if attacked is None else [bool(a) for a in attacked]
        texts, y = weak_labels(traces, attacked)
        if len(set(y.tolist())) < 2:
            raise InputError("the learned instruction score needs attacked trajectories whose tool outputs "
                             "hold text that the non-attacked ones do not, and non-attacked ones",
                             (traces[0].source if traces else None) or "TRACES")
        clf = LogisticRegression(C=self.c, class_weight="balanced", max_iter=2000)
        clf.fit(self._X(texts), y)
        self.coef, self.intercept = clf.coef_[0].astype(np.float64), float(clf.intercept_[0])
        self.info = {"n_pieces": int(len(y)), "n_positive": int(y.sum()), "n_traces": len(traces),
                     "n_attacked": int(sum(attacked))}
        self._cache.clear()
        return self

    def score_texts(self, texts) -> np.ndarray:
        """Probabilities for normalised ``texts`` (cached)."""
        if self.coef is None:
            raise InputError("the instruction scorer is not fitted")
        todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if todo:
            z = self._X(todo) @ self.coef + self.intercept
            if len(self._cache) + len(todo) > CACHE:
                self._cache.clear()
            self._cache.update(zip(todo, (1.0 / (1.0 + np.exp(-z))).tolist()))
        return np.array([self._cache[t] for t in texts], dtype=np.float64)

    def batch(self, pieces: list[str], heuristic: list[float]) -> list[float]:
        """Scores of raw ``pieces`` (the heuristic scores are not used: the learned score replaces them)."""
        return self.score_texts([C.normalise(p) for p in pieces]).tolist()

    def __call__(self, piece: str, score: float) -> float:
        return float(self.score_texts([C.normalise(piece)])[0])

    # ------------------------------------------------------------------ files

    def to_json(self) -> dict:
        return {"format": FORMAT, "features": {"char_wb": [3, 5, CHAR_BITS], "word": [1, 2, WORD_BITS]},
                "c": self.c, "intercept": self.intercept, "info": self.info,
                "coef": [float(f"{v:.6g}") for v in self.coef]}

    @classmethod
    def from_json(cls, data, path: str = "instruction model") -> "InstructionScorer":
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InputError(f"not a learned instruction score (field 'format' must be {FORMAT})", path)
        want = {"char_wb": [3, 5, CHAR_BITS], "word": [1, 2, WORD_BITS]}
        if data.get("features") != want:
            raise InputError(f"field 'features': expected {want}", path)
        coef = data.get("coef")
        n = 2 ** CHAR_BITS + 2 ** WORD_BITS
        if (not isinstance(coef, list) or len(coef) != n
                or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in coef)):
            raise InputError(f"field 'coef': expected a list of {n} numbers", path)
        b = data.get("intercept")
        if isinstance(b, bool) or not isinstance(b, (int, float)):
            raise InputError("field 'intercept': expected a number", path)
        arr = np.asarray(coef, dtype=np.float64)
        if not np.isfinite(arr).all() or not np.isfinite(b):
            raise InputError("field 'coef' / 'intercept': expected finite numbers", path)
        c = data.get("c", 1.0)
        info = data.get("info", {})
        return cls(arr, float(b), float(c) if isinstance(c, (int, float)) and not isinstance(c, bool) else 1.0,
                   info if isinstance(info, dict) else {})

    @classmethod
    def load(cls, path) -> "InstructionScorer":
        from icmlkit.lib.core.io import display_name, load_json

        return cls.from_json(load_json(path, dict, "learned instruction score (JSON)"), display_name(path))
