"""The settings of mvi-bench and its taxonomy, importable without numpy/torch (the CLI builds its
options from these dataclasses at import time, and ``--help`` must stay fast).

Taxonomy (method sheet mvi-bench.md): 3 levels x 2 categories, the official category keys.
The concept-level pair is confirmed by public overview text; the levels of ``mirror`` (attribute)
and ``occlusion`` (relationship) follow the official code's category order **[reconstructed]**.
"""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.core.config import option
from icmlkit.lib.core.errors import UsageError

LEVELS = {  # level -> its two categories (official keys)
    "concept": ("resemblance", "representation"),
    "attribute": ("material", "mirror"),
    "relationship": ("occlusion", "illusion"),
}
CATEGORIES = tuple(c for cats in LEVELS.values() for c in cats)
LEVEL_OF = {c: lvl for lvl, cats in LEVELS.items() for c in cats}
RECONSTRUCTED_LEVELS = ("mirror", "occlusion")  # their level assignment is [reconstructed]
CATEGORY_NAMES = {
    "resemblance": "Visual Resemblance", "representation": "Representation Confusion",
    "material": "Material Confusion", "mirror": "Mirror Reflection",
    "occlusion": "Occlusion Confusion", "illusion": "Visual Illusion",
}
TYPES = ("normal", "misleading")
TYPE_ALIASES = {"normal": "normal", "misleading": "misleading", "adversarial": "misleading", "mislead": "misleading"}
LETTERS = "ABCDEFGH"
PARSERS = ("robust", "official", "official-extract")
PAIRINGS = ("key", "order")
MODEL_KINDS = ("oracle", "random", "effnet", "openai://BASE_URL?model=NAME", "hf:PATH")
FORMATS = ("auto", "official", "parquet", "film")

# The official prompt (evaluation/utils.py, read not copied): question, the lettered options, and
# the instruction; the image comes first in the one user turn.
INSTRUCTION = "Answer with the letter from the given choices directly."


@dataclass
class RunConfig:
    """``mvi-bench run``: the protocol and the model call."""

    model: str = option("", "oracle, random, effnet (EfficientNet-Lite0 zero-shot option scorer [reconstructed]), "
                        "openai://HOST:PORT/v1?model=NAME (an OpenAI-compatible endpoint you started: vLLM, "
                        "LMDeploy; key from $OPENAI_API_KEY, 'EMPTY' works) or hf:PATH (a local Hugging Face "
                        "vision-language folder, extra 'hf').", required=True)
    format: str = option("auto", "Data layout: official (annotations.json + images), parquet (HF), film "
                         "(FILM folder), or auto by the path.", choices=FORMATS)
    circular: bool = option(False, "Circular evaluation (MMBench style): every cyclic shift of the seeded "
                            "permutation; an item is right only when all shifts are. Adds the CircularEval "
                            "consistency and the vanilla (shift 0) accuracy per category.")
    parser: str = option("robust", "robust: exact letter > 'Answer: X'/'(X)' > unique option text > invalid; "
                         "official: the first word-bounded A-D (the evaluation scripts' rule); "
                         "official-extract: the official utils' extractor (any A-D letter counts).", choices=PARSERS)
    pairing: str = option("key", "How items form pairs: key (pair_id, else id or image name without the "
                          "normal/misleading token) or order (k-th normal with k-th misleading of a category, "
                          "in file order) [reconstructed].", choices=PAIRINGS)
    max_new_tokens: int = option(5, "Generated tokens per answer (greedy; the official setting is 5).", min=1)
    temperature: float = option(0.0, "Sampling temperature sent to endpoints (0: greedy, the protocol).", min=0.0)
    concurrency: int = option(1, "Requests in flight at once (endpoints; local models run one at a time).",
                              min=1, max=256)
    timeout: float = option(60.0, "Seconds per endpoint request.", min=0.001)
    max_retries: int = option(3, "Retries of a failed endpoint request (429, 5xx, timeouts).", min=0)
    api_key_env: str = option("OPENAI_API_KEY", "Environment variable holding the endpoint's API key "
                              "(never recorded; unset: no Authorization header).")
    max_pixels: int = option(512 * 28 * 28, "Images with more pixels are downscaled (aspect kept) before "
                             "sending; the official Qwen2.5-VL setting is 512*28*28. 0: never.", min=0)
    judge: str = option("", "Optional openai://... endpoint that maps an unparsable reply to a letter; it sees "
                        "the question, options and reply, never the gold answer.")
    system_prompt: str = option("", "Optional system message (the official protocol has none).")

    def check(self) -> None:
        if not self.model:
            raise UsageError("--model is required (oracle, random, effnet, openai://..., hf:PATH)")
        m = self.model
        if not (m in ("oracle", "random", "effnet") or m.startswith(("openai://", "openais://", "hf:"))):
            raise UsageError(f"--model {m!r}: use oracle, random, effnet, openai://BASE_URL?model=NAME or hf:PATH")
        if self.judge and not self.judge.startswith(("openai://", "openais://")):
            raise UsageError(f"--judge {self.judge!r}: use openai://BASE_URL?model=NAME")


@dataclass
class ScoreConfig:
    """``mvi-bench score``: the metric and its uncertainty."""

    bootstrap: int = option(2000, "Bootstrap resamples over pairs for the 95% CI (0: none).", min=0)
    ci: float = option(0.95, "Confidence level of the bootstrap interval.", min=0.5, max=0.999)


@dataclass
class SynthConfig:
    """``mvi-bench generate``."""

    pairs: int = option(120, "Pairs in all, spread evenly over the six categories.", min=6, max=6000)
    size: int = option(224, "Image side in pixels.", min=64, max=1024)

    def check(self) -> None:
        if self.pairs % len(CATEGORIES):
            raise UsageError(f"--pairs must be a multiple of {len(CATEGORIES)} (one share per category)")


def level_of(category: str) -> str:
    """The level of an official category key (mirror and occlusion: [reconstructed])."""
    return LEVEL_OF[category]
