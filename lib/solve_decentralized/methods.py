"""Algorithm 1 (APAPC + Chebyshev) and the baselines, written on node-local blocks.

Every state array has one row per node held here (all n nodes in the simulator, one node per
process in the torch.distributed backend). The only operation that involves other nodes is
``mix(V)``: row i becomes sum_j W_ij V_j over i's neighbours (and i itself), i.e. ONE round of
neighbour exchanges; it is counted. Products by A_i, C_i, Ct_i and gradients of f_i are local and
counted too. Nothing global (no all_reduce, no global norm) happens inside an iteration: error and
residual are computed by the monitor, outside the algorithm's data path.
"""
from __future__ import annotations

import math

import numpy as np

from icmlkit.lib.solve_decentralized.problem import a_mul, a_tmul
from icmlkit.lib.solve_decentralized.spectral import Setup, cheb_T, chebyshev_solve


class Counters(dict):
    """What a run costs, counted where it happens (vectorised: one increment per operation on all the
    nodes held here, never per message). rounds: rounds of neighbour exchanges; msg_floats: floats
    each node sends to EACH neighbour, summed over rounds (every node sends the same width, so the total
    traffic is msg_floats x the number of directed links, :func:`floats_sent`); floats: traffic counted
    directly (centralized APAPC's server links); a_mults: products by A, C, Ct; the local oracle, per
    node: grads (gradient calls of f_i), prox (prox of f_i, exact for quadratics), solves (exact local
    (KKT) solves)."""

    def __init__(self):
        super().__init__(rounds=0, msg_floats=0, floats=0, a_mults=0, grads=0, prox=0, solves=0)

    def exchange(self, width: int, rounds: int = 1) -> None:
        """``rounds`` rounds in which every node sends ``width`` floats to each neighbour."""
        self["rounds"] += rounds
        self["msg_floats"] += int(width) * rounds


def n_links(W) -> int:
    """Directed links of the graph (2 |E|): the messages of one round."""
    W = np.asarray(W)
    return int(np.count_nonzero(W) - np.count_nonzero(np.diag(W)))


def floats_sent(cnt, links: int) -> int:
    """Total floats sent over all links."""
    return int(cnt.get("floats", 0)) + int(cnt.get("msg_floats", 0)) * int(links)


def oracle_calls(cnt) -> int:
    """Local-oracle calls per node: gradients + prox steps + exact local solves."""
    return int(cnt.get("grads", 0)) + int(cnt.get("prox", 0)) + int(cnt.get("solves", 0))


class NodeOps:
    """The reformulation of (P) (method sheet, steps 1-4, [reconstructed]) on the rows held here.

    u = (x, y, X) per node: x in R^dmax (padded), y in R^m (auxiliary of the coupled constraint),
    X in R^p (the node's copy of x~). K u - b' per node:
    (A_i x_i + alpha (W'y)_i - b_i, beta (C_i x_i - c_i), s2 (Ct_i X_i - ct_i), s2 gamma (W'X)_i).
    """

    def __init__(self, A, b, C, c, Ct, ct, grad_fn, setup: Setup, mix, counters: Counters | None = None):
        self.A, self.b, self.C, self.c, self.Ct, self.ct = A, b, C, c, Ct, ct
        self.grad_fn, self.s, self._mix = grad_fn, setup, mix
        self.cnt = counters if counters is not None else Counters()
        self.nl, self.m, self.dm = A.shape
        self.p = Ct.shape[2]
        self.rr, self.ss = C.shape[1], Ct.shape[1]
        self.N = self.dm + self.m + self.p
        s = setup
        self.bprime = np.concatenate([b, s.beta * c, s.s2 * ct, np.zeros((self.nl, self.p))], 1)

    def zeros(self):
        return np.zeros((self.nl, self.N))

    def mix(self, V):
        self.cnt.exchange(V.shape[1])
        return self._mix(V)

    def split(self, u):
        dm, m = self.dm, self.m
        return u[:, :dm], u[:, dm:dm + m], u[:, dm + m:]

    def wprime(self, V):
        """W' V: deg_w rounds (Chebyshev recursion in W, [reconstructed] W' = I - T_k(Z)/T_k(c0))."""
        if V.shape[1] == 0:
            return V
        s = self.s
        if s.variant != "cheb":
            return self.mix(V) / s.lam_max
        L, mu = s.lam_max, s.lam_min
        if L - mu < 1e-14 * L:
            return self.mix(V) / L
        c0 = (L + mu) / (L - mu)

        def Z(v):
            return ((L + mu) * v - 2 * self.mix(v)) / (L - mu)

        t0, t1 = V, Z(V)
        for _ in range(s.deg_w - 1):
            t0, t1 = t1, 2 * Z(t1) - t0
        return V - t1 / cheb_T(s.deg_w, c0)

    def K(self, u):
        s = self.s
        x, y, X = self.split(u)
        self.cnt["a_mults"] += 1
        WyX = self.wprime(np.concatenate([y, X], 1))
        Wy, WX = WyX[:, :self.m], WyX[:, self.m:]
        r1 = a_mul(self.A, x) + s.alpha * Wy
        r2 = s.beta * np.einsum("nrd,nd->nr", self.C, x)
        r3 = s.s2 * np.einsum("nsp,np->ns", self.Ct, X)
        r4 = s.s2 * s.gamma * WX
        return np.concatenate([r1, r2, r3, r4], 1)

    def KT(self, rows):
        s = self.s
        m, rr, ss = self.m, self.rr, self.ss
        r1, r2, r3, r4 = rows[:, :m], rows[:, m:m + rr], rows[:, m + rr:m + rr + ss], rows[:, m + rr + ss:]
        self.cnt["a_mults"] += 1
        W14 = self.wprime(np.concatenate([r1, r4], 1))
        x = a_tmul(self.A, r1) + s.beta * np.einsum("nrd,nr->nd", self.C, r2)
        y = s.alpha * W14[:, :m]
        X = s.s2 * np.einsum("nsp,ns->np", self.Ct, r3) + s.s2 * s.gamma * W14[:, m:]
        return np.concatenate([x, y, X], 1)

    def residual_grad(self, u):
        """K^T (K u - b'). Practical mode (consensus rows gamma W'^{1/2}): the consensus part of
        K^T K is (s2 gamma)^2 W' X, formed from the W' X of the first exchange, so the second exchange
        carries only the coupled residual (m floats, not m + p) and W'^{1/2} is never applied."""
        if getattr(self.s, "consensus", "wprime") != "sqrt":
            return self.KT(self.K(u) - self.bprime)
        s = self.s
        m, rr = self.m, self.rr
        x, y, X = self.split(u)
        self.cnt["a_mults"] += 2
        WyX = self.wprime(np.concatenate([y, X], 1))
        Wy, WX = WyX[:, :m], WyX[:, m:]
        r1 = a_mul(self.A, x) + s.alpha * Wy - self.b
        r2 = s.beta * np.einsum("nrd,nd->nr", self.C, x) - self.bprime[:, m:m + rr]
        r3 = s.s2 * np.einsum("nsp,np->ns", self.Ct, X) - self.bprime[:, m + rr:m + rr + self.ss]
        gx = a_tmul(self.A, r1) + s.beta * np.einsum("nrd,nr->nd", self.C, r2)
        gy = s.alpha * self.wprime(r1)
        gX = s.s2 * np.einsum("nsp,ns->np", self.Ct, r3) + (s.s2 * s.gamma) ** 2 * WX
        return np.concatenate([gx, gy, gX], 1)

    def precond(self, u):
        """Algorithm 1's dual direction: Chebyshev iteration of degree deg_k in K^T K (variant cheb),
        or plain K^T (K u - b')."""
        s = self.s
        if s.variant == "cheb" and s.deg_k >= 1 and s.L_k > 0:
            v = chebyshev_solve(self.residual_grad, u, s.mu_k, s.L_k, s.deg_k)
            return u - v
        return self.residual_grad(u)

    def grad(self, u):
        """grad G(u). augment = coupled (the sheet): G = sum_i f_i(x_i, X_i) + (r/2)||A x + alpha W'y - b||^2
        (2 deg_w rounds: W'y, then W' of the residual); augment = all [reconstructed]: (r/2)||K u - b'||^2,
        used when the first is not strongly convex (copies of x~ that no f_i depends on), at the same
        2 deg_w rounds (the W' products of y and X travel together)."""
        s = self.s
        x, y, X = self.split(u)
        g = self.grad_fn(np.concatenate([x, X], 1))
        self.cnt["grads"] += 1
        out = np.concatenate([g[:, :self.dm], np.zeros_like(y), g[:, self.dm:]], 1)
        if s.r > 0 and s.augment == "all":
            out = out + s.r * self.residual_grad(u)
        elif s.r > 0 and self.m:
            self.cnt["a_mults"] += 1
            res = a_mul(self.A, x) + s.alpha * self.wprime(y) - self.b
            out[:, :self.dm] += s.r * a_tmul(self.A, res)
            out[:, self.dm:self.dm + self.m] = s.r * s.alpha * self.wprime(res)
        return out

    def primal(self, u):
        """(x, X): what the error is measured on (never y)."""
        x, _, X = self.split(u)
        return x, X


def apapc(ops, s: Setup, iterations: int, monitor=None, state=None):
    """Algorithm 1 (APAPC, Salim-Condat-Kovalev-Richtarik 2022) on min G(u) s.t. K u = b':

    u_g = tau u + (1 - tau) u_f;  g = grad G(u_g);
    u^ = (u - eta (g - mu u_g + z)) / (1 + eta mu);   z <- z + theta P(u^)      (predictor)
    u+ = (u - eta (g - mu u_g + z)) / (1 + eta mu)                             (corrector)
    u_f = u_g + 2 tau / (2 - tau) (u+ - u)
    with P = the Chebyshev iteration in K^T K (or K^T (K . - b') for plain APAPC).
    ``monitor(k, ops, u)`` returns True to stop. Returns (u, k)."""
    tau, eta, theta, mu = s.tau, s.eta, s.theta, s.mu_g
    u, uf, z = (ops.zeros(), ops.zeros(), ops.zeros()) if state is None else state
    k = 0
    for k in range(1, iterations + 1):
        ug = tau * u + (1 - tau) * uf
        g = ops.grad(ug)
        base = u - eta * (g - mu * ug)
        uhat = (base - eta * z) / (1 + eta * mu)
        z = z + theta * ops.precond(uhat)
        unew = (base - eta * z) / (1 + eta * mu)
        uf = ug + (2 * tau / (2 - tau)) * (unew - u)
        u = unew
        if monitor is not None and monitor(k, ops, u):
            break
    return u, k


# --------------------------------------------------------------------------- centralized APAPC


class CentralOps:
    """Centralized APAPC: one server holds (x_1..x_n, x~) and the constraint matrix E of (P); a
    gradient costs 2 rounds (broadcast x~, gather gradients), each E or E^T product 1 round."""

    def __init__(self, prob, E, e, setup: Setup):
        from icmlkit.lib.solve_decentralized.reference import _layout

        self.prob, self.E, self.e, self.s = prob, E, e, setup
        self.offs, self.nx, self.idx = _layout(prob)
        self.cnt = Counters()
        self.N = self.nx + prob.p

    def zeros(self):
        return np.zeros((1, self.N))

    def unpack(self, v):
        prob = self.prob
        x = np.zeros((prob.n, prob.dmax))
        for i in range(prob.n):
            x[i, :prob.d[i]] = v[self.offs[i]:self.offs[i + 1]]
        return x, v[self.nx:]

    def grad(self, u):
        prob = self.prob
        self.cnt["grads"] += 1
        self.cnt["rounds"] += 2   # broadcast x~ to the n nodes, gather their gradients
        self.cnt["floats"] += 2 * self.prob.n * self.prob.p + self.nx
        x, xt = self.unpack(u[0])
        w = np.concatenate([x, np.repeat(xt[None], prob.n, 0)], 1)
        G = prob.grad(w)
        g = np.zeros(self.N)
        for i in range(prob.n):
            g[self.idx[i]] += G[i][prob.real_w(i)]
        if self.s.r > 0 and self.E.shape[0]:
            self.cnt["a_mults"] += 2
            g = g + self.s.r * self.E.T @ (self.E @ u[0] - self.e)
        return g[None]

    def residual_grad(self, u):
        self.cnt["a_mults"] += 2
        self.cnt["rounds"] += 2
        self.cnt["floats"] += 2 * self.N   # the vector out to the nodes and back
        return (self.E.T @ (self.E @ u[0] - self.e))[None]

    def precond(self, u):
        s = self.s
        if s.deg_k >= 1 and s.L_k > 0:
            return u - chebyshev_solve(self.residual_grad, u, s.mu_k, s.L_k, s.deg_k)
        return self.residual_grad(u)

    def primal(self, u):
        x, xt = self.unpack(u[0])
        return x, np.repeat(xt[None], self.prob.n, 0)


def central_setup(prob, E, aug: float = 1.0) -> Setup:
    """Constants of centralized APAPC + Chebyshev on min f(v) + (r/2)||E v - e||^2 s.t. E v = e."""
    from icmlkit.lib.solve_decentralized.reference import _layout
    from icmlkit.lib.solve_decentralized.spectral import cheb_eps, condition_numbers, exact_bounds

    cn = condition_numbers(prob)
    offs, nx, idx = _layout(prob)
    N = nx + prob.p
    lo, hi = prob.hessian_bounds()
    Hlo, Hhi = np.zeros((N, N)), np.zeros((N, N))
    for i in range(prob.n):
        real = prob.real_w(i)
        Hlo[np.ix_(idx[i], idx[i])] += lo[i][np.ix_(real, real)]
        Hhi[np.ix_(idx[i], idx[i])] += hi[i][np.ix_(real, real)]
    mu_k, L_k = exact_bounds(E @ E.T) if E.shape[0] else (0.0, 0.0)
    r = aug * cn["L_f"] / L_k if L_k > 0 else 0.0
    EtE = E.T @ E if E.shape[0] else np.zeros((N, N))
    mu_g = float(np.linalg.eigvalsh(Hlo + r * EtE)[0])
    L_g = float(np.linalg.eigvalsh(Hhi + r * EtE)[-1])
    if L_k > 0:
        deg_k = max(1, math.ceil(math.sqrt(L_k / mu_k)))
        eps = cheb_eps(mu_k, L_k, deg_k)
    else:
        deg_k, eps = 0, 0.0
    muK, LK = 1 - eps, 1 + eps
    tau = min(1.0, 0.5 * math.sqrt((LK / muK) / (L_g / mu_g)))
    eta = 1 / (4 * tau * L_g)
    return Setup(variant="central", lam_min=0.0, lam_max=0.0, chi=1.0, deg_w=0, wp_min=1.0, wp_max=1.0,
                 alpha=0.0, beta=0.0, gamma=0.0, s2=1.0, r=r, mu_k=mu_k, L_k=L_k, deg_k=deg_k, eps_k=eps,
                 mu_g=mu_g, L_g=L_g, L_f=cn["L_f"], mu_f=cn["mu_f"], kappa_f=cn["kappa_f"], kappa_ac=cn["kappa_ac"],
                 kappa_ct=cn["kappa_ct"], tau=tau, eta=eta, theta=1 / (eta * LK) if L_k > 0 else 0.0, bounds="exact")


# --------------------------------------------------------------------------- consensus baselines


class ConsensusOps:
    """State w = (x_i, X_i) per node; only the X columns are mixed (x_i is private)."""

    def __init__(self, grad_fn, dm, mix, lam_max):
        self.grad_fn, self.dm, self._mix, self.lam_max = grad_fn, dm, mix, lam_max
        self.cnt = Counters()

    def mixing(self, V):
        """W_mix V with W_mix = I - W/lambda_max(W) on the X columns (identity on x)."""
        self.cnt.exchange(V.shape[1] - self.dm)
        out = V.copy()
        X = V[:, self.dm:]
        out[:, self.dm:] = X - self._mix(X) / self.lam_max
        return out

    def grad(self, w):
        self.cnt["grads"] += 1
        return self.grad_fn(w)

    def primal(self, w):
        return w[:, :self.dm], w[:, self.dm:]


def extra(ops: ConsensusOps, w0, step: float, iterations: int, monitor=None):
    """EXTRA (Shi et al. 2015): w1 = W w0 - a g0; w_{k+2} = (I + W) w_{k+1} - (I + W)/2 w_k
    - a (g_{k+1} - g_k). One round per iteration (W w_k is reused)."""
    g0 = ops.grad(w0)
    Ww0 = ops.mixing(w0)
    w1 = Ww0 - step * g0
    k = 1
    if monitor is not None and monitor(1, ops, w1):
        return w1, 1
    for k in range(2, iterations + 1):
        g1 = ops.grad(w1)
        Ww1 = ops.mixing(w1)
        w2 = w1 + Ww1 - 0.5 * (w0 + Ww0) - step * (g1 - g0)
        w0, Ww0, g0, w1 = w1, Ww1, g1, w2
        if monitor is not None and monitor(k, ops, w1):
            break
    return w1, k


def gradient_tracking(ops: ConsensusOps, w0, step: float, iterations: int, monitor=None):
    """Gradient tracking (DIGing, Nedic-Olshevsky-Shi 2017): w+ = W w - a s; s+ = W s + g(w+) - g(w).
    One round per iteration ([w, s] exchanged together)."""
    g = ops.grad(w0)
    w, sdir = w0, g
    k = 0
    for k in range(1, iterations + 1):
        Ww = ops.mixing(w)
        ops.cnt["rounds"] -= 1  # w and s travel in the same round
        Ws = ops.mixing(sdir)
        wn = Ww - step * sdir
        gn = ops.grad(wn)
        sdir = Ws + gn - g
        w, g = wn, gn
        if monitor is not None and monitor(k, ops, w):
            break
    return w, k


# --------------------------------------------------------------------------- Tracking-ADMM


class TrackingADMM:
    """Tracking-ADMM (Falsone, Notarnicola, Notarstefano, Prandini 2020) for constraint-coupled
    problems, [reconstructed] from the paper's description: node i keeps v_i = (x_i, x~_i), the
    tracker d_i of the average coupled violation and a multiplier l_i;
      v_i+ = argmin_{E_i v = e_i} f_i(v) + lbar_i^T Ab_i v + rho/2 ||Ab_i v - Ab_i v_i + dbar_i||^2
      d_i+ = dbar_i + Ab_i v_i+ - Ab_i v_i;   l_i+ = lbar_i + rho d_i+
    with dbar, lbar the W_mix-averages (one round). The shared variable enters as the coupled
    constraint sum_i (W[:, i] (x) I_p) x~_i = 0 (consensus), the local C_i, Ct_i as E_i.

    ``local_steps = None``: the v-step is an exact local KKT solve (quadratic f_i only; one local
    solve per node and iteration). ``local_steps = T`` (oracle-matched, [reconstructed]: our variant,
    so that its local-oracle count is comparable with the first-order methods): the v-step is T steps
    of Nesterov's accelerated projected gradient on the same local problem, warm-started at v_i,
    step 1/L_i with L_i = L(f_i) + rho lambda_max(Ab_i^T Ab_i) and momentum from mu(f_i); the
    projection onto {E_i v = e_i} is local linear algebra (no oracle call); T gradient calls per
    node and iteration. Any smooth loss."""

    def __init__(self, prob, mix, lam_max, rho: float, local_steps: int | None = None):
        n, dm, p, m = prob.n, prob.dmax, prob.p, prob.m
        W = prob.laplacian()
        self.prob, self._mix, self.lam_max, self.rho = prob, mix, lam_max, rho
        self.local_steps = local_steps
        self.cnt = Counters()
        D = dm + p
        self.D = D
        self.Ab = np.zeros((n, m + n * p, D))
        self.bb = np.zeros((n, m + n * p))
        self.Ab[:, :m, :dm] = prob.A
        self.bb[:, :m] = prob.b
        for i in range(n):
            self.Ab[i, m:, dm:] = np.kron(W[:, i:i + 1], np.eye(p))
        mask = prob.mask()
        Es, es = [], []
        for i in range(n):
            E = np.zeros((prob.C.shape[1] + prob.Ct.shape[1], D))
            E[:prob.C.shape[1], :dm] = prob.C[i]
            E[prob.C.shape[1]:, dm:] = prob.Ct[i]
            e = np.concatenate([prob.c[i], prob.ct[i]])
            keep = np.abs(E).sum(1) > 0
            Es.append(E[keep])
            es.append(e[keep])
        pads = [np.concatenate([~mask[i], np.zeros(p, bool)]) for i in range(n)]
        if local_steps is None:
            self.inv, self.Erows = [], []
            for i in range(n):
                E, k = Es[i], Es[i].shape[0]
                H = prob.Q[i] + rho * self.Ab[i].T @ self.Ab[i] + np.diag(pads[i].astype(float))
                KKT = np.block([[H, E.T], [E, np.zeros((k, k))]])
                self.inv.append(np.linalg.pinv(KKT))
                self.Erows.append(es[i])
            same = len({M.shape for M in self.inv}) == 1
            # one batched product for all nodes when their KKT systems have one size (vectorised)
            self.inv_stack = np.stack(self.inv) if same else None
            self.e_stack = np.stack(self.Erows) if same else None
        else:
            if local_steps < 1:
                raise ValueError("local_steps must be >= 1")
            P = np.zeros((n, D, D))
            v0 = np.zeros((n, D))
            for i in range(n):   # the padded coordinates are pinned at 0 by extra rows
                E = np.concatenate([Es[i], np.eye(D)[pads[i]]], 0)
                e = np.concatenate([es[i], np.zeros(int(pads[i].sum()))])
                Ep = np.linalg.pinv(E) if E.shape[0] else np.zeros((D, 0))
                P[i] = np.eye(D) - Ep @ E
                v0[i] = Ep @ e
            self.P, self.v0 = P, v0
            Ls, mus = prob.smoothness()
            top = np.array([float(np.linalg.eigvalsh(self.Ab[i].T @ self.Ab[i])[-1]) for i in range(n)])
            L = Ls + rho * top
            mu = np.maximum(mus, 1e-12 * L)
            q = np.sqrt(L / mu)
            self.step_loc = 1.0 / L
            self.mom = (q - 1) / (q + 1)

    def primal(self, v):
        return v[:, :self.prob.dmax], v[:, self.prob.dmax:]

    def _project(self, v):
        return self.v0 + np.einsum("nij,nj->ni", self.P, v - self.v0)

    def _exact(self, lbar, dbar, Av):
        prob, rho = self.prob, self.rho
        rhs_v = -(prob.q + np.einsum("nkd,nk->nd", self.Ab, lbar + rho * (dbar - Av)))
        self.cnt["solves"] += 1
        if self.inv_stack is not None:
            sol = np.einsum("nij,nj->ni", self.inv_stack, np.concatenate([rhs_v, self.e_stack], 1))
            return sol[:, :self.D]
        return np.stack([(self.inv[i] @ np.concatenate([rhs_v[i], self.Erows[i]]))[:self.D]
                         for i in range(prob.n)])

    def _gradient_steps(self, v, lbar, dbar, Av):
        """T accelerated projected-gradient steps on the local problem, warm-started at v."""
        rho = self.rho
        shift = lbar + rho * (dbar - Av)
        w_prev, w = v, v
        a, mom = self.step_loc[:, None], self.mom[:, None]
        for _ in range(self.local_steps):
            yv = w + mom * (w - w_prev)
            g = self.prob.grad(yv) + np.einsum("nkd,nk->nd", self.Ab, shift + rho * np.einsum("nkd,nd->nk", self.Ab, yv))
            w_prev, w = w, self._project(yv - a * g)
        self.cnt["grads"] += self.local_steps
        return w

    def run(self, iterations: int, monitor=None):
        n = self.prob.n
        v = np.zeros((n, self.D)) if self.local_steps is None else self.v0.copy()
        d = np.einsum("nkd,nd->nk", self.Ab, v) - self.bb
        lam = np.zeros_like(d)
        k = 0
        for k in range(1, iterations + 1):
            both = np.concatenate([d, lam], 1)
            self.cnt.exchange(both.shape[1])
            mixed = both - self._mix(both) / self.lam_max
            dbar, lbar = mixed[:, :d.shape[1]], mixed[:, d.shape[1]:]
            Av = np.einsum("nkd,nd->nk", self.Ab, v)
            vn = self._exact(lbar, dbar, Av) if self.local_steps is None else self._gradient_steps(v, lbar, dbar, Av)
            self.cnt["a_mults"] += 2
            d = dbar + np.einsum("nkd,nd->nk", self.Ab, vn) - Av
            lam = lbar + self.rho * d
            v = vn
            if monitor is not None and monitor(k, self, v):
                break
        return v, k


# --------------------------------------------------------------------------- DPMM [reconstructed]


def dpmm_prox(prob, c: float):
    """The local proximal step of DPMM, prox_{c f_i}(v) = argmin_w f_i(w) + ||w - v||^2 / (2c), on the
    node rows (x_i, X_i): exact for quadratics ((I + c Q_i)^{-1} (v - c q_i), one local solve per node,
    factorised once); ``None`` for other losses (DPMM then linearises f_i: one gradient step)."""
    if prob.loss != "quadratic":
        return None
    D = prob.D
    inv = np.linalg.inv(np.eye(D)[None] + c * prob.Q)
    shift = c * prob.q

    def prox(v):
        return np.einsum("nij,nj->ni", inv, v - shift)

    return prox


def dpmm(ops: NodeOps, rho: float, c: float, iterations: int, prox=None, monitor=None):
    """DPMM, a decentralized proximal method of multipliers, [reconstructed]: no primary source for
    the DPMM baseline of the predecessor paper was found, so this is the standard (linearised) proximal
    method of multipliers (Rockafellar 1976; linearised as in Yang-Yuan 2013) run on the same node-local
    reformulation K u = b' as plain APAPC (u = (x, y, X); K built with W, not W': the coupled constraint
    through the auxiliary y, A x - b + alpha (W/lambda_max) y = 0, the consensus of the copies of x~
    through W X = 0, the local C_i, Ct_i rows); node i keeps the multipliers l_i of its own rows:

      g      = K^T (l + rho (K u - b'))            (K^T: 1 round; the multipliers of the coupled and
                                                     consensus rows go to the neighbours)
      u+     = prox_{c f}(u - c g)                 (local; exact for quadratics, a gradient step else)
      l+     = l + rho (K u+ - b')                 (K u+: 1 round, the residual reused by the next g)

    with c = 0.99 / (rho lambda_max(K^T K)) (+ L_f in the linearised case), the step rule under which
    the linearised method converges. 2 rounds, 2 K-products and one local prox (counted as a gradient
    call) per iteration, plus one round for K u^0. ``monitor(k, ops, u)`` returns True to stop."""
    u = ops.zeros()
    lam = np.zeros_like(ops.bprime)
    res = ops.K(u) - ops.bprime
    k = 0
    for k in range(1, iterations + 1):
        g = ops.KT(lam + rho * res)
        v = u - c * g
        x, y, X = ops.split(v)
        if prox is not None:
            w = prox(np.concatenate([x, X], 1))
            ops.cnt["prox"] += 1
        else:
            ux, _, uX = ops.split(u)
            w = np.concatenate([x, X], 1) - c * ops.grad_fn(np.concatenate([ux, uX], 1))
            ops.cnt["grads"] += 1
        u = np.concatenate([w[:, :ops.dm], y, w[:, ops.dm:]], 1)
        res = ops.K(u) - ops.bprime
        lam = lam + rho * res
        if monitor is not None and monitor(k, ops, u):
            break
    return u, k


# --------------------------------------------------------------------------- EXTRA on the dual [reconstructed]


class DualConsensusOps(ConsensusOps):
    """EXTRA / gradient tracking for the constrained problems, [reconstructed]: run on the dual, which
    is a consensus problem. With Tracking-ADMM's node data (v_i = (x_i, x~_i), the coupled rows
    Ab_i = [A_i, 0; 0, W[:, i] (x) I_p] with right-hand side (b_i, 0), the local rows E_i v = e_i), node i
    keeps a copy l_i of the multiplier of sum_i (Ab_i v_i - bb_i) = 0 and
      phi_i(l) = -min_{E_i v = e_i} f_i(v) + l^T (Ab_i v - bb_i),   grad phi_i(l) = -(Ab_i v_i(l) - bb_i)
    with v_i(l) one exact local KKT solve (quadratic f only); sum_i phi_i is minimised over consensual l by
    the consensus method, and the primal iterate is v_i(l_i). One round per iteration (the multipliers)."""

    def __init__(self, prob, mix, lam_max):
        self.t = TrackingADMM(prob, mix, lam_max, 0.0)
        self.prob = prob
        super().__init__(self._dual_grad, 0, mix, lam_max)
        self.k_rows = self.t.Ab.shape[1]
        Ls = []
        for i in range(prob.n):
            Hinv = self.t.inv[i][:self.t.D, :self.t.D]
            Ls.append(float(np.linalg.eigvalsh(self.t.Ab[i] @ Hinv @ self.t.Ab[i].T)[-1]))
        self.L_dual = max(Ls)

    def _v(self, lam):
        t = self.t
        return t._exact(lam, np.zeros_like(lam), np.zeros_like(lam))

    def grad(self, w):
        """One dual gradient = one exact local solve per node."""
        self.cnt["solves"] += 1
        return self.grad_fn(w)

    def _dual_grad(self, lam):
        self.cnt["a_mults"] += 2
        v = self._v(lam)
        return -(np.einsum("nkd,nd->nk", self.t.Ab, v) - self.t.bb)

    def primal(self, lam):
        v = self._v(lam)
        return v[:, :self.prob.dmax], v[:, self.prob.dmax:]
