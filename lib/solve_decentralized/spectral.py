"""Spectral bounds and Chebyshev polynomials: W' = P(W), the Chebyshev iteration in K^T K, power
iteration, and the setup constants of the reformulation (alpha, beta, gamma, r, bounds of K and G).

Everything here is the setup phase: it runs once before the iterations, in the launcher, and hands
the nodes scalars ("given" bounds). The block construction, the scalings and the augmentation weight
are [reconstructed] from the predecessor paper (arXiv 2407.02020); see docs/solve-decentralized.md.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

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


LANCZOS_MARGIN = 0.01   # matrix-free bounds: lambda_max raised, lambda_min lowered by 1 % [our choice]


def _lanczos(matvec, dim: int, which: str, tol: float) -> float:
    from scipy.sparse.linalg import LinearOperator, eigsh

    if dim <= 8:   # ARPACK needs k < dim: a tiny operator is formed densely
        M = np.stack([matvec(e) for e in np.eye(dim)], 1)
        ev = np.linalg.eigvalsh((M + M.T) / 2)
        return float(ev[-1] if which == "LA" else ev[0])
    op = LinearOperator((dim, dim), matvec=matvec, dtype=float)
    v0 = np.random.default_rng(0).standard_normal(dim)   # fixed start: the same bounds on every run
    return float(eigsh(op, k=1, which=which, tol=tol, v0=v0, maxiter=100 * dim, return_eigenvectors=False)[0])


def lanczos_top(matvec, dim: int, tol: float = 1e-8) -> float:
    """lambda_max of a symmetric operator by Lanczos (scipy's ARPACK ``eigsh``), never a dense copy."""
    if not dim:
        return 0.0
    import time

    t0 = time.perf_counter()
    top = _lanczos(matvec, dim, "LA", tol)
    LANCZOS_LOG.append({"which": "max (ARPACK eigsh)", "dim": dim, "seconds": round(time.perf_counter() - t0, 3)})
    return top


def lanczos_bottom(matvec, dim: int, tol: float = 1e-6) -> float:
    """lambda_min of a symmetric operator, matrix-free: :func:`lanczos_extremes` (plain Lanczos with
    the Ritz residual bound as its stopping test), lowered by that bound. ARPACK's ``eigsh`` with
    which = SA (the earlier route) had not finished after 45-50 min on the 325,620-dimensional K K^T
    of the 20-party a9a split with plain APAPC's W' = W / lambda_max."""
    if not dim:
        return 0.0
    if dim <= 8:
        return _lanczos(matvec, dim, "SA", tol)
    lo, _, info = lanczos_extremes(matvec, dim, tol=max(tol, 1e-4), which="min")
    if not info["converged"]:
        from icmlkit.lib.core.errors import IcmlkitError

        raise IcmlkitError(f"matrix-free setup: Lanczos for the smallest eigenvalue did not converge in "
                           f"{info['steps']} steps ({info['seconds']} s; Ritz residual {info['residual_min']:.2e})")
    return lo


LANCZOS_LOG: list[dict] = []   # one record per matrix-free Lanczos run of the current setup (steps, seconds)


def lanczos_extremes(matvec, dim: int, *, which: str = "both", tol: float = 1e-4, max_steps: int = 50000,
                     check_every: int = 25, seed: int = 0) -> tuple[float, float, dict]:
    """(lambda_min, lambda_max) of a symmetric operator by plain Lanczos: the three-term recurrence
    with no reorthogonalisation and no stored basis (memory: three vectors), the tridiagonal T_k's
    extreme Ritz pairs (theta, s) found every ``check_every`` steps by bisection + inverse iteration
    (scipy's ``eigh_tridiagonal``, O(k) each), stopped when the wanted end's Ritz residual bound
    r = |beta_k s_k| <= tol |theta| (an eigenvalue lies in [theta - r, theta + r]; lost
    orthogonality only repeats converged Ritz values, Paige 1976). Returns (theta_min - r_min,
    theta_max + r_max, info) with info = {steps, seconds, residuals, converged}; a run that reaches
    ``max_steps`` returns its last bounds with converged False. Each step is one ``matvec``."""
    import time

    from scipy.linalg import eigh_tridiagonal

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(dim)
    q /= np.linalg.norm(q)
    q_prev = np.zeros(dim)
    beta_prev = 0.0
    al, be = [], []
    lo = hi = 0.0
    r_lo = r_hi = math.inf
    done = False
    k = 0
    for k in range(1, min(max_steps, dim) + 1):
        w = matvec(q)
        a = float(q @ w)
        w = w - a * q - beta_prev * q_prev
        b = float(np.linalg.norm(w))
        al.append(a)
        be.append(b)
        exhausted = b <= 1e-13 * max(abs(a), 1e-300)
        if exhausted or k % check_every == 0 or k == min(max_steps, dim):
            d, e = np.asarray(al), np.asarray(be[:-1])
            if k == 1:
                lo = hi = a
                r_lo = r_hi = b
            else:
                tl, sl = eigh_tridiagonal(d, e, select="i", select_range=(0, 0))
                th, sh = eigh_tridiagonal(d, e, select="i", select_range=(k - 1, k - 1))
                lo, hi = float(tl[0]), float(th[0])
                r_lo, r_hi = b * abs(float(sl[-1, 0])), b * abs(float(sh[-1, 0]))
            ok_lo = r_lo <= tol * abs(lo) or exhausted
            ok_hi = r_hi <= tol * abs(hi) or exhausted
            done = {"min": ok_lo, "max": ok_hi}.get(which, ok_lo and ok_hi)
            if done:
                break
        q_prev, q = q, w / b
        beta_prev = b
    info = {"steps": k, "seconds": round(time.perf_counter() - t0, 3), "residual_min": r_lo, "residual_max": r_hi,
            "converged": bool(done), "dim": dim, "which": which}
    LANCZOS_LOG.append(info)
    return lo - r_lo, hi + r_hi, info


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
    consensus: str = "wprime"   # consensus rows of K: gamma W' (theory) or gamma W'^{1/2} (practical)
    practical: bool = False     # deg_k / eta given (tuned), not the theory constants
    setup_seconds: float = 0.0  # wall time of make_setup (the spectral setup)
    lanczos: list = field(default_factory=list)   # the matrix-free Lanczos runs (steps, seconds, residuals)

    def as_dict(self) -> dict:
        """JSON-ready: floats as float, a non-finite one (kappa_f = inf when f is not strongly convex)
        as None."""
        return {k: ((float(v) if math.isfinite(v) else None) if isinstance(v, (float, np.floating)) else v)
                for k, v in asdict(self).items()}


def condition_numbers(prob) -> dict:
    """kappa_f, kappa_AC (A restricted to ker C, mu~ = sigma_min^+(A on ker C)^2 / n) and kappa_Ct
    (the averaged Gram matrix), the paper's Definitions 4.2 / 3.4 as given in the method sheet."""
    Ls, mus = prob.smoothness()
    L_f, mu_f = float(Ls.max()), float(mus.min())
    n = prob.n
    out = {"L_f": L_f, "mu_f": mu_f, "kappa_f": L_f / mu_f if mu_f > 0 else math.inf}
    if prob.sparse:
        out.update(_coupled_bounds_sparse(prob))
    L_A = out["L_A"] if prob.sparse else max((float(np.linalg.eigvalsh(prob.A[i] @ prob.A[i].T)[-1]) for i in range(n)), default=0.0) if prob.m else 0.0
    mu_t = out.get("mu_tilde", 0.0)
    if prob.m and not prob.sparse:
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


def _coupled_bounds_sparse(prob) -> dict:
    """L_A = max_i lambda_max(A_i A_i^T) and mu~ = lambda_min(sum_i A_i A_i^T) / n for sparse A_i by
    Lanczos (no local C rows with sparse A, so A restricted to ker C is A itself); the coupled matrix
    must have full row rank here: a rank-deficient one has no matrix-free lambda_min^+."""
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.solve_decentralized.problem import a_block

    if not prob.m:
        return {"L_A": 0.0, "mu_tilde": 0.0}
    blocks = [a_block(prob.A, i, prob.d[i]) for i in range(prob.n)]
    L_A = max(lanczos_top(lambda v, M=M: M @ (M.T @ v), prob.m) for M in blocks)

    def gram(v):
        return sum(M @ (M.T @ v) for M in blocks)

    top = lanczos_top(gram, prob.m)
    low = lanczos_bottom(gram, prob.m)
    if low <= 1e-9 * top:
        raise UsageError("sparse coupled matrix: sum_i A_i A_i^T is singular (A does not have full row rank), "
                         "which the matrix-free setup cannot bound; give A dense")
    return {"L_A": L_A, "mu_tilde": low * (1 - LANCZOS_MARGIN) / prob.n}


def dense_K(prob, W1: np.ndarray, alpha, beta, gamma, s2, W2: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
    """K = diag(B1, B2) as a dense matrix on (x, y, X) (node-major blocks); B1 = [[A, alpha W'], [beta C, 0]],
    B2 = s2 [[blkdiag Ct], [gamma W2]] with W2 = W' (theory) or W'^{1/2} (practical) [reconstructed]."""
    W2 = W1 if W2 is None else W2
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
    K[R1 + R2 + R3:, Nx + Ny:] = s2 * gamma * np.kron(W2, np.eye(p))
    return K, {"Nx": Nx, "Ny": Ny, "NX": NX}


def sqrt_psd(M: np.ndarray) -> np.ndarray:
    """The PSD square root of a symmetric PSD matrix (setup only: W'^{1/2} for the practical mode)."""
    ev, V = np.linalg.eigh((M + M.T) / 2)
    return (V * np.sqrt(np.clip(ev, 0.0, None))) @ V.T


def make_setup(prob, variant: str = "cheb", bounds: str = "exact", rng=None, power_iters: int = 2000,
               aug: float = 1.0, require_strong: bool = True, augment_mode: str = "auto",
               practical: bool = False, deg_k: int | None = None, eta_scale: float = 1.0,
               deg_w: int | None = None) -> Setup:
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

    ``practical`` (the practical mode, not the theory constants; our choice): the consensus rows of K
    are gamma W'^{1/2} instead of gamma W' (K^T K then holds W' there, one W' product, not two, and the
    square root of that block's condition number; gamma's lambda_min(W')^2 becomes lambda_min(W'));
    W'^{1/2} is never applied: the iteration only uses K^T (K u - b'), whose consensus part is
    gamma^2 W' X. ``deg_k`` overrides the inner Chebyshev degree and ``eta_scale`` multiplies eta
    (theta = 1/(eta L_K') follows), ``deg_w`` the degree of W' = P(W); all meant to be picked by a tuning
    run.
    """
    import time

    t_setup = time.perf_counter()
    LANCZOS_LOG.clear()
    deg_k_given, deg_w_given = deg_k, deg_w
    if practical and prob.sparse:
        from icmlkit.lib.core.errors import UsageError

        raise UsageError("the practical mode (K = W'^{1/2} on the consensus rows) needs a dense problem (its "
                         "setup forms W'^{1/2} densely)")
    rng = rng if rng is not None else np.random.default_rng(0)
    n = prob.n
    W = prob.laplacian()
    if bounds == "exact":
        lmin, lmax = exact_bounds(W)
    else:
        lmin, lmax = power_bounds(lambda v: W @ v, n, rng, power_iters, project=lambda v: v - v.mean())
    chi = lmax / lmin
    if variant == "cheb":
        deg_w = max(1, math.ceil(math.sqrt(chi))) if deg_w_given is None else int(deg_w_given)
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
    wp_pow = wp_min if practical else wp_min ** 2
    gamma = math.sqrt((cn["sig_ct"] + cn["lmin_ct"]) / wp_pow) if prob.p and cn["sig_ct"] > 0 else \
        (1.0 / math.sqrt(wp_pow) if prob.p else 0.0)
    sp_ = (_OperatorSpectra if prob.sparse else _DenseSpectra)(prob, W, W1, (lmin, lmax, deg_w), variant,
                                                               alpha, beta, gamma, practical)
    s2, mu_k, L_k = sp_.s2, sp_.mu_k, sp_.L_k
    if variant == "cheb" and L_k > 0:
        deg_k = max(1, math.ceil(math.sqrt(L_k / mu_k))) if deg_k_given is None else int(deg_k_given)
        eps_k = cheb_eps(mu_k, L_k, deg_k)
        muK, LK = 1 - eps_k, 1 + eps_k
    else:
        deg_k, eps_k, muK, LK = 1, 0.0, mu_k, L_k
    # G = sum f_i + (r/2)||A x + alpha W'y - b||^2 (the sheet) on the active subspace; when that is not
    # strongly convex, G = sum f_i + (r/2)||K u - b'||^2 [reconstructed]
    modes = {"auto": ("coupled", "all"), "coupled": ("coupled",), "all": ("all",)}[augment_mode]
    for augment in modes:
        top = sp_.top_m if augment == "coupled" else L_k
        r = aug * cn["L_f"] / top if top > 0 else 0.0
        mu_g, L_g = sp_.g_bounds(augment, r)
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
    eta = eta_scale / (4 * tau * L_g)
    theta = 1.0 / (eta * LK) if LK > 0 else 0.0
    return Setup(variant=variant, lam_min=lmin, lam_max=lmax, chi=chi, deg_w=deg_w, wp_min=wp_min, wp_max=wp_max,
                 alpha=alpha, beta=beta, gamma=gamma, s2=s2, r=r, mu_k=mu_k, L_k=L_k, deg_k=deg_k, eps_k=eps_k,
                 mu_g=mu_g, L_g=L_g, L_f=cn["L_f"], mu_f=cn["mu_f"], kappa_f=cn["kappa_f"], kappa_ac=cn["kappa_ac"],
                 kappa_ct=cn["kappa_ct"], tau=tau, eta=eta, theta=theta,
                 bounds=bounds + ("+lanczos" if prob.sparse else ""), augment=augment,
                 consensus="sqrt" if practical else "wprime", practical=bool(practical or deg_k_given is not None
                                                                              or deg_w_given is not None
                                                                              or eta_scale != 1.0),
                 setup_seconds=round(time.perf_counter() - t_setup, 3), lanczos=[dict(r) for r in LANCZOS_LOG])


class _DenseSpectra:
    """Steps 3, 5 and 6 of ``make_setup`` on the dense K (small problems: exact eigen-solves)."""

    def __init__(self, prob, W, W1, wspec, variant, alpha, beta, gamma, practical=False):
        W2 = sqrt_psd(W1) if practical else W1
        K1, _ = dense_K(prob, W1, alpha, beta, gamma, 0.0)
        K2, _ = dense_K(prob, W1, 0.0, 0.0, gamma, 1.0, W2)
        top1 = float(np.linalg.norm(K1, 2) ** 2) if K1.size and np.abs(K1).sum() else 0.0
        top2 = float(np.linalg.norm(K2, 2) ** 2) if K2.size and np.abs(K2).sum() else 0.0
        self.s2 = math.sqrt(top1 / top2) if top1 > 0 and top2 > 0 else 1.0
        K, sz = dense_K(prob, W1, alpha, beta, gamma, self.s2, W2)
        KK = K @ K.T if K.shape[0] <= K.shape[1] else K.T @ K
        self.mu_k, self.L_k = exact_bounds(KK)  # K's kernel is not known in closed form: the dense eigen-solve
        Nx, Ny, NX = sz["Nx"], sz["Ny"], sz["NX"]
        self.lo, self.hi = prob.hessian_bounds()
        self.Hlo, self.Hhi = _assemble_f(prob, self.lo, Nx, Ny, NX), _assemble_f(prob, self.hi, Nx, Ny, NX)
        self.P = _active_basis(prob, Nx, Ny, NX)
        self.K = K
        self.M = np.zeros_like(K)
        self.M[:prob.n * prob.m] = K[:prob.n * prob.m]
        self.top_m = float(np.linalg.norm(self.M, 2) ** 2) if self.M.size and np.abs(self.M).sum() else 0.0

    def g_bounds(self, augment: str, r: float) -> tuple[float, float]:
        Mx = self.M if augment == "coupled" else self.K
        MtM = Mx.T @ Mx
        P = self.P
        if not P.shape[1]:
            return 0.0, 0.0
        if self.lo is self.hi:
            ev = np.linalg.eigvalsh(P.T @ (self.Hlo + r * MtM) @ P)
            return float(ev[0]), float(ev[-1])
        return (float(np.linalg.eigvalsh(P.T @ (self.Hlo + r * MtM) @ P)[0]),
                float(np.linalg.eigvalsh(P.T @ (self.Hhi + r * MtM) @ P)[-1]))


class _OperatorSpectra:
    """Steps 3, 5 and 6 of ``make_setup`` matrix-free (sparse A_i): K, K^T are the nodes' own products
    (``NodeOps``, W' by its Chebyshev recursion), f's curvature bounds are products
    (``Problem.curvature_ops``), and every spectral bound is a Lanczos run (``eigsh``) with the
    LANCZOS_MARGIN safety margin. lambda_min^+(K^T K) is read as lambda_min(K K^T), so K must have full
    row rank (a singular K K^T is refused); lambda_min of G on the active subspace is found with the
    complement of that subspace shifted to L_G."""

    def __init__(self, prob, W, W1, wspec, variant, alpha, beta, gamma, practical=False):
        from types import SimpleNamespace

        from icmlkit.lib.core.errors import UsageError
        from icmlkit.lib.solve_decentralized.methods import NodeOps

        lmin, lmax, deg_w = wspec
        self.prob = prob
        probe = SimpleNamespace(variant=variant, lam_min=lmin, lam_max=lmax, deg_w=deg_w, alpha=alpha, beta=beta,
                                gamma=gamma, s2=0.0)
        self.ops = ops = NodeOps(prob.A, prob.b, prob.C, prob.c, prob.Ct, prob.ct, None, probe, lambda V: W @ V)
        n, self.N = prob.n, ops.N
        self.R = ops.m + ops.rr + ops.ss + ops.p
        top1 = lanczos_top(self._ktk, n * self.N)
        probe.alpha, probe.beta, probe.s2 = 0.0, 0.0, 1.0
        top2 = lanczos_top(self._ktk, n * self.N) if prob.p else 0.0
        self.s2 = math.sqrt(top1 / top2) if top1 > 0 and top2 > 0 else 1.0
        probe.alpha, probe.beta, probe.s2 = alpha, beta, self.s2
        L_k = lanczos_top(self._kkt, n * self.R)
        mu_k = lanczos_bottom(self._kkt, n * self.R)
        if L_k > 0 and mu_k <= 1e-9 * L_k:
            raise UsageError("the matrix-free setup (sparse A) needs K of full row rank: K K^T is singular here "
                             "(local C rows or constraints on x~); give A dense")
        self.mu_k, self.L_k = mu_k * (1 - LANCZOS_MARGIN), L_k * (1 + LANCZOS_MARGIN)
        self.top_m = lanczos_top(lambda v: self._ktk(v, coupled=True), n * self.N)
        self.lo, self.hi = prob.curvature_ops()
        self.mask = prob.mask()

    def _u(self, v):
        return v.reshape(self.prob.n, self.N)

    def _ktk(self, v, coupled: bool = False):
        rows = self.ops.K(self._u(v))
        if coupled:
            rows[:, self.ops.m:] = 0.0
        return self.ops.KT(rows).reshape(-1)

    def _kkt(self, v):
        return self.ops.K(self.ops.KT(v.reshape(self.prob.n, self.R))).reshape(-1)

    def _project(self, u):
        """Onto the active subspace: real x coordinates, y orthogonal to 1 (x) I_m, every x~ copy."""
        x, y, X = self.ops.split(u)
        return np.concatenate([x * self.mask, y - y.mean(0, keepdims=True), X], 1)

    def _g(self, v, H, augment, r):
        u = self._project(self._u(v))
        x, y, X = self.ops.split(u)
        h = H(np.concatenate([x, X], 1))
        dm = self.ops.dm
        out = np.concatenate([h[:, :dm], np.zeros_like(y), h[:, dm:]], 1)
        if r > 0:
            out = out + r * self._u(self._ktk(u.reshape(-1), coupled=augment == "coupled"))
        return self._project(out).reshape(-1)

    def g_bounds(self, augment: str, r: float) -> tuple[float, float]:
        dim = self.prob.n * self.N
        L_g = lanczos_top(lambda v: self._g(v, self.hi, augment, r), dim) * (1 + LANCZOS_MARGIN)

        def shifted(v):   # the complement of the active subspace at L_g: out of the way of lambda_min
            return self._g(v, self.lo, augment, r) + L_g * (v - self._project(self._u(v)).reshape(-1))
        return lanczos_bottom(shifted, dim) * (1 - LANCZOS_MARGIN), L_g


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
