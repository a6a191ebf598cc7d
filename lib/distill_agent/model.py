"""Local students: the tiny in-process LlamaConfig student (WordLevel tokenizer; the shared tiny-LM
kit :mod:`icmlkit.lib.hf.tiny`) or a Hugging Face causal LM loaded through lib/hf (a local folder,
smollm2), with

- one plain conversation rendering for every local model [reconstructed; the upstream code uses
  the chat template of Qwen through LLaMA-Factory / verl]: ``[Q] question``, ``[A] assistant turn``,
  ``[O] observation``, each segment tokenised on its own so that a generated turn is kept as the
  token ids that were sampled (no re-tokenisation mismatch between rollout and training);
- :class:`LocalPolicy`: batched, seeded sampling of the next assistant turn for many episodes at
  once, stopping at ``</code>`` or ``</first_thought>``; it records which tokens the policy
  generated (the only tokens RL trains on).
"""
from __future__ import annotations

import json
from pathlib import Path

from icmlkit.lib.core.errors import InputError, UsageError

MARKER = {"question": "[Q] ", "assistant": "\n[A] ", "observation": "\n[O] "}
TINY_MARK = "distill_student.json"


def _torch():
    import torch

    return torch


# --------------------------------------------------------------------------- the tiny student


def build_tokenizer(words: list[str]):
    """A WordLevel tokenizer over ``words`` (tags split off, then whitespace), as a transformers
    PreTrainedTokenizerFast; decoding joins the words with spaces."""
    from icmlkit.lib.hf.tiny import word_tokenizer

    return word_tokenizer(words, unk="[UNK]", pad="[PAD]", eos="[EOS]", isolate=r"</?(?:first_thought|thought|code)>",
                          decoder="spaces")


def new_tiny(cfg, seed: int, words: list[str]):
    """A random-init LlamaForCausalLM (``cfg.layers`` layers, ``cfg.d_model`` wide) and its tokenizer."""
    from icmlkit.lib.hf.tiny import tiny_llama

    tok = build_tokenizer(words)
    model = tiny_llama(len(tok), hidden=cfg.d_model, layers=cfg.layers, heads=cfg.heads, max_positions=2048,
                       seed=seed, stream="student/init", pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                       bos_token_id=tok.eos_token_id)
    model.eval()
    return model, tok


def save_student(folder, model, tok, info: dict | None = None) -> None:
    """An HF model folder (safetensors weights, config, tokenizer), written into ``folder``."""
    from icmlkit.lib.hf.tiny import save_tiny

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_tiny(folder, model, tok)
    (folder / TINY_MARK).write_text(json.dumps({"format": "icmlkit.distill-student/1", **(info or {})},
                                               indent=2, sort_keys=True) + "\n")


def load_student(spec: str, device=None):
    """(model, tokenizer) of a student folder written by ``sft`` / ``rl``, another local Hugging Face
    folder, or ``smollm2`` (through lib/hf)."""
    p = Path(str(spec))
    if p.is_dir() and (p / TINY_MARK).is_file():
        from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

        from icmlkit.lib.hf.models import quiet_transformers

        quiet_transformers()
        try:
            tok = PreTrainedTokenizerFast.from_pretrained(str(p), local_files_only=True)
            model = LlamaForCausalLM.from_pretrained(str(p), local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - any load failure is bad input
            raise InputError(f"not a student model folder ({str(exc).splitlines()[0][:160]})", str(p)) from None
        model.eval()
        if device is not None:
            model.to(device)
        return model, tok
    if p.exists() and not p.is_dir():
        raise InputError("expected a model folder (written by `distill-agent sft`), a Hugging Face folder or "
                         "smollm2", str(p))
    if not p.exists() and str(spec) not in ("smollm2", "smollm2-135m", "smollm2-135m-instruct"):
        raise InputError("no such model folder", str(spec))
    from icmlkit.lib.hf import load_causal_lm

    lm = load_causal_lm(str(spec), device=device)
    return lm.model, lm.tokenizer


def is_wordlevel(tok) -> bool:
    return "[O]" in tok.get_vocab() and "</code>" in tok.get_vocab()


# --------------------------------------------------------------------------- encoding


def _segments(messages: list[dict]):
    """(kind, text) per message: the question, assistant turns, observations (later user turns)."""
    out = []
    for i, m in enumerate(messages):
        role, content = m.get("role"), str(m.get("content", ""))
        if role == "assistant":
            out.append(("assistant", content))
        elif role in ("user", "human") and i > 0:
            c = content[len("Observation:"):].strip() if content.startswith("Observation:") else content
            out.append(("observation", c))
        elif role in ("user", "human"):
            out.append(("question", content))
        elif role == "system":
            continue
        else:
            raise UsageError(f"message {i + 1}: unknown role {role!r}")
    return out


class Codec:
    """Segment-wise encoding of conversations for one tokenizer (cached marker ids)."""

    def __init__(self, tok):
        self.tok = tok
        self.word = is_wordlevel(tok)
        self.mark = {k: self.enc(v) for k, v in MARKER.items()}
        self.stop_ids = set()
        if self.word:
            v = tok.get_vocab()
            self.stop_ids = {v["</code>"], v["</first_thought>"]}

    def enc(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def encode(self, messages: list[dict], train_assistant: bool = True) -> tuple[list[int], list[int]]:
        """Token ids and the loss mask (1 on assistant content: loss on assistant turns only)."""
        ids, mask = [], []
        for kind, text in _segments(messages):
            m = self.mark[kind]
            ids += m
            mask += [0] * len(m)
            t = self.enc(text)
            ids += t
            mask += [int(kind == "assistant" and train_assistant)] * len(t)
        return ids, mask

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=False)

    def turn_ended(self, new: list[int]) -> bool:
        """Whether an assistant turn whose generated ids are ``new`` has ended: its last token is EOS,
        or closes a step (a WordLevel stop id; for BPE, the closing tag in the last 12 tokens' text)."""
        t = new[-1]
        if t == self.tok.eos_token_id:
            return True
        if self.word:
            return t in self.stop_ids
        txt = self.decode(new[-12:])
        return "</code>" in txt or "</first_thought>" in txt


def check_vocabulary(policy, tasks: list[dict], where: str) -> None:
    """A WordLevel (tiny) student reads only the words of its vocabulary (the toy's keys k0..k63 and
    integers -100..100, plus its training data's words): a task question holding another word (tasks of
    a larger --key-pool or --max-value) is refused before any rollout, naming the model folder, the
    word and the task (issue 59: the word became [UNK] and the accuracy was silently wrong)."""
    codec = getattr(policy, "codec", None)
    if codec is None or not codec.word:
        return
    unk = codec.tok.unk_token_id
    for i, task in enumerate(tasks):
        q = str(task.get("question", ""))
        enc = codec.tok(q, add_special_tokens=False, return_offsets_mapping=True)
        if unk in enc["input_ids"]:
            a, b = enc["offset_mapping"][enc["input_ids"].index(unk)]
            raise UsageError(f"{where}: the student's vocabulary has no {q[a:b]!r} (task {task.get('id', i + 1)}: "
                             f"{q[:60]!r}); it reads the words it was trained on (toy keys k0..k63, integers "
                             "-100..100)")


# --------------------------------------------------------------------------- sampling


def sample_next(logits, gens, temperature: float, top_p: float = 1.0, top_k: int = 0):
    """One token per row: greedy when ``temperature`` is 0, else temperature / top-k / top-p
    sampling with each row's own generator (so a row's draw does not depend on the batch)."""
    torch = _torch()
    if temperature <= 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, -1)
    if top_p < 1.0:
        sp, si = torch.sort(probs, descending=True, dim=-1)
        cum = sp.cumsum(-1)
        drop = cum - sp > top_p
        sp = sp.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, si, sp)
        probs = probs / probs.sum(-1, keepdim=True)
    return torch.stack([torch.multinomial(probs[i], 1, generator=gens[i])[0] for i in range(len(gens))])


class Episode:
    """A local policy's view of one conversation: token ids and which of them it generated."""

    __slots__ = ("ids", "gen", "gen_turns", "gen_turn", "rng")

    def __init__(self, ids, rng):
        self.ids, self.gen, self.rng = list(ids), [0] * len(ids), rng
        self.gen_turns = 0
        self.gen_turn = []


class LocalPolicy:
    """Batched generation of assistant turns by a local causal LM (the WordLevel tiny student
    recomputes the whole right-padded batch per token; a Hugging Face student decodes with a
    key-value cache over the left-padded batch, position ids counting real tokens only)."""

    def __init__(self, model, tok, *, step_tokens: int = 48, temperature: float = 0.0, top_p: float = 1.0,
                 top_k: int = 0, batch: int = 64, device=None):
        self.model, self.codec = model, Codec(tok)
        self.step_tokens, self.temperature, self.top_p, self.top_k = step_tokens, temperature, top_p, top_k
        self.batch = batch
        self.device = device if device is not None else next(model.parameters()).device
        self.cached = not self.codec.word  # the tiny WordLevel student keeps the full recomputation

    def begin(self, messages: list[dict], rng=None) -> Episode:
        ids, _ = self.codec.encode(messages, train_assistant=False)
        return Episode(ids + self.codec.mark["assistant"], rng)

    def insert(self, ep: Episode, assistant_text: str) -> None:
        """An assistant turn written by someone else (the teacher): not the policy's tokens."""
        t = self.codec.enc(assistant_text)
        ep.ids += t
        ep.gen += [0] * len(t)

    def observe(self, ep: Episode, observation: str) -> None:
        c = observation[len("Observation:"):].strip() if observation.startswith("Observation:") else observation
        t = self.codec.mark["observation"] + self.codec.enc(c) + self.codec.mark["assistant"]
        ep.ids += t
        ep.gen += [0] * len(t)

    def generate(self, eps: list[Episode]) -> list[str]:
        """The next assistant turn of every episode (text, up to and including its closing tag)."""
        out = []
        for i in range(0, len(eps), self.batch):
            out += self._generate(eps[i:i + self.batch])
        return out

    def _generate(self, eps: list[Episode]) -> list[str]:
        torch = _torch()
        from icmlkit.lib.distill_agent.agent import truncate_at_stop

        if self.cached:  # a Hugging Face student (BPE): key-value cached decoding
            return self._generate_cached(eps)

        n = len(eps)
        new = [[] for _ in range(n)]
        active = list(range(n))
        pad = self.codec.tok.pad_token_id if self.codec.tok.pad_token_id is not None else 0
        gens = [e.rng if e.rng is not None else torch.Generator().manual_seed(0) for e in eps]
        with torch.no_grad():
            for _ in range(self.step_tokens):
                if not active:
                    break
                seqs = [eps[i].ids + new[i] for i in active]
                L = max(len(s) for s in seqs)
                x = torch.full((len(seqs), L), pad, dtype=torch.long)
                for r, s in enumerate(seqs):
                    x[r, :len(s)] = torch.tensor(s, dtype=torch.long)
                x = x.to(self.device)
                logits = self.model(input_ids=x).logits
                last = torch.tensor([len(s) - 1 for s in seqs], device=logits.device)
                lg = logits[torch.arange(len(seqs), device=logits.device), last]
                tokens = sample_next(lg, [gens[i] for i in active], self.temperature, self.top_p,
                                     self.top_k).tolist()
                still = []
                for i, t in zip(active, tokens):
                    new[i].append(int(t))
                    if not self.codec.turn_ended(new[i]):
                        still.append(i)
                active = still
        texts = []
        for e, t in zip(eps, new):
            if not self.codec.word:  # cut a BPE turn at the stop string, re-encoding only the kept text
                text = truncate_at_stop(self.codec.decode(t))
            else:
                text = self.codec.decode(t)
            e.ids += t
            e.gen += [1] * len(t)
            e.gen_turns += 1
            texts.append(text)
        return texts

    def _generate_cached(self, eps: list[Episode]) -> list[str]:
        """Key-value cached decoding of one assistant turn per episode (Hugging Face students): the
        episodes are left-padded, every row decodes until its turn's closing tag or EOS (rows that
        finished keep their slot but draw no more samples), at most ``step_tokens`` tokens."""
        torch = _torch()
        from icmlkit.lib.distill_agent.agent import truncate_at_stop
        from icmlkit.lib.hf.generate import cache_keywords, cache_of, pad_batch

        n = len(eps)
        pad = self.codec.tok.pad_token_id if self.codec.tok.pad_token_id is not None else 0
        gens = [e.rng if e.rng is not None else torch.Generator().manual_seed(0) for e in eps]
        x, mask = pad_batch([e.ids for e in eps], pad, side="left", device=self.device)
        pos = (mask.cumsum(-1) - 1).clamp_min(0)
        cache_kw, extra = cache_keywords(self.model)
        new = [[] for _ in range(n)]
        active = list(range(n))
        past, inp = None, x
        with torch.no_grad():
            for _ in range(self.step_tokens):
                out = self.model(input_ids=inp, attention_mask=mask, position_ids=pos, use_cache=True,
                                 **{cache_kw: past}, **extra)
                past = cache_of(out, cache_kw)
                lg = out.logits[:, -1]
                idx = torch.tensor(active, device=lg.device)
                tokens = sample_next(lg[idx], [gens[i] for i in active], self.temperature, self.top_p,
                                     self.top_k).tolist()
                nxt = torch.full((n,), pad, dtype=torch.long)
                still = []
                for i, t in zip(active, tokens):
                    new[i].append(int(t))
                    nxt[i] = int(t)
                    if not self.codec.turn_ended(new[i]):
                        still.append(i)
                active = still
                if not active:
                    break
                inp = nxt[:, None].to(self.device)
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                pos = pos[:, -1:] + 1
        texts = []
        for e, t in zip(eps, new):
            e.ids += t
            e.gen += [1] * len(t)
            e.gen_turns += 1
            texts.append(truncate_at_stop(self.codec.decode(t)))
        return texts
