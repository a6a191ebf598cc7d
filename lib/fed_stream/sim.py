"""The in-process streaming-FL simulator (the reference engine), vectorised over clients.

Round t (= period t), for every client k [the round structure is from the abstract; the rules
inside are reconstructed, see client.py and dds.py]:

1. the batch N_k^t arrives; the client's oracle forecasts D_k^{t+1} from histograms only;
2. the strategy's buffer rule picks the kept set (the new buffer) and the training set;
3. E local epochs of SGD from the global model, all clients at once (vmap over stacked
   parameters; under torchrun each process trains its slice of the clients);
4. the server averages the local models with FedAvg (number of samples) or SAW weights;
5. the global model is scored on each client's current distribution D_k^t and next one
   D_k^{t+1}: exactly sum_g hist[k, t, g] * acc_g on the held-out test pools;
6. ``--personalised`` [reconstructed: ours]: each client's own model, its local model of step 3
   (the global model fine-tuned by E epochs on the training set its buffer rule chose), is scored
   the same way on its own D_k^t and D_k^{t+1} (acc_personal_current / acc_personal_next): the
   setting in which a buffer that matches the next period can pay off, as one global model
   scored on every client averages the clients' drifts away.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from icmlkit.lib.core.checkpoint import fingerprint, restore
from icmlkit.lib.core.console import log
from icmlkit.lib.core.runtime import Dist, numpy_rng
from icmlkit.lib.fed_stream.client import BUFFER_RULE, USES_SAW, ClientState, batch_plan, client_round, stack_plans
from icmlkit.lib.fed_stream.dds import saw_weights
from icmlkit.lib.fed_stream.oracles import check_forecast, future_use, make_oracle, resolve_spec, tv

ROW_COLUMNS = ["client", "period", "acc_current", "acc_next", "buffer_size", "saw_weight", "n_train",
               "residual_tv", "fresh_frac", "forecast_tv_error"]
PERSONAL_COLUMNS = ["acc_personal_current", "acc_personal_next"]  # rows of a --personalised run
SUMMARY_KEYS = ["strategy", "oracle", "oracle_tv_error", "engine", "clients", "periods", "buffer_size",
                "acc_time_avg", "acc_next_time_avg", "acc_final", "seconds", "seconds_per_round"]
# DDS keeping less than this fraction of the buffer (once M samples have arrived) is warned about
LOW_KEPT_FRACTION = 0.5


@dataclass
class RunResult:
    rows: list           # one dict per (client, period), columns ROW_COLUMNS
    params: dict         # the final global model (name -> tensor)
    meta: dict           # model metadata for the .safetensors file
    summary: dict        # the JSON summary (SUMMARY_KEYS first)
    group_acc: np.ndarray  # (T, G) accuracy of the global model on each group after each round


def buffer_size(cfg, stream) -> int:
    """M: --buffer, else 5x the mean arrivals per client and period (ours)."""
    if cfg.buffer is not None:
        return int(cfg.buffer)
    return max(1, int(round(5 * len(stream.y) / (stream.clients * stream.periods))))


def checked_oracle(cfg, stream, seed: int = 0):
    """(cfg with ``--oracle auto`` resolved for this stream, what the oracle reads of the future:
    None, "generator", "given" or "actual-future-labels"). A known-future oracle on a user stream
    without ``--allow-future-oracle`` is a UsageError (see :func:`~.oracles.future_use`)."""
    spec = resolve_spec(cfg.oracle, stream.hist_source)
    label = future_use(make_oracle(spec, seed=seed), spec, stream.hist_source, cfg.allow_future_oracle)
    return dataclasses.replace(cfg, oracle=spec), label


def dds_kept_fraction(cfg, rows, stream, M: int) -> float | None:
    """DDS only: the mean buffer size over M, over the (client, period) rounds by which the client
    had received at least M samples (when a full buffer was possible); None otherwise."""
    if BUFFER_RULE.get(cfg.strategy) != "dds":
        return None
    full = np.cumsum(stream.arrivals(), axis=1) >= M
    kept = [r["buffer_size"] for r in rows if full[r["client"], r["period"]]]
    return float(np.mean(kept) / M) if kept else None


def observed_histograms(stream) -> np.ndarray:
    """(K, T, G) normalised group counts of each batch (a client's knowledge of its past)."""
    cnt = stream.counts().astype(np.float64)
    tot = cnt.sum(-1, keepdims=True)
    return np.where(tot > 0, cnt / np.maximum(tot, 1), 1.0 / stream.groups)


def forecasts(oracle, stream, t: int, observed: np.ndarray, clients: np.ndarray) -> np.ndarray:
    """The oracle's forecast rows for ``clients`` at period t (histograms in, never samples)."""
    gen = stream.hist[clients] if getattr(oracle, "needs_generating", False) else None
    f = oracle.forecast(t, observed[clients, : t + 1].copy(), None if gen is None else gen.copy(), clients.copy())
    return check_forecast(f, len(clients), stream.groups, getattr(oracle, "name", "plugin"))


def participants(cfg, K: int, seed: int, t: int) -> np.ndarray:
    if cfg.participation >= 1.0:
        return np.ones(K, dtype=bool)
    m = max(1, int(round(cfg.participation * K)))
    pick = numpy_rng(seed, f"participation/{t}").permutation(K)[:m]
    mask = np.zeros(K, dtype=bool)
    mask[pick] = True
    return mask


def server_weights(cfg, stats: list, active: np.ndarray) -> np.ndarray:
    """Aggregation weights: SAW for dds-saw / saw-only, else FedAvg's n_k / sum n."""
    n = np.array([s["n_train"] for s in stats], dtype=np.float64) * active
    if cfg.strategy in USES_SAW:
        d = np.array([s["residual_tv"] for s in stats])
        fr = np.array([s["fresh_frac"] for s in stats])
        return saw_weights(n, d, gamma=cfg.gamma, floor=cfg.saw_floor, mode=cfg.saw, fresh_frac=fr, rho=cfg.rho)
    if n.sum() <= 0:
        return np.full(len(n), 1.0 / len(n))
    return n / n.sum()


def _train_slice(model, gparams, X, Y, idx, ww, lr, mu, dist: Dist, device):
    """Local training of this process's slice of the clients, gathered to all (K, ...) stacks."""
    import torch

    from icmlkit.lib.fed_stream.models import local_train

    K = idx.shape[0]
    per = -(-K // dist.world)
    lo, hi = dist.rank * per, min(K, (dist.rank + 1) * per)
    rows = list(range(lo, hi)) or [K - 1]
    rows = rows + [rows[-1]] * (per - len(rows))  # pad to the same count on every rank
    bi = torch.as_tensor(idx[rows], device=device)
    bw = torch.as_tensor(ww[rows], device=device)
    local = local_train(model, gparams, X, Y, bi, bw, lr=lr, mu=mu)
    if not dist.active:
        return {k: v[:K] for k, v in local.items()}
    return {k: torch.cat(dist.all_gather(v), 0)[:K] for k, v in local.items()}


def run_stream(cfg, stream, *, seed: int = 0, device=None, dist: Dist | None = None, checkpointer=None,
               progress=None, warn: bool = True) -> RunResult:
    """Train one global model over the stream with ``cfg.strategy`` and ``cfg.oracle`` (see the
    module docstring); ``cfg.engine == "flower-sim"`` runs the same rounds through Flower's
    Simulation Engine (:mod:`icmlkit.lib.fed_stream.flower`). ``--oracle auto`` is resolved and
    the known-future rule checked first (:func:`checked_oracle`); the summary's ``warnings`` are
    logged (one line each on stderr) unless ``warn`` is false."""
    cfg.check()
    cfg, _ = checked_oracle(cfg, stream, seed)
    if cfg.engine == "flower-sim":
        from icmlkit.lib.fed_stream.flower import run_flower_sim

        return _warned(run_flower_sim(cfg, stream, seed=seed), warn)
    import torch

    from icmlkit.lib.fed_stream.models import aggregate, build_model, client_group_accuracy, group_accuracy, init_params

    dist = dist or Dist()
    device = device if device is not None else torch.device("cpu")
    K, T, G = stream.clients, stream.periods, stream.groups
    M = buffer_size(cfg, stream)
    oracle = make_oracle(cfg.oracle, seed=seed)
    model = build_model(cfg.model, stream.dim, stream.n_classes, seed).to(device)
    gparams = init_params(model, device)
    X = torch.as_tensor(stream.x, device=device)
    Y = torch.as_tensor(stream.y, device=device)
    Xt = torch.as_tensor(stream.x_test, device=device)
    Yt = torch.as_tensor(stream.y_test, device=device)
    Gt = torch.as_tensor(stream.group_test, device=device)
    observed = observed_histograms(stream)
    # the arrivals of (k, t) are contiguous (the stream is sorted by period, then client)
    starts = np.searchsorted(stream.period * K + stream.client, np.arange(K * T + 1))
    epochs = 1 if cfg.strategy == "online" else cfg.epochs
    mu = cfg.mu if cfg.strategy == "fedprox" else 0.0
    states = [ClientState.empty() for _ in range(K)]
    rows: list = []
    group_acc = np.zeros((T, G))
    fp = fingerprint({"cfg": vars(cfg), "seed": seed, "M": M}, stream.x, stream.y, stream.hist, stream.x_test)
    start = 0
    if checkpointer is not None:
        saved = checkpointer.load(fp)
        if saved is not None:
            start, extra = restore(saved)
            gparams = {k: v.to(device) for k, v in extra["params"].items()}
            states = [ClientState(b.numpy().astype(np.int64), int(s), float(e))
                      for b, s, e in zip(extra["buffers"], extra["seen"], extra["seen_eff"])]
            rows = list(extra["rows"])
            group_acc = extra["group_acc"].numpy().copy()
    t0 = time.perf_counter()
    all_clients = np.arange(K)
    it = range(start, T)
    if progress is not None:
        it = progress(it, total=T - start, desc=f"{cfg.strategy} rounds")
    for t in it:
        fc = forecasts(oracle, stream, t, observed, all_clients)
        err = tv(fc, stream.hist[:, min(t + 1, T - 1)])
        active = participants(cfg, K, seed, t)
        plans, stats = [], []
        for k in range(K):
            new = np.arange(starts[t * K + k], starts[t * K + k + 1])
            states[k], train, w, st = client_round(cfg.strategy, states[k], new, stream.group, stream.period,
                                                   fc[k], t, cfg, M, seed, k)
            plans.append(batch_plan(train, w, epochs, cfg.batch_size, seed, k, t) if active[k]
                         else (np.zeros((0, cfg.batch_size), dtype=np.int64), np.zeros((0, cfg.batch_size))))
            stats.append(st)
        p = server_weights(cfg, stats, active)
        idx, ww = stack_plans(plans, cfg.batch_size)
        stacked = _train_slice(model, gparams, X, Y, idx, ww, cfg.lr, mu, dist, device)
        if cfg.personalised:  # each client's local model on its own distributions (before aggregation)
            acc_k = client_group_accuracy(model, stacked, Xt, Yt, Gt, G).numpy()
            pcur = (stream.hist[:, t] * acc_k).sum(-1)
            pnxt = (stream.hist[:, t + 1] * acc_k).sum(-1) if t + 1 < T else None
        gparams = aggregate(stacked, torch.as_tensor(p, device=device))
        acc_g = group_accuracy(model, gparams, Xt, Yt, Gt, G).numpy()
        group_acc[t] = acc_g
        cur = stream.hist[:, t] @ acc_g
        nxt = stream.hist[:, t + 1] @ acc_g if t + 1 < T else None
        for k in range(K):
            rows.append({"client": k, "period": t, "acc_current": float(cur[k]),
                         "acc_next": None if nxt is None else float(nxt[k]),
                         "buffer_size": stats[k]["buffer_size"], "saw_weight": float(p[k]),
                         "n_train": stats[k]["n_train"], "residual_tv": stats[k]["residual_tv"],
                         "fresh_frac": stats[k]["fresh_frac"], "forecast_tv_error": float(err[k])})
            if cfg.personalised:
                rows[-1].update(acc_personal_current=float(pcur[k]),
                                acc_personal_next=None if pnxt is None else float(pnxt[k]))
        if checkpointer is not None and checkpointer.due(t + 1, T):
            checkpointer.save(t + 1, fp, extra={
                "params": {k: v.cpu() for k, v in gparams.items()},
                "buffers": [torch.as_tensor(s.buffer) for s in states], "seen": [s.seen for s in states],
                "seen_eff": [s.seen_eff for s in states], "rows": rows, "group_acc": torch.as_tensor(group_acc)})
    seconds = time.perf_counter() - t0
    meta = {"format": "icmlkit.fedstream.model/1", "model": cfg.model, "in_dim": str(stream.dim),
            "n_classes": str(stream.n_classes), "strategy": cfg.strategy, "oracle": cfg.oracle}
    return _warned(RunResult(rows=rows, params={k: v.cpu() for k, v in gparams.items()}, meta=meta,
                             summary=summarise(cfg, rows, K, T, M, seconds, T - start,
                                               getattr(oracle, "name", cfg.oracle), stream),
                             group_acc=group_acc), warn)


def _warned(res: RunResult, warn: bool) -> RunResult:
    if warn:
        for w in res.summary.get("warnings", []):
            log.warning(w)
    return res


def summarise(cfg, rows, K, T, M, seconds, rounds, oracle_name, stream=None) -> dict:
    cur = np.array([r["acc_current"] for r in rows])
    nxt = np.array([r["acc_next"] for r in rows if r["acc_next"] is not None])
    final = np.array([r["acc_current"] for r in rows if r["period"] == T - 1])
    err = np.array([r["forecast_tv_error"] for r in rows if r["period"] < T - 1])
    return {"strategy": cfg.strategy, "oracle": oracle_name, "oracle_tv_error": float(err.mean()) if len(err) else 0.0,
            "engine": cfg.engine, "clients": K, "periods": T, "buffer_size": M,
            "acc_time_avg": float(cur.mean()), "acc_next_time_avg": float(nxt.mean()) if len(nxt) else None,
            "acc_final": float(final.mean()), "seconds": round(seconds, 4),
            "seconds_per_round": round(seconds / max(rounds, 1), 6), "model": cfg.model, "lambda": cfg.lam,
            "gamma": cfg.gamma, "saw": cfg.saw, "epochs": cfg.epochs, "lr": cfg.lr,
            **(_personal_keys(rows) if getattr(cfg, "personalised", False) else {}),
            **(_stream_keys(cfg, rows, M, stream) if stream is not None else {})}


def _personal_keys(rows) -> dict:
    """--personalised: the time averages of each client's own model on its current distribution
    and on its next one (the periods 0..T-2; the last has no next)."""
    cur = [r["acc_personal_current"] for r in rows]
    nxt = [r["acc_personal_next"] for r in rows if r["acc_personal_next"] is not None]
    return {"personalised": True, "acc_personal_time_avg": float(np.mean(cur)),
            "acc_personal_next_time_avg": float(np.mean(nxt)) if nxt else None}


def _stream_keys(cfg, rows, M, stream) -> dict:
    """hist_source, oracle_future (what a known-future oracle read), allow_future_oracle,
    dds_kept_fraction and warnings (one line each)."""
    _, future = checked_oracle(cfg, stream)
    kept = dds_kept_fraction(cfg, rows, stream, M)
    warnings = []
    if kept is not None and kept < LOW_KEPT_FRACTION:
        warnings.append(f"{cfg.strategy}: DDS kept only {kept:.0%} of the buffer (M = {M}) once it could be full, "
                        f"at lambda {cfg.lam:g}; a larger --lambda keeps more data (the default 10 keeps it nearly "
                        "full; at 0.5 DDS lost 13 pp to FIFO on the digits benchmark)")
    return {"hist_source": stream.hist_source, "oracle_future": future,
            "allow_future_oracle": bool(cfg.allow_future_oracle),
            "dds_kept_fraction": None if kept is None else round(kept, 6), "warnings": warnings}

