"""Benchmark of mvi-bench (issue 15), offline, in one run (about 2-4 minutes on 2 cores):

1. the metric on fixture pairs equals hand-computed values (incl. Acc_n = 0 -> NaN, negative MVI-S);
2. on make-synth (120 pairs): oracle -> Acc 1 and MVI-S 0; random -> accuracy inside the 95 %
   (exact binomial) interval of its expected chance accuracy mean(1/k);
3. the EfficientNet-Lite0 option scorer through the local adapter and through a loopback
   OpenAI-compatible server on 127.0.0.1 (a separate scorer instance) gives identical score tables
   (the scorer's MVI-S is a plausibility check, not a paper claim);
4. a run killed halfway and resumed from its response cache gives byte-identical tables; two runs
   with one seed give identical permutations;
5. FILM (../shared/data/film, 60 illusion/control pairs) scored by every offline model, per FILM
   illusion category, with bootstrap CIs;
6. speed: prompts/s at --concurrency 8 vs 1 against the loopback server with 200 ms latency
   (target >= 5x), and the harness overhead per item vs the bare adapter call (loopback, 0 ms).

Writes bench/results/mvi_bench.json and bench/results/mvi_bench.md.
Run:  .venv/bin/python bench/mvi_bench.py
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from _common import commit, machine, target, today, write_results
from icmlkit.lib.core.io import shared_data_dir, write_rows
from icmlkit.lib.mvi_bench import RunConfig, ScoreConfig, SynthConfig, api, make_synth, markdown_table, read_dataset
from icmlkit.lib.mvi_bench.data import Dataset
from icmlkit.lib.mvi_bench.metric import COLUMNS, score_pairs
from icmlkit.lib.mvi_bench.models import EffnetScorer, EndpointModel, Model, Request
from icmlkit.lib.mvi_bench.protocol import build_prompt
from icmlkit.lib.mvi_bench.server import serve

SEED = 0
BOOT = 2000


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def table_bytes(records, path: Path, seed=SEED) -> bytes:
    sc = api.score(ScoreConfig(bootstrap=BOOT), [("r", i + 1, r) for i, r in enumerate(records)], seed=seed)
    write_rows(path, sc.rows, columns=COLUMNS)
    return path.read_bytes(), sc


def fixture_check() -> dict:
    # (normal right, misleading right) per pair; hand-computed values in `want`
    pairs = ([("resemblance", 1, 0), ("resemblance", 1, 1), ("resemblance", 1, 0), ("resemblance", 0, 1)]
             + [("material", 0, 1), ("material", 0, 0)] + [("illusion", 0, 1), ("illusion", 1, 1)])
    ps = [{"pair_id": f"p{i}", "category": c, "subcategory": "", "normal": bool(n), "misleading": bool(m),
           "asked": 2, "invalid": 0} for i, (c, n, m) in enumerate(pairs)]
    s = score_pairs(ps, ScoreConfig(bootstrap=0)).summary
    got = {"overall": s["mvi_sensitivity"], "resemblance": s["per_category"]["resemblance"]["mvi_sensitivity"],
           "material": s["per_category"]["material"]["mvi_sensitivity"],
           "illusion": s["per_category"]["illusion"]["mvi_sensitivity"], "flip_rate": s["flip_rate"],
           "acc_normal": s["acc_normal"], "acc_misleading": s["acc_misleading"]}
    want = {"overall": -0.25, "resemblance": round(1 / 3, 6), "material": None, "illusion": -1.0, "flip_rate": 0.5,
            "acc_normal": 0.5, "acc_misleading": 0.625}
    return {"got": got, "want": want, "equal": got == want}


def chance_interval(ds, acc, n_items):
    from scipy.stats import binomtest

    expect = sum(1 / len(it.choices) for it in ds.items) / len(ds.items)
    ci = binomtest(int(round(acc * n_items)), n_items, expect).proportion_ci(0.95)
    return expect, [round(ci.low, 4), round(ci.high, 4)]


class Constant(Model):
    name = "constant"

    def answer(self, req):
        return "A"


def speed(ds) -> dict:
    items = ds.items[:40]
    reqs = [Request(it.id, it.image(), "image/png", build_prompt(it.question, it.choices), it.choices, "")
            for it in items]
    out = {}
    with serve(Constant(), latency=0.2) as srv:
        for conc in (1, 8):
            m = EndpointModel(srv.spec("c"), concurrency=conc)
            sub = Dataset(ds.items[: (40 if conc == 1 else 160)], ds.path, ds.format)
            t = time.perf_counter()
            res = api.run(RunConfig(model=m.name, concurrency=conc), sub, seed=SEED, model=m)
            dt = time.perf_counter() - t
            out[f"prompts_per_second_c{conc}"] = round(res.summary["n_prompts"] / dt, 3)
    out["speedup_c8_vs_c1"] = round(out["prompts_per_second_c8"] / out["prompts_per_second_c1"], 2)
    with serve(Constant(), latency=0.0) as srv:
        m = EndpointModel(srv.spec("c"))
        for r in reqs[:5]:
            m.answer(r)  # warm-up
        t = time.perf_counter()
        for r in reqs:
            m.answer(r)
        bare = (time.perf_counter() - t) / len(reqs)
        sub = Dataset(items, ds.path, ds.format)
        t = time.perf_counter()
        api.run(RunConfig(model=m.name), sub, seed=SEED, model=m)
        harness = (time.perf_counter() - t) / len(items)
    out.update({"bare_call_ms": round(bare * 1e3, 3), "harness_per_item_ms": round(harness * 1e3, 3),
                "overhead_ms_per_item": round((harness - bare) * 1e3, 3), "overhead_ratio": round(harness / bare, 3)})
    return out


def main():
    t0 = time.perf_counter()
    res: dict = {}
    tmp = Path(tempfile.mkdtemp(prefix="mvi-bench-"))
    log("fixtures")
    res["fixtures"] = fixture_check()
    log("make-synth 120 pairs")
    make_synth(SynthConfig(pairs=120), tmp / "synth", seed=SEED)
    ds = read_dataset(tmp / "synth")
    n_items = len(ds.items)
    tables, models = [], {}
    scorer = EffnetScorer()
    for name in ("oracle", "random", "effnet"):
        log(f"synthetic: {name}")
        t = time.perf_counter()
        r = api.run(RunConfig(model=name), ds, seed=SEED, model=scorer if name == "effnet" else None)
        secs = time.perf_counter() - t
        tb, sc = table_bytes(r.records, tmp / f"{name}.csv")
        s = sc.summary
        models[name] = {"acc_normal": s["acc_normal"], "acc_misleading": s["acc_misleading"],
                        "mvi_sensitivity": s["mvi_sensitivity"], "mvi_sensitivity_ci": s["mvi_sensitivity_ci"],
                        "flip_rate": s["flip_rate"], "mcnemar_p": s["mcnemar_p"], "seconds": round(secs, 2),
                        "per_category": {c: {k: v[k] for k in ("acc_normal", "acc_misleading", "mvi_sensitivity",
                                                                "ci_low", "ci_high")}
                                         for c, v in s["per_category"].items()}}
        tables.append(markdown_table(sc.rows, f"make-synth, {name}"))
        if name == "effnet":
            local_table = tb
        if name == "random":
            acc = (s["acc_normal"] + s["acc_misleading"]) / 2
            expect, ci = chance_interval(ds, acc, n_items)
            models[name].update({"accuracy": round(acc, 4), "chance": round(expect, 4), "accuracy_ci95": ci})
    res["synthetic"] = models
    log("effnet behind the loopback server (separate instance)")
    with serve(EffnetScorer()) as srv:
        r = api.run(RunConfig(model=srv.spec("effnet"), concurrency=4), ds, seed=SEED)
    http_table, _ = table_bytes(r.records, tmp / "http.csv")
    res["http_equals_local"] = http_table == local_table
    log("kill halfway and resume")
    cache = str(tmp / "kill.cache.jsonl")
    try:
        api.run(RunConfig(model="random"), ds, seed=SEED, cache_path=cache, stop_after=n_items // 2)
    except KeyboardInterrupt:
        pass
    resumed = api.run(RunConfig(model="random"), ds, seed=SEED, cache_path=cache, resume=True)
    full = api.run(RunConfig(model="random"), ds, seed=SEED)
    res["resume"] = {"cached_on_resume": resumed.summary["n_cached"],
                     "tables_identical": table_bytes(resumed.records, tmp / "a.csv")[0]
                     == table_bytes(full.records, tmp / "b.csv")[0]}
    again = api.run(RunConfig(model="random"), ds, seed=SEED)
    res["permutations_identical"] = [x["permutation"] for x in again.records] == [x["permutation"] for x in full.records]
    film_dir = shared_data_dir("film")
    res["film"] = None
    if film_dir is not None:
        fds = read_dataset(film_dir, "film")
        res["film"] = {"n_pairs": len(fds.pairs)}
        for name in ("oracle", "random", "effnet"):
            log(f"FILM: {name}")
            r = api.run(RunConfig(model=name), fds, seed=SEED, model=scorer if name == "effnet" else None)
            _, sc = table_bytes(r.records, tmp / f"film-{name}.csv")
            s = sc.summary
            res["film"][name] = {"acc_normal": s["acc_normal"], "acc_misleading": s["acc_misleading"],
                                 "mvi_sensitivity": s["mvi_sensitivity"], "mvi_sensitivity_ci": s["mvi_sensitivity_ci"],
                                 "flip_rate": s["flip_rate"], "mcnemar_p": s["mcnemar_p"],
                                 "per_subcategory": s.get("per_subcategory")}
            tables.append(markdown_table(sc.rows, f"FILM, {name}"))
    log("speed")
    res["speed"] = speed(ds)
    rnd = models["random"]
    targets = {
        "metric_fixtures_exact": target(res["fixtures"]["equal"], True, res["fixtures"]["equal"],
                                        "Acc_n = 0 -> NaN, negative MVI-S, pooled overall"),
        "oracle_perfect": target([models["oracle"]["acc_normal"], models["oracle"]["acc_misleading"],
                                  models["oracle"]["mvi_sensitivity"]], [1.0, 1.0, 0.0],
                                 models["oracle"]["acc_normal"] == models["oracle"]["acc_misleading"] == 1.0
                                 and models["oracle"]["mvi_sensitivity"] == 0.0, "make-synth, 120 pairs"),
        "random_at_chance": target(rnd["chance"], rnd["accuracy_ci95"],
                                   rnd["accuracy_ci95"][0] <= rnd["chance"] <= rnd["accuracy_ci95"][1],
                                   f"expected chance mean(1/k) inside the exact 95% CI of the random accuracy "
                                   f"{rnd['accuracy']} over {n_items} items"),
        "http_equals_local": target(res["http_equals_local"], True, res["http_equals_local"],
                                    "effnet score tables, local adapter vs loopback OpenAI-compatible server"),
        "resume_identical": target(res["resume"]["tables_identical"], True, res["resume"]["tables_identical"],
                                   f"killed after {n_items // 2} of {n_items} prompts, resumed from the cache"),
        "seed_permutations_identical": target(res["permutations_identical"], True, res["permutations_identical"], ""),
        "concurrency_speedup": target(res["speed"]["speedup_c8_vs_c1"], 5.0, res["speed"]["speedup_c8_vs_c1"] >= 5.0,
                                      "loopback server, 200 ms per request"),
    }
    if res["film"] is None:
        targets["film_scored"] = target(None, "present", False, "../shared/data/film is absent")
    result = {"tool": "mvi-bench", "date": today(), "commit": commit(), "machine": machine(),
              "command": ".venv/bin/python bench/mvi_bench.py", "seconds": round(time.perf_counter() - t0, 1),
              "results": res, "targets": targets}
    md = [f"# mvi-bench benchmark ({result['date']}, {result['machine']['cpu']}, {result['machine']['cores']} cores)\n",
          "| target | value | threshold | met |", "|---|---|---|---|"]
    md += [f"| {k} | {json.dumps(v['value'])} | {json.dumps(v['threshold'])} | {v['met']} |" for k, v in targets.items()]
    sp = res["speed"]
    md += ["", f"Speed: {sp['prompts_per_second_c1']} prompts/s at concurrency 1, {sp['prompts_per_second_c8']} at 8 "
           f"({sp['speedup_c8_vs_c1']}x); harness {sp['harness_per_item_ms']} ms/item vs bare call "
           f"{sp['bare_call_ms']} ms (overhead {sp['overhead_ms_per_item']} ms/item).", ""]
    md += tables
    write_results("mvi_bench", result, "\n".join(md) + "\n")
    log(f"done in {result['seconds']} s")
    for k, v in targets.items():
        log(f"{k}: {v['value']} (threshold {v['threshold']}) met={v['met']}")


if __name__ == "__main__":
    main()
