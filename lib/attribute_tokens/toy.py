"""``train-toy``: a tiny Llama-style decoder (transformers ``LlamaConfig``: RoPE, RMSNorm, eager
attention) trained in-process on NIAH-KV and variable tracking, saved as a Hugging Face folder with
a word-level tokenizer, so every other subcommand loads it like any local model.

Steps: 1. the word vocabulary of :func:`~icmlkit.lib.attribute_tokens.tasks.toy_vocab` as a WordLevel
tokenizer (one word = one token); 2. a LlamaConfig decoder initialised from the seed's "init"
stream; 3. AdamW with warm-up + cosine decay on the loss of the target tokens (and EOS), each
step's batch generated from the seed and the step number (half NIAH-KV, half VT, several queries
per sequence, contexts growing from short to full; optionally VT alone first: :func:`step_rows`),
so ``--resume`` needs no data-RNG state; under torchrun
each rank takes its slice of the global batch (DDP averages the gradients); 4. greedy accuracy on
held-out examples of both tasks (NIAH-KV with ``eval_lines_min..lines_max`` lines), which the
method sheet requires to be >= 95% before attributions mean anything. [reconstructed: the paper
trains no toy model; this is the method sheet's demonstration.] The tokenizer, the decoder, the
batches, the loss, the step and the schedule are the shared tiny-LM kit's (:mod:`icmlkit.lib.hf.tiny`).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from icmlkit.lib.core.checkpoint import Checkpointer, fingerprint, restore
from icmlkit.lib.core.runtime import Dist


def _log(msg: str) -> None:
    from icmlkit.lib.core.console import log

    log.info(msg)


@dataclass
class ToyResult:
    model: object
    tokenizer: object
    summary: dict


def make_tokenizer():
    """The toy vocabulary as a word-level tokenizer (one word = one token; [PAD] 0, [EOS] 2)."""
    from icmlkit.lib.attribute_tokens.tasks import toy_vocab
    from icmlkit.lib.hf.tiny import word_tokenizer

    return word_tokenizer(toy_vocab(), unk="[UNK]", pad="[PAD]", eos="[EOS]")


def make_model(cfg, vocab_size: int, seed: int, attn: str = "eager"):
    from icmlkit.lib.hf.tiny import tiny_llama

    return tiny_llama(vocab_size, hidden=cfg.hidden, layers=cfg.layers, heads=cfg.heads, max_positions=1024,
                      seed=seed, stream="init", pad_token_id=0, eos_token_id=2, bos_token_id=None,
                      rms_norm_eps=1e-5, attn_implementation=attn)


def _row_ids(vocab: dict, row: dict) -> tuple[list, list]:
    p = [vocab[w] for w in row["prompt"].split()]
    t = [vocab[w] for w in row["target"].split()] + [vocab["[EOS]"]]
    return p, t


def _rows(kind: str, n: int, seed: int, stream: str, lines_min: int, lines_max: int, chains: int = 4,
          fillers: int = 10):
    from icmlkit.lib.attribute_tokens.config import TaskConfig
    from icmlkit.lib.attribute_tokens.tasks import _niah, _vt
    from icmlkit.lib.core.runtime import numpy_rng

    rng = numpy_rng(seed, stream)
    tc = TaskConfig(n=n, lines_min=lines_min, lines_max=lines_max, chains=chains, fillers=fillers)
    if kind == "niah-kv":
        return [_niah(rng, i, tc.lines_min, tc.lines_max, "toy") for i in range(n)]
    return [_vt(rng, i, tc.chains, tc.hops, tc.fillers, "toy") for i in range(n)]


def _batch(vocab, rows, device):
    """(ids, attention, loss mask) of toy rows: the loss on the target tokens and EOS, except the key
    after each "?" (not predictable)."""
    from icmlkit.lib.hf.tiny import lm_batch

    seqs, masks = [], []
    q = vocab["?"]
    for r in rows:
        p, t = _row_ids(vocab, r)
        s = p + t
        seqs.append(s)
        masks.append([0 if j > 0 and s[j - 1] == q else int(j >= len(p)) for j in range(len(s))])
    return lm_batch(seqs, masks, vocab["[PAD]"], device=device)


def _more_queries(row: dict, rng, q: int) -> dict:
    """Training only: append further queries (and their answers) to a toy row's target, so every
    sequence carries several supervised recalls (multi-query associative recall) [reconstructed]."""
    words = row["prompt"].split()
    extra = []
    if row["task"] == "niah-kv":
        lines = {}
        for i, w in enumerate(words[:-2]):
            if w.startswith("k"):
                lines[w] = words[i + 1:i + 5]
        keys = [k for k in lines if k != words[-1]]
        for k in rng.permutation(keys)[:q - 1]:
            extra += ["?", str(k)] + lines[str(k)]
    else:
        rhs = {}
        for sentence in row["prompt"].split(" . "):
            sw = sentence.split()
            if len(sw) == 2 and sw[0].startswith("X"):
                rhs[sw[0]] = sw[1]
        used = set(rhs.values())
        finals = [v for v in rhs if v not in used and v != words[-1]]
        for v in rng.permutation(finals)[:q - 1]:
            chain = [str(v)]
            while chain[-1] in rhs:
                chain.append(rhs[chain[-1]])
            extra += ["?", str(v)] + chain + ["ANSWER", chain[-1]]
    if not extra:
        return row
    return dict(row, target=row["target"] + " " + " ".join(extra))


def step_rows(cfg, seed: int, step: int) -> list:
    """The global batch of training step ``step`` (deterministic in seed and step), each sequence
    with ``cfg.train_queries`` queries: half NIAH-KV (2-6 lines growing to ``min_lines..lines_max``
    over the first ``cfg.curriculum`` share of the steps), half VT (2 chains without fillers growing
    to 4 chains with 10 fillers over the same ramp: the induction heads form on the short contexts).
    With ``cfg.vt_first`` > 0, VT alone for that share of the steps first (growing over its first
    30 %), then the mixed batches with NIAH-KV's ramp over the remaining steps and VT at full size."""
    from icmlkit.lib.core.runtime import numpy_rng

    n_vt = int(cfg.vt_first * cfg.steps)
    span = cfg.curriculum * (cfg.steps - n_vt)
    ramp = min(1.0, max(0, step - n_vt) / max(1.0, span)) if span > 0 else 1.0
    # VT grows over the first 30 % of the VT-only phase, or with NIAH-KV when there is none
    vt_ramp = min(1.0, step / max(1.0, 0.3 * n_vt)) if n_vt else ramp
    vt_size = (2 + int(round(2 * vt_ramp)), int(round(10 * vt_ramp)))
    if step < n_vt:
        rows = _rows("vt", cfg.batch, seed, f"train/vt/{step}", 1, 1, *vt_size)
    else:
        hi = int(round(min(6, cfg.lines_max) + ramp * (cfg.lines_max - min(6, cfg.lines_max))))
        lo = min(hi, max(2, int(round(ramp * cfg.min_lines))))
        half = cfg.batch // 2
        rows = (_rows("niah-kv", half, seed, f"train/niah/{step}", lo, hi)
                + _rows("vt", cfg.batch - half, seed, f"train/vt/{step}", 1, 1, *vt_size))
    if cfg.train_queries > 1:
        rng = numpy_rng(seed, f"train/queries/{step}")
        rows = [_more_queries(r, rng, cfg.train_queries) for r in rows]
    return rows


def accuracy(model, tok, rows, device=None, batch: int = 50) -> dict:
    """Greedy exact-match accuracy on toy rows: ``answer`` (the final answer tokens) and ``exact``
    (the whole target, e.g. the written chain)."""
    import torch

    from icmlkit.lib.hf.generate import pad_batch

    vocab = tok.get_vocab()
    dev = device or next(model.parameters()).device
    ok_ans = ok_all = 0
    model.eval()
    for a in range(0, len(rows), batch):
        chunk = rows[a:a + batch]
        prompts = [[vocab[w] for w in r["prompt"].split()] for r in chunk]
        targets = [[vocab[w] for w in r["target"].split()] for r in chunk]
        steps = max(len(t) for t in targets)
        # left-padded prompts; position ids count real tokens only
        ids, att = pad_batch(prompts, vocab["[PAD]"], side="left", device=dev)
        out = []
        with torch.inference_mode():
            for _ in range(steps):
                pos = (att.cumsum(-1) - 1).clamp_min(0)
                nxt = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False).logits[:, -1].argmax(-1)
                out.append(nxt)
                ids = torch.cat([ids, nxt[:, None]], 1)
                att = torch.cat([att, torch.ones_like(att[:, :1])], 1)
        gen = torch.stack(out, 1).cpu().tolist()
        for g, t, r in zip(gen, targets, chunk):
            n_ans = len(r["answer"].split())
            ok_all += g[:len(t)] == t
            ok_ans += g[len(t) - n_ans:len(t)] == t[-n_ans:]
    return {"answer": ok_ans / len(rows), "exact": ok_all / len(rows)}


def train_toy(cfg, *, seed: int = 0, device=None, dist: Dist = Dist(), checkpointer: Checkpointer | None = None,
              log=None) -> ToyResult:
    """Train the toy decoder (steps in the module docstring); summary keys: steps, final_loss,
    accuracy_niah_kv, accuracy_vt, chain_exact_vt, meets_95, seconds, parameters."""
    import torch

    from icmlkit.lib.hf.tiny import masked_ce, optimizer_step, warmup_cosine

    dev = device or torch.device("cpu")
    tok = make_tokenizer()
    vocab = tok.get_vocab()
    # trained with the SDPA kernel (the same function as eager, faster); saved and used as eager
    model = make_model(cfg, len(vocab), seed, attn="sdpa").to(dev)
    model.train()
    net = dist.wrap(model, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.98))
    sched = warmup_cosine(opt, cfg.steps, cfg.steps // 20, floor=0.05)
    fp = fingerprint({"config": asdict(cfg), "seed": int(seed), "world": dist.world})
    start, t_train, loss_v = 0, 0.0, float("nan")
    state = checkpointer.load(fp) if checkpointer is not None else None
    if state is not None:
        start, extra = restore(state, model=model, optimizer=opt, scheduler=sched)
        t_train, loss_v = float(extra.get("seconds", 0.0)), float(extra.get("loss", float("nan")))
    part = dist.split(cfg.batch) if dist.active else slice(0, cfg.batch)
    for step in range(start, cfg.steps):
        t0 = time.perf_counter()
        rows = step_rows(cfg, seed, step)[part]
        ids, att, lm = _batch(vocab, rows, dev)
        # mean over each sequence's target tokens, then over sequences: equal-size rank slices
        # under torchrun average to exactly the single-process loss
        loss = masked_ce(net(input_ids=ids, attention_mask=att, use_cache=False).logits, ids, lm, per_sequence=True)
        optimizer_step(loss, opt, sched, model.parameters())
        loss_v = dist.all_mean(float(loss.detach()))
        t_train += time.perf_counter() - t0
        if (step + 1) % 100 == 0:
            (log or _log)(f"step {step + 1}/{cfg.steps} loss {loss_v:.4f}")
        if checkpointer is not None and checkpointer.due(step + 1, cfg.steps):
            checkpointer.save(step + 1, fp, model=model, optimizer=opt, scheduler=sched,
                              extra={"seconds": t_train, "loss": loss_v})
    model.eval()
    from icmlkit.lib.attribute_tokens.ifr import _set_eager

    _set_eager(model)
    niah = _rows("niah-kv", cfg.eval_n, seed, "eval/niah", cfg.eval_lines_min, cfg.lines_max)
    vt = _rows("vt", cfg.eval_n, seed, "eval/vt", 1, 1)
    acc_n = accuracy(model, tok, niah, dev)
    acc_v = accuracy(model, tok, vt, dev)
    summary = {"steps": cfg.steps, "final_loss": round(loss_v, 5), "accuracy_niah_kv": round(acc_n["exact"], 4),
               "accuracy_vt": round(acc_v["answer"], 4), "chain_exact_vt": round(acc_v["exact"], 4),
               "meets_95": bool(acc_n["exact"] >= 0.95 and acc_v["answer"] >= 0.95),
               "seconds": round(t_train, 2), "parameters": int(sum(p.numel() for p in model.parameters()))}
    return ToyResult(model, tok, summary)


def save_tokenizer(folder, tok) -> None:
    """Save the word tokenizer so that AutoTokenizer loads it as itself in any model folder."""
    from icmlkit.lib.hf.tiny import save_tokenizer as save

    save(folder, tok, tokenizer_class="PreTrainedTokenizerFast")


def save_toy(folder, result: ToyResult) -> None:
    """The Hugging Face folder (config.json, model.safetensors, tokenizer files, toy_summary.json)."""
    from pathlib import Path

    from icmlkit.lib.core.io import write_json
    from icmlkit.lib.hf.tiny import save_tiny

    save_tiny(folder, result.model, result.tokenizer, tokenizer_class="PreTrainedTokenizerFast")
    write_json(Path(folder) / "toy_summary.json", result.summary)
