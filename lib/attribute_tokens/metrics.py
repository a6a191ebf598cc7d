"""Faithfulness metrics: Recall@10% against gold spans, and RISE / RISE+AP from a guided-deletion curve.

- Recall@f: among the eligible prompt tokens (stop and special tokens excluded), take the
  ceil(f * n) with the highest scores (ties: earlier position first); recall = |top ∩ gold| / |gold|
  [the exact denominator is reconstructed: we use |gold|].
- Guided deletion: eligible prompt tokens sorted by descending score, split into ``groups`` (20)
  nearly equal groups; step k replaces the first k groups by the pad token on the formatted prompt;
  score_k = log p(fixed generation | perturbed prompt) (the generation G held fixed, teacher-forced).
- RISE = AUC (trapezoid on k/groups in [0, 1]) of the curve normalised as
  (score_k - score_K) / (score_0 - score_K), clipped to [0, 1] and made monotone (running minimum);
  lower = more faithful. An example whose full deletion does not lower the score is skipped (None).
- RISE+AP = AUC of normalised curve + |curve - remaining attribution density| (RISE plus the
  alignment penalty), the density being the share of positive attribution mass not yet deleted.
  The official evaluation (wbopan/flashtrace ``llm_attr_eval.faithfulness_test``) calls this sum
  "RISE + AP"; its "MAS" is a different number (the same sum clipped to [0, 1] and min-max rescaled),
  which we do not compute. [reconstructed] the density: ours from the positive scores, clipped to
  [0, 1]; the official from the signed scores, unclipped.
"""
from __future__ import annotations

import math


def topk_recall(scores, gold_mask, eligible_mask, frac: float = 0.1) -> float | None:
    import numpy as np

    s = np.asarray(scores, dtype=np.float64)
    gold = np.asarray(gold_mask, dtype=bool) & np.asarray(eligible_mask, dtype=bool)
    elig = np.flatnonzero(np.asarray(eligible_mask, dtype=bool))
    if gold.sum() == 0 or len(elig) == 0:
        return None
    k = max(1, math.ceil(frac * len(elig)))
    order = elig[np.lexsort((elig, -s[elig]))]
    top = order[:k]
    return float(gold[top].sum() / gold.sum())


def deletion_order(scores, eligible_mask):
    """Eligible positions by descending score (ties: earlier position first)."""
    import numpy as np

    s = np.asarray(scores, dtype=np.float64)
    elig = np.flatnonzero(np.asarray(eligible_mask, dtype=bool))
    return elig[np.lexsort((elig, -s[elig]))]


def deletion_groups(order, groups: int) -> list:
    import numpy as np

    return [g for g in np.array_split(np.asarray(order), groups)]


def deletion_curve(model, ids, order, groups: int, pad_id: int, score_span: tuple, batch: int = 8):
    """log p(ids[score_span] | perturbed prefix) after deleting 0..groups groups: [groups + 1]."""
    import numpy as np
    import torch

    from icmlkit.lib.hf.generate import token_logprobs

    dev = next(model.parameters()).device
    base = torch.as_tensor(ids, dtype=torch.long, device=dev)
    parts = deletion_groups(order, groups)
    seqs = []
    cur = base.clone()
    seqs.append(cur.clone())
    for g in parts:
        if len(g):
            cur[torch.as_tensor(g, dtype=torch.long, device=dev)] = pad_id
        seqs.append(cur.clone())
    a, b = score_span
    out = []
    for i in range(0, len(seqs), batch):
        x = torch.stack(seqs[i:i + batch])
        lp = token_logprobs(model, x, torch.ones_like(x))       # position t-1 scores token t
        out.append(lp[:, a - 1:b].sum(-1).double().cpu())
    return np.concatenate([o.numpy() for o in out])


def normalised_curve(curve):
    import numpy as np

    c = np.asarray(curve, dtype=np.float64)
    span = c[0] - c[-1]
    if not np.isfinite(span) or span <= 0:
        return None
    z = np.clip((c - c[-1]) / span, 0.0, 1.0)
    return np.minimum.accumulate(z)


def _auc(y) -> float:
    import numpy as np

    y = np.asarray(y, dtype=np.float64)
    x = np.linspace(0.0, 1.0, len(y))
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2.0)


def rise(curve) -> float | None:
    z = normalised_curve(curve)
    return None if z is None else _auc(z)


def remaining_density(scores, order, groups: int):
    """Share of positive attribution mass not yet deleted after 0..groups groups."""
    import numpy as np

    s = np.clip(np.asarray(scores, dtype=np.float64), 0, None)
    parts = deletion_groups(order, groups)
    tot = float(s[np.asarray(order, dtype=int)].sum()) if len(order) else 0.0
    d = [1.0]
    gone = 0.0
    for g in parts:
        gone += float(s[np.asarray(g, dtype=int)].sum()) if len(g) else 0.0
        d.append(1.0 - gone / tot if tot > 0 else 1.0 - len(d) / (len(parts)))
    return np.clip(np.asarray(d), 0.0, 1.0)


def rise_ap(curve, scores, order, groups: int) -> float | None:
    """RISE + alignment penalty (the official "RISE + AP"; lower = more faithful)."""
    import numpy as np

    z = normalised_curve(curve)
    if z is None:
        return None
    d = remaining_density(scores, order, groups)
    return _auc(z + np.abs(z - d))
