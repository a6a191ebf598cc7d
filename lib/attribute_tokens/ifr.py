"""The IFR operator (Information Flow Routes, Ferrando & Voita 2024) and FlashTrace's span-wise and
recursive aggregation (Pan et al., ICML 2026), on Llama / Qwen2 / Qwen3 decoders.

Steps (method sheet attribute-tokens.md):

1. :func:`capture` -- one forward pass whose hooks cache, per layer l, the residual before attention
   ``x_prev``, the attention output (``x_mid = x_prev + attn_out``), the MLP output and the block
   output ``x_out``; q and k after the model's own q/k norms and RoPE (for the attention
   recomputation) or the eager kernel's probabilities; the per-head values with the pre-attention
   norm's scale folded in (``v_j = s_j (x_j W_V diag(w))^T + b``, ``s_j = 1/rms(x_j)``), and the
   output-projection blocks W_O^h.
2. :func:`sink_probs` -- attention probabilities of a chunk of sink rows (recomputed from q, k with
   the kv heads repeated for GQA, fp32 softmax, causal mask), 32 sinks at a time.
3. :func:`span_shares` -- span-wise aggregation: for sinks S with weights w (normalised),
   ``x_S = sum_i w_i x_mid_i``, ``r_S = sum_i w_i x_prev_i``, ``abar_j^h = sum_i w_i alpha_ij^h``;
   ``e_l(j) = sum_h prox(abar_j^h v_j^h W_O^h, x_S) / (sum_{j,h} prox(.) + prox(r_S, x_S))``
   with ``prox(a, x) = max(0, |x|_1 - |x - a|_1)``, in chunks of 128 sources, one layer at a time;
   ``T(j) = sum_l e_l(j)``.
4. :func:`tokenwise_rows` -- the token-wise IFR baseline: the same shares for every sink on its
   own (cost M times the span's); its mean is NOT the span aggregate (proximity is non-linear).
5. :func:`recursive` -- hops: hop 0 on the output span (stop tokens weighted 0); hop h >= 1 with
   the generated tokens as sinks weighted by the previous hop's mass on them; prompt mass added
   times the running "thinking ratio"; per-hop vectors and ratios returned.

Never L x H x N^2 in memory on the recompute path: at most H x 32 x N probabilities and
H x 128 x d contributions (token-wise: H x 32 x 128 x d) are computed at once; between hops,
:class:`HopMemo` keeps up to 2 GiB of the contributions and attention rows that the next hop reads
again. Accumulation in float32 (float64 when the model runs in float64).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from icmlkit.lib.core.errors import InputError, UsageError

SUPPORTED = ("llama", "qwen2", "qwen3")


@dataclass
class LayerCache:
    x_prev: "object"          # [N, d]
    attn_out: "object"        # [N, d]
    mlp_out: "object"         # [N, d]
    x_out: "object"           # [N, d]
    q: "object"               # [Hq, N, dh] after q_norm and RoPE
    k: "object"               # [Hkv, N, dh] after k_norm and RoPE
    v: "object"               # [Hkv, N, dh] values from the folded norm
    w_o: "object"             # [Hq, dh, d] output-projection blocks (W_O^h, transposed for x @ W)
    o_bias: "object"          # [d] or None
    probs: "object" = None    # [Hq, N, N] (eager mode only)

    @property
    def x_mid(self):
        return self.x_prev + self.attn_out


@dataclass
class ModelCache:
    layers: list
    n_rep: int
    scaling: float
    n_tokens: int
    dtype: "object" = None
    extra: dict = field(default_factory=dict)


def check_supported(model) -> None:
    """Refuse architectures the operator does not cover (a usage error naming the model type)."""
    cfg = getattr(model, "config", None)
    mt = getattr(cfg, "model_type", None)
    if mt not in SUPPORTED:
        raise UsageError(f"model type {mt!r} is not supported; attribute-tokens reads Llama, Qwen2 or Qwen3 "
                         "decoders (q/k/v/o projections, RMSNorm or LayerNorm, RoPE)")
    layer_types = getattr(cfg, "layer_types", None) or []
    if any("sliding" in str(t) for t in layer_types) or (getattr(cfg, "use_sliding_window", False)
                                                         and getattr(cfg, "sliding_window", None)):
        raise UsageError("sliding-window attention layers are not supported by the IFR recomputation")
    layers = _layers(model)
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        if not hasattr(layers[0].self_attn, name):
            raise UsageError(f"the model's attention has no {name}; not a supported decoder")


def _layers(model):
    base = getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if layers is None:
        raise UsageError("the model has no .model.layers; not a supported decoder")
    return layers


def fold_norm(norm, x):
    """The pre-attention norm as ``norm(x) = s[:, None] * (x - mu) * w + b`` with per-token scale
    ``s`` (1/rms for RMSNorm, 1/std for LayerNorm); returns (s, x_centered, w, b) in x's dtype.

    Folding ``w`` into W_V and ``s`` into the value path makes the head outputs linear in the
    residual per token, so the parts add up to ``x_mid - x_prev`` (method sheet: linearize_norm)."""
    import torch

    w = norm.weight.to(x.dtype)
    name = type(norm).__name__
    if isinstance(norm, torch.nn.LayerNorm):
        mu = x.mean(-1, keepdim=True)
        xc = x - mu
        s = torch.rsqrt(xc.pow(2).mean(-1) + norm.eps)
        b = norm.bias.to(x.dtype) if norm.bias is not None else None
        return s, xc, w, b
    if "RMSNorm" in name:
        eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
        s = torch.rsqrt(x.pow(2).mean(-1) + eps)
        return s, x, w, None
    raise UsageError(f"pre-attention norm {name} is not RMSNorm or LayerNorm; not supported")


def folded_values(layer, x_prev, dtype):
    """v_j^h with the norm folded in: [Hkv, N, dh]."""
    attn = layer.self_attn
    s, xc, w, b = fold_norm(layer.input_layernorm, x_prev.to(dtype))
    wv = attn.v_proj.weight.to(dtype)                      # [Hkv*dh, d]
    wv_fold = wv * w[None, :]                              # W_V diag(w)
    v = s[:, None] * (xc @ wv_fold.T)
    if b is not None:
        v = v + b @ wv.T
    if attn.v_proj.bias is not None:
        v = v + attn.v_proj.bias.to(dtype)
    dh = attn.head_dim
    return v.view(v.shape[0], -1, dh).transpose(0, 1).contiguous()


def _set_eager(model):
    setter = getattr(model, "set_attn_implementation", None)
    if callable(setter):
        try:
            setter("eager")
            return
        except Exception:  # noqa: BLE001 - fall back to the config field
            pass
    model.config._attn_implementation = "eager"


def capture(model, input_ids, attention: str = "recompute") -> ModelCache:
    """Step 1: one forward pass over ``input_ids`` (1-D, one sequence) caching every layer's parts."""
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    check_supported(model)
    layers = _layers(model)
    param = next(model.parameters())
    dtype = torch.float64 if param.dtype == torch.float64 else torch.float32
    ids = torch.as_tensor(input_ids, dtype=torch.long, device=param.device).view(1, -1)
    n = ids.shape[1]
    store: dict = {i: {} for i in range(len(layers))}
    handles = []
    old_impl = getattr(model.config, "_attn_implementation", None)
    if attention == "eager" and old_impl != "eager":
        _set_eager(model)

    def pre_layer(i):
        def hook(mod, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            store[i]["x_prev"] = x[0].detach()
            store[i]["pe"] = kwargs.get("position_embeddings")
        return hook

    def post(i, key):
        def hook(mod, args, out):
            t = out[0] if isinstance(out, tuple) else out
            store[i][key] = t[0].detach()
            if key == "attn_out" and isinstance(out, tuple) and len(out) > 1 and out[1] is not None:
                store[i]["probs"] = out[1][0].detach()
        return hook

    try:
        for i, layer in enumerate(layers):
            handles.append(layer.register_forward_pre_hook(pre_layer(i), with_kwargs=True))
            handles.append(layer.register_forward_hook(post(i, "x_out")))
            handles.append(layer.self_attn.register_forward_hook(post(i, "attn_out")))
            handles.append(layer.mlp.register_forward_hook(post(i, "mlp_out")))
            handles.append(layer.self_attn.q_proj.register_forward_hook(post(i, "q_raw")))
            handles.append(layer.self_attn.k_proj.register_forward_hook(post(i, "k_raw")))
        with torch.inference_mode():
            # the decoder body only: the hooks read every layer, nothing reads the logits, so the LM
            # head's N x vocab product (~15 % of a forward pass on a 1.5B model) is not computed
            getattr(model, "model", model)(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
        if attention == "eager" and old_impl != "eager" and old_impl is not None:
            model.config._attn_implementation = old_impl
            setter = getattr(model, "set_attn_implementation", None)
            if callable(setter):
                try:
                    setter(old_impl)
                except Exception:  # noqa: BLE001
                    pass

    out = []
    attn0 = layers[0].self_attn
    n_rep = int(getattr(attn0, "num_key_value_groups", 1))
    scaling = float(getattr(attn0, "scaling", attn0.head_dim ** -0.5))
    with torch.inference_mode():
        for i, layer in enumerate(layers):
            st, attn = store[i], layer.self_attn
            dh = attn.head_dim
            q = st["q_raw"].view(n, -1, dh)
            k = st["k_raw"].view(n, -1, dh)
            if hasattr(attn, "q_norm"):
                q = attn.q_norm(q)
            if hasattr(attn, "k_norm"):
                k = attn.k_norm(k)
            cos, sin = st["pe"]
            q, k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
            w = attn.o_proj.weight.to(dtype)                 # [d, Hq*dh]
            hq = w.shape[1] // dh
            w_o = w.T.reshape(hq, dh, w.shape[0]).contiguous()
            probs = st.get("probs")
            if attention == "eager":
                if probs is None:
                    raise UsageError("--attention eager: the model returned no attention probabilities")
                probs = probs.to(dtype)
            out.append(LayerCache(
                x_prev=st["x_prev"].to(dtype), attn_out=st["attn_out"].to(dtype), mlp_out=st["mlp_out"].to(dtype),
                x_out=st["x_out"].to(dtype), q=q[0].to(dtype), k=k[0].to(dtype),
                v=folded_values(layer, st["x_prev"], dtype), w_o=w_o,
                o_bias=None if attn.o_proj.bias is None else attn.o_proj.bias.to(dtype),
                probs=probs if attention == "eager" else None))
    return ModelCache(layers=out, n_rep=n_rep, scaling=scaling, n_tokens=n, dtype=dtype)


def sink_probs(cache: ModelCache, layer: LayerCache, sinks):
    """Step 2: attention probabilities of the sink rows ``sinks`` (1-D long): [Hq, B, N]."""
    import torch

    if layer.probs is not None:
        return layer.probs[:, sinks, :]
    hkv, n, dh = layer.k.shape
    b = len(sinks)
    # GQA without repeating k: query head h reads kv head h // n_rep, so the query heads of one kv
    # head are stacked as rows of one matmul
    q = layer.q[:, sinks].reshape(hkv, cache.n_rep * b, dh)
    s = torch.matmul(q, layer.k.transpose(1, 2)).view(-1, b, n) * cache.scaling
    future = torch.arange(n, device=s.device)[None, :] > sinks[:, None]
    s = s.masked_fill(future[None], float("-inf"))
    return torch.softmax(s.float(), dim=-1).to(layer.q.dtype)


def prox(a, x):
    """prox(a, x) = max(0, |x|_1 - |x - a|_1) over the last axis (broadcasting)."""
    return (x.abs().sum(-1) - (x - a).abs().sum(-1)).clamp_min(0)


def _head_values(cache: ModelCache, layer: LayerCache):
    return layer.v.repeat_interleave(cache.n_rep, dim=0) if cache.n_rep > 1 else layer.v


MEMO_BYTES = 2 << 30


class HopMemo:
    """What one hop computes and the next hop would compute again, kept for it: per (layer, source
    chunk) the head contributions ``u = v W_O`` (they do not depend on the sinks), and per (layer,
    sink chunk) the attention rows (reused when the next hop's chunk holds the same sinks: hop h >= 2,
    or an output span that is all of G). At most ``limit`` bytes (default 2 GiB); what does not fit
    is recomputed, so the numbers are the same either way."""

    def __init__(self, limit: int | None = None):
        self.limit, self.used, self.store = MEMO_BYTES if limit is None else limit, 0, {}

    def get(self, key, make, check=None):
        """The value stored under ``key`` (when its ``check`` tensor equals the stored one), else
        ``make()``, stored while the budget allows."""
        import torch

        hit = self.store.get(key)
        if hit is not None and (check is None or torch.equal(hit[0], check)):
            return hit[1]
        val = make()
        nb = val.numel() * val.element_size()
        if hit is None and self.used + nb <= self.limit:
            self.store[key] = (check, val)
            self.used += nb
        return val

    def freeze(self) -> None:
        """Store nothing more (before the last hop: what it computes is not read again)."""
        self.limit = self.used


def alpha_bar(cache: ModelCache, layer: LayerCache, sinks, weights, sink_chunk: int = 32, *, memo=None, li=None):
    """sum_i w_i alpha_ij^h over the sinks, 32 sink rows at a time: [Hq, N]. ``memo``
    (:class:`HopMemo`, with the layer index ``li``) keeps the attention rows for the next hop."""
    import torch

    hq = layer.q.shape[0]
    acc = torch.zeros(hq, cache.n_tokens, dtype=layer.q.dtype, device=layer.q.device)
    nz = weights != 0  # sinks of weight 0 (stop tokens, tokens a hop gave no mass) add nothing
    sinks, weights = sinks[nz], weights[nz]
    for a in range(0, len(sinks), sink_chunk):
        idx = sinks[a:a + sink_chunk]
        if memo is None:
            probs = sink_probs(cache, layer, idx)
        else:
            probs = memo.get(("probs", li, a), lambda: sink_probs(cache, layer, idx), check=idx)
        acc += torch.einsum("hbn,b->hn", probs, weights[a:a + sink_chunk])
    return acc


def span_shares(cache: ModelCache, sinks, weights=None, *, chunk_tokens: int = 128, sink_chunk: int = 32,
                threshold: float = 0.0, memo: HopMemo | None = None):
    """Step 3: per-layer token shares e_l(j) of the (weighted) span: returns (T [N], E [L, N],
    residual share [L]). ``weights`` default to 1 (plain sums); they are normalised to sum 1.
    ``memo``: a :class:`HopMemo` shared by the hops of one recursion (same numbers, less work)."""
    import torch

    dt = cache.dtype
    sinks = torch.as_tensor(sinks, dtype=torch.long)
    w = torch.ones(len(sinks), dtype=dt) if weights is None else torch.as_tensor(weights, dtype=dt)
    if len(sinks) == 0 or float(w.sum()) <= 0:
        raise UsageError("the sink span is empty or all its weights are 0")
    w = w / w.sum()
    n = cache.n_tokens
    E = torch.zeros(len(cache.layers), n, dtype=dt)
    R = torch.zeros(len(cache.layers), dtype=dt)
    with torch.inference_mode():
        for li, layer in enumerate(cache.layers):
            x_s = w @ layer.x_mid[sinks]
            r_s = w @ layer.x_prev[sinks]
            abar = alpha_bar(cache, layer, sinks, w, sink_chunk, memo=memo, li=li)
            v = _head_values(cache, layer)
            tok = torch.zeros(n, dtype=dt)
            for a in range(0, n, chunk_tokens):
                def head_u(a=a):
                    return torch.einsum("hnk,hkd->hnd", v[:, a:a + chunk_tokens], layer.w_o)
                u = head_u() if memo is None else memo.get(("u", li, a), head_u)
                c = abar[:, a:a + chunk_tokens, None] * u
                p = prox(c, x_s)
                if threshold > 0:
                    p = torch.where(p < threshold, torch.zeros_like(p), p)
                tok[a:a + chunk_tokens] = p.sum(0)
            rest = prox(r_s, x_s)
            if layer.o_bias is not None:
                rest = rest + prox(layer.o_bias, x_s)
            denom = tok.sum() + rest
            if float(denom) > 0:
                E[li] = tok / denom
                R[li] = rest / denom
    return E.sum(0), E, R


def tokenwise_rows(cache: ModelCache, sinks, *, chunk_tokens: int = 128, sink_chunk: int = 32,
                   threshold: float = 0.0):
    """Step 4: token-wise IFR, one row per sink: [M, N] shares summed over layers."""
    import torch

    dt = cache.dtype
    sinks = torch.as_tensor(sinks, dtype=torch.long)
    n, m = cache.n_tokens, len(sinks)
    rows = torch.zeros(m, n, dtype=dt)
    with torch.inference_mode():
        for layer in cache.layers:
            v = _head_values(cache, layer)
            for a in range(0, m, sink_chunk):
                idx = sinks[a:a + sink_chunk]
                probs = sink_probs(cache, layer, idx)                       # [H, B, N]
                x_b, r_b = layer.x_mid[idx], layer.x_prev[idx]              # [B, d]
                tok = torch.zeros(len(idx), n, dtype=dt)
                for c0 in range(0, n, chunk_tokens):
                    u = torch.einsum("hnk,hkd->hnd", v[:, c0:c0 + chunk_tokens], layer.w_o)  # [H, C, d]
                    c = probs[:, :, c0:c0 + chunk_tokens, None] * u[:, None]                 # [H, B, C, d]
                    p = prox(c, x_b[None, :, None, :])
                    if threshold > 0:
                        p = torch.where(p < threshold, torch.zeros_like(p), p)
                    tok[:, c0:c0 + chunk_tokens] = p.sum(0)
                rest = prox(r_b, x_b)
                if layer.o_bias is not None:
                    rest = rest + prox(layer.o_bias[None], x_b)
                denom = tok.sum(-1) + rest
                ok = denom > 0
                tok[ok] = tok[ok] / denom[ok, None]
                tok[~ok] = 0
                rows[a:a + sink_chunk] += tok
    return rows


@dataclass
class HopResult:
    final: "object"            # [N] final scores (prompt positions filled, others 0)
    hops: list                 # per-hop masked vectors T_h, each [N]
    ratios: list               # thinking ratios ratio_0 .. ratio_H


def recursive(cache: ModelCache, *, prompt_len: int, gen_span: tuple, output_span: tuple, stop_mask, hops: int = 1,
              chunk_tokens: int = 128, sink_chunk: int = 32, threshold: float = 0.0) -> HopResult:
    """Step 5: recursive attribution.

    ``prompt_len``: P = positions [0, prompt_len); ``gen_span`` = (g0, g1) inclusive: G, the
    generated reasoning and answer; ``output_span`` inclusive inside G; ``stop_mask`` [N] bool:
    stop tokens, template / special tokens (weighted 0 as sinks and masked from every vector).
    Hop 0: T_0 = shares of the output span; ratio_0 = T_0(G) / sum T_0. Hop h >= 1: sinks = G with
    weights T_{h-1}|_G; final prompt scores = T_0|_P + sum_h ratio_{h-1} T_h|_P;
    ratio_h = ratio_{h-1} T_h(G) / sum T_h."""
    import torch

    n = cache.n_tokens
    g0, g1 = gen_span
    o0, o1 = output_span
    stop = torch.as_tensor(stop_mask, dtype=torch.bool)
    keep = ~stop & (torch.arange(n) <= g1)
    in_p = torch.arange(n) < prompt_len
    in_g = (torch.arange(n) >= g0) & (torch.arange(n) <= g1)
    kw = dict(chunk_tokens=chunk_tokens, sink_chunk=sink_chunk, threshold=threshold,
              memo=HopMemo() if hops > 0 else None)

    sinks = torch.arange(o0, o1 + 1)
    w = (~stop[sinks]).to(cache.dtype)
    if float(w.sum()) == 0:  # an output span made only of stop tokens: plain sums
        w = torch.ones(len(sinks), dtype=cache.dtype)
    t, _, _ = span_shares(cache, sinks, w, **kw)
    t = torch.where(keep, t, torch.zeros_like(t))
    vecs = [t]
    tot = float(t.sum())
    ratio = float(t[in_g].sum()) / tot if tot > 0 else 0.0
    ratios = [ratio]
    final = torch.where(in_p, t, torch.zeros_like(t))
    gsinks = torch.arange(g0, g1 + 1)
    for k in range(hops):
        if k == hops - 1:
            kw["memo"].freeze()
        wg = vecs[-1][gsinks]
        if float(wg.sum()) <= 0 or ratio <= 0:
            vecs.append(torch.zeros_like(t))
            ratios.append(0.0)
            ratio = 0.0
            continue
        th, _, _ = span_shares(cache, gsinks, wg, **kw)
        th = torch.where(keep, th, torch.zeros_like(th))
        final = final + ratio * torch.where(in_p, th, torch.zeros_like(th))
        tot = float(th.sum())
        ratio = ratio * (float(th[in_g].sum()) / tot if tot > 0 else 0.0)
        vecs.append(th)
        ratios.append(ratio)
    return HopResult(final=final, hops=vecs, ratios=ratios)


def check_input_ids(input_ids, vocab_size: int, where: str = "input") -> None:
    ids = list(input_ids)
    if not ids:
        raise InputError("no tokens", where)
    if min(ids) < 0 or max(ids) >= vocab_size:
        raise InputError(f"token ids outside the vocabulary (0..{vocab_size - 1})", where)
