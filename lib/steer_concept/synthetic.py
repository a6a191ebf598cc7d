"""Synthetic Gaussian concepts with known answers (for the exactness checks and tests).

:func:`unequal_norm_gaussians` draws neutral, source and target samples that share one random
covariance Sigma, with the source and target means at *different* Mahalanobis distances from the
neutral mean (||s|| = ratio * ||t||): the case where LEACE-Switch (a reflection) misses the target
mean and MidSteer hits it. ``ratio=1`` gives the equidistant case, where both coincide at mu_t. :func:`generate` is the
library call of ``steer-concept generate``.
"""
from __future__ import annotations

from dataclasses import dataclass, field


def unequal_norm_gaussians(d: int = 16, n_neutral: int = 4000, n_concept: int = 1000, ratio: float = 2.0,
                           scale: float = 3.0, seed: int = 0) -> dict:
    """Return float64 numpy arrays ``neutral``, ``source``, ``target`` and the true ``mu0``, ``mu_s``,
    ``mu_t``, ``cov``. s = W(mu_s - mu0) has norm ``scale * ratio``, t has norm ``scale``, and the
    angle between them is random."""
    import numpy as np

    rng = np.random.default_rng(seed)
    a = rng.standard_normal((d, d))
    cov = a @ a.T / d + 0.1 * np.eye(d)
    evals, evecs = np.linalg.eigh(cov)
    sqrt = (evecs * np.sqrt(evals)) @ evecs.T
    mu0 = rng.standard_normal(d)
    s_dir = rng.standard_normal(d)
    t_dir = rng.standard_normal(d)
    s = scale * ratio * s_dir / np.linalg.norm(s_dir)
    t = scale * t_dir / np.linalg.norm(t_dir)
    mu_s, mu_t = mu0 + sqrt @ s, mu0 + sqrt @ t

    def draw(mean, n):
        return mean + rng.standard_normal((n, d)) @ sqrt

    return {"neutral": draw(mu0, n_neutral), "source": draw(mu_s, n_concept), "target": draw(mu_t, n_concept),
            "mu0": mu0, "mu_s": mu_s, "mu_t": mu_t, "cov": cov}


# --------------------------------------------------------------------------- `steer-concept generate`


@dataclass
class GenerateConfig:
    """Settings of ``steer-concept generate``."""

    dim: int = field(default=16, metadata={"help": "Dimension d of the activations.", "min": 2})
    n_neutral: int = field(default=4000, metadata={"help": "Neutral rows (mu0, Sigma).", "min": 2})
    n_concept: int = field(default=1000, metadata={"help": "Rows of the source and of the target concept.",
                                                    "min": 1})
    ratio: float = field(default=2.0, metadata={
        "help": "||s|| / ||t|| of the whitened concept means (1: equidistant, LEACE-Switch is exact).",
        "min": 0.0, "min_open": True})
    scale: float = field(default=3.0, metadata={"help": "||t||, the target's Mahalanobis distance from mu0.",
                                                "min": 0.0, "min_open": True})


@dataclass
class GenerateResult:
    """``files``: {file stem: arrays} (neutral, source, target: a 2-D ``x`` each; truth: the true
    mu0, mu_s, mu_t, cov); ``summary``: the known answer."""

    files: dict
    summary: dict


def generate(cfg: GenerateConfig, *, seed: int = 0) -> GenerateResult:
    """Draw :func:`unequal_norm_gaussians` and state the known answer: at beta = 1 MidSteer maps
    mu_s onto mu_t (error 0 up to sampling), LEACE-Switch (a reflection in whitened space) lands at
    relative distance ``leace_switch_miss`` from mu_t unless ratio = 1."""
    import numpy as np

    g = unequal_norm_gaussians(d=cfg.dim, n_neutral=cfg.n_neutral, n_concept=cfg.n_concept, ratio=cfg.ratio,
                               scale=cfg.scale, seed=seed)
    evals, evecs = np.linalg.eigh(g["cov"])
    w = (evecs / np.sqrt(evals)) @ evecs.T
    s, t = w @ (g["mu_s"] - g["mu0"]), w @ (g["mu_t"] - g["mu0"])
    v = s - t
    reflected = s - 2.0 * v * max(float(v @ s), 0.0) / (v @ v)  # LEACE-Switch on the source mean (clip+)
    miss = float(np.linalg.norm(reflected - t) / np.linalg.norm(s - t))
    files = {"neutral": {"x": g["neutral"]}, "source": {"x": g["source"]}, "target": {"x": g["target"]},
             "truth": {k: g[k] for k in ("mu0", "mu_s", "mu_t", "cov")}}
    summary = {"dim": cfg.dim, "n_neutral": cfg.n_neutral, "n_concept": cfg.n_concept, "ratio": cfg.ratio,
               "s_norm": float(np.linalg.norm(s)), "t_norm": float(np.linalg.norm(t)),
               "midsteer_miss": 0.0, "leace_switch_miss": miss}
    return GenerateResult(files, summary)
