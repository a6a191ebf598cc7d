"""Parity: train-operator's FuncAttn against the official code (xjffff/FUNCATTN @ c0c7ce7, run in a scratch
folder; fixture in tests/data/parity/train-operator/, see its README): the layer (3x3 Conv2d and pointwise
projections), the core (steps 4-6), the few-shot map, and the whole network (FuncAttnNet with 3x3 Conv2d
projections = the official ``Functional_Attention_Structured_Mesh_2D.Model``, same weights, one forward,
unified and raw-coordinate position features). Tolerance 1e-10 in float64."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from icmlkit.lib.train_operator.data import grid_coords
from icmlkit.lib.train_operator.fewshot import point_bases, sliced_map
from icmlkit.lib.train_operator.nets import FuncAttnBlock, FuncAttnNet, basis_transform

FIX = Path(__file__).parent / "data" / "parity" / "train-operator"
TOL = 1e-10


def _load(name: str) -> dict:
    with np.load(FIX / f"{name}.npz") as d:
        return {k: d[k] for k in d.files}


def _t(a) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def _block(d: dict, conv: bool) -> FuncAttnBlock:
    """Our block with the official layer's weights (the per-head a filled with the official scalar alpha)."""
    heads, k = int(d["heads"]) if "heads" in d else 2, 8
    blk = FuncAttnBlock(16, heads, k, conv=conv).double()
    w = {n[2:]: _t(v) for n, v in d.items() if n.startswith("w.")}
    with torch.no_grad():
        for ours, off in (("px", "in_project_x"), ("pf", "in_project_fx")):
            layer = getattr(blk.proj, ours)
            layer.weight.copy_(w[f"{off}.weight"] if conv else w[f"{off}.weight"][:, :, 0, 0])
            layer.bias.copy_(w[f"{off}.bias"])
        blk.proj.lin.weight.copy_(w["in_project_basis.weight"])
        blk.proj.lin.bias.copy_(w["in_project_basis.bias"])
        blk.proj.tau.copy_(w["temperature"])
        _core_weights(blk, w)
    return blk


def _core_weights(blk: FuncAttnBlock, w: dict) -> None:
    with torch.no_grad():
        blk.wq.weight.copy_(w["to_q.weight"])
        blk.wk.weight.copy_(w["to_k.weight"])
        blk.wv.weight.copy_(w["to_v.weight"])
        blk.a.fill_(float(w["alpha"]))
        blk.out.weight.copy_(w["to_out.0.weight"])
        blk.out.bias.copy_(w["to_out.0.bias"])


def _core(blk: FuncAttnBlock, T: torch.Tensor, W: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 4-6: (C V per head, out = Linear(W C V) with the heads joined)."""
    O = blk.mix(blk.wq(T), blk.wk(T), blk.wv(T))
    B, H, n, _ = W.shape
    y = torch.einsum("bhnk,bhkd->bhnd", W, O).transpose(1, 2).reshape(B, n, -1)
    return O, blk.out(y)


@pytest.mark.parametrize("name,conv", [("layer_conv3_alpha0", True), ("layer_conv3_alpha_m1_temps", True),
                                       ("layer_conv1_linear_alpha1e-3", False)])
def test_layer_matches_official(name, conv):
    d = _load(name)
    assert int(d["kernel"]) == (3 if conv else 1)
    blk = _block(d, conv)
    grid = (int(d["H"]), int(d["W"]))
    with torch.no_grad():
        W, f = blk.proj(_t(d["x"]), grid)
        _, out = _core(blk, basis_transform(W, f), W)
    np.testing.assert_allclose(out.numpy(), d["out"], rtol=0, atol=TOL)


@pytest.mark.parametrize("name", ["core_alpha0", "core_alpha_m6_illcond"])
def test_core_matches_official(name):
    d = _load(name)
    blk = FuncAttnBlock(16, 2, 8).double()
    _core_weights(blk, {n[2:]: _t(v) for n, v in d.items() if n.startswith("w.")})
    with torch.no_grad():
        O, out = _core(blk, _t(d["slice_token"]), _t(d["slice_weights"]))
    np.testing.assert_allclose(O.numpy(), d["out_slice_token"], rtol=0, atol=TOL)
    np.testing.assert_allclose(out.numpy(), d["out"], rtol=0, atol=TOL)


def test_few_shot_map_matches_official():
    """Slice weights softmax(Lin(K) / tau) over the context points, then the sliced ridge map with V = the
    raw y, as the official Few-Shot-Regression FuncAttn."""
    d = _load("fewshot_funcattn")
    logits = _t(d["K"]) @ _t(d["w.slice.weight"]).T + _t(d["w.slice.bias"])
    W = point_bases(logits, _t(d["w.temperature"]))
    np.testing.assert_allclose(W.numpy(), d["slice_weights"], rtol=0, atol=TOL)
    out = sliced_map(_t(d["Q"]), _t(d["K"]), _t(d["yc"]), W, float(d["ridge"]))
    np.testing.assert_allclose(out.numpy(), d["out"], rtol=0, atol=TOL)


_BLOCK_NAMES = {"ln1": "ln_1", "proj.px": "Attn.in_project_x", "proj.pf": "Attn.in_project_fx",
                "proj.lin": "Attn.in_project_basis", "out": "Attn.to_out.0", "ln2": "ln_2",
                "mlp.0": "mlp.linear_pre.0", "mlp.2": "mlp.linear_post"}


def _net_from_official(d: dict, pos: str, layers: int = 2, heads: int = 2) -> FuncAttnNet:
    """FuncAttnNet (3x3 Conv2d projections) with the official whole Model's weights: its preprocess MLP is
    our input MLP, its last block's ln_3 / mlp2 our final LN / head, its scalar alpha fills our per-head a."""
    net = FuncAttnNet(1, 1, 2, width=16, heads=heads, layers=layers, bases=8, mlp_ratio=1.0, conv=True,
                      pos=pos).double()
    w = {n[2:]: _t(v) for n, v in d.items() if n.startswith("w.")}
    sd = {"pre.0.weight": w["preprocess.linear_pre.0.weight"], "pre.0.bias": w["preprocess.linear_pre.0.bias"],
          "pre.2.weight": w["preprocess.linear_post.weight"], "pre.2.bias": w["preprocess.linear_post.bias"]}
    for i in range(layers):
        b = f"blocks.{i}."
        for ours, off in _BLOCK_NAMES.items():
            sd[f"{b}{ours}.weight"] = w[f"{b}{off}.weight"]
            sd[f"{b}{ours}.bias"] = w[f"{b}{off}.bias"]
        for q in "qkv":
            sd[f"{b}w{q}.weight"] = w[f"{b}Attn.to_{q}.weight"]
        sd[f"{b}proj.tau"] = w[f"{b}Attn.temperature"]
        sd[f"{b}a"] = torch.full((1, heads, 1, 1), float(w[f"{b}Attn.alpha"]), dtype=torch.float64)
    last = f"blocks.{layers - 1}."
    sd.update({"ln.weight": w[last + "ln_3.weight"], "ln.bias": w[last + "ln_3.bias"],
               "head.weight": w[last + "mlp2.weight"], "head.bias": w[last + "mlp2.bias"]})
    net.load_state_dict(sd, strict=True)
    return net


@pytest.mark.parametrize("name,pos", [("model_conv3_unified", "unified"), ("model_conv3_coords", "coords")])
def test_whole_network_matches_official_model(name, pos):
    """The official Model on a 5 x 6 node grid (linspace(0, 1, s): its get_grid), 2 blocks, width 16, 2 heads,
    8 bases, temperatures 0.3 / 2.0, alpha raw -1 and 0.5; ours with the box [0, 1]^2."""
    d = _load(name)
    net = _net_from_official(d, pos)
    coords = _t(d["pos"][0])
    np.testing.assert_allclose(grid_coords((5, 6), "node"), coords.numpy(), rtol=0, atol=1e-7)  # our node grid
    box = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    with torch.no_grad():
        out = net(_t(d["fx"]), coords, *box, (5, 6))
    np.testing.assert_allclose(out.numpy(), d["out"], rtol=0, atol=TOL)
