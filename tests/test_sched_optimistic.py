"""Optimistic parallel commit (sched/optimistic.py): results published on a bet before they are computed.

The task set of test_sched_parallel.py, with ops slow enough that the driver, booking on the virtual
clock, always reaches a job's deadline before its computation ends: the bets are placed. Won, they
give the outputs, counters and trace of parallel commit that waits at each publish; lost (an op
raises in a job published on a bet), the run says so (``Mispredicted``) instead of going on with a
schedule that assumed otherwise.
"""
from __future__ import annotations

import time

import pytest
import torch

from rt_runtime.core import Graph, Op
from rt_runtime.sched import Runtime, TaskBinding
from rt_runtime.sched.events import EventKind
from rt_runtime.sched.optimistic import Mispredicted, OptimisticCommit

from test_sched_parallel import bindings as serial_bindings, drive


def slow(fail_at: float | None = None) -> list[TaskBinding]:
    """The parallel-commit task set with no op errors, each op first sleeping 1 ms (GIL released);
    ``fail_at``: camera's op raises on the frame of that value."""
    out = []
    for b in serial_bindings():
        ops = []
        for k, op in enumerate(b.graph.ops):
            def fn(*args: torch.Tensor, _fn=op.fn, _k=k, _task=b.name) -> None:
                time.sleep(0.001)
                if _k == 1:   # the set's own errors (``fail_on``) off: this op is a plain scale here
                    if _task == "cam" and fail_at is not None and float(args[0][0]) == fail_at:
                        raise RuntimeError(f"cam: bad frame {fail_at}")
                    torch.mul(args[0], 1.5, out=args[1])
                    return
                _fn(*args)
            ops.append(Op(op.name, fn, op.inputs, op.outputs))
        g = b.graph
        out.append(TaskBinding(b.task, Graph(g.name, ops, g.inputs, [s.name for s in g.outputs]),
                               inputs=b.inputs, outputs=b.outputs))
    return out


def run(parallel: int, optimistic: bool, fail_at: float | None = None) -> tuple[list, dict, list, Runtime]:
    return drive(slow(fail_at), parallel, optimistic=optimistic)


def test_won_bets_give_the_outputs_counters_and_trace_of_parallel_commit() -> None:
    ref_out, ref_stats, ref_events, _ = run(1, False)
    assert ref_stats["plan"]["published"] > 5 and any(ch == "/log" for ch, *_ in ref_out)
    for n in (2, 3):
        out, stats, events, rt = run(n, True)
        par = rt.sched.par
        assert isinstance(par, OptimisticCommit) and par.bets > 20   # the driver ran ahead of the threads
        assert out == ref_out   # egress held until each bet was settled, in publish order
        assert stats == ref_stats
        assert events == ref_events
        assert all(c["grows"] == 0 for c in rt.channel_stats().values())   # full channels settled bets instead
        measured = [e.t_ns for e in rt.sched.sink.events if e.kind == EventKind.MEASURED]
        assert measured == sorted(measured) and len(measured) > 0   # steps traced where settled, in order


def test_one_thread_places_no_bet() -> None:
    *_, rt = run(1, True)
    assert isinstance(rt.sched.par, OptimisticCommit) and rt.sched.par.bets == 0


def test_a_lost_bet_says_which_job_and_stops_the_run() -> None:
    ref_out, ref_stats, *_ = run(1, False, fail_at=10.0)
    assert ref_stats["cam"]["errors"] == 1   # parallel commit: the job that raised is aborted, unpublished
    with pytest.raises(Mispredicted, match=r"task 'cam' job \d+, published at its deadline on a bet: op error"):
        run(2, True, fail_at=10.0)


def test_a_chain_member_settles_bets_before_its_full_channel_grows(monkeypatch) -> None:
    """A chain member's slots are reserved through the one release path (scheduler.admit): where its
    channel is full of slots held by bets, the oldest bets are settled, as for any task, instead of the
    channel growing a slot (chains.open_instance reserved directly, skipping that, on 43d92bc)."""
    import rt_runtime.sched.runtime as runtime_mod
    from rt_runtime.core import Task, TensorSpec
    from rt_runtime.core.chain import Chain
    from rt_runtime.sched import RecordingSink, VirtualClock
    from rt_runtime.sched.budget import BudgetCost

    monkeypatch.setattr(runtime_mod, "BETS_AHEAD", 0)   # no spare slots: every full channel must settle a bet
    ms = 1_000_000
    x, y = TensorSpec("x", (4,), "float32"), TensorSpec("y", (4,), "float32")

    def quick(a: torch.Tensor, o: torch.Tensor) -> None:
        torch.add(a, 1.0, out=o)

    def slow_op(a: torch.Tensor, o: torch.Tensor) -> None:
        time.sleep(0.01)   # the driver, booking on the virtual clock, runs far ahead of this computation
        torch.mul(a, 2.0, out=o)

    bs = [TaskBinding(Task("head", 10 * ms, 1 * ms, trigger="/in"), Graph("h", [Op("h", quick, (x,), (y,))], [x], ["y"]),
                      inputs={"x": "/in"}, outputs={"y": "/h"}),
          TaskBinding(Task("member", 10 * ms, 2 * ms), Graph("m", [Op("m", slow_op, (x,), (y,))], [x], ["y"]),
                      inputs={"x": "/h"}, outputs={"y": "/m"})]
    out: list = []
    rt = Runtime(bs, clock=VirtualClock(), cost=BudgetCost(bs), sink=RecordingSink(), parallel=2, optimistic=True,
                 egress=lambda ch, t, seq, d: out.append((ch, t, d.tolist())),
                 chains=[Chain("hm", ("head", "member"), 8 * ms)], check_inputs=False)
    try:
        for k in range(30):
            rt.push("/in", k * 10 * ms, torch.full((4,), float(k)))
        rt.run_until(320 * ms)
    finally:
        rt.close()
    assert rt.sched.par.bets > 10   # the member's results were published before they were computed
    assert sorted({d[0] for ch, _, d in out if ch == "/m"}) == [2.0 * (k + 1) for k in range(30)]
    assert rt.channel_stats()["/m"]["grows"] == 0
