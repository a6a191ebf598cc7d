"""Devices, seeds and torch.distributed initialisation, in one place."""
from __future__ import annotations

import os

from icmlkit.lib.core.errors import EnvironmentProblem, UsageError


def resolve_device(spec: str = "auto"):
    """``auto`` -> CUDA when available else CPU; ``cpu``; ``cuda`` / ``cuda:N`` (exit 4 if absent)."""
    import torch

    spec = (spec or "auto").strip().lower()
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "cuda" or spec.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise EnvironmentProblem(
                f"--device {spec} asked for CUDA but torch sees no GPU; install a CUDA build of torch "
                "or use --device cpu"
            )
        dev = torch.device(spec)
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise EnvironmentProblem(f"--device {spec}: only {torch.cuda.device_count()} GPU(s) visible")
        return dev
    raise UsageError(f"--device must be auto, cpu, cuda or cuda:N, not {spec!r}")


def generator(seed: int, device=None):
    """A seeded ``torch.Generator`` on ``device``'s type (CPU by default)."""
    import torch

    dev = torch.device(device) if device is not None else torch.device("cpu")
    g = torch.Generator(device=dev)
    g.manual_seed(int(seed))
    return g


def init_distributed():  # pragma: no cover - exercised under torchrun only
    """Initialise torch.distributed when ``WORLD_SIZE`` > 1 (gloo on CPU, NCCL on GPU).

    Returns ``(rank, world_size)``; ``(0, 1)`` for a single process.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), dist.get_world_size()
