"""Training checkpoints: one format for every tool, written atomically, resumed to the same bytes.

A checkpoint is a dict read back with ``torch.load(weights_only=True)``::

    {"format": "icmlkit.checkpoint/1", "step": int, "fingerprint": str,
     "model": state_dict | None, "optimizer": state_dict | None, "scheduler": state_dict | None,
     "rng": {stream name: torch.Generator state}, "extra": {...plain values and tensors...}}

``fingerprint`` digests the run's settings and inputs (:func:`fingerprint`); resuming with other
settings or inputs is a usage error, so ``--resume`` can only continue the run it was written by,
and an uninterrupted run and an interrupted-then-resumed one give the same output bytes (the
optimiser, scheduler and every named random stream are restored with the weights).

The CLI side (``OUTPUT.ckpt.pt`` beside the output, ``--checkpoint-every``, ``--resume``) is
``icmlkit.cli._common.checkpoint_options``; the library receives a :class:`Checkpointer`.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.core.io import read_torch, write_torch

FORMAT = "icmlkit.checkpoint/1"


def _digest_input(h, x) -> None:
    import numpy as np

    if hasattr(x, "detach"):  # a tensor
        x = x.detach().cpu().contiguous().numpy()
    if isinstance(x, np.ndarray):
        h.update(f"{x.dtype}{x.shape}".encode())
        h.update(np.ascontiguousarray(x).tobytes())
    elif isinstance(x, (bytes, bytearray)):
        h.update(bytes(x))
    else:
        h.update(json.dumps(x, sort_keys=True, default=str).encode())


def fingerprint(settings: dict, *inputs) -> str:
    """sha256 of the settings (canonical JSON) and of every input (tensor, array, bytes or value)."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for x in inputs:
        _digest_input(h, x)
    return h.hexdigest()


class Checkpointer:
    """Where and how often a training loop checkpoints, and the state it resumes from.

    ``every``: write every this many steps (0: never); ``resume``: start from the file at ``path``
    (it must exist). Only the main process of a torchrun job writes (``is_main``)."""

    def __init__(self, path: str | Path, every: int = 0, resume: bool = False, is_main: bool = True):
        if every < 0:
            raise UsageError("--checkpoint-every must be >= 0")
        self.path = Path(path)
        self.every = int(every)
        self.resume = bool(resume)
        self.is_main = is_main
        if self.resume and not self.path.is_file():
            raise UsageError(f"--resume: {self.path} does not exist (nothing to resume)")

    def load(self, fp: str) -> dict | None:
        """The saved state when resuming (its fingerprint must equal ``fp``), else None."""
        if not self.resume:
            return None
        state = read_torch(self.path, "icmlkit training checkpoint", FORMAT)
        if state.get("fingerprint") != fp:
            raise UsageError(f"--resume: {self.path} was written by a run with other settings, seed or inputs; "
                             "rerun without --resume (or with the original settings)")
        return state

    def due(self, step: int, total: int) -> bool:
        """True when a checkpoint is to be written after ``step`` steps of ``total``."""
        return bool(self.every) and step % self.every == 0 and step < total

    def save(self, step: int, fp: str, *, model=None, optimizer=None, scheduler=None, rng: dict | None = None,
             extra: dict | None = None) -> None:
        """Write the state after ``step`` steps (atomically; on the main process only)."""
        if not self.is_main:
            return
        write_torch(self.path, {
            "format": FORMAT, "step": int(step), "fingerprint": fp,
            "model": None if model is None else model.state_dict(),
            "optimizer": None if optimizer is None else optimizer.state_dict(),
            "scheduler": None if scheduler is None else scheduler.state_dict(),
            "rng": {name: g.get_state() for name, g in (rng or {}).items()},
            "extra": dict(extra or {}),
        })

    def done(self) -> None:
        """The run finished and its outputs are written: the checkpoint is no longer needed."""
        if self.is_main:
            self.path.unlink(missing_ok=True)


def restore(state: dict, *, model=None, optimizer=None, scheduler=None, rng: dict | None = None,
            strict: bool = True) -> tuple[int, dict]:
    """Load ``state`` (from :meth:`Checkpointer.load`) into the objects; returns ``(step, extra)``."""
    if model is not None:
        model.load_state_dict(state["model"], strict=strict)
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    for name, g in (rng or {}).items():
        if name not in state["rng"]:
            raise UsageError(f"--resume: the checkpoint has no random stream {name!r}")
        g.set_state(state["rng"][name])
    return int(state["step"]), dict(state.get("extra") or {})
