"""Causal graphs shared by the causal tools: ADMGs, latent projection, d-separation on mutilated
graphs, the do-calculus rules, and readers for DAGitty / JSON graphs and ``P(y | do(x), w)`` queries."""
from icmlkit.lib.causal.adjust import causal_nodes, forbidden, is_adjustment_set, optimal_adjustment_set
from icmlkit.lib.causal.admg import ADMG, latent_projection
from icmlkit.lib.causal.parse import Query, parse_dagitty, parse_graph, parse_json_graph, parse_query, read_graph
from icmlkit.lib.causal.rules import rule1, rule2, rule3, z_of_w

__all__ = ["ADMG", "latent_projection", "causal_nodes", "forbidden", "is_adjustment_set",
           "optimal_adjustment_set", "Query", "parse_dagitty", "parse_graph", "parse_json_graph",
           "parse_query", "read_graph", "rule1", "rule2", "rule3", "z_of_w"]
