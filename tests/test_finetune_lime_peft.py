"""finetune-lime peft interop (issue 56): export a lora adapter (and LiME's shared B·A part) as a peft
LoRA folder that peft.PeftModel.from_pretrained loads with the same logits; import a peft LoRA folder
into our module swap with the same logits as peft; the refusals (DoRA, prompt tuning, another base
model, target modules the model lacks, methods with no LoRA form)."""
from __future__ import annotations

import json

import pytest
import torch

from icmlkit.lib.finetune_lime.adapter import apply_adapter, load_adapted, read_adapter
from icmlkit.lib.finetune_lime.config import AdapterConfig
from icmlkit.lib.finetune_lime.peft_io import export_peft, load_peft, save_peft
from test_finetune_lime import _cli, _setup_model, tiny_llama

peft = pytest.importorskip("peft")
torch.set_num_threads(1)

IDS = torch.tensor([[5, 7, 9, 11, 4, 6], [3, 4, 5, 6, 8, 10]])
MASK = torch.ones_like(IDS)


def _randomise(ad, seed=3):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in ad.trainable():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if name.endswith(".experts") else 0.0))


def _peft_logits(folder, seed=0):
    base, _ = tiny_llama(seed)
    pm = peft.PeftModel.from_pretrained(base, str(folder)).eval()
    with torch.no_grad():
        return pm, pm(input_ids=IDS, attention_mask=MASK).logits


def _ours(ad):
    ad.train(False)
    with torch.no_grad():
        return ad.logits(IDS, MASK)


def _export(ad, tmp_path, name, part=None):
    tensors = {k: v.detach().clone() for k, v in ad.adapter_state().items()}
    exp = export_peft(ad.cfg, tensors, {"model": "tiny"}, part=part)
    save_peft(tmp_path / name, exp)
    return exp


# --------------------------------------------------------------------------- export


def test_exported_lora_loads_in_peft_with_the_same_logits_and_merges(tmp_path):
    model, _ = tiny_llama()
    ad = apply_adapter(model, AdapterConfig(method="lora", rank=3, alpha=5.0, targets=["q_proj", "v_proj", "down_proj"],
                                            embeddings=True))
    _randomise(ad)
    exp = _export(ad, tmp_path, "p")
    conf = json.loads((tmp_path / "p" / "adapter_config.json").read_text())
    assert conf["peft_type"] == "LORA" and conf["r"] == 3 and conf["lora_alpha"] == 5 and conf["bias"] == "none"
    assert "model.layers.1.mlp.down_proj" in conf["target_modules"] and "model.embed_tokens" in conf["target_modules"]
    assert exp.summary["exact"] and exp.summary["scaling"] == pytest.approx(5 / 3) and exp.summary["layers"] == 7
    assert not (tmp_path / "p.partial").exists()
    ours = _ours(ad)
    pm, theirs = _peft_logits(tmp_path / "p")
    assert not torch.allclose(ours, tiny_llama()[0](input_ids=IDS).logits, atol=1e-3)  # the adapter does act
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)
    assert pm.peft_config["default"].target_modules  # peft parsed the folder's config
    merged = pm.merge_and_unload()  # a plain LoRA merges into the base weights
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=IDS).logits, ours, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("part", ["ba", "shared", "mean"])
def test_lime_shared_part_is_exactly_lime_where_the_routed_experts_do_nothing(tmp_path, part):
    """Each exported part equals the LiME model whose expert vectors are set so the routing cannot matter
    (ba: P = 1, gamma_s = 0; shared: P = 0; mean: all P rows equal): that is all the part keeps."""
    model, _ = tiny_llama()
    ad = apply_adapter(model, AdapterConfig(method="lime-lora", experts=3, rank=2, targets=["q_proj", "o_proj"],
                                            embeddings=True))
    _randomise(ad)
    with torch.no_grad():
        for layer in ad.layers.values():
            if part == "ba":
                layer.experts.fill_(1.0)
                layer.gamma_s.zero_()
            elif part == "shared":
                layer.experts.zero_()
            else:
                layer.experts.copy_(layer.experts[0:1].expand_as(layer.experts).clone())
            assert float(layer.gamma_s.abs().sum()) > 0 or part == "ba"
    exp = _export(ad, tmp_path, part, part=part)
    assert not exp.summary["exact"] and "NOT the LiME model" in exp.summary["note"]
    assert exp.summary["dropped"][0].startswith("experts_P") or part == "mean"
    torch.testing.assert_close(_peft_logits(tmp_path / part)[1], _ours(ad), atol=1e-5, rtol=1e-5)


def test_lime_with_routed_experts_differs_from_its_exported_part(tmp_path):
    model, _ = tiny_llama()
    ad = apply_adapter(model, AdapterConfig(method="lime-lora", experts=3, rank=2, targets=["q_proj", "v_proj"]))
    _randomise(ad)
    with torch.no_grad():
        for layer in ad.layers.values():
            layer.experts.copy_(torch.randn(layer.experts.shape) * 2)
    _export(ad, tmp_path, "m", part="mean")
    assert (_peft_logits(tmp_path / "m")[1] - _ours(ad)).abs().max() > 1e-3


def test_cli_train_lora_export_peft_same_logits_and_refusals(tmp_path, capsys):
    named = _setup_model(tmp_path)
    d, data = named["model"], named["data"]
    a = tmp_path / "lora.safetensors"
    code, _, err = _cli(["train", str(d), str(data), "-o", str(a), "--method", "lora", "--rank", "2", "--steps", "3",
                         "--batch-size", "2", "--peft-lr", "0.05"], capsys)
    assert code == 0, err
    code, out, err = _cli(["export-peft", str(a), "-o", str(tmp_path / "pf"), "--json"], capsys)
    assert code == 0, err
    s = json.loads(out)
    assert s["exact"] and s["part"] == "lora" and s["r"] == 2 and s["lora_alpha"] == 4 and s["layers"] == 8
    conf = json.loads((tmp_path / "pf" / "adapter_config.json").read_text())
    assert conf["base_model_name_or_path"] == str(d)
    fresh, _ = tiny_llama()
    ad = load_adapted(fresh, a)
    torch.testing.assert_close(_peft_logits(tmp_path / "pf")[1], _ours(ad), atol=1e-5, rtol=1e-5)
    # refusals: --lime-part on lora, a MoLoRA adapter, an existing folder without --overwrite
    code, _, err = _cli(["export-peft", str(a), "-o", str(tmp_path / "x"), "--lime-part", "mean"], capsys)
    assert code == 2 and "LiME adapters only" in err and not (tmp_path / "x").exists()
    mo = tmp_path / "mo.safetensors"
    code, _, err = _cli(["train", str(d), str(data), "-o", str(mo), "--method", "molora", "--steps", "1",
                         "--batch-size", "2"], capsys)
    assert code == 0, err
    code, _, err = _cli(["export-peft", str(mo), "-o", str(tmp_path / "x")], capsys)
    assert code == 2 and "molora adapter has no peft LoRA form" in err and not (tmp_path / "x").exists()
    assert not (tmp_path / "x.partial").exists()
    code, _, err = _cli(["export-peft", str(a), "-o", str(tmp_path / "pf")], capsys)
    assert code == 1 and "--overwrite" in err
    lime = tmp_path / "lime.safetensors"
    code, _, err = _cli(["train", str(d), str(data), "-o", str(lime), "--no-shared", "--steps", "1",
                         "--batch-size", "2"], capsys)
    assert code == 0, err
    code, _, err = _cli(["export-peft", str(lime), "-o", str(tmp_path / "x"), "--lime-part", "shared"], capsys)
    assert code == 2 and "--no-shared" in err and not (tmp_path / "x").exists()
    code, out, err = _cli(["export-peft", str(lime), "-o", str(tmp_path / "lp"), "--json"], capsys)
    assert code == 0 and json.loads(out)["part"] == "ba" and not json.loads(out)["exact"]


# --------------------------------------------------------------------------- import


def _peft_folder(tmp_path, name, model_dir=None, seed=0, **kw):
    """A peft LoRA folder saved by peft itself over the tiny model (lora_B random so it acts)."""
    base, _ = tiny_llama(seed)
    conf = dict(r=2, lora_alpha=5, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    conf.update(kw)
    pm = peft.get_peft_model(base, peft.LoraConfig(**conf))
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    if model_dir is not None:
        pm.peft_config["default"].base_model_name_or_path = str(model_dir)
    pm.save_pretrained(str(tmp_path / name))
    pm.eval()
    with torch.no_grad():
        ref = pm(input_ids=IDS, attention_mask=MASK).logits
    return tmp_path / name, ref


@pytest.mark.parametrize("kw", [{}, {"use_rslora": True, "r": 4},
                                {"target_modules": ["q_proj", "embed_tokens", "gate_proj"]}], ids=["plain", "rslora",
                                                                                                  "embedding"])
def test_imported_peft_lora_has_peft_logits(tmp_path, kw):
    folder, ref = _peft_folder(tmp_path, "p", **kw)
    model, _ = tiny_llama()
    ad, imp = load_peft(model, folder, None)
    assert ad.cfg.method == "lora" and imp.cfg.rank == kw.get("r", 2)
    assert imp.cfg.embeddings == ("embed_tokens" in kw.get("target_modules", []))
    torch.testing.assert_close(_ours(ad), ref, atol=1e-5, rtol=1e-5)


def test_cli_import_peft_eval_folder_and_init_peft(tmp_path, capsys):
    named = _setup_model(tmp_path)
    d, data = named["model"], named["data"]
    folder, ref = _peft_folder(tmp_path, "pf", model_dir=d)
    out_a = tmp_path / "imp.safetensors"
    code, out, err = _cli(["import-peft", str(d), str(folder), "-o", str(out_a), "--json"], capsys)
    assert code == 0, err
    s = json.loads(out)
    assert s["method"] == "lora" and s["r"] == 2 and s["scaling"] == 2.5 and s["targets"] == ["q_proj", "v_proj"]
    cfg, _, meta = read_adapter(out_a)
    assert cfg.method == "lora" and cfg.alpha == 5.0 and meta["model"] == str(d)
    fresh, _ = tiny_llama()
    torch.testing.assert_close(_ours(load_adapted(fresh, out_a)), ref, atol=1e-5, rtol=1e-5)
    # eval takes the file and the folder alike
    evs = []
    for ad_path in (out_a, folder):
        code, out, err = _cli(["eval", str(d), str(ad_path), str(data), "--json", "--max-new-tokens", "3"], capsys)
        assert code == 0, err
        evs.append(json.loads(out))
    assert evs[0] == evs[1] and evs[0]["method"] == "lora"
    # train --init-peft: lora starts from the folder's A and B (a learning rate of 1e-12 keeps them)
    tr = tmp_path / "tr.safetensors"
    code, out, err = _cli(["train", str(d), str(data), "-o", str(tr), "--method", "lora", "--init-peft", str(folder),
                           "--steps", "1", "--batch-size", "2", "--peft-lr", "1e-12", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["init_peft"] == str(folder) and json.loads(out)["rank"] == 2
    _, imp_t, _ = read_adapter(out_a)
    cfg_t, tr_t, meta_t = read_adapter(tr)
    assert cfg_t.targets == ["q_proj", "v_proj"] and "init_peft" in meta_t
    for k, v in imp_t.items():
        assert abs(tr_t[k] - v).max() < 1e-6, k
    # lime-lora starts its A and B from the folder
    tl = tmp_path / "tl.safetensors"
    code, _, err = _cli(["train", str(d), str(data), "-o", str(tl), "--init-peft", str(folder), "--steps", "1",
                         "--batch-size", "2", "--peft-lr", "1e-12", "--rank", "2"], capsys)
    assert code == 0, err
    cfg_l, tl_t, _ = read_adapter(tl)
    assert cfg_l.method == "lime-lora" and "model.layers.0.self_attn.q_proj.experts" in tl_t
    assert abs(tl_t["model.layers.0.self_attn.q_proj.lora_B"] - imp_t["model.layers.0.self_attn.q_proj.lora_B"]
               ).max() < 1e-6
    # refusals of --init-peft: a method without A and B, a rank that differs from the folder's
    code, _, err = _cli(["train", str(d), str(data), "-o", str(tmp_path / "x.safetensors"), "--method", "molora",
                         "--init-peft", str(folder), "--steps", "1"], capsys)
    assert code == 2 and "--init-peft" in err and not (tmp_path / "x.safetensors").exists()
    code, _, err = _cli(["train", str(d), str(data), "-o", str(tmp_path / "x.safetensors"), "--method", "lora",
                         "--init-peft", str(folder), "--rank", "8", "--steps", "1"], capsys)
    assert code == 2 and "--rank" in err and "rank = 2" in err and not (tmp_path / "x.safetensors").exists()


def _one_error_line(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return len(lines) == 1 and lines[0].startswith("Error:") and "Traceback" not in err


def test_import_refusals(tmp_path, capsys):
    from transformers import LlamaConfig, LlamaForCausalLM

    m, tok = tiny_llama()
    d = tmp_path / "model"
    m.save_pretrained(str(d))
    tok.save_pretrained(str(d))
    out = tmp_path / "o.safetensors"

    def refused(folder, code_wanted, text):
        code, _, err = _cli(["import-peft", str(d), str(folder), "-o", str(out)], capsys)
        assert code == code_wanted and text in err and _one_error_line(err), (code, err)
        assert not out.exists()

    # DoRA and prompt tuning: not plain LoRA
    dora, _ = _peft_folder(tmp_path, "dora", use_dora=True)
    refused(dora, 1, "DoRA")
    base, _ = tiny_llama()
    pt = peft.get_peft_model(base, peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=3))
    pt.save_pretrained(str(tmp_path / "pt"))
    refused(tmp_path / "pt", 1, "peft type 'PROMPT_TUNING', not LORA")
    # another base model recorded in the folder (exit 2), and one of other shapes (exit 1)
    other, _ = _peft_folder(tmp_path, "other", model_dir="someone/another-model")
    refused(other, 2, "trained on base model 'someone/another-model'")
    big = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=4))
    pb = peft.get_peft_model(big, peft.LoraConfig(r=2, target_modules=["q_proj"]))
    pb.save_pretrained(str(tmp_path / "big"))
    refused(tmp_path / "big", 1, "has shape")
    # target modules the model lacks, and a LoRA bias
    ren, _ = _peft_folder(tmp_path, "ren")
    from safetensors.torch import load_file, save_file

    t = load_file(str(ren / "adapter_model.safetensors"))
    save_file({k.replace("q_proj", "qkv_proj"): v for k, v in t.items()}, str(ren / "adapter_model.safetensors"))
    refused(ren, 1, "the target modules do not match")
    biased, _ = _peft_folder(tmp_path, "biased", bias="lora_only")
    refused(biased, 1, "bias 'lora_only'")
    # not a peft folder at all, a folder without weights
    (tmp_path / "empty").mkdir()
    refused(tmp_path / "empty", 1, "no adapter_config.json")
    nw, _ = _peft_folder(tmp_path, "nw")
    (nw / "adapter_model.safetensors").unlink()
    refused(nw, 1, "no adapter_model.safetensors")
    (nw / "adapter_model.safetensors").write_bytes(b"\x00garbage")
    refused(nw, 1, "unreadable")
    (nw / "adapter_config.json").write_text('{"peft_type": "LORA", "r": ')
    refused(nw, 1, "adapter_config.json")
    (nw / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 2, "lora_alpha": -1}')
    refused(nw, 1, "lora_alpha")
    # eval with a DoRA folder in place of ADAPTER: the same refusal
    data = tmp_path / "t.jsonl"
    data.write_text('{"task": "a", "prompt": "sa 21=", "target": "12"}\n')
    code, _, err = _cli(["eval", str(d), str(dora), str(data), "-o", str(tmp_path / "p.jsonl")], capsys)
    assert code == 1 and "DoRA" in err and _one_error_line(err) and not (tmp_path / "p.jsonl").exists()


def test_hub_id_matches_its_model_and_a_saved_embedding_of_another_model_is_refused(tmp_path):
    from icmlkit.lib.core.errors import InputError
    from icmlkit.lib.finetune_lime.peft_io import _same_base, read_peft

    assert _same_base("HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2")
    assert not _same_base("someone/another-model", "smollm2")
    # peft saves the embedding's own weight beside its LoRA: one from another model (same shapes) is refused
    folder, _ = _peft_folder(tmp_path, "e", seed=1, target_modules=["q_proj", "embed_tokens"])
    model, _ = tiny_llama(0)
    with pytest.raises(InputError, match="carries its own weights"):
        read_peft(folder, model)
    read_peft(folder, tiny_llama(1)[0])  # its own base model passes
