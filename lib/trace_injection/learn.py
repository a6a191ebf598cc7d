"""Metrics, the fitted threshold / learned head, and the baselines of the benchmark.

- :func:`metrics`: macro-F1, AUROC, precision, recall (attack class) of scores against labels.
- :func:`fit_threshold`: the effect threshold that maximises macro-F1 on labelled traces (optionally under a
  false-alarm budget).
- :class:`Head`: optional learned head (logistic regression or random forest) on the causal
  features (``detect.FEATURES``); saved as JSON (coefficients, or the forest's tree arrays), so no
  pickle is ever loaded.
- Baselines: :func:`keyword_scores` (regex/keyword injection detector over tool outputs),
  :class:`TfidfBaseline` (TF-IDF + logistic regression on the flattened trace or the tool outputs),
  :func:`sink_scores` (the "sink present" rule); ablations on the typed graph: :func:`chain_product`
  and :func:`copy_rule`.
"""
from __future__ import annotations

import json
import re

import numpy as np

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.trace_injection.config import DEFAULT_SINKS, sink_category

KEYWORDS = re.compile(
    r"ignore (all |your |the )?(previous|prior|earlier)|disregard|<information>|###|system_message|\btodo:|"
    r"important!!!|instructions|before you (can )?solve|\bassistant\b|\bai model\b|instead", re.IGNORECASE)


def metrics(y, scores, threshold: float) -> dict:
    from sklearn.metrics import f1_score, precision_score, recall_score, roc_auc_score

    y = np.asarray(y, dtype=int)
    s = np.asarray(scores, dtype=float)
    yh = (s >= threshold).astype(int)
    both = len(set(y.tolist())) == 2
    return {"macro_f1": float(f1_score(y, yh, average="macro", zero_division=0)),
            "auroc": float(roc_auc_score(y, s)) if both else None,
            "precision": float(precision_score(y, yh, zero_division=0)),
            "recall": float(recall_score(y, yh, zero_division=0)),
            "f1_attack": float(f1_score(y, yh, zero_division=0))}


def fit_threshold(y, scores, budget: float | None = None, on=None) -> float:
    """The threshold on ``scores`` maximising macro-F1 (midpoints between sorted distinct scores).

    ``budget`` (a false-alarm budget, a Neyman-Pearson operating point): only thresholds that flag at
    most this share of the runs that ``on`` marks (a boolean mask over the runs: the false alarms the
    budget is on, e.g. the runs with an injection that did not take; None: every negative) are
    eligible; the threshold above every score (flags nothing) always is."""
    from sklearn.metrics import f1_score

    s = np.unique(np.asarray(scores, dtype=float))
    cands = np.concatenate([[s[0] - 1e-6], (s[:-1] + s[1:]) / 2, [s[-1] + 1e-6]]) if len(s) > 1 else s
    y = np.asarray(y, dtype=int)
    sc = np.asarray(scores, dtype=float)
    if budget is not None:
        mask = (y == 0) if on is None else np.asarray(on, dtype=bool)
        alarms = np.sort(sc[mask])  # a threshold t flags the alarms with score >= t
        ok = (len(alarms) - np.searchsorted(alarms, cands, side="left")) <= budget * len(alarms) + 1e-9
        cands = cands[ok] if ok.any() else np.array([s[-1] + 1e-6])
    best, thr = -1.0, 0.5
    for t in cands:
        f = f1_score(y, (sc >= t).astype(int), average="macro", zero_division=0)
        if f > best + 1e-12:
            best, thr = f, float(t)
    return thr


# --------------------------------------------------------------------------- learned head


class Head:
    """Logistic regression or random forest on the causal features; JSON-serialisable."""

    def __init__(self, kind: str = "threshold", features=None, threshold: float = 0.5, seed: int = 0,
                 params: dict | None = None):
        from icmlkit.lib.trace_injection.detect import FEATURES

        self.kind = kind
        self.features = list(features or FEATURES)
        self.threshold = threshold
        self.seed = seed
        self.params = params or {}
        self.setting: dict = {}  # what the features were computed with (pipeline.score_setting), checked on use
        self.source = "MODEL"  # the file it was read from (errors name it)

    def _X(self, feats: list[dict]) -> np.ndarray:
        return np.array([[float(f[k]) for k in self.features] for f in feats], dtype=np.float64)

    def fit(self, feats: list[dict], y, budget: float | None = None, on=None) -> "Head":
        """Fit the head and its decision threshold (:func:`fit_threshold`, with its false-alarm ``budget``
        on the runs ``on`` marks)."""
        y = np.asarray(y, dtype=int)
        if self.kind in ("threshold", "em"):  # em: theta and leak come from .em.fit_em (pipeline.fit)
            self.threshold = fit_threshold(y, self.score(feats), budget, on)
            return self
        X = self._X(feats)
        if self.kind == "logreg":
            from sklearn.linear_model import LogisticRegression
            from sklearn.preprocessing import StandardScaler

            sc = StandardScaler().fit(X)
            m = LogisticRegression(max_iter=2000, C=1.0).fit(sc.transform(X), y)
            self.params = {"mean": sc.mean_.tolist(), "scale": sc.scale_.tolist(), "coef": m.coef_[0].tolist(),
                           "intercept": float(m.intercept_[0])}
        elif self.kind == "forest":
            from sklearn.ensemble import RandomForestClassifier

            m = RandomForestClassifier(n_estimators=100, max_depth=6, random_state=self.seed, n_jobs=1).fit(X, y)
            trees = []
            for est in m.estimators_:
                t = est.tree_
                val = t.value[:, 0, :]
                frac = (val[:, 1] / np.maximum(val.sum(axis=1), 1e-12)).tolist() if val.shape[1] > 1 else [0.0] * len(val)
                trees.append({"left": t.children_left.tolist(), "right": t.children_right.tolist(),
                              "feature": t.feature.tolist(), "threshold": t.threshold.tolist(), "p": frac})
            self.params = {"trees": trees}
        else:
            raise UsageError(f"unknown head {self.kind!r}")
        self.threshold = fit_threshold(y, self.score(feats), budget, on)
        return self

    @property
    def reads_features(self) -> bool:
        """Whether :meth:`score` reads the causal features beyond ``effect`` and ``p_compromised`` (a
        learned head; the threshold and em heads read one of those two)."""
        return self.kind not in ("threshold", "em")

    def score(self, feats: list[dict]) -> np.ndarray:
        if self.kind == "threshold":
            return np.array([float(f["effect"]) for f in feats])
        if self.kind == "em":
            return np.array([float(f["p_compromised"]) for f in feats])
        X = self._X(feats)
        if self.kind == "logreg":
            z = (X - np.array(self.params["mean"])) / np.array(self.params["scale"])
            return 1.0 / (1.0 + np.exp(-(z @ np.array(self.params["coef"]) + self.params["intercept"])))
        out = np.zeros(len(X))
        for t in self.params["trees"]:
            left, right = np.array(t["left"]), np.array(t["right"])
            feat, thr, p = np.array(t["feature"]), np.array(t["threshold"]), np.array(t["p"])
            node = np.zeros(len(X), dtype=int)
            for _ in range(64):  # vectorised descent over all samples
                leaf = left[node] == -1
                if leaf.all():
                    break
                f = np.where(leaf, 0, feat[node])
                go_left = X[np.arange(len(X)), f] <= thr[node]
                node = np.where(leaf, node, np.where(go_left, left[node], right[node]))
            out += p[node]
        return out / len(self.params["trees"])

    def analysis_params(self) -> dict:
        """Settings the analysis needs for this head: a fitted SCM's confidences and leak (em)."""
        if self.kind != "em":
            return {}
        return {"confidence": dict(self.params["theta"]), "leak": float(self.params["leak"])}

    def to_json(self) -> dict:
        return {"format": "icmlkit-trace-head/1", "kind": self.kind, "features": self.features,
                "threshold": self.threshold, "seed": self.seed, "params": self.params,
                **({"setting": self.setting} if self.setting else {})}

    @classmethod
    def from_json(cls, data: dict, path: str = "model") -> "Head":
        if not isinstance(data, dict) or data.get("format") != "icmlkit-trace-head/1":
            raise InputError("not a trace-injection model (field 'format' must be icmlkit-trace-head/1)", path)
        for k in ("kind", "features", "threshold", "params"):
            if k not in data:
                raise InputError(f"field {k!r}: missing", path)
        if data["kind"] not in ("threshold", "logreg", "forest", "em"):
            raise InputError(f"field 'kind': expected threshold, logreg, forest or em, got {data['kind']!r}", path)
        from icmlkit.lib.trace_injection.detect import FEATURES

        feats = data["features"]
        if not isinstance(feats, list) or not feats or any(f not in FEATURES for f in feats):
            raise InputError(f"field 'features': expected a list of feature names from {', '.join(FEATURES)}", path)
        if isinstance(data["threshold"], bool) or not isinstance(data["threshold"], (int, float)):
            raise InputError("field 'threshold': expected a number", path)
        params = data["params"]
        need = {"threshold": (), "logreg": ("mean", "scale", "coef", "intercept"), "forest": ("trees",),
                "em": ("theta", "leak")}[data["kind"]]
        if not isinstance(params, dict) or any(k not in params for k in need):
            raise InputError(f"field 'params': expected an object with {', '.join(need) or 'any fields'}", path)
        head = cls(data["kind"], feats, float(data["threshold"]), int(data.get("seed", 0) or 0), params)
        setting = data.get("setting", {})
        if not isinstance(setting, dict) or not all(isinstance(v, str) for v in setting.values()):
            raise InputError("field 'setting': expected an object of strings", path)
        head.setting, head.source = dict(setting), path
        try:  # the arrays must fit the features: score one all-zero sample
            if not np.isfinite(head.score([dict.fromkeys(feats + ["effect", "p_compromised"], 0.0)])).all():
                raise ValueError("non-finite score")
            if data["kind"] == "em":
                from icmlkit.lib.trace_injection.em import STRATEGIES

                th = params["theta"]
                if (not isinstance(th, dict) or set(th) - set(STRATEGIES)
                        or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1
                               for v in list(th.values()) + [params["leak"]])):
                    raise ValueError(f"theta must map strategies of {', '.join(STRATEGIES)} and leak to [0, 1]")
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise InputError(f"field 'params': does not fit the {len(feats)} features ({exc})", path) from None
        return head

    @classmethod
    def load(cls, path: str) -> "Head":
        from icmlkit.lib.core.io import display_name, load_json

        return cls.from_json(load_json(path, dict, "trace-injection model (JSON)"), display_name(path))


# --------------------------------------------------------------------------- baselines


def _tool_text(trace) -> str:
    return "\n".join(e.text for e in trace.events if e.kind == "OBSERVATION")


def keyword_scores(traces) -> np.ndarray:
    """Regex/keyword injection detector over the tool outputs: number of keyword hits (>= 1 flags)."""
    return np.array([float(len(KEYWORDS.findall(_tool_text(t)))) for t in traces])


def sink_scores(traces, sinks: dict | None = None) -> np.ndarray:
    """"Sink present": 1 when any call hits a sensitive sink (the final answer does not count)."""
    return np.array([float(any(sink_category(e.function, sinks or DEFAULT_SINKS) not in (None, "answer")
                               for e in t.events if e.kind == "ACTION")) for t in traces])


def chain_product(g, sinks: list[str]) -> float:
    """Ablation "product along the chain": the largest product of edge confidences over trigger paths
    from a treatment (untrusted span) to one of ``sinks`` (no competing cause, no noisy-OR)."""
    best = {n: (1.0 if v.candidate else 0.0) for n, v in g.nodes.items()}
    into: dict = {}
    for e in g.trigger_edges():
        into.setdefault(e.dst, []).append(e)
    for n in g.order():
        for e in into.get(n, ()):
            best[n] = max(best[n], best[e.src] * e.confidence)
    return max((best[s] for s in sinks), default=0.0)


def copy_rule(g, sinks: list[str]) -> float:
    """Ablation "copy rule": the strongest content-overlap edge (an argument value copied) from an
    untrusted span into one of ``sinks``."""
    ss = set(sinks)
    return max((e.weight for e in g.edges if e.dst in ss
                and e.strategy.removeprefix("marked_").removeprefix("named_") in ("overlap", "fuzzy")
                and g.nodes[e.src].candidate), default=0.0)


def flatten(trace) -> str:
    parts = []
    for e in trace.events:
        if e.kind == "ACTION":
            parts.append(f"CALL {e.function} {json.dumps(e.args, sort_keys=True)}")
        else:
            parts.append(f"{e.kind} {e.text}")
    return "\n".join(parts)


class TfidfBaseline:
    """TF-IDF (word 1-2 grams) + class-balanced logistic regression on the flattened trace, or with
    ``text="tools"`` on the tool outputs only (the content classifier a user would pick; decision
    threshold 0.5 on its probability)."""

    def __init__(self, text: str = "trace"):
        self.text = text

    def _docs(self, traces):
        return [flatten(t) if self.text == "trace" else _tool_text(t) for t in traces]

    def fit(self, traces, y):
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        self.vec = TfidfVectorizer(ngram_range=(1, 2), min_df=2, max_features=50000, sublinear_tf=True)
        X = self.vec.fit_transform(self._docs(traces))
        self.clf = LogisticRegression(max_iter=2000, C=4.0, class_weight="balanced").fit(X, np.asarray(y, dtype=int))
        return self

    def score(self, traces) -> np.ndarray:
        return self.clf.predict_proba(self.vec.transform(self._docs(traces)))[:, 1]
