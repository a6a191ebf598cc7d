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
    "RadixMap": "icmlkit.lib.fe.radix",
    "CARD": "icmlkit.lib.fe.model",
    "train": "icmlkit.lib.fe.card",
    "estimate": "icmlkit.lib.fe.card",
    "save": "icmlkit.lib.fe.card",
    "load": "icmlkit.lib.fe.card",
    "bar_estimate": "icmlkit.lib.fe.estimate",
    "builtin": "icmlkit.lib.fe.systems",
    "analytic_from_spec": "icmlkit.lib.fe.systems",
    "exact_free_energy": "icmlkit.lib.fe.systems",
    "load_molecule": "icmlkit.lib.fe.mm",
    "lambda_window_mbar": "icmlkit.lib.fe.mm",
    "endstate_bar": "icmlkit.lib.fe.mm",
    "ZMatrix": "icmlkit.lib.fe.internal",
    "train_multi": "icmlkit.lib.fe.transfer",
    "estimate_unseen": "icmlkit.lib.fe.transfer",
    "hydration_unseen": "icmlkit.lib.fe.transfer",
    "run_system": "icmlkit.lib.fe.pipeline",
    "open_system": "icmlkit.lib.fe.api",
    "load_frames": "icmlkit.lib.fe.api",
    "SampleConfig": "icmlkit.lib.fe.config",
    "TrainConfig": "icmlkit.lib.fe.config",
    "EstimateConfig": "icmlkit.lib.fe.config",
    "SolvationConfig": "icmlkit.lib.fe.config",
    "BaselineConfig": "icmlkit.lib.fe.config",
    "solvation": "icmlkit.lib.fe.pipeline",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = sorted(_LAZY)
