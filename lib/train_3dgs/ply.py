"""The standard 3DGS ``.ply`` (binary little-endian), as read by the common splat viewers.

Vertex properties, all float32, in this order: x y z nx ny nz f_dc_0..2 f_rest_0..(3(K-1)-1)
opacity scale_0..2 rot_0..3. ``f_rest`` is channel-major (all coefficients of R, then G, then B),
opacity is the logit, scales are logs, rot is the quaternion (w, x, y, z), as in the reference code.
"""
from __future__ import annotations

import math
import os

import numpy as np
import torch

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.io import read_bytes, write_bytes
from icmlkit.lib.train_3dgs.model import Gaussians


def _fields(n_rest: int) -> list[str]:
    return (["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
            + [f"f_rest_{i}" for i in range(n_rest)] + ["opacity", "scale_0", "scale_1", "scale_2",
                                                          "rot_0", "rot_1", "rot_2", "rot_3"])


def ply_bytes(g: Gaussians) -> bytes:
    """The .ply file of ``g`` as bytes (float32; deterministic)."""
    n = g.n
    to = lambda t: t.detach().to("cpu", torch.float64).numpy().reshape(n, -1)  # noqa: E731
    rest = g.shN.detach().to("cpu", torch.float64).permute(0, 2, 1).reshape(n, -1).numpy()  # channel-major
    cols = [to(g.means), np.zeros((n, 3)), to(g.sh0), rest, to(g.opacity_logits), to(g.log_scales), to(g.quats)]
    data = np.concatenate(cols, 1).astype("<f4")
    names = _fields(rest.shape[1])
    header = "ply\nformat binary_little_endian 1.0\n" + f"element vertex {n}\n" + "".join(
        f"property float {p}\n" for p in names) + "end_header\n"
    return header.encode("ascii") + data.tobytes()


def write_ply(path, g: Gaussians) -> None:
    write_bytes(path, ply_bytes(g))


def read_ply(path, dtype=torch.float32) -> Gaussians:
    """Read a 3DGS .ply (binary little-endian, float properties) into :class:`Gaussians`.

    The SH degree follows from the number of ``f_rest_*`` properties (0, 9, 24 or 45).
    """
    name = os.fspath(path)
    raw = read_bytes(path)
    end = raw.find(b"end_header\n")
    if not raw.startswith(b"ply") or end < 0:
        raise InputError("not a .ply file (no 'ply' magic or 'end_header')", name)
    header = raw[:end].decode("ascii", "replace").splitlines()
    body = raw[end + len(b"end_header\n"):]
    if "format binary_little_endian 1.0" not in header:
        raise InputError("only binary_little_endian .ply files are supported", name)
    n, props, in_vertex, other_elements = None, [], False, False
    for ln, line in enumerate(header, 1):
        parts = line.split()
        if parts[:2] == ["element", "vertex"]:
            n, in_vertex = int(parts[2]), True
        elif parts and parts[0] == "element":
            in_vertex = False
            other_elements = True
        elif parts and parts[0] == "property" and in_vertex:
            if parts[1] not in ("float", "float32"):
                raise InputError(f"property {parts[-1]} has type {parts[1]}; expected float", name, ln)
            props.append(parts[-1])
    if n is None:
        raise InputError("no 'element vertex' in the header", name)
    need = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2",
            "rot_0", "rot_1", "rot_2", "rot_3"]
    missing = [p for p in need if p not in props]
    if missing:
        raise InputError(f"missing 3DGS properties {missing}", name)
    if len(body) < n * 4 * len(props) or (len(body) != n * 4 * len(props) and not other_elements):
        raise InputError(f"body has {len(body)} bytes; expected {n * 4 * len(props)} for {n} vertices", name)
    arr = np.frombuffer(body[: n * 4 * len(props)], dtype="<f4").reshape(n, len(props)).astype(np.float64)
    col = {p: i for i, p in enumerate(props)}
    take = lambda keys: torch.from_numpy(arr[:, [col[k] for k in keys]].copy()).to(dtype)  # noqa: E731
    rest_keys = sorted((p for p in props if p.startswith("f_rest_")), key=lambda p: int(p[7:]))
    n_rest = len(rest_keys)
    if n_rest % 3:
        raise InputError(f"{n_rest} f_rest properties is not a multiple of 3", name)
    k = n_rest // 3 + 1
    degree = int(round(math.sqrt(k))) - 1
    if (degree + 1) ** 2 != k or degree > 3:
        raise InputError(f"{n_rest} f_rest properties match no SH degree 0..3", name)
    shN = take(rest_keys).reshape(n, 3, k - 1).permute(0, 2, 1).contiguous() if n_rest else torch.zeros(n, 0, 3, dtype=dtype)
    g = Gaussians(means=take(["x", "y", "z"]), log_scales=take(["scale_0", "scale_1", "scale_2"]),
                  quats=take(["rot_0", "rot_1", "rot_2", "rot_3"]), opacity_logits=take(["opacity"])[:, 0],
                  sh0=take(["f_dc_0", "f_dc_1", "f_dc_2"])[:, None, :], shN=shN, sh_degree=degree)
    if not torch.isfinite(g.flat()).all():
        raise InputError("non-finite values in the vertex data", name)
    if (g.quats.norm(dim=-1) == 0).any():
        raise InputError("a quaternion (rot_0..3) is zero", name)
    return g

