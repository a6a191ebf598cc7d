"""The ``demo``: a small mechanism study and a short AMS-TD3 run, in about a minute on 2 CPU cores.

1. collect 3000 uniform-random transitions of the 6-actuator LQR (``dmc:lqr-6``; Pendulum-v1 when
   dm-control is absent), 2. ``critic_study`` point vs AMS TD3 learners on it (400 updates, 64-64
   networks, batch 128: far smaller than the method sheet's 50k transitions / 20k updates),
3. train AMS-TD3 on Pendulum-v1 for 1500 steps (64-64, batch 64) and evaluate it.
Writes buffer.npz, study.csv, study.json, run/ (a full run directory) and summary.json.
"""
from __future__ import annotations

from pathlib import Path


def run_demo(folder, seed: int = 0, device="cpu", steps: int = 1500) -> dict:
    from icmlkit.lib.train_control.config import CollectConfig, CriticStudyConfig, TrainConfig
    from icmlkit.lib.train_control.envs import make_env
    from icmlkit.lib.train_control.replay import collect, write_replay
    from icmlkit.lib.train_control.study import critic_study
    from icmlkit.lib.train_control.train import train, write_run
    from icmlkit.lib.core.errors import EnvironmentProblem
    from icmlkit.lib.core.io import write_json, write_rows

    folder = Path(folder)
    try:
        env = make_env("dmc:lqr-6")
    except EnvironmentProblem:
        env = make_env("Pendulum-v1")
    col = collect(env, CollectConfig(steps=3000), seed)
    write_replay(folder / "buffer.npz", col)
    st = critic_study(col.arrays, CriticStudyConfig(updates=400, hidden=64, batch=128, diag_probes=8), seed, device)
    write_rows(folder / "study.csv", st.rows)
    write_json(folder / "study.json", st.summary)
    cfg = TrainConfig(algo="ams-td3", total_steps=steps, learning_starts=min(500, steps // 2), hidden=64, batch=64,
                      eval_every=steps, eval_episodes=2, diag_every=500, diag_batch=128, l2_states=2, diag_probes=4)
    res = train("Pendulum-v1", cfg, seed=seed, device=device)
    (folder / "run").mkdir()
    write_run(folder / "run", res)
    s = st.summary
    summary = {
        "headline": (f"{env.spec}: AMS vs point critic L3 spectral {s['ams_l3_spectral']:.3g} vs "
                     f"{s['point_l3_spectral']:.3g}, L4 {s['ams_l4']:.3g} vs {s['point_l4']:.3g}; "
                     f"Pendulum AMS-TD3 {steps} steps return {res.summary['return_mean']:.1f}"),
        "study_env": env.spec, "reduction_l3_spectral": s["reduction_l3_spectral"],
        "reduction_l3_trace": s["reduction_l3_trace"], "reduction_l4": s["reduction_l4"],
        "td_loss_not_worse": s["td_loss_not_worse"], "return_mean": res.summary["return_mean"],
        "pathway_gain": res.summary["pathway_gain"], "diverged": res.summary["diverged"]}
    write_json(folder / "summary.json", summary)
    return summary
