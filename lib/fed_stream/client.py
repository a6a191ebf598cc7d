"""What one client does in a round, shared by both engines: the buffer rule of its strategy
(which samples it keeps and trains on), the SAW statistics it reports, and its minibatch order.

Randomness is drawn from named streams per (seed, client, period), so the in-process simulator
and the Flower ClientApp make the same choices and keep no random state between rounds.

Buffer rules (M = buffer size; candidates = buffer + the new batch; fresher = later period,
then later arrival):
- fifo: the M freshest candidates;
- reservoir: classic reservoir sampling over the client's whole stream (Vitter's algorithm R);
- online [reconstructed, FedOMD-style]: no memory, one pass over the newest batch;
- marfoq [reconstructed from Marfoq et al. 2023]: FIFO memory trained with sample weights
  decay^age (weighted ERM over the memory);
- drsr [reconstructed from Wang, Bian & Xu 2024]: a dynamic reservoir whose seen-count decays
  by ``decay`` every period, so new samples enter with probability min(1, M / n_eff_seen);
- dds [reconstructed]: per-group counts from :func:`~icmlkit.lib.fed_stream.dds.dds_counts`
  toward the forecast, the freshest samples of each group.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icmlkit.lib.core.runtime import numpy_rng
from icmlkit.lib.fed_stream.dds import dds_counts, select_freshest

BUFFER_RULE = {"dds-saw": "dds", "dds-only": "dds", "saw-only": "fifo", "fedavg-fifo": "fifo",
               "fedavg-reservoir": "reservoir", "fedprox": "fifo", "online": "online", "marfoq": "marfoq",
               "drsr": "drsr"}
USES_SAW = ("dds-saw", "saw-only")


@dataclass
class ClientState:
    """What a client keeps across rounds (in ``context.state`` under Flower)."""

    buffer: np.ndarray            # stream indices of the kept samples, in arrival order
    seen: int = 0                 # reservoir: samples seen so far
    seen_eff: float = 0.0         # drsr: decayed seen-count

    @staticmethod
    def empty() -> "ClientState":
        return ClientState(np.zeros(0, dtype=np.int64))


def client_round(strategy: str, state: ClientState, new: np.ndarray, group: np.ndarray, period: np.ndarray,
                 forecast: np.ndarray, t: int, cfg, M: int, seed: int, k: int):
    """One round of client ``k`` at period ``t``: returns (new state, training indices, their
    sample weights, stats) with stats = n_train, residual_tv (TV of the training mix to the
    forecast), fresh_frac, buffer_size."""
    rule = BUFFER_RULE[strategy]
    G = len(forecast)
    new = np.asarray(new, dtype=np.int64)
    cand = np.concatenate([state.buffer, new])
    seen, seen_eff = state.seen, state.seen_eff
    if rule == "fifo" or rule == "marfoq":
        keep = cand[-M:] if len(cand) > M else cand
        train = keep
    elif rule == "online":
        keep = np.zeros(0, dtype=np.int64)
        train = new
    elif rule in ("reservoir", "drsr"):
        rng = numpy_rng(seed, f"buffer/{k}/{t}")
        buf = list(state.buffer)
        u = rng.random(len(new))
        j = rng.random(len(new))
        if rule == "drsr":
            seen_eff = seen_eff * cfg.decay
        for i, x in enumerate(new):
            seen += 1
            seen_eff += 1.0
            if len(buf) < M:
                buf.append(int(x))
                continue
            if rule == "reservoir":
                slot = int(j[i] * seen)
                if slot < M:
                    buf[slot] = int(x)
            elif u[i] < M / max(seen_eff, M):
                buf[int(j[i] * M)] = int(x)
        keep = np.asarray(buf, dtype=np.int64)
        train = keep
    else:  # dds
        g = group[cand]
        avail = np.bincount(g, minlength=G)
        counts = dds_counts(avail, forecast, M, cfg.lam)
        ages = t - period[cand]
        keep = cand[select_freshest(g, ages, counts)]
        train = keep
    if rule == "marfoq":
        w = cfg.decay ** (t - period[train]).astype(np.float64)
    else:
        w = np.ones(len(train))
    mix = np.bincount(group[train], minlength=G).astype(np.float64)
    mix = mix / max(mix.sum(), 1.0)
    stats = {"n_train": int(len(train)), "residual_tv": float(0.5 * np.abs(mix - forecast).sum()) if len(train) else 1.0,
             "fresh_frac": float(np.isin(train, new).mean()) if len(train) else 0.0, "buffer_size": int(len(keep))}
    return ClientState(keep, seen, seen_eff), train, w, stats


def batch_plan(train: np.ndarray, w: np.ndarray, epochs: int, batch: int, seed: int, k: int, t: int):
    """(steps, batch) index and weight arrays of E epochs over ``train`` in a per-(client, period)
    random order (-1 pads the last batch of each epoch)."""
    import torch

    from icmlkit.lib.core.runtime import generator

    n = len(train)
    if n == 0:
        return np.zeros((0, batch), dtype=np.int64), np.zeros((0, batch))
    g = generator(seed, f"shuffle/{k}/{t}")
    per = -(-n // batch)
    idx = np.full((epochs * per, batch), -1, dtype=np.int64)
    ww = np.zeros((epochs * per, batch))
    for e in range(epochs):
        perm = torch.randperm(n, generator=g).numpy()
        pad = np.full(per * batch - n, -1, dtype=np.int64)
        order = np.concatenate([perm, pad]).reshape(per, batch)
        idx[e * per:(e + 1) * per] = np.where(order >= 0, train[np.maximum(order, 0)], -1)
        ww[e * per:(e + 1) * per] = np.where(order >= 0, w[np.maximum(order, 0)], 0.0)
    return idx, ww


def stack_plans(plans: list, batch: int):
    """Pad per-client plans to a common step count: (K, S, B) indices and weights."""
    S = max((p[0].shape[0] for p in plans), default=0)
    K = len(plans)
    idx = np.full((K, S, batch), -1, dtype=np.int64)
    ww = np.zeros((K, S, batch), dtype=np.float32)
    for i, (a, b) in enumerate(plans):
        idx[i, :len(a)] = a
        ww[i, :len(b)] = b
    return idx, ww
