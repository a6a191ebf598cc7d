"""Edge-coloured hypergraphs in CSR form (method sheet solve-maxecc.md, "Problem").

A hypergraph H = (V, E) with an edge colour c(e) in [k] and a weight w_e > 0 per edge. MaxECC asks
for a colouring sigma: V -> [k] maximising the weight of the *satisfied* edges, those whose
vertices all have the edge's colour.

Conventions (decided here, documented in the README):

- Vertices are ``0..n-1``; ``node_ids`` keeps the original ids (sorted, as the official Julia scripts
  relabel them), ``colour_labels`` the original colour labels (sorted), so colour index ``j`` means
  label ``colour_labels[j]``.
- A vertex listed twice in one edge counts once (duplicates are removed when the hypergraph is
  built), so an edge is a *set* of vertices.
- Singleton edges are allowed (satisfied iff their one vertex has the edge's colour); empty edges
  are rejected.
- Weights are positive finite floats; the real data sets are unweighted (all 1).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np

from icmlkit.lib.core.errors import InputError


def _sorted_labels(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique labels and the index of each value: integers sort numerically, anything
    else is compared as text (mixed int/str input becomes text)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        arr = arr.astype(np.int64)
    elif arr.dtype.kind == "b" or arr.dtype.kind == "f":
        raise InputError(f"labels must be integers or strings, got {arr.dtype} values")
    elif arr.dtype.kind != "U":
        arr = np.array([str(v) for v in arr.tolist()], dtype=str)
    uniq, inv = np.unique(arr, return_inverse=True)
    return uniq, inv.astype(np.int64).reshape(-1)


def _as_label_array(values) -> np.ndarray:
    """A list of labels (ints or strings) as a numpy array: int64 if all are ints, else str."""
    vals = list(values)
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in vals):
        return np.array(vals, dtype=np.int64)
    return np.array([str(v) for v in vals], dtype=str)


@dataclass
class Hypergraph:
    """An edge-coloured, edge-weighted hypergraph with ``n`` vertices, ``m`` edges, ``k`` colours.

    Arrays (numpy):
      ``ptr``     int64 [m+1]  CSR offsets: edge e holds ``nodes[ptr[e]:ptr[e+1]]``
      ``nodes``   int64 [nnz]  vertex indices 0..n-1, distinct within each edge, sorted
      ``colour``  int64 [m]    colour index 0..k-1 of each edge
      ``weight``  float64 [m]  positive finite weights
      ``node_ids``       [n]   original vertex ids (int64 or str), sorted
      ``colour_labels``  [k]   original colour labels (int64 or str), sorted
    """

    ptr: np.ndarray
    nodes: np.ndarray
    colour: np.ndarray
    weight: np.ndarray
    node_ids: np.ndarray
    colour_labels: np.ndarray
    n: int
    k: int

    def __post_init__(self) -> None:
        self.ptr = np.ascontiguousarray(self.ptr, dtype=np.int64)
        self.nodes = np.ascontiguousarray(self.nodes, dtype=np.int64)
        self.colour = np.ascontiguousarray(self.colour, dtype=np.int64)
        self.weight = np.ascontiguousarray(self.weight, dtype=np.float64)
        self.n, self.k = int(self.n), int(self.k)
        m = len(self.colour)
        if self.ptr.shape != (m + 1,) or self.ptr[0] != 0 or self.ptr[-1] != len(self.nodes):
            raise InputError("inconsistent CSR offsets (ptr)")
        if self.weight.shape != (m,):
            raise InputError(f"{len(self.weight)} weights for {m} edges")
        if m and np.any(np.diff(self.ptr) <= 0):
            raise InputError(f"edge {int(np.argmax(np.diff(self.ptr) <= 0))} is empty")
        if len(self.nodes) and (self.nodes.min() < 0 or self.nodes.max() >= self.n):
            raise InputError("vertex index out of range 0..n-1")
        if m and (self.colour.min() < 0 or self.colour.max() >= self.k):
            raise InputError("colour index out of range 0..k-1")
        if not np.all(np.isfinite(self.weight)) or np.any(self.weight <= 0):
            raise InputError("weights must be positive and finite")
        if len(self.node_ids) != self.n or len(self.colour_labels) != self.k:
            raise InputError("node_ids / colour_labels do not match n / k")

    # ------------------------------------------------------------------ derived quantities
    @property
    def m(self) -> int:
        """Number of edges."""
        return len(self.colour)

    @cached_property
    def sizes(self) -> np.ndarray:
        """Edge sizes |e| (int64 [m])."""
        return np.diff(self.ptr)

    @property
    def r(self) -> int:
        """Rank: the MAXIMUM edge size (the guarantees use it, not the mean)."""
        return int(self.sizes.max()) if self.m else 0

    @cached_property
    def edge_of(self) -> np.ndarray:
        """Edge index of every entry of ``nodes`` (int64 [nnz])."""
        return np.repeat(np.arange(self.m, dtype=np.int64), self.sizes)

    @property
    def total_weight(self) -> float:
        """W = sum of all edge weights."""
        return float(self.weight.sum())

    def edges(self) -> list[list[int]]:
        """The edges as Python lists of vertex indices (small instances, tests)."""
        return [self.nodes[a:b].tolist() for a, b in zip(self.ptr[:-1], self.ptr[1:])]

    def __repr__(self) -> str:
        return f"Hypergraph(n={self.n}, m={self.m}, k={self.k}, r={self.r}, W={self.total_weight:g})"

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_csr(
        cls,
        ptr: np.ndarray,
        raw_nodes: np.ndarray,
        raw_colours: np.ndarray,
        weights: np.ndarray | None = None,
        node_ids: Sequence | np.ndarray | None = None,
        colour_labels: Sequence | np.ndarray | None = None,
    ) -> "Hypergraph":
        """Build from CSR arrays of ORIGINAL vertex ids and colour labels (vectorised).

        Ids and labels are relabelled in sorted order; ``node_ids`` / ``colour_labels`` optionally
        give the full universes (so isolated vertices or colours without edges are kept); every id
        used by an edge must be in them. Duplicate vertices within an edge are removed.
        """
        ptr = np.asarray(ptr, dtype=np.int64)
        m = len(ptr) - 1
        sizes = np.diff(ptr)
        if m <= 0:
            raise InputError("no edges")
        if np.any(sizes <= 0):
            raise InputError(f"edge {int(np.argmax(sizes <= 0))} is empty")
        raw_nodes = np.asarray(raw_nodes)
        raw_colours = np.asarray(raw_colours)
        if len(raw_colours) != m:
            raise InputError(f"{len(raw_colours)} colours for {m} edges")

        if node_ids is None:
            ids, nodes = _sorted_labels(raw_nodes)
        else:
            ids, _ = _sorted_labels(np.asarray(node_ids))
            nodes = _lookup(ids, raw_nodes, "vertex id")
        if colour_labels is None:
            labels, colour = _sorted_labels(raw_colours)
        else:
            labels, _ = _sorted_labels(np.asarray(colour_labels))
            colour = _lookup(labels, raw_colours, "colour label")

        # Deduplicate vertices within each edge: sort entries by (edge, vertex), drop repeats.
        edge_of = np.repeat(np.arange(m, dtype=np.int64), sizes)
        order = np.lexsort((nodes, edge_of))
        e_sorted, v_sorted = edge_of[order], nodes[order]
        keep = np.ones(len(order), dtype=bool)
        keep[1:] = (e_sorted[1:] != e_sorted[:-1]) | (v_sorted[1:] != v_sorted[:-1])
        e_sorted, v_sorted = e_sorted[keep], v_sorted[keep]
        new_ptr = np.zeros(m + 1, dtype=np.int64)
        new_ptr[1:] = np.cumsum(np.bincount(e_sorted, minlength=m))

        w = np.ones(m) if weights is None else np.asarray(weights, dtype=np.float64)
        return cls(new_ptr, v_sorted, colour, w, ids, labels, len(ids), len(labels))

    @classmethod
    def from_edges(
        cls,
        edges: Sequence[Sequence],
        colours: Sequence,
        weights: Sequence[float] | None = None,
        node_ids: Sequence | None = None,
        colour_labels: Sequence | None = None,
    ) -> "Hypergraph":
        """Build from a list of edges (sequences of original vertex ids), one colour label per
        edge and optional weights (default 1). Sparse ids and labels are relabelled in sorted
        order, keeping the mappings in ``node_ids`` and ``colour_labels``."""
        edges = list(edges)
        sizes = np.fromiter((len(e) for e in edges), dtype=np.int64, count=len(edges))
        ptr = np.zeros(len(edges) + 1, dtype=np.int64)
        ptr[1:] = np.cumsum(sizes)
        flat = [v for e in edges for v in e]
        return cls.from_csr(
            ptr,
            _as_label_array(flat),
            _as_label_array(colours),
            None if weights is None else np.asarray(weights, dtype=np.float64),
            None if node_ids is None else _as_label_array(node_ids),
            None if colour_labels is None else _as_label_array(colour_labels),
        )


def _lookup(universe: np.ndarray, values: np.ndarray, what: str) -> np.ndarray:
    """Index of each value in the sorted ``universe``; InputError if one is missing."""
    values = np.asarray(values)
    if universe.dtype.kind != values.dtype.kind:
        universe_s = universe.astype(str)
        order = np.argsort(universe_s)
        pos = np.searchsorted(universe_s[order], values.astype(str))
        pos = np.clip(pos, 0, len(order) - 1)
        ok = universe_s[order][pos] == values.astype(str)
        idx = order[pos]
    else:
        pos = np.clip(np.searchsorted(universe, values), 0, len(universe) - 1)
        ok = universe[pos] == values
        idx = pos
    if not np.all(ok):
        bad = values[np.argmin(ok)]
        raise InputError(f"{what} {bad!r} is not in the given list")
    return idx.astype(np.int64)
