"""Real spherical harmonics up to degree 3, in the convention of the reference 3DGS code.

The colour of a Gaussian seen along the unit direction d (from the camera centre to the mean) is
``clamp(sum_k c_k Y_k(d) + 0.5, min=0)``; ``c_0`` is the DC term (``f_dc`` in a .ply) and the rest
are ``f_rest``. The basis constants are the standard real SH normalisations (signs as in 3DGS).
"""
from __future__ import annotations

import torch

from icmlkit.lib.core.errors import UsageError

C0 = 0.28209479177387814
C1 = 0.4886025119029199
C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396)
C3 = (-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154, -0.4570457994644658,
      1.445305721320277, -0.5900435899266435)


def n_coeffs(degree: int) -> int:
    """Number of SH coefficients per channel for ``degree`` (1, 4, 9, 16)."""
    return (int(degree) + 1) ** 2


def sh_basis(dirs: torch.Tensor, degree: int) -> torch.Tensor:
    """The SH basis at unit directions ``dirs`` [..., 3] -> [..., (degree+1)^2] (vectorised)."""
    if not 0 <= degree <= 3:
        raise UsageError(f"SH degree must be 0..3, not {degree}")
    x, y, z = dirs.unbind(-1)
    out = [torch.full_like(x, C0)]
    if degree >= 1:
        out += [-C1 * y, C1 * z, -C1 * x]
    if degree >= 2:
        xx, yy, zz, xy, yz, xz = x * x, y * y, z * z, x * y, y * z, x * z
        out += [C2[0] * xy, C2[1] * yz, C2[2] * (2 * zz - xx - yy), C2[3] * xz, C2[4] * (xx - yy)]
    if degree >= 3:
        out += [C3[0] * y * (3 * xx - yy), C3[1] * xy * z, C3[2] * y * (4 * zz - xx - yy),
                C3[3] * z * (2 * zz - 3 * xx - 3 * yy), C3[4] * x * (4 * zz - xx - yy),
                C3[5] * z * (xx - yy), C3[6] * x * (xx - 3 * yy)]
    return torch.stack(out, -1)


def sh_to_rgb(coeffs: torch.Tensor, dirs: torch.Tensor, degree: int) -> torch.Tensor:
    """Colours from SH coefficients.

    coeffs: [N, K, 3] (K >= (degree+1)^2; only the first (degree+1)^2 are used);
    dirs: [..., N, 3] unit view directions. Returns [..., N, 3], clamped at 0 (as 3DGS).
    """
    k = n_coeffs(degree)
    basis = sh_basis(dirs, degree)  # [..., N, k]
    rgb = torch.einsum("...nk,nkc->...nc", basis, coeffs[:, :k])
    return (rgb + 0.5).clamp_min(0.0)


def rgb_to_sh0(rgb: torch.Tensor) -> torch.Tensor:
    """The DC coefficient that gives colour ``rgb`` (inverse of ``C0*f + 0.5``)."""
    return (rgb - 0.5) / C0
