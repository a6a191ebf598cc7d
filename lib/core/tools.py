"""The tools' manifests (``lib/<module>/tool.toml``): the one source of truth for each tool's name,
paper, purpose, extra, generator verb, data, bench parts and milestone.

Everything that lists the tools is generated from here: setup.cfg's console scripts, extras and
package data, the Makefile's ``EXTRAS``, the README's table (:mod:`icmlkit.lib.core.registry`) and
``icmlkit list`` (read at run time). ``tests/test_registry.py`` regenerates each and diffs it.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .errors import InputError

LIB = Path(__file__).resolve().parent.parent
MILESTONES = ("runs", "faithful", "reproduces", "beats-baseline")
PURPOSE_WORDS = 15


@dataclass(frozen=True)
class Tool:
    """One tool's manifest. ``module`` is ``name`` with underscores: the cli/, lib/, bench/ and tests/
    module, and ``bench/results/<module>*``; the docs page is ``docs/<name>.md``."""

    name: str
    method: str
    paper: str
    link: str
    purpose: str
    generator: str = ""
    data: tuple[str, ...] = ()
    shared_data: tuple[str, ...] = ()
    dependencies: tuple[str, ...] = ()
    optional_extras: dict[str, tuple[str, ...]] = field(default_factory=dict)
    parts: tuple[str, ...] = ()
    claimed: str = "runs"
    reproduces: tuple[str, ...] = ()
    beats_baseline: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return self.name.replace("-", "_")

    @property
    def extra(self) -> str | None:
        """The tool's extra (named as the tool), or None when it needs nothing beyond the core."""
        return self.name if self.dependencies else None

    @property
    def entry_point(self) -> str:
        return f"icmlkit.cli.{self.module}:main"


def _tuple(value, where: Path, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where}: '{key}' must be a list of strings")
    return tuple(value)


def read_manifest(path: Path) -> Tool:
    """Parse and check one ``tool.toml``; a bad file raises InputError naming it and the field."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: not a readable TOML manifest ({exc})") from None
    for key in ("name", "method", "paper", "link", "purpose"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise InputError(f"{path}: '{key}' must be a non-empty string")
    if raw["name"].replace("-", "_") != path.parent.name:
        raise InputError(f"{path}: name {raw['name']!r} does not match its folder lib/{path.parent.name}")
    if len(raw["purpose"].split()) > PURPOSE_WORDS:
        raise InputError(f"{path}: 'purpose' has more than {PURPOSE_WORDS} words")
    extra, bench, ms = raw.get("extra", {}), raw.get("bench", {}), raw.get("milestone", {})
    claimed = ms.get("claimed", "runs")
    if claimed not in MILESTONES:
        raise InputError(f"{path}: milestone.claimed must be one of {', '.join(MILESTONES)}")
    optional = {k: _tuple(v, path, f"extra.optional.{k}") for k, v in extra.get("optional", {}).items()}
    return Tool(name=raw["name"], method=raw["method"], paper=raw["paper"], link=raw["link"],
                purpose=raw["purpose"], generator=raw.get("generator", ""),
                data=_tuple(raw.get("data", []), path, "data"),
                shared_data=_tuple(raw.get("shared_data", []), path, "shared_data"),
                dependencies=_tuple(extra.get("dependencies", []), path, "extra.dependencies"),
                optional_extras=optional, parts=_tuple(bench.get("parts", []), path, "bench.parts"),
                claimed=claimed, reproduces=_tuple(ms.get("reproduces", []), path, "milestone.reproduces"),
                beats_baseline=_tuple(ms.get("beats_baseline", []), path, "milestone.beats_baseline"))


@lru_cache(maxsize=1)
def tools() -> tuple[Tool, ...]:
    """Every tool's manifest, sorted by name."""
    return tuple(sorted((read_manifest(p) for p in LIB.glob("*/tool.toml")), key=lambda t: t.name))


def tool(name: str) -> Tool:
    """The manifest of one tool, by executable name or module name."""
    for t in tools():
        if name in (t.name, t.module):
            return t
    raise InputError(f"no tool named {name!r} (known: {', '.join(t.name for t in tools())})")


def shared_extras(table: str = "extras") -> dict[str, tuple[str, ...]]:
    """Extras that belong to no tool (lib/core/extras.toml): ``[extras]`` (installed) or ``[optional]``."""
    raw = tomllib.loads((LIB / "core" / "extras.toml").read_text()).get(table, {})
    return {k: tuple(v) for k, v in raw.items()}
