"""Decentralized optimization with mixed affine constraints (method sheet solve-decentralized.md):
problem format, planted generators, the central reference, Algorithm 1 (APAPC + Chebyshev) in a
simulator and on torch.distributed, Algorithm 2 (gradient sliding) and the baselines.

The block construction of K, its scalings, the augmentation of G, Tracking-ADMM's update and
Algorithm 2's restarts are [reconstructed] from the predecessor paper (arXiv 2407.02020).
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {  # name -> module: submodules load on first use (the package import stays numpy-free)
    "Problem": "icmlkit.lib.solve_decentralized.problem",
    "read_problem": "icmlkit.lib.solve_decentralized.problem",
    "write_problem": "icmlkit.lib.solve_decentralized.problem",
    "read_libsvm": "icmlkit.lib.solve_decentralized.problem",
    "make_graph": "icmlkit.lib.solve_decentralized.problem",
    "generate": "icmlkit.lib.solve_decentralized.generate",
    "plant": "icmlkit.lib.solve_decentralized.generate",
    "vfl_ridge": "icmlkit.lib.solve_decentralized.generate",
    "hfl_logistic": "icmlkit.lib.solve_decentralized.generate",
    "reference": "icmlkit.lib.solve_decentralized.reference",
    "ReferenceResult": "icmlkit.lib.solve_decentralized.reference",
    "kkt_residual": "icmlkit.lib.solve_decentralized.reference",
    "Setup": "icmlkit.lib.solve_decentralized.spectral",
    "make_setup": "icmlkit.lib.solve_decentralized.spectral",
    "chebyshev_solve": "icmlkit.lib.solve_decentralized.spectral",
    "wprime_dense": "icmlkit.lib.solve_decentralized.spectral",
    "NodeOps": "icmlkit.lib.solve_decentralized.methods",
    "apapc": "icmlkit.lib.solve_decentralized.methods",
    "TrackingADMM": "icmlkit.lib.solve_decentralized.methods",
    "extra": "icmlkit.lib.solve_decentralized.methods",
    "gradient_tracking": "icmlkit.lib.solve_decentralized.methods",
    "sliding": "icmlkit.lib.solve_decentralized.sliding",
    "solve": "icmlkit.lib.solve_decentralized.solve",
    "SolveResult": "icmlkit.lib.solve_decentralized.solve",
    "run_dist": "icmlkit.lib.solve_decentralized.dist",
    "run_threads": "icmlkit.lib.solve_decentralized.dist",
    "sweep": "icmlkit.lib.solve_decentralized.sweep",
    "run_demo": "icmlkit.lib.solve_decentralized.demo",
    "SolveConfig": "icmlkit.lib.solve_decentralized.config",
    "GenerateConfig": "icmlkit.lib.solve_decentralized.config",
    "SweepConfig": "icmlkit.lib.solve_decentralized.config",
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
