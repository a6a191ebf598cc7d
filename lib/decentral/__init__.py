"""Decentralized optimization with mixed affine constraints (method sheet solve-decentralized.md):
problem format, planted generators, the central reference, Algorithm 1 (APAPC + Chebyshev) in a
simulator and on torch.distributed, Algorithm 2 (gradient sliding) and the baselines.

The block construction of K, its scalings, the augmentation of G, Tracking-ADMM's update and
Algorithm 2's restarts are [reconstructed] from the predecessor paper (arXiv 2407.02020).
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {  # name -> module: submodules load on first use (the package import stays numpy-free)
    "Problem": "icmlkit.lib.decentral.problem",
    "read_problem": "icmlkit.lib.decentral.problem",
    "write_problem": "icmlkit.lib.decentral.problem",
    "read_libsvm": "icmlkit.lib.decentral.problem",
    "make_graph": "icmlkit.lib.decentral.problem",
    "generate": "icmlkit.lib.decentral.generate",
    "plant": "icmlkit.lib.decentral.generate",
    "vfl_ridge": "icmlkit.lib.decentral.generate",
    "hfl_logistic": "icmlkit.lib.decentral.generate",
    "reference": "icmlkit.lib.decentral.reference",
    "ReferenceResult": "icmlkit.lib.decentral.reference",
    "kkt_residual": "icmlkit.lib.decentral.reference",
    "Setup": "icmlkit.lib.decentral.spectral",
    "make_setup": "icmlkit.lib.decentral.spectral",
    "chebyshev_solve": "icmlkit.lib.decentral.spectral",
    "wprime_dense": "icmlkit.lib.decentral.spectral",
    "NodeOps": "icmlkit.lib.decentral.methods",
    "apapc": "icmlkit.lib.decentral.methods",
    "TrackingADMM": "icmlkit.lib.decentral.methods",
    "extra": "icmlkit.lib.decentral.methods",
    "gradient_tracking": "icmlkit.lib.decentral.methods",
    "sliding": "icmlkit.lib.decentral.sliding",
    "solve": "icmlkit.lib.decentral.solve",
    "SolveResult": "icmlkit.lib.decentral.solve",
    "run_dist": "icmlkit.lib.decentral.dist",
    "run_threads": "icmlkit.lib.decentral.dist",
    "sweep": "icmlkit.lib.decentral.sweep",
    "run_demo": "icmlkit.lib.decentral.demo",
    "SolveConfig": "icmlkit.lib.decentral.config",
    "GenerateConfig": "icmlkit.lib.decentral.config",
    "SweepConfig": "icmlkit.lib.decentral.config",
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
