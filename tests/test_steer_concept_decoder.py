"""steer-concept's decoder path (decode) and question-form neutral set (neutral), on tiny models only."""
from __future__ import annotations

import json

import pytest
import torch
from test_steer_concept import TEXTS, _llama_steering, call, tiny_llama, tiny_model  # noqa: F401 - fixtures

HORSES = ["What do horses eat?", "How fast can a horse run?", "Where do wild horses live?", "Why do horses sleep standing?"]
MOTOS = ["How fast can a motorcycle go?", "What oil does a motorbike need?", "Why do motorcycles lean in turns?",
         "How loud is a motorcycle engine?"]
OTHER = ["A cat sleeps on a sofa.", "A red car on a street.", "Two people eat lunch in a park.", "A tall tree."]


def test_neutral_texts_take_the_prompts_form():
    from icmlkit.lib.steer_concept.data import QUESTION_FRAMES, neutral_texts, prompt_form

    caps = ["A cat sleeps on a sofa.", "TV on a wall.", "Two dogs play.", "A bus.", "A tree.", "A cup.", "A bed."]
    texts, form = neutral_texts(caps, HORSES)
    assert form == "questions" and len(texts) == len(caps)
    assert texts[0] == "What is happening in this scene: a cat sleeps on a sofa?"
    assert texts[1] == "How would you describe TV on a wall?"          # an acronym keeps its capitals
    assert texts[6] == QUESTION_FRAMES[0].format("a bed")            # frame i mod 6
    assert all(t.endswith("?") for t in texts)
    assert neutral_texts(caps, OTHER) == (caps, "captions")          # caption prompts: captions as they are
    assert neutral_texts(caps, HORSES, "captions") == (caps, "captions")
    assert prompt_form(["a?", "b.", "c?", "d."]) == "questions" and prompt_form([]) == "captions"


def test_cli_neutral(tmp_path, capsys):
    (tmp_path / "caps.txt").write_text("\n".join(OTHER) + "\n")
    (tmp_path / "h.json").write_text(json.dumps(HORSES))
    code, out, err = call(capsys, "neutral", tmp_path / "caps.txt", "--like", tmp_path / "h.json", "-o",
                          tmp_path / "n.txt", "--json")
    assert code == 0, err
    assert json.loads(out)["form"] == "questions"
    lines = (tmp_path / "n.txt").read_text().splitlines()
    assert len(lines) == 4 and lines[1] == "How would you describe a red car on a street?"
    code, out, _ = call(capsys, "neutral", tmp_path / "caps.txt", "--form", "captions", "-o", tmp_path / "c.txt",
                        "--json")
    assert code == 0 and (tmp_path / "c.txt").read_text().splitlines() == OTHER
    code, _, err = call(capsys, "neutral", tmp_path / "caps.txt", "-o", tmp_path / "x.txt")
    assert code == 2 and "--like" in err and not (tmp_path / "x.txt").exists()


def test_score_token_ids_is_score_continuations_on_ids(tiny_llama):  # noqa: F811
    from icmlkit.lib.hf.generate import encode, score_continuations, score_token_ids
    from icmlkit.lib.steer_concept.model import load_model

    lm = load_model(tiny_llama, kind="causal-lm")
    conts = ["a horse runs", "the engine starts now"]
    a = score_continuations(lm.model, lm.tokenizer, TEXTS[:2], conts, batch_size=1)
    b = score_token_ids(lm.model, lm.tokenizer, encode(lm.tokenizer, TEXTS[:2]),
                        encode(lm.tokenizer, conts, add_special_tokens=False), batch_size=2)
    for x, y in zip(a, b):
        assert x.token_ids == y.token_ids and abs(x.sum - y.sum) < 1e-4


@pytest.fixture(scope="module")
def judge(tiny_model):  # noqa: F811
    from icmlkit.lib.steer_concept.decoder import ConceptJudge
    from icmlkit.lib.steer_concept.model import load_model

    return ConceptJudge(load_model(tiny_model)).fit(HORSES, MOTOS, OTHER)


def test_decode_eval_rows_cache_and_strength_zero(tiny_llama, judge):  # noqa: F811
    from icmlkit.lib.steer_concept.decoder import DecoderConfig, decode_eval, perplexity
    from icmlkit.lib.steer_concept.model import load_model

    lm = load_model(tiny_llama, kind="causal-lm")
    steering = _llama_steering(tiny_llama)
    store, computed = {}, []

    def cache(key, compute):
        if key not in store:
            computed.append(key)
            store[key] = json.loads(json.dumps(compute()))  # what ctx.cached keeps: JSON
        return store[key]

    cfg = DecoderConfig(strengths="0,8", max_new_tokens=5, batch_size=3)
    res = decode_eval(cfg, lm, [("ms", steering)], TEXTS, judge, cache=cache)
    assert computed == ["unsteered", "ms@0", "ms@8"]
    rows = {(r["label"], r["strength"]): r for r in res.rows}
    base, zero, strong = rows[("unsteered", None)], rows[("ms", 0.0)], rows[("ms", 8.0)]
    assert base["perplexity_ratio"] == pytest.approx(1.0) and base["changed"] == 0
    assert zero["changed"] == 0 and zero["perplexity_ratio"] == pytest.approx(1.0)   # strength 0 is the model
    assert zero["switch_rate"] == base["switch_rate"]
    assert strong["changed"] > 0 and strong["n"] == len(TEXTS)
    for c in res.cells.values():  # the first new token comes from the unsteered prompt pass
        assert [g["token_ids"][:1] for g in c["gens"]] == [g["token_ids"][:1] for g in res.cells["unsteered"]["gens"]]
    # perplexity: exp of the mean token NLL under the unsteered model, by a direct forward pass
    g, p = res.cells["ms@8"]["gens"][0], lm.tokenizer(TEXTS[0])["input_ids"]
    ids = torch.tensor([p + g["token_ids"]])
    with torch.inference_mode():
        logp = torch.log_softmax(lm.model(input_ids=ids).logits.float()[0, :-1], -1)
    nll = -logp[torch.arange(len(p) - 1, ids.shape[1] - 1), ids[0, len(p):]].sum().item()
    assert res.cells["ms@8"]["nll"][0] == pytest.approx(nll, rel=1e-4)
    assert perplexity([g], [nll]) == pytest.approx(torch.exp(torch.tensor(nll / len(g["token_ids"]))).item(), rel=1e-6)
    again = decode_eval(cfg, lm, [("ms", steering)], TEXTS, judge, cache=cache)     # resumed: nothing recomputed
    assert computed == ["unsteered", "ms@0", "ms@8"] and again.rows == res.rows


def test_judge_labels_and_refusals(tiny_llama, judge):  # noqa: F811
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.steer_concept.decoder import ConceptJudge, DecoderConfig, decode_eval
    from icmlkit.lib.steer_concept.model import load_model

    assert judge.labels(["", "What do horses eat?"])[0] == "empty"
    assert set(judge.labels(HORSES + MOTOS)) <= set(ConceptJudge.CLASSES)
    base = load_model(tiny_llama)  # no language-model head
    with pytest.raises(UsageError, match="causal language model"):
        decode_eval(DecoderConfig(), base, [("ms", _llama_steering(tiny_llama))], TEXTS, judge)
    with pytest.raises(UsageError, match="--strengths"):
        DecoderConfig(strengths="1,x").check()


def test_cli_decode(tiny_llama, tiny_model, tmp_path, capsys):  # noqa: F811
    (tmp_path / "s.safetensors").write_bytes(_llama_steering(tiny_llama).to_bytes())
    for name, texts in (("p.txt", TEXTS), ("h.json", HORSES), ("m.json", MOTOS), ("o.txt", OTHER)):
        (tmp_path / name).write_text(json.dumps(texts) if name.endswith(".json") else "\n".join(texts) + "\n")
    code, out, err = call(capsys, "decode", tmp_path / "s.safetensors", "--prompts", tmp_path / "p.txt", "--source",
                          tmp_path / "h.json", "--target", tmp_path / "m.json", "--other", tmp_path / "o.txt",
                          "--judge", tiny_model, "--strengths", "0,4", "--max-new-tokens", 3, "-o", tmp_path / "t.csv",
                          "--completions", tmp_path / "c.jsonl", "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["tokens"] == "generated" and s["clip"] == "off" and s["prompts"] == 4 and s["strengths"] == [0.0, 4.0]
    assert [r["label"] for r in s["rows"]] == ["unsteered", "s", "s"] and set(s["best"]) == {"s"}
    assert set(s["judge"]["texts"]) == {"source", "target", "other"}
    assert len((tmp_path / "t.csv").read_text().splitlines()) == 4
    rows = [json.loads(x) for x in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and {"label", "strength", "prompt", "completion", "judged", "nll"} <= set(rows[0])
    # a steer of another model is refused before anything is generated
    code, _, err = call(capsys, "decode", tmp_path / "s.safetensors", "--model", tiny_model, "--prompts",
                        tmp_path / "p.txt", "--source", tmp_path / "h.json", "--target", tmp_path / "m.json", "--other",
                        tmp_path / "o.txt", "--judge", tiny_model, "-o", tmp_path / "t2.csv")
    assert code != 0 and not (tmp_path / "t2.csv").exists()
