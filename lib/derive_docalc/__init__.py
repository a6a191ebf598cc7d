"""derive-docalc: derivation graphs of the do-calculus, equivalent queries and multiple estimands
(Yvernes, Devijver, Clausel, Gaussier, ICML 2026). The canonical four-step criterion's sets are
reconstructed (the paper's text is not available)."""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {  # name -> module: submodules load on first use, so the CLI's config import stays light
    **dict.fromkeys(["ClassEstimands", "Estimand", "class_estimands", "estimate", "estimate_discrete",
                     "estimate_gaussian", "check_equivalence", "adjustment_estimand"],
                    "icmlkit.lib.derive_docalc.api"),
    **dict.fromkeys(["EquivalenceClass", "RuleOracle", "canonical_all_pairs", "canonical_test", "components",
                     "equivalence_class"], "icmlkit.lib.derive_docalc.derivation"),
    **dict.fromkeys(["NotIdentifiable", "identify", "identify_id", "simplify"], "icmlkit.lib.derive_docalc.identify"),
    **dict.fromkeys(["prune"], "icmlkit.lib.derive_docalc.derivation"),
    **dict.fromkeys(["falsify", "wald_test"], "icmlkit.lib.derive_docalc.falsify"),
    **dict.fromkeys(["experiments", "identify_from_experiment"], "icmlkit.lib.derive_docalc.experiments"),
}
__getattr__ = lazy_exports(__name__, _LAZY)
__all__ = sorted(_LAZY)
