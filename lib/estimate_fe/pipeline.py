"""Whole runs: one system (frames -> model -> estimate) and solvation (vacuum and OBC2, then the difference).

Seeds: one user seed; the frames, the model's initialisation, the batches and the model samples are
its named streams ("frames", "init", "batches", "samples"); the two environments of a solvation run
use the streams ``stream_seed(seed, "vacuum")`` and ``stream_seed(seed, "obc2")``."""
from __future__ import annotations

import math
from pathlib import Path

from icmlkit.lib.core.console import log
from icmlkit.lib.core.io import write_json, write_npz
from icmlkit.lib.core.runtime import stream_seed
from icmlkit.lib.estimate_fe import card


def run_system(system, folder: Path | None, *, n_frames: int = 2000, train_fraction: float = 0.5, seed: int = 0,
               steps: int = 1500, stage2_steps: int = 300, n_samples: int = 2000, estimator: str = "bar",
               md: dict | None = None, arch: dict | None = None, tag: str = "", device="cpu",
               frames: dict | None = None, kl_steps: int = 0) -> dict:
    """Sample (MD or exact/MALA; or take ``frames`` already drawn), train CARD on the first part,
    estimate on the rest."""
    if frames is None:
        log.info("%s%s: sampling %d frames ...", system.name, f" ({tag})" if tag else "", n_frames)
        fr = system.sample(n_frames, seed=seed, **(md or {}))
    else:
        fr, n_frames = frames, len(frames["x"])
    n_train = int(n_frames * train_fraction)
    bundle, info = card.train(system, fr["x"][:n_train], fr["u"][:n_train], steps=steps, stage2_steps=stage2_steps,
                              seed=seed, device=device, kl_steps=kl_steps, **(arch or {}))
    log.info("%s: trained (val NLL %.3f, %.1f s); estimating ...", system.name, info["val_nll"] or float("nan"),
             info["seconds_train"])
    res = card.estimate(bundle, system, fr["x"][n_train:], fr["u"][n_train:], n_samples=n_samples, seed=seed,
                        estimator=estimator, device=device)
    if folder is not None:
        stem = f"{system.name}{'.' + tag if tag else ''}"
        from icmlkit.lib.estimate_fe.frames import arrays

        write_npz(Path(folder) / f"{stem}.frames.npz", **arrays(system, fr["x"], fr["u"]))
        card.save(Path(folder) / f"{stem}.pt", bundle)
    return {**res, "seconds_md": fr["seconds_md"], "energy_evals_md": fr["energy_evals"],
            "seconds_train": info["seconds_train"], "val_nll": info["val_nll"], "box": info["box"],
            "n_frames": n_frames, "train_frames": info["train_frames"], "energy_evals_train": info["energy_evals_train"]}


def combine(per: dict, temperature: float) -> dict:
    """Delta G = kT (f_obc2 - f_vacuum) in kcal/mol from the two environments' estimates."""
    from icmlkit.lib.estimate_fe.mm import kcal_per_kT

    kT = kcal_per_kT(temperature)
    v, s = per["vacuum"], per["obc2"]
    def diff(key):
        return None if s[key] is None or v[key] is None else (s[key] - v[key]) * kT

    dg = diff("f_kT")
    err = None if s["f_err_kT"] is None or v["f_err_kT"] is None else math.hypot(s["f_err_kT"], v["f_err_kT"]) * kT
    return {
        "delta_g_kcal": dg, "delta_g_err_kcal": err, "f_vacuum_kT": v["f_kT"], "f_solvent_kT": s["f_kT"],
        "f_kT": [v["f_kT"], s["f_kT"]], "f_err_kT": [v["f_err_kT"], s["f_err_kT"]],
        "delta_g_exp_forward_kcal": diff("f_exp_forward_kT"),
        "overlap": min(v["overlap"], s["overlap"]), "ess_forward": min(v["ess_forward"], s["ess_forward"]),
        "ess_reverse": min(v["ess_reverse"], s["ess_reverse"]),
        "energy_evals": int(v["energy_evals"] + s["energy_evals"] + v.get("energy_evals_md", 0) + s.get("energy_evals_md", 0)
                            + v.get("energy_evals_train", 0) + s.get("energy_evals_train", 0)),
        "energy_evals_estimate": int(v["energy_evals"] + s["energy_evals"]),
        "seconds_md": v["seconds_md"] + s["seconds_md"], "seconds_train": v["seconds_train"] + s["seconds_train"],
        "seconds_estimate": v["seconds_estimate"] + s["seconds_estimate"], "temperature": temperature,
        "units": f"kcal/mol (delta_g), kT at {temperature} K (f)", "per_environment": per,
    }


def solvation(make_system, folder: Path | None, *, n_frames: int = 2000, interval: int = 50, steps: int = 1500,
              stage2_steps: int = 300, n_samples: int = 2000, estimator: str = "bar", seed: int = 0,
              equil: int = 5000, arch: dict | None = None, train_fraction: float = 0.5, device="cpu",
              kl_steps: int = 0) -> dict:
    """CARD in vacuum and in OBC2 (one model each), then Delta G in kcal/mol; the same end-state
    frames also give end-state BAR (:func:`~icmlkit.lib.estimate_fe.mm.endstate_bar`, key ``endstate_bar``),
    the model-free baseline at equal MD."""
    from icmlkit.lib.estimate_fe.mm import ENVIRONMENTS, endstate_bar, endstate_md

    systems = {env: make_system(env) for env in ENVIRONMENTS}
    temperature = systems["vacuum"].temperature
    log.info("%s: end-state MD, %d frames per environment ...", systems["vacuum"].name, n_frames)
    frames = endstate_md(systems, n_frames, seed=seed, interval=interval, equil=equil)
    per = {env: run_system(systems[env], folder, train_fraction=train_fraction, seed=stream_seed(seed, env),
                           steps=steps, stage2_steps=stage2_steps, n_samples=n_samples, estimator=estimator,
                           arch=arch, tag=env, device=device, frames=frames[env], kl_steps=kl_steps)
           for env in ENVIRONMENTS}
    out = combine(per, temperature)
    out["endstate_bar"] = endstate_bar(systems, frames, temperature)
    if folder is not None:
        write_json(Path(folder) / "summary.json", out)
    return out
