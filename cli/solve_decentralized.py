"""solve-decentralized: optimal decentralized optimization with mixed affine constraints (APAPC + Chebyshev)."""
from __future__ import annotations

import click

from icmlkit.cli._common import ToolGroup, add_demo, config_options, make_main, output_option
from icmlkit.lib.solve_decentralized.config import KINDS, GenerateConfig, SolveConfig, SweepConfig

TOOL = "solve-decentralized"
RECONSTRUCTED = (
    "The reformulation (copies of x~, W' = Chebyshev polynomial of W, the auxiliary y, the blocks of K and "
    "their scalings alpha, beta, gamma, the augmentation of G), Tracking-ADMM's update and Algorithm 2's "
    "restarts are [reconstructed] from the predecessor paper (arXiv 2407.02020), not confirmed by the paper text. "
    "The DPMM baseline is [reconstructed] too (no primary source found): the linearised proximal method of "
    "multipliers on the plain node-local reformulation, multipliers exchanged with neighbours only."
)

cli = ToolGroup(
    TOOL,
    help=f"""Decentralized optimization with mixed affine constraints (Yarmoshik et al., ICML 2026).

\b
min sum_i f_i(x_i, x~)  s.t.  sum_i (A_i x_i - b_i) = 0, C_i x_i = c_i, Ct_i x~ = ct_i,
on a connected network where nodes only talk to their neighbours. Algorithm 1 (APAPC with
predictor and corrector, Chebyshev-accelerated gossip and Chebyshev iteration in K^T K) runs in
a single-process simulator or on torch.distributed (gloo, one process per node, neighbour
exchanges by batch_isend_irecv only), with honest accounting of communications (one W-product =
one round), A/C/Ct products and gradients.

{RECONSTRUCTED}

\b
Problem format: a JSON spec naming one .npz per node (A, b, C, c, Ct, ct and the loss data:
Q, q for quadratics; F, y, lam, weight for logistic; optional l1) and an edge-list CSV
(source,target[,weight]); see docs/solve-decentralized.md.

\b
Example:
  solve-decentralized generate mixed --graph ring --n-nodes 10 --kappa 100 -o prob/
  solve-decentralized solve prob/problem.json -o sol.npz --trace trace.csv --json
  solve-decentralized launch prob/problem.json --nproc 10 -o sol_dist.npz --json
  solve-decentralized sweep -o sweep.csv --plot sweep.png --json | jq .slope_chi""",
)


def _problem(run, path):
    from icmlkit.lib.solve_decentralized.problem import problem_files, read_problem

    prob = read_problem(run.input(path))
    for f in problem_files(path):
        run.input(f)
    return prob


@cli.command()
@click.argument("kind", type=click.Choice(list(KINDS)))
@config_options(GenerateConfig, exclude=("kind",))
@output_option("Folder to write problem.json, its node .npz files, graph and planted solution into.",
               directory=True, required=True)
def generate(run, kind, cfg, output):
    """Generate a problem with a planted optimum (x*, x~* and the multipliers drawn first, the linear
    terms and right-hand sides derived, so the KKT conditions hold exactly).

    \b
    JSON keys: kind, graph, n_nodes, dim_shared, m, spec (the problem.json path), objective_check
    (KKT stationarity of the planted point).
    Examples:
      solve-decentralized generate mixed --graph path --n-nodes 5 --kappa 1000 -o mixed5/
      solve-decentralized generate vfl --graph star --n-nodes 4 --samples 30 -o vfl/
      solve-decentralized generate resource --cost logbarrier --graph ring --n-nodes 6 -o res/
    """
    import dataclasses

    from icmlkit.lib.core.runtime import numpy_rng
    from icmlkit.lib.solve_decentralized.generate import generate as gen
    from icmlkit.lib.solve_decentralized.problem import write_problem
    from icmlkit.lib.solve_decentralized.reference import kkt_residual

    cfg = dataclasses.replace(cfg, kind=kind)
    prob = gen(cfg.kind, cfg.n_nodes, cfg.graph, seed_rng=numpy_rng(run.seed, f"generate-{cfg.kind}"), d=cfg.dim,
               m=cfg.m, r=cfg.local_rows, s=cfg.shared_rows, p=cfg.dim_shared, kappa=cfg.kappa, samples=cfg.samples,
               lam=cfg.lam, cost=cfg.cost)
    with run.run_dir(output) as folder:
        write_problem(folder, prob)
    kkt = kkt_residual(prob, prob.solution["x"], prob.solution["xt"])
    return {"kind": cfg.kind, "graph": cfg.graph, "n_nodes": prob.n, "dim_shared": prob.p, "m": prob.m,
            "spec": f"{output}/problem.json", "objective_check": kkt["stationarity"]}


@cli.command("from-libsvm")
@click.argument("data")
@click.option("--split", type=click.Choice(["samples", "features"]), default="samples", show_default=True,
              help="samples: horizontal FL (contiguous sample blocks, consensus on the shared model); features: "
              "vertical FL (contiguous feature blocks, one party each; party 0 holds the labels and z, coupled "
              "constraint sum_i X_i w_i - c z' = 0, every A_i kept sparse).")
@click.option("--nodes", type=click.IntRange(min=2), default=20, show_default=True, help="Nodes / parties.")
@click.option("--graph", type=click.Choice(["path", "ring", "grid", "er", "star", "complete"]), default="ring",
              show_default=True, help="Communication graph.")
@click.option("--lam", type=click.FloatRange(min=0, min_open=True), default=1e-2, show_default=True,
              help="l2 weight: sum_i f_i = mean logistic loss + lam/2 ||w||^2 (no intercept; = scikit-learn's "
              "LogisticRegression(C=1/(lam N), fit_intercept=False)).")
@click.option("--n-features", type=click.IntRange(min=1), default=None, help="Feature count (default: the largest "
              "index seen; a9a has 123).")
@click.option("--z-scale", type=click.FloatRange(min=0, min_open=True), default=None,
              help="--split features: the scale c of z = c z' (default sqrt of the largest lambda_max(X_i^T X_i), "
              "our choice; it trades kappa_f for kappa_A and leaves the optimum unchanged).")
@output_option("Folder for problem.json and its files.", directory=True, required=True)
def from_libsvm(run, data, split, nodes, graph, lam, n_features, z_scale, output):
    """l2-logistic regression from a LIBSVM file (read sparse with scipy, never densified), split across
    the nodes by samples (HFL: consensus on the model) or by feature blocks (VFL: sparse coupled A_i).

    \b
    JSON keys: samples, features, split, n_nodes, graph, lam, z_scale (features only), spec.
    Examples:
      solve-decentralized from-libsvm ../shared/data/a9a/a9a.t --nodes 20 --graph ring -o a9a/
      solve-decentralized from-libsvm ../shared/data/a9a/a9a.t --split features --nodes 4 --graph path -o a9a-vfl/
    """
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.core.runtime import numpy_rng
    from icmlkit.lib.solve_decentralized.generate import hfl_logistic, vfl_logistic
    from icmlkit.lib.solve_decentralized.problem import read_libsvm, write_problem

    if z_scale is not None and split != "features":
        raise UsageError("--z-scale applies to --split features only")
    X, y = read_libsvm(run.input(data), n_features)
    if split == "features" and nodes > X.shape[1]:
        raise UsageError(f"--nodes {nodes} exceeds the {X.shape[1]} features of {data}: a party needs one")
    rng = numpy_rng(run.seed, "graph")
    prob = (hfl_logistic(X, y, nodes, lam, graph, rng=rng) if split == "samples"
            else vfl_logistic(X, y, nodes, lam, graph, rng=rng, z_scale=z_scale))
    with run.run_dir(output) as folder:
        write_problem(folder, prob)
    out = {"samples": int(X.shape[0]), "features": int(X.shape[1]), "split": split, "n_nodes": nodes, "graph": graph,
           "lam": lam, "spec": f"{output}/problem.json"}
    if split == "features":
        out["z_scale"] = prob.meta["z_scale"]
    return out


@cli.command("from-sklearn")
@click.argument("dataset", type=click.Choice(["diabetes", "breast_cancer", "wine", "digits"]))
@click.option("--split", type=click.Choice(["samples", "features"]), default="samples", show_default=True,
              help="samples: horizontal FL (consensus on the model); features: vertical FL (feature blocks per "
              "party, coupled constraint sum_i F_i x_i - z = 0, shared bias x~).")
@click.option("--nodes", type=click.IntRange(min=2), default=4, show_default=True, help="Nodes / parties.")
@click.option("--graph", type=click.Choice(["path", "ring", "grid", "er", "star", "complete"]), default="ring",
              show_default=True, help="Communication graph.")
@click.option("--loss", type=click.Choice(["ridge", "logistic"]), default="ridge", show_default=True,
              help="ridge: 1/2||X w + b - y||^2 + lam/2||w||^2 (= scikit-learn's Ridge(alpha=lam), halved); "
              "logistic (split samples only): mean logistic loss + lam/2||w||^2, labels +1 = the last class.")
@click.option("--lam", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Ridge alpha / l2 weight.")
@output_option("Folder for problem.json and its files.", directory=True, required=True)
def from_sklearn(run, dataset, split, nodes, graph, loss, lam, output):
    """A problem from a scikit-learn bundled set (features standardised; no download), split across
    the nodes by samples (HFL) or by feature blocks (VFL).

    \b
    JSON keys: dataset, split, loss, samples, features, n_nodes, graph, lam, m, spec.
    Example:  solve-decentralized from-sklearn breast_cancer --split features --nodes 4 --graph path -o vfl/
    """
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.core.runtime import numpy_rng
    from icmlkit.lib.solve_decentralized.generate import from_sklearn as build
    from icmlkit.lib.solve_decentralized.problem import write_problem

    if loss == "logistic" and split != "samples":
        raise UsageError("--loss logistic needs --split samples (the vertical FL problem is ridge)")
    prob, X, _ = build(dataset, split, nodes, graph, lam, loss, rng=numpy_rng(run.seed, "graph"))
    with run.run_dir(output) as folder:
        write_problem(folder, prob)
    return {"dataset": dataset, "split": split, "loss": loss, "samples": int(X.shape[0]), "features": int(X.shape[1]),
            "n_nodes": nodes, "graph": graph, "lam": lam, "m": prob.m, "spec": f"{output}/problem.json"}


@cli.command(seed=False)
@click.argument("problem")
@output_option("Write the central optimum (x, xt) as .npz.", suffixes=(".npz",), stdout=False)
@click.option("--method", type=click.Choice(["auto", "kkt", "newton", "cvxpy"]), default="auto", show_default=True,
              help="auto: numpy KKT for quadratics, Newton for logistic, cvxpy with an l1 term.")
def reference(run, problem, output, method):
    """The central optimum of (P) (ground truth for the error of every method).

    \b
    JSON keys: method, n_nodes, objective, kkt_stationarity, kkt_feasibility, norm_x, norm_xt, seconds,
    planted_error (when the problem has a planted solution).
    Example:  solve-decentralized reference prob/problem.json -o ref.npz --json
    """
    from icmlkit.lib.core.io import write_npz
    from icmlkit.lib.solve_decentralized.reference import reference as central

    run.output(output)
    prob = _problem(run, problem)
    res = central(prob, method)
    if output is not None:
        run.save(output, write_npz, x=res.x, xt=res.xt)
    return res.summary




def _solve_common(run, problem, output, trace, setup_out, require_converged, cfg):
    from icmlkit.lib.core.io import write_json, write_npz, write_rows
    from icmlkit.lib.solve_decentralized.solve import TRACE_COLUMNS, solution_arrays, solve

    for path in (output, trace, setup_out):
        run.output(path)
    prob = _problem(run, problem)
    res = solve(cfg, prob, seed=run.seed)
    if output is not None:
        run.save(output, write_npz, **solution_arrays(prob, res))
    if trace is not None:
        run.save(trace, write_rows, res.trace, columns=list(TRACE_COLUMNS))
    if setup_out is not None:
        run.save(setup_out, write_json, res.setup)
    if require_converged and not res.summary["converged"]:
        run.fail_check(f"not converged: rel_error {res.summary['rel_error']}, residual "
                       f"{res.summary['constraint_residual']} after {res.summary['iterations']} iterations "
                       f"(--tol {cfg.tol})")
    return res.summary


_trace_option = output_option("Per-iteration trace (iteration, communications, a_mults, grad_calls, rel_error, "
                              "constraint_residual, suboptimality, floats_sent, oracle_calls).", suffixes=(".csv", ".jsonl", ".parquet"),
                              flags=("--trace",), name="trace", stdout=False)
_setup_option = output_option("Write the setup constants (spectral bounds of W and K, alpha, beta, gamma, r, tau, "
                              "eta, theta, Chebyshev degrees) as JSON.", suffixes=(".json",), flags=("--setup",),
                              name="setup_out", stdout=False)
_require_option = click.option("--require-converged", is_flag=True, help="Exit 3 (after writing) when tol is missed.")


@cli.command()
@click.argument("problem")
@output_option("Solution .npz: x (n, dmax, zero-padded), d, xt (mean of the copies), xt_copies.",
               suffixes=(".npz",), stdout=False)
@_trace_option
@_setup_option
@_require_option
@config_options(SolveConfig)
def solve(run, problem, output, trace, setup_out, require_converged, cfg):
    """Solve a problem with Algorithm 1 (default) or a baseline; error and residual against the central
    optimum are computed outside the algorithm (logging and the stopping test only).

    \b
    JSON keys: method, backend, n_nodes, chi, kappa_f, kappa_ac, kappa_ct, iterations, communications,
    floats_sent (floats over all directed links), floats_per_link_round, a_mults, grad_calls, prox_calls,
    local_solves, oracle_calls (their sum, per node), rel_error, constraint_residual, suboptimality, converged,
    seconds, loop_seconds; for apapc-cheb / apapc also practical, consensus_rows, eta, deg_w, deg_k,
    predicted_communications_scale (sqrt(kappa_f)(sqrt(kappa_ac) + sqrt(kappa_ct)) sqrt(chi)) and
    predicted_communications (times log(1/tol)); for tracking-admm local_steps, local_step.
    Examples:
      solve-decentralized solve prob/problem.json -o sol.npz --trace trace.csv --json
      solve-decentralized solve prob/problem.json -m tracking-admm --rho 2 --tol 1e-6 --json
      solve-decentralized solve prob/problem.json -m dpmm --rho 30 --json
      solve-decentralized solve prob/problem.json --backend dist --require-converged
    """
    return _solve_common(run, problem, output, trace, setup_out, require_converged, cfg)


@cli.command()
@click.argument("problem")
@click.option("--nproc", type=click.IntRange(min=2), required=True, help="Processes: one per node (must equal "
              "the problem's n_nodes).")
@output_option("Solution .npz (as solve).", suffixes=(".npz",), stdout=False)
@_trace_option
@_setup_option
@_require_option
@config_options(SolveConfig, exclude=("backend",))
def launch(run, problem, nproc, output, trace, setup_out, require_converged, cfg):
    """Run Algorithm 1 on torch.distributed: NPROC gloo processes on localhost started by
    torch.multiprocessing, one node each, neighbour exchanges only (batch_isend_irecv); the same
    iterates as the simulator. Global logging (an all_gather per iteration, outside the algorithm)
    is on for the --tol stopping test and off with --iterations.

    \b
    JSON keys: method, backend, n_nodes, chi, kappa_f, kappa_ac, kappa_ct, iterations, communications,
    floats_sent (floats over all directed links), floats_per_link_round, a_mults, grad_calls, prox_calls,
    local_solves, oracle_calls (their sum, per node), rel_error, constraint_residual, suboptimality, converged,
    seconds, loop_seconds; for apapc-cheb / apapc also practical, consensus_rows, eta, deg_w, deg_k,
    predicted_communications_scale (sqrt(kappa_f)(sqrt(kappa_ac) + sqrt(kappa_ct)) sqrt(chi)) and
    predicted_communications (times log(1/tol)); for tracking-admm local_steps, local_step.
    Example:  solve-decentralized launch prob/problem.json --nproc 4 --iterations 200 -o sol.npz --json
    """
    import dataclasses

    from icmlkit.lib.core.errors import UsageError

    if cfg.method not in ("apapc-cheb", "apapc"):
        raise UsageError("launch runs --method apapc-cheb or apapc")
    cfg = dataclasses.replace(cfg, backend="dist")
    from icmlkit.lib.solve_decentralized.problem import read_problem

    # the node count is checked before any process starts
    prob_n = read_problem(problem).n
    if nproc != prob_n:
        raise UsageError(f"--nproc {nproc}: the problem has {prob_n} nodes (one process per node)")
    return _solve_common(run, problem, output, trace, setup_out, require_converged, cfg)


@cli.command()
@config_options(SweepConfig)
@output_option("Table of the cells (graph, n_nodes, chi, kappa_f, kappa_ac, kappa_ct, iterations, communications, "
               "...).", suffixes=(".csv", ".jsonl", ".parquet"))
@output_option("Log-log plot of communications vs chi and vs kappa_f.", suffixes=(".png",), stdout=False,
               flags=("--plot",), name="plot")
def sweep(run, cfg, output, plot):
    """Communications to --tol across graphs, node counts and kappa_f on planted mixed problems, with
    the fitted log-log slopes (theory: 0.5 in chi and in kappa_f).

    \b
    JSON keys: cells, converged_cells, slope_chi, slope_kappa_f, slope_mixed, cells_fitted, max_rel_error,
    max_constraint_residual.
    Example:  solve-decentralized sweep --nodes 5,10,20 --graphs path,ring --kappas 10,100,1000 -o sweep.csv --plot s.png
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.solve_decentralized.sweep import plot_sweep, sweep as run_sweep

    run.output(output)
    run.output(plot)
    res = run_sweep(cfg, seed=run.seed)
    run.save(output, write_rows, res.rows)
    run.save(plot, plot_sweep, res.rows)
    return res.summary


add_demo(
    cli, "icmlkit.lib.solve_decentralized.demo:run_demo",
    options=[click.option("--nodes", type=click.IntRange(min=2), default=10, show_default=True, help="Nodes (ring)."),
             click.option("--kappa", type=click.FloatRange(min=1), default=100.0, show_default=True,
                          help="Condition number of f_i.")],
    doc="""Solve a planted mixed problem on a ring with APAPC+Chebyshev, plain APAPC, Tracking-ADMM and
    centralized APAPC, then a 2x2x2 sweep; writes problem/, traces, solution.npz, sweep.csv, sweep.png,
    summary.json and manifest.json into OUTDIR.

    \b
    JSON keys: headline, methods (one summary per method, as solve's), sweep (as sweep's), outdir.
    Example:  solve-decentralized demo --outdir outputs/demo/solve-decentralized --json
    """,
)

main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
