"""RA-Det, its baselines as trainable/scorable detectors, and the model file.

- ``ra-det``: Differential Robustness Probing (learned L∞-bounded perturbation generator trained
  with the class-balanced discrepancy loss) + the four-branch head: (a) foundation branch (frozen
  encoder on the multi-scale views and on x + δ, trainable MLP), (b) CNN from random init on
  [DRP noise, LPD map], (c) L2-drift MLP (128-64-1, BN), (d) embedding-difference MLP. Loss, as the
  official code trains the four-branch ensemble: the **sum of the per-branch binary
  cross-entropies** (λ = 1) + L_emb; the fused logit (logit-weighted softmax of the branch logits)
  is computed for monitoring only. After training, each branch is calibrated (Platt scaling of its
  logit) on a validation split of the training sources, and the fusion rule (max, mean or mean
  logit of the calibrated branch probabilities) is chosen there by AUROC (ties: max, the official
  evaluation rule). Evaluation at the fixed ε = 16/255.
- ``rigid``: training-free; drift = 1 − mean cosine under a fixed Gaussian probe λ·N(0, I), λ =
  0.05, added (as in RIGID, He, Chen, Ho 2024) to the encoder's normalised input tensor at its input
  resolution, unclamped (``rigid_space="normalised"``; for EfficientNet-Lite0, std 128/255, that is
  σ ≈ 0.025 in [0, 1] pixel units; for ImageNet-normalised encoders ≈ 0.011); ``rigid_space="pixel"``
  is the older variant (λ in pixel units at the image resolution, clamped). ``fit`` only picks the
  threshold on the cosine drift (the ranking, hence AUROC/AP, does not depend on it).
- ``linear-probe``: UnivFD-style logistic regression on the clean embedding.
- ``finetune``: the CNNDetection recipe (Wang et al. 2020) on the same backbone: every encoder
  weight trainable plus a new linear head, binary cross-entropy, AdamW, random flips and Blur+JPEG
  augmentation (each with probability 0.5: Gaussian σ ~ U[0, 3], JPEG quality ~ U[30, 100]).

Training speed (ra-det): the clean embedding, the three multi-scale views, their embeddings (one
batched encoder call) and the LPD maps depend on the image only, so they are computed once before
the first step; a step runs the probe, f(x + δ) with its gradient and the head.

**reconstructed** (the paper body is not known): Platt scaling as the per-branch calibration, the
candidate fusion rules, feeding each view to the encoder separately (the official code stacks 15
channels for DINOv3), δ/ε as the CNN branch's noise input, the CNN's stride-2 stem, the fine-tuned
baseline's frozen BatchNorm statistics, and the small sizes (see :class:`DetectorConfig`).
"""
from __future__ import annotations

import copy
import io
import json
import time

import torch
import torch.nn.functional as F
from torch import nn

from icmlkit.lib.core.console import log, progress, report
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.io import read_torch, torch_bytes, write_bytes
from icmlkit.lib.core.runtime import Dist, generator, seeded
from icmlkit.lib.vision.backbone import Encoder, load_backbone
from icmlkit.lib.detect_synthetic.config import FUSIONS, METHODS, DetectorConfig
from icmlkit.lib.detect_synthetic.probe import (ProbeUNet, apply_perturbation, discrepancy_loss, drift, gaussian_blur,
                                      gaussian_noise, gaussian_probe, lpd_map, multiscale_views)

__all__ = ["BRANCHES", "FORMAT", "METHODS", "Detector", "DetectorConfig", "branch_loss", "fuse", "load_model",
           "save_model"]
FORMAT = "icmlkit-detect-synthetic/2"  # /2: per-branch calibration, fusion rule, half-resolution probe
BRANCHES = ("foundation", "cnn", "l2", "diff")
TIMINGS = ("seconds", "steps_per_second", "seconds_cache")  # summary keys left out of the model file


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
    """Branch (b): a small ResNet-style CNN from random init on [δ/ε, LPD map] (6 channels); its
    stem has stride 2 (as ResNet's; reconstructed size), so no layer runs at full resolution."""

    def __init__(self, width: int = 32):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(6, w, 3, 2, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
        self.layers = nn.Sequential(_Res(w, w, 1), _Res(w, 2 * w, 2), _Res(2 * w, 4 * w, 2))
        self.fc = nn.Linear(4 * w, 1)

    def forward(self, x):
        return self.fc(self.layers(self.stem(x)).mean(dim=(2, 3)))


class FourBranchHead(nn.Module):
    """The four branches; ``forward`` gives their logits (B, 4)."""

    def __init__(self, dim: int, n_views: int = 3):
        super().__init__()
        self.foundation = _mlp(dim * (2 + 2 * n_views), 256)
        self.cnn = NoiseCNN()
        self.l2 = nn.Sequential(nn.Linear(1, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 64),
                                nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 1))
        self.diff = _mlp(dim, 256)

    def forward(self, f_clean, f_views, f_adv, delta_unit, lpd, l2, diff):
        found_in = torch.cat([f_clean, f_adv, *f_views, *[f_clean - v for v in f_views]], dim=1)
        z = torch.cat([self.foundation(found_in), self.cnn(torch.cat([delta_unit, lpd], dim=1)),
                       self.l2(l2[:, None]), self.diff(diff)], dim=1)
        return z  # (B, 4) branch logits


def fused_logit(z: torch.Tensor) -> torch.Tensor:
    """The training-time fusion of the official code, a logit-weighted softmax Σ_k softmax(z)_k z_k;
    here for monitoring only (it is not in the loss)."""
    return (torch.softmax(z, dim=1) * z).sum(dim=1)


def branch_loss(z: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The detector loss of the four-branch ensemble: the **sum** over branches of each branch's
    mean binary cross-entropy. Returns (total, per-branch (4,))."""
    per = F.binary_cross_entropy_with_logits(z, y.float()[:, None].expand_as(z), reduction="none").mean(0)
    return per.sum(), per


def fuse(p: torch.Tensor, rule: str) -> torch.Tensor:
    """Fuse calibrated branch probabilities p (B, 4) by ``rule`` (one of :data:`FUSIONS`)."""
    if rule == "max":
        return p.max(dim=1).values
    if rule == "mean":
        return p.mean(dim=1)
    if rule == "logit-mean":
        return torch.sigmoid(torch.logit(p.clamp(1e-7, 1 - 1e-7)).mean(dim=1))
    raise UsageError(f"unknown fusion rule {rule!r}")


def _halves_in_order(pieces: list) -> torch.Tensor:
    """[reals of every piece; fakes of every piece] from pieces that are each [reals; fakes]."""
    if len(pieces) == 1:
        return pieces[0]
    k = len(pieces[0]) // 2
    return torch.cat([p[:k] for p in pieces] + [p[k:] for p in pieces])


def _gather_halves(t: torch.Tensor, dist: Dist) -> torch.Tensor:
    """The global batch [all reals; all fakes] from every rank's part ``t`` = [its reals; its fakes]
    (``t`` itself for one process). The rank's own part stays in the graph with its gradient scaled
    by the world size: every rank computes the same global loss, so DDP's average over the ranks of
    these gradients is the one-process gradient of the probe."""
    if not dist.active:
        return t
    parts = dist.all_gather(t)
    parts[dist.rank] = t.detach() + dist.world * (t - t.detach())
    k = len(t) // 2
    return torch.cat([p[:k] for p in parts] + [p[k:] for p in parts])


def augment(x: torch.Tensor, g: torch.Generator, p: float = 0.5) -> torch.Tensor:
    """The fine-tuned baseline's augmentation (CNNDetection's "Blur+JPEG (0.5)"): a random
    horizontal flip, then with probability ``p`` each a Gaussian blur σ ~ U[0, 3] and a JPEG round
    trip at quality ~ U[30, 100] (per image, from the generator ``g``)."""
    import numpy as np

    from icmlkit.lib.detect_synthetic.images import _pil, to_tensor, to_uint8

    n = len(x)
    flip, blur, jpeg = (torch.rand(n, generator=g) < q for q in (0.5, p, p))
    sigma = 3 * torch.rand(n, generator=g)
    quality = torch.randint(30, 101, (n,), generator=g)
    x = torch.where(flip[:, None, None, None], x.flip(-1), x)
    x = torch.stack([gaussian_blur(x[i:i + 1], float(sigma[i]))[0] if blur[i] and sigma[i] > 0.1 else x[i]
                     for i in range(n)])
    if bool(jpeg.any()):
        Image = _pil()
        pix = to_uint8(x)
        for i in torch.nonzero(jpeg).flatten().tolist():
            buf = io.BytesIO()
            Image.fromarray(pix[i]).save(buf, format="JPEG", quality=int(quality[i]))
            buf.seek(0)
            with Image.open(buf) as im:
                x[i] = to_tensor(np.array(im.convert("RGB"))[None])[0]
    return x


class Detector(nn.Module):
    """A detector: the frozen encoder (not saved) and the method's trainable parts.

    :meth:`fit` trains on (x, y) tensors (x float (N, 3, S, S) in [0, 1], y 1 = generated);
    :meth:`score` returns a dict with ``score`` (probability generated) and drift statistics.
    """

    def __init__(self, config: DetectorConfig, encoder: Encoder | None = None, device="cpu", seed: int = 0):
        super().__init__()
        config.check()
        self.config = config
        self.device_ = torch.device(device)
        self.encoder = encoder if encoder is not None else load_backbone(
            config.backbone, config.backbone_weights, config.input_size, device)
        self.encoder.to(self.device_)
        dim = self.encoder.dim
        if config.method == "ra-det":
            with seeded(seed, "init"):  # the initial weights depend on the seed only
                self.probe = ProbeUNet(dim, base=config.probe_base)
                self.head = FourBranchHead(dim)
            # per-branch Platt scaling p_k = sigmoid(a_k z_k + b_k) and the fusion rule (index in FUSIONS)
            self.register_buffer("calibration", torch.tensor([[1.0, 0.0]] * len(BRANCHES)))
            self.register_buffer("fusion_rule", torch.tensor(FUSIONS.index("max")))
        elif config.method == "finetune":
            with seeded(seed, "init"):
                self.tuned = copy.deepcopy(self.encoder)  # stays in eval mode: BN statistics frozen
                self.classifier = nn.Linear(dim, 1)
            for p in self.tuned.net.parameters():
                p.requires_grad_(True)
        elif config.method == "rigid":
            self.register_buffer("threshold", torch.zeros(()))
            self.register_buffer("scale", torch.ones(()))
        else:
            self.register_buffer("feat_mean", torch.zeros(dim))
            self.register_buffer("feat_std", torch.ones(dim))
            self.linear = nn.Linear(dim, 1)  # overwritten by fit: its random init never counts
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

    def _view_embeddings(self, views) -> list:
        """f of each multi-scale view, in one batched encoder call."""
        return list(self.encoder(torch.cat(views)).chunk(len(views)))

    def rigid_drift(self, x: torch.Tensor, seed: int = 0):
        """(1 − mean cosine, mean L2) under the fixed Gaussian probe, per image (no gradients);
        the noise patterns depend on ``seed`` only (the same for every image and batch).

        ``rigid_space="normalised"`` (RIGID's): λ·n is added to the resized, normalised tensor the
        encoder consumes (no clamping); ``"pixel"``: to x in [0, 1] at the image size, clamped."""
        c = self.config
        gen = generator(seed, "rigid-noise", device=self.device_)
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
    def _perturb(self, x, views, f_clean, eps, probe=None):
        """Steps 2-3 per image: δ = g(x, views, f(x)) with ‖δ‖∞ ≤ ε, and f(x + δ) (gradients flow
        through the frozen encoder to the probe). ``probe``: the probe module to call (its DDP
        wrapper under torchrun)."""
        delta = (probe or self.probe)(x, views, f_clean, eps)
        return delta, self.encoder(apply_perturbation(x, delta))

    def _head_logits(self, lpd, f_clean, f_views, delta, f_adv, eps, head=None):
        """Step 5: the drift features and the four branch logits (B, 4), with cos and L2; ``lpd`` is
        :func:`lpd_map` of the clean images."""
        cos, l2, diff = drift(f_clean, f_adv)
        eps_t = torch.as_tensor(eps, dtype=delta.dtype, device=delta.device).reshape(-1, 1, 1, 1)
        z = (head or self.head)(f_clean, f_views, f_adv, delta / eps_t, lpd * 4.0, l2, diff)
        return z, cos, l2

    def _radet_forward(self, x, eps):
        views = multiscale_views(x, self.config.sigma)
        f_clean = self.encoder(x)
        f_views = self._view_embeddings(views)
        delta, f_adv = self._perturb(x, views, f_clean, eps)
        return self._head_logits(lpd_map(x, self.config.lpd), f_clean, f_views, delta, f_adv, eps)

    def calibrated(self, z: torch.Tensor) -> torch.Tensor:
        """Per-branch calibrated probabilities sigmoid(a_k z_k + b_k) (B, 4)."""
        return torch.sigmoid(z * self.calibration[:, 0] + self.calibration[:, 1])

    @property
    def fusion(self) -> str:
        return FUSIONS[int(self.fusion_rule)]

    # ---------------------------------------------------------------- training
    def fit(self, x: torch.Tensor, y: torch.Tensor, seed: int = 0, checkpointer=None, dist: Dist | None = None,
            groups=None) -> dict:
        """Train on images x (N, 3, S, S) in [0, 1] and labels y (1 = generated). Returns a summary.

        ``groups``: the source (photograph) of each image, None = every image its own; ra-det holds
        out ``config.val_fraction`` of the sources for its calibration and fusion rule, so no
        source is in both parts. ra-det only: ``checkpointer`` (a :class:`~icmlkit.lib.core.checkpoint.Checkpointer`) saves
        the probe, the head, the optimiser and the batch stream every N steps, and resumes from its
        file to the same weights as an uninterrupted run (same config, seed and data, else a
        UsageError); ``dist`` (a :class:`~icmlkit.lib.core.runtime.Dist`) trains data-parallel
        under torchrun (see :meth:`_fit_radet`)."""
        y = y.long()
        n_real, n_fake = int((y == 0).sum()), int((y == 1).sum())
        if n_real == 0 or n_fake == 0:
            raise InputError(f"training needs real and generated images (got {n_real} real, {n_fake} generated)")
        t0 = time.perf_counter()
        m = self.config.method
        if m == "rigid":
            summary = self._fit_rigid(x, y, seed)
        elif m == "linear-probe":
            summary = self._fit_linear(x, y)
        elif m == "finetune":
            summary = self._fit_finetune(x, y, seed)
        else:
            summary = self._fit_radet(x, y, seed, checkpointer, dist or Dist(), groups)
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

    def _fit_finetune(self, x, y, seed):
        """The CNNDetection recipe on the same backbone: every encoder weight and a new linear head
        trained with BCE on class-balanced batches (AdamW), random flips and Blur+JPEG augmentation."""
        c = self.config
        g = generator(seed, "batches")
        aug = generator(seed, "augment")
        real_idx, fake_idx = torch.nonzero(y == 0).flatten(), torch.nonzero(y == 1).flatten()
        params = [p for p in self.tuned.parameters() if p.requires_grad] + list(self.classifier.parameters())
        opt = torch.optim.AdamW(params, lr=c.lr, weight_decay=c.weight_decay)
        half = max(1, c.batch_size // 2)
        hist = []
        for _ in progress(range(c.steps), total=c.steps, desc="train finetune"):
            idx = torch.cat([real_idx[torch.randint(len(real_idx), (half,), generator=g)],
                             fake_idx[torch.randint(len(fake_idx), (half,), generator=g)]])
            xb = augment(x[idx], aug).to(self.device_)
            logit = self.classifier(self.tuned(xb)).squeeze(1)
            loss = F.binary_cross_entropy_with_logits(logit, y[idx].float().to(self.device_))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            hist.append(loss.item())
            report(loss=hist[-1])
        return {"steps": c.steps, "final_bce": float(sum(hist[-20:]) / len(hist[-20:]))}

    def _clean_features(self, x):
        """What the frozen encoder and the fixed filters compute on clean images, once: f(x), the
        multi-scale views, their embeddings (one batched call) and the LPD maps."""
        c = self.config
        f, views, fv, lpd = [], [], [], []
        with torch.no_grad():
            for i in range(0, len(x), c.chunk):
                xb = x[i:i + c.chunk]
                vb = multiscale_views(xb, c.sigma)
                f.append(self.encoder(xb))
                views.append(torch.cat(vb, dim=1))
                fv.append(torch.stack(self._view_embeddings(vb)))
                lpd.append(lpd_map(xb, c.lpd))
        return torch.cat(f), torch.cat(views), torch.cat(fv, dim=1), torch.cat(lpd)

    def _split_validation(self, y, groups, seed):
        """(train indices, validation indices) by source; no validation when it would lack a class."""
        from icmlkit.lib.detect_synthetic.datasets import split_by_source

        n = len(y)
        all_idx = torch.arange(n)
        if self.config.val_fraction <= 0:
            return all_idx, all_idx[:0]
        groups = list(range(n)) if groups is None else list(groups)
        tr, va = split_by_source(groups, [1 - self.config.val_fraction, self.config.val_fraction], seed,
                                 "validation")
        tr, va = torch.as_tensor(tr, dtype=torch.long), torch.as_tensor(va, dtype=torch.long)
        classes = lambda i: set(y[i].tolist())  # noqa: E731
        if len(va) == 0 or classes(va) != {0, 1} or classes(tr) != {0, 1}:
            log.warning("ra-det: too few sources for a validation split; branches left uncalibrated, fusion max")
            return all_idx, all_idx[:0]
        return tr, va

    def _calibrate(self, x, y) -> dict:
        """Per-branch Platt scaling p_k = sigmoid(a_k z_k + b_k) on held-out images (a_k ≥ 0), then
        the fusion rule with the best validation AUROC (ties: max)."""
        import numpy as np
        from sklearn.linear_model import LogisticRegression
        from sklearn.metrics import roc_auc_score

        self.eval()
        with torch.no_grad():
            z = torch.cat([self._radet_forward(x[i:i + self.config.chunk].to(self.device_), self.config.eps)[0]
                           for i in range(0, len(x), self.config.chunk)]).cpu().double()
        yy = y.cpu().numpy()
        cal = []
        base = float(np.log(yy.mean() / (1 - yy.mean())))
        for k in range(len(BRANCHES)):
            lr = LogisticRegression(C=1e4, max_iter=1000).fit(z[:, k:k + 1].numpy(), yy)
            a, b = float(lr.coef_[0, 0]), float(lr.intercept_[0])
            # a branch that ranks the held-out images the wrong way round is not flipped (too few
            # images to trust that): it gets slope 0, the constant base rate
            cal.append([a, b] if a > 0 else [0.0, base])
        self.calibration.copy_(torch.tensor(cal))
        p = self.calibrated(z.float().to(self.device_)).cpu()
        aucs = {r: float(roc_auc_score(yy, fuse(p, r).numpy())) for r in FUSIONS}
        if self.config.fusion == "auto":
            best = max(FUSIONS, key=lambda r: (round(aucs[r], 9), r == "max"))
        else:
            best = self.config.fusion
        self.fusion_rule.fill_(FUSIONS.index(best))
        branch = {b: float(roc_auc_score(yy, z[:, k].numpy())) for k, b in enumerate(BRANCHES)}
        return {"fusion": best, "val_auroc_by_fusion": aucs, "val_auroc_by_branch": branch,
                "n_val": int(len(yy)), "calibration": cal}

    def _fit_radet(self, x, y, seed, checkpointer, dist: Dist, groups=None):
        """RA-Det training (steps 2-6): class-balanced batches, ε ~ U[4/255, 32/255] per batch,
        loss = Σ_branches BCE (:func:`branch_loss`) + L_emb, AdamW; the fused logit is logged only.
        Then the per-branch calibration and the fusion rule on the held-out sources
        (:meth:`_calibrate`).

        Data-parallel under torchrun: every rank draws the same global batch and ε from the shared
        ``batches`` stream, runs the probe and the encoder on its ``dist.split`` part of the reals
        and of the fakes, and gathers δ and f(x + δ) into the global batch, on which the head and
        the loss run as in one process (the head's BatchNorm needs the global batch statistics and
        L_emb the global class means; torch's SyncBatchNorm has no CPU version). The probe and the
        head are wrapped in DDP; the gathered copy of a rank's own part carries its gradient scaled
        by the world size, so DDP's average is the one-process gradient. The probe's gradients are
        tiny (~1e-8, AdamW's ε regime, where an update is ~1e4 times its gradient), so even the
        rounding of a different summation order grows to ~1e-5 in two steps: ``micro_batches``
        pieces in one process sum exactly as that many processes do (bit for bit)."""
        from icmlkit.lib.core.checkpoint import fingerprint, restore

        c = self.config
        dev = self.device_
        x = x.to(dev)
        y = y.to(dev)
        half = max(1, c.batch_size // 2)
        pieces = dist.world * c.micro_batches
        if half % pieces:
            raise UsageError(f"--batch-size {c.batch_size}: its halves ({half} real, {half} generated) must split "
                             f"evenly into {dist.world} process(es) x {c.micro_batches} micro-batch(es)")
        part = dist.split(half)
        step_ = half // pieces
        micro = [slice(part.start + k * step_, part.start + (k + 1) * step_) for k in range(c.micro_batches)]
        fp = fingerprint({"config": c.to_json(), "seed": seed}, x, y)
        state = checkpointer.load(fp) if checkpointer is not None else None  # a bad checkpoint fails fast
        tr, va = self._split_validation(y.cpu(), groups, seed)
        x_val, y_val = x[va.to(dev)], y[va.to(dev)]
        x, y = x[tr.to(dev)], y[tr.to(dev)]
        log.info("ra-det: caching the clean embeddings, views and LPD maps of %d images ...", len(x))
        t_cache = time.perf_counter()
        f_clean, views_all, f_views, lpd_all = self._clean_features(x)
        t_cache = time.perf_counter() - t_cache
        real_idx = torch.nonzero(y == 0).flatten()
        fake_idx = torch.nonzero(y == 1).flatten()
        g = generator(seed, "batches")
        params = list(self.probe.parameters()) + list(self.head.parameters())
        opt = torch.optim.AdamW(params, lr=c.lr, weight_decay=c.weight_decay)
        trainable = nn.ModuleDict({"probe": self.probe, "head": self.head})
        hist, start = [], 0
        if state is not None:
            start, extra = restore(state, model=trainable, optimizer=opt, rng={"batches": g})
            hist = [list(h) for h in extra["hist"]]
        probe, head = dist.wrap(self.probe, dev), dist.wrap(self.head, dev)
        self.probe.train()
        self.head.train()
        t_loop = time.perf_counter()
        for step in progress(range(start, c.steps), total=c.steps - start, desc="train ra-det"):
            # class-balanced global batch: half reals, half fakes (L_emb uses both class means)
            ri = real_idx[torch.randint(len(real_idx), (half,), generator=g)]
            fi = fake_idx[torch.randint(len(fake_idx), (half,), generator=g)]
            eps = float(c.eps_train[0] + (c.eps_train[1] - c.eps_train[0]) * torch.rand((), generator=g))
            idx = torch.cat([ri, fi])
            outs = []
            for sl in micro:  # this rank's part of the reals and of the fakes, piece by piece
                mine = torch.cat([ri[sl], fi[sl]])
                outs.append(self._perturb(x[mine], list(views_all[mine].chunk(3, dim=1)), f_clean[mine], eps, probe))
            delta, f_adv = (_gather_halves(_halves_in_order([o[j] for o in outs]), dist) for j in (0, 1))
            yb = y[idx]
            z, cos, _ = self._head_logits(lpd_all[idx], f_clean[idx], list(f_views[:, idx]), delta, f_adv, eps, head)
            total, _ = branch_loss(z, yb)
            emb = discrepancy_loss(cos, yb, c.margin)
            loss = c.lambda_bce * total + c.lambda_emb * emb
            with torch.no_grad():  # monitoring only
                bce = F.binary_cross_entropy_with_logits(fused_logit(z), yb.float())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            hist.append([bce.item(), total.item(), emb.item(), cos[yb == 0].mean().item(), cos[yb == 1].mean().item()])
            report(loss=hist[-1][0])  # the fused BCE in the progress line off a terminal
            if step % 50 == 0 or step == c.steps - 1:
                log.debug("step %d fused bce %.4f branch bce sum %.4f emb %.4f s_r %.4f s_f %.4f", step, *hist[-1])
            if checkpointer is not None and checkpointer.due(step + 1, c.steps):
                checkpointer.save(step + 1, fp, model=trainable, optimizer=opt, rng={"batches": g},
                                  extra={"hist": hist})
        t_loop = time.perf_counter() - t_loop
        self.probe.eval()
        self.head.eval()
        last = torch.tensor(hist[-min(20, len(hist)):]).mean(0).tolist() if hist else [float("nan")] * 5
        out = {"steps": c.steps, "final_bce": last[0], "final_branch_bce": last[1], "final_l_emb": last[2],
               "final_cos_real": last[3], "final_cos_fake": last[4], "n_train": int(len(y)),
               "steps_per_second": round((c.steps - start) / t_loop, 3) if t_loop > 0 and c.steps > start else None,
               "seconds_cache": round(t_cache, 3)}
        if len(y_val):
            out.update(self._calibrate(x_val, y_val))
        else:
            out["fusion"] = self.fusion
        return out

    # ---------------------------------------------------------------- scoring
    def score(self, x: torch.Tensor, seed: int = 0, show_progress: bool = True) -> dict:
        """Score images x (N, 3, S, S) in [0, 1]; batched in chunks of ``config.chunk``.

        Returns tensors: ``score`` (probability generated); ra-det: ``cos``, ``l2`` (drift under the
        learned probe at the fixed ε) and ``p_<branch>`` (calibrated; ``score`` is their fusion by
        the chosen rule); rigid: ``cos`` (mean over the draws) and ``l2``; linear-probe and
        finetune: no drift statistics.
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
                    z, cos, l2 = self._radet_forward(xb, c.eps)
                    p = self.calibrated(z)
                    part = {"score": fuse(p, self.fusion), "cos": cos, "l2": l2,
                            **{f"p_{b}": p[:, k] for k, b in enumerate(BRANCHES)}}
                elif m == "finetune":
                    part = {"score": torch.sigmoid(self.classifier(self.tuned(xb))).squeeze(1)}
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
                            "train_summary": json.dumps({k: v for k, v in self.train_summary.items()
                                                         if k not in TIMINGS}, sort_keys=True),  # same seed, same bytes
                            "state": self.trainable_state()})


def save_model(path, detector: Detector) -> None:
    """Write the model file (.pt: weights only, with its config) atomically."""
    write_bytes(path, detector.to_bytes())


def load_model(path, device="cpu", encoder: Encoder | None = None) -> Detector:
    """Read a model file written by :func:`save_model` (``torch.load(weights_only=True)``); an
    :class:`InputError` naming the file for anything else."""
    from icmlkit.lib.core.io import parse_json

    blob = read_torch(path, "detect-synthetic model file", FORMAT)
    where = str(path)
    config = DetectorConfig.from_json(blob.get("config"), where)
    state = blob.get("state")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InputError("model file without its weights (a 'state' of tensors expected)", where)
    det = Detector(config, encoder=encoder, device=device)
    try:
        missing, unexpected = det.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a tensor of the wrong shape
        raise InputError(f"model file does not fit method {config.method} ({str(exc).splitlines()[-1].strip()})",
                         where) from None
    missing = [k for k in missing if not k.startswith("encoder.")]
    if missing or unexpected:
        raise InputError(f"model file does not fit method {config.method} (missing {missing[:3]}, unexpected "
                         f"{unexpected[:3]})", where)
    summary = blob.get("train_summary", "{}")
    det.train_summary = parse_json(summary, where, dict, "training summary") if isinstance(summary, str) else {}
    det.eval()
    return det
