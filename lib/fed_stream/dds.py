"""DDS (Distribution-guided Data Sampling) and SAW (Shift-aware Aggregation Weights).

Both rules are [reconstructed] from the paper's abstract (its text is not known): the abstract
says a convergence bound yields DDS, which "balances historical reuse and distribution
adaptation" under limited storage, and SAW, weights "based on client-specific sampling
behaviors". The forms below are ours (method sheet fed-stream.md):

- DDS: per-group counts c (0 <= c_g <= a_g available in buffer + batch, 1 <= sum c <= M)
  minimising  TV(c / sum c, forecast) + lambda * sqrt(1 / sum c).
- SAW (tv):    p_k  proportional to  n_eff_k * exp(-gamma * TV(mix_k, forecast_k)), floored, normalised.
- SAW (fresh): p_k  proportional to  n_k * (1 + rho * fresh_fraction_k), floored, normalised.
"""
from __future__ import annotations

import itertools

import numpy as np


def _fixed_total(avail: np.ndarray, target: np.ndarray, n: int) -> tuple[np.ndarray, float]:
    """The count vector with sum n, 0 <= c <= avail, minimising sum_g |c_g - n target_g|, and that
    minimum (greedy water-filling: exact, the cost is separable and convex in each c_g)."""
    x = n * target
    c = np.minimum(avail, np.floor(x)).astype(np.int64)
    rem = n - int(c.sum())
    if rem > 0:
        room = avail - c
        frac = np.where((room > 0) & (c < x), x - c, -1.0)  # the one unit with marginal 1 - 2*frac
        order = np.lexsort((np.arange(len(c)), -frac))
        for g in order:  # first units toward the target (largest deficit first)
            if rem == 0 or frac[g] < 0:
                break
            c[g] += 1
            rem -= 1
        if rem > 0:  # every further unit costs +1 wherever it goes: fill by largest target, then room
            room = avail - c
            for g in np.lexsort((np.arange(len(c)), -room, -target)):
                take = min(rem, int(room[g]))
                c[g] += take
                rem -= take
                if rem == 0:
                    break
    return c, float(np.abs(c - x).sum())


def dds_counts(avail, target, M: int, lam: float) -> np.ndarray:
    """DDS for one client [reconstructed]: the counts minimising
    TV(c/sum c, target) + lam * sqrt(1/sum c) over 1 <= sum c <= min(M, sum avail).

    For each total n the best mix is a water-filling toward ``n * target`` (:func:`_fixed_total`);
    the outer search over n is exhaustive (n <= M). Ties go to the larger n (more data).
    lam -> inf keeps min(M, sum avail) samples ("keep everything"); lam = 0 matches the forecast only."""
    avail = np.asarray(avail, dtype=np.int64)
    target = np.asarray(target, dtype=np.float64)
    N = int(min(M, avail.sum()))
    if N <= 0:
        return np.zeros_like(avail)
    ns = np.arange(1, N + 1, dtype=np.float64)
    X = ns[:, None] * target[None, :]                                  # (N, G) targets n * forecast
    base = np.minimum(avail[None, :], np.floor(X))
    rem = ns - base.sum(1)
    cand = (avail[None, :] - base > 0) & (base < X)
    marg = np.where(cand, 1.0 - 2.0 * (X - base), np.inf)             # the one cheaper unit per group
    marg = np.sort(marg, axis=1)
    m = np.isfinite(marg).sum(1)
    csum = np.concatenate([np.zeros((N, 1)), np.cumsum(np.where(np.isfinite(marg), marg, 0.0), 1)], 1)
    take = np.minimum(rem, m).astype(np.int64)
    l1 = np.abs(base - X).sum(1) + csum[np.arange(N), take] + np.maximum(rem - m, 0)
    val = 0.5 * l1 / ns + lam * np.sqrt(1.0 / ns)
    n_best = int(np.flatnonzero(val <= val.min() + 1e-12).max()) + 1  # ties: the larger n
    return _fixed_total(avail, target, n_best)[0]


def dds_objective(c, target, lam: float) -> float:
    c = np.asarray(c, dtype=np.float64)
    n = c.sum()
    return float(0.5 * np.abs(c / n - target).sum() + lam * np.sqrt(1.0 / n))


def brute_force_dds(avail, target, M: int, lam: float) -> tuple[float, np.ndarray]:
    """Enumerate every count vector (small cases only): the minimum of the DDS objective."""
    best, arg = np.inf, None
    for c in itertools.product(*[range(int(a) + 1) for a in avail]):
        s = sum(c)
        if 1 <= s <= M:
            v = dds_objective(c, target, lam)
            if v < best:
                best, arg = v, np.array(c)
    return best, arg


def select_freshest(groups: np.ndarray, ages: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Positions of the kept samples: within each group the ``counts[g]`` freshest (smallest age;
    ties by position, later = fresher)."""
    pos = np.arange(len(groups))
    order = np.lexsort((-pos, ages, groups))  # by group, then freshest first
    g_sorted = groups[order]
    starts = np.searchsorted(g_sorted, np.arange(len(counts)))
    rank = np.arange(len(order)) - starts[g_sorted]
    keep = order[rank < counts[g_sorted]]
    return np.sort(keep)


def saw_weights(n_eff, residual_tv, gamma: float = 2.0, floor: float = 0.1, mode: str = "tv",
                fresh_frac=None, rho: float = 1.0) -> np.ndarray:
    """SAW [reconstructed]: raw weights n_eff * exp(-gamma * d) (``tv``) or n * (1 + rho * fresh)
    (``fresh``), normalised, every weight raised to at least floor/K, renormalised. A client at
    TV 1 keeps a positive weight (exp(-gamma) > 0, and the floor when floor > 0). Clients with
    n_eff = 0 get weight 0 (nothing to contribute) unless every client has none (uniform)."""
    n = np.asarray(n_eff, dtype=np.float64)
    if mode == "fresh":
        raw = n * (1.0 + rho * np.asarray(fresh_frac, dtype=np.float64))
    else:
        raw = n * np.exp(-gamma * np.asarray(residual_tv, dtype=np.float64))
    active = n > 0
    if not active.any():
        return np.full(len(n), 1.0 / len(n))
    p = raw / raw.sum()
    K = int(active.sum())
    p = np.where(active, np.maximum(p, floor / K), 0.0)
    return p / p.sum()
