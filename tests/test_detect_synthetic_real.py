"""detect-synthetic on real data (issue 27): the per-branch loss, the CNNDetection reader, splits
by source photograph, the aligned tier's shared storage pipeline, the fine-tuned baseline, the
calibrated fusion, and TAEF2 against its shipped weights (skipped without ../shared/data)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import run_tool as _run_tool

from icmlkit.lib.core.errors import UsageError

TOOL = "detect-synthetic"
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def run_tool(*args, **kw):
    return _run_tool(*args, env={**ONE_THREAD, **kw.pop("env", {})}, **kw)


def test_branch_loss_is_the_sum_of_its_per_branch_bces_and_the_fused_logit_is_not_in_it():
    from icmlkit.lib.detect_synthetic.model import branch_loss, fused_logit

    torch.manual_seed(0)
    z = torch.randn(10, 4, requires_grad=True)
    y = torch.tensor([0, 1] * 5)
    total, per = branch_loss(z, y)
    parts = [torch.nn.functional.binary_cross_entropy_with_logits(z[:, k], y.float()) for k in range(4)]
    assert torch.allclose(per, torch.stack(parts)) and torch.allclose(total, sum(parts))
    # by hand for one branch: mean of -log sigmoid(z) on fakes and -log(1 - sigmoid(z)) on reals
    p = torch.sigmoid(z[:, 2].detach()).double()
    by_hand = -(y * p.log() + (1 - y) * (1 - p).log()).mean()
    assert float(per[2].detach()) == pytest.approx(float(by_hand), rel=1e-5)
    total.backward()  # every branch gets a gradient of its own BCE only
    assert torch.allclose(z.grad, (torch.sigmoid(z) - y.float()[:, None]).detach() / len(y), atol=1e-6)
    f = fused_logit(z.detach())
    assert f.shape == (10,) and (f <= z.detach().max(1).values + 1e-6).all()


def test_fusion_rules_on_hand_made_probabilities():
    from icmlkit.lib.detect_synthetic.model import fuse

    p = torch.tensor([[0.9, 0.1, 0.5, 0.5], [0.2, 0.2, 0.2, 0.2]])
    assert torch.allclose(fuse(p, "max"), torch.tensor([0.9, 0.2]))
    assert torch.allclose(fuse(p, "mean"), torch.tensor([0.5, 0.2]))
    assert torch.allclose(fuse(p, "logit-mean"), torch.tensor([0.5, 0.2]), atol=1e-6)  # logit(0.9) = -logit(0.1)
    with pytest.raises(UsageError):
        fuse(p, "vote")


# --------------------------------------------------------------------------- CNNDetection reader


def _flat_folder(root, names):
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for n in names:
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(root / n)
    return root


def test_cnndetection_reader_pairs_files_by_generator_and_refuses_unknown_names(tmp_path):
    from icmlkit.lib.core.errors import InputError
    from icmlkit.lib.detect_synthetic.datasets import read_cnndetection

    names = ["10_stylegan_real.png", "2_stylegan_fake.png", "3_stylegan_real.png", "4_crn_fake.png",
             "5_crn_real.png", "6_biggan_fake.png"]
    root = _flat_folder(tmp_path / "flat", names)
    (root / "notes.txt").write_text("not an image: ignored")
    got = read_cnndetection(root, ["stylegan", "crn"])
    assert list(got) == ["stylegan", "crn"]
    assert [p.split("/")[-1] for p in got["stylegan"].real] == ["3_stylegan_real.png", "10_stylegan_real.png"]
    assert [p.split("/")[-1] for p in got["stylegan"].fake] == ["2_stylegan_fake.png"]
    assert [p.split("/")[-1] for p in got["crn"].real] == ["5_crn_real.png"]
    with pytest.raises(InputError, match="biggan.*1 fake"):  # no biggan reals
        read_cnndetection(root, ["biggan"])
    with pytest.raises(InputError, match="unknown generator 'dalle'"):
        read_cnndetection(root, ["dalle"])
    _flat_folder(root, ["7_midjourney_fake.png"])
    with pytest.raises(InputError, match="midjourney") as err:
        read_cnndetection(root, ["stylegan"])
    assert "7_midjourney_fake.png" in str(err.value)
    r = run_tool(TOOL, "train", root, "--generators", "stylegan", "--method", "linear-probe", "-o",
                 tmp_path / "m.pt")
    assert r.returncode == 1 and "7_midjourney_fake.png" in r.stderr and "unknown generator" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "m.pt").exists()
    (root / "7_midjourney_fake.png").unlink()
    _flat_folder(root, ["stylegan_fake_8.png"])
    r = run_tool(TOOL, "eval", tmp_path / "none.pt", "--cnndetection", root)
    assert r.returncode == 1 and "none.pt" in r.stderr
    r = run_tool(TOOL, "eval", tmp_path / "none.pt", "--generators", "crn", "--real", root, "--fake", root)
    assert r.returncode == 2


def test_cnndetection_train_and_eval_through_the_cli(tmp_path):
    names = [f"{i}_{g}_{c}.png" for i, (g, c) in enumerate((g, c) for g in ("stylegan", "crn")
                                                           for c in ("real", "fake") for _ in range(3))]
    root = _flat_folder(tmp_path / "flat", names)
    model = tmp_path / "lp.pt"
    r = run_tool(TOOL, "train", root, "--generators", "stylegan", "--method", "linear-probe", "--image-size", "32",
                 "--input-size", "32", "--preprocess", "crop", "-o", model, "--json")
    assert r.returncode == 0, r.stderr
    assert (json.loads(r.stdout)["n_real"], json.loads(r.stdout)["n_fake"]) == (3, 3)
    r = run_tool(TOOL, "eval", model, "--cnndetection", root, "--generators", "crn,stylegan", "--json",
                 "-o", tmp_path / "e.csv")
    assert r.returncode == 0, r.stderr
    e = json.loads(r.stdout)
    assert set(e["per_generator"]) == {"crn", "stylegan"} and (e["n_real"], e["n_fake"]) == (6, 6)
    assert all(v["n_real"] == 3 and v["n_fake"] == 3 for v in e["per_generator"].values())  # its own reals
    rows = (tmp_path / "e.csv").read_text().splitlines()
    assert rows[0] == "path,label,generator,score" and sum(",0,crn," in r_ for r_ in rows) == 3


# --------------------------------------------------------------------------- splits and crops


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_splits_never_share_a_source_photograph(seed):
    from icmlkit.lib.detect_synthetic.datasets import split_by_source

    rng = np.random.default_rng(seed)
    sources = rng.choice([f"photo{k}" for k in range(13)], size=200)
    parts = split_by_source(sources, [0.6, 0.2, 0.2], seed=seed)
    assert sorted(np.concatenate(parts).tolist()) == list(range(200))  # a partition of the items
    seen = [set(sources[p]) for p in parts]
    assert all(s for s in seen)  # every part gets a source
    assert not (seen[0] & seen[1]) and not (seen[0] & seen[2]) and not (seen[1] & seen[2])
    again = split_by_source(sources, [0.6, 0.2, 0.2], seed=seed)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    two = split_by_source(["a", "b"], [0.8, 0.2])  # a positive fraction still gets a source
    assert sorted(len(p) for p in two) == [1, 1]


def test_radet_validation_split_keeps_sources_together():
    from icmlkit.lib.vision.backbone import load_backbone
    from icmlkit.lib.detect_synthetic.config import DetectorConfig
    from icmlkit.lib.detect_synthetic.model import Detector

    det = Detector(DetectorConfig(val_fraction=0.3), encoder=load_backbone(input_size=32))
    groups = [f"p{k // 4}" for k in range(40)]  # 10 photos, 4 crops each, half real half generated
    y = torch.tensor([k % 2 for k in range(40)])
    tr, va = det._split_validation(y, groups, seed=0)
    assert len(va) and not ({groups[i] for i in tr.tolist()} & {groups[i] for i in va.tolist()})
    assert set(y[va].tolist()) == {0, 1}


def test_aligned_pairs_store_both_classes_through_the_same_pipeline():
    """With an identity 'autoencoder' the two classes come out identical: the storage round trip
    (PNG or JPEG) and the crops are the same for reals and reconstructions."""
    from icmlkit.lib.detect_synthetic.datasets import aligned_pairs, native_crops

    class Identity:
        def reconstruct(self, x):
            return x.clone()

    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (70, 90, 3), dtype=np.uint8), rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)]
    for fmt in ("png", "jpeg"):
        real, fake, src = aligned_pairs(imgs, ["a", "b"], 32, 3, Identity(), fmt=fmt)
        assert real.shape == fake.shape == (4, 32, 32, 3) and src.tolist() == ["a", "a", "a", "b"]
        assert np.array_equal(real, fake)
    crops, idx = native_crops(imgs, 32, centre=True)
    assert np.array_equal(crops[0], imgs[0][19:51, 29:61]) and idx.tolist() == [0, 1]


# --------------------------------------------------------------------------- finetune and calibration


def test_finetune_baseline_trains_every_backbone_weight_and_round_trips(tmp_path):
    from icmlkit.lib.vision.backbone import load_backbone
    from icmlkit.lib.detect_synthetic.config import DetectorConfig
    from icmlkit.lib.detect_synthetic.model import Detector, load_model, save_model

    enc = load_backbone(input_size=32)
    torch.manual_seed(0)
    x = torch.rand(8, 3, 32, 32)
    y = torch.tensor([0, 1] * 4)
    det = Detector(DetectorConfig(method="finetune", steps=2, batch_size=4, lr=1e-3), encoder=enc)
    before = det.tuned.net._conv_stem.weight.detach().clone()
    det.fit(x, y)
    assert not torch.equal(before, det.tuned.net._conv_stem.weight)  # the backbone itself is trained
    assert torch.equal(before, enc.net._conv_stem.weight)  # the shared frozen encoder is untouched
    save_model(tmp_path / "ft.pt", det)
    back = load_model(tmp_path / "ft.pt", encoder=enc)
    assert torch.allclose(back.score(x)["score"], det.score(x)["score"])


def test_radet_scores_are_the_chosen_fusion_of_calibrated_branches():
    from icmlkit.lib.vision.backbone import load_backbone
    from icmlkit.lib.detect_synthetic.config import DetectorConfig
    from icmlkit.lib.detect_synthetic.model import Detector, fuse

    enc = load_backbone(input_size=32)
    det = Detector(DetectorConfig(), encoder=enc)
    det.calibration.copy_(torch.tensor([[2.0, -1.0], [0.0, 0.3], [1.0, 0.0], [0.5, 0.5]]))
    det.fusion_rule.fill_(1)  # mean
    x = torch.rand(4, 3, 32, 32)
    out = det.score(x)
    with torch.no_grad():
        z = det._radet_forward(x, det.config.eps)[0]
    p = torch.sigmoid(z * det.calibration[:, 0] + det.calibration[:, 1])
    assert torch.allclose(out["p_cnn"], torch.sigmoid(torch.tensor(0.3)).expand(4))
    assert torch.allclose(out["score"], fuse(p, "mean"), atol=1e-6) and det.fusion == "mean"


# --------------------------------------------------------------------------- TAEF2 (real weights)


@pytest.mark.slow
def test_taef2_loads_both_state_dicts_strictly_and_reconstructs_a_photograph():
    from icmlkit.lib.core.io import shared_data_dir

    folder = shared_data_dir("taef2")
    if folder is None:
        pytest.skip("../shared/data/taef2 is not there")
    from skimage import data

    from icmlkit.lib.detect_synthetic.taef2 import load_taef2, psnr

    model = load_taef2(folder)
    n_enc = sum(p.numel() for p in model.encoder.parameters())
    n_dec = sum(p.numel() for p in model.decoder.parameters())
    assert 1.0e6 < n_enc < 1.6e6 and 1.0e6 < n_dec < 1.6e6  # "about 1.3 M parameters each"
    x = torch.from_numpy(data.chelsea()[40:232, 100:356].copy()).permute(2, 0, 1)[None].float() / 255
    r = model.reconstruct(x)
    assert r.shape == x.shape and 0 <= float(r.min()) and float(r.max()) <= 1
    assert psnr(x, r) >= 28.0, psnr(x, r)
    assert psnr(x, model.reconstruct(x, quantised=True)) >= 28.0
    assert psnr(x, torch.rand_like(x)) < 15  # the measure itself can fail


def test_taef2_refuses_a_state_dict_that_does_not_fit(tmp_path):
    from icmlkit.lib.core.errors import InputError
    from icmlkit.lib.detect_synthetic.taef2 import TAEF2, load_taef2

    m = TAEF2()
    torch.save(m.encoder.state_dict(), tmp_path / "taef2_encoder.pth")
    bad = m.decoder.state_dict()
    bad.pop("19.bias")
    torch.save(bad, tmp_path / "taef2_decoder.pth")
    with pytest.raises(InputError, match="taef2_decoder.pth.*not the TAEF2 decoder"):
        load_taef2(tmp_path)
    (tmp_path / "taef2_encoder.pth").unlink()
    with pytest.raises(InputError, match="taef2_encoder.pth: no such weights file"):
        load_taef2(tmp_path)


def test_backbone_weights_may_be_a_local_model_folder(tmp_path):
    """--backbone-weights accepts a model folder (model.safetensors / pytorch_model.bin / one
    weights file), as exported by timm or torchvision users; the weights are the same."""
    from icmlkit.lib.core.errors import InputError
    from icmlkit.lib.core.io import write_safetensors
    from icmlkit.lib.vision.backbone import load_backbone, lite0_weights_path

    state = torch.load(lite0_weights_path(), weights_only=True)
    folder = tmp_path / "lite0"
    folder.mkdir()
    write_safetensors(folder / "model.safetensors", {k: v.numpy() for k, v in state.items()})
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(load_backbone(weights=str(folder), input_size=32)(x),
                              load_backbone(input_size=32)(x))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="expected one weights file"):
        load_backbone(weights=str(empty), input_size=32)
