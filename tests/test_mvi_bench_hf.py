"""mvi-bench's ``hf:PATH`` adapter and an OpenAI-compatible server on 127.0.0.1 serving the same model,
end to end on FILM pairs, with tiny randomly initialised vision-language folders built here.

No vision-language weights ship in any package here, so each folder is a real transformers class with
a tiny config (two layers, width 32), a byte-level BPE tokenizer without merges (built with the
``tokenizers`` library, nothing downloaded), a chat template and a hand-configured image processor,
written by ``save_pretrained``: ``LlavaForConditionalGeneration`` (CLIP vision tower + Llama) and
``Idefics3ForConditionalGeneration`` (the SmolVLM family). Their replies are noise: the scores mean
nothing; what is tested is the path (load, chat template, image, generate, decode, parse, records,
score, manifest) and that the HTTP route gives the in-process route's replies. The LLaVA folder's
generation config suppresses every token but the letters A-D (``suppress_tokens``) and its runs ask
for one new token, so its replies are letters and the valid-answer path runs too; the Idefics3 runs
keep the protocol's 5 tokens and reply byte noise (invalid answers).
"""
from __future__ import annotations

import json

import pytest

from conftest import REPO
from fuzzing import run_inprocess

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

TOOL = "mvi-bench"
FILM = REPO.parent / "shared" / "data" / "film"
RUN_KEYS = {"model", "n_pairs", "n_prompts", "n_cached", "acc_normal", "acc_misleading", "mvi_sensitivity",
            "circular_consistency", "vanilla_accuracy", "invalid_rate", "n_judged", "seconds", "prompts_per_second",
            "template_hash", "output"}
SHARD = "1/30"  # FILM's 60 pairs -> 2 pairs (4 images)


def cli(capsys, *argv):
    return run_inprocess(TOOL, [str(a) for a in argv], capsys)


def js(capsys, *argv):
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _tokenizer(specials: list[str], eos: str, bos: str | None, chat: str):
    """A byte-level BPE tokenizer with no merges (256 byte tokens + ``specials``): any text round-trips."""
    import transformers as tr
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    for t in specials:
        vocab[t] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    ft = tr.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token="<|pad|>")
    ft.chat_template = chat
    return ft


def _chat(image: str, eos: str) -> str:
    return ("{% for m in messages %}{{ m['role'] }}:{% if m['content'] is string %}{{ m['content'] }}{% else %}"
            "{% for c in m['content'] %}{% if c['type'] == 'image' %}" + image + "{% elif c['type'] == 'text' %}"
            "{{ c['text'] }}{% endif %}{% endfor %}{% endif %}" + eos + "\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")


def _llama(tok) -> dict:
    return dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=2, max_position_embeddings=1024, bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)


def build_tiny_vlm(kind: str, folder) -> None:
    """Write a tiny randomly initialised vision-language folder of class ``kind`` (llava | idefics3)."""
    import torch
    import transformers as tr

    torch.manual_seed(0)
    if kind == "llava":
        chat = _chat("<image>", "<|eos|>")
        tok = _tokenizer(["<|pad|>", "<|bos|>", "<|eos|>", "<image>"], "<|eos|>", "<|bos|>", chat)
        images = tr.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
        proc = tr.LlavaProcessor(image_processor=images, tokenizer=tok, patch_size=8, chat_template=chat,
                                 vision_feature_select_strategy="default", image_token="<image>",
                                 num_additional_image_tokens=1)  # CLIP's class token
        vision = tr.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                     image_size=32, patch_size=8, projection_dim=32)
        cfg = tr.LlavaConfig(vision_config=vision, text_config=tr.LlamaConfig(**_llama(tok)),
                             image_token_index=tok.convert_tokens_to_ids("<image>"), vision_feature_layer=-1,
                             vision_feature_select_strategy="default")
        model = tr.LlavaForConditionalGeneration(cfg)
    elif kind == "idefics3":
        chat = _chat("<image>", "<end_of_utterance>")
        tok = _tokenizer(["<|pad|>", "<|bos|>", "<end_of_utterance>", "<image>", "<fake_token_around_image>",
                          "<global-img>"], "<end_of_utterance>", "<|bos|>", chat)
        images = tr.Idefics3ImageProcessor(do_image_splitting=False, size={"longest_edge": 32},
                                           max_image_size={"longest_edge": 32})
        proc = tr.Idefics3Processor(image_processor=images, tokenizer=tok, image_seq_len=4, chat_template=chat)
        vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      image_size=32, patch_size=8)
        cfg = tr.Idefics3Config(vision_config=vision, text_config=dict(model_type="llama", **_llama(tok)),
                                image_token_id=tok.convert_tokens_to_ids("<image>"), scale_factor=2)
        model = tr.Idefics3ForConditionalGeneration(cfg)
    else:  # a text-only decoder (for the refusal test)
        chat = _chat("", "<|eos|>")
        tok = _tokenizer(["<|pad|>", "<|bos|>", "<|eos|>"], "<|eos|>", "<|bos|>", chat)
        model, proc = tr.LlamaForCausalLM(tr.LlamaConfig(**_llama(tok))), tok
    if kind == "llava":  # replies are letters: every token but A-D suppressed by its generation config
        keep = set(tok.convert_tokens_to_ids(list("ABCD")))
        model.generation_config.suppress_tokens = [i for i in range(len(tok)) if i not in keep]
    model.save_pretrained(folder)
    proc.save_pretrained(folder)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Build each tiny folder once per module (``tiny(kind)`` -> its path)."""
    made = {}

    def get(kind: str):
        if kind not in made:
            made[kind] = tmp_path_factory.mktemp("vlm") / f"tiny-{kind}"
            build_tiny_vlm(kind, made[kind])
        return made[kind]

    return get


def _records(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _check_run(s: dict, recs: list[dict], model: str, n_prompts: int) -> None:
    """The run's JSON keys, and every record's keys, parse and correctness against FILM's items."""
    from icmlkit.lib.mvi_bench import parse_reply, read_dataset
    from icmlkit.lib.mvi_bench.config import LETTERS
    from icmlkit.lib.mvi_bench.runner import RECORD_COLUMNS

    assert set(s) == RUN_KEYS and s["model"] == model and s["n_prompts"] == n_prompts == len(recs)
    assert s["n_pairs"] == 2 and s["n_cached"] == 0
    items = {it.id: it for it in read_dataset(FILM).items}
    for r in recs:
        it = items[r["id"]]
        options = [it.choices[j] for j in r["permutation"]]
        assert list(r) == RECORD_COLUMNS and r["model"] == model and r["category"] == "illusion"
        assert isinstance(r["reply"], str) and r["subcategory"] == it.subcategory
        assert r["answer_letter"] == LETTERS[options.index(it.answer)]
        assert r["letter"] == parse_reply(r["reply"], options, "robust") and r["valid"] == (r["letter"] is not None)
        assert r["correct"] == (r["letter"] == r["answer_letter"])


@pytest.mark.skipif(not FILM.exists(), reason="../shared/data/film is absent")
@pytest.mark.parametrize("kind,arch,tokens", [("llava", "LlavaForConditionalGeneration", 1),
                                              ("idefics3", "Idefics3ForConditionalGeneration", 5)])
def test_hf_path_runs_end_to_end_on_film(tiny, tmp_path, capsys, kind, arch, tokens):
    folder = tiny(kind)
    out = tmp_path / "hf.jsonl"
    s = js(capsys, "run", FILM, "--model", f"hf:{folder}", "--shard", SHARD, "--circular", "--device", "cpu",
           "--max-new-tokens", tokens, "-o", out)
    recs = _records(out)
    if kind == "llava":  # letters only: every reply is one of A-D, the valid ones parse to it
        assert all(r["reply"] in list("ABCD") for r in recs) and any(r["valid"] for r in recs)
    # FILM's first two pairs have k options each; circular asks k shifts of both images
    n = sum(len(r["permutation"]) for r in recs if r["rotation"] == 0)
    _check_run(s, recs, f"hf:{folder.name}", n)
    assert {r["rotation"] for r in recs} == set(range(max(len(r["permutation"]) for r in recs)))
    rs = json.loads((tmp_path / "hf.jsonl.manifest.json").read_text())["parameters"]["run_settings"]
    assert rs["adapter"]["architecture"] == arch and rs["adapter"]["folder"] == folder.name and rs["circular"]
    assert str(folder.parent) not in json.dumps(rs)  # the folder's name only, not its path
    sc = js(capsys, "score", out, "--bootstrap", 50, "-o", tmp_path / "t.md")
    assert set(sc["per_category"]) == {"illusion"} and sc["per_subcategory"]
    for v in [sc, *sc["per_category"].values(), *sc["per_subcategory"].values()]:
        assert 0.0 <= v["circular_consistency"] <= v["vanilla_accuracy"] <= 1.0  # all shifts right -> shift 0 right
    assert "circular consistency" in (tmp_path / "t.md").read_text()


@pytest.mark.skipif(not FILM.exists(), reason="../shared/data/film is absent")
def test_local_openai_server_serving_the_tiny_vlm_gives_the_same_replies(tiny, tmp_path, capsys, monkeypatch):
    """The tool's OpenAI-compatible backend against a server on 127.0.0.1 (lib/mvi_bench/server.py:
    http.server in a thread) that runs the same tiny LLaVA on the posted data-URL image and text."""
    from icmlkit.lib.mvi_bench.models import HFVisionModel
    from icmlkit.lib.mvi_bench.server import serve

    folder = tiny("llava")
    local, http = tmp_path / "hf.jsonl", tmp_path / "http.jsonl"
    js(capsys, "run", FILM, "--model", f"hf:{folder}", "--shard", SHARD, "--max-new-tokens", 1, "-o", local)
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    with serve(HFVisionModel(str(folder), max_new_tokens=1)) as srv:  # the server runs its own copy
        s = js(capsys, "run", FILM, "--model", srv.spec("tiny-llava"), "--shard", SHARD, "--concurrency", 2,
               "--max-new-tokens", 1, "-o", http)
        payloads = list(srv.payloads)
    a, b = _records(local), _records(http)
    _check_run(s, b, srv.spec("tiny-llava"), 4)
    assert len(payloads) == 4 and all(p["model"] == "tiny-llava" and p["max_tokens"] == 1 for p in payloads)
    assert all(p["messages"][0]["content"][0]["image_url"]["url"].startswith("data:image/") for p in payloads)
    same = ("id", "permutation", "reply", "letter", "valid", "correct")
    assert [{k: r[k] for k in same} for r in a] == [{k: r[k] for k in same} for r in b]
    assert any(r["valid"] for r in b)
    js(capsys, "score", local, "-o", tmp_path / "l.csv")
    js(capsys, "score", http, "-o", tmp_path / "h.csv")
    assert (tmp_path / "l.csv").read_bytes() == (tmp_path / "h.csv").read_bytes()


@pytest.mark.skipif(not FILM.exists(), reason="../shared/data/film is absent")
def test_hf_path_refuses_a_text_only_folder_and_a_missing_one(tiny, tmp_path, capsys):
    folder = tiny("text")
    code, _, err = cli(capsys, "run", FILM, "--model", f"hf:{folder}", "--shard", SHARD, "-o", tmp_path / "x.jsonl")
    assert code == 1 and folder.name in err and "vision-language" in err, err
    assert not (tmp_path / "x.jsonl").exists() and not (tmp_path / "x.jsonl.cache.jsonl").exists()
    code, _, err = cli(capsys, "run", FILM, "--model", f"hf:{tmp_path / 'nope'}", "-o", tmp_path / "y.jsonl")
    assert code == 1 and "nope" in err
