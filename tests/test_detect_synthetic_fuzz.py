"""detect-synthetic with malformed files in every input slot of every subcommand (issue 14's fuzz
check): image folders, files and list files, model files, backbone weights and the training
checkpoint. ``generate`` and ``demo`` read no files."""
from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from fuzzing import DEFAULT_KINDS, FuzzCase, MismatchCase, check_malformed, run_inprocess

TOOL = "detect-synthetic"
IMAGE_KINDS = (*DEFAULT_KINDS, "garbage_png")
TORCH_KINDS = (*DEFAULT_KINDS, "garbage_pt")


@functools.lru_cache(maxsize=None)
def _assets() -> dict:
    """Valid inputs, made once: 4 real and 4 'generated' 32-px PNGs and a rigid model file."""
    from icmlkit.lib.detect_synthetic.benchmark import real_crops
    from icmlkit.lib.detect_synthetic.config import DetectorConfig
    from icmlkit.lib.detect_synthetic.images import write_pngs
    from icmlkit.lib.detect_synthetic.model import save_model
    from icmlkit.lib.detect_synthetic.pipeline import ImageSet, train

    root = Path(tempfile.mkdtemp(prefix="detect-fuzz-"))
    atexit.register(shutil.rmtree, root, True)
    pix, _ = real_crops(("astronaut", "coffee"), 8, 32, 0)
    real = write_pngs(root / "real", pix[:4], "real")
    fake = write_pngs(root / "fake", 255 - pix[4:], "fake")
    res = train(DetectorConfig(method="rigid"), ImageSet.load(real, 32), ImageSet.load(fake, 32))
    save_model(root / "rigid.pt", res.detector)
    return {"real": root / "real", "fake": root / "fake", "model": root / "rigid.pt"}


def _valid(base: Path) -> dict:
    return _assets()


def _resume(base: Path) -> dict:
    """The checkpoint slot: ``-o BASE/bad.pt --resume`` reads BASE/bad.pt.ckpt.pt (the broken file)."""
    return {**_assets(), "model_out": base / "bad.pt"}


TRAIN = ["-o", "{out}/m.pt", "--method", "rigid"]
CASES = [
    FuzzCase("train", ["train", "{bad}", *TRAIN], label="root"),
    FuzzCase("train", ["train", "{bad}", "{fake}", *TRAIN], ".png", IMAGE_KINDS, _valid, "real"),
    FuzzCase("train", ["train", "{bad}", "{fake}", *TRAIN], ".txt", DEFAULT_KINDS, _valid, "real-list"),
    FuzzCase("train", ["train", "{real}", "{bad}", *TRAIN], ".png", IMAGE_KINDS, _valid, "fake"),
    FuzzCase("train", ["train", "{real}", "{fake}", *TRAIN, "--backbone-weights", "{bad}"], ".pth", TORCH_KINDS,
             _valid, "backbone-weights"),
    FuzzCase("train", ["train", "{real}", "{fake}", "-o", "{model_out}", "--resume", "--steps", "1",
                       "--batch-size", "4"], ".pt.ckpt.pt", TORCH_KINDS, _resume, "checkpoint"),
    FuzzCase("score", ["score", "{bad}", "{real}", "-o", "{out}/s.csv"], ".pt", TORCH_KINDS, _valid, "model"),
    FuzzCase("score", ["score", "{model}", "{bad}", "-o", "{out}/s.csv"], ".png", IMAGE_KINDS, _valid, "images"),
    FuzzCase("score", ["score", "{model}", "{bad}", "-o", "{out}/s.jsonl"], ".txt", DEFAULT_KINDS, _valid, "list"),
    FuzzCase("eval", ["eval", "{bad}", "--real", "{real}", "--fake", "{fake}", "-o", "{out}/e.csv"], ".pt",
             TORCH_KINDS, _valid, "model"),
    FuzzCase("eval", ["eval", "{model}", "--real", "{bad}", "--fake", "{fake}", "-o", "{out}/e.csv"], ".png",
             IMAGE_KINDS, _valid, "real"),
    FuzzCase("eval", ["eval", "{model}", "--real", "{real}", "--fake", "{bad}", "-o", "{out}/e.csv"], ".png",
             IMAGE_KINDS, _valid, "fake"),
    FuzzCase("probe", ["probe", "{bad}", "--real", "{real}", "-o", "{out}/p.csv"], ".png", IMAGE_KINDS, _valid,
             "images"),
    FuzzCase("probe", ["probe", "{fake}", "--real", "{bad}", "-o", "{out}/p.csv"], ".png", IMAGE_KINDS, _valid,
             "real"),
    FuzzCase("probe", ["probe", "{fake}", "--model", "{bad}", "-o", "{out}/p.csv"], ".pt", TORCH_KINDS, _valid,
             "model"),
    FuzzCase("probe", ["probe", "{fake}", "--backbone-weights", "{bad}", "-o", "{out}/p.csv"], ".pth", TORCH_KINDS,
             _valid, "backbone-weights"),
]


# issue 59 (tests/test_mismatch_sweep.py): `probe --model` uses the model's backbone, sizes and probe; an
# option given with it that disagrees (or that sets the Gaussian probe it does not use) is refused
MISMATCH = [
    MismatchCase("probe", ["probe", "{fake}", "--model", "{model}", "--image-size", "64", "-o", "{out}/p.csv"],
                 _valid, ("rigid.pt", "--image-size 112", "not 64"), "image-size"),
    MismatchCase("probe", ["probe", "{fake}", "--model", "{model}", "--preprocess", "resize"], _valid,
                 ("rigid.pt", "--preprocess crop", "not resize"), "preprocess"),
    MismatchCase("probe", ["probe", "{fake}", "--model", "{model}", "--noise", "0.2"], _valid,
                 ("rigid.pt", "--noise", "own probe"), "gaussian-probe"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed(TOOL, case, tmp_path, capsys)


def _blob(**fields) -> dict:
    from icmlkit.lib.detect_synthetic.model import FORMAT

    return {"format": FORMAT, "config": '{"method": "rigid"}', "state": {}, **fields}


@pytest.mark.parametrize("blob, message", [
    (_blob(config='{"method": "rigid", '), "not valid detector config"),
    (_blob(config='{"method": "svm"}'), "--method must be one of"),
    (_blob(config=3), "not text"),
    (_blob(state=[1, 2]), "a 'state' of tensors"),
    (_blob(state={"threshold": torch.zeros(5), "scale": torch.ones(())}), "does not fit method rigid"),
    (_blob(config='{"method": "ra-det"}'), "does not fit method ra-det"),
], ids=["truncated-config", "unknown-method", "config-not-text", "state-not-dict", "wrong-shape", "no-weights"])
def test_model_files_with_a_broken_inside_are_named_errors(blob, message, tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    torch.save(blob, bad)
    out = tmp_path / "s.csv"
    code, _, err = run_inprocess(TOOL, ["score", str(bad), str(_assets()["real"]), "-o", str(out)], capsys)
    assert code == 1 and err.startswith(f"Error: {bad}") and message in err, err
    assert "Traceback" not in err and "rerun with --debug" not in err and not out.exists()
