"""Embed, fit and compare the four methods in one go (used by the demo and the benchmark).

Neutral statistics come from every token of the neutral texts (``pool=all``: the covariance of the
activations the hook will see); the concept means from the mean-pooled activations of the concept
texts -- the same choice for every method, so the comparison is fair. The texts are embedded once
for all methods.
"""
from __future__ import annotations

import time

from icmlkit.lib.steer.hooks import Encoder
from icmlkit.lib.steer.stats import concept_mean, neutral_stats
from icmlkit.lib.steer.steer import Steering, fit_step

LABELS = {"casteer": "CASteer", "leace-switch": "LEACE-Switch", "midsteer": "MidSteer", "leace": "LEACE"}


def fit_steerings(loaded, *, layers, site: str, neutral, source, target, methods=tuple(LABELS),
                  method_layers: dict | None = None, concept: str = "source->target", max_length: int = 64,
                  batch_size: int = 64, device="cpu", shrinkage=None) -> tuple[list, dict]:
    """Fit one :class:`Steering` per method at ``layers``/``site``.

    ``method_layers`` maps a method to a subset of ``layers`` it is fitted at (e.g. LEACE at one
    layer while the switches use all). Returns ``([(label, steering)], info)``; ``info["source"]``
    and ``info["target"]`` hold the pooled concept embeddings (reusable as probe-training data).
    """
    t0 = time.perf_counter()
    kw = dict(layers=layers, site=site, max_length=max_length, batch_size=batch_size, device=device)
    enc_all = Encoder(loaded, pool="all", **kw)
    enc_mean = Encoder(loaded, pool="mean", **kw)
    neu = enc_all.embed(neutral, desc="neutral tokens")
    src = enc_mean.embed(source, desc="source texts")
    tgt = enc_mean.embed(target, desc="target texts")
    t_embed = time.perf_counter() - t0
    t1 = time.perf_counter()
    stats = {L: neutral_stats(neu[f"layer_{L}"], shrinkage=shrinkage) for L in enc_mean.layers}
    means = {L: (concept_mean(src[f"layer_{L}"]), concept_mean(tgt[f"layer_{L}"])) for L in enc_mean.layers}
    config = {**enc_mean.config(), "neutral_pool": "all", "n_neutral_texts": len(neutral),
              "n_source_texts": len(source), "n_target_texts": len(target)}
    out = []
    for m in methods:
        fit_layers = (method_layers or {}).get(m, enc_mean.layers)
        bad = [L for L in fit_layers if L not in enc_mean.layers]
        if bad:
            raise ValueError(f"method_layers[{m!r}] = {bad} is not among the embedded layers {enc_mean.layers}")
        steps = [fit_step(means[L][0], means[L][1], stats[L], method=m, layer=L, concept=concept)
                 for L in fit_layers]
        out.append((LABELS.get(m, m), Steering(steps, {**config, "layers": list(fit_layers)})))
    first = enc_mean.layers[0]
    info = {"seconds_embed": round(t_embed, 2), "seconds_fit": round(time.perf_counter() - t1, 3),
            "neutral_token_rows": int(neu[f"layer_{first}"].shape[0]),
            "effective_rank": {str(st.layer): st.info["effective_rank"] for st in out[0][1].steps} if out else {},
            "s_norm": {}, "t_norm": {}, "source": src, "target": tgt}
    for label, st in out:
        if st.steps:
            info["s_norm"][label] = round(st.steps[0].info["s_norm"], 4)
            info["t_norm"][label] = round(st.steps[0].info["t_norm"], 4)
    return out, info
