"""Parity: finetune-lime's LiME-LoRA layer against the official ``LoRALiMELinear`` (Kowsher/LiME @ 96da925,
``LiMELoRA.py``), five selection modes in eval mode and the balance terms in train mode (fixture and
settings: tests/data/parity/finetune-lime/README.md; no official code here). Tolerance 1e-5.

The n-gram routing fixture (tests/data/parity/finetune-lime/ngram/README.md) checks the official
last-token n-gram rule (``ngram_rule="last"``) against the official ``LiMELoRA.py`` n-gram path."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from icmlkit.lib.finetune_lime.config import AdapterConfig
from icmlkit.lib.finetune_lime.layers import LimeLinear, RouteContext

DATA = Path(__file__).parent / "data" / "parity" / "finetune-lime"
TOL = 1e-5
# the fixture's modes (README): top_k, auto Top-K, selection, sparse
MODES = {
    "auto_soft_dense": dict(top_k=1, auto_topk=True, selection="soft", sparse=False),
    "soft_topk2": dict(top_k=2, auto_topk=False, selection="soft", sparse=False),
    "hard_topk2_dense": dict(top_k=2, auto_topk=False, selection="hard", sparse=False),
    "hard_topk2_sparse": dict(top_k=2, auto_topk=False, selection="hard", sparse=True),
    "auto_sparse": dict(top_k=1, auto_topk=True, selection="hard", sparse=True),
}


@pytest.fixture(scope="module")
def fx():
    return np.load(DATA / "fixture.npz")


def layer(z, *, kind: str = "lora", n_gram: int = 1, ngram_rule: str = "causal", **mode) -> LimeLinear:
    t = lambda k: torch.from_numpy(np.array(z[k]))  # noqa: E731
    base = nn.Linear(z["base_weight"].shape[1], z["base_weight"].shape[0])
    with torch.no_grad():
        base.weight.copy_(t("base_weight"))
        base.bias.copy_(t("base_bias"))
    cfg = AdapterConfig(experts=4, rank=2, alpha=4.0, temperature=0.5, gamma_routing=0.5, select_temperature=0.5,
                        theta=0.5, jitter=0.0, shared=True, route_norm="batch", n_gram=n_gram,
                        ngram_rule=ngram_rule, method=f"lime-{kind}", **mode)
    lay = LimeLinear(base, cfg, RouteContext(), "parity", kind=kind)
    with torch.no_grad():
        lay.lora_A.copy_(t("A"))
        lay.lora_B.copy_(t("B"))
        lay.experts.copy_(t("P"))
        lay.shared.copy_(t("p_shared"))
        lay.gamma_s.copy_(t("gamma_shared").reshape(1))
    return lay


def ours_y(z, mode: str) -> np.ndarray:
    lay = layer(z, **MODES[mode]).eval()
    with torch.no_grad():
        return lay(torch.from_numpy(z["x"])).numpy()


@pytest.mark.parametrize("mode", list(MODES))
def test_layer_matches_official(fx, mode):
    y, ref = ours_y(fx, mode), fx[f"official::{mode}::y"]
    assert np.abs(y - ref).max() < TOL
    assert np.abs(ref - (fx["x"] @ fx["base_weight"].T + fx["base_bias"])).max() > 1    # the adapter term is not 0


def test_balance_terms_match_official(fx):
    lay = layer(fx, **MODES["auto_soft_dense"]).train()
    lay.ctx.collect = True
    lay(torch.from_numpy(fx["x"]))
    (imp, kl), = lay.ctx.aux
    assert abs(float(imp.detach()) - float(fx["official::train_auto_soft_dense::importance"])) < TOL
    assert abs(float(kl.detach()) - float(fx["official::train_auto_soft_dense::kl_uniform"])) < TOL


def test_parity_detects_a_1e3_change(fx):
    for mode in MODES:
        assert np.abs(ours_y(fx, mode) + 1e-3 - fx[f"official::{mode}::y"]).max() > TOL


# --------------------------------------------------------------------------- n-gram routing (our fixture)

NGRAM = DATA / "ngram"
NGRAM_MODES = {
    "auto_soft_dense": MODES["auto_soft_dense"],
    "soft_topk2": MODES["soft_topk2"],
    "hard_topk2": MODES["hard_topk2_dense"],
    "auto_sparse": MODES["auto_sparse"],
}


@pytest.fixture(scope="module")
def ng():
    return np.load(NGRAM / "fixture.npz")


def ours_ngram(z, n: int, mode: str):
    lay = layer(z, kind="lorafa", n_gram=n, ngram_rule="last", **NGRAM_MODES[mode]).eval()
    lay.ctx.record = True
    with torch.no_grad():
        y = lay(torch.from_numpy(z["x"])).numpy()
    return y, lay.ctx.records[-1][3].numpy()


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("mode", list(NGRAM_MODES))
def test_ngram_routing_matches_official(ng, n, mode):
    y, pi = ours_ngram(ng, n, mode)
    assert np.abs(y - ng[f"official::n{n}::{mode}::y"]).max() < TOL
    assert np.abs(pi - ng[f"official::n{n}::probs"]).max() < TOL
    assert np.abs(y + 1e-3 - ng[f"official::n{n}::{mode}::y"]).max() > TOL


def test_ngram_sources_match_official(ng):
    from icmlkit.lib.finetune_lime.layers import ngram_source

    keys = [k for k in ng.files if k.startswith("official::source::")]
    assert len(keys) == 21                                 # T in 1..9, n in 2..4, T >= n
    for k in keys:
        T, n = (int(p[1:]) for p in k.split("::")[2:])
        assert ngram_source(torch.ones(1, T, dtype=torch.bool), n, "last")[0].tolist() == ng[k].tolist(), k


def test_ngram_scale_comes_from_the_deciding_tokens(ng):
    """The departure this fixture found (fixed 2026-12-07): with the max-abs scale over every token instead
    of the anchors, n = 3 misses the official output by ~0.03."""
    lay = layer(ng, kind="lorafa", n_gram=3, ngram_rule="last", **NGRAM_MODES["auto_soft_dense"]).eval()
    x = torch.from_numpy(ng["x"])
    with torch.no_grad():
        h, delta = lay._delta(x, lay.base(x))
        E = lay.cfg.experts
        every = torch.ones(*x.shape[:2], 1, dtype=torch.bool)
        from icmlkit.lib.finetune_lime.layers import normaliser
        s_all = normaliser(h[..., :E], every, "batch", None)
        anchors = every.clone()
        anchors[:, [0, 1, 3, 4]] = False                    # T = 7, n = 3: anchors 2, 5, 6
        s_anchor = normaliser(h[..., :E], anchors, "batch", None)
    assert float(s_all) > float(s_anchor)                  # the inputs make the two scales differ
    y, _ = ours_ngram(ng, 3, "auto_soft_dense")
    assert np.abs(y - ng["official::n3::auto_soft_dense::y"]).max() < TOL
