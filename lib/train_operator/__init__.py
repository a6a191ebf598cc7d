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
    "FieldSet": "icmlkit.lib.train_operator.data",
    "read_fields": "icmlkit.lib.train_operator.data",
    "fieldset": "icmlkit.lib.train_operator.data",
    "functional_map": "icmlkit.lib.train_operator.nets",
    "FuncAttnNet": "icmlkit.lib.train_operator.nets",
    "FuncAttnBlock": "icmlkit.lib.train_operator.nets",
    "FNONet": "icmlkit.lib.train_operator.nets",
    "build_net": "icmlkit.lib.train_operator.nets",
    "train": "icmlkit.lib.train_operator.train",
    "evaluate": "icmlkit.lib.train_operator.train",
    "predict": "icmlkit.lib.train_operator.train",
    "superres": "icmlkit.lib.train_operator.train",
    "load_model": "icmlkit.lib.train_operator.train",
    "OperatorModel": "icmlkit.lib.train_operator.train",
    "generate_darcy": "icmlkit.lib.train_operator.solvers",
    "generate_burgers": "icmlkit.lib.train_operator.solvers",
    "solve_darcy": "icmlkit.lib.train_operator.solvers",
    "few_shot": "icmlkit.lib.train_operator.fewshot",
    "ModelConfig": "icmlkit.lib.train_operator.config",
    "TrainConfig": "icmlkit.lib.train_operator.config",
    "GenerateConfig": "icmlkit.lib.train_operator.config",
    "FewShotConfig": "icmlkit.lib.train_operator.config",
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
