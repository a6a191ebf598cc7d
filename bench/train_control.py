"""Benchmark of train-control (AMS for TD3/SAC) on this CPU machine, in one run (<= 8 minutes on 2 cores).

Two parts run the issue's protocols; the others are far smaller than the issue asks, and said so in the results:
- mechanism_full: the issue's protocol (FULL: 50k transitions, 20k updates, 256-256, batch 256), one seed
  per locked job (``--part mechanism_full --seed S``, kept in train_control_full_parts.json); once every
  seed is there it decides the mechanism targets and the reduced study below is kept as an extra table;
- lqr_full: the issue's return protocol (LQR_FULL: 15k steps, 2.5k of them random, the library's 256-256 /
  batch 256, the sheet's ~10 min per run), one (algo, seed) per job (``--part lqr_full --algo A --seed S``,
  two jobs at a time on one thread each), kept in the same file; once all 12 runs are there they decide the
  return targets (learning curves in train_control_lqr.png) and the reduced runs below stay as an extra table;
- mechanism: a fixed buffer of MECH_STEPS uniform-random Humanoid-v5 transitions (issue: ~50k), TD3
  learners with point vs AMS targets (K = 8, rho = 0.15) for MECH_UPDATES updates (issue: 20k), 64-64
  networks and batch 128 (issue: 256-256, 256), SEEDS seeds; L3 (Hessian trace and spectral norm by
  finite-difference HVPs at h = 0.05) and L4 on held-out transitions; validation TD loss;
- return: dmc:lqr-38 (38 actuators, the exact optimum from dm_control's lqr_solver, 300-step
  episodes), TD3 vs AMS-TD3 and SAC vs AMS-SAC for LQR_STEPS environment steps (64-64, batch 128),
  SEEDS seeds, mean +- std of the final fraction of the LQR-optimal return (never the best seed),
  also normalised as (R - R_zero) / (R_opt - R_zero);
- the same mechanism study on a random dmc:lqr-38 buffer (extra: its Q has real action curvature);
- ablation (SEEDS seeds, mean +- std, ABL_UPDATES updates on the mechanism buffer): K in {1, 2, 4, 8,
  17 = d}, i.i.d. vs orthogonal directions, per-batch directions, rho in {0.05, 0.15, 0.3};
- speed: the update time AMS / point at the usual sizes (256-256, batch 256, Humanoid dims), and
  dm_control dog-run environment steps/s with random actions. The paper's 1M-step dog-run claim
  (AMS > 400 return) is NOT reproduced on CPU.
Writes bench/results/train_control.json and .md.
Run:  flock /work/notes/cpu.lock timeout 600 .venv/bin/python bench/train_control.py
The parts (speed, mechanism, mechanism_lqr, lqr, ablation) can also run one job at a time
(``--part lqr`` or ``--part speed,mechanism``): each part's results are kept in
bench/results/train_control_parts.json and the report is written once every part is there
(``--report``: rewrite it from the stored parts alone).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("ICMLKIT_NO_PROGRESS", "1")

import numpy as np
import torch

from _common import commit, machine, target, today, write_results
from icmlkit.lib.train_control.agent import Agent
from icmlkit.lib.train_control.config import AgentConfig, CollectConfig, CriticStudyConfig, TrainConfig
from icmlkit.lib.train_control.envs import make_env
from icmlkit.lib.train_control.replay import ReplayBuffer, collect
from icmlkit.lib.train_control.study import _split, critic_study, train_critic
from icmlkit.lib.train_control.train import train
from icmlkit.lib.core.runtime import generator

QUICK = "--quick" in sys.argv
SMOKE = "--smoke" in sys.argv  # a seconds-long check that the script runs (writes nothing)
SEEDS = [0] if SMOKE else [0, 1] if QUICK else [0, 1, 2]
MECH_STEPS = 300 if SMOKE else 4000 if QUICK else 10000
MECH_UPDATES = 10 if SMOKE else 300 if QUICK else 1500
ABL_UPDATES = 5 if SMOKE else 200 if QUICK else 600
LQR_STEPS = 150 if SMOKE else 1500 if QUICK else 3000
LQR_START = 140 if SMOKE else 500 if QUICK else 1000
SMALL = dict(hidden=64, batch=128)
# the mechanism protocol, one seed per locked job (``--part mechanism_full --seed S``: 20k updates of
# each critic, about 12 min alone by the speed part; a first try timed out at 20 min on the loaded machine)
FULL = dict(transitions=300, updates=10, hidden=256, batch=256) if SMOKE else \
    dict(transitions=50_000, updates=20_000, hidden=256, batch=256)
T0 = time.perf_counter()


def log(msg):
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def ms(x):
    return round(float(x), 4)


def mean_std(xs):
    xs = [x for x in xs if x is not None]
    return (float(np.mean(xs)), float(np.std(xs))) if xs else (None, None)


def speed():
    """Update time (ms) of point TD3 vs AMS-TD3 at the usual sizes, and dog-run env steps/s."""
    out = {}
    obs_dim, act_dim = 348, 17
    g = generator(0, "bench")
    buf = ReplayBuffer(obs_dim, act_dim, 2048)
    for _ in range(2048):
        buf.add(torch.randn(obs_dim, generator=g).numpy(), (torch.rand(act_dim, generator=g) * 2 - 1).numpy(),
                0.0, torch.randn(obs_dim, generator=g).numpy(), 0.0)
    for algo in ("td3", "ams-td3", "sac", "ams-sac"):
        agent = Agent(obs_dim, act_dim, AgentConfig(), algo, 0)
        gens = {k: generator(0, k) for k in ("replay", "target", "ams", "actor")}
        for _ in range(2):
            agent.update(buf.sample(256, gens["replay"]), gens)
        t = time.perf_counter()
        n = 2 if SMOKE else 10
        for _ in range(n):
            agent.update(buf.sample(256, gens["replay"]), gens)
        out[f"update_ms_{algo}"] = ms(1000 * (time.perf_counter() - t) / n)
    out["update_time_ratio_td3"] = round(out["update_ms_ams-td3"] / out["update_ms_td3"], 3)
    out["update_time_ratio_sac"] = round(out["update_ms_ams-sac"] / out["update_ms_sac"], 3)
    try:
        env = make_env("dmc:dog-run")
        env.reset(0)
        g = generator(0, "dog")
        t, n = time.perf_counter(), 300
        for _ in range(n):
            env.step((torch.rand(env.act_dim, generator=g, dtype=torch.float64) * 2 - 1).numpy())
        out["dog_run_steps_per_s"] = round(n / (time.perf_counter() - t), 1)
        out["dog_run_hours_per_1M_env_steps"] = round(1e6 / out["dog_run_steps_per_s"] / 3600, 2)
        out["dog_act_dim"] = env.act_dim
    except Exception as exc:  # noqa: BLE001 - dm-control absent
        out["dog_run_steps_per_s"] = None
        out["dog_error"] = str(exc)
    return out


def mechanism(spec="Humanoid-v5", seeds=None, full=False):
    env = make_env(spec)
    col = collect(env, CollectConfig(steps=FULL["transitions"] if full else MECH_STEPS), 0)
    per_seed = []
    for s in SEEDS if seeds is None else seeds:
        sizes = dict(updates=FULL["updates"], hidden=FULL["hidden"], batch=FULL["batch"]) if full else \
            dict(updates=MECH_UPDATES, **SMALL)
        cfg = CriticStudyConfig(diag_probes=16, **sizes)
        res = critic_study(col.arrays, cfg, seed=s)
        per_seed.append(res.summary)
        log(f"mechanism {spec} seed {s}: {res.summary['reduction_l3_trace_abs']=} {res.summary['reduction_l4']=}")
    return col, per_seed


def ablation(col):
    d = col.arrays["act"].shape[1]
    base = dict(updates=ABL_UPDATES, diag_probes=16, **SMALL)
    variants = [("point (TD3 target noise)", "td3", {})]
    variants += [(f"K={k}", "ams-td3", dict(ams_k=k)) for k in (1, 2, 4, 8, d)]
    variants += [("K=8 iid", "ams-td3", dict(ams_k=8, ams_directions="iid")),
                 ("K=8 per-batch", "ams-td3", dict(ams_k=8, ams_resample="batch")),
                 ("K=8 rho=0.05", "ams-td3", dict(ams_k=8, ams_rho=0.05)),
                 ("K=8 rho=0.3", "ams-td3", dict(ams_k=8, ams_rho=0.3))]
    keys = ("l3_spectral", "l3_trace_abs", "l4", "val_td_loss_point")
    rows = []
    for name, algo, kw in variants:
        per = []
        for s in SEEDS:
            tr, val = _split(col.arrays, 0.1, s)
            _, _, f = train_critic(tr, val, CriticStudyConfig(**base, **kw), algo, s)
            per.append({k: f[k] for k in keys})
        row = {"variant": name, "seeds": len(SEEDS), "per_seed": per}
        for k in keys:
            row[k], row[f"{k}_std"] = mean_std([p[k] for p in per])
        rows.append(row)
        log(f"ablation {name}: {row['l4']=} {row['l3_spectral']=}")
    return rows


def lqr_returns():
    sizes = dict(total_steps=LQR_STEPS, learning_starts=LQR_START, eval_every=LQR_STEPS, **SMALL)
    return [lqr_run(algo, s, sizes) for algo in ALGOS for s in SEEDS]


# the return protocol (the sheet's "~10 min per run"): the library defaults (256-256, batch 256),
# one (algo, seed) run per job (``--part lqr_full --algo A --seed S``, two jobs at a time on one thread
# each), kept in train_control_full_parts.json under "lqr"; once all 12 are there they decide the return targets
LQR_FULL = dict(total_steps=600, learning_starts=300, eval_every=300) if SMOKE else \
    dict(total_steps=15_000, learning_starts=2_500, eval_every=2_500)
ALGOS = ("td3", "ams-td3", "sac", "ams-sac")


def lqr_run(algo: str, seed: int, sizes: dict) -> dict:
    cfg = TrainConfig(algo=algo, eval_episodes=3, diag_every=0, diag_batch=256, l2_states=2, diag_probes=8, **sizes)
    r = train("dmc:lqr-38", cfg, seed=seed)
    s = r.summary
    row = {"algo": algo, "seed": seed, **{k: s[k] for k in ("return_mean", "lqr_optimal_fraction", "lqr_normalised",
                                                             "l1", "l2", "l3_spectral", "l3_trace", "l4",
                                                             "pathway_gain", "steps_per_s", "update_ms", "diverged")},
           "curve": [[e["step"], e["lqr_optimal_fraction"]] for e in r.eval_rows]}
    log(f"lqr {algo} seed {seed}: frac {s['lqr_optimal_fraction']} norm {s['lqr_normalised']}")
    return row


PARTS = ("speed", "mechanism", "mechanism_lqr", "lqr", "ablation")
PARTS_FILE = Path(__file__).resolve().parent / "results" / "train_control_parts.json"
FULL_FILE = Path(__file__).resolve().parent / "results" / "train_control_full_parts.json"
SIZES = {"seeds": SEEDS, "mech_transitions": MECH_STEPS, "mech_updates": MECH_UPDATES, "ablation_updates": ABL_UPDATES,
         "lqr_steps": LQR_STEPS, "lqr_learning_starts": LQR_START, "hidden": SMALL["hidden"], "batch": SMALL["batch"],
         "quick": QUICK}


def run_part(name: str):
    if name == "speed":
        return speed()
    if name == "mechanism":
        return mechanism()[1]
    if name == "mechanism_lqr":
        return mechanism("dmc:lqr-38")[1]
    if name == "lqr":
        return lqr_returns()
    col = collect(make_env("Humanoid-v5"), CollectConfig(steps=MECH_STEPS), 0)  # the mechanism buffer again
    return ablation(col)


def arg(flag):
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv[:-1] else None


def parts_to_run() -> list:
    if "--report" in sys.argv:  # only (re)write the report from the stored parts
        return []
    if arg("--part") is None:
        return list(PARTS)
    names = [x.strip() for x in arg("--part").split(",") if x.strip()]
    bad = [x for x in names if x not in PARTS]
    if bad:
        raise SystemExit(f"--part: unknown part(s) {bad}; choose from {', '.join(PARTS)}")
    return names


# FULL_FILE sections: (section, key of its sizes, the sizes) of the two issue-protocol studies
MECH_SECTION, LQR_SECTION = ("seeds", "sizes", FULL), ("lqr", "lqr_sizes", LQR_FULL)


def run_full(seeds: list) -> None:
    """The mechanism study at the issue's sizes, one seed per call; rows kept in FULL_FILE by seed."""
    for s in seeds:
        t = time.perf_counter()
        row = mechanism(seeds=[s], full=True)[1][0]
        if SMOKE:
            log(f"mechanism_full smoke: {row['reduction_l4']=}")
        else:
            record(MECH_SECTION, str(s), row, t)


def run_lqr_full(algo: str, seeds: list) -> None:
    """The return study at the issue's sizes, one (algo, seed) per call; rows kept in FULL_FILE["lqr"]."""
    if algo not in ALGOS:
        raise SystemExit(f"--algo: unknown {algo!r}; choose from {', '.join(ALGOS)}")
    for s in seeds:
        t = time.perf_counter()
        row = lqr_run(algo, s, LQR_FULL)
        if not SMOKE:
            record(LQR_SECTION, f"{algo}/{s}", row, t, threads=torch.get_num_threads())


def record(section: tuple, key: str, row: dict, t0: float, **extra) -> None:
    """Store one run's row under FULL_FILE[section][key] (a section whose sizes changed starts empty),
    read-modify-written under an exclusive lock since two jobs may write at once."""
    import fcntl

    from icmlkit.lib.core.io import load_json, write_json

    name, size_key, sizes = section
    entry = {"result": row, "seconds": round(time.perf_counter() - t0, 1), "date": today(), "commit": commit(),
             "machine": machine(), **extra}
    with open(FULL_FILE.with_suffix(".lock"), "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        store = load_json(FULL_FILE) if FULL_FILE.exists() else {}
        if store.get(size_key) != sizes:
            store[size_key], store[name] = sizes, {}
        store[name][key] = entry
        write_json(FULL_FILE, store)


def stored(section: tuple, keys: list):
    """The stored entries of ``keys`` in that FULL_FILE section, or None while any is missing."""
    from icmlkit.lib.core.io import load_json

    if SMOKE or not FULL_FILE.exists():
        return None
    name, size_key, sizes = section
    store = load_json(FULL_FILE)
    runs = store.get(name, {}) if store.get(size_key) == sizes else {}
    return [runs[k] for k in keys] if all(k in runs for k in keys) else None


def lqr_full_rows():
    """Every (algo, seed) row of the issue-size return study, or None while any is missing."""
    return stored(LQR_SECTION, [f"{a}/{s}" for a in ALGOS for s in SEEDS])


def full_rows():
    """The full-size mechanism rows of every seed in SEEDS, or None while any is missing."""
    return stored(MECH_SECTION, [str(s) for s in SEEDS])


def main():
    from icmlkit.lib.core.io import load_json, write_json

    seeds = [int(x) for x in (arg("--seed") or ",".join(map(str, SEEDS))).split(",")]
    if arg("--part") == "lqr_full":
        run_lqr_full(arg("--algo") or "", seeds)
        if lqr_full_rows() is None:
            log("lqr_full: runs still to go (report not rewritten)")
            return
        sys.argv.append("--report")
    if arg("--part") == "mechanism_full":
        run_full(seeds)
        if full_rows() is None:
            log("mechanism_full: seeds still to run (report not rewritten)")
            return
        sys.argv.append("--report")
    store = {"sizes": SIZES, "parts": {}}
    if PARTS_FILE.exists() and not SMOKE:
        old = load_json(PARTS_FILE)
        if old.get("sizes") == SIZES:
            store = old
    for name in parts_to_run():
        t = time.perf_counter()
        log(name)
        store["parts"][name] = {"result": run_part(name), "seconds": round(time.perf_counter() - t, 1),
                                "date": today(), "commit": commit(), "machine": machine()}
        if not SMOKE:
            write_json(PARTS_FILE, store)
    missing = [p for p in PARTS if p not in store["parts"]]
    if missing:
        log(f"parts still to run: {', '.join(missing)} (report not written)")
        return
    report({k: v["result"] for k, v in store["parts"].items()},
           sum(v["seconds"] or 0.0 for v in store["parts"].values()), store["parts"])


def plot_lqr(path: Path, rows: list) -> bool:
    """Learning curves of the issue-size return runs: fraction of the LQR-optimal return vs steps, mean
    +- std over seeds per algorithm (False without matplotlib)."""
    from icmlkit.lib.core.plot import pyplot, save_png

    plt = pyplot(required=False)
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for algo in ALGOS:
        curves = [r["curve"] for r in rows if r["algo"] == algo and r.get("curve")]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        xs = [step for step, _ in curves[0][:n]]
        ys = np.array([[frac for _, frac in c[:n]] for c in curves], dtype=float)
        m, sd = ys.mean(0), ys.std(0)
        ax.plot(xs, m, marker="o", ms=3, label=f"{algo} ({len(curves)} seeds)")
        ax.fill_between(xs, m - sd, m + sd, alpha=0.15)
    ax.axhline(1.0, color="k", lw=0.8, ls="--", label="LQR optimum")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("fraction of the LQR-optimal return")
    ax.set_title("dmc:lqr-38, deterministic actor (mean ± std over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
    return True


def report(parts: dict, wall: float, meta: dict):
    res, md = {"speed": parts["speed"], "mechanism": parts["mechanism"], "mechanism_lqr": parts["mechanism_lqr"],
               "lqr": parts["lqr"], "ablation": parts["ablation"]}, []
    mech, mech_lqr = res["mechanism"], res["mechanism_lqr"]
    keys = ("l3_spectral", "l3_trace", "l3_trace_abs", "l4", "l4_std", "val_td_loss", "val_td_loss_point")

    def table(ms_):
        tab = {}
        for k in keys:
            for v in ("point", "ams"):
                tab[f"{v}_{k}"] = mean_std([m[f"{v}_{k}"] for m in ms_])
        for k in ("l3_spectral", "l3_trace_abs", "l4"):
            tab[f"reduction_{k}"] = mean_std([m[f"reduction_{k}"] for m in ms_])
        return tab

    full = full_rows()
    if full:  # the protocol decides the mechanism targets; the reduced study stays as an extra table
        res["mechanism_full"] = [r["result"] for r in full]
        res["mechanism_reduced_table"] = table(mech)
        meta = {**meta, **{f"mechanism_full seed {s}": {k: v for k, v in r.items() if k != "result"}
                           for s, r in zip(SEEDS, full)}}
        wall += sum(r["seconds"] for r in full)
    mech_tab = table(res["mechanism_full"] if full else mech)
    res["mechanism_table"] = mech_tab
    mech_size = (f"{FULL['transitions']} random Humanoid-v5 transitions, {FULL['updates']} updates, "
                 f"{FULL['hidden']}-{FULL['hidden']}, batch {FULL['batch']} (the issue's protocol)" if full else
                 f"{MECH_STEPS} random Humanoid-v5 transitions, {MECH_UPDATES} updates, 64-64 (issue: 50k, 20k, "
                 "256-256)")
    lqr_tab = res["mechanism_lqr_table"] = table(mech_lqr)
    def lqr_table(rows):
        out = {}
        for algo in ALGOS:
            rr = [r for r in rows if r["algo"] == algo]
            out[algo] = {"fraction": mean_std([r["lqr_optimal_fraction"] for r in rr]),
                         "normalised": mean_std([r["lqr_normalised"] for r in rr]),
                         "diverged": sum(bool(r["diverged"]) for r in rr)}
        return out

    lqr_full = lqr_full_rows()
    if lqr_full:  # the issue-size return runs decide the return targets; the reduced runs stay as an extra table
        res["lqr_full"] = [r["result"] for r in lqr_full]
        res["lqr_reduced_table"] = lqr_table(res["lqr"])
        meta = {**meta, **{f"lqr_full {r['result']['algo']} seed {r['result']['seed']}":
                           {k: v for k, v in r.items() if k != "result"} for r in lqr_full}}
        wall += sum(r["seconds"] for r in lqr_full)
    lq = res["lqr_table"] = lqr_table(res["lqr_full"] if lqr_full else res["lqr"])
    lqr_size = (f"{LQR_FULL['total_steps']} steps ({LQR_FULL['learning_starts']} random), 256-256, batch 256 (the "
                "sheet's ~10 min runs, one thread each)" if lqr_full else
                f"{LQR_STEPS} steps, 64-64, batch 128 (issue: ~10 min runs)")

    def red_ok(k):
        m = mech_tab[f"reduction_{k}"][0]
        return target(m, 0.30, m is not None and m >= 0.30,
                      f"mean over {len(SEEDS)} seeds of 1 - |AMS|/|point|; {mech_size}")

    p, a = mech_tab["point_val_td_loss"][0], mech_tab["ams_val_td_loss"][0]
    pp, ap = mech_tab["point_val_td_loss_point"][0], mech_tab["ams_val_td_loss_point"][0]
    targets = {
        "mechanism_l3_trace_reduction": red_ok("l3_trace_abs"),
        "mechanism_l3_spectral_reduction": red_ok("l3_spectral"),
        "mechanism_l4_reduction": red_ok("l4"),
        "mechanism_val_td_loss_not_worse": target(a, p, a <= p, f"each learner against its own target (mean over "
                                                  f"seeds); against the noiseless point target: AMS {ap:.4g} vs "
                                                  f"point {pp:.4g}"),
    }
    for k in ("l3_spectral", "l3_trace_abs", "l4"):
        m = lqr_tab[f"reduction_{k}"][0]
        targets[f"mechanism_lqr38_{k}_reduction"] = target(m, 0.30, m is not None and m >= 0.30,
                                                           "the same study on a random dmc:lqr-38 buffer (extra; "
                                                           "not in the issue)")
    for base in ("td3", "sac"):
        pm, ps = lq[base]["fraction"]
        am, as_ = lq[f"ams-{base}"]["fraction"]
        targets[f"lqr_fraction_ams_{base}_ge_{base}"] = target(am, pm, am >= pm,
                                                               f"mean fraction of the LQR-optimal return, "
                                                               f"{len(SEEDS)} seeds, {lqr_size}; normalised: AMS "
                                                               f"{lq[f'ams-{base}']['normalised'][0]:.3g} vs "
                                                               f"{lq[base]['normalised'][0]:.3g}")
        targets[f"lqr_seed_std_ams_{base}_lt_{base}"] = target(as_, ps, as_ < ps, "std over seeds of the fraction")
    upd_h = round(1e6 * res["speed"]["update_ms_ams-td3"] / 1000 / 3600, 1)
    targets["dog_run_1M_claim"] = target(None, 400, False, "not reproduced on CPU: 1M dog-run steps need "
                                         f"{res['speed'].get('dog_run_hours_per_1M_env_steps')} h of simulation and "
                                         f"about {upd_h} h of AMS-TD3 updates (256-256) here")
    result = {"tool": "train-control", "date": today(), "commit": commit(), "machine": machine(),
              "command": "flock /work/notes/cpu.lock timeout 600 .venv/bin/python bench/train_control.py "
                         "(or one --part per locked job)",
              "seconds": round(wall, 1), "sizes": SIZES, "mechanism_full_sizes": FULL if full else None,
              "parts": {k: {kk: vv for kk, vv in v.items() if kk != "result"} for k, v in meta.items()},
              "results": res, "targets": targets}

    def f(x):
        return "n/a" if x is None else f"{x:.4g}"

    md.append(f"# train-control benchmark ({today()}, {machine()['cores']} cores; the timed parts took {wall:.0f} s)\n")
    md.append("Parts: " + ", ".join(
        f"{k} ({v['date']}, commit {str(v['commit'])[:7]}"
        f"{'' if v['seconds'] is None else ', ' + format(v['seconds'], '.0f') + ' s'})" for k, v in meta.items()) + ".")
    carried = sorted({v["from"] for v in meta.values() if v.get("from")})
    md.append(("Parts without a time are " + "; ".join(carried) + ".\n") if carried else "")
    md.append(f"Sizes: {result['sizes']}; mechanism at the issue's protocol: {FULL if full else 'not run'}. The "
              "other parts are reduced from the issue's protocol (see the docstring).\n")

    def mech_rows(tab):
        md.append("| quantity | point | AMS (K=8, rho=0.15) |\n|---|---|---|")
        for k in keys:
            pm_, ps_ = tab[f"point_{k}"]
            am_, as__ = tab[f"ams_{k}"]
            md.append(f"| {k} | {f(pm_)} ± {f(ps_)} | {f(am_)} ± {f(as__)} |")

    md.append(f"## Mechanism (fixed random Humanoid-v5 buffer; {mech_size}; mean ± std over seeds)\n")
    mech_rows(mech_tab)
    if full:
        md.append(f"\n## Mechanism at the reduced size ({MECH_STEPS} transitions, {MECH_UPDATES} updates, 64-64)\n")
        mech_rows(res["mechanism_reduced_table"])
    md.append("\n## Mechanism on a random dmc:lqr-38 buffer (extra; reduced size)\n")
    mech_rows(lqr_tab)
    def lqr_rows(tab):
        md.append("| algo | fraction | normalised | diverged seeds |\n|---|---|---|---|")
        for algo, v in tab.items():
            md.append(f"| {algo} | {f(v['fraction'][0])} ± {f(v['fraction'][1])} | {f(v['normalised'][0])} ± "
                      f"{f(v['normalised'][1])} | {v['diverged']} |")

    md.append(f"\n## LQR-38 return ({lqr_size}; fraction of the LQR-optimal return; normalised 0 = zero control, "
              "1 = optimal)\n")
    lqr_rows(lq)
    if lqr_full:
        if not SMOKE and plot_lqr(PARTS_FILE.parent / "train_control_lqr.png", res["lqr_full"]):
            res["lqr_plot"] = "train_control_lqr.png"
            md.append("\nLearning curves: `bench/results/train_control_lqr.png`.")
        md.append(f"\n## LQR-38 return at the reduced size ({LQR_STEPS} steps, 64-64, batch 128)\n")
        lqr_rows(res["lqr_reduced_table"])
    md.append(f"\n## Ablation (mechanism buffer, {ABL_UPDATES} updates; mean ± std over {len(SEEDS)} seeds)\n")
    md.append("| variant | L3 spectral | L3 mean abs trace | L4 | val TD loss (point target) |\n|---|---|---|---|---|")
    for r in res["ablation"]:
        md.append(f"| {r['variant']} | " + " | ".join(f"{f(r[k])} ± {f(r[k + '_std'])}" for k in
                                                       ("l3_spectral", "l3_trace_abs", "l4", "val_td_loss_point")) + " |")
    sp = res["speed"]
    md.append(f"\n## Speed\n\nUpdate ms at 256-256 / batch 256 / Humanoid dims: TD3 {sp['update_ms_td3']}, AMS-TD3 "
              f"{sp['update_ms_ams-td3']} (ratio {sp['update_time_ratio_td3']}), SAC {sp['update_ms_sac']}, AMS-SAC "
              f"{sp['update_ms_ams-sac']} (ratio {sp['update_time_ratio_sac']}). dog-run: "
              f"{sp.get('dog_run_steps_per_s')} env steps/s (random actions).\n")
    md.append("## Targets\n\n| target | value | threshold | met | note |\n|---|---|---|---|---|")
    for k, v in targets.items():
        md.append(f"| {k} | {f(v['value']) if isinstance(v['value'], float) else v['value']} | {v['threshold']} | "
                  f"{v['met']} | {v['note']} |")
    if SMOKE:
        print("\n".join(md))
        return
    write_results("train_control", result, "\n".join(md) + "\n")
    log("done")


if __name__ == "__main__":
    main()
