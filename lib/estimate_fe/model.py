"""The CARD network: an encoder-decoder transformer over radix tokens with geometry-aware attention.

Sequence (method sheet step 3): level 1 digit tokens of all N atoms, then level 2, ..., level L,
then the N continuous residuals: N (L + 1) predictions. The decoder runs two streams over
N (L + 2) slots (slot s = level l(s) * N + atom i(s); level 0 holds "nothing decoded yet"):

- the *content* stream at slot s carries the coordinate of atom i(s) decoded up to and including
  level l(s) (the cell centre, or the exact coordinate at the residual level); it attends to the
  slots [s - N + 1, s], i.e. the latest partially decoded coordinate of every atom;
- the *query* stream at slot s (which predicts the token of slot s) is built as
  LN(h_s + phi1(x'_{s-N})): the same atom's coordinate decoded up to the previous level, so the
  digit being predicted does not leak; it attends to the content slots [s - N, s - 1] (keys and
  values from the latest partially decoded coordinates x'_j of every atom).
- Every attention (encoder and both decoder streams) adds a per-head bias
  (1/R) sum_k phi_d^h(|u_i^(k) - u_j^(k)|) from R reference conformers u^(k) (geometry-aware
  attention); the decoder cross-attends to the encoder, whose input is the atomic numbers z (and
  the atom's place in the order) with the same kind of distance bias.

Heads: a softmax over the r^3 joint digit tokens of one atom, restricted to the tokens allowed by
the gauge and floored, p = (1 - eps) softmax + eps / n_allowed, so no frame gets -log q = inf;
and a K-component Beta mixture for the residual of each free axis, the three axes chained
(u_x -> u_y -> u_z), with alpha, beta bounded in [1, 1 + max_shape].

The two-stream layout is how this implementation realises the paper's query/key rule in a
teacher-forced parallel pass (reconstructed: the paper's exact layer wiring is not known).
"""
from __future__ import annotations

from icmlkit.lib.core.errors import InputError

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from icmlkit.lib.estimate_fe.radix import RadixMap, beta_mixture_logpdf, beta_mixture_sample


def _features(t: torch.Tensor, n_freq: int) -> torch.Tensor:
    """Fourier features of unit-box coordinates t (..., 3) -> (..., 3 (1 + 2 n_freq))."""
    f = (2.0 ** torch.arange(n_freq, dtype=t.dtype, device=t.device)) * (2 * math.pi)
    a = t.unsqueeze(-1) * f
    return torch.cat([t, torch.sin(a).flatten(-2), torch.cos(a).flatten(-2)], -1)


class DistanceBias(nn.Module):
    """phi_d: reference distances -> one logit bias per head, averaged over the R conformers."""

    def __init__(self, heads: int, n_rbf: int, d_max: float):
        super().__init__()
        self.register_buffer("centres", torch.linspace(0.0, d_max, n_rbf))
        self.width = d_max / n_rbf
        # no bias on the last layer: a per-head constant on every logit cancels in the softmax, and a
        # parameter with a zero gradient only collects round-off (Adam would amplify it)
        self.net = nn.Sequential(nn.Linear(n_rbf, 32), nn.SiLU(), nn.Linear(32, heads, bias=False))

    def forward(self, dist: torch.Tensor) -> torch.Tensor:  # dist (R, N, N) -> (H, N, N)
        rbf = torch.exp(-((dist.unsqueeze(-1) - self.centres) / self.width) ** 2)
        return self.net(rbf).mean(0).permute(2, 0, 1)


class Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.h, self.dh = heads, d // heads
        # the key bias adds q.b to a whole row of logits, which the softmax cancels: left out (see DistanceBias)
        self.q, self.v, self.o = (nn.Linear(d, d) for _ in range(3))
        self.k = nn.Linear(d, d, bias=False)

    def forward(self, xq, xkv, bias):
        B, S, D = xq.shape
        T = xkv.shape[1]
        q = self.q(xq).view(B, S, self.h, self.dh).transpose(1, 2)
        k = self.k(xkv).view(xkv.shape[0], T, self.h, self.dh).transpose(1, 2)
        v = self.v(xkv).view(xkv.shape[0], T, self.h, self.dh).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return self.o(out.transpose(1, 2).reshape(B, S, D))


class Block(nn.Module):
    def __init__(self, d: int, heads: int, cross: bool):
        super().__init__()
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.att = Attention(d, heads)
        self.cross = Attention(d, heads) if cross else None
        self.lnc = nn.LayerNorm(d) if cross else None
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, h, kv, bias, enc=None, enc_bias=None):
        h = h + self.att(self.ln1(h), self.ln2(kv) if kv is not None else self.ln1(h), bias)
        if self.cross is not None:
            h = h + self.cross(self.lnc(h), enc, enc_bias)
        return h + self.mlp(self.ln3(h))


class CARD(nn.Module):
    """q_theta(y) over the free coordinates y (B, N, 3) of one system; see the module docstring."""

    def __init__(self, radix: RadixMap, z, ref_dist, d: int = 32, heads: int = 4, enc_layers: int = 2,
                 dec_layers: int = 2, K: int = 8, eps: float = 1e-6, max_shape: float = 200.0, n_freq: int = 6,
                 max_atoms: int | None = None, d_max: float | None = None):
        super().__init__()
        self.r, self.L = radix.r, radix.L
        self.V = self.r ** 3
        self.K, self.eps, self.max_shape, self.n_freq = K, eps, max_shape, n_freq
        self.config = {"d": d, "heads": heads, "enc_layers": enc_layers, "dec_layers": dec_layers, "K": K,
                       "eps": eps, "max_shape": max_shape, "n_freq": n_freq}
        if max_atoms is not None:  # a multi-molecule model (:mod:`icmlkit.lib.estimate_fe.transfer`)
            self.config.update(max_atoms=int(max_atoms), d_max=float(d_max))
        self.bind(radix, z, ref_dist)
        N = self.N
        if d_max is None:
            d_max = float(torch.as_tensor(ref_dist).max()) * 1.2 + 1e-3 if torch.as_tensor(ref_dist).numel() else 1.0
        nf = 3 * (1 + 2 * n_freq)
        self.emb_z = nn.Embedding(119, d)
        self.emb_atom = nn.Embedding(max_atoms or N, d)
        self.emb_level = nn.Embedding(self.L + 2, d)
        self.phi_c = nn.Sequential(nn.Linear(nf, d), nn.SiLU(), nn.Linear(d, d))
        self.phi_1 = nn.Sequential(nn.Linear(nf, d), nn.SiLU(), nn.Linear(d, d))
        self.ln_q = nn.LayerNorm(d)
        self.enc_bias = DistanceBias(heads, 16, d_max)
        self.dec_bias = DistanceBias(heads, 16, d_max)
        self.encoder = nn.ModuleList(Block(d, heads, cross=False) for _ in range(enc_layers))
        self.content = nn.ModuleList(Block(d, heads, cross=True) for _ in range(dec_layers))
        self.query = nn.ModuleList(Block(d, heads, cross=True) for _ in range(dec_layers))
        self.ln_out = nn.LayerNorm(d)
        self.tok_head = nn.Linear(d, self.V)
        self.bmm_heads = nn.ModuleList(nn.Sequential(nn.Linear(d + 2 * (1 + 2 * 2), d), nn.SiLU(), nn.Linear(d, 3 * K))
                                       for _ in range(3))
        with torch.no_grad():  # start near the uniform density on the box (tokens uniform, Beta ~ flat)
            self.tok_head.weight.mul_(0.1)
            self.tok_head.bias.zero_()
            for head in self.bmm_heads:
                head[-1].weight.mul_(0.1)
                head[-1].bias.zero_()
                head[-1].bias[K:].fill_(-6.0)

    def bind(self, radix: RadixMap, z, ref_dist) -> "CARD":
        """Make this model describe one molecule: its radix map, atomic numbers and reference distances
        (and the slot masks of its size). A single-system model is bound once; a multi-molecule
        model (same weights for every molecule) is bound to each molecule in turn."""
        old = getattr(self, "ref_dist", None)
        dev = old.device if old is not None else torch.device("cpu")
        dtype = old.dtype if old is not None else torch.float32
        if self.config.get("max_atoms") is not None and radix.n_atoms > self.config["max_atoms"]:
            raise InputError(f"{radix.n_atoms} atoms: this model handles at most {self.config['max_atoms']}")
        self.radix = radix.to(dev)
        self.N = N = radix.n_atoms
        self.register_buffer("z", torch.as_tensor(z, dtype=torch.long, device=dev).clamp(0, 118))
        self.register_buffer("ref_dist", torch.as_tensor(ref_dist, dtype=dtype, device=dev))
        self.register_buffer("allowed", self.radix.allowed_tokens())
        self.register_buffer("free", self.radix.free.clone())
        S = N * (self.L + 2)
        self.register_buffer("slot_atom", (torch.arange(S) % N).to(dev))
        self.register_buffer("slot_level", (torch.arange(S) // N).to(dev))
        diff = torch.arange(S)[:, None] - torch.arange(S)[None, :]  # s - s'
        self.register_buffer("mask_content", ((diff >= 0) & (diff < N)).to(dev))
        qm = (diff >= 1) & (diff <= N)
        qm[:N] = torch.eye(S, dtype=torch.bool)[:N]  # level-0 query slots predict nothing
        self.register_buffer("mask_query", qm.to(dev))
        return self

    def _apply(self, fn, *args, **kwargs):
        """``.to(device)`` and friends also move the radix map (a plain object, not a module)."""
        out = super()._apply(fn, *args, **kwargs)
        self.radix = self.radix.to(self.z.device)
        return out

    # ------------------------------------------------------------------ pieces
    def _encode(self):
        h = (self.emb_z(self.z) + self.emb_atom(torch.arange(self.N, device=self.z.device))).unsqueeze(0)
        b = self.enc_bias(self.ref_dist).unsqueeze(0)
        for blk in self.encoder:
            h = blk(h, None, b)
        return h  # (1, N, d)

    def _slot_t(self, tokens: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Unit-box coordinate of each slot's atom after the slot's level: (B, S, 3) in the network's dtype."""
        parts = [self.radix.partial_t(tokens, lvl) for lvl in range(self.L + 1)]
        exact = self.radix.t_of(self.radix.decode(tokens, u))
        t = torch.stack(parts + [exact], 1)  # (B, L+2, N, 3)
        t = torch.where(self.free, t, torch.zeros_like(t))
        return t.reshape(t.shape[0], -1, 3).to(self.ref_dist.dtype)

    def _hidden(self, tokens: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Query-stream outputs (B, S, d) for every slot (teacher forcing on tokens, u)."""
        B = tokens.shape[0]
        enc = self._encode()
        dev = enc.device
        t = self._slot_t(tokens, u).to(dev)
        base = (enc[0, self.slot_atom] + self.emb_level(self.slot_level)).unsqueeze(0)
        c = base + self.phi_c(_features(t, self.n_freq))
        prev = torch.cat([torch.full_like(t[:, : self.N], 0.5), t[:, : -self.N]], 1)  # x'_{s-N}
        q = self.ln_q(base + self.phi_1(_features(prev, self.n_freq)))
        dist_b = self.dec_bias(self.ref_dist)[:, self.slot_atom][:, :, self.slot_atom]  # (H, S, S)
        neg = torch.tensor(float("-inf"), device=dev)
        bc = torch.where(self.mask_content, dist_b, neg).unsqueeze(0)
        bq = torch.where(self.mask_query, dist_b, neg).unsqueeze(0)
        eb = self.dec_bias(self.ref_dist)[:, self.slot_atom].unsqueeze(0)  # (1, H, S, N)
        encB = enc.expand(B, -1, -1)
        for cblk, qblk in zip(self.content, self.query):
            q = qblk(q, c, bq, encB, eb)
            c = cblk(c, None, bc, encB, eb)
        return self.ln_out(q)

    def _token_logp(self, h: torch.Tensor) -> torch.Tensor:
        """(B, L, N, V) floored log-probabilities of the digit tokens."""
        B = h.shape[0]
        hs = h[:, self.N: self.N * (self.L + 1)].reshape(B, self.L, self.N, -1)
        logits = self.tok_head(hs).double()
        allowed = self.allowed.view(1, 1, self.N, self.V)
        logits = logits.masked_fill(~allowed, float("-inf"))
        n_ok = allowed.sum(-1, keepdim=True).double()
        p = torch.softmax(logits, -1)
        p = (1 - self.eps) * p + self.eps / n_ok
        return torch.log(torch.where(allowed, p, torch.zeros_like(p)))

    def _bmm_params(self, hr: torch.Tensor, axis: int, prev: torch.Tensor):
        """hr (..., d), prev (..., 2) residuals of earlier axes (0 when absent)."""
        inp = torch.cat([hr, _features(prev.to(hr.dtype), 2)[..., : 2 * 5]], -1)
        out = self.bmm_heads[axis](inp).double()
        lg, la, lb = out.split(self.K, -1)
        alpha = 1 + self.max_shape * torch.sigmoid(la)
        beta = 1 + self.max_shape * torch.sigmoid(lb)
        return lg, alpha, beta

    # ------------------------------------------------------------------ density
    def log_prob(self, y: torch.Tensor) -> torch.Tensor:
        """Exact log q_theta(y) (B,) in float64, y (B, N, 3) free coordinates (float64)."""
        tokens, u = self.radix.encode(y)
        h = self._hidden(tokens, u)
        lp_tok = self._token_logp(h)
        lt = lp_tok.gather(-1, tokens.to(h.device).unsqueeze(-1)).squeeze(-1).sum((1, 2))
        hr = h[:, self.N * (self.L + 1):]  # (B, N, d)
        u = u.to(h.device)
        lr = torch.zeros(y.shape[0], dtype=torch.float64, device=h.device)
        prev = torch.zeros(u.shape[:2] + (2,), dtype=torch.float64, device=h.device)
        for ax in range(3):
            lg, al, be = self._bmm_params(hr, ax, prev)
            lpa = beta_mixture_logpdf(u[..., ax], lg, al, be)
            lr = lr + torch.where(self.free[:, ax], lpa, torch.zeros_like(lpa)).sum(1)
            if ax < 2:
                prev = prev.clone()
                prev[..., ax] = u[..., ax]
        return lt + lr + self.radix.log_jacobian()

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        """:meth:`log_prob` (the forward pass DistributedDataParallel wraps)."""
        return self.log_prob(y)

    @torch.no_grad()
    def sample(self, n: int, gen: torch.Generator, batch: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
        """n draws y (n, N, 3) and their exact log q (n,), autoregressively level by level, on the
        model's device (``gen`` must be a generator of that device)."""
        dev = self.z.device
        ys, lps = [], []
        for start in range(0, n, batch):
            m = min(batch, n - start)
            tokens = torch.zeros(m, self.L, self.N, dtype=torch.long, device=dev)
            u = torch.full((m, self.N, 3), 0.5, dtype=torch.float64, device=dev)
            lp = torch.zeros(m, dtype=torch.float64, device=dev)
            for lvl in range(self.L):
                for i in range(self.N):
                    h = self._hidden(tokens, u)
                    s = self.N * (lvl + 1) + i
                    logits = self.tok_head(h[:, s]).double().masked_fill(~self.allowed[i], float("-inf"))
                    p = (1 - self.eps) * torch.softmax(logits, -1) + self.eps / self.allowed[i].sum()
                    p = torch.where(self.allowed[i], p, torch.zeros_like(p))
                    tok = torch.multinomial(p, 1, generator=gen).squeeze(1)
                    tokens[:, lvl, i] = tok
                    lp += torch.log(p.gather(1, tok[:, None]).squeeze(1))
            for i in range(self.N):
                h = self._hidden(tokens, u)
                hr = h[:, self.N * (self.L + 1) + i]
                prev = torch.zeros(m, 2, dtype=torch.float64, device=dev)
                for ax in range(3):
                    if not bool(self.free[i, ax]):
                        u[:, i, ax] = 0.0
                        continue
                    lg, al, be = self._bmm_params(hr, ax, prev)
                    ua = beta_mixture_sample(lg, al, be, gen)
                    u[:, i, ax] = ua
                    lp += beta_mixture_logpdf(ua, lg, al, be)
                    if ax < 2:
                        prev[:, ax] = ua
            ys.append(self.radix.decode(tokens, u))
            lps.append(lp + self.radix.log_jacobian())
        return torch.cat(ys), torch.cat(lps)
