"""Parity: attribute-tokens' IFR operator against the official FlashTrace core (wbopan/flashtrace @ 13865e9,
``flashtrace/core.py``) on a tiny GQA Llama with redrawn RMSNorm weights. Fixture and conventions:
tests/data/parity/attribute-tokens/README.md (data produced by running the official code; none of its code here).

At rms_norm_eps 1e-6 ours agrees to 1e-5 absolute (measured 2.9e-6). At eps 1e-5 the official folds the norm
with 1e-6 whatever the model's eps (it reads ``module.eps``, which HF's LlamaRMSNorm lacks), ours with the
model's eps: that departure is pinned here (differences ~1e-3, largest on the residual share)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from icmlkit.lib.attribute_tokens import ifr

DATA = Path(__file__).parent / "data" / "parity" / "attribute-tokens"
TOL = 1e-5


def _load(eps: str):
    return np.load(DATA / f"fixture_eps{eps}.npz")


def _model(z):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = json.loads(str(z["config_json"]))
    keep = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "hidden_act", "max_position_embeddings", "rms_norm_eps", "head_dim",
            "rope_parameters", "attention_bias", "mlp_bias", "tie_word_embeddings", "bos_token_id", "eos_token_id")
    config = LlamaConfig(**{k: cfg[k] for k in keep if k in cfg}, attn_implementation="eager")
    model = LlamaForCausalLM(config).eval()
    state = {k[3:]: torch.from_numpy(np.array(z[k])) for k in z.files if k.startswith("w::")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    return model


def ours(z, attention: str) -> dict:
    """Our functions on the fixture's inputs, in the fixture's conventions (README)."""
    model = _model(z)
    ids = torch.as_tensor(z["input_ids"])
    p = int(z["prompt_len"])
    g0, g1 = (int(v) for v in z["gen_span"])
    o0, o1 = (int(v) for v in z["output_span"])
    kw = dict(chunk_tokens=int(z["chunk_tokens"]), sink_chunk=int(z["sink_chunk"]))
    cache = ifr.capture(model, ids, attention)
    t, e, r = ifr.span_shares(cache, torch.arange(o0, o1 + 1), **kw)
    wt, _, _ = ifr.span_shares(cache, torch.arange(g0, g1 + 1), torch.as_tensor(z["sink_weights"]), **kw)
    rows = ifr.tokenwise_rows(cache, torch.arange(g0, g1 + 1), **kw)
    hop = ifr.recursive(cache, prompt_len=p, gen_span=(g0, g1), output_span=(o0, o1),
                        stop_mask=np.zeros(len(ids), dtype=bool), hops=int(z["hops"]), **kw)
    return {"span_T": t.numpy(), "span_E": e.numpy(), "span_resid": r.numpy(), "wspan_T": wt.numpy(),
            "tokenwise": rows.numpy(), "hop_ratios": np.asarray(hop.ratios), "hop_final": hop.final.numpy()[:p]}


def official(z, attention: str) -> dict:
    pre = f"official_{attention}::"
    out = {k[len(pre):]: np.asarray(z[k], dtype=np.float64) for k in z.files if k.startswith(pre)}
    out["hop_final"] = out["hop_final"][:int(z["prompt_len"])]   # observation "sum" on the prompt positions
    del out["hop_obs_mask"]
    return out


def max_diffs(a: dict, b: dict) -> dict:
    assert set(a) == set(b)
    return {k: float(np.max(np.abs(np.asarray(a[k], dtype=np.float64) - b[k]))) for k in b}


@pytest.fixture(scope="module")
def eps6():
    z = _load("1e-06")
    return z, {att: ours(z, att) for att in ("eager", "recompute")}


@pytest.mark.parametrize("attention", ["eager", "recompute"])
def test_ifr_matches_official_at_eps_1e6(eps6, attention):
    z, mine = eps6
    d = max_diffs(mine[attention], official(z, attention))
    assert max(d.values()) < TOL, d


def test_parity_detects_a_1e3_change(eps6):
    z, mine = eps6
    ref = official(z, "eager")
    for key in ref:
        bumped = dict(mine["eager"])
        bumped[key] = np.asarray(bumped[key], dtype=np.float64) + 1e-3
        assert max_diffs(bumped, ref)[key] > TOL


def test_norm_eps_departure_pinned_at_eps_1e5():
    """Ours folds RMSNorm with the model's eps (1e-5 here); the official code always uses 1e-6."""
    z = _load("1e-05")
    d = max_diffs(ours(z, "eager"), official(z, "eager"))
    assert 1e-3 < d["span_resid"] < 5e-3, d          # fixture README: 2.6e-3
    assert 1e-4 < d["span_T"] < 1e-3, d               # 3.9e-4
    assert json.loads(str(z["config_json"]))["rms_norm_eps"] == 1e-5
