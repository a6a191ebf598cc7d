"""The demo of estimate-fe: CARD on the harmonic triatomic, whose free energy is known by quadrature.

Everything is written into a folder given by the caller (the CLI builds it atomically).
"""
from __future__ import annotations

from pathlib import Path

from icmlkit.lib.core.io import write_json
from icmlkit.lib.estimate_fe.pipeline import run_system
from icmlkit.lib.estimate_fe.systems import builtin


def run_demo(folder: Path, *, seed: int = 0, device="cpu", steps: int = 400, n_frames: int = 3000,
             n_samples: int = 1500) -> dict:
    """Sample, train (``steps`` Stage I + steps/4 Stage II) and estimate on the triatomic; the summary
    (with "headline") is also written to ``folder/summary.json``."""
    folder = Path(folder)
    s = builtin("triatomic")
    s.device = str(device)
    fx = s.f_exact()
    res = run_system(s, folder, n_frames=n_frames, train_fraction=2 / 3, seed=seed, steps=steps,
                     stage2_steps=steps // 4, n_samples=n_samples, arch={}, device=device)
    err = None if res["f_kT"] is None else res["f_kT"] - fx
    if err is None or res["f_err_kT"] is None:
        headline = f"triatomic: BAR failed (overlap {res['overlap']:.3g}); quadrature F = {fx:.3f} kT"
    else:
        headline = (f"triatomic: F = {res['f_kT']:.3f} +- {res['f_err_kT']:.3f} kT vs quadrature {fx:.3f} "
                    f"(error {err:+.3f} kT), overlap {res['overlap']:.2f}")
    summary = {"headline": headline, "f_kT": res["f_kT"], "f_exact_kT": fx, "f_err_kT": res["f_err_kT"],
               "error_vs_exact_kT": err, "overlap": res["overlap"], "ess_forward": res["ess_forward"],
               "ess_reverse": res["ess_reverse"], "seconds_train": res["seconds_train"],
               "seconds_estimate": res["seconds_estimate"], "units": "kT; F/kT = -log(Z/V), lengths in Angstrom"}
    write_json(folder / "summary.json", summary)
    return summary
