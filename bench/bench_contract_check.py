"""Cost of checking a real tensor against its TensorSpec (runs at every binding).

Prints the median ns per check for numpy and torch tensors, static and symbolic shapes, beside
the floor: reading the same attributes (shape, dtype) with no comparison at all.
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from rt_runtime import TensorSpec

REPEATS, N = 7, 20_000


def aligned_zeros(shape: tuple[int, ...], alignment: int) -> np.ndarray:
    """A float32 array whose data starts on an ``alignment``-byte boundary."""
    nbytes = int(np.prod(shape)) * 4
    raw = np.zeros(nbytes + alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes].view(np.float32).reshape(shape)


def per_call_ns(fn) -> float:
    """Median over REPEATS runs of the mean ns per call over N calls."""
    runs = []
    for _ in range(REPEATS):
        t0 = time.perf_counter_ns()
        for _ in range(N):
            fn()
        runs.append((time.perf_counter_ns() - t0) / N)
    return statistics.median(runs)


def main() -> None:
    cases = [
        ("numpy static (64,64) f32", TensorSpec("x", (64, 64)), np.zeros((64, 64), np.float32)),
        ("numpy symbolic (N<=131072,4)", TensorSpec("p", ("N<=131072", 4)), np.zeros((120_000, 4), np.float32)),
        ("numpy + 64-byte alignment", TensorSpec("x", (64, 64), alignment=64), aligned_zeros((64, 64), 64)),
        ("torch static (1,3,384,640)", TensorSpec("img", (1, 3, 384, 640), layout="NCHW"), torch.zeros(1, 3, 384, 640)),
        ("torch symbolic (N<=131072,4)", TensorSpec("p", ("N<=131072", 4)), torch.zeros(120_000, 4)),
        ("torch channels_last", TensorSpec("img", (1, 3, 64, 64), layout="channels_last"),
         torch.zeros(1, 3, 64, 64).to(memory_format=torch.channels_last)),
    ]
    print(f"{'case':<32} {'check ns':>10} {'floor ns':>10} {'ratio':>7}")
    for name, spec, x in cases:
        spec.check(x)  # resolve and cache the checker
        check = per_call_ns(lambda: spec.check(x))
        floor = per_call_ns(lambda: (x.shape, x.dtype))
        print(f"{name:<32} {check:>10.0f} {floor:>10.0f} {check / floor:>7.1f}")
    print(f"(median of {REPEATS} runs of {N} checks; floor = reading shape and dtype only)")


if __name__ == "__main__":
    main()
