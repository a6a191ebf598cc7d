"""Greedy generation and continuation scoring with a causal language model, in padded batches.

Both take texts (use :func:`icmlkit.lib.hf.chat.chat_prompts` first for chat models, with
``add_special_tokens=False`` since the template already holds them), tokenize each text alone,
sort by length so that batches hold similar lengths (a deterministic order), pad, and return
results in input order.

- :func:`greedy_generate`: argmax decoding with the key-value cache, left padding, explicit
  position ids (so a padded row computes what it would alone), stops at end-of-sequence or after
  ``max_new_tokens``.
- :func:`score_continuations`: log p(continuation | prompt) per token, from one forward pass per
  batch (right padding; the log-probabilities of all positions are gathered at once);
  :func:`score_token_ids` does the same on token ids.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from icmlkit.lib.core.errors import UsageError


@dataclass
class Generation:
    """One greedy answer: ``text`` (decoded without special tokens), ``token_ids`` (the new tokens,
    end-of-sequence excluded), ``finished`` (stopped at end-of-sequence, not at the length limit),
    ``prompt_tokens`` (the prompt's length in tokens)."""

    text: str
    token_ids: list[int]
    finished: bool
    prompt_tokens: int


@dataclass
class Score:
    """log p(continuation | prompt): ``logprobs`` per continuation token (natural log), their
    ``sum`` and ``mean``, the continuation's ``token_ids``."""

    token_ids: list[int]
    logprobs: list[float] = field(repr=False)
    sum: float
    mean: float

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)


def _device(model, device):
    import torch

    if device is not None:
        return torch.device(device)
    try:
        return next(model.parameters()).device
    except StopIteration:  # pragma: no cover - a model without parameters
        return torch.device("cpu")


def encode(tokenizer, texts: list[str], *, add_special_tokens: bool = True) -> list[list[int]]:
    """Token ids of each text, tokenized alone (no padding, no truncation)."""
    if isinstance(texts, str):
        raise UsageError("expected a list of texts, not one string")
    enc = tokenizer(list(texts), add_special_tokens=add_special_tokens, padding=False, truncation=False)
    return [list(x) for x in enc["input_ids"]]


def pad_id(tokenizer) -> int:
    """The pad token id (end-of-sequence when the tokenizer has no pad token; 0 as a last resort)."""
    for tid in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if tid is not None:
            return int(tid)
    return 0


def pad_batch(seqs: list[list[int]], pad: int, *, side: str = "left", device=None, length: int | None = None):
    """Pad token-id lists into ``(input_ids, attention_mask)`` long tensors of shape [B, T] (T:
    ``length``, default the longest)."""
    import torch

    n = max(len(s) for s in seqs) if length is None else length
    ids = torch.full((len(seqs), n), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for r, s in enumerate(seqs):
        if not s:
            continue
        sl = slice(n - len(s), n) if side == "left" else slice(0, len(s))
        ids[r, sl] = torch.tensor(s, dtype=torch.long)
        mask[r, sl] = 1
    return ids.to(device), mask.to(device)


def _batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    if batch_size < 1:
        raise UsageError(f"batch_size must be at least 1, not {batch_size}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def _forward_params(model) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):  # pragma: no cover
        return set()


def cache_keywords(model) -> tuple[str, dict]:
    """How ``model.forward`` takes its key-value cache: the keyword (``cache`` in transformers >= 5.2x,
    ``past_key_values`` before) and the extra arguments of an incremental step (``logits_to_keep=1``
    where supported). Read the cache back from an output with :func:`cache_of`."""
    params = _forward_params(model)
    return ("cache" if "cache" in params else "past_key_values"), (
        {"logits_to_keep": 1} if "logits_to_keep" in params else {})


def cache_of(out, keyword: str):
    """The key-value cache a forward pass returned, under :func:`cache_keywords`' ``keyword``."""
    return getattr(out, "cache", None) if keyword == "cache" else out.past_key_values


def _logits(out):
    logits = getattr(out, "logits", None)
    if logits is None:
        raise UsageError("the model has no language-model head (load it with kind='causal-lm')")
    return logits


def eos_ids(tokenizer, model=None) -> list[int]:
    """The end-of-sequence token ids: the tokenizer's, plus the model's generation config's."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gc = getattr(model, "generation_config", None)
    e = getattr(gc, "eos_token_id", None) if gc is not None else None
    if isinstance(e, int):
        ids.add(e)
    elif isinstance(e, (list, tuple)):
        ids.update(int(x) for x in e)
    return sorted(ids)


def greedy_generate(model, tokenizer, prompts: list[str], *, max_new_tokens: int = 32, batch_size: int = 8,
                    device=None, add_special_tokens: bool = True, stop_at_eos: bool = True) -> list[Generation]:
    """Greedy (argmax, deterministic) continuations of ``prompts``, batched with left padding.

    Each prompt gives the same tokens in a batch as alone: padding is masked out and position ids
    count real tokens only. Ties in the argmax go to the lowest token id. ``device`` defaults to
    the model's. Returns one :class:`Generation` per prompt, in input order.
    """
    import torch

    if max_new_tokens < 0:
        raise UsageError(f"max_new_tokens must be >= 0, not {max_new_tokens}")
    dev = _device(model, device)
    seqs = encode(tokenizer, prompts, add_special_tokens=add_special_tokens)
    empty = [i for i, s in enumerate(seqs) if not s]
    if empty:
        raise UsageError(f"prompt number {empty[0] + 1} has no tokens")
    pad = pad_id(tokenizer)
    stops = torch.tensor(eos_ids(tokenizer, model) if stop_at_eos else [], dtype=torch.long, device=dev)
    params = _forward_params(model)
    with_pos = "position_ids" in params
    cache_kw, extra = cache_keywords(model)
    results: list[Generation | None] = [None] * len(seqs)
    for idx in _batches([len(s) for s in seqs], batch_size):
        ids, mask = pad_batch([seqs[i] for i in idx], pad, side="left", device=dev)
        pos = (mask.cumsum(-1) - 1).clamp_min(0)
        new = torch.full((len(idx), max_new_tokens), pad, dtype=torch.long, device=dev)
        length = torch.zeros(len(idx), dtype=torch.long, device=dev)
        done = torch.zeros(len(idx), dtype=torch.bool, device=dev)
        finished = torch.zeros(len(idx), dtype=torch.bool, device=dev)
        with torch.inference_mode():
            past, inp = None, ids
            for step in range(max_new_tokens):
                kw = dict(extra, position_ids=pos) if with_pos else dict(extra)
                kw[cache_kw] = past
                out = model(input_ids=inp, attention_mask=mask, use_cache=True, **kw)
                past = cache_of(out, cache_kw)
                nxt = _logits(out)[:, -1].float().argmax(-1)
                hit = torch.isin(nxt, stops) & ~done
                finished |= hit
                done |= hit
                keep = ~done
                new[:, step] = torch.where(keep, nxt, torch.full_like(nxt, pad))
                length += keep.long()
                if bool(done.all()):
                    break
                inp = nxt[:, None]
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                pos = pos[:, -1:] + 1
        new_l, len_l, fin_l = new.cpu().tolist(), length.cpu().tolist(), finished.cpu().tolist()
        for r, i in enumerate(idx):
            toks = new_l[r][:len_l[r]]
            results[i] = Generation(text=tokenizer.decode(toks, skip_special_tokens=True), token_ids=toks,
                                    finished=bool(fin_l[r]), prompt_tokens=len(seqs[i]))
    return results  # type: ignore[return-value]


def token_logprobs(model, input_ids, attention_mask):
    """log p(token t | tokens < t) for t = 1..T-1 of each row: a [B, T-1] float32 tensor (one forward pass)."""
    import torch

    with torch.inference_mode():
        logits = _logits(model(input_ids=input_ids, attention_mask=attention_mask)).float()
        logits = logits[:, :-1]
        target = input_ids[:, 1:, None]
        return (logits.gather(-1, target).squeeze(-1) - torch.logsumexp(logits, dim=-1))


def score_continuations(model, tokenizer, prompts: list[str], continuations: list[str], *, batch_size: int = 8,
                        device=None, add_special_tokens: bool = True) -> list[Score]:
    """log p(continuation | prompt) for each pair, per token and summed/averaged, in padded batches.

    The prompt is tokenized with the tokenizer's special tokens (``add_special_tokens``), the
    continuation without, and the two id lists are joined (no merge across the boundary). Rows
    are right-padded; one forward pass per batch scores every position at once.
    """
    if len(prompts) != len(continuations):
        raise UsageError(f"{len(prompts)} prompts but {len(continuations)} continuations")
    p_ids = encode(tokenizer, prompts, add_special_tokens=add_special_tokens)
    c_ids = encode(tokenizer, continuations, add_special_tokens=False)
    return score_token_ids(model, tokenizer, p_ids, c_ids, batch_size=batch_size, device=device)


def score_token_ids(model, tokenizer, prompt_ids: list[list[int]], continuation_ids: list[list[int]], *,
                    batch_size: int = 8, device=None) -> list[Score]:
    """:func:`score_continuations` on token ids (e.g. a :class:`Generation`'s ``token_ids`` after its
    prompt's ids, with no decode/re-encode round trip): log p(continuation | prompt) per token."""
    import torch

    if len(prompt_ids) != len(continuation_ids):
        raise UsageError(f"{len(prompt_ids)} prompts but {len(continuation_ids)} continuations")
    dev = _device(model, device)
    p_ids, c_ids = [list(p) for p in prompt_ids], [list(c) for c in continuation_ids]
    for what, ids in (("prompt", p_ids), ("continuation", c_ids)):
        empty = [i for i, s in enumerate(ids) if not s]
        if empty:
            raise UsageError(f"{what} number {empty[0] + 1} has no tokens")
    seqs = [p + c for p, c in zip(p_ids, c_ids)]
    pad = pad_id(tokenizer)
    results: list[Score | None] = [None] * len(seqs)
    for idx in _batches([len(s) for s in seqs], batch_size):
        ids, mask = pad_batch([seqs[i] for i in idx], pad, side="right", device=dev)
        lp = token_logprobs(model, ids, mask)  # [B, T-1]: position t-1 scores token t
        n_p = torch.tensor([len(p_ids[i]) for i in idx], device=dev)
        n_all = torch.tensor([len(seqs[i]) for i in idx], device=dev)
        t = torch.arange(1, ids.shape[1], device=dev)[None, :]
        cont = (t >= n_p[:, None]) & (t < n_all[:, None])
        lp = torch.where(cont, lp, torch.zeros_like(lp))
        sums = lp.sum(-1)
        means = sums / cont.sum(-1)
        lp_l, s_l, m_l = lp.cpu().tolist(), sums.cpu().tolist(), means.cpu().tolist()
        for r, i in enumerate(idx):
            a = len(p_ids[i]) - 1
            results[i] = Score(token_ids=c_ids[i], logprobs=lp_l[r][a:a + len(c_ids[i])], sum=s_l[r], mean=m_l[r])
    return results  # type: ignore[return-value]
