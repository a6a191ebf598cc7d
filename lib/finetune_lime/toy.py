"""pretrain-toy: the frozen backbone built in-process [reconstructed sizes and schedule].

A small Llama-style decoder (``layers`` x ``d_model``, character tokenizer of
:func:`~icmlkit.lib.finetune_lime.data.char_tokenizer`) pretrained on a mixture of copy / reverse / sort / add
with a task-prefix code (``C:``, ``R:``, ``S:``, ``P:``), loss on the answer tokens, AdamW with cosine
decay; saved as a Hugging Face folder (config.json, model.safetensors, tokenizer files) that
``train`` loads like any local model folder. The tokenizer, the decoder, the loss and the step are
the shared tiny-LM kit's (:mod:`icmlkit.lib.hf.tiny`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from icmlkit.lib.core.runtime import numpy_rng
from icmlkit.lib.finetune_lime.config import ToyConfig
from icmlkit.lib.finetune_lime.data import PRETRAIN, char_tokenizer, encode_rows, pretrain_example, teacher_batch


@dataclass
class ToyResult:
    model: object
    tokenizer: object
    summary: dict


def build_toy(cfg: ToyConfig, tokenizer, *, seed: int = 0):
    from icmlkit.lib.hf.tiny import tiny_llama

    return tiny_llama(len(tokenizer), hidden=cfg.d_model, layers=cfg.layers, heads=cfg.heads, max_positions=128,
                      seed=seed, stream="toy-init", pad_token_id=tokenizer.pad_token_id,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, attention_bias=False)


def pretrain_toy(cfg: ToyConfig, *, seed: int = 0, device=None, progress=None) -> ToyResult:
    """Build and pretrain the toy backbone; returns it in eval mode with its tokenizer."""
    from icmlkit.lib.hf.tiny import masked_ce, optimizer_step

    cfg.check()
    dev = torch.device(device) if device is not None else torch.device("cpu")
    tok = char_tokenizer()
    model = build_toy(cfg, tok, seed=seed).to(dev)
    rng = numpy_rng(seed, "toy-data")
    tasks = list(PRETRAIN)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / cfg.steps))))
    pad = tok.pad_token_id
    t0 = time.perf_counter()
    model.train()
    loss_v = float("nan")
    for step in range(cfg.steps):
        rows = [pretrain_example(tasks[int(rng.integers(0, len(tasks)))], rng, cfg.max_len)
                for _ in range(cfg.batch_size)]
        enc = encode_rows(tok, rows)
        ids, mask, labels = teacher_batch(enc, list(range(len(rows))), pad)
        ids, mask, labels = ids.to(dev), mask.to(dev), labels.to(dev)
        loss = masked_ce(model(input_ids=ids, attention_mask=mask).logits, ids, labels != -100)
        optimizer_step(loss, opt, sched, model.parameters())
        loss_v = float(loss.detach())
        if progress is not None:
            progress(step + 1, cfg.steps, loss_v)
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    return ToyResult(model=model, tokenizer=tok, summary={
        "layers": cfg.layers, "d_model": cfg.d_model, "params": int(n_params), "steps": cfg.steps,
        "final_loss": round(loss_v, 6), "seconds": round(time.perf_counter() - t0, 3),
        "tasks": [f"{k} ({v})" for k, v in PRETRAIN.items()]})


def save_toy(folder, res: ToyResult) -> None:
    """Write the Hugging Face folder (config.json, model.safetensors, tokenizer files)."""
    from icmlkit.lib.hf.tiny import save_tiny

    save_tiny(folder, res.model, res.tokenizer)
