"""Evaluating a steer on a model: switch rate, erasure, disturbance, and their Pareto front.

For each steering file and strength (beta, applied at every hooked layer):

- ``switch_rate``: the fraction of steered held-out *source* texts that a logistic probe trained on
  *unsteered* source-vs-target texts labels as the target, on the final sentence embedding (after
  the remaining layers); ``switch_rate_layer``: the same with a probe on the pooled site activation
  at ``probe_layer``.
- ``probe_acc_after_erasure``: balanced accuracy of a probe *re-trained* on steered source/target
  texts (5-fold cross-validation on the steered held-out texts, or trained on steered train texts
  and tested on the held-out ones), at ``probe_layer`` (LEACE's guarantee is about this layer:
  chance = 0.5); ``probe_acc_after_erasure_final``: the same on the final embedding.
- ``disturbance_neutral`` / ``disturbance_unrelated``: mean 1 - cos(steered, unsteered) of the final
  sentence embeddings of held-out neutral texts and of texts about unrelated concepts.

:func:`matched_disturbance` reads the disturbance of a method at a given switch rate off its
strength curve (linear interpolation between the two strengths that bracket it).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from icmlkit.lib.core.console import log
from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.core.runtime import numpy_rng

ROW_KEYS = ("method", "label", "strength", "switch_rate", "switch_rate_layer", "probe_acc_after_erasure",
            "probe_acc_after_erasure_final", "disturbance_neutral", "disturbance_unrelated", "seconds")


def _probe(seed: int):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000, C=1.0, random_state=seed))


def _balanced_acc(probe, x, y) -> float:
    import numpy as np

    pred = probe.predict(x)
    return float(np.mean([np.mean(pred[y == c] == c) for c in (0, 1)]))


def _cv_balanced_acc(x, y, seed: int, folds: int = 5) -> float:
    """Balanced accuracy of a probe re-trained on ``x`` by stratified k-fold cross-validation."""
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    k = int(min(folds, min((y == 0).sum(), (y == 1).sum())))
    if k < 2:
        return float("nan")
    cv = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    return float(cross_val_score(_probe(seed), x, y, cv=cv, scoring="balanced_accuracy").mean())


def _one_minus_cos(a, b):
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    cos = np.clip((a * b).sum(1) / np.maximum(na * nb, 1e-12), -1.0, 1.0)
    return float(np.mean(1.0 - cos))


def evaluate_grid(encoder, steerings, strengths, *, source_train, target_train, source_test, target_test,
                  neutral, unrelated, probe_layer: int | None = None, erasure_train: int = 0,
                  train_embeddings: tuple | None = None, seed: int = 0) -> list[dict]:
    """Evaluate each ``(label, Steering)`` in ``steerings`` at each strength.

    ``strengths`` is a list (the same grid for every steering) or a dict label -> list. The texts
    are lists of strings; ``*_train`` train the probes, ``*_test`` are steered and scored. The
    encoder's layers must include every steered layer and ``probe_layer`` (default: the encoder's
    first layer). The re-trained (erasure) probe learns from ``erasure_train`` steered train texts
    per class and is tested on the steered test texts; with ``erasure_train=0`` (default) it is
    scored by 5-fold cross-validation on the steered test texts instead (no extra forward passes).
    ``train_embeddings`` = (source, target) results of ``encoder.embed`` on the train texts, when
    already computed. Returns one row per (steering, strength) with the keys of :data:`ROW_KEYS`.
    """
    import numpy as np

    rng = numpy_rng(seed, "erasure-train")
    layer = encoder.layers[0] if probe_layer is None else probe_layer
    key = f"layer_{layer}"
    if layer not in encoder.layers:
        raise UsageError(f"--probe-layer {layer} is not among the embedded layers {encoder.layers}")

    def pick(texts, k):
        idx = np.sort(rng.permutation(len(texts))[:k])
        return [texts[i] for i in idx]

    er_src, er_tgt = pick(source_train, erasure_train), pick(target_train, erasure_train)
    groups = {"src_test": source_test, "tgt_test": target_test, "neutral": neutral, "unrelated": unrelated}
    if erasure_train > 0:
        groups.update({"er_src": er_src, "er_tgt": er_tgt})
    names = list(groups)
    flat = [t for n in names for t in groups[n]]
    bounds = np.cumsum([0] + [len(groups[n]) for n in names])

    def split(res):
        return {n: {k: v[bounds[i]:bounds[i + 1]] for k, v in res.items() if k != "text_index"}
                for i, n in enumerate(names)}

    t0 = time.perf_counter()
    if train_embeddings is None:
        train = encoder.embed(list(source_train) + list(target_train), desc="probe texts")
    else:
        train = {k: np.concatenate([train_embeddings[0][k], train_embeddings[1][k]]) for k in ("pooled", key)}
    y_train = np.r_[np.zeros(len(source_train)), np.ones(len(target_train))]
    if len(train["pooled"]) != len(y_train):
        raise UsageError("train_embeddings do not match the train texts")
    base = split(encoder.embed(flat, desc="unsteered"))
    log.info("unsteered embeddings: %d texts in %.1f s", len(flat) + (0 if train_embeddings else len(y_train)),
             time.perf_counter() - t0)
    probe_final = _probe(seed).fit(train["pooled"], y_train)
    probe_layer_ = _probe(seed).fit(train[key], y_train)
    y_er = np.r_[np.zeros(len(er_src)), np.ones(len(er_tgt))]
    y_test = np.r_[np.zeros(len(source_test)), np.ones(len(target_test))]

    rows = []
    for label, steering in steerings:
        grid = strengths[label] if isinstance(strengths, dict) else strengths
        method = "+".join(steering.methods)
        for beta in grid:
            t1 = time.perf_counter()
            st = split(encoder.embed(flat, steering=steering, strength=float(beta), desc=f"{label} beta={beta}"))
            row = {"method": method, "label": label, "strength": float(beta)}
            row["switch_rate"] = float(np.mean(probe_final.predict(st["src_test"]["pooled"]) == 1))
            row["switch_rate_layer"] = float(np.mean(probe_layer_.predict(st["src_test"][key]) == 1))
            for suffix, k in (("", key), ("_final", "pooled")):
                x_test = np.r_[st["src_test"][k], st["tgt_test"][k]]
                if erasure_train > 0:
                    re_probe = _probe(seed).fit(np.r_[st["er_src"][k], st["er_tgt"][k]], y_er)
                    acc = _balanced_acc(re_probe, x_test, y_test)
                else:
                    acc = _cv_balanced_acc(x_test, y_test, seed)
                row[f"probe_acc_after_erasure{suffix}"] = acc
            row["disturbance_neutral"] = _one_minus_cos(st["neutral"]["pooled"], base["neutral"]["pooled"])
            row["disturbance_unrelated"] = _one_minus_cos(st["unrelated"]["pooled"], base["unrelated"]["pooled"])
            row["seconds"] = round(time.perf_counter() - t1, 3)
            rows.append({k: row[k] for k in ROW_KEYS})
            log.info("%s beta=%g: switch %.3f, erasure acc %.3f, disturbance neutral %.2e unrelated %.2e",
                     label, beta, row["switch_rate"], row["probe_acc_after_erasure"], row["disturbance_neutral"],
                     row["disturbance_unrelated"])
    return rows


def matched_disturbance(rows: list[dict], label: str, key: str = "disturbance_neutral",
                        switch: float = 0.9, switch_key: str = "switch_rate") -> float | None:
    """The disturbance of ``label`` at switch rate ``switch``, interpolated along increasing strength.

    The first strength whose switch rate reaches ``switch`` and the strength before it bracket the
    point; None when no strength reaches it.
    """
    curve = sorted((r for r in rows if r["label"] == label), key=lambda r: r["strength"])
    prev = None
    for r in curve:
        if r[switch_key] >= switch:
            if prev is None or prev[switch_key] >= switch or r[switch_key] == prev[switch_key]:
                return float(r[key])
            w = (switch - prev[switch_key]) / (r[switch_key] - prev[switch_key])
            return float(prev[key] + w * (r[key] - prev[key]))
        prev = r
    return None


def best_row(rows: list[dict], switch: float = 0.9) -> dict:
    """The row with the lowest neutral disturbance among those reaching ``switch``; else the row
    with the highest switch rate (ties: lower disturbance)."""
    ok = [r for r in rows if r["switch_rate"] >= switch]
    if ok:
        return min(ok, key=lambda r: (r["disturbance_neutral"], r["strength"]))
    return max(rows, key=lambda r: (r["switch_rate"], -r["disturbance_neutral"]))


def write_table(path, rows: list[dict]) -> None:
    """Rows as CSV (floats to 6 significant digits), JSON Lines or Parquet, by suffix, atomically."""
    from icmlkit.lib.core.io import write_rows

    write_rows(path, rows, columns=list(ROW_KEYS), float_format="%.6g")


def pareto_plot(path, rows: list[dict], switch: float = 0.9, title: str = "") -> bool:
    """Switch rate against disturbance (neutral and unrelated), one curve per steering over its
    strengths; False when matplotlib is missing."""
    from icmlkit.lib.core.plot import pyplot, save_png

    plt = pyplot(required=False)
    if plt is None:
        return False
    labels = list(dict.fromkeys(r["label"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, key, name in ((axes[0], "disturbance_neutral", "neutral texts"),
                          (axes[1], "disturbance_unrelated", "unrelated-concept texts")):
        for lab in labels:
            curve = sorted((r for r in rows if r["label"] == lab), key=lambda r: r["strength"])
            xs = [max(r[key], 1e-7) for r in curve]
            ys = [r["switch_rate"] for r in curve]
            ax.plot(xs, ys, marker="o", label=lab)
            for x, y, r in zip(xs, ys, curve):
                ax.annotate(f"{r['strength']:g}", (x, y), fontsize=7, xytext=(3, -9), textcoords="offset points")
        ax.axhline(switch, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel(f"disturbance: mean 1 - cos on {name}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("switch rate (final embedding probe)")
    axes[0].legend(fontsize=8)
    fig.suptitle(title or "Concept switching: switch rate vs disturbance (labels: strength beta)")
    fig.tight_layout()
    save_png(fig, path)
    return True


# --------------------------------------------------------------------------- `steer-concept eval`


@dataclass
class EvaluateConfig:
    """Settings of ``steer-concept eval``."""

    strengths: list[float] = field(default_factory=lambda: [0.5, 1.0, 1.5, 2.0, 3.0], metadata={
        "help": "Comma-separated strengths (beta)."})
    test_fraction: float = field(default=0.5, metadata={
        "help": "Share of --source/--target texts that are steered and scored; the rest train the probes.",
        "min": 0.05, "max": 0.95})
    probe_layer: int | None = field(default=None, metadata={
        "help": "Layer of the layer-level probes (default: the first steered layer)."})
    target_switch: float = field(default=0.9, metadata={
        "help": "Switch rate at which methods are compared (the summary row and matched_disturbance).",
        "min": 0.0, "max": 1.0})
    erasure_train: int = field(default=0, metadata={
        "help": "Train the re-trained (erasure) probe on this many steered probe-train texts per class and test "
                "it on the steered held-out texts; 0: 5-fold cross-validation on the steered held-out texts.",
        "min": 0})
    max_texts: int | None = field(default=None, metadata={
        "help": "Use at most this many texts of each file (a seeded random subset).", "min": 2})
    batch_size: int = field(default=64, metadata={"help": "Texts per forward pass.", "min": 1})
    max_length: int = field(default=64, metadata={"help": "Tokens per text (longer texts are truncated).", "min": 2})

    def check(self) -> None:
        if not self.strengths:
            raise UsageError("--strengths: give at least one strength")


@dataclass
class EvaluateResult:
    """``rows``: one per (steering file, strength) with :data:`ROW_KEYS`; ``summary``: the best row,
    the rows and the matched disturbance per steering file."""

    rows: list[dict]
    summary: dict


SUMMARY_KEYS = ("method", "strength", "switch_rate", "probe_acc_after_erasure", "disturbance_neutral",
                "disturbance_unrelated")


def evaluate(cfg: EvaluateConfig, loaded, steerings: list, *, source: list[str], target: list[str],
             neutral: list[str], unrelated: list[str], seed: int = 0, device="cpu") -> EvaluateResult:
    """Switch rate, erasure and disturbance of ``steerings`` = [(label, Steering)] over ``cfg.strengths``.

    1. Subsample every text list to ``cfg.max_texts`` (named stream "max-texts" of ``seed``).
    2. Split source and target texts into probe-train and test (``cfg.test_fraction``; stream "split").
    3. Hook the steerings into ``loaded`` at their (common) site and score each strength
       (:func:`evaluate_grid`), then pick the best row and the disturbance at ``cfg.target_switch``.
    """
    import numpy as np

    for label, st in steerings:
        if st.layers == [None]:
            raise UsageError(f"STEER: {label} was fitted on plain arrays (no layers)")
        st.check_model(loaded)
    sites = {st.config.get("site", "attn") for _, st in steerings}
    if len(sites) > 1:
        raise UsageError(f"STEER: the steering files hook different sites {sorted(sites)}")
    sub_rng, split_rng = numpy_rng(seed, "max-texts"), numpy_rng(seed, "split")

    def subset(t):
        if cfg.max_texts is not None and len(t) > cfg.max_texts:
            return [t[i] for i in np.sort(sub_rng.permutation(len(t))[:cfg.max_texts])]
        return list(t)

    def split(t, option):
        idx = split_rng.permutation(len(t))
        k = max(1, int(round(len(t) * cfg.test_fraction)))
        if len(t) - k < 1:
            raise UsageError(f"{option}: too few texts ({len(t)}) to split into probe-train and test")
        return [t[i] for i in np.sort(idx[k:])], [t[i] for i in np.sort(idx[:k])]

    src, tgt, neu, unrel = subset(source), subset(target), subset(neutral), [x for t in unrelated for x in subset(t)]
    src_tr, src_te = split(src, "--source")
    tgt_tr, tgt_te = split(tgt, "--target")
    steered_layers = sorted({L for _, s in steerings for L in s.layers})
    pl = steered_layers[0] if cfg.probe_layer is None else cfg.probe_layer
    from icmlkit.lib.steer_concept.hooks import Encoder

    enc = Encoder(loaded, layers=sorted(set(steered_layers) | {pl}), site=sites.pop(),
                  pool=steerings[0][1].config.get("pool", "mean"), batch_size=cfg.batch_size,
                  max_length=cfg.max_length, device=device)
    rows = evaluate_grid(enc, steerings, list(cfg.strengths), source_train=src_tr, target_train=tgt_tr,
                         source_test=src_te, target_test=tgt_te, neutral=neu, unrelated=unrel, probe_layer=pl,
                         erasure_train=cfg.erasure_train, seed=seed)
    best = best_row(rows, cfg.target_switch)
    matched = {lab: {"neutral": matched_disturbance(rows, lab, "disturbance_neutral", cfg.target_switch),
                     "unrelated": matched_disturbance(rows, lab, "disturbance_unrelated", cfg.target_switch)}
               for lab, _ in steerings}
    summary = {**{k: best[k] for k in SUMMARY_KEYS}, "label": best["label"], "rows": rows,
               "matched_disturbance": matched}
    return EvaluateResult(rows, summary)
