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

BIG = 1e8  # stands in for +inf works (a model sample with infinite or NaN target energy)
CAP = 100.0


def import_pymbar():
    """pymbar without its import-time banner (printed on stdout, which carries data)."""
    import logging

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm = require_module("pymbar", "fe")
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


def bar_estimate(w_F: np.ndarray, w_R: np.ndarray, estimator: str = "bar") -> dict:
    """Delta f (target - model) with its error, both EXP directions, overlap and ESS fractions."""
    pymbar = import_pymbar()
    from pymbar import other_estimators as oe

    wF = np.where(np.isfinite(w_F), w_F, BIG).astype(np.float64)
    wR = np.where(np.isfinite(w_R), w_R, BIG).astype(np.float64)
    # Absolute free energies of molecules are tens to hundreds of kT, and exp() of such works
    # overflows pymbar's overlap and BAR variance: shift both sides by a guess of Delta f (BAR is
    # exactly shift-covariant, overlap and ESS are invariant) and add it back. Works far above the
    # bulk (a model sample with two atoms on top of each other) have zero weight but would still
    # overflow into NaN: cap them CAP kT above the guess (their weight stays below e^-CAP).
    guess = 0.5 * (float(np.median(wF)) - float(np.median(wR)))
    wF = np.minimum(wF - guess, CAP)
    wR = np.minimum(wR + guess, CAP)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            overlap = float(oe.bar_overlap(wF, wR))
        except Exception:  # noqa: BLE001 - no overlap at all
            overlap = 0.0
        if estimator == "mbar":
            M, T = len(wF), len(wR)
            # states: 0 = model, 1 = target; columns: model samples then target frames.
            # Only differences matter: u_model = 0 and u_target = w on model samples; on target
            # frames u_model = w_R and u_target = 0 (a constant shift per sample is irrelevant).
            u_kn = np.zeros((2, M + T))
            u_kn[1, :M] = wF
            u_kn[0, M:] = wR
            mbar = pymbar.MBAR(u_kn, np.array([M, T]))
            r = mbar.compute_free_energy_differences()
            df, ddf = float(r["Delta_f"][0, 1]), float(r["dDelta_f"][0, 1])
        else:
            try:
                r = oe.bar(wF, wR)
                df, ddf = float(r["Delta_f"]), float(r["dDelta_f"])
            except Exception as exc:  # noqa: BLE001
                df, ddf = float("nan"), float("nan")
                warnings.warn(f"BAR failed: {exc}")
    return {"delta_f": df + guess, "delta_f_err": ddf, "exp_forward": exp_estimate(wF) + guess,
            "exp_reverse": -exp_estimate(wR) + guess,
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
