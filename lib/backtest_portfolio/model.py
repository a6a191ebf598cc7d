"""The end-to-end pipeline: predictor -> smooth top-k selection -> Sharpe re-optimisation layer,
trained on realised Sharpe (decision-focused, DFL) or on MSE (prediction-focused, PFL).

The pipeline is RECONSTRUCTED from the paper's abstract ("gradient flow through prediction,
asset selection, and re-optimization"); the paper's code was not read. Steps, per rebalancing
date t (all inputs use data up to the close of t only):

1. predictor g_θ (an MLP shared across assets) maps per-asset features to μ̂_t (daily);
   Σ̂_t from the trailing window (sample or Ledoit-Wolf), F_t its Cholesky factor;
2. scores s = z-score over assets of μ̂/σ̂ (σ̂ = sqrt(diag Σ̂)) [reconstructed choice; the dense
   tangency weights are the alternative named by the method sheet, ``score="tangency"``];
3. smooth top-k mask m (Σm = k exactly; capped-simplex by default, sinkhorn, perturbed);
4. re-optimisation: w = SharpeLayer(μ̂ - r_f, F, m) (weights normalised in torch);
5. DFL loss: minus the annualised Sharpe of the realised excess returns of w over the next
   ``horizon`` days, averaged over the batch of dates; PFL loss: MSE of μ̂ against the mean daily
   return of the next ``horizon`` days. The temperature ε is annealed geometrically from
   ``eps_start`` to ``eps_end`` over the epochs [reconstructed defaults 1 -> 0.05].

Test time: the hard top-k mask of the scores, then the same layer (with the floor ``min_weight``
so that exactly k names are held).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import NamedTuple

from icmlkit.lib.core.config import option as _opt
from icmlkit.lib.core.console import log, progress
from icmlkit.lib.core.errors import InputError, UsageError

PERIODS = 252


@dataclass
class Samples:
    """Training/evaluation tensors for a set of date indices (float64)."""

    idx: object          # (D,) date indices t
    X: object            # (D, n, f) features at t
    F: object            # (D, n, n) factor of Σ̂_t, or (D, K, n) loadings of the pca-factor estimate
    sigma: object        # (D, n) sqrt(diag Σ̂_t)
    hist_mu: object      # (D, n) trailing mean (the historical estimate)
    fwd: object | None   # (D, H, n) returns of t+1 .. t+H (loss only), None when not available
    d: object | None = None  # (D, n) idiosyncratic volatilities of the pca-factor estimate (Σ̂ = FᵀF + diag d²)

    @property
    def target(self):
        return self.fwd.mean(dim=1)

    def subset(self, sel) -> "Samples":
        return Samples(self.idx[sel], self.X[sel], self.F[sel], self.sigma[sel], self.hist_mu[sel],
                       None if self.fwd is None else self.fwd[sel], None if self.d is None else self.d[sel])


def build_samples(returns, idx, window: int = 252, cov: str = "ledoit-wolf", horizon: int | None = 21,
                  features=None, factors: int = 5) -> Samples:
    """Tensors for the dates ``idx``; ``features`` (T, n, f) overrides the default trailing-return
    and volatility features (estimators.features). No look-ahead: only ``fwd`` reads after t."""
    import torch

    from icmlkit.lib.backtest_portfolio import estimators as E

    idx = torch.as_tensor(idx, dtype=torch.long)
    F, d = E.factor_model(returns, idx, window, cov, factors)
    sigma = torch.sqrt((F ** 2).sum(dim=1) + (0 if d is None else d ** 2))
    X = E.features(returns, idx) if features is None else torch.as_tensor(features, dtype=torch.float64)[idx]
    hist = E.historical_mean(returns, idx, window)
    fwd = E.forward_returns(returns, idx, horizon) if horizon else None
    return Samples(idx, X, F, sigma, hist, fwd, d)


def _predictor_class():
    import torch
    from torch import nn

    class Predictor(nn.Module):
        """MLP shared across assets: features (…, f) -> μ̂ (…) in daily return units.

        Inputs are standardised with the training-set mean/std; the output is
        ``bias + scale * head`` with bias/scale set to the mean/std of the training targets.
        """

        def __init__(self, n_features: int, hidden: int = 32, layers: int = 2):
            super().__init__()
            dims = [n_features] + [hidden] * layers
            mods = []
            for a, b in zip(dims[:-1], dims[1:]):
                mods += [nn.Linear(a, b), nn.SiLU()]
            mods.append(nn.Linear(dims[-1], 1))
            self.net = nn.Sequential(*mods).double()
            self.register_buffer("feat_mean", torch.zeros(n_features, dtype=torch.float64))
            self.register_buffer("feat_std", torch.ones(n_features, dtype=torch.float64))
            self.register_buffer("out_bias", torch.zeros((), dtype=torch.float64))
            self.register_buffer("out_scale", torch.ones((), dtype=torch.float64))

        def forward(self, X):
            z = (X - self.feat_mean) / self.feat_std
            return self.out_bias + self.out_scale * self.net(z).squeeze(-1)

    return Predictor


@dataclass
class Config:
    """The model's settings (saved in the .pt file; ``backtest-portfolio train`` takes them as options)."""

    loss: str = _opt("dfl", "dfl: minus realised Sharpe through the selection and layer; pfl: MSE of the "
                     "prediction.", choices=("dfl", "pfl"))
    k: int = _opt(5, "Cardinality: the number of names held.", min=1)
    topk: str = _opt("capped-simplex", "Smooth top-k operator used in training (reconstructed choice; all give "
                     "Σm = k).", choices=("capped-simplex", "sinkhorn", "perturbed"))
    score: str = _opt("ratio", "Selection scores: z-scored mu/sigma, or the dense tangency weights (one more layer "
                      "solve); reconstructed choice.", choices=("ratio", "tangency"))
    window: int = _opt(252, "Trailing days for the covariance (and the historical mean).", min=2)
    cov: str = _opt("ledoit-wolf", "Covariance estimate on the trailing window (pca-factor: --factors principal "
                    "components + a diagonal, for universes of hundreds of names).",
                    choices=("ledoit-wolf", "sample", "pca-factor"))
    factors: int = _opt(5, "pca-factor: principal components of the trailing window (the rest is idiosyncratic).",
                        min=1)
    horizon: int = _opt(21, "Holding period in days for the loss.", min=2)
    hidden: int = _opt(32, "Hidden units of the predictor MLP.", min=1)
    layers: int = _opt(2, "Hidden layers of the predictor MLP.", min=1)
    epochs: int = _opt(30, "Training epochs.", min=1)
    batch: int = _opt(32, "Dates per step.", min=2)
    lr: float = _opt(1e-3, "Adam learning rate.", min=0, min_open=True)
    weight_decay: float = _opt(1e-4, "Adam weight decay.", min=0)
    eps_start: float = _opt(1.0, "Top-k temperature at the start.", min=0, min_open=True)
    eps_end: float = _opt(0.05, "... annealed geometrically to this.", min=0, min_open=True)
    rf: float = _opt(0.0, "Annual risk-free rate (constant); daily = rf/252.")
    min_weight: float = _opt(0.01, "Floor on each selected name at test time, so exactly k names are held (0 lets "
                             "long-only zero some out).", min=0, max=1)
    pooled: bool = _opt(False, "dfl: Sharpe of the batch's pooled returns instead of the mean per date.")
    train_floor: bool = _opt(False, "dfl: train with the test-time floor --min-weight in the layer too, so training "
                             "and test solve the same program (reconstructed option; anneal --eps-end low, e.g. "
                             "0.005, for a near-hard mask).")
    train_cost_bps: float = _opt(0.0, "dfl: charge this many basis points of the traded value in the loss, with the "
                                 "back-test's cost model (the portfolio of the previous holding period, drifted, is "
                                 "the starting point; validation scores net Sharpe too). 0: cost-blind "
                                 "(reconstructed option).", min=0)
    features: list = _opt(["ret_21d", "ret_63d", "ret_126d", "ret_252d", "vol_21d", "vol_63d"],
                          "Names of the per-asset features (the trailing-return and volatility defaults).")

    @property
    def rf_daily(self) -> float:
        return self.rf / PERIODS


def new_model(cfg: Config, n_features: int, seed: int = 0):
    """The predictor with its initial weights drawn from the ``init`` stream of ``seed``."""
    from icmlkit.lib.core.runtime import seeded

    with seeded(seed, "init"):
        return _predictor_class()(n_features, cfg.hidden, cfg.layers)


def scores(mu_hat, sigma):
    """Selection scores: the cross-sectional z-score of μ̂/σ̂ [reconstructed choice]."""
    r = mu_hat / sigma
    return (r - r.mean(-1, keepdim=True)) / r.std(-1, keepdim=True).clamp_min(1e-12)


class Pipeline:
    """prediction -> selection -> re-optimisation, for one universe size n."""

    def __init__(self, cfg: Config, n: int):
        if cfg.k > n:
            raise UsageError(f"k = {cfg.k} exceeds the {n} assets")
        self.cfg, self.n = cfg, n
        self.train_floor = cfg.min_weight if getattr(cfg, "train_floor", False) else 0.0

    @staticmethod
    def _layer(s: Samples, min_weight: float = 0.0):
        """The n-name layer for the shapes of ``s`` (built once per process: layer.layer_for)."""
        from icmlkit.lib.backtest_portfolio.layer import layer_for

        return layer_for(s.F.shape[-1], s.F.shape[-2], min_weight, s.d is not None)

    def select_scores(self, mu_hat, s: Samples):
        if self.cfg.score == "tangency":
            w0, _ = self._layer(s)(mu_hat - self.cfg.rf_daily, s.F, None, s.d)
            z = (w0 - w0.mean(-1, keepdim=True)) / w0.std(-1, keepdim=True).clamp_min(1e-12)
            return z + 1e-3 * scores(mu_hat, s.sigma)  # long-only zeros tie: break them by μ̂/σ̂
        return scores(mu_hat, s.sigma)

    def soft(self, mu_hat, s: Samples, eps: float, generator=None):
        """Training path: (w, mask, infeasible) with the smooth mask (all n names in the layer)."""
        from icmlkit.lib.backtest_portfolio.topk import soft_topk

        m = soft_topk(self.select_scores(mu_hat, s), self.cfg.k, eps, self.cfg.topk, generator=generator)
        w, infeasible = self._layer(s, self.train_floor)(mu_hat - self.cfg.rf_daily, s.F, m, s.d)
        return w, m, infeasible

    def hard(self, mu_hat, s: Samples):
        """Test path: hard top-k mask of the scores + re-solve on the k names (exactly k with the floor)."""
        import torch

        from icmlkit.lib.backtest_portfolio.layer import solve_on_support
        from icmlkit.lib.backtest_portfolio.topk import hard_topk

        with torch.no_grad():
            m = hard_topk(self.select_scores(mu_hat, s), self.cfg.k)
            w, infeasible = solve_on_support(mu_hat - self.cfg.rf_daily, s.F, m, s.d, self.cfg.min_weight)
        return w, m, infeasible


def realised_sharpe(w, fwd, rf_daily: float = 0.0, pooled: bool = False):
    """Annualised Sharpe of the realised daily excess returns of constant weights w (B, n) over
    fwd (B, H, n): one value per date (B,), or with ``pooled`` one value for all B·H returns
    of the batch (less noisy with short holding periods)."""
    port = (fwd * w[:, None, :]).sum(-1) - rf_daily
    if pooled:
        port = port.reshape(-1)
    return port.mean(-1) / port.std(-1).clamp_min(1e-8) * math.sqrt(PERIODS)


def drifted(w, fwd):
    """Weights w (B, n) held (buy and hold) over the returns fwd (B, H, n), at the end of the period."""
    import torch

    G = torch.prod(1 + fwd, dim=1)
    v = w * G
    return v / v.sum(-1, keepdim=True).clamp_min(1e-300)


def net_of_costs(port, traded, cost_bps: float):
    """The back-test's cost model on daily portfolio returns port (B, H): the first day of each
    holding period loses cost_bps/1e4 of the traded value, net_1 = (1 + g_1)(1 - c·traded) - 1."""
    import torch

    c = cost_bps / 1e4
    first = (1 + port[:, :1]) * (1 - c * traded[:, None]) - 1
    return torch.cat([first, port[:, 1:]], dim=1)


def evaluate(model, pipe: Pipeline, s: Samples, cost_bps: float = 0.0) -> dict:
    """Hard-pipeline realised Sharpe (mean over dates) and prediction MSE on samples with fwd.

    With ``cost_bps`` > 0 the dates are taken as consecutive holding periods (validation dates are
    ``horizon`` days apart): each date's trade starts from the previous date's portfolio drifted
    (the first date's from cash), and the Sharpe is net of the back-test's costs."""
    import torch

    with torch.no_grad():
        mu = model(s.X)
        w, m, inf = pipe.hard(mu, s)
        sh = realised_sharpe(w, s.fwd, pipe.cfg.rf_daily)
        mse = ((mu - s.target) ** 2).mean()
        out = {"sharpe": float(sh.mean()), "mse": float(mse), "infeasible": int(inf.sum())}
        if cost_bps > 0:
            start = torch.cat([torch.zeros_like(w[:1]), drifted(w[:-1], s.fwd[:-1])])
            traded = (w - start).abs().sum(-1)
            port = net_of_costs((s.fwd * w[:, None, :]).sum(-1), traded, cost_bps) - pipe.cfg.rf_daily
            out["sharpe_net"] = float((port.mean(-1) / port.std(-1).clamp_min(1e-8) * math.sqrt(PERIODS)).mean())
            out["turnover"] = float(traded[1:].mean()) if len(traded) > 1 else float(traded.mean())
    return out


def train_test_gap(model, pipe: Pipeline, s: Samples, eps: float) -> dict:
    """How far the training program is from the test program on samples ``s``: the mean realised
    Sharpe of the soft path at temperature ``eps`` (what training optimises; with the floor only
    under ``train_floor``) against the hard path (hard top-k + floor: what the back-test holds),
    the soft mask's mean distance to the hard one (Σ|m - hard| / 2k: 0 = hard, 1 = disjoint), the
    number of names carrying >= 0.1 % in training, and the share of test holdings sitting at the floor."""
    import torch

    from icmlkit.lib.backtest_portfolio.topk import hard_topk

    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        mu = model(s.X)
        ws, ms, _ = pipe.soft(mu, s, eps, generator=gen)
        wh, mh, _ = pipe.hard(mu, s)
        soft = realised_sharpe(ws, s.fwd, pipe.cfg.rf_daily).mean()
        hard = realised_sharpe(wh, s.fwd, pipe.cfg.rf_daily).mean()
        hk = hard_topk(pipe.select_scores(mu, s), pipe.cfg.k)
        held = wh > 1e-9
        floor = pipe.cfg.min_weight
        at_floor = ((wh - floor).abs() < 1e-6) & held if floor > 0 else torch.zeros_like(held)
    return {"eps": float(eps), "dates": int(s.X.shape[0]), "soft_sharpe": float(soft), "hard_sharpe": float(hard),
            "gap": float(soft - hard), "mask_distance": float(((ms - hk).abs().sum(-1) / (2 * pipe.cfg.k)).mean()),
            "soft_names": float((ws > 1e-3).sum(-1).double().mean()),
            "hard_at_floor_share": float(at_floor.sum() / held.sum().clamp_min(1))}


def fit(cfg: Config, train: Samples, val: Samples | None = None, seed: int = 0, epoch_callback=None,
        prev: Samples | None = None):
    """Train the predictor with the DFL or PFL loss; keeps the epoch with the best validation
    score (Sharpe for DFL, net Sharpe with ``train_cost_bps``, MSE for PFL; the last epoch without
    validation data).

    ``prev`` (needed by ``train_cost_bps`` > 0): the samples of the dates ``horizon`` days before
    each training date, with their forward returns up to the training date; the loss's trade starts
    from that date's portfolio (soft path, no gradient through it) drifted to the training date.

    Returns (model, history) where history is a list of per-epoch dicts.
    """
    import torch

    from icmlkit.lib.core.runtime import generator

    n = train.X.shape[1]
    model = new_model(cfg, train.X.shape[-1], seed)
    flat = train.X.reshape(-1, train.X.shape[-1])
    model.feat_mean.copy_(flat.mean(0))
    model.feat_std.copy_(flat.std(0).clamp_min(1e-12))
    tgt = train.target
    model.out_bias.copy_(tgt.mean())
    model.out_scale.copy_(tgt.std().clamp_min(1e-12))
    pipe = Pipeline(cfg, n)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    batches = generator(seed, "batches")    # the order of the dates in each epoch
    noise = generator(seed, "topk-noise")   # the perturbed top-k's samples
    D = train.X.shape[0]
    history, best, best_state = [], -math.inf, None
    cost = float(getattr(cfg, "train_cost_bps", 0.0)) if cfg.loss == "dfl" else 0.0
    if cost > 0 and (prev is None or prev.X.shape[0] != D):
        raise UsageError("train_cost_bps > 0 needs prev: the samples horizon days before each training date")
    for epoch in progress(range(cfg.epochs), total=cfg.epochs, desc=f"train {cfg.loss}"):
        eps = cfg.eps_start * (cfg.eps_end / cfg.eps_start) ** (epoch / max(cfg.epochs - 1, 1))
        perm = torch.randperm(D, generator=batches)
        losses, infeas = [], 0
        for b in range(0, D, cfg.batch):
            sel = perm[b:b + cfg.batch]
            sb = train.subset(sel)
            mu = model(sb.X)
            if cfg.loss == "pfl":
                loss = ((mu - sb.target) ** 2).mean() / model.out_scale ** 2
            else:
                w, _, inf = pipe.soft(mu, sb, eps, generator=noise)
                infeas += int(inf.sum())
                if cost > 0:
                    pb = prev.subset(sel)
                    with torch.no_grad():
                        w_prev, _, _ = pipe.soft(model(pb.X), pb, eps, generator=noise)
                        start = drifted(w_prev, pb.fwd)
                    traded = (w - start).abs().sum(-1)
                    port = net_of_costs((sb.fwd * w[:, None, :]).sum(-1), traded, cost) - cfg.rf_daily
                    if cfg.pooled:
                        port = port.reshape(-1)
                    loss = -(port.mean(-1) / port.std(-1).clamp_min(1e-8) * math.sqrt(PERIODS)).mean()
                else:
                    loss = -realised_sharpe(w, sb.fwd, cfg.rf_daily, cfg.pooled).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        row = {"epoch": epoch + 1, "eps": eps, "train_loss": sum(losses) / len(losses), "train_infeasible": infeas}
        if val is not None:
            ev = evaluate(model, pipe, val, cost_bps=cost)
            row.update(val_sharpe=ev["sharpe"], val_mse=ev["mse"])
            if cost > 0:
                row.update(val_sharpe_net=ev["sharpe_net"], val_turnover=ev["turnover"])
            score = (ev["sharpe_net"] if cost > 0 else ev["sharpe"]) if cfg.loss == "dfl" else -ev["mse"]
        else:
            score = epoch
        if score > best:
            best, best_state = score, copy.deepcopy(model.state_dict())
            row["kept"] = True
        history.append(row)
        log.debug("epoch %s", row)
        if epoch_callback is not None:
            epoch_callback(row)
    model.load_state_dict(best_state)
    return model, history


# --------------------------------------------------------------------------- files


class TrainedModel(NamedTuple):
    """A model file's content: the predictor, its :class:`Config` and the training metadata."""

    model: object
    config: Config
    meta: dict

    def check_market(self, market, source: str) -> None:
        """The model's tickers must be the market's, in order (an InputError naming ``source``)."""
        from icmlkit.lib.core.errors import InputError

        if list(self.meta.get("tickers", [])) != list(market.tickers):
            raise InputError(f"the model was trained on tickers {self.meta.get('tickers')}, but the prices have "
                             f"{market.tickers}", source)


def check_loss(cfg: Config, strategy: str, source: str = "the model file") -> None:
    """A pfl/dfl back-test uses a model trained with that loss: another is a UsageError naming
    ``source`` (the model file) and both settings (issue 59)."""
    from icmlkit.lib.core.errors import UsageError

    if cfg.loss != strategy:
        raise UsageError(f"{source}: the model was trained with --loss {cfg.loss}, not --strategy {strategy}; use "
                         f"--strategy {cfg.loss} or a model trained with --loss {strategy}")


def save_model(path, model, cfg: Config, meta: dict) -> None:
    """A .pt file with the state dict, the config and metadata (loadable with weights_only=True)."""
    import dataclasses

    from icmlkit.lib.core.io import write_torch

    write_torch(path, {"format": "icmlkit-portfolio-1", "state_dict": model.state_dict(),
                       "config": dataclasses.asdict(cfg), "meta": meta})


def load_model(path) -> "TrainedModel":
    """(model, cfg, meta) from :func:`save_model`'s file; torch.load with weights_only=True. A file
    of the right format whose config or weights do not fit is an InputError naming it."""
    from icmlkit.lib.core.io import display_name, read_torch

    what = "backtest-portfolio model file"
    obj = read_torch(path, what, "icmlkit-portfolio-1")
    try:
        cfg = Config(**obj["config"])
        model = new_model(cfg, len(cfg.features))
        model.load_state_dict(obj["state_dict"])
        meta = dict(obj.get("meta") or {})
    except (KeyError, TypeError, ValueError, RuntimeError, UsageError) as exc:  # UsageError: k above the assets
        raise InputError(f"not a {what} (its config or weights do not fit: {exc})", display_name(path)) from None
    model.eval()
    return TrainedModel(model, cfg, meta)
