"""CPU backend: arenas are torch (default) or numpy byte buffers; streams and events are no-ops."""
from __future__ import annotations

from contextlib import nullcontext
import math
from typing import Any

import numpy as np

from ..core.tensor import TensorSpec


class _NoStream:
    """The CPU's stand-in for a stream: work is done when the call returns."""

    def __init__(self, urgency: float) -> None:
        self.urgency = urgency

    def __repr__(self) -> str:
        return f"CpuStream(urgency={self.urgency})"


class _NoEvent:
    def record(self, stream: Any = None) -> None:
        """Nothing to record: CPU work is complete when the op returns."""

    def wait(self, stream: Any = None) -> None:
        """Nothing to wait for."""

    def synchronize(self) -> None:
        """Nothing to wait for."""


_NULL = nullcontext()


class CpuDevice:
    """Torch CPU or numpy tensors in host memory."""

    kind = "cpu"

    def __init__(self, array: str = "torch") -> None:
        if array not in ("torch", "numpy"):
            raise ValueError(f"cpu device: array library expected 'torch' or 'numpy', found {array!r}")
        self.array = array
        self.name = "cpu" if array == "torch" else "cpu:numpy"

    def alloc_arena(self, nbytes: int, alignment: int) -> Any:
        """One zeroed host buffer whose first byte is ``alignment``-aligned."""
        # Over-allocate and slice so the start is aligned whatever the allocator gives.
        raw = np.zeros(nbytes + alignment, dtype=np.uint8)
        start = (-raw.ctypes.data) % alignment
        buf = raw[start:start + nbytes]
        if self.array == "torch":
            import torch

            return torch.from_numpy(buf)
        return buf

    def view(self, storage: Any, offset: int, spec: TensorSpec, shape: tuple[int, ...] | None = None) -> Any:
        """A view at ``offset`` of ``shape`` (default: the spec's largest); channels_last: NHWC memory seen as NCHW."""
        shape = spec.max_shape if shape is None else tuple(shape)
        nbytes = math.prod(shape) * spec.itemsize
        if self.array == "torch":
            import torch

            flat = storage[offset:offset + nbytes].view(getattr(torch, spec.dtype))
            if spec.layout == "channels_last":
                n, c, h, w = shape
                return flat.view(n, h, w, c).permute(0, 3, 1, 2)
            return flat.view(shape)
        if spec.layout == "channels_last":
            raise ValueError(f"tensor '{spec.name}': layout channels_last needs torch, not numpy")
        return storage[offset:offset + nbytes].view(spec.dtype).reshape(shape)

    def stream(self, urgency: float = 0.0) -> _NoStream:
        """A placeholder stream: the CPU runs each op to completion on the calling thread."""
        return _NoStream(urgency)

    def on_stream(self, stream: Any) -> nullcontext:
        """No stream to switch to on the CPU."""
        return _NULL

    def synchronize(self, stream: Any = None) -> None:
        """CPU work is already complete."""

    def launch(self, stream: Any, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` now: on the CPU an op is done when its call returns."""
        fn(*args)

    def event(self) -> _NoEvent:
        """A no-op event."""
        return _NoEvent()

    def copy_stream(self) -> _NoStream:
        """A placeholder: copies are done when the call returns."""
        return _NoStream(1.0)

    def host_buffer(self, numel: int, dtype: Any) -> Any:
        """An ordinary host tensor (nothing to pin without a GPU)."""
        import torch

        return torch.empty(numel, dtype=dtype)

    def copy_(self, dst: Any, src: Any, stream: Any = None) -> None:
        """In-place copy, now (``stream`` is accepted for the protocol's sake)."""
        if isinstance(dst, np.ndarray):
            np.copyto(dst, src)
        else:
            dst.copy_(src)

    def __repr__(self) -> str:
        return f"CpuDevice({self.array})"
