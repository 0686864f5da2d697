"""TraceRing: every scheduler event into a preallocated ring, no allocation per event.

An event is six integers ``(kind, t_ns, task_id, job_index, a, b)`` (see
``rt_runtime.sched.events``). They go into one flat preallocated ``array('q')``; the slot comes
from ``next()`` on an ``itertools.count``, which CPython performs atomically, so workers on
several threads may emit without a lock. Task names are interned to small ids on first sight.

The ring is drained off the hot path (between cycles, or by a writer thread): ``drain()`` returns
the events since the last drain as numpy columns. If the hot path laps the drain, the oldest
undrained events are overwritten and counted in ``lost``. A drain takes a slot of its own from
the counter (to learn where the writers are without a lock) and marks it with kind ``MARK``,
which readers never see.
"""
from __future__ import annotations

import itertools
import struct
from array import array
from dataclasses import dataclass, field

import numpy as np

FIELDS = ("kind", "t_ns", "task", "job", "a", "b")
_W = len(FIELDS)
_EVENT = 8 * _W   # bytes per event
_pack_event = struct.Struct(f"{_W}q").pack_into   # one event's six int64 into the buffer, one C call
MARK = -1  # a drain's own slot


@dataclass
class TraceColumns:
    """A batch of events as numpy columns (int64), plus the task-id → name table."""

    kind: np.ndarray
    t_ns: np.ndarray
    task: np.ndarray
    job: np.ndarray
    a: np.ndarray
    b: np.ndarray
    tasks: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.kind)

    @classmethod
    def empty(cls, tasks: list[str] | None = None) -> "TraceColumns":
        """No events."""
        z = np.zeros(0, np.int64)
        return cls(z, z, z, z, z, z, list(tasks or []))

    @classmethod
    def concat(cls, parts: list["TraceColumns"], tasks: list[str]) -> "TraceColumns":
        """Join batches drained from the same ring (task ids are shared)."""
        if not parts:
            return cls.empty(tasks)
        cols = [np.concatenate([getattr(p, f) for p in parts]) for f in FIELDS]
        return cls(*cols, tasks=list(tasks))

    def task_name(self, task_id: int) -> str:
        """The name behind an interned id."""
        return self.tasks[task_id]


class TraceRing:
    """Preallocated event ring implementing the scheduler's ``EventSink`` protocol."""

    enabled = True

    def __init__(self, capacity: int = 1 << 20) -> None:
        if capacity <= 0:
            raise ValueError(f"trace ring: capacity must be positive, found {capacity}")
        capacity = 1 << (capacity - 1).bit_length()  # a power of two: the slot is a mask, not a modulo
        self.capacity = capacity
        self._mask = capacity - 1
        self._buf = array("q", bytes(8 * _W * capacity))
        self._next = itertools.count()
        self._drained = 0          # events already returned by drain()
        self.lost = 0
        self.task_ids: dict[str, int] = {}
        self.tasks: list[str] = []

    def task_id(self, name: str) -> int:
        """Intern a task name (done once per task; later emits find it in the dict)."""
        tid = self.task_ids.get(name)
        if tid is None:
            tid = self.task_ids.setdefault(name, len(self.task_ids))
            if tid == len(self.tasks):
                self.tasks.append(name)
        return tid

    def emit(self, kind: int, t_ns: int, task: str, job_index: int, a: int = 0, b: int = 0) -> None:
        """Record one event: its six integers packed into its slot of the preallocated buffer."""
        tid = self.task_ids.get(task)
        if tid is None:
            tid = self.task_id(task)
        _pack_event(self._buf, (next(self._next) & self._mask) * _EVENT, kind, t_ns, tid, job_index, a, b)

    def drain(self) -> TraceColumns:
        """The events emitted since the last drain, oldest first, as numpy columns (copied)."""
        end = next(self._next)
        self._buf[(end & self._mask) * _W] = MARK
        start = self._drained
        if end - start > self.capacity - 1:  # lapped: the oldest are gone, and the mark took one more
            self.lost += end - start - (self.capacity - 1)
            start = end - (self.capacity - 1)
        n = end - start
        view = np.frombuffer(self._buf, dtype=np.int64).reshape(self.capacity, _W)
        rows = (np.arange(start, end) % self.capacity) if n else np.zeros(0, np.int64)
        block = view[rows]
        block = block[block[:, 0] != MARK]  # earlier drains' slots
        self._drained = end + 1
        return TraceColumns(*(block[:, j].copy() for j in range(_W)), tasks=list(self.tasks))
