"""Exact data for operator learning: Darcy flow (5-point finite differences + scipy spsolve), 1-D
periodic viscous Burgers (ETDRK4 pseudo-spectral) and 2-D Navier-Stokes vorticity (pseudo-spectral
Crank-Nicolson). New resolutions come from one fine solve,
subsampled, never from re-solving coarse (the fine solve's discretisation error is then the same at
every resolution).

Darcy (as in FNO, Li et al. 2021): -div(a grad u) = f on [0, 1]^2, u = 0 on the boundary; a = 12 where
a Gaussian random field with covariance (-Laplacian + tau^2 I)^-alpha (alpha 2, tau 3; a cosine
series with Neumann eigenfunctions) is >= 0, else 3.

Burgers: u_t + (u^2 / 2)_x = nu u_xx on the periodic [0, 1), u0 ~ N(0, 625 (-Laplacian + 25 I)^-alpha)
(FNO's setting with alpha = 2), solved with ETDRK4 (Cox & Matthews 2002, the contour-integral
coefficients of Kassam & Trefethen 2005) and the 2/3 dealiasing rule.

Navier-Stokes (FNO's vorticity benchmark): w_t + u . grad w = nu Laplacian w + f on the periodic
[0, 1)^2, f = 0.1 (sin(2 pi (x + y)) + cos(2 pi (x + y))), w0 ~ N(0, 7^3 (-Laplacian + 49 I)^-2.5); pseudo-
spectral with 2/3 dealiasing, Crank-Nicolson diffusion, Heun advection; snapshots at t = 1, 2, ...;
x the first t_in of them, y the next t_out.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from icmlkit.lib.core.runtime import numpy_rng
from icmlkit.lib.train_operator.config import BurgersConfig, DarcyConfig
from icmlkit.lib.train_operator.data import grid_coords


# --------------------------------------------------------------------------- Darcy


def darcy_grf(n: int, s: int, alpha: float = 2.0, tau: float = 3.0, rng=None) -> np.ndarray:
    """n draws of the GRF on the s x s nodes: a cosine series with eigenvalues
    sqrt(2) tau^(alpha - 1) (pi^2 |k|^2 + tau^2)^(-alpha/2) and the constant mode removed."""
    from scipy.fft import idctn

    rng = rng if rng is not None else np.random.default_rng(0)
    k = np.arange(s)
    K1, K2 = np.meshgrid(k, k, indexing="ij")
    sigma = tau ** (0.5 * (2 * alpha - 2))
    eig = np.sqrt(2.0) * sigma * (np.pi ** 2 * (K1 ** 2 + K2 ** 2) + tau ** 2) ** (-alpha / 2)
    eig[0, 0] = 0.0
    xi = rng.standard_normal((n, s, s))
    return s * idctn(eig[None] * xi, type=2, axes=(1, 2), norm="ortho")


def darcy_matrix(a: np.ndarray):
    """The 5-point matrix of -div(a grad .) on the interior nodes of the s x s grid (h = 1 / (s - 1)),
    face coefficients the mean of the two nodes', Dirichlet zero on the boundary."""
    import scipy.sparse as sp

    s = a.shape[0]
    h2 = (1.0 / (s - 1)) ** 2
    m = s - 2
    idx = np.arange(m * m).reshape(m, m)
    ax = 0.5 * (a[1:, 1:-1] + a[:-1, 1:-1])   # faces between rows i and i+1 (columns interior): (s-1, m)
    ay = 0.5 * (a[1:-1, 1:] + a[1:-1, :-1])   # faces between columns j and j+1: (m, s-1)
    north, south = ax[1:, :], ax[:-1, :]       # (m, m): face above / below interior node (i, j)
    east, west = ay[:, 1:], ay[:, :-1]
    diag = (north + south + east + west) / h2
    rows, cols, vals = [idx.ravel()], [idx.ravel()], [diag.ravel()]
    for sl_a, sl_b, coef in (((slice(0, m - 1), slice(None)), (slice(1, m), slice(None)), north[:-1, :]),
                             ((slice(None), slice(0, m - 1)), (slice(None), slice(1, m)), east[:, :-1])):
        i, j = idx[sl_a].ravel(), idx[sl_b].ravel()
        c = -coef.ravel() / h2
        rows += [i, j]
        cols += [j, i]
        vals += [c, c]
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(m * m, m * m))


def solve_darcy(a: np.ndarray, f: np.ndarray | float = 1.0) -> np.ndarray:
    """u on the s x s nodes (zero on the boundary) of -div(a grad u) = f."""
    from scipy.sparse.linalg import spsolve

    s = a.shape[0]
    rhs = np.broadcast_to(np.asarray(f, dtype=np.float64), (s, s))[1:-1, 1:-1].ravel()
    u = np.zeros((s, s))
    u[1:-1, 1:-1] = spsolve(darcy_matrix(np.asarray(a, dtype=np.float64)).tocsc(), rhs).reshape(s - 2, s - 2)
    return u


@dataclass
class GenerateResult:
    arrays: dict
    summary: dict


def generate_darcy(cfg: DarcyConfig, *, seed: int = 0) -> GenerateResult:
    """``cfg.n`` Darcy samples solved at ``solve_resolution`` and subsampled to ``resolution``: arrays
    x (N x 1 x H x W coefficient), y (N x 1 x H x W solution), coords (H*W x 2, row-major), grid ("node":
    linspace(0, 1, H) per axis, the boundary included)."""

    t0 = time.perf_counter()
    s = cfg.solve_resolution
    grf = darcy_grf(cfg.n, s, cfg.alpha, cfg.tau, numpy_rng(seed, "darcy-grf"))
    a = np.where(grf >= 0, cfg.high, cfg.low)
    u = np.stack([solve_darcy(ai) for ai in a])
    step = (s - 1) // (cfg.resolution - 1)
    x = a[:, ::step, ::step][:, None].astype(np.float32)
    y = u[:, ::step, ::step][:, None].astype(np.float32)
    coords = grid_coords(x.shape[2:], "node")
    return GenerateResult({"x": x, "y": y, "coords": coords, "grid": np.array("node")}, {
        "pde": "darcy", "n": cfg.n, "solve_resolution": s, "resolution": cfg.resolution,
        "y_mean": float(y.mean()), "y_max": float(y.max()), "seconds": time.perf_counter() - t0})


# --------------------------------------------------------------------------- Burgers


def burgers_grf(n: int, s: int, alpha: float = 2.0, rng=None) -> np.ndarray:
    """n draws of N(0, 625 (-Laplacian + 25 I)^-alpha) on s periodic points of [0, 1) (zero mean)."""
    rng = rng if rng is not None else np.random.default_rng(0)
    k = np.fft.rfftfreq(s, d=1.0 / s)
    lam = 25.0 * ((2 * np.pi * k) ** 2 + 25.0) ** (-alpha / 2)
    lam[0] = 0.0
    coef = (rng.standard_normal((n, k.size)) + 1j * rng.standard_normal((n, k.size))) * lam / np.sqrt(2)
    return np.fft.irfft(coef, n=s) * s


def etdrk4_coefficients(L: np.ndarray, dt: float, m: int = 32):
    """Kassam-Trefethen contour-integral coefficients of ETDRK4 for the diagonal linear part L."""
    r = np.exp(1j * np.pi * (np.arange(1, m + 1) - 0.5) / m)
    LR = dt * L[:, None] + r[None, :]
    E, E2 = np.exp(dt * L), np.exp(dt * L / 2)
    Q = dt * np.real(np.mean((np.exp(LR / 2) - 1) / LR, axis=1))
    f1 = dt * np.real(np.mean((-4 - LR + np.exp(LR) * (4 - 3 * LR + LR ** 2)) / LR ** 3, axis=1))
    f2 = dt * np.real(np.mean((2 + LR + np.exp(LR) * (-2 + LR)) / LR ** 3, axis=1))
    f3 = dt * np.real(np.mean((-4 - 3 * LR - LR ** 2 + np.exp(LR) * (4 - LR)) / LR ** 3, axis=1))
    return E, E2, Q, f1, f2, f3


def solve_burgers(u0: np.ndarray, nu: float, t_final: float, dt: float) -> np.ndarray:
    """u(t_final) of u_t + (u^2/2)_x = nu u_xx, periodic on [0, 1), for each row of u0 (batched)."""
    s = u0.shape[-1]
    k = np.fft.rfftfreq(s, d=1.0 / s)
    ik = 2j * np.pi * k
    L = -nu * (2 * np.pi * k) ** 2
    dealias = (k < s / 3).astype(float)
    steps = max(1, int(round(t_final / dt)))
    dt = t_final / steps
    E, E2, Q, f1, f2, f3 = etdrk4_coefficients(L, dt)

    def N(v):
        u = np.fft.irfft(v, n=s)
        return -0.5 * ik * dealias * np.fft.rfft(u * u)

    v = np.fft.rfft(u0)
    for _ in range(steps):
        Nv = N(v)
        a = E2 * v + Q * Nv
        Na = N(a)
        b = E2 * v + Q * Na
        Nb = N(b)
        c = E2 * a + Q * (2 * Nb - Nv)
        Nc = N(c)
        v = E * v + Nv * f1 + 2 * (Na + Nb) * f2 + Nc * f3
    return np.fft.irfft(v, n=s)


def generate_burgers(cfg: BurgersConfig, *, seed: int = 0) -> GenerateResult:
    """``cfg.n`` Burgers samples solved at ``solve_resolution`` points and subsampled: arrays x (u0,
    N x L), y (u(t_final), N x L), coords (L x 1: i / L), grid ("periodic")."""

    t0 = time.perf_counter()
    s = cfg.solve_resolution
    u0 = burgers_grf(cfg.n, s, cfg.alpha, numpy_rng(seed, "burgers-grf"))
    uT = solve_burgers(u0, cfg.nu, cfg.t_final, cfg.dt)
    step = s // cfg.resolution
    coords = grid_coords((cfg.resolution,), "periodic")
    x, y = u0[:, ::step].astype(np.float32), uT[:, ::step].astype(np.float32)
    if not (np.isfinite(y).all()):
        from icmlkit.lib.core.errors import UsageError

        raise UsageError("the Burgers solve blew up; use a smaller --dt")
    return GenerateResult({"x": x, "y": y, "coords": coords, "grid": np.array("periodic")}, {
        "pde": "burgers", "n": cfg.n, "solve_resolution": s, "resolution": cfg.resolution, "nu": cfg.nu,
        "y_mean": float(y.mean()), "y_max": float(np.abs(y).max()), "seconds": time.perf_counter() - t0})


# --------------------------------------------------------------------------- 2-D Navier-Stokes


def ns_grf(n: int, s: int, alpha: float = 2.5, tau: float = 7.0, rng=None) -> np.ndarray:
    """n draws of the periodic GRF N(0, tau^(2 alpha - 2) (-Laplacian + tau^2 I)^-alpha) on the s x s nodes
    (i / s, j / s) of [0, 1)^2, zero mean: white noise filtered in Fourier space [normalisation
    reconstructed: mode variances as the continuous covariance's eigenvalues]."""
    rng = rng if rng is not None else np.random.default_rng(0)
    k = np.fft.fftfreq(s, d=1.0 / s)
    K1, K2 = np.meshgrid(k, k, indexing="ij")
    sigma = tau ** (alpha - 1)
    sqrt_eig = sigma * (4 * np.pi ** 2 * (K1 ** 2 + K2 ** 2) + tau ** 2) ** (-alpha / 2)
    sqrt_eig[0, 0] = 0.0
    xi = rng.standard_normal((n, s, s))
    return s * np.real(np.fft.ifft2(sqrt_eig[None] * np.fft.fft2(xi)))


def ns_forcing(s: int) -> np.ndarray:
    """FNO's forcing 0.1 (sin(2 pi (x + y)) + cos(2 pi (x + y))) on the s x s periodic nodes."""
    t = np.arange(s) / s
    X, Y = np.meshgrid(t, t, indexing="ij")
    return 0.1 * (np.sin(2 * np.pi * (X + Y)) + np.cos(2 * np.pi * (X + Y)))


def solve_ns(w0: np.ndarray, forcing: np.ndarray | float, nu: float, record_times, dt: float) -> np.ndarray:
    """The vorticity w(t) of w_t + u . grad w = nu Laplacian w + f, u = (d psi/dy, -d psi/dx), -Laplacian psi = w,
    periodic on [0, 1)^2, batched over the first axis of w0 (n x s x s), at each of ``record_times``:
    (n, len(record_times), s, s).

    Pseudo-spectral in space (rfft2, 2/3 dealiasing of the advection term), Crank-Nicolson for the
    diffusion term and a Heun predictor-corrector for advection + forcing (the scheme of FNO's data,
    written from its description); steps of at most ``dt``, landing exactly on each record time."""
    n, s, _ = w0.shape
    kx = 2 * np.pi * np.fft.fftfreq(s, d=1.0 / s)[:, None]
    ky = 2 * np.pi * np.fft.rfftfreq(s, d=1.0 / s)[None, :]
    k2 = kx ** 2 + ky ** 2
    inv_k2 = np.where(k2 > 0, 1.0 / np.where(k2 > 0, k2, 1.0), 0.0)
    cut = (2.0 / 3.0) * np.pi * s  # |k| < 2/3 of the Nyquist wavenumber pi s, per axis
    dealias = ((np.abs(kx) < cut) & (np.abs(ky) < cut)).astype(float)
    f_h = np.fft.rfft2(np.broadcast_to(np.asarray(forcing, dtype=np.float64), (s, s)))

    def rhs(w_h):
        psi_h = w_h * inv_k2
        u = np.fft.irfft2(1j * ky * psi_h, s=(s, s))
        v = np.fft.irfft2(-1j * kx * psi_h, s=(s, s))
        wx = np.fft.irfft2(1j * kx * w_h, s=(s, s))
        wy = np.fft.irfft2(1j * ky * w_h, s=(s, s))
        return -dealias * np.fft.rfft2(u * wx + v * wy) + f_h

    w_h = np.fft.rfft2(np.asarray(w0, dtype=np.float64))
    out = np.empty((n, len(record_times), s, s))
    t = 0.0
    for i, t_rec in enumerate(record_times):
        span = float(t_rec) - t
        steps = max(1, int(np.ceil(span / dt - 1e-9))) if span > 0 else 0
        if steps:
            h = span / steps
            lhs = 1.0 / (1.0 + 0.5 * h * nu * k2)
            expl = 1.0 - 0.5 * h * nu * k2
            for _ in range(steps):
                F1 = rhs(w_h)
                w_p = (expl * w_h + h * F1) * lhs
                w_h = (expl * w_h + 0.5 * h * (F1 + rhs(w_p))) * lhs
        t = float(t_rec)
        out[:, i] = np.fft.irfft2(w_h, s=(s, s))
    return out


def generate_ns(cfg, *, seed: int = 0) -> GenerateResult:
    """``cfg.n`` vorticity trajectories solved at ``solve_resolution`` and subsampled to ``resolution``:
    x = w at t = record_dt * (1 .. t_in) (N x t_in x H x W), y = w at the next t_out record times
    (N x t_out x H x W), coords (H*W x 2: the periodic nodes (i / H, j / W), row-major), grid ("periodic")."""
    t0 = time.perf_counter()
    s = cfg.solve_resolution
    w0 = ns_grf(cfg.n, s, rng=numpy_rng(seed, "ns-grf"))
    times = cfg.record_dt * np.arange(1, cfg.t_in + cfg.t_out + 1)
    w = solve_ns(w0, ns_forcing(s), cfg.nu, times, cfg.dt)
    if not np.isfinite(w).all():
        from icmlkit.lib.core.errors import UsageError

        raise UsageError("the Navier-Stokes solve blew up; use a smaller --dt")
    step = s // cfg.resolution
    w = w[:, :, ::step, ::step].astype(np.float32)
    r = cfg.resolution
    coords = grid_coords((r, r), "periodic")
    x, y = w[:, :cfg.t_in], w[:, cfg.t_in:]
    return GenerateResult({"x": x, "y": y, "coords": coords, "grid": np.array("periodic")}, {
        "pde": "ns", "n": cfg.n, "solve_resolution": s, "resolution": r, "nu": cfg.nu, "t_in": cfg.t_in,
        "t_out": cfg.t_out, "record_dt": cfg.record_dt, "y_mean": float(y.mean()), "y_max": float(np.abs(y).max()),
        "seconds": time.perf_counter() - t0})
