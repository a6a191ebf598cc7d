"""Backdoor attacks on forecasting data, BackTime-style injection (Lin et al., NeurIPS 2024).

At an attack time t, on each attacked channel c (z-score units of the clean training statistics):
  x[t + j]     = x[t-1] + trigger[j],  j < trigger_len      (the trigger on [t, t+trigger_len))
  x[t + tl + j] = x[t-1] + pattern[j], j < pattern_len      (the attacker's target pattern)
Times are chosen greedily among the training windows with the highest clean-model MAE (the window
whose look-back ends with the trigger), non-overlapping (gap >= trigger + pattern + 8); the test
split gets held-out placements (random, non-overlapping) that are never in the training data.

"Random" attack: one fixed trigger drawn uniformly in [-budget, budget] [reconstructed: the paper's
Random trigger distribution is not given]. BackTime's GCN generator: :mod:`icmlkit.lib.defend_tsf.backtime`.
"""
from __future__ import annotations

import numpy as np

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.runtime import numpy_rng
from icmlkit.lib.defend_tsf.config import AttackConfig

CONE = [0.128, 0.175, 0.279, 0.385, 0.279, 0.175, 0.128]
PATTERNS = {
    "cone": CONE,
    # [reconstructed] shapes of the same length and peak as the cone (BackTime's values not confirmed)
    "up_trend": [0.055, 0.11, 0.165, 0.22, 0.275, 0.33, 0.385],
    "up_and_down": [0.128, 0.385, 0.128, 0.385, 0.128, 0.385, 0.128],
}
GAP_EXTRA = 8


def pattern_values(name: str, scale: float = 1.0) -> np.ndarray:
    return np.asarray(PATTERNS[name], dtype=np.float64) * scale


def attacked_channels(C: int, ratio: float, rng) -> np.ndarray:
    k = max(1, int(round(ratio * C)))
    return np.sort(rng.choice(C, size=min(k, C), replace=False))


def greedy_times(score: np.ndarray, cand: np.ndarray, count: int, gap: int) -> np.ndarray:
    """Pick up to ``count`` of the candidate times ``cand`` in decreasing ``score`` (stable), each at
    least ``gap`` away from every one picked before."""
    order = np.argsort(-score, kind="stable")
    picked: list[int] = []
    taken = np.zeros(int(cand.max()) + gap + 2 if cand.size else 1, dtype=bool)
    for i in order:
        t = int(cand[i])
        lo, hi = max(0, t - gap + 1), t + gap
        if taken[lo:hi].any():
            continue
        picked.append(t)
        taken[t] = True
        if len(picked) == count:
            break
    return np.sort(np.asarray(picked, dtype=np.int64))


def valid_times(lo: int, hi: int, L: int, H: int, tl: int, pl: int) -> np.ndarray:
    """Times t in rows [lo, hi) whose whole injection and whose triggered window n = t + tl - L
    (look-back ending with the trigger, horizon H) lie inside [lo, hi), with t >= lo + 1 for x[t-1]."""
    t0 = max(lo + 1, lo + L - tl)
    t1 = min(hi - tl - pl, hi - tl - H)
    return np.arange(t0, t1 + 1)


def per_time(trigger: np.ndarray, P: int, k: int) -> np.ndarray:
    """A trigger as (P, trigger_len, k): one fixed (tl,) trigger broadcast, or per-time triggers as given."""
    trigger = np.asarray(trigger, dtype=np.float64)
    if trigger.ndim == 1:
        return np.broadcast_to(trigger[None, :, None], (P, trigger.size, k)).copy()
    if trigger.shape[0] != P or trigger.shape[2] != k:
        raise InputError(f"triggers of shape {trigger.shape} for {P} times and {k} channels")
    return trigger


def inject(values_norm: np.ndarray, times: np.ndarray, channels: np.ndarray, trigger: np.ndarray,
           pattern: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The poisoned copy of ``values_norm`` (T x C) and the boolean mask of the cells changed (only
    the planned cells: [t, t + tl + pl) on the attacked channels). ``trigger``: (tl,) for a fixed
    trigger, or (P, tl, k) per time and attacked channel (BackTime)."""
    out = values_norm.copy()
    mask = np.zeros(values_norm.shape, dtype=bool)
    if len(times) == 0:
        return out, mask
    times = np.asarray(times, dtype=np.int64)
    trig = per_time(trigger, times.size, len(channels))  # (P, tl, k)
    tl = trig.shape[1]
    rows = times[:, None] + np.arange(tl + pattern.size)[None, :]  # (P, S)
    ref = values_norm[times - 1][:, channels]  # (P, k)
    for j, c in enumerate(channels):
        shape = np.concatenate([trig[:, :, j], np.broadcast_to(pattern, (times.size, pattern.size))], axis=1)
        out[rows, c] = ref[:, j][:, None] + shape
        mask[rows, c] = True
    return out, mask


def injection_cells(times, channels, tl: int, pl: int, T: int, C: int) -> tuple[np.ndarray, np.ndarray]:
    """Boolean (T, C) masks of the trigger cells and of the pattern cells of the injections."""
    trig = np.zeros((T, C), dtype=bool)
    pat = np.zeros((T, C), dtype=bool)
    ch = np.asarray(channels, dtype=np.int64)
    for t in np.asarray(times, dtype=np.int64):
        trig[t:t + tl, ch] = True
        pat[t + tl:t + tl + pl, ch] = True
    return trig, pat


def poisoned_windows(trig_cells: np.ndarray, pat_cells: np.ndarray, starts: np.ndarray, L: int, H: int) -> np.ndarray:
    """(C, N) ground truth: window n is poisoned on channel c when it carries the backdoor's
    association there: trigger cells in its look-back [n, n+L) AND pattern cells in its future
    [n+L, n+L+H) [reconstructed definition]."""
    def hits(cells, a, b):
        cs = np.vstack([np.zeros((1, cells.shape[1]), dtype=np.int64), np.cumsum(cells, axis=0)])
        return cs[b] - cs[a] > 0

    return (hits(trig_cells, starts, starts + L) & hits(pat_cells, starts + L, starts + L + H)).T


def triggered_test_set(raw: np.ndarray, mean: np.ndarray, std: np.ndarray, times: np.ndarray, channels: np.ndarray,
                       trigger: np.ndarray, pattern: np.ndarray, L: int, H: int, lo: int, hi: int) -> dict:
    """Triggered test inputs and the attacker's target futures, raw scale, for the test times whose
    window n = t + tl - L fits in rows [lo, hi): x (P, L, C), y_target and y_clean (P, H, C),
    times, starts, channels, pattern_steps = min(pattern_len, H). ``trigger``: (tl,) or (P, tl, k)."""
    times = np.asarray(times, dtype=np.int64)
    trig = per_time(trigger, times.size, len(channels))
    tl = trig.shape[1]
    ok = np.asarray([(t + tl - L >= lo) and (t + tl + H <= hi) and t >= 1 for t in times], dtype=bool)
    times, trig = times[ok] if times.size else times, trig[ok] if times.size else trig
    starts = times + tl - L
    norm = (raw - mean) / std
    P, C = len(times), raw.shape[1]
    ps = min(pattern.size, H)
    x = np.empty((P, L, C))
    yt = np.empty((P, H, C))
    yc = np.empty((P, H, C))
    for i, (t, n) in enumerate(zip(times, starts)):
        xn = norm[n:n + L].copy()
        ref = norm[t - 1, channels]
        xn[L - tl:, channels] = ref[None, :] + trig[i]
        x[i] = xn * std + mean
        yc[i] = raw[n + L:n + L + H]
        tgt = norm[n + L:n + L + H].copy()
        tgt[:ps, channels] = ref[None, :] + pattern[:ps, None]
        yt[i] = tgt * std + mean
    return {"x": x, "y_target": yt, "y_clean": yc, "times": times.astype(np.int64), "starts": starts.astype(np.int64),
            "channels": np.asarray(channels, dtype=np.int64), "pattern_steps": np.int64(ps)}


def mae_poison(pred: np.ndarray, y_target: np.ndarray, channels: np.ndarray, pattern_steps: int) -> float:
    """MAE_P: |forecast - attacker's target| on the attacked channels over the first pattern_steps
    steps only (higher = the attack failed)."""
    if pred.shape[0] == 0:
        return float("nan")
    return float(np.abs(pred[:, :pattern_steps][:, :, channels] - y_target[:, :pattern_steps][:, :, channels]).mean())


def plan_attack(norm_train: np.ndarray, clean_mae: np.ndarray, cfg: AttackConfig, L: int, H: int,
                test_lo: int, test_hi: int, C: int, seed: int) -> dict:
    """Channels, trigger, pattern, training times (greedy on the clean model's MAE (N, C) of the
    window each time triggers, mean over the attacked channels) and held-out test times."""
    rng = numpy_rng(seed, "attack")
    chans = attacked_channels(C, cfg.channel_ratio, rng)
    trigger = rng.uniform(-cfg.budget, cfg.budget, size=cfg.trigger_len)
    pattern = pattern_values(cfg.pattern, cfg.pattern_scale)
    tl, pl = cfg.trigger_len, pattern.size
    gap = tl + pl + GAP_EXTRA
    T_train = norm_train.shape[0]
    cand = valid_times(0, T_train, L, H, tl, pl)
    count = max(1, int(round(cfg.time_ratio * T_train)))
    score = clean_mae[:, chans].mean(1)[cand + tl - L] if cand.size else np.zeros(0)
    train_times = greedy_times(score, cand, count, gap) if cand.size else np.zeros(0, dtype=np.int64)
    tcand = valid_times(test_lo, test_hi, L, H, tl, pl)
    tcount = max(1, int(round(cfg.test_ratio * (test_hi - test_lo))))
    tscore = numpy_rng(seed, "test-placements").random(tcand.size)
    test_times = greedy_times(tscore, tcand, tcount, gap) if tcand.size else np.zeros(0, dtype=np.int64)
    return {"channels": chans, "trigger": trigger, "pattern": pattern, "train_times": train_times,
            "test_times": test_times, "wanted_train_times": count, "gap": gap}
