"""CUDA backend (torch.cuda): arenas in device memory, one owned priority stream per task, CUDA Graphs.

Imported lazily, so the package and its tests work on machines without CUDA. Streams are created
by cupy (the ``cuda`` extra) with ``cudaStreamCreateWithPriority`` semantics and wrapped for torch
as ``ExternalStream``: never taken from torch's round-robin pool (32 streams per level, handed out
in turn, so a 33rd task would share a stream and serialize behind another).

One priority convention in the runtime: **urgency in [0, 1], larger is more urgent** (the Runtime
derives it from the policy's rank). Only here is it turned into CUDA's numbers, where lower is more
urgent, spread over the device's range (``cudaDeviceGetStreamPriorityRange``, e.g. 0 .. -5).
"""
from __future__ import annotations

import math
from typing import Any, Callable

from ..core.tensor import TensorSpec


def cuda_level(urgency: float, least: int, greatest: int) -> int:
    """Map urgency in [0, 1] (1 most urgent) onto CUDA levels ``least`` .. ``greatest`` (lower is more urgent)."""
    u = min(1.0, max(0.0, float(urgency)))
    return least - round(u * (least - greatest))


def set_deterministic(torch: Any) -> None:
    """Same device, same inputs, same bits: deterministic kernels where torch has them, no TF32.

    Process-wide, as torch's switches are. Ops without a deterministic CUDA kernel warn (once per
    op) instead of failing, and are listed by ``bench/gpu_check.py``; CPU and GPU results are not
    bit-identical to each other (different kernels, fused multiply-adds).
    """
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


class CudaDevice:
    """torch tensors on one CUDA device."""

    kind = "cuda"

    def __init__(self, index: int = 0, deterministic: bool = True) -> None:
        import os

        # cuBLAS picks its workspace at its first use: deterministic reductions need this set before.
        if deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("cuda device: torch.cuda.is_available() is false on this machine; use 'cpu'")
        if index >= torch.cuda.device_count():
            raise RuntimeError(f"cuda device: index {index} asked for, {torch.cuda.device_count()} present")
        self.torch = torch
        self.index = index
        self.name = f"cuda:{index}"
        self._device = torch.device(self.name)
        try:
            least, greatest = torch.cuda.Stream.priority_range()
        except (AttributeError, RuntimeError):
            least, greatest = 0, -1
        # CUDA: lower number = more urgent; `greatest` is the most urgent level (e.g. -5).
        self.priority_levels = (least, greatest)
        if deterministic:
            set_deterministic(torch)
        self._owned: list[Any] = []
        self._copy: Any = None
        self._graph_pools: dict[str, Any] = {}   # task -> its captured graphs' memory pool

    def alloc_arena(self, nbytes: int, alignment: int) -> Any:
        """One device allocation; the caching allocator returns 512-byte aligned blocks."""
        torch = self.torch
        raw = torch.zeros(nbytes + alignment, dtype=torch.uint8, device=self._device)
        start = (-raw.data_ptr()) % alignment
        return raw[start:start + nbytes]

    def view(self, storage: Any, offset: int, spec: TensorSpec, shape: tuple[int, ...] | None = None) -> Any:
        """A view at ``offset`` of ``shape`` (default: the spec's largest)."""
        shape = spec.max_shape if shape is None else tuple(shape)
        nbytes = math.prod(shape) * spec.itemsize
        flat = storage[offset:offset + nbytes].view(getattr(self.torch, spec.dtype))
        if spec.layout == "channels_last":
            n, c, h, w = shape
            return flat.view(n, h, w, c).permute(0, 3, 1, 2)
        return flat.view(shape)

    def cuda_priority(self, urgency: float) -> int:
        """CUDA's level for an urgency in [0, 1] (1 most urgent), spread over the device's range."""
        return cuda_level(urgency, *self.priority_levels)

    def stream(self, urgency: float = 0.0) -> Any:
        """A new stream owned by the caller (cupy-created, never from torch's pool), at the mapped level."""
        try:
            import cupy
        except ImportError as e:
            raise RuntimeError("cuda device: owned priority streams need cupy, the 'cuda' extra "
                               "(pip install 'rt_runtime[cuda]'); found no cupy") from e
        level = self.cuda_priority(urgency)
        with cupy.cuda.Device(self.index):
            owned = cupy.cuda.Stream(non_blocking=True, priority=level)
        self._owned.append(owned)   # torch's ExternalStream does not keep the stream alive
        s = self.torch.cuda.ExternalStream(owned.ptr, device=self._device)
        s.level = level   # type: ignore[attr-defined]
        return s

    def on_stream(self, stream: Any) -> Any:
        """Context in which kernels launch on ``stream``."""
        return self.torch.cuda.stream(stream)

    def launch(self, stream: Any, fn: Any, *args: Any) -> None:
        """Call ``fn(*args)`` with ``stream`` current: its kernels are queued there, not run."""
        with self.torch.cuda.stream(stream):
            fn(*args)

    def synchronize(self, stream: Any = None) -> None:
        """Wait for a stream, or the whole device."""
        if stream is None:
            self.torch.cuda.synchronize(self._device)
        else:
            stream.synchronize()

    def event(self) -> Any:
        """An event for cross-stream dependencies (record on the producer, wait on the consumer)."""
        return self.torch.cuda.Event()

    def copy_(self, dst: Any, src: Any, stream: Any = None) -> None:
        """Asynchronous in-place copy on ``stream`` (or the current one)."""
        if stream is None:
            dst.copy_(src, non_blocking=True)
        else:
            with self.torch.cuda.stream(stream):
                dst.copy_(src, non_blocking=True)

    # CUDA-only path of the hand-offs (sched.handoff), symmetrical with the cpu-async twin that CI runs;
    # untested here: no GPU on CI.
    def copy_stream(self) -> Any:
        """The device's copy stream (ingress H2D from pinned staging, egress D2H), most urgent, made once."""
        if self._copy is None:
            self._copy = self.stream(1.0)
        return self._copy

    def host_buffer(self, numel: int, dtype: Any) -> Any:
        """A pinned host tensor: an H2D/D2H copy from it is truly asynchronous (pageable memory is not)."""
        return self.torch.empty(numel, dtype=dtype, pin_memory=True)

    def graph_pool(self, task: str) -> Any:
        """The memory pool of ``task``'s captured graphs: one per task, shared by its executors (primary,
        fallback, redundant copies), so graphs of one task reuse its memory and no other task's."""
        pool = self._graph_pools.get(task)
        if pool is None:
            pool = self._graph_pools[task] = self.torch.cuda.graph_pool_handle()
        return pool

    def reserved_bytes(self) -> int:
        """Bytes the caching allocator holds on this device (a capture's pool is the difference it makes)."""
        return int(self.torch.cuda.memory_reserved(self._device))

    def capture(self, body: Callable[[], None], stream: Any, pool: Any = None) -> Any:
        """Record ``body``'s kernels into a CUDA graph on ``stream``, its memory from ``pool``; replay with
        ``graph.replay()``."""
        torch = self.torch
        graph = torch.cuda.CUDAGraph()
        # thread_local: other worker threads may allocate or sync meanwhile without breaking this capture
        with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
            body()
        return graph

    def __repr__(self) -> str:
        return f"CudaDevice({self.name})"
