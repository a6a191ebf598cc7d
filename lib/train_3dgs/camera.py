"""Pinhole cameras (OpenCV convention: x right, y down, z forward), batched as tensors.

A camera maps a world point X to camera coordinates ``R @ X + t`` and to pixels
``(fx * x / z + cx, fy * y / z + cy)``; pixel (row i, column j) has its centre at (j + 0.5, i + 0.5).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass
class Cameras:
    """V cameras of one image size. R [V,3,3] and t [V,3] are world-to-camera."""

    R: torch.Tensor
    t: torch.Tensor
    fx: torch.Tensor
    fy: torch.Tensor
    cx: torch.Tensor
    cy: torch.Tensor
    width: int
    height: int
    names: list = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.R.shape[0])

    @property
    def centers(self) -> torch.Tensor:
        """Camera centres in world coordinates, -R^T t [V, 3]."""
        return -(self.R.transpose(-1, -2) @ self.t[..., None])[..., 0]

    def __getitem__(self, idx) -> "Cameras":
        if isinstance(idx, int):
            idx = [idx]
        idx_t = torch.as_tensor(idx, dtype=torch.long)
        names = [self.names[i] for i in idx_t.tolist()] if self.names else []
        return Cameras(self.R[idx_t], self.t[idx_t], self.fx[idx_t], self.fy[idx_t], self.cx[idx_t],
                       self.cy[idx_t], self.width, self.height, names)

    def to(self, device=None, dtype=None) -> "Cameras":
        f = lambda x: x.to(device=device, dtype=dtype)  # noqa: E731
        return Cameras(f(self.R), f(self.t), f(self.fx), f(self.fy), f(self.cx), f(self.cy), self.width,
                       self.height, list(self.names))


def look_at(eye: torch.Tensor, target: torch.Tensor, up=(0.0, 0.0, 1.0)) -> tuple[torch.Tensor, torch.Tensor]:
    """World-to-camera (R, t) of cameras at ``eye`` [V,3] looking at ``target`` (OpenCV axes)."""
    up_t = torch.as_tensor(up, dtype=eye.dtype).expand_as(eye)
    fwd = target - eye
    fwd = fwd / fwd.norm(dim=-1, keepdim=True)
    right = torch.cross(fwd, up_t, dim=-1)
    right = right / right.norm(dim=-1, keepdim=True)
    down = torch.cross(fwd, right, dim=-1)
    R = torch.stack([right, down, fwd], -2)  # rows: camera axes in world coordinates
    t = -(R @ eye[..., None])[..., 0]
    return R, t


def sphere_cameras(n: int, radius: float, width: int, height: int, fov_x_deg: float, generator: torch.Generator,
                   dtype=torch.float32, elevation=(-60.0, 75.0)) -> Cameras:
    """n cameras at distance ``radius`` from the origin, looking at it; directions on a Fibonacci
    sphere band (elevation range in degrees), rotated by a random azimuth."""
    i = torch.arange(n, dtype=torch.float64) + 0.5
    lo, hi = (math.sin(math.radians(e)) for e in elevation)
    z = lo + (hi - lo) * i / n
    phi = i * math.pi * (3.0 - math.sqrt(5.0)) + float(torch.rand(1, generator=generator, dtype=torch.float64)) * 2 * math.pi
    r = torch.sqrt(1 - z * z)
    eye = torch.stack([r * torch.cos(phi), r * torch.sin(phi), z], -1) * radius
    R, t = look_at(eye, torch.zeros_like(eye))
    f = 0.5 * width / math.tan(0.5 * math.radians(fov_x_deg))
    ones = torch.ones(n, dtype=torch.float64)
    cams = Cameras(R, t, f * ones, f * ones, 0.5 * width * ones, 0.5 * height * ones, width, height,
                   [f"r_{k}" for k in range(n)])
    return cams.to(dtype=dtype)


def blender_to_opencv(c2w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """NeRF-synthetic ``transform_matrix`` (camera-to-world, OpenGL/Blender axes) -> (R, t)."""
    c2w = c2w.clone()
    c2w[..., :3, 1:3] *= -1
    w2c = torch.linalg.inv(c2w)
    return w2c[..., :3, :3], w2c[..., :3, 3]


def opencv_to_blender(R: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """(R, t) world-to-camera -> the 4x4 ``transform_matrix`` of the NeRF-synthetic layout."""
    w2c = torch.zeros(*R.shape[:-2], 4, 4, dtype=R.dtype)
    w2c[..., :3, :3] = R
    w2c[..., :3, 3] = t
    w2c[..., 3, 3] = 1
    c2w = torch.linalg.inv(w2c)
    c2w[..., :3, 1:3] *= -1
    return c2w
