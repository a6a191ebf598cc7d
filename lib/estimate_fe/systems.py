"""Analytic systems with exact or quadrature free energies, and the common System interface.

A system maps frames x (M, N, 3) in Angstrom to reduced energies u = beta U (float64, in kT) and
samples its Boltzmann density. Analytic potentials are given in kT directly (a JSON spec):

- ``harmonic-trap``: N independent particles in an anisotropic harmonic trap, U = sum k_d x_d^2 / 2.
  F/kT = -sum_atoms sum_axes log sqrt(2 pi / k_d) (exact).
- ``double-well``: N particles, U = barrier ((x/x0)^2 - 1)^2 + tilt x/x0 on x, harmonic on y, z.
  F from 1-D quadrature (scipy.integrate.quad), exact to ~1e-10.
- ``triatomic``: a 3-atom molecule, invariant under rigid motions: two harmonic bonds 1-2, 1-3
  (kb, b), a harmonic angle 2-1-3 (ka, theta0) and a Urey-Bradley spring 2-3 (kub, d0), so the
  integrand is not separable. F/kT = -log(8 pi^2 integral r1^2 r2^2 sin(theta) exp(-U) dr1 dr2
  dtheta) per volume, by a 3-D Gauss-Legendre tensor quadrature: this checks the rotational measure
  of the frame gauge (see :mod:`icmlkit.lib.estimate_fe.gauge`).
- ``lj-trap``: a Lennard-Jones cluster in an isotropic harmonic trap (no closed form: f_exact null).

``sample`` draws frames: exactly for the separable systems (Gaussian draws, or inverse CDF on a
fine grid for the double well) and with vectorised MALA (Metropolis-adjusted Langevin, exact
stationary density) over many chains otherwise. Energies and MALA run on ``system.device``; the
random numbers come from the CPU stream ``generator(seed, "frames")`` and are moved there, so the
draws do not depend on the device.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from icmlkit.lib.core.errors import InputError

KINDS = ("harmonic-trap", "double-well", "triatomic", "lj-trap")

BUILTIN = {
    "trap4": {"kind": "harmonic-trap", "n_atoms": 4, "k": [1.0, 4.0, 16.0]},
    "dw4": {"kind": "double-well", "n_atoms": 4, "barrier": 2.0, "x0": 1.0, "tilt": 0.5, "k": [4.0, 4.0]},
    "triatomic": {"kind": "triatomic", "kb": 200.0, "b": 1.0, "ka": 20.0, "theta0": 1.9, "kub": 10.0, "d0": 1.6},
    "lj6-trap": {"kind": "lj-trap", "n_atoms": 6, "epsilon": 1.0, "sigma": 1.0, "k": 1.0},
}


@dataclass
class System:
    """What the estimator needs from a system (analytic or OpenMM)."""

    name: str
    z: np.ndarray
    bonds: list | None
    invariant: bool
    kind: str = "analytic"
    temperature: float | None = None  # K (OpenMM systems); analytic energies are in kT already
    spec: dict = field(default_factory=dict)
    energy_evals: int = 0
    device: str = "cpu"  # torch device of the energies (analytic) / the OpenMM platform's device
    files: list = field(default_factory=list)  # the files this system was read from (for the manifest)

    @property
    def n_atoms(self) -> int:
        return int(len(self.z))

    @property
    def kT_kcal(self) -> float | None:
        return None if self.temperature is None else 0.0019872042586 * self.temperature

    def reduced_energy(self, x: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def f_exact(self) -> float | None:
        return None

    def check_frames(self, x: np.ndarray, where: str) -> None:
        if x.ndim != 3 or x.shape[1:] != (self.n_atoms, 3):
            raise InputError(f"frames have shape {tuple(x.shape)}, expected (M, {self.n_atoms}, 3) for system "
                             f"{self.name} ({self.n_atoms} atoms)", where)


class AnalyticSystem(System):
    """A potential given by a JSON spec, energies in kT (torch float64 for gradients)."""

    def energy_torch(self, x):
        import torch

        s, k = self.spec, self.spec["kind"]
        if k == "harmonic-trap":
            kk = torch.as_tensor(s["k"], dtype=x.dtype, device=x.device)
            return 0.5 * (kk * x * x).sum((-1, -2))
        if k == "double-well":
            q = x[..., 0] / s["x0"]
            ky = torch.as_tensor(s["k"], dtype=x.dtype, device=x.device)
            return (s["barrier"] * (q * q - 1) ** 2 + s.get("tilt", 0.0) * q).sum(-1) + 0.5 * (ky * x[..., 1:] ** 2).sum((-1, -2))
        if k == "triatomic":
            r1v, r2v = x[..., 1, :] - x[..., 0, :], x[..., 2, :] - x[..., 0, :]
            r1, r2 = r1v.norm(dim=-1), r2v.norm(dim=-1)
            cos = ((r1v * r2v).sum(-1) / (r1 * r2)).clamp(-1 + 1e-12, 1 - 1e-12)
            th = torch.acos(cos)
            r3 = (x[..., 2, :] - x[..., 1, :]).norm(dim=-1)
            return (0.5 * s["kb"] * ((r1 - s["b"]) ** 2 + (r2 - s["b"]) ** 2) + 0.5 * s["ka"] * (th - s["theta0"]) ** 2
                    + 0.5 * s["kub"] * (r3 - s["d0"]) ** 2)
        if k == "lj-trap":
            n = x.shape[-2]
            d = (x[..., :, None, :] - x[..., None, :, :]).norm(dim=-1)
            iu = torch.triu_indices(n, n, 1, device=x.device)
            rr = (s["sigma"] / d[..., iu[0], iu[1]]) ** 6
            return 4 * s["epsilon"] * (rr * rr - rr).sum(-1) + 0.5 * s["k"] * (x * x).sum((-1, -2))
        raise InputError(f"unknown kind {k!r}")  # pragma: no cover - checked at load

    def reduced_energy(self, x: np.ndarray) -> np.ndarray:
        import torch

        self.energy_evals += int(x.shape[0])
        with torch.no_grad():
            x = torch.as_tensor(np.asarray(x), dtype=torch.float64, device=self.device)
            return self.energy_torch(x).cpu().numpy()

    def f_exact(self) -> float | None:
        return exact_free_energy(self.spec)

    def bonded_params(self) -> dict | None:
        """The triatomic's harmonic bonds and angle (energies in kT: sigma = 1/sqrt(k)), for
        internal coordinates (:mod:`icmlkit.lib.estimate_fe.internal`); None for the other kinds."""
        s = self.spec
        if s["kind"] != "triatomic":
            return None
        b = (float(s["b"]), 1.0 / math.sqrt(s["kb"]))
        return {"bonds": {(0, 1): b, (0, 2): b}, "angles": {(1, 0, 2): (float(s["theta0"]), 1.0 / math.sqrt(s["ka"]))}}

    # ------------------------------------------------------------------ sampling
    def sample(self, n_frames: int, seed: int = 0, method: str = "auto", chains: int = 200, thin: int = 20,
               burn_in: int = 2000) -> dict:
        """Boltzmann frames (exact draws or MALA). Returns {x, u, seconds_md, energy_evals, method}."""
        from icmlkit.lib.core.runtime import generator

        t0 = time.perf_counter()
        gen = generator(seed, "frames")
        kind = self.spec["kind"]
        if method == "auto":
            method = "exact" if kind in ("harmonic-trap", "double-well") else "mala"
        if method == "exact":
            x = self._exact_draws(n_frames, gen)
            evals = 0
        elif method == "mala":
            x, evals = self._mala(n_frames, gen, chains, thin, burn_in)
        else:
            raise InputError(f"unknown sampling method {method!r}")
        u = self.reduced_energy(x)
        return {"x": x, "u": u, "seconds_md": time.perf_counter() - t0, "energy_evals": int(evals + len(u)),
                "method": method}

    def _exact_draws(self, n: int, gen) -> np.ndarray:
        import torch

        s, N = self.spec, self.n_atoms
        if s["kind"] == "harmonic-trap":
            sd = 1 / torch.sqrt(torch.as_tensor(s["k"], dtype=torch.float64))
            return (torch.randn(n, N, 3, generator=gen, dtype=torch.float64) * sd).numpy()
        if s["kind"] == "double-well":
            grid, cdf = _dw_cdf(s)
            uu = torch.rand(n, N, generator=gen, dtype=torch.float64).numpy()
            xs = np.interp(uu, cdf, grid)
            sd = 1 / torch.sqrt(torch.as_tensor(s["k"], dtype=torch.float64))
            yz = (torch.randn(n, N, 2, generator=gen, dtype=torch.float64) * sd).numpy()
            return np.concatenate([xs[..., None], yz], -1)
        raise InputError(f"{s['kind']}: no exact sampler; use --method mala")

    def _init(self, chains: int, gen):
        import torch

        s = self.spec
        if s["kind"] == "triatomic":
            b, th = s["b"], s["theta0"]
            x0 = torch.tensor([[0, 0, 0], [b, 0, 0], [b * math.cos(th), b * math.sin(th), 0]], dtype=torch.float64)
        elif s["kind"] == "lj-trap":
            g = np.stack(np.meshgrid(*[np.arange(2)] * 3, indexing="ij"), -1).reshape(-1, 3)[: self.n_atoms]
            x0 = torch.as_tensor((g - g.mean(0)) * 1.12 * s["sigma"], dtype=torch.float64)
        else:
            x0 = torch.zeros(self.n_atoms, 3, dtype=torch.float64)
        x = x0.expand(chains, -1, -1) + 0.01 * torch.randn(chains, self.n_atoms, 3, generator=gen, dtype=torch.float64)
        return x.to(self.device)

    def _mala(self, n: int, gen, chains: int, thin: int, burn_in: int):
        import torch

        x = self._init(chains, gen)

        def ug(x):
            x = x.detach().requires_grad_(True)
            u = self.energy_torch(x)
            (g,) = torch.autograd.grad(u.sum(), x)
            return u.detach(), g.detach()

        u, g = ug(x)
        dev = x.device
        h = torch.full((chains, 1, 1), 1e-3, dtype=torch.float64, device=dev)
        n_keep = -(-n // chains)
        out, evals, step = [], 0, 0
        while len(out) < n_keep:
            noise = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(dev)
            y = x - h * g + torch.sqrt(2 * h) * noise
            uy, gy = ug(y)
            evals += chains
            fwd = ((y - x + h * g) ** 2).sum((-1, -2)) / (4 * h[:, 0, 0])
            bwd = ((x - y + h * gy) ** 2).sum((-1, -2)) / (4 * h[:, 0, 0])
            logacc = -uy + u - bwd + fwd
            acc = torch.log(torch.rand(chains, generator=gen, dtype=torch.float64).to(dev)) < torch.nan_to_num(logacc, nan=-math.inf)
            x = torch.where(acc[:, None, None], y, x)
            u = torch.where(acc, uy, u)
            g = torch.where(acc[:, None, None], gy, g)
            step += 1
            if step <= burn_in:  # adapt the step per chain towards ~60 % acceptance (burn-in only)
                h = h * torch.where(acc, 1.02, 0.97)[:, None, None]
            elif (step - burn_in) % thin == 0:
                out.append(x.clone())
        x = torch.stack(out, 1).reshape(-1, self.n_atoms, 3)[:n]  # chain-major
        return x.cpu().numpy(), evals


def _dw_cdf(s: dict):
    x0 = s["x0"]
    grid = np.linspace(-4 * x0, 4 * x0, 400001)
    q = grid / x0
    p = np.exp(-(s["barrier"] * (q * q - 1) ** 2 + s.get("tilt", 0.0) * q))
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (p[1:] + p[:-1]) * np.diff(grid))])
    return grid, cdf / cdf[-1]


def triatomic_quadrature(spec: dict, n: int = 160) -> float:
    """log integral r1^2 r2^2 sin(theta) exp(-U) dr1 dr2 dtheta by a 3-D Gauss-Legendre tensor grid."""
    b, sb = spec["b"], 1 / math.sqrt(spec["kb"])
    xr, wr = np.polynomial.legendre.leggauss(n)
    lo, hi = max(b - 12 * sb, 1e-6), b + 12 * sb
    r = 0.5 * (hi - lo) * xr + 0.5 * (hi + lo)
    wr = 0.5 * (hi - lo) * wr
    th = 0.5 * math.pi * (xr + 1)
    wt = 0.5 * math.pi * np.polynomial.legendre.leggauss(n)[1]  # weights on [0, pi]
    R1, R2, TH = np.meshgrid(r, r, th, indexing="ij")
    r3 = np.sqrt(np.maximum(R1 ** 2 + R2 ** 2 - 2 * R1 * R2 * np.cos(TH), 0))
    U = (0.5 * spec["kb"] * ((R1 - b) ** 2 + (R2 - b) ** 2) + 0.5 * spec["ka"] * (TH - spec["theta0"]) ** 2
         + 0.5 * spec["kub"] * (r3 - spec["d0"]) ** 2)
    logf = 2 * np.log(R1) + 2 * np.log(R2) + np.log(np.sin(TH)) - U
    logw = np.log(wr)[:, None, None] + np.log(wr)[None, :, None] + np.log(wt)[None, None, :]
    v = logf + logw
    m = v.max()
    return float(m + np.log(np.exp(v - m).sum()))


def exact_free_energy(spec: dict) -> float | None:
    """F/kT of an analytic spec (per volume V for the invariant triatomic), or None."""
    k = spec["kind"]
    if k == "harmonic-trap":
        return float(-spec["n_atoms"] * sum(0.5 * math.log(2 * math.pi / kk) for kk in spec["k"]))
    if k == "double-well":
        from scipy.integrate import quad

        x0, bar, tilt = spec["x0"], spec["barrier"], spec.get("tilt", 0.0)
        zx = quad(lambda x: math.exp(-(bar * ((x / x0) ** 2 - 1) ** 2 + tilt * x / x0)), -6 * x0, 6 * x0,
                  points=[-x0, 0, x0], epsabs=1e-13, epsrel=1e-12, limit=200)[0]
        return float(-spec["n_atoms"] * (math.log(zx) + sum(0.5 * math.log(2 * math.pi / kk) for kk in spec["k"])))
    if k == "triatomic":
        return float(-(math.log(8 * math.pi ** 2) + triatomic_quadrature(spec)))
    return None


_REQUIRED = {
    "harmonic-trap": {"n_atoms": int, "k": list},
    "double-well": {"n_atoms": int, "barrier": float, "x0": float, "k": list},
    "triatomic": {"kb": float, "b": float, "ka": float, "theta0": float, "kub": float, "d0": float},
    "lj-trap": {"n_atoms": int, "epsilon": float, "sigma": float, "k": float},
}


def analytic_from_spec(spec: dict, where: str = "<spec>") -> AnalyticSystem:
    """Validate a spec dict (field by field) and build the system."""
    if not isinstance(spec, dict) or spec.get("kind") not in KINDS:
        raise InputError(f"field 'kind' must be one of {list(KINDS)}", where)
    kind = spec["kind"]
    for key, typ in _REQUIRED[kind].items():
        if key not in spec:
            raise InputError(f"field {key!r} is missing (kind {kind} needs {sorted(_REQUIRED[kind])})", where)
        v = spec[key]
        if typ is list:
            want = 3 if kind == "harmonic-trap" else 2
            if not (isinstance(v, list) and len(v) == want and all(isinstance(t, (int, float)) and t > 0 for t in v)):
                raise InputError(f"field {key!r} must be a list of {want} positive numbers", where)
        elif typ is int:
            if not (isinstance(v, int) and v >= 1):
                raise InputError(f"field {key!r} must be a positive integer", where)
        elif not (isinstance(v, (int, float)) and math.isfinite(v)):
            raise InputError(f"field {key!r} must be a finite number", where)
    n = 3 if kind == "triatomic" else spec["n_atoms"]
    bonds = [(0, 1), (0, 2)] if kind == "triatomic" else None
    return AnalyticSystem(name=spec.get("name", kind), z=np.full(n, 6 if kind == "triatomic" else 18), bonds=bonds,
                          invariant=kind == "triatomic", kind="analytic", spec=dict(spec))


def load_analytic(path) -> AnalyticSystem:
    from icmlkit.lib.core.io import display_name, load_json

    return analytic_from_spec(load_json(path, expect=dict), display_name(path))


def builtin(name: str) -> AnalyticSystem:
    if name not in BUILTIN:
        raise InputError(f"unknown built-in system {name!r}; choose from {sorted(BUILTIN)}")
    return analytic_from_spec({**BUILTIN[name], "name": name})
