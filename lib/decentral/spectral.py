"""Spectral bounds and Chebyshev polynomials: W' = P(W), the Chebyshev iteration in K^T K, power
iteration, and the setup constants of the reformulation (alpha, beta, gamma, r, bounds of K and G).

Everything here is the setup phase: it runs once before the iterations, in the launcher, and hands
the nodes scalars ("given" bounds). The block construction, the scalings and the augmentation weight
are [reconstructed] from the predecessor paper (arXiv 2407.02020); see docs/solve-decentralized.md.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


def cheb_T(k: int, x: float) -> float:
    """T_k(x) for |x| >= 1 (the Chebyshev polynomial of the first kind)."""
    if k == 0:
        return 1.0
    t0, t1 = 1.0, x
    for _ in range(k - 1):
        t0, t1 = t1, 2 * x * t1 - t0
    return t1


def wprime_dense(W: np.ndarray, lmin: float, lmax: float, degree: int) -> np.ndarray:
    """W' = I - T_k(Z)/T_k(c0), Z = ((lmax + lmin) I - 2W)/(lmax - lmin), c0 = (lmax + lmin)/(lmax - lmin):
    P(0) = 0 (same kernel as W) and the spectrum of W' on range(W) lies in [1 - 1/T_k(c0), 1 + 1/T_k(c0)]
    ([reconstructed] from the predecessor's code: k = ceil(sqrt(chi)) puts it near [11/15, 19/15])."""
    n = W.shape[0]
    if lmax - lmin < 1e-14 * lmax:
        return W / lmax
    Z = ((lmax + lmin) * np.eye(n) - 2 * W) / (lmax - lmin)
    c0 = (lmax + lmin) / (lmax - lmin)
    t0, t1 = np.eye(n), Z
    for _ in range(degree - 1):
        t0, t1 = t1, 2 * Z @ t1 - t0
    return np.eye(n) - t1 / cheb_T(degree, c0)


def chebyshev_solve(apply_g, v0, mu: float, L: float, degree: int):
    """The method sheet's Chebyshev recursion for min 1/2 ||M v - r||^2 from v0, where
    ``apply_g(v) = M^T (M v - r)``: rho = (L - mu)^2/16, nu = (L + mu)/2, delta = -nu/2,
    p = -g/nu, v += p; then (degree - 1) times: beta = rho/delta, delta = -(nu + beta),
    p = (g + beta p)/delta, v += p. Returns v; v0 - v = Q(M^T M) M^T (M v0 - r) with
    lambda Q(lambda) in [1 - eps, 1 + eps] on [mu, L], eps = 1/T_degree((L + mu)/(L - mu))."""
    rho = (L - mu) ** 2 / 16
    nu = (L + mu) / 2
    delta = -nu / 2
    v = v0
    p = -apply_g(v) / nu
    v = v + p
    for _ in range(degree - 1):
        beta = rho / delta
        delta = -(nu + beta)
        p = (apply_g(v) + beta * p) / delta
        v = v + p
    return v


def cheb_eps(mu: float, L: float, degree: int) -> float:
    if L - mu <= 1e-14 * L:
        return 0.0
    return 1.0 / cheb_T(degree, (L + mu) / (L - mu))


def power_bounds(matvec, dim: int, rng, iters: int = 2000, margin: float = 0.02, project=None) -> tuple[float, float]:
    """(lambda_min^+, lambda_max) of a symmetric PSD operator by power iteration: lambda_max from
    M, then lambda_min^+ from (L I - M) with the known kernel projected out by ``project`` every step
    (for a graph Laplacian: subtract the mean); with a safety margin (lambda_max raised,
    lambda_min^+ lowered by ``margin``), since a too small lambda_max makes Chebyshev diverge. Each
    matvec is one product (for W: one round of neighbour exchanges; the normalisation and the mean
    are reductions of the setup phase)."""
    project = project if project is not None else (lambda v: v)
    v = project(rng.standard_normal(dim))
    lam = 0.0
    for _ in range(iters):
        w = matvec(v)
        nw = np.linalg.norm(w)
        if nw == 0:
            return 0.0, 0.0
        lam = float(v @ w / (v @ v))
        v = w / nw
    L = lam * (1 + margin)
    v = project(rng.standard_normal(dim))
    v /= np.linalg.norm(v)
    s = 0.0
    for _ in range(iters):
        w = project(L * v - matvec(v))
        s = float(v @ w)
        v = w / np.linalg.norm(w)
    mu = max((L - s) * (1 - margin), 0.0)
    return mu, L


def exact_bounds(M: np.ndarray, rel: float = 1e-9) -> tuple[float, float]:
    """(lambda_min^+, lambda_max) of the symmetric PSD matrix M by a dense eigen-solve."""
    if M.size == 0:
        return 0.0, 0.0
    ev = np.linalg.eigvalsh(M)
    top = float(ev[-1])
    if top <= 0:
        return 0.0, 0.0
    pos = ev[ev > rel * top]
    return float(pos[0]), top


@dataclass
class Setup:
    """The constants every node is given before the iterations start."""

    variant: str            # "cheb" (W' = Chebyshev polynomial, Chebyshev in K^T K) or "plain"
    lam_min: float          # lambda_min^+(W)
    lam_max: float          # lambda_max(W)
    chi: float
    deg_w: int              # W-products per W' product
    wp_min: float           # spectrum of W' on range(W)
    wp_max: float
    alpha: float
    beta: float
    gamma: float
    s2: float               # scale of block B2 (its top singular value matched to B1's) [reconstructed]
    r: float                # augmentation weight of G
    mu_k: float             # lambda_min^+(K^T K), lambda_max(K^T K)
    L_k: float
    deg_k: int              # Chebyshev degree in K^T K (1 for plain: no Chebyshev)
    eps_k: float
    mu_g: float             # strong convexity / smoothness of G on the active subspace
    L_g: float
    L_f: float
    mu_f: float
    kappa_f: float
    kappa_ac: float
    kappa_ct: float
    tau: float
    eta: float
    theta: float
    bounds: str
    augment: str = "coupled"

    def as_dict(self) -> dict:
        return {k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in asdict(self).items()}


def condition_numbers(prob) -> dict:
    """kappa_f, kappa_AC (A restricted to ker C, mu~ = sigma_min^+(A on ker C)^2 / n) and kappa_Ct
    (the averaged Gram matrix), the paper's Definitions 4.2 / 3.4 as given in the method sheet."""
    Ls, mus = prob.smoothness()
    L_f, mu_f = float(Ls.max()), float(mus.min())
    n = prob.n
    out = {"L_f": L_f, "mu_f": mu_f, "kappa_f": L_f / mu_f if mu_f > 0 else math.inf}
    L_A = max((float(np.linalg.eigvalsh(prob.A[i] @ prob.A[i].T)[-1]) for i in range(n)), default=0.0) if prob.m else 0.0
    mu_t = 0.0
    if prob.m:
        blocks = []
        for i in range(n):
            Ai = prob.A[i, :, :prob.d[i]]
            Ci = prob.C[i, :, :prob.d[i]]
            Ci = Ci[np.abs(Ci).sum(1) > 0]
            if Ci.shape[0]:
                _, s, vt = np.linalg.svd(Ci)
                rank = int((s > 1e-10 * max(1.0, s.max())).sum())
                N = vt[rank:].T
            else:
                N = np.eye(Ai.shape[1])
            blocks.append(Ai @ N)
        AN = np.concatenate(blocks, 1) if blocks else np.zeros((prob.m, 0))
        s = np.linalg.svd(AN, compute_uv=False) if AN.size else np.zeros(1)
        pos = s[s > 1e-10 * max(1.0, s.max())]
        mu_t = float(pos.min() ** 2 / n) if pos.size else 0.0
    out.update(L_A=L_A, mu_tilde=mu_t, kappa_ac=L_A / mu_t if mu_t > 0 else (0.0 if not prob.m else math.inf))
    if prob.p and prob.Ct.shape[1]:
        top = max(float(np.linalg.eigvalsh(prob.Ct[i].T @ prob.Ct[i])[-1]) for i in range(n))
        avg = sum(prob.Ct[i].T @ prob.Ct[i] for i in range(n)) / n
        mn, _ = exact_bounds(avg)
        out.update(kappa_ct=top / mn if mn > 0 else math.inf, sig_ct=top, lmin_ct=mn)
    else:
        out.update(kappa_ct=0.0, sig_ct=0.0, lmin_ct=0.0)
    return out


def dense_K(prob, W1: np.ndarray, alpha, beta, gamma, s2) -> tuple[np.ndarray, dict]:
    """K = diag(B1, B2) as a dense matrix on (x, y, X) (node-major blocks); B1 = [[A, alpha W'], [beta C, 0]],
    B2 = s2 [[blkdiag Ct], [gamma W']] [reconstructed]."""
    from scipy.linalg import block_diag

    n, m, dm, p = prob.n, prob.m, prob.dmax, prob.p
    rr, ss = prob.C.shape[1], prob.Ct.shape[1]
    Abd = block_diag(*[prob.A[i] for i in range(n)]) if m and dm else np.zeros((n * m, n * dm))
    Cbd = block_diag(*[prob.C[i] for i in range(n)]) if rr and dm else np.zeros((n * rr, n * dm))
    Ctbd = block_diag(*[prob.Ct[i] for i in range(n)]) if ss and p else np.zeros((n * ss, n * p))
    Nx, Ny, NX = n * dm, n * m, n * p
    R1, R2, R3, R4 = n * m, n * rr, n * ss, n * p
    K = np.zeros((R1 + R2 + R3 + R4, Nx + Ny + NX))
    K[:R1, :Nx] = Abd
    K[:R1, Nx:Nx + Ny] = alpha * np.kron(W1, np.eye(m))
    K[R1:R1 + R2, :Nx] = beta * Cbd
    K[R1 + R2:R1 + R2 + R3, Nx + Ny:] = s2 * Ctbd
    K[R1 + R2 + R3:, Nx + Ny:] = s2 * gamma * np.kron(W1, np.eye(p))
    return K, {"Nx": Nx, "Ny": Ny, "NX": NX}


def make_setup(prob, variant: str = "cheb", bounds: str = "exact", rng=None, power_iters: int = 2000,
               aug: float = 1.0, require_strong: bool = True, augment_mode: str = "auto") -> Setup:
    """All constants of Algorithm 1 for ``prob`` (the setup phase).

    1. W's spectrum (lambda_min^+, lambda_max): exact eigen-solve or power iteration.
    2. W' = Chebyshev polynomial of degree ceil(sqrt(chi)) (variant cheb) or W/lambda_max (plain).
    3. alpha = sqrt((L_A + mu~/4)/lambda_min(W')), beta = sqrt(L_S + mu~/2)/sigma_max(C) with L_S read
       as L_A [reconstructed: the sheet leaves L_S undefined], gamma = sqrt((sigma_max^2(Ct) +
       lambda_min(avg Ct^T Ct))/lambda_min(W')^2); B2 scaled so its top singular value equals B1's.
    4. G = f + (r/2)||A x + alpha W'y - b||^2 with r = aug * L_f / lambda_max(M^T M), M = [A, alpha W']
       (the sheet's augmentation; the weight r is [reconstructed]); when this G is not strongly convex
       on the active subspace (augment_mode auto) G = f + (r/2)||K u - b'||^2, r = aug * L_f /
       lambda_max(K^T K) [reconstructed].
    5. bounds of K^T K, Chebyshev degree ceil(sqrt(kappa_K)) (cheb), the contraction eps.
    6. mu_G, L_G of G on the active subspace (y orthogonal to ker W' and the padded coordinates
       excluded; exact for quadratics, curvature bounds for logistic).
    7. APAPC's tau = min(1, sqrt(kappa_K'/kappa_G)/2), eta = 1/(4 tau L_G), theta = 1/(eta L_K').
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    n = prob.n
    W = prob.laplacian()
    if bounds == "exact":
        lmin, lmax = exact_bounds(W)
    else:
        lmin, lmax = power_bounds(lambda v: W @ v, n, rng, power_iters, project=lambda v: v - v.mean())
    chi = lmax / lmin
    if variant == "cheb":
        deg_w = max(1, math.ceil(math.sqrt(chi)))
        W1 = wprime_dense(W, lmin, lmax, deg_w)
        e = cheb_eps(lmin, lmax, deg_w)
        wp_min, wp_max = 1 - e, 1 + e
        if deg_w == 1 or lmax - lmin < 1e-14 * lmax:
            wp_min, wp_max = exact_bounds(W1)
    else:
        deg_w = 1
        W1 = W / lmax
        wp_min, wp_max = lmin / lmax, 1.0
    cn = condition_numbers(prob)
    L_A, mu_t = cn["L_A"], cn["mu_tilde"]
    alpha = math.sqrt((L_A + mu_t / 4) / wp_min) if prob.m else 0.0
    sig_c = max((float(np.linalg.svd(prob.C[i], compute_uv=False).max()) for i in range(n)), default=0.0) \
        if prob.C.shape[1] and prob.dmax else 0.0
    beta = math.sqrt(L_A + mu_t / 2) / sig_c if sig_c > 0 and prob.m else (1.0 if sig_c == 0 else 1.0 / sig_c)
    gamma = math.sqrt((cn["sig_ct"] + cn["lmin_ct"]) / wp_min ** 2) if prob.p and cn["sig_ct"] > 0 else \
        (1.0 / wp_min if prob.p else 0.0)
    K1, _ = dense_K(prob, W1, alpha, beta, gamma, 0.0)
    K2, _ = dense_K(prob, W1, 0.0, 0.0, gamma, 1.0)
    top1 = float(np.linalg.norm(K1, 2) ** 2) if K1.size and np.abs(K1).sum() else 0.0
    top2 = float(np.linalg.norm(K2, 2) ** 2) if K2.size and np.abs(K2).sum() else 0.0
    s2 = math.sqrt(top1 / top2) if top1 > 0 and top2 > 0 else 1.0
    K, sz = dense_K(prob, W1, alpha, beta, gamma, s2)
    KK = K @ K.T if K.shape[0] <= K.shape[1] else K.T @ K
    mu_k, L_k = exact_bounds(KK)  # K's kernel is not known in closed form: always the dense eigen-solve
    if variant == "cheb" and L_k > 0:
        deg_k = max(1, math.ceil(math.sqrt(L_k / mu_k)))
        eps_k = cheb_eps(mu_k, L_k, deg_k)
        muK, LK = 1 - eps_k, 1 + eps_k
    else:
        deg_k, eps_k, muK, LK = 1, 0.0, mu_k, L_k
    # G = sum f_i + (r/2)||A x + alpha W'y - b||^2 (the sheet) on the active subspace; when that is not
    # strongly convex, G = sum f_i + (r/2)||K u - b'||^2 [reconstructed]
    Nx, Ny, NX = sz["Nx"], sz["Ny"], sz["NX"]
    lo, hi = prob.hessian_bounds()
    Hlo, Hhi = _assemble_f(prob, lo, Nx, Ny, NX), _assemble_f(prob, hi, Nx, Ny, NX)
    P = _active_basis(prob, Nx, Ny, NX)
    M = np.zeros_like(K)
    M[:n * prob.m] = K[:n * prob.m]
    topM = float(np.linalg.norm(M, 2) ** 2) if M.size and np.abs(M).sum() else 0.0
    modes = {"auto": ("coupled", "all"), "coupled": ("coupled",), "all": ("all",)}[augment_mode]
    for augment in modes:
        Mx, top = (M, topM) if augment == "coupled" else (K, L_k)
        r = aug * cn["L_f"] / top if top > 0 else 0.0
        MtM = Mx.T @ Mx
        if not P.shape[1]:
            mu_g = L_g = 0.0
        elif lo is hi:
            ev = np.linalg.eigvalsh(P.T @ (Hlo + r * MtM) @ P)
            mu_g, L_g = float(ev[0]), float(ev[-1])
        else:
            mu_g = float(np.linalg.eigvalsh(P.T @ (Hlo + r * MtM) @ P)[0])
            L_g = float(np.linalg.eigvalsh(P.T @ (Hhi + r * MtM) @ P)[-1])
        if mu_g > 1e-9 * max(L_g, 1e-300):
            break
    if mu_g <= 1e-9 * max(L_g, 1e-300) and not require_strong:
        mu_g = 1e-9 * max(L_g, 1e-300)
    elif mu_g <= 1e-9 * max(L_g, 1e-300):
        from icmlkit.lib.core.errors import InputError

        raise InputError("the augmented objective G is not strongly convex on the active subspace (f is not "
                         "strongly convex where the constraints leave freedom); use --method sliding",
                         prob.meta.get("spec"))
    kappa_g = L_g / mu_g
    kk = LK / muK if muK > 0 else 1.0
    tau = min(1.0, 0.5 * math.sqrt(kk / kappa_g))
    eta = 1.0 / (4 * tau * L_g)
    theta = 1.0 / (eta * LK) if LK > 0 else 0.0
    return Setup(variant=variant, lam_min=lmin, lam_max=lmax, chi=chi, deg_w=deg_w, wp_min=wp_min, wp_max=wp_max,
                 alpha=alpha, beta=beta, gamma=gamma, s2=s2, r=r, mu_k=mu_k, L_k=L_k, deg_k=deg_k, eps_k=eps_k,
                 mu_g=mu_g, L_g=L_g, L_f=cn["L_f"], mu_f=cn["mu_f"], kappa_f=cn["kappa_f"], kappa_ac=cn["kappa_ac"],
                 kappa_ct=cn["kappa_ct"], tau=tau, eta=eta, theta=theta, bounds=bounds, augment=augment)


def _assemble_f(prob, H, Nx, Ny, NX) -> np.ndarray:
    """blkdiag over nodes of f_i's curvature on (x_i, x~_i), placed in the (x, y, X) layout."""
    n, dm, p = prob.n, prob.dmax, prob.p
    out = np.zeros((Nx + Ny + NX, Nx + Ny + NX))
    for i in range(n):
        ix = np.concatenate([i * dm + np.arange(dm), Nx + Ny + i * p + np.arange(p)]).astype(int)
        out[np.ix_(ix, ix)] += H[i]
    return out


def _active_basis(prob, Nx, Ny, NX) -> np.ndarray:
    """Orthonormal basis of the subspace the iterates move in: real x coordinates, y orthogonal to
    ker(W') (x) I_m (= 1 (x) I_m), every x~ copy."""
    n, m = prob.n, prob.m
    mask = prob.mask().reshape(-1)
    Px = np.eye(Nx)[:, mask]
    U, _ = np.linalg.qr(np.concatenate([np.ones((n, 1)) / math.sqrt(n), np.eye(n)[:, :n - 1]], 1))
    Vn = U[:, 1:]
    Py = np.kron(Vn, np.eye(m)) if m else np.zeros((0, 0))
    blocks = [Px, Py, np.eye(NX)]
    from scipy.linalg import block_diag

    return block_diag(*[b if b.size else np.zeros((b.shape[0], 0)) for b in blocks])
