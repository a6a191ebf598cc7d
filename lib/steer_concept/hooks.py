"""Hooking a steer into a Hugging Face transformer, and reading activations out of it.

Sites (per layer, found by attribute path so that BERT, Llama/Qwen/Gemma, GPT-2 and GPT-NeoX work):

- ``attn`` (default, as in the official LLM code): the attention block's output before the residual
  add -- ``self_attn`` (Llama family), ``attention.output.dense`` (BERT/MiniLM), ``attn`` (GPT-2),
  ``attention`` (GPT-NeoX);
- ``mlp``: the MLP output before the residual add (``mlp``, BERT's ``output.dense``);
- ``block``: the whole layer's output (the residual stream);
- or a module path with ``{}`` for the layer index, e.g. ``encoder.layer.{}.attention.self``.

A steering hook clones the site's output into float64, applies the layer's steps in order and
casts back to the model's dtype; a tuple output keeps its other members. Forward hooks run in
registration order, so a collecting hook registered after the steering hook sees steered values.
"""
from __future__ import annotations

import contextlib

from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.hf.hooks import capture_outputs, replace_outputs
from icmlkit.lib.hf.hooks import find_layers, parse_layers, site_modules  # noqa: F401 - steer's public names

POOLS = ("mean", "last", "cls", "all")


TOKENS = ("all", "generated")


@contextlib.contextmanager
def steering_hooks(modules: dict, steering, strength: float | None = None, *, tokens: str = "all",
                   clip: bool | None = None):
    """Register forward hooks applying ``steering``'s steps of each layer at its site module.

    The activation is cloned to float64, steered, and cast back to its dtype (no in-place edit).
    ``strength`` replaces every step's beta (beta is applied at each hooked layer); ``clip`` (not None)
    replaces every step's intermediate clipping. ``tokens="generated"`` steers generated tokens only, as
    the official LLM script (``min_token_index`` = the prompt length): a forward pass over more than one
    position (the prompt, under a key-value cache) is left as it is, a one-position pass (a new token) is
    steered -- so a one-token prompt is steered too, as there.
    """
    import dataclasses

    if tokens not in TOKENS:
        raise UsageError(f"--tokens must be one of {', '.join(TOKENS)}, not {tokens!r}")
    missing = [layer for layer in steering.layers if layer not in modules]
    if missing:
        raise UsageError(f"the steering file has steps for layers {missing} that are not hooked")
    steps = {layer: [st if clip is None else dataclasses.replace(st, clip=bool(clip)) for st in steering.steps_for(layer)]
             for layer in modules}
    hooked = {layer: mod for layer, mod in modules.items() if steps[layer]}

    def steer(layer, h):
        if tokens == "generated" and h.dim() >= 2 and h.shape[1] > 1:
            return None  # the prompt pass: untouched
        x = h.detach().clone()
        for st in steps[layer]:
            x = st.apply(x, strength)
        return x.to(h.dtype)

    with replace_outputs(hooked, steer):
        yield


class Encoder:
    """Run texts through a model and return site activations at ``layers`` (pooled per text) and the
    sentence embedding (masked mean of the last hidden state, L2-normalised when the model folder
    says so), optionally with a steering hooked in.

    ``pool``: mean (masked mean over tokens), last (last non-padding token), cls (first token) or all
    (every non-padding token as a row, with ``text_index``). Texts are batched by length for speed
    (deterministic order) and returned in input order.
    """

    def __init__(self, loaded, *, layers=(3,), site: str = "attn", pool: str = "mean", batch_size: int = 64,
                 max_length: int = 64, device="cpu"):
        if pool not in POOLS:
            raise UsageError(f"--pool must be one of {', '.join(POOLS)}, not {pool!r}")
        self.loaded = loaded
        self.model = loaded.model
        self.tok = loaded.tokenizer
        if "{}" in site:
            if str(layers).strip().lower() == "all":
                raise UsageError("--layers all needs a named --site (attn, mlp, block); list the layers for a module path")
            n_layers = 10 ** 6  # the module path itself is checked layer by layer
        else:
            n_layers = len(find_layers(self.model))
        self.layers = parse_layers(layers, n_layers)
        self.site = site
        self.pool = pool
        self.batch_size = int(batch_size)
        self.max_length = int(max_length)
        self.device = device
        self.modules = site_modules(self.model, self.layers, site)

    def config(self) -> dict:
        return {"model": self.loaded.name, "site": self.site, "pool": self.pool, "layers": self.layers,
                "max_length": self.max_length, "dtype": str(next(self.model.parameters()).dtype).replace("torch.", "")}

    def _pool(self, h, mask):
        import torch

        h = h.float()
        m = mask.to(h.dtype)
        if self.pool == "mean":
            return (h * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp_min(1)
        if self.pool == "cls":
            return h[:, 0]
        idx = torch.arange(mask.shape[1], device=mask.device)
        if self.pool == "last":
            last = (mask * idx).argmax(dim=1)
            return h[torch.arange(h.shape[0], device=h.device), last]
        return h[mask.bool()]  # all: token rows in (text, position) order

    def embed(self, texts: list[str], steering=None, strength: float | None = None, desc: str = "embed") -> dict:
        import numpy as np
        import torch

        from icmlkit.lib.core.console import progress

        order = sorted(range(len(texts)), key=lambda i: (-len(texts[i]), i))
        pooled, counts = [], []
        state = {}
        batches = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        ctx = steering_hooks(self.modules, steering, strength) if steering is not None else contextlib.nullcontext()
        # the capture is registered after the steering hooks, so it sees steered values
        with ctx, capture_outputs(self.modules, lambda layer, h: self._pool(h, state["mask"]), to_cpu=True) \
                as per_layer, torch.inference_mode():
            for idx in progress(batches, total=len(batches), desc=desc):
                enc = self.tok([texts[i] for i in idx], padding=True, truncation=True,
                               max_length=self.max_length, return_tensors="pt")
                enc = {k: v.to(self.device) for k, v in enc.items()}
                mask = enc["attention_mask"]
                state["mask"] = mask
                out = self.model(**enc)
                last = out.last_hidden_state.float()
                m = mask.to(last.dtype)
                emb = (last * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp_min(1)
                if self.loaded.normalize:
                    emb = torch.nn.functional.normalize(emb, dim=-1)
                pooled.append(emb.cpu())
                counts.append(mask.sum(1).cpu())
        inv = np.argsort(np.asarray(order))
        result = {}
        counts_t = torch.cat(counts).numpy()
        for layer in self.layers:
            rows = torch.cat(per_layer[layer]).numpy().astype(np.float32)
            if self.pool == "all":
                # rows come batch by batch in sorted-text order: regroup them in input order
                starts = np.cumsum(counts_t) - counts_t
                new_counts = counts_t[inv]
                new_starts = np.cumsum(new_counts) - new_counts
                take = np.repeat(starts[inv] - new_starts, new_counts) + np.arange(int(new_counts.sum()))
                result[f"layer_{layer}"] = rows[take]
            else:
                result[f"layer_{layer}"] = rows[inv]
        result["pooled"] = torch.cat(pooled).numpy().astype(np.float32)[inv]
        if self.pool == "all":
            result["text_index"] = np.repeat(np.arange(len(texts)), counts_t[inv]).astype(np.int64)
        return result
