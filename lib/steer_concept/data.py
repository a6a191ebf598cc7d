"""The concept texts: the small bundled subset (data/concepts) and the full set (../shared/data/concepts).

Both hold MidSteer's concept questions (MIT) and COCO captions (CC BY 4.0) as neutral text; see
data/PROVENANCE.md. The full COCO list is filtered here exactly like the bundled subset: captions
that mention horses or motorcycles (:data:`CONCEPT_WORDS`) are dropped from the neutral set.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from icmlkit.lib.core.errors import InputError

CONCEPT_WORDS = re.compile(r"horse|pony|motorcycle|motorbike|motor bike|scooter|moped", re.I)
CONCEPTS = ("horses", "motorcycles", "toxicity", "helpfulness")


def bundled_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "data" / "concepts"


def load_bundled() -> dict[str, list[str]]:
    """horses (150), motorcycles (150), helpfulness (80) and neutral COCO captions (400)."""
    import csv

    d = bundled_dir()
    if not (d / "horses.json").is_file():
        raise InputError("the bundled concept texts are missing (expected data/concepts/ in the checkout)", str(d))
    out = {name: json.loads((d / f"{name}.json").read_text(encoding="utf-8"))
           for name in ("horses", "motorcycles", "helpfulness")}
    with open(d / "coco_captions.csv", encoding="utf-8", newline="") as fh:
        out["neutral"] = [row["caption"] for row in csv.DictReader(fh)]
    return out


def load_shared(root: Path) -> dict[str, list[str]]:
    """The full set: each concept's ten question batches in order, and the filtered COCO-30k captions."""
    import csv

    out = {}
    for name in CONCEPTS:
        texts = []
        for b in range(1, 11):
            p = root / "train" / f"{name}_questions_batch_{b}.json"
            if p.is_file():
                texts += json.loads(p.read_text(encoding="utf-8"))
        out[name] = [t.strip() for t in texts if t.strip()]
    with open(root / "coco_30k.csv", encoding="utf-8", newline="") as fh:
        out["neutral"] = [r["prompt"].strip() for r in csv.DictReader(fh) if not CONCEPT_WORDS.search(r["prompt"])]
    return out
