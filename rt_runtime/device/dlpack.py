"""cupy interop through DLPack: zero-copy exchange of device tensors, ordered on the task's stream.

DLPack's ``__dlpack__(stream=...)`` lets the consumer name the stream it will read on; the producer
then makes that stream wait for the work that wrote the tensor. So a hand-over is stream-correct only
when the consumer passes *its task's* stream, not the library's current default: ``stream`` here is
the task stream (a torch ``Stream``/``ExternalStream`` or a cupy stream; anything with ``cuda_stream``
or ``ptr``), and the import runs with that stream current. On the CPU (``stream`` None) there is no
stream to order and the exchange is a plain zero-copy view.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator


def _ptr(stream: Any) -> int:
    """The raw ``cudaStream_t`` of a torch or cupy stream."""
    for attr in ("cuda_stream", "ptr"):
        p = getattr(stream, attr, None)
        if p is not None:
            return int(p)
    raise TypeError(f"not a CUDA stream: {stream!r}")


@contextlib.contextmanager
def _cupy_on(stream: Any) -> Iterator[None]:
    if stream is None:
        yield
        return
    import cupy

    with cupy.cuda.ExternalStream(_ptr(stream)):
        yield


def to_cupy(tensor: Any, stream: Any = None) -> Any:
    """A cupy array sharing ``tensor``'s memory (torch CUDA tensor or any DLPack producer), its producer's
    work ordered before ``stream`` (the task stream that will read it)."""
    import cupy  # optional: only on machines with a GPU and cupy installed

    with _cupy_on(stream):
        return cupy.from_dlpack(tensor)


def to_torch(array: Any, stream: Any = None) -> Any:
    """A torch tensor sharing ``array``'s memory (cupy array, numpy array or any DLPack producer), its
    producer's work ordered before ``stream`` (the task stream that will read it)."""
    import torch

    if stream is None:
        return torch.from_dlpack(array)
    ts = stream if isinstance(stream, torch.cuda.Stream) else torch.cuda.ExternalStream(_ptr(stream))
    with torch.cuda.stream(ts):   # torch.from_dlpack hands its current stream to array.__dlpack__
        return torch.from_dlpack(array)


def cupy_available() -> bool:
    """True when cupy imports and sees a device (it imports fine without one)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - any failure means: not usable here
        return False
