"""Our own module swap (no peft): wrap the frozen model's targeted ``nn.Linear`` layers by suffix,
hand them the pad mask through a forward pre-hook, count the parameters by part, and save / load
the adapter as .safetensors (config in its metadata).

lime-prompt [reconstructed]: a soft prompt V (n x d) prepended to the input embeddings, modulated by
the same expert vectors: prompt = V * p + gamma_s (V * p_s), p = sum_e w_e P_e, with the routing of
each sequence from the first E channels of the mean embedding of its first ``ROUTE_TOKENS`` real tokens
(h) and of the mean soft-prompt vector (delta), so the decision is causal and fixed during decoding.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.runtime import seeded
from icmlkit.lib.finetune_lime.config import AdapterConfig, LIME_METHODS
from icmlkit.lib.finetune_lime.layers import (EMBEDDING_LAYERS, LAYERS, MOE_PARTS, PARTS, RouteContext, balance_terms,
                                     normaliser, selection_weights, sparse_mix)

FORMAT = "icmlkit.finetune-lime.adapter/1"
ROUTE_TOKENS = 4


class PromptAdapter(nn.Module):
    """LiME-Prompt-Tuning [reconstructed]: see the module docstring."""

    def __init__(self, embed: nn.Embedding, cfg: AdapterConfig, ctx: RouteContext):
        super().__init__()
        d, E = embed.embedding_dim, cfg.experts
        self.cfg, self.ctx, self.layer_name = cfg, ctx, "prompt"
        std = float(embed.weight.detach().std())
        self.prompt = nn.Parameter(torch.randn(cfg.prompt_tokens, d) * std)
        self.experts = nn.Parameter(torch.empty(E, d).uniform_(0.9, 1.1))
        if cfg.shared:
            self.shared = nn.Parameter(torch.randn(d) * 0.1)
            self.gamma_s = nn.Parameter(torch.zeros(1))  # shape (1,): safetensors keeps no 0-d tensors here

    def adapter_state(self) -> dict:
        return dict(self.state_dict())

    def forward(self, emb: torch.Tensor, mask: torch.Tensor):
        """(embeddings with the routed soft prompt in front [B, n+T, d], the extended mask)."""
        cfg, E = self.cfg, self.cfg.experts
        B = emb.shape[0]
        m = mask.bool()
        first = (m.long().cumsum(1) <= ROUTE_TOKENS) & m
        f = first[..., None].to(emb.dtype)
        h = (emb * f).sum(1) / f.sum(1).clamp_min(1.0)                  # [B, d]
        delta = self.prompt.mean(0).expand(B, -1)
        one = torch.ones((B, 1), dtype=torch.bool, device=emb.device)
        hE, dE = h[:, :E], delta[:, :E]
        z = ((1 - cfg.gamma_routing) * hE / normaliser(hE, one, cfg.route_norm if cfg.route_norm != "causal"
                                                       else "batch", self.ctx)
             + cfg.gamma_routing * dE / normaliser(dE, one, "batch", self.ctx)) / cfg.temperature
        if self.training and cfg.jitter > 0:
            z = z * (1 - cfg.jitter + 2 * cfg.jitter * self.ctx.uniform(tuple(z.shape), z.device).to(z.dtype))
        pi = torch.softmax(z, -1)
        if cfg.selection == "hard" and cfg.sparse:
            p = sparse_mix(pi, self.experts, top_k=cfg.top_k, auto=cfg.auto_topk, theta=cfg.theta)
        else:
            p = selection_weights(pi, top_k=cfg.top_k, auto=cfg.auto_topk, theta=cfg.theta, mode=cfg.selection,
                                  ts=cfg.select_temperature) @ self.experts
        V = self.prompt[None] * p[:, None, :]
        if cfg.shared:
            V = V + self.gamma_s * (self.prompt[None] * self.shared)
        if self.ctx.collect:
            self.ctx.aux.append(balance_terms(pi, one, self.ctx))
        if self.ctx.record:
            T = mask.shape[1]
            self.ctx.records.append(("prompt", pi.argmax(-1)[:, None].expand(B, T), m, pi[:, None].expand(B, T, E)))
        return torch.cat([V.to(emb.dtype), emb], 1), torch.cat([torch.ones((B, V.shape[1]), dtype=mask.dtype,
                                                                           device=mask.device), mask], 1)


@dataclass
class Adapted:
    """A frozen model with its adapter: ``layers`` (module path -> wrapped layer), the shared
    :class:`RouteContext`, the config, and the soft prompt for lime-prompt."""

    model: nn.Module
    cfg: AdapterConfig
    ctx: RouteContext
    layers: dict
    prompt: PromptAdapter | None = None
    hooks: list = field(default_factory=list)

    def modules(self) -> dict:
        out = dict(self.layers)
        if self.prompt is not None:
            out["prompt"] = self.prompt
        return out

    def adapter_state(self) -> dict:
        """Every adapter tensor by ``<module path>.<name>`` (the content of the .safetensors file)."""
        out = {}
        for name, mod in self.modules().items():
            for k, v in mod.adapter_state().items():
                out[f"{name}.{k}"] = v
        return out

    def load_adapter_state(self, tensors: dict, where: str = "adapter", partial: bool = False) -> None:
        """Load ``tensors`` (by ``<module path>.<name>``); all of them, or with ``partial`` a subset (the
        rest keeps its value: ``train --init-peft`` starts LiME's lora_A / lora_B from a LoRA)."""
        want = self.adapter_state()
        missing = [] if partial else sorted(set(want) - set(tensors))
        extra = sorted(set(tensors) - set(want))
        if missing or extra:
            raise InputError(f"the adapter does not fit the model (missing {missing[:3]}, unexpected {extra[:3]})",
                             where)
        with torch.no_grad():
            for name, mod in self.modules().items():
                sd = {}
                for k, v in mod.adapter_state().items():
                    if f"{name}.{k}" not in tensors:
                        continue
                    t = torch.as_tensor(tensors[f"{name}.{k}"])
                    if tuple(t.shape) != tuple(v.shape):
                        raise InputError(f"tensor {name}.{k} has shape {tuple(t.shape)}, the model needs "
                                         f"{tuple(v.shape)}", where)
                    if t.is_floating_point() and not torch.isfinite(t).all():
                        raise InputError(f"tensor {name}.{k} holds NaN or infinite values", where)
                    sd[k] = t.to(v.dtype)
                mod.load_state_dict(sd, strict=False)

    def trainable(self) -> list[tuple[str, nn.Parameter]]:
        out = []
        for name, mod in self.modules().items():
            for k, p in mod.named_parameters():
                if p.requires_grad and not k.startswith("base."):
                    out.append((f"{name}.{k}", p))
        return out

    def train(self, mode: bool = True):
        self.model.train(mode)
        if self.prompt is not None:
            self.prompt.train(mode)

    # the one forward used by training, evaluation and routing
    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Next-token logits [B, T, V] for padded ``input_ids`` (left or right padding: positions count
        real tokens only)."""
        mask = attention_mask.long()
        if self.prompt is not None:
            emb = self.model.get_input_embeddings()(input_ids)
            emb, mask2 = self.prompt(emb, mask)
            pos = (mask2.cumsum(-1) - 1).clamp_min(0)
            out = self.model(inputs_embeds=emb, attention_mask=mask2, position_ids=pos)
            return out.logits[:, self.cfg.prompt_tokens:]
        pos = (mask.cumsum(-1) - 1).clamp_min(0)
        return self.model(input_ids=input_ids, attention_mask=mask, position_ids=pos).logits


def _suffix_match(name: str, target: str) -> bool:
    return name == target or name.endswith("." + target)


def linear_names(model: nn.Module) -> list[str]:
    """The distinct last path components of the model's nn.Linear layers (what --targets can name)."""
    return sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear) and n})


def input_embedding_name(model: nn.Module) -> str | None:
    """The module path of the model's input token embedding, or None (see :func:`_input_embedding`)."""
    try:
        return _input_embedding(model)[0]
    except UsageError:
        return None


def _input_embedding(model: nn.Module) -> tuple[str, nn.Embedding]:
    """(module path, module) of the model's input token embedding (``get_input_embeddings``, else the
    only nn.Embedding)."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    cands = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Embedding) and n]
    named = [(n, m) for n, m in cands if m is emb] if emb is not None else []
    if named:
        return named[0]
    if len(cands) == 1:
        return cands[0]
    raise UsageError("--embeddings: the model has no single input nn.Embedding "
                     f"(found: {', '.join(n for n, _ in cands) or 'none'})")


def apply_adapter(model: nn.Module, cfg: AdapterConfig, *, seed: int = 0) -> Adapted:
    """Freeze ``model`` and wrap every nn.Linear whose path ends with one of ``cfg.targets`` (the
    adapter's tensors drawn from the named stream ``init`` of ``seed``), and with ``cfg.embeddings`` the
    input token embedding too. Usage errors: no target matches (the message lists the Linear names that
    exist), E > H of a wrapped layer."""
    cfg.check()
    for p in model.parameters():
        p.requires_grad_(False)
    ctx = RouteContext()
    layers: dict = {}
    prompt = None
    found = [(n, m) for n, m in model.named_modules()
             if isinstance(m, nn.Linear) and any(_suffix_match(n, t) for t in cfg.targets)]
    with seeded(seed, "init"):
        if cfg.method == "lime-prompt":
            emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
            if not isinstance(emb, nn.Embedding):
                raise UsageError("--method lime-prompt needs a model with input embeddings (a Hugging Face causal LM)")
            if cfg.experts > emb.embedding_dim:
                raise UsageError(f"--experts {cfg.experts} exceeds the embedding width {emb.embedding_dim}")
            prompt = PromptAdapter(emb, cfg, ctx)
        else:
            if not found:
                raise UsageError(f"--targets {','.join(cfg.targets)} match no nn.Linear of the model; its Linear "
                                 f"layers are named: {', '.join(linear_names(model)) or '(none)'}")
            for name, lin in found:
                if cfg.method in LIME_METHODS and cfg.experts > lin.out_features:
                    raise UsageError(f"--experts {cfg.experts} exceeds the output width H = {lin.out_features} of "
                                     f"{name} (routing reads the first E channels)")
                if cfg.method == "lime-slicefine" and cfg.rank > lin.in_features:
                    raise UsageError(f"--rank {cfg.rank} exceeds the input width {lin.in_features} of {name}")
                layer = LAYERS[cfg.method](lin, cfg, ctx, name)
                parent_name, _, child = name.rpartition(".")
                parent = model.get_submodule(parent_name) if parent_name else model
                setattr(parent, child, layer)
                layers[name] = layer
            if cfg.embeddings:
                name, emb = _input_embedding(model)
                if cfg.method in LIME_METHODS and cfg.experts > emb.embedding_dim:
                    raise UsageError(f"--experts {cfg.experts} exceeds the embedding width {emb.embedding_dim}")
                layer = EMBEDDING_LAYERS[cfg.method](emb, cfg, ctx, name)
                parent_name, _, child = name.rpartition(".")
                setattr(model.get_submodule(parent_name) if parent_name else model, child, layer)
                layers[name] = layer
    dev = next(model.parameters()).device
    for mod in list(layers.values()) + ([prompt] if prompt is not None else []):
        mod.to(dev)
        mod.train(model.training)   # a new module starts in training mode; follow the model's
    ad = Adapted(model=model, cfg=cfg, ctx=ctx, layers=layers, prompt=prompt)

    def pre_hook(module, args, kwargs):
        m = kwargs.get("attention_mask")
        if m is None and len(args) > 1 and torch.is_tensor(args[1]):
            m = args[1]
        ctx.mask = None if m is None or m.dim() != 2 else m.bool()
        return None

    ad.hooks.append(model.register_forward_pre_hook(pre_hook, with_kwargs=True))
    return ad


def count_parts(ad: Adapted) -> dict:
    """Trainable parameters by part (lora_A, lora_B, slice, magnitude, experts_P, shared_p_s,
    gamma_s, router, prompt), plus ``trainable``, ``router_params`` and ``frozen_adapter`` (LoRA-FA's A)."""
    parts = {v: 0 for v in dict.fromkeys(PARTS.values())}
    for full, p in ad.trainable():
        leaf = full.rsplit(".", 1)[-1]
        parts[PARTS.get(leaf, leaf)] = parts.get(PARTS.get(leaf, leaf), 0) + p.numel()
    frozen = sum(v.numel() for k, v in ad.adapter_state().items()
                 if k.endswith("lora_A") and ad.cfg.method == "lime-lorafa")
    total = sum(parts.values())
    return {"parts": parts, "trainable": int(total), "router_params": int(parts["router"]),
            "frozen_adapter": int(frozen), "layers": len(ad.modules())}


def param_groups(ad: Adapted, moe_lr: float, peft_lr: float, weight_decay: float) -> list[dict]:
    """AdamW groups: P, p_s, gamma_s (and the baselines' routers) at ``moe_lr``; the rest at ``peft_lr``."""
    moe, peft = [], []
    for full, p in ad.trainable():
        leaf = full.rsplit(".", 1)[-1]
        (moe if PARTS.get(leaf) in MOE_PARTS else peft).append(p)
    groups = [{"params": peft, "lr": peft_lr, "weight_decay": weight_decay, "name": "peft"}]
    if moe:
        groups.append({"params": moe, "lr": moe_lr, "weight_decay": weight_decay, "name": "moe"})
    return groups


# --------------------------------------------------------------------------- files


def adapter_metadata(cfg: AdapterConfig, model_spec: str, extra: dict | None = None) -> dict:
    return {"format": FORMAT, "config": json.dumps(dataclasses.asdict(cfg), sort_keys=True),
            "model": str(model_spec), **{k: json.dumps(v, sort_keys=True) for k, v in (extra or {}).items()}}


def read_adapter(path) -> tuple[AdapterConfig, dict, dict]:
    """(config, name -> numpy tensor, metadata) of an adapter file written by ``train``."""
    from icmlkit.lib.core.io import display_name, read_safetensors

    tensors, meta = read_safetensors(path, FORMAT, "finetune-lime adapter")
    where = display_name(path)
    try:
        raw = json.loads(meta.get("config", ""))
        if not isinstance(raw, dict):
            raise ValueError("not an object")
        names = {f.name for f in dataclasses.fields(AdapterConfig)}
        cfg = AdapterConfig(**{k: v for k, v in raw.items() if k in names})
        cfg.check()
    except (ValueError, TypeError, UsageError) as exc:
        raise InputError(f"its adapter config is unreadable ({exc})", where) from None
    return cfg, tensors, meta


def check_adapter_model(path, model_spec) -> None:
    """Refuse an adapter trained on another base model than ``model_spec`` (issue 59: on a model of the same
    shapes it loaded silently): a UsageError naming the file and both models. Files without the record pass."""
    from icmlkit.lib.core.io import display_name
    from icmlkit.lib.hf.models import same_model

    _, _, meta = read_adapter(path)
    rec = meta.get("model")
    if rec and not same_model(rec, model_spec):
        raise UsageError(f"{display_name(path)}: the adapter was trained on model {rec!r}, not {str(model_spec)!r}; "
                         "give that model")


def load_adapted(model: nn.Module, path) -> Adapted:
    """The model with the adapter of file ``path`` inserted and loaded."""
    from icmlkit.lib.core.io import display_name

    cfg, tensors, _ = read_adapter(path)
    try:
        ad = apply_adapter(model, cfg, seed=0)
    except UsageError as exc:
        raise InputError(f"the adapter does not fit the model ({exc})", display_name(path)) from None
    ad.load_adapter_state(tensors, display_name(path))
    return ad

