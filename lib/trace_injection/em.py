"""Maximum-likelihood (EM) fit of the noisy-OR edge confidences and the action leak on labelled traces,
and the calibration of the fitted counterfactual (**reconstructed**: the paper's fitting procedure is
not known; the official repository uses hand-set constants).

Model. Every edge e of the trigger graph has confidence ``c_e = theta[strategy(e)] * w_e`` (``w_e``:
the strength the inference strategy found, :mod:`.graph`); in the noisy-OR each edge is an
independent activation Z_e ~ Bernoulli(c_e), and an action also fires on its own with the leak l.
For a sink m that happened, its parents split into untrusted spans U (the treatments) and the rest T
(the trusted task, other actions) plus the leak. With Q_U = prod_U (1 - c), Q_T = (1 - l) prod_T (1 - c):

    P(m) = 1 - Q_T Q_U,   D_m = Q_T (1 - Q_U) = P(m | do(U = 1)) - P(m | do(U = 0))  (the ATE),
    P(compromised) = 1 - prod_m (1 - D_m)   over the sinks of the verdict,

D_m being the probability that m happens *because of* the untrusted spans (it happens under
do(U = 1) and not under do(U = blocked)).

The likelihood of the trace labels under this model is maximised by EM over the latent activations
(closed-form posteriors given D_m, see :func:`_estep`; the model treats each sink as a draw of its
mechanism, not conditioned on its having happened); the M-step maximises the expected complete
log-likelihood per strategy (a 1-D concave problem, solved by bisection) with a Beta prior of
``strength`` pseudo-observations centred on the hand-set ``config.CONFIDENCE`` (the prior). The
factorisation is sink-local (each sink with its direct trigger parents): exact when the treatments
are the direct parents of the sinks, which is how the graph is built (every untrusted span is a
treatment); multi-hop effects are left to the exact propagation of :mod:`.scm`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from icmlkit.lib.trace_injection.config import CONFIDENCE, confidence_table
from icmlkit.lib.trace_injection.scm import LEAK_ACTION

FIXED = ("produced", "segment", "state")  # structural edges (a call -> its output, a span -> its piece)
STRATEGIES = tuple(k for k in CONFIDENCE if k not in FIXED)


@dataclass
class Factors:
    """The sink-local factors of a set of traces, flattened: one row per (sink, parent edge)."""

    trace: np.ndarray          # trace index of each sink
    edge_sink: np.ndarray      # sink row of each edge
    untrusted: np.ndarray      # bool: the parent is an untrusted span (a treatment)
    strategy: np.ndarray       # index into STRATEGIES
    weight: np.ndarray         # w_e
    n_traces: int


def sink_factors(graphs: list, sinks: list[list[str]]) -> Factors:
    """Factors of ``graphs`` (one :class:`.graph.TraceGraph` each) for the verdict sinks ``sinks[k]``
    of graph k (as chosen by :func:`.detect.verdict_sinks`)."""
    tr, es, un, st, wt = [], [], [], [], []
    row = 0
    idx = {s: i for i, s in enumerate(STRATEGIES)}
    for k, (g, ss) in enumerate(zip(graphs, sinks)):
        into: dict = {}
        for e in g.trigger_edges():
            if e.strategy in idx:
                into.setdefault(e.dst, []).append(e)
        for s in ss:
            tr.append(k)
            for e in into.get(s, ()):
                es.append(row)
                un.append(bool(g.nodes[e.src].candidate))
                st.append(idx[e.strategy])
                wt.append(e.weight)
            row += 1
    return Factors(np.array(tr, dtype=np.int64), np.array(es, dtype=np.int64), np.array(un, dtype=bool),
                   np.array(st, dtype=np.int64), np.array(wt, dtype=np.float64), len(graphs))


def theta_vector(table: dict | None) -> np.ndarray:
    """theta per :data:`STRATEGIES` from a strategy table (missing ones: the prior CONFIDENCE; a missing
    ``named_*`` one the table's plain strategy, :func:`.config.confidence_table`)."""
    t = confidence_table(table)
    return np.array([t[s] for s in STRATEGIES], dtype=np.float64)


def _sums(f: Factors, theta: np.ndarray, leak: float):
    c = np.clip(theta[f.strategy] * f.weight, 0.0, 1.0 - 1e-9)
    n = len(f.trace)
    lq = np.log1p(-c)
    log_qu = np.bincount(f.edge_sink[f.untrusted], lq[f.untrusted], minlength=n)
    log_qt = np.bincount(f.edge_sink[~f.untrusted], lq[~f.untrusted], minlength=n) + np.log1p(-leak)
    qu, qt = np.exp(log_qu), np.exp(log_qt)
    return c, qu, qt, qt * (1.0 - qu)


def probability(f: Factors, theta: np.ndarray, leak: float) -> tuple[np.ndarray, np.ndarray]:
    """(P(compromised) per trace, the ATE D_m per sink row) under the model."""
    _, _, _, pn = _sums(f, theta, leak)
    log_keep = np.bincount(f.trace, np.log(np.maximum(1.0 - pn, 1e-300)), minlength=f.n_traces)
    return 1.0 - np.exp(log_keep), pn


def _estep(f: Factors, y: np.ndarray, theta: np.ndarray, leak: float):
    """Posterior mean of every activation (edges, and the leak of every sink) given the labels."""
    c, qu, qt, d = _sums(f, theta, leak)
    py, _ = probability(f, theta, leak)
    yt = y[f.trace]
    w1 = np.clip(np.where(yt == 1, d / np.maximum(py[f.trace], 1e-12), 0.0), 0.0, 1.0)  # P(D_m = 1 | Y)
    nd = np.maximum(1.0 - d, 1e-12)                                    # P(D_m = 0)
    es = f.edge_sink
    # given D_m = 1: no trusted edge and no leak fired, some untrusted one did; given D_m = 0: a
    # trusted edge (or the leak) fired, or no untrusted one did
    r_u = w1[es] * c / np.maximum(1.0 - qu[es], 1e-12) + (1.0 - w1[es]) * c * (1.0 - qt[es]) / nd[es]
    r_t = (1.0 - w1[es]) * c / nd[es]
    r = np.clip(np.where(f.untrusted, r_u, r_t), 0.0, 1.0)
    r_leak = np.clip((1.0 - w1) * leak / nd, 0.0, 1.0)
    ll = float(np.sum(np.where(y == 1, np.log(np.maximum(py, 1e-12)), np.log(np.maximum(1.0 - py, 1e-12)))))
    return r, r_leak, ll


def _mstep(r, w, prior: float, strength: float) -> float:
    """argmax_theta sum r log(theta w) + (1 - r) log(1 - theta w) + Beta prior (bisection)."""
    lo, hi = 1e-4, 1.0 - 1e-6
    a1, b1 = strength * prior, strength * (1.0 - prior)
    for _ in range(50):
        t = (lo + hi) / 2
        g = (r.sum() + a1) / t - np.sum((1.0 - r) * w / np.maximum(1.0 - t * w, 1e-12)) - b1 / (1.0 - t)
        lo, hi = (t, hi) if g > 0 else (lo, t)
    return (lo + hi) / 2


@dataclass
class EMFit:
    theta: dict                  # strategy -> fitted confidence (the fixed structural ones omitted)
    leak: float
    loglik: list = field(default_factory=list)   # per iteration (non-decreasing up to the prior term)
    iterations: int = 0

    def table(self) -> dict:
        return {**CONFIDENCE, **self.theta}

    def vector(self) -> np.ndarray:
        return theta_vector(self.theta)

    def to_json(self) -> dict:
        return {"theta": {k: round(v, 6) for k, v in self.theta.items()}, "leak": round(self.leak, 6),
                "iterations": self.iterations, "loglik": [round(x, 4) for x in self.loglik[-3:]]}


def fit_em(f: Factors, y, prior: dict | None = None, leak0: float = LEAK_ACTION, strength: float = 5.0,
           iterations: int = 100, tol: float = 1e-6) -> EMFit:
    """EM maximum-likelihood (MAP with the Beta prior) estimate of theta and the leak on labelled traces."""
    y = np.asarray(y, dtype=int)
    prior = {**CONFIDENCE, **(prior or {})}
    theta = np.array([prior[s] for s in STRATEGIES], dtype=np.float64)
    leak = float(leak0)
    hist: list = []
    it = 0
    for it in range(1, iterations + 1):
        r, r_leak, ll = _estep(f, y, theta, leak)
        hist.append(ll)
        for k, s in enumerate(STRATEGIES):
            m = f.strategy == k
            if m.any():
                theta[k] = _mstep(r[m], f.weight[m], prior[s], strength)
        leak = _mstep(r_leak, np.ones_like(r_leak), leak0, strength)
        if len(hist) > 1 and abs(hist[-1] - hist[-2]) < tol * max(1.0, abs(hist[-1])):
            break
    return EMFit({s: float(theta[k]) for k, s in enumerate(STRATEGIES)}, float(leak), hist, it)


def calibration(p, y, bins: int = 10) -> dict:
    """Reliability of predicted probabilities ``p`` against 0/1 outcomes ``y``: equal-width bins
    (n, mean predicted, observed rate), the expected calibration error and the Brier score."""
    p, y = np.asarray(p, dtype=float), np.asarray(y, dtype=float)
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(p, edges[1:-1]), 0, bins - 1)
    rows, ece = [], 0.0
    for b in range(bins):
        m = which == b
        if not m.any():
            continue
        conf, acc = float(p[m].mean()), float(y[m].mean())
        ece += m.mean() * abs(conf - acc)
        rows.append({"bin": [round(edges[b], 2), round(edges[b + 1], 2)], "n": int(m.sum()),
                     "predicted": round(conf, 4), "observed": round(acc, 4)})
    return {"ece": round(float(ece), 4), "brier": round(float(np.mean((p - y) ** 2)), 4), "bins": rows}


def simulate(rng: np.random.Generator, theta: dict, leak: float, n: int = 3000) -> tuple[Factors, np.ndarray]:
    """Traces drawn from the model itself (tests: EM recovers ``theta`` and ``leak``): each trace has
    1-3 sinks, each with 1-4 parent edges of random strategies, sides and strengths; the label is
    drawn from the activations (a sink depends on untrusted content when an untrusted edge fires and
    neither a trusted one nor the leak does)."""
    tr, es, un, st, wt, y = [], [], [], [], [], []
    row = 0
    for k in range(n):
        hit = False
        for _ in range(rng.integers(1, 4)):
            m = int(rng.integers(1, 5))
            s = rng.integers(len(STRATEGIES), size=m)
            u = rng.random(m) < 0.5
            w = rng.uniform(0.3, 1.0, size=m)
            c = np.array([theta[STRATEGIES[j]] for j in s]) * w
            z = rng.random(m) < c
            lk = rng.random() < leak
            hit |= bool((z & u).any()) and not bool((z & ~u).any()) and not lk
            es += [row] * m
            un += u.tolist()
            st += s.tolist()
            wt += w.tolist()
            tr.append(k)
            row += 1
        y.append(int(hit))
    f = Factors(np.array(tr), np.array(es), np.array(un, dtype=bool), np.array(st), np.array(wt), n)
    return f, np.array(y)
