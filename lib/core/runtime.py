"""Devices, seeds and torch.distributed, in one place.

- :func:`resolve_device`: ``auto|cpu|cuda[:N]``; CUDA asked for but absent is exit 4.
- :func:`stream_seed` / :func:`generator` / :func:`seeded`: independent *named* random streams
  derived from one user seed (``generator(seed, "batches")``, ``generator(seed, "noise")``), so no
  library code seeds the global RNG or adds magic offsets to a seed.
- :class:`Dist` / :func:`distributed`: rank-awareness under ``torchrun`` (``WORLD_SIZE`` > 1):
  torch.distributed with gloo on CPU and NCCL on CUDA, the rank's slice of a global batch, DDP.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from dataclasses import dataclass

from icmlkit.lib.core.errors import EnvironmentProblem, UsageError


def resolve_device(spec: str = "auto"):
    """``auto`` -> CUDA when available else CPU; ``cpu``; ``cuda`` / ``cuda:N`` (exit 4 if absent).

    Under torchrun with CUDA, ``auto`` and ``cuda`` mean this process's GPU (``LOCAL_RANK``)."""
    import torch

    spec = (spec or "auto").strip().lower()
    if spec == "cpu" or (spec == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if spec in ("auto", "cuda") or spec.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise EnvironmentProblem(
                f"--device {spec} asked for CUDA but torch sees no GPU; install a CUDA build of torch "
                "or use --device cpu"
            )
        if spec in ("auto", "cuda") and "LOCAL_RANK" in os.environ:
            spec = f"cuda:{int(os.environ['LOCAL_RANK'])}"
        dev = torch.device(spec)
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise EnvironmentProblem(f"--device {spec}: only {torch.cuda.device_count()} GPU(s) visible")
        return dev
    raise UsageError(f"--device must be auto, cpu, cuda or cuda:N, not {spec!r}")


# --------------------------------------------------------------------------- named random streams


def stream_seed(seed: int, stream: str = "") -> int:
    """The 63-bit seed of the named ``stream`` of ``seed`` (``stream=""`` is ``seed`` itself).

    Streams are independent by construction (a hash of ``seed`` and the name), so two parts of a
    method never share random numbers by accident and adding a stream changes no other."""
    if not stream:
        return int(seed)
    digest = hashlib.sha256(f"{int(seed)}/{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def generator(seed: int, stream: str = "", *, device=None):
    """A ``torch.Generator`` on ``device``'s type (CPU by default) seeded with ``stream_seed``."""
    import torch

    dev = torch.device(device) if device is not None else torch.device("cpu")
    g = torch.Generator(device=dev)
    g.manual_seed(stream_seed(seed, stream))
    return g


def numpy_rng(seed: int, stream: str = ""):
    """A ``numpy.random.Generator`` for the named stream of ``seed``."""
    import numpy as np

    return np.random.default_rng(stream_seed(seed, stream))


@contextlib.contextmanager
def seeded(seed: int, stream: str = ""):
    """Run a block (e.g. ``nn.Module`` construction, which draws from torch's global RNG) with the
    global CPU RNG seeded from the named stream, restoring the caller's RNG state afterwards."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(stream_seed(seed, stream))
        yield


# --------------------------------------------------------------------------- torch.distributed


@dataclass(frozen=True)
class Dist:
    """This process's place in a torchrun job (``rank 0 of 1`` for a plain process)."""

    rank: int = 0
    world: int = 1
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1

    def split(self, global_batch: int) -> slice:
        """This rank's contiguous part of a global batch of ``global_batch`` items (every rank gets
        the same count, so averaging the ranks' mean gradients gives the global mean gradient)."""
        if global_batch % self.world:
            raise UsageError(f"the batch of {global_batch} does not split evenly over {self.world} processes; "
                             f"use a batch that is a multiple of the process count")
        per = global_batch // self.world
        return slice(self.rank * per, (self.rank + 1) * per)

    def wrap(self, module, device=None, **ddp_kwargs):
        """``module`` wrapped in DistributedDataParallel when the job has several processes
        (``ddp_kwargs`` go to DDP, e.g. ``find_unused_parameters=True``)."""
        if not self.active:
            return module
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device is not None and getattr(device, "type", "cpu") == "cuda" else None
        return DistributedDataParallel(module, device_ids=ids, **ddp_kwargs)

    def all_mean(self, value: float) -> float:
        """The mean of a scalar over the ranks (``value`` itself for one process)."""
        if not self.active:
            return float(value)
        import torch
        import torch.distributed as dist

        t = torch.tensor([float(value)], dtype=torch.float64)
        if self.backend == "nccl":
            t = t.cuda()
        dist.all_reduce(t)
        return float(t.item()) / self.world

    def average_gradients(self, params) -> None:
        """Average the gradients of ``params`` over the ranks in place with one flat all-reduce (a no-op
        for one process). Every rank must hold gradients for the same parameters: the same graph on
        equally sized parts of the batch."""
        if not self.active:
            return
        import torch
        import torch.distributed as dist

        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def all_gather(self, t) -> list:
        """Every rank's copy of the tensor ``t`` (same shape on each), in rank order; ``[t]`` for
        one process. The copies carry no gradient."""
        if not self.active:
            return [t]
        import torch
        import torch.distributed as dist

        parts = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(parts, t.detach().contiguous())
        return parts

    def barrier(self) -> None:
        if self.active:
            import torch.distributed as dist

            dist.barrier()


_DIST: dict = {}


def distributed(device=None) -> Dist:
    """Initialise torch.distributed once when ``WORLD_SIZE`` > 1 (NCCL when ``device`` is CUDA, else
    gloo) and return this process's :class:`Dist`; ``Dist()`` for a plain process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    if "dist" in _DIST:
        return _DIST["dist"]
    import torch
    import torch.distributed as dist

    cuda = device is not None and getattr(device, "type", "cpu") == "cuda"
    backend = "nccl" if cuda else "gloo"
    if not dist.is_initialized():
        if cuda:
            torch.cuda.set_device(device)
        dist.init_process_group(backend)
    _DIST["dist"] = Dist(dist.get_rank(), dist.get_world_size(), backend)
    return _DIST["dist"]


def close_distributed() -> None:
    """Tear down the process group a command initialised (torchrun), so no gloo / NCCL thread is
    left running at interpreter exit (where it can abort the process after the work is done)."""
    _DIST.pop("dist", None)
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        if dist.get_backend() == "gloo":
            # every rank reaches the end before any tears down: a rank that exits while rank 0 still
            # writes its outputs can abort in gloo's threads ("terminate called without an active
            # exception"); bounded, so a rank that failed alone still exits
            import datetime

            try:
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=60))
            except Exception:  # noqa: BLE001 - a peer failed or left: tear down regardless
                pass
        dist.destroy_process_group()


def env_rank() -> int:
    """The torchrun rank from the environment (0 outside torchrun), without initialising anything."""
    return int(os.environ.get("RANK", "0"))


# --------------------------------------------------------------------------- CPU threads

THREADS_ENV = "ICMLKIT_THREADS"
DEFAULT_THREADS = 1
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def cpu_count() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's total)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def resolve_threads(value: int | None) -> int:
    """The CPU thread count of a run: ``value`` (``--threads`` / ``ICMLKIT_THREADS``), ``0`` for one
    per core, None for :data:`DEFAULT_THREADS` (1: the same bytes on every machine, and no collapse
    on a busy one; see docs/platform.md)."""
    if value is None:
        return DEFAULT_THREADS
    value = int(value)
    if value < 0:
        raise UsageError(f"--threads must be 0 (one per core) or a positive count, not {value}")
    return cpu_count() if value == 0 else value


@contextlib.contextmanager
def limit_threads(n: int):
    """Run a block with ``n`` CPU threads for torch's intra-op parallelism and the BLAS / OpenMP
    libraries numpy and torch use; restores the previous settings afterwards (in-process runs).

    Applied before any torch work: when torch is not imported yet, the ``OMP_NUM_THREADS``,
    ``MKL_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` variables fix the count its runtime reads at
    import; when it is, ``torch.set_num_threads``. BLAS libraries already loaded (numpy's) are limited
    through threadpoolctl when it is installed."""
    saved_env = {k: os.environ.get(k) for k in _THREAD_VARS}
    for k in _THREAD_VARS:
        os.environ[k] = str(n)
    torch = sys.modules.get("torch")
    saved_torch = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(n)
    limiter = None
    if "numpy" in sys.modules:
        try:
            from threadpoolctl import threadpool_limits

            limiter = threadpool_limits(limits=n, user_api="blas")
        except Exception:  # noqa: BLE001 - threadpoolctl absent or a library it cannot drive
            limiter = None
    try:
        yield n
    finally:
        if limiter is not None:
            limiter.restore_original_limits()
        torch = sys.modules.get("torch")
        if torch is not None:
            # imported during the run: back to what torch picks by itself (OMP_NUM_THREADS, else one per core)
            omp = saved_env["OMP_NUM_THREADS"] or ""
            fallback = int(omp) if omp.isdigit() and int(omp) > 0 else cpu_count()
            torch.set_num_threads(saved_torch if saved_torch is not None else fallback)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def long_lived_inputs():
    """Run a batch loop with the objects alive at its start (the loaded inputs) kept out of the garbage
    collector's full passes (``gc.freeze``; undone afterwards): a loop over thousands of parsed records
    that allocates as it goes otherwise re-scans all of them on every full collection. Nothing changes
    but time; a caller that froze the heap itself (before a fork) is left as it was."""
    import gc

    mine = gc.get_freeze_count() == 0
    if mine:
        gc.freeze()
    try:
        yield
    finally:
        if mine:
            gc.unfreeze()
