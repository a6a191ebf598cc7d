"""detect-synthetic (RA-Det): the probe's bound, the discrepancy loss's sign, the backbone's sanity
classification, the metrics, input errors, and train -> score -> eval through the CLI (and a pipe)."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import Interrupted, exe, run_tool as _run_tool

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.detect_synthetic.config import TOY_SIZES

TOOL = "detect-synthetic"
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # on a loaded 2-core machine one torch thread is many times faster


def run_tool(*args, **kw):
    return _run_tool(*args, env={**ONE_THREAD, **kw.pop("env", {})}, **kw)


def test_defaults_are_the_benchmarked_image_pipeline():
    """Issue 59: `train` and `probe` default to bench/detect_synthetic.py's 112-px native crops with the
    encoder at 112 px (resizing would wipe the traces the method reads), not the demo's toy sizes."""
    import importlib.util
    from pathlib import Path

    from icmlkit.lib.detect_synthetic.config import DetectorConfig, ProbeConfig

    bench_dir = Path(__file__).resolve().parents[1] / "bench"
    spec = importlib.util.spec_from_file_location("bench_detect_synthetic", bench_dir / "detect_synthetic.py")
    sys.path.insert(0, str(bench_dir))
    try:
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(bench_dir))
    want = {k: getattr(bench.config("ra-det", 100, False), k) for k in ("image_size", "input_size", "preprocess")}
    assert want == {"image_size": bench.SIZE, "input_size": bench.SIZE, "preprocess": "crop"}
    for cfg in (DetectorConfig(), ProbeConfig()):
        assert {k: getattr(cfg, k) for k in want} == want


# --------------------------------------------------------------------------- the probe and its loss


def test_learned_probe_respects_its_linf_bound_and_the_pixel_range():
    from icmlkit.lib.detect_synthetic.probe import ProbeUNet, apply_perturbation, multiscale_views

    torch.manual_seed(0)
    g = ProbeUNet(embed_dim=20, base=8)
    with torch.no_grad():  # make the raw output large so tanh saturates: the bound must still hold
        g.out.weight.mul_(1e4)
    x = torch.rand(6, 3, 32, 32)
    x[0] = 0.0
    x[1] = 1.0
    for eps in (4 / 255, 16 / 255, torch.tensor([1, 2, 4, 8, 16, 32]) / 255):
        delta = g(x, multiscale_views(x), torch.randn(6, 20), eps)
        bound = torch.as_tensor(eps).reshape(-1, 1, 1, 1)
        assert (delta.abs() <= bound + 1e-7).all()
        assert (delta.abs().amax(dim=(1, 2, 3)) > 0.9 * bound.flatten()).all()  # the bound is reached, not 0
        xa = apply_perturbation(x, delta)
        assert xa.min() >= 0 and xa.max() <= 1
        assert ((xa - x).abs() <= bound + 1e-7).all()


def test_gaussian_probe_is_antithetic_and_clamped():
    from icmlkit.lib.detect_synthetic.probe import gaussian_probe

    x = torch.full((2, 3, 8, 8), 0.5)
    p = gaussian_probe(x, 0.05, 4, torch.Generator().manual_seed(1))
    assert p.shape == (4, 2, 3, 8, 8)
    assert torch.allclose((p[0] - x) + (p[2] - x), torch.zeros_like(x), atol=1e-6)  # n and -n
    assert p.min() >= 0 and p.max() <= 1


def test_rigid_noise_lives_in_the_normalised_input_at_the_encoder_size():
    """RIGID adds λ·N(0, I) to the encoder's normalised input tensor (after resizing), unclamped;
    model files without rigid_space keep the older pixel-space probe."""
    from icmlkit.lib.core.runtime import generator
    from icmlkit.lib.vision.backbone import load_backbone
    from icmlkit.lib.detect_synthetic.model import Detector, DetectorConfig
    from icmlkit.lib.detect_synthetic.probe import gaussian_noise

    torch.manual_seed(0)
    enc = load_backbone(input_size=48)
    x = torch.rand(3, 3, 24, 24)
    det = Detector(DetectorConfig(method="rigid", rigid_noise=0.05, rigid_draws=2), encoder=enc)
    d, _ = det.rigid_drift(x, seed=5)
    n = gaussian_noise((3, 48, 48), 2, generator(5, "rigid-noise"))
    assert n.shape == (2, 1, 3, 48, 48) and torch.allclose(n[0], -n[1])
    with torch.no_grad():
        z = enc.prepare(x)  # resized to 48 px, then (255x - 127) / 128
        f = enc.from_prepared(z)
        cos = torch.stack([torch.nn.functional.cosine_similarity(f, enc.from_prepared(z + 0.05 * n[k, 0]), dim=1)
                           for k in range(2)])
    assert torch.allclose(d, 1 - cos.mean(0), atol=1e-5)
    pix = Detector(DetectorConfig(method="rigid", rigid_noise=0.05, rigid_draws=2, rigid_space="pixel"), encoder=enc)
    assert not torch.allclose(pix.rigid_drift(x, seed=5)[0], d)
    old = json.loads(DetectorConfig(method="rigid").to_json())
    del old["rigid_space"]
    assert DetectorConfig.from_json(json.dumps(old)).rigid_space == "pixel"


def test_discrepancy_loss_sign_on_a_hand_made_batch():
    from icmlkit.lib.detect_synthetic.probe import discrepancy_loss

    labels = torch.tensor([0, 0, 1, 1])
    # reals barely move (cos 0.99), fakes drift 5x more (cos 0.95): L = relu(0.95 - 0.99 + 0.01) / 0.01 = 0
    assert float(discrepancy_loss(torch.tensor([0.99, 0.99, 0.95, 0.95]), labels)) == pytest.approx(0.0, abs=1e-6)
    # fakes drift only 1.5x the reals: L = relu(0.985 - 0.99 + 0.01) / 0.01 = 0.5
    assert float(discrepancy_loss(torch.tensor([0.99, 0.99, 0.985, 0.985]), labels)) == pytest.approx(0.5, abs=1e-4)
    # the wrong asymmetry (reals drift more) costs more than the right one
    right = discrepancy_loss(torch.tensor([0.99, 0.99, 0.985, 0.985]), labels)
    wrong = discrepancy_loss(torch.tensor([0.985, 0.985, 0.99, 0.99]), labels)
    assert float(wrong) > float(right) > 0
    # gradient: lowering the fakes' cosine (more drift) and raising the reals' both lower the loss
    cos = torch.tensor([0.99, 0.99, 0.985, 0.985], requires_grad=True)
    discrepancy_loss(cos, labels).backward()
    assert (cos.grad[2:] > 0).all() and (cos.grad[:2] < 0).all()
    with pytest.raises(InputError):
        discrepancy_loss(torch.tensor([0.9, 0.8]), torch.tensor([1, 1]))


def test_lpd_and_median_match_a_direct_computation():
    from scipy.ndimage import median_filter

    from icmlkit.lib.detect_synthetic.probe import lpd_map, median3

    rng = np.random.default_rng(0)
    x = rng.random((1, 2, 9, 11)).astype(np.float32)
    med = median3(torch.from_numpy(x)).numpy()
    ref = median_filter(x, size=(1, 1, 3, 3), mode="nearest")
    assert np.allclose(med[..., 1:-1, 1:-1], ref[..., 1:-1, 1:-1])
    lpd = lpd_map(torch.from_numpy(x)).numpy()                      # default: the official lower median
    mid = lpd_map(torch.from_numpy(x), "mid-mean").numpy()
    i, j = 4, 5
    ring = np.delete(x[0, 1, i - 1:i + 2, j - 1:j + 2].ravel(), 4)
    assert lpd[0, 1, i, j] == pytest.approx(x[0, 1, i, j] - np.sort(ring)[3], abs=1e-6)
    assert mid[0, 1, i, j] == pytest.approx(x[0, 1, i, j] - np.median(ring), abs=1e-6)
    # the border: zero padding (official) vs replicate padding (mid-mean)
    corner = np.sort([0, 0, 0, 0, 0, x[0, 0, 0, 1], x[0, 0, 1, 0], x[0, 0, 1, 1]])
    assert lpd[0, 0, 0, 0] == pytest.approx(x[0, 0, 0, 0] - corner[3], abs=1e-6)
    rep = np.sort([x[0, 0, 0, 0]] * 3 + [x[0, 0, 0, 1]] * 2 + [x[0, 0, 1, 0]] * 2 + [x[0, 0, 1, 1]])
    assert mid[0, 0, 0, 0] == pytest.approx(x[0, 0, 0, 0] - 0.5 * (rep[3] + rep[4]), abs=1e-6)
    with pytest.raises(UsageError, match="--lpd"):
        lpd_map(torch.from_numpy(x), "median")


def test_lpd_mode_is_stored_and_older_model_files_keep_mid_mean():
    from icmlkit.lib.detect_synthetic.model import DetectorConfig

    assert DetectorConfig().lpd == "lower-median"
    assert DetectorConfig.from_json(DetectorConfig(lpd="mid-mean").to_json()).lpd == "mid-mean"
    old = json.loads(DetectorConfig().to_json())
    del old["lpd"]
    assert DetectorConfig.from_json(json.dumps(old)).lpd == "mid-mean"   # written before 2026-12-07
    with pytest.raises(InputError, match="--lpd"):
        DetectorConfig.from_json(json.dumps(dict(old, lpd="median")))


def test_unreadable_images_are_described_without_internals():
    from PIL import Image

    from icmlkit.lib.detect_synthetic.images import _image_problem, decode

    for data in (b"", b"hello", b"\x89PNG\r\n\x1a\n" + bytes(range(256))):
        with pytest.raises(InputError) as info:
            decode(data, 16, "x.png")
        assert str(info.value) == "x.png: not a readable image (no image format recognised)"
    assert _image_problem(IndexError("pop from empty list"), Image) == "corrupt or unsupported image data"
    assert _image_problem(OSError("image file is truncated"), Image) == "image file is truncated"


# --------------------------------------------------------------------------- the backbone


def test_backbone_classifies_chelsea_as_a_cat_and_coffee_as_espresso_or_cup():
    from skimage import data

    from icmlkit.lib.vision.backbone import load_backbone

    enc = load_backbone(input_size=224)
    assert enc.dim == 1280 and not any(p.requires_grad for p in enc.parameters())
    imgs = []
    for im in (data.chelsea(), data.coffee()):
        t = torch.from_numpy(im).permute(2, 0, 1).float() / 255
        h, w = t.shape[-2:]
        s = min(h, w)
        imgs.append(torch.nn.functional.interpolate(
            t[None, :, (h - s) // 2:(h - s) // 2 + s, (w - s) // 2:(w - s) // 2 + s], size=224, mode="bilinear",
            antialias=True, align_corners=False))
    with torch.no_grad():
        top = enc.logits(torch.cat(imgs)).argmax(1).tolist()
    assert 281 <= top[0] <= 285, top  # tabby / tiger cat / Persian / Siamese / Egyptian cat
    assert top[1] in (967, 968), top  # espresso / cup


def test_gradients_flow_through_the_frozen_encoder():
    from icmlkit.lib.vision.backbone import load_backbone

    enc = load_backbone(input_size=32)
    enc.train()
    assert not enc.training and not enc.net._bn0.training  # stays in eval mode
    x = torch.rand(2, 3, 32, 32, requires_grad=True)
    enc(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert all(p.grad is None for p in enc.parameters())


# --------------------------------------------------------------------------- metrics


def test_metrics_and_oracle_accuracy_against_brute_force():
    from icmlkit.lib.detect_synthetic.metrics import asymmetry_test, detection_metrics, oracle_accuracy

    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 200)
    s = np.round(rng.random(200) + 0.3 * y, 2)
    brute = max(((s >= t).astype(int) == y).mean() for t in np.r_[np.unique(s), np.inf])
    assert oracle_accuracy(y, s) == pytest.approx(brute)
    m = detection_metrics(y, s)
    assert set(m) == {"auroc", "ap", "acc_at_0_5", "oracle_threshold_acc", "n_real", "n_fake"}
    assert m["oracle_threshold_acc"] >= m["acc_at_0_5"]
    a = asymmetry_test(rng.random(50), rng.random(50) + 0.5)
    assert a["p_value"] < 1e-6 and a["effect_p_fake_gt_real"] > 0.8
    assert asymmetry_test(rng.random(50) + 0.5, rng.random(50))["p_value"] > 0.99


# --------------------------------------------------------------------------- through the CLI


def _crops(n, seed):
    from icmlkit.lib.detect_synthetic.benchmark import real_crops

    pix, _ = real_crops(("astronaut", "coffee", "chelsea"), n, 32, seed)
    return pix


TOY = ("--image-size", 32, "--input-size", 64, "--preprocess", "resize")  # the toy sizes (the defaults: 112/112/crop)
TINY_TRAIN = ("--steps", 3, "--batch-size", 8, "--device", "cpu", *TOY)  # the tiny fixture's ra-det training ...
TINY_ONE = (*TINY_TRAIN, "--micro-batches", 2)  # ... in one process, summing as two torchrun processes do


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny labelled set: real photo crops vs 'generated' = the crops through a small random
    conv net (a stand-in generator with its own texture), as 32-px PNGs in the CNNDetection layout."""
    from icmlkit.lib.detect_synthetic.images import to_tensor, to_uint8, write_pngs

    root = tmp_path_factory.mktemp("detect")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Tanh(), torch.nn.Conv2d(8, 3, 3, padding=1))

    def fake(pix):
        with torch.no_grad():
            x = to_tensor(pix)
            return to_uint8((x + 0.3 * net(x)).clamp(0, 1))

    for split, seed, n in (("train", 0, 24), ("test", 1, 12)):
        write_pngs(root / split / "0_real", _crops(n, seed), "real")
        fk = fake(_crops(n, seed + 10))
        if split == "train":
            write_pngs(root / split / "1_fake", fk, "fake")
        else:
            write_pngs(root / split / "1_fake" / "convA", fk[: n // 2], "fake")
            write_pngs(root / split / "1_fake" / "convB", fk[n // 2:], "fake")
    model = root / "radet.pt"
    r = run_tool(TOOL, "train", root / "train", "-o", model, *TINY_ONE, "--json")
    assert r.returncode == 0, r.stderr
    return root, model, json.loads(r.stdout)


def test_train_score_eval_roundtrip(tiny, tmp_path):
    root, model, summary = tiny
    assert summary["method"] == "ra-det" and summary["n_real"] == 24 and summary["n_fake"] == 24
    assert summary["steps"] == 3 and np.isfinite(summary["final_l_emb"])
    man = json.loads((root / "radet.pt.manifest.json").read_text())
    assert man["status"] == "ok" and man["outputs"][0]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    blob = torch.load(model, weights_only=True)  # weights only, with its config
    assert json.loads(blob["config"])["method"] == "ra-det"
    assert not any(k.startswith("encoder.") for k in blob["state"])

    out = tmp_path / "s.csv"
    r = run_tool(TOOL, "score", model, root / "test", "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["n_scored"] == 24 and s["n_skipped"] == 0
    lines = out.read_text().splitlines()
    assert lines[0] == "path,score,cos,l2,p_foundation,p_cnn,p_l2,p_diff" and len(lines) == 25
    rows = [ln.split(",") for ln in lines[1:]]
    scores = np.array([float(r_[1]) for r_ in rows])
    branches = np.array([[float(v) for v in r_[4:]] for r_ in rows])
    assert ((0 <= scores) & (scores <= 1)).all()
    from icmlkit.lib.detect_synthetic.model import fuse, load_model

    rule = load_model(model).fusion
    assert rule == summary["fusion"] and summary["n_val"] >= 2  # chosen on the held-out training files
    fused = fuse(torch.tensor(branches), rule).numpy()
    assert np.allclose(scores, fused, atol=2e-6)  # score = the chosen fusion of the calibrated branches

    r = run_tool(TOOL, "eval", model, "--real", root / "test" / "0_real", "--fake", root / "test" / "1_fake", "--json")
    assert r.returncode == 0, r.stderr
    e = json.loads(r.stdout)
    for key in ("auroc", "ap", "acc_at_0_5", "oracle_threshold_acc", "n_real", "n_fake", "per_generator"):
        assert key in e
    assert (e["n_real"], e["n_fake"]) == (12, 12) and set(e["per_generator"]) == {"convA", "convB"}
    assert 0 <= e["auroc"] <= 1 and e["oracle_threshold_acc"] >= e["acc_at_0_5"] - 1e-12


def test_radet_training_resumes_from_a_checkpoint_to_the_same_weights(tiny, tmp_path, interrupting_checkpointer):
    from icmlkit.lib.core.checkpoint import Checkpointer
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.detect_synthetic.images import to_tensor
    from icmlkit.lib.detect_synthetic.model import Detector, DetectorConfig

    root, _, _ = tiny
    assert not (root / "radet.pt.ckpt.pt").exists()  # the CLI removes its checkpoint once training ends
    x = torch.cat([to_tensor(_crops(8, 0)), to_tensor(_crops(8, 5)).flip(-1) * 0.8])
    y = torch.cat([torch.zeros(8), torch.ones(8)])
    cfg = DetectorConfig(method="ra-det", steps=5, batch_size=8, **TOY_SIZES)
    full = Detector(cfg, seed=1)
    full.fit(x, y, seed=1)

    ckpt = tmp_path / "m.ckpt.pt"
    with pytest.raises(Interrupted):
        Detector(cfg, encoder=full.encoder, seed=1).fit(x, y, seed=1,
                                                        checkpointer=interrupting_checkpointer(ckpt, every=3))
    assert torch.load(ckpt, weights_only=True)["step"] == 3
    resumed = Detector(cfg, encoder=full.encoder, seed=1)
    resumed.fit(x, y, seed=1, checkpointer=Checkpointer(ckpt, every=3, resume=True))
    a, b = full.trainable_state(), resumed.trainable_state()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(UsageError, match="other settings"):
        Detector(cfg, encoder=full.encoder, seed=1).fit(x, y, seed=2, checkpointer=Checkpointer(ckpt, resume=True))
    r = run_tool(TOOL, "train", root / "train", "-o", tmp_path / "n.pt", "--resume")
    assert r.returncode == 2 and "nothing to resume" in r.stderr


def test_cli_resume_writes_the_bytes_of_an_uninterrupted_run(tiny, tmp_path, monkeypatch, capsys):
    """Interrupted right after its first checkpoint (a KeyboardInterrupt), the run leaves no model
    but OUTPUT.ckpt.pt; --resume finishes it to the same model bytes as an uninterrupted run."""
    from fuzzing import run_inprocess

    from icmlkit.lib.core import checkpoint

    root, _, _ = tiny
    args = ["train", str(root / "train"), "--steps", "4", "--batch-size", "8", "--checkpoint-every", "2",
            "--device", "cpu", *map(str, TOY)]
    full, part = tmp_path / "full.pt", tmp_path / "part.pt"
    assert run_inprocess(TOOL, [*args, "-o", str(full)], capsys)[0] == 0
    save = checkpoint.Checkpointer.save

    def save_then_interrupt(self, *a, **kw):
        save(self, *a, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint.Checkpointer, "save", save_then_interrupt)
    assert run_inprocess(TOOL, [*args, "-o", str(part)], capsys)[0] == 130
    monkeypatch.undo()
    ckpt = tmp_path / "part.pt.ckpt.pt"
    assert not part.exists() and torch.load(ckpt, weights_only=True)["step"] == 2
    code, _, err = run_inprocess(TOOL, [*args, "-o", str(part), "--resume", "--seed", "1"], capsys)
    assert code == 2 and "other settings" in err  # another seed: refused, the checkpoint kept
    assert run_inprocess(TOOL, [*args, "-o", str(part), "--resume"], capsys)[0] == 0
    assert part.read_bytes() == full.read_bytes() and not ckpt.exists()


def test_torchrun_two_processes_train_the_weights_of_one(tiny, tmp_path):
    """`torchrun --nproc_per_node 2` (gloo) with the fixture's global batch gives the fixture's
    one-process weights to 1e-6 (bit for bit: the fixture sums the probe's gradients over 2 pieces,
    as 2 processes do); rank 0 alone writes the model, the manifest and the summary."""
    root, model, _ = tiny
    out = tmp_path / "ddp.pt"
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    p = subprocess.run([torchrun, "--nproc_per_node", "2", "--standalone", exe(TOOL), "train", str(root / "train"),
                        "-o", str(out), *map(str, TINY_TRAIN), "--json"], capture_output=True, text=True, timeout=600,
                       env={**os.environ, **ONE_THREAD, "ICMLKIT_NO_PROGRESS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout)["steps"] == 3  # one summary object: rank 0's
    a, b = torch.load(model, weights_only=True)["state"], torch.load(out, weights_only=True)["state"]
    assert a.keys() == b.keys()
    diff = max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
    assert diff <= 1e-6, diff
    man = json.loads((tmp_path / "ddp.pt.manifest.json").read_text())
    assert man["distributed"] == {"world_size": 2, "backend": "gloo"} and man["status"] == "ok"
    assert sorted(q.name for q in tmp_path.iterdir()) == ["ddp.pt", "ddp.pt.manifest.json"]


def test_score_shards_concatenate_to_the_whole(tiny, tmp_path):
    root, model, _ = tiny
    whole = run_tool(TOOL, "score", model, root / "test" / "0_real", "-o", "-", "--no-manifest")
    assert whole.returncode == 0, whole.stderr
    parts = []
    for k in (1, 2):
        r = run_tool(TOOL, "score", model, root / "test" / "0_real", "-o", "-", "--shard", f"{k}/2")
        assert r.returncode == 0, r.stderr
        parts.append(r.stdout.splitlines())
    joined = [ln.split(",") for ln in parts[0][1:] + parts[1][1:]]
    ref = [ln.split(",") for ln in whole.stdout.splitlines()[1:]]
    assert [r_[0] for r_ in joined] == [r_[0] for r_ in ref] and len(ref) == 12
    # the same numbers up to float round-off of other batch sizes
    assert np.allclose(np.array([r_[1:] for r_ in joined], float), np.array([r_[1:] for r_ in ref], float), atol=1e-5)


def test_score_pipe_into_another_command(tiny):
    root, model, _ = tiny
    cmd = (f"{exe(TOOL)} score {model} {root / 'test'} -o - --no-progress | "
           f"{sys.executable} -c \"import sys,csv; r=list(csv.DictReader(sys.stdin)); "
           f"print(len(r), all(0<=float(x['score'])<=1 for x in r))\"")
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=300, env={**os.environ, **ONE_THREAD})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "24 True"
    head = subprocess.run(f"{exe(TOOL)} score {model} {root / 'test'} -o - | head -2", shell=True,
                          capture_output=True, text=True, timeout=300, env={**os.environ, **ONE_THREAD})
    assert head.stdout.splitlines()[0].startswith("path,score") and len(head.stdout.splitlines()) == 2
    assert "Error" not in head.stderr


def test_baselines_train_and_same_seed_gives_same_bytes(tiny, tmp_path):
    root, model, _ = tiny
    for method in ("rigid", "linear-probe"):
        m = tmp_path / f"{method}.pt"
        r = run_tool(TOOL, "train", root / "train" / "0_real", root / "train" / "1_fake", "--method", method,
                     "-o", m, *TOY, "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["method"] == method
    e = run_tool(TOOL, "eval", m, "--real", root / "test" / "0_real", "--fake", root / "test" / "1_fake", "--json")
    assert e.returncode == 0, e.stderr
    assert json.loads(e.stdout)["method"] == "linear-probe"
    again = tmp_path / "again.pt"  # the fixture's training run once more: the same bytes
    r = run_tool(TOOL, "train", root / "train", "-o", again, *TINY_ONE)
    assert r.returncode == 0, r.stderr
    assert hashlib.sha256(again.read_bytes()).hexdigest() == hashlib.sha256(model.read_bytes()).hexdigest()


def test_probe_reports_drift_and_mann_whitney(tiny, tmp_path):
    root, model, _ = tiny
    out = tmp_path / "drift.csv"
    r = run_tool(TOOL, "probe", root / "test" / "1_fake", "--real", root / "test" / "0_real", "-o", out, *TOY, "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["n"] == 12 and s["n_real"] == 12 and 0 <= s["mann_whitney"]["p_value"] <= 1
    assert s["median_drift"] >= 0 and out.read_text().startswith("path,set,cos,drift,l2\n")
    r = run_tool(TOOL, "probe", root / "test" / "1_fake", "--model", model, "--json")
    assert r.returncode == 0, r.stderr and "ra-det" in json.loads(r.stdout)["probe"]


def test_bad_image_is_one_line_error_or_skipped(tiny, tmp_path):
    root, model, _ = tiny
    folder = tmp_path / "imgs"
    folder.mkdir()
    (folder / "a.png").write_bytes((root / "test" / "0_real" / "real_00000.png").read_bytes())
    (folder / "broken.png").write_bytes(b"not an image at all")
    out = tmp_path / "s.csv"
    r = run_tool(TOOL, "score", model, folder, "-o", out)
    assert r.returncode == 1 and "broken.png" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()
    r = run_tool(TOOL, "score", model, folder, "-o", out, "--skip-bad", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["n_skipped"] == 1 and len(out.read_text().splitlines()) == 2
    lst = tmp_path / "list.txt"
    lst.write_text("imgs/a.png\nimgs/missing.png\n")
    r = run_tool(TOOL, "score", model, lst, "-o", "-")
    assert r.returncode == 1 and "list.txt, line 2" in r.stderr
    r = run_tool(TOOL, "score", tmp_path / "none.pt", folder)
    assert r.returncode == 1 and "none.pt" in r.stderr
    r = run_tool(TOOL, "train", root / "train", "-o", tmp_path / "x.pt", "--backbone", "torchvision:resnet18")
    assert r.returncode == 2 and "--backbone-weights" in r.stderr


def test_shipped_generated_images_are_small_and_fit_the_quick_benchmark(tmp_path):
    """The demo's shipped generated images (data/detect_synthetic/quick_generated.npz): under 2 MB,
    seed 0's quick generators at the quick sizes; make_benchmark writes them instead of training."""
    from icmlkit.lib.detect_synthetic.benchmark import QUICK, make_benchmark
    from icmlkit.lib.detect_synthetic.demo import DEMO_SIZES, GENERATED, _shipped

    assert GENERATED.is_file() and GENERATED.stat().st_size < 2_000_000
    samples = _shipped(0)
    info = samples["info"]
    n_train, n_test = DEMO_SIZES["n_train"], DEMO_SIZES["n_test"]
    assert info["seed"] == 0 and info["n_train_real"] == n_train and info["n_test_real"] == n_test
    for g, meta in info["generators"].items():
        assert meta["steps"] == QUICK["steps"][g]
        assert samples[g].shape == (meta["samples"], 32, 32, 3) and samples[g].dtype == np.uint8
    assert _shipped(1) is None  # another seed trains its own generators
    out = make_benchmark(tmp_path / "b", n_train=n_train, n_test=n_test, seed=0, samples=samples)
    assert out["generators"] == info["generators"]
    assert len(list((tmp_path / "b" / "train" / "1_fake").iterdir())) == n_train


@pytest.mark.slow
def test_demo_runs(tmp_path):
    """The demo on the shipped generated images; with --train-generators it trains them again and
    writes the shipped file's bytes (how data/detect_synthetic/quick_generated.npz is made)."""
    from icmlkit.lib.detect_synthetic.demo import GENERATED

    r = run_tool(TOOL, "demo", "--outdir", tmp_path / "demo", "--json", "--no-progress")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert "headline" in s and set(s["methods"]) == {"ra-det", "rigid", "linear-probe"}
    assert s["benchmark"]["generated"].startswith("shipped")
    ra = s["methods"]["ra-det"]  # above chance on its own training generator
    assert ra["auroc"]["dcgan"] > 0.6, ra
    assert (tmp_path / "demo" / "manifest.json").exists()
    r = run_tool(TOOL, "demo", "--outdir", tmp_path / "again", "--train-generators", "--json", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["benchmark"]["generated"] == "trained here"
    assert (tmp_path / "again" / "generated.npz").read_bytes() == GENERATED.read_bytes()
