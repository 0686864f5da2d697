"""Comparing the outputs of redundant copies: bit for bit, or within a tolerance.

Bit-exact comparison looks at the bytes, so a NaN equals the same NaN and a flipped bit anywhere
(sign, exponent, mantissa, padding rows past a valid count) is a mismatch. Tolerance comparison
applies to floating-point tensors only; integer and boolean tensors are always compared exactly.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .spec import RedundancySpec


def _bytes(x: Any) -> Any:
    """A flat uint8 view of a tensor or array (planned arena views are contiguous)."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    import torch

    return x.contiguous().reshape(-1).view(torch.uint8)


def tensors_equal(a: Any, b: Any, spec: RedundancySpec) -> bool:
    """Whether two copies of one output agree under ``spec``."""
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return False
    if isinstance(a, np.ndarray):
        if spec.compare == "exact" or not np.issubdtype(a.dtype, np.floating):
            return bool(np.array_equal(_bytes(a), _bytes(b)))
        return bool(np.allclose(a, b, rtol=spec.rtol, atol=spec.atol, equal_nan=True))
    import torch

    if spec.compare == "exact" or not a.is_floating_point():
        return bool(torch.equal(_bytes(a), _bytes(b)))
    return bool(torch.allclose(a, b, rtol=spec.rtol, atol=spec.atol, equal_nan=True))


def outputs_equal(a: Mapping[str, Any], b: Mapping[str, Any], spec: RedundancySpec) -> bool:
    """Whether every output of two copies agrees (the same names, each equal under ``spec``)."""
    return a.keys() == b.keys() and all(tensors_equal(a[k], b[k], spec) for k in a)


def vote(valid: list[int], agree: Any) -> int | None:
    """The first copy that agrees with another valid copy (a majority of two), or None.

    ``valid`` lists the copies that ran to completion, in order; ``agree(i, j)`` compares two.
    """
    for n, i in enumerate(valid):
        for j in valid[n + 1:]:
            if agree(i, j):
                return i
    return None
