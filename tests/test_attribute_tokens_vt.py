"""attribute-tokens: the multi-hop RULER-style variable-tracking task (``--style ruler``), the
judging of a model's chain-of-thought reply, and the one-capture IFR family, on a tiny Qwen2
decoder with a character tokenizer (never the 1.1 GB model)."""
from __future__ import annotations

import dataclasses
import re
import string

import numpy as np
import pytest
import torch

from icmlkit.lib.attribute_tokens import api
from icmlkit.lib.attribute_tokens.config import EvalConfig, TaskConfig, TraceConfig
from icmlkit.lib.attribute_tokens.tasks import judge_vt_reply, make_task


def _resolve(prompt: str) -> tuple[str, list[str], int]:
    """Follow the prompt's assignments back from the queried variable: (value, statements, steps)."""
    stmts = dict(re.findall(r"VAR (\w+) = (VAR \w+|\d+)\.", prompt))
    var = re.search(r"value of VAR (\w+)\?", prompt).group(1)
    seen, steps = [], 0
    while True:
        rhs = stmts[var]
        seen.append(f"VAR {var} = {rhs}")
        steps += 1
        if not rhs.startswith("VAR "):
            return rhs, seen, steps
        var = rhs[4:]


@pytest.mark.parametrize("hops", [3, 4])
def test_ruler_vt_has_the_hops_and_its_answer_and_gold_follow_the_chain(hops):
    rows = make_task("vt", TaskConfig(n=5, chains=3, hops=hops, fillers=3, style="ruler"), seed=2)
    for r in rows:
        text = r["prompt"] + r["target"]
        assert len(re.findall(r"VAR \w+ = (?:VAR \w+|\d+)\.", r["prompt"])) == 3 * hops
        value, stmts, steps = _resolve(r["prompt"])
        assert steps == hops and value == r["answer"] and len(r["answer"]) == 5
        assert sorted(text[a:b + 1] for a, b in r["gold_spans"]) == sorted(stmts)
        assert text[r["output_span"][0]:r["output_span"][1] + 1] == r["answer"]
        chain = text[r["reasoning_span"][0]:r["reasoning_span"][1] + 1]
        assert chain == " = ".join([s.split(" = ")[0] for s in stmts] + [value])
        assert r["target"].endswith("Answer: " + r["answer"])
    assert make_task("vt", TaskConfig(n=5, hops=hops, style="ruler"), seed=2) != rows  # the config matters


def test_judge_keeps_correct_replies_and_cuts_after_the_answer():
    r = make_task("vt", TaskConfig(n=1, chains=3, hops=3, fillers=2, style="ruler"), seed=0)[0]
    good = judge_vt_reply(r, r["target"] + ". Done, 12345.")
    assert good is not None and good["chain_ok"] and good["target"] == r["target"]
    assert good["output_span"] == r["output_span"] and good["reasoning_span"][0] == len(r["prompt"])
    short = judge_vt_reply(r, f"The value is {r['answer']}.")  # no "Answer:": the last number
    assert short is not None and not short["chain_ok"]
    wrong = str(int(r["answer"]) % 90000 + 10001)
    assert judge_vt_reply(r, r["target"].replace("Answer: " + r["answer"], "Answer: " + wrong)) is None
    assert judge_vt_reply(r, "I do not know.") is None


def _char_bundle():
    from icmlkit.lib.hf.tiny import word_tokenizer
    import transformers

    chars = list(string.ascii_letters + string.digits + string.punctuation + " \n")
    tok = word_tokenizer(["[PAD]", "[UNK]", "[EOS]"] + chars, unk="[UNK]", pad="[PAD]", eos="[EOS]",
                         split="chars", decoder="fuse")
    tok.chat_template = ("{% for m in messages %}U: {{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}A: {% endif %}")
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                                   head_dim=8, pad_token_id=0, eos_token_id=2)
    return api.Bundle(transformers.Qwen2ForCausalLM(cfg).eval().to(torch.float64), tok, "tiny-qwen2")


def test_tiny_qwen_items_replies_and_the_ifr_family_from_one_capture():
    bundle = _char_bundle()
    rows = make_task("vt", TaskConfig(n=2, chains=2, hops=3, fillers=1, style="ruler"), seed=1)
    replies = api.generate_replies(bundle, [r["prompt"] for r in rows], 6, chat=True, batch_size=2)
    assert len(replies) == 2 and all(isinstance(t, str) for t in replies)
    # a random model answers wrongly; the reference chain-of-thought stands in for a correct reply
    row = judge_vt_reply(rows[0], rows[0]["target"])
    ex = api.prepare(row, bundle.tokenizer, chat=True, require_gold=True)
    assert ex.gold[:ex.n_prompt].sum() == ex.gold.sum() > 0
    assert "".join(ex.tokens[ex.output_span[0]:ex.output_span[1] + 1]) == row["answer"]
    assert ex.reasoning_span[1] < ex.output_span[0] and ex.gen_span == (ex.n_prompt, ex.n - 1)
    tc = TraceConfig()
    fam = api.attribute_ifr_family(bundle, ex, tc, hops=(0, 1, 2))
    assert list(fam) == ["ifr-span", "flashtrace", "flashtrace-hops2", "ifr-tokenwise"]
    for name, method, h in (("ifr-span", "ifr-span", 0), ("flashtrace", "flashtrace", 1),
                            ("flashtrace-hops2", "flashtrace", 2), ("ifr-tokenwise", "ifr-tokenwise", 0)):
        one = api.attribute(bundle, ex, dataclasses.replace(tc, method=method, hops=h))
        assert np.allclose(fam[name].scores, one.scores, atol=1e-10), name
        assert fam[name].ratios == pytest.approx(one.ratios, abs=1e-10)
        assert not fam[name].scores[~ex.eligible].any()
    # each hop adds ratio-weighted prompt mass: the scores grow with the hops
    assert (fam["flashtrace-hops2"].scores >= fam["flashtrace"].scores - 1e-12).all()
    assert (fam["flashtrace"].scores >= fam["ifr-span"].scores - 1e-12).all()
    scored = api.score_attribution(bundle, fam["flashtrace"], EvalConfig(groups=3), api.pad_id(bundle))
    assert 0 <= scored["recall_at_10"] <= 1
    assert scored["rise"] is None or 0 <= scored["rise"] <= scored["rise_ap"]
