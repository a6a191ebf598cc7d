"""trace-injection: CausalTrace, causal detection of multi-step prompt injection in agent traces."""
from __future__ import annotations

import click

from icmlkit.cli._common import (CommaList, ToolGroup, add_demo, config_options, make_main, output_option,
                                shard_option, shard_slice)
from icmlkit.lib.trace_injection.config import (DetectConfig, ExplainConfig, FitConfig, GenerateConfig, InstructionConfig,
                                     ReadConfig)
from icmlkit.lib.trace_injection.suite_run import GuardSuiteConfig

TOOL = "trace-injection"
RECONSTRUCTED = (
    "RECONSTRUCTED (the paper text is not known): the noisy-OR structural equations, the hand-set edge "
    "confidences (the prior) and their EM fit, every untrusted span as a treatment with the task's demands "
    "as the competing cause, the instruction score as a weak feature, the learned instruction score "
    "(fit-instruction) and its weak piece labels, the online gate, and the attack templates of generate."
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
message lists ({{"messages": [...]}} per line or a JSON list), recorded AgentDojo runs
(header line, then {{index, messages, metadata, annotations}}; --label compromised|attacked),
generic JSONL steps {{step, role, tool, args, output}}.

\b
Examples:
  trace-injection generate -o traces.jsonl --seed 1
  trace-injection detect traces.jsonl -o verdicts.jsonl
  trace-injection detect traces.jsonl --shard 2/4 -o - | jq -c 'select(.attack)'
  trace-injection fit runs/*.jsonl --head em -o scm.json
  trace-injection detect run.jsonl --online --model scm.json -o gate.jsonl
  trace-injection fit-instruction runs/*.jsonl -o instr.json
  trace-injection fit runs/*.jsonl --head em --instruction-model instr.json -o scm.json
  trace-injection explain run.json --format dot -o run.dot --png run.png
  trace-injection fit traces.jsonl --head forest -o head.json
  trace-injection eval traces.jsonl --json
  trace-injection guard-suite --suite banking --model scm.json -o banking.jsonl --json""",
)

sinks_option = click.option("--sinks", "sinks_file", default=None,
                            help="Sink table (JSON or TOML: regex on the function name -> category) "
                            "replacing the built-in one.")


def _load(run, paths, read):
    """The traces of ``paths`` and what the readers repaired or skipped (the summary's ``read``)."""
    from icmlkit.lib.trace_injection.pipeline import load_traces
    from icmlkit.lib.trace_injection.readers import ReadStats

    stats = ReadStats()
    items = load_traces([run.input(p) for p in paths], read, stats)
    if stats.repaired_ids or stats.skipped_empty:
        from icmlkit.lib.core.console import log

        log.warning("paired %d tool results with an empty tool_call_id by position; skipped %d runs without "
                    "messages", stats.repaired_ids, stats.skipped_empty)
    return items, stats.as_dict()


def _sinks(run, sinks_file):
    if sinks_file is None:
        return None
    from icmlkit.lib.trace_injection.config import load_sink_table

    return load_sink_table(run.input(sinks_file))


def _instruction(run, cfg):
    """Record the learned instruction score of ``cfg`` (if any) as an input of the run."""
    if getattr(cfg, "instruction_model", None):
        run.input(cfg.instruction_model)


def _head(run, model_file):
    if model_file is None:
        return None
    from icmlkit.lib.trace_injection.learn import Head

    return Head.load(run.input(model_file))


@cli.command(seed=False)
@click.argument("traces", nargs=-1, required=True)
@output_option("Write one JSON verdict per line.", suffixes=(".jsonl",))
@config_options(DetectConfig)
@config_options(ReadConfig, arg="read")
@click.option("--model", "model_file", default=None, help="A model saved by `fit` (threshold, em, logreg or "
              "forest); it decides `attack` (an em model also sets the SCM's fitted confidences).")
@sinks_option
@shard_option()
def detect(run, traces, output, cfg, read, model_file, sinks_file, shard):
    """Verdict per trajectory: id, attack, effect, p_blocked, reachability, chain, llm_calls.

    \b
    Each JSONL record: id, attack, effect (ATE), p_compromised (the SCM's probability that a sink
    depends on untrusted content), p_blocked (P(sink | do(I = blocked))), reachability (the
    repository's reachability verdict), reachability_effect, chain (typed edges {source, target,
    type, confidence, strategy}), llm_calls, sink, exact (+ score with --model).
    --online (reconstructed gate): one record per sink call instead, scored from the events
    before it: id, call, index, function, score, effect, p_compromised, latency_ms, blocked.
    JSON keys: n, attacks, llm_calls, seconds, traces_per_second, read (repaired_ids,
    skipped_empty, runs), output; with --online: n, calls, blocked, traces_with_block,
    latency_ms_median, latency_ms_p99, llm_calls, read, output.
    Examples:
      trace-injection detect runs/*.json -o verdicts.jsonl
      cat traces.jsonl | trace-injection detect - -o - --shard 1/8
    """
    from icmlkit.lib.core.console import progress
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.trace_injection.pipeline import detect as detect_traces

    run.output(output)
    sinks = _sinks(run, sinks_file)
    head = _head(run, model_file)
    _instruction(run, cfg)
    items, stats = _load(run, traces, read)
    items = [items[i] for i in shard_slice(len(items), shard)]
    res = detect_traces(cfg, items, sinks=sinks, head=head,
                        progress=lambda xs: progress(xs, total=len(xs), desc="detect"))
    if output is not None:
        run.save(output, write_rows, res.records, fmt=".jsonl")
    return {**res.summary, "read": stats, "output": output}


@cli.command(seed=False)
@click.argument("trace")
@click.option("--id", "trace_id", default=None, help="Which trace of a multi-trace file (default: the first).")
@config_options(ExplainConfig)
@config_options(ReadConfig, arg="read")
@output_option("Write the explanation or graph here (default: stdout).")
@output_option("Also render the graph to PNG with graphviz's `dot` (when installed).", suffixes=(".png",),
               stdout=False, flags=("--png",), name="png")
@sinks_option
def explain(run, trace, trace_id, cfg, read, output, png, sinks_file):
    """Explain one trajectory: the attack chain as text, or the typed graph (dot, graphml, json).

    \b
    JSON keys: id, attack, effect, p_blocked, chain_length, nodes, edges, output, png (with
    --json and -o FILE).
    Examples:
      trace-injection explain run.json
      trace-injection explain traces.jsonl --id banking/user_task_0/injection_task_1/P --format dot -o g.dot
    """
    import shutil
    import subprocess

    from icmlkit.lib.core.errors import EnvironmentProblem, InputError
    from icmlkit.lib.core.io import write_bytes, write_text
    from icmlkit.lib.trace_injection.pipeline import explain as explain_trace

    output = "-" if output is None else output
    run.output(output)
    if png:
        run.output(png)
        if shutil.which("dot") is None:
            raise EnvironmentProblem("--png needs graphviz's `dot`; install it with: apt-get install graphviz")
    res = explain_trace(cfg, _load(run, [trace], read)[0], trace_id=trace_id, sinks=_sinks(run, sinks_file))
    picture = None
    if png:
        proc = subprocess.run(["dot", "-Tpng"], input=res.dot.encode(), capture_output=True)
        if proc.returncode != 0:
            raise InputError(f"graphviz failed: {proc.stderr.decode(errors='replace').strip()[:200]}", png)
        picture = proc.stdout
    run.save(output, write_text, res.text)
    if png:
        run.save(png, write_bytes, picture)
    if output == "-" and not run.json:
        return None
    return {**res.summary, "output": output, "png": png}


@cli.command()
@click.argument("traces", nargs=-1, required=True)
@config_options(FitConfig)
@config_options(ReadConfig, arg="read")
@output_option("Write the fitted model.", suffixes=(".json",), required=True)
@sinks_option
def fit(run, traces, cfg, read, output, sinks_file):
    """Learn the effect threshold, the SCM by EM, or a logistic-regression / random-forest head.

    The seed is the random forest's. --head em (reconstructed) fits the noisy-OR edge
    confidences per inference strategy and the action leak by maximum likelihood on the labels,
    with the hand-set confidences as a Beta prior, then the threshold on P(compromised).

    \b
    --instruction-model: the graphs are built with a learned instruction score (fit-instruction);
    give detect and eval the same file.

    \b
    JSON keys: n, head, threshold, train_macro_f1, train_auroc, features, instruction_score
    (heuristic / learned), train_calibration (ece, brier, bins), theta, leak, em_iterations (em
    only), false_alarm_budget (budget, on, train_share; with --false-alarm-budget), read, output.
    Examples:
      trace-injection fit train.jsonl --head forest -o head.json
      trace-injection fit runs.jsonl --head em --false-alarm-budget 0.05 -o scm.json
      trace-injection fit ../shared/data/agentdojo_runs/*.jsonl --head em -o scm.json
    """
    from icmlkit.lib.core.io import write_json
    from icmlkit.lib.trace_injection.pipeline import fit as fit_head

    run.output(output)
    sinks = _sinks(run, sinks_file)
    _instruction(run, cfg)
    items, stats = _load(run, traces, read)
    res = fit_head(cfg, items, sinks=sinks, seed=run.seed)
    run.save(output, write_json, res.head.to_json())
    return {**res.summary, "read": stats, "output": output}


@cli.command(name="fit-instruction", seed=False)
@click.argument("traces", nargs=-1, required=True)
@config_options(InstructionConfig)
@config_options(ReadConfig, arg="read")
@output_option("Write the learned instruction score (JSON).", suffixes=(".json",), required=True)
def fit_instruction(run, traces, cfg, read, output):
    """Learn an instruction score for untrusted text pieces (reconstructed; optional).

    A logistic regression on hashed character 3-5-grams and word 1-2-grams. Weak labels from
    labelled traces: a line or sentence of a tool output that occurs only in attacked
    trajectories (class P or N2; else the label) is positive, every piece of a non-attacked one
    negative. Use it with --instruction-model on fit, detect and eval: the SCM then takes the
    learned probability as each piece's instruction-likeness (the phrase heuristic otherwise).

    \b
    JSON keys: n_traces, n_attacked, n_pieces, n_positive, train_auroc, read, output.
    Example:
      trace-injection fit-instruction ../shared/data/agentdojo_runs/*.jsonl -o instr.json
    """
    from icmlkit.lib.core.io import write_json
    from icmlkit.lib.trace_injection.pipeline import fit_instruction as fit_scorer

    run.output(output)
    items, stats = _load(run, traces, read)
    scorer, summary = fit_scorer(cfg, items)
    run.save(output, write_json, scorer.to_json())
    return {**summary, "read": stats, "output": output}


@cli.command(name="eval", seed=False)
@click.argument("traces", nargs=-1, required=True)
@click.option("--model", "model_file", default=None, help="A model from `fit`; without it the default causal "
              "detector (effect threshold --threshold, no fitting).")
@config_options(DetectConfig, exclude=("online",))
@config_options(ReadConfig, arg="read")
@sinks_option
@click.option("--fail-under", type=click.FloatRange(min=0), default=None, help="Exit 3 when macro-F1 is below this.")
@output_option("Also write one row per trace (id, class, label, score, attack, effect, reachability_effect).",
               suffixes=(".csv", ".jsonl", ".parquet"))
def evaluate(run, traces, model_file, cfg, read, sinks_file, fail_under, output):
    """Score labelled traces: macro-F1, AUROC, precision, recall, attack-chain edge recall.

    \b
    JSON keys: macro_f1, auroc, precision, recall, edge_recall, llm_calls, n, n_attack,
    threshold, reachability_macro_f1, by_class (detection rate per class when traces carry
    one), calibration (ece, brier, reliability bins of p_compromised), read, output.
    Examples:
      trace-injection eval test.jsonl --model head.json --json
      trace-injection eval test.jsonl --fail-under 0.9 -o per-trace.csv
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.trace_injection.pipeline import evaluate as evaluate_traces

    run.output(output)
    head = _head(run, model_file)
    sinks = _sinks(run, sinks_file)
    _instruction(run, cfg)
    items, stats = _load(run, traces, read)
    res = evaluate_traces(cfg, items, sinks=sinks, head=head)
    if output is not None:
        run.save(output, write_rows, res.rows)
    macro = res.summary["macro_f1"]
    if fail_under is not None and macro < fail_under:
        run.fail_check(f"macro-F1 {macro:.4f} is below --fail-under {fail_under}")
    return {**res.summary, "read": stats, "output": output}


@cli.command()
@output_option("Write the labelled trajectories (JSONL, AgentDojo message format).", suffixes=(".jsonl",),
               required=True)
@config_options(GenerateConfig)
def generate(run, output, cfg):
    """Labelled trajectories from the AgentDojo suites, without any LLM (needs the `trace` extra).

    Classes: P (injection succeeded per the suite's own security check), N1 (benign), N2 (injection
    present but ignored), N3 (benign task whose own ground truth reaches a sensitive sink): the
    known answer of every trajectory is its `label` and `class`, and P trajectories carry the known
    attack chain (`gt_chain`). The seed picks the attack template per pair and re-draws attacker
    IBANs, e-mails, URLs and passwords.

    \b
    JSON keys: n, counts (per class), dropped (pairs left out and why), values_varied, suites, output.
    Example:  trace-injection generate -o traces.jsonl --seed 3 --suites banking,slack
    """
    from icmlkit.lib.core.console import log
    from icmlkit.lib.trace_injection.pipeline import generate as generate_traces, write_dataset

    run.output(output)
    res = generate_traces(cfg, seed=run.seed)
    run.save(output, write_dataset, res.rows)
    log.info("wrote %d trajectories", res.summary["n"])
    return {**res.summary, "output": output}


@cli.command(name="guard-suite", seed=False)
@config_options(GuardSuiteConfig)
@click.option("--model", "model_file", default=None, help="The gate's model, saved by `fit` (threshold or em); "
              "its threshold is the default. Without it: the effect (ATE) with threshold 0.5.")
@sinks_option
@output_option("Write one record per run (.jsonl; '-' too) or the summary with the runs (.json).",
               suffixes=(".jsonl", ".json"))
@shard_option()
def guard_suite(run, cfg, model_file, sinks_file, output, shard):
    """Run every user task of an AgentDojo suite with the gate in the agent loop (needs the `trace` extra).

    Each user task runs without an injection and with every injection task (the injections of
    an AgentDojo --attack), with the gate off and on, through AgentDojo's own task runner and
    its own utility and security checks. No endpoint is called: the model is a scripted agent
    (reconstructed) that makes the user task's ground-truth calls one per turn, obeys an
    injection the first time the injection task's goal shows up in a tool result (the injection
    task's ground-truth calls, next), and answers with the task's ground-truth output. The gate
    scores each sink call before it runs; --on-block abort ends the run there, skip refuses the
    call with a tool error and lets the agent go on. --shard splits the user tasks.

    \b
    Each record: suite, user_task, injection_task (null: no injection), gate (off/on), utility,
    attack_success (AgentDojo's security check), followed_injection, injection_calls,
    injection_plan_error, calls, decisions, blocked, blocked_call {function, score}, scores,
    latency_ms (per gate decision), element_ms (per gated turn), seconds.
    JSON keys: suite, attack, on_block, user_tasks, runs, threshold, score (effect or
    p_compromised), gate_off and gate_on (benign {n, utility, runs_with_block}, attacked {n,
    utility, attack_success, followed_injection, attack_attempted, runs_with_block},
    blocked_calls, blocked_per_run, run_seconds_median; gate_on also decisions,
    latency_ms_median, latency_ms_p99, element_ms_median, element_ms_p99), seconds, output.
    Examples:
      trace-injection fit ../shared/data/agentdojo_runs/*.jsonl --head em -o scm.json
      trace-injection guard-suite --suite banking --model scm.json -o banking.jsonl --json
      trace-injection guard-suite --suite slack --model scm.json --on-block skip --limit 3 --json
    """
    from icmlkit.lib.core.console import progress
    from icmlkit.lib.core.io import suffix, write_json, write_rows
    from icmlkit.lib.trace_injection.pipeline import check_head_setting
    from icmlkit.lib.trace_injection.suite_run import run_suite, user_task_ids

    run.output(output)
    sinks = _sinks(run, sinks_file)
    head = _head(run, model_file)
    check_head_setting(head, cfg, sinks)
    ids = user_task_ids(cfg)
    ids = [ids[i] for i in shard_slice(len(ids), shard)]
    res = run_suite(cfg, head=head, sinks=sinks, user_tasks=ids,
                    progress=lambda xs: progress(xs, total=len(xs), desc=f"guard-suite {cfg.suite}"))
    if output is not None and output != "-" and suffix(output) == ".json":
        run.save(output, write_json, {"summary": res.summary, "runs": res.rows})
    elif output is not None:
        run.save(output, write_rows, res.rows, fmt=".jsonl")
    return {**res.summary, "output": output}


add_demo(cli, "icmlkit.lib.trace_injection.demo:run_demo", doc="""Build a small AgentDojo data set (4 suites), detect, evaluate, and explain one attack.

    Without the agentdojo extra it runs on the built-in example traces. Writes dataset.jsonl,
    verdicts.jsonl, attack_chain.txt, attack_graph.dot, summary.json and manifest.json into
    OUTDIR.

    \b
    JSON keys: headline, macro_f1, auroc, precision, recall, edge_recall, llm_calls, n, outdir.
    Example:  trace-injection demo --suites banking --max-pairs 6 --json
    """, options=[
    click.option("--max-pairs", type=click.IntRange(min=1), default=40, show_default=True,
                 help="(user task, injection task) pairs per suite in the demo data set."),
    click.option("--suites", type=CommaList(str), default="workspace,travel,banking,slack", show_default=True,
                 help="Comma-separated AgentDojo suites for the demo data set."),
])


main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
