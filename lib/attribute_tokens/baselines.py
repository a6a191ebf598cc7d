"""Baselines: Captum gradient x input, integrated gradients and feature ablation on the prompt's
input embeddings, AttnLRP through ``lxt`` (optional), and a random ranking for calibration.

The attributed function is f(e_P) = sum_{i in output span} log p(token_i | tokens < i) with the
generation held fixed; the prompt's embeddings e_P are the features (a token's score = the sum of
its embedding row's attributions, signed). IG's baseline is the zero embedding; feature ablation
replaces one prompt token at a time by the pad token's embedding. [reconstructed: the official
baselines live in flashtrace/attribution.py, which we do not copy.]
"""
from __future__ import annotations

from icmlkit.lib.core.errors import EnvironmentProblem, UsageError, require_module


def _forward_fn(model, ids, n_prompt: int, out_span: tuple):
    import torch

    emb_layer = model.get_input_embeddings()
    with torch.no_grad():
        full = emb_layer(torch.as_tensor(ids, dtype=torch.long, device=emb_layer.weight.device)[None])
    rest = full[:, n_prompt:].detach()
    o0, o1 = out_span
    targets = torch.as_tensor(ids[o0:o1 + 1], device=full.device)

    def f(prompt_emb):
        b = prompt_emb.shape[0]
        x = torch.cat([prompt_emb, rest.expand(b, -1, -1)], dim=1)
        logits = model(inputs_embeds=x, use_cache=False).logits.float()
        lp = torch.log_softmax(logits[:, o0 - 1:o1], dim=-1)
        return lp.gather(-1, targets[None, :, None].expand(b, -1, 1)).squeeze(-1).sum(-1)

    return f, full[:, :n_prompt].detach(), emb_layer


def captum_scores(model, ids, n_prompt: int, out_span: tuple, method: str, *, ig_steps: int = 16,
                  pad_id: int = 0, return_delta: bool = False):
    """Scores of the prompt tokens ([n_prompt] float tensor) by a Captum method."""
    import torch

    import warnings

    attr_mod = require_module("captum.attr", "attribute-tokens", "captum")
    f, x, emb_layer = _forward_fn(model, ids, n_prompt, out_span)
    x = x.clone().requires_grad_(method != "ablation")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _captum(attr_mod, f, x, emb_layer, n_prompt, method, ig_steps, pad_id, return_delta)


def _captum(attr_mod, f, x, emb_layer, n_prompt, method, ig_steps, pad_id, return_delta):
    import torch

    delta = None
    if method == "gradxinput":
        a = attr_mod.InputXGradient(f).attribute(x)
    elif method == "ig":
        ig = attr_mod.IntegratedGradients(f)
        res = ig.attribute(x, baselines=torch.zeros_like(x), n_steps=ig_steps, internal_batch_size=ig_steps,
                           return_convergence_delta=return_delta)
        a, delta = (res if return_delta else (res, None))
    elif method == "ablation":
        with torch.no_grad():
            pad = emb_layer(torch.tensor([pad_id], device=x.device))[0]
        mask = torch.arange(n_prompt, device=x.device)[None, :, None].expand_as(x)
        a = attr_mod.FeatureAblation(f).attribute(x, baselines=pad.expand_as(x), feature_mask=mask,
                                                  perturbations_per_eval=16)
        a = a / x.shape[-1]  # every embedding entry of a token carries the token's whole effect
    else:
        raise UsageError(f"unknown attribution baseline {method!r}")
    scores = a[0].sum(-1).detach().double().cpu()
    if return_delta:
        return scores, (None if delta is None else float(delta.sum()))
    return scores


def attnlrp_scores(*_args, **_kw):
    """AttnLRP needs the optional ``lxt`` package (not installable here)."""
    require_module("lxt", "attribute-tokens", "lxt")
    raise EnvironmentProblem("AttnLRP through lxt is not wired up in this build (lxt 2.1 patches model code per "
                             "architecture); use --method flashtrace or a Captum baseline")


def random_scores(n: int, seed: int, key: str):
    import torch

    from icmlkit.lib.core.runtime import numpy_rng

    return torch.as_tensor(numpy_rng(seed, f"random/{key}").random(n))
