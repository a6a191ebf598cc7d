"""``sft`` (BC init, SCoRe-SFT, imitation SFT) and ``rl`` (SCoRe-RL / outcome-only GRPO).

SFT: next-token cross-entropy on assistant turns only (observations and the question are user
turns: masked), AdamW, linear warmup then cosine decay. The loss is the mean over the global
batch's trained tokens, so a torchrun job (each rank its share of the batch, DDP averaging) takes
the same steps as one process.

GRPO [the paper uses verl; this is a small multi-turn GRPO loop written for this tool]:
1. draw ``prompts`` RL items; start G rollouts at each item's verified prefix (the prefix tokens
   are prompt: never trained) and let the policy continue for <= ``max_turns`` turns with real
   execution;
2. reward each rollout (:func:`reward`): 1 for a correct final answer; else, on the FIRST generated
   step only, 0.5 if it is functionally equivalent to the teacher step, 0 if to the student's
   mistake, 0.1 otherwise; 0 without ``final_answer_print``; ``--reward outcome``: 1 / 0 only;
3. advantages normalised within each group, A = (r - mean) / (std + 1e-6) with the population std
   (``adv_std="unbiased"``: Bessel's, as the reference trainer verl); groups whose rewards are all equal
   carry no signal and are dropped;
4. loss = -sum_i A_i sum_t m_it log pi(y_it) / sum m, where m is 1 only on the tokens the policy
   generated (prefix, teacher and observation tokens masked); one on-policy update per batch (the
   PPO ratio is 1); KL to the starting model with coefficient ``kl`` (0 by default, as the paper's
   script sets ``kl_loss_coef=0``).
   ``ppo_mini_batch=k`` (0 < k < prompts) is the reference trainer's form instead: the rollouts'
   log-probs are taken once before the update, then the batch is split into mini-batches of k prompts
   (in order) and each takes one optimiser step on the clipped PPO loss (:func:`ppo_clip_loss`, token
   mean over the mini-batch), so every mini-batch after the first is off-policy.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.distill_agent import agent as A


@dataclass
class TrainResult:
    model: object
    tokenizer: object
    summary: dict
    curve: list = field(default_factory=list)


def _settings(cfg) -> dict:
    import dataclasses

    return dataclasses.asdict(cfg)


def data_words(convs: list[list[dict]]) -> list[str]:
    import re

    out, seen = [], set()
    for c in convs:
        for m in c:
            text = re.sub(r"(</?(?:first_thought|thought|code)>)", r" \1 ", m["content"])
            for w in text.split():
                if w not in seen:
                    seen.add(w)
                    out.append(w)
    return out


def init_student(cfg, seed: int, convs=None, device=None):
    """``cfg.init``: 'tiny' (fresh, vocabulary = the synthetic toy's words + the data's words) or a folder."""
    from icmlkit.lib.distill_agent.env import vocabulary
    from icmlkit.lib.distill_agent.model import load_student, new_tiny

    if cfg.init == "tiny":
        words = vocabulary()
        have = set(words)
        words += [w for w in data_words(convs or []) if w not in have]
        model, tok = new_tiny(cfg, seed, words)
    else:
        model, tok = load_student(cfg.init)
    if device is not None:
        model.to(device)
    return model, tok


def _pad(seqs, masks, pad, device):
    """(ids, mask) right-padded: the sequences and their loss (or generated-token) masks."""
    from icmlkit.lib.hf.tiny import lm_batch

    ids, _, mask = lm_batch(seqs, masks, pad, device=device)
    return ids, mask


def with_lora(model, cfg):
    """Wrap a Hugging Face causal LM with peft LoRA adapters of rank ``cfg.lora`` on
    ``cfg.lora_targets`` (the base weights frozen); the identity when ``cfg.lora`` is 0. peft comes with the
    optional extra ``lime`` (which carries peft) (exit 4 with the install hint when it is missing)."""
    if not getattr(cfg, "lora", 0):
        return model
    from icmlkit.lib.core.errors import require_module

    peft = require_module("peft", "finetune-lime", "peft")
    targets = [t.strip() for t in cfg.lora_targets.split(",") if t.strip()]
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    missing = [t for t in targets if t not in names]
    if missing or not targets:
        raise UsageError(f"--lora-targets: the model has no module named {missing[0] if missing else '(none)'}")
    conf = peft.LoraConfig(r=int(cfg.lora), lora_alpha=float(cfg.lora_alpha), lora_dropout=0.0,
                           target_modules=targets, bias="none", task_type="CAUSAL_LM")
    return peft.get_peft_model(model, conf)


def merged(model):
    """The plain model with the LoRA updates folded into its weights (a no-op without adapters)."""
    return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model


def _trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


def sft(cfg, convs: list[list[dict]], *, seed: int, device, dist=None, checkpointer=None, model=None,
        tokenizer=None) -> TrainResult:
    """Supervised fine-tuning on assistant turns (loss on assistant tokens only)."""
    import torch

    from icmlkit.lib.core.checkpoint import fingerprint, restore
    from icmlkit.lib.core.runtime import Dist, generator
    from icmlkit.lib.distill_agent.model import Codec
    from icmlkit.lib.hf.tiny import masked_ce, optimizer_step, warmup_cosine

    dist = dist or Dist()
    if model is None:
        model, tokenizer = init_student(cfg, seed, convs, device)
    codec = Codec(tokenizer)
    data = []
    for c in convs:
        ids, mask = codec.encode(c)
        ids, mask = ids[:cfg.max_len], mask[:cfg.max_len]
        if sum(mask[1:]):
            data.append((ids, mask))
    if not data:
        raise InputError("no assistant tokens to train on (every conversation is empty after truncation)")
    n = len(data)
    per_epoch = math.ceil(n / cfg.batch)
    total = cfg.epochs * per_epoch
    model = with_lora(model, cfg)
    opt = torch.optim.AdamW(_trainable(model), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = warmup_cosine(opt, total, round(cfg.warmup * total))
    fp = fingerprint({"sft": _settings(cfg), "seed": seed, "world": dist.world}, [d[0] for d in data])
    step = 0
    if checkpointer is not None:
        state = checkpointer.load(fp)
        if state is not None:
            step, _ = restore(state, model=model, optimizer=opt, scheduler=sched)
    net = dist.wrap(model, device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    losses = []
    model.train()
    perms = {}
    while step < total:
        ep, k = divmod(step, per_epoch)
        if ep not in perms:
            perms = {ep: torch.randperm(n, generator=generator(seed, f"sft/order/{ep}")).tolist()}
        idx = perms[ep][k * cfg.batch:(k + 1) * cfg.batch]
        denom = float(sum(sum(data[i][1][1:]) for i in idx))
        if dist.world > 1:
            if len(idx) % dist.world:
                raise UsageError(f"--batch {cfg.batch} and {n} sequences do not split over {dist.world} processes")
            idx = idx[dist.split(len(idx))]
            denom = denom / dist.world
        x, m = _pad([data[i][0] for i in idx], [data[i][1] for i in idx], pad, device)
        loss = masked_ce(net(input_ids=x).logits, x, m, denom)
        optimizer_step(loss, opt, sched, model.parameters())
        step += 1
        losses.append(dist.all_mean(float(loss.detach())) * (dist.world if dist.world > 1 else 1))
        if checkpointer is not None and checkpointer.due(step, total):
            checkpointer.save(step, fp, model=model, optimizer=opt, scheduler=sched)
    model.eval()
    trainable = int(sum(p.numel() for p in _trainable(model)))
    model = merged(model)
    summary = {"steps": total, "sequences": n, "trained_tokens": int(sum(sum(d[1][1:]) for d in data)),
               "final_loss": round(losses[-1], 6) if losses else None, "lora_rank": int(cfg.lora),
               "trainable_parameters": trainable,
               "vocab": len(tokenizer), "parameters": int(sum(p.numel() for p in model.parameters())),
               "world_size": dist.world}
    return TrainResult(model, tokenizer, summary, losses)


# --------------------------------------------------------------------------- GRPO


def prefix_steps(prompt: list[dict]) -> list[dict]:
    """The steps of an RL item's prompt (assistant turns and their observations)."""
    steps = []
    msgs = prompt[1:]
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        s = A.parse_step(m["content"], first=not steps)
        obs = ""
        if i + 1 < len(msgs) and msgs[i + 1]["role"] == "user":
            obs = msgs[i + 1]["content"]
            obs = obs[len("Observation:"):].strip() if obs.startswith("Observation:") else obs
        steps.append({"thought": s["thought"], "code": s["code"], "observation": obs, "is_finished": False})
    return steps


def _norm_obs(o: str) -> str:
    o = str(o or "")
    o = o[len("Observation:"):] if o.startswith("Observation:") else o
    return " ".join(o.split())


def reward(item: dict, prefix: list[dict], steps: list[dict], final, mode: str) -> float:
    """The SCoRe key-step reward (``mode`` 'score') or the outcome reward ('outcome')."""
    from icmlkit.lib.distill_agent.backends import answers_match

    if final is None:
        return 0.0  # no final_answer_print: nothing
    if answers_match(final, item["gt_answer"]):
        return 1.0  # success: never shaped
    if mode == "outcome" or not item.get("chosen"):
        return 0.0
    if len(steps) <= len(prefix):
        return 0.0
    first = steps[len(prefix)]
    chosen = A.parse_step(item["chosen"], first=not prefix)
    rejected = A.parse_step(item.get("rejected", ""), first=not prefix)
    env = item.get("env")
    if env is not None:
        from icmlkit.lib.distill_agent.env import equivalent

        if equivalent(env, prefix, first, chosen):
            return 0.5
        if item.get("rejected") and equivalent(env, prefix, first, rejected):
            return 0.0
        return 0.1
    # [reconstructed] without an environment state: equal observation (and not an error) stands in for
    # the upstream LLM judge of functional equivalence
    fo = _norm_obs(first.get("observation"))
    if fo and not fo.startswith("Error") and fo == _norm_obs(item.get("chosen_observation")):
        return 0.5
    if item.get("rejected") and fo == _norm_obs(item.get("rejected_observation")):
        return 0.0
    return 0.1


def group_advantages(rewards, std: str = "population"):
    """(advantages, keep) of one group: (r - mean) / (std + 1e-6), ``std`` the population std (ours) or
    the unbiased one (verl's ``torch.std``); keep False when all rewards are equal."""
    import torch

    r = torch.as_tensor(rewards, dtype=torch.float64)
    if bool((r == r[0]).all()):
        return torch.zeros_like(r), False
    return (r - r.mean()) / (r.std(unbiased=std == "unbiased") + 1e-6), True


def token_logprobs(logits, ids, temperature: float = 1.0):
    import torch

    lp = torch.log_softmax(logits[:, :-1].float() / temperature, -1)
    return lp.gather(-1, ids[:, 1:, None]).squeeze(-1)


def grpo_loss(logits, ids, gen_mask, adv, denom, temperature: float = 1.0, ref_logits=None, kl: float = 0.0):
    """-sum A_i m_it log p_it / denom (+ kl * k3(pi, ref) on the same tokens)."""
    lp = token_logprobs(logits, ids, temperature)
    m = gen_mask[:, 1:].float()
    loss = -(adv[:, None].float() * lp * m).sum() / denom
    if kl > 0 and ref_logits is not None:
        import torch

        rl = token_logprobs(ref_logits, ids, temperature).detach()
        d = rl - lp
        loss = loss + kl * ((torch.exp(d) - d - 1) * m).sum() / denom
    return loss


def ppo_clip_loss(logits, ids, gen_mask, adv, old_lp, denom, clip: float = 0.2, clip_c: float = 3.0,
                  temperature: float = 1.0, ref_logits=None, kl: float = 0.0):
    """The reference trainer's (verl's) clipped policy loss, summed over the generated tokens / denom:
    max(-A r, -A clip(r, 1 - clip, 1 + clip)) with r = exp(log pi - old log pi), and for A < 0 at most
    -A clip_c (dual clip); plus the same k3 KL term as :func:`grpo_loss`. At r = 1 its gradient is
    :func:`grpo_loss`'s."""
    import torch

    lp = token_logprobs(logits, ids, temperature)
    m = gen_mask[:, 1:].float()
    a = adv[:, None].float()
    ratio = torch.exp(lp - old_lp)
    pg = torch.maximum(-a * ratio, -a * ratio.clamp(1.0 - clip, 1.0 + clip))
    pg = torch.where(a < 0, torch.minimum(pg, -a * clip_c), pg)
    loss = (pg * m).sum() / denom
    if kl > 0 and ref_logits is not None:
        rl = token_logprobs(ref_logits, ids, temperature).detach()
        d = rl - lp
        loss = loss + kl * ((torch.exp(d) - d - 1) * m).sum() / denom
    return loss


def _ppo_update(cfg, net, model, opt, ref, runs, keep, adv, first_prompt: int, pad, device, dist) -> None:
    """The mini-batch form of one RL step (``cfg.ppo_mini_batch`` prompts per optimiser step); rollout
    i belongs to prompt ``first_prompt + i // cfg.group`` of the global batch."""
    import torch

    if keep:
        x_all, m_all = _pad([runs[i].ep.ids for i in keep], [runs[i].ep.gen for i in keep], pad, device)
        with torch.no_grad():   # log pi_old: the rollout policy, before any of this step's updates
            old_all = token_logprobs(model(input_ids=x_all).logits, x_all, cfg.temperature)
    mb = cfg.ppo_mini_batch
    for k in range(math.ceil(cfg.prompts / mb)):
        rows = [r for r, i in enumerate(keep) if (first_prompt + i // cfg.group) // mb == k]
        n_tok = float(sum(sum(runs[keep[r]].ep.gen) for r in rows))
        denom_t = dist.all_mean(n_tok) * dist.world if dist.world > 1 else n_tok
        if denom_t <= 0:
            continue                      # no trained token in this mini-batch on any rank
        opt.zero_grad(set_to_none=True)
        if rows:
            idx = torch.as_tensor(rows, device=device)
            x, m = x_all[idx], m_all[idx]
            logits = net(input_ids=x).logits
            ref_logits = None
            if ref is not None:
                with torch.no_grad():
                    ref_logits = ref(input_ids=x).logits
            loss = ppo_clip_loss(logits, x, m, adv[[keep[r] for r in rows]].to(logits.device), old_all[idx],
                                 denom_t / max(dist.world, 1), cfg.clip_ratio, temperature=cfg.temperature,
                                 ref_logits=ref_logits, kl=cfg.kl)
        else:                             # keep DDP's collective calls in step
            loss = sum(p.sum() for p in net.parameters()) * 0.0
        loss.backward()
        if cfg.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad)
        opt.step()


def _one_update(cfg, net, model, opt, ref, runs, keep, adv, pad, device, dist) -> None:
    """Ours: one on-policy optimiser step on the whole batch (:func:`grpo_loss`)."""
    import torch

    n_tok = float(sum(sum(runs[i].ep.gen) for i in keep))
    denom_t = dist.all_mean(n_tok) * dist.world if dist.world > 1 else n_tok
    opt.zero_grad(set_to_none=True)
    if keep and denom_t > 0:
        x, m = _pad([runs[i].ep.ids for i in keep], [runs[i].ep.gen for i in keep], pad, device)
        logits = net(input_ids=x).logits
        ref_logits = None
        if ref is not None:
            with torch.no_grad():
                ref_logits = ref(input_ids=x).logits
        loss = grpo_loss(logits, x, m, adv[keep].to(logits.device), denom_t / max(dist.world, 1),
                         cfg.temperature, ref_logits, cfg.kl)
        loss.backward()
    elif dist.world > 1:  # keep DDP's collective calls in step: a zero loss on every parameter
        loss = sum(p.sum() for p in net.parameters()) * 0.0
        loss.backward()
    if cfg.clip_grad > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad)
    if keep or dist.world > 1:
        opt.step()


def rl(cfg, items: list[dict], model, tok, agent_cfg, *, seed: int, device, dist=None, checkpointer=None,
       search=None) -> TrainResult:
    """GRPO from verified prefixes (see the module docstring)."""
    import torch

    from icmlkit.lib.core.checkpoint import fingerprint, restore
    from icmlkit.lib.core.runtime import Dist, generator
    from icmlkit.lib.distill_agent.loop import Run, close, rollout, start
    from icmlkit.lib.distill_agent.model import LocalPolicy

    dist = dist or Dist()
    ref = copy.deepcopy(model).eval() if cfg.kl > 0 else None
    model = with_lora(model, cfg)
    opt = torch.optim.AdamW(_trainable(model), lr=cfg.lr, weight_decay=0.0)
    fp = fingerprint({"rl": _settings(cfg), "agent": _settings(agent_cfg), "seed": seed, "world": dist.world},
                     [{k: v for k, v in it.items()} for it in items])
    step, extra = 0, {}
    if checkpointer is not None:
        state = checkpointer.load(fp)
        if state is not None:
            step, extra = restore(state, model=model, optimizer=opt)
    curve = list(extra.get("curve", []))
    all_rewards = list(extra.get("rewards", []))
    net = dist.wrap(model, device)
    policy = LocalPolicy(model, tok, step_tokens=agent_cfg.step_tokens, temperature=cfg.temperature,
                         batch=agent_cfg.batch, device=device)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    dropped_total = int(extra.get("dropped", 0))
    while step < cfg.steps:
        order = torch.randperm(len(items), generator=generator(seed, f"rl/items/{step}")).tolist()
        chosen = [order[j % len(items)] for j in range(cfg.prompts)]
        if dist.world > 1:
            chosen = chosen[dist.split(len(chosen))]
        runs, meta = [], []
        model.eval()
        for j, ii in enumerate(chosen):
            it = items[ii]
            pre = prefix_steps(it["prompt"])
            task = {"id": str(ii), "question": it["prompt"][0]["content"], "answer": it["gt_answer"],
                    "env": it.get("env")}
            for g in range(cfg.group):
                r = Run(task)
                start(policy, r, pre, generator(seed, f"rl/roll/{step}/{dist.rank}/{j}/{g}"), agent_cfg, search,
                      messages=it["prompt"])
                runs.append(r)
                meta.append((j, it, pre))
        try:
            rollout(policy, runs, max(agent_cfg.max_steps, 1), max_turns=cfg.max_turns)
        finally:
            close(runs)
        rewards = [reward(it, pre, r.steps, r.final, cfg.reward) for r, (j, it, pre) in zip(runs, meta)]
        adv = torch.zeros(len(runs), dtype=torch.float64)
        keep = []
        for j in range(len(chosen)):
            sl = slice(j * cfg.group, (j + 1) * cfg.group)
            a, ok = group_advantages(rewards[sl], cfg.adv_std)
            if ok:
                adv[sl] = a
                keep += list(range(sl.start, sl.stop))
            else:
                dropped_total += 1
        model.train()
        if 0 < cfg.ppo_mini_batch < cfg.prompts:   # the reference trainer's mini-batch form
            first = dist.split(cfg.prompts).start if dist.world > 1 else 0
            _ppo_update(cfg, net, model, opt, ref, runs, keep, adv, first, pad, device, dist)
        else:
            _one_update(cfg, net, model, opt, ref, runs, keep, adv, pad, device, dist)
        model.eval()
        mean_r = dist.all_mean(sum(rewards) / len(rewards))
        curve.append(round(mean_r, 6))
        all_rewards += [round(float(x), 4) for x in rewards]
        step += 1
        if checkpointer is not None and checkpointer.due(step, cfg.steps):
            checkpointer.save(step, fp, model=model, optimizer=opt,
                              extra={"curve": curve, "rewards": all_rewards, "dropped": dropped_total})
    import statistics

    model = merged(model)
    summary = {"steps": cfg.steps, "mean_reward": round(sum(curve) / len(curve), 6) if curve else 0.0,
               "reward_std": round(statistics.pstdev(all_rewards), 6) if all_rewards else 0.0,
               "reward_curve_var": round(statistics.pvariance(curve), 8) if len(curve) > 1 else 0.0,
               "final_reward": curve[-1] if curve else 0.0, "groups_dropped": dropped_total,
               "rollouts": len(all_rewards), "reward": cfg.reward, "world_size": dist.world,
               "lora_rank": int(cfg.lora)}
    return TrainResult(model, tok, summary, curve)
