"""The Device protocol: what the executor needs from a backend.

A device allocates an arena once (one flat byte buffer), hands out typed views at planned offsets,
owns one stream per task (created once and held), and may record a whole graph for replay. The
CPU backend is the twin of the CUDA one: same calls, streams and events are no-ops, so CI runs
every code path except the kernels' device.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from ..core.tensor import TensorSpec


@runtime_checkable
class Device(Protocol):
    """A backend the graph executor runs on."""

    name: str   # "cpu", "cuda:0"
    kind: str   # "cpu" or "cuda"

    def alloc_arena(self, nbytes: int, alignment: int) -> Any:
        """One allocation of ``nbytes`` whose start is aligned to ``alignment`` bytes."""

    def view(self, storage: Any, offset: int, spec: TensorSpec, shape: tuple[int, ...] | None = None) -> Any:
        """A tensor over ``storage`` at byte ``offset`` (no copy), of ``shape`` or the spec's largest."""

    def stream(self, urgency: float = 0.0) -> Any:
        """A stream owned by one task; ``urgency`` in [0, 1], larger is more urgent."""

    def on_stream(self, stream: Any) -> AbstractContextManager[Any]:
        """Context in which launched kernels go to ``stream``."""

    def synchronize(self, stream: Any = None) -> None:
        """Wait for the stream's (or the device's) work; kept off hot paths."""

    def event(self) -> Any:
        """An event for cross-stream dependencies."""

    def copy_(self, dst: Any, src: Any, stream: Any = None) -> None:
        """Copy ``src`` into ``dst`` in place (same shape): as work of ``stream`` when one is given."""

    def copy_stream(self) -> Any:
        """The device's one stream for host<->device copies (ingress staging, egress), made on first use."""

    def host_buffer(self, numel: int, dtype: Any) -> Any:
        """A flat host tensor the copy stream reads or writes: pinned on CUDA, ordinary on the CPU."""

    def launch(self, stream: Any, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` as work of ``stream``: at once on ``cpu``, enqueued on ``cpu-async``."""


def asynchronous(device: Any) -> bool:
    """Whether launched work completes later (``cuda`` and its twin ``cpu-async``): then hand-offs need events."""
    return getattr(device, "kind", "cpu") in ("cuda", "cpu-async")


def tensor_device(name: str) -> str:
    """Where a device's tensors live, as torch names it: the twin ``cpu-async`` keeps them on the host."""
    return "cpu" if name.startswith("cpu") else name


def device_for(name: str, **kw: Any) -> Device:
    """Open a device by name: ``cpu``, ``cpu:numpy``, ``cpu-async``, ``cuda`` or ``cuda:N``."""
    if name == "cpu-async":
        from .cpu_async import CpuAsyncDevice

        return CpuAsyncDevice()
    kind, _, rest = name.partition(":")
    if kind == "cpu":
        from .cpu import CpuDevice

        return CpuDevice(array=rest or kw.pop("array", "torch"))
    if kind == "cuda":
        from .cuda import CudaDevice  # imported lazily: the package works without CUDA

        return CudaDevice(index=int(rest or 0), **kw)
    raise ValueError(f"device: expected 'cpu', 'cpu:numpy', 'cpu-async' or 'cuda[:N]', found {name!r}")
