"""Training, evaluation, generation, routing analysis and parameter counts (one function per
subcommand of finetune-lime).

Training (``train``):
1. freeze the model, wrap the targeted layers (:func:`~icmlkit.lib.finetune_lime.adapter.apply_adapter`);
2. each step draws a global batch (named stream ``batches``), right-pads it to its longest row and
   takes this rank's rows under torchrun;
3. loss = CE over the target tokens (the global token mean) + balance_coef (importance_coef *
   sum_layers importance + kl_coef * sum_layers KL), the balance terms collected from every wrapped
   layer and zeroed each step, added every ``balance_every`` steps;
4. AdamW with two groups (moe_lr for P, p_s, gamma_s, routers; peft_lr for A, B, ...), linear warmup
   over ``warmup`` of the steps then linear decay [decay: reconstructed], gradient clipping;
5. under torchrun each rank computes the global loss with only its rows differentiable; the
   gradients are summed over the ranks (gloo / NCCL) and the routing max-abs and balance means are
   reduced over the ranks, so 2 processes train what 1 process trains [reconstructed];
6. checkpoints (adapter, optimiser, scheduler, both random streams, the step log) via
   lib/core/checkpoint; ``--resume`` continues to the same bytes.
"""
from __future__ import annotations

import dataclasses
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from icmlkit.lib.core.checkpoint import fingerprint, restore
from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.core.runtime import Dist, generator
from icmlkit.lib.finetune_lime.adapter import Adapted, adapter_metadata, apply_adapter, count_parts, param_groups
from icmlkit.lib.finetune_lime.config import AdapterConfig, EvalConfig, TrainConfig
from icmlkit.lib.finetune_lime.data import Row, encode_rows, teacher_batch

LOG_COLUMNS = ("step", "loss", "ce", "importance", "kl", "lr_peft", "lr_moe", "seconds")


class _Comm:
    """All-reduce over the torchrun ranks (no autograd)."""

    def __init__(self, backend):
        self.cuda = backend == "nccl"

    def _red(self, t, op):
        import torch.distributed as dist

        x = t.detach().clone()
        dist.all_reduce(x, op=op)
        return x

    def max(self, t):
        import torch.distributed as dist

        return self._red(t, dist.ReduceOp.MAX)

    def sum(self, t):
        import torch.distributed as dist

        return self._red(t, dist.ReduceOp.SUM)


@dataclass
class TrainResult:
    tensors: dict
    metadata: dict
    log: list
    summary: dict
    adapted: Adapted = field(repr=False, default=None)


def _pad_id(tok) -> int:
    return int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)


def _warn_ngram(cfg: AdapterConfig) -> None:
    if cfg.n_gram > 1 and cfg.ngram_rule == "last":
        warnings.warn("--ngram-rule last routes each group on its LAST token: in a causal LM a token's output then "
                      "depends on later tokens (future leak in training; mismatch with token-by-token decoding)",
                      stacklevel=3)


def train(cfg: TrainConfig, acfg: AdapterConfig, loaded, rows: list[Row], *, seed: int = 0, device=None,
          dist: Dist = Dist(), checkpointer=None, model_spec: str = "model", progress=None,
          init: dict | None = None, init_source: str | None = None) -> TrainResult:
    """Fit the adapter of ``acfg`` on ``rows`` over the frozen ``loaded`` model (a lib/hf LoadedModel
    or anything with ``.model`` and ``.tokenizer``). See the module docstring for the steps.

    ``init``: adapter tensors by our names to start from instead of the initialisation (a peft LoRA's
    lora_A / lora_B read by :func:`~icmlkit.lib.finetune_lime.peft_io.read_peft`, ``init_source`` its
    folder); for LiME only A and B are set, P, p_s and gamma_s keep their initialisation."""
    cfg.check()
    acfg.check()
    _warn_ngram(acfg)
    dev = torch.device(device) if device is not None else torch.device("cpu")
    model, tok = loaded.model, loaded.tokenizer
    model.to(dev)
    enc = encode_rows(tok, rows, max_length=cfg.max_length)
    ad = apply_adapter(model, acfg, seed=seed)
    if init:
        ad.load_adapter_state(init, init_source or "init", partial=True)
    counts = count_parts(ad)
    if counts["trainable"] == 0:
        raise UsageError("the adapter has no trainable parameters")
    ad.ctx.generator = generator(seed, "jitter")
    batches = generator(seed, "batches")
    if dist.active:
        ad.ctx.comm = _Comm(dist.backend)
        dist.split(cfg.batch_size)  # checks the batch divides
    opt = torch.optim.AdamW(param_groups(ad, cfg.moe_lr, cfg.peft_lr, cfg.weight_decay), betas=(0.9, 0.999),
                            eps=1e-8)
    warm = int(math.ceil(cfg.warmup * cfg.steps))

    def lr_lambda(step):
        if warm and step < warm:
            return (step + 1) / warm
        return max(0.0, (cfg.steps - step) / max(1, cfg.steps - warm))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    pad = _pad_id(tok)
    fp = fingerprint({"train": dataclasses.asdict(cfg), "adapter": dataclasses.asdict(acfg), "seed": int(seed),
                      "model": str(model_spec), "config": getattr(getattr(model, "config", None), "to_json_string",
                                                                  lambda: "")()},
                     [[len(p), p, t] for p, t in zip(enc.prompt, enc.target)],
                     *([sorted(init)] + [init[k] for k in sorted(init)] if init else []))

    class _State:
        def state_dict(self_inner):
            return {k: v.detach().clone() for k, v in ad.adapter_state().items()}

        def load_state_dict(self_inner, sd, strict=True):
            ad.load_adapter_state(sd)

    holder = _State()
    log: list[dict] = []
    start = 0
    order: list[int] = []
    state = checkpointer.load(fp) if checkpointer is not None else None
    if state is not None:
        start, extra = restore(state, model=holder, optimizer=opt, scheduler=sched,
                               rng={"batches": batches, "jitter": ad.ctx.generator})
        log = list(extra.get("log", []))
        order = list(extra.get("order", []))
    n = len(rows)
    t0 = time.perf_counter()
    ad.train(True)
    params = [p for _, p in ad.trainable()]
    for step in range(start, cfg.steps):
        # the global batch: the next rows of a shuffled pass over the data (new permutation per pass)
        while len(order) < cfg.batch_size:
            order += torch.randperm(n, generator=batches).tolist()
        idx, order = order[:cfg.batch_size], order[cfg.batch_size:]
        ids, mask, labels = teacher_batch(enc, idx, pad)
        total_tokens = int((labels[:, 1:] != -100).sum())
        sl = dist.split(cfg.batch_size) if dist.active else slice(0, cfg.batch_size)
        ad.ctx.rows = (sl.start, sl.stop, cfg.batch_size)
        ids, mask, labels = ids[sl].to(dev), mask[sl].to(dev), labels[sl].to(dev)
        ad.ctx.reset()
        ad.ctx.collect = True
        logits = ad.logits(ids, mask)
        ce_sum = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1),
                                 ignore_index=-100, reduction="sum")
        ce = ce_sum / max(1, total_tokens)
        imp = sum((a for a, _ in ad.ctx.aux), torch.zeros((), device=dev))
        kl = sum((b for _, b in ad.ctx.aux), torch.zeros((), device=dev))
        ad.ctx.collect = False
        ad.ctx.reset()
        loss = ce
        if cfg.balance_coef > 0 and ((step + 1) % cfg.balance_every == 0) and (imp.requires_grad or kl.requires_grad):
            # under torchrun every rank adds the global value with only its rows differentiable: the
            # gradients summed over the ranks below are the gradient of the global balance loss
            loss = loss + cfg.balance_coef * (cfg.importance_coef * imp + cfg.kl_coef * kl)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        if dist.active:
            import torch.distributed as tdist

            for p in params:
                tdist.all_reduce(p.grad)
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        lr_p = opt.param_groups[0]["lr"]
        lr_m = opt.param_groups[-1]["lr"]
        opt.step()
        sched.step()
        ce_glob = float(ce.detach()) if not dist.active else float(ad.ctx.comm.sum(ce.detach()))
        log.append({"step": step + 1, "loss": ce_glob + float(loss.detach() - ce.detach()),
                    "ce": ce_glob, "importance": float(imp.detach()), "kl": float(kl.detach()),
                    "lr_peft": lr_p, "lr_moe": lr_m, "seconds": round(time.perf_counter() - t0, 4)})
        if progress is not None:
            progress(step + 1, cfg.steps, ce_glob)
        if checkpointer is not None and checkpointer.due(step + 1, cfg.steps):
            checkpointer.save(step + 1, fp, model=holder, optimizer=opt, scheduler=sched,
                              rng={"batches": batches, "jitter": ad.ctx.generator},
                              extra={"log": log, "order": order})
    ad.train(False)
    seconds = time.perf_counter() - t0
    done = cfg.steps - start
    tensors = {k: v.detach().cpu().contiguous() for k, v in ad.adapter_state().items()}
    summary = {"method": acfg.method, "experts": acfg.experts if acfg.method != "lora" else 0, "rank": acfg.rank,
               "trainable_params": counts["trainable"], "router_params": counts["router_params"],
               "steps": cfg.steps, "seconds": round(seconds, 3),
               "samples_per_s": round(done * cfg.batch_size / seconds, 3) if seconds > 0 else None,
               "final_loss": log[-1]["ce"] if log else None, "layers": counts["layers"],
               "parts": counts["parts"], "world_size": dist.world, "init_peft": init_source if init else None}
    meta = adapter_metadata(acfg, model_spec, {"parts": counts["parts"], "steps": cfg.steps,
                                               **({"init_peft": init_source} if init else {})})
    return TrainResult(tensors=tensors, metadata=meta, log=log, summary=summary, adapted=ad)


# --------------------------------------------------------------------------- decoding and evaluation


def greedy(ad: Adapted, tok, prompts: list[list[int]], *, max_new_tokens: int, batch_size: int, device=None):
    """Greedy continuations (token ids, stopped at end-of-sequence), left-padded batches, the whole
    sequence recomputed at each step (no KV cache): n-gram routing and the causal normaliser then see
    exactly what they saw in training [reconstructed choice]."""
    dev = device or next(ad.model.parameters()).device
    pad, eos = _pad_id(tok), tok.eos_token_id
    out: list[list[int]] = [None] * len(prompts)  # type: ignore[list-item]
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    ad.train(False)
    with torch.inference_mode():
        for b in range(0, len(order), batch_size):
            idx = order[b:b + batch_size]
            L = max(len(prompts[i]) for i in idx)
            ids = torch.full((len(idx), L), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), L), dtype=torch.long)
            for r, i in enumerate(idx):
                ids[r, L - len(prompts[i]):] = torch.tensor(prompts[i])
                mask[r, L - len(prompts[i]):] = 1
            ids, mask = ids.to(dev), mask.to(dev)
            done = torch.zeros(len(idx), dtype=torch.bool, device=dev)
            gen = [[] for _ in idx]
            for _ in range(max_new_tokens):
                nxt = ad.logits(ids, mask)[:, -1].float().argmax(-1)
                for r in range(len(idx)):
                    if not done[r]:
                        if int(nxt[r]) == eos:
                            done[r] = True
                        else:
                            gen[r].append(int(nxt[r]))
                if bool(done.all()):
                    break
                ids = torch.cat([ids, nxt[:, None]], 1)
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            for r, i in enumerate(idx):
                out[i] = gen[r]
    return out


@dataclass
class EvalResult:
    predictions: list
    summary: dict
    routing: dict | None = None


def nmi(a, b) -> float:
    """Normalised mutual information (arithmetic-mean normalisation, as scikit-learn's default)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.size == 0:
        return 0.0
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    C = np.zeros((ai.max() + 1, bi.max() + 1))
    np.add.at(C, (ai, bi), 1)
    P = C / C.sum()
    pa, pb = P.sum(1), P.sum(0)
    nz = P > 0
    mi = float((P[nz] * np.log(P[nz] / (pa[:, None] * pb[None, :])[nz])).sum())
    ha = -float((pa[pa > 0] * np.log(pa[pa > 0])).sum())
    hb = -float((pb[pb > 0] * np.log(pb[pb > 0])).sum())
    if ha == 0 or hb == 0:
        return 1.0 if ha == hb else 0.0
    return max(0.0, mi / ((ha + hb) / 2))


def routing_stats(ad: Adapted, tok, rows: list[Row], *, batch_size: int = 32) -> dict | None:
    """Expert use per task from one teacher-forced pass over prompt + target (the training view):
    per layer the argmax expert of every real token. ``nmi_token``: mean over layers of NMI(task,
    argmax expert) over tokens; ``nmi_seq``: the same with each sequence's argmax of its mean pi;
    ``usage``: task -> fraction of (token, layer) pairs per expert. None for lora."""
    if ad.cfg.method == "lora":
        return None
    enc = encode_rows(tok, rows)
    pad = _pad_id(tok)
    dev = next(ad.model.parameters()).device
    E = ad.cfg.experts
    per_layer: dict = {}
    ad.train(False)
    ad.ctx.record = True
    try:
        with torch.inference_mode():
            for b in range(0, len(rows), batch_size):
                idx = list(range(b, min(len(rows), b + batch_size)))
                ids, mask, _ = teacher_batch(enc, idx, pad)
                ad.ctx.records = []
                ad.logits(ids.to(dev), mask.to(dev))
                for name, am, m, pi in ad.ctx.records:
                    d = per_layer.setdefault(name, {"tok_task": [], "tok_e": [], "seq_task": [], "seq_e": []})
                    m = m.cpu()
                    am, pi = am.cpu(), pi.cpu().float()
                    for r, i in enumerate(idx):
                        sel = m[r]
                        d["tok_e"].append(am[r][sel].numpy())
                        d["tok_task"].extend([rows[i].task] * int(sel.sum()))
                        d["seq_e"].append(int(pi[r][sel].mean(0).argmax()))
                        d["seq_task"].append(rows[i].task)
    finally:
        ad.ctx.record = False
        ad.ctx.records = []
    tasks = sorted({r.task for r in rows})
    usage = {t: np.zeros(E) for t in tasks}
    nmi_tok, nmi_seq, layers = [], [], []
    for name, d in per_layer.items():
        te = np.concatenate(d["tok_e"]) if d["tok_e"] else np.zeros(0, dtype=int)
        tt = np.array(d["tok_task"])
        for t in tasks:
            sel = te[tt == t]
            usage[t] += np.bincount(sel, minlength=E)[:E]
        a, s = nmi(tt, te), nmi(d["seq_task"], d["seq_e"])
        nmi_tok.append(a)
        nmi_seq.append(s)
        layers.append({"layer": name, "nmi_token": round(a, 6), "nmi_seq": round(s, 6)})
    use = {t: (u / u.sum()).round(6).tolist() if u.sum() else u.tolist() for t, u in usage.items()}
    return {"nmi_token": round(float(np.mean(nmi_tok)), 6) if nmi_tok else 0.0,
            "nmi_token_max": round(float(np.max(nmi_tok)), 6) if nmi_tok else 0.0,
            "nmi_seq": round(float(np.mean(nmi_seq)), 6) if nmi_seq else 0.0,
            "usage": use, "layers": layers, "tasks": tasks, "experts": E}


def evaluate(cfg: EvalConfig, ad: Adapted, tok, rows: list[Row], *, with_routing: bool = True) -> EvalResult:
    """Greedy exact match per task (the decoded continuation, stripped, equals the stripped target),
    and the routing NMI of :func:`routing_stats`."""
    cfg.check()
    enc = encode_rows(tok, rows)
    mx = cfg.max_new_tokens or (max(len(t) for t in enc.target) + 1)
    gens = greedy(ad, tok, enc.prompt, max_new_tokens=mx, batch_size=cfg.batch_size)
    preds, per = [], {}
    for r, g in zip(rows, gens):
        text = tok.decode(g, skip_special_tokens=True)
        ok = text.strip() == r.target.strip()
        preds.append({"task": r.task, "prompt": r.prompt, "target": r.target, "prediction": text, "correct": ok})
        c = per.setdefault(r.task, [0, 0])
        c[0] += int(ok)
        c[1] += 1
    per_task = {t: round(c[0] / c[1], 6) for t, c in sorted(per.items())}
    routing = routing_stats(ad, tok, rows, batch_size=cfg.batch_size) if with_routing else None
    summary = {"method": ad.cfg.method, "n": len(rows),
               "exact_match": round(sum(p["correct"] for p in preds) / len(preds), 6),
               "per_task": per_task, "routing_nmi": routing["nmi_token"] if routing else None,
               "routing_nmi_seq": routing["nmi_seq"] if routing else None}
    return EvalResult(predictions=preds, summary=summary, routing=routing)


def generate(cfg: EvalConfig, ad: Adapted, tok, rows: list[Row]) -> EvalResult:
    """Greedy continuations of the rows' prompts (``max_new_tokens`` default 32)."""
    enc = encode_rows(tok, rows)
    mx = cfg.max_new_tokens or 32
    gens = greedy(ad, tok, enc.prompt, max_new_tokens=mx, batch_size=cfg.batch_size)
    preds = [{"task": r.task, "prompt": r.prompt, "generation": tok.decode(g, skip_special_tokens=True)}
             for r, g in zip(rows, gens)]
    return EvalResult(predictions=preds, summary={"method": ad.cfg.method, "n": len(rows),
                                                  "max_new_tokens": mx})


def count(acfg: AdapterConfig, model, *, seed: int = 0) -> dict:
    """Parameters by part of ``acfg`` on ``model`` (routers and P, p_s, gamma_s included), with the
    closed form r(d_in + H) + E H (+ H + 1) per wrapped layer for lime-lora."""
    ad = apply_adapter(model, acfg, seed=seed)
    c = count_parts(ad)
    closed = None
    if acfg.method == "lime-lora":
        closed = sum(acfg.rank * (m.d_in + m.H) + acfg.experts * m.H + ((m.H + 1) if acfg.shared else 0)
                     for m in ad.layers.values())
    base = sum(p.numel() for n, p in model.named_parameters() if not p.requires_grad)
    return {"method": acfg.method, "experts": acfg.experts, "rank": acfg.rank, "layers": c["layers"],
            "trainable_params": c["trainable"], "router_params": c["router_params"],
            "frozen_adapter_params": c["frozen_adapter"], "parts": c["parts"], "closed_form": closed,
            "frozen_params": int(base)}
train_adapter = train  # the package exports it under this name (lib.lime.train is the module)
