"""The scheduler's declared hooks (docs/ARCHITECTURE.md, "One job path, eight modes"): an extension
sees what the hook promises and the trace stays what it was without it."""
from __future__ import annotations

import torch

from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.sched import RecordingSink, Runtime, TaskBinding, VirtualClock
from rt_runtime.sched.budget import BudgetCost
from rt_runtime.sched.events import HOT, EventKind

MS = 1_000_000
X, Y = TensorSpec("x", (1,), "float32"), TensorSpec("y", (1,), "float32")


def run(listen: bool, hot: bool = False) -> tuple[list, list, Runtime]:
    """A task that misses every other job (its budget past its deadline on odd jobs), with or without a listener."""
    g = Graph("g", [Op("inc", lambda x, y: torch.add(x, 1.0, out=y), (X,), (Y,))], [X], ["y"])
    b = TaskBinding(Task("T", 10 * MS, 2 * MS, deadline_ns=5 * MS), g, inputs={"x": "/in"}, outputs={"y": "/out"})
    budget = BudgetCost([b])

    def cost(task, job, i, op, measured):
        return 7 * MS if job % 2 else budget(task, job, i, op, measured)
    sink, heard = RecordingSink(), RecordingSink()
    rt = Runtime([b], clock=VirtualClock(), cost=cost, sink=sink)
    if listen:
        rt.sched.listen(heard, hot=hot)
    rt.push("/in", 0, torch.zeros(1))
    rt.run_until(60 * MS)
    rt.close()
    trace = [(e.kind, e.t_ns, e.task, e.job_index, e.a, e.b) for e in sink.events]
    return trace, [(e.kind, e.t_ns, e.task, e.job_index, e.a, e.b) for e in heard.events], rt


def test_a_listener_hears_every_event_but_the_high_rate_kinds_and_the_trace_is_unchanged() -> None:
    ref, _, _ = run(False)
    trace, heard, _ = run(True)
    assert trace == ref   # the tracer still gets every event, in the same order
    assert heard == [e for e in ref if e[0] not in HOT]   # the listener: the rest, in the same order
    assert any(e[0] == EventKind.MISS for e in heard) and any(e[0] == EventKind.PUBLISH for e in heard)


def test_a_hot_listener_hears_every_event_in_order_and_the_trace_is_unchanged() -> None:
    ref, _, _ = run(False)
    trace, heard, _ = run(True, hot=True)   # the live view's hook: every job's start and finish too
    assert trace == ref and heard == ref
    assert any(e[0] == EventKind.FINISH for e in heard)
