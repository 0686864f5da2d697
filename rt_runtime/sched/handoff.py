"""Stream hand-offs between tasks on an asynchronous device (``cuda``, and its CI twin ``cpu-async``).

On such a device a launch returns before the work ran, so every hand-off of a channel slot is
ordered by events instead of by the host waiting (docs/ARCHITECTURE.md, "Devices and streams"):

* **fill** — a job's outputs are copied into its reserved slot *on the producer's stream* (after its
  ops, before its next job's, FIFO), and ``slot.ready`` is recorded after the copy;
* **read** — a job's stream waits on the ``ready`` event of every slot it pinned before its first op;
* **reuse** — a slot is refilled only after everything that read it on a stream is done: its pins
  are released at the reader's completion, and a reader whose work may still run (an aborted job,
  an egress copy) leaves an event in ``slot.users`` that the next fill waits on;
* **ingress** — host data is copied at once into the slot's own host staging buffer (pinned on
  CUDA), then to the slot on the device's copy stream, with ``ready`` recorded there;
* **egress** — a published slot is copied to a preallocated host buffer on the copy stream; the
  scheduler queues the copy and the driver, after releasing the scheduler lock, waits for it
  (``EgressCopy.result``) and hands the host data to the egress callback.

The ``cpu`` device never comes here: its channels are not bound to a device (``Channel.dev`` is None).
"""
from __future__ import annotations

import math
from typing import Any, Iterable


class EgressCopy:
    """A device-to-host copy of a published message in flight; ``result`` waits for it (off the lock)."""

    __slots__ = ("data", "event", "slot")

    def __init__(self, data: Any, event: Any, slot: Any) -> None:
        self.data = data     # the host view the copy writes
        self.event = event   # recorded on the copy stream after the copy
        self.slot = slot     # whose host buffer it is (None: a spare buffer, the slot's was still busy)

    def result(self) -> Any:
        """The host data, once the copy completed (a host sync: call it outside the scheduler lock)."""
        self.event.synchronize()
        return self.data

    def release(self) -> None:
        """The egress callback returned: the slot's host buffer may take the next copy."""
        if self.slot is not None:
            self.slot.host_busy = False


def copy_in(dev: Any, slot: Any, dst: Any, data: Any, stream: Any, cap_numel: int, stage: bool = False) -> None:
    """Copy ``data`` into ``dst`` (the slot's view), ordered after every earlier reader of the slot.

    ``stream``: the producer's stream (its outputs, copied device to device after its ops), the
    device's copy stream (ingress, ``stage``: host data staged through the slot's host buffer), or
    None (a host copy of data already complete: the host waits for the slot's readers first)."""
    users = slot.users
    if stream is None:
        for e in users:
            e.synchronize()
        users.clear()
        dst.copy_(data)
        slot.ready = None
        return
    for e in users:       # reuse: the slot's last readers on other streams finish first
        e.wait(stream)
    users.clear()
    if stage and data.device.type == "cpu":
        # Ingress: the caller may reuse its buffer once ``write`` returns, so take the bytes now into the
        # slot's own staging buffer; an earlier copy of this slot still queued reads the same buffer, but
        # this one follows it on the FIFO copy stream and rewrites the slot before ``ready``.
        if slot.stage is None or slot.stage.numel() < cap_numel:
            slot.stage = dev.host_buffer(cap_numel, data.dtype)
        staged = slot.stage[:math.prod(data.shape)].view(data.shape)
        staged.copy_(data)
        data = staged
    dev.copy_(dst, data, stream=stream)
    slot.event.record(stream)
    slot.ready = slot.event


def egress_copy(dev: Any, slot: Any, cap_numel: int) -> tuple[EgressCopy, bool]:
    """Launch the copy of a published slot to host memory on the copy stream; (the copy, whether a
    spare host buffer had to be allocated because the slot's own was still in an egress callback)."""
    cs = dev.copy_stream()
    data = slot.data
    spare = slot.host_busy
    if spare:   # rare: the slot was refilled and republished before its last egress returned
        host, ev, owner = dev.host_buffer(cap_numel, data.dtype), dev.event(), None
    else:
        if slot.host is None or slot.host.numel() < cap_numel:
            slot.host, slot.host_event = dev.host_buffer(cap_numel, data.dtype), dev.event()
        host, ev, owner = slot.host, slot.host_event, slot
        slot.host_busy = True
    out = host[:math.prod(data.shape)].view(data.shape)
    if slot.ready is not None:
        slot.ready.wait(cs)     # the fill (or ingress copy) of this message first
    dev.copy_(out, data, stream=cs)
    ev.record(cs)
    slot.users.append(ev)       # and the slot is refilled only after this copy read it
    return EgressCopy(out, ev, owner), spare


def wait_ready(executor: Any, pins: Iterable[tuple[Any, Any]]) -> None:
    """Before a job's first op: its executor's stream(s) wait on the fill of every slot it reads."""
    events = [s.ready for _, s in pins if s.ready is not None]
    if not events:
        return
    wait = getattr(executor, "wait_events", None)
    if wait is not None:
        wait(events)
    else:   # an executor without streams reads on the host: the host waits
        for e in events:
            e.synchronize()


def in_flight(executor: Any) -> list[Any]:
    """Events after the work an executor launched so far (an aborted job's ops may still be running)."""
    f = getattr(executor, "in_flight", None)
    return f() if f is not None else []
