"""The demo of metric-match: S^2 in R^3, a short training run (mean-centred variant), tangents vs the kNN baseline, local
dimensions, amortised query speed; everything written into the folder the CLI builds."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from icmlkit.lib.core.io import write_json, write_npz, write_rows
from icmlkit.lib.metric_match.api import evaluate, knn_query, query
from icmlkit.lib.metric_match.config import EvalConfig, GenerateConfig, KnnConfig, QueryConfig, TrainConfig
from icmlkit.lib.metric_match.data import Points
from icmlkit.lib.metric_match.generate import generate
from icmlkit.lib.metric_match.model import save_model
from icmlkit.lib.metric_match.train import train


def run_demo(folder: Path, seed: int = 0, steps: int = 600) -> dict:
    folder = Path(folder)
    tr = generate("sphere", GenerateConfig(n=3000, d=2), seed=seed)["arrays"]
    te = generate("sphere", GenerateConfig(n=300, d=2), seed=seed + 1)["arrays"]
    write_npz(folder / "train.npz", **tr)
    write_npz(folder / "test.npz", **te)
    data = Points(tr["points"], "train.npz")
    test = Points(te["points"], "test.npz", arrays={k: v for k, v in te.items() if k != "points"})
    # the mean-centred variant: a denoiser for half the steps, then the metric network
    half = max(1, steps // 2)
    res = train(TrainConfig(steps=half, batch=256, rank=4, dim=2, width=128, blocks=2, lr=2e-3, centred=True,
                            denoiser_steps=half), data, seed=seed)
    save_model(folder / "model.safetensors", res.model)
    ev = evaluate(res.model, test, EvalConfig(h_grid="0.02,0.05,0.1,0.2", knn_k="16,32,64"), data)
    write_rows(folder / "eval.csv", ev.rows)
    q = query(res.model, test, QueryConfig(h=ev.summary["h"], what="tangent", dim=2))
    write_npz(folder / "tangents.npz", **q.arrays)
    kq = knn_query(data, test, KnnConfig(k=ev.summary["knn_k"], knn_h=ev.summary["knn_h"]),
                   QueryConfig(what="tangent", dim=2))
    s = ev.summary
    summary = {
        "headline": f"S^2 in R^3: projector error {s['projector_error']:.3f} (metric matching, h={s['h']}) vs "
                    f"{s['knn_projector_error']:.3f} (kNN, k={s['knn_k']}, h={s['knn_h']}); eigen-gap dimension "
                    f"right on {100 * s['dim_accuracy']:.0f}% of test points",
        "projector_error": s["projector_error"], "knn_projector_error": s["knn_projector_error"],
        "dim_accuracy": s["dim_accuracy"], "h": s["h"], "knn_k": s["knn_k"], "knn_h": s["knn_h"],
        "queries_per_s": q.summary["queries_per_s"], "knn_queries_per_s": kq.summary["queries_per_s"],
        "train_seconds": res.summary["seconds"],
    }
    write_json(folder / "summary.json", summary)
    return summary
