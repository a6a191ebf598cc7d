"""Models and local training vectorised over clients (torch.func: vmap of grad over stacked
parameters)."""
from __future__ import annotations

import importlib

import torch
from torch import nn

from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.core.runtime import seeded


def build_model(spec: str, in_dim: int, n_classes: int, seed: int) -> nn.Module:
    """``logreg`` (one linear layer), ``mlp`` (in-64-64-C, ReLU) or ``module:factory`` (a callable
    ``(in_dim, n_classes) -> nn.Module``; no batch-norm or other state updated in forward)."""
    with seeded(seed, "init"):
        if spec == "logreg":
            return nn.Linear(in_dim, n_classes)
        if spec == "mlp":
            return nn.Sequential(nn.Linear(in_dim, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                 nn.Linear(64, n_classes))
        mod, _, fn = spec.partition(":")
        if not fn:
            raise UsageError(f"--model must be logreg, mlp or module:factory, not {spec!r}")
        try:
            factory = getattr(importlib.import_module(mod), fn)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"--model {spec!r}: cannot import ({exc})") from None
        model = factory(in_dim, n_classes)
        if not isinstance(model, nn.Module):
            raise UsageError(f"--model {spec!r}: the factory returned {type(model).__name__}, not a torch.nn.Module")
        return model


def init_params(model: nn.Module, device) -> dict[str, torch.Tensor]:
    return {k: v.detach().to(device=device, dtype=torch.float32).clone() for k, v in model.named_parameters()}


def _loss_fn(model):
    from torch.func import functional_call

    def loss(params, xb, yb, wb):
        logits = functional_call(model, params, (xb,))
        per = nn.functional.cross_entropy(logits, yb, reduction="none")
        return (per * wb).sum() / wb.sum().clamp_min(1e-12)

    return loss


def local_train(model: nn.Module, global_params: dict, X: torch.Tensor, Y: torch.Tensor, batches: torch.Tensor,
                weights: torch.Tensor, lr: float, mu: float = 0.0) -> dict:
    """E local epochs of SGD for every client at once.

    ``batches``: (K, S, B) indices into X/Y (-1 = padding; a step whose batch is all padding
    leaves that client unchanged), ``weights``: (K, S, B) sample weights. FedProx adds
    mu * (w - w_global) to the gradient. Returns the stacked (K, ...) parameters."""
    from torch.func import grad, vmap

    K, S, B = batches.shape
    params = {k: v.unsqueeze(0).expand(K, *v.shape).clone() for k, v in global_params.items()}
    g_fn = vmap(grad(_loss_fn(model)))
    for s in range(S):
        idx = batches[:, s]
        valid = idx >= 0
        active = valid.any(1)
        if not bool(active.any()):
            continue
        safe = idx.clamp_min(0)
        xb, yb = X[safe], Y[safe]
        wb = torch.where(valid, weights[:, s], torch.zeros_like(weights[:, s]))
        grads = g_fn(params, xb, yb, wb)
        step = active.to(torch.float32)
        for k in params:
            g = grads[k]
            if mu > 0:
                g = g + mu * (params[k] - global_params[k].unsqueeze(0))
            params[k] = params[k] - lr * step.view(K, *([1] * (g.dim() - 1))) * g
    return params


def aggregate(stacked: dict, weights: torch.Tensor) -> dict:
    """The server's weighted average sum_k p_k x_k (FedAvg form), in float64 then float32."""
    w = weights.to(torch.float64)
    return {k: torch.tensordot(w, v.to(torch.float64), dims=([0], [0])).to(torch.float32) for k, v in stacked.items()}


@torch.no_grad()
def group_accuracy(model: nn.Module, params: dict, X: torch.Tensor, Y: torch.Tensor, G: torch.Tensor, n_groups: int):
    """(n_groups,) float64 accuracy of the model on each group's test pool."""
    from torch.func import functional_call

    correct = torch.zeros(n_groups, dtype=torch.float64, device=X.device)
    total = torch.zeros(n_groups, dtype=torch.float64, device=X.device)
    for i in range(0, len(X), 4096):
        pred = functional_call(model, params, (X[i:i + 4096],)).argmax(-1)
        correct.index_add_(0, G[i:i + 4096], (pred == Y[i:i + 4096]).to(torch.float64))
        total.index_add_(0, G[i:i + 4096], torch.ones(len(pred), dtype=torch.float64, device=X.device))
    return (correct / total.clamp_min(1)).cpu()


@torch.no_grad()
def client_group_accuracy(model: nn.Module, stacked: dict, X: torch.Tensor, Y: torch.Tensor, G: torch.Tensor,
                          n_groups: int) -> torch.Tensor:
    """(K, n_groups) float64: the accuracy of each client's own model (row k of the stacked (K, ...)
    parameters) on each group's test pool (``--personalised``)."""
    K = next(iter(stacked.values())).shape[0]
    return torch.stack([group_accuracy(model, {n: v[k] for n, v in stacked.items()}, X, Y, G, n_groups)
                        for k in range(K)])
