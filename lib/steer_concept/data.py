"""The concept texts: the small bundled subset (data/concepts) and the full set (../shared/data/concepts).

Both hold MidSteer's concept questions (MIT) and COCO captions (CC BY 4.0) as neutral text; see
data/PROVENANCE.md. The full COCO list is filtered here exactly like the bundled subset: captions
that mention horses or motorcycles (:data:`CONCEPT_WORDS`) are dropped from the neutral set.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
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


# --------------------------------------------------------------------------- the neutral set's form

NEUTRAL_FORMS = ("auto", "questions", "captions")
# question frames in the style of the concept questions ("How did horses evolve ...?"), filled with
# a concept-free COCO caption each; frame i % 6 for caption i (deterministic, no randomness)
QUESTION_FRAMES = ("What is happening in this scene: {}?", "How would you describe {}?",
                   "What might explain {}?", "Why would there be {}?", "What is the story behind {}?",
                   "What details stand out in {}?")


def is_question(text: str) -> bool:
    """A text is question-style when it ends with a question mark (after trailing spaces/quotes)."""
    return text.rstrip().rstrip("\"'”’)").rstrip().endswith("?")


def prompt_form(prompts: list[str]) -> str:
    """``questions`` when at least half of ``prompts`` are questions (:func:`is_question`), else ``captions``."""
    if not prompts:
        return "captions"
    return "questions" if sum(map(is_question, prompts)) * 2 >= len(prompts) else "captions"


def caption_question(caption: str, i: int) -> str:
    """Caption ``i`` as a question: frame ``QUESTION_FRAMES[i % 6]`` around the caption, its final
    period dropped and its first letter lower-cased (unless it starts an acronym)."""
    body = caption.strip().rstrip(". ").strip()
    if len(body) > 1 and body[0].isupper() and not body[1].isupper():
        body = body[0].lower() + body[1:]
    return QUESTION_FRAMES[i % len(QUESTION_FRAMES)].format(body)


def neutral_texts(captions: list[str], prompts: list[str] | None = None, form: str = "auto") -> tuple[list[str], str]:
    """The neutral set in the concept prompts' form: ``(texts, form)``.

    ``form``: ``questions`` (each concept-free caption put into a question frame,
    :func:`caption_question`: same content, the prompts' genre), ``captions`` (the captions as they
    are: the former default) or ``auto`` (the default: ``questions`` when at least half of
    ``prompts`` are questions, else ``captions``). Matching the form matters: with caption
    statistics the whitened source direction also carries the question-vs-caption genre, which
    MidSteer (u = s) moves on every question-style text (issue 58)."""
    from icmlkit.lib.core.errors import UsageError

    if form not in NEUTRAL_FORMS:
        raise UsageError(f"--form must be one of {', '.join(NEUTRAL_FORMS)}, not {form!r}")
    if form == "auto":
        form = prompt_form(list(prompts or []))
    if form == "captions":
        return list(captions), form
    return [caption_question(c, i) for i, c in enumerate(captions)], form


@dataclass
class NeutralConfig:
    """Settings of ``steer-concept neutral``: the neutral texts in the concept prompts' form."""

    form: str = field(default="auto", metadata={
        "help": "questions (each caption put into a question frame such as 'How would you describe {}?', "
                "its final period dropped), captions (as they are: the former default) or auto (questions when "
                "at least half of the --like prompts end with '?', else captions).", "choices": NEUTRAL_FORMS})
