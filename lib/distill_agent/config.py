"""The option dataclasses of distill-agent, with their command-line help (torch-free: the CLI builds
its options from them at import time and ``--help`` must stay fast)."""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.core.config import option as _opt
from icmlkit.lib.core.errors import UsageError


@dataclass
class EnvConfig:
    """The synthetic lookup + arithmetic environment of ``generate`` (a knowledge-gap toy)."""

    n_tasks: int = _opt(200, "Tasks to write.", min=1)
    min_keys: int = _opt(2, "Fewest keys per task (a task with n keys takes 2n+1 steps).", min=1)
    max_keys: int = _opt(3, "Most keys per task.", min=1)
    key_pool: int = _opt(16, "Size of the key vocabulary k0..k{N-1}.", min=2)
    max_value: int = _opt(9, "Values are integers 0..max_value.", min=1)
    private_frac: float = _opt(0.5, "Fraction of the key vocabulary the teacher recalls privately "
                               "(writes the value instead of LOOKUP) [reconstructed].", min=0.0, max=1.0)
    question: str = _opt("dsl", "How the question is written: dsl ('compute k3 + k7 - k1') or natural ('What is "
                         "the value of k3, plus the value of k7, minus the value of k1?').", choices=("dsl", "natural"))

    def check(self) -> None:
        if self.question not in ("dsl", "natural"):
            raise UsageError("--question must be dsl or natural")
        if self.min_keys > self.max_keys:
            raise UsageError("--min-keys must be <= --max-keys")
        if self.max_keys > self.key_pool:
            raise UsageError("--max-keys must be <= --key-pool (keys in a task are distinct)")


@dataclass
class AgentConfig:
    """How an agent episode runs (shared by mps, bc-init and eval)."""

    max_steps: int = _opt(10, "Most assistant steps per episode (step 1 is the plan).", min=1)
    step_tokens: int = _opt(48, "Most new tokens per step for a local model.", min=1)
    step_timeout: float = _opt(10.0, "Python sandbox: seconds per step (a timeout kills the step, not the run).",
                               min=0.01)
    memory_mb: int = _opt(1024, "Python sandbox: address-space limit in MiB (0: none).", min=0)
    workers: int = _opt(4, "Endpoint requests in flight.", min=1)
    api_key_env: str = _opt("OPENAI_API_KEY", "Environment variable holding the endpoint key (never logged).")
    batch: int = _opt(64, "Episodes generated together by a local model.", min=1)

    def check(self) -> None:
        pass


@dataclass
class MPSConfig:
    """Mentored Problem Solving (phase 2)."""

    max_repairs: int = _opt(3, "Most teacher repairs per task (MAX_REPAIR_ATTEMPTS).", min=0)
    temperature: float = _opt(0.6, "Student sampling temperature.", min=0.0)
    top_p: float = _opt(0.95, "Student nucleus sampling.", min=0.0, max=1.0)
    top_k: int = _opt(20, "Student top-k sampling (0: off).", min=0)
    teacher_temperature: float = _opt(0.9, "Endpoint teacher / judge temperature.", min=0.0)
    judge_retries: int = _opt(2, "Re-ask a judge whose answer is not valid JSON this many times, then count "
                              "the task as a judge failure (hard sample) [reconstructed].", min=0)

    def check(self) -> None:
        pass


@dataclass
class ToSFTConfig:
    split: str = _opt("first", "Which half of the MPS tasks feeds SFT (first: the paper's), or all.",
                      choices=("first", "second", "all"))
    keep_repair_free: float = _opt(0.5, "Probability of keeping a correct trajectory that needed no repair.",
                                   min=0.0, max=1.0)

    def check(self) -> None:
        pass


@dataclass
class ToRLConfig:
    split: str = _opt("second", "Which half of the MPS tasks feeds RL (second: the paper's), or all.",
                      choices=("first", "second", "all"))
    p_hard: float = _opt(0.5, "Probability of a plain-question item from a repair-free WRONG trajectory.",
                         min=0.0, max=1.0)
    p_easy: float = _opt(0.1, "Probability of a plain-question item from a repair-free CORRECT trajectory.",
                         min=0.0, max=1.0)

    def check(self) -> None:
        pass


@dataclass
class SFTConfig:
    """Supervised fine-tuning (BC init, SCoRe-SFT, imitation SFT): loss on assistant turns only."""

    init: str = _opt("tiny", "Starting model: 'tiny' (a fresh LlamaConfig student with a WordLevel tokenizer, for "
                     "tasks of `generate`), a local Hugging Face folder, or smollm2.")
    epochs: int = _opt(3, "Passes over the data.", min=1)
    lr: float = _opt(3e-3, "AdamW learning rate (cosine decay, linear warmup).", min=0.0, min_open=True)
    warmup: float = _opt(0.1, "Warmup fraction of the steps.", min=0.0, max=1.0)
    batch: int = _opt(16, "Sequences per optimiser step (global; split over torchrun ranks).", min=1)
    max_len: int = _opt(512, "Truncate sequences to this many tokens.", min=8)
    layers: int = _opt(2, "tiny: decoder layers (2-4 in the benchmark).", min=1)
    d_model: int = _opt(128, "tiny: hidden size.", min=8)
    heads: int = _opt(4, "tiny: attention heads.", min=1)
    weight_decay: float = _opt(0.0, "AdamW weight decay.", min=0.0)
    lora: int = _opt(0, "LoRA rank for a Hugging Face student through peft (extra lime; 0: full fine-tuning). "
                     "The adapters are merged into the weights when training ends, so the output is a plain model "
                     "folder.", min=0)
    lora_alpha: float = _opt(16.0, "LoRA scaling alpha (the update is scaled by alpha / rank).", min=0.0,
                             min_open=True)
    lora_targets: str = _opt("q_proj,k_proj,v_proj,o_proj", "Comma-separated module names that get adapters.")

    def check(self) -> None:
        if self.lora and self.init == "tiny":
            raise UsageError("--lora needs a Hugging Face student (--init FOLDER or smollm2), not --init tiny")
        if self.d_model % self.heads:
            raise UsageError("--d-model must be a multiple of --heads")


@dataclass
class RLConfig:
    """SCoRe-RL / outcome-only GRPO (phase 3)."""

    reward: str = _opt("score", "score: the key-step shaped reward; outcome: 1 for a correct answer, else 0 "
                       "(the outcome-only GRPO baseline).", choices=("score", "outcome"))
    group: int = _opt(8, "G rollouts per prefix.", min=2)
    steps: int = _opt(20, "Optimiser steps.", min=1)
    prompts: int = _opt(8, "Prefixes per optimiser step.", min=1)
    lr: float = _opt(5e-4, "AdamW learning rate.", min=0.0, min_open=True)
    temperature: float = _opt(1.0, "Rollout sampling temperature.", min=0.0, min_open=True)
    max_turns: int = _opt(8, "Most assistant turns per rollout (from the prefix).", min=1)
    kl: float = _opt(0.0, "KL coefficient to the starting model (k3 estimator; 0 as in the paper's script).",
                     min=0.0)
    clip_grad: float = _opt(1.0, "Gradient-norm clip (0: off).", min=0.0)
    adv_std: str = _opt("population", "The group std that scales the advantages: population (ours) or unbiased "
                        "(the reference trainer verl's torch.std).", choices=("population", "unbiased"))
    ppo_mini_batch: int = _opt(0, "Prompts per PPO mini-batch: 0 = one on-policy update on the whole batch (ours); "
                               "k < --prompts = the reference trainer's form: old log-probs taken once, then one "
                               "optimiser step per mini-batch of k prompts with the clipped ratio (--clip-ratio, "
                               "dual clip 3 on negative advantages).", min=0)
    clip_ratio: float = _opt(0.2, "PPO clip epsilon of the mini-batch form (verl's clip_ratio).", min=0.0,
                             min_open=True)
    lora: int = _opt(0, "LoRA rank (peft, extra lime; 0: full fine-tuning); merged into the weights at the "
                     "end.", min=0)
    lora_alpha: float = _opt(16.0, "LoRA scaling alpha.", min=0.0, min_open=True)
    lora_targets: str = _opt("q_proj,k_proj,v_proj,o_proj", "Comma-separated module names that get adapters.")

    def check(self) -> None:
        if self.adv_std not in ("population", "unbiased"):
            raise UsageError(f"--adv-std must be population or unbiased, not {self.adv_std!r}")
        if self.ppo_mini_batch < 0:
            raise UsageError("--ppo-mini-batch must be >= 0")


@dataclass
class EvalConfig:
    temperature: float = _opt(0.0, "0: greedy decoding; >0: sampling.", min=0.0)

    def check(self) -> None:
        pass
