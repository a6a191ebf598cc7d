"""CARD free energies (method sheet estimate-fe.md): radix-decomposed autoregressive proposal + BAR.

Modules: ``gauge`` (frame gauge with Jacobian x2^2 y3, atom order), ``radix`` (the radix bijection
and the Beta mixture), ``model`` (the encoder-decoder transformer with geometry-aware attention),
``card`` (prepare / train / estimate / save / load), ``estimate`` (BAR, MBAR, EXP, overlap, ESS in
log space, checked against pymbar), ``systems`` (analytic potentials with exact F, MALA and exact
samplers), ``mm`` (OpenMM vacuum / OBC2, MD, the lambda-window MBAR and end-state BAR baselines,
FreeSolv access), ``internal`` (internal-coordinate charts with force-field boxes, reconstructed),
``transfer`` (one model over many molecules, estimates on unseen ones, reconstructed), ``pipeline``
and ``demo``, and
``api``: one function per estimate-fe subcommand (config dataclass + loaded inputs -> result with
``.summary``), shared by the CLI, the demo and the benchmark.
The decoder's two-stream wiring, the Stage II weighting and the use of the frame gauge instead of
the paper's principal-axes gauge are reconstructed (see each docstring).
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "RadixMap": "icmlkit.lib.estimate_fe.radix",
    "CARD": "icmlkit.lib.estimate_fe.model",
    "train": "icmlkit.lib.estimate_fe.card",
    "estimate": "icmlkit.lib.estimate_fe.card",
    "save": "icmlkit.lib.estimate_fe.card",
    "load": "icmlkit.lib.estimate_fe.card",
    "bar_estimate": "icmlkit.lib.estimate_fe.estimate",
    "builtin": "icmlkit.lib.estimate_fe.systems",
    "analytic_from_spec": "icmlkit.lib.estimate_fe.systems",
    "exact_free_energy": "icmlkit.lib.estimate_fe.systems",
    "load_molecule": "icmlkit.lib.estimate_fe.mm",
    "lambda_window_mbar": "icmlkit.lib.estimate_fe.mm",
    "endstate_bar": "icmlkit.lib.estimate_fe.mm",
    "ZMatrix": "icmlkit.lib.estimate_fe.internal",
    "train_multi": "icmlkit.lib.estimate_fe.transfer",
    "estimate_unseen": "icmlkit.lib.estimate_fe.transfer",
    "hydration_unseen": "icmlkit.lib.estimate_fe.transfer",
    "run_system": "icmlkit.lib.estimate_fe.pipeline",
    "open_system": "icmlkit.lib.estimate_fe.api",
    "load_frames": "icmlkit.lib.estimate_fe.api",
    "SampleConfig": "icmlkit.lib.estimate_fe.config",
    "TrainConfig": "icmlkit.lib.estimate_fe.config",
    "EstimateConfig": "icmlkit.lib.estimate_fe.config",
    "SolvationConfig": "icmlkit.lib.estimate_fe.config",
    "BaselineConfig": "icmlkit.lib.estimate_fe.config",
    "solvation": "icmlkit.lib.estimate_fe.pipeline",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = sorted(_LAZY)
