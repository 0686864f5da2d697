"""Parallel commit (sched/parallel.py): jobs computed on N threads, committed in logical order.

A small task set with the cases that need care: a task reading another's output (LET publish), a
chain handing outputs over at finish, an op that raises on some inputs, ops that sleep at random so
threads finish in any order, and metadata rows reused round-robin. For every N the outputs, the
counters and the trace (but the measured CPU times) are the same.
"""
from __future__ import annotations

import random
import time

import pytest
import torch

from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.core.chain import Chain
from rt_runtime.sched import RecordingSink, Runtime, TaskBinding, VirtualClock
from rt_runtime.sched.budget import BudgetCost
from rt_runtime.sched.events import EventKind
from rt_runtime.sched.meta import meta_spec

MS = 1_000_000
F = "float32"


def graph(name: str, ins: list[str], fail_on: int | None = None, meta: str | None = None) -> Graph:
    """``y = sum(inputs) * 1.5 + 1`` over three ops; op 1 raises when the first input's value % 7 == fail_on."""
    rng = random.Random(name)
    specs = [TensorSpec(n, (4,), F) for n in ins] + ([meta_spec(meta)] if meta else [])

    def jitter() -> None:
        time.sleep(rng.random() * 0.0006)   # threads finish in any order

    def add(*args: torch.Tensor) -> None:
        jitter()
        *xs, o = args
        o.zero_()
        for x in xs:
            o.add_(x.to(torch.float32)[:4] if x.dtype == torch.int64 else x)

    def scale(a: torch.Tensor, o: torch.Tensor) -> None:
        jitter()
        if fail_on is not None and int(a[0].item()) % 7 == fail_on:
            raise RuntimeError(f"{name}: bad frame {a[0].item()}")
        torch.mul(a, 1.5, out=o)

    def bump(a: torch.Tensor, o: torch.Tensor) -> None:
        jitter()
        torch.add(a, 1.0, out=o)
        torch.remainder(o, 1000.0, out=o)

    s, t, y = (TensorSpec(f"{name}_{k}", (4,), F) for k in ("s", "t", "y"))
    ops = [Op("add", add, tuple(specs), (s,)), Op("scale", scale, (s,), (t,)), Op("bump", bump, (t,), (y,))]
    return Graph(name, ops, specs, [y.name])


def bindings() -> list[TaskBinding]:
    return [
        TaskBinding(Task("cam", 10 * MS, 2 * MS, deadline_ns=8 * MS), graph("cam", ["x"], fail_on=3),
                    inputs={"x": "/x"}, outputs={"cam_y": "/cam"}),
        TaskBinding(Task("radar", 10 * MS, 1 * MS, offset_ns=5 * MS), graph("radar", ["x"], meta="x"),
                    inputs={"x": "/x"}, outputs={"radar_y": "/radar"}),
        # head of a chain, then a member released by its finish (hand-over), which raises now and then
        TaskBinding(Task("fuse", 20 * MS, 4 * MS, deadline_ns=15 * MS), graph("fuse", ["c", "r"], fail_on=2),
                    inputs={"c": "/cam", "r": "/radar"}, outputs={"fuse_y": "/fuse"}),
        TaskBinding(Task("plan", 20 * MS, 5 * MS, trigger="/fuse"), graph("plan", ["f", "p"], fail_on=1),
                    inputs={"f": "/fuse", "p": "/plan"}, outputs={"plan_y": "/plan"}),
        TaskBinding(Task("log", 30 * MS, 2 * MS), graph("log", ["p", "c"]),
                    inputs={"p": "/plan", "c": "/cam"}, outputs={"log_y": "/log"}),
    ]


def drive(bs: list[TaskBinding], parallel: int | None, **kw) -> tuple[list, dict, list, Runtime]:
    """40 inputs 5 ms apart through ``bs``: the egress, the counters, the trace (but MEASURED), the runtime."""
    out: list[tuple[str, int, int, list[float]]] = []
    sink = RecordingSink()
    rt = Runtime(bs, clock=VirtualClock(), cost=BudgetCost(bs), sink=sink, parallel=parallel,
                 egress=lambda ch, t, seq, data: out.append((ch, t, seq, data.tolist())),
                 chains=[Chain("fuse_plan", ("fuse", "plan"), 18 * MS)], check_inputs=False, **kw)
    rt.sched.hw = True
    try:
        rt.push("/plan", 0, torch.zeros(4))
        for k in range(40):
            rt.push("/x", k * 5 * MS, torch.full((4,), float(k)))
            rt.run_until(k * 5 * MS + 4 * MS)
        rt.run_until(220 * MS)
    finally:
        rt.close()
    events = [(e.kind, e.t_ns, e.task, e.job_index, e.a, e.b) for e in sink.events if e.kind != EventKind.MEASURED]
    return out, rt.stats(), events, rt


def run(parallel: int | None, workers: int = 1) -> tuple[list, dict, list]:
    return drive(bindings(), parallel, workers=workers)[:3]


def test_every_thread_count_gives_the_same_outputs_counters_and_trace() -> None:
    ref_out, ref_stats, ref_events = run(1)
    assert ref_stats["cam"]["errors"] > 0 and ref_stats["plan"]["errors"] > 0   # the error paths ran
    assert ref_stats["plan"]["published"] > 5 and any(ch == "/log" for ch, *_ in ref_out)
    for n in (2, 3):
        out, stats, events = run(n)
        assert out == ref_out
        assert stats == ref_stats
        assert events == ref_events
    out, stats, _ = run(3, workers=2)   # two processors in the simulated schedule, three threads computing
    assert [o for o in out if o[0] == "/plan"] == [o for o in ref_out if o[0] == "/plan"]


def test_the_serial_driver_publishes_the_same_outputs() -> None:
    """The driver that runs each op where it is booked (no pool): same outputs; only where an op raised
    does its trace differ (the serial driver ends the job at that op, parallel commit at its deadline)."""
    out, stats, _ = run(None)
    ref_out, ref_stats, _ = run(2)
    assert out == ref_out
    assert {n: s["errors"] for n, s in stats.items()} == {n: s["errors"] for n, s in ref_stats.items()}


def test_measured_steps_are_traced_once_per_op_of_each_computed_job() -> None:
    bs = bindings()[:2]
    sink = RecordingSink()
    rt = Runtime(bs, clock=VirtualClock(), cost=BudgetCost(bs), sink=sink, parallel=2, check_inputs=False)
    rt.sched.hw = True
    for k in range(6):
        rt.push("/x", k * 5 * MS, torch.full((4,), float(k)))
    rt.run_until(40 * MS)
    rt.close()
    steps: dict[tuple[str, int], list[int]] = {}
    for e in sink.of(EventKind.MEASURED):
        steps.setdefault((e.task, e.job_index), []).append(e.a)
    assert steps and all(v == [0, 1, 2] for v in steps.values())
    assert [e.t_ns for e in sink.events] == sorted(e.t_ns for e in sink.events)   # traced in logical order


def test_parallel_needs_a_logical_schedule() -> None:
    bs = bindings()[:1]
    with pytest.raises(ValueError, match="budget timing"):
        Runtime(bs, clock=VirtualClock(), parallel=2)   # measured timing: op times are known only after


def test_a_redundant_task_books_its_nominal_steps_and_votes_the_same_for_every_thread_count() -> None:
    """Dual redundancy whose second copy is corrupted now and then: the vote (a third copy, not booked)
    happens on the pool, its COMPARE verdict is traced when the job is settled, the same for every N."""
    from rt_runtime.safety.redundancy import Redundant
    from rt_runtime.safety.spec import RedundancySpec
    from rt_runtime.sched.events import COMPARE_MATCH, COMPARE_VOTED

    def run_red(parallel: int) -> tuple[list, list, dict]:
        calls = [0]
        x, y = TensorSpec("x", (4,), F), TensorSpec("y", (4,), F)

        def op(a: torch.Tensor, o: torch.Tensor) -> None:
            calls[0] += 1   # copies run in order, one job of a task at a time: the same calls for every N
            torch.mul(a, 3.0, out=o)
            if calls[0] % 5 == 2:
                o.add_(1.0)   # a corrupted copy
        b = TaskBinding(Task("R", 10 * MS, 4 * MS), Graph("r", [Op("op", op, (x,), (y,))], [x], ["y"]),
                        inputs={"x": "/x"}, outputs={"y": "/y"}, executor=Redundant(RedundancySpec()))
        out: list = []
        sink = RecordingSink()
        rt = Runtime([b], clock=VirtualClock(), cost=BudgetCost([b]), sink=sink, parallel=parallel,
                     egress=lambda ch, t, seq, d: out.append((t, d.tolist())))
        for k in range(12):
            rt.push("/x", k * 10 * MS, torch.full((4,), float(k)))
        rt.run_until(130 * MS)
        rt.close()
        finishes = [e.t_ns - e2.t_ns for e, e2 in zip(sink.of(EventKind.FINISH), sink.of(EventKind.START))]
        return out, [(e.job_index, e.a, e.b) for e in sink.of(EventKind.COMPARE)], {"finish": finishes}

    ref_out, ref_cmp, ref_t = run_red(1)
    assert {a for _, a, _ in ref_cmp} == {COMPARE_MATCH, COMPARE_VOTED}   # both paths ran
    assert all(v == [3.0 * min(t // (10 * MS) - 1, 11)] * 4 for t, v in ref_out)   # the vote masked each corruption
    assert set(ref_t["finish"]) == {4 * MS}   # its nominal two runs, voted (a third run) or not
    for n in (2, 3):
        assert run_red(n) == (ref_out, ref_cmp, ref_t)
