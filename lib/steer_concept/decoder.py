"""The decoder path: steer a causal language model while it generates, and score what it writes.

For each steering file and strength (beta at every hooked layer), greedy continuations of the
prompts are generated with the steer hooked in (:func:`.hooks.steering_hooks`), by default in the
official LLM script's setting: the generated tokens only (the forward pass over the prompt is left
alone) and no intermediate clipping. Each continuation (the new tokens only, not the prompt) is

- judged by a **held-out concept classifier** (:class:`ConceptJudge`): a logistic regression on the
  sentence embeddings (MiniLM by default) of concept texts that no steer was fitted on, with the
  classes source, target and other (neutral texts); ``switch_rate`` = share of continuations it
  labels as the target concept, ``source_rate`` = share still labelled as the source;
- scored for fluency: its perplexity under the **unsteered** model (the same prompt, the steer
  removed), exp of the mean negative log-likelihood over all continuation tokens of all prompts;
  ``perplexity_ratio`` = that over the unsteered continuations' perplexity.

A chat model's prompts are put into its chat template (``chat``). The classifier is not the steer's
own statistics: it is trained on other texts, with another model. Rows also say how many
continuations changed and how many were empty (end of sequence at once: not judged as the target,
not in the perplexity).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from icmlkit.lib.core.config import number_list
from icmlkit.lib.core.errors import UsageError

CLIP = {"file": None, "on": True, "off": False}
ROW_KEYS = ("label", "strength", "switch_rate", "source_rate", "perplexity", "perplexity_ratio", "changed",
            "empty", "mean_new_tokens", "n", "seconds")


@dataclass
class DecoderConfig:
    """Settings of ``steer-concept decode``: steered generation judged by a held-out classifier."""

    strengths: tuple[float, ...] = field(default=(1.0, 2.0, 4.0), metadata={
        "help": "Strengths (beta at every hooked layer), comma-separated; every steering file gets the same grid."})
    max_new_tokens: int = field(default=24, metadata={"help": "Tokens generated per prompt (greedy).", "min": 1})
    batch_size: int = field(default=16, metadata={"help": "Prompts per batch.", "min": 1})
    tokens: str = field(default="generated", metadata={
        "help": "Which positions the steer touches: generated (the new tokens only, the official LLM script's "
                "choice) or all.", "choices": ("generated", "all")})
    clip: str = field(default="off", metadata={
        "help": "Intermediate clipping: off (the official LLM script's default), on, or file (each step's own).",
        "choices": tuple(CLIP)})
    chat: bool = field(default=True, metadata={
        "help": "Put each prompt into the model's chat template when its tokenizer has one."})
    judge: str = field(default="minilm", metadata={
        "help": "The encoder of the held-out concept classifier (its sentence embedding feeds a logistic "
                "regression): minilm or a local folder."})

    def strength_list(self) -> list[float]:
        return number_list(self.strengths, "--strengths")

    def check(self) -> None:
        self.strength_list()


class ConceptJudge:
    """A logistic regression (standardised features) on sentence embeddings: classes ``source``,
    ``target`` and ``other``, trained on held-out concept texts; :meth:`labels` names each text's class."""

    CLASSES = ("source", "target", "other")

    def __init__(self, encoder_loaded, *, seed: int = 0, max_length: int = 64, device="cpu"):
        from icmlkit.lib.steer_concept.hooks import Encoder

        self.enc = Encoder(encoder_loaded, layers=[0], pool="mean", max_length=max_length, device=device)
        self.seed = seed
        self.model = None
        self.info: dict = {}

    def embed(self, texts: list[str]):
        return self.enc.embed(list(texts), desc="judge")["pooled"]

    def fit(self, source: list[str], target: list[str], other: list[str]) -> "ConceptJudge":
        """Train on the three text sets; ``info`` gets the sizes and a 5-fold cross-validated accuracy."""
        import numpy as np
        from sklearn.model_selection import StratifiedKFold, cross_val_score

        from icmlkit.lib.steer_concept.evaluate import _probe

        sets = (source, target, other)
        if min(len(s) for s in sets) < 2:
            raise UsageError("the concept classifier needs at least 2 texts per class (source, target, other)")
        x = self.embed([t for s in sets for t in s])
        y = np.concatenate([np.full(len(s), c) for c, s in enumerate(sets)])
        k = int(min(5, min(len(s) for s in sets)))
        cv = StratifiedKFold(n_splits=k, shuffle=True, random_state=self.seed)
        acc = float(cross_val_score(_probe(self.seed), x, y, cv=cv, scoring="balanced_accuracy").mean())
        self.model = _probe(self.seed).fit(x, y)
        self.info = {"texts": {c: len(s) for c, s in zip(self.CLASSES, sets)}, "cv_balanced_accuracy": round(acc, 4),
                     "encoder": self.enc.loaded.name}
        return self

    def labels(self, texts: list[str]) -> list[str]:
        if self.model is None:
            raise UsageError("the concept classifier is not trained")
        keep = [i for i, t in enumerate(texts) if t.strip()]
        out = ["empty"] * len(texts)
        if keep:
            pred = self.model.predict(self.embed([texts[i] for i in keep]))
            for i, p in zip(keep, pred):
                out[i] = self.CLASSES[int(p)]
        return out


def prompt_texts(tokenizer, prompts: list[str], chat: bool) -> tuple[list[str], bool]:
    """(texts to generate from, add_special_tokens): chat-templated when ``chat`` and the tokenizer has one."""
    from icmlkit.lib.hf.chat import chat_prompts, has_chat_template

    if chat and has_chat_template(tokenizer):
        return chat_prompts(tokenizer, [[{"role": "user", "content": p}] for p in prompts]), False
    return list(prompts), True


def generate(lm, prompts: list[str], cfg: DecoderConfig, steering=None, strength: float | None = None) -> list[dict]:
    """Greedy continuations (``{"text", "token_ids"}`` per prompt) with ``steering`` hooked in (None: unsteered)."""
    import contextlib

    from icmlkit.lib.hf.generate import greedy_generate
    from icmlkit.lib.hf.hooks import site_modules
    from icmlkit.lib.steer_concept.hooks import steering_hooks

    texts, special = prompt_texts(lm.tokenizer, prompts, cfg.chat)
    ctx = contextlib.nullcontext()
    if steering is not None:
        modules = site_modules(lm.model, list(steering.layers), steering.config.get("site", "attn"))
        ctx = steering_hooks(modules, steering, strength, tokens=cfg.tokens, clip=CLIP[cfg.clip])
    with ctx:
        gens = greedy_generate(lm.model, lm.tokenizer, texts, max_new_tokens=cfg.max_new_tokens,
                               batch_size=cfg.batch_size, add_special_tokens=special)
    return [{"text": g.text, "token_ids": list(g.token_ids)} for g in gens]


def nll(lm, prompts: list[str], gens: list[dict], cfg: DecoderConfig) -> list[float | None]:
    """Summed negative log-likelihood of each continuation's tokens under the (unsteered) model
    ``lm`` given its prompt; None for an empty continuation."""
    from icmlkit.lib.hf.generate import encode, score_token_ids

    texts, special = prompt_texts(lm.tokenizer, prompts, cfg.chat)
    p_ids = encode(lm.tokenizer, texts, add_special_tokens=special)
    keep = [i for i, g in enumerate(gens) if g["token_ids"]]
    out: list[float | None] = [None] * len(gens)
    if keep:
        scores = score_token_ids(lm.model, lm.tokenizer, [p_ids[i] for i in keep],
                                 [gens[i]["token_ids"] for i in keep], batch_size=cfg.batch_size)
        for i, s in zip(keep, scores):
            out[i] = -float(s.sum)
    return out


def perplexity(gens: list[dict], nlls: list) -> float | None:
    """exp(total NLL / total tokens) over the non-empty continuations."""
    tok = sum(len(g["token_ids"]) for g, v in zip(gens, nlls) if v is not None)
    if tok == 0:
        return None
    return math.exp(sum(v for v in nlls if v is not None) / tok)


def cell(lm, judge: ConceptJudge, prompts: list[str], cfg: DecoderConfig, steering=None,
         strength: float | None = None) -> dict:
    """One (steer, strength) cell: the continuations, their judged labels and their NLL under the
    unsteered model (a JSON-able dict, so that a benchmark can cache it)."""
    t0 = time.perf_counter()
    gens = generate(lm, prompts, cfg, steering, strength)
    nlls = nll(lm, prompts, gens, cfg)
    labels = judge.labels([g["text"] for g in gens])
    return {"gens": gens, "nll": nlls, "labels": labels, "seconds": round(time.perf_counter() - t0, 2)}


def summarize(label: str, strength, c: dict, base: dict) -> dict:
    n = len(c["gens"])
    ppl, ppl0 = perplexity(c["gens"], c["nll"]), perplexity(base["gens"], base["nll"])
    return {"label": label, "strength": strength,
            "switch_rate": sum(lab == "target" for lab in c["labels"]) / n,
            "source_rate": sum(lab == "source" for lab in c["labels"]) / n,
            "perplexity": ppl, "perplexity_ratio": (ppl / ppl0) if ppl is not None and ppl0 else None,
            "changed": sum(g["token_ids"] != b["token_ids"] for g, b in zip(c["gens"], base["gens"])) / n,
            "empty": sum(not g["token_ids"] for g in c["gens"]),
            "mean_new_tokens": sum(len(g["token_ids"]) for g in c["gens"]) / n, "n": n, "seconds": c["seconds"]}


@dataclass
class DecoderResult:
    rows: list[dict]
    cells: dict
    summary: dict


def decode_eval(cfg: DecoderConfig, lm, steerings: list, prompts: list[str], judge: ConceptJudge, *,
                cache=None) -> DecoderResult:
    """Every ``(label, Steering)`` at every strength of ``cfg``, plus the unsteered model (strength
    None, label ``unsteered``). ``cache(key, compute)`` (e.g. a benchmark's ``ctx.cached``) keeps each
    cell so that a killed run resumes; default: compute each cell."""
    if lm.kind != "causal-lm":
        raise UsageError("the decoder path needs a causal language model (loaded with its head)")
    if not prompts:
        raise UsageError("no prompts")
    for label, st in steerings:
        if st.layers == [None]:
            raise UsageError(f"{label}: the steering file was fitted on plain arrays (no layers); use `apply`")
        st.check_model(lm)
    cache = cache or (lambda key, compute: compute())
    t0 = time.perf_counter()
    cells = {"unsteered": cache("unsteered", lambda: cell(lm, judge, prompts, cfg))}
    base = cells["unsteered"]
    rows = [summarize("unsteered", None, base, base)]
    for label, st in steerings:
        for b in cfg.strength_list():
            key = f"{label}@{b:g}"
            cells[key] = cache(key, lambda st=st, b=b: cell(lm, judge, prompts, cfg, st, b))
            rows.append(summarize(label, b, cells[key], base))
    summary = {"model": lm.name, "prompts": len(prompts), "strengths": cfg.strength_list(), "tokens": cfg.tokens,
               "clip": cfg.clip, "max_new_tokens": cfg.max_new_tokens, "judge": judge.info,
               "seconds": round(time.perf_counter() - t0, 2)}
    return DecoderResult(rows, cells, summary)


def best_row(rows: list[dict], label: str, max_ratio: float | None = 2.0) -> dict | None:
    """``label``'s row with the highest switch rate (ties: the lower strength) among those whose
    perplexity ratio is at most ``max_ratio`` (None: any); None when no row of ``label`` qualifies."""
    ok = [r for r in rows if r["label"] == label and (max_ratio is None or (
        r["perplexity_ratio"] is not None and r["perplexity_ratio"] <= max_ratio))]
    if not ok:
        return None
    return max(ok, key=lambda r: (r["switch_rate"], -r["strength"]))
