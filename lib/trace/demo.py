"""The demo of trace-injection: a small AgentDojo data set (or the built-in examples), verdicts,
evaluation and one explained attack, written into a folder given by the caller."""
from __future__ import annotations

import json
from pathlib import Path

from icmlkit.lib.core.console import log
from icmlkit.lib.core.io import write_json, write_text


def run_demo(folder: Path, seed: int = 0, max_pairs: int = 40, suites=None) -> dict:
    from icmlkit.lib.trace import export
    from icmlkit.lib.trace.detect import analyse, edge_recall_counts, verdict_record
    from icmlkit.lib.trace.learn import metrics
    from icmlkit.lib.trace.readers import read_traces

    folder = Path(folder)
    try:
        import agentdojo  # noqa: F401

        from icmlkit.lib.trace.agentdojo_data import generate

        from icmlkit.lib.trace.agentdojo_data import SUITES

        suites = tuple(suites or SUITES)
        log.info("building AgentDojo trajectories (%s; %d pairs per suite) ...", ", ".join(suites), max_pairs)
        rows = [r for r in generate(seed=seed, suites=suites, max_pairs_per_suite=max_pairs) if isinstance(r, dict)]
        source = f"agentdojo, {len(suites)} suite{'s' if len(suites) > 1 else ''}"
    except ImportError:
        from icmlkit.lib.trace.examples import all_examples

        rows = all_examples()
        source = "built-in examples (install icmlkit[trace] for AgentDojo data)"
    data = folder / "dataset.jsonl"
    write_text(data, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    traces = read_traces(data)
    res = [analyse(t) for t in traces]
    write_text(folder / "verdicts.jsonl", "".join(json.dumps(verdict_record(r)) + "\n" for r in res))
    y = [t.label for t in traces]
    m = metrics(y, [r["effect"] for r in res], 0.5)
    found = total = 0
    for t, r in zip(traces, res):
        if t.label == 1:
            a, b = edge_recall_counts(t, r)
            found, total = found + a, total + b
    flagged = [r for t, r in zip(traces, res) if r["attack"] and t.label == 1]
    if flagged:
        write_text(folder / "attack_chain.txt", export.chain_text(flagged[0]))
        write_text(folder / "attack_graph.dot", export.to_dot(flagged[0]["graph"], flagged[0]["chain"]))
    n2 = [r["attack"] for t, r in zip(traces, res) if t.meta.get("class") == "N2"]
    summary = {"headline": f"{len(traces)} trajectories ({source}): macro-F1 {m['macro_f1']:.3f}, AUROC "
                           f"{m['auroc']:.3f}, N2 flagged {sum(n2)}/{len(n2)}, 0 LLM calls",
               "macro_f1": m["macro_f1"], "auroc": m["auroc"], "precision": m["precision"], "recall": m["recall"],
               "edge_recall": found / total if total else None, "llm_calls": 0, "n": len(traces)}
    write_json(folder / "summary.json", summary)
    return summary
