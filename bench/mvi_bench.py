"""Benchmark of mvi-bench, offline (a full run takes about 2 minutes on 2 cores; ``--quick`` under one).

Parts (``python bench/mvi_bench.py --list``):

- ``fixtures``: the metric on fixture pairs equals hand-computed values (Acc_n = 0 -> NaN, negative
  MVI-S, pooled overall);
- ``synthetic``: make-synth (120 pairs) scored by oracle (-> Acc 1, MVI-S 0), random (accuracy inside
  the exact 95 % binomial interval around its expected chance mean(1/k)) and the EfficientNet-Lite0
  option scorer (a plausibility check, not a paper claim);
- ``determinism``: the scorer through the local adapter and through a loopback OpenAI-compatible
  server on 127.0.0.1 (a separate scorer instance) gives identical score tables; a run killed halfway
  and resumed from its reply cache gives byte-identical tables; two runs with one seed give identical
  permutations;
- ``film``: FILM (shared/data/film, 60 illusion/control pairs) scored by every offline model, per
  FILM illusion category, with bootstrap CIs;
- ``speed``: prompts/s at --concurrency 8 vs 1 against the loopback server with 200 ms latency
  (target >= 5x), and the harness overhead per item vs the bare adapter call (loopback, 0 ms).

Run: ``make bench TOOL=mvi-bench`` (or ``python bench/mvi_bench.py [--part P] [--quick] [--report]``).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from _common import Bench, speed_ratio, table, target, time_call
from icmlkit.lib.core.io import shared_data_dir, write_rows
from icmlkit.lib.mvi_bench import RunConfig, ScoreConfig, SynthConfig, api, make_synth, read_dataset
from icmlkit.lib.mvi_bench.config import RECONSTRUCTED_LEVELS
from icmlkit.lib.mvi_bench.data import Dataset
from icmlkit.lib.mvi_bench.metric import COLUMNS, score_pairs
from icmlkit.lib.mvi_bench.models import EffnetScorer, EndpointModel, Model, Request
from icmlkit.lib.mvi_bench.protocol import build_prompt
from icmlkit.lib.mvi_bench.server import serve

bench = Bench("mvi-bench")
BOOT = 2000
MODELS = ("oracle", "random", "effnet")
ROW_KEYS = ("group_by", "group", "level", "n_pairs", "acc_normal", "acc_misleading", "mvi_sensitivity", "ci_low",
            "ci_high", "flip_rate", "mcnemar_p", "invalid_rate")


def _pairs(quick: bool) -> int:
    return 30 if quick else 120


def _synth(folder: Path, quick: bool, seed: int) -> Dataset:
    make_synth(SynthConfig(pairs=_pairs(quick)), folder / "synth", seed=seed)
    return read_dataset(folder / "synth")


def _score(records, path: Path, seed: int):
    """The score table of one run's records, written as CSV (its bytes are what the determinism
    checks compare) and returned with the summary."""
    sc = api.score(ScoreConfig(bootstrap=BOOT), [("r", i + 1, r) for i, r in enumerate(records)], seed=seed)
    write_rows(path, sc.rows, columns=COLUMNS)
    return path.read_bytes(), sc


def _model_payload(sc, seconds=None) -> dict:
    s = sc.summary
    out = {k: s[k] for k in ("acc_normal", "acc_misleading", "mvi_sensitivity", "mvi_sensitivity_ci", "flip_rate",
                             "mcnemar_p")}
    out["rows"] = [{k: r[k] for k in ROW_KEYS} for r in sc.rows]
    if seconds is not None:
        out["seconds"] = round(seconds, 2)
    if s.get("per_subcategory") is not None:
        out["per_subcategory"] = s["per_subcategory"]
    return out


@bench.part("fixtures", doc="metric on fixture pairs vs hand-computed values", hours=0.001)
def fixtures(ctx) -> dict:
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


def _timed_once(fn):
    """``fn()``'s result and its ``time_call`` record (one timed call, no warm-up: a scoring run)."""
    box = []
    rec = time_call(lambda: box.append(fn()), repeats=1, warmup=0)
    return box[0], rec


def _chance_interval(ds: Dataset, acc: float, n_items: int):
    from scipy.stats import binomtest

    expect = sum(1 / len(it.choices) for it in ds.items) / len(ds.items)
    ci = binomtest(int(round(acc * n_items)), n_items, expect).proportion_ci(0.95)
    return expect, [round(ci.low, 4), round(ci.high, 4)]


@bench.part("synthetic", doc="make-synth (120 pairs): oracle, random, EfficientNet-Lite0 scorer", hours=0.01)
def synthetic(ctx) -> dict:
    seed = ctx.seeds[0]
    with tempfile.TemporaryDirectory(prefix="mvi-bench-") as tmp:
        tmp = Path(tmp)
        ds = _synth(tmp, ctx.quick, seed)
        n_items = len(ds.items)
        scorer = EffnetScorer()
        models = {}
        for name in MODELS:
            ctx.log(f"make-synth: {name}")
            run, rec = _timed_once(lambda: api.run(RunConfig(model=name), ds, seed=seed,
                                                   model=scorer if name == "effnet" else None))
            _, sc = _score(run.records, tmp / f"{name}.csv", seed)
            models[name] = _model_payload(sc, rec["median_s"])
            if name == "random":
                acc = (sc.summary["acc_normal"] + sc.summary["acc_misleading"]) / 2
                expect, ci = _chance_interval(ds, acc, n_items)
                models[name].update({"accuracy": round(acc, 4), "chance": round(expect, 4), "accuracy_ci95": ci})
    return {"n_pairs": len(ds.pairs), "n_items": n_items, "models": models}


@bench.part("determinism", doc="local vs loopback-HTTP tables, kill + resume, seeded permutations", hours=0.01)
def determinism(ctx) -> dict:
    seed = ctx.seeds[0]
    with tempfile.TemporaryDirectory(prefix="mvi-bench-") as tmp:
        tmp = Path(tmp)
        ds = _synth(tmp, ctx.quick, seed)
        n_items = len(ds.items)
        ctx.log("effnet: local adapter")
        local = api.run(RunConfig(model="effnet"), ds, seed=seed, model=EffnetScorer())
        local_table, _ = _score(local.records, tmp / "local.csv", seed)
        ctx.log("effnet: behind the loopback server (separate instance)")
        with serve(EffnetScorer()) as srv:
            r = api.run(RunConfig(model=srv.spec("effnet"), concurrency=4), ds, seed=seed)
        http_table, _ = _score(r.records, tmp / "http.csv", seed)
        ctx.log("kill halfway and resume")
        cache = str(tmp / "kill.cache.jsonl")
        try:
            api.run(RunConfig(model="random"), ds, seed=seed, cache_path=cache, stop_after=n_items // 2)
        except KeyboardInterrupt:
            pass
        resumed = api.run(RunConfig(model="random"), ds, seed=seed, cache_path=cache, resume=True)
        full = api.run(RunConfig(model="random"), ds, seed=seed)
        again = api.run(RunConfig(model="random"), ds, seed=seed)
        return {"n_items": n_items, "http_equals_local": http_table == local_table,
                "resume": {"killed_after": n_items // 2, "cached_on_resume": resumed.summary["n_cached"],
                           "tables_identical": _score(resumed.records, tmp / "a.csv", seed)[0]
                           == _score(full.records, tmp / "b.csv", seed)[0]},
                "permutations_identical": [x["permutation"] for x in again.records]
                == [x["permutation"] for x in full.records]}


@bench.part("film", doc="FILM (60 illusion/control pairs): oracle, random, EfficientNet-Lite0 scorer", hours=0.01)
def film(ctx) -> dict:
    seed = ctx.seeds[0]
    film_dir = shared_data_dir("film")
    if film_dir is None:
        return {"absent": True}
    fds = read_dataset(film_dir, "film")
    if ctx.quick:  # the first 10 pairs
        fds = Dataset(fds.items[:20], fds.path, fds.format)
    out = {"n_pairs": len(fds.pairs)}
    scorer = EffnetScorer()
    with tempfile.TemporaryDirectory(prefix="mvi-bench-") as tmp:
        for name in MODELS:
            ctx.log(f"FILM: {name}")
            r = api.run(RunConfig(model=name), fds, seed=seed, model=scorer if name == "effnet" else None)
            _, sc = _score(r.records, Path(tmp) / f"film-{name}.csv", seed)
            out[name] = _model_payload(sc)
    return out


class Constant(Model):
    name = "constant"

    def answer(self, req):
        return "A"


def _per_prompt(rec: dict, n: int) -> dict:
    """A ``time_call`` record of a run over ``n`` prompts, as seconds per prompt."""
    return {**rec, **{k: rec[k] / n for k in ("median_s", "min_s", "max_s", "iqr_s") if k in rec}}


@bench.part("speed", doc="prompts/s at concurrency 8 vs 1 (loopback, 200 ms); harness overhead per item",
            hours=0.02)
def speed(ctx) -> dict:
    seed = ctx.seeds[0]
    with tempfile.TemporaryDirectory(prefix="mvi-bench-") as tmp:
        ds = _synth(Path(tmp), ctx.quick, seed)
        n1, n8 = (10, 40) if ctx.quick else (40, 160)
        repeats = 2 if ctx.quick else 3
        out, per_prompt = {"latency_s": 0.2}, {}
        with serve(Constant(), latency=0.2) as srv:
            for conc, n in ((1, n1), (8, n8)):
                m = EndpointModel(srv.spec("c"), concurrency=conc)
                sub = Dataset(ds.items[:n], ds.path, ds.format)
                ctx.log(f"concurrency {conc}: {n} prompts x {repeats}")
                rec = time_call(lambda: api.run(RunConfig(model=m.name, concurrency=conc), sub, seed=seed, model=m),
                                repeats=repeats, warmup=1)
                per_prompt[conc] = _per_prompt(rec, n)
                out[f"time_c{conc}"] = {**rec, "prompts": n}
                out[f"prompts_per_second_c{conc}"] = round(1 / per_prompt[conc]["median_s"], 3)
        ratio = speed_ratio(per_prompt[1], per_prompt[8])
        out["speedup"] = ratio
        out["speedup_c8_vs_c1"] = round(ratio["ratio"], 2)
        items = ds.items[:40]
        reqs = [Request(it.id, it.image(), "image/png", build_prompt(it.question, it.choices), it.choices, "")
                for it in items]
        with serve(Constant(), latency=0.0) as srv:
            m = EndpointModel(srv.spec("c"))
            bare = time_call(lambda: [m.answer(r) for r in reqs], repeats=5, warmup=1)
            sub = Dataset(items, ds.path, ds.format)
            harness = time_call(lambda: api.run(RunConfig(model=m.name), sub, seed=seed, model=m), repeats=5, warmup=1)
        b, h = bare["median_s"] / len(items), harness["median_s"] / len(items)
        out.update({"bare_call": bare, "harness_run": harness, "overhead_items": len(items),
                    "bare_call_ms": round(b * 1e3, 3), "harness_per_item_ms": round(h * 1e3, 3),
                    "overhead_ms_per_item": round((h - b) * 1e3, 3), "overhead_ratio": round(h / b, 3)})
        return out


def _score_table(rows: list[dict], title: str) -> str:
    """One score table (levels whose assignment is reconstructed are marked)."""
    out = []
    for r in rows:
        g = r["group"] + (" [reconstructed level]" if r["group"] in RECONSTRUCTED_LEVELS else "")
        ci = "nan" if r["ci_low"] is None else f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        out.append({"group": g if r["group_by"] != "subcategory" else f"illusion/{g}", "level": r["level"] or "-",
                    "n": r["n_pairs"], "Acc_n": r["acc_normal"], "Acc_m": r["acc_misleading"],
                    "MVI-S": r["mvi_sensitivity"], "95% CI": ci, "flip": r["flip_rate"],
                    "McNemar p": r["mcnemar_p"], "invalid": r["invalid_rate"]})
    return f"**{title}**\n\n" + table(out, digits=4)


def _ci(v) -> str:
    return "nan" if v is None or v[0] is None else f"[{v[0]:.3f}, {v[1]:.3f}]"


@bench.report
def report(results: dict):
    targets, md = {}, []
    fx = results.get("fixtures")
    if fx:
        targets["metric_fixtures_exact"] = target(fx["equal"], True, fx["equal"],
                                                  "Acc_n = 0 -> NaN, negative MVI-S, pooled overall")
    syn = results.get("synthetic")
    overview = []
    if syn:
        o, rnd = syn["models"]["oracle"], syn["models"]["random"]
        targets["oracle_perfect"] = target([o["acc_normal"], o["acc_misleading"], o["mvi_sensitivity"]], [1.0, 1.0, 0.0],
                                           o["acc_normal"] == o["acc_misleading"] == 1.0 and o["mvi_sensitivity"] == 0.0,
                                           f"make-synth, {syn['n_pairs']} pairs")
        lo, hi = rnd["accuracy_ci95"]
        targets["random_at_chance"] = target(rnd["chance"], rnd["accuracy_ci95"], lo <= rnd["chance"] <= hi,
                                             f"expected chance mean(1/k) inside the exact 95% CI of the random "
                                             f"accuracy {rnd['accuracy']} over {syn['n_items']} items")
        overview += [{"data": f"make-synth, {syn['n_pairs']} pairs", "model": k, "Acc_n": v["acc_normal"],
                      "Acc_m": v["acc_misleading"], "MVI-S": v["mvi_sensitivity"],
                      "95% CI": _ci(v["mvi_sensitivity_ci"])} for k, v in syn["models"].items()]
    det = results.get("determinism")
    if det:
        targets["http_equals_local"] = target(det["http_equals_local"], True, det["http_equals_local"],
                                              "effnet score tables, local adapter vs loopback OpenAI-compatible server")
        ok = det["resume"]["tables_identical"]
        targets["resume_identical"] = target(ok, True, ok, f"killed after {det['resume']['killed_after']} of "
                                                           f"{det['n_items']} prompts, resumed from the cache")
        targets["seed_permutations_identical"] = target(det["permutations_identical"], True,
                                                        det["permutations_identical"], "")
    sp = results.get("speed")
    if sp:
        targets["concurrency_speedup"] = target(sp["speedup_c8_vs_c1"], 5.0, sp["speedup_c8_vs_c1"] >= 5.0,
                                                "loopback server, 200 ms per request")
    fm = results.get("film")
    if fm is not None and fm.get("absent"):
        targets["film_scored"] = target(None, "present", False, "shared/data/film is absent")
    elif fm:
        overview += [{"data": f"FILM, {fm['n_pairs']} illusion/control pairs", "model": k,
                      "Acc_n": fm[k]["acc_normal"], "Acc_m": fm[k]["acc_misleading"],
                      "MVI-S": fm[k]["mvi_sensitivity"], "95% CI": _ci(fm[k]["mvi_sensitivity_ci"])}
                     for k in MODELS if k in fm]
    if sp:
        md += ["## Speed", "",
               f"{sp['prompts_per_second_c1']} prompts/s at concurrency 1, {sp['prompts_per_second_c8']} at 8 "
               f"({sp['speedup_c8_vs_c1']}x; loopback server, 200 ms per request); harness "
               f"{sp['harness_per_item_ms']} ms/item vs bare adapter call {sp['bare_call_ms']} ms (overhead "
               f"{sp['overhead_ms_per_item']} ms/item; loopback, 0 ms).", ""]
    if overview:
        md += ["## Offline models", "", "MVI-S with its 95 % bootstrap CI over pairs (a plausibility check, not a "
               "paper claim).", "", table(overview, digits=3)]
    for title, part in (("make-synth", syn and syn["models"]), ("FILM", fm if fm and not fm.get("absent") else None)):
        for k in MODELS:
            if part and k in part:
                md.append(_score_table(part[k]["rows"], f"{title}, {k}"))
    return targets, "\n".join(md)


if __name__ == "__main__":
    bench.main()
