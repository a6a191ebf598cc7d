"""attribute-tokens: the IFR operator's identities, FlashTrace's hops, metrics on hand-made scores,
IG completeness, bad inputs and the fuzz check. Tiny random Llama / Qwen2 / Qwen3 models built here
(SmolLM2 only in the slow test)."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from icmlkit.cli._common import run_cli
from icmlkit.cli.attribute_tokens import cli
from icmlkit.lib.attribute_tokens import api, ifr, metrics
from icmlkit.lib.attribute_tokens.config import TaskConfig, ToyConfig, TraceConfig

TOOL = "attribute-tokens"


def _llama(kv_heads=2, dtype=torch.float64, seed=0, attn="eager"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=210, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=256,
                      attn_implementation=attn)
    return LlamaForCausalLM(cfg).eval().to(dtype)


def _qwen(kind="qwen2", dtype=torch.float64):
    import transformers

    torch.manual_seed(1)
    Cfg = transformers.Qwen2Config if kind == "qwen2" else transformers.Qwen3Config
    Model = transformers.Qwen2ForCausalLM if kind == "qwen2" else transformers.Qwen3ForCausalLM
    cfg = Cfg(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, attn_implementation="eager", head_dim=8)
    return Model(cfg).eval().to(dtype)


IDS = torch.randint(0, 210, (23,), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("make", [lambda: _llama(), lambda: _qwen("qwen2"), lambda: _qwen("qwen3")],
                         ids=["llama-gqa", "qwen2", "qwen3"])
def test_recomputed_attention_equals_eager_and_parts_add_up(make):
    model = make()
    eager = ifr.capture(model, IDS, "eager")
    rec = ifr.capture(model, IDS, "recompute")
    assert rec.n_rep == 2
    all_rows = torch.arange(len(IDS))
    for le, lr in zip(eager.layers, rec.layers):
        assert lr.probs is None and le.probs is not None
        p = ifr.sink_probs(rec, lr, all_rows)
        assert torch.allclose(p, le.probs, atol=1e-6)
        # folded norm: the per-head parts of every token add up to x_mid - x_prev
        parts = torch.einsum("hij,hjk,hkd->id", p, ifr._head_values(rec, lr), lr.w_o)
        assert torch.allclose(parts, lr.x_mid - lr.x_prev, atol=1e-5)


def test_folded_values_match_the_models_value_path():
    model = _llama()
    cache = ifr.capture(model, IDS)
    layer = model.model.layers[1]
    with torch.no_grad():
        ref = layer.self_attn.v_proj(layer.input_layernorm(cache.layers[1].x_prev))
    v = cache.layers[1].v.transpose(0, 1).reshape(len(IDS), -1)
    assert torch.allclose(v, ref, atol=1e-6)
    ln = torch.nn.LayerNorm(8).double()
    with torch.no_grad():
        ln.weight.uniform_(0.5, 2)
        ln.bias.uniform_(-1, 1)
    x = torch.randn(5, 8, dtype=torch.float64)
    s, xc, w, b = ifr.fold_norm(ln, x)
    assert torch.allclose(s[:, None] * xc * w + b, ln(x), atol=1e-6)


def test_linearity_identity_of_the_span_sum():
    """sum_{i in S} attn_out_i = sum_j sum_h abar_j^h v_j^h W_O^h (to 1e-5), float32 model."""
    model = _llama(dtype=torch.float32, attn="sdpa")
    cache = ifr.capture(model, IDS)
    sinks = torch.arange(15, 23)
    w = torch.ones(len(sinks))
    for layer in cache.layers:
        abar = ifr.alpha_bar(cache, layer, sinks, w, sink_chunk=3)
        rhs = torch.einsum("hj,hjk,hkd->d", abar, ifr._head_values(cache, layer), layer.w_o)
        assert torch.allclose(layer.attn_out[sinks].sum(0), rhs, atol=1e-5)


def test_one_token_span_is_tokenwise_ifr_and_chunking_changes_nothing():
    model = _llama()
    cache = ifr.capture(model, IDS)
    sinks = torch.arange(18, 23)
    rows = ifr.tokenwise_rows(cache, sinks, chunk_tokens=5, sink_chunk=2)
    for r, i in enumerate(sinks.tolist()):
        t, _, _ = ifr.span_shares(cache, [i])
        assert torch.allclose(rows[r], t, atol=1e-12)
    a, ea, ra = ifr.span_shares(cache, sinks, chunk_tokens=3, sink_chunk=2)
    b, eb, rb = ifr.span_shares(cache, sinks, chunk_tokens=1000, sink_chunk=1000)
    assert torch.allclose(a, b, atol=1e-12) and torch.allclose(ra, rb, atol=1e-12)
    # shares and the residual share form a partition of each layer's proximity mass
    assert torch.allclose(ea.sum(1) + ra, torch.ones(len(cache.layers), dtype=ea.dtype), atol=1e-9)
    # proximity is non-linear: the span aggregate is a different method from the mean of rows
    assert not torch.allclose(a, rows.mean(0), atol=1e-4)
    # weights: a weight vector concentrated on one sink equals that sink's row
    w = torch.zeros(len(sinks), dtype=torch.float64)
    w[2] = 3.0
    c, _, _ = ifr.span_shares(cache, sinks, w)
    assert torch.allclose(c, rows[2], atol=1e-12)


def test_prox_definition():
    x = torch.tensor([1.0, -2.0, 3.0])
    assert float(ifr.prox(x, x)) == 6.0                      # the whole vector
    assert float(ifr.prox(-x, x)) == 0.0                     # opposite: clipped at 0
    assert float(ifr.prox(torch.tensor([0.5, 0, 0]), x)) == pytest.approx(0.5)


def test_hop_ratios_on_a_hand_example(monkeypatch):
    """N = 6: P = 0..2, G = 3..5, output = 5 (hand shares instead of a model)."""
    calls = []
    t0 = torch.tensor([0.1, 0.2, 0.0, 0.3, 0.4, 0.0], dtype=torch.float64)
    t1 = torch.tensor([0.5, 0.1, 0.1, 0.1, 0.0, 0.0], dtype=torch.float64)

    def fake(cache, sinks, weights=None, **kw):
        calls.append((list(torch.as_tensor(sinks).tolist()), None if weights is None else weights.tolist()))
        return (t0 if len(calls) == 1 else t1).clone(), None, None

    monkeypatch.setattr(ifr, "span_shares", fake)
    cache = ifr.ModelCache(layers=[], n_rep=1, scaling=1.0, n_tokens=6, dtype=torch.float64)
    stop = np.zeros(6, dtype=bool)
    res = ifr.recursive(cache, prompt_len=3, gen_span=(3, 5), output_span=(5, 5), stop_mask=stop, hops=1)
    assert calls[0][0] == [5] and calls[1][0] == [3, 4, 5]
    assert calls[1][1] == pytest.approx([0.3, 0.4, 0.0])          # hop-1 sinks weighted by T_0 on G
    assert res.ratios == pytest.approx([0.7, 0.7 * 0.1 / 0.8])
    assert res.final[:3].tolist() == pytest.approx([0.1 + 0.7 * 0.5, 0.2 + 0.7 * 0.1, 0.7 * 0.1])
    assert res.final[3:].tolist() == [0, 0, 0]
    # a stop token is masked from the vectors (and weighted 0 as a sink)
    calls.clear()
    stop[1] = True
    res = ifr.recursive(cache, prompt_len=3, gen_span=(3, 5), output_span=(5, 5), stop_mask=stop, hops=1)
    assert float(res.final[1]) == 0.0 and res.ratios[0] == pytest.approx(0.7 / 0.8)


@pytest.mark.parametrize("budget", [0, 10_000, None], ids=["nothing-kept", "part-kept", "all-kept"])
def test_the_hop_memo_changes_no_number_and_capture_skips_the_lm_head(monkeypatch, budget):
    """Hops that reuse the previous hop's u = v W_O and attention rows (HopMemo) give bit-identical
    numbers to hops that recompute them, whatever part of them fits the budget; capture never runs
    the LM head (nothing reads the logits)."""
    model = _llama(dtype=torch.float32, attn="sdpa")
    model.lm_head.register_forward_hook(lambda *a: pytest.fail("capture ran the LM head"))
    cache = ifr.capture(model, IDS)
    stop = np.zeros(len(IDS), dtype=bool)
    stop[[4, 14]] = True
    kw = dict(prompt_len=10, gen_span=(10, 22), output_span=(10, 22), stop_mask=stop, hops=2,
              chunk_tokens=5, sink_chunk=3)
    calls = []
    probs = ifr.sink_probs
    monkeypatch.setattr(ifr, "sink_probs", lambda *a: calls.append(1) or probs(*a))
    monkeypatch.setattr(ifr, "MEMO_BYTES", 0)
    ref = ifr.recursive(cache, **kw)
    n_ref, calls[:] = len(calls), []
    monkeypatch.setattr(ifr, "MEMO_BYTES", 1 << 30 if budget is None else budget)
    got = ifr.recursive(cache, **kw)
    assert (len(calls) == n_ref) == (budget == 0)   # attention rows reused when kept
    assert torch.equal(got.final, ref.final) and got.ratios == ref.ratios
    assert all(torch.equal(a, b) for a, b in zip(got.hops, ref.hops))
    # the same numbers as composing span_shares by hand (hop 1 weighted by T_0 on G)
    keep = torch.as_tensor(~stop)
    t0 = torch.where(keep, ifr.span_shares(cache, torch.arange(10, 23), keep[10:].float(), chunk_tokens=5,
                                           sink_chunk=3)[0], torch.tensor(0.0))
    assert torch.equal(t0, ref.hops[0])


def test_recall_rise_rise_ap_on_hand_scores():
    scores = np.array([0.9, 0.1, 0.8, 0.0, 0.3, 0.2, 0.05, 0.0, 0.0, 0.01, 0.0, 0.0])
    gold = np.zeros(12, dtype=bool)
    gold[[0, 4]] = True
    elig = np.ones(12, dtype=bool)
    assert metrics.topk_recall(scores, gold, elig, 0.1) == 0.5     # k = ceil(1.2) = 2: positions 0, 2
    assert metrics.topk_recall(scores, gold, elig, 0.2) == 1.0     # k = 3: positions 0, 2, 4
    elig2 = elig.copy()
    elig2[0] = False
    assert metrics.topk_recall(scores, gold, elig2, 0.1) == 1.0    # gold outside eligibility does not count
    curve = np.array([0.0, -1.0, -2.0, -4.0])                      # log p after 0..3 groups
    z = metrics.normalised_curve(curve)
    assert z.tolist() == pytest.approx([1.0, 0.75, 0.5, 0.0])
    assert metrics.rise(curve) == pytest.approx((1.75 + 1.25 + 0.5) / 2 / 3)
    assert metrics.rise(np.array([0.0, 0.5, -0.5, -1.0])) == pytest.approx(
        metrics._auc([1.0, 1.0, 0.5, 0.0]))                        # monotone: clipped at 1
    assert metrics.rise(np.array([-1.0, 0.0])) is None             # deletion does not hurt: skipped
    order = np.array([0, 2, 4])
    s = np.array([0.5, 0, 0.25, 0, 0.25])
    d = metrics.remaining_density(s, order, 3)
    assert d.tolist() == pytest.approx([1.0, 0.5, 0.25, 0.0])
    assert metrics.rise_ap(curve, s, order, 3) == pytest.approx(metrics._auc(z + np.abs(z - d)))


def test_ig_completeness_on_the_toy_model():
    from icmlkit.lib.attribute_tokens.baselines import _forward_fn, captum_scores
    from icmlkit.lib.attribute_tokens.toy import make_model

    model = make_model(ToyConfig(layers=2, hidden=32, heads=4), 210, seed=0).eval()
    ids = IDS.tolist()
    scores, delta = captum_scores(model, ids, 18, (19, 22), "ig", ig_steps=64, return_delta=True)
    f, x, _ = _forward_fn(model, ids, 18, (19, 22))
    with torch.no_grad():
        gap = float(f(x) - f(torch.zeros_like(x)))
    assert abs(float(scores.sum()) - gap) <= 1e-3 * max(1.0, abs(gap))
    assert abs(delta) <= 1e-3 * max(1.0, abs(gap))


# ------------------------------------------------------------------------------ CLI

_CACHE: dict = {}


def _toy_folder() -> Path:
    """A tiny random toy model folder (word tokenizer), built once per session."""
    if "toy" not in _CACHE:
        from icmlkit.lib.attribute_tokens.toy import ToyResult, make_model, make_tokenizer, save_toy

        d = Path(tempfile.mkdtemp(prefix="attrib-toy-")) / "toy"
        tok = make_tokenizer()
        model = make_model(ToyConfig(layers=2, hidden=32, heads=4), len(tok.get_vocab()), seed=0).eval()
        save_toy(d, ToyResult(model, tok, {"untrained": True}))
        _CACHE["toy"] = d
    return _CACHE["toy"]


def invoke(argv, capsys):
    import os

    os.environ["ICMLKIT_NO_PROGRESS"] = "1"
    capsys.readouterr()
    code = run_cli(cli, TOOL, [*argv, "--no-progress"])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _vt_file(tmp_path, n=3) -> Path:
    p = tmp_path / "vt.jsonl"
    code = run_cli(cli, TOOL, ["generate", "vt", "--n", str(n), "--fillers", "3", "--chains", "2", "-o", str(p)])
    assert code == 0
    return p


def test_trace_single_and_batch_outputs(tmp_path, capsys):
    toy = _toy_folder()
    prompt = "X1 = 47 . X2 = X1 . the sky is blue . ? X2"
    code, out, err = invoke(["trace", str(toy), "--prompt", prompt, "--target", " X2 = X1 = 47 ANSWER 47",
                             "--output-span", "21:21", "--reasoning-span", "15:19", "--json",
                             "-o", str(tmp_path / "one.jsonl"), "--html", str(tmp_path / "one.html")], capsys)
    assert code == 0, err
    s = json.loads(out)
    assert {"method", "hops", "n_prompt_tokens", "n_target_tokens", "thinking_ratios", "seconds"} <= set(s)
    assert s["n_prompt_tokens"] == 15 and s["n_target_tokens"] == 7 and len(s["thinking_ratios"]) == 2
    row = json.loads((tmp_path / "one.jsonl").read_text())
    assert len(row["scores"]) == 15 and len(row["hop_scores"]) == 2 and row["tokens"][0] == "X1"
    assert "<span" in (tmp_path / "one.html").read_text()
    vt = _vt_file(tmp_path, 4)
    outs = []
    for k in (1, 2):
        code, _, err = invoke(["trace", str(toy), "--input", str(vt), "--shard", f"{k}/2",
                               "-o", str(tmp_path / f"s{k}.jsonl")], capsys)
        assert code == 0, err
        outs.append((tmp_path / f"s{k}.jsonl").read_text())
    code, _, _ = invoke(["trace", str(toy), "--input", str(vt), "-o", str(tmp_path / "all.jsonl")], capsys)
    assert outs[0] + outs[1] == (tmp_path / "all.jsonl").read_text()      # shards concatenate, same bytes
    code, _, err = invoke(["trace", str(toy), "--input", str(vt), "--method", "ifr-tokenwise",
                           "-o", str(tmp_path / "t.npz")], capsys)
    assert code == 0, err
    z = np.load(tmp_path / "t.npz", allow_pickle=False)
    assert len(z["ids"]) == 4 and z["offsets"][-1] == len(z["scores"])


def test_char_spans_map_to_the_right_tokens():
    from icmlkit.lib.attribute_tokens.tasks import make_task
    from icmlkit.lib.attribute_tokens.toy import make_tokenizer

    tok = make_tokenizer()
    row = make_task("vt", TaskConfig(n=1, chains=2, fillers=2), seed=0)[0]
    ex = api.prepare(row, tok)
    words = (row["prompt"] + row["target"]).split()
    assert [ex.tokens[i] for i in range(ex.output_span[0], ex.output_span[1] + 1)] == [row["answer"]]
    assert ex.tokens[ex.reasoning_span[0]] == words[len(row["prompt"].split())]
    assert ex.gold.sum() == 6                       # 3 statements "X5 X2" of 2 tokens (toy style: no "=")
    assert all(ex.tokens[i] != "." for i in np.flatnonzero(ex.gold))
    # the written chain follows the statements: every consecutive pair is an assignment of the prompt
    chain = row["target"].split()[:-2]
    for a, b in zip(chain, chain[1:]):
        assert f" {a} {b} ." in " " + row["prompt"]


def test_eval_timing_and_qwen2(tmp_path, capsys):
    vt = _vt_file(tmp_path, 2)
    code, out, err = invoke(["eval", str(_toy_folder()), str(vt), "--methods", "flashtrace,ifr-span,gradxinput,random",
                             "--json", "-o", str(tmp_path / "e.csv"), "--groups", "5"], capsys)
    assert code == 0, err
    s = json.loads(out)
    assert [r["method"] for r in s["methods"]] == ["flashtrace", "ifr-span", "gradxinput", "random"]
    assert all(set(r) >= {"recall_at_10", "rise", "rise_ap", "seconds_per_example"} for r in s["methods"])
    # a Qwen2 decoder (q/k/v biases, GQA) through the library with the word tokenizer
    from icmlkit.lib.attribute_tokens.config import EvalConfig
    from icmlkit.lib.attribute_tokens.toy import make_tokenizer

    b = api.Bundle(_qwen("qwen2", torch.float32), make_tokenizer())
    exs = api.prepare_rows(api.read_rows(str(vt)), b.tokenizer, "vt", require_gold=True)
    ev = api.evaluate(b, exs, EvalConfig(methods=["flashtrace", "ifr-tokenwise"], groups=4), TraceConfig())
    assert all(r["recall_at_10"] is not None and r["rise"] is not None for r in ev.rows)
    code, out, err = invoke(["timing", str(_toy_folder()), "--lengths", "4,16", "--methods", "flashtrace,ifr-tokenwise",
                             "--prompt-tokens", "30", "--json"], capsys)
    assert code == 0, err
    s = json.loads(out)
    assert s["target_lengths"] == [4, 16] and len(s["speedup_vs_tokenwise"]) == 2


def test_methods_agree_with_the_library_and_random_is_seeded(tmp_path, capsys):
    toy = _toy_folder()
    vt = _vt_file(tmp_path, 1)
    b = api.load(str(toy))
    ex = api.prepare_rows(api.read_rows(str(vt)), b.tokenizer, "vt")[0]
    a1 = api.attribute(b, ex, TraceConfig(method="ifr-span"))
    a2 = api.attribute(b, ex, TraceConfig(method="flashtrace", hops=1))
    assert np.allclose(a1.scores, a2.hops[0] * ex.eligible)            # hop 0 of flashtrace is ifr-span
    assert a2.ratios[1] <= a2.ratios[0] <= 1
    r1 = api.attribute(b, ex, TraceConfig(method="random"), seed=1).scores
    r2 = api.attribute(b, ex, TraceConfig(method="random"), seed=1).scores
    r3 = api.attribute(b, ex, TraceConfig(method="random"), seed=2).scores
    assert np.array_equal(r1, r2) and not np.array_equal(r1, r3)
    code, _, err = invoke(["trace", str(toy), "--input", str(vt), "--method", "attnlrp"], capsys)
    assert code == 4 and "pip install" in err


def _write(p: Path, rows) -> Path:
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


@pytest.mark.parametrize("change, where", [
    ({"output_span": [0, 2]}, "overlaps the prompt"),
    ({"output_span": [5, 9999]}, "outside the sequence"),
    ({"output_span": "3"}, "output_span"),
    ({"reasoning_span": [1, 2]}, "overlaps the prompt"),
    ({"gold_spans": [[0, 9999]]}, "outside"),
    ({"prompt": 7}, "prompt"),
    ({"target": ""}, "target"),
    ({"span_unit": "word"}, "span_unit"),
])
def test_bad_rows_exit_1_naming_file_line_and_field(tmp_path, capsys, change, where):
    row = {"id": "a", "prompt": "X1 = 47 . ? X1", "target": " X1 = 47 ANSWER 47", "output_span": [10, 10],
           "span_unit": "token"}
    good = _write(tmp_path / "good.jsonl", [row])
    code, _, err = invoke(["trace", str(_toy_folder()), "--input", str(good)], capsys)
    assert code == 0, err
    bad = _write(tmp_path / "bad.jsonl", [row, {**row, **change}])
    code, _, err = invoke(["trace", str(_toy_folder()), "--input", str(bad), "-o", str(tmp_path / "o.jsonl")], capsys)
    assert code == 1 and err.startswith("Error:") and "bad.jsonl, line 2" in err and where in err, err
    assert not (tmp_path / "o.jsonl").exists()


def test_bad_models_exit_1(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, _, err = invoke(["trace", str(tmp_path / "empty"), "--prompt", "a", "--target", "b"], capsys)
    assert code == 1 and "config.json" in err
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=210)).save_pretrained(str(tmp_path / "gpt2"))
    from icmlkit.lib.attribute_tokens.toy import make_tokenizer, save_tokenizer

    save_tokenizer(tmp_path / "gpt2", make_tokenizer())
    code, _, err = invoke(["trace", str(tmp_path / "gpt2"), "--prompt", "X1", "--target", " X1"], capsys)
    assert code == 1 and "not supported" in err
    code, _, err = invoke(["trace", str(_toy_folder()), "--prompt", "X1", "--target", " X1", "--device", "cuda"], capsys)
    assert code == 4 if not torch.cuda.is_available() else code == 0


def test_usage_errors_exit_2(capsys):
    toy = str(_toy_folder())
    assert invoke(["trace", toy, "--prompt", "X1"], capsys)[0] == 2                        # no target
    assert invoke(["trace", toy, "--prompt", "X1", "--target", "X1", "--method", "flashtrace",
                   "--hops", "0"], capsys)[0] == 2
    assert invoke(["eval", toy, "x.jsonl", "--methods", "nope"], capsys)[0] == 2
    assert invoke(["trace", toy, "--prompt", "X1", "--target", " X1", "-o", "x.txt"], capsys)[0] == 2


def test_train_toy_resume_gives_the_same_model(tmp_path, interrupting_checkpointer):
    from icmlkit.lib.attribute_tokens.toy import train_toy
    from icmlkit.lib.core.checkpoint import Checkpointer

    cfg = ToyConfig(layers=1, hidden=32, heads=2, steps=4, batch=4, eval_n=2, min_lines=2, lines_max=4,
                    eval_lines_min=2)
    full = train_toy(cfg, seed=3)
    ck = tmp_path / "m.ckpt.pt"
    with pytest.raises(Exception) as info:
        train_toy(cfg, seed=3, checkpointer=interrupting_checkpointer(ck, every=2))
    assert type(info.value).__name__ == "Interrupted" and ck.is_file()
    resumed = train_toy(cfg, seed=3, checkpointer=Checkpointer(ck, every=2, resume=True))
    for (k, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), k
    assert full.summary["final_loss"] == resumed.summary["final_loss"]


def test_toy_curriculum_grows_both_tasks_or_starts_with_vt_alone():
    from icmlkit.lib.attribute_tokens.toy import step_rows

    def sizes(rows):
        vt = [r for r in rows if r["task"] == "vt"]
        niah = [r for r in rows if r["task"] == "niah-kv"]
        chains = max(r["prompt"].count(" . ") for r in vt)  # statements + filler sentences
        lines = max((sum(w.startswith("k") for w in r["prompt"].split()[:-2]) for r in niah), default=0)
        return len(vt), len(niah), chains, lines

    cfg = ToyConfig(steps=100, batch=8, train_queries=1)
    first, last = sizes(step_rows(cfg, 0, 0)), sizes(step_rows(cfg, 0, 99))
    assert first[:2] == last[:2] == (4, 4)                    # both tasks from the start (--vt-first 0)
    assert first[2] < last[2] and first[3] <= 6 < last[3]     # VT grows with NIAH-KV's curriculum
    assert step_rows(cfg, 0, 5) == step_rows(cfg, 0, 5)       # a step's batch is a function of seed and step
    early = sizes(step_rows(ToyConfig(steps=100, batch=8, train_queries=1, vt_first=0.5), 0, 10))
    assert early[:2] == (8, 0)                                # --vt-first: VT alone first


def test_train_toy_cli_writes_a_loadable_folder(tmp_path, capsys):
    out = tmp_path / "toy"
    code, so, err = invoke(["train-toy", "-o", str(out), "--steps", "2", "--batch", "2", "--layers", "1",
                            "--hidden", "32", "--heads", "2", "--eval-n", "2", "--min-lines", "2",
                            "--lines-max", "4", "--eval-lines-min", "2", "--json"], capsys)
    assert code == 0, err
    s = json.loads(so)
    assert {"accuracy_niah_kv", "accuracy_vt", "meets_95"} <= set(s)
    assert (out / "config.json").is_file() and not (tmp_path / "toy.ckpt.pt").exists()
    assert api.load(str(out)).model.config.model_type == "llama"


# ------------------------------------------------------------------------------ fuzz

from fuzzing import DEFAULT_KINDS, FuzzCase, check_malformed  # noqa: E402

JSONL_KINDS = DEFAULT_KINDS + ("truncated_jsonl", "truncated_json")


def _model(base):
    return {"toy": _toy_folder()}


def _model_and_data(base):
    p = base / "vt.jsonl"
    run_cli(cli, TOOL, ["generate", "vt", "--n", "1", "--chains", "2", "--fillers", "1", "-o", str(p)])
    return {"toy": _toy_folder(), "data": p}


CASES = [
    FuzzCase("trace", ["trace", "{toy}", "--input", "{bad}", "-o", "{out}/t.jsonl"], suffix=".jsonl",
             kinds=JSONL_KINDS, setup=_model),
    FuzzCase("trace", ["trace", "{bad}", "--prompt", "X1", "--target", " X1", "-o", "{out}/t.jsonl"],
             label="model", setup=_model),
    FuzzCase("eval", ["eval", "{toy}", "{bad}", "-o", "{out}/e.csv"], suffix=".jsonl", kinds=JSONL_KINDS,
             setup=_model),
    FuzzCase("eval", ["eval", "{bad}", "{data}", "-o", "{out}/e.csv"], label="model", setup=_model_and_data),
    FuzzCase("timing", ["timing", "{bad}", "--lengths", "2", "-o", "{out}/t.csv"], label="model"),
    FuzzCase("trace", ["trace", "{toy}", "--input", "{data}", "--config", "{bad}", "-o", "{out}/t.jsonl"],
             suffix=".json", kinds=DEFAULT_KINDS + ("truncated_json",), label="config", setup=_model_and_data),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed(TOOL, case, tmp_path, capsys)


def test_wrong_shaped_rows_are_one_line_errors(tmp_path, capsys):
    for rows in ([[1, 2]], [{"prompt": "X1"}], [{"prompt": "X1", "target": " X1", "output_span": [1, "a"]}],
                 [{"prompt": "X1", "target": " X1", "gold_spans": {"a": 1}}]):
        p = tmp_path / "w.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        code, _, err = invoke(["trace", str(_toy_folder()), "--input", str(p)], capsys)
        assert code == 1 and err.startswith("Error:") and "Traceback" not in err, err
    p.write_text(json.dumps({"prompt": "X1", "target": " X1"}) + "\n")
    code, _, err = invoke(["eval", str(_toy_folder()), str(p)], capsys)
    assert code == 1 and "gold_spans" in err


@pytest.mark.slow
def test_smollm2_trace_and_hops_move_mass_to_the_prompt(tmp_path, capsys):
    vt = tmp_path / "vt.jsonl"
    run_cli(cli, TOOL, ["generate", "vt", "--style", "text", "--n", "1", "--chains", "2", "--fillers", "1",
                        "-o", str(vt)])
    code, out, err = invoke(["trace", "smollm2", "--input", str(vt), "--json"], capsys)
    assert code == 0, err
    s = json.loads(out)
    r0, r1 = s["thinking_ratios"]          # one example: the per-hop list itself
    assert 0 < r1 < r0 < 1


# ------------------------------------------------------------------------------ executables

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from conftest import run_tool  # noqa: E402

BIN = Path(sys.executable).parent
TINY_TOY = ["--steps", "2", "--batch", "4", "--layers", "1", "--hidden", "32", "--heads", "2", "--eval-n", "2",
            "--min-lines", "2", "--lines-max", "4", "--eval-lines-min", "2", "--no-manifest", "--device", "cpu"]


def test_subprocess_help_bad_flag_and_tiny_run(tmp_path):
    r = run_tool(TOOL, "--help")
    assert r.returncode == 0 and "HTTP endpoints" in r.stdout and "[reconstructed]" in r.stdout
    assert run_tool(TOOL, "trace", "--no-such").returncode == 2
    r = run_tool(TOOL, "generate", "niah-kv", "--n", "2", "-o", tmp_path / "n.jsonl", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["n"] == 2


@pytest.mark.slow
def test_torchrun_two_processes_match_one(tmp_path):
    from icmlkit.lib.core.io import read_safetensors

    torchrun = BIN / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun not installed")
    one = run_tool(TOOL, "train-toy", *TINY_TOY, "-o", tmp_path / "one")
    assert one.returncode == 0, one.stderr
    env = {**os.environ, "ICMLKIT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}
    two = subprocess.run([str(torchrun), "--nproc-per-node", "2", "--master-port", "29547", str(BIN / TOOL),
                          "train-toy", *TINY_TOY, "-o", str(tmp_path / "two")], capture_output=True, text=True,
                         env=env, timeout=600)
    assert two.returncode == 0, two.stderr[-2000:]
    a, _ = read_safetensors(tmp_path / "one" / "model.safetensors")
    b, _ = read_safetensors(tmp_path / "two" / "model.safetensors")
    for k in a:
        assert np.allclose(a[k], b[k], atol=1e-4), k


def test_chat_template_shifts_char_spans_and_masks_template_tokens():
    from icmlkit.lib.attribute_tokens.tasks import make_task
    from icmlkit.lib.attribute_tokens.toy import make_tokenizer

    tok = make_tokenizer()
    tok.chat_template = ("{% for m in messages %}FILL {{ m['content'] }} FILL{% endfor %}"
                         "{% if add_generation_prompt %} FILL{% endif %}")
    row = make_task("vt", TaskConfig(n=1, chains=2, fillers=1), seed=0)[0]
    plain, chat = api.prepare(row, tok), api.prepare(row, tok, chat=True)
    assert chat.n_prompt == plain.n_prompt + 3 and chat.tokens[0] == "FILL"
    assert [chat.tokens[i] for i in np.flatnonzero(chat.gold)] == [plain.tokens[i] for i in np.flatnonzero(plain.gold)]
    assert chat.output_span == (plain.output_span[0] + 3, plain.output_span[1] + 3)
    assert chat.stop[0] and chat.stop[chat.n_prompt - 1] and chat.stop[chat.n_prompt - 2]
