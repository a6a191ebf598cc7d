"""Prediction oracles: each client's forecast of its next period's distribution over groups.

An oracle sees distributions only, never a sample array: :meth:`Oracle.forecast` receives

- ``observed``: (K, t+1, G) the normalised group counts of the batches each client has received
  (what a client knows about its own past, as a histogram), and
- ``generating``: (K, T, G) the stream's generating parameters, handed to the ``true`` and
  ``noisy`` oracles only (the upper bound; never a test point), and ``clients``: the client ids
  of the K rows (an oracle is per client: row k of a call for all clients equals a call for k alone),

and returns a (K, G) forecast of period t+1. Pluggable: ``--oracle module:factory`` names a
callable ``factory() -> object with forecast(t, observed, generating, clients)``.

On a user stream (``Stream.hist_source == "batches"``) the generating parameters are each
batch's own label histogram, so ``true``/``noisy`` would read period t+1's actual labels: they
run only with ``--allow-future-oracle`` (:func:`future_use`), and ``auto`` picks ``ema`` there.

``true`` / ``noisy`` / ``ema`` / ``periodic`` follow the method sheet; the noisy construction
(a move of exactly eps in total variation toward a random distribution) is ours [reconstructed].
"""
from __future__ import annotations

import importlib

import numpy as np

from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.core.runtime import numpy_rng


def tv(p, q) -> np.ndarray:
    """Total variation 0.5 * ||p - q||_1 over the last axis."""
    return 0.5 * np.abs(np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64)).sum(-1)


class Oracle:
    """Base class: ``needs_generating`` says whether it may read the generating parameters."""

    name = "oracle"
    needs_generating = False

    def forecast(self, t: int, observed: np.ndarray, generating: np.ndarray | None, clients: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class TrueOracle(Oracle):
    """The next period's generating distribution (the last one at the last period)."""

    name = "true"
    needs_generating = True

    def forecast(self, t, observed, generating, clients):
        return generating[:, min(t + 1, generating.shape[1] - 1)].copy()


def move_by_tv(p: np.ndarray, eps: float, rng) -> np.ndarray:
    """A distribution q with TV(q, p) = eps exactly (for every row of p) [reconstructed].

    q = (1 - s) p + s d with d ~ Dirichlet(1) (or the point mass on p's smallest entry when d is
    too close), s = eps / TV(d, p): TV is linear along the segment. Rows where eps exceeds the
    largest possible distance 1 - min_g p_g get that largest distance instead."""
    p = np.asarray(p, dtype=np.float64)
    K, G = p.shape
    d = rng.dirichlet(np.ones(G), size=K)
    far = np.zeros_like(p)
    far[np.arange(K), p.argmin(-1)] = 1.0
    dist = tv(d, p)
    use_far = dist < max(eps, 1e-12)
    d = np.where(use_far[:, None], far, d)
    dist = tv(d, p)
    s = np.where(dist > 0, np.minimum(eps / np.maximum(dist, 1e-300), 1.0), 0.0)
    q = (1 - s[:, None]) * p + s[:, None] * d
    return q / q.sum(-1, keepdims=True)


class NoisyOracle(Oracle):
    """The true forecast moved by exactly ``eps`` in total variation (a fresh direction each call)."""

    needs_generating = True

    def __init__(self, eps: float, seed: int = 0):
        if not 0 <= eps <= 1:
            raise UsageError(f"--oracle noisy:EPS needs 0 <= EPS <= 1, not {eps}")
        self.eps = float(eps)
        self.name = f"noisy:{eps:g}"
        self.seed = int(seed)

    def forecast(self, t, observed, generating, clients):
        p = generating[:, min(t + 1, generating.shape[1] - 1)]
        return np.concatenate([move_by_tv(p[i:i + 1], self.eps, numpy_rng(self.seed, f"oracle-noise/{t}/{int(k)}"))
                               for i, k in enumerate(clients)])


class EMAOracle(Oracle):
    """Exponential moving average of the observed batch histograms (weight ``beta`` on the past)."""

    def __init__(self, beta: float = 0.5):
        if not 0 <= beta < 1:
            raise UsageError(f"--oracle ema:BETA needs 0 <= BETA < 1, not {beta}")
        self.beta = float(beta)
        self.name = f"ema:{beta:g}"

    def forecast(self, t, observed, generating, clients):
        est = observed[:, 0].copy()
        for s in range(1, observed.shape[1]):
            est = self.beta * est + (1 - self.beta) * observed[:, s]
        return est / np.maximum(est.sum(-1, keepdims=True), 1e-300)


class PeriodicOracle(Oracle):
    """Seasonal naive: the observed histogram one season ago (period t+1-season), else the latest."""

    def __init__(self, season: int = 12):
        if season < 1:
            raise UsageError(f"--oracle periodic:SEASON needs SEASON >= 1, not {season}")
        self.season = int(season)
        self.name = f"periodic:{season}"

    def forecast(self, t, observed, generating, clients):
        s = t + 1 - self.season
        return observed[:, s if s >= 0 else -1].copy()


FUTURE_FLAG = "--allow-future-oracle"
PAST_ONLY_DEFAULT = "ema"


def resolve_spec(spec: str, hist_source: str) -> str:
    """``auto`` -> ``true`` on a stream whose ``hist`` a generator knows (or the file gives), ``ema``
    (past histograms only) on a user stream whose ``hist`` is each batch's own labels."""
    if spec.strip() != "auto":
        return spec
    return PAST_ONLY_DEFAULT if hist_source == "batches" else "true"


def future_use(oracle, spec: str, hist_source: str, allow: bool) -> str | None:
    """What a known-future oracle reads on this stream: None (it uses the past only), "generator"
    (the generator's known next-period distribution), "given" (the file's own hist) or
    "actual-future-labels" (a user stream: period t+1's labels). The last needs ``allow``
    (``--allow-future-oracle``); without it a :class:`UsageError` (exit 2) names the flag."""
    if not getattr(oracle, "needs_generating", False):
        return None
    if hist_source != "batches":
        return hist_source
    if not allow:
        raise UsageError(f"--oracle {spec} reads the future on a user stream (its histograms are each period's "
                         f"actual labels): use ema[:BETA] or periodic[:SEASON], or pass {FUTURE_FLAG}")
    return "actual-future-labels"


def make_oracle(spec: str, seed: int = 0, season: int = 12) -> Oracle:
    """``true``, ``noisy:EPS`` (or ``noisy(EPS)``), ``ema[:BETA]``, ``periodic[:SEASON]`` or
    ``module:factory``."""
    s = spec.strip().replace("(", ":").rstrip(")")
    name, _, arg = s.partition(":")
    try:
        if name == "true" and not arg:
            return TrueOracle()
        if name == "noisy":
            return NoisyOracle(float(arg) if arg else 0.3, seed=seed)
        if name == "ema":
            return EMAOracle(float(arg) if arg else 0.5)
        if name == "periodic":
            return PeriodicOracle(int(arg) if arg else season)
    except ValueError:
        raise UsageError(f"--oracle {spec!r}: {arg!r} is not a number") from None
    if arg and "." in name or (arg and name not in ("true", "noisy", "ema", "periodic")):
        try:
            factory = getattr(importlib.import_module(name), arg)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"--oracle {spec!r}: cannot import ({exc})") from None
        obj = factory()
        if not hasattr(obj, "forecast"):
            raise UsageError(f"--oracle {spec!r}: the factory's object has no forecast(t, observed, generating, clients)")
        if not hasattr(obj, "name"):
            obj.name = spec
        if not hasattr(obj, "needs_generating"):
            obj.needs_generating = False
        return obj
    raise UsageError(f"--oracle must be auto, true, noisy:EPS, ema[:BETA], periodic[:SEASON] or module:factory, "
                     f"not {spec!r}")


def check_forecast(f, K: int, G: int, name: str) -> np.ndarray:
    f = np.asarray(f, dtype=np.float64)
    if f.shape != (K, G) or not np.isfinite(f).all() or (f < -1e-12).any():
        raise UsageError(f"oracle {name}: forecast must be a ({K}, {G}) array of probabilities, found {f.shape}")
    f = np.clip(f, 0, None)
    tot = f.sum(-1, keepdims=True)
    return np.where(tot > 0, f / np.maximum(tot, 1e-300), 1.0 / G)
