"""Scenes: posed images read from the NeRF-synthetic layout or a COLMAP text model, and the
synthetic scene of known Gaussians written in the NeRF-synthetic layout.

- NeRF-synthetic: ``transforms_train.json`` / ``transforms_test.json`` (``camera_angle_x`` and
  ``frames[i].file_path`` + ``transform_matrix``, camera-to-world in Blender axes), RGBA PNGs
  composited on the background (white by default, as usual for this data set).
- COLMAP text: ``cameras.txt``, ``images.txt``, ``points3D.txt`` in the folder, ``sparse/0/`` or
  ``sparse/``; images in ``images/``; every 8th image (sorted by name) is a test view, as in 3DGS.
  Pinhole models only (PINHOLE, SIMPLE_PINHOLE; the radial models are read with their distortion
  ignored and a warning).
"""
from __future__ import annotations

import io
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from icmlkit.lib.core.console import log
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.io import load_json, open_text, write_bytes, write_json
from icmlkit.lib.core.runtime import generator
from icmlkit.lib.train_3dgs.camera import Cameras, blender_to_opencv, opencv_to_blender, sphere_cameras
from icmlkit.lib.train_3dgs.config import SyntheticSceneConfig
from icmlkit.lib.train_3dgs.model import Gaussians, knn_log_scales
from icmlkit.lib.train_3dgs.ply import write_ply
from icmlkit.lib.train_3dgs.rasterize import render
from icmlkit.lib.train_3dgs.sh import n_coeffs, rgb_to_sh0


@dataclass
class Scene:
    """Train and test views (images [V,H,W,3] in [0,1], composited on ``background``)."""

    path: str
    kind: str
    train_cams: Cameras
    train_images: torch.Tensor
    test_cams: Cameras
    test_images: torch.Tensor
    background: tuple
    points: torch.Tensor | None = None       # SfM points [M,3] (COLMAP) or None
    point_colors: torch.Tensor | None = None  # [M,3] in [0,1]

    @property
    def center_and_radius(self) -> tuple[torch.Tensor, float]:
        """3DGS's scene normalisation: centre of the camera centres and 1.1 x the largest distance."""
        c = torch.cat([self.train_cams.centers, self.test_cams.centers]) if len(self.test_cams) else self.train_cams.centers
        mid = c.mean(0)
        return mid, 1.1 * float((c - mid).norm(dim=1).max())

    def look_at_box(self) -> tuple[torch.Tensor, float]:
        """Centre (the point closest to all optical axes, least squares) and a half-width of 0.4 x the
        mean camera distance to it: the box for a uniform random initialisation."""
        cams = self.train_cams
        C = cams.centers.double()
        d = cams.R[:, 2, :].double()  # viewing directions (3rd row of world-to-camera R)
        A = torch.eye(3, dtype=torch.float64)[None] - d[:, :, None] * d[:, None, :]
        p = torch.linalg.lstsq(A.sum(0), (A @ C[:, :, None]).sum(0)).solution[:, 0]
        return p.to(cams.R.dtype), 0.4 * float((C - p).norm(dim=1).mean())


def read_image(path: Path, background, where: str) -> tuple[np.ndarray, int, int]:
    """An image as float RGB in [0,1], RGBA composited on ``background``."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.load()
            if im.mode not in ("RGB", "RGBA"):
                im = im.convert("RGBA" if "A" in im.mode or im.mode == "P" else "RGB")
            arr = np.asarray(im, dtype=np.float64) / 255.0
    except FileNotFoundError:
        raise InputError(f"image {path} does not exist", where) from None
    except (UnidentifiedImageError, OSError) as exc:
        raise InputError(f"image {path} cannot be read ({exc})", where) from None
    if arr.shape[-1] == 4:
        a = arr[..., 3:4]
        arr = arr[..., :3] * a + (1 - a) * np.asarray(background, dtype=np.float64)
    return arr, arr.shape[0], arr.shape[1]


def _check_pose(m: np.ndarray, where: str) -> None:
    if m.shape != (4, 4) and m.shape != (3, 4):
        raise InputError(f"transform_matrix has shape {m.shape}; expected 4x4", where)
    if not np.isfinite(m).all():
        raise InputError("transform_matrix has non-finite entries", where)
    det = np.linalg.det(m[:3, :3])
    if abs(det) < 1e-6 or not np.isfinite(det):
        raise InputError(f"transform_matrix is not invertible (det of the 3x3 block = {det:.3g})", where)


def _downscale(arr: np.ndarray, f: int) -> np.ndarray:
    if f == 1:
        return arr
    h, w = arr.shape[0] // f * f, arr.shape[1] // f * f
    return arr[:h, :w].reshape(h // f, f, w // f, f, -1).mean((1, 3))


def read_nerf_split(folder: Path, split: str, background, downscale: int = 1, dtype=torch.float32):
    """One split of the NeRF-synthetic layout -> (Cameras, images [V,H,W,3])."""
    jpath = folder / f"transforms_{split}.json"
    meta, frames, angle = read_transforms(jpath)
    mats, imgs, names = [], [], []
    size = None
    for i, fr in enumerate(frames):
        where = f"{jpath}, frames[{i}]"
        if "file_path" not in fr or "transform_matrix" not in fr or not isinstance(fr["file_path"], str):
            raise InputError("a frame needs 'file_path' (a string) and 'transform_matrix'", where)
        try:
            m = np.asarray(fr["transform_matrix"], dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError("transform_matrix is not a 4x4 array of numbers", where) from None
        _check_pose(m, where + ".transform_matrix")
        if m.shape == (3, 4):
            m = np.vstack([m, [0, 0, 0, 1]])
        fp = folder / fr["file_path"]
        cand = [fp] if fp.suffix else [fp.with_name(fp.name + ".png"), fp.with_name(fp.name + ".jpg"), fp]
        img_path = next((c for c in cand if c.is_file()), None)
        if img_path is None:
            raise InputError(f"image {cand[0]} does not exist", where + ".file_path")
        arr, h, w = read_image(img_path, background, where + ".file_path")
        arr = _downscale(arr, downscale)
        if size is None:
            size = arr.shape[:2]
        elif arr.shape[:2] != size:
            raise InputError(f"image {img_path} is {arr.shape[1]}x{arr.shape[0]}; the others are {size[1]}x{size[0]}",
                             where + ".file_path")
        mats.append(m)
        imgs.append(arr)
        names.append(Path(fr["file_path"]).name)
    H, W = size
    R, t = blender_to_opencv(torch.from_numpy(np.stack(mats)))
    f = 0.5 * W / math.tan(0.5 * angle)
    ones = torch.ones(len(mats), dtype=torch.float64)
    cams = Cameras(R, t, f * ones, f * ones, 0.5 * W * ones, 0.5 * H * ones, W, H, names).to(dtype=dtype)
    return cams, torch.from_numpy(np.stack(imgs)).to(dtype)


def read_transforms(path: Path) -> tuple[dict, list[dict], float]:
    """A ``transforms_*.json``: (the object, its non-empty list of frame objects, camera_angle_x in
    radians, 0 < angle < pi); an InputError naming the file and the field otherwise."""
    meta = load_json(path, expect=dict, what="transforms JSON")
    if "camera_angle_x" not in meta or "frames" not in meta:
        raise InputError("expected the keys 'camera_angle_x' and 'frames'", str(path))
    frames = meta["frames"]
    if not isinstance(frames, list) or not frames:
        raise InputError("'frames' must be a non-empty list", str(path))
    for i, fr in enumerate(frames):
        if not isinstance(fr, dict):
            raise InputError("a frame must be an object", f"{path}, frames[{i}]")
    angle = meta["camera_angle_x"]
    if isinstance(angle, bool) or not isinstance(angle, (int, float)) or not 0 < angle < math.pi:
        raise InputError(f"camera_angle_x must be a number of radians in (0, pi), not {angle!r}", str(path))
    return meta, frames, float(angle)


def _colmap_dir(folder: Path) -> Path | None:
    for c in (folder, folder / "sparse" / "0", folder / "sparse"):
        if (c / "cameras.txt").is_file() and (c / "images.txt").is_file():
            return c
    return None


def _qvec_to_R(q: np.ndarray) -> np.ndarray:
    w, x, y, z = q / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def read_colmap(folder: Path, background, downscale: int = 1, test_every: int = 8, dtype=torch.float32) -> Scene:
    """A COLMAP text model (see the module docstring) -> :class:`Scene`."""
    sp = _colmap_dir(folder)
    cams_txt, imgs_txt, pts_txt = sp / "cameras.txt", sp / "images.txt", sp / "points3D.txt"
    intr = {}
    with open_text(cams_txt) as fh:
        for ln, line in enumerate(fh, 1):
            if not line.strip() or line.startswith("#"):
                continue
            p = line.split()
            try:
                cid, model, w, h = int(p[0]), p[1], int(p[2]), int(p[3])
                prm = [float(x) for x in p[4:]]
            except (ValueError, IndexError):
                raise InputError("expected CAMERA_ID MODEL WIDTH HEIGHT PARAMS[]", str(cams_txt), ln) from None
            if model == "SIMPLE_PINHOLE" and len(prm) >= 3:
                fx = fy = prm[0]
                cx, cy = prm[1], prm[2]
            elif model == "PINHOLE" and len(prm) >= 4:
                fx, fy, cx, cy = prm[:4]
            elif model in ("SIMPLE_RADIAL", "RADIAL") and len(prm) >= 3:
                fx = fy = prm[0]
                cx, cy = prm[1], prm[2]
                log.warning("%s, line %d: %s distortion is ignored (undistort the images first)", cams_txt, ln, model)
            elif model in ("OPENCV", "FULL_OPENCV") and len(prm) >= 4:
                fx, fy, cx, cy = prm[:4]
                log.warning("%s, line %d: %s distortion is ignored (undistort the images first)", cams_txt, ln, model)
            else:
                raise InputError(f"camera model {model} with {len(prm)} parameters is not supported "
                                 "(PINHOLE, SIMPLE_PINHOLE, SIMPLE_RADIAL, RADIAL, OPENCV)", str(cams_txt), ln)
            intr[cid] = (fx, fy, cx, cy, w, h)
    entries = []
    with open_text(imgs_txt) as fh:
        lines = [(ln, line) for ln, line in enumerate(fh, 1) if not line.startswith("#")]
    i = 0
    while i < len(lines):
        ln, line = lines[i]
        if not line.strip():
            i += 1
            continue
        p = line.split()
        try:
            qv = np.array([float(x) for x in p[1:5]])
            tv = np.array([float(x) for x in p[5:8]])
            cid, name = int(p[8]), " ".join(p[9:])
        except (ValueError, IndexError):
            raise InputError("expected IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME", str(imgs_txt), ln) from None
        if not name:
            raise InputError("missing image NAME", str(imgs_txt), ln)
        if cid not in intr:
            raise InputError(f"camera {cid} is not in {cams_txt.name}", str(imgs_txt), ln)
        if not (np.isfinite(qv).all() and np.isfinite(tv).all()) or np.linalg.norm(qv) < 1e-8:
            raise InputError("the pose is not invertible (zero or non-finite quaternion, or non-finite t)",
                             str(imgs_txt), ln)
        entries.append((name, qv, tv, cid, ln))
        i += 2  # the POINTS2D line follows each image line
    if not entries:
        raise InputError("no images", str(imgs_txt))
    entries.sort(key=lambda e: e[0])
    img_dir = next((d for d in (sp / "images", folder / "images", sp.parent / "images", sp.parent.parent / "images")
                    if d.is_dir()), folder / "images")
    Rs, ts, fxs, fys, cxs, cys, imgs, names = [], [], [], [], [], [], [], []
    size = None
    for name, qv, tv, cid, ln in entries:
        where = f"{imgs_txt}, line {ln}"
        arr, h, w = read_image(img_dir / name, background, where)
        fx, fy, cx, cy, w0, h0 = intr[cid]
        sx, sy = w / w0, h / h0
        arr = _downscale(arr, downscale)
        if size is None:
            size = arr.shape[:2]
        elif arr.shape[:2] != size:
            raise InputError(f"image {name} has another size than the first ({size[1]}x{size[0]})", where)
        Rs.append(_qvec_to_R(qv))
        ts.append(tv)
        fxs.append(fx * sx / downscale)
        fys.append(fy * sy / downscale)
        cxs.append(cx * sx / downscale)
        cys.append(cy * sy / downscale)
        imgs.append(arr)
        names.append(name)
    H, W = size
    cams = Cameras(*(torch.tensor(np.array(x)) for x in (Rs, ts, fxs, fys, cxs, cys)), W, H, names).to(dtype=dtype)
    images = torch.from_numpy(np.stack(imgs)).to(dtype)
    idx = np.arange(len(names))
    test = idx[idx % test_every == 0] if len(names) > 1 else idx[:0]
    train = np.setdiff1d(idx, test)
    points = colors = None
    if pts_txt.is_file():
        xyz, rgb = [], []
        with open_text(pts_txt) as fh:
            for ln, line in enumerate(fh, 1):
                if not line.strip() or line.startswith("#"):
                    continue
                p = line.split()
                try:
                    xyz.append([float(x) for x in p[1:4]])
                    rgb.append([float(x) / 255.0 for x in p[4:7]])
                except (ValueError, IndexError):
                    raise InputError("expected POINT3D_ID X Y Z R G B ERROR TRACK[]", str(pts_txt), ln) from None
        if xyz:
            points = torch.tensor(xyz, dtype=dtype)
            colors = torch.tensor(rgb, dtype=dtype)
    return Scene(str(folder), "colmap", cams[train.tolist()], images[train], cams[test.tolist()], images[test],
                 tuple(background), points, colors)


def read_scene(path, background=(1.0, 1.0, 1.0), downscale: int = 1, dtype=torch.float32) -> Scene:
    """Read a scene folder in the NeRF-synthetic layout or as a COLMAP text model."""
    folder = Path(path)
    if not folder.is_dir():
        raise InputError("is not a scene folder (expected transforms_*.json or a COLMAP text model)", str(path))
    if (folder / "transforms_train.json").is_file():
        tr_c, tr_i = read_nerf_split(folder, "train", background, downscale, dtype)
        if (folder / "transforms_test.json").exists():  # a folder of that name is reported, not skipped
            te_c, te_i = read_nerf_split(folder, "test", background, downscale, dtype)
            if te_i.shape[1:3] != tr_i.shape[1:3]:
                raise InputError("test images have another size than the train images",
                                 str(folder / "transforms_test.json"))
        else:
            te_c, te_i = tr_c[[]], tr_i[:0]
        return Scene(str(folder), "nerf-synthetic", tr_c, tr_i, te_c, te_i, tuple(background))
    if _colmap_dir(folder) is not None:
        return read_colmap(folder, background, downscale, dtype=dtype)
    raise InputError("no transforms_train.json and no COLMAP cameras.txt/images.txt (in ., sparse/0 or sparse)",
                     str(path))


def read_cameras(path, size: tuple[int, int] | None = None, dtype=torch.float32) -> Cameras:
    """Cameras to render: a ``transforms_*.json`` file (no images needed; the size is ``size``, the
    file's w/h, its first image's size, or 800x800), or a scene folder (its test views, or its train
    views when it has none)."""
    p = Path(path)
    if p.suffix == ".json" and not p.is_dir():
        meta, frames, angle = read_transforms(p)
        if size is not None:
            W, H = size
        elif "w" in meta or "width" in meta:
            try:
                W = int(meta.get("w", meta.get("width")))
                H = int(meta.get("h", meta.get("height", W)))
            except (TypeError, ValueError):
                raise InputError("w and h must be whole numbers of pixels", str(p)) from None
            if min(W, H) < 1:
                raise InputError(f"the image size {W}x{H} must be positive", str(p))
        else:
            W = H = 800
            fp = p.parent / str(frames[0].get("file_path", ""))
            for c in (fp.with_name(fp.name + ".png"), fp):
                if c.is_file():
                    H, W = read_image(c, (0.0, 0.0, 0.0), f"{p}, frames[0].file_path")[1:]
                    break
        mats = []
        for i, fr in enumerate(frames):
            try:
                m = np.asarray(fr["transform_matrix"], dtype=np.float64)
            except (KeyError, TypeError, ValueError):
                raise InputError("missing or malformed transform_matrix", f"{p}, frames[{i}]") from None
            _check_pose(m, f"{p}, frames[{i}].transform_matrix")
            mats.append(m if m.shape == (4, 4) else np.vstack([m, [0, 0, 0, 1]]))
        R, t = blender_to_opencv(torch.from_numpy(np.stack(mats)))
        f = 0.5 * W / math.tan(0.5 * angle)
        ones = torch.ones(len(mats), dtype=torch.float64)
        names = [Path(str(fr.get("file_path", f"r_{i}"))).name for i, fr in enumerate(frames)]
        return Cameras(R, t, f * ones, f * ones, 0.5 * W * ones, 0.5 * H * ones, W, H, names).to(dtype=dtype)
    scene = read_scene(p, dtype=dtype)
    return scene.test_cams if len(scene.test_cams) else scene.train_cams


# --------------------------------------------------------------------------- synthetic scene


def synthetic_gaussians(n: int, sh_degree: int, generator: torch.Generator, half_width: float = 1.0,
                        dtype=torch.float32, scales: str = "fixed") -> Gaussians:
    """N_gt known Gaussians: means uniform in a cube, anisotropic scales, random rotations,
    opacities 0.5..0.95, random colours in 0.1..0.85 and small degree-1+ SH terms (|view-dependent
    part| < 0.1, so colours stay in [0, 1] and the 8-bit RGBA images hold the renders exactly up to
    rounding). ``scales``: ``fixed``, log-uniform 0.02..0.08 x half-width (the kNN init of 800
    Gaussians is about 4x larger); ``knn``, the kNN scale of the means (3 neighbours, as the 3DGS
    init) times a log-uniform factor in 1/2..2 per axis, so the init is right on average
    **[reconstructed]**. Both draw the same random numbers."""
    if scales not in ("fixed", "knn"):
        raise UsageError(f"--scales must be fixed or knn, not {scales!r}")
    g = generator
    means = (torch.rand(n, 3, generator=g, dtype=torch.float64) * 2 - 1) * half_width
    u = torch.rand(n, 3, generator=g, dtype=torch.float64)
    if scales == "knn":
        log_s = knn_log_scales(means) + (2 * u - 1) * math.log(2.0)
    else:
        log_s = torch.log(torch.tensor(0.02 * half_width, dtype=torch.float64)) + u * math.log(4.0)
    quats = torch.randn(n, 4, generator=g, dtype=torch.float64)
    quats = quats / quats.norm(dim=1, keepdim=True)
    op = 0.5 + 0.45 * torch.rand(n, generator=g, dtype=torch.float64)
    rgb = 0.1 + 0.75 * torch.rand(n, 3, generator=g, dtype=torch.float64)
    shN = 0.05 * torch.randn(n, n_coeffs(sh_degree) - 1, 3, generator=g, dtype=torch.float64).clamp(-2, 2)
    return Gaussians(means, log_s, quats, torch.logit(op), rgb_to_sh0(rgb)[:, None, :], shN, sh_degree).to(dtype=dtype)


def make_synthetic_scene(folder: Path, n_gaussians: int = 800, size: int = 64, n_train: int = 32, n_test: int = 8,
                         sh_degree: int = 1, seed: int = 0, radius: float = 4.0, fov_deg: float = 40.0,
                         tile_size: int | None = 4, scales: str = "fixed") -> dict:
    """Write a synthetic scene of known Gaussians in the NeRF-synthetic layout into ``folder``:
    ``transforms_{train,test}.json``, RGBA PNGs (alpha = 1 - final transmittance, rendered on black,
    so that compositing on any background is exact up to 8-bit rounding) and ``gt.ply``."""
    gen = generator(seed)
    gt = synthetic_gaussians(n_gaussians, sh_degree, gen, scales=scales)
    cams = sphere_cameras(n_train + n_test, radius, size, size, fov_deg, gen)
    perm = torch.randperm(n_train + n_test, generator=gen).tolist()
    split = {"train": perm[:n_train], "test": perm[n_train:]}
    folder = Path(folder)
    with torch.no_grad():
        rgb, alpha = render(gt.to(dtype=torch.float64), cams.to(dtype=torch.float64), background=None,
                            tile_size=tile_size, return_alpha=True)
    # premultiplied colour / alpha -> straight RGBA
    straight = torch.where(alpha[..., None] > 1e-8, rgb / alpha[..., None].clamp_min(1e-8), torch.zeros_like(rgb))
    rgba = torch.cat([straight.clamp(0, 1), alpha[..., None].clamp(0, 1)], -1)
    c2w = opencv_to_blender(cams.R.double(), cams.t.double())
    angle = 2 * math.atan(0.5 * size / float(cams.fx[0]))
    for name, ids in split.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        frames = []
        for k in ids:
            write_bytes(folder / name / f"r_{k}.png", png_bytes(rgba[k]))
            frames.append({"file_path": f"./{name}/r_{k}", "transform_matrix": c2w[k].tolist()})
        write_json(folder / f"transforms_{name}.json", {"camera_angle_x": angle, "frames": frames})
    write_ply(folder / "gt.ply", gt)
    return {"n_gaussians": n_gaussians, "size": size, "n_train": n_train, "n_test": n_test, "sh_degree": sh_degree,
            "camera_radius": radius, "fov_deg": fov_deg, "scales": scales}


def png_bytes(img: torch.Tensor) -> bytes:
    """An image [H, W, 3 or 4] in [0, 1] as 8-bit PNG bytes (RGB or RGBA; rounded, deterministic)."""
    from PIL import Image  # the optional 'gs' extra

    arr = (img.detach().clamp(0, 1).cpu().double().numpy() * 255.0 + 0.5).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr, "RGBA" if arr.shape[-1] == 4 else "RGB").save(buf, format="PNG")
    return buf.getvalue()


@dataclass
class SceneResult:
    summary: dict


def generate_scene(folder: Path, cfg: SyntheticSceneConfig, seed: int = 0) -> SceneResult:
    """The ``generate`` subcommand: :func:`make_synthetic_scene` with ``cfg``; summary keys n_gaussians,
    size, n_train, n_test, sh_degree, camera_radius, fov_deg, scales."""
    return SceneResult(make_synthetic_scene(folder, seed=seed, **asdict(cfg)))


def render_to_folder(g: Gaussians, cams: Cameras, folder: Path, background=(1.0, 1.0, 1.0), tile_size: int = 8,
                     device="cpu", views_per_pass: int = 4) -> SceneResult:
    """The ``render`` subcommand: render every camera (``views_per_pass`` at a time, on ``device``)
    to ``folder/<name>.png`` (the camera's image name, else view_NNNN); summary keys n_views, width,
    height."""
    dev = torch.device(device)
    g, cams = g.to(device=dev), cams.to(device=dev)
    folder = Path(folder)
    with torch.no_grad():
        for i in range(0, len(cams), views_per_pass):
            ids = list(range(i, min(i + views_per_pass, len(cams))))
            imgs = render(g, cams[ids], background=background, tile_size=tile_size or None)
            for k, img in zip(ids, imgs):
                name = cams.names[k] if cams.names else f"view_{k:04d}"
                write_bytes(folder / f"{name}.png", png_bytes(img))
    return SceneResult({"n_views": len(cams), "width": cams.width, "height": cams.height})


def parse_size(text: str | None) -> tuple[int, int] | None:
    """``WxH`` -> (W, H) (None for None); a UsageError naming --size otherwise."""
    if not text:
        return None
    try:
        wh = tuple(int(x) for x in text.lower().split("x"))
    except ValueError:
        wh = ()
    if len(wh) != 2 or min(wh) <= 0:
        raise UsageError(f"--size {text!r}: expected WxH, e.g. 800x800")
    return wh
