"""``attribute-tokens demo``: SmolLM2-135M (or any supported decoder) on teacher-forced variable
tracking chains and NIAH-KV answers: FlashTrace (hops 1) vs IFR span (hops 0) vs random, Recall@10%
against the gold evidence, thinking ratios, a heatmap. About a minute on 2 CPU cores (after the
first SmolLM2 load, which dequantises the GGUF file once)."""
from __future__ import annotations

from pathlib import Path


def run_demo(folder, *, seed: int = 0, device=None, model: str = "smollm2", n: int = 4) -> dict:
    from icmlkit.lib.attribute_tokens.api import evaluate, load, prepare_rows, trace_rows, write_html, write_trace
    from icmlkit.lib.attribute_tokens.config import EvalConfig, TaskConfig, TraceConfig
    from icmlkit.lib.attribute_tokens.tasks import make_task
    from icmlkit.lib.core.io import write_rows

    folder = Path(folder)
    bundle = load(model, device=device)
    tasks = {"vt": make_task("vt", TaskConfig(n=n, fillers=4, chains=3, style="text"), seed=seed),
             "niah-kv": make_task("niah-kv", TaskConfig(n=n, lines_min=6, lines_max=10, style="text"), seed=seed)}
    recall: dict = {}
    ratio = None
    for name, rows in tasks.items():
        write_rows(folder / f"{name}.jsonl", rows, fmt=".jsonl")
        exs = prepare_rows(list(enumerate(rows, 1)), bundle.tokenizer, f"{name}.jsonl", require_gold=True)
        tr = trace_rows(bundle, exs, TraceConfig(method="flashtrace", hops=1), seed=seed)
        write_trace(str(folder / f"{name}.trace.jsonl"), tr)
        write_html(str(folder / f"{name}.html"), tr)
        if name == "vt":
            ratio = round(sum(a.ratios[0] for a in tr.attributions) / len(tr.attributions), 4)
        ev = evaluate(bundle, exs, EvalConfig(methods=["flashtrace", "ifr-span", "random"], faithfulness=False),
                      TraceConfig(hops=1), seed=seed)
        write_rows(folder / f"{name}.eval.csv", ev.rows)
        for r in ev.rows:
            recall.setdefault(r["method"], {})[name] = r["recall_at_10"]
    ft, h0 = recall["flashtrace"].get("vt"), recall["ifr-span"].get("vt")
    head = (f"VT Recall@10%: flashtrace (hops 1) {ft:.3f} vs ifr-span (hops 0) {h0:.3f} vs random "
            f"{recall['random']['vt']:.3f}; hop-0 thinking ratio {ratio:.3f} (n={n} per task, {bundle.name})")
    return {"headline": head, "model": bundle.name, "recall": recall, "thinking_ratio_vt": ratio}
