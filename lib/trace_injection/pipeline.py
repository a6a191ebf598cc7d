"""One library call per subcommand of trace-injection (the CLI, the demo and the benchmark call these).

- :func:`load_traces`: the traces of several files, ids made unique across files.
- :func:`detect`: Steps 1-4 of CausalTrace on every trace (typed graph, noisy-OR SCM, the
  counterfactual P(sink | do(I = blocked)) and the effect, slicing and the attack chain) -> verdicts.
- :func:`explain`: one trace's attack chain as text, or its typed graph (dot, graphml, json).
- :func:`fit`: the effect threshold or a learned head on labelled traces.
- :func:`evaluate`: macro-F1, AUROC, precision, recall, attack-chain edge recall (+ the
  reachability verdict and the detection rate per class) of labelled traces.
- :func:`generate`: labelled AgentDojo trajectories (see :mod:`.agentdojo_data`).

Each takes its config dataclass (:mod:`.config`) and loaded inputs and returns a result with
``.summary`` (the command's JSON summary) and the rows or objects the command writes.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.runtime import long_lived_inputs
from icmlkit.lib.trace_injection.config import DetectConfig, ExplainConfig, FitConfig, GenerateConfig, ReadConfig
from icmlkit.lib.trace_injection.detect import analyse, edge_recall_counts, online_scores, verdict_record
from icmlkit.lib.trace_injection.learn import Head, metrics


def load_traces(paths, read: ReadConfig | None = None, stats=None) -> list:
    """Every trace of ``paths`` (each read by :func:`.readers.read_traces` with the label and id policy
    of ``read``); an id that two files share becomes ``<file>:<id>``. ``stats`` (a
    :class:`.readers.ReadStats`) collects the repairs and skipped runs."""
    from icmlkit.lib.trace_injection.readers import ReadOptions, ReadStats, read_traces

    read = read or ReadConfig()
    opts = ReadOptions(read.label, read.strict_ids, stats if stats is not None else ReadStats())
    traces = [t for p in paths for t in read_traces(p, opts)]
    seen: set = set()
    if len({t.id for t in traces}) != len(traces):
        for t in traces:
            if t.id in seen:
                t.id = f"{t.source}:{t.id}"
            seen.add(t.id)
    return traces


def labels_of(traces) -> list[int]:
    """The 0/1 labels of ``traces``; an InputError when one is unlabelled or a class is missing."""
    if not traces:
        raise InputError("no traces")
    for t in traces:
        if t.label is None:
            raise InputError(f"trace {t.id!r}: field 'label' (or 'is_attack') missing; labelled traces are needed",
                             t.source or "TRACES")
    y = [t.label for t in traces]
    if len(set(y)) < 2:
        raise InputError("needs both attack and benign traces", traces[0].source or "TRACES")
    return y


def make_scorer(cfg):
    """The optional instruction-likeness scorer of ``cfg`` (a :class:`DetectConfig` or
    :class:`FitConfig`): the learned score of ``instruction_model`` (:mod:`.instruct`), the LLM judge of
    ``judge_url``, or None (the phrase heuristic). Both at once is a usage error."""
    from icmlkit.lib.core.errors import UsageError

    path, url = getattr(cfg, "instruction_model", None), getattr(cfg, "judge_url", None)
    if path and url:
        raise UsageError("--instruction-model and --judge-url both rescore instruction-likeness; choose one")
    if path:
        from icmlkit.lib.trace_injection.instruct import InstructionScorer

        return InstructionScorer.load(path)
    if not url:
        return None
    from icmlkit.lib.llm import ChatClient
    from icmlkit.lib.trace_injection.judge import InstructionJudge

    return InstructionJudge(ChatClient(cfg.judge_url, cfg.judge_model))


def score_setting(cfg, sinks: dict | None) -> dict:
    """What a fitted head's features depend on besides the traces: the instruction score (the phrase
    heuristic, a learned scorer by its file's sha256, or the LLM judge by its model) and the sink table
    (the default one, or a table by the sha256 of its content). ``fit`` records it in the model file."""
    import hashlib
    import json

    path, url = getattr(cfg, "instruction_model", None), getattr(cfg, "judge_url", None)
    if path:
        from icmlkit.lib.core.io import read_bytes

        score = "learned:" + hashlib.sha256(read_bytes(path)).hexdigest()[:12]
    else:
        score = f"judge:{getattr(cfg, 'judge_model', '')}" if url else "heuristic"
    table = "default" if sinks is None else "table:" + hashlib.sha256(
        json.dumps(sinks, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return {"instruction_score": score, "sinks": table}


def check_head_setting(head: Head | None, cfg, sinks: dict | None) -> None:
    """Refuse a model used with another instruction score or sink table than it was fitted with (issue 59:
    its threshold and weights then score features of another scale, silently): a UsageError naming the
    model file and both settings. Models written before the record pass."""
    if head is None or not head.setting:
        return
    from icmlkit.lib.core.errors import UsageError

    have = score_setting(cfg, sinks)
    diffs = [f"{k} {head.setting[k]!r}, not {have[k]!r}" for k in have if k in head.setting and head.setting[k] != have[k]]
    if diffs:
        raise UsageError(f"{head.source}: the model was fitted with another feature setting ({'; '.join(diffs)}); "
                         "give the --instruction-model (or --judge-url) and --sinks it was fitted with")


# --------------------------------------------------------------------------- detect


@dataclass
class DetectResult:
    """``records``: one verdict per trace (:func:`.detect.verdict_record`); ``summary``: the JSON
    summary of ``detect``."""

    records: list[dict]
    summary: dict


def detect(cfg: DetectConfig, traces, *, sinks: dict | None = None, head: Head | None = None,
           progress=None) -> DetectResult:
    """Verdict per trajectory. With ``head`` (a model from :func:`fit`) the head's score on the
    causal features decides ``attack`` (an ``em`` head also sets the SCM's confidences); ``progress``
    wraps the loop (e.g. a progress bar). With ``cfg.online`` one record per sink call instead
    (:func:`online`)."""
    check_head_setting(head, cfg, sinks)
    if cfg.online:
        return online(cfg, traces, sinks=sinks, head=head, progress=progress)
    scorer = make_scorer(cfg)
    params = {"threshold": cfg.threshold, **(head.analysis_params() if head else {})}
    features = head is not None and head.reads_features
    t0 = time.perf_counter()
    records = []
    with long_lived_inputs():
        for t in (progress(traces) if progress else traces):
            before = scorer.calls if scorer else 0
            res = analyse(t, sinks, params, scorer, features=features)
            calls = (scorer.calls - before) if scorer else 0
            score = None
            if head is not None:
                score = float(head.score([res["features"]])[0])
                res["attack"] = bool(score >= head.threshold)
            records.append(verdict_record(res, calls, score))
    secs = time.perf_counter() - t0
    summary = {"n": len(records), "attacks": sum(r["attack"] for r in records),
               "llm_calls": sum(r["llm_calls"] for r in records), "seconds": round(secs, 3),
               "traces_per_second": round(len(records) / secs, 2) if secs > 0 else None}
    return DetectResult(records, summary)


def online(cfg: DetectConfig, traces, *, sinks: dict | None = None, head: Head | None = None,
           progress=None) -> DetectResult:
    """Online mode: every sink call scored from the events before it (:func:`.detect.online_scores`);
    ``blocked`` when the score reaches the threshold (``cfg.threshold`` on the effect, or the head's
    threshold on P(compromised) for an ``em`` head). Summary: calls, blocked, traces_with_block,
    latency_ms_median / latency_ms_p99 (one decision), llm_calls."""
    import numpy as np

    if head is not None and head.kind not in ("threshold", "em"):
        raise InputError("--online takes a threshold or em model (a learned head needs the whole trace)",
                         "--model")
    scorer = make_scorer(cfg)
    key = "p_compromised" if head is not None and head.kind == "em" else "effect"
    thr = head.threshold if head is not None else cfg.threshold
    params = {"threshold": thr, **(head.analysis_params() if head else {})}
    records = []
    before = scorer.calls if scorer else 0
    for t in (progress(traces) if progress else traces):
        for r in online_scores(t, sinks, params, scorer, key):
            records.append({**r, "blocked": bool(r["score"] >= thr)})
    lat = np.array([r["latency_ms"] for r in records]) if records else np.zeros(1)
    summary = {"n": len(traces), "calls": len(records), "blocked": sum(r["blocked"] for r in records),
               "traces_with_block": len({r["id"] for r in records if r["blocked"]}),
               "latency_ms_median": round(float(np.median(lat)), 3),
               "latency_ms_p99": round(float(np.percentile(lat, 99)), 3),
               "llm_calls": (scorer.calls - before) if scorer else 0}
    return DetectResult(records, summary)


# --------------------------------------------------------------------------- explain


@dataclass
class ExplainResult:
    """``text``: the explanation in ``cfg.format``; ``dot``: the graph as DOT (for a PNG); ``summary``."""

    text: str
    dot: str
    summary: dict


def explain(cfg: ExplainConfig, traces, *, trace_id: str | None = None, sinks: dict | None = None) -> ExplainResult:
    """Explain the trace ``trace_id`` of ``traces`` (default: the first)."""
    from icmlkit.lib.core.io import dumps_json
    from icmlkit.lib.trace_injection import export

    items = traces if trace_id is None else [t for t in traces if t.id == trace_id]
    if not items:
        raise InputError(f"no trace with id {trace_id!r}", traces[0].source if traces else None)
    res = analyse(items[0], sinks, {"threshold": cfg.threshold})
    g = res["graph"]
    dot = export.to_dot(g, res["chain"])
    text = {"text": lambda: export.chain_text(res), "dot": lambda: dot, "graphml": lambda: export.to_graphml(g),
            "json": lambda: dumps_json(export.to_json(g, res))}[cfg.format]()
    summary = {"id": res["id"], "attack": res["attack"], "effect": res["effect"], "p_blocked": res["p_blocked"],
               "chain_length": len(res["chain"]), "nodes": len(g.nodes), "edges": len(g.edges)}
    return ExplainResult(text, dot, summary)


# --------------------------------------------------------------------------- fit


@dataclass
class FitResult:
    head: Head
    summary: dict


def alarm_runs(traces) -> tuple[np.ndarray, str]:
    """The runs a false-alarm budget is on (:func:`.learn.fit_threshold`'s ``on``) and their name: the
    runs with an injection that did not take (class N2) when any trace carries that class, else every
    negative."""
    import numpy as np

    cls = np.array([t.meta.get("class") for t in traces], dtype=object)
    if (cls == "N2").any():
        return cls == "N2", "N2"
    return np.array([t.label == 0 for t in traces]), "negatives"


def fit(cfg: FitConfig, traces, *, sinks: dict | None = None, seed: int = 0) -> FitResult:
    """Fit the effect threshold (``head="threshold"``), the SCM's edge confidences and leak by EM
    (``head="em"``, :func:`.em.fit_em`; then the threshold on P(compromised)), or a logistic-regression /
    random-forest head on the causal features of labelled traces (macro-F1-optimal decision threshold,
    under ``cfg.false_alarm_budget`` when set: :func:`alarm_runs`)."""
    from icmlkit.lib.trace_injection.em import calibration

    y = labels_of(traces)
    scorer = make_scorer(cfg)
    extra = {}
    if cfg.head == "em":
        head, fitted = fit_scm(traces, y, sinks=sinks, scorer=scorer)
        extra = {"theta": fitted.theta, "leak": fitted.leak, "em_iterations": fitted.iterations}
    else:
        head = Head(cfg.head, seed=seed)
    feats = [analyse(t, sinks, head.analysis_params(), scorer)["features"] for t in traces]
    on, on_name = alarm_runs(traces)
    head.fit(feats, y, cfg.false_alarm_budget, on)
    head.setting = score_setting(cfg, sinks)
    scores = head.score(feats)
    m = metrics(y, scores, head.threshold)
    if cfg.false_alarm_budget is not None:
        extra["false_alarm_budget"] = {"budget": cfg.false_alarm_budget, "on": on_name,
                                       "train_share": round(float((scores[on] >= head.threshold).mean()), 4)
                                       if on.any() else None}
    summary = {"n": len(traces), "head": cfg.head, "threshold": head.threshold, "train_macro_f1": m["macro_f1"],
               "train_auroc": m["auroc"], "features": head.features, **extra,
               "instruction_score": "learned" if cfg.instruction_model else "heuristic",
               "train_calibration": calibration([f["p_compromised"] for f in feats], y)}
    return FitResult(head, summary)


def fit_scm(traces, y, *, sinks: dict | None = None, graphs=None, strength: float = 5.0, scorer=None):
    """EM fit of the SCM (:func:`.em.fit_em`) on labelled traces (graphs built with the prior and
    ``scorer``'s instruction scores unless given) -> (an ``em`` :class:`.learn.Head` without its
    threshold yet, the :class:`.em.EMFit`)."""
    from icmlkit.lib.trace_injection.config import DEFAULTS
    from icmlkit.lib.trace_injection.detect import verdict_sinks
    from icmlkit.lib.trace_injection.em import fit_em, sink_factors
    from icmlkit.lib.trace_injection.graph import build_graph

    graphs = graphs if graphs is not None else [build_graph(t, sinks, scorer=scorer) for t in traces]
    fitted = fit_em(sink_factors(graphs, [verdict_sinks(g, DEFAULTS) for g in graphs]), y, strength=strength)
    return Head("em", params={"theta": fitted.theta, "leak": fitted.leak}), fitted


def fit_instruction(cfg, traces):
    """Fit the learned instruction score (:class:`.instruct.InstructionScorer`) on labelled ``traces``
    (weak piece labels from attacked vs non-attacked trajectories) -> (scorer, summary: n_traces,
    n_attacked, n_pieces, n_positive, train_auroc)."""
    from icmlkit.lib.trace_injection.instruct import InstructionScorer, attacked_of, weak_labels

    if not traces:
        raise InputError("no traces")
    attacked = [attacked_of(t) for t in traces]
    sc = InstructionScorer(c=cfg.inverse_l2).fit(traces, attacked)
    texts, y = weak_labels(traces, attacked)
    auc = metrics(y, sc.score_texts(texts), 0.5)["auroc"]
    return sc, {**sc.info, "train_auroc": auc}


# --------------------------------------------------------------------------- evaluate


@dataclass
class EvalResult:
    """``summary``: the JSON summary of ``eval``; ``rows``: one per trace (id, class, label, score,
    attack, effect, reachability_effect); ``results``: the full :func:`.detect.analyse` outputs
    (graphs, features) for callers that go on (the demo, the benchmark); ``edges_found`` /
    ``edges_total``: attack-chain edge counts; ``metrics``: every metric of :func:`.learn.metrics`
    (also f1_attack); ``seconds``: time of the analysis."""

    summary: dict
    rows: list[dict]
    results: list[dict] = field(repr=False)
    metrics: dict = field(default_factory=dict)
    edges_found: int = 0
    edges_total: int = 0
    seconds: float = 0.0


def evaluate(cfg: DetectConfig, traces, *, sinks: dict | None = None, head: Head | None = None) -> EvalResult:
    """Score labelled traces with the default causal detector (effect >= ``cfg.threshold``) or ``head``."""
    from icmlkit.lib.trace_injection.em import calibration

    check_head_setting(head, cfg, sinks)
    y = labels_of(traces)
    head = head or Head("threshold", threshold=cfg.threshold)
    scorer = make_scorer(cfg)
    t0 = time.perf_counter()
    res = [analyse(t, sinks, head.analysis_params(), scorer) for t in traces]
    secs = time.perf_counter() - t0
    scores = head.score([r["features"] for r in res])
    m = metrics(y, scores, head.threshold)
    found = total = 0
    for t, r in zip(traces, res):
        if t.label == 1:
            a, b = edge_recall_counts(t, r)
            found, total = found + a, total + b
    reach = metrics(y, [r["reachability"]["effect"] for r in res], 0.5)
    by = defaultdict(lambda: [0, 0])
    for t, s in zip(traces, scores):
        c = t.meta.get("class")
        if c:
            by[c][0] += int(s >= head.threshold)
            by[c][1] += 1
    summary = {"macro_f1": m["macro_f1"], "auroc": m["auroc"], "precision": m["precision"], "recall": m["recall"],
               "edge_recall": (found / total) if total else None, "llm_calls": scorer.calls if scorer else 0,
               "n": len(traces), "n_attack": int(sum(y)), "threshold": head.threshold,
               "reachability_macro_f1": reach["macro_f1"],
               "by_class": {c: round(a / b, 4) for c, (a, b) in sorted(by.items())},
               "calibration": calibration([r["p_compromised"] for r in res], y)}
    rows = [{"id": t.id, "class": t.meta.get("class"), "label": t.label, "score": float(s),
             "attack": bool(s >= head.threshold), "effect": r["effect"],
             "reachability_effect": r["reachability"]["effect"]} for t, r, s in zip(traces, res, scores)]
    return EvalResult(summary, rows, res, m, found, total, secs)


# --------------------------------------------------------------------------- generate


@dataclass
class GenerateResult:
    """``rows``: the labelled trajectories (AgentDojo message format, one JSON object per line);
    ``summary``: n, counts per class, dropped pairs, values_varied, suites."""

    rows: list[dict]
    summary: dict


def generate(cfg: GenerateConfig, *, seed: int = 0) -> GenerateResult:
    """Labelled trajectories from the AgentDojo suites (classes P, N1, N2, N3; see
    :func:`.agentdojo_data.generate`); deterministic for a seed."""
    from icmlkit.lib.trace_injection.agentdojo_data import generate as replay

    items = list(replay(seed=seed, suites=tuple(cfg.suites), max_pairs_per_suite=cfg.max_pairs, family=cfg.family))
    stats = items.pop()
    summary = {"n": len(items), "counts": stats.counts, "dropped": stats.dropped, "values_varied": stats.values_varied,
               "suites": list(cfg.suites)}
    return GenerateResult(items, summary)


def write_dataset(path, rows: list[dict]) -> None:
    """The trajectories as JSON Lines, each record with its own keys (``-`` is stdout), atomically."""
    import json

    from icmlkit.lib.core.io import write_text

    write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
