"""derive-docalc: derivation graphs of the do-calculus, equivalent queries and multiple estimands."""
from __future__ import annotations

import click

from icmlkit.cli._common import ToolGroup, add_demo, config_options, make_main, output_option
from icmlkit.lib.derive_docalc.config import CAP_HELP, EstimateConfig, FalsifyConfig, GenerateConfig

TOOL = "derive-docalc"
RECONSTRUCTED = (
    "The explicit sets of the four canonical steps (R2 up, R3 up, R3 down, R2 down) and the rule/direction "
    "labels are RECONSTRUCTED (the paper's text is unavailable); the test suite and the benchmark check "
    "the four-test criterion against the exhaustive derivation-graph search."
)

cli = ToolGroup(
    TOOL,
    help=f"""Equivalent do-calculus queries, their derivation graph and their estimands.

\b
For a causal graph G (an ADMG: -> and <-> edges) and a query P(y | do(x), w), find every
expression equal to it under the three rules of the do-calculus (the connected component of
the query in the derivation graph, by exact breadth-first search over set-valued rule
applications), decide equivalence of two expressions with four d-separation tests, derive
the estimands of the identifiable equivalents with ID/IDC, rank them by bootstrap
variance on data (discrete plug-in or linear-Gaussian; contrasts with CIs), compare them
with ID simplified by d-separation and the optimal adjustment set, test the graph by the
equality of its estimands (falsify), and list the experiments that identify a query.

{RECONSTRUCTED}

\b
Graphs: a file or a literal in DAGitty syntax ('dag {{ X -> Y; X <-> Y; U [latent] }}';
latent nodes are projected out), or JSON ({{"directed": [["X","Y"]], "bidirected": [...]}}
or {{"edges": ["X -> Y", "X <-> Y"]}}). Queries: 'P(y | do(x), w)', 'P(y1, y2 | do(x1, x2))',
values for estimation as 'P(y=1 | do(x=0))'. Names match the graph, case-insensitively.

\b
Examples:
  derive-docalc equivalents napkin.dag 'P(y | do(x))' --json | jq .n_members
  derive-docalc equivalents napkin.dag 'P(y | do(x))' --format dot -o napkin.dot
  derive-docalc check 'dag {{ Z -> X -> Y }}' 'P(y | do(x))' 'P(y | x, z)' && echo equal
  derive-docalc identify frontdoor.json 'P(y | do(x))' --format latex --json
  derive-docalc estimate fdbd.dag 'P(y | do(x))' data.csv --bootstrap 200 -o ranked.csv --json
  derive-docalc estimate mgraph.dag 'P(y=1 | do(x))' data.csv --contrast 1,0 --json | jq .best
  derive-docalc falsify 'dag {{ Z -> X -> Y }}' 'P(y | do(x))' data.csv --fail-under 0.05
  derive-docalc experiments iv.dag 'P(y | do(x))' --json | jq .experiments
  derive-docalc generate napkin.dag 'P(y=1 | do(x=1))' --n 5000 -o napkin.csv --json | jq .truth""",
)


def _graph(run, graph):
    from pathlib import Path

    from icmlkit.lib.causal.parse import read_graph

    literal = str(graph).lstrip().startswith("dag") and "{" in str(graph) and not Path(str(graph)).exists()
    return read_graph(graph if literal or graph == "-" else run.input(graph))


def _load(run, graph, query):
    from icmlkit.lib.causal.parse import parse_query
    from icmlkit.lib.derive_docalc.api import validate_query

    G = _graph(run, graph)
    q = parse_query(query, G)
    validate_query(G, q)
    return G, q


DATA_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".txt")


def _is_data(arg: str) -> bool:
    """A data argument, told by its kind: '-', an existing file, or a data file's suffix (a query such as
    'P(y | do(x))' is none of these)."""
    from pathlib import Path

    s = str(arg)
    return s == "-" or s.lower().endswith(DATA_SUFFIXES) or Path(s).is_file()


def _query_data(command: str, query: str, data: str) -> tuple[str, str]:
    """(query, data) from the arguments after GRAPH: QUERY DATA, or the old `falsify` order DATA QUERY
    (told by the file kinds), which still runs after one deprecation line on stderr."""
    import sys

    if _is_data(query) and not _is_data(data):
        sys.stderr.write(f"Warning: `{TOOL} {command} GRAPH DATA QUERY` is deprecated; use `{TOOL} {command} "
                         "GRAPH QUERY DATA` (the order of every subcommand)\n")
        return data, query
    return query, data


def _rules(no_r1: bool):
    return (2, 3) if no_r1 else (1, 2, 3)


cap_option = click.option("--cap", type=click.IntRange(min=1), default=200_000, show_default=True, help=CAP_HELP)
no_r1_option = click.option("--no-r1", is_flag=True,
                            help="Use rules 2 and 3 only (R1 follows from them; the class is the same).")
prune_option = click.option("--prune/--no-prune", default=True, show_default=True,
                            help="Remove the variables with no path to the outcome before the search (exact: "
                            "each listed member then stands for 3^k expressions over the k pruned variables, "
                            "which may be free, under do() or observed).")


@cli.command(seed=False)
@click.argument("graph")
@click.argument("query")
@cap_option
@no_r1_option
@prune_option
@click.option("--format", "fmt", type=click.Choice(["json", "dot"]), default="json", show_default=True,
              help="-o format: the class as JSON (members with their rule paths) or the derivation "
              "graph as Graphviz DOT (members as nodes, valid rule applications as labelled edges).")
@click.option("--method", type=click.Choice(["bfs", "canonical"]), default="bfs", show_default=True,
              help="bfs: exact breadth-first search on the derivation graph (the reference); canonical: the "
              "four-test criterion from the query to every one of the 3^|V\\Y| candidates (reconstructed "
              "step sets; paths are the canonical witnesses, DOT shows only their edges).")
@output_option("Write the class (JSON) or the derivation graph (DOT, with --format dot).",
               suffixes=(".json", ".dot", ".gv"))
def equivalents(run, graph, query, cap, no_r1, prune, method, fmt, output):
    """List every expression equivalent to QUERY, with the rule path from QUERY to each.

    Exact breadth-first search on the derivation graph D_Y(G): vertices P(y | do(x'), w') for the
    query's outcome y, edges single set-valued applications of R1, R2, R3 (labelled R2 up =
    observation -> action, R3 up = insert action, ... ; the naming is reconstructed).

    \b
    JSON keys: n_members, members (each: expression, do, given, observational, distance, path
    = list of {rule, Z, from, to}), pruned (variables with no path to the outcome, removed),
    n_expressions (= n_members x 3^|pruned|: the class over all variables), capped, seconds,
    query (over the kept variables), method, d_separation_tests.
    Examples:
      derive-docalc equivalents napkin.dag 'P(y|do(x))' --json | jq '.members[].expression'
      derive-docalc equivalents g.dag 'P(y|do(x))' --format dot -o - | dot -Tpng > d.png
    """
    from icmlkit.lib.core.io import dumps_json, suffix, write_text
    from icmlkit.lib.derive_docalc.derivation import equivalence_class, equivalence_class_canonical

    if output not in (None, "-") and (suffix(output) == ".json") != (fmt == "json"):
        raise click.BadParameter(f"{output}: --format {fmt} writes {'JSON (.json)' if fmt == 'json' else 'DOT (.dot, .gv)'}",
                                 param_hint="-o")
    run.output(output)
    G, q = _load(run, graph, query)
    if method == "canonical":
        cls = equivalence_class_canonical(G, q, cap=cap, edges=(fmt == "dot"), pruning=prune)
    else:
        cls = equivalence_class(G, q, rules=_rules(no_r1), cap=cap, edges=(fmt == "dot"), pruning=prune)
    if cls.capped:
        from icmlkit.lib.core.console import log

        log.warning("the search stopped at --cap %d members: the class listed is incomplete", cap)
    summary = {"query": q.text(G.nodes), "n_members": len(cls.members), "members": cls.to_json(),
               "pruned": cls.pruned, "n_expressions": cls.n_expressions, "capped": cls.capped,
               "seconds": round(cls.seconds, 4), "method": method,
               "d_separation_tests": cls.oracle.tests}
    if output is not None:
        run.save(output, write_text, cls.to_dot() if fmt == "dot" else dumps_json({"graph": G.to_json(), **summary}))
    if not run.json:
        summary["members"] = [m["expression"] for m in summary["members"]]
    return summary


@cli.command(seed=False)
@click.argument("graph")
@click.argument("query1")
@click.argument("query2")
@click.option("--exhaustive", is_flag=True, help="Also decide by the breadth-first search (the reference) "
              "and report whether the two routes agree.")
@click.option("--require-equivalent", is_flag=True, help="Exit 3 (after the answer) when the queries are not equivalent.")
def check(run, graph, query1, query2, exhaustive, require_equivalent):
    """Are QUERY1 and QUERY2 equal under the do-calculus? The answer is `equivalent` (exit 0 either way).

    Four d-separation tests on mutilated graphs, one per step of the canonical path R2 up, R3 up,
    R3 down, R2 down (Theorem 6 / Corollary 1; the step sets are reconstructed). When all hold the
    non-empty steps are the witness path. `--require-equivalent` makes "not equivalent" exit 3.

    \b
    JSON keys: equivalent (true/false), tests (each: rule, Z, from, to, empty, holds), witness
    (the rule path when equivalent, else []), query1, query2; with --exhaustive also
    exhaustive_equivalent and agree.
    Examples:
      derive-docalc check fd.dag 'P(y|do(x))' 'P(y|do(x), do(z))' --json | jq .equivalent
      derive-docalc check g.dag 'P(y|do(x))' 'P(y|x)' --require-equivalent || echo 'not the same quantity'
    """
    from icmlkit.lib.causal.parse import parse_query
    from icmlkit.lib.derive_docalc.api import check_equivalence

    G, q1 = _load(run, graph, query1)
    summary = check_equivalence(G, q1, parse_query(query2, G), exhaustive=exhaustive)
    if require_equivalent and not summary["equivalent"]:
        run.fail_check(f"{summary['query1']} and {summary['query2']} are not equivalent under the do-calculus")
    return summary


@cli.command("identify", seed=False)
@click.argument("graph")
@click.argument("query")
@cap_option
@prune_option
@click.option("--format", "fmt", type=click.Choice(["text", "latex", "json"]), default="text",
              show_default=True, help="How `estimands` are written (json: expression trees).")
@click.option("--projections", is_flag=True,
              help="EXTENSION (not in the paper): also run ID on the latent projections of G that drop "
              "one observed variable outside the query (e.g. gives the front-door estimand when a "
              "back-door set is observed too).")
@click.option("--simplify", is_flag=True,
              help="Also simplify every member's estimand by d-separation (each P(A|C) drops the c with "
              "A _||_ c | C minus c in G, then the sums that vanish; not in the paper): the simplified "
              "estimands join the class, members get estimand_simplified, size and size_simplified "
              "(summed variables, largest factor arity, factors), and `simplest` is the smallest estimand.")
@output_option("Write the full result (members, estimands in text, LaTeX and JSON) as JSON.", suffixes=(".json",))
def identify_cmd(run, graph, query, cap, prune, fmt, projections, simplify, output):
    """Estimands of QUERY and of all its equivalents (ID/IDC), deduplicated, with two estimators
    beside the class.

    Every member of the class goes through IDC (Shpitser & Pearl); observational members are
    estimands as they are. Duplicates are removed by a canonical form (sorted, flattened,
    marginalised) and then by a numerical fingerprint on a random joint distribution. Beside the
    class (not in the paper): plain ID simplified by d-separation (each P(A|C) drops the c with
    A _||_ c | C minus c in G) and the optimal adjustment set O(X,Y) of Henckel, Perkovic & Maathuis
    (2022) with its estimand sum_O P(y|x,O) P(O) (queries without w; in a graph with <-> edges O is
    used only when it passes the adjustment criterion, and is not guaranteed optimal there).

    \b
    JSON keys: identifiable (true/false), estimands (list of strings, class only), n_estimands,
    plain_id (what ID/IDC returns for the query itself, or null), simplified_id,
    optimal_adjustment_set (list or null), optimal_adjustment, hedge (when not identifiable),
    n_members, n_expressions, pruned, members (each: member, observational, identifiable,
    estimand; with --simplify also estimand_simplified, size, size_simplified), capped; with
    --simplify also simplest, simplest_size.
    Examples:
      derive-docalc identify napkin.dag 'P(y|do(x))' --json | jq -r '.estimands[]'
      derive-docalc identify fdbd.dag 'P(y|do(x))' --projections --format latex
    """
    from icmlkit.lib.core.io import write_json
    from icmlkit.lib.derive_docalc import expr as E
    from icmlkit.lib.derive_docalc.api import class_estimands

    run.output(output)
    G, q = _load(run, graph, query)
    ce = class_estimands(G, q, cap=cap, projections=projections, prune=prune, baselines=True,
                         simplify_members=simplify)
    render = {"text": E.text, "latex": E.latex, "json": E.to_json}[fmt]
    Gr = ce.graph

    def r(e):
        return render(e) if e is not None else None
    in_class = [e for e in ce.estimands if e.in_class]
    summary = {"query": q.text(G.nodes), "identifiable": ce.identifiable,
               "estimands": [render(e.expr) for e in in_class], "n_estimands": len(in_class),
               "plain_id": r(ce.plain_id), "simplified_id": r(ce.simplified_id),
               "optimal_adjustment_set": (sorted(ce.optimal_set, key=Gr.index.get)
                                          if ce.optimal_set is not None else None),
               "optimal_adjustment": r(ce.optimal),
               "hedge": ce.hedge, "n_members": len(ce.cls.members), "n_expressions": ce.cls.n_expressions,
               "pruned": ce.cls.pruned, "members": ce.members, "capped": ce.cls.capped}
    if simplify:
        summary["simplest"] = r(ce.simplest)
        summary["simplest_size"] = E.size(ce.simplest) if ce.simplest is not None else None
    if output is not None:
        full = {**summary, "estimands": [{**e.row(), "json": E.to_json(e.expr)} for e in ce.estimands]}
        run.save(output, write_json, full)
    return summary


@cli.command()
@click.argument("graph")
@click.argument("query")
@click.argument("data")
@config_options(EstimateConfig, bootstrap={"flags": ("-B", "--bootstrap")})
@output_option("Write the ranked estimands (CSV, JSON Lines or Parquet by suffix).",
               suffixes=(".csv", ".jsonl", ".parquet"))
def estimate(run, graph, query, data, cfg, output):
    """Estimate every estimand of QUERY's class on DATA.csv, with bootstrap CIs, ranked by variance.

    DATA.csv has one column per graph variable. Discrete: the query's value cell (values from the
    query, e.g. 'P(y=1 | do(x=0))'; an unspecified variable takes its largest value) of each plug-in
    estimand; variables an estimand adds (an inserted action) are averaged over their empirical
    distribution. Gaussian: the effect of the first x on the first y. `--contrast A,B` adds the
    contrast between x=A and x=B (the ATE E[y|do(A)] - E[y|do(B)] for one numeric outcome without a
    value in the query, else the difference of P(y|do(x)) at the query's y value; gaussian: the
    slope times A-B) with its percentile CI for every estimand, and ranks by its variance.
    With --baselines (default) simplified ID and the optimal adjustment set are estimated beside the
    class (in_class: false unless a member gives the same estimand). A query that is not
    identifiable exits 3.

    \b
    JSON keys: kind, n, target, identifiable, n_estimands, estimates (ranked: rank, estimand, estimate,
    se, variance, ci_low, ci_high, members, sources, plain_id, in_class; with --contrast also
    contrast, contrast_se, contrast_variance, contrast_ci_low, contrast_ci_high), best (best
    estimand of the class), best_overall (baselines included), plain_id_rank, contrast_of, pruned,
    simplified_id, optimal_adjustment_set, optimal_adjustment.
    Examples:
      derive-docalc estimate fdbd.dag 'P(y|do(x))' obs.csv --kind gaussian --projections --json
      derive-docalc estimate napkin.dag 'P(y=1 | do(x=1))' obs.csv -B 500 -o ranked.csv
      derive-docalc estimate mgraph.dag 'P(y | do(x))' obs.csv --contrast 1,0 --json | jq '.estimates[0]'
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.derive_docalc.api import TABLE_COLUMNS, estimate as estimate_class, read_data

    run.output(output)
    query, data = _query_data("estimate", query, data)
    G, q = _load(run, graph, query)
    df = read_data(run.input(data), G)
    result = estimate_class(cfg, G, q, df, seed=run.seed, source=str(data))
    run.save(output, write_rows, result.table_rows(), TABLE_COLUMNS, float_format="%.10g")
    return result.summary


@cli.command(seed=False)
@click.argument("graph")
@click.argument("query")
@cap_option
@prune_option
@click.option("--available", default=None, metavar="SETS",
              help="The experiments you can run, as sets separated by ';' with variables separated by ',' "
              "(e.g. 'Z;W1,W2'). Default: every set of variables outside the outcome up to --max-size.")
@click.option("--max-size", type=click.IntRange(min=0), default=3, show_default=True,
              help="Largest experiment searched without --available.")
def experiments(run, graph, query, cap, prune, available, max_size):
    """Which experiments identify QUERY: general identifiability from experiments (gID, after Lee,
    Correa & Bareinboim 2019 and the decomposition of Kivva et al. 2022; reconstructed, see
    docs/derive-docalc.md).

    P(y | do(x)) = sum over D minus Y of the product of Q[D_j], D = the ancestors of Y once X is
    removed, D_j its c-components; each Q[D_j] is identified (ID in G with the edges into Z removed)
    from some experiment Z that does not touch D_j, the observational joint first. Estimands read
    each factor from its experiment's distribution, written P_do{Z}, and are simplified by
    d-separation in that experiment's graph. Conditional queries first move w into the actions by
    rule 2 (sound; completeness not claimed). `experiments` lists the minimal sets E whose data
    ALONE identify QUERY (the sets of --available, or every set of at most --max-size variables
    outside y; [] = observational data), each with the class member giving the smallest estimand;
    with --available, `combined` is gID from all of them together plus the observational joint
    (experiments can identify together what none does alone).

    \b
    JSON keys: query, observationally_identifiable, n_members, members_checked, max_size, available,
    experiments (each: experiment, member, estimand, size), members (each: member, experiments),
    pruned, combined (with --available: identifiable, estimand, components (each: component,
    experiment), failed_component).
    Examples:
      derive-docalc experiments iv.dag 'P(y | do(x))' --json | jq '.experiments'
      derive-docalc experiments napkin.dag 'P(y | do(x))' --available 'W1;W2' --json
    """
    from icmlkit.lib.derive_docalc.api import class_estimands
    from icmlkit.lib.derive_docalc.experiments import experiments as run_experiments

    G, q = _load(run, graph, query)
    sets = None
    if available is not None:
        sets = []
        for part in available.split(";"):
            names = [v.strip() for v in part.split(",") if v.strip()]
            if not names:
                raise click.BadParameter(f"empty experiment in {available!r}", param_hint="--available")
            resolved = []
            for v in names:
                hit = [u for u in G.nodes if u == v] or [u for u in G.nodes if u.lower() == v.lower()]
                if len(hit) != 1:
                    raise click.BadParameter(f"unknown variable {v!r} (the graph has {', '.join(G.nodes[:20])})",
                                             param_hint="--available")
                resolved.append(hit[0])
            sets.append(frozenset(resolved))
    ce = class_estimands(G, q, cap=cap, prune=prune)
    return run_experiments(ce, sets, max_size=max_size).summary


@cli.command()
@click.argument("graph")
@click.argument("query")
@click.argument("data")
@config_options(FalsifyConfig, bootstrap={"flags": ("-B", "--bootstrap")})
def falsify(run, graph, query, data, cfg):
    """Test GRAPH on DATA.csv: the distinct estimands of QUERY's class must agree if GRAPH is right.

    Arguments in the order of every subcommand, GRAPH QUERY DATA; the old order GRAPH DATA QUERY
    (told by the file kinds: DATA is '-', an existing file or a .csv/.tsv/.txt) still runs after a
    one-line deprecation warning.

    A Wald test of equality across the class's distinct estimands: the differences from the first
    one, their covariance over the same bootstrap resamples, T = d' S^+ d against chi-square (dof =
    rank of S); p_value_bootstrap calibrates T on the centred bootstrap replicates instead
    [reconstructed: the paper names no test]. Discrete: every cell of the query's variables;
    gaussian: the effect of the first x on the first y. A class with one distinct estimand has
    nothing to test (testable: false, p_value null). `--fail-under ALPHA` exits 3 when p < ALPHA.
    The test checks the implications the estimands encode, not the whole graph. A query that is
    not identifiable exits 3.

    \b
    JSON keys: query, kind, n, target, compared, n_members, n_estimands, testable, statistic, dof,
    p_value, p_value_bootstrap, bootstrap, estimands (each: estimand, estimate, se, members),
    rejected, alpha, pruned.
    Examples:
      derive-docalc falsify 'dag { Z -> X -> Y }' 'P(y | do(x))' obs.csv --json | jq .p_value
      derive-docalc falsify g.dag 'P(y | do(x))' obs.csv --fail-under 0.01 || echo 'graph refuted'
    """
    from icmlkit.lib.derive_docalc.api import read_data
    from icmlkit.lib.derive_docalc.falsify import falsify as run_falsify

    query, data = _query_data("falsify", query, data)
    G, q = _load(run, graph, query)
    df = read_data(run.input(data), G)
    summary = run_falsify(cfg, G, q, df, seed=run.seed, source=str(data)).summary
    if summary["rejected"]:
        run.fail_check(f"p = {summary['p_value']:.3g} < {cfg.fail_under}: the estimands of {summary['query']} "
                       "disagree on the data, which refutes the graph")
    return summary


@cli.command()
@click.argument("graph")
@click.argument("query", required=False)
@config_options(GenerateConfig)
@output_option("Write the samples (one column per graph variable; CSV, JSON Lines or Parquet by suffix).",
               suffixes=(".csv", ".jsonl", ".parquet"), required=True)
def generate(run, graph, query, cfg, output):
    """Sample data from a random SCM on GRAPH, with QUERY's true value (the known answer).

    Discrete: the exact P(y | do(x), w) at the query's values (values 0 .. card-1; an unspecified
    variable takes its largest value, as in `estimate`), by enumeration over the SCM with explicit
    latents. Gaussian: the total effect of the first x on the first y (queries without w; else
    truth is null). Latent variables (bidirected edges) are not written.

    \b
    JSON keys: kind, n, variables, truth (null without QUERY), truth_of, output.
    Examples:
      derive-docalc generate napkin.dag 'P(y=1 | do(x=1))' --n 5000 -o napkin.csv --json
      derive-docalc generate fdbd.dag 'P(y | do(x))' --kind gaussian --n 500 --seed 2 -o fdbd.csv
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.derive_docalc.models import generate_data

    run.output(output)
    if query is None:
        G, q = _graph(run, graph), None
    else:
        G, q = _load(run, graph, query)
    result = generate_data(cfg, G, q, seed=run.seed)
    run.save(output, write_rows, result.rows(), result.names)
    return {**result.summary, "output": output}


add_demo(cli, "icmlkit.lib.derive_docalc.demo:run_demo",
         doc="""The classic graphs' classes and estimands, the napkin estimand checked on an exact SCM, and
    estimand ranking on linear-Gaussian front-door + back-door data.

    Writes classes.json, napkin.dot, estimands.json, ranking.csv, summary.json and manifest.json
    into OUTDIR.

    \b
    JSON keys: headline, graphs, napkin_max_error, ranking, outdir.
    Example:  derive-docalc demo --outdir /tmp/docalc --json | jq -r .headline
    """)


main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
