"""Detection metrics (AUROC, AP, accuracy at 0.5, oracle-threshold accuracy) and the asymmetry test."""
from __future__ import annotations

import numpy as np


def oracle_accuracy(y, s) -> float:
    """Best accuracy over all thresholds; it uses the test labels (an "oracle"), so it is reported
    only beside AUROC / AP / accuracy at 0.5, labelled as such."""
    y = np.asarray(y, dtype=np.int64)
    s = np.asarray(s, dtype=np.float64)
    order = np.argsort(-s, kind="stable")
    ys, ss = y[order], s[order]
    tp = np.cumsum(ys)
    fp = np.cumsum(1 - ys)
    last = np.r_[ss[1:] != ss[:-1], True]  # thresholds between distinct scores only
    n_pos, n = int(y.sum()), len(y)
    correct = tp[last] + (n - n_pos - fp[last])
    return float(max(correct.max(initial=0), n - n_pos) / n) if n else float("nan")


def detection_metrics(y, score) -> dict:
    """auroc, ap, acc_at_0_5 (score = probability generated), oracle_threshold_acc, n_real, n_fake."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    y = np.asarray(y, dtype=np.int64)
    s = np.asarray(score, dtype=np.float64)
    both = 0 < y.sum() < len(y)
    return {
        "auroc": float(roc_auc_score(y, s)) if both else None,
        "ap": float(average_precision_score(y, s)) if both else None,
        "acc_at_0_5": float(((s >= 0.5).astype(np.int64) == y).mean()) if len(y) else None,
        "oracle_threshold_acc": oracle_accuracy(y, s) if len(y) else None,
        "n_real": int((y == 0).sum()),
        "n_fake": int((y == 1).sum()),
    }


def asymmetry_test(real_drift, fake_drift) -> dict:
    """One-sided Mann-Whitney U test of H1: drift(fake) > drift(real) (drift = 1 − cosine).

    Returns u, p_value, the common-language effect size P(fake > real) (= the AUROC of the drift),
    and the medians of both sets.
    """
    from scipy.stats import mannwhitneyu

    r = np.asarray(real_drift, dtype=np.float64)
    f = np.asarray(fake_drift, dtype=np.float64)
    res = mannwhitneyu(f, r, alternative="greater")
    return {"u": float(res.statistic), "p_value": float(res.pvalue),
            "effect_p_fake_gt_real": float(res.statistic / (len(f) * len(r))),
            "median_drift_real": float(np.median(r)), "median_drift_fake": float(np.median(f)),
            "n_real": int(len(r)), "n_fake": int(len(f))}
