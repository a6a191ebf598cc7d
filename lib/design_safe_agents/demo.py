"""The demo: MaMa vs quality-only search on a built-in environment, beside the fixed baselines.

Offline: a simulator of the *search* (scripted agents calibrated on AgentDojo), not of LLMs."""
from __future__ import annotations

import json
from pathlib import Path


def run_demo(folder: Path, seed: int = 0, env_name: str = "travel", iterations: int = 30) -> dict:
    from icmlkit.lib.core.io import write_rows, write_text
    from icmlkit.lib.design_safe_agents.api import read_env, search_designs, write_run_files
    from icmlkit.lib.design_safe_agents.config import GameConfig, LLMConfig, SearchConfig
    from icmlkit.lib.design_safe_agents.search import baseline_designs, evaluate, objective
    from icmlkit.lib.design_safe_agents.api import settings

    env = read_env(env_name)
    game = GameConfig()
    g = settings(game, env)
    rows = []
    for method in ("mama", "quality-only"):
        res = search_designs(env, game, SearchConfig(iterations=iterations, method=method), LLMConfig(), seed=seed)
        sub = Path(folder) / method
        sub.mkdir()
        write_run_files(sub, res.files)
        ev = evaluate(res.design, env, g)
        rows.append({"method": method, "quality": round(ev.quality, 4), "worst_case_safety": round(ev.worst_case_safety, 4),
                     "score": round(objective(ev.quality, ev.worst_case_safety, g), 4), "design": res.design.name})
    for name, d in baseline_designs(env).items():
        ev = evaluate(d, env, g)
        rows.append({"method": name, "quality": round(ev.quality, 4), "worst_case_safety": round(ev.worst_case_safety, 4),
                     "score": round(objective(ev.quality, ev.worst_case_safety, g), 4), "design": d.name})
    write_rows(Path(folder) / "comparison.csv", rows)
    m, q = rows[0], rows[1]
    headline = (f"{env_name}: MaMa worst-case safety {m['worst_case_safety']:.3f} at quality {m['quality']:.3f}; "
                f"quality-only {q['worst_case_safety']:.3f} at {q['quality']:.3f} (simulator of the search, eps=1)")
    summary = {"headline": headline, "env": env_name, "rows": rows}
    write_text(Path(folder) / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary
