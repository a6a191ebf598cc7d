"""LiME layers (Kowsher et al., ICML 2026) and the MoE-PEFT baselines, around a frozen ``nn.Linear``.

LiME-LoRA (``LoRALiMELinear`` of the official code), for a token x of a frozen W0 (d_in -> H):

1. h = W0 x (+ b); delta = (alpha/r) B A x with A Kaiming-uniform, B = 0 (so the model starts frozen);
2. zero-parameter routing: z = ((1-g) h[:E]/max|h[:E]| + g delta[:E]/max|delta[:E]|)/tau, the max-abs
   taken over the whole batch with pads EXCLUDED (the official code includes them) and treated as a
   constant (no gradient through the max [reconstructed]); ``route_norm="token"`` normalises per token,
   ``"causal"`` by the running max over positions <= t [reconstructed]; training jitter z *= U(1-eps, 1+eps);
   pi = softmax(z);
3. selection w from pi: soft top-k, Auto Top-K (pi >= theta max pi), or hard top-k (dense mask, or the
   sparse gather of the selected expert vectors); p = sum_e w_e P_e with P (E x H) init U[0.9, 1.1];
4. y = h + delta * p + gamma_s (delta * p_s); pad positions return h (the mask comes from a hook).

n-gram routing: one decision per group of n real tokens, taken at the group's first token (causal,
default) or its last token (the official rule, which leaks the future in a causal LM). As in the official
layers (which route the anchor tokens alone), the batch / causal max-abs normaliser is taken over the
deciding tokens only.
Load balancing per layer on pi: importance = E sum_e pbar_e^2 - 1, KL(pbar || U) = sum pbar log pbar + log E.

Other bases with the same modulation [reconstructed: the paper's text is not available; only the
LoRA variant's equations are confirmed]: DoRA (routing on the magnitude-normalised output), LoRA-FA
(A frozen), SliceFine (a trainable slice of r input columns). Baselines: LoRA, MoLoRA (E LoRAs +
linear top-k router), HydraLoRA (shared A, E B heads + linear softmax router).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from icmlkit.lib.core.errors import UsageError


class RouteContext:
    """State shared by every wrapped layer of one model: the pad mask of the current forward pass,
    the random stream of the jitter/dropout, the distributed reductions, and what the layers collect
    (balance terms each step; argmax experts when recording)."""

    def __init__(self, generator: torch.Generator | None = None):
        self.mask: torch.Tensor | None = None   # [B, T] bool, True = real token
        self.generator = generator
        self.rows: tuple[int, int, int] | None = None  # (start, stop, global B): this rank's rows
        self.comm = None                       # object with .max(t) / .sum(t) over ranks, or None
        self.collect = False                   # append balance terms to .aux
        self.aux: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.record = False                    # append (layer name, argmax [B,T], mask) to .records
        self.records: list = []
        self.warned = False

    def reset(self) -> None:
        self.aux = []

    def global_max(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.comm is None else self.comm.max(t)

    def global_sum(self, t: torch.Tensor) -> torch.Tensor:
        """The sum over ranks, differentiable through this rank's part only (the ranks' gradients are
        summed afterwards, which gives the gradient of the global quantity)."""
        if self.comm is None:
            return t
        total = self.comm.sum(t.detach())
        return t + (total - t.detach())

    def uniform(self, shape: tuple, device) -> torch.Tensor:
        """U[0, 1) noise for this rank's rows, drawn for the whole global batch (so one process and
        several give the same numbers)."""
        if self.rows is not None and len(shape) >= 2:
            lo, hi, B = self.rows
            full = torch.rand((B, *shape[1:]), generator=self.generator)
            return full[lo:hi].to(device)
        return torch.rand(shape, generator=self.generator).to(device)

    def token_mask(self, x: torch.Tensor) -> torch.Tensor:
        """[..., 1] bool mask of real tokens for an input of shape [B, T, d] (or [N, d]: all real)."""
        if x.dim() == 3 and self.mask is not None:
            m = self.mask[:, -x.shape[1]:]
            if m.shape[0] == x.shape[0]:
                return m[..., None].to(torch.bool)
        return torch.ones((*x.shape[:-1], 1), dtype=torch.bool, device=x.device)


# --------------------------------------------------------------------------- routing pieces


def normaliser(a: torch.Tensor, m: torch.Tensor, mode: str, ctx: RouteContext | None) -> torch.Tensor:
    """max|a| (a = [B, T, E] or [N, E]) as a constant scale (detached), clamped >= 1e-6.

    batch: one scalar over all real tokens of the (global) batch; token: per token; causal: per
    position t, the max over the batch of positions <= t."""
    a = a.detach().abs() * m
    if mode == "token":
        return a.amax(dim=-1, keepdim=True).clamp_min(1e-6)
    if mode == "causal" and a.dim() == 3:
        per_t = a.amax(dim=(0, 2))
        if ctx is not None:
            per_t = ctx.global_max(per_t)
        return torch.cummax(per_t, dim=0).values.clamp_min(1e-6)[None, :, None]
    s = a.amax()
    if ctx is not None:
        s = ctx.global_max(s)
    return s.clamp_min(1e-6)


def ngram_source(mask: torch.Tensor, n: int, rule: str) -> torch.Tensor:
    """Index [B, T] of the token whose routing each token uses: the first real token of its group of
    n (causal) or the group's last real token (rule 'last'); groups count real tokens only, so left
    or right padding does not move them. Pads point at themselves."""
    B, T = mask.shape
    m = mask.long()
    pos = m.cumsum(1) - 1                       # index among real tokens
    t = torch.arange(T, device=mask.device).expand(B, T)
    first = t - (pos.clamp_min(0) % n)          # real tokens are contiguous in each row
    if rule == "last":
        last_real = (t * m).amax(1, keepdim=True)
        src = torch.minimum(first + n - 1, last_real)
    else:
        src = first
    return torch.where(mask, src.clamp(0, T - 1), t)


def selection_weights(pi: torch.Tensor, *, top_k: int, auto: bool, theta: float, mode: str, ts: float):
    """Dense weights w [.., E] from pi (soft or hard), each row summing to 1."""
    E = pi.shape[-1]
    if auto:
        thr = theta * pi.amax(dim=-1, keepdim=True)
    else:
        thr = torch.topk(pi, min(top_k, E), dim=-1).values[..., -1:]
    if mode == "soft":
        w = pi * torch.sigmoid((pi - thr) / ts)
    else:
        sel = hard_mask(pi, top_k=top_k, auto=auto, theta=theta)
        w = pi * sel
    return w / w.sum(dim=-1, keepdim=True).clamp_min(1e-12)


def hard_mask(pi: torch.Tensor, *, top_k: int, auto: bool, theta: float) -> torch.Tensor:
    """0/1 mask of the hard selection: top-k, or Auto Top-K: the experts with pi >= theta max pi among
    the top min(2k, E) candidates (the arg max always qualifies: the fallback top-1)."""
    E = pi.shape[-1]
    K = min(2 * top_k, E) if auto else min(top_k, E)
    idx = torch.topk(pi, K, dim=-1).indices
    cand = torch.zeros_like(pi).scatter(-1, idx, 1.0)
    if auto:
        cand = cand * (pi >= theta * pi.amax(dim=-1, keepdim=True)).to(pi.dtype)
    return cand


def sparse_mix(pi: torch.Tensor, P: torch.Tensor, *, top_k: int, auto: bool, theta: float):
    """p = sum over the selected experts of w_e P_e by gathering K rows of P per token (hard selection)."""
    E = pi.shape[-1]
    K = min(2 * top_k, E) if auto else min(top_k, E)
    vals, idx = torch.topk(pi, K, dim=-1)
    if auto:
        vals = vals * (vals >= theta * pi.amax(dim=-1, keepdim=True)).to(pi.dtype)
    w = vals / vals.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    return torch.einsum("...k,...kh->...h", w, P[idx])


def balance_terms(pi: torch.Tensor, m: torch.Tensor, ctx: RouteContext | None):
    """(importance, KL) of the masked mean routing pbar over the (global) batch."""
    E = pi.shape[-1]
    mf = m.to(pi.dtype)
    s = (pi * mf).reshape(-1, E).sum(0)
    c = mf.sum().reshape(1)
    if ctx is not None:
        s, c = ctx.global_sum(s), ctx.global_sum(c)
    pbar = s / c.clamp_min(1.0)
    imp = E * (pbar ** 2).sum() - 1.0
    kl = (pbar * pbar.clamp_min(1e-12).log()).sum() + math.log(E)
    return imp, kl


def _kaiming(r: int, d_in: int) -> torch.Tensor:
    A = torch.empty(r, d_in)
    nn.init.kaiming_uniform_(A, a=math.sqrt(5))
    return A


# --------------------------------------------------------------------------- the layers


class AdapterLayer(nn.Module):
    """Common base: the frozen ``base`` Linear, the shared context, and the adapter's own tensors."""

    part_names: dict = {}

    def __init__(self, base: nn.Linear, cfg, ctx: RouteContext, name: str):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.cfg = cfg
        self.ctx = ctx
        self.layer_name = name
        self.d_in, self.H = base.in_features, base.out_features
        self.s = cfg.scale

    def adapter_state(self) -> dict:
        """This layer's adapter tensors (parameters and adapter buffers, not the frozen base)."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("base.")}

    def _x(self, x):
        p = self.cfg.dropout
        if self.training and p > 0:
            keep = (self.ctx.uniform(tuple(x.shape), x.device) >= p).to(x.dtype)
            return x * keep / (1 - p)
        return x


class LimeLinear(AdapterLayer):
    """LiME around a frozen Linear; ``kind``: lora | dora | lorafa | slicefine (see the module text)."""

    def __init__(self, base: nn.Linear, cfg, ctx: RouteContext, name: str, kind: str = "lora"):
        super().__init__(base, cfg, ctx, name)
        E, r, H, d_in = cfg.experts, cfg.rank, self.H, self.d_in
        self.kind = kind
        if kind in ("lora", "dora"):
            self.lora_A = nn.Parameter(_kaiming(r, d_in))
            self.lora_B = nn.Parameter(torch.zeros(H, r))
        elif kind == "lorafa":
            self.register_buffer("lora_A", _kaiming(r, d_in))   # frozen A (LoRA-FA), saved with the adapter
            self.lora_B = nn.Parameter(torch.zeros(H, r))
        elif kind == "slicefine":
            r = min(r, d_in)
            off = int(torch.randint(0, d_in - r + 1, (1,)).item())
            self.register_buffer("slice_offset", torch.tensor([off], dtype=torch.long))
            self.slice_W = nn.Parameter(torch.zeros(H, r))
        else:
            raise UsageError(f"unknown adapter kind {kind!r}")
        if kind == "dora":
            self.magnitude = nn.Parameter(base.weight.detach().norm(dim=1).clone())
        self.experts = nn.Parameter(torch.empty(E, H).uniform_(0.9, 1.1))
        if cfg.shared:
            self.shared = nn.Parameter(torch.randn(H) * 0.1)
            self.gamma_s = nn.Parameter(torch.zeros(1))  # shape (1,): safetensors keeps no 0-d tensors here

    # delta (and the output routed on) of each base
    def _delta(self, x, h):
        xa = self._x(x)
        if self.kind == "slicefine":
            off, r = int(self.slice_offset), self.slice_W.shape[1]
            return h, self.s * (xa[..., off:off + r] @ self.slice_W.T)
        delta = self.s * ((xa @ self.lora_A.T) @ self.lora_B.T)
        if self.kind == "dora":
            W = self.base.weight + self.s * (self.lora_B @ self.lora_A)
            scale = self.magnitude / W.norm(dim=1).detach()      # DoRA: the norm as a constant
            hb = h - self.base.bias if self.base.bias is not None else h
            y_d = scale * (hb + delta)
            if self.base.bias is not None:
                y_d = y_d + self.base.bias
            return y_d, y_d - h                  # route on the magnitude-normalised output
        return h, delta

    def routing(self, hr, delta, m):
        """pi [.., E] (after n-gram broadcast) from the first E channels of hr and delta."""
        cfg, ctx, E = self.cfg, self.ctx, self.cfg.experts
        hE, dE = hr[..., :E], delta[..., :E]
        src, mn = None, m
        if cfg.n_gram > 1 and hr.dim() == 3:
            src = ngram_source(m[..., 0], cfg.n_gram, cfg.ngram_rule)
            if cfg.route_norm != "token":   # the scale comes from the deciding tokens only, as officially
                mn = m & (src == torch.arange(src.shape[1], device=src.device))[..., None]
        z = ((1 - cfg.gamma_routing) * hE / normaliser(hE, mn, cfg.route_norm, ctx)
             + cfg.gamma_routing * dE / normaliser(dE, mn, cfg.route_norm, ctx)) / cfg.temperature
        if self.training and cfg.jitter > 0:
            u = ctx.uniform(tuple(z.shape), z.device).to(z.dtype)
            z = z * (1 - cfg.jitter + 2 * cfg.jitter * u)
        pi = torch.softmax(z, dim=-1)
        if src is not None:
            pi = pi.gather(1, src[..., None].expand_as(pi))
        return pi

    def _mask_like(self, x, h):
        """The tensor whose rows the token mask follows: the input (the embedding's subclass: its output)."""
        return x

    def forward(self, x):
        h = self.base(x)
        m = self.ctx.token_mask(self._mask_like(x, h))
        hr, delta = self._delta(x, h)
        pi = self.routing(hr, delta, m)
        cfg = self.cfg
        if cfg.selection == "hard" and cfg.sparse:
            p = sparse_mix(pi, self.experts, top_k=cfg.top_k, auto=cfg.auto_topk, theta=cfg.theta)
        else:
            w = selection_weights(pi, top_k=cfg.top_k, auto=cfg.auto_topk, theta=cfg.theta, mode=cfg.selection,
                                  ts=cfg.select_temperature)
            p = w @ self.experts
        if cfg.shared:   # delta * p + gamma_s (delta * p_s), one product
            p = p + self.gamma_s * self.shared
        y = h + delta * p
        self._collect(pi, m)
        return y if self.ctx.mask is None else torch.where(m, y, h)

    def _collect(self, pi, m):
        ctx = self.ctx
        if ctx.collect:
            ctx.aux.append(balance_terms(pi, m, ctx))
        if ctx.record:
            ctx.records.append((self.layer_name, pi.detach().argmax(-1), m[..., 0].detach(), pi.detach()))


class LoraLinear(AdapterLayer):
    """Plain LoRA: y = h + (alpha/r) B A x (A Kaiming, B = 0)."""

    def __init__(self, base, cfg, ctx, name):
        super().__init__(base, cfg, ctx, name)
        self.lora_A = nn.Parameter(_kaiming(cfg.rank, self.d_in))
        self.lora_B = nn.Parameter(torch.zeros(self.H, cfg.rank))

    def forward(self, x):
        h = self.base(x)
        return h + self.s * ((self._x(x) @ self.lora_A.T) @ self.lora_B.T)


class MoLoraLinear(AdapterLayer):
    """MoLoRA: E LoRAs of rank r and a linear router on x (no bias) with top-k softmax gating:
    y = h + sum_{e in top-k} w_e (alpha/r) B_e A_e x (dense compute, masked)."""

    def __init__(self, base, cfg, ctx, name):
        super().__init__(base, cfg, ctx, name)
        E, r = cfg.experts, cfg.rank
        self.lora_A = nn.Parameter(torch.stack([_kaiming(r, self.d_in) for _ in range(E)]))   # E r d
        self.lora_B = nn.Parameter(torch.zeros(E, self.H, r))
        self.router = nn.Parameter(torch.randn(E, self.d_in) / math.sqrt(self.d_in))

    def gate(self, x, m):
        pi = torch.softmax(x @ self.router.T, dim=-1)
        w = pi * hard_mask(pi, top_k=self.cfg.top_k, auto=False, theta=0.0)
        return pi, w / w.sum(-1, keepdim=True).clamp_min(1e-12)

    def forward(self, x):
        h = self.base(x)
        m = self.ctx.token_mask(x)
        xa = self._x(x)
        pi, w = self.gate(x, m)
        u = torch.einsum("...d,erd->...er", xa, self.lora_A)
        v = torch.einsum("...er,ehr->...eh", u, self.lora_B)
        y = h + self.s * torch.einsum("...e,...eh->...h", w, v)
        LimeLinear._collect(self, pi, m)
        return torch.where(m, y, h)


class HydraLoraLinear(AdapterLayer):
    """HydraLoRA: one shared A, E B heads and a linear softmax router over all heads:
    y = h + (alpha/r) sum_e w_e B_e A x."""

    def __init__(self, base, cfg, ctx, name):
        super().__init__(base, cfg, ctx, name)
        E, r = cfg.experts, cfg.rank
        self.lora_A = nn.Parameter(_kaiming(r, self.d_in))
        self.lora_B = nn.Parameter(torch.zeros(E, self.H, r))
        self.router = nn.Parameter(torch.randn(E, self.d_in) / math.sqrt(self.d_in))

    def forward(self, x):
        h = self.base(x)
        m = self.ctx.token_mask(x)
        pi = torch.softmax(x @ self.router.T, dim=-1)
        u = self._x(x) @ self.lora_A.T                       # [.., r]
        Bm = torch.einsum("...e,ehr->...hr", pi, self.lora_B)
        y = h + self.s * torch.einsum("...hr,...r->...h", Bm, u)
        LimeLinear._collect(self, pi, m)
        return torch.where(m, y, h)


class LimeEmbedding(LimeLinear):
    """LiME-LoRA around a frozen ``nn.Embedding`` (``LoRALiMEEmbedding``): h = E0[ids], delta = (alpha/r)
    B A[:, ids] with A (r x vocab, Kaiming) and B = 0, then the routing, selection and output of
    :class:`LimeLinear` (first E channels of h and delta; pads return h)."""

    def __init__(self, base: nn.Embedding, cfg, ctx: RouteContext, name: str):
        nn.Module.__init__(self)
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.cfg, self.ctx, self.layer_name, self.kind = cfg, ctx, name, "embedding"
        self.d_in, self.H = base.num_embeddings, base.embedding_dim
        self.s = cfg.scale
        E, r = cfg.experts, cfg.rank
        self.lora_A = nn.Parameter(_kaiming(r, self.d_in))
        self.lora_B = nn.Parameter(torch.zeros(self.H, r))
        self.experts = nn.Parameter(torch.empty(E, self.H).uniform_(0.9, 1.1))
        if cfg.shared:
            self.shared = nn.Parameter(torch.randn(self.H) * 0.1)
            self.gamma_s = nn.Parameter(torch.zeros(1))

    def _delta(self, ids, h):
        return h, self.s * (nn.functional.embedding(ids, self.lora_A.T) @ self.lora_B.T)

    def _mask_like(self, ids, h):
        return h


class LoraEmbedding(AdapterLayer):
    """Plain LoRA on a frozen ``nn.Embedding``: y = E0[ids] + (alpha/r) B A[:, ids] (A Kaiming, B = 0)."""

    def __init__(self, base: nn.Embedding, cfg, ctx, name):
        nn.Module.__init__(self)
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.cfg, self.ctx, self.layer_name = cfg, ctx, name
        self.d_in, self.H, self.s = base.num_embeddings, base.embedding_dim, cfg.scale
        self.lora_A = nn.Parameter(_kaiming(cfg.rank, self.d_in))
        self.lora_B = nn.Parameter(torch.zeros(self.H, cfg.rank))

    def forward(self, ids):
        return self.base(ids) + self.s * (nn.functional.embedding(ids, self.lora_A.T) @ self.lora_B.T)


EMBEDDING_LAYERS = {"lime-lora": LimeEmbedding, "lora": LoraEmbedding}

LAYERS = {
    "lime-lora": lambda b, c, x, n: LimeLinear(b, c, x, n, "lora"),
    "lime-dora": lambda b, c, x, n: LimeLinear(b, c, x, n, "dora"),
    "lime-lorafa": lambda b, c, x, n: LimeLinear(b, c, x, n, "lorafa"),
    "lime-slicefine": lambda b, c, x, n: LimeLinear(b, c, x, n, "slicefine"),
    "lora": LoraLinear,
    "molora": MoLoraLinear,
    "hydralora": HydraLoraLinear,
}

# which parameter name belongs to which part (counts by part; the optimiser's groups)
PARTS = {"lora_A": "lora_A", "lora_B": "lora_B", "slice_W": "slice", "magnitude": "magnitude",
         "experts": "experts_P", "shared": "shared_p_s", "gamma_s": "gamma_s", "router": "router",
         "prompt": "prompt"}
MOE_PARTS = ("experts_P", "shared_p_s", "gamma_s", "router")
