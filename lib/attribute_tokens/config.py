"""Option dataclasses of attribute-tokens (trace, eval, timing, generate, train-toy), with their
command-line help. Standard library only: the CLI builds its flags from these at import time and
``--help`` must not import torch or numpy."""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.core.config import option as _opt
from icmlkit.lib.core.errors import UsageError

METHODS = ("flashtrace", "ifr-span", "ifr-tokenwise", "gradxinput", "ig", "ablation", "attnlrp", "random")
EVAL_DEFAULT_METHODS = ["flashtrace", "ifr-span", "ifr-tokenwise", "gradxinput", "ig", "random"]
ATTENTION = ("recompute", "eager")
TASKS = ("niah-kv", "vt")
SPAN_UNITS = ("token", "char")


@dataclass
class TraceConfig:
    """Options of :func:`~icmlkit.lib.attribute_tokens.api.trace_rows` (one attribution per example)."""

    method: str = _opt("flashtrace", "flashtrace: IFR span aggregation with recursive hops (hops >= 1); "
                       "ifr-span: hop 0 only; ifr-tokenwise: token-wise IFR rows averaged (baseline); gradxinput, "
                       "ig, ablation: Captum baselines (extra attrib); attnlrp: needs lxt (optional); random.",
                       choices=METHODS)
    hops: int = _opt(1, "Recursive hops through the generated tokens (flashtrace; 0 = ifr-span).", min=0, max=8)
    attention: str = _opt("recompute", "recompute: attention probabilities from cached q, k with the model's RoPE "
                          "(kv heads repeated for GQA), one layer and 32 sinks at a time; eager: the probabilities "
                          "the eager kernel returns (memory L x H x N^2; a cross-check).", choices=ATTENTION)
    chunk_tokens: int = _opt(128, "Source tokens per chunk of the proximity computation.", min=1)
    sink_chunk: int = _opt(32, "Sink tokens per chunk of the attention recomputation.", min=1)
    renorm_threshold: float = _opt(0.0, "Proximities below this value are set to 0 before normalising "
                                   "[reconstructed: the official default 0 disables it].", min=0)
    ig_steps: int = _opt(16, "Integrated gradients: Riemann steps (Gauss-Legendre, Captum).", min=1)
    chat: bool = _opt(False, "Wrap each prompt in the tokenizer's chat template before attributing (spans given "
                      "in char units shift with it).")

    def check(self) -> None:
        if self.method not in METHODS:
            raise UsageError(f"--method must be one of {', '.join(METHODS)}, not {self.method!r}")
        if self.attention not in ATTENTION:
            raise UsageError(f"--attention must be recompute or eager, not {self.attention!r}")
        if self.method == "flashtrace" and self.hops < 1:
            raise UsageError("--hops must be >= 1 for --method flashtrace (hops 0 is --method ifr-span)")
        for name in ("chunk_tokens", "sink_chunk", "ig_steps"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be >= 1")
        if self.renorm_threshold < 0:
            raise UsageError("--renorm-threshold must be >= 0")


@dataclass
class EvalConfig:
    """Options of :func:`~icmlkit.lib.attribute_tokens.api.evaluate` (faithfulness of several methods)."""

    methods: list[str] = _opt(list(EVAL_DEFAULT_METHODS), "Comma-separated methods to compare.")
    groups: int = _opt(20, "Guided deletion: prompt tokens removed in this many groups (by descending score).",
                       min=1)
    top_frac: float = _opt(0.1, "Recall@: the top fraction of attributed prompt tokens.", min=0, max=1,
                           min_open=True)
    limit: int = _opt(0, "Evaluate only the first N examples (0: all).", min=0)
    faithfulness: bool = _opt(True, "Compute RISE and RISE+AP (21 scored forward passes per example and method).")

    def check(self) -> None:
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise UsageError(f"--methods: unknown {bad or 'empty'}; choose from {', '.join(METHODS)}")
        if self.groups < 1:
            raise UsageError("--groups must be >= 1")
        if not 0 < self.top_frac <= 1:
            raise UsageError("--top-frac must be in (0, 1]")


@dataclass
class TimingConfig:
    """Options of :func:`~icmlkit.lib.attribute_tokens.api.timing` (wall time vs target length)."""

    lengths: list[int] = _opt([8, 32, 128, 512], "Comma-separated target lengths M (the chain padded with filler).")
    methods: list[str] = _opt(["flashtrace", "ifr-tokenwise", "ig"], "Comma-separated methods to time.")
    prompt_tokens: int = _opt(200, "Prompt length in tokens.", min=8)
    repeats: int = _opt(1, "Runs per point (the minimum is kept).", min=1)

    def check(self) -> None:
        if not self.lengths or any(int(m) < 1 for m in self.lengths):
            raise UsageError("--lengths must be positive integers")
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise UsageError(f"--methods: unknown {bad or 'empty'}; choose from {', '.join(METHODS)}")


@dataclass
class TaskConfig:
    """Options of :func:`~icmlkit.lib.attribute_tokens.tasks.make_task` (synthetic tasks with gold evidence)."""

    n: int = _opt(200, "Examples to generate.", min=1)
    lines_min: int = _opt(40, "niah-kv: fewest key lines.", min=1)
    lines_max: int = _opt(80, "niah-kv: most key lines.", min=1)
    chains: int = _opt(4, "vt: variable chains (1 real + distractors).", min=1)
    hops: int = _opt(3, "vt: assignments in each chain.", min=1)
    fillers: int = _opt(10, "vt: filler sentences mixed into the prompt.", min=0)
    style: str = _opt("toy", "toy: the word vocabulary of train-toy's tokenizer; text: plain English-ish words "
                      "for real tokenizers; ruler: vt as RULER-style multi-hop variable tracking (VAR ABCDE = VAR "
                      "FGHIJ, 5-digit values) with a chain-of-thought question, for instruction-tuned models "
                      "(niah-kv: as text) [reconstructed].", choices=("toy", "text", "ruler"))

    def check(self) -> None:
        if self.lines_min > self.lines_max:
            raise UsageError("--lines-min must be <= --lines-max")
        if self.style not in ("toy", "text", "ruler"):
            raise UsageError("--style must be toy, text or ruler")


@dataclass
class ToyConfig:
    """Options of :func:`~icmlkit.lib.attribute_tokens.toy.train_toy` (the in-process tiny Llama decoder)."""

    layers: int = _opt(3, "Decoder layers.", min=1, max=8)
    hidden: int = _opt(128, "Hidden size d.", min=16)
    heads: int = _opt(4, "Attention heads.", min=1)
    steps: int = _opt(4000, "Optimizer steps.", min=1)
    batch: int = _opt(16, "Sequences per step (global, split over torchrun ranks).", min=1)
    lr: float = _opt(1e-3, "AdamW peak learning rate (cosine decay, 5% warm-up).", min=0, min_open=True)
    eval_n: int = _opt(100, "Held-out examples per task for the accuracy check.", min=1)
    min_lines: int = _opt(8, "niah-kv training after the curriculum: fewest key lines (up to --lines-max) "
                          "[reconstructed].", min=1)
    lines_max: int = _opt(80, "niah-kv: most key lines.", min=1)
    train_queries: int = _opt(8, "Training sequences carry up to this many queries (multi-query recall: denser "
                              "supervision) [reconstructed].", min=1)
    vt_first: float = _opt(0.0, "Share of the steps trained on VT alone (its chains grow from 2 to 4 over the first "
                           "30 %), before NIAH-KV joins; 0 = both tasks from the start, VT growing with NIAH-KV's "
                           "curriculum [reconstructed].", min=0, max=1)
    curriculum: float = _opt(0.6, "Share of the steps (after any VT-only phase) over which NIAH-KV grows from 2-6 "
                             "lines to full, and VT from 2 chains to 4 with fillers when there is no VT-only phase "
                             "[reconstructed].", min=0, max=1)
    eval_lines_min: int = _opt(40, "niah-kv accuracy check: fewest key lines.", min=1)

    def check(self) -> None:
        if self.hidden % self.heads:
            raise UsageError("--hidden must be a multiple of --heads")
        if not 0 <= self.vt_first < 1:
            raise UsageError("--vt-first must be in [0, 1): NIAH-KV needs steps after the VT-only phase")
        if self.min_lines > self.lines_max or self.eval_lines_min > self.lines_max:
            raise UsageError("--min-lines and --eval-lines-min must be <= --lines-max")
