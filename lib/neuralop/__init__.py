"""Functional Attention (FuncAttn) neural operators (method sheet train-operator.md), in PyTorch.

- :mod:`.nets`: the FuncAttn layer (learned soft bases, the dual-form functional map), the model, the
  Transolver swap, the ablations and our FNO;
- :mod:`.data`: .pt / .npz / .mat field readers; :mod:`.modelio`: safetensors model files;
- :mod:`.train`: train / evaluate / predict / superres; :mod:`.solvers`: Darcy and Burgers data;
- :mod:`.fewshot`: few-shot sine regression; :mod:`.config`: the option dataclasses (torch-free).

Parts marked RECONSTRUCTED in the docstrings are not confirmed by the paper.
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "FieldSet": "icmlkit.lib.neuralop.data",
    "read_fields": "icmlkit.lib.neuralop.data",
    "fieldset": "icmlkit.lib.neuralop.data",
    "functional_map": "icmlkit.lib.neuralop.nets",
    "FuncAttnNet": "icmlkit.lib.neuralop.nets",
    "FuncAttnBlock": "icmlkit.lib.neuralop.nets",
    "FNONet": "icmlkit.lib.neuralop.nets",
    "build_net": "icmlkit.lib.neuralop.nets",
    "train": "icmlkit.lib.neuralop.train",
    "evaluate": "icmlkit.lib.neuralop.train",
    "predict": "icmlkit.lib.neuralop.train",
    "superres": "icmlkit.lib.neuralop.train",
    "load_model": "icmlkit.lib.neuralop.train",
    "OperatorModel": "icmlkit.lib.neuralop.train",
    "generate_darcy": "icmlkit.lib.neuralop.solvers",
    "generate_burgers": "icmlkit.lib.neuralop.solvers",
    "solve_darcy": "icmlkit.lib.neuralop.solvers",
    "few_shot": "icmlkit.lib.neuralop.fewshot",
    "ModelConfig": "icmlkit.lib.neuralop.config",
    "TrainConfig": "icmlkit.lib.neuralop.config",
    "GenerateConfig": "icmlkit.lib.neuralop.config",
    "FewShotConfig": "icmlkit.lib.neuralop.config",
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
