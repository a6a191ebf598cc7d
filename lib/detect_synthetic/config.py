"""The settings of detect-synthetic's detectors and probe, importable without torch (the CLI builds
its options from these dataclasses at import time, and ``--help`` must stay fast).

- :class:`DetectorConfig`: everything needed to rebuild a detector (stored in the model file);
  the ``train`` options are its fields.
- :class:`ProbeConfig`: the fixed Gaussian probe of ``probe`` (RIGID's) and its encoder.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.vision import LITE0 as DEFAULT_BACKBONE

METHODS = ("ra-det", "rigid", "linear-probe", "finetune")
FUSIONS = ("max", "mean", "logit-mean")  # ra-det's rules for the calibrated branch probabilities
PREPROCESS = ("resize", "crop")
GENERATORS = ("dcgan", "ddpm", "vae")  # the in-process generators of the offline benchmark
SPACES = ("normalised", "pixel")
LPD_MODES = ("lower-median", "mid-mean")  # the official LPD map, and ours before 2026-12-07
# the default image pipeline is the benchmark's (bench/detect_synthetic.py: 112-px native crops, encoder
# at 112 px); the toy one (the demo's 32-px generated benchmark, encoder at 64 px) is passed explicitly
BENCH_SIZES = {"image_size": 112, "input_size": 112, "preprocess": "crop"}
TOY_SIZES = {"image_size": 32, "input_size": 64, "preprocess": "resize"}
EPS_EVAL = 16 / 255
EPS_TRAIN = (4 / 255, 32 / 255)

# the encoder's fields, shared by DetectorConfig and ProbeConfig (one help text each)
_BACKBONE = {
    "backbone": {"help": "efficientnet-lite0 (shipped ImageNet weights), or torchvision:<arch> / timm:<arch> "
                         "with --backbone-weights (e.g. a DINOv2 or CLIP state dict on disk)."},
    "backbone_weights": {"help": "Local state dict (.pth/.pt loaded with weights_only=True, or .safetensors) or a "
                         "local timm / torchvision model folder (its model.safetensors, pytorch_model.bin or single "
                         "weights file) for --backbone."},
    "image_size": {"help": "Images are centre-cropped (--preprocess crop) or resized (--preprocess resize) to this "
                           "square size (both classes alike); 112 is the benchmark's, the demo's toy images are 32.",
                   "min": 8},
    "input_size": {"help": "The encoder sees the images resized to this size (112: the benchmark's; the paper's "
                           "encoder 224).", "min": 16},
    "preprocess": {"choices": PREPROCESS, "help": "resize: centre square, bicubic resize to --image-size; crop: "
                   "the centre --image-size crop at the native resolution (keeps pixel-level traces; smaller "
                   "images are resized up)."},
}


def _check_choice(option: str, value, allowed) -> None:
    if value not in allowed:
        raise UsageError(f"{option} must be one of {', '.join(allowed)}, not {value!r}")


@dataclass
class DetectorConfig:
    """Everything needed to rebuild a detector (stored in the model file).

    The defaults are the benchmarked setting (bench/detect_synthetic.py): the centre 112-px crop at
    the native resolution (``preprocess`` crop: resizing wipes the pixel-level traces), the encoder
    at 112 px (the paper: 224); the probe UNet has 16 base channels and 3 levels. The demo and the
    tests pass their toy sizes (32-px images resized, encoder at 64 px) explicitly (:data:`TOY_SIZES`).
    """

    method: str = field(default="ra-det", metadata={
        "choices": METHODS, "help": "ra-det (learned probe + four-branch head), rigid (fixed Gaussian probe, "
        "training-free), linear-probe (logistic regression on clean features) or finetune (every backbone weight "
        "and a linear head, CNNDetection's recipe with Blur+JPEG augmentation)."})
    backbone: str = field(default=DEFAULT_BACKBONE, metadata=_BACKBONE["backbone"])
    backbone_weights: str | None = field(default=None, metadata=_BACKBONE["backbone_weights"])
    image_size: int = field(default=BENCH_SIZES["image_size"], metadata=_BACKBONE["image_size"])
    input_size: int = field(default=BENCH_SIZES["input_size"], metadata=_BACKBONE["input_size"])
    preprocess: str = field(default=BENCH_SIZES["preprocess"], metadata=_BACKBONE["preprocess"])
    eps: float = field(default=EPS_EVAL, metadata={
        "help": "ra-det: L∞ bound of the probe at evaluation (training draws ε in [4/255, 32/255]).",
        "min": 0, "min_open": True})
    eps_train: tuple = EPS_TRAIN
    margin: float = field(default=1.0, metadata={"help": "ra-det: margin m of the discrepancy loss.", "min": 0})
    lambda_bce: float = 1.0
    lambda_emb: float = 1.0
    probe_base: int = 16
    sigma: float = 1.0
    steps: int = field(default=300, metadata={"help": "ra-det, finetune: optimiser steps (class-balanced batches).",
                                              "min": 1})
    val_fraction: float = field(default=0.2, metadata={
        "help": "ra-det: fraction of the training sources (files) held out to calibrate each branch and choose "
        "the fusion rule (0: uncalibrated, max fusion).", "min": 0, "max": 0.9})
    fusion: str = field(default="auto", metadata={
        "choices": ("auto", *FUSIONS), "help": "ra-det: how the calibrated branch probabilities are fused: auto "
        "(the best validation AUROC among max, mean, logit-mean; ties: max) or that rule."})
    batch_size: int = field(default=64, metadata={
        "help": "ra-det, finetune: images per step (half real, half generated; the global batch under torchrun).",
        "min": 2})
    micro_batches: int = field(default=1, metadata={
        "help": "ra-det: the probe and the encoder take each process's part of the batch in this many pieces "
        "(less memory; their gradients are summed). One process with N pieces sums as torchrun with N "
        "processes does, so both give the same weights bit for bit.", "min": 1})
    lr: float = field(default=1e-4, metadata={  # the method sheet's AdamW learning rate (weight decay 0.01)
        "help": "ra-det, finetune: AdamW learning rate (weight decay 0.01; the method sheet's values).",
        "min": 0, "min_open": True})
    weight_decay: float = 0.01
    rigid_noise: float = field(default=0.05, metadata={
        "help": "rigid: λ, the standard deviation of the Gaussian probe (RIGID's 0.05), in the units of "
        "--rigid-space.", "min": 0, "min_open": True})
    rigid_draws: int = field(default=4, metadata={"help": "rigid: noise draws averaged (antithetic pairs).",
                                                  "min": 1})
    rigid_space: str = field(default="normalised", metadata={
        "choices": SPACES, "help": "rigid: add the noise to the encoder's normalised input tensor at its input "
        "size, unclamped (RIGID's way), or to the [0, 1] pixels at the image size, clamped."})
    lpd: str = field(default="lower-median", metadata={
        "choices": LPD_MODES, "help": "ra-det: the LPD map x - median of the 8 neighbours: lower-median (the official "
        "code: the lower middle value, zero padding) or mid-mean (the mean of the two middle values, replicate "
        "padding; ours before 2026-12-07)."})
    linear_c: float = 1.0
    chunk: int = 128

    def check(self) -> None:
        _check_choice("--method", self.method, METHODS)
        _check_choice("--rigid-space", self.rigid_space, SPACES)
        _check_choice("--fusion", self.fusion, ("auto", *FUSIONS))
        _check_choice("--preprocess", self.preprocess, PREPROCESS)
        _check_choice("--lpd", self.lpd, LPD_MODES)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str = "<model file>") -> "DetectorConfig":
        """The config stored in a model file; an :class:`InputError` naming ``where`` if it is not one."""
        from icmlkit.lib.core.io import parse_json

        data = parse_json(text, where, dict, "detector config") if isinstance(text, str) else None
        if data is None:
            raise InputError("the stored detector config is not text", where)
        known = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        if "eps_train" in data:
            data["eps_train"] = tuple(data["eps_train"])
        if data.get("method") == "rigid" and "rigid_space" not in data:
            data["rigid_space"] = "pixel"  # model files written before rigid_space existed
        if "lpd" not in data:
            data["lpd"] = "mid-mean"  # model files written before the LPD map followed the official code
        try:
            cfg = cls(**data)
            cfg.check()
        except (TypeError, UsageError) as exc:
            raise InputError(f"not a valid detector config ({exc})", where) from None
        return cfg


@dataclass
class ProbeConfig:
    """The fixed Gaussian probe of ``detect-synthetic probe`` (RIGID's) on the encoder given."""

    noise: float = field(default=0.05, metadata={
        "help": "Gaussian probe: λ, the standard deviation (RIGID's 0.05), in the units of --noise-space.",
        "min": 0, "min_open": True})
    noise_space: str = field(default="normalised", metadata={
        "choices": SPACES, "help": "Gaussian probe: added to the encoder's normalised input tensor (RIGID's "
        "way) or to the [0, 1] pixels (clamped)."})
    draws: int = field(default=4, metadata={"help": "Gaussian probe: noise draws averaged (antithetic pairs).",
                                            "min": 1})
    backbone: str = field(default=DEFAULT_BACKBONE, metadata=_BACKBONE["backbone"])
    backbone_weights: str | None = field(default=None, metadata=_BACKBONE["backbone_weights"])
    image_size: int = field(default=BENCH_SIZES["image_size"], metadata=_BACKBONE["image_size"])
    input_size: int = field(default=BENCH_SIZES["input_size"], metadata=_BACKBONE["input_size"])
    preprocess: str = field(default=BENCH_SIZES["preprocess"], metadata=_BACKBONE["preprocess"])

    def check(self) -> None:
        _check_choice("--noise-space", self.noise_space, SPACES)
        _check_choice("--preprocess", self.preprocess, PREPROCESS)

    def detector_config(self) -> DetectorConfig:
        """The training-free rigid detector that measures this probe's drift."""
        return DetectorConfig(method="rigid", backbone=self.backbone, backbone_weights=self.backbone_weights,
                              image_size=self.image_size, input_size=self.input_size, preprocess=self.preprocess,
                              rigid_noise=self.noise,
                              rigid_draws=self.draws, rigid_space=self.noise_space)
