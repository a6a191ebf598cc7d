"""derive-docalc: derivation graphs of the do-calculus, equivalent queries and multiple estimands
(Yvernes, Devijver, Clausel, Gaussier, ICML 2026). The canonical four-step criterion's sets are
reconstructed (the paper's text is not available)."""
from icmlkit.lib.docalc.api import ClassEstimands, Estimand, class_estimands, estimate_discrete, estimate_gaussian
from icmlkit.lib.docalc.derivation import (EquivalenceClass, RuleOracle, canonical_all_pairs, canonical_test,
                                           components, equivalence_class)
from icmlkit.lib.docalc.identify import NotIdentifiable, identify, identify_id

__all__ = ["ClassEstimands", "Estimand", "class_estimands", "estimate_discrete", "estimate_gaussian",
           "EquivalenceClass", "RuleOracle", "canonical_all_pairs", "canonical_test", "components",
           "equivalence_class", "NotIdentifiable", "identify", "identify_id"]
