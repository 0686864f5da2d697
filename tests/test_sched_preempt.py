"""Limited preemption: a more urgent release switches jobs at the next op boundary, never mid-op."""
from __future__ import annotations

import time

import pytest
import torch

from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.sched import EventKind, RecordingSink, Runtime, TaskBinding, WallClock, declared_cost

MS = 1_000_000


def chain(name: str, n_ops: int, cost_ms: float, sleep_s: float = 0.0) -> Graph:
    """``n_ops`` real matmul ops in a chain; each declared to take ``cost_ms`` (and, live, to sleep)."""
    specs = [TensorSpec(f"t{i}", (8, 8), "float32") for i in range(n_ops + 1)]

    def step(a: torch.Tensor, o: torch.Tensor) -> None:
        torch.matmul(a, a, out=o)
        o.clamp_(-1.0, 1.0)
        if sleep_s:
            time.sleep(sleep_s)

    first = Op("op0", lambda o: (o.fill_(0.5), time.sleep(sleep_s) if sleep_s else None), (), (specs[1],),
               cost_us=cost_ms * 1000)
    ops = [first] + [Op(f"op{i}", step, (specs[i],), (specs[i + 1],), cost_us=cost_ms * 1000)
                     for i in range(1, n_ops)]
    return Graph(name, ops, [], [specs[n_ops].name])


def _scenario(policy: str) -> RecordingSink:
    sink = RecordingSink()
    low = Task("L", 100 * MS, 12 * MS, deadline_ns=50 * MS, priority=2)
    high = Task("H", 100 * MS, 2 * MS, deadline_ns=5 * MS, offset_ns=3 * MS, priority=1)
    rt = Runtime([TaskBinding(low, chain("l", 5, 2.0)), TaskBinding(high, chain("h", 1, 1.0))],
                 policy=policy, cost=declared_cost, sink=sink)
    rt.run_until(60 * MS)
    assert not rt.errors and rt.stats()["H"]["missed"] == 0
    return sink


@pytest.mark.parametrize("policy", ["fp", "edf", "dm"])
def test_higher_priority_release_preempts_at_the_next_op_boundary(policy: str) -> None:
    sink = _scenario(policy)
    # L's ops: [0,2] [2,4] ...; H is released at 3 ms, mid-op, and waits for the boundary at 4 ms.
    pre = sink.of(EventKind.PREEMPT, "L")
    assert [(e.t_ns, e.b) for e in pre] == [(4 * MS, 2)]
    assert sink.of(EventKind.START, "H")[0].t_ns == 4 * MS
    assert sink.of(EventKind.FINISH, "H")[0].t_ns == 5 * MS
    assert [(e.t_ns, e.b) for e in sink.of(EventKind.RESUME, "L")] == [(5 * MS, 2)]
    assert sink.of(EventKind.FINISH, "L")[0].t_ns == 11 * MS
    # No op was cut: every OP_END of L is 2 ms after its OP_START.
    starts = [e.t_ns for e in sink.of(EventKind.OP_START, "L")]
    ends = [e.t_ns for e in sink.of(EventKind.OP_END, "L")]
    assert [b - a for a, b in zip(starts, ends)] == [2 * MS] * 5


def test_a_less_urgent_release_does_not_preempt() -> None:
    sink = RecordingSink()
    a = Task("A", 100 * MS, 12 * MS, priority=1)
    b = Task("B", 100 * MS, 2 * MS, offset_ns=3 * MS, priority=2)
    rt = Runtime([TaskBinding(a, chain("a", 5, 2.0)), TaskBinding(b, chain("b", 1, 1.0))], policy="fp",
                 cost=declared_cost, sink=sink)
    rt.run_until(30 * MS)
    assert not sink.of(EventKind.PREEMPT) and sink.of(EventKind.START, "B")[0].t_ns == 10 * MS


@pytest.mark.wallclock
@pytest.mark.parametrize("threaded", [False, True])
def test_preemption_at_op_boundaries_live_on_the_wall_clock(threaded: bool) -> None:
    # H is released 100 ms after L, in L's second op of 60 ms: L may start that late on a loaded machine.
    sink = RecordingSink()
    low = Task("L", 1000 * MS, 400 * MS, priority=2)
    high = Task("H", 1000 * MS, 50 * MS, deadline_ns=500 * MS, offset_ns=100 * MS, priority=1)
    rt = Runtime([TaskBinding(low, chain("l", 4, 60, sleep_s=0.06)), TaskBinding(high, chain("h", 1, 1))],
                 policy="fp", clock=WallClock(), threaded=threaded, realtime=False, sink=sink)
    try:
        rt.run_until(500 * MS)
        deadline = time.monotonic() + 30
        while not sink.of(EventKind.FINISH, "L") and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        rt.close()
    pre = sink.of(EventKind.PREEMPT, "L")
    assert len(pre) == 1 and pre[0].b >= 1          # switched after a whole op, never inside one
    h_start = sink.of(EventKind.START, "H")[0].t_ns
    l_ends = [e.t_ns for e in sink.of(EventKind.OP_END, "L")]
    l_starts = [e.t_ns for e in sink.of(EventKind.OP_START, "L")]
    k = pre[0].b
    assert l_ends[k - 1] <= h_start <= l_starts[k]   # H ran in the gap between two of L's ops
    assert h_start >= 100 * MS
