"""MaxECC (maximum edge-coloured clustering) on hypergraphs: LP relaxation, roundings, exact
solvers, instance formats and generators (method sheet solve-maxecc.md).

The three rounding algorithms with factors 1/(r+1), 1/ceil(k/2) and (1 - e^-r)/r are
RECONSTRUCTED from the paper's abstract (the paper text is not known); see each docstring.
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {  # name -> module: submodules load on first use, so `lp` never imports torch
    "ALGORITHMS": "icmlkit.lib.maxecc.solve",
    "DEFAULT_METHOD": "icmlkit.lib.maxecc.lp",
    "Hypergraph": "icmlkit.lib.maxecc.hypergraph",
    "ILPResult": "icmlkit.lib.maxecc.ilp",
    "LPSolution": "icmlkit.lib.maxecc.lp",
    "METHODS": "icmlkit.lib.maxecc.lp",
    "Rounds": "icmlkit.lib.maxecc.rounding",
    "SUMMARY_KEYS": "icmlkit.lib.maxecc.solve",
    "SolveResult": "icmlkit.lib.maxecc.solve",
    "UNCOLOURED": "icmlkit.lib.maxecc.formats",
    "brute_force": "icmlkit.lib.maxecc.ilp",
    "build_model": "icmlkit.lib.maxecc.lp",
    "colour_pairs": "icmlkit.lib.maxecc.rounding",
    "edge_bounds": "icmlkit.lib.maxecc.rounding",
    "evaluate": "icmlkit.lib.maxecc.rounding",
    "factors": "icmlkit.lib.maxecc.rounding",
    "incident_pairs": "icmlkit.lib.maxecc.lp",
    "load_lp": "icmlkit.lib.maxecc.lp",
    "local_search": "icmlkit.lib.maxecc.rounding",
    "lp_argmax": "icmlkit.lib.maxecc.rounding",
    "majority": "icmlkit.lib.maxecc.rounding",
    "odd_cycle": "icmlkit.lib.maxecc.generate",
    "paired": "icmlkit.lib.maxecc.rounding",
    "paired_derandomized": "icmlkit.lib.maxecc.rounding",
    "planted": "icmlkit.lib.maxecc.generate",
    "rainbow_cycle": "icmlkit.lib.maxecc.generate",
    "read_colouring": "icmlkit.lib.maxecc.formats",
    "read_instance": "icmlkit.lib.maxecc.formats",
    "save_lp": "icmlkit.lib.maxecc.lp",
    "scaled": "icmlkit.lib.maxecc.rounding",
    "solve": "icmlkit.lib.maxecc.solve",
    "solve_ilp": "icmlkit.lib.maxecc.ilp",
    "solve_lp": "icmlkit.lib.maxecc.lp",
    "star": "icmlkit.lib.maxecc.generate",
    "threshold_order": "icmlkit.lib.maxecc.rounding",
    "write_colouring": "icmlkit.lib.maxecc.formats",
    "write_instance": "icmlkit.lib.maxecc.formats",
    "score_colouring": "icmlkit.lib.maxecc.solve",
    "read_labels": "icmlkit.lib.maxecc.formats",
    "write_labels": "icmlkit.lib.maxecc.formats",
    "combinatorial": "icmlkit.lib.maxecc.minecc",
    "veldt_threshold": "icmlkit.lib.maxecc.minecc",
    "min_factors": "icmlkit.lib.maxecc.minecc",
    "exact_edge_probabilities": "icmlkit.lib.maxecc.exact",
    "exact_expected_value": "icmlkit.lib.maxecc.exact",
    "adversarial_search": "icmlkit.lib.maxecc.exact",
    "perturbed": "icmlkit.lib.maxecc.generate",
    "disjoint_copies": "icmlkit.lib.maxecc.generate",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "ALGORITHMS", "DEFAULT_METHOD", "METHODS", "SUMMARY_KEYS", "UNCOLOURED",
    "Hypergraph", "ILPResult", "LPSolution", "Rounds", "SolveResult",
    "brute_force", "build_model", "colour_pairs", "edge_bounds", "evaluate", "factors",
    "incident_pairs", "load_lp", "local_search", "lp_argmax", "majority", "odd_cycle", "paired",
    "paired_derandomized", "planted", "rainbow_cycle", "read_colouring", "read_instance",
    "save_lp", "scaled", "solve", "solve_ilp", "solve_lp", "star", "threshold_order", "write_colouring",
    "write_instance", "score_colouring", "read_labels", "write_labels", "combinatorial", "veldt_threshold",
    "min_factors", "exact_edge_probabilities", "exact_expected_value", "adversarial_search", "perturbed",
    "disjoint_copies",
]
