"""fed-stream: streaming federated learning with a prediction oracle (SFedPO, ICML 2026).

Everything past the paper's abstract is [reconstructed] (method sheet fed-stream.md): the DDS
objective and its water-filling solver, the SAW weights, the oracles' noise construction, the
baselines' buffer rules and the drift generator are ours.
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "Stream": "icmlkit.lib.fedstream.streams",
    "make_stream": "icmlkit.lib.fedstream.streams",
    "read_stream": "icmlkit.lib.fedstream.streams",
    "write_stream": "icmlkit.lib.fedstream.streams",
    "stream_summary": "icmlkit.lib.fedstream.streams",
    "make_oracle": "icmlkit.lib.fedstream.oracles",
    "move_by_tv": "icmlkit.lib.fedstream.oracles",
    "tv": "icmlkit.lib.fedstream.oracles",
    "dds_counts": "icmlkit.lib.fedstream.dds",
    "brute_force_dds": "icmlkit.lib.fedstream.dds",
    "saw_weights": "icmlkit.lib.fedstream.dds",
    "run_stream": "icmlkit.lib.fedstream.sim",
    "RunResult": "icmlkit.lib.fedstream.sim",
    "compare": "icmlkit.lib.fedstream.compare",
    "plot_compare": "icmlkit.lib.fedstream.compare",
    "export_app": "icmlkit.lib.fedstream.flower",
    "StreamConfig": "icmlkit.lib.fedstream.config",
    "RunConfig": "icmlkit.lib.fedstream.config",
    "CompareConfig": "icmlkit.lib.fedstream.config",
}

__getattr__ = lazy_exports(__name__, _LAZY)
__all__ = sorted(_LAZY)
