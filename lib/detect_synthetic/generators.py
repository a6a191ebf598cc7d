"""Three small image generators trained in-process on the real training crops (the "generated"
class of the offline benchmark): a DCGAN, a DDPM with a small UNet (DDIM sampling) and a VAE.

All work on 32 × 32 RGB crops in [0, 1] (internally [−1, 1]); sizes are chosen so that each
trains in one to two minutes on a 2-core CPU. Their samples are far from photo-realistic: they are
real generators with their own artefacts (GAN up-sampling, diffusion residual noise, VAE blur), not
stand-ins made by hand.
"""
from __future__ import annotations

from icmlkit.lib.core.errors import UsageError

import math
import time

import torch
import torch.nn.functional as F
from torch import nn

from icmlkit.lib.core.console import log, progress
from icmlkit.lib.core.runtime import generator, seeded
from icmlkit.lib.detect_synthetic.config import GENERATORS


def _batches(x, batch, steps, g):
    for _ in range(steps):
        yield x[torch.randint(len(x), (batch,), generator=g)]


def _flip(xb, g):
    """Random horizontal flips (data augmentation of the generators' training crops)."""
    m = torch.rand(len(xb), generator=g) < 0.5
    return torch.where(m[:, None, None, None], xb.flip(-1), xb)


# --------------------------------------------------------------------------- DCGAN


class DCGANGenerator(nn.Module):
    def __init__(self, z: int = 64, w: int = 32):
        super().__init__()
        self.z = z
        self.fc = nn.Linear(z, 2 * w * 4 * 4)
        self.net = nn.Sequential(
            nn.BatchNorm2d(2 * w), nn.ReLU(),
            nn.ConvTranspose2d(2 * w, w, 4, 2, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
            nn.ConvTranspose2d(w, w // 2, 4, 2, 1, bias=False), nn.BatchNorm2d(w // 2), nn.ReLU(),
            nn.ConvTranspose2d(w // 2, 3, 4, 2, 1), nn.Tanh())
        self.w = w

    def forward(self, z):
        return self.net(self.fc(z).view(len(z), 2 * self.w, 4, 4))


class DCGANDiscriminator(nn.Module):
    def __init__(self, w: int = 32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, w // 2, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(w // 2, w, 4, 2, 1, bias=False), nn.BatchNorm2d(w), nn.LeakyReLU(0.2),
            nn.Conv2d(w, 2 * w, 4, 2, 1, bias=False), nn.BatchNorm2d(2 * w), nn.LeakyReLU(0.2),
            nn.Flatten(), nn.Linear(2 * w * 16, 1))

    def forward(self, x):
        return self.net(x).squeeze(1)


def train_dcgan(x, steps: int = 1500, batch: int = 64, seed: int = 0):
    """Non-saturating GAN loss, Adam(2e-4, β1 = 0.5). Returns the generator (eval mode)."""
    with seeded(seed, "dcgan/init"):
        G, D = DCGANGenerator(), DCGANDiscriminator()
    g = generator(seed, "dcgan/train")
    oG = torch.optim.Adam(G.parameters(), 2e-4, betas=(0.5, 0.999))
    oD = torch.optim.Adam(D.parameters(), 2e-4, betas=(0.5, 0.999))
    data = x * 2 - 1
    for xb in progress(_batches(data, batch, steps, g), total=steps, desc="train dcgan"):
        xb = _flip(xb, g)
        z = torch.randn(batch, G.z, generator=g)
        fake = G(z)
        lossD = F.softplus(-D(xb)).mean() + F.softplus(D(fake.detach())).mean()
        oD.zero_grad(set_to_none=True)
        lossD.backward()
        oD.step()
        lossG = F.softplus(-D(fake)).mean()
        oG.zero_grad(set_to_none=True)
        lossG.backward()
        oG.step()
    return G.eval()


@torch.no_grad()
def sample_dcgan(G, n: int, seed: int = 0):
    g = generator(seed, "dcgan/sample")
    return ((G(torch.randn(n, G.z, generator=g)) + 1) / 2).clamp(0, 1)


# --------------------------------------------------------------------------- VAE


class VAE(nn.Module):
    def __init__(self, z: int = 64, w: int = 32):
        super().__init__()
        self.z = z
        self.enc = nn.Sequential(
            nn.Conv2d(3, w, 4, 2, 1), nn.ReLU(), nn.Conv2d(w, 2 * w, 4, 2, 1), nn.ReLU(),
            nn.Conv2d(2 * w, 4 * w, 4, 2, 1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * w * 16, 2 * z))
        self.fc = nn.Linear(z, 4 * w * 16)
        self.dec = nn.Sequential(
            nn.ReLU(), nn.ConvTranspose2d(4 * w, 2 * w, 4, 2, 1), nn.ReLU(),
            nn.ConvTranspose2d(2 * w, w, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(w, 3, 4, 2, 1))
        self.w = w

    def decode(self, z):
        return torch.sigmoid(self.dec(self.fc(z).view(len(z), 4 * self.w, 4, 4)))

    def forward(self, x, g):
        mu, logvar = self.enc(x).chunk(2, dim=1)
        z = mu + torch.randn(mu.shape, generator=g) * (0.5 * logvar).exp()
        return self.decode(z), mu, logvar


def train_vae(x, steps: int = 1500, batch: int = 64, seed: int = 0, beta: float = 1.0):
    """ELBO with a Bernoulli-free Gaussian likelihood (summed squared error), Adam 1e-3."""
    with seeded(seed, "vae/init"):
        model = VAE()
    g = generator(seed, "vae/train")
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    for xb in progress(_batches(x, batch, steps, g), total=steps, desc="train vae"):
        xb = _flip(xb, g)
        rec, mu, logvar = model(xb, g)
        recon = ((rec - xb) ** 2).sum(dim=(1, 2, 3)).mean() / 0.02
        kl = -0.5 * (1 + logvar - mu ** 2 - logvar.exp()).sum(dim=1).mean()
        loss = recon + beta * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return model.eval()


@torch.no_grad()
def sample_vae(model, n: int, seed: int = 0):
    g = generator(seed, "vae/sample")
    return model.decode(torch.randn(n, model.z, generator=g)).clamp(0, 1)


# --------------------------------------------------------------------------- DDPM


def _time_embedding(t, dim: int):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    a = t.float()[:, None] * freqs[None]
    return torch.cat([a.sin(), a.cos()], dim=1)


class _TRes(nn.Module):
    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.n1 = nn.GroupNorm(8, cin)
        self.c1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(tdim, cout)
        self.n2 = nn.GroupNorm(8, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x))) + self.t(temb)[:, :, None, None]
        h = self.c2(F.silu(self.n2(h)))
        return h + self.skip(x)


class TinyUNet(nn.Module):
    """ε-prediction UNet: levels 32/16/8 px with (b, 2b, 2b) channels, one residual block each way."""

    def __init__(self, b: int = 32):
        super().__init__()
        self.tdim = 4 * b
        self.temb = nn.Sequential(nn.Linear(b, self.tdim), nn.SiLU(), nn.Linear(self.tdim, self.tdim))
        self.b = b
        self.inp = nn.Conv2d(3, b, 3, padding=1)
        self.d1 = _TRes(b, b, self.tdim)
        self.d2 = _TRes(b, 2 * b, self.tdim)
        self.d3 = _TRes(2 * b, 2 * b, self.tdim)
        self.mid = _TRes(2 * b, 2 * b, self.tdim)
        self.u3 = _TRes(4 * b, 2 * b, self.tdim)
        self.u2 = _TRes(4 * b, b, self.tdim)
        self.u1 = _TRes(2 * b, b, self.tdim)
        self.out = nn.Sequential(nn.GroupNorm(8, b), nn.SiLU(), nn.Conv2d(b, 3, 3, padding=1))

    def forward(self, x, t):
        te = self.temb(_time_embedding(t, self.b))
        h1 = self.d1(self.inp(x), te)                       # 32
        h2 = self.d2(F.avg_pool2d(h1, 2), te)               # 16
        h3 = self.d3(F.avg_pool2d(h2, 2), te)               # 8
        m = self.mid(h3, te)
        u = self.u3(torch.cat([m, h3], 1), te)
        u = self.u2(torch.cat([F.interpolate(u, scale_factor=2.0), h2], 1), te)
        u = self.u1(torch.cat([F.interpolate(u, scale_factor=2.0), h1], 1), te)
        return self.out(u)


class DDPM(nn.Module):
    """Runs at ``size`` px (16 by default); samples are upsampled ×2 (bilinear) to 32 px, the
    sheet's "32 → 64 px" cascade at half scale (a 32-px UNet is too slow to train on this CPU)."""

    def __init__(self, b: int = 16, T: int = 1000, size: int = 16):
        super().__init__()
        self.net = TinyUNet(b)
        self.T = T
        self.size = size
        betas = torch.linspace(1e-4, 0.02, T)
        self.register_buffer("abar", torch.cumprod(1 - betas, 0))


def train_ddpm(x, steps: int = 800, batch: int = 32, seed: int = 0, base: int = 16, size: int = 16):
    """The DDPM ε-prediction loss (linear β schedule, T = 1000), Adam 2e-3 with cosine decay."""
    with seeded(seed, "ddpm/init"):
        model = DDPM(base, size=size)
    g = generator(seed, "ddpm/train")
    opt = torch.optim.Adam(model.net.parameters(), 2e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(1, steps))
    if x.shape[-1] != size:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    data = x * 2 - 1
    for xb in progress(_batches(data, batch, steps, g), total=steps, desc="train ddpm"):
        xb = _flip(xb, g)
        t = torch.randint(model.T, (batch,), generator=g)
        noise = torch.randn(xb.shape, generator=g)
        ab = model.abar[t][:, None, None, None]
        loss = F.mse_loss(model.net(ab.sqrt() * xb + (1 - ab).sqrt() * noise, t), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    return model.eval()


@torch.no_grad()
def sample_ddpm(model, n: int, seed: int = 0, sampling_steps: int = 50, batch: int = 250, out_size: int = 32):
    """Deterministic DDIM sampling (η = 0) with ``sampling_steps`` steps."""
    g = generator(seed, "ddpm/sample")
    ts = torch.linspace(model.T - 1, 0, sampling_steps).round().long()
    outs = []
    for i in range(0, n, batch):
        m = min(batch, n - i)
        x = torch.randn(m, 3, model.size, model.size, generator=g)
        for j, t in enumerate(ts):
            ab = model.abar[t]
            eps = model.net(x, t.repeat(m))
            x0 = ((x - (1 - ab).sqrt() * eps) / ab.sqrt()).clamp(-1, 1)
            ab_prev = model.abar[ts[j + 1]] if j + 1 < len(ts) else torch.tensor(1.0)
            x = ab_prev.sqrt() * x0 + (1 - ab_prev).sqrt() * eps
        outs.append(((x + 1) / 2).clamp(0, 1))
    out = torch.cat(outs)
    if out.shape[-1] != out_size:
        out = F.interpolate(out, size=(out_size, out_size), mode="bilinear", align_corners=False).clamp(0, 1)
    return out


# --------------------------------------------------------------------------- one entry point


def train_and_sample(name: str, x, n: int, steps: int, seed: int = 0, sampling_steps: int = 50):
    """Train generator ``name`` on crops x (N, 3, 32, 32) in [0, 1] and draw ``n`` samples; every
    random draw comes from the named streams ``<name>/init``, ``<name>/train`` and ``<name>/sample``
    of ``seed``. Returns (samples, seconds_train, seconds_sample)."""
    t0 = time.perf_counter()
    log.info("training %s for %d steps on %d crops ...", name, steps, len(x))
    if name == "dcgan":
        model = train_dcgan(x, steps, seed=seed)
        t1 = time.perf_counter()
        out = sample_dcgan(model, n, seed)
    elif name == "vae":
        model = train_vae(x, steps, seed=seed)
        t1 = time.perf_counter()
        out = sample_vae(model, n, seed)
    elif name == "ddpm":
        model = train_ddpm(x, steps, seed=seed)
        t1 = time.perf_counter()
        out = sample_ddpm(model, n, seed, sampling_steps)
    else:
        raise UsageError(f"unknown generator {name!r}; expected one of {GENERATORS}")
    return out, t1 - t0, time.perf_counter() - t1
