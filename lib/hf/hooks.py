"""Forward hooks on Hugging Face transformers: find layers and sites, capture or replace outputs.

Layers are found by attribute path, so BERT/MiniLM, Llama/Qwen/Gemma/SmolLM, GPT-2 and GPT-NeoX
work. A *site* is a module per layer whose output is read or rewritten:

- ``attn``: the attention block's output before the residual add -- ``self_attn`` (Llama family),
  ``attention.output.dense`` (BERT/MiniLM), ``attn`` (GPT-2), ``attention`` (GPT-NeoX);
- ``mlp``: the MLP output before the residual add (``mlp``, BERT's ``output.dense``);
- ``block``: the whole layer's output (the residual stream after the layer);
- or a module path with ``{}`` for the layer index, e.g. ``encoder.layer.{}.attention.self``.

A module whose output is a tuple (attention blocks, older decoder layers) is handled through
:func:`output_tensor` / :func:`with_output`: the first member is the activation, the others are
kept. Forward hooks run in registration order, so a capture registered after a replacement sees
the replaced values. Every context manager removes its hooks on exit, also after an exception.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Mapping

from icmlkit.lib.core.errors import UsageError

LAYER_PATHS = ("encoder.layer", "model.layers", "model.decoder.layers", "transformer.h", "gpt_neox.layers",
               "transformer.layers", "layers", "h", "bert.encoder.layer", "roberta.encoder.layer",
               "model.model.layers")
SITE_PATHS = {
    "attn": ("self_attn", "attention.output.dense", "attn", "self_attention", "attention"),
    "mlp": ("mlp", "output.dense", "feed_forward", "ffn"),
    "block": ("",),
}
SITES = tuple(SITE_PATHS)


def get_module(obj, path: str):
    """``obj.a.0.b`` for ``path="a.0.b"`` (integers index into module lists); ``""`` is ``obj``."""
    for part in path.split(".") if path else ():
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


def find_layers(model, *, option: str = "site") -> list:
    """The list of transformer layers of ``model`` (the first known attribute path that exists)."""
    for path in LAYER_PATHS:
        try:
            layers = get_module(model, path)
        except (AttributeError, IndexError, TypeError):
            continue
        if hasattr(layers, "__len__") and len(layers) > 0:
            return list(layers)
    raise UsageError(f"cannot find the transformer layers of {type(model).__name__} (tried {', '.join(LAYER_PATHS)}); "
                     f"give --{option} as a module path with {{}} for the layer index")


def parse_layers(spec, n_layers: int, *, option: str = "layers") -> list[int]:
    """``3``, ``2,4``, ``-1``, ``all`` or a list of ints -> sorted unique 0-based layer indices.

    Negative indices count from the end; an index outside the model raises :class:`UsageError`
    (``option`` names the flag in the message).
    """
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
        except (TypeError, ValueError):
            raise UsageError(f"--{option}: {x!r} is not a layer index (give e.g. 3, 2,4 or all)") from None
        j = i + n_layers if i < 0 else i
        if not 0 <= j < n_layers:
            raise UsageError(f"--{option}: layer {i} does not exist; the model has {n_layers} (0..{n_layers - 1})")
        if j not in out:
            out.append(j)
    if not out:
        raise UsageError(f"--{option}: no layer given")
    return sorted(out)


def site_modules(model, layers: list[int], site: str = "attn", *, option: str = "site") -> dict[int, object]:
    """Map each layer index to the module whose output is the site's activation (see the module doc)."""
    if "{}" in site:
        out = {}
        for i in layers:
            try:
                out[i] = get_module(model, site.replace("{}", str(i)))
            except (AttributeError, IndexError, TypeError):
                raise UsageError(f"--{option} {site}: no module at {site.replace('{}', str(i))}") from None
        return out
    if site not in SITE_PATHS:
        raise UsageError(f"--{option} must be one of {', '.join(SITES)} or a module path with {{}}, not {site!r}")
    all_layers = find_layers(model, option=option)
    out = {}
    for i in layers:
        layer = all_layers[i]
        for path in SITE_PATHS[site]:
            try:
                out[i] = get_module(layer, path)
                break
            except AttributeError:
                continue
        else:
            raise UsageError(f"--{option} {site}: layer {i} ({type(layer).__name__}) has none of "
                             f"{', '.join(SITE_PATHS[site])}; give a module path with {{}}")
    return out


def output_tensor(output):
    """The activation in a module's output: the output itself, or the first member of a tuple."""
    return output[0] if isinstance(output, tuple) else output


def with_output(output, new):
    """``output`` with its activation replaced by ``new`` (a tuple keeps its other members)."""
    return (new,) + tuple(output[1:]) if isinstance(output, tuple) else new


@contextlib.contextmanager
def forward_hooks(modules: Mapping, make_hook: Callable) -> Iterator[list]:
    """Register ``make_hook(key)`` as a forward hook on each ``modules[key]``; removed on exit.

    A hook is called as ``hook(module, args, output)``; returning a value replaces the output.
    Yields the list of handles.
    """
    handles = []
    try:
        for key, mod in modules.items():
            hook = make_hook(key)
            if hook is not None:
                handles.append(mod.register_forward_hook(hook))
        yield handles
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def capture_outputs(modules: Mapping, transform: Callable | None = None, *, to_cpu: bool = False
                    ) -> Iterator[dict]:
    """Record the activation of each site at every forward pass while the context is open.

    Yields ``{key: [value per forward pass]}``; a value is the detached activation, or
    ``transform(key, activation)`` when ``transform`` is given (e.g. pooling with the batch's mask),
    moved to the CPU with ``to_cpu``.
    """
    store: dict = {key: [] for key in modules}

    def make(key):
        def hook(module, args, output):
            h = output_tensor(output).detach()
            v = transform(key, h) if transform is not None else h
            if to_cpu and hasattr(v, "cpu"):
                v = v.cpu()
            store[key].append(v)
        return hook

    with forward_hooks(modules, make):
        yield store


@contextlib.contextmanager
def replace_outputs(modules: Mapping, fn: Callable) -> Iterator[None]:
    """Rewrite each site's activation: ``fn(key, activation)`` returns the new tensor (None: keep).

    The new tensor takes the activation's place in the module's output (tuple members other than
    the first are kept), so later layers compute on it.
    """
    def make(key):
        def hook(module, args, output):
            new = fn(key, output_tensor(output))
            return None if new is None else with_output(output, new)
        return hook

    with forward_hooks(modules, make):
        yield
