"""Work-conserving dispatch (``steal``): an idle worker takes a busy worker's waiting job; outputs and
their instants do not change; a task's jobs never run on two workers at once (sched/dispatch.py)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.sched import EventKind, RecordingSink, Runtime, TaskBinding, VirtualClock
from rt_runtime.sched.budget import BudgetCost

MS = 1_000_000
X, Y = TensorSpec("x", (1,), "float32"), TensorSpec("y", (1,), "float32")


def steps(name: str, n: int, each_ms: float) -> Graph:
    """y = x + n, in n ops of ``each_ms`` declared cost."""
    specs = [X] + [TensorSpec(f"s{i}", (1,), "float32") for i in range(1, n)] + [Y]
    ops = [Op(f"{name}{i}", lambda a, o: torch.add(a, 1.0, out=o), (specs[i],), (specs[i + 1],), cost_us=each_ms * 1000)
           for i in range(n)]
    return Graph(name, ops, [X], ["y"])


def run(bindings: list[TaskBinding], workers: int, steal: bool, until_ms: int):
    sink, out = RecordingSink(), []
    rt = Runtime(bindings, policy="fp", clock=VirtualClock(), cost=BudgetCost(bindings), workers=workers, steal=steal,
                 sink=sink,
                 egress=lambda ch, t, seq, d: out.append((ch, t, float(d[0]))))
    rt.push("/in", 0, torch.zeros(1))
    rt.run_until(until_ms * MS)
    assert not rt.errors
    return rt, sink, out


def starts(sink: RecordingSink, task: str) -> list[tuple[int, int, int]]:
    """(job, t ms, worker) of each START and RESUME of ``task``."""
    return [(e.job_index, e.t_ns // MS, e.a) for e in sink.events
            if e.task == task and e.kind in (EventKind.START, EventKind.RESUME)]


def test_an_idle_worker_takes_a_waiting_job_and_the_outputs_do_not_change() -> None:
    def tasks(pin: bool = True):
        return [b if pin else dataclasses.replace(b, worker=None) for b in [TaskBinding(Task("A", 20 * MS, 5 * MS, priority=1), steps("a", 1, 5), inputs={"x": "/in"},
                            outputs={"y": "/a"}, worker=0),
                TaskBinding(Task("B", 20 * MS, 5 * MS, priority=2), steps("b", 5, 1), inputs={"x": "/in"},
                            outputs={"y": "/b"}, worker=0),
                TaskBinding(Task("C", 20 * MS, 3 * MS, offset_ns=2 * MS, priority=0), steps("c", 1, 3),
                            inputs={"x": "/in"}, outputs={"y": "/c"}, worker=1)]]
    rt, sink, out = run(tasks(), 2, True, 60)
    # B waits behind A on worker 0; worker 1 is idle and takes it at 0. C (released at 2 on worker 1)
    # preempts it at an op boundary; B goes back to worker 0's queue and resumes there when A ends at 5.
    assert starts(sink, "B")[:2] == [(0, 0, 1), (0, 5, 0)]
    assert [e.t_ns // MS for e in sink.of(EventKind.PREEMPT, "B")][:1] == [2]
    assert rt.stats()["B"]["taken"] == rt.stats()["B"]["released"] and rt.stats()["A"]["taken"] == 0
    fin = {e.job_index: e.t_ns // MS for e in sink.of(EventKind.FINISH, "B")}
    _, sink0, out0 = run(tasks(), 2, False, 60)
    fin0 = {e.job_index: e.t_ns // MS for e in sink0.of(EventKind.FINISH, "B")}
    assert fin[0] == 8 and fin0[0] == 10 and all(fin[k] <= fin0[k] for k in fin0)   # never later
    _, _, out1 = run(tasks(pin=False), 1, False, 60)
    assert out == out0 == out1 and len(out) == 8   # LET: the same messages at the same instants


def test_a_task_never_runs_on_two_workers_at_once() -> None:
    """T (period 4, deadline 10, six 1 ms ops) is taken by worker 1 while L holds worker 0; worker 0
    is idle again at 2, but T's next job (released at 4) waits until T's job 0 ends on worker 1 at 6."""
    bindings = [TaskBinding(Task("L", 40 * MS, 2 * MS, priority=0), steps("l", 1, 2), inputs={"x": "/in"},
                            outputs={"y": "/l"}, worker=0),
                TaskBinding(Task("T", 4 * MS, 6 * MS, deadline_ns=10 * MS, priority=1), steps("t", 6, 1),
                            inputs={"x": "/in"}, outputs={"y": "/t"}, worker=0),
                TaskBinding(Task("I", 40 * MS, 1 * MS, offset_ns=30 * MS, priority=2), steps("i", 1, 1),
                            inputs={"x": "/in"}, outputs={"y": "/i"}, worker=1)]
    _, sink, _ = run(bindings, 2, True, 12)
    assert starts(sink, "T")[:2] == [(0, 0, 1), (1, 6, 0)]
    spans, running = [], {}
    for e in sink.events:   # no two ops of T overlap in time, whichever worker ran them
        if e.task == "T" and e.kind == EventKind.OP_START:
            running[e.job_index] = e.t_ns
        elif e.task == "T" and e.kind == EventKind.OP_END:
            spans.append((running.pop(e.job_index), e.t_ns))
    spans.sort()
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


@pytest.mark.wallclock
def test_the_wall_clock_threads_take_jobs_too() -> None:
    """Two worker threads, every task on worker 0 by hand: with steal, worker 1 runs some of them. Periods
    of 50 ms: a loaded machine may wake a worker late, by less than that."""
    from rt_runtime.sched import WallClock

    bindings = [TaskBinding(Task(n, 50 * MS, 2 * MS, priority=k), steps(n.lower(), 2, 1), inputs={"x": "/in"},
                            outputs={"y": f"/{n}"}, worker=0) for k, n in enumerate("PQR")]
    sink = RecordingSink()
    rt = Runtime(bindings, clock=WallClock(), workers=2, threaded=True, realtime=False, steal=True, sink=sink)
    rt.push("/in", 0, torch.zeros(1))
    rt.run_until(1000 * MS)
    rt.close()
    workers = {e.a for e in sink.of(EventKind.START)}
    assert workers == {0, 1} and sum(rt.stats()[n]["taken"] for n in "PQR") > 0
    assert all(rt.stats()[n]["published"] >= 15 for n in "PQR")


def test_the_analysis_charges_each_worker_one_op_of_a_taken_job() -> None:
    """``check``'s holistic analysis with ``steal``: a task may wait for one op of another worker's task
    (its longest op when known, else its whole budget), and that is all it adds."""
    from rt_runtime.analysis.cpa import holistic

    tasks = [Task("A", 20 * MS, 4 * MS, priority=0), Task("B", 10 * MS, 2 * MS, priority=1)]
    where = {"A": 0, "B": 1}
    plain = {t.name: t.response_ns for t in holistic(tasks, "fp", partition=where).timings}
    taken = {t.name: t.response_ns for t in holistic(tasks, "fp", partition=where, steal=True).timings}
    ops = {t.name: t.response_ns for t in holistic(tasks, "fp", partition=where, steal=True,
                                                   longest_op={"A": 1 * MS, "B": 1 * MS}).timings}
    assert plain == {"A": 4 * MS, "B": 2 * MS}
    assert taken == {"A": 6 * MS, "B": 6 * MS}   # B's whole 2 ms before A; A's whole 4 ms before B
    assert ops == {"A": 5 * MS, "B": 3 * MS}     # one 1 ms op


def test_a_taken_job_yields_to_any_job_of_the_worker_that_took_it() -> None:
    """Worker 1 takes B (more urgent than its own L) while worker 0 runs A; L, released at 2, waits one
    op of B, not all of it: B goes back to worker 0 and resumes there when A ends."""
    bindings = [TaskBinding(Task("A", 40 * MS, 10 * MS, priority=0), steps("a", 1, 10), inputs={"x": "/in"},
                            outputs={"y": "/a"}, worker=0),
                TaskBinding(Task("B", 40 * MS, 6 * MS, priority=1), steps("b", 6, 1), inputs={"x": "/in"},
                            outputs={"y": "/b"}, worker=0),
                TaskBinding(Task("L", 40 * MS, 2 * MS, offset_ns=2 * MS, priority=2), steps("l", 1, 2),
                            inputs={"x": "/in"}, outputs={"y": "/l"}, worker=1)]
    _, sink, _ = run(bindings, 2, True, 30)
    assert starts(sink, "B")[:2] == [(0, 0, 1), (0, 10, 0)]   # taken at 0; resumed at home when A ends
    assert starts(sink, "L")[0] == (0, 2, 1)                  # at B's first op boundary after its release
    assert [e.t_ns // MS for e in sink.of(EventKind.FINISH, "B")][:1] == [14]   # 2 ops on 1, 4 on 0
