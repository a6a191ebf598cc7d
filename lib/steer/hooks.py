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

LAYER_PATHS = ("encoder.layer", "model.layers", "model.decoder.layers", "transformer.h", "gpt_neox.layers",
               "transformer.layers", "layers", "h", "bert.encoder.layer", "roberta.encoder.layer")
SITE_PATHS = {
    "attn": ("self_attn", "attention.output.dense", "attn", "self_attention", "attention"),
    "mlp": ("mlp", "output.dense", "feed_forward", "ffn"),
    "block": ("",),
}
SITES = tuple(SITE_PATHS)
POOLS = ("mean", "last", "cls", "all")


def _get(obj, path: str):
    for part in path.split(".") if path else ():
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


def find_layers(model) -> list:
    """The list of transformer layers of ``model`` (the first known attribute path that exists)."""
    for path in LAYER_PATHS:
        try:
            layers = _get(model, path)
        except (AttributeError, IndexError):
            continue
        if hasattr(layers, "__len__") and len(layers) > 0:
            return list(layers)
    raise UsageError(f"cannot find the transformer layers of {type(model).__name__} (tried {', '.join(LAYER_PATHS)}); "
                     "give --site as a module path with {} for the layer index")


def parse_layers(spec, n_layers: int) -> list[int]:
    """``3``, ``2,4``, ``-1`` or ``all`` -> sorted 0-based layer indices, checked against the model."""
    if isinstance(spec, (list, tuple)):
        items = list(spec)
    elif str(spec).strip().lower() == "all":
        return list(range(n_layers))
    else:
        items = [x for x in str(spec).replace(" ", "").split(",") if x]
    out = []
    for x in items:
        try:
            i = int(x)
        except ValueError:
            raise UsageError(f"--layers: {x!r} is not a layer index (give e.g. 3, 2,4 or all)") from None
        j = i + n_layers if i < 0 else i
        if not 0 <= j < n_layers:
            raise UsageError(f"--layers: layer {i} does not exist; the model has {n_layers} (0..{n_layers - 1})")
        if j not in out:
            out.append(j)
    if not out:
        raise UsageError("--layers: no layer given")
    return sorted(out)


def site_modules(model, layers: list[int], site: str = "attn") -> dict[int, object]:
    """Map each layer index to the module whose output is the site's activation."""
    if "{}" in site:
        out = {}
        for i in layers:
            try:
                out[i] = _get(model, site.replace("{}", str(i)))
            except (AttributeError, IndexError):
                raise UsageError(f"--site {site}: no module at {site.replace('{}', str(i))}") from None
        return out
    if site not in SITE_PATHS:
        raise UsageError(f"--site must be one of {', '.join(SITES)} or a module path with {{}}, not {site!r}")
    all_layers = find_layers(model)
    out = {}
    for i in layers:
        layer = all_layers[i]
        for path in SITE_PATHS[site]:
            try:
                out[i] = _get(layer, path)
                break
            except AttributeError:
                continue
        else:
            raise UsageError(f"--site {site}: layer {i} ({type(layer).__name__}) has none of "
                             f"{', '.join(SITE_PATHS[site])}; give a module path with {{}}")
    return out


def _main(output):
    return output[0] if isinstance(output, tuple) else output


def _replace(output, new):
    return (new,) + tuple(output[1:]) if isinstance(output, tuple) else new


@contextlib.contextmanager
def steering_hooks(modules: dict, steering, strength: float | None = None):
    """Register forward hooks applying ``steering``'s steps of each layer at its site module.

    The activation is cloned to float64, steered, and cast back to its dtype (no in-place edit).
    ``strength`` replaces every step's beta (beta is applied at each hooked layer).
    """
    handles = []

    def make(layer):
        steps = steering.steps_for(layer)

        def hook(module, args, output):
            h = _main(output)
            x = h.detach().clone()
            for st in steps:
                x = st.apply(x, strength)
            return _replace(output, x.to(h.dtype))

        return hook

    missing = [layer for layer in steering.layers if layer not in modules]
    if missing:
        raise UsageError(f"the steering file has steps for layers {missing} that are not hooked")
    try:
        for layer, mod in modules.items():
            if steering.steps_for(layer):
                handles.append(mod.register_forward_hook(make(layer)))
        yield
    finally:
        for h in handles:
            h.remove()


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
        per_layer = {i: [] for i in self.layers}
        pooled, counts = [], []
        state = {}

        def collector(layer):
            def hook(module, args, output):
                per_layer[layer].append(self._pool(_main(output), state["mask"]).cpu())
            return hook

        batches = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        ctx = steering_hooks(self.modules, steering, strength) if steering is not None else contextlib.nullcontext()
        handles = []
        with ctx, torch.inference_mode():
            try:
                for layer, mod in self.modules.items():
                    handles.append(mod.register_forward_hook(collector(layer)))
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
            finally:
                for h in handles:
                    h.remove()
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
