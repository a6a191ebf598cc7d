"""steer-concept: affine concept erasure and switching (LEACE, LEACE-Switch, MidSteer, CASteer).

MidSteer (Gaintseva et al., ICML 2026): steering activations x by the rank-one affine map
x' = x - beta * Sigma^{1/2} v * clip+(u^T Sigma^{-1/2} (x - mu0)) / ||u||^2 fitted on neutral
statistics (mu0, Sigma) and concept means; LEACE (Belrose et al. 2023) is the case u = v, beta = 1.

- :mod:`.stats`: neutral mean/covariance (float64, shrinkage), concept means, whitening.
- :mod:`.steer`: :func:`fit_step`, :class:`SteerStep`, :class:`Steering` (sequential concepts,
  safetensors files).
- :mod:`.hooks`: steering forward hooks and :class:`Encoder` (sites, layers and the hook helpers
  come from :mod:`icmlkit.lib.hf.hooks`).
- :mod:`.model`: offline loading (default: the packaged MiniLM-L6; done by :mod:`icmlkit.lib.hf.models`),
  texts.
- :mod:`.evaluate`: switch rate, erasure, disturbance, Pareto plot.
- :mod:`.decoder`: the decoder path -- a causal LM steered while it generates, judged by a held-out
  concept classifier, with the perplexity of its continuations under the unsteered model.
- :mod:`.data`: the concept texts, and the neutral set in the prompts' form (:func:`.data.neutral_texts`).
- :mod:`.synthetic`: Gaussian concepts with unequal Mahalanobis norms.
"""
from icmlkit.lib.steer_concept.stats import Stats, Whitening, concept_mean, ledoit_wolf_coefficient, neutral_stats
from icmlkit.lib.steer_concept.steer import (DEFAULT_BETA, METHODS, Steering, SteerStep, default_clip, fit_from_arrays,
                                     fit_step)

__all__ = ["DEFAULT_BETA", "METHODS", "Stats", "Steering", "SteerStep", "Whitening", "concept_mean",
           "default_clip", "fit_from_arrays", "fit_step", "ledoit_wolf_coefficient", "neutral_stats"]
