"""Acyclic directed mixed graphs (ADMGs), latent projection and d-separation on mutilated graphs.

An ADMG over observed variables V has directed edges a -> b and bidirected edges a <-> b (a latent
common cause). d-separation is computed with networkx on the *explicit-latent DAG*: every
bidirected edge a <-> b becomes a latent parent ``U[a,b]`` of both (never conditioned on).
Mutilations follow Pearl's notation:

- ``bar`` = G_{\\bar X}: every edge INTO a node of X is removed (directed ones and the latent
  parents standing for bidirected edges);
- ``under`` = G_{\\underline Z}: every directed edge OUT of a node of Z is removed.

Graphs are small (tens of nodes); the mutilated networkx graphs are cached per (bar, under).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import networkx as nx

from icmlkit.lib.core.errors import InputError


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


@dataclass
class ADMG:
    """An acyclic directed mixed graph over named observed variables.

    ``nodes`` keeps the order the variables were declared in (used for deterministic output);
    ``directed`` holds (a, b) for a -> b; ``bidirected`` holds sorted pairs (a, b) for a <-> b.
    """

    nodes: list[str]
    directed: set[tuple[str, str]] = field(default_factory=set)
    bidirected: set[tuple[str, str]] = field(default_factory=set)

    def __post_init__(self):
        self.nodes = list(dict.fromkeys(self.nodes))
        self.directed = set(self.directed)
        self.bidirected = {_pair(a, b) for a, b in self.bidirected}
        known = set(self.nodes)
        for a, b in [*self.directed, *self.bidirected]:
            for v in (a, b):
                if v not in known:
                    raise InputError(f"edge {a}-{b} uses unknown node {v!r}")
            if a == b:
                raise InputError(f"self-loop on {a!r}")
        self.index = {v: i for i, v in enumerate(self.nodes)}
        self._cache: dict = {}
        cyc = self.find_cycle()
        if cyc:
            raise InputError("directed cycle " + " -> ".join(cyc + [cyc[0]]) + " (an ADMG must be acyclic)")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_edges(cls, directed: Iterable = (), bidirected: Iterable = (), nodes: Iterable = ()) -> "ADMG":
        directed, bidirected = list(directed), list(bidirected)
        order = list(nodes)
        for a, b in [*directed, *bidirected]:
            order += [a, b]
        return cls(order, set(map(tuple, directed)), set(map(tuple, bidirected)))

    def find_cycle(self) -> list[str] | None:
        g = nx.DiGraph()
        g.add_nodes_from(self.nodes)
        g.add_edges_from(self.directed)
        try:
            cyc = nx.find_cycle(g)
        except nx.NetworkXNoCycle:
            return None
        return [a for a, _ in cyc]

    # ------------------------------------------------------------------ structure
    def parents(self, v: str) -> set[str]:
        return {a for a, b in self.directed if b == v}

    def children(self, v: str) -> set[str]:
        return {b for a, b in self.directed if a == v}

    def ancestors(self, S: Iterable[str], bar: Iterable[str] = ()) -> set[str]:
        """An(S) including S, in G with the edges into ``bar`` removed."""
        return self._reach(S, bar, up=True)

    def descendants(self, S: Iterable[str], bar: Iterable[str] = ()) -> set[str]:
        """De(S) including S, in G with the edges into ``bar`` removed."""
        return self._reach(S, bar, up=False)

    def _reach(self, S: Iterable[str], bar: Iterable[str], up: bool) -> set[str]:
        bar = set(bar)
        step: dict[str, list[str]] = {}
        for a, b in self.directed:
            if b not in bar:
                if up:
                    step.setdefault(b, []).append(a)
                else:
                    step.setdefault(a, []).append(b)
        out, stack = set(S), list(S)
        while stack:
            for w in step.get(stack.pop(), ()):
                if w not in out:
                    out.add(w)
                    stack.append(w)
        return out

    def topological_order(self) -> list[str]:
        """A topological order, ties broken by declaration order (deterministic)."""
        g = nx.DiGraph()
        g.add_nodes_from(self.nodes)
        g.add_edges_from(self.directed)
        return list(nx.lexicographical_topological_sort(g, key=lambda v: self.index[v]))

    def subgraph(self, S: Iterable[str]) -> "ADMG":
        S = set(S)
        return ADMG([v for v in self.nodes if v in S], {(a, b) for a, b in self.directed if a in S and b in S},
                    {(a, b) for a, b in self.bidirected if a in S and b in S})

    def c_components(self, S: Iterable[str] | None = None) -> list[frozenset[str]]:
        """The districts (components of the bidirected part) of G[S], in declaration order."""
        S = set(self.nodes) if S is None else set(S)
        g = nx.Graph()
        g.add_nodes_from(v for v in self.nodes if v in S)
        g.add_edges_from((a, b) for a, b in self.bidirected if a in S and b in S)
        comps = [frozenset(c) for c in nx.connected_components(g)]
        return sorted(comps, key=lambda c: min(self.index[v] for v in c))

    def latent_dag(self) -> tuple[nx.DiGraph, list[str]]:
        """The explicit-latent DAG: a parent U[a,b] for each bidirected edge; returns (dag, latents)."""
        g = nx.DiGraph()
        g.add_nodes_from(self.nodes)
        g.add_edges_from(self.directed)
        lat = []
        for a, b in sorted(self.bidirected):
            u = f"U[{a},{b}]"
            lat.append(u)
            g.add_edge(u, a)
            g.add_edge(u, b)
        return g, lat

    def mutilated(self, bar: Iterable[str] = (), under: Iterable[str] = ()) -> nx.DiGraph:
        """The explicit-latent DAG of G_{\\bar{bar}, \\underline{under}} (cached)."""
        key = (frozenset(bar), frozenset(under))
        g = self._cache.get(key)
        if g is None:
            bar_s, under_s = key
            g = nx.DiGraph()
            g.add_nodes_from(self.nodes)
            g.add_edges_from((a, b) for a, b in self.directed if b not in bar_s and a not in under_s)
            for a, b in sorted(self.bidirected):
                u = f"U[{a},{b}]"
                if a not in bar_s:
                    g.add_edge(u, a)
                if b not in bar_s:
                    g.add_edge(u, b)
            if len(self._cache) > 50000:
                self._cache.clear()
            self._cache[key] = g
        return g

    def d_separated(self, Y: Iterable[str], Z: Iterable[str], cond: Iterable[str] = (),
                    bar: Iterable[str] = (), under: Iterable[str] = ()) -> bool:
        """(Y _||_ Z | cond) in G_{\\bar{bar}, \\underline{under}} (networkx on the latent DAG).

        Empty Y or Z is trivially separated. Y, Z and cond must be disjoint observed sets.
        """
        Y, Z, cond = set(Y), set(Z), set(cond)
        if not Y or not Z:
            return True
        g = self.mutilated(bar, under)
        return nx.is_d_separator(g, Y, Z, cond)

    # ------------------------------------------------------------------ output
    def to_dagitty(self) -> str:
        lines = [f"  {a} -> {b}" for a, b in sorted(self.directed, key=lambda e: (self.index[e[0]], self.index[e[1]]))]
        lines += [f"  {a} <-> {b}" for a, b in sorted(self.bidirected, key=lambda e: (self.index[e[0]], self.index[e[1]]))]
        used = {v for e in [*self.directed, *self.bidirected] for v in e}
        lines = [f"  {v}" for v in self.nodes if v not in used] + lines
        return "dag {\n" + "\n".join(lines) + "\n}\n"

    def to_json(self) -> dict:
        return {"nodes": list(self.nodes),
                "directed": [list(e) for e in sorted(self.directed, key=lambda e: (self.index[e[0]], self.index[e[1]]))],
                "bidirected": [list(e) for e in sorted(self.bidirected, key=lambda e: (self.index[e[0]], self.index[e[1]]))]}


def latent_projection(nodes: Iterable[str], directed: Iterable[tuple[str, str]], latent: Iterable[str],
                      bidirected: Iterable[tuple[str, str]] = ()) -> ADMG:
    """Project the latent variables out of a (mixed) graph (Verma & Pearl's latent projection).

    For observed a, b: a -> b when a directed path a -> ... -> b has only latent intermediate nodes;
    a <-> b when they already share a bidirected edge or some latent L reaches both by directed
    paths through latents only (a common latent ancestor). Existing bidirected edges touching a
    latent are first replaced by an explicit latent parent.
    """
    nodes = list(dict.fromkeys(nodes))
    latent = set(latent)
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(directed)
    bid_obs = set()
    for i, (a, b) in enumerate(bidirected):
        if a in latent or b in latent:
            u = f"__bid{i}"
            latent.add(u)
            g.add_edge(u, a)
            g.add_edge(u, b)
        else:
            bid_obs.add(_pair(a, b))
    observed = [v for v in nodes if v not in latent]

    def obs_reach(start: str) -> set[str]:
        out, stack, seen = set(), [start], {start}
        while stack:
            v = stack.pop()
            for c in g.successors(v):
                if c in seen:
                    continue
                seen.add(c)
                if c in latent:
                    stack.append(c)
                else:
                    out.add(c)
        return out

    dir_out = {(a, b) for a in observed for b in obs_reach(a)}
    bid = set(bid_obs)
    for l in latent:
        if l not in g:
            continue
        r = sorted(obs_reach(l))
        for i in range(len(r)):
            for j in range(i + 1, len(r)):
                bid.add(_pair(r[i], r[j]))
    return ADMG(observed, dir_out, bid)
