"""Option dataclasses of solve-decentralized (light: no numpy import; the CLI builds its flags here)."""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.core.config import option
from icmlkit.lib.core.errors import UsageError

METHODS = ("apapc-cheb", "apapc", "sliding", "tracking-admm", "dpmm", "extra", "gradient-tracking", "centralized")
BACKENDS = ("sim", "dist")
KINDS = ("mixed", "resource", "hfl", "vfl")
GRAPHS = ("path", "ring", "grid", "er", "star", "complete")


@dataclass
class SolveConfig:
    """Options of :func:`icmlkit.lib.solve_decentralized.solve.solve`."""

    method: str = option("apapc-cheb", "apapc-cheb: Algorithm 1 (APAPC + Chebyshev); apapc: plain APAPC (W' = W, no "
                         "Chebyshev); sliding: Algorithm 2 (gradient sliding, non-smooth / non-strongly convex); "
                         "tracking-admm, dpmm (decentralized proximal method of multipliers, [reconstructed]: "
                         "no primary source found), extra, gradient-tracking (primal on consensus problems; on the dual "
                         "for constrained quadratic problems, [reconstructed]), centralized: baselines.",
                         choices=METHODS, flags=("-m", "--method"))
    backend: str = option("sim", "sim: single-process simulator; dist: one torch.distributed (gloo) process per "
                          "node on localhost, neighbour exchanges only (apapc-cheb and apapc).", choices=BACKENDS)
    tol: float = option(1e-6, "Stop when the relative error on (x, x~) and the constraint residual are both "
                        "<= tol (measured against the central optimum, outside the algorithm).", min=0, min_open=True)
    max_iter: int = option(100000, "Iteration cap.", min=1)
    iterations: int | None = option(None, "Run exactly this many iterations (no stopping test; for comparisons "
                                    "between backends).", min=1)
    criterion: str = option("error", "error: rel. error and residual <= tol; suboptimality: (F(mean x~) - F*)/|F*| "
                            "<= tol and residual <= tol.", choices=("error", "suboptimality"))
    bounds: str = option("exact", "Spectral bounds of W: exact (dense eigen-solve) or power (power iteration with "
                         "2% safety margins); K's are always a dense eigen-solve.", choices=("exact", "power"))
    aug: float = option(1.0, "Augmentation weight factor: r = aug * L_f / lambda_max(M^T M) with M the "
                        "augmented rows of K [reconstructed].", min=0)
    augment: str = option("auto", "Augmentation of G: coupled (the sheet: (r/2)||A x + alpha W'y - b||^2), all "
                          "((r/2)||K u - b'||^2 [reconstructed]) or auto (coupled unless G is then not strongly "
                          "convex).", choices=("auto", "coupled", "all"))
    step: float | None = option(None, "extra / gradient-tracking: step in units of 1/L_f (on the dual: of "
                                "1/L of the dual) (default 1 for extra, 0.25 for gradient-tracking); sliding: "
                                "penalty R in units of L_f/lambda_max(K^T K) (default 30); apapc-cheb / apapc: "
                                "APAPC's eta in units of the theory's 1/(4 tau L_G) (default 1; theta = 1/(eta L_K) "
                                "follows; a value other than 1 is the practical mode, not the theory constants).",
                                min=0, min_open=True)
    practical: bool = option(False, "apapc-cheb / apapc, the PRACTICAL mode (not the theory constants; our "
                             "choice): the consensus rows of K are gamma W'^{1/2} instead of gamma W' (K^T K holds "
                             "W', not W'^2, on the copies of x~: one W' product fewer per K^T K product and the "
                             "square root of that block's condition number); pair with --deg-k and --step chosen "
                             "by a tuning run (the bench's grid part tunes them with the same budget as every "
                             "baseline). Dense problems only.")
    deg_k: int | None = option(None, "apapc-cheb: the inner Chebyshev degree in K^T K (default: the theory's "
                               "ceil(sqrt(kappa_K)); a given value is the practical mode).", min=1)
    deg_w: int | None = option(None, "apapc-cheb: the degree of W' = P(W) (W-products per W' product; default: "
                               "the theory's ceil(sqrt(chi)); a given value is the practical mode).", min=1)
    local_steps: int | None = option(None, "tracking-admm: T accelerated projected-gradient steps per local "
                                     "problem instead of its exact solve (the oracle-matched variant, "
                                     "[reconstructed]: T gradient calls per node and iteration; any smooth loss). "
                                     "Default: the exact local KKT solve (quadratic losses).", min=1)
    rho: float | None = option(None, "tracking-admm penalty rho (default 1); dpmm [reconstructed]: penalty (dual "
                               "step) in units of sqrt(mu_f L_f)/lambda_max(K^T K) (default 30), proximal step "
                               "c = 0.99/(rho lambda_max(K^T K)).", min=0, min_open=True)
    reference: str = option("auto", "Central optimum: auto (numpy KKT for quadratics, Newton for logistic), kkt, "
                            "newton or cvxpy.", choices=("auto", "kkt", "newton", "cvxpy"))
    trace_every: int = option(1, "Write every k-th iteration to the trace.", min=1)
    sliding_restarts: int = option(60, "sliding: restarts (multiplier updates) [reconstructed].", min=1)
    sliding_inner: int = option(20, "sliding: inner prox-gradient steps T_k per outer step, and outer steps per "
                                "restart [reconstructed].", min=1)

    def check(self) -> None:
        if self.backend == "dist" and self.method not in ("apapc-cheb", "apapc"):
            raise UsageError("--backend dist runs --method apapc-cheb or apapc; the baselines run in the simulator")
        if (self.practical or self.deg_k is not None or self.deg_w is not None) and self.method not in ("apapc-cheb", "apapc"):
            raise UsageError("--practical, --deg-k and --deg-w belong to --method apapc-cheb or apapc")
        if self.local_steps is not None and self.method != "tracking-admm":
            raise UsageError("--local-steps belongs to --method tracking-admm")


@dataclass
class GenerateConfig:
    """Options of :func:`icmlkit.lib.solve_decentralized.generate.generate`."""

    kind: str = option("mixed", "Problem family (all with a planted optimum).", choices=KINDS)
    graph: str = option("path", "Communication graph.", choices=GRAPHS)
    n_nodes: int = option(5, "Number of nodes.", min=2)
    dim: int = option(5, "d_i: local variable dimension (vfl: features per party).", min=1)
    m: int = option(3, "Rows of the coupled constraint (mixed).", min=1)
    local_rows: int = option(1, "Rows of C_i (mixed).", min=0)
    shared_rows: int = option(2, "Rows of Ct_i (mixed).", min=0)
    dim_shared: int = option(4, "p: dimension of the shared variable (mixed, hfl).", min=1)
    kappa: float = option(10.0, "Condition number of each f_i (mixed, resource).", min=1)
    samples: int = option(20, "Samples per node (hfl) or in total (vfl).", min=1)
    lam: float = option(0.1, "Ridge weight (hfl, vfl).", min=0, min_open=True)
    cost: str = option("quadratic", "resource: quadratic costs, or logbarrier (quadratic plus a log-barrier "
                       "-sum_j bw_j log(x_j - lb_j) on each node's resources).", choices=("quadratic", "logbarrier"))



@dataclass
class SweepConfig:
    """Options of :func:`icmlkit.lib.solve_decentralized.sweep.sweep`."""

    nodes: list[int] = option([5, 10, 20], "Node counts.")
    graphs: list[str] = option(["path", "ring"], "Graphs (path, ring, grid, er, star, complete).")
    kappas: list[float] = option([10.0, 100.0, 1000.0], "Condition numbers kappa_f.")
    tol: float = option(1e-6, "Target relative error and residual.", min=0, min_open=True)
    max_iter: int = option(100000, "Iteration cap per cell.", min=1)
    method: str = option("apapc-cheb", "Method swept.", choices=METHODS)

    def check(self) -> None:
        bad = [g for g in self.graphs if g not in GRAPHS]
        if bad:
            raise UsageError(f"--graphs: unknown graph(s) {bad}; expected {', '.join(GRAPHS)}")
        if any(n < 2 for n in self.nodes):
            raise UsageError("--nodes must all be >= 2")
        if any(k < 1 for k in self.kappas):
            raise UsageError("--kappas must all be >= 1")
