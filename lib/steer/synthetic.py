"""Synthetic Gaussian concepts with known answers (for the exactness checks and tests).

:func:`unequal_norm_gaussians` draws neutral, source and target samples that share one random
covariance Sigma, with the source and target means at *different* Mahalanobis distances from the
neutral mean (||s|| = ratio * ||t||): the case where LEACE-Switch (a reflection) misses the target
mean and MidSteer hits it. ``ratio=1`` gives the equidistant case, where both coincide at mu_t.
"""
from __future__ import annotations


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
