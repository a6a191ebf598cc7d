"""Config-dataclass fields that carry their command-line help (read by
``icmlkit.cli._common.config_options``). Standard library only: the config modules that use it are
imported when a CLI module is, and ``--help`` must stay fast."""
from __future__ import annotations

from dataclasses import field


def option(default, help: str, **meta):
    """A dataclass field with ``default`` (a list default is copied per instance) and metadata
    ``{"help": help, **meta}`` (``choices``, ``min``/``max``, ``type``, ``flags``, ``required``)."""
    metadata = {"help": help, **meta}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)
