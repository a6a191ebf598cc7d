"""The kNN / kernel carre-du-champ baseline (what graph-based diffusion geometry estimates).

For a query y: its k nearest data points x_j (brute force, ``torch.cdist`` + ``topk``; the query point
itself excluded when it is in the data, i.e. a neighbour at distance 0), weights
w_j = softmax_j(-|y - x_j|^2 / 2h^2), and Gamma(y) = sum_j w_j (y - x_j)(y - x_j)^T / h^2 (a D x D
eigh gives spectrum and tangents). This divides by h^2, not 2h^2: it is a factor 2 above metric
matching's target (``halve=True`` divides by 2), so compare projectors and eigen-ratios, not raw
magnitudes. With no index to build, the brute-force "build" is the upload of the data.
"""
from __future__ import annotations

import torch


@torch.no_grad()
def knn_neighbours(data: torch.Tensor, queries: torch.Tensor, k: int, chunk: int = 256,
                   exclude_self: bool = True, tol: float = 1e-12):
    """(squared distances (n, k), indices (n, k)) of the k nearest data points of each query, the query
    itself (a data point at squared distance <= tol) excluded."""
    N = data.shape[0]
    kk = min(k + (1 if exclude_self else 0), N)
    d2s, ids = [], []
    dn = (data * data).sum(-1)
    for i in range(0, len(queries), chunk):
        q = queries[i:i + chunk]
        d2 = ((q * q).sum(-1)[:, None] + dn[None, :] - 2 * q @ data.T).clamp_min(0)
        v, j = torch.topk(d2, kk, dim=1, largest=False)
        if exclude_self:
            self_hit = v[:, 0] <= tol * max(1.0, float(dn.max()))
            keep = torch.where(self_hit[:, None], torch.arange(1, kk)[None, :], torch.arange(0, kk - 1)[None, :])
            if kk - 1 < k:  # fewer data points than k + 1
                keep = keep[:, :max(kk - 1, 1)]
            v, j = torch.gather(v, 1, keep), torch.gather(j, 1, keep)
        d2s.append(v)
        ids.append(j)
    return torch.cat(d2s), torch.cat(ids)


@torch.no_grad()
def cdc_of_neighbours(q: torch.Tensor, neighbours: torch.Tensor, d2: torch.Tensor, h: float,
                      halve: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(spectrum (c, D) descending, eigenvectors (c, D, D) as rows) of the kernel CDC of queries ``q``
    (c, D) from their neighbours (c, k, D) at squared distances ``d2`` (c, k), however they were found
    (brute force here, or a tree index)."""
    w = torch.softmax(-d2 / (2 * h * h), dim=1)                        # (c, k)
    diff = q[:, None, :] - neighbours                                   # (c, k, D)
    G = torch.einsum("ck,ckd,cke->cde", w, diff, diff) / (h * h)
    if halve:
        G = G / 2
    lam, U = torch.linalg.eigh(G)
    return lam.flip(-1).clamp_min(0), U.flip(-1).transpose(-1, -2)


@torch.no_grad()
def knn_cdc(data: torch.Tensor, queries: torch.Tensor, k: int, h: float, chunk: int = 256,
            exclude_self: bool = True, halve: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(spectrum (n, D) descending, eigenvectors (n, D, D) as rows) of the kernel CDC at each query."""
    data = data.double()
    queries = queries.double()
    lams, vecs = [], []
    for i in range(0, len(queries), chunk):
        q = queries[i:i + chunk]
        d2, j = knn_neighbours(data, q, k, chunk=len(q), exclude_self=exclude_self)
        lam, V = cdc_of_neighbours(q, data[j], d2, h, halve)
        lams.append(lam)
        vecs.append(V)
    D = data.shape[1]
    if not lams:
        return torch.zeros((0, D), dtype=torch.float64), torch.zeros((0, D, D), dtype=torch.float64)
    return torch.cat(lams), torch.cat(vecs)


@torch.no_grad()
def knn_flow(data: torch.Tensor, ya: torch.Tensor, yb: torch.Tensor, k: int, h: float, steps: int) -> torch.Tensor:
    """The interpolation baseline: the same intrinsic-gradient flow as metric matching's
    :func:`~icmlkit.lib.metric_match.api.interpolate` (y_{i+1} = y_i + Gamma(y_i)(b - y_i) / (lambda_1(y_i)
    (S - 1 - i)), [reconstructed] step rule) with the kNN kernel carre du champ as Gamma (the factor 2
    cancels in Gamma / lambda_1). Returns the paths (n, steps, D), A and B included."""
    data, y, yb = data.double(), ya.double().clone(), yb.double()
    path = [y.clone()]
    for i in range(steps - 1):
        lam, V = knn_cdc(data, y, k, h, exclude_self=False)
        g = torch.einsum("nr,nrd,nre,ne->nd", lam, V, V, yb - y)
        y = y + g / lam[:, :1].clamp_min(1e-12) / (steps - 1 - i)
        path.append(y.clone())
    return torch.stack(path, 1)
