"""3D Gaussian Splatting with the 3DGS2-TR optimizer (method sheet train-3dgs.md), in pure PyTorch.

- :mod:`.rasterize`: differentiable, twice-differentiable rasterizer (EWA projection, SH colour,
  depth sort, smooth alpha compositing, optional tile culling);
- :mod:`.optim`: :class:`~icmlkit.lib.train_3dgs.optim.GaussianTrustRegion` (Hutchinson / Gauss-Newton
  diagonal, Sophia-style step, per-Gaussian squared-Hellinger clip, literal or horizon-scaled radius
  schedule, the authors' prototype choices as options) and the reference 3DGS Adam;
- :mod:`.model`, :mod:`.sh`, :mod:`.camera`: Gaussians, spherical harmonics, cameras;
- :mod:`.ply`: the standard 3DGS .ply; :mod:`.scene`: NeRF-synthetic and COLMAP text readers and
  the synthetic scene of known Gaussians;
- :mod:`.config`: the option dataclasses (torch-free; the CLI's options are declared from them);
- :mod:`.train`: fit / evaluate / initialise (``fit_scene``, ``evaluate_split``); :mod:`.compare`:
  Adam vs TR and the demo; :mod:`.scene` also ``generate_scene`` and ``render_to_folder``.

Submodules are imported explicitly (``from icmlkit.lib.train_3dgs.optim import GaussianTrustRegion``).
"""
