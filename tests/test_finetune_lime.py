"""finetune-lime: the LiME layer's invariants (B = 0 is the frozen model, P = 1 is LoRA, parameter
counts, pads, Auto Top-K, causal n-gram routing, balance loss, sparse = dense), the baselines, the
module swap's errors, training determinism / --resume / torchrun, the CLI and malformed inputs."""
from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn

from conftest import BIN, run_tool
from fuzzing import FuzzCase, MismatchCase, check_malformed, run_inprocess
from icmlkit.lib.finetune_lime.adapter import apply_adapter, count_parts, load_adapted, read_adapter
from icmlkit.lib.finetune_lime.config import AdapterConfig, EvalConfig, TasksConfig, TrainConfig
from icmlkit.lib.finetune_lime.data import char_tokenizer, make_tasks, write_task_rows
from icmlkit.lib.finetune_lime.layers import (LimeLinear, LoraLinear, RouteContext, balance_terms, hard_mask, ngram_source,
                                     selection_weights, sparse_mix)

torch.set_num_threads(1)
TOOL = "finetune-lime"
D = torch.float64


# --------------------------------------------------------------------------- fixtures


def tiny_llama(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = char_tokenizer()
    conf = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                       pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    torch.manual_seed(seed)
    return LlamaForCausalLM(conf).eval(), tok


class Loaded:
    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny") / "model"
    m, tok = tiny_llama()
    m.save_pretrained(str(d))
    tok.save_pretrained(str(d))
    return d


@pytest.fixture(scope="module")
def tasks_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("tasks") / "t.jsonl"
    write_task_rows(p, make_tasks(TasksConfig(tasks=["sort_asc", "sort_desc", "caesar1", "caesar_m1"],
                                              n_per_task=6, min_len=2, max_len=3), seed=0))
    return p


@pytest.fixture(scope="module")
def adapter_file(tmp_path_factory, model_dir, tasks_file):
    out = tmp_path_factory.mktemp("ad") / "a.safetensors"
    code, o, e = _cli(["train", str(model_dir), str(tasks_file), "-o", str(out), "--steps", "3", "--batch-size",
                       "4", "--json"], None)
    assert code == 0, e
    return out


def _cli(argv, capsys):
    if capsys is None:
        from icmlkit.cli._common import run_cli
        from icmlkit.cli.finetune_lime import cli

        os.environ["ICMLKIT_NO_PROGRESS"] = "1"
        return run_cli(cli, TOOL, [*argv, "--no-progress"]), "", ""
    return run_inprocess(TOOL, argv, capsys)


def lin(d_in=12, H=10, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    L = nn.Linear(d_in, H, bias=bias).to(D)
    with torch.no_grad():
        L.weight.copy_(torch.randn(H, d_in, generator=g, dtype=D))
        if bias:
            L.bias.copy_(torch.randn(H, generator=g, dtype=D))
    return L


def lime(kind="lora", ctx=None, seed=0, **kw):
    cfg = AdapterConfig(method="lime-" + kind if kind != "lora" else "lime-lora", **kw)
    torch.manual_seed(seed)
    layer = LimeLinear(lin(), cfg, ctx or RouteContext(), "x", kind).to(D)
    return layer


def randomise_B(layer, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in ("lora_B", "slice_W"):
            if hasattr(layer, name):
                p = getattr(layer, name)
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))


# --------------------------------------------------------------------------- layer invariants


@pytest.mark.parametrize("kind", ["lora", "dora", "lorafa", "slicefine"])
def test_zero_B_gives_the_frozen_output(kind):
    layer = lime(kind).eval()
    x = torch.randn(3, 5, 12, dtype=D)
    h = layer.base(x)
    y = layer(x)
    if kind == "dora":   # h - b + b: one rounding
        torch.testing.assert_close(y, h, atol=1e-12, rtol=0)
    else:
        assert torch.equal(y, h)


def test_baselines_start_as_the_frozen_model_too():
    cfg = AdapterConfig(method="molora", experts=3)
    from icmlkit.lib.finetune_lime.layers import HydraLoraLinear, MoLoraLinear

    x = torch.randn(2, 4, 12, dtype=D)
    for cls in (LoraLinear, MoLoraLinear, HydraLoraLinear):
        layer = cls(lin(), cfg, RouteContext(), "x").to(D).eval()
        assert torch.equal(layer(x), layer.base(x))


def test_P_one_without_shared_is_plain_lora():
    layer = lime("lora", shared=False, rank=3).eval()
    randomise_B(layer)
    with torch.no_grad():
        layer.experts.fill_(1.0)
    ref = LoraLinear(layer.base, AdapterConfig(method="lora", rank=3), RouteContext(), "x").to(D)
    with torch.no_grad():
        ref.lora_A.copy_(layer.lora_A)
        ref.lora_B.copy_(layer.lora_B)
    x = torch.randn(2, 7, 12, dtype=D)
    for sel in ("soft", "hard"):
        layer.cfg.selection = sel
        torch.testing.assert_close(layer(x), ref(x), atol=1e-12, rtol=0)


def _emb_model(method, **kw):
    model, tok = tiny_llama()
    ad = apply_adapter(model, AdapterConfig(method=method, targets=["q_proj"], embeddings=True, **kw))
    return model, tok, ad, ad.layers["model.embed_tokens"]


def test_wrapped_embeddings_start_frozen_P_one_is_lora_and_counts_are_the_closed_form():
    from icmlkit.lib.finetune_lime.layers import LimeEmbedding, LoraEmbedding

    ids = torch.tensor([[5, 7, 9, 11], [3, 4, 5, 6]])
    mask = torch.ones_like(ids)
    frozen, _ = tiny_llama()
    with torch.no_grad():
        ref_logits = frozen(input_ids=ids, attention_mask=mask).logits
    model, tok, ad, emb = _emb_model("lime-lora", experts=3, rank=2, shared=True)
    assert isinstance(emb, LimeEmbedding) and model.get_input_embeddings() is emb
    with torch.no_grad():  # B = 0: the frozen model exactly
        torch.testing.assert_close(ad.logits(ids, mask), ref_logits, atol=0, rtol=0)
    V, H = emb.d_in, emb.H
    c = count_parts(ad)
    q = ad.layers["model.layers.0.self_attn.q_proj"]
    per_q = 2 * (q.d_in + q.H) + 3 * q.H + q.H + 1
    assert c["trainable"] == 2 * per_q + 2 * (V + H) + 3 * H + H + 1 and c["layers"] == 3
    # P = 1 without p_s: plain LoRA on the embedding rows
    _, _, ad1, e1 = _emb_model("lime-lora", experts=3, rank=2, shared=False)
    _, _, ad2, e2 = _emb_model("lora", rank=2)
    assert isinstance(e2, LoraEmbedding)
    with torch.no_grad():
        e1.lora_B.normal_()
        e1.experts.fill_(1.0)
        e2.lora_A.copy_(e1.lora_A)
        e2.lora_B.copy_(e1.lora_B)
    e1.eval()
    torch.testing.assert_close(e1(ids), e2(ids), atol=1e-6, rtol=0)
    assert not torch.allclose(e1(ids), e1.base(ids))
    # the frozen embedding and output head stay frozen
    assert not emb.base.weight.requires_grad and not model.get_output_embeddings().weight.requires_grad


def test_embeddings_option_trains_reloads_and_is_refused_elsewhere(tmp_path):
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.core.io import safetensors_bytes
    from icmlkit.lib.finetune_lime.train import evaluate, train

    model, tok = tiny_llama()
    res = train(FAST, AdapterConfig(method="lime-lora", rank=2, embeddings=True), Loaded(model, tok), _rows(), seed=0)
    assert float(res.tensors["model.embed_tokens.lora_B"].abs().sum()) > 0
    p = tmp_path / "e.safetensors"
    p.write_bytes(safetensors_bytes(res.tensors, res.metadata))
    fresh, _ = tiny_llama()
    ad2 = load_adapted(fresh, p)
    assert ad2.cfg.embeddings and "model.embed_tokens" in ad2.layers
    ev, ev2 = (evaluate(EvalConfig(max_new_tokens=3), a, tok, _rows()[:6]) for a in (res.adapted, ad2))
    assert ev.predictions == ev2.predictions
    with pytest.raises(UsageError, match="--embeddings"):
        AdapterConfig(method="molora", embeddings=True).check()


def test_lora_matches_peft():
    peft = pytest.importorskip("peft")
    base = nn.Sequential()
    base.add_module("q_proj", nn.Linear(12, 10))
    torch.manual_seed(0)
    ref = peft.get_peft_model(base, peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    with torch.no_grad():
        ref.base_model.model.q_proj.lora_B["default"].weight.normal_()
    base2 = nn.Sequential()
    base2.add_module("q_proj", nn.Linear(12, 10))
    base2.q_proj.load_state_dict(ref.base_model.model.q_proj.base_layer.state_dict())
    ad = apply_adapter(base2, AdapterConfig(method="lora", rank=2, targets=["q_proj"]))
    with torch.no_grad():
        ad.layers["q_proj"].lora_A.copy_(ref.base_model.model.q_proj.lora_A["default"].weight)
        ad.layers["q_proj"].lora_B.copy_(ref.base_model.model.q_proj.lora_B["default"].weight)
    x = torch.randn(3, 12)
    torch.testing.assert_close(base2(x), ref(x), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("shared", [True, False])
def test_counts_are_the_closed_form(shared):
    model, _ = tiny_llama()
    cfg = AdapterConfig(method="lime-lora", experts=3, rank=2, shared=shared)
    ad = apply_adapter(model, cfg)
    want = 0
    for m in ad.layers.values():   # GQA: k_proj / v_proj have H = 16, q_proj / o_proj 32
        want += 2 * (m.d_in + m.H) + 3 * m.H + ((m.H + 1) if shared else 0)
    c = count_parts(ad)
    assert c["trainable"] == want and c["router_params"] == 0 and c["layers"] == 8
    assert {m.H for m in ad.layers.values()} == {16, 32}


def test_baseline_counts_include_routers():
    model, _ = tiny_llama()
    c = count_parts(apply_adapter(model, AdapterConfig(method="molora", experts=3, rank=2, targets=["q_proj"])))
    # per layer: E r (d + H) + E d = 3*2*64 + 3*32
    assert c["trainable"] == 2 * (3 * 2 * 64 + 3 * 32) and c["router_params"] == 2 * 96
    model, _ = tiny_llama()
    c = count_parts(apply_adapter(model, AdapterConfig(method="hydralora", experts=3, rank=2, targets=["q_proj"])))
    assert c["trainable"] == 2 * (2 * 32 + 3 * 32 * 2 + 3 * 32)


@pytest.mark.parametrize("norm", ["batch", "token", "causal"])
def test_pads_never_change_the_routing_of_real_tokens(norm):
    ctx = RouteContext()
    layer = lime("lora", ctx=ctx, route_norm=norm).eval()
    randomise_B(layer)
    ctx.record = True
    x = torch.randn(2, 6, 12, dtype=D)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    ctx.mask = mask
    y1 = layer(x)
    pi1 = ctx.records[-1][3]
    x2 = x.clone()
    x2[0, 4:] = 1e6 * torch.randn(2, 12, dtype=D)   # huge values at the pads
    y2 = layer(x2)
    pi2 = ctx.records[-1][3]
    assert torch.equal(pi1[mask], pi2[mask]) and torch.equal(y1[mask], y2[mask])
    assert torch.equal(y2[0, 4:], layer.base(x2)[0, 4:])   # pads return h


def test_auto_topk_hard_picks_exactly_the_experts_above_threshold_and_soft_sums_to_one():
    g = torch.Generator().manual_seed(0)
    pi = torch.softmax(torch.randn(200, 4, generator=g, dtype=D) * 2, -1)
    m = hard_mask(pi, top_k=2, auto=True, theta=0.5)          # 2k = 4 = E candidates
    assert torch.equal(m.bool(), pi >= 0.5 * pi.amax(-1, keepdim=True))
    assert (m.sum(-1) >= 1).all()
    for auto in (True, False):
        for mode in ("soft", "hard"):
            w = selection_weights(pi, top_k=2, auto=auto, theta=0.5, mode=mode, ts=0.5)
            torch.testing.assert_close(w.sum(-1), torch.ones(200, dtype=D), atol=1e-12, rtol=0)
            assert (w >= 0).all()
    w = selection_weights(pi, top_k=1, auto=False, theta=0.5, mode="hard", ts=0.5)
    assert torch.equal(w.argmax(-1), pi.argmax(-1)) and torch.equal((w > 0).sum(-1), torch.ones(200).long())


def test_sparse_equals_dense():
    g = torch.Generator().manual_seed(1)
    pi = torch.softmax(torch.randn(50, 5, generator=g, dtype=D), -1)
    P = torch.rand(5, 7, generator=g, dtype=D)
    for k in (1, 2, 5):
        for auto in (False, True):
            dense = selection_weights(pi, top_k=k, auto=auto, theta=0.5, mode="hard", ts=0.5) @ P
            torch.testing.assert_close(sparse_mix(pi, P, top_k=k, auto=auto, theta=0.5), dense, atol=1e-12, rtol=0)
    # k = E: every expert, w = pi
    torch.testing.assert_close(sparse_mix(pi, P, top_k=5, auto=False, theta=0.5), pi @ P, atol=1e-12, rtol=0)
    a, b = lime("lora", selection="hard", top_k=2, sparse=False), lime("lora", selection="hard", top_k=2, sparse=True)
    b.load_state_dict(a.state_dict())
    randomise_B(a), randomise_B(b)
    x = torch.randn(2, 3, 12, dtype=D)
    torch.testing.assert_close(a.eval()(x), b.eval()(x), atol=1e-12, rtol=0)


def test_balance_loss_zero_at_uniform_use_and_positive_otherwise():
    E = 4
    pi = torch.full((3, 5, E), 1 / E, dtype=D)
    m = torch.ones(3, 5, 1, dtype=torch.bool)
    imp, kl = balance_terms(pi, m, None)
    assert abs(float(imp)) < 1e-12 and abs(float(kl)) < 1e-12
    pi2 = torch.softmax(torch.randn(3, 5, E, dtype=D) * 3, -1)
    imp2, kl2 = balance_terms(pi2, m, None)
    assert float(imp2) > 0 and float(kl2) > 0
    # pads excluded: the pad rows do not count
    m2 = m.clone()
    m2[0] = False
    pi3 = pi.clone()
    pi3[0] = torch.tensor([1.0, 0, 0, 0], dtype=D)
    assert abs(float(balance_terms(pi3, m2, None)[0])) < 1e-12


def test_ngram_source_groups_real_tokens():
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    src = ngram_source(mask, 2, "causal")
    assert src[0].tolist() == [0, 1, 2, 2, 4, 4, 6] and src[1].tolist() == [0, 0, 2, 2, 4, 5, 6]
    last = ngram_source(mask, 2, "last")
    assert last[0].tolist() == [0, 1, 3, 3, 5, 5, 6] and last[1].tolist() == [1, 1, 3, 3, 4, 5, 6]


@pytest.mark.parametrize("norm", ["token", "causal"])
def test_causal_ngram_routing_output_at_t_ignores_later_tokens(norm):
    model, tok = tiny_llama()
    ad = apply_adapter(model, AdapterConfig(n_gram=3, route_norm=norm, ngram_rule="causal"), seed=0)
    for layer in ad.layers.values():
        randomise_B(layer)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 40, (2, 10), generator=g)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        a = ad.logits(ids, mask)
        ids2 = ids.clone()
        ids2[:, 5:] = torch.randint(4, 40, (2, 5), generator=g)
        b = ad.logits(ids2, mask)
    torch.testing.assert_close(a[:, :5], b[:, :5], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_last_token_rule_leaks_the_future_and_warns(model_dir, tasks_file):
    model, tok = tiny_llama()
    ad = apply_adapter(model, AdapterConfig(n_gram=4, route_norm="token", ngram_rule="last"), seed=0)
    for layer in ad.layers.values():
        randomise_B(layer, seed=3)
        with torch.no_grad():
            layer.experts.copy_(torch.rand(layer.experts.shape) * 4)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 40, (1, 8), generator=g)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        a = ad.logits(ids, mask)
        ids2 = ids.clone()
        ids2[:, 3] = (ids2[:, 3] + 7) % 40 + 4     # token 3 is the last of the group 0..3
        b = ad.logits(ids2, mask)
    assert not torch.allclose(a[:, :3], b[:, :3])
    from icmlkit.lib.finetune_lime.train import _warn_ngram

    with pytest.warns(UserWarning, match="future"):
        _warn_ngram(AdapterConfig(n_gram=2, ngram_rule="last"))


def test_batch_normaliser_excludes_pads_and_depends_on_the_batch():
    """Documented behaviour: with route_norm batch a token's routing depends on the other rows."""
    ctx = RouteContext()
    layer = lime("lora", ctx=ctx).eval()
    randomise_B(layer)
    ctx.record = True
    x = torch.randn(2, 4, 12, dtype=D)
    layer(x)
    both = ctx.records[-1][3][0]
    x2 = x.clone()
    x2[1] *= 50
    layer(x2)
    assert not torch.allclose(both, ctx.records[-1][3][0])


# --------------------------------------------------------------------------- module swap errors


def test_targets_matching_nothing_list_what_exists():
    from icmlkit.lib.core.errors import UsageError

    model, _ = tiny_llama()
    with pytest.raises(UsageError, match="q_proj.*v_proj|gate_proj"):
        apply_adapter(model, AdapterConfig(targets=["nope"]))


def test_experts_above_H_and_bad_rank_are_usage_errors():
    from icmlkit.lib.core.errors import UsageError

    model, _ = tiny_llama()
    with pytest.raises(UsageError, match="exceeds the output width"):
        apply_adapter(model, AdapterConfig(experts=17, top_k=1))   # k_proj H = 16
    with pytest.raises(UsageError, match="rank"):
        AdapterConfig(rank=0).check()


# --------------------------------------------------------------------------- training


def _rows():
    return make_tasks(TasksConfig(tasks=["sort_asc", "sort_desc", "caesar1"], n_per_task=8, min_len=2, max_len=3),
                      seed=0)


FAST = TrainConfig(steps=6, batch_size=4, moe_lr=1e-2, peft_lr=1e-2)


@pytest.mark.parametrize("method", ["lime-lora", "lime-dora", "lime-lorafa", "lime-slicefine", "lime-prompt",
                                    "lora", "molora", "hydralora"])
def test_every_method_trains_saves_and_reloads(method):
    from icmlkit.lib.core.io import safetensors_bytes
    from icmlkit.lib.finetune_lime.train import evaluate, train

    model, tok = tiny_llama()
    res = train(FAST, AdapterConfig(method=method, rank=2), Loaded(model, tok), _rows(), seed=0)
    assert np.isfinite(res.summary["final_loss"]) and res.summary["trainable_params"] > 0
    assert (res.summary["router_params"] > 0) == (method in ("molora", "hydralora"))
    moved = [k for k, v in res.tensors.items() if k.endswith(("lora_B", "slice_W", "prompt")) and v.abs().sum() > 0]
    assert moved, "training changed nothing"
    ev = evaluate(EvalConfig(max_new_tokens=3), res.adapted, tok, _rows()[:6])
    # reload into a fresh copy of the model: the same logits
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "a.safetensors")
        with open(p, "wb") as fh:
            fh.write(safetensors_bytes(res.tensors, res.metadata))
        fresh, _ = tiny_llama()
        ad2 = load_adapted(fresh, p)
    ev2 = evaluate(EvalConfig(max_new_tokens=3), ad2, tok, _rows()[:6])
    assert ev.predictions == ev2.predictions and ev.summary == ev2.summary


def test_same_seed_same_bytes_and_resume(interrupting_checkpointer, tmp_path):
    from conftest import Interrupted
    from icmlkit.lib.core.checkpoint import Checkpointer
    from icmlkit.lib.core.io import safetensors_bytes
    from icmlkit.lib.finetune_lime.train import train

    acfg = AdapterConfig(method="lime-lora", dropout=0.1)
    cfg = TrainConfig(steps=6, batch_size=4, moe_lr=1e-2, peft_lr=1e-2)

    def run(ck=None):
        m, tok = tiny_llama()
        r = train(cfg, acfg, Loaded(m, tok), _rows(), seed=3, checkpointer=ck)
        return safetensors_bytes(r.tensors, r.metadata), r.log

    a, log_a = run()
    b, _ = run()
    assert a == b
    path = tmp_path / "a.ckpt.pt"
    with pytest.raises(Interrupted):
        run(interrupting_checkpointer(path, every=4))
    c, log_c = run(Checkpointer(path, every=4, resume=True))
    assert c == a
    assert [r["loss"] for r in log_c] == [r["loss"] for r in log_a]
    m, tok = tiny_llama()
    from icmlkit.lib.core.errors import UsageError

    with pytest.raises(UsageError, match="other settings"):
        train(TrainConfig(steps=7, batch_size=4), acfg, Loaded(m, tok), _rows(), seed=3,
              checkpointer=Checkpointer(path, every=4, resume=True))


def test_balance_loss_is_in_the_objective():
    from icmlkit.lib.finetune_lime.train import train

    m, tok = tiny_llama()
    r = train(TrainConfig(steps=2, batch_size=4), AdapterConfig(), Loaded(m, tok), _rows(), seed=0)
    row = r.log[0]
    want = row["ce"] + 0.01 * (row["importance"] + 0.1 * row["kl"])
    assert abs(row["loss"] - want) < 1e-6 and row["importance"] >= 0 and row["kl"] >= 0
    m, tok = tiny_llama()
    r = train(TrainConfig(steps=2, batch_size=4, balance_every=2), AdapterConfig(), Loaded(m, tok), _rows(), seed=0)
    assert r.log[0]["loss"] == r.log[0]["ce"] and r.log[1]["loss"] > r.log[1]["ce"]


def test_optimiser_groups_and_warmup():
    from icmlkit.lib.finetune_lime.adapter import param_groups

    m, _ = tiny_llama()
    ad = apply_adapter(m, AdapterConfig())
    groups = {g["name"]: g for g in param_groups(ad, 1e-3, 4e-4, 0.01)}
    assert groups["moe"]["lr"] == 1e-3 and groups["peft"]["lr"] == 4e-4
    n_moe = sum(p.numel() for p in groups["moe"]["params"])
    c = count_parts(ad)["parts"]
    assert n_moe == c["experts_P"] + c["shared_p_s"] + c["gamma_s"]
    from icmlkit.lib.finetune_lime.train import train

    m, tok = tiny_llama()
    r = train(TrainConfig(steps=100, batch_size=2), AdapterConfig(), Loaded(m, tok), _rows()[:4], seed=0)
    lrs = [x["lr_peft"] for x in r.log]
    assert lrs[0] == pytest.approx(4e-4 / 3) and lrs[2] == pytest.approx(4e-4) and lrs[-1] < 1e-5


def test_nmi_matches_known_values():
    from icmlkit.lib.finetune_lime.train import nmi

    assert nmi([0, 0, 1, 1], [5, 5, 7, 7]) == pytest.approx(1.0)
    assert nmi([0, 0, 1, 1], [5, 7, 5, 7]) == pytest.approx(0.0, abs=1e-12)
    sk = pytest.importorskip("sklearn.metrics")
    a, b = [0, 0, 1, 1, 2, 2, 2], [1, 1, 1, 0, 0, 2, 2]
    assert nmi(a, b) == pytest.approx(sk.normalized_mutual_info_score(a, b))


# --------------------------------------------------------------------------- command line


def test_cli_train_eval_routing_count_predict(model_dir, tasks_file, adapter_file, tmp_path, capsys):
    meta = read_adapter(adapter_file)[2]
    assert json.loads(meta["config"])["method"] == "lime-lora"
    assert (adapter_file.parent / "a.config.json").exists() and (adapter_file.parent / "a.steps.csv").exists()
    assert not (adapter_file.parent / "a.safetensors.ckpt.pt").exists()
    code, out, err = _cli(["eval", str(model_dir), str(adapter_file), str(tasks_file), "-o",
                           str(tmp_path / "p.jsonl"), "--json", "--max-new-tokens", "3"], capsys)
    assert code == 0, err
    s = json.loads(out)
    assert s["n"] == 24 and set(s["per_task"]) == {"sort_asc", "sort_desc", "caesar1", "caesar_m1"}
    assert 0 <= s["routing_nmi"] <= 1
    code, out, err = _cli(["routing", str(model_dir), str(adapter_file), str(tasks_file), "-o",
                           str(tmp_path / "u.csv"), "--json"], capsys)
    assert code == 0, err
    assert len((tmp_path / "u.csv").read_text().splitlines()) == 1 + 4 * 4
    code, out, err = _cli(["count", str(model_dir), "--method", "lime-lora", "--json"], capsys)
    s = json.loads(out)
    assert code == 0 and s["trainable_params"] == s["closed_form"]
    code, out, err = _cli(["predict", str(model_dir), str(adapter_file), str(tasks_file), "-o",
                           str(tmp_path / "g.csv"), "--max-new-tokens", "2"], capsys)
    assert code == 0, err
    code, out, err = _cli(["generate", str(model_dir), str(adapter_file), str(tasks_file), "-o",
                           str(tmp_path / "g2.csv")], capsys)  # the old name of predict: pointed to it
    assert code == 2 and "finetune-lime predict MODEL ADAPTER DATA" in err and not (tmp_path / "g2.csv").exists()
    code, out, err = _cli(["eval", str(model_dir), str(adapter_file), str(tasks_file), "--fail-under", "1.01",
                           "--max-new-tokens", "1"], capsys)
    assert code == 3


def test_cli_bad_inputs_fail_as_stated(model_dir, tasks_file, tmp_path, capsys):
    out = tmp_path / "a.safetensors"
    base = ["train", str(model_dir), str(tasks_file), "-o", str(out), "--steps", "1", "--batch-size", "2"]
    code, _, err = _cli([*base, "--targets", "nope"], capsys)
    assert code == 2 and "nope" in err and "q_proj" in err and not out.exists()
    code, _, err = _cli([*base, "--experts", "40"], capsys)
    assert code == 2 and "exceeds" in err and not out.exists()
    code, _, err = _cli([*base, "--rank", "0"], capsys)
    assert code == 2 and "--rank" in err and not out.exists()
    for field, text in (("task", '{"prompt": "sa 1=", "target": "1"}'),
                        ("prompt", '{"task": "a", "target": "1"}'), ("target", '{"task": "a", "prompt": "x="}')):
        bad = tmp_path / f"no_{field}.jsonl"
        bad.write_text('{"task": "a", "prompt": "sa 1=", "target": "1"}\n' + text + "\n")
        code, _, err = _cli(["train", str(model_dir), str(bad), "-o", str(out), "--steps", "1"], capsys)
        assert code == 1 and f"'{field}'" in err and str(bad) in err and "line 2" in err and not out.exists()
    csv = tmp_path / "no_target.csv"
    csv.write_text("task,prompt\na,x=\n")
    code, _, err = _cli(["train", str(model_dir), str(csv), "-o", str(out), "--steps", "1"], capsys)
    assert code == 1 and "target" in err and not out.exists()


def test_cli_make_tasks_csv_roundtrip(tmp_path, capsys):
    from icmlkit.lib.finetune_lime.data import read_rows

    code, out, err = _cli(["generate", "-o", str(tmp_path / "t.csv"), "--tasks", "add,sub,max", "--n-per-task",
                           "5", "--json"], capsys)
    assert code == 0, err
    rows = read_rows(tmp_path / "t.csv")
    assert len(rows) == 15 and {r.task for r in rows} == {"add", "sub", "max"}
    for r in rows:
        code_, *nums = r.prompt.rstrip("=").split(" ")
        if r.task == "add":
            assert int(r.target) == int(nums[0]) + int(nums[1])
        if r.task == "sub":
            assert int(r.target) == int(nums[0]) - int(nums[1]) >= 0
    code, _, err = _cli(["generate", "-o", str(tmp_path / "u.csv"), "--tasks", "nope"], capsys)
    assert code == 2 and "nope" in err


def _setup_model(base):
    m, tok = tiny_llama()
    d = base / "model"
    m.save_pretrained(str(d))
    tok.save_pretrained(str(d))
    t = base / "t.jsonl"
    t.write_text('{"task": "a", "prompt": "sa 21=", "target": "12"}\n{"task": "b", "prompt": "sd 12=", '
                 '"target": "21"}\n')
    return {"model": d, "data": t}


def _setup_adapter(base):
    named = _setup_model(base)
    a = base / "a.safetensors"
    code, _, _ = _cli(["train", str(named["model"]), str(named["data"]), "-o", str(a), "--steps", "1",
                       "--batch-size", "2", "--no-manifest"], None)
    assert code == 0
    return {**named, "adapter": a}


def _adapter_of_another_model(base):
    """An adapter trained on the tiny model of :func:`_setup_model` and a copy of that model in another folder
    (the same shapes: the shape check alone accepted it)."""
    import shutil

    named = _setup_adapter(base)
    shutil.copytree(named["model"], base / "other")
    return {**named, "other": base / "other"}


# issue 59 (tests/test_mismatch_sweep.py): an adapter meets only the base model it was trained on
_OTHER = ("a.safetensors", "trained on model", "other'")
MISMATCH = [MismatchCase(cmd, [cmd, "{other}", "{adapter}", "{data}", "-o", "{out}/x" + ext], _adapter_of_another_model,
                         _OTHER, "model") for cmd, ext in (("eval", ".jsonl"), ("predict", ".jsonl"), ("routing", ".csv"))]

DATA_KINDS = ("missing", "empty", "binary", "folder", "truncated_jsonl")
CASES = [
    FuzzCase("train", ["train", "{model}", "{bad}", "-o", "{out}/a.safetensors", "--steps", "1"], suffix=".jsonl",
             kinds=DATA_KINDS, setup=_setup_model, label="data-jsonl"),
    FuzzCase("train", ["train", "{model}", "{bad}", "-o", "{out}/a.safetensors", "--steps", "1"], suffix=".csv",
             kinds=("missing", "empty", "binary", "wrong_csv", "nan_csv"), setup=_setup_model, label="data-csv"),
    FuzzCase("train", ["train", "{bad}", "{data}", "-o", "{out}/a.safetensors", "--steps", "1"],
             setup=_setup_model, label="model"),
    FuzzCase("eval", ["eval", "{model}", "{bad}", "{data}", "-o", "{out}/p.jsonl"], suffix=".safetensors",
             kinds=("missing", "empty", "binary", "folder", "truncated_json", "garbage_pt"), setup=_setup_adapter,
             label="adapter"),
    FuzzCase("eval", ["eval", "{model}", "{adapter}", "{bad}", "-o", "{out}/p.jsonl"], suffix=".jsonl",
             kinds=DATA_KINDS, setup=_setup_adapter, label="data"),
    FuzzCase("eval", ["eval", "{bad}", "{adapter}", "{data}", "-o", "{out}/p.jsonl"], setup=_setup_adapter,
             label="model"),
    FuzzCase("predict", ["predict", "{model}", "{bad}", "{data}", "-o", "{out}/g.jsonl"], suffix=".safetensors",
             kinds=("missing", "empty", "binary", "folder"), setup=_setup_adapter, label="adapter"),
    FuzzCase("predict", ["predict", "{model}", "{adapter}", "{bad}", "-o", "{out}/g.jsonl"], suffix=".csv",
             kinds=("missing", "empty", "binary", "wrong_csv"), setup=_setup_adapter, label="data"),
    FuzzCase("routing", ["routing", "{model}", "{bad}", "{data}", "-o", "{out}/u.csv"], suffix=".safetensors",
             kinds=("missing", "empty", "binary", "folder"), setup=_setup_adapter, label="adapter"),
    FuzzCase("routing", ["routing", "{model}", "{adapter}", "{bad}", "-o", "{out}/u.csv"], suffix=".jsonl",
             kinds=DATA_KINDS, setup=_setup_adapter, label="data"),
    FuzzCase("count", ["count", "{bad}"], label="model"),
]


def _setup_peft(base):
    """The model and data of :func:`_setup_model` and a peft LoRA folder for that model (written by
    export-peft's library call, so no peft is needed)."""
    from icmlkit.lib.finetune_lime.peft_io import export_peft, save_peft

    named = _setup_model(base)
    m, _ = tiny_llama()
    ad = apply_adapter(m, AdapterConfig(method="lora", targets=["q_proj"]))
    save_peft(base / "peft", export_peft(ad.cfg, ad.adapter_state(), {"model": str(named["model"])}))
    return {**named, "peft": base / "peft"}


# issue 56: the peft interop's inputs (a folder argument gets the four basic kinds)
PEFT_CASES = [
    FuzzCase("export-peft", ["export-peft", "{bad}", "-o", "{out}/pf"], suffix=".safetensors",
             kinds=("missing", "empty", "binary", "folder", "truncated_json", "garbage_pt"), label="adapter"),
    FuzzCase("import-peft", ["import-peft", "{model}", "{bad}", "-o", "{out}/a.safetensors"], setup=_setup_model,
             label="folder"),
    FuzzCase("import-peft", ["import-peft", "{bad}", "{peft}", "-o", "{out}/a.safetensors"], setup=_setup_peft,
             label="model"),
    FuzzCase("train", ["train", "{model}", "{data}", "--method", "lora", "--init-peft", "{bad}", "-o",
                       "{out}/a.safetensors", "--steps", "1"], setup=_setup_model, label="init-peft"),
]


@pytest.mark.parametrize("case", CASES + PEFT_CASES, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed(TOOL, case, tmp_path, capsys)


def test_adapter_for_another_model_is_an_input_error(tmp_path, capsys, adapter_file, tasks_file):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = char_tokenizer()
    m = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=48, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=4, num_key_value_heads=4))
    d = tmp_path / "other"
    m.save_pretrained(str(d))
    tok.save_pretrained(str(d))
    code, _, err = _cli(["eval", str(d), str(adapter_file), str(tasks_file), "-o", str(tmp_path / "p.jsonl")],
                        capsys)
    assert code == 2 and "the adapter was trained on model" in err and not (tmp_path / "p.jsonl").exists()
    # a file without the record of its model: the shapes still refuse it
    from icmlkit.lib.core.io import read_safetensors, write_safetensors

    tensors, meta = read_safetensors(adapter_file)
    write_safetensors(tmp_path / "old.safetensors", tensors, {k: v for k, v in meta.items() if k != "model"})
    code, _, err = _cli(["eval", str(d), str(tmp_path / "old.safetensors"), str(tasks_file), "-o",
                         str(tmp_path / "p.jsonl")], capsys)
    assert code == 1 and "does not fit" in err and not (tmp_path / "p.jsonl").exists()


def test_subprocess_help_bad_flag_and_tiny_run(tmp_path):
    r = run_tool(TOOL, "--help")
    assert r.returncode == 0 and "Example" in r.stdout
    assert run_tool(TOOL, "train", "--no-such").returncode == 2
    r = run_tool(TOOL, "generate", "-o", tmp_path / "t.jsonl", "--n-per-task", "2", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["rows"] == 16


def test_torchrun_two_processes_match_one(tmp_path, model_dir, tasks_file):
    torchrun = BIN / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun not installed")
    args = ["train", str(model_dir), str(tasks_file), "--steps", "4", "--batch-size", "4", "--dropout", "0.1",
            "--moe-lr", "1e-2", "--peft-lr", "1e-2", "--no-manifest", "--device", "cpu"]
    one = run_tool(TOOL, *args, "-o", tmp_path / "one.safetensors", env={"OMP_NUM_THREADS": "1"})
    assert one.returncode == 0, one.stderr
    env = {**os.environ, "ICMLKIT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}
    two = subprocess.run([str(torchrun), "--nproc-per-node", "2", "--master-port", "29547", str(BIN / TOOL), *args,
                          "-o", str(tmp_path / "two.safetensors")], capture_output=True, text=True, env=env,
                         timeout=600)
    assert two.returncode == 0, two.stderr[-2000:]
    a, _ = __import__("icmlkit.lib.core.io", fromlist=["x"]).read_safetensors(tmp_path / "one.safetensors")
    b, _ = __import__("icmlkit.lib.core.io", fromlist=["x"]).read_safetensors(tmp_path / "two.safetensors")
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], atol=1e-5, rtol=1e-4, err_msg=k)
    la = (tmp_path / "one.steps.csv").read_text().splitlines()
    lb = (tmp_path / "two.steps.csv").read_text().splitlines()
    for x, y in zip(la[1:], lb[1:]):
        assert abs(float(x.split(",")[2]) - float(y.split(",")[2])) < 1e-5


@pytest.mark.slow
def test_demo_runs(tmp_path, capsys):
    code, out, err = _cli(["demo", "--outdir", str(tmp_path / "demo"), "--steps", "20", "--json"], capsys)
    assert code == 0, err
    s = json.loads(out)
    assert len(s["rows"]) == 2 and (tmp_path / "demo" / "summary.json").exists()


@pytest.mark.slow
def test_smollm2_counts_on_q_v():
    from icmlkit.lib.finetune_lime.api import load_backbone
    from icmlkit.lib.finetune_lime.train import count

    m = load_backbone("smollm2").model
    s = count(AdapterConfig(method="lime-lora", targets=["q_proj", "v_proj"]), m)
    assert s["layers"] == 60 and s["trainable_params"] == s["closed_form"]
