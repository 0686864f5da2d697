"""cupy interop through DLPack: zero-copy exchange of device tensors, when cupy is present."""
from __future__ import annotations

from typing import Any


def to_cupy(tensor: Any) -> Any:
    """A cupy array sharing ``tensor``'s memory (torch CUDA tensor or any DLPack producer)."""
    import cupy  # optional: only on machines with a GPU and cupy installed

    return cupy.from_dlpack(tensor)


def to_torch(array: Any) -> Any:
    """A torch tensor sharing ``array``'s memory (cupy array or any DLPack producer)."""
    import torch

    return torch.from_dlpack(array)


def cupy_available() -> bool:
    """True when cupy imports and sees a device (it imports fine without one)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - any failure means: not usable here
        return False
