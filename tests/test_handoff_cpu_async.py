"""Stream hand-offs on ``cpu-async`` (sched.handoff): one test per wait, each failing without it.

The producer's work is held behind a gate (a threading.Event), so what a consumer, a refill or the
host sees before the gate opens is the old bytes unless it waited. Where the waiting side would
block the test itself until the gate opens, a timer opens it a moment later: with the wait, the
result is the new bytes; without it, the read has already happened on the old ones.
"""
from __future__ import annotations

import threading
import time

import pytest
import torch

from async_twin import gated_fill, twin  # noqa: F401,F811 - twin is a fixture
from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.device.base import device_for
from rt_runtime.exec.executor import GraphExecutor
from rt_runtime.sched import ChannelConfig, Runtime, TaskBinding, WallClock
from rt_runtime.sched.channel import Channel
from rt_runtime.sched.handoff import wait_ready

pytestmark = pytest.mark.timeout(60)
MS = 1_000_000
X, Y = TensorSpec("x", (4,), "float32"), TensorSpec("y", (4,), "float32")


def open_later(gate: threading.Event, s: float = 0.2) -> None:
    """Open ``gate`` from another thread, after whatever the caller launches next has had time to run."""
    threading.Timer(s, gate.set).start()


def bound(twin, name: str = "/c") -> Channel:
    ch = Channel(name)
    ch.bind_device(twin)
    return ch


def inc_executor(twin) -> GraphExecutor:
    return GraphExecutor(Graph("inc", [Op("inc", lambda a, o: torch.add(a, 1.0, out=o), (X,), (Y,))], [X], ["y"]),
                         twin)


def producer_fill(twin, ch: Channel, gate: threading.Event, value: float):
    """A producer's op (behind ``gate``) writing its output view, then the channel fill on its stream."""
    prod = twin.stream()
    view = torch.zeros(4)
    twin.launch(prod, gated_fill(gate, view, value))
    return ch.fill(ch.reserve(), view, prod)


def test_1_the_fill_runs_on_the_producers_stream_and_records_ready(twin) -> None:
    ch, gate = bound(twin), threading.Event()
    slot = producer_fill(twin, ch, gate, 5.0)
    assert slot.ready is not None and not slot.ready.query()   # queued behind the producer's op
    gate.set()
    slot.ready.synchronize()
    assert torch.equal(slot.data, torch.full((4,), 5.0))       # a host copy at fill time: zeros


def test_2_a_consumers_stream_waits_for_the_fill_of_what_it_reads(twin) -> None:
    ch, gate = bound(twin), threading.Event()
    slot = producer_fill(twin, ch, gate, 5.0)
    ch.commit(slot, 0)
    cons = inc_executor(twin)
    wait_ready(cons, [(ch, slot)])   # what the dispatcher does at a job's start
    open_later(gate)
    out = cons.run({"x": slot.data})
    assert torch.equal(out["y"], torch.full((4,), 6.0))        # without the wait: 0 + 1


def test_3_a_slot_is_refilled_only_after_an_aborted_readers_ops(twin) -> None:
    ch, gate = bound(twin), threading.Event()
    rid = ch.add_reader("r")
    ch.write(0, torch.full((4,), 1.0))
    ch.latest().ready.synchronize()
    slot = ch.read(rid)
    seen = torch.zeros(4)

    def gated_read(a: torch.Tensor, o: torch.Tensor) -> None:
        gate.wait(10)
        seen.copy_(a)
        o.copy_(a)

    reader = GraphExecutor(Graph("r", [Op("read", gated_read, (X,), (Y,)),
                                       Op("inc", lambda a, o: torch.add(a, 1.0, out=o), (Y,), (TensorSpec("z", (4,), "float32"),))],
                                 [X], ["z"]), twin)
    gen = reader.steps({"x": slot.data})
    next(gen)                                 # its first op launched (behind the gate), then the job is aborted
    gen.close()
    ch.write(1, torch.full((4,), 9.0))        # a newer latest: the old slot's last holder is the reader's pin
    ch.unpin(slot, reader.in_flight())        # what Scheduler.kill does
    again = ch.reserve()
    assert again is slot                      # free again, and the next to be taken
    prod = twin.stream()
    ch.fill(again, torch.full((4,), 2.0), prod)
    open_later(gate)
    slot.ready.synchronize()
    assert torch.equal(seen, torch.full((4,), 1.0))   # without the wait the reader saw the refill: 2


def test_4_ingress_is_staged_and_its_consumer_waits_on_the_copy_stream(twin) -> None:
    ch, gate = bound(twin), threading.Event()
    twin.launch(twin.copy_stream(), gate.wait, 10)   # the copy stream is busy
    data = torch.full((4,), 3.0)
    ch.write(0, data)
    data.fill_(-1.0)                          # the caller reuses its buffer once write returned
    slot = ch.latest()
    assert slot.ready is not None and not slot.ready.query()
    cons = inc_executor(twin)
    wait_ready(cons, [(ch, slot)])
    open_later(gate)
    out = cons.run({"x": slot.data})
    assert torch.equal(out["y"], torch.full((4,), 4.0))   # unstaged: -1 + 1; no wait: stale bytes + 1


def test_5_egress_copies_wait_for_the_fill_and_the_host_waits_for_the_copy(twin) -> None:
    ch, gate = bound(twin), threading.Event()
    slot = producer_fill(twin, ch, gate, 5.0)
    ch.commit(slot, 0)
    copy = ch.egress_copy(slot)
    assert slot.users                         # the slot's next fill waits for this copy too
    open_later(gate)
    assert torch.equal(copy.result(), torch.full((4,), 5.0))   # no stream wait or no host wait: stale bytes
    copy.release()
    assert not slot.host_busy


def test_the_cpu_device_keeps_no_events_and_no_egress_queue() -> None:
    rt = Runtime([TaskBinding(Task("t", 10 * MS, 5 * MS), inc_executor(device_for("cpu")).graph,
                              inputs={"x": "/in"}, outputs={"y": "/out"})],
                 channels=[ChannelConfig("/in"), ChannelConfig("/out")], egress=lambda *a: None)
    rt.push("/in", 0, torch.zeros(4))
    rt.run_until(30 * MS)
    rt.close()
    assert not rt.sched.async_device and not rt.sched.outbox
    for ch in rt.channels.values():
        assert ch.dev is None and all(s.event is None and s.ready is None for s in ch.slots)


@pytest.mark.wallclock
def test_threaded_egress_is_called_outside_the_scheduler_lock_in_publish_order(twin) -> None:
    x, y = X, Y

    def slow(a: torch.Tensor, o: torch.Tensor) -> None:
        time.sleep(0.002)
        torch.add(a * 2.0, 1.0, out=o)

    prod = Graph("prod", [Op("affine", slow, (x,), (y,), cost_us=2000)], [x], ["y"])
    cons = Graph("cons", [Op("inc", lambda a, o: torch.add(a, 1.0, out=o), (x,), (y,))], [x], ["y"])
    seen: list[tuple[int, int, float]] = []
    under_lock: list[bool] = []
    rt = None

    def egress(ch: str, t: int, seq: int, d: torch.Tensor) -> None:
        got = rt.sched.lock.acquire(timeout=1)   # held by this thread: it never comes
        if got:
            rt.sched.lock.release()
        under_lock.append(not got)
        if ch == "/out":
            seen.append((t, seq, float(d[0])))

    rt = Runtime([TaskBinding(Task("prod", 20 * MS, 15 * MS, trigger="/in"), prod, inputs={"x": "/in"},
                              outputs={"y": "/mid"}),
                  TaskBinding(Task("cons", 20 * MS, 15 * MS, trigger="/mid"), cons, inputs={"x": "/mid"},
                              outputs={"y": "/out"})],
                 channels=[ChannelConfig("/in"), ChannelConfig("/mid"), ChannelConfig("/out")], device=twin,
                 clock=WallClock(), threaded=True, workers=2, realtime=False, egress=egress)
    try:
        for i in range(8):
            rt.push("/in", i * 20 * MS, torch.full((4,), float(i)))
        rt.run_until(200 * MS)
    finally:
        rt.close()
    assert seen and not any(under_lock)
    assert [s for _, s, _ in seen] == sorted(s for _, s, _ in seen)
    assert all(v in [2.0 * i + 2.0 for i in range(8)] for _, _, v in seen)   # never stale or torn bytes
