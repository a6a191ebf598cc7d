"""fed-stream: streaming federated learning with a prediction oracle (SFedPO, ICML 2026).

Everything past the paper's abstract is [reconstructed] (method sheet fed-stream.md): the DDS
objective and its water-filling solver, the SAW weights, the oracles' noise construction, the
baselines' buffer rules and the drift generator are ours.
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "Stream": "icmlkit.lib.fed_stream.streams",
    "make_stream": "icmlkit.lib.fed_stream.streams",
    "read_stream": "icmlkit.lib.fed_stream.streams",
    "write_stream": "icmlkit.lib.fed_stream.streams",
    "stream_summary": "icmlkit.lib.fed_stream.streams",
    "make_oracle": "icmlkit.lib.fed_stream.oracles",
    "move_by_tv": "icmlkit.lib.fed_stream.oracles",
    "tv": "icmlkit.lib.fed_stream.oracles",
    "dds_counts": "icmlkit.lib.fed_stream.dds",
    "brute_force_dds": "icmlkit.lib.fed_stream.dds",
    "saw_weights": "icmlkit.lib.fed_stream.dds",
    "run_stream": "icmlkit.lib.fed_stream.sim",
    "RunResult": "icmlkit.lib.fed_stream.sim",
    "compare": "icmlkit.lib.fed_stream.compare",
    "plot_compare": "icmlkit.lib.fed_stream.compare",
    "export_app": "icmlkit.lib.fed_stream.flower",
    "StreamConfig": "icmlkit.lib.fed_stream.config",
    "RunConfig": "icmlkit.lib.fed_stream.config",
    "CompareConfig": "icmlkit.lib.fed_stream.config",
}

__getattr__ = lazy_exports(__name__, _LAZY)
__all__ = sorted(_LAZY)
