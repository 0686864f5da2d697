"""Arenas: one backing byte buffer per memory pool, carved up by a MemoryPlan."""
from __future__ import annotations

from enum import Enum

from .planner import MemoryPlan


class PoolKind(str, Enum):
    """What a pool holds; each kind gets its own arena so lifetimes never mix."""

    WEIGHTS = "weights"
    ACTIVATIONS = "activations"
    IO = "io"
    WORKSPACE = "workspace"


class Arena:
    """A plan plus the storage it carves up, allocated once by a backend (numpy or torch uint8).

    Making views into `storage` is the backend's job, so this class stays backend-agnostic.
    """

    def __init__(self, name: str, kind: PoolKind | str, plan: MemoryPlan, storage: object) -> None:
        self.name = name
        self.kind = PoolKind(kind)
        self.plan = plan
        self.storage = storage
        if self.nbytes < plan.total_bytes:  # a short arena would corrupt tensors silently
            raise ValueError(
                f"arena {name!r}: storage holds {self.nbytes} B but the plan needs {plan.total_bytes} B"
            )

    @property
    def nbytes(self) -> int:
        """Size of the backing storage in bytes."""
        n = getattr(self.storage, "nbytes", None)
        return int(n) if n is not None else memoryview(self.storage).nbytes

    def offset_of(self, tensor_name: str) -> int:
        """Byte offset of a planned tensor within the storage."""
        try:
            return self.plan.offsets[tensor_name]
        except KeyError:
            raise KeyError(f"arena {self.name!r} has no tensor {tensor_name!r}") from None

    def __repr__(self) -> str:
        return f"Arena({self.name!r}, {self.kind.value}, {self.nbytes} B, {len(self.plan.offsets)} tensors)"
