"""TAEF2: the tiny autoencoder for FLUX.2 latents (madebyollin/taesd, MIT), written from the
architecture description in ``../shared/data/taef2/README.md``; only the weights come from there.

A real photograph encoded and decoded comes back as a *generated* image with the same content:
the content-aligned class of the benchmark's tier T1 (real vs its reconstruction, where only the
decoder's traces tell them apart).

- conv = 3x3 convolution, padding 1. :class:`Block`: conv, ReLU, conv, ReLU, conv; plus the block's
  input; ReLU. Blocks of the encoder's last stage and the decoder's first stage first add a "pool"
  branch to their input (1x1 conv 64->256, GroupNorm(4), ReLU, 1x1 conv 256->64).
- Encoder (pixels in [0, 1]): conv 3->64, Block, 3 x [stride-2 conv, Block, Block, Block], conv 64->32.
- Decoder: 3·tanh(z/3), conv 32->64, ReLU, 3 x [Block, Block, Block, 2x nearest upsample, conv],
  Block, conv 64->3, clamp to [0, 1].
- Optional 8-bit latent quantisation: q = round((z/6 + 0.5)·255)/255, z = (q − 0.5)·6.

The state dicts' keys are the ``nn.Sequential`` indices; :func:`load_taef2` loads both with
``strict=True`` (``torch.load(weights_only=True)``).
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from icmlkit.lib.core.errors import EnvironmentProblem, InputError
from icmlkit.lib.core.io import load_torch

CHANNELS, LATENT = 64, 32


def _conv(cin: int, cout: int, bias: bool = True, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=bias)


class Block(nn.Module):
    """Residual block of TAESD; ``pool``: the FLUX.2 variant's 1x1 branch added to the input first."""

    def __init__(self, n: int = CHANNELS, pool: bool = False):
        super().__init__()
        self.conv = nn.Sequential(_conv(n, n), nn.ReLU(), _conv(n, n), nn.ReLU(), _conv(n, n))
        self.pool = nn.Sequential(nn.Conv2d(n, 4 * n, 1, bias=False), nn.GroupNorm(4, 4 * n), nn.ReLU(),
                                  nn.Conv2d(4 * n, n, 1, bias=False)) if pool else None

    def forward(self, x):
        if self.pool is not None:
            x = x + self.pool(x)
        return torch.relu(self.conv(x) + x)


class Clamp(nn.Module):
    """The decoder's soft clamp of the latent, 3·tanh(z/3)."""

    def forward(self, z):
        return torch.tanh(z / 3) * 3


def encoder() -> nn.Sequential:
    n = CHANNELS
    layers = [_conv(3, n), Block(n)]
    for stage in range(3):
        layers += [_conv(n, n, bias=False, stride=2), *(Block(n, pool=stage == 2) for _ in range(3))]
    return nn.Sequential(*layers, _conv(n, LATENT))


def decoder() -> nn.Sequential:
    n = CHANNELS
    layers = [Clamp(), _conv(LATENT, n), nn.ReLU()]
    for stage in range(3):
        layers += [*(Block(n, pool=stage == 0) for _ in range(3)), nn.Upsample(scale_factor=2),
                   _conv(n, n, bias=False)]
    return nn.Sequential(*layers, Block(n), _conv(n, 3))


def quantise(z: torch.Tensor) -> torch.Tensor:
    """The source's 8-bit latent round trip."""
    q = (z / 6 + 0.5).clamp(0, 1).mul(255).round().div(255)
    return (q - 0.5) * 6


class TAEF2(nn.Module):
    """Encoder + decoder; :meth:`reconstruct` maps pixels in [0, 1] (B, 3, H, W), H and W
    multiples of 8, to the decoded image (same shape, in [0, 1])."""

    def __init__(self):
        super().__init__()
        self.encoder = encoder()
        self.decoder = decoder()
        self.eval()
        for p in self.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def reconstruct(self, x: torch.Tensor, quantised: bool = False, chunk: int = 8) -> torch.Tensor:
        if x.shape[-1] % 8 or x.shape[-2] % 8:
            raise InputError(f"TAEF2 needs sides that are multiples of 8, got {tuple(x.shape[-2:])}")
        out = []
        for i in range(0, len(x), chunk):
            z = self.encoder(x[i:i + chunk])
            out.append(self.decoder(quantise(z) if quantised else z).clamp(0, 1))
        return torch.cat(out) if out else x.clone()


def default_dir() -> Path:
    from icmlkit.lib.core.io import shared_data_dir

    d = shared_data_dir("taef2")
    if d is None:
        raise EnvironmentProblem("the TAEF2 weights are not there: put ../shared/data/taef2 "
                                 "(taef2_encoder.pth, taef2_decoder.pth) beside the checkout or set ICMLKIT_SHARED_DATA")
    return d


def load_taef2(folder=None) -> TAEF2:
    """TAEF2 with ``folder/taef2_{encoder,decoder}.pth`` loaded strictly (an :class:`InputError`
    naming the file when a state dict does not fit)."""
    folder = Path(folder) if folder is not None else default_dir()
    model = TAEF2()
    for part in ("encoder", "decoder"):
        path = folder / f"taef2_{part}.pth"
        if not path.is_file():
            raise InputError("no such weights file", str(path))
        state = load_torch(path, f"TAEF2 {part} weights file")
        try:
            getattr(model, part).load_state_dict(state, strict=True)
        except Exception as exc:  # noqa: BLE001 - a key/shape mismatch: a data error
            raise InputError(f"not the TAEF2 {part} ({type(exc).__name__}: {str(exc).splitlines()[0]})",
                             str(path)) from None
    return model


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """Peak signal-to-noise ratio in dB of two images in [0, 1] (float64)."""
    mse = float(((a.double() - b.double()) ** 2).mean())
    return float("inf") if mse == 0 else 10 * torch.log10(torch.tensor(1.0 / mse)).item()
