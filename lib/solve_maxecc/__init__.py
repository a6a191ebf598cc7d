"""MaxECC (maximum edge-coloured clustering) on hypergraphs: LP relaxation, roundings, exact
solvers, instance formats and generators (method sheet solve-maxecc.md).

The three rounding algorithms with factors 1/(r+1), 1/ceil(k/2) and (1 - e^-r)/r are
RECONSTRUCTED from the paper's abstract (the paper text is not known); see each docstring. The
finite-horizon form of the third (``finite_horizon``) is reconstructed too.
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {  # name -> module: submodules load on first use, so `lp` never imports torch
    "ALGORITHMS": "icmlkit.lib.solve_maxecc.solve",
    "DEFAULT_METHOD": "icmlkit.lib.solve_maxecc.lp",
    "GenerateConfig": "icmlkit.lib.solve_maxecc.config",
    "LPConfig": "icmlkit.lib.solve_maxecc.config",
    "SolveConfig": "icmlkit.lib.solve_maxecc.config",
    "Hypergraph": "icmlkit.lib.solve_maxecc.hypergraph",
    "ILPResult": "icmlkit.lib.solve_maxecc.ilp",
    "LPSolution": "icmlkit.lib.solve_maxecc.lp",
    "METHODS": "icmlkit.lib.solve_maxecc.lp",
    "Rounds": "icmlkit.lib.solve_maxecc.rounding",
    "SUMMARY_KEYS": "icmlkit.lib.solve_maxecc.solve",
    "SolveResult": "icmlkit.lib.solve_maxecc.solve",
    "UNCOLOURED": "icmlkit.lib.solve_maxecc.formats",
    "brute_force": "icmlkit.lib.solve_maxecc.ilp",
    "build_model": "icmlkit.lib.solve_maxecc.lp",
    "colour_pairs": "icmlkit.lib.solve_maxecc.rounding",
    "edge_bounds": "icmlkit.lib.solve_maxecc.rounding",
    "evaluate": "icmlkit.lib.solve_maxecc.rounding",
    "factors": "icmlkit.lib.solve_maxecc.rounding",
    "incident_pairs": "icmlkit.lib.solve_maxecc.lp",
    "load_lp": "icmlkit.lib.solve_maxecc.lp",
    "local_search": "icmlkit.lib.solve_maxecc.rounding",
    "lp_argmax": "icmlkit.lib.solve_maxecc.rounding",
    "majority": "icmlkit.lib.solve_maxecc.rounding",
    "odd_cycle": "icmlkit.lib.solve_maxecc.generate",
    "paired": "icmlkit.lib.solve_maxecc.rounding",
    "paired_derandomized": "icmlkit.lib.solve_maxecc.rounding",
    "planted": "icmlkit.lib.solve_maxecc.generate",
    "rainbow_cycle": "icmlkit.lib.solve_maxecc.generate",
    "read_colouring": "icmlkit.lib.solve_maxecc.formats",
    "read_instance": "icmlkit.lib.solve_maxecc.formats",
    "save_lp": "icmlkit.lib.solve_maxecc.lp",
    "scaled": "icmlkit.lib.solve_maxecc.rounding",
    "finite_horizon": "icmlkit.lib.solve_maxecc.rounding",
    "solve": "icmlkit.lib.solve_maxecc.solve",
    "solve_ilp": "icmlkit.lib.solve_maxecc.ilp",
    "solve_lp": "icmlkit.lib.solve_maxecc.lp",
    "star": "icmlkit.lib.solve_maxecc.generate",
    "threshold_order": "icmlkit.lib.solve_maxecc.rounding",
    "write_colouring": "icmlkit.lib.solve_maxecc.formats",
    "write_instance": "icmlkit.lib.solve_maxecc.formats",
    "score_colouring": "icmlkit.lib.solve_maxecc.solve",
    "read_labels": "icmlkit.lib.solve_maxecc.formats",
    "write_labels": "icmlkit.lib.solve_maxecc.formats",
    "combinatorial": "icmlkit.lib.solve_maxecc.minecc",
    "veldt_threshold": "icmlkit.lib.solve_maxecc.minecc",
    "min_factors": "icmlkit.lib.solve_maxecc.minecc",
    "exact_edge_probabilities": "icmlkit.lib.solve_maxecc.exact",
    "exact_expected_value": "icmlkit.lib.solve_maxecc.exact",
    "adversarial_search": "icmlkit.lib.solve_maxecc.exact",
    "perturbed": "icmlkit.lib.solve_maxecc.generate",
    "disjoint_copies": "icmlkit.lib.solve_maxecc.generate",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "ALGORITHMS", "DEFAULT_METHOD", "METHODS", "SUMMARY_KEYS", "UNCOLOURED",
    "GenerateConfig", "Hypergraph", "ILPResult", "LPConfig", "LPSolution", "Rounds", "SolveConfig", "SolveResult",
    "brute_force", "build_model", "colour_pairs", "edge_bounds", "evaluate", "factors",
    "incident_pairs", "load_lp", "local_search", "lp_argmax", "majority", "odd_cycle", "paired",
    "paired_derandomized", "planted", "rainbow_cycle", "read_colouring", "read_instance",
    "save_lp", "scaled", "finite_horizon", "solve", "solve_ilp", "solve_lp", "star", "threshold_order", "write_colouring",
    "write_instance", "score_colouring", "read_labels", "write_labels", "combinatorial", "veldt_threshold",
    "min_factors", "exact_edge_probabilities", "exact_expected_value", "adversarial_search", "perturbed",
    "disjoint_copies",
]
