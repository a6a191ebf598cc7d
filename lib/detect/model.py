"""RA-Det and its two baselines as trainable/scorable detectors, and the model file.

- ``ra-det``: Differential Robustness Probing (learned L∞-bounded perturbation generator trained
  with the class-balanced discrepancy loss) + the four-branch head: (a) foundation branch (frozen
  encoder on the multi-scale views and on x + δ, trainable MLP), (b) CNN from random init on
  [DRP noise, LPD map], (c) L2-drift MLP (128-64-1, BN), (d) embedding-difference MLP. Training
  fusion: softmax-weighted branch logits; evaluation: max of the branch probabilities at the fixed
  ε = 16/255. Loss: BCE (λ = 1) + L_emb.
- ``rigid``: training-free; drift = 1 − mean cosine under a fixed Gaussian probe λ·N(0, I), λ =
  0.05, added (as in RIGID, He, Chen, Ho 2024) to the encoder's normalised input tensor at its input
  resolution, unclamped (``rigid_space="normalised"``; for EfficientNet-Lite0, std 128/255, that is
  σ ≈ 0.025 in [0, 1] pixel units; for ImageNet-normalised encoders ≈ 0.011); ``rigid_space="pixel"``
  is the older variant (λ in pixel units at the image resolution, clamped). ``fit`` only picks the
  threshold on the cosine drift (the ranking, hence AUROC/AP, does not depend on it).
- ``linear-probe``: UnivFD-style logistic regression on the clean embedding.

**reconstructed** (the paper body is not known): the softmax-weighted training fusion with learned
branch weights, the per-branch auxiliary BCE (needed for max-fusion at evaluation), feeding each
view to the encoder separately (the official code stacks 15 channels for DINOv3), δ/ε as the CNN
branch's noise input, and the small sizes (see :class:`DetectorConfig`).
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from icmlkit.lib.core.console import log, progress
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.io import read_torch, torch_bytes, write_bytes
from icmlkit.lib.detect.backbone import DEFAULT_BACKBONE, Encoder, load_backbone
from icmlkit.lib.detect.probe import (EPS_EVAL, EPS_TRAIN, ProbeUNet, apply_perturbation, discrepancy_loss, drift,
                                      gaussian_noise, gaussian_probe, lpd_map, multiscale_views)

METHODS = ("ra-det", "rigid", "linear-probe")
FORMAT = "icmlkit-detect-synthetic/1"
BRANCHES = ("foundation", "cnn", "l2", "diff")


@dataclass
class DetectorConfig:
    """Everything needed to rebuild a detector (stored in the model file).

    Sizes chosen for a 2-core CPU: images are 32 × 32 (``image_size``), upsampled to 64 px for
    the encoder (``input_size``); the probe UNet has 16 base channels and 3 levels.
    """

    method: str = "ra-det"
    backbone: str = DEFAULT_BACKBONE
    backbone_weights: str | None = None
    image_size: int = 32
    input_size: int = 64
    eps: float = EPS_EVAL
    eps_train: tuple = EPS_TRAIN
    margin: float = 1.0
    lambda_bce: float = 1.0
    lambda_emb: float = 1.0
    probe_base: int = 16
    sigma: float = 1.0
    steps: int = 300
    batch_size: int = 64
    lr: float = 1e-4  # the method sheet's AdamW learning rate (weight decay 0.01)
    weight_decay: float = 0.01
    rigid_noise: float = 0.05
    rigid_draws: int = 4
    rigid_space: str = "normalised"
    linear_c: float = 1.0
    chunk: int = 128

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "DetectorConfig":
        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        if "eps_train" in data:
            data["eps_train"] = tuple(data["eps_train"])
        if data.get("method") == "rigid" and "rigid_space" not in data:
            data["rigid_space"] = "pixel"  # model files written before rigid_space existed
        return cls(**data)


def _mlp(din: int, hidden: int) -> nn.Module:
    return nn.Sequential(nn.LayerNorm(din), nn.Linear(din, hidden), nn.GELU(), nn.Linear(hidden, 1))


class _Res(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) \
            if (stride != 1 or cin != cout) else nn.Identity()

    def forward(self, x):
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.skip(x))


class NoiseCNN(nn.Module):
    """Branch (b): a small ResNet-style CNN from random init on [δ/ε, LPD map] (6 channels)."""

    def __init__(self, width: int = 32):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(6, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
        self.layers = nn.Sequential(_Res(w, w, 1), _Res(w, 2 * w, 2), _Res(2 * w, 4 * w, 2))
        self.fc = nn.Linear(4 * w, 1)

    def forward(self, x):
        return self.fc(self.layers(self.stem(x)).mean(dim=(2, 3)))


class FourBranchHead(nn.Module):
    """The four branches and the training fusion weights."""

    def __init__(self, dim: int, n_views: int = 3):
        super().__init__()
        self.foundation = _mlp(dim * (2 + 2 * n_views), 256)
        self.cnn = NoiseCNN()
        self.l2 = nn.Sequential(nn.Linear(1, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 64),
                                nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 1))
        self.diff = _mlp(dim, 256)
        self.fusion = nn.Parameter(torch.zeros(len(BRANCHES)))

    def forward(self, f_clean, f_views, f_adv, delta_unit, lpd, l2, diff):
        found_in = torch.cat([f_clean, f_adv, *f_views, *[f_clean - v for v in f_views]], dim=1)
        z = torch.cat([self.foundation(found_in), self.cnn(torch.cat([delta_unit, lpd], dim=1)),
                       self.l2(l2[:, None]), self.diff(diff)], dim=1)
        return z  # (B, 4) branch logits

    def fuse_train(self, z):
        """Softmax-weighted branch logits (training fusion; reconstructed)."""
        return (z * torch.softmax(self.fusion, 0)).sum(dim=1)

    @staticmethod
    def fuse_eval(z):
        """Max of the branch probabilities (evaluation fusion)."""
        return torch.sigmoid(z).max(dim=1).values


class Detector(nn.Module):
    """A detector: the frozen encoder (not saved) and the method's trainable parts.

    :meth:`fit` trains on (x, y) tensors (x float (N, 3, S, S) in [0, 1], y 1 = generated);
    :meth:`score` returns a dict with ``score`` (probability generated) and drift statistics.
    """

    def __init__(self, config: DetectorConfig, encoder: Encoder | None = None, device="cpu", seed: int = 0):
        super().__init__()
        if config.method not in METHODS:
            raise UsageError(f"--method must be one of {', '.join(METHODS)}, not {config.method!r}")
        if config.rigid_space not in ("normalised", "pixel"):
            raise UsageError(f"rigid_space must be normalised or pixel, not {config.rigid_space!r}")
        self.config = config
        self.device_ = torch.device(device)
        self.encoder = encoder if encoder is not None else load_backbone(
            config.backbone, config.backbone_weights, config.input_size, device)
        self.encoder.to(self.device_)
        dim = self.encoder.dim
        if config.method == "ra-det":
            with torch.random.fork_rng(devices=[]):  # the initial weights depend on the seed only
                torch.manual_seed(seed)
                self.probe = ProbeUNet(dim, base=config.probe_base)
                self.head = FourBranchHead(dim)
        elif config.method == "rigid":
            self.register_buffer("threshold", torch.zeros(()))
            self.register_buffer("scale", torch.ones(()))
        else:
            self.register_buffer("feat_mean", torch.zeros(dim))
            self.register_buffer("feat_std", torch.ones(dim))
            self.linear = nn.Linear(dim, 1)
        self.to(self.device_)
        self.train_summary: dict = {}

    # ---------------------------------------------------------------- encoder helpers
    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """f(x) in chunks, without gradients."""
        out = []
        with torch.no_grad():
            for i in range(0, len(x), self.config.chunk):
                out.append(self.encoder(x[i:i + self.config.chunk].to(self.device_)))
        return torch.cat(out) if out else torch.zeros(0, self.encoder.dim, device=self.device_)

    def _view_embeddings(self, x):
        views = multiscale_views(x, self.config.sigma)
        return views, [self.encoder(v) for v in views]

    def rigid_drift(self, x: torch.Tensor, seed: int = 0):
        """(1 − mean cosine, mean L2) under the fixed Gaussian probe, per image (no gradients);
        the noise patterns depend on ``seed`` only (the same for every image and batch).

        ``rigid_space="normalised"`` (RIGID's): λ·n is added to the resized, normalised tensor the
        encoder consumes (no clamping); ``"pixel"``: to x in [0, 1] at the image size, clamped."""
        from icmlkit.lib.core.runtime import generator

        c = self.config
        gen = generator(seed, device=self.device_)
        with torch.no_grad():
            if c.rigid_space == "pixel":
                f = self.encoder(x)
                noisy = gaussian_probe(x, c.rigid_noise, c.rigid_draws, gen)
                fn = self.encoder(noisy.flatten(0, 1)).view(c.rigid_draws, len(x), -1)
            else:
                z = self.encoder.prepare(x)
                f = self.encoder.from_prepared(z)
                n = gaussian_noise(z.shape[1:], c.rigid_draws, gen, z.device, z.dtype)
                fn = self.encoder.from_prepared((z.unsqueeze(0) + c.rigid_noise * n).flatten(0, 1))
                fn = fn.view(c.rigid_draws, len(x), -1)
            cos, l2, _ = drift(f.unsqueeze(0).expand_as(fn), fn)
        return 1.0 - cos.mean(0), l2.mean(0)

    # ---------------------------------------------------------------- RA-Det forward
    def _radet_forward(self, x, eps, f_clean=None, f_views=None):
        views = multiscale_views(x, self.config.sigma)
        if f_clean is None:
            with torch.no_grad():
                f_clean = self.encoder(x)
                f_views = [self.encoder(v) for v in views]
        delta = self.probe(x, views, f_clean, eps)
        x_adv = apply_perturbation(x, delta)
        f_adv = self.encoder(x_adv)  # gradients flow through the frozen encoder to the probe
        cos, l2, diff = drift(f_clean, f_adv)
        eps_t = torch.as_tensor(eps, dtype=x.dtype, device=x.device).reshape(-1, 1, 1, 1)
        z = self.head(f_clean, f_views, f_adv, delta / eps_t, lpd_map(x) * 4.0, l2, diff)
        return z, cos, l2, delta

    # ---------------------------------------------------------------- training
    def fit(self, x: torch.Tensor, y: torch.Tensor, seed: int = 0, resume: dict | None = None, checkpoint=None,
            checkpoint_every: int = 0) -> dict:
        """Train on images x (N, 3, S, S) in [0, 1] and labels y (1 = generated). Returns a summary.

        ra-det only: ``checkpoint(state)`` is called every ``checkpoint_every`` steps with a dict that
        :func:`load_checkpoint` reads back (weights only); ``resume`` continues from it to the same
        weights as an uninterrupted run (same config, seed and data, else a UsageError)."""
        y = y.long()
        n_real, n_fake = int((y == 0).sum()), int((y == 1).sum())
        if n_real == 0 or n_fake == 0:
            raise InputError(f"training needs real and generated images (got {n_real} real, {n_fake} generated)")
        t0 = time.perf_counter()
        torch.manual_seed(seed)
        m = self.config.method
        if m == "rigid":
            summary = self._fit_rigid(x, y, seed)
        elif m == "linear-probe":
            summary = self._fit_linear(x, y)
        else:
            summary = self._fit_radet(x, y, seed, resume, checkpoint, checkpoint_every)
        summary.update(method=m, n_real=n_real, n_fake=n_fake, seconds=round(time.perf_counter() - t0, 3))
        self.train_summary = summary
        return summary

    def _fit_rigid(self, x, y, seed):
        d = torch.cat([self.rigid_drift(x[i:i + self.config.chunk].to(self.device_), seed)[0]
                       for i in range(0, len(x), self.config.chunk)])
        # threshold on the drift (= on the cosine): best balanced accuracy, direction fixed (fake = more drift)
        vals = d.sort().values
        cands = torch.cat([vals[:1] - 1e-6, 0.5 * (vals[1:] + vals[:-1]), vals[-1:] + 1e-6])
        pred = d[None, :] > cands[:, None]
        tpr = (pred & (y[None, :] == 1)).sum(1).double() / max(1, int((y == 1).sum()))
        tnr = (~pred & (y[None, :] == 0)).sum(1).double() / max(1, int((y == 0).sum()))
        best = int(torch.argmax(tpr + tnr))
        self.threshold.fill_(float(cands[best]))
        self.scale.fill_(float(d.std().clamp_min(1e-8)) / 4.0)
        return {"threshold_drift": float(self.threshold), "train_balanced_acc": float((tpr + tnr)[best] / 2)}

    def _fit_linear(self, x, y):
        from sklearn.linear_model import LogisticRegression

        f = self.embed(x).double()
        mean, std = f.mean(0), f.std(0).clamp_min(1e-6)
        z = ((f - mean) / std).cpu().numpy()
        clf = LogisticRegression(C=self.config.linear_c, max_iter=3000)
        clf.fit(z, y.cpu().numpy())
        self.feat_mean.copy_(mean.float())
        self.feat_std.copy_(std.float())
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor(clf.coef_, dtype=torch.float32))
            self.linear.bias.copy_(torch.tensor(clf.intercept_, dtype=torch.float32))
        return {"train_acc": float(clf.score(z, y.cpu().numpy()))}

    def _fit_radet(self, x, y, seed, resume=None, checkpoint=None, checkpoint_every=0):
        import hashlib

        from icmlkit.lib.core.runtime import generator

        c = self.config
        dev = self.device_
        x = x.to(dev)
        y = y.to(dev)
        log.info("ra-det: caching the clean and multi-scale embeddings of %d images ...", len(x))
        f_clean = self.embed(x)
        f_views = self._cached_views(x)
        real_idx = torch.nonzero(y == 0).flatten()
        fake_idx = torch.nonzero(y == 1).flatten()
        half = max(1, c.batch_size // 2)
        g = generator(seed, device="cpu")
        params = list(self.probe.parameters()) + list(self.head.parameters())
        opt = torch.optim.AdamW(params, lr=c.lr, weight_decay=c.weight_decay)
        key = {"config": self.config.to_json(), "seed": seed,
               "data": hashlib.sha256(x.cpu().numpy().tobytes() + y.cpu().numpy().tobytes()).hexdigest()}
        hist, start = [], 0
        if resume is not None:
            if resume.get("key") != key:
                raise UsageError("the checkpoint was written by a run with other settings, seed or images; rerun "
                                 "without --resume")
            self.load_state_dict(resume["state"], strict=False)
            opt.load_state_dict(resume["opt"])
            g.set_state(resume["gen"])
            hist, start = [list(h) for h in resume["hist"]], int(resume["step"])
        self.probe.train()
        self.head.train()
        for step in progress(range(start, c.steps), total=c.steps - start, desc="train ra-det"):
            # class-balanced batch: half reals, half fakes (the discrepancy loss uses both batch means)
            ri = real_idx[torch.randint(len(real_idx), (half,), generator=g)]
            fi = fake_idx[torch.randint(len(fake_idx), (half,), generator=g)]
            idx = torch.cat([ri, fi])
            yb = y[idx]
            eps = float(c.eps_train[0] + (c.eps_train[1] - c.eps_train[0]) * torch.rand((), generator=g))
            z, cos, l2, _ = self._radet_forward(x[idx], eps, f_clean[idx], [v[idx] for v in f_views])
            yf = yb.float()
            bce = F.binary_cross_entropy_with_logits(self.head.fuse_train(z), yf)
            aux = F.binary_cross_entropy_with_logits(z, yf[:, None].expand_as(z))
            emb = discrepancy_loss(cos, yb, c.margin)
            loss = c.lambda_bce * (bce + aux) + c.lambda_emb * emb
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            hist.append([bce.item(), aux.item(), emb.item(), cos[yb == 0].mean().item(), cos[yb == 1].mean().item()])
            if step % 50 == 0 or step == c.steps - 1:
                log.debug("step %d bce %.4f aux %.4f emb %.4f s_r %.4f s_f %.4f", step, *hist[-1])
            if checkpoint is not None and checkpoint_every and (step + 1) % checkpoint_every == 0 and step + 1 < c.steps:
                checkpoint({"format": FORMAT + "/checkpoint", "key": key, "step": step + 1, "state": self.trainable_state(),
                            "opt": opt.state_dict(), "gen": g.get_state(), "hist": hist})
        self.probe.eval()
        self.head.eval()
        last = torch.tensor(hist[-min(20, len(hist)):]).mean(0).tolist()
        return {"steps": c.steps, "final_bce": last[0], "final_branch_bce": last[1], "final_l_emb": last[2],
                "final_cos_real": last[3], "final_cos_fake": last[4]}

    def _cached_views(self, x):
        c = self.config
        outs = [[], [], []]
        with torch.no_grad():
            for i in range(0, len(x), c.chunk):
                views = multiscale_views(x[i:i + c.chunk], c.sigma)
                for k, v in enumerate(views):
                    outs[k].append(self.encoder(v))
        return [torch.cat(o) for o in outs]

    # ---------------------------------------------------------------- scoring
    def score(self, x: torch.Tensor, seed: int = 0, show_progress: bool = True) -> dict:
        """Score images x (N, 3, S, S) in [0, 1]; batched in chunks of ``config.chunk``.

        Returns tensors: ``score`` (probability generated); ra-det: ``cos``, ``l2`` (drift under the
        learned probe at the fixed ε) and ``p_<branch>``; rigid: ``cos`` (mean over the draws) and
        ``l2``; linear-probe: no drift statistics.
        """
        c = self.config
        m = c.method
        self.eval()
        chunks = range(0, len(x), c.chunk)
        parts: list[dict] = []
        for i in progress(chunks, total=len(chunks), desc=f"score {m}"):
            xb = x[i:i + c.chunk].to(self.device_)
            with torch.no_grad():
                if m == "ra-det":
                    z, cos, l2, _ = self._radet_forward(xb, c.eps)
                    p = torch.sigmoid(z)
                    part = {"score": p.max(dim=1).values, "cos": cos, "l2": l2,
                            **{f"p_{b}": p[:, k] for k, b in enumerate(BRANCHES)}}
                elif m == "rigid":
                    d, l2 = self.rigid_drift(xb, seed)
                    part = {"score": torch.sigmoid((d - self.threshold) / self.scale), "cos": 1.0 - d, "l2": l2}
                else:
                    f = self.encoder(xb)
                    part = {"score": torch.sigmoid(self.linear((f - self.feat_mean) / self.feat_std)).squeeze(1)}
            parts.append(part)
        if not parts:
            return {"score": torch.zeros(0)}
        return {k: torch.cat([p[k] for p in parts]).cpu() for k in parts[0]}

    # ---------------------------------------------------------------- persistence
    def trainable_state(self) -> dict:
        return {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items() if not k.startswith("encoder.")}

    def to_bytes(self) -> bytes:
        return torch_bytes({"format": FORMAT, "config": self.config.to_json(),
                            "train_summary": json.dumps({k: v for k, v in self.train_summary.items() if k != "seconds"},
                                                        sort_keys=True),  # no timings: same seed, same bytes
                            "state": self.trainable_state()})


def save_model(path, detector: Detector) -> None:
    """Write the model file (.pt: weights only, with its config) atomically."""
    write_bytes(path, detector.to_bytes())


def load_checkpoint(path) -> dict:
    """Read a training checkpoint written through ``Detector.fit(checkpoint=...)`` (weights only)."""
    return read_torch(path, "detect-synthetic checkpoint", FORMAT + "/checkpoint")


def load_model(path, device="cpu", encoder: Encoder | None = None) -> Detector:
    """Read a model file written by :func:`save_model` (``torch.load(weights_only=True)``)."""
    blob = read_torch(path, "detect-synthetic model file", FORMAT)
    config = DetectorConfig.from_json(blob["config"])
    det = Detector(config, encoder=encoder, device=device)
    missing, unexpected = det.load_state_dict(blob["state"], strict=False)
    missing = [k for k in missing if not k.startswith("encoder.")]
    if missing or unexpected:
        raise InputError(f"model file does not fit method {config.method} (missing {missing[:3]}, unexpected "
                         f"{unexpected[:3]})", str(path))
    det.train_summary = json.loads(blob.get("train_summary", "{}"))
    det.eval()
    return det
