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

