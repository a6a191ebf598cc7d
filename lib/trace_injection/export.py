"""The typed graph of one trace as DOT, GraphML or JSON, and the attack chain as text."""
from __future__ import annotations

import json

COLOURS = {"data_dependency": "#1f77b4", "trust_transfer": "#d62728", "state_enablement": "#7f7f7f"}


def _label(v) -> str:
    if v.kind == "ACTION":
        return f"{v.id}\\n{v.function}" + (f"\\n[sink: {v.sink}]" if v.sink else "")
    txt = v.text.strip().replace("\n", " ")[:40].replace('"', "'").replace("\\", "/")
    return f"{v.id}\\n{v.kind.lower()}\\n{txt}"


def to_dot(g, chain_edges=()) -> str:
    on_chain = {(e["source"], e["target"]) for e in chain_edges}
    lines = [f'digraph "{g.trace_id}" {{', "  rankdir=LR;", '  node [shape=box, fontsize=10];']
    for n in g.order():
        v = g.nodes[n]
        style = []
        if v.candidate:
            style.append('color="#d62728", penwidth=2')
        if not v.trusted and v.kind != "ACTION":
            style.append('style=filled, fillcolor="#fff3e0"')
        if v.sink:
            style.append("shape=doubleoctagon")
        lines.append(f'  "{n}" [label="{_label(v)}"{", " if style else ""}{", ".join(style)}];')
    for e in g.edges:
        bold = ", penwidth=3" if (e.src, e.dst) in on_chain else ""
        dash = ", style=dashed" if e.type == "state_enablement" else ""
        lines.append(f'  "{e.src}" -> "{e.dst}" [label="{e.type} {e.confidence:.2f}", color="{COLOURS[e.type]}"'
                     f'{dash}{bold}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_graphml(g) -> str:
    import io

    import networkx as nx

    buf = io.BytesIO()
    nx.write_graphml(g.to_networkx(), buf)
    return buf.getvalue().decode("utf-8")


def to_json(g, res: dict | None = None) -> dict:
    out = {"id": g.trace_id,
           "nodes": [{"id": n, "kind": v.kind, "trust": "trusted" if v.trusted else "untrusted",
                      "function": v.function, "sink": v.sink, "candidate": v.candidate,
                      "instruction_score": round(v.score, 4), "text": v.text[:500]} for n, v in
                     ((n, g.nodes[n]) for n in g.order())],
           "edges": [{"source": e.src, "target": e.dst, "type": e.type, "confidence": round(e.confidence, 4),
                      "strategy": e.strategy} for e in g.edges]}
    if res is not None:
        out["verdict"] = {k: res[k] for k in ("attack", "effect", "p_blocked", "sink", "candidates", "chain",
                                              "bottlenecks", "slice")}
        out["verdict"]["reachability"] = res["reachability"]
    return out


def chain_text(res: dict) -> str:
    g = res["graph"]
    lines = [f"trace {res['id']}: {'ATTACK' if res['attack'] else 'benign'}  effect (ATE) {res['effect']:.3f}"
             f"  P(sink | do(I=blocked)) {res['p_blocked'] if res['p_blocked'] is not None else 'n/a'}"
             f"  reachability verdict {'attack' if res['reachability']['attack'] else 'benign'}"]
    if not res["candidates"]:
        lines.append("no injection candidate (no instruction-like untrusted content)")
    for c in res["candidates"]:
        lines.append(f"candidate {c}: \"{g.nodes[c].text.strip()[:160]}\"  (instruction score "
                     f"{g.nodes[c].score:.2f}, own effect {res['per_candidate'].get(c, 0.0):.3f})")
    if res["chain"]:
        lines.append("attack chain:")
        for e in res["chain"]:
            t = g.nodes[e["target"]]
            what = f"{t.function}({json.dumps(t.args, ensure_ascii=False)[:120]})" if t.kind == "ACTION" else t.kind.lower()
            lines.append(f"  {e['source']} --{e['type']} ({e['confidence']:.2f}, {e['strategy']})--> {e['target']}  {what}")
    if res["bottlenecks"]:
        lines.append("bottlenecks: " + ", ".join(f"{b['node']} ({b['score']:.2f})" for b in res["bottlenecks"]))
    return "\n".join(lines) + "\n"
