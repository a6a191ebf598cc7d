"""The model's default query h, chosen at training time on a validation split of the training points.

``train`` holds out ``val_points`` of DATA (a seeded split, stream "validation"; never trained on),
and after training scores every h of the grid on them; the lowest score wins (ties: the first h):

- ``projector``: DATA has exact tangents (array ``tangent``, as ``generate`` writes): the mean
  |P_est - P_true|_F of the top-d eigenvectors of Gamma(y, h) at the held-out points, d the tangents'
  dimension. This is the benchmark's criterion (bench/metric_match.py tunes h so on its validation set).
- ``chord``: no tangents. The mean over the held-out points of |(I - P_est) u|^2 for the unit chords u
  to their 10 nearest training points, P_est the top-d eigenvectors **[reconstructed]** criterion:
  chords to near neighbours lie in the tangent space up to O(curvature x distance), so the best tangent
  estimate leaves the least of them outside. d: ``dim`` (``--dim``), else the median of DATA's ``dim``
  array at the held-out points, else the most frequent median local dimension over the grid.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.metric_match.core import eig_route, local_dimension, projector_error
from icmlkit.lib.metric_match.knn import knn_neighbours

CHORD_NEIGHBOURS = 10


def truth_arrays(arrays: dict, n: int, D: int, where: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(tangent (n, d, D) or None, dim (n,) or None) of a point file's extra arrays, checked."""
    tangent, dims = arrays.get("tangent"), arrays.get("dim")
    if tangent is not None:
        tangent = np.asarray(tangent, dtype=np.float64)
        if tangent.ndim != 3 or tangent.shape[0] != n or tangent.shape[2] != D:
            raise InputError(f"array 'tangent' has shape {tangent.shape}, expected (n, d, D) = ({n}, d, {D})", where)
        if not np.isfinite(tangent).all():
            raise InputError("array 'tangent' has NaN or infinite values", where)
    if dims is not None:
        dims = np.asarray(dims).reshape(-1)
        if dims.shape[0] != n or not np.isfinite(dims).all():
            raise InputError(f"array 'dim' must hold one finite dimension per point ({n})", where)
        dims = dims.astype(np.int64)
    return tangent, dims


def choose_h(model, y_val: torch.Tensor, grid: list[float], *, tangent: np.ndarray | None = None,
             dims: np.ndarray | None = None, dim: int | None = None, x_train: torch.Tensor | None = None) -> dict:
    """Score every h of ``grid`` on the standardised held-out points ``y_val`` (see the module
    docstring); returns {h, criterion, d, grid, scores, n_val}."""
    spectra = [eig_route(model.factor(y_val, h)) for h in grid]
    if tangent is not None:
        d, criterion = int(tangent.shape[1]), "projector"
        true = torch.as_tensor(tangent)
        scores = [float(projector_error(V[:, :d], true).mean()) for _, V in spectra]
    else:
        criterion = "chord"
        if dim is not None:
            d = int(dim)
        elif dims is not None:
            d = int(np.median(dims))
        else:
            meds = [int(torch.median(local_dimension(lam)).item()) for lam, _ in spectra]
            d = Counter(meds).most_common(1)[0][0]
        d = max(1, min(d, model.rank))
        _, j = knn_neighbours(x_train, y_val, CHORD_NEIGHBOURS, exclude_self=False)
        u = x_train[j] - y_val[:, None, :]                                     # (n, k, D)
        u = u / torch.linalg.norm(u, dim=-1, keepdim=True).clamp_min(1e-12)
        scores = []
        for _, V in spectra:
            inside = torch.einsum("nkd,ned->nke", u, V[:, :d])               # coordinates in the top-d basis
            scores.append(float((1 - (inside * inside).sum(-1)).clamp_min(0).mean()))
    finite = [i for i, s in enumerate(scores) if np.isfinite(s)]
    best = min(finite, key=lambda i: scores[i]) if finite else 0
    return {"h": float(grid[best]), "criterion": criterion, "d": d, "grid": [float(h) for h in grid],
            "scores": scores, "n_val": int(len(y_val))}
