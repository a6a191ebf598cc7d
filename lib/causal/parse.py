"""Readers for causal graphs (DAGitty syntax, JSON edge lists) and for queries ``P(y | do(x), w)``.

Every error names the source and the line/column (DAGitty, queries) or the JSON field, e.g.
``graph.dag, line 3, column 9: unknown edge operator '=>'`` or ``query, column 14: unknown
variable 'q' (the graph has X, Y, Z)``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from icmlkit.lib.causal.admg import ADMG, latent_projection
from icmlkit.lib.core.errors import InputError

# --------------------------------------------------------------------------- DAGitty

_TOKEN = re.compile(r'\s*(?:(?P<nl>\n)|(?P<comment>//[^\n]*|#[^\n]*)|(?P<str>"(?:[^"\\]|\\.)*")|'
                    r'(?P<op><->|->|<-|--|@->|@--)|(?P<punct>[{}\[\];,=])|(?P<id>[A-Za-z0-9_.]+)|(?P<bad>\S))')


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def _tokens(text: str, source: str):
    pos = 0
    out = []
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            break
        if m.end() == pos:
            break
        pos = m.end()
        kind = m.lastgroup
        start = m.start(kind)
        if kind == "comment":
            continue
        val = m.group(kind)
        if kind == "bad":
            line, col = _line_col(text, start)
            raise InputError(f"column {col}: unexpected character {val!r}", source, line)
        if kind == "str":
            val, kind = val[1:-1], "id"
        out.append((kind, val, start))
    return out


def parse_dagitty(text: str, source: str = "graph") -> ADMG:
    """Parse DAGitty syntax: ``dag { X -> Y; Y <- Z -> X; X <-> Y; U [latent] }``.

    Supported: chains (``a -> b -> c``), ``->``, ``<-``, ``<->``, node attribute lists (``[exposure,
    pos="1,2"]``; ``latent`` nodes are projected out by latent projection), graph attributes
    (``bb="..."``), ``;``/newline separators, quoted names, ``//`` comments. Undirected ``--`` edges
    and cycles are errors naming the line and column.
    """
    toks = _tokens(text, source)

    def err(tok_pos: int, msg: str):
        line, col = _line_col(text, tok_pos)
        return InputError(f"column {col}: {msg}", source, line)

    i = 0
    while i < len(toks) and toks[i][0] == "nl":
        i += 1
    if i < len(toks) and toks[i][0] == "id" and toks[i][1].lower() in ("dag", "pdag", "mag", "pag", "graph"):
        if toks[i][1].lower() != "dag":
            raise err(toks[i][2], f"graph type {toks[i][1]!r} is not supported (expected 'dag')")
        i += 1
    while i < len(toks) and toks[i][0] == "nl":
        i += 1
    if i >= len(toks) or toks[i][1] != "{":
        raise err(toks[i][2] if i < len(toks) else len(text), "expected 'dag {'")
    i += 1
    body_end = None
    for j in range(len(toks) - 1, i - 1, -1):
        if toks[j][0] == "punct" and toks[j][1] == "}":
            body_end = j
            break
    if body_end is None:
        raise err(len(text), "missing closing '}'")
    for j in range(body_end + 1, len(toks)):
        if toks[j][0] != "nl":
            raise err(toks[j][2], f"unexpected {toks[j][1]!r} after the closing '}}'")
    body = toks[i:body_end]

    nodes: list[str] = []
    latent: set[str] = set()
    directed: list[tuple[str, str, int]] = []
    bidirected: list[tuple[str, str]] = []
    k = 0

    def read_attrs(k: int, name: str | None) -> int:
        # at '[' ; read until ']'
        start = body[k][2]
        k += 1
        while k < len(body) and body[k][1] != "]":
            kind, val, p = body[k]
            if kind == "id" and name is not None and val.lower() in ("latent", "unobserved", "l", "u"):
                if not (k + 1 < len(body) and body[k + 1][1] == "="):
                    latent.add(name)
            k += 1
        if k >= len(body):
            raise err(start, "unclosed '['")
        return k + 1

    while k < len(body):
        kind, val, p = body[k]
        if kind == "nl" or (kind == "punct" and val in ";,"):
            k += 1
            continue
        if kind != "id":
            raise err(p, f"expected a variable name, got {val!r}")
        # graph attribute: id = value
        if k + 1 < len(body) and body[k + 1][1] == "=":
            if k + 2 >= len(body) or body[k + 2][0] != "id":
                raise err(body[k + 1][2], "expected a value after '='")
            k += 3
            continue
        prev = val
        if prev not in nodes:
            nodes.append(prev)
        k += 1
        if k < len(body) and body[k][1] == "[":
            k = read_attrs(k, prev)
        while k < len(body) and body[k][0] == "op":
            op, op_pos = body[k][1], body[k][2]
            if op in ("--", "@->", "@--"):
                raise err(op_pos, f"edge operator {op!r} is not allowed in a DAG (use ->, <- or <->)")
            if k + 1 >= len(body) or body[k + 1][0] != "id":
                raise err(op_pos, f"expected a variable name after {op!r}")
            nxt = body[k + 1][1]
            if nxt not in nodes:
                nodes.append(nxt)
            if nxt == prev:
                raise err(body[k + 1][2], f"self-loop on {nxt!r}")
            if op == "->":
                directed.append((prev, nxt, op_pos))
            elif op == "<-":
                directed.append((nxt, prev, op_pos))
            else:
                bidirected.append((prev, nxt))
            prev = nxt
            k += 2
            if k < len(body) and body[k][1] == "[":
                k = read_attrs(k, prev)
        if k < len(body) and body[k][0] not in ("nl",) and body[k][1] not in (";", ","):
            kind2, val2, p2 = body[k]
            if kind2 != "id":
                raise err(p2, f"unexpected {val2!r}")
    # cycle check that can name the edge that closes it
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    for a, b, pos in directed:
        if a in g and b in g and a != b and nx.has_path(g, b, a):
            path = nx.shortest_path(g, b, a)
            raise err(pos, f"edge {a} -> {b} closes the directed cycle {' -> '.join(path + [b])}")
        g.add_edge(a, b)
    edges = [(a, b) for a, b, _ in directed]
    if latent:
        return latent_projection(nodes, edges, latent, bidirected)
    return ADMG(nodes, set(edges), set(bidirected))


def parse_json_graph(text: str, source: str = "graph") -> ADMG:
    """A JSON edge list: ``{"nodes": [...], "directed": [["X","Y"]], "bidirected": [["X","Y"]],
    "latent": [...]}``, or ``{"edges": ["X -> Y", ["X", "<->", "Y"], {"from": "X", "to": "Y",
    "type": "->"}]}``, or a bare list of such edges. Errors name the field (``edges[2]``)."""
    from icmlkit.lib.core.io import parse_json

    data = parse_json(text, source, expect=(dict, list), what="JSON graph")
    if isinstance(data, list):
        data = {"edges": data}
    unknown = set(data) - {"nodes", "directed", "bidirected", "edges", "latent", "name", "description"}
    if unknown:
        raise InputError(f"field {sorted(unknown)[0]!r}: unknown key (expected nodes, directed, bidirected, "
                         "edges, latent)", source)

    def names(field_name, value, n=None):
        if not isinstance(value, list) or (n is not None and len(value) != n) or \
                not all(isinstance(v, str) and v for v in value):
            want = f"a list of {n} names" if n else "a list of names"
            raise InputError(f"field {field_name}: expected {want}, got {json.dumps(value)[:60]}", source)
        return value

    nodes = names("nodes", data.get("nodes", []))
    latent = set(names("latent", data.get("latent", [])))
    directed, bidirected = [], []
    for i, e in enumerate(data.get("directed", []) or []):
        directed.append(tuple(names(f"directed[{i}]", e, 2)))
    for i, e in enumerate(data.get("bidirected", []) or []):
        bidirected.append(tuple(names(f"bidirected[{i}]", e, 2)))
    edges = data.get("edges", []) or []
    if not isinstance(edges, list):
        raise InputError("field edges: expected a list", source)
    for i, e in enumerate(edges):
        where = f"edges[{i}]"
        if isinstance(e, str):
            m = re.fullmatch(r"\s*(\S+?)\s*(<->|->|<-)\s*(\S+)\s*", e)
            if not m:
                raise InputError(f"field {where}: expected 'A -> B', 'A <- B' or 'A <-> B', got {e!r}", source)
            a, op, b = m.groups()
        elif isinstance(e, list) and len(e) == 3 and all(isinstance(x, str) for x in e):
            a, op, b = e
        elif isinstance(e, dict):
            a, b, op = e.get("from", e.get("source")), e.get("to", e.get("target")), e.get("type", "->")
            if not isinstance(a, str) or not isinstance(b, str):
                raise InputError(f"field {where}: needs 'from' and 'to' names", source)
        else:
            raise InputError(f"field {where}: expected 'A -> B', [A, '->', B] or {{from, to, type}}", source)
        if op == "->":
            directed.append((a, b))
        elif op == "<-":
            directed.append((b, a))
        elif op == "<->":
            bidirected.append((a, b))
        else:
            raise InputError(f"field {where}: unknown edge type {op!r} (expected ->, <- or <->)", source)
    order = list(nodes)
    for j, (a, b) in enumerate(directed):
        if a == b:
            raise InputError(f"field directed/edges: self-loop on {a!r}", source)
        order += [a, b]
    for a, b in bidirected:
        order += [a, b]
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(order)
    for a, b in directed:
        if nx.has_path(g, b, a):
            path = nx.shortest_path(g, b, a)
            raise InputError(f"field directed/edges: edge {a} -> {b} closes the directed cycle "
                             f"{' -> '.join(path + [b])}", source)
        g.add_edge(a, b)
    if latent:
        return latent_projection(order, directed, latent, bidirected)
    return ADMG(order, set(directed), set(bidirected))


def parse_graph(text: str, source: str = "graph") -> ADMG:
    """DAGitty or JSON, by content (JSON starts with '{"', '[' or '{' followed by a quote)."""
    s = text.lstrip()
    if s.startswith("[") or re.match(r'\{\s*"', s):
        return parse_json_graph(text, source)
    return parse_dagitty(text, source)


def read_graph(path: str) -> ADMG:
    """Read a graph file ('-' = stdin); a string that looks like a graph (``dag {...}``) is parsed
    directly, so one-liners work on the command line."""
    from pathlib import Path

    from icmlkit.lib.core.io import open_text

    s = str(path)
    if s.lstrip().startswith("dag") and "{" in s and not Path(s).exists():
        return parse_dagitty(s, "graph")
    with open_text(path) as fh:
        text = fh.read()
    return parse_graph(text, "<stdin>" if s == "-" else s)


# --------------------------------------------------------------------------- queries


@dataclass(frozen=True)
class Query:
    """P(Y | do(X), W) with optional values ``y=1`` for estimation."""

    Y: frozenset
    X: frozenset = frozenset()
    W: frozenset = frozenset()
    values: tuple = field(default=(), compare=False)

    def text(self, order=None) -> str:
        key = (lambda v: (order.index(v) if order and v in order else 1e9, v))

        def fmt(S):
            return ", ".join(sorted(S, key=key))
        s = "P(" + fmt(self.Y)
        parts = []
        if self.X:
            parts.append(f"do({fmt(self.X)})")
        if self.W:
            parts.append(fmt(self.W))
        if parts:
            s += " | " + ", ".join(parts)
        return s + ")"


_QTOK = re.compile(r"\s*(?:(?P<id>[A-Za-z_][A-Za-z0-9_.]*)|(?P<num>-?\d+(?:\.\d*)?)|(?P<p>[(),|=])|(?P<bad>\S))")


def parse_query(text: str, graph: ADMG | None = None, source: str = "query") -> Query:
    """Parse ``P(y | do(x), w)``, ``P(y1, y2 | do(x1, x2), w)``, ``P(y)``, ``y | do(x)`` (the ``P(...)``
    wrapper is optional) with optional values ``x=1``. Variables are matched to the graph exactly,
    else case-insensitively when unique. Errors give the column."""
    toks = []
    pos = 0
    while pos < len(text):
        m = _QTOK.match(text, pos)
        if m is None or m.end() == pos:
            break
        kind = m.lastgroup
        if kind is None:
            break
        if kind == "bad":
            raise InputError(f"column {m.start(kind) + 1}: unexpected character {m.group(kind)!r} in {text!r}", source)
        toks.append((kind, m.group(kind), m.start(kind) + 1))
        pos = m.end()
    toks.append(("end", "", len(text) + 1))
    i = 0

    def err(col, msg):
        return InputError(f"column {col}: {msg} in {text!r}", source)

    def peek():
        return toks[i]

    def take(val=None, kind=None):
        nonlocal i
        t = toks[i]
        if (val is not None and t[1] != val) or (kind is not None and t[0] != kind):
            want = repr(val) if val is not None else ("a variable name" if kind == "id" else kind)
            raise err(t[2], f"expected {want}, got {t[1]!r}" if t[0] != "end" else f"expected {want} at the end")
        i += 1
        return t

    wrapped = False
    if peek()[0] == "id" and peek()[1] in ("P", "p") and toks[i + 1][1] == "(":
        take()
        take("(")
        wrapped = True

    values: dict = {}

    def var_list(stop: set) -> list[tuple[str, int]]:
        out = []
        while True:
            t = take(kind="id")
            name, col = t[1], t[2]
            if peek()[1] == "=":
                take("=")
                v = peek()
                if v[0] not in ("num", "id"):
                    raise err(v[2], f"expected a value after '{name}='")
                take()
                values[name] = v[1]
            out.append((name, col))
            if peek()[1] == ",":
                nxt = toks[i + 1]
                if nxt[1] in stop or (nxt[0] == "id" and nxt[1] == "do" and toks[i + 2][1] == "("):
                    return out
                take(",")
                continue
            return out

    Y = var_list(set())
    X, W = [], []
    if peek()[1] == "|":
        take("|")
        while True:
            t = peek()
            if t[0] == "id" and t[1] == "do" and toks[i + 1][1] == "(":
                take()
                take("(")
                X += var_list({")"})
                take(")")
            else:
                W += var_list(set())
            if peek()[1] == ",":
                take(",")
                continue
            break
    if wrapped:
        take(")")
    t = peek()
    if t[0] != "end":
        raise err(t[2], f"unexpected {t[1]!r}")

    def resolve(name: str, col: int) -> str:
        if graph is None:
            return name
        if name in graph.index:
            return name
        cand = [v for v in graph.nodes if v.lower() == name.lower()]
        if len(cand) == 1:
            return cand[0]
        shown = ", ".join(graph.nodes[:20]) + (" ..." if len(graph.nodes) > 20 else "")
        raise err(col, f"unknown variable {name!r} (the graph has {shown})")

    seen: dict[str, str] = {}
    sets = {}
    for role, items in (("outcome", Y), ("do()", X), ("condition", W)):
        s = []
        for name, col in items:
            v = resolve(name, col)
            if v in seen:
                raise err(col, f"variable {v!r} appears twice (as {seen[v]} and {role})")
            seen[v] = role
            s.append(v)
        sets[role] = frozenset(s)
    if not sets["outcome"]:
        raise err(1, "the query needs at least one outcome variable")
    vals = tuple(sorted((resolve(k, 1), v) for k, v in values.items()))
    return Query(sets["outcome"], sets["do()"], sets["condition"], vals)
