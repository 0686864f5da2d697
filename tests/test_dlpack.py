"""DLPack interop (device/dlpack.py): zero-copy views, handed over on the consumer's task stream."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rt_runtime.device.dlpack import _ptr, cupy_available, to_cupy, to_torch


def test_a_host_array_becomes_a_tensor_over_the_same_memory() -> None:
    a = np.arange(6, dtype=np.float32)
    t = to_torch(a)
    a[2] = 40.0   # a view, not a copy: the tensor sees the write
    assert t.dtype == torch.float32 and t.tolist() == [0.0, 1.0, 40.0, 3.0, 4.0, 5.0]


def test_a_stream_is_named_by_its_raw_handle() -> None:
    class CupyLike:
        ptr = 1234

    class TorchLike:
        cuda_stream = 5678

    assert (_ptr(CupyLike()), _ptr(TorchLike())) == (1234, 5678)
    with pytest.raises(TypeError, match="not a CUDA stream"):
        _ptr(object())


@pytest.mark.cuda
@pytest.mark.skipif(not (torch.cuda.is_available() and cupy_available()), reason="needs a GPU and cupy")
def test_a_hand_over_on_the_task_stream_sees_the_producers_writes() -> None:
    """The producer writes on its stream; the consumer imports on another: DLPack makes it wait."""
    import cupy

    producer, consumer = torch.cuda.Stream(), cupy.cuda.Stream(non_blocking=True)
    with torch.cuda.stream(producer):
        x = torch.zeros(1 << 22, device="cuda")
        for _ in range(20):   # long enough that an unordered read would see zeros
            x.add_(1.0)
    arr = to_cupy(x, stream=consumer)
    with consumer:
        total = float(arr.sum())
    assert total == 20.0 * (1 << 22) and arr.data.ptr == x.data_ptr()
    back = to_torch(arr, stream=torch.cuda.ExternalStream(consumer.ptr))
    assert back.data_ptr() == x.data_ptr()
