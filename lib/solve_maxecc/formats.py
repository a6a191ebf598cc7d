"""Instance and colouring files (method sheet solve-maxecc.md, "Data").

Instances, chosen by the path:

- a folder: the Brain pair, exactly two ``.mat`` files (MATLAB v5). In sorted file-name order the
  first matrix is colour 1, the second colour 2; edge {i, j} (i < j) gets colour 1 if only
  A1[i, j] > 0, colour 2 if only A2[i, j] > 0; pairs positive in both are dropped. Vertices are
  the matrix rows 0..n-1 (all of them, isolated ones included).
- ``.jsonl``: one JSON object per line, ``{"nodes": [...], "colour": c, "weight": w}``; ``color``
  is accepted for ``colour``; ``weight`` defaults to 1. Node ids may be integers or strings.
- ``.json``: a JSON array of the same objects.
- anything else: the Amburg-Veldt-Benson text format, one edge per line ``v1,v2,... colour``
  with integer vertex ids and an optional third token, the weight. Blank lines and lines that
  start with ``#`` are skipped.

``-`` is stdin for the text formats and ``.gz`` is decompressed transparently. Bad input raises
:class:`InputError` naming the file and the line.

Colourings are CSV files ``vertex,colour`` in ORIGINAL vertex ids and colour labels.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path

import numpy as np

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.io import atomic_write, display_name, is_stdio, open_text, parse_json, suffix
from icmlkit.lib.solve_maxecc.hypergraph import Hypergraph

UNCOLOURED = -1  # vertex not listed in a colouring file


# ---------------------------------------------------------------------------------- instances
def read_instance(path: str | os.PathLike) -> Hypergraph:
    """Read an instance, choosing the format by the path (see the module docstring)."""
    if not is_stdio(path) and Path(path).is_dir():
        return read_brain(path)
    ext = suffix(path)
    if ext == ".mat":
        raise InputError(
            "a single .mat file is not an instance; give the folder holding the Brain pair of .mat files",
            display_name(path),
        )
    with open_text(path) as fh:
        text = fh.read()
    name = display_name(path)
    if ext == ".jsonl":
        return _parse_jsonl(text, name)
    if ext == ".json":
        return _parse_json(text, name)
    return parse_text(text, name)


def _content_lines(text: str) -> tuple[list[int], list[str]]:
    """(1-based line numbers, stripped lines) of the non-blank, non-comment lines."""
    numbers, lines = [], []
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s and not s.startswith("#"):
            numbers.append(i)
            lines.append(s)
    return numbers, lines


def parse_text(text: str, name: str = "<text>") -> Hypergraph:
    """Parse the ``v1,v2,... colour [weight]`` text format.

    Fast path: split every line once and convert all vertex ids with one numpy call. When that
    fails, :func:`_scan_text` walks the lines one by one to report the first bad one exactly.
    """
    numbers, lines = _content_lines(text)
    if not lines:
        raise InputError("no edges (the file is empty or has only comments)", name)
    try:
        parts = [s.split() for s in lines]
        if any(len(p) not in (2, 3) for p in parts):
            raise ValueError
        node_text = [p[0] for p in parts]
        if any(t.startswith(",") or t.endswith(",") or ",," in t for t in node_text):
            raise ValueError
        sizes = np.fromiter((t.count(",") + 1 for t in node_text), dtype=np.int64, count=len(parts))
        nodes = np.array(",".join(node_text).split(","), dtype=np.int64)
        colour_text = [p[1] for p in parts]
        try:
            colours = np.array(colour_text, dtype=np.int64)
        except ValueError:
            colours = np.array(colour_text, dtype=str)
        if any(len(p) == 3 for p in parts):
            weights = np.array([p[2] if len(p) == 3 else "1" for p in parts], dtype=np.float64)
            if not np.all(np.isfinite(weights)) or np.any(weights <= 0):
                raise ValueError
        else:
            weights = None
    except (ValueError, OverflowError):
        _scan_text(numbers, lines, name)
        raise InputError("could not parse the file", name) from None  # pragma: no cover
    ptr = np.zeros(len(parts) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(sizes)
    return Hypergraph.from_csr(ptr, nodes, colours, weights)


def _scan_text(numbers: list[int], lines: list[str], name: str) -> None:
    """Slow exact check, line by line; raises InputError at the first bad line."""
    for no, s in zip(numbers, lines):
        p = s.split()
        if len(p) == 1:
            raise InputError(f"missing colour: expected 'v1,v2,... colour [weight]', got {s!r}", name, no)
        if len(p) > 3:
            raise InputError(f"expected 'v1,v2,... colour [weight]', got {len(p)} fields", name, no)
        for tok in p[0].split(","):
            if tok == "":
                raise InputError("empty vertex id (an empty edge or a stray comma)", name, no)
            try:
                int(tok)
            except ValueError:
                raise InputError(f"vertex id {tok!r} is not an integer", name, no) from None
            if not -(2**63) <= int(tok) < 2**63:
                raise InputError(f"vertex id {tok!r} is out of range", name, no)
        if len(p) == 3:
            _check_weight(p[2], name, no)


def _check_weight(value, name: str, no: int) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        w = float(value)
    except (TypeError, ValueError):
        raise InputError(f"weight {value!r} is not a number", name, no) from None
    if not math.isfinite(w) or w <= 0:
        raise InputError(f"weight {value!r} must be positive and finite", name, no)
    return w


def _edge_from_object(obj, name: str, no: int):
    if not isinstance(obj, dict):
        raise InputError("expected a JSON object {\"nodes\": [...], \"colour\": c}", name, no)
    nodes = obj.get("nodes")
    if not isinstance(nodes, list):
        raise InputError("missing \"nodes\" list", name, no)
    if not nodes:
        raise InputError("empty edge (\"nodes\" is [])", name, no)
    for v in nodes:
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise InputError(f"vertex id {v!r} must be an integer or a string", name, no)
    colour = obj.get("colour", obj.get("color"))
    if colour is None:
        raise InputError("missing \"colour\"", name, no)
    if isinstance(colour, bool) or not isinstance(colour, (int, str)):
        raise InputError(f"colour {colour!r} must be an integer or a string", name, no)
    weight = _check_weight(obj.get("weight", 1.0), name, no)
    return nodes, colour, weight


def _from_objects(items, name: str) -> Hypergraph:
    edges, colours, weights = [], [], []
    for no, obj in items:
        e, c, w = _edge_from_object(obj, name, no)
        edges.append(e)
        colours.append(c)
        weights.append(w)
    if not edges:
        raise InputError("no edges", name)
    return Hypergraph.from_edges(edges, colours, weights)


def _parse_jsonl(text: str, name: str) -> Hypergraph:
    def items():
        for no, s in zip(*_content_lines(text)):
            yield no, parse_json(s, name, line=no)

    return _from_objects(items(), name)


def _parse_json(text: str, name: str) -> Hypergraph:
    data = parse_json(text, name, list)
    # A JSON array has no line per edge; report the edge's position (1-based) as the "line".
    return _from_objects(enumerate(data, 1), name)


def read_brain(folder: str | os.PathLike) -> Hypergraph:
    """The Brain instance from a folder with exactly two MATLAB .mat matrices (see the module
    docstring). On the published data this gives n = 638, m = 21180."""
    import scipy.io

    folder = Path(folder)
    mats = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".mat")
    if len(mats) != 2:
        raise InputError(f"expected exactly two .mat files in the folder, found {len(mats)}", str(folder))
    mat = [_one_matrix(p, scipy.io) for p in mats]
    if mat[0].shape != mat[1].shape or mat[0].shape[0] != mat[0].shape[1]:
        raise InputError(f"the two matrices must be square and equal in size, got {mat[0].shape} and {mat[1].shape}", str(folder))
    n = mat[0].shape[0]
    i, j = np.triu_indices(n, 1)
    a1, a2 = mat[0][i, j] > 0, mat[1][i, j] > 0
    c1, c2 = a1 & ~a2, a2 & ~a1
    keep = c1 | c2
    i, j = i[keep], j[keep]
    colours = np.where(c1[keep], 1, 2).astype(np.int64)
    m = len(i)
    if m == 0:
        raise InputError("the matrices give no edges", str(folder))
    raw = np.stack([i, j], axis=1).reshape(-1).astype(np.int64)
    ptr = np.arange(0, 2 * m + 1, 2, dtype=np.int64)
    return Hypergraph.from_csr(ptr, raw, colours, None, node_ids=np.arange(n), colour_labels=np.array([1, 2]))


def _one_matrix(path: Path, sio) -> np.ndarray:
    try:
        data = sio.loadmat(str(path))
    except Exception as exc:  # scipy raises several types for non-MATLAB input
        raise InputError(f"not a readable MATLAB v5 file ({exc})", str(path)) from None
    found = [
        v for k, v in data.items()
        if not k.startswith("__") and isinstance(v, np.ndarray) and v.ndim == 2
        and v.dtype.kind in "biuf" and v.shape[0] == v.shape[1] > 1
    ]
    # The Brain files also hold a 638x3 'Coord' array: only a square matrix is an adjacency.
    if len(found) != 1:
        raise InputError(f"expected exactly one square numeric matrix, found {len(found)}", str(path))
    return np.asarray(found[0], dtype=np.float64)


def write_instance(path: str | os.PathLike, H: Hypergraph) -> None:
    """Write ``H`` with original ids and labels.

    ``.jsonl`` -> JSON Lines with weights; otherwise the text format, with a third weight token on
    every line unless all weights are 1 (the text reader accepts it, so every file round-trips).
    String vertex ids need ``.jsonl``.
    """
    ext = suffix(path)
    ids, labels = H.node_ids.tolist(), H.colour_labels.tolist()
    edges = [H.nodes[a:b] for a, b in zip(H.ptr[:-1].tolist(), H.ptr[1:].tolist())]
    unit = bool(np.all(H.weight == 1.0))
    with atomic_write(path) as fh:
        if ext == ".jsonl":
            for e, c, w in zip(edges, H.colour.tolist(), H.weight.tolist()):
                rec = {"nodes": [ids[v] for v in e.tolist()], "colour": labels[c], "weight": w}
                fh.write(json.dumps(rec) + "\n")
            return
        if H.node_ids.dtype.kind not in "iu":
            raise UsageError("string vertex ids cannot be written in the text format; use a .jsonl output")
        if any(len(str(c).split()) != 1 for c in labels):
            raise UsageError("colour labels with spaces cannot be written in the text format; use .jsonl")
        ids_s = H.node_ids.astype(str)
        out = io.StringIO()
        for e, c, w in zip(edges, H.colour.tolist(), H.weight.tolist()):
            out.write(",".join(ids_s[e]))
            out.write(f" {labels[c]}" + ("" if unit else f" {w!r}") + "\n")
        fh.write(out.getvalue())


# ---------------------------------------------------------------------------------- colourings
def read_colouring(path: str | os.PathLike, H: Hypergraph) -> np.ndarray:
    """Read a ``vertex,colour`` CSV (original ids and labels) into sigma, int64 [n].

    Vertices not listed get -1 (uncoloured); an empty colour field means -1. Unknown vertex ids,
    repeated vertices and colour labels the instance has no edges of (a typo would otherwise
    score as a colour that satisfies nothing) raise InputError with the line number.
    """
    name = display_name(path)
    vindex = {str(v): i for i, v in enumerate(H.node_ids.tolist())}
    cindex = {str(c): i for i, c in enumerate(H.colour_labels.tolist())}
    sigma = np.full(H.n, UNCOLOURED, dtype=np.int64)
    seen = np.zeros(H.n, dtype=bool)
    with open_text(path) as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise InputError("empty file; expected a header 'vertex,colour'", name, 1)
        head = [h.strip().lower() for h in header]
        if len(head) < 2 or head[0] != "vertex" or head[1] not in ("colour", "color"):
            raise InputError(f"expected the header 'vertex,colour', got {','.join(header)!r}", name, 1)
        for row in reader:
            no = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) < 2:
                raise InputError("expected 'vertex,colour'", name, no)
            v = vindex.get(row[0].strip())
            if v is None:
                raise InputError(f"vertex {row[0]!r} is not in the instance", name, no)
            if seen[v]:
                raise InputError(f"vertex {row[0]!r} is listed twice", name, no)
            seen[v] = True
            c = row[1].strip()
            if c and c not in cindex:
                known = ", ".join(list(cindex)[:8]) + (", ..." if len(cindex) > 8 else "")
                raise InputError(f"colour {c!r} is not a colour of the instance (its colours: {known})", name, no)
            sigma[v] = cindex[c] if c else UNCOLOURED
    return sigma


def write_colouring(path: str | os.PathLike, H: Hypergraph, sigma: np.ndarray) -> None:
    """Write sigma as CSV ``vertex,colour`` (original ids and labels), one row per vertex in
    vertex order; negative entries (uncoloured) are written with an empty colour."""
    sigma = np.asarray(sigma)
    if sigma.shape != (H.n,):
        raise UsageError(f"a colouring needs {H.n} entries, got shape {sigma.shape}")
    labels = np.append(H.colour_labels.astype(str), "")
    col = labels[np.where(sigma >= 0, sigma, H.k)]
    ids = H.node_ids.astype(str)
    with atomic_write(path) as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["vertex", "colour"])
        writer.writerows(zip(ids.tolist(), col.tolist()))


# ------------------------------------------------------------------------------ ground-truth labels
def read_labels(path: str | os.PathLike, H: Hypergraph) -> np.ndarray:
    """Read a ``vertex,label`` CSV of ground-truth clusters (any label strings) into int64 [n]
    (labels numbered in order of appearance). Every vertex of the instance must be listed once."""
    name = display_name(path)
    vindex = {str(v): i for i, v in enumerate(H.node_ids.tolist())}
    out = np.full(H.n, -1, dtype=np.int64)
    codes: dict[str, int] = {}
    with open_text(path) as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or len(header) < 2 or header[0].strip().lower() != "vertex":
            raise InputError("expected the header 'vertex,label'", name, 1)
        for row in reader:
            no = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) < 2 or not row[1].strip():
                raise InputError("expected 'vertex,label' with a non-empty label", name, no)
            v = vindex.get(row[0].strip())
            if v is None:
                raise InputError(f"vertex {row[0]!r} is not in the instance", name, no)
            if out[v] >= 0:
                raise InputError(f"vertex {row[0]!r} is listed twice", name, no)
            out[v] = codes.setdefault(row[1].strip(), len(codes))
    missing = int((out < 0).sum())
    if missing:
        first = H.node_ids[int(np.argmax(out < 0))]
        raise InputError(f"{missing} vertices of the instance have no label (first: {first!r})", name)
    return out


def write_labels(path: str | os.PathLike, H: Hypergraph, labels: np.ndarray) -> None:
    """Write ground-truth clusters as CSV ``vertex,label`` (original ids) for the vertices that lie
    on an edge: the instance formats cannot hold isolated vertices, so reading it back drops them."""
    on_edge = np.zeros(H.n, dtype=bool)
    on_edge[H.nodes] = True
    with atomic_write(path) as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["vertex", "label"])
        writer.writerows(zip(H.node_ids.astype(str)[on_edge].tolist(), np.asarray(labels).astype(str)[on_edge].tolist()))
