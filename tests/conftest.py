"""Shared fixtures: the executables beside this interpreter, and the real data folder."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def exe(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed beside {sys.executable}; run `make install`")
    return str(path)


def run_tool(*args, input: str | None = None, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """Run an executable (first arg) with the rest, capturing text output; no progress bars."""
    full_env = {**os.environ, "ICMLKIT_NO_PROGRESS": "1", **(env or {})}
    return subprocess.run([exe(args[0]), *map(str, args[1:])], input=input, capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=600)


def shared_maxecc() -> Path | None:
    p = REPO.parent / "shared" / "data" / "maxecc"
    return p if p.exists() else None


@pytest.fixture
def tiny_instance(tmp_path) -> Path:
    """Five edges on sparse ids with three colours; optimum 4 (the triangle in colour 1, edge 40-50 in colour 3)."""
    p = tmp_path / "tiny.txt"
    p.write_text("10,20 1\n20,30 1\n30,10 1\n10,40 2\n40,50 3\n")
    return p


class Interrupted(Exception):
    """Raised by :class:`InterruptingCheckpointer` right after it wrote a checkpoint."""


def _interrupting_checkpointer():
    from icmlkit.lib.core.checkpoint import Checkpointer

    class InterruptingCheckpointer(Checkpointer):
        """A checkpointer that stops the run (raises :class:`Interrupted`) after its first save."""

        def save(self, *args, **kwargs):
            super().save(*args, **kwargs)
            raise Interrupted

    return InterruptingCheckpointer


@pytest.fixture
def interrupting_checkpointer():
    """The class of a Checkpointer that interrupts training right after writing its first checkpoint."""
    return _interrupting_checkpointer()
