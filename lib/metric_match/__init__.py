"""Riemannian metric matching (method sheet metric-match.md): the carre du champ of a point cloud
learned by denoising, M(y, h) with Gamma = M^T M, and geometry queries at a constant cost per query.

- :mod:`.config`: option dataclasses (torch-free); :mod:`.core`: low-rank loss, FiLM MLP and UNet, r x r
  eigen route, local dimension; :mod:`.train`: training (checkpoints, torchrun);
  :mod:`.model`: the .safetensors model; :mod:`.knn`: the kNN-CDC baseline; :mod:`.api`: query,
  knn, interpolate, eval; :mod:`.generate`: manifolds with exact geometry; :mod:`.demo`.
``train`` and ``generate`` share their module's name: import them from ``.train`` / ``.generate``.
"""
from icmlkit.lib.core.lazy import lazy_exports

__getattr__ = lazy_exports(__name__, {
    "TrainResult": "icmlkit.lib.metric_match.train",
    "query": "icmlkit.lib.metric_match.api", "knn_query": "icmlkit.lib.metric_match.api",
    "interpolate": "icmlkit.lib.metric_match.api", "evaluate": "icmlkit.lib.metric_match.api",
    "path_png": "icmlkit.lib.metric_match.api",
    "read_points": "icmlkit.lib.metric_match.data", "Points": "icmlkit.lib.metric_match.data",
    "load_model": "icmlkit.lib.metric_match.model", "save_model": "icmlkit.lib.metric_match.model",
    "model_bytes": "icmlkit.lib.metric_match.model", "MetricModel": "icmlkit.lib.metric_match.model",
    "lowrank_loss": "icmlkit.lib.metric_match.core", "naive_loss": "icmlkit.lib.metric_match.core",
    "eig_route": "icmlkit.lib.metric_match.core", "local_dimension": "icmlkit.lib.metric_match.core",
    "knn_cdc": "icmlkit.lib.metric_match.knn",
})
