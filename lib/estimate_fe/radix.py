"""The radix decomposition of CARD (method sheet step 3) and the Beta-mixture residual density.

A coordinate y on a free axis lies in a box [lo, lo + a). With t = (y - lo)/a in [0, 1) and base r,
depth L, t = sum_k d_k r^-k + r^-L * u with digits d_k in {0..r-1} and a residual u in [0, 1).
Digit k of atom i, taken jointly over its 3 axes, is one token d_x r^2 + d_y r + d_z in
{0..r^3-1}. The map y <-> (digits, u) is a piecewise translation and scaling, so

    log q(y) = sum log P(tokens) + sum_free axes [log p_BMM(u) + L log r - log a]

exactly (the constant L log r - log a per free axis is the Jacobian of u -> y). Axes that the gauge
fixes (see :mod:`icmlkit.lib.estimate_fe.gauge`) carry digit 0 and no residual density. Everything here is
vectorised tensor code in float64 (the digit extraction needs the precision); the map lives on
the device of its tensors (:meth:`RadixMap.to`, called by the model's ``.to(device)``).
"""
from __future__ import annotations

import math

import torch

EPS_U = 1e-7  # residuals are clamped into [EPS_U, 1 - EPS_U] before the Beta log-density


class RadixMap:
    """Bijection between coordinates ``y`` (B, N, 3) and (tokens (B, L, N), residuals (B, N, 3)).

    ``lo`` (N, 3) is the lower corner of the box per atom and axis, ``a`` the box size (one number),
    ``free`` (N, 3) a boolean mask of the axes that carry density.
    """

    def __init__(self, lo, a: float, free, r: int = 4, L: int = 3):
        self.lo = torch.as_tensor(lo, dtype=torch.float64)
        self.a = float(a)
        self.free = torch.as_tensor(free, dtype=torch.bool)
        self.r, self.L = int(r), int(L)
        self.n_atoms = self.lo.shape[0]
        self._w = torch.tensor([r * r, r, 1], dtype=torch.long, device=self.lo.device)

    def to(self, device) -> "RadixMap":
        """This map with its tensors on ``device``."""
        return RadixMap(self.lo.to(device), self.a, self.free.to(device), self.r, self.L)

    def _scale(self, levels: int) -> torch.Tensor:
        return torch.tensor([self.r ** -(k + 1) for k in range(levels)], dtype=torch.float64, device=self.lo.device)

    # ---------------------------------------------------------------- the map
    def t_of(self, y: torch.Tensor) -> torch.Tensor:
        """Unit-box coordinates t in [0,1) (fixed axes set to 0)."""
        t = (y.to(torch.float64) - self.lo) / self.a
        return torch.where(self.free, t, torch.zeros_like(t))

    def inside(self, y: torch.Tensor) -> torch.Tensor:
        """(B,) True where every free coordinate lies in its box."""
        t = (y.to(torch.float64) - self.lo) / self.a
        ok = (t >= 0) & (t < 1) | ~self.free
        return ok.flatten(1).all(1)

    def encode(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """y (B,N,3) -> tokens (B,L,N) int64 and residuals u (B,N,3) in [0,1) (0 on fixed axes)."""
        t = self.t_of(y).clamp(0.0, 1.0 - 1e-15)
        scaled = t * (self.r ** self.L)
        cells = torch.floor(scaled)
        u = scaled - cells
        cells = cells.long()
        digits = []
        for k in range(self.L):  # digit k+1 (most significant first)
            digits.append((cells // (self.r ** (self.L - 1 - k))) % self.r)
        d = torch.stack(digits, 1)  # (B, L, N, 3)
        tokens = (d * self._w).sum(-1)
        u = torch.where(self.free, u, torch.zeros_like(u))
        return tokens, u

    def digits_of(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (..., ) -> digits (..., 3)."""
        return torch.stack([tokens // (self.r * self.r), (tokens // self.r) % self.r, tokens % self.r], -1)

    def decode(self, tokens: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`encode`: (tokens (B,L,N), u (B,N,3)) -> y (B,N,3) float64."""
        d = self.digits_of(tokens).to(torch.float64)  # (B, L, N, 3)
        scale = self._scale(self.L)
        t = (d * scale.view(1, -1, 1, 1)).sum(1) + u.to(torch.float64) * (self.r ** -self.L)
        t = torch.where(self.free, t, torch.zeros_like(t))
        y = self.lo + self.a * t
        return torch.where(self.free, y, torch.zeros_like(y))

    def partial_t(self, tokens: torch.Tensor, level: int) -> torch.Tensor:
        """Centre of the cell fixed by the first ``level`` digits, in t units (B,N,3); level 0 -> 0.5."""
        if level == 0:
            return torch.full(tokens.shape[:1] + (self.n_atoms, 3), 0.5, dtype=torch.float64, device=tokens.device)
        d = self.digits_of(tokens[:, :level]).to(torch.float64)
        scale = self._scale(level)
        return (d * scale.view(1, -1, 1, 1)).sum(1) + 0.5 * self.r ** -level

    def log_jacobian(self) -> float:
        """Constant log |du/dy| summed over the free axes: n_free (L log r - log a)."""
        return float(self.free.sum()) * (self.L * math.log(self.r) - math.log(self.a))

    def allowed_tokens(self) -> torch.Tensor:
        """(N, r^3) bool: tokens whose digits on fixed axes are 0."""
        tok = torch.arange(self.r ** 3, device=self.lo.device)
        d = self.digits_of(tok)  # (r^3, 3)
        ok = (d.unsqueeze(0) == 0) | self.free.unsqueeze(1)  # (N, r^3, 3)
        return ok.all(-1)

    def state(self) -> dict:
        return {"lo": self.lo.tolist(), "a": self.a, "free": self.free.tolist(), "r": self.r, "L": self.L}

    @classmethod
    def from_state(cls, s: dict) -> "RadixMap":
        return cls(s["lo"], s["a"], s["free"], s["r"], s["L"])


# -------------------------------------------------------------------- the Beta mixture


def beta_mixture_logpdf(u: torch.Tensor, logits: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """log sum_k w_k Beta(u; alpha_k, beta_k); u (...), parameters (..., K)."""
    u = u.clamp(EPS_U, 1 - EPS_U).unsqueeze(-1)
    logb = (torch.lgamma(alpha + beta) - torch.lgamma(alpha) - torch.lgamma(beta)
            + (alpha - 1) * torch.log(u) + (beta - 1) * torch.log1p(-u))
    return torch.logsumexp(torch.log_softmax(logits, -1) + logb, -1)


def beta_mixture_sample(logits: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One draw per leading index from the mixture (vectorised; Gamma ratios with a generator)."""
    k = torch.multinomial(torch.softmax(logits.reshape(-1, logits.shape[-1]).double(), -1), 1, generator=gen)
    a = alpha.reshape(-1, alpha.shape[-1]).gather(1, k).squeeze(1).double()
    b = beta.reshape(-1, beta.shape[-1]).gather(1, k).squeeze(1).double()
    ga = _gamma(a, gen)
    gb = _gamma(b, gen)
    u = ga / (ga + gb)
    return u.clamp(EPS_U, 1 - EPS_U).reshape(logits.shape[:-1])


def _gamma(shape: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Gamma(shape, 1) for shape >= 1 by Marsaglia-Tsang with a torch generator (vectorised,
    rejection repeated on the rejected entries only)."""
    d = shape - 1.0 / 3.0
    c = 1.0 / torch.sqrt(9.0 * d)
    out = torch.empty_like(shape)
    todo = torch.ones_like(shape, dtype=torch.bool)
    for _ in range(100):
        n = int(todo.sum())
        if n == 0:
            break
        z = torch.randn(n, generator=gen, dtype=torch.float64, device=shape.device)
        v = (1 + c[todo] * z) ** 3
        lu = torch.log(torch.rand(n, generator=gen, dtype=torch.float64, device=shape.device))
        ok = (v > 0) & (lu < 0.5 * z * z + d[todo] - d[todo] * v + d[todo] * torch.log(v.clamp_min(1e-300)))
        idx = todo.nonzero().squeeze(1)
        out[idx[ok]] = (d[todo] * v)[ok]
        todo[idx[ok]] = False
    out[todo] = d[todo]  # practically never reached (acceptance > 95 % per round)
    return out
