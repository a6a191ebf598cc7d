"""Config dataclasses: fields that carry their command-line help (:func:`option`, read by
``icmlkit.cli._common.config_options``) and :func:`build_config` (values -> a checked config, used by
the CLI and by benches and demos). Standard library and lib/core/errors only: the config modules that
use it are imported when a CLI module is, and ``--help`` must stay fast."""
from __future__ import annotations

import dataclasses
from dataclasses import field

from .errors import UsageError


def option(default, help: str, **meta):
    """A dataclass field with ``default`` (a list default is copied per instance) and metadata
    ``{"help": help, **meta}`` (``choices``, ``min``/``max``, ``type``, ``flags``, ``required``)."""
    metadata = {"help": help, **meta}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def build_config(cls, values: dict):
    """``cls(**values)`` (tuples where the field's default is a list become lists; keys that are not
    fields are an error of ``cls``), then its ``check()``; a value the dataclass rejects is a usage
    error (exit 2)."""
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name in values:
            v = values[f.name]
            if isinstance(v, tuple) and f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                v = list(v)
            kw[f.name] = v
    try:
        cfg = cls(**kw)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    check = getattr(cfg, "check", None)
    if callable(check):
        check()
    return cfg


def number_list(text, flag: str, cast=float, *, positive: bool = False) -> list:
    """A comma-separated list of numbers given to ``flag`` (a list or tuple is taken as it is); a
    UsageError naming the flag when an entry is not a number, the list is empty or, with ``positive``,
    an entry is not above 0."""
    try:
        vals = [cast(x) for x in text] if isinstance(text, (list, tuple)) else \
            [cast(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not a comma-separated list of numbers") from None
    if not vals:
        raise UsageError(f"{flag} needs at least one value")
    if positive and any(not v > 0 for v in vals):
        raise UsageError(f"{flag} needs positive values")
    return vals
