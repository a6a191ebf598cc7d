"""TimeGuard's pieces (Nguyen et al., ICML 2026): masked per-(window, channel) losses, the
time-aware window distance, the two Stage-I criteria and Stage II's distance-regularised loss
selection (DRLS). The training loop that uses them is :mod:`icmlkit.lib.defend_tsf.train`.

Shapes: losses and pool masks are (C, N) (channel, window); windows per channel are (N, L+H).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.defend_tsf.config import COUNTINGS


# --------------------------------------------------------------------------- losses


def window_channel_loss(pred_raw: torch.Tensor, y_raw: torch.Tensor) -> torch.Tensor:
    """l_{n,c} = mean over the horizon of SmoothL1(pred, y) on the raw scale: (B, H, C) -> (B, C)."""
    return F.smooth_l1_loss(pred_raw, y_raw, reduction="none").mean(dim=1)


def masked_loss(loss_nc: torch.Tensor, mask_nc: torch.Tensor, denom: float | None = None) -> torch.Tensor:
    """sum w_{n,c} l_{n,c} / sum w_{n,c} (``denom`` overrides the sum of weights, for a global batch
    split over ranks). An all-ones mask gives the plain mean loss."""
    w = mask_nc.to(loss_nc.dtype)
    d = w.sum() if denom is None else denom
    return (w * loss_nc).sum() / d


# --------------------------------------------------------------------------- distances


def gaussian_weights(L: int, H: int, sigma: float = 2.0, dtype=torch.float64) -> torch.Tensor:
    """Weights over the L+H steps of [x; y], Gaussian centred at index L (the first forecast step),
    summing to 1."""
    i = torch.arange(L + H, dtype=dtype)
    w = torch.exp(-0.5 * ((i - L) / sigma) ** 2)
    return w / w.sum()


def weighted_znorm(v: torch.Tensor, w: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Rows of ``v`` (..., L+H) -> sqrt(w) (v - mu_w) / s_w, so that ||z_a - z_b||^2 =
    2 (1 - weighted Pearson(a, b)) (float64; a constant window gives zeros)."""
    mu = (v * w).sum(-1, keepdim=True)
    d = v - mu
    s = torch.sqrt((w * d * d).sum(-1, keepdim=True))
    return torch.sqrt(w) * d / torch.clamp(s, min=eps) * (s > eps)


def knn_graph(z: torch.Tensor, k: int, chunk: int = 2048) -> tuple[torch.Tensor, torch.Tensor]:
    """Brute-force kNN of the rows of ``z`` (N, D), self excluded: (distances (N, k) ascending,
    indices (N, k)). Chunked ``torch.cdist`` + ``topk`` (runs on z's device); the k found are
    re-sorted by (distance, index) so equal distances come in index order."""
    N = z.shape[0]
    k = min(k, N - 1)
    dists, idxs = [], []
    ar = torch.arange(N, device=z.device)
    for s in range(0, N, chunk):
        q = z[s:s + chunk]
        d2 = torch.cdist(q, z).square()
        d2[torch.arange(q.shape[0], device=z.device), ar[s:s + chunk]] = math.inf
        val, ind = torch.topk(d2, k, dim=1, largest=False, sorted=True)
        o1 = torch.sort(ind, dim=1, stable=True)
        o2 = torch.sort(torch.gather(val, 1, o1.indices), dim=1, stable=True)
        ind = torch.gather(o1.values, 1, o2.indices)
        dists.append(o2.values.clamp_min(0).sqrt())
        idxs.append(ind)
    return torch.cat(dists), torch.cat(idxs)


@dataclass
class NeighbourGraph:
    """Per channel, the K_max nearest windows under the time-aware distance: dist, idx (C, N, K)."""

    dist: torch.Tensor
    idx: torch.Tensor


def channel_windows(raw: torch.Tensor, starts: torch.Tensor, L: int, H: int) -> torch.Tensor:
    """[x; y] of every window on the raw scale, per channel: series (T, C) -> (C, N, L+H)."""
    span = torch.arange(L + H, device=raw.device)
    rows = starts[:, None] + span[None, :]  # (N, L+H)
    return raw[rows].permute(2, 0, 1)


def build_graph(raw: torch.Tensor, starts: torch.Tensor, L: int, H: int, k_max: int, sigma: float,
                device=None) -> NeighbourGraph:
    """The K_max-NN graph of each channel's windows, built once (float64 distances)."""
    dev = device if device is not None else raw.device
    win = channel_windows(raw.to(dev, torch.float64), starts.to(dev), L, H)
    w = gaussian_weights(L, H, sigma).to(dev)
    dl, il = [], []
    for c in range(win.shape[0]):
        d, i = knn_graph(weighted_znorm(win[c], w), k_max)
        dl.append(d.cpu())
        il.append(i.cpu())
    return NeighbourGraph(torch.stack(dl), torch.stack(il))


# --------------------------------------------------------------------------- Stage I

def pool_size(frac: float, N: int, counting: str = "floor") -> int:
    """How many of N windows a fraction keeps: ``floor`` = int(N * frac), as the official code counts
    (``int(len(train_set) * gamma)``); ``round`` = round(frac * N), ours before 2026-12-07. At least 1,
    at most N (the official slice ``[-0:]`` would keep everything when the count is 0)."""
    if counting == "floor":
        k = int(N * frac)
    elif counting == "round":
        k = int(round(frac * N))
    else:
        raise UsageError(f"--pool-count must be one of {', '.join(COUNTINGS)}, not {counting!r}")
    return max(1, min(N, k))


def top_fraction(score: torch.Tensor, frac: float, largest: bool, counting: str = "floor") -> torch.Tensor:
    """Boolean (C, N): per row, the ``pool_size(frac, N, counting)`` entries with the largest (or
    smallest) score; ties broken by the lower index (stable)."""
    C, N = score.shape
    k = pool_size(frac, N, counting)
    key = -score if largest else score
    order = torch.sort(key, dim=1, stable=True).indices[:, :k]
    mask = torch.zeros(C, N, dtype=torch.bool)
    mask.scatter_(1, order.cpu(), True)
    return mask


def ndf_score(graph: NeighbourGraph, k_nn: int) -> torch.Tensor:
    """Neighbourhood-distance criterion: mean distance to the k_nn nearest windows, (C, N)."""
    return graph.dist[:, :, :k_nn].mean(-1)


def ndf_mask(graph: NeighbourGraph, k_nn: int, alpha: float, counting: str = "floor") -> torch.Tensor:
    """Keep the alpha N windows per channel with the LARGEST neighbourhood distance (poisoned windows
    repeat one trigger + pattern shape and sit in tight clusters)."""
    return top_fraction(ndf_score(graph, k_nn), alpha, largest=True, counting=counting)


def rcf_mask(backcast_loss: torch.Tensor, alpha: float, counting: str = "floor") -> torch.Tensor:
    """Backcaster criterion: keep the alpha N windows per channel with the LOWEST backcast loss."""
    return top_fraction(backcast_loss, alpha, largest=False, counting=counting)


def backcast_batch(x_norm: torch.Tensor, y_norm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The backcaster's (input, target): the time-reversed future in, the time-reversed past out."""
    return torch.flip(y_norm, dims=[1]), torch.flip(x_norm, dims=[1])


# --------------------------------------------------------------------------- Stage II


def ratio_at(epoch: int, t2: int, alpha: float, beta: float) -> float:
    """gamma_e = alpha + (beta - alpha) e / (T_2 - 1)."""
    return alpha if t2 <= 1 else alpha + (beta - alpha) * epoch / (t2 - 1)


def distance_to_excluded(graph: NeighbourGraph, pool: torch.Tensor, k_nn: int) -> torch.Tensor:
    """Per (c, n): the mean distance to its k_nn nearest windows OUTSIDE channel c's pool, among its
    K_max graph neighbours (fewer if fewer are excluded; inf when none is), (C, N)."""
    C, N, K = graph.idx.shape
    excluded = ~pool  # (C, N)
    ex_nb = torch.gather(excluded, 1, graph.idx.reshape(C, -1)).reshape(C, N, K)
    rank = torch.cumsum(ex_nb.to(torch.int64), dim=-1)
    take = ex_nb & (rank <= k_nn)
    cnt = take.sum(-1)
    tot = (graph.dist * take).sum(-1)
    out = tot / cnt.clamp_min(1)
    return torch.where(cnt > 0, out, torch.full_like(out, math.inf))


def drls_pool(loss: torch.Tensor, graph: NeighbourGraph, pool: torch.Tensor, ratio: float, pi: float,
              k_nn: int, counting: str = "floor") -> torch.Tensor:
    """One DRLS update: candidates = the top min(pi ratio, 1) N windows by distance to the excluded
    set (far from the suspicious windows); new pool = the ratio N candidates with the lowest loss
    (both counts by ``pool_size``)."""
    C, N = loss.shape
    dist = distance_to_excluded(graph, pool, k_nn)
    n_cand = pool_size(min(pi * ratio, 1.0), N, counting)
    n_keep = min(n_cand, pool_size(ratio, N, counting))
    cand = torch.sort(-dist, dim=1, stable=True).indices[:, :n_cand]  # (C, n_cand)
    cand_loss = torch.gather(loss, 1, cand)
    keep = torch.gather(cand, 1, torch.sort(cand_loss, dim=1, stable=True).indices[:, :n_keep])
    new = torch.zeros(C, N, dtype=torch.bool)
    new.scatter_(1, keep, True)
    return new


def sample_filter_pool(loss: torch.Tensor, ratio: float, counting: str = "floor") -> torch.Tensor:
    """The sample-level baseline (ABL-like): the ratio N windows with the lowest loss averaged over
    channels, kept (or dropped) on ALL channels at once [reconstructed: same ratio schedule as
    TimeGuard, so both train on the same amount of data]."""
    C, N = loss.shape
    keep = top_fraction(loss.mean(0, keepdim=True), ratio, largest=False, counting=counting)
    return keep.expand(C, N).clone()
