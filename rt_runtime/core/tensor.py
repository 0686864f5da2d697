"""TensorSpec: the contract a tensor must meet where a graph binds it.

A spec names the tensor and fixes its shape (ints, or symbolic dims with an upper bound such as
``N<=131072``), dtype, device, layout and alignment. ``TensorSpec.check`` verifies a real numpy,
torch or cupy tensor against it; it is cheap enough to run at every binding (see
``bench/bench_contract_check.py``). Bounded symbolic dims are what make static memory planning
possible: the planner reserves the upper bound, the op reports how much of it is valid.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

LAYOUTS = ("contiguous", "NCHW", "NHWC", "channels_last", "strided")
# "meta": torch's tensors without data. A graph built for it runs its ops on shapes alone, so an op
# with a data-dependent size or a host read raises: how CI checks that capturable ops are sync-free.
DEVICES = ("cpu", "cuda", "meta")


class ContractError(ValueError):
    """A tensor, spec or graph that breaks its declared contract.

    The message names graph, op, tensor and field, with what was expected and what was found.
    """

    def __init__(self, field: str, expected: object, found: object, *, tensor: str = "?",
                 op: str | None = None, graph: str | None = None, detail: str = "") -> None:
        self.graph, self.op, self.tensor = graph, op, tensor
        self.field, self.expected, self.found = field, expected, found
        where = []
        if graph is not None:
            where.append(f"graph '{graph}'")
        if op is not None:
            where.append(f"op '{op}'")
        where.append(f"tensor '{tensor}'")
        msg = f"{', '.join(where)}: {field} expected {expected}, found {found}"
        super().__init__(msg + (f" ({detail})" if detail else ""))

    def located(self, *, graph: str | None = None, op: str | None = None) -> "ContractError":
        """The same error with the graph and op it happened in filled in."""
        return ContractError(self.field, self.expected, self.found, tensor=self.tensor,
                             op=op if op is not None else self.op,
                             graph=graph if graph is not None else self.graph)


@dataclass(frozen=True)
class Dim:
    """A symbolic dimension with an inclusive upper bound, e.g. ``N<=131072``."""

    name: str
    max: int

    def __str__(self) -> str:
        return f"{self.name}<={self.max}"


_DIM = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*<=\s*([0-9]+)\s*$")


def _parse_dim(d: object, tensor: str) -> int | Dim:
    if isinstance(d, Dim):
        if d.max < 0:
            raise ContractError("shape", "a non-negative bound", str(d), tensor=tensor)
        return d
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool):
        if int(d) < 0:
            raise ContractError("shape", "non-negative sizes", int(d), tensor=tensor)
        return int(d)
    if isinstance(d, str):
        m = _DIM.match(d)
        if m is None:
            raise ContractError("shape", "an int or a bounded symbol like 'N<=1024'", repr(d), tensor=tensor)
        return Dim(m.group(1), int(m.group(2)))
    raise ContractError("shape", "an int or a bounded symbol like 'N<=1024'", repr(d), tensor=tensor)


# Each framework's dtype objects, resolved once per spec so a check compares identities.
def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, "bool" if name == "bool" else name)


@dataclass(frozen=True, eq=True)
class TensorSpec:
    """Name, shape, dtype, device, layout and alignment a tensor must have."""

    name: str
    shape: tuple[int | Dim, ...]
    dtype: str = "float32"
    device: str = "cpu"
    layout: str = "contiguous"
    alignment: int = 1
    _np_dtype: np.dtype = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ContractError("name", "a non-empty string", repr(self.name), tensor=str(self.name))
        if isinstance(self.shape, (str, int)):
            raise ContractError("shape", "a tuple of dims", repr(self.shape), tensor=self.name)
        object.__setattr__(self, "shape", tuple(_parse_dim(d, self.name) for d in self.shape))
        try:
            np_dtype = np.dtype(self.dtype)
        except TypeError:
            raise ContractError("dtype", "a numpy dtype name such as 'float32'", repr(self.dtype),
                                tensor=self.name) from None
        object.__setattr__(self, "dtype", np_dtype.name)
        object.__setattr__(self, "_np_dtype", np_dtype)
        if self.device.split(":")[0] not in DEVICES:
            raise ContractError("device", " or ".join(DEVICES), repr(self.device), tensor=self.name)
        if self.layout not in LAYOUTS:
            raise ContractError("layout", "one of " + ", ".join(LAYOUTS), repr(self.layout), tensor=self.name)
        if self.layout in ("NCHW", "NHWC", "channels_last") and len(self.shape) != 4:
            raise ContractError("shape", f"4 dims for layout {self.layout}", len(self.shape), tensor=self.name)
        a = self.alignment
        if not isinstance(a, int) or a < 1 or a & (a - 1):
            raise ContractError("alignment", "a positive power of two (bytes)", a, tensor=self.name)

    # ---- sizes -----------------------------------------------------------------------------
    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._np_dtype.itemsize

    @property
    def max_shape(self) -> tuple[int, ...]:
        """The shape with every symbolic dim at its upper bound: what the planner reserves."""
        return tuple(d.max if isinstance(d, Dim) else d for d in self.shape)

    @property
    def max_nbytes(self) -> int:
        """Bytes of the largest tensor the spec admits."""
        return math.prod(self.max_shape) * self.itemsize

    @property
    def is_static(self) -> bool:
        """True when no dim is symbolic."""
        return not any(isinstance(d, Dim) for d in self.shape)

    def compatible(self, other: "TensorSpec") -> str | None:
        """The first field in which a producer's spec and a consumer's differ, or None."""
        for f in ("shape", "dtype", "device", "layout"):
            if getattr(self, f) != getattr(other, f):
                return f
        return None

    def renamed(self, name: str) -> "TensorSpec":
        """The same contract under another tensor name."""
        return TensorSpec(name, self.shape, self.dtype, self.device, self.layout, self.alignment)

    def __str__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f"{self.name}[{dims}] {self.dtype} {self.device} {self.layout}"

    # ---- checking real tensors --------------------------------------------------------------
    def check(self, x: object, *, op: str | None = None, graph: str | None = None) -> None:
        """Raise ContractError unless ``x`` (numpy, torch or cupy) meets this spec."""
        checker = _CHECKERS.get(type(x))
        if checker is None:
            checker = _checker_for(type(x))
            if checker is None:
                raise ContractError("type", "a numpy, torch or cupy tensor", type(x).__name__,
                                    tensor=self.name, op=op, graph=graph)
        found = checker(self, x)
        if found is not None:
            fld, expected, got = found
            raise ContractError(fld, expected, got, tensor=self.name, op=op, graph=graph)

    def _shape_mismatch(self, shape: tuple[int, ...]) -> tuple[str, object, object] | None:
        spec = self.shape
        if len(shape) != len(spec):
            return ("shape", f"{len(spec)} dims {self.shape_str()}", f"{len(shape)} dims {tuple(shape)}")
        for i, (want, got) in enumerate(zip(spec, shape)):
            if type(want) is int:
                if want != got:
                    return (f"shape[{i}]", want, got)
            elif got > want.max:
                return (f"shape[{i}]", f"{want.name} <= {want.max}", got)
        return None

    def shape_str(self) -> str:
        """The shape as written in messages: ``(N, 4)``."""
        return "(" + ", ".join(str(d) for d in self.shape) + ")"


def _check_numpy(spec: TensorSpec, x: np.ndarray) -> tuple[str, object, object] | None:
    if spec.device != "cpu":
        return ("device", spec.device, "cpu")
    if x.dtype != spec._np_dtype:
        return ("dtype", spec.dtype, x.dtype.name)
    bad = spec._shape_mismatch(x.shape)
    if bad is not None:
        return bad
    layout = spec.layout
    if layout != "strided":
        if layout == "channels_last":
            return ("layout", "channels_last (a torch memory format)", "numpy array")
        if not x.flags.c_contiguous:
            return ("layout", layout, f"strides {x.strides}")
    if spec.alignment > 1 and x.ctypes.data % spec.alignment:
        off = x.ctypes.data % spec.alignment
        return ("alignment", f"{spec.alignment} bytes", f"address % {spec.alignment} = {off}")
    return None


_TORCH_DTYPES: dict[str, Any] = {}


def _check_torch(spec: TensorSpec, x: Any) -> tuple[str, object, object] | None:
    want = _TORCH_DTYPES.get(spec.dtype)
    if want is None:
        want = _TORCH_DTYPES[spec.dtype] = _torch_dtype(spec.dtype)
    if x.dtype is not want:
        return ("dtype", spec.dtype, str(x.dtype).removeprefix("torch."))
    dev = x.device.type
    if dev != spec.device and dev != spec.device.split(":")[0]:
        return ("device", spec.device, dev)
    bad = spec._shape_mismatch(tuple(x.shape))
    if bad is not None:
        return bad
    layout = spec.layout
    if layout != "strided":
        if layout == "channels_last":
            import torch

            if not x.is_contiguous(memory_format=torch.channels_last):
                return ("layout", "channels_last", f"strides {tuple(x.stride())}")
        elif not x.is_contiguous():
            return ("layout", layout, f"strides {tuple(x.stride())}")
    if spec.alignment > 1 and x.data_ptr() % spec.alignment:
        return ("alignment", f"{spec.alignment} bytes", f"address % {spec.alignment} = {x.data_ptr() % spec.alignment}")
    return None


def _check_cupy(spec: TensorSpec, x: Any) -> tuple[str, object, object] | None:
    if spec.device.split(":")[0] != "cuda":
        return ("device", spec.device, "cuda")
    if x.dtype != spec._np_dtype:
        return ("dtype", spec.dtype, x.dtype.name)
    bad = spec._shape_mismatch(x.shape)
    if bad is not None:
        return bad
    if spec.layout not in ("strided", "channels_last") and not x.flags.c_contiguous:
        return ("layout", spec.layout, f"strides {x.strides}")
    if spec.alignment > 1 and x.data.ptr % spec.alignment:
        return ("alignment", f"{spec.alignment} bytes", f"address % {spec.alignment} = {x.data.ptr % spec.alignment}")
    return None


_CHECKERS: dict[type, Any] = {np.ndarray: _check_numpy}


def _checker_for(t: type) -> Any:
    """Find and cache the checker for a tensor type; torch and cupy are only imported if used."""
    module = t.__module__.split(".")[0]
    checker = None
    if module == "torch":
        checker = _check_torch
    elif module == "cupy":
        checker = _check_cupy
    elif issubclass(t, np.ndarray):
        checker = _check_numpy
    if checker is not None:
        _CHECKERS[t] = checker
    return checker
