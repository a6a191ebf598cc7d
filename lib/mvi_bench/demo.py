"""``mvi-bench demo``: synthetic pairs -> four models (oracle, random, EfficientNet scorer locally and
behind a loopback OpenAI-compatible server) -> tables; FILM too when ../shared/data/film is present."""
from __future__ import annotations

import json
from pathlib import Path

from icmlkit.lib.core.io import read_jsonl, shared_data_dir, write_json, write_rows, write_text
from icmlkit.lib.mvi_bench import api
from icmlkit.lib.mvi_bench.config import RunConfig, ScoreConfig, SynthConfig
from icmlkit.lib.mvi_bench.data import read_dataset
from icmlkit.lib.mvi_bench.metric import COLUMNS, markdown_table
from icmlkit.lib.mvi_bench.models import EffnetScorer
from icmlkit.lib.mvi_bench.runner import RECORD_COLUMNS
from icmlkit.lib.mvi_bench.server import serve
from icmlkit.lib.mvi_bench.synth import make_synth

KEYS = ("acc_normal", "acc_misleading", "mvi_sensitivity", "mvi_sensitivity_ci", "flip_rate", "mcnemar_p")


def _score_run(folder: Path, name: str, cfg: RunConfig, ds, seed: int, device, model=None, bootstrap: int = 1000):
    res = api.run(cfg, ds, seed=seed, device=device, model=model)
    pred = folder / f"{name}.jsonl"
    write_rows(pred, res.records, columns=RECORD_COLUMNS, fmt=".jsonl")
    sc = api.score(ScoreConfig(bootstrap=bootstrap), [(str(pred), ln, r) for ln, r in read_jsonl(pred)], seed=seed)
    write_rows(folder / f"{name}.table.csv", sc.rows, columns=COLUMNS)
    return sc


def run_demo(folder: Path, seed: int = 0, device="cpu", pairs: int = 36) -> dict:
    folder = Path(folder)
    syn = folder / "synth"
    make_synth(SynthConfig(pairs=pairs - pairs % 6 or 6), syn, seed=seed)
    ds = read_dataset(syn)
    scorer = EffnetScorer(device=device)
    tables, models = [], {}
    for name, spec in (("oracle", "oracle"), ("random", "random"), ("effnet", "effnet")):
        sc = _score_run(folder, name, RunConfig(model=spec), ds, seed, device, model=scorer if name == "effnet" else None)
        models[name] = {k: sc.summary[k] for k in KEYS}
        tables.append(markdown_table(sc.rows, name))
    with serve(scorer) as srv:
        sc = _score_run(folder, "effnet-http", RunConfig(model=srv.spec("effnet"), concurrency=4), ds, seed, device)
    models["effnet-http"] = {k: sc.summary[k] for k in KEYS}
    tables.append(markdown_table(sc.rows, "effnet via loopback HTTP"))
    same = (folder / "effnet.table.csv").read_bytes() == (folder / "effnet-http.table.csv").read_bytes()
    film = None
    film_dir = shared_data_dir("film")
    if film_dir is not None:
        fds = read_dataset(film_dir, "film")
        film = {}
        for name, spec in (("oracle", "oracle"), ("random", "random"), ("effnet", "effnet")):
            sc = _score_run(folder, f"film-{name}", RunConfig(model=spec), fds, seed, device,
                            model=scorer if name == "effnet" else None)
            film[name] = {k: sc.summary[k] for k in KEYS}
            tables.append(markdown_table(sc.rows, f"FILM, {name}"))
    write_text(folder / "tables.md", "\n".join(tables))
    e = models["effnet"]
    headline = (f"synthetic {len(ds.pairs)} pairs: effnet Acc_n {e['acc_normal']}, Acc_m {e['acc_misleading']}, "
                f"MVI-S {e['mvi_sensitivity']}; oracle MVI-S {models['oracle']['mvi_sensitivity']}; "
                f"HTTP table == local table: {same}")
    summary = {"headline": headline, "models": models, "http_equals_local": same, "film": film}
    write_json(folder / "summary.json", json.loads(json.dumps(summary)))
    return summary
