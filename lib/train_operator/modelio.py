"""Model files: one .safetensors file per model (lib/core/io's deterministic writer), whose
``__metadata__`` carries the model's configuration as JSON strings (``format``, ``config``,
``meta``), so one file is the whole model and loads in the ``safetensors`` package too."""
from __future__ import annotations

import json

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.io import display_name, read_safetensors, write_safetensors

FORMAT = "icmlkit.neuralop/1"


def write_model(path, tensors: dict, config: dict, meta: dict) -> None:
    """A model file: the weights and the JSON ``config`` / ``meta`` in the header."""
    write_safetensors(path, tensors, {"format": FORMAT, "config": json.dumps(config, sort_keys=True),
                                      "meta": json.dumps(meta, sort_keys=True)})


def read_model_file(path) -> tuple[dict, dict, dict]:
    """(tensors as numpy arrays, config, meta) of a file written by :func:`write_model`."""
    where = display_name(path)
    tensors, md = read_safetensors(path, FORMAT, what="train-operator model file")
    try:
        config, meta = json.loads(md["config"]), json.loads(md["meta"])
    except (KeyError, json.JSONDecodeError):
        raise InputError("the model's config metadata is unreadable", where) from None
    if not isinstance(config, dict) or not isinstance(meta, dict):
        raise InputError("the model's config metadata is not an object", where)
    return tensors, config, meta
