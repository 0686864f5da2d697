"""Channels: bounded message buffers with preallocated slots, read and written under LET.

A channel holds one tensor per message, with a logical timestamp and a sequence number. Its slots
are allocated once, on the first write, at the largest size the channel will carry (the spec's
bounds, or the first message's shape); a write copies into a free slot, so steady state allocates
nothing. A slot is reference-counted: the latest message, each reader's queue, a job that
snapshotted it and a writer that reserved it all hold it, so it is never overwritten in use.

The runtime decides *when* things happen (read at release, commit at the deadline); the channel
only keeps the data and the per-reader bookkeeping:

* ``latest``       every read sees the newest message; messages a reader never saw are drops.
* ``queue``        each reader queues up to ``depth`` messages and takes the oldest per read; a
                   new message that finds a reader's queue full is dropped for that reader.
* ``drop_oldest``  as ``queue``, but a full queue drops its oldest message to take the new one.

A read with nothing new returns the reader's last message again (marked stale).

On an asynchronous device (``bind_device``) fills, ingress and egress copies are launched on streams
and ordered by events kept with each slot (``Slot.ready``, ``Slot.users``): see ``sched.handoff``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from ..core.tensor import ContractError, TensorSpec
from .handoff import EgressCopy, copy_in, egress_copy
from .slot import Slot, Reader


class ChannelPolicy(str, Enum):
    """What happens when a reader falls behind the writer."""

    LATEST = "latest"
    QUEUE = "queue"
    DROP_OLDEST = "drop_oldest"


@dataclass(frozen=True)
class ChannelConfig:
    """How to build a channel: policy, depth (per reader, for the queue policies), optional contract."""

    name: str
    policy: ChannelPolicy | str = ChannelPolicy.LATEST
    depth: int = 1
    spec: TensorSpec | None = None


def _numel(x: Any) -> int:
    n = getattr(x, "size", None)
    return int(n) if isinstance(n, (int, np.integer)) else int(x.numel())


class Channel:
    """A bounded, preallocated, multi-reader message buffer (see the module docstring)."""

    def __init__(self, name: str, policy: ChannelPolicy | str = ChannelPolicy.LATEST, depth: int = 1,
                 spec: TensorSpec | None = None, *, check: bool = True) -> None:
        self.name = name
        self.policy = ChannelPolicy(policy)
        if depth < 1:
            raise ValueError(f"channel '{name}': depth must be >= 1, found {depth}")
        self.depth = depth
        self.spec = spec
        self.check = check and spec is not None
        self.readers: list[Reader] = []
        self.slots: list[Slot] = []
        self._free: list[Slot] = []
        self._latest: Slot | None = None
        self._capacity = 4
        self._cap_numel = 0
        self._lib = ""              # "numpy" or "torch", fixed by the first write
        self._dtype: Any = None
        self._device: Any = None
        self.seq = 0                # sequence number of the next message
        self.writes = 0
        self.drops = 0              # all readers' drops together
        self.grows = 0              # allocations after the first: zero in steady state
        self.last_read_drops = 0    # drops found by the latest read (the runtime traces them)
        self.last_commit_drops = 0  # drops caused by the latest commit
        self.dev: Any = None        # an asynchronous device (bind_device): hand-offs on its streams
        self.streamed = False       # bound and carrying torch tensors: fills and egress go through streams
        self.egress_spares = 0      # egress host buffers allocated because a slot's own was busy (rare)

    def bind_device(self, dev: Any) -> None:
        """Order this channel's hand-offs on ``dev``'s streams (an asynchronous device, before any write)."""
        self.dev = dev
        for s in self.slots:
            s.event = dev.event()

    # ---- set-up -----------------------------------------------------------------------------
    def add_reader(self, name: str) -> int:
        """Register a reader (a task input); returns its id."""
        self.readers.append(Reader(name))
        return len(self.readers) - 1

    def reserve_capacity(self, slots: int) -> None:
        """Make room for ``slots`` messages alive at once (the runtime computes the bound)."""
        self._capacity = max(self._capacity, slots)
        if self.slots:
            self._grow_slots(self._capacity - len(self.slots))

    @property
    def capacity(self) -> int:
        """Slots reserved (or to be allocated on the first write)."""
        return max(self._capacity, len(self.slots))

    @property
    def full(self) -> bool:
        """True when every allocated slot is in use (a ``reserve`` now would grow the channel)."""
        return not self._free and bool(self.slots)

    @property
    def allocated(self) -> bool:
        """True once the first write has allocated the slots."""
        return bool(self.slots)

    def _alloc(self, numel: int) -> Any:
        if self._lib == "torch":
            import torch

            return torch.empty(numel, dtype=self._dtype, device=self._device)
        return np.empty(numel, dtype=self._dtype)

    def _grow_slots(self, n: int, bufs: bool = True) -> None:
        for _ in range(max(0, n)):
            s = Slot(len(self.slots))
            s.buf = self._alloc(self._cap_numel) if bufs else None
            if self.dev is not None:
                s.event = self.dev.event()
            self.slots.append(s)
            self._free.append(s)

    def _first_alloc(self, data: Any, bufs: bool = True) -> None:
        self._lib = "numpy" if isinstance(data, np.ndarray) else "torch"
        self._dtype, self._device = data.dtype, getattr(data, "device", None)
        self._cap_numel = max(_numel(data), math.prod(self.spec.max_shape) if self.spec is not None else 0)
        self.streamed = self.dev is not None and self._lib == "torch"
        # A channel whose first message is adopted gets its buffers only if a copy ever needs one.
        self._grow_slots(self._capacity, bufs)

    def _regrow(self, numel: int) -> None:
        """A message larger than the slots (no spec bound it): enlarge every slot, keeping contents."""
        self.grows += 1
        self._cap_numel = numel
        if self.streamed:   # a copy below reads slots on the host: their pending copies and readers first
            for s in self.slots:
                for e in s.users + ([s.ready] if s.ready is not None else []):
                    e.synchronize()
                s.users.clear()
                s.ready = None
        for s in self.slots:
            if s.buf is None:
                continue
            old, s.buf = s.buf, self._alloc(numel)
            if s.shape is not None:
                n = math.prod(s.shape)
                s.buf[:n] = old[:n]
                s.data = self._view(s.buf, s.shape)

    def _view(self, buf: Any, shape: tuple[int, ...]) -> Any:
        n = math.prod(shape)
        return buf[:n].view(shape) if self._lib == "torch" else buf[:n].reshape(shape)

    # ---- writer side ------------------------------------------------------------------------
    def reserve(self) -> Slot:
        """A free slot for a message being produced (invisible until ``commit``)."""
        if not self._free:
            if self.slots:
                self.grows += 1       # the runtime's bound was too small: never fail, but count it
                self._grow_slots(1)
            else:
                # Before the first write the buffers' type and size are unknown: hand out a bare
                # slot that ``fill`` swaps for a real one (the capacity bound already counts it).
                bare = Slot(-1)
                bare.refs = 1
                return bare
        s = self._free.pop()
        s.refs = 1
        return s

    def fits(self, data: Any) -> bool:
        """True if ``fill`` can copy ``data`` without allocating (safe outside the runtime's lock)."""
        return bool(self.slots) and _numel(data) <= self._cap_numel

    def fill(self, slot: Slot, data: Any, stream: Any = None, stage: bool = False) -> Slot:
        """Copy ``data`` into a reserved slot; returns the slot to commit (it may be replaced).

        On a bound channel (``streamed``) with a ``stream``, the copy is launched there and
        ``slot.ready`` recorded after it: the producer's stream, or the copy stream for ``stage``d
        ingress. Without a stream (or on the ``cpu`` device) the copy is done on the host, now."""
        if self.check:
            self.spec.check(data, op="<channel>", graph=self.name)  # type: ignore[union-attr]
        if not self.slots:
            self._first_alloc(data)
        if slot.index < 0:       # reserved before allocation: swap for a real slot
            slot = self.reserve()
        if self._lib == "torch" and isinstance(data, np.ndarray):
            import torch

            data = torch.from_numpy(data)
        elif self._lib == "numpy" and not isinstance(data, np.ndarray):
            data = data.cpu().numpy()
        if data.dtype != self._dtype:
            raise ContractError("dtype", str(self._dtype), str(data.dtype), tensor=self.name, op="<channel>",
                                detail="a channel's dtype is fixed by its first message")
        numel = _numel(data)
        if numel > self._cap_numel:
            self._regrow(numel)
        if slot.buf is None:
            slot.buf = self._alloc(self._cap_numel)
        shape = tuple(data.shape)
        if shape != slot.shape:
            slot.shape = shape
            slot.data = self._view(slot.buf, shape)
        dst = slot.data
        if self.streamed:
            copy_in(self.dev, slot, dst, data, stream, self._cap_numel, stage)
        elif self._lib == "torch":
            dst.copy_(data)
        else:
            np.copyto(dst, data)
        return slot

    def commit(self, slot: Slot, t_ns: int, stamp_ns: int = -1) -> int:
        """Make a filled slot the newest message at logical time ``t_ns``, describing the world at
        ``stamp_ns`` (-1: at ``t_ns``); returns its seq."""
        seq = self.seq
        self.seq = seq + 1
        slot.seq, slot.t_ns = seq, t_ns
        slot.stamp_ns = stamp_ns if stamp_ns >= 0 else t_ns
        self.writes += 1
        old = self._latest
        self._latest = slot              # the reservation's reference becomes the latest's
        if old is not None:
            self._unref(old)
        drops = 0
        if self.policy is not ChannelPolicy.LATEST:
            queue = self.policy is ChannelPolicy.QUEUE
            for r in self.readers:
                fifo = r.fifo
                if len(fifo) >= self.depth:
                    r.drops += 1
                    drops += 1
                    if queue:
                        continue
                    self._unref(fifo.popleft())
                fifo.append(slot)
                slot.refs += 1
        self.drops += drops
        self.last_commit_drops = drops
        return seq

    def cancel(self, slot: Slot) -> None:
        """Give back a reserved slot that will not be committed."""
        if slot.index >= 0:
            self._unref(slot)

    def write(self, t_ns: int, data: Any, stamp_ns: int = -1) -> int:
        """Reserve, copy and commit in one call (ingress); returns the seq.

        On a bound channel the copy goes through the slot's host staging buffer and the device's copy
        stream (``sched.handoff``); ``data`` may be reused by the caller as soon as this returns."""
        if self.dev is None:
            return self.commit(self.fill(self.reserve(), data), t_ns, stamp_ns)
        return self.commit(self.fill(self.reserve(), data, self.dev.copy_stream(), stage=True), t_ns, stamp_ns)

    def adopt(self, t_ns: int, data: Any, stamp_ns: int = -1) -> int:
        """Commit ``data`` itself, without a copy (ingress whose caller hands the data over and never
        writes it again); returns the seq. A message of another library, dtype or device than the
        channel's, or not contiguous, is copied as ``write`` does (which rejects a dtype change)."""
        if self.check:
            self.spec.check(data, op="<channel>", graph=self.name)  # type: ignore[union-attr]
        if not self.slots:
            self._first_alloc(data, bufs=False)
        if isinstance(data, np.ndarray):
            fits = self._lib == "numpy" and data.flags.c_contiguous
        else:
            fits = self._lib == "torch" and data.device == self._device and data.is_contiguous()
        if not fits or data.dtype != self._dtype:
            return self.write(t_ns, data, stamp_ns)
        slot = self.reserve()
        slot.shape = None   # its data is not a view of its own buffer: a later fill makes a new view
        slot.data = data
        slot.ready = None   # complete on the host: nothing to wait for
        return self.commit(slot, t_ns, stamp_ns)

    def _unref(self, s: Slot) -> None:
        s.refs -= 1
        if s.refs == 0:
            self._free.append(s)

    # ---- reader side ------------------------------------------------------------------------
    def read(self, rid: int) -> Slot | None:
        """Snapshot for reader ``rid``: the message it should see now, pinned until ``unpin``."""
        r = self.readers[rid]
        r.reads += 1
        self.last_read_drops = 0
        if self.policy is ChannelPolicy.LATEST:
            s = self._latest
            if s is None:
                return None
            gap = s.seq - r.last_seq - 1
            if gap > 0:
                r.drops += gap
                self.drops += gap
                self.last_read_drops = gap
            r.stale = s.seq <= r.last_seq
            if not r.stale:
                r.last_seq = s.seq
        elif r.fifo:
            s = r.fifo.popleft()         # the queue's reference becomes the reader's "last"
            if r.last is not None:
                self._unref(r.last)
            r.last = s
            r.last_seq = s.seq
            r.stale = False
        else:
            s = r.last
            if s is None:
                return None
            r.stale = True
        s.refs += 1
        return s

    def unpin(self, slot: Slot, after: list[Any] | None = None) -> None:
        """Release a snapshot taken by ``read``; ``after``: events its next fill must wait for (a reader
        whose work on a stream may still be running)."""
        if after:
            slot.users.extend(after)
        self._unref(slot)

    def egress_copy(self, slot: Slot) -> EgressCopy:
        """A published slot's copy to host memory, launched on the copy stream (a ``streamed`` channel)."""
        out, spare = egress_copy(self.dev, slot, self._cap_numel)
        self.egress_spares += spare
        return out

    def unread(self, rid: int) -> int:
        """Messages reader ``rid`` has not seen yet."""
        r = self.readers[rid]
        if self.policy is ChannelPolicy.LATEST:
            return 0 if self._latest is None else max(0, self._latest.seq - r.last_seq)
        return len(r.fifo)

    def peek(self, rid: int) -> Slot | None:
        """What ``read(rid)`` would return now, without reading it (nothing pinned, nothing counted)."""
        if self.policy is ChannelPolicy.LATEST:
            return self._latest
        r = self.readers[rid]
        return r.fifo[0] if r.fifo else r.last

    def latest(self) -> Slot | None:
        """The newest message (not pinned: valid until the next write)."""
        return self._latest

    def stats(self) -> dict[str, Any]:
        """Counters: writes, drops (all and per reader), slots, allocations after the first."""
        return {"writes": self.writes, "drops": self.drops, "slots": len(self.slots), "grows": self.grows,
                "readers": {r.name: {"reads": r.reads, "drops": r.drops} for r in self.readers}}

    def __repr__(self) -> str:
        return f"Channel({self.name!r}, {self.policy.value}, depth={self.depth}, seq={self.seq}, " \
               f"{len(self.slots)} slots)"

