"""Estimators between the model q (f_q = 0) and the Boltzmann target: BAR, MBAR, EXP, overlap, ESS.

All inputs are reduced energies in kT. With model samples (u_q = -log q, u_t = target) and target
frames, the forward works are w_F = u_t - u_q on model samples and the reverse works w_R =
u_q - u_t on target frames; BAR gives f_t - f_q = f_t directly (the zero-free-energy proposal).
pymbar 4 does the work; its JAX banner is silenced.
"""
from __future__ import annotations

import contextlib
import io
import math
import warnings

import numpy as np

from icmlkit.lib.core.errors import require_module

BIG = 1e8  # stands in for +inf works in pymbar's MBAR (the --estimator mbar path only)


def import_pymbar():
    """pymbar without its import-time banner (printed on stdout, which carries data)."""
    import logging

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm = require_module("pymbar", "estimate-fe")
        import pymbar.other_estimators  # noqa: F401
        import pymbar.timeseries  # noqa: F401
    logging.getLogger("pymbar").setLevel(logging.ERROR)
    return pm


def ess_fraction(log_w: np.ndarray) -> float:
    """Kish effective sample size of weights exp(log_w), as a fraction of the count."""
    lw = np.asarray(log_w, dtype=np.float64)
    lw = lw[np.isfinite(lw)] if np.isfinite(lw).any() else lw
    if lw.size == 0:
        return 0.0
    m = lw.max()
    w = np.exp(lw - m)
    return float(w.sum() ** 2 / (w * w).sum() / len(log_w))


def exp_estimate(w: np.ndarray) -> float:
    """Zwanzig: Delta f = -log mean exp(-w)."""
    w = np.asarray(w, dtype=np.float64)
    m = (-w).max()
    return float(-(m + math.log(np.exp(-w - m).mean())))


def _forward_works(w_F: np.ndarray, w_R: np.ndarray) -> np.ndarray:
    """Every sample's forward work u_t - u_q: w_F on model samples, -w_R on target frames (NaN,
    an undefined energy, counts as an infinitely bad sample on its side)."""
    wF = np.where(np.isnan(w_F), np.inf, w_F).astype(np.float64)
    wR = np.where(np.isnan(w_R), np.inf, w_R).astype(np.float64)
    return np.concatenate([wF, -wR])


def bar_solve(w_F: np.ndarray, w_R: np.ndarray) -> tuple[float, float]:
    """Bennett's acceptance ratio in log space on the raw works (no cap, no shift): Delta f solves
    sum_F s(-(M + w_F - Df)) = sum_R s(-(-M + w_R + Df)), s the logistic function (bounded: a
    huge or infinite work contributes 0), M = log(n_F / n_R); the error is Bennett's asymptotic
    formula (pymbar's default): var = <f_F^2>/<f_F>^2/n_F + <f_R^2>/<f_R>^2/n_R - (n_F + n_R)/(n_F n_R)
    with f_F, f_R the two logistic terms, the ratios taken in log space (a garbage model's terms
    underflow when squared). (nan, nan) when one side carries no weight at all."""
    from scipy.optimize import brentq
    from scipy.special import expit, logsumexp

    nF, nR = len(w_F), len(w_R)
    W = _forward_works(w_F, w_R)
    WF, WR = W[:nF], -W[nF:]
    M = math.log(nF / nR)
    if not (np.isfinite(WF).any() and np.isfinite(WR).any()):
        return float("nan"), float("nan")

    def g(df):
        return expit(df - M - WF).sum() - expit(-df + M - WR).sum()

    lo = hi = 0.5 * (float(np.median(WF[np.isfinite(WF)])) - float(np.median(WR[np.isfinite(WR)])))
    step = 1.0
    while g(lo) > 0:
        lo -= step
        step *= 2
    step = 1.0
    while g(hi) < 0:
        hi += step
        step *= 2
    df = brentq(g, lo, hi, xtol=1e-12, rtol=1e-14, maxiter=500)
    # <f^2>/<f>^2 in log space: the logistic terms of a poor proposal underflow when squared
    lfF, lfR = -np.logaddexp(0.0, -(df - M - WF)), -np.logaddexp(0.0, -(-df + M - WR))

    def ratio(lf):
        if not np.isfinite(lf).any():
            return math.inf
        return math.exp(logsumexp(2 * lf) - 2 * logsumexp(lf) + math.log(len(lf)))

    var = ratio(lfF) / nF + ratio(lfR) / nR - (nF + nR) / (nF * nR)
    return float(df), float(math.sqrt(max(var, 0.0)))


def bar_overlap(w_F: np.ndarray, w_R: np.ndarray, delta_f: float) -> float:
    """The scalar overlap of the two states (1 - the second eigenvalue of MBAR's overlap matrix,
    what pymbar's ``bar_overlap`` reports), in log space: N sum_n W_n0 W_n1 with
    W_n0 = 1 / (n_F + n_R e^(Df - W_n)) and W_n1 = e^(Df - W_n) W_n0."""
    from scipy.special import logsumexp

    nF, nR = len(w_F), len(w_R)
    if not math.isfinite(delta_f):
        return 0.0
    a = delta_f - _forward_works(w_F, w_R)
    with np.errstate(invalid="ignore", over="ignore"):
        terms = a - 2.0 * np.logaddexp(math.log(nF), math.log(nR) + a)
    terms = np.where(np.isfinite(a), terms, -np.inf)
    return float(min(1.0, (nF + nR) * math.exp(logsumexp(terms))))


def bar_estimate(w_F: np.ndarray, w_R: np.ndarray, estimator: str = "bar") -> dict:
    """Delta f (target - model) with its error, both EXP directions, overlap and ESS fractions.

    Every estimator, the overlap and the ESS are computed in log space on the works as they are:
    nothing is capped or clipped before the refusal check reads the overlap (a badly trained
    model must show its poor overlap, not a confident number). ``estimator='mbar'`` runs pymbar's
    MBAR (equal to BAR for two states) on the works shifted by the BAR solution."""
    df, ddf = bar_solve(w_F, w_R)
    overlap = bar_overlap(w_F, w_R, df)
    if estimator == "mbar" and math.isfinite(df):
        pymbar = import_pymbar()
        W = _forward_works(w_F, w_R) - df
        M, T = len(w_F), len(w_R)
        # states: 0 = model, 1 = target; only differences matter: u_model = 0, u_target = W - Df
        u_kn = np.zeros((2, M + T))
        u_kn[1] = np.where(np.isfinite(W), W, np.sign(W) * BIG)
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = pymbar.MBAR(u_kn, np.array([M, T])).compute_free_energy_differences()
        df, ddf = float(r["Delta_f"][0, 1]) + df, float(r["dDelta_f"][0, 1])
    wF = np.where(np.isnan(w_F), np.inf, w_F).astype(np.float64)
    wR = np.where(np.isnan(w_R), np.inf, w_R).astype(np.float64)
    return {"delta_f": df, "delta_f_err": ddf, "exp_forward": exp_estimate(wF), "exp_reverse": -exp_estimate(wR),
            "overlap": overlap, "ess_forward": ess_fraction(-wF), "ess_reverse": ess_fraction(-wR),
            "n_model": int(len(wF)), "n_target": int(len(wR))}


def decorrelate(u: np.ndarray) -> np.ndarray:
    """Indices of decorrelated frames (pymbar's statistical inefficiency of the energy series)."""
    import_pymbar()
    from pymbar import timeseries

    if len(u) < 10 or np.ptp(u) == 0:
        return np.arange(len(u))
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(timeseries.subsample_correlated_data(np.asarray(u, dtype=np.float64)), dtype=np.int64)
