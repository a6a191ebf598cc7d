"""Lazy package exports: names re-exported from submodules that load on first use, so that a
package import (and every tool's ``--help``) never imports torch or another heavy dependency."""
from __future__ import annotations

import importlib
import sys
from typing import Callable


def lazy_exports(package: str, table: dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` resolving ``name`` from ``table[name]`` (a module path) on first use."""

    def __getattr__(name: str):
        if name in table:
            value = getattr(importlib.import_module(table[name]), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
