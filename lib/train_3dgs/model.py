"""The Gaussian scene: raw (optimised) parameters, their activations, and initialisations.

Raw parameters, as in the reference 3DGS and its .ply files:
- ``means`` [N, 3] world positions;
- ``log_scales`` [N, 3] (activated: ``exp``);
- ``quats`` [N, 4] unnormalised quaternions (w, x, y, z) (activated: ``q / |q|`` -> rotation);
- ``opacity_logits`` [N] (activated: ``sigmoid``);
- ``sh0`` [N, 1, 3] DC colour and ``shN`` [N, K-1, 3] higher SH (K = (degree+1)^2).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from icmlkit.lib.train_3dgs.sh import n_coeffs, rgb_to_sh0

GROUPS = ("means", "log_scales", "quats", "opacity_logits", "sh0", "shN")


def quat_to_rotmat(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrices [..., 3, 3] of (normalised) quaternions q [..., 4] = (w, x, y, z)."""
    q = q / q.norm(dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    return torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ], -1).reshape(*q.shape[:-1], 3, 3)


def covariance(log_scales: torch.Tensor, quats: torch.Tensor) -> torch.Tensor:
    """Sigma = R S^2 R^T [N, 3, 3] from log-scales and quaternions."""
    M = quat_to_rotmat(quats) * torch.exp(log_scales)[..., None, :]
    return M @ M.transpose(-1, -2)


@dataclass
class Gaussians:
    """A set of N 3D Gaussians; the tensors are the raw parameters (see the module docstring)."""

    means: torch.Tensor
    log_scales: torch.Tensor
    quats: torch.Tensor
    opacity_logits: torch.Tensor
    sh0: torch.Tensor
    shN: torch.Tensor
    sh_degree: int = field(default=0)

    @property
    def n(self) -> int:
        return int(self.means.shape[0])

    def tensors(self) -> dict[str, torch.Tensor]:
        return {g: getattr(self, g) for g in GROUPS}

    def replace(self, **kw) -> "Gaussians":
        d = {**self.tensors(), "sh_degree": self.sh_degree, **kw}
        return Gaussians(**d)

    def with_sh_degree(self, degree: int) -> "Gaussians":
        """The same Gaussians with room for SH up to ``degree`` (new coefficients zero; never fewer)."""
        missing = n_coeffs(degree) - 1 - self.shN.shape[1]
        if missing <= 0:
            return self
        extra = torch.zeros(self.n, missing, 3, dtype=self.shN.dtype, device=self.shN.device)
        return self.replace(shN=torch.cat([self.shN, extra], 1), sh_degree=degree)

    def detach(self) -> "Gaussians":
        return self.replace(**{g: t.detach().clone() for g, t in self.tensors().items()})

    def to(self, device=None, dtype=None) -> "Gaussians":
        return self.replace(**{g: t.to(device=device, dtype=dtype) for g, t in self.tensors().items()})

    def requires_grad_(self, flag: bool = True) -> "Gaussians":
        for t in self.tensors().values():
            t.requires_grad_(flag)
        return self

    @property
    def sh(self) -> torch.Tensor:
        return torch.cat([self.sh0, self.shN], 1)

    @property
    def opacities(self) -> torch.Tensor:
        return torch.sigmoid(self.opacity_logits)

    @property
    def scales(self) -> torch.Tensor:
        return torch.exp(self.log_scales)

    def flat(self) -> torch.Tensor:
        return torch.cat([t.reshape(-1) for t in self.tensors().values()])

    def unflatten(self, vec: torch.Tensor) -> "Gaussians":
        out, i = {}, 0
        for g, t in self.tensors().items():
            out[g] = vec[i:i + t.numel()].reshape(t.shape)
            i += t.numel()
        return self.replace(**out)


def knn_log_scales(means: torch.Tensor, k: int = 3, chunk: int = 2048) -> torch.Tensor:
    """3DGS's default scale init: log of sqrt(mean squared distance to the k nearest neighbours),
    the same on the three axes (vectorised in chunks of rows)."""
    n = means.shape[0]
    out = []
    for i in range(0, n, chunk):
        d2 = torch.cdist(means[i:i + chunk], means).square()
        d2[torch.arange(d2.shape[0]), torch.arange(i, i + d2.shape[0])] = float("inf")
        kk = min(k, max(n - 1, 1))
        near = d2.topk(kk, dim=1, largest=False).values if n > 1 else torch.ones(d2.shape[0], 1)
        out.append(near.mean(1).clamp_min(1e-7))
    mean_d2 = torch.cat(out)
    return (0.5 * torch.log(mean_d2))[:, None].repeat(1, 3)


def init_gaussians(means: torch.Tensor, colors: torch.Tensor | None, sh_degree: int,
                   opacity: float = 0.1) -> Gaussians:
    """The reference 3DGS initialisation from points: kNN scales, identity rotation, ``opacity`` (0.1),
    DC colour from the point colours (grey when None), higher SH zero."""
    n = means.shape[0]
    dtype, dev = means.dtype, means.device
    if colors is None:
        colors = torch.full((n, 3), 0.5, dtype=dtype, device=dev)
    quats = torch.zeros(n, 4, dtype=dtype, device=dev)
    quats[:, 0] = 1.0
    logit = torch.full((n,), float(torch.logit(torch.tensor(opacity, dtype=torch.float64))), dtype=dtype, device=dev)
    return Gaussians(
        means=means.clone(), log_scales=knn_log_scales(means), quats=quats, opacity_logits=logit,
        sh0=rgb_to_sh0(colors)[:, None, :].clone(),
        shN=torch.zeros(n, n_coeffs(sh_degree) - 1, 3, dtype=dtype, device=dev), sh_degree=sh_degree)


def random_box_init(n: int, center, half_width: float, sh_degree: int, generator: torch.Generator,
                    dtype=torch.float32, opacity: float = 0.1) -> Gaussians:
    """N points uniform in the cube ``center +- half_width`` with random colours (no SfM points,
    as in the paper's rebuttal Exp 3), then :func:`init_gaussians`."""
    c = torch.as_tensor(center, dtype=dtype)
    means = c + (torch.rand(n, 3, generator=generator, dtype=dtype) * 2 - 1) * half_width
    colors = torch.rand(n, 3, generator=generator, dtype=dtype)
    return init_gaussians(means, colors, sh_degree, opacity=opacity)
