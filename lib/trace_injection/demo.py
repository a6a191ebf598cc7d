"""The demo of trace-injection: a small AgentDojo data set (or the built-in examples), verdicts,
evaluation and one explained attack, written into a folder given by the caller. It calls the
library functions of ``generate``, ``eval`` and ``explain``."""
from __future__ import annotations

from pathlib import Path

from icmlkit.lib.core.console import log
from icmlkit.lib.core.io import write_json, write_rows, write_text


def run_demo(folder: Path, *, seed: int = 0, max_pairs: int = 40, suites=None) -> dict:
    from icmlkit.lib.trace_injection import export
    from icmlkit.lib.trace_injection.config import DetectConfig, GenerateConfig
    from icmlkit.lib.trace_injection.detect import verdict_record
    from icmlkit.lib.trace_injection.pipeline import evaluate, generate, load_traces, write_dataset

    folder = Path(folder)
    cfg = GenerateConfig(**({"suites": list(suites)} if suites else {}), max_pairs=max_pairs)
    cfg.check()
    try:
        import agentdojo  # noqa: F401
    except ImportError:
        from icmlkit.lib.trace_injection.examples import all_examples

        rows = all_examples()
        source = "built-in examples (install icmlkit[trace-injection] for AgentDojo data)"
    else:
        log.info("building AgentDojo trajectories (%s; %d pairs per suite) ...", ", ".join(cfg.suites), max_pairs)
        rows = generate(cfg, seed=seed).rows
        source = f"agentdojo, {len(cfg.suites)} suite{'s' if len(cfg.suites) > 1 else ''}"
    data = folder / "dataset.jsonl"
    write_dataset(data, rows)
    traces = load_traces([data])
    ev = evaluate(DetectConfig(), traces)
    write_rows(folder / "verdicts.jsonl", [verdict_record(r) for r in ev.results])
    flagged = [r for t, r in zip(traces, ev.results) if r["attack"] and t.label == 1]
    if flagged:
        write_text(folder / "attack_chain.txt", export.chain_text(flagged[0]))
        write_text(folder / "attack_graph.dot", export.to_dot(flagged[0]["graph"], flagged[0]["chain"]))
    n2 = [r["attack"] for r in ev.rows if r["class"] == "N2"]
    s = ev.summary
    summary = {"headline": f"{len(traces)} trajectories ({source}): macro-F1 {s['macro_f1']:.3f}, AUROC "
                           f"{s['auroc']:.3f}, N2 flagged {sum(n2)}/{len(n2)}, {s['llm_calls']} LLM calls",
               **{k: s[k] for k in ("macro_f1", "auroc", "precision", "recall", "edge_recall", "llm_calls", "n")}}
    write_json(folder / "summary.json", summary)
    return summary
