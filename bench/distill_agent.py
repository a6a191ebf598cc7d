"""Benchmark of distill-agent (SCoRe).

1. Real data: `to-rl` on the upstream math_mps_trajectories.jsonl must reproduce the 13 repair items
   of math_mps_rl.json field for field (the plain items are a random draw upstream), and the example
   counts (64 tasks, 21 repaired, 49 correct, 8 hard) are recomputed.
2. The controlled make-env experiment (lib/distill_agent/demo.py:pipeline): A imitation SFT (equal teacher
   tokens to C), B BC init, C SCoRe-SFT, D C + SCoRe-RL (G = 8), E outcome-only GRPO (same rollout
   budget), held-out tasks longer than training, several seeds; targets D >= A + 10 points,
   D > C > B, reward-curve variance of D below E; hallucinated-value rate and teacher tokens per
   trajectory reported.

Run:  flock /work/notes/cpu.lock timeout 480 .venv/bin/python bench/distill_agent.py --seeds 3 --eval 500
Each seed's results are written to bench/results/distill_agent_parts/seed<S>-eval<N>.json as soon as it
finishes, and the tables are computed over every part of that --eval size present, so the issue's 3 seeds
x 500 held-out tasks can be run seed by seed (--seed-list 2) in jobs of <= 8 minutes.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import commit, machine, target, today, write_results  # noqa: E402

NAME = "distill_agent"


def upstream_check() -> dict:
    from icmlkit.lib.core.io import shared_data_dir
    from icmlkit.lib.distill_agent.agent import read_trajectories
    from icmlkit.lib.distill_agent.config import ToRLConfig
    from icmlkit.lib.distill_agent.convert import mps_counts, to_rl

    here = Path(__file__).resolve().parents[1] / "data" / "score"
    base = here if (here / "MPS").is_dir() else shared_data_dir("score")
    if base is None:
        return {"skipped": "no data/score or ../shared/data/score"}
    ex = Path(base) / "MPS" / "output" / "example"
    rows = read_trajectories(ex / "math_mps_trajectories.jsonl")
    res = to_rl(rows, ToRLConfig(), 0)
    gold = [x for x in json.loads((ex / "math_mps_rl.json").read_text()) if x["chosen"]]
    mine = {x["prompt"][0]["content"]: x for x in res.items if x["chosen"]}
    fields = ["prompt", "chosen", "chosen_observation", "rejected", "rejected_observation", "correct_step", "gt_answer"]
    equal = sum(1 for g in gold if all(mine.get(g["prompt"][0]["content"], {}).get(f) == g[f] for f in fields))
    return {"counts": mps_counts(rows), "gold_repair_items": len(gold), "our_repair_items": len(mine),
            "identical_items": equal, "plain_items_ours": res.summary["n_plain_items"],
            "plain_items_upstream": 17 - len(gold)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--eval", type=int, default=500)
    ap.add_argument("--seed-list", default=None, help="comma-separated seeds to run now (default: 0..seeds-1); "
                    "seeds already in the parts folder are reused")
    ap.add_argument("--smollm2", action="store_true", help="also run the SmolLM2-135M-Instruct student pipeline "
                    "(lib/distill_agent/demo.py:student_pipeline at SMOLLM2_SIZES; part smollm2-seed0.json)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    from icmlkit.lib.distill_agent.demo import BENCH_SIZES, pipeline

    t0 = time.time()
    up = upstream_check()
    sizes = {**BENCH_SIZES, "n_eval": args.eval}
    from icmlkit.lib.core.io import write_json

    parts = Path(__file__).resolve().parent / "results" / f"{NAME}_parts"
    todo = [int(x) for x in args.seed_list.split(",")] if args.seed_list else list(range(args.seeds))
    with tempfile.TemporaryDirectory(prefix="distill-bench-") as tmp:
        for s in todo:
            if (parts / f"seed{s}-eval{args.eval}.json").is_file():
                continue
            r = pipeline(Path(tmp) / f"seed{s}", s, sizes, log=lambda m: print(m, file=sys.stderr, flush=True))
            parts.mkdir(parents=True, exist_ok=True)
            write_json(parts / f"seed{s}-eval{args.eval}.json", {"seed": s, "date": today(), "commit": commit(),
                                                                 "load_average_1min": machine()["load_average_1min"],
                                                                 "result": r})
            print(f"seed {s}: " + " ".join(f"{k}={v['accuracy']:.3f}" for k, v in r["eval"].items()),
                  file=sys.stderr, flush=True)
    smol_part = parts / "smollm2-seed0.json"
    if args.smollm2 and not smol_part.is_file():
        from icmlkit.lib.distill_agent.demo import SMOLLM2_SIZES, student_pipeline

        with tempfile.TemporaryDirectory(prefix="distill-smollm2-") as tmp:
            r = student_pipeline(tmp, 0, SMOLLM2_SIZES, "smollm2",
                                 log=lambda m: print(m, file=sys.stderr, flush=True))
        parts.mkdir(parents=True, exist_ok=True)
        write_json(smol_part, {"seed": 0, "date": today(), "commit": commit(),
                               "load_average_1min": machine()["load_average_1min"], "result": r})
    smol = json.loads(smol_part.read_text())["result"] if smol_part.is_file() else None
    found = sorted(parts.glob(f"seed*-eval{args.eval}.json"))
    if not found:
        raise SystemExit(f"no seed results for --eval {args.eval} in {parts}")
    per_seed = [json.loads(f.read_text())["result"] for f in found]
    seeds_done = [json.loads(f.read_text())["seed"] for f in found]
    runs = ["A", "B", "C", "D", "E"]
    acc = {k: round(statistics.mean(r["eval"][k]["accuracy"] for r in per_seed), 4) for k in runs}
    hall = {k: round(statistics.mean(r["eval"][k]["hallucination_rate"] for r in per_seed), 4) for k in runs}
    var_d = statistics.mean(r["rl"]["D"]["reward_curve_var"] for r in per_seed)
    var_e = statistics.mean(r["rl"]["E"]["reward_curve_var"] for r in per_seed)
    tok_mps = statistics.mean(r["teacher_tokens_per_trajectory"]["mps"] for r in per_seed)
    tok_imi = statistics.mean(r["teacher_tokens_per_trajectory"]["imitation"] for r in per_seed)
    seconds = round(time.time() - t0, 1)
    targets = {
        "to_rl_reproduces_13_repair_items": target(up.get("identical_items"), 13, up.get("identical_items") == 13,
                                                   "field-for-field equality with math_mps_rl.json"),
        "example_counts": target(up.get("counts"), {"n_tasks": 64, "n_repaired": 21, "n_correct": 49, "n_hard": 8},
                                 up.get("counts") == {"n_tasks": 64, "n_repaired": 21, "n_correct": 49, "n_hard": 8},
                                 "recomputed from math_mps_trajectories.jsonl"),
        "D_ge_A_plus_10": target(round(acc["D"] - acc["A"], 4), 0.10, acc["D"] >= acc["A"] + 0.10,
                                 "held-out exact-answer accuracy, mean over seeds"),
        "D_gt_C_gt_B": target([acc["D"], acc["C"], acc["B"]], "D > C > B", acc["D"] > acc["C"] > acc["B"],
                              "held-out accuracy"),
        "D_reward_var_below_E": target([round(var_d, 6), round(var_e, 6)], "var(D) < var(E)", var_d < var_e,
                                       "variance of the per-step mean reward over the RL run"),
    }
    result = {
        "tool": "distill-agent", "date": today(), "commit": commit(), "machine": machine(),
        "command": f"flock /work/notes/cpu.lock .venv/bin/python bench/distill_agent.py "
                   f"--seeds {args.seeds} --eval {args.eval}{' --smollm2' if smol else ''} (seeds run: {seeds_done})",
        "results": {"upstream": up, "sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in sizes.items()},
                    "accuracy": acc, "hallucination_rate": hall,
                    "teacher_tokens_per_trajectory": {"mps": round(tok_mps, 3), "imitation": round(tok_imi, 3),
                                                      "ratio_mps_over_imitation": round(tok_mps / tok_imi, 3)},
                    "reward_curve_var": {"D": var_d, "E": var_e}, "per_seed": per_seed, "seeds": seeds_done,
                    "smollm2_student": smol or {"not_run": "no smollm2-seed0.json part (run with --smollm2)"},
                    "seconds": seconds},
        "targets": targets,
    }
    md = [f"# distill-agent benchmark ({today()})", "",
          f"Command: `{result['command']}`; seconds per seed {[r.get('seconds') for r in per_seed]} on "
          f"{machine()['cores']} cores.", "",
          f"Upstream: to-rl reproduces {up.get('identical_items')}/13 repair items of math_mps_rl.json; "
          f"counts {up.get('counts')}.", "",
          f"make-env: {len(per_seed)} seeds {seeds_done}, {sizes['n_eval']} held-out tasks with {sizes['eval_keys']} keys "
          f"(training {sizes['train_keys']}).", "",
          "| run | accuracy | hallucination rate |", "|---|---:|---:|"]
    names = {"A": "A imitation SFT", "B": "B BC init", "C": "C SCoRe-SFT", "D": "D SCoRe-SFT + RL",
             "E": "E outcome-only GRPO"}
    for k in runs:
        md.append(f"| {names[k]} | {acc[k]:.3f} | {hall[k]:.3f} |")
    md += ["", f"Teacher tokens per trajectory: MPS {tok_mps:.1f} vs full imitation {tok_imi:.1f} "
               f"(ratio {tok_mps / tok_imi:.2f}). Reward-curve variance D {var_d:.2e} vs E {var_e:.2e}.", "",
           "| target | value | threshold | met |", "|---|---|---|---|"]
    for k, t in targets.items():
        md.append(f"| {k} | {t['value']} | {t['threshold']} | {t['met']} |")
    if smol:
        e = smol["eval"]
        md += ["", f"SmolLM2-135M-Instruct student ({smol['sizes']}; {smol['seconds']} s): held-out accuracy on "
                   f"{smol['n_eval']} natural-language make-env tasks", "",
               "| student | accuracy | 95% CI | hallucination rate |", "|---|---:|---|---:|"]
        for k, label in (("base", "untouched"), ("B", "B BC init (before SCoRe)"), ("C", "C SCoRe-SFT (after)"),
                         ("A", "A imitation SFT (equal teacher tokens)")):
            md.append(f"| {label} | {e[k]['accuracy']:.3f} | {e[k]['accuracy_ci']} | {e[k]['hallucination_rate']} |")
    else:
        md += ["", "SmolLM2-135M-Instruct student: not run (bench/distill_agent.py --smollm2)."]
    write_results(NAME, result, "\n".join(md) + "\n")
    print(json.dumps({"accuracy": acc, "targets": {k: v["met"] for k, v in targets.items()}, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
