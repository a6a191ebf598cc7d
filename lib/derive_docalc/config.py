"""The settings of derive-docalc's subcommands, in a module that imports nothing heavy (the CLI
declares its options from these dataclasses at import time, and ``--help`` must stay fast)."""
from __future__ import annotations

from dataclasses import dataclass, field

from icmlkit.lib.core.config import option as _opt

CAP_HELP = ("Stop the breadth-first search after this many members (the output says capped: true; the class "
            "is then incomplete).")


@dataclass
class EstimateConfig:
    """How ``derive-docalc estimate`` estimates and ranks the estimands of a query's class."""

    kind: str = _opt("auto", "discrete: plug-in on probability tables (einsum); gaussian: linear-Gaussian plug-in "
                     "(the effect dE[y|do(x),w]/dx); auto: discrete when every column has <= 10 integer values.",
                     choices=("auto", "discrete", "gaussian"))
    bootstrap: int = _opt(200, "Bootstrap replicates (vectorised) for the variance and the CI.", min=2)
    level: float = _opt(0.95, "Percentile bootstrap CI level.", min=0.5, max=0.999)
    cap: int = _opt(200_000, CAP_HELP, min=1)
    projections: bool = _opt(False, "Also rank the estimands from latent projections (EXTENSION, see "
                             "`identify --help`).")
    contrast: str | None = _opt(None, "A,B: also estimate, for every estimand, the contrast between the "
                                "treatment values x=A and x=B of the first action (discrete: E[y|do(x=A),w] - "
                                "E[y|do(x=B),w] for one numeric outcome, else the difference of P(y|do(x),w) at "
                                "the query's y value; gaussian: the slope times A - B), with its bootstrap CI; "
                                "the ranking then uses the contrast's bootstrap variance.")
    baselines: bool = _opt(True, "Also estimate two estimators BESIDE the class (not in the paper; rows marked "
                           "in_class: false unless a member gives the same estimand): ID simplified by "
                           "d-separation, and the optimal adjustment set O(X,Y) (Henckel, Perkovic & "
                           "Maathuis 2022; queries without w, when O is a valid adjustment set).")
    prune: bool = _opt(True, "Remove the variables with no path to the outcome before the search (exact: "
                       "each member then stands for 3^k expressions over the k pruned variables).")
    simplify: bool = _opt(False, "Also rank every member's estimand simplified by d-separation (each P(A|C) "
                          "drops the c with A _||_ c | C minus c in G, then the sums that vanish; not in the "
                          "paper): the class then contains simplified ID.")

    def check(self) -> None:
        from icmlkit.lib.core.errors import UsageError

        if self.contrast is not None:
            parts = [p.strip() for p in str(self.contrast).split(",")]
            if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
                raise UsageError(f"--contrast: expected two different treatment values 'A,B', got {self.contrast!r}")

    @property
    def contrast_values(self) -> tuple[str, str] | None:
        if self.contrast is None:
            return None
        a, b = (p.strip() for p in str(self.contrast).split(","))
        return a, b


@dataclass
class FalsifyConfig:
    """How ``derive-docalc falsify`` tests the equality of a class's distinct estimands on data."""

    kind: str = _opt("auto", "discrete: plug-in on probability tables; gaussian: linear-Gaussian slopes; auto: "
                     "discrete when every column has <= 10 integer values.", choices=("auto", "discrete", "gaussian"))
    bootstrap: int = _opt(400, "Bootstrap replicates for the covariance of the estimand differences.", min=20)
    fail_under: float | None = _opt(None, "Exit 3 (after the answer) when the p-value is below ALPHA.",
                                    min=0.0, max=1.0)
    projections: bool = _opt(False, "Also include the estimands from latent projections (EXTENSION, see "
                             "`identify --help`).")
    cap: int = _opt(200_000, CAP_HELP, min=1)
    prune: bool = _opt(True, "Remove the variables with no path to the outcome before the search.")



@dataclass
class GenerateConfig:
    """Samples of a random SCM on a graph (``derive-docalc generate``)."""

    kind: str = field(default="discrete", metadata={
        "help": "discrete: a random SCM of --card-valued variables (Dirichlet CPTs, one explicit latent per "
                "bidirected edge); gaussian: a linear-Gaussian SCM (coefficients +-[0.5, 1.5], latent loadings "
                "+-[0.5, 1], unit noise).", "choices": ("discrete", "gaussian")})
    n: int = field(default=1000, metadata={"help": "Samples (rows).", "min": 2})
    card: int = field(default=2, metadata={"help": "discrete: values per variable (0 .. card-1).", "min": 2,
                                           "max": 10})
    alpha: float = field(default=1.0, metadata={"help": "discrete: Dirichlet concentration of the CPTs (small: "
                                                "strong effects).", "min": 0, "min_open": True})

