"""MVI-Sensitivity and what is reported beside it.

For a group g of pairs (a category, a level, a FILM sub-category, or all):

    Acc_n(g) = mean correctness of the normal items,  Acc_m(g) = the same for the misleading ones,
    MVI-S(g) = (Acc_n(g) - Acc_m(g)) / Acc_n(g)           (the official formula; lower = more robust)

- Overall and per level use *pooled* accuracies over the group's pairs (the official code pools for
  "overall"; pooling per level is this project's choice, not from the paper), not the mean of
  per-category values.
- Acc_n = 0: MVI-S is undefined. The official code returns 0; here it is NaN (null in JSON) and a
  warning is logged.
- 95 % bootstrap CI: pairs resampled with replacement (numpy stream ``bootstrap`` of the seed);
  resamples with Acc_n = 0 are dropped (their share is reported).
- flip rate **[reconstructed definition]**: among pairs whose normal item is right, the share whose
  misleading item is wrong. McNemar exact p: two-sided binomial test of b (normal right, misleading
  wrong) against c (normal wrong, misleading right), p = 1 when b + c = 0.
- invalid rate: share of the asked prompts whose reply did not parse (they count as wrong).
- Circular evaluation: an item is right only when every rotation's answer is right (so Acc_n and
  Acc_m of a circular run are CircularEval accuracies). Beside MVI-S, for circular runs only (null
  otherwise): ``circular_consistency``, the share of the group's items (normal and misleading
  together) answered correctly under every cyclic shift of the options (MMBench's CircularEval),
  and ``vanilla_accuracy``, the share right at the seeded order alone (rotation 0, MMBench's
  VanillaEval); their gap is the accuracy that depended on the option position.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from icmlkit.lib.core import console
from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.runtime import numpy_rng
from icmlkit.lib.mvi_bench.config import CATEGORIES, LEVEL_OF, LEVELS, RECONSTRUCTED_LEVELS, ScoreConfig

COLUMNS = ["group_by", "group", "level", "n_pairs", "acc_normal", "acc_misleading", "mvi_sensitivity",
           "ci_low", "ci_high", "flip_rate", "n_flip", "n_reverse", "mcnemar_p", "invalid_rate", "circular_consistency",
           "vanilla_accuracy"]
RECORD_FIELDS = ("id", "pair_id", "category", "type", "correct")


@dataclass
class ScoreResult:
    rows: list[dict]
    summary: dict


def mvi_sensitivity(acc_n: float, acc_m: float) -> float:
    """(Acc_n - Acc_m) / Acc_n; NaN when Acc_n = 0."""
    return float("nan") if acc_n == 0 else (acc_n - acc_m) / acc_n


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value (binomial test of b out of b + c at 1/2)."""
    if b + c == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(int(b), int(b + c), 0.5).pvalue)


def _nan_none(x):
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else round(x, 6)


def _group_stats(n_ok: np.ndarray, m_ok: np.ndarray, invalid: tuple[int, int], cfg: ScoreConfig, rng,
                 first: np.ndarray | None = None) -> dict:
    """``first``: for circular runs, the (P, 2) correctness at rotation 0 (normal, misleading)."""
    P = len(n_ok)
    acc_n, acc_m = float(n_ok.mean()), float(m_ok.mean())
    s = mvi_sensitivity(acc_n, acc_m)
    lo = hi = float("nan")
    if cfg.bootstrap and P:
        idx = rng.integers(0, P, size=(cfg.bootstrap, P))
        an, am = n_ok[idx].mean(1), m_ok[idx].mean(1)
        ok = an > 0
        if ok.any():
            vals = (an[ok] - am[ok]) / an[ok]
            a = (1 - cfg.ci) / 2
            lo, hi = (float(v) for v in np.quantile(vals, [a, 1 - a]))
    b = int((n_ok & ~m_ok).sum())
    c = int((~n_ok & m_ok).sum())
    n_right = int(n_ok.sum())
    return {"n_pairs": P, "acc_normal": acc_n, "acc_misleading": acc_m, "mvi_sensitivity": s, "ci_low": lo,
            "ci_high": hi, "flip_rate": b / n_right if n_right else float("nan"), "n_flip": b, "n_reverse": c,
            "mcnemar_p": mcnemar_exact(b, c), "invalid_rate": invalid[0] / invalid[1] if invalid[1] else 0.0,
            "circular_consistency": None if first is None else (n_right + int(m_ok.sum())) / (2 * P),
            "vanilla_accuracy": None if first is None else float(first.mean())}


def collect_pairs(records: list[tuple[str, int, dict]]) -> tuple[str, list[dict]]:
    """Validate per-sample records ``(file, line, record)`` and fold them into pairs.

    Returns (model id, pairs), each pair ``{pair_id, category, subcategory, normal, misleading,
    normal_first, misleading_first, shifts, asked, invalid}`` with the items' correctness (every
    rotation right, for circular runs), their correctness at rotation 0 (``*_first``; the item's
    lowest rotation when rotation 0 is absent) and the most rotations asked of an item (``shifts``)."""
    items: dict[str, dict] = {}
    seen: set = set()
    models = set()
    for file, line, r in records:
        for f in RECORD_FIELDS:
            if f not in r or r[f] is None:
                raise InputError(f"field {f}: missing (a per-sample record of `mvi-bench run` was expected)", file, line)
        if not isinstance(r["correct"], bool):
            raise InputError("field correct: expected true or false", file, line)
        if r["category"] not in LEVEL_OF:
            raise InputError(f"field category: unknown category {r['category']!r}", file, line)
        if r["type"] not in ("normal", "misleading"):
            raise InputError(f"field type: expected normal or misleading, not {r['type']!r}", file, line)
        key = (str(r["id"]), str(r.get("rotation", 0)))
        if key in seen:
            raise InputError(f"item {r['id']}: duplicate record (rotation {key[1]}); shards must not overlap", file, line)
        seen.add(key)
        models.add(str(r.get("model", "")))
        it = items.setdefault(str(r["id"]), {"pair_id": str(r["pair_id"]), "category": r["category"],
                                              "subcategory": str(r.get("subcategory") or ""), "type": r["type"],
                                              "correct": True, "asked": 0, "invalid": 0, "where": (file, line),
                                              "first": (None, True)})
        if it["pair_id"] != str(r["pair_id"]) or it["type"] != r["type"]:
            raise InputError(f"item {r['id']}: field pair_id/type differs between its records", file, line)
        it["correct"] = it["correct"] and r["correct"]
        rot = int(r.get("rotation") or 0)
        if it["first"][0] is None or rot < it["first"][0]:
            it["first"] = (rot, r["correct"])
        it["asked"] += 1
        it["invalid"] += 0 if r.get("valid", r.get("letter") is not None) else 1
    if len(models) > 1:
        raise InputError(f"records of several models ({', '.join(sorted(models))}); score one model at a time",
                         records[0][0] if records else None)
    pairs: dict[str, dict] = {}
    for iid, it in items.items():
        p = pairs.setdefault(it["pair_id"], {"pair_id": it["pair_id"], "category": it["category"],
                                             "subcategory": it["subcategory"], "asked": 0, "invalid": 0,
                                             "shifts": 0})
        if it["type"] in p:
            f, ln = it["where"]
            raise InputError(f"item {iid}: pair {it['pair_id']} has two {it['type']} items", f, ln)
        p[it["type"]] = it["correct"]
        p[it["type"] + "_first"] = it["first"][1]
        p["shifts"] = max(p["shifts"], it["asked"])
        p["asked"] += it["asked"]
        p["invalid"] += it["invalid"]
    out = []
    for pid in sorted(pairs):
        p = pairs[pid]
        if "normal" not in p or "misleading" not in p:
            missing = "misleading" if "normal" in p else "normal"
            f, ln = items[next(i for i, v in items.items() if v["pair_id"] == pid)]["where"]
            raise InputError(f"pair {pid}: field type: unpaired (no {missing} record); score all shards together", f, ln)
        out.append(p)
    if not out:
        raise InputError("no records", records[0][0] if records else None)
    return (models.pop() if models else ""), out


def score_pairs(pairs: list[dict], cfg: ScoreConfig, seed: int = 0, model: str = "") -> ScoreResult:
    """The table (overall, per level, per category, per FILM sub-category) and the summary."""
    rng = numpy_rng(seed, "bootstrap")
    circular = any(p.get("shifts", 1) > 1 for p in pairs)  # a circular run asks every item several times

    def stats(sel: list[dict]) -> dict:
        n_ok = np.array([p["normal"] for p in sel], dtype=bool)
        m_ok = np.array([p["misleading"] for p in sel], dtype=bool)
        inv = (sum(p["invalid"] for p in sel), sum(p["asked"] for p in sel))
        first = np.array([[p["normal_first"], p["misleading_first"]] for p in sel], dtype=bool) if circular else None
        return _group_stats(n_ok, m_ok, inv, cfg, rng, first)

    rows = [{"group_by": "overall", "group": "all", "level": "", **stats(pairs)}]
    for lvl, cats in LEVELS.items():
        sel = [p for p in pairs if p["category"] in cats]
        if sel:
            rows.append({"group_by": "level", "group": lvl, "level": lvl, **stats(sel)})
    for c in CATEGORIES:
        sel = [p for p in pairs if p["category"] == c]
        if sel:
            rows.append({"group_by": "category", "group": c, "level": LEVEL_OF[c], **stats(sel)})
    for sub in sorted({p["subcategory"] for p in pairs if p["subcategory"]}):
        sel = [p for p in pairs if p["subcategory"] == sub]
        rows.append({"group_by": "subcategory", "group": sub, "level": LEVEL_OF[sel[0]["category"]], **stats(sel)})
    for r in rows:
        if math.isnan(r["mvi_sensitivity"]):
            console.log.warning(f"MVI-S of {r['group_by']} {r['group']} is undefined (Acc_normal = 0): reported as NaN")
    clean = [{k: (_nan_none(v) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]

    def brief(r: dict) -> dict:
        return {k: r[k] for k in ("n_pairs", "acc_normal", "acc_misleading", "mvi_sensitivity", "ci_low", "ci_high",
                                  "flip_rate", "mcnemar_p", "invalid_rate", "circular_consistency",
                                  "vanilla_accuracy")}

    o = clean[0]
    summary = {
        "model": model, "n_pairs": o["n_pairs"], "acc_normal": o["acc_normal"], "acc_misleading": o["acc_misleading"],
        "mvi_sensitivity": o["mvi_sensitivity"], "mvi_sensitivity_ci": [o["ci_low"], o["ci_high"]],
        "flip_rate": o["flip_rate"], "mcnemar_p": o["mcnemar_p"], "invalid_rate": o["invalid_rate"],
        "circular_consistency": o["circular_consistency"], "vanilla_accuracy": o["vanilla_accuracy"],
        "per_category": {r["group"]: brief(r) for r in clean if r["group_by"] == "category"},
        "per_level": {r["group"]: brief(r) for r in clean if r["group_by"] == "level"},
    }
    subs = {r["group"]: brief(r) for r in clean if r["group_by"] == "subcategory"}
    if subs:
        summary["per_subcategory"] = subs
    return ScoreResult(clean, summary)


def read_records(paths: list[str]) -> list[tuple[str, int, dict]]:
    """Per-sample records ``(file, line, record)`` of JSON Lines files; an empty file is an error."""
    from icmlkit.lib.core.io import display_name, read_jsonl

    out = []
    for p in paths:
        rows = read_jsonl(p, "per-sample records")
        if not rows:
            raise InputError("no records (a JSON Lines file written by `mvi-bench run` was expected)", display_name(p))
        out.extend((display_name(p), ln, r) for ln, r in rows)
    return out


def score_records(records: list[tuple[str, int, dict]], cfg: ScoreConfig, seed: int = 0) -> ScoreResult:
    """``mvi-bench score``: records of one model (shards concatenated) -> table and summary."""
    model, pairs = collect_pairs(records)
    return score_pairs(pairs, cfg, seed=seed, model=model)


def markdown_table(rows: list[dict], title: str = "") -> str:
    """The score table as Markdown (levels whose assignment is reconstructed are marked)."""
    def f(v):
        return "nan" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))

    circular = any(r.get("circular_consistency") is not None for r in rows)
    head = ["group", "level", "n", "Acc_n", "Acc_m", "MVI-S", "95% CI", "flip", "McNemar p", "invalid"] + \
        (["circular consistency", "vanilla acc"] if circular else [])
    out = [f"**{title}**\n" if title else "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        g = r["group"] + (" [reconstructed level]" if r["group"] in RECONSTRUCTED_LEVELS else "")
        name = g if r["group_by"] != "subcategory" else f"illusion/{g}"
        ci = "nan" if r["ci_low"] is None else f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        out.append("| " + " | ".join([name, r["level"] or "-", str(r["n_pairs"]), f(r["acc_normal"]),
                                      f(r["acc_misleading"]), f(r["mvi_sensitivity"]), ci, f(r["flip_rate"]),
                                      f(r["mcnemar_p"]), f(r["invalid_rate"])]
                                     + ([f(r["circular_consistency"]), f(r["vanilla_accuracy"])] if circular else []))
                   + " |")
    return "\n".join(x for x in out if x != "") + "\n"
