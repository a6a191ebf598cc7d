"""Synthetic manifolds with exact geometry (the ``generate`` subcommand).

Each returns ``points`` (n, D), ``clean`` (the noise-free points), ``tangent`` (n, d, D: an orthonormal
basis of the tangent space at the clean point; absent for skdim manifolds), ``dim`` (n,) and ``d``.
- sphere: uniform on S^d in R^{d+1}, padded with zeros to D, optionally rotated by a random
  orthogonal matrix (fixed by D alone, so train and test sets of different seeds share it); tangent = the complement of x in R^{d+1}.
- squiggly-circle: r(theta) = 1 + 0.3 sin(k theta) in the plane (d = 1), theta uniform.
- torus: ((R + a cos v) cos u, (R + a cos v) sin u, a sin v), R = 1, a = 0.4, (u, v) uniform in
  angle (not in area: Gamma does not depend on the sampling density).
- swiss-roll: (t cos t, s, t sin t) / 10 with t in [1.5 pi, 4.5 pi], s in [0, 2]: d = 2.
- skdim:<name>: scikit-dimension's BenchmarkManifolds (e.g. skdim:M1, skdim:M13b; optional extra
  ``metric``), known dimension, no tangents.
"""
from __future__ import annotations

import numpy as np

from icmlkit.lib.core.errors import UsageError, require_module
from icmlkit.lib.core.runtime import numpy_rng, stream_seed
from icmlkit.lib.metric_match.config import MANIFOLDS, GenerateConfig


def _orth(v: np.ndarray) -> np.ndarray:
    """Rows of (n, d, D) made orthonormal (QR per point)."""
    q, _ = np.linalg.qr(np.swapaxes(v, 1, 2))
    return np.swapaxes(q, 1, 2)


def _embed(points, tangent, D, rotate, rng):
    n, d0 = points.shape
    if D is None:
        D = d0
    if D < d0:
        raise UsageError(f"--D {D} is below the manifold's own ambient dimension {d0}")
    pad = np.zeros((n, D))
    pad[:, :d0] = points
    tpad = np.zeros((n, tangent.shape[1], D))
    tpad[:, :, :d0] = tangent
    if rotate:
        Q = rotation_matrix(D, rng)
        pad, tpad = pad @ Q.T, tpad @ Q.T
    return pad, tpad


def rotation_matrix(D: int, rng=None) -> np.ndarray:
    """The random orthogonal matrix of R^D that ``--rotate`` applies (``rng`` default: the stream fixed
    by D alone, which every ``generate`` call with ``--D D`` uses)."""
    rng = numpy_rng(0, f"rotation-{D}") if rng is None else rng
    Q, R = np.linalg.qr(rng.standard_normal((D, D)))
    return Q * np.sign(np.diag(R))


def sphere_points(n: int, d: int, D: int, rotate: bool, seed: int, chunk: int = 1_000_000) -> np.ndarray:
    """(n, D) points of ``generate sphere --d d --D D [--rotate]`` drawn without their tangents, in
    chunks (for N of 10^7 and more, where the (n, d, D) tangents would not fit in memory); the same
    distribution and rotation, another random stream ("sphere-points")."""
    rng = numpy_rng(seed, "sphere-points")
    Q = rotation_matrix(D) if rotate else np.eye(D)
    out = np.empty((n, D))
    for i in range(0, n, chunk):
        x = rng.standard_normal((min(chunk, n - i), d + 1))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out[i:i + len(x)] = x @ Q[:, :d + 1].T
    return out


def sphere(n, d, rng):
    x = rng.standard_normal((n, d + 1))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    P = np.eye(d + 1)[None] - x[:, :, None] * x[:, None, :]
    w, V = np.linalg.eigh(P)
    return x, np.swapaxes(V[:, :, -d:], 1, 2)  # eigenvalue-1 eigenvectors


def squiggly(n, k, rng):
    t = rng.uniform(0, 2 * np.pi, n)
    r = 1 + 0.3 * np.sin(k * t)
    dr = 0.3 * k * np.cos(k * t)
    x = np.stack([r * np.cos(t), r * np.sin(t)], 1)
    tv = np.stack([dr * np.cos(t) - r * np.sin(t), dr * np.sin(t) + r * np.cos(t)], 1)
    return x, (tv / np.linalg.norm(tv, axis=1, keepdims=True))[:, None, :]


def torus(n, rng, R=1.0, a=0.4):
    u, v = rng.uniform(0, 2 * np.pi, n), rng.uniform(0, 2 * np.pi, n)
    x = np.stack([(R + a * np.cos(v)) * np.cos(u), (R + a * np.cos(v)) * np.sin(u), a * np.sin(v)], 1)
    tu = np.stack([-np.sin(u), np.cos(u), np.zeros(n)], 1)
    tv = np.stack([-np.sin(v) * np.cos(u), -np.sin(v) * np.sin(u), np.cos(v)], 1)
    return x, np.stack([tu, tv], 1)


def swiss_roll(n, rng):
    t = rng.uniform(1.5 * np.pi, 4.5 * np.pi, n)
    s = rng.uniform(0, 2, n)
    x = np.stack([t * np.cos(t), s * 10, t * np.sin(t)], 1) / 10
    tt = np.stack([np.cos(t) - t * np.sin(t), np.zeros(n), np.sin(t) + t * np.cos(t)], 1)
    tt /= np.linalg.norm(tt, axis=1, keepdims=True)
    ts = np.tile(np.array([0.0, 1.0, 0.0]), (n, 1))
    return x, np.stack([tt, ts], 1)


def skdim_names() -> list[str]:
    skd = require_module("skdim", "metric-match", "scikit-dimension")
    return list(skd.datasets.BenchmarkManifolds(random_state=0).truth.index)


def resolve_skdim(name: str) -> str:
    """``M1`` -> ``M1_Sphere``, ``M13b`` -> ``M13b_Spiral`` (a unique prefix of ``<id>_``)."""
    names = skdim_names()
    if name in names:
        return name
    hits = [m for m in names if m.split("_")[0].lower() == name.lower()]
    if len(hits) != 1:
        raise UsageError(f"skdim:{name} is not one BenchmarkManifolds name; choose from "
                         f"{', '.join(m.split('_')[0] for m in names)}")
    return hits[0]


def generate(kind: str, cfg: GenerateConfig, seed: int = 0) -> dict:
    """Arrays of the manifold ``kind`` (see the module docstring); ``summary`` included."""
    rng = numpy_rng(seed, "generate")
    if kind.startswith("skdim:"):
        skd = require_module("skdim", "metric-match", "scikit-dimension")
        name = resolve_skdim(kind.split(":", 1)[1])
        bm = skd.datasets.BenchmarkManifolds(random_state=stream_seed(seed, "skdim") % (2 ** 31))
        d, dim = (int(v) for v in bm._dict_truth[name][:2])  # generate() needs both (skdim 0.5.0)
        x = np.asarray(bm.generate(name, n=cfg.n, dim=dim, d=d), dtype=np.float64)
        if cfg.ambient is not None and cfg.ambient != x.shape[1]:
            raise UsageError(f"--D: skdim:{name} has its own ambient dimension {x.shape[1]}")
        clean, tangent = x, None
    else:
        if kind not in MANIFOLDS:
            raise UsageError(f"unknown manifold {kind!r}; choose from {', '.join(MANIFOLDS)} or skdim:<name>")
        if kind == "sphere":
            pts, tan = sphere(cfg.n, cfg.d, rng)
        elif kind == "squiggly-circle":
            pts, tan = squiggly(cfg.n, cfg.waves, rng)
        elif kind == "torus":
            pts, tan = torus(cfg.n, rng)
        else:
            pts, tan = swiss_roll(cfg.n, rng)
        d = tan.shape[1]
        # the rotation depends on D only (not on the seed): sets drawn with different seeds share it
        clean, tangent = _embed(pts, tan, cfg.ambient, cfg.rotate, numpy_rng(0, f"rotation-{cfg.ambient}"))
    x = clean + cfg.noise * rng.standard_normal(clean.shape) if cfg.noise else clean.copy()
    out = {"points": x, "dim": np.full(len(x), d, dtype=np.int64), "d": np.asarray(d)}
    if cfg.noise:
        out["clean"] = clean
    if tangent is not None:
        out["tangent"] = tangent
    summary = {"kind": kind, "n": int(len(x)), "D": int(x.shape[1]), "d": int(d), "noise": cfg.noise,
               "exact_tangents": tangent is not None}
    return {"arrays": out, "summary": summary}
