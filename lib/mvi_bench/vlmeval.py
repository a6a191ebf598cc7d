"""VLMEvalKit interchange: ``export-vlmeval`` writes a dataset TSV, ``import-vlmeval`` reads its
prediction file (.tsv, or .xlsx with openpyxl) back into per-sample records for ``score``.

TSV columns: ``index`` (int), ``image`` (base64), ``question``, ``A``..``D`` (the options in the
seeded per-pair order, blank when fewer), ``answer`` (the gold letter), ``category``,
``l2-category`` (the level), plus the columns that make the round trip exact and that VLMEvalKit
carries into its prediction files: ``item_id``, ``pair_id``, ``type``, ``subcategory``,
``permutation`` (JSON). Items with more than four options cannot be exported (VLMEvalKit's MCQ
format has A-D).
"""
from __future__ import annotations

import base64
import csv
import io
import json
import sys

from icmlkit.lib.core.errors import InputError, UsageError, require_module
from icmlkit.lib.mvi_bench.config import LETTERS, LEVEL_OF
from icmlkit.lib.mvi_bench.data import Dataset
from icmlkit.lib.mvi_bench.protocol import parse_reply, permutation, template_hash

COLUMNS = ["index", "image", "question", "A", "B", "C", "D", "answer", "category", "l2-category", "item_id",
           "pair_id", "type", "subcategory", "permutation"]
NEEDED = ["index", "question", "A", "B", "answer", "category", "item_id", "pair_id", "type", "prediction"]


def export_rows(data: Dataset, seed: int = 0, max_pixels: int = 0) -> list[dict]:
    """The TSV rows of ``data`` (same permutations as ``run`` with the same seed)."""
    from icmlkit.lib.mvi_bench.runner import prepare_image

    rows = []
    for idx, it in enumerate(data.items):
        if len(it.choices) > 4:
            raise UsageError(f"item {it.id} has {len(it.choices)} options; VLMEvalKit's MCQ format holds A-D")
        perm = permutation(seed, it.pair_id, len(it.choices))
        opts = [it.choices[j] for j in perm]
        img, _ = prepare_image(it.image(), max_pixels)
        row = {"index": idx, "image": base64.b64encode(img).decode("ascii"), "question": it.question}
        for j in range(4):
            row[LETTERS[j]] = opts[j] if j < len(opts) else ""
        row.update({"answer": LETTERS[opts.index(it.answer)], "category": it.category, "l2-category": it.level,
                    "item_id": it.id, "pair_id": it.pair_id, "type": it.type, "subcategory": it.subcategory,
                    "permutation": json.dumps(perm)})
        rows.append(row)
    return rows


def tsv_text(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, delimiter="\t", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def _read_table(path: str) -> list[dict]:
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        raise InputError("is a folder, expected a .tsv or .xlsx prediction file", path)
    if not p.is_file():
        raise InputError("no such file", path)
    if p.suffix.lower() == ".xlsx":
        import zipfile

        try:
            ok = zipfile.is_zipfile(p) and "[Content_Types].xml" in zipfile.ZipFile(p).namelist()
        except (zipfile.BadZipFile, OSError):
            ok = False
        if not ok:
            raise InputError("not an .xlsx workbook", path)
        require_module("openpyxl", "mvi-bench", "openpyxl")
        import pandas as pd

        try:
            df = pd.read_excel(p, dtype=str, keep_default_na=False)
        except Exception as exc:  # noqa: BLE001
            raise InputError(f"not a readable .xlsx file ({type(exc).__name__})", path) from None
        return df.to_dict("records")
    from icmlkit.lib.core.io import open_text

    csv.field_size_limit(min(sys.maxsize, 1 << 31 - 1))
    with open_text(path) as fh:
        try:
            return list(csv.DictReader(fh, delimiter="\t"))
        except csv.Error as exc:
            raise InputError(f"not a readable TSV ({exc})", path) from None


def import_predictions(path: str, model: str = "", parser: str = "robust") -> list[dict]:
    """VLMEvalKit predictions -> per-sample records (the fields ``score`` reads)."""
    rows = _read_table(path)
    if not rows:
        raise InputError("no rows (a VLMEvalKit prediction file was expected)", path)
    missing = [c for c in NEEDED if c not in rows[0]]
    if missing:
        raise InputError(f"missing columns {missing} (export with `mvi-bench export-vlmeval`, then run VLMEvalKit)",
                         path, 1)
    out = []
    for ln, r in enumerate(rows, 2):
        opts = [str(r.get(L) or "").strip() for L in "ABCD"]
        opts = opts[:max((j + 1 for j, o in enumerate(opts) if o), default=0)]
        gold = str(r["answer"]).strip()
        if len(opts) < 2 or gold not in LETTERS[:len(opts)]:
            raise InputError(f"item {r.get('item_id')}: field answer: {gold!r} is not one of the option letters",
                             path, ln)
        cat = str(r["category"]).strip()
        if cat not in LEVEL_OF:
            raise InputError(f"item {r.get('item_id')}: field category: unknown category {cat!r}", path, ln)
        typ = str(r["type"]).strip()
        if typ not in ("normal", "misleading"):
            raise InputError(f"item {r.get('item_id')}: field type: expected normal or misleading", path, ln)
        try:
            perm = json.loads(r.get("permutation") or "null")
        except ValueError:
            raise InputError(f"item {r.get('item_id')}: field permutation: not JSON", path, ln) from None
        reply = "" if r["prediction"] is None else str(r["prediction"])
        letter = parse_reply(reply, opts, parser)
        out.append({"id": str(r["item_id"]), "pair_id": str(r["pair_id"]), "category": cat, "level": LEVEL_OF[cat],
                    "subcategory": str(r.get("subcategory") or ""), "type": typ, "rotation": 0, "permutation": perm,
                    "reply": reply, "letter": letter, "answer_letter": gold, "valid": letter is not None,
                    "correct": letter == gold, "latency_s": None, "model": model, "template_hash": template_hash()})
    return out
