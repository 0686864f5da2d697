"""The asynchronous CPU twin: launched work completes later, events order streams, errors are sticky.

Every test holds the producer's work behind a gate (a threading.Event the test opens), so what the
host or another stream sees before the gate opens is fixed, not a race the test hopes to win.
"""
from __future__ import annotations

import threading

import pytest
import torch

from async_twin import gated_fill, twin  # noqa: F401,F811 - twin is a fixture
from rt_runtime.device.base import device_for
from rt_runtime.device.cpu_async import AsyncEvent, CpuAsyncDevice, DeviceError

pytestmark = pytest.mark.timeout(30)


def test_device_for_names_the_twin(twin):
    assert isinstance(twin, CpuAsyncDevice) and twin.name == "cpu-async" and twin.kind == "cpu-async"


def test_a_host_read_nobody_waited_for_sees_stale_bytes(twin):
    s = twin.stream()
    x = torch.zeros(4)
    gate, done = threading.Event(), twin.event()
    twin.launch(s, gated_fill(gate, x, 7.0))
    done.record(s)
    assert not done.query()
    assert torch.equal(x, torch.zeros(4))       # launched, not run: the old bytes
    gate.set()
    done.synchronize()
    assert done.query() and torch.equal(x, torch.full((4,), 7.0))


def test_a_stream_wait_orders_a_consumer_after_the_producer(twin):
    producer, consumer = twin.stream(), twin.stream()
    src, dst = torch.zeros(3), torch.full((3,), -1.0)
    gate, written, copied = threading.Event(), twin.event(), twin.event()
    twin.launch(producer, gated_fill(gate, src, 5.0))
    written.record(producer)
    written.wait(consumer)
    twin.copy_(dst, src, stream=consumer)
    copied.record(consumer)
    assert not copied.query()                   # the consumer stalls behind the producer's marker
    gate.set()
    copied.synchronize()
    assert torch.equal(dst, torch.full((3,), 5.0))


def test_without_the_wait_the_consumer_copies_stale_bytes(twin):
    producer, consumer = twin.stream(), twin.stream()
    src, dst = torch.zeros(3), torch.full((3,), -1.0)
    gate, copied = threading.Event(), twin.event()
    twin.launch(producer, gated_fill(gate, src, 5.0))
    twin.copy_(dst, src, stream=consumer)        # the missing wait
    copied.record(consumer)
    copied.synchronize()                        # completes although the producer has not run
    gate.set()
    twin.synchronize()
    assert torch.equal(dst, torch.zeros(3)) and torch.equal(src, torch.full((3,), 5.0))


def test_a_wait_binds_to_the_record_made_before_it(twin):
    producer, consumer = twin.stream(), twin.stream()
    first, second = threading.Event(), threading.Event()
    ev, after = twin.event(), twin.event()
    order: list[str] = []
    twin.launch(producer, lambda: (first.wait(10), order.append("p1")))
    ev.record(producer)
    ev.wait(consumer)                           # binds to the first record
    twin.launch(producer, lambda: (second.wait(10), order.append("p2")))
    ev.record(producer)                         # re-recorded later: the consumer's wait is not moved
    twin.launch(consumer, lambda: order.append("c"))
    after.record(consumer)
    first.set()
    after.synchronize()
    assert order == ["p1", "c"]
    second.set()
    twin.synchronize()
    assert order == ["p1", "c", "p2"]


def test_work_on_one_stream_runs_in_launch_order(twin):
    s = twin.stream()
    seen: list[int] = []
    for i in range(50):
        twin.launch(s, seen.append, i)
    twin.synchronize(s)
    assert seen == list(range(50))


def test_an_error_in_launched_work_is_sticky_and_raised_at_synchronize(twin):
    s = twin.stream()
    ran: list[str] = []

    def boom() -> None:
        raise ValueError("bad kernel")

    twin.launch(s, boom)                         # the launch itself does not raise
    twin.launch(s, ran.append, "after")
    ev = twin.event()
    ev.record(s)
    with pytest.raises(DeviceError, match="bad kernel"):
        ev.synchronize()
    assert ran == []                            # a faulted stream runs no further work
    with pytest.raises(DeviceError, match="bad kernel"):
        twin.synchronize(s)


@pytest.mark.wallclock
def test_events_time_the_work_between_them(twin):
    s = twin.stream()
    start, end = AsyncEvent(), AsyncEvent()
    start.record(s)
    twin.launch(s, threading.Event().wait, 0.02)
    end.record(s)
    end.synchronize()
    assert start.elapsed_ns(end) >= 15_000_000


def test_an_event_never_recorded_counts_as_reached(twin):
    ev = twin.event()
    assert ev.query()
    ev.synchronize()
    ev.wait(twin.stream())                       # nothing to wait for


def test_cpu_and_cuda_devices_share_the_launch_call():
    cpu = device_for("cpu")
    x = torch.zeros(2)
    cpu.launch(cpu.stream(), x.fill_, 3.0)      # on the CPU, done when the call returns
    assert torch.equal(x, torch.full((2,), 3.0))


def test_urgency_spreads_over_cudas_levels_most_urgent_lowest():
    from rt_runtime.device.cuda import cuda_level   # pure: importable without a GPU

    levels = [cuda_level(u, 0, -5) for u in (0.0, 0.2, 0.5, 0.8, 1.0, 7.0, -1.0)]
    assert levels == [0, -1, -2, -4, -5, -5, 0]
    assert cuda_level(1.0, 0, 0) == 0            # a device without priorities: one level for all


@pytest.mark.cuda
def test_cuda_streams_are_owned_not_pooled_and_carry_their_level():
    twin = device_for("cuda")
    streams = [twin.stream(urgency=i / 39) for i in range(40)]   # past torch's 32 per level
    assert len({s.cuda_stream for s in streams}) == 40
    least, greatest = twin.priority_levels
    assert streams[0].priority == least and streams[-1].priority == greatest
