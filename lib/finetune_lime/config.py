"""The option dataclasses of finetune-lime, with their command-line help.

Standard library only: the CLI declares its options from these classes without importing torch.
Steps marked [reconstructed] are not in the paper's confirmed text (see docs/finetune-lime.md).
"""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.core.config import option as _opt
from icmlkit.lib.core.errors import UsageError

LIME_METHODS = ("lime-lora", "lime-dora", "lime-lorafa", "lime-slicefine", "lime-prompt")
BASELINES = ("lora", "molora", "hydralora")
EMBEDDING_METHODS = ("lime-lora", "lora")
METHODS = LIME_METHODS + BASELINES
DEFAULT_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "out_proj"]
SELECTIONS = ("soft", "hard")
ROUTE_NORMS = ("batch", "token", "causal")
NGRAM_RULES = ("causal", "last")
TASKS = ("sort_asc", "sort_desc", "add", "sub", "caesar1", "caesar2", "caesar3", "caesar_m1",
         "reverse", "rotate", "max", "min")
DEFAULT_TASKS = ["sort_asc", "sort_desc", "add", "sub", "caesar1", "caesar2", "caesar3", "caesar_m1"]


@dataclass
class AdapterConfig:
    """What is inserted into the frozen model (stored in the adapter file's metadata)."""

    method: str = _opt("lime-lora", "lime-lora | lime-dora | lime-lorafa | lime-slicefine | lime-prompt (LiME: one "
                       "shared PEFT module modulated by E expert vectors, no router weights), or the baselines lora | "
                       "molora (E LoRAs + learned top-k router) | hydralora (shared A, E B heads + router). "
                       "lime-dora/-lorafa/-slicefine/-prompt are [reconstructed].", choices=METHODS)
    experts: int = _opt(4, "E: expert vectors (LiME) or experts (MoLoRA/HydraLoRA); ignored by lora.", min=1)
    rank: int = _opt(2, "r: LoRA rank (the slice width for lime-slicefine).", min=1)
    alpha: float | None = _opt(None, "LoRA alpha; delta = (alpha/r) B A x. Default 2r (scale 2) [reconstructed "
                               "default].")
    dropout: float = _opt(0.0, "Dropout on the adapter input x (training only).", min=0.0, max=0.99)
    targets: list[str] = _opt(list(DEFAULT_TARGETS), "Comma-separated module-path suffixes of the nn.Linear "
                              "layers to wrap.")
    shared: bool = _opt(True, "LiME: add the shared vector p_s (init N(0, 0.1^2)) and scalar gamma_s (init 0).")
    top_k: int = _opt(1, "k of the expert selection (LiME and MoLoRA).", min=1)
    auto_topk: bool = _opt(True, "LiME Auto Top-K: experts with pi >= theta * max pi are selected.")
    theta: float = _opt(0.5, "Auto Top-K threshold theta.", min=0.0, max=1.0)
    selection: str = _opt("soft", "soft: w = pi * sigmoid((pi - threshold)/T_s), renormalised (dense); hard: keep "
                          "only the selected experts' pi, renormalised.", choices=SELECTIONS)
    sparse: bool = _opt(False, "With --selection hard: gather only the selected expert vectors (the path that "
                        "saves compute); same numbers as dense hard selection.")
    select_temperature: float = _opt(0.5, "T_s of the soft selection.", min=0.0, min_open=True)
    gamma_routing: float = _opt(0.5, "g: routing mix z = ((1-g) h/max|h| + g delta/max|delta|)/tau.",
                                min=0.0, max=1.0)
    temperature: float = _opt(0.5, "tau: routing temperature.", min=0.0, min_open=True)
    jitter: float = _opt(0.1, "Training jitter: z *= U(1-eps, 1+eps).", min=0.0, max=1.0)
    route_norm: str = _opt("batch", "batch: max-abs over the whole batch (pads excluded; a token's route depends on "
                           "the batch); token: per token; causal: running max over positions <= t of the batch "
                           "[reconstructed].", choices=ROUTE_NORMS)
    n_gram: int = _opt(1, "One routing decision per group of n real tokens, broadcast to the group.", min=1)
    ngram_rule: str = _opt("causal", "causal: the group's first token decides (no future leak); last: the official "
                           "last-token rule (leaks future tokens in a causal LM; warns).", choices=NGRAM_RULES)
    prompt_tokens: int = _opt(8, "lime-prompt: soft-prompt length [reconstructed].", min=1)
    embeddings: bool = _opt(False, "Also wrap the input token embedding (lime-lora: LiME-LoRA on the embedding "
                            "rows, routed like a Linear; lora: plain LoRA). A tied output head keeps the frozen "
                            "weight (the adapter acts on the input path only).")

    def check(self) -> None:
        if self.method not in METHODS:
            raise UsageError(f"--method must be one of {', '.join(METHODS)}, not {self.method!r}")
        if int(self.rank) <= 0:
            raise UsageError("--rank must be > 0")
        if int(self.experts) <= 0:
            raise UsageError("--experts must be > 0")
        if self.top_k > self.experts and self.method not in ("lora",):
            raise UsageError(f"--top-k {self.top_k} exceeds --experts {self.experts}")
        if self.sparse and self.selection != "hard":
            raise UsageError("--sparse needs --selection hard (soft selection is dense by definition)")
        if not self.targets or any(not str(t).strip() for t in self.targets):
            raise UsageError("--targets must name at least one module suffix")
        if self.alpha is not None and self.alpha <= 0:
            raise UsageError("--alpha must be > 0")
        if self.embeddings and self.method not in EMBEDDING_METHODS:
            raise UsageError(f"--embeddings is built for --method {' / '.join(EMBEDDING_METHODS)}, not {self.method}")

    @property
    def scale(self) -> float:
        return (float(self.alpha) if self.alpha is not None else 2.0 * self.rank) / self.rank


@dataclass
class TrainConfig:
    """The training loop (AdamW with two learning rates, linear warmup then linear decay)."""

    steps: int = _opt(200, "Optimiser steps.", min=1)
    batch_size: int = _opt(16, "Global batch (split evenly over torchrun processes).", min=1)
    moe_lr: float = _opt(1e-3, "Learning rate of P, p_s, gamma_s (and of the baselines' routers).",
                         min=0.0, min_open=True)
    peft_lr: float = _opt(4e-4, "Learning rate of A, B (and DoRA magnitude, slice, soft prompt).",
                          min=0.0, min_open=True)
    weight_decay: float = _opt(0.01, "AdamW weight decay.", min=0.0)
    warmup: float = _opt(0.03, "Warmup fraction of the steps (linear), then linear decay to 0 [decay: "
                         "reconstructed, the HF Trainer default].", min=0.0, max=1.0)
    grad_clip: float = _opt(1.0, "Clip the global gradient norm (0: off).", min=0.0)
    balance_coef: float = _opt(0.01, "loss = CE + balance_coef (importance_coef * sum importance + kl_coef * sum "
                               "KL).", min=0.0)
    importance_coef: float = _opt(1.0, "Weight of the squared-CV importance loss.", min=0.0)
    kl_coef: float = _opt(0.1, "Weight of KL(mean pi || uniform).", min=0.0)
    balance_every: int = _opt(1, "Add the balance loss every n steps only.", min=1)
    max_length: int = _opt(256, "Longest prompt+target in tokens; longer rows are an input error.", min=2)

    def check(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise UsageError("--steps and --batch-size must be >= 1")


@dataclass
class EvalConfig:
    """Greedy decoding for exact match."""

    batch_size: int = _opt(32, "Prompts per forward pass.", min=1)
    max_new_tokens: int | None = _opt(None, "Tokens to generate (default: the longest target + 1).", min=1)

    def check(self) -> None:
        pass


@dataclass
class ToyConfig:
    """pretrain-toy: the frozen backbone built in-process [reconstructed sizes]."""

    layers: int = _opt(2, "Decoder layers (2-4 in the method sheet).", min=1, max=12)
    d_model: int = _opt(128, "Hidden size.", min=16)
    heads: int = _opt(4, "Attention heads (must divide --d-model).", min=1)
    steps: int = _opt(800, "Pretraining steps on copy / reverse / sort / add.", min=1)
    batch_size: int = _opt(64, "Pretraining batch.", min=1)
    lr: float = _opt(3e-3, "AdamW learning rate (cosine decay).", min=0.0, min_open=True)
    max_len: int = _opt(5, "Longest operand (digits or letters) in the pretraining tasks.", min=2, max=12)

    def check(self) -> None:
        if self.d_model % self.heads:
            raise UsageError(f"--heads {self.heads} must divide --d-model {self.d_model}")


@dataclass
class TasksConfig:
    """``generate``: the conflicting synthetic tasks, task identity only in the prompt."""

    tasks: list[str] = _opt(list(DEFAULT_TASKS), f"Comma-separated task names among {', '.join(TASKS)}.")
    n_per_task: int = _opt(200, "Rows per task.", min=1)
    min_len: int = _opt(3, "Shortest operand.", min=1, max=12)
    max_len: int = _opt(5, "Longest operand.", min=1, max=12)

    def check(self) -> None:
        bad = [t for t in self.tasks if t not in TASKS]
        if bad:
            raise UsageError(f"--tasks: unknown task(s) {', '.join(map(str, bad))}; known: {', '.join(TASKS)}")
        if not self.tasks:
            raise UsageError("--tasks must name at least one task")
        if self.min_len > self.max_len:
            raise UsageError("--min-len must be <= --max-len")
