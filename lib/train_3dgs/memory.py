"""A deterministic tensor-memory meter for a training loop, a stand-in for the GPU allocator peak on CPU.

``TensorMemoryMeter`` counts, while it is active (a context manager):

- the live bytes of the tensors autograd **saves for backward** (the activations of the training
  graph and, with ``create_graph=True``, of the double-backward graph of a Hessian-vector product),
  through :func:`torch.autograd.graph.saved_tensors_hooks`. Each saved tensor is deduplicated by its
  storage (two views of one buffer count once, at the storage's size); the count is decremented when
  autograd frees the last saved reference to that storage (the pack hook returns a small holder
  object whose ``__del__`` subtracts). Storages of the ``static`` tensors (the parameters) are not
  counted here, since they are counted as static memory;
- the **static** bytes: parameters, their gradients (counted at the parameters' size whether or not
  they exist at that moment) and the optimizer state (``add_static``), measured by the caller.

The peak is ``static + max(live saved bytes)``; :meth:`section` labels phases (e.g. ``train``,
``curvature``) and records each one's own peak of saved bytes. The number is exactly reproducible
(same graph -> same bytes) and does not depend on the allocator, other processes or the machine.
Not counted: transient tensors that are never saved for backward (e.g. the gradient buffers that
exist only during a backward pass, or outputs freed right away), so it is a lower bound of an
allocator's peak, and the same kind of lower bound for every optimizer.
"""
from __future__ import annotations

import contextlib
from typing import Iterable

import torch


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the tensors' storages, each storage counted once."""
    seen, total = set(), 0
    for t in tensors:
        if not torch.is_tensor(t):
            continue
        st = t.untyped_storage()
        key = (t.device, st.data_ptr())
        if key in seen:
            continue
        seen.add(key)
        total += st.nbytes()
    return total


class _Storage:
    """One counted storage: its size and how many saved references to it are alive."""

    __slots__ = ("key", "nbytes", "refs")

    def __init__(self, key, nbytes: int):
        self.key, self.nbytes, self.refs = key, nbytes, 0


class _Saved:
    """What the pack hook returns: the saved tensor (detached, so no reference cycle through its
    grad_fn) and, when counted, its storage record; deleting it releases one reference."""

    __slots__ = ("tensor", "record", "meter")

    def __init__(self, tensor, record, meter):
        self.tensor, self.record, self.meter = tensor, record, meter
        if record is not None:
            record.refs += 1

    def __del__(self):
        rec = self.record
        if rec is not None:
            rec.refs -= 1
            if rec.refs == 0:
                self.meter._release(rec)


class TensorMemoryMeter:
    """Deterministic peak of (parameters + gradients + optimizer state + tensors saved for backward).

    Use::

        meter = TensorMemoryMeter(static=params.values())      # parameters (+ their gradients)
        with meter:
            for step in ...:
                with meter.section("train"):
                    loss = ...; loss.backward()
                with meter.section("curvature"):
                    hvp ...
        meter.add_static(optimizer_state_tensors)                # once the state exists
        meter.peak_bytes, meter.section_peaks
    """

    def __init__(self, static: Iterable[torch.Tensor] = (), grads: bool = True):
        static = [t for t in static if torch.is_tensor(t)]
        self._exclude = {(t.device, t.untyped_storage().data_ptr()) for t in static}
        self.static_bytes = tensor_bytes(static) * (2 if grads else 1)
        self.live_bytes = 0
        self.peak_saved_bytes = 0
        self.section_peaks: dict[str, int] = {}
        self._section: str | None = None
        self._live: dict = {}
        self._hooks = None

    # ---- static memory
    def exclude(self, tensors: Iterable[torch.Tensor]) -> None:
        """Treat these tensors' storages as static too (e.g. parameters replaced by pruning), so
        autograd saving them is not counted as live bytes."""
        self._exclude |= {(t.device, t.untyped_storage().data_ptr()) for t in tensors if torch.is_tensor(t)}

    def add_static(self, tensors: Iterable[torch.Tensor]) -> int:
        """Count these tensors (e.g. the optimizer state) as static memory; returns their bytes."""
        n = tensor_bytes(tensors)
        self.static_bytes += n
        return n

    @property
    def peak_bytes(self) -> int:
        return self.static_bytes + self.peak_saved_bytes

    # ---- hooks
    def _pack(self, t: torch.Tensor):
        st = t.untyped_storage()
        key = (t.device, st.data_ptr())
        if key in self._exclude or st.nbytes() == 0:
            return _Saved(t.detach(), None, self)
        rec = self._live.get(key)
        if rec is None:
            rec = _Storage(key, st.nbytes())
            self._live[key] = rec
            self.live_bytes += rec.nbytes
            if self.live_bytes > self.peak_saved_bytes:
                self.peak_saved_bytes = self.live_bytes
            if self._section is not None and self.live_bytes > self.section_peaks.get(self._section, 0):
                self.section_peaks[self._section] = self.live_bytes
        return _Saved(t.detach(), rec, self)

    @staticmethod
    def _unpack(saved: _Saved) -> torch.Tensor:
        return saved.tensor

    def _release(self, rec: _Storage) -> None:
        if self._live.get(rec.key) is rec:
            del self._live[rec.key]
            self.live_bytes -= rec.nbytes

    def __enter__(self) -> "TensorMemoryMeter":
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)
        self._hooks = None

    @contextlib.contextmanager
    def section(self, name: str):
        """Record the peak of saved bytes reached while this section is active under ``name``."""
        prev, self._section = self._section, name
        self.section_peaks.setdefault(name, self.live_bytes)
        try:
            yield self
        finally:
            self._section = prev

    def summary_mb(self) -> dict:
        """The peak and its parts in MiB (rounded to 0.01)."""
        mb = 2 ** 20
        out = {"peak_tensor_memory_mb": round(self.peak_bytes / mb, 2),
               "static_memory_mb": round(self.static_bytes / mb, 2),
               "peak_saved_mb": round(self.peak_saved_bytes / mb, 2)}
        for k, v in self.section_peaks.items():
            out[f"peak_saved_{k}_mb"] = round(v / mb, 2)
        return out
