"""Clocks: virtual time jumps; wall time sleeps to an instant (sanity bounds only: speed is benched)."""
from __future__ import annotations

import threading
import time

import torch

from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.sched import EventKind, RecordingSink, Runtime, TaskBinding, VirtualClock, WallClock
from rt_runtime.sched import measure_overshoot

MS = 1_000_000
SANE = 50 * MS   # no timed assertion is tighter than this: CI machines are shared


def test_virtual_clock_jumps_and_never_goes_back() -> None:
    c = VirtualClock()
    t0 = time.perf_counter()
    c.sleep_until(10**15)          # eleven days of virtual time, at once
    assert c.now() == 10**15 and time.perf_counter() - t0 < 0.1
    c.sleep_until(5)
    c.advance(-3)
    assert c.now() == 10**15
    c.advance(7)
    assert c.now() == 10**15 + 7


def test_wall_clock_wakes_at_the_instant_not_before_and_not_much_after() -> None:
    c = WallClock()
    late = measure_overshoot(c, n=20, ahead_ns=2 * MS)
    assert all(0 <= x < SANE for x in late)
    assert c.now() >= 40 * MS and c.spin_margin_ns() > 0


def test_wall_clock_sleep_can_be_interrupted() -> None:
    c, wake = WallClock(), threading.Event()
    threading.Timer(0.02, wake.set).start()
    t0 = c.now()
    assert c.sleep_until(t0 + 5_000 * MS, wake) is True
    assert c.now() - t0 < 2_000 * MS


def _copy() -> Graph:
    x, y = TensorSpec("x", (1,), "float32"), TensorSpec("y", (1,), "float32")
    return Graph("copy", [Op("copy", lambda a, o: o.copy_(a), (x,), (y,))], [x], ["y"])


def _tick() -> Graph:
    y = TensorSpec("y", (1,), "float32")
    return Graph("tick", [Op("tick", lambda o: o.fill_(1.0), (), (y,))], [], ["y"])


def test_periodic_task_on_the_wall_clock_is_released_on_time() -> None:
    sink = RecordingSink()
    rt = Runtime([TaskBinding(Task("p", 10 * MS, 2 * MS), _tick(), outputs={"y": "/t"})], clock=WallClock(),
                 sink=sink)
    rt.run_until(200 * MS)
    starts = {e.job_index: e.t_ns for e in sink.of(EventKind.START, "p")}
    releases = {e.job_index: e.t_ns for e in sink.of(EventKind.RELEASE, "p")}
    assert len(releases) == 21 and releases[20] == 200 * MS
    assert all(0 <= starts[k] - releases[k] < SANE for k in starts)
    assert rt.stats()["p"]["published"] == 20 and rt.now >= 200 * MS


def test_message_pushed_from_another_thread_releases_a_triggered_task_inline() -> None:
    sink = RecordingSink()
    rt = Runtime([TaskBinding(Task("e", 5 * MS, 1 * MS, trigger="/in"), _copy(), inputs={"x": "/in"},
                              outputs={"y": "/out"})], clock=WallClock(), sink=sink)
    pushed: list[int] = []

    def sensor() -> None:
        time.sleep(0.05)
        t = rt.now
        pushed.append(t)
        rt.push("/in", t, torch.ones(1))

    threading.Thread(target=sensor).start()
    rt.run_until(300 * MS)
    rel, start = sink.of(EventKind.RELEASE, "e"), sink.of(EventKind.START, "e")
    assert len(rel) == 1 and rel[0].t_ns == pushed[0] and 0 <= start[0].t_ns - pushed[0] < SANE
