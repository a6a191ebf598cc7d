"""One function per ``detect-synthetic`` subcommand, shared by the CLI, the demo and the benchmark.

- :func:`train`: a :class:`DetectorConfig` + real and generated images -> a trained detector;
- :func:`score`: a detector + image files (decoded block by block) -> per-image scores;
- :func:`evaluate`: a detector + labelled images (reals, fakes per generator) -> AUROC, AP,
  accuracy at 0.5, per generator, and per-image rows;
- :func:`probe`: a :class:`ProbeConfig` (or an ra-det / rigid model's probe) + images -> the raw
  robustness-asymmetry signal (feature drift) with a one-sided Mann-Whitney test against reals.

Each returns a result with ``.summary`` (the JSON summary) and, where the command writes a table,
``.rows`` (dicts, written by :func:`icmlkit.lib.core.io.write_rows`) with :data:`FLOAT_FORMAT`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.detect_synthetic.config import DetectorConfig, ProbeConfig
from icmlkit.lib.detect_synthetic.images import load_images, to_tensor
from icmlkit.lib.detect_synthetic.metrics import asymmetry_test, detection_metrics
from icmlkit.lib.detect_synthetic.model import Detector

SCORE_BLOCK = 4096  # images decoded at once by score (bounded memory)
FLOAT_FORMAT = "%.6f"  # the tables' floats in CSV (JSON Lines get them rounded to 6 decimals)


@dataclass
class ImageSet:
    """Decoded images ``x`` (N, 3, S, S) in [0, 1] and their file names (None: numbered rows)."""

    x: torch.Tensor
    paths: list | None = None

    @classmethod
    def load(cls, files, size: int, skip_bad: bool = False, crop: bool = False) -> "ImageSet":
        batch = load_images(files, size, skip_bad=skip_bad, crop=crop)
        return cls(to_tensor(batch.pixels), batch.paths)

    def names(self) -> list:
        return list(self.paths) if self.paths is not None else [str(i) for i in range(len(self.x))]

    def __len__(self) -> int:
        return len(self.x)


@dataclass
class TrainResult:
    summary: dict
    detector: Detector


@dataclass
class TableResult:
    """A summary and the per-image rows of a table (``columns`` in order); ``scores`` keeps the raw
    detector outputs per set for callers that need more than the table (the benchmark)."""

    summary: dict
    rows: list = field(default_factory=list)
    columns: list = field(default_factory=list)
    scores: dict = field(default_factory=dict)


def _r6(v) -> float:
    return round(float(v), 6)


def train(cfg: DetectorConfig, real: ImageSet, fake: ImageSet, *, seed: int = 0, device="cpu", checkpointer=None,
          dist=None, encoder=None, groups=None) -> TrainResult:
    """Train ``cfg.method`` on reals (label 0) vs generated images (label 1).

    ``checkpointer`` / ``dist``: ra-det's checkpoints and torchrun data parallelism (see
    :meth:`Detector.fit`); ``encoder`` reuses an already loaded frozen encoder; ``groups``: the
    source of each image (reals then fakes; None: every image its own), which ra-det's validation
    split keeps together."""
    if checkpointer is not None and checkpointer.resume and cfg.method != "ra-det":
        raise UsageError("--resume: only ra-det training has checkpoints")
    det = Detector(cfg, encoder=encoder, device=device, seed=seed)
    x = torch.cat([real.x, fake.x])
    y = torch.cat([torch.zeros(len(real)), torch.ones(len(fake))])
    summary = det.fit(x, y, seed=seed, checkpointer=checkpointer if cfg.method == "ra-det" else None, dist=dist,
                      groups=groups)
    return TrainResult(summary, det)


def score(detector: Detector, files: list, *, seed: int = 0, skip_bad: bool = False,
          block: int = SCORE_BLOCK) -> TableResult:
    """Score image ``files`` (decoded ``block`` at a time): the probability that each is generated
    and the method's drift statistics. Rows: path, score, then cos, l2, p_<branch> (ra-det) or cos,
    l2 (rigid)."""
    t0 = time.perf_counter()
    kept, skipped, parts = [], [], []
    for i in range(0, len(files), block):
        b = load_images(files[i:i + block], detector.config.image_size, skip_bad=skip_bad,
                        crop=detector.config.preprocess == "crop")
        kept += b.paths
        skipped += b.skipped
        if b.paths:
            parts.append(detector.score(to_tensor(b.pixels), seed=seed))
    out = {k: torch.cat([p[k] for p in parts]) for k in parts[0]} if parts else {"score": torch.zeros(0)}
    seconds = time.perf_counter() - t0
    columns = ["path", "score", *[k for k in out if k != "score"]]
    values = {k: out[k].tolist() for k in columns[1:]}
    rows = [{"path": p, **{k: _r6(values[k][i]) for k in columns[1:]}} for i, p in enumerate(kept)]
    s = out["score"]
    summary = {"n_scored": len(kept), "n_skipped": len(skipped), "n_flagged": int((s >= 0.5).sum()),
               "mean_score": float(s.mean()) if len(s) else None, "method": detector.config.method,
               "seconds": round(seconds, 3),
               "images_per_second": round(len(kept) / seconds, 2) if seconds > 0 and kept else None}
    return TableResult(summary, rows, columns)


def evaluate(detector: Detector, real, fakes: dict, *, seed: int = 0) -> TableResult:
    """Score the reals and every generator's fakes (``fakes``: name -> :class:`ImageSet`); metrics
    pooled and per generator. ``real``: one :class:`ImageSet` that every generator is compared
    with, or a dict name -> :class:`ImageSet` of each generator's own reals (the CNNDetection
    protocol: per generator, its reals vs its fakes).

    Summary: auroc, ap, acc_at_0_5, oracle_threshold_acc, n_real, n_fake, per_generator, method.
    Rows: path, label (1 = generated), generator ("" for shared reals), score. ``scores``: the raw
    outputs of :meth:`Detector.score` per set ("real" or "real/<generator>", then each generator)."""
    paired = isinstance(real, dict)
    reals = {k: v for k, v in real.items() if len(v)} if paired else {"": real}
    if not all(len(v) for v in reals.values()) or not reals:
        raise InputError("no real images to evaluate on")
    fakes = {k: v for k, v in fakes.items() if len(v)}
    if not fakes:
        raise InputError("no generated images to evaluate on")
    if paired and set(fakes) - set(reals):
        raise InputError(f"no real images for generator(s) {', '.join(sorted(set(fakes) - set(reals)))}")
    raw = {(f"real/{k}" if paired else "real"): detector.score(v.x, seed=seed) for k, v in reals.items()}
    real_scores = {k: raw[f"real/{k}" if paired else "real"]["score"].numpy() for k in reals}
    per, all_s, all_y = {}, list(real_scores.values()), [np.zeros(len(v), np.int64) for v in real_scores.values()]
    for name, fx in fakes.items():
        raw[name] = detector.score(fx.x, seed=seed)
        s_real, s_fake = real_scores[name if paired else ""], raw[name]["score"].numpy()
        per[name] = detection_metrics(np.r_[np.zeros(len(s_real), np.int64), np.ones(len(fx), np.int64)],
                                      np.r_[s_real, s_fake])
        all_s.append(s_fake)
        all_y.append(np.ones(len(fx), np.int64))
    pooled = detection_metrics(np.concatenate(all_y), np.concatenate(all_s))
    rows = [{"path": p, "label": 0, "generator": k, "score": _r6(v)}
            for k, rs in reals.items() for p, v in zip(rs.names(), real_scores[k])]
    for name, fx in fakes.items():
        rows += [{"path": p, "label": 1, "generator": name, "score": _r6(v)}
                 for p, v in zip(fx.names(), raw[name]["score"].numpy())]
    summary = {**pooled, "per_generator": per, "method": detector.config.method}
    return TableResult(summary, rows, ["path", "label", "generator", "score"], raw)


def probe_detector(cfg: ProbeConfig, device="cpu", encoder=None) -> Detector:
    """The training-free detector that measures the drift under ``cfg``'s Gaussian probe."""
    return Detector(cfg.detector_config(), encoder=encoder, device=device)


MODEL_SETTINGS = ("backbone", "backbone_weights", "image_size", "input_size", "preprocess")
GAUSSIAN_PROBE = ("noise", "noise_space", "draws")


def check_probe_options(model: Detector, given: dict, where: str) -> None:
    """``probe --model``: the model's recorded backbone, sizes and preprocessing are used, so an option given
    explicitly (``given``: name -> value) that disagrees with them is refused, and the Gaussian probe's own
    options have no effect (issue 59: both were silently ignored). A UsageError naming ``where``."""
    for k, v in given.items():
        flag = "--" + k.replace("_", "-")
        if k in MODEL_SETTINGS and getattr(model.config, k) != v:
            raise UsageError(f"{where}: the model was trained with {flag} {getattr(model.config, k)}, not {v}; "
                             f"leave {flag} out (the model's setting is used)")
        if k in GAUSSIAN_PROBE:
            raise UsageError(f"{flag} sets the Gaussian probe; with --model {where} the model's own probe (its "
                             "recorded setting) is used")


def probe(cfg: ProbeConfig, images: ImageSet, real: ImageSet | None = None, *, model: Detector | None = None,
          model_name: str = "", seed: int = 0, device="cpu", encoder=None) -> TableResult:
    """The raw robustness-asymmetry signal: for each image cos(f(x), f(x + δ)), drift = 1 − cos and
    the L2 distance, with δ the fixed Gaussian probe of ``cfg`` or the learned probe of ``model``
    (an ra-det or rigid model, at its ε). With ``real``: the one-sided Mann-Whitney U test of
    H1: drift(images) > drift(real).

    Summary: n, median_drift, mean_drift, mean_l2, probe; with ``real`` also n_real,
    median_drift_real, mann_whitney. Rows: path, set (images / real), cos, drift, l2."""
    if model is not None:
        if model.config.method not in ("ra-det", "rigid"):
            raise UsageError(f"--model {model_name}: a {model.config.method} model has no probe")
        det, label = model, f"{model.config.method} model {model_name}".strip()
    else:
        det = probe_detector(cfg, device, encoder)
        label = f"gaussian noise={cfg.noise} ({cfg.noise_space}) draws={cfg.draws}"
    if not len(images):
        raise InputError("no images to probe")

    def measure(s: ImageSet, tag: str):
        out = det.score(s.x, seed=seed)
        cos, l2 = out["cos"].numpy().astype(np.float64), out["l2"].numpy().astype(np.float64)
        rows = [{"path": p, "set": tag, "cos": _r6(c), "drift": _r6(1 - c), "l2": _r6(d)}
                for p, c, d in zip(s.names(), cos, l2)]
        return cos, l2, rows

    cos, l2, rows = measure(images, "images")
    summary = {"n": len(images), "median_drift": float(np.median(1 - cos)), "mean_drift": float(np.mean(1 - cos)),
               "mean_l2": float(np.mean(l2)), "probe": label}
    if real is not None:
        if not len(real):
            raise InputError("no real images to compare with")
        rcos, _, rrows = measure(real, "real")
        summary.update(n_real=len(real), median_drift_real=float(np.median(1 - rcos)),
                       mann_whitney=asymmetry_test(1 - rcos, 1 - cos))
        rows += rrows
    return TableResult(summary, rows, ["path", "set", "cos", "drift", "l2"])
