"""A channel's message buffer (``Slot``) and a reader's place in the channel (``Reader``): plain records
that ``sched.channel`` keeps, the scheduler pins and the parallel drivers hold references on."""
from __future__ import annotations

from collections import deque
from typing import Any


class Slot:
    """One preallocated message buffer; ``data`` is a view of the valid part, ``refs`` its holders.

    On an asynchronous device: ``ready`` is the event after the copy that filled it (None: complete on
    the host), ``users`` the events after its readers' work that its next fill waits for, ``stage``
    and ``host`` its ingress and egress host buffers (made on first use)."""

    __slots__ = ("index", "buf", "data", "shape", "seq", "t_ns", "stamp_ns", "refs", "event", "ready", "users",
                 "stage", "host", "host_event", "host_busy", "pending")

    def __init__(self, index: int) -> None:
        self.index = index
        self.buf: Any = None
        self.data: Any = None
        self.shape: tuple[int, ...] | None = None
        self.seq = -1
        self.t_ns = -1
        self.stamp_ns = -1   # the time the data describe (a sensor's header stamp), on the same timeline
        self.refs = 0
        self.event: Any = None    # recorded after each asynchronous fill (one per slot, made at bind)
        self.ready: Any = None
        self.users: list[Any] = []
        self.stage: Any = None
        self.host: Any = None
        self.host_event: Any = None
        self.host_busy = False
        self.pending: Any = None   # the computation filling it, where published on a bet (sched.optimistic)

    def __repr__(self) -> str:
        return f"Slot(#{self.index}, seq={self.seq}, t={self.t_ns}, shape={self.shape}, refs={self.refs})"


class Reader:
    """One reader's place in a channel: its queue (FIFO policies), its last message, its drop and read counts."""

    __slots__ = ("name", "fifo", "last", "last_seq", "drops", "reads", "stale")

    def __init__(self, name: str) -> None:
        self.name = name
        self.fifo: deque[Slot] = deque()
        self.last: Slot | None = None   # the queue policies keep the last message for stale reads
        self.last_seq = -1
        self.drops = 0
        self.reads = 0
        self.stale = False
