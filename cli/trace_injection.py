"""trace-injection: CausalTrace, causal detection of multi-step prompt injection in agent traces."""
from __future__ import annotations

import click

from icmlkit.cli._common import ToolGroup, make_main, option_group, output_option, shard_option, shard_slice

TOOL = "trace-injection"
RECONSTRUCTED = (
    "RECONSTRUCTED (the paper text is not known): the noisy-OR structural equations and the edge "
    "confidences of each inference strategy, the segmentation of untrusted text into injection "
    "candidates, and the attack templates of make-dataset."
)

cli = ToolGroup(
    TOOL,
    help=f"""CausalTrace: was a harmful agent action caused by injected content?

\b
For each recorded LLM-agent trajectory: one node per event (trusted task vs untrusted
external content; sinks such as send_money, send_email, delete_file, HTTP POST from a
table), typed edges data_dependency / trust_transfer / state_enablement (taint tokens,
compatible sequence, delegation, content overlap), a noisy-OR SCM on the trigger
subgraph (state_enablement excluded), the exact counterfactual P(sink | do(I = blocked))
for the injection candidates and the effect (ATE); attack when ATE >= 0.5. The plain
reachability verdict is reported beside it. No LLM is called unless --judge-url is given.

{RECONSTRUCTED}

\b
Trace formats (per file; '-' is stdin, .gz is read as is): CausalBench JSON, AgentDojo
message lists ({{"messages": [...]}} per line or a JSON list), generic JSONL steps
{{step, role, tool, args, output}}.

\b
Examples:
  trace-injection make-dataset -o traces.jsonl --seed 1
  trace-injection detect traces.jsonl -o verdicts.jsonl
  trace-injection detect traces.jsonl --shard 2/4 -o - | jq -c 'select(.attack)'
  trace-injection explain run.json --format dot -o run.dot --png run.png
  trace-injection fit traces.jsonl --head forest -o head.json
  trace-injection eval traces.jsonl --json""",
)

sinks_option = click.option("--sinks", "sinks_file", default=None,
                            help="Sink table (JSON or TOML: regex on the function name -> category) "
                            "replacing the built-in one.")
threshold_option = click.option("--threshold", type=click.FloatRange(0, 1), default=0.5, show_default=True,
                                 help="Flag a trace when its effect (ATE) is at least this.")
judge_options = [
    click.option("--judge-url", default=None, help="Base URL of an OpenAI-compatible endpoint for the optional "
                 "LLM judge of instruction-likeness (off by default; ambiguous pieces only)."),
    click.option("--judge-model", default="default", show_default=True, help="Model name sent to the endpoint."),
]


def _load(run, paths):
    from icmlkit.lib.trace.readers import read_traces

    traces = []
    for p in paths:
        traces.extend(read_traces(run.input(p)))
    ids = [t.id for t in traces]
    if len(set(ids)) != len(ids):
        seen = set()
        for t in traces:
            if t.id in seen:
                t.id = f"{t.source}:{t.id}"
            seen.add(t.id)
    return traces


def _sinks(run, sinks_file):
    if sinks_file is None:
        return None
    from icmlkit.lib.trace.config import load_sink_table

    return load_sink_table(run.input(sinks_file))


def _scorer(judge_url, judge_model):
    if not judge_url:
        return None
    from icmlkit.lib.llm import ChatClient
    from icmlkit.lib.trace.judge import InstructionJudge

    return InstructionJudge(ChatClient(judge_url, judge_model))


@cli.command(seed=False)
@click.argument("traces", nargs=-1, required=True)
@output_option("Write one JSON verdict per line (JSONL).")
@threshold_option
@click.option("--model", "model_file", default=None, help="A head saved by `fit` (threshold, logreg or forest); "
              "it decides `attack` from the causal features.")
@sinks_option
@shard_option()
@option_group(judge_options)
def detect(run, traces, output, threshold, model_file, sinks_file, shard, judge_url, judge_model):
    """Verdict per trajectory: id, attack, effect, p_blocked, reachability, chain, llm_calls.

    \b
    Each JSONL record: id, attack, effect (ATE), p_blocked (P(sink | do(I = blocked))),
    reachability (the repository's reachability verdict), reachability_effect, chain (typed
    edges {source, target, type, confidence, strategy}), llm_calls, sink, exact (+ score with
    --model). JSON summary keys: n, attacks, llm_calls, seconds, traces_per_second, output.
    Examples:
      trace-injection detect runs/*.json -o verdicts.jsonl
      cat traces.jsonl | trace-injection detect - -o - --shard 1/8
    """
    import time

    from icmlkit.lib.core.console import progress
    from icmlkit.lib.core.io import atomic_write
    from icmlkit.lib.trace.detect import analyse, verdict_record
    from icmlkit.lib.trace.learn import Head

    run.output(output)
    sinks = _sinks(run, sinks_file)
    head = Head.load(run.input(model_file)) if model_file else None
    items = _load(run, traces)
    items = [items[i] for i in shard_slice(len(items), shard)]
    scorer = _scorer(judge_url, judge_model)
    t0 = time.perf_counter()
    records = []
    for t in progress(items, total=len(items), desc="detect"):
        before = scorer.calls if scorer else 0
        res = analyse(t, sinks, {"threshold": threshold}, scorer)
        calls = (scorer.calls - before) if scorer else 0
        score = None
        if head is not None:
            score = float(head.score([res["features"]])[0])
            res["attack"] = bool(score >= head.threshold)
        records.append(verdict_record(res, calls, score))
    secs = time.perf_counter() - t0
    if output is not None:
        import json

        with atomic_write(output) as fh:
            for r in records:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        run.wrote(output)
    return {"n": len(records), "attacks": sum(r["attack"] for r in records),
            "llm_calls": sum(r["llm_calls"] for r in records), "seconds": round(secs, 3),
            "traces_per_second": round(len(records) / secs, 2) if secs > 0 else None, "output": output}


@cli.command(seed=False)
@click.argument("trace")
@click.option("--id", "trace_id", default=None, help="Which trace of a multi-trace file (default: the first).")
@click.option("--format", "fmt", type=click.Choice(["text", "dot", "graphml", "json"]), default="text",
              show_default=True, help="text: the attack chain; dot/graphml/json: the typed graph.")
@output_option("Write the explanation or graph here (default: stdout).")
@click.option("--png", default=None, help="Also render the graph to PNG with graphviz's `dot` (when installed).")
@threshold_option
@sinks_option
def explain(run, trace, trace_id, fmt, output, png, threshold, sinks_file):
    """Explain one trajectory: the attack chain as text, or the typed graph (dot, graphml, json).

    \b
    JSON summary keys (with --json and -o FILE): id, attack, effect, p_blocked, chain_length,
    nodes, edges, output, png.
    Examples:
      trace-injection explain run.json
      trace-injection explain traces.jsonl --id banking/user_task_0/injection_task_1/P --format dot -o g.dot
    """
    import shutil
    import subprocess

    from icmlkit.lib.core.errors import EnvironmentProblem, InputError
    from icmlkit.lib.core.io import dumps_json, write_text
    from icmlkit.lib.trace import export
    from icmlkit.lib.trace.detect import analyse

    if output is None:
        output = "-"
    run.output(output)
    if png:
        run.output(png)
        if shutil.which("dot") is None:
            raise EnvironmentProblem("--png needs graphviz's `dot`; install it with: apt-get install graphviz")
    items = _load(run, [trace])
    if trace_id is not None:
        items = [t for t in items if t.id == trace_id]
        if not items:
            raise InputError(f"no trace with id {trace_id!r}", trace)
    res = analyse(items[0], _sinks(run, sinks_file), {"threshold": threshold})
    g = res["graph"]
    if fmt == "text":
        text = export.chain_text(res)
    elif fmt == "dot":
        text = export.to_dot(g, res["chain"])
    elif fmt == "graphml":
        text = export.to_graphml(g)
    else:
        text = dumps_json(export.to_json(g, res))
    write_text(output, text)
    run.wrote(output)
    if png:
        proc = subprocess.run(["dot", "-Tpng"], input=export.to_dot(g, res["chain"]).encode(), capture_output=True)
        if proc.returncode != 0:
            raise InputError(f"graphviz failed: {proc.stderr.decode(errors='replace').strip()[:200]}", png)
        from icmlkit.lib.core.io import write_bytes

        write_bytes(png, proc.stdout)
        run.wrote(png)
    if output == "-" and not run.json:
        return None
    return {"id": res["id"], "attack": res["attack"], "effect": res["effect"], "p_blocked": res["p_blocked"],
            "chain_length": len(res["chain"]), "nodes": len(g.nodes), "edges": len(g.edges), "output": output,
            "png": png}


def _labelled(traces, where="TRACES"):
    from icmlkit.lib.core.errors import InputError

    for t in traces:
        if t.label is None:
            raise InputError(f"trace {t.id!r}: field 'label' (or 'is_attack') missing; labelled traces are needed",
                             t.source or where)
    y = [t.label for t in traces]
    if len(set(y)) < 2:
        raise InputError("needs both attack and benign traces", traces[0].source or where)
    return y


@cli.command()
@click.argument("traces", nargs=-1, required=True)
@click.option("--head", "kind", type=click.Choice(["threshold", "logreg", "forest"]), default="threshold",
              show_default=True, help="threshold: learn the effect threshold only; logreg / forest: a learned "
              "head on the causal features.")
@output_option("Write the fitted model (JSON).", required=True)
@sinks_option
def fit(run, traces, kind, output, sinks_file):
    """Learn the effect threshold, or a logistic-regression / random-forest head, on labelled traces.

    \b
    JSON keys: n, head, threshold, train_macro_f1, train_auroc, features, output.
    Example:  trace-injection fit train.jsonl --head forest -o head.json
    """
    from icmlkit.lib.core.io import write_json
    from icmlkit.lib.trace.detect import analyse
    from icmlkit.lib.trace.learn import Head, metrics

    run.output(output)
    items = _load(run, traces)
    y = _labelled(items)
    sinks = _sinks(run, sinks_file)
    feats = [analyse(t, sinks)["features"] for t in items]
    head = Head(kind, seed=run.seed).fit(feats, y)
    m = metrics(y, head.score(feats), head.threshold)
    write_json(output, head.to_json())
    run.wrote(output)
    return {"n": len(items), "head": kind, "threshold": head.threshold, "train_macro_f1": m["macro_f1"],
            "train_auroc": m["auroc"], "features": head.features, "output": output}


@cli.command(name="eval", seed=False)
@click.argument("traces", nargs=-1, required=True)
@click.option("--model", "model_file", default=None, help="A model from `fit`; without it the default causal "
              "detector (effect threshold 0.5, no fitting).")
@threshold_option
@sinks_option
@click.option("--fail-under", type=float, default=None, help="Exit 3 when macro-F1 is below this.")
@option_group(judge_options)
def evaluate(run, traces, model_file, threshold, sinks_file, fail_under, judge_url, judge_model):
    """Score labelled traces: macro-F1, AUROC, precision, recall, attack-chain edge recall.

    \b
    JSON keys: macro_f1, auroc, precision, recall, edge_recall, llm_calls, n (+ n_attack,
    reachability_macro_f1, threshold, by_class: detection rate per class when traces carry one).
    Example:  trace-injection eval test.jsonl --model head.json --json
    """
    from collections import defaultdict

    from icmlkit.lib.trace.detect import analyse, edge_recall_counts
    from icmlkit.lib.trace.learn import Head, metrics

    items = _load(run, traces)
    y = _labelled(items)
    head = Head.load(run.input(model_file)) if model_file else Head("threshold", threshold=threshold)
    sinks = _sinks(run, sinks_file)
    scorer = _scorer(judge_url, judge_model)
    res = [analyse(t, sinks, None, scorer) for t in items]
    scores = head.score([r["features"] for r in res])
    m = metrics(y, scores, head.threshold)
    found = total = 0
    for t, r in zip(items, res):
        if t.label == 1:
            a, b = edge_recall_counts(t, r)
            found, total = found + a, total + b
    reach = metrics(y, [r["reachability"]["effect"] for r in res], 0.5)
    by = defaultdict(lambda: [0, 0])
    for t, s in zip(items, scores):
        c = t.meta.get("class")
        if c:
            by[c][0] += int(s >= head.threshold)
            by[c][1] += 1
    out = {"macro_f1": m["macro_f1"], "auroc": m["auroc"], "precision": m["precision"], "recall": m["recall"],
           "edge_recall": (found / total) if total else None, "llm_calls": scorer.calls if scorer else 0,
           "n": len(items), "n_attack": int(sum(y)), "threshold": head.threshold,
           "reachability_macro_f1": reach["macro_f1"],
           "by_class": {c: round(a / b, 4) for c, (a, b) in sorted(by.items())}}
    if fail_under is not None and m["macro_f1"] < fail_under:
        run.fail_check(f"macro-F1 {m['macro_f1']:.4f} is below --fail-under {fail_under}")
    return out


@cli.command(name="make-dataset")
@output_option("Write the labelled trajectories (JSONL, AgentDojo message format).", required=True)
@click.option("--suites", default="workspace,travel,banking,slack", show_default=True,
              help="Comma-separated AgentDojo suites (benchmark v1.2.2).")
@click.option("--max-pairs", type=click.IntRange(min=1), default=None,
              help="Keep a seeded random subset of this many (user task, injection task) pairs per suite.")
def make_dataset(run, output, suites, max_pairs):
    """Labelled trajectories from the AgentDojo suites, without any LLM (needs the `trace` extra).

    Classes: P (injection succeeded per the suite's own security check), N1 (benign), N2 (injection
    present but ignored), N3 (benign task whose own ground truth reaches a sensitive sink). The seed
    picks the attack template per pair and re-draws attacker IBANs, e-mails, URLs and passwords.

    \b
    JSON keys: n, counts (per class), dropped (pairs left out and why), values_varied, suites, output.
    Example:  trace-injection make-dataset -o traces.jsonl --seed 3 --suites banking,slack
    """
    import json

    from icmlkit.lib.core.console import log
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.core.io import atomic_write
    from icmlkit.lib.trace.agentdojo_data import SUITES, generate

    names = tuple(s.strip() for s in suites.split(",") if s.strip())
    bad = [s for s in names if s not in SUITES]
    if bad or not names:
        raise UsageError(f"--suites: unknown suite(s) {bad}; choose from {', '.join(SUITES)}")
    run.output(output)
    n = 0
    stats = None
    with atomic_write(output) as fh:
        for item in generate(seed=run.seed, suites=names, max_pairs_per_suite=max_pairs):
            if not isinstance(item, dict):
                stats = item
                continue
            fh.write(json.dumps(item, ensure_ascii=False, sort_keys=False) + "\n")
            n += 1
    run.wrote(output)
    log.info("wrote %d trajectories", n)
    return {"n": n, "counts": stats.counts, "dropped": stats.dropped, "values_varied": stats.values_varied,
            "suites": list(names), "output": output}


@cli.command()
@click.option("--outdir", default="outputs/demo/trace-injection", show_default=True,
              type=click.Path(file_okay=False), help="Run directory (built as <outdir>.partial).")
@click.option("--max-pairs", type=click.IntRange(min=1), default=40, show_default=True,
              help="(user task, injection task) pairs per suite in the demo data set.")
@click.option("--suites", default="workspace,travel,banking,slack", show_default=True,
              help="Comma-separated AgentDojo suites for the demo data set.")
def demo(run, outdir, max_pairs, suites):
    """Build a small AgentDojo data set (4 suites), detect, evaluate, and explain one attack.

    Without the agentdojo extra it runs on the built-in example traces. Writes dataset.jsonl,
    verdicts.jsonl, attack_chain.txt, attack_graph.dot, summary.json and manifest.json into
    OUTDIR. JSON keys: headline, outdir, and the evaluation keys of `eval`.
    """
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.trace.agentdojo_data import SUITES
    from icmlkit.lib.trace.demo import run_demo

    names = tuple(s.strip() for s in suites.split(",") if s.strip())
    if not names or any(s not in SUITES for s in names):
        raise UsageError(f"--suites: choose from {', '.join(SUITES)}")
    with run.run_dir(outdir) as folder:
        summary = run_demo(folder, seed=run.seed, max_pairs=max_pairs, suites=names)
    return {**summary, "outdir": outdir}


main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
