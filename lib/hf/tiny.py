"""A tiny causal-LM kit for the tools that train a small decoder in-process: attribute-tokens'
``train-toy``, finetune-lime's ``pretrain-toy`` and distill-agent's tiny student.

- :func:`word_tokenizer`: a WordLevel tokenizer over a word list (one word, or one character, per
  token) as a transformers ``PreTrainedTokenizerFast`` that ``save_pretrained`` / ``AutoTokenizer``
  round-trip; :func:`bpe_tokenizer`: a byte-level BPE tokenizer trained on a small corpus (tests'
  stand-ins for a real model's tokenizer);
- :func:`tiny_llama`: a random-init ``LlamaForCausalLM`` (``LlamaConfig``: RoPE, RMSNorm, tied
  embeddings, MLP width 2 d), its initial weights drawn from a named seed stream;
- :func:`lm_batch`: prompt + target token lists right-padded into (ids, attention, loss mask);
- :func:`masked_ce`: next-token cross-entropy on the loss-mask tokens, as a token mean, a sum over
  a given count, or a mean of per-sequence means; :func:`optimizer_step`: one clipped step;
- :func:`warmup_cosine`: linear warm-up, then cosine decay to a floor;
- :func:`save_tiny`: the Hugging Face folder (config.json, model.safetensors, tokenizer files).

Where the tools differ (tokenizer splitting, sizes, seed stream, the loss reduction) it is a
parameter, so each tool's saved models and seeded runs are what they were before the kit was shared.
Importing this module does not import torch or transformers.
"""
from __future__ import annotations

import math

SPLITS = ("whitespace", "chars")
DECODERS = (None, "fuse", "spaces")


def word_tokenizer(words, *, unk: str, pad: str, eos: str, bos: str | None = None, split: str = "whitespace",
                   isolate: str | None = None, decoder: str | None = None):
    """A WordLevel tokenizer whose vocabulary is ``words`` in order (repeats ignored; the special
    tokens must be among them). ``split``: ``whitespace`` (a word per token) or ``chars`` (a
    character per token); ``isolate``: a regular expression whose matches are split off first (tags);
    ``decoder``: None (the tokens joined by spaces by transformers), ``fuse`` (concatenated) or
    ``spaces`` (joined by single spaces, no clean-up)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for w in words:
        vocab.setdefault(w, len(vocab))
    t = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    pre = (pre_tokenizers.WhitespaceSplit() if split == "whitespace"
           else pre_tokenizers.Split(Regex("."), behavior="isolated"))
    if isolate:
        pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(isolate), behavior="isolated"), pre])
    t.pre_tokenizer = pre
    if decoder == "fuse":
        t.decoder = decoders.Fuse()
    elif decoder == "spaces":
        t.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    special = {"unk_token": unk, "pad_token": pad, "bos_token": bos, "eos_token": eos}
    return PreTrainedTokenizerFast(tokenizer_object=t, **{k: v for k, v in special.items() if v is not None})


def bpe_tokenizer(corpus, *, vocab_size: int = 400, eos: str = "<|endoftext|>"):
    """A byte-level BPE tokenizer (GPT-2 style pre-tokenisation and decoding) trained on the texts of
    ``corpus`` up to ``vocab_size`` tokens, ``eos`` its end and pad token, as a transformers
    ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    t = Tokenizer(models.BPE(unk_token=None))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(list(corpus), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[eos], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=t, eos_token=eos, pad_token=eos)


def tiny_llama(vocab_size: int, *, hidden: int, layers: int, heads: int, max_positions: int, seed: int,
               stream: str, pad_token_id, eos_token_id, bos_token_id, **config):
    """A random-init ``LlamaForCausalLM``: ``layers`` x ``hidden`` with ``heads`` heads (as many
    key-value heads), MLP width 2 ``hidden``, tied embeddings; the weights drawn under
    ``seeded(seed, stream)``. ``config``: further ``LlamaConfig`` fields (``rms_norm_eps``,
    ``attn_implementation``, ...)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from icmlkit.lib.core.runtime import seeded

    conf = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                       num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                       max_position_embeddings=max_positions, tie_word_embeddings=True, pad_token_id=pad_token_id,
                       eos_token_id=eos_token_id, bos_token_id=bos_token_id, **config)
    with seeded(seed, stream):
        return LlamaForCausalLM(conf)


def lm_batch(seqs: list[list[int]], masks: list[list[int]], pad: int, *, length: int | None = None, device=None):
    """(ids, attention, loss mask), long tensors [B, L] right-padded to ``length`` (default the
    longest): ``seqs`` token ids, ``masks`` one 0/1 list per sequence (1: the token is a target)."""
    from icmlkit.lib.hf.generate import pad_batch

    ids, attention = pad_batch(seqs, pad, side="right", length=length, device=device)
    return ids, attention, pad_batch(masks, 0, side="right", length=length, device=device)[0]


def masked_ce(logits, ids, mask, denom=None, *, per_sequence: bool = False):
    """Next-token cross-entropy (float32) of ``logits`` [B, L, V] against ``ids`` [B, L] on the tokens
    where ``mask`` [B, L] is set (target positions; the first token is never one).

    Reduction: the sum over the masked tokens divided by ``denom`` (default: their count, a token
    mean), or with ``per_sequence`` the mean over the sequences of each sequence's token mean (so
    equal slices of a batch under torchrun average to exactly the single-process loss). The two are
    computed as attribute-tokens (per sequence, class axis second) and distill-agent / finetune-lime
    (flattened) trained their seeded runs."""
    import torch.nn.functional as F

    lg, tgt, m = logits[:, :-1].float(), ids[:, 1:], mask[:, 1:]
    if per_sequence:
        ce = F.cross_entropy(lg.transpose(1, 2), tgt, reduction="none")
        return ((ce * m).sum(1) / m.sum(1).clamp_min(1)).mean()
    m = m.float()
    ce = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt.reshape(-1), reduction="none").view_as(m)
    return (ce * m).sum() / (m.sum() if denom is None else denom)


def optimizer_step(loss, opt, sched=None, params=None, clip: float = 1.0) -> None:
    """Zero the gradients, back-propagate ``loss``, clip the gradient norm of ``params`` to ``clip``
    (0: no clipping), step the optimiser and the scheduler."""
    import torch

    opt.zero_grad(set_to_none=True)
    loss.backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()
    if sched is not None:
        sched.step()


def warmup_cosine(opt, total: int, warmup: int, floor: float = 0.0):
    """LambdaLR: linear warm-up over ``warmup`` steps ((s + 1) / warmup), then cosine decay from 1
    to ``floor`` at step ``total``."""
    import torch

    w = max(1, int(warmup))

    def f(step):
        if step < w:
            return (step + 1) / w
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - w) / max(1, total - w)))) * (1 - floor) + floor

    return torch.optim.lr_scheduler.LambdaLR(opt, f)


def save_tiny(folder, model, tokenizer, *, tokenizer_class: str | None = None) -> None:
    """Write the Hugging Face folder: config.json, model.safetensors and the tokenizer files.
    ``tokenizer_class``, when given, is written into tokenizer_config.json so that AutoTokenizer loads
    the tokenizer as itself in any model folder (a Qwen2 folder would otherwise rebuild it as a Qwen2
    byte-level tokenizer)."""
    from pathlib import Path

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    folder = Path(folder)
    model.save_pretrained(str(folder))
    save_tokenizer(folder, tokenizer, tokenizer_class=tokenizer_class)


def save_tokenizer(folder, tokenizer, *, tokenizer_class: str | None = None) -> None:
    """``tokenizer.save_pretrained(folder)``, with ``tokenizer_class`` written into its
    tokenizer_config.json when given (see :func:`save_tiny`)."""
    import json
    from pathlib import Path

    from icmlkit.lib.core.io import write_json

    tokenizer.save_pretrained(str(folder))
    if tokenizer_class:
        p = Path(folder) / "tokenizer_config.json"
        conf = json.loads(p.read_text())
        conf["tokenizer_class"] = tokenizer_class
        write_json(p, conf)
