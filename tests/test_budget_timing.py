"""Budget timing (sched/budget.py) and the hardware timeline (analysis/hardware.py), part by part."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
import yaml

from rt_runtime.analysis.hardware import HwJob, hardware_report, simulate
from rt_runtime.config import ConfigError
from rt_runtime.config.stack import build_bindings, load_stack
from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.core.task import TaskError
from rt_runtime.sched import RecordingSink, Runtime, TaskBinding, VirtualClock
from rt_runtime.sched.budget import BudgetCost, split_budget
from rt_runtime.sched.events import EventKind
from rt_runtime.trace import TraceRing

MS = 1_000_000
ROOT = Path(__file__).resolve().parents[1]


def chain(name: str, costs_us: list[float], sleep_s: float = 0.0) -> Graph:
    """Ops ``v <- v + 1``; each sleeps ``sleep_s`` (CPU time stays small, wall time grows)."""
    ops, prev = [], TensorSpec("x", (1,), "float32")
    for i, c in enumerate(costs_us):
        out = TensorSpec(f"v{i}", (1,), "float32")

        def fn(a: torch.Tensor, o: torch.Tensor) -> None:
            if sleep_s:
                time.sleep(sleep_s)
            torch.add(a, 1.0, out=o)
            for _ in range(2000 if not sleep_s else 0):   # CPU work: measurable thread time
                o.add_(0.0)
        ops.append(Op(f"op{i}", fn, (prev,), (out,), cost_us=c))
        prev = out
    return Graph(name, ops, [TensorSpec("x", (1,), "float32")], [prev.name])


def test_the_budget_is_split_by_declared_cost_and_op_budgets() -> None:
    g = chain("g", [1.0, 3.0, 1.0])
    assert split_budget("T", g, 10 * MS, {}) == [2 * MS, 6 * MS, 2 * MS]
    assert split_budget("T", g, 10 * MS, {"op1": 1 * MS}) == [int(4.5 * MS), 1 * MS, int(4.5 * MS)]
    assert sum(split_budget("T", chain("h", [1.0] * 3), 10 * MS + 1, {})) == 10 * MS + 1   # to the ns
    assert split_budget("T", g, 10 * MS, {"op0": 1, "op1": 2, "op2": 3}) == [1, 2, 3]
    with pytest.raises(TaskError, match="op_budgets.*add up to 11.000 ms"):
        split_budget("T", g, 10 * MS, {"op0": 5 * MS, "op1": 6 * MS})


def test_budget_timing_ignores_the_machine_and_keeps_misses_logical() -> None:
    """A task whose ops sleep 3 ms each (a slow machine) still finishes at its budget in logical time;
    a deadline below the budget misses at the same instant on every run, and the run stays deterministic."""
    def run(deadline_ms: int, sleep_s: float) -> tuple[Runtime, RecordingSink]:
        b = TaskBinding(Task("T", 10 * MS, 4 * MS, deadline_ns=deadline_ms * MS), chain("t", [1.0, 1.0], sleep_s),
                        inputs={"x": "/x"}, outputs={"v1": "/y"})
        sink = RecordingSink()
        rt = Runtime([b], clock=VirtualClock(), cost=BudgetCost([b]), sink=sink)
        rt.sched.hw = True
        rt.push("/x", 0, torch.zeros(1))
        rt.run_until(40 * MS)
        return rt, sink

    rt, sink = run(10, 0.003)
    assert rt.logical and [e.t_ns for e in sink.of(EventKind.FINISH)] == [4 * MS, 14 * MS, 24 * MS, 34 * MS]
    assert rt.stats()["T"]["overruns"] == 0
    measured = sink.of(EventKind.MEASURED)
    assert len(measured) >= 8 and [e.a for e in measured[:2]] == [0, 1]   # one per op, CPU time beside it
    rt_a, sink_a = run(3, 0.0)
    rt_b, sink_b = run(3, 0.002)
    assert rt_a.stats()["T"]["missed"] == 4 and rt_a.deterministic
    key = lambda s: [(e.kind, e.t_ns, e.task, e.job_index) for e in s.events if e.kind != EventKind.MEASURED]  # noqa: E731
    assert key(sink_a) == key(sink_b)


def job(task: str, r: int, d: int, key: int, ops: list[int], budget: int = 10) -> HwJob:
    return HwJob(task, 0, r, r + d, budget, 0, (key,), ops)


def test_the_hardware_timeline_says_why() -> None:
    # Blocking: a less urgent job's 5-unit op runs when the urgent one is released at 1; deadline 4.
    lo, hi = job("lo", 0, 100, 2, [5, 5]), job("hi", 1, 4, 1, [2])
    simulate([lo, hi])
    assert (hi.start_ns, hi.finish_ns, hi.blocking_ns, hi.interference_ns) == (5, 7, 4, 0)
    assert hi.late_ns == 2 and hi.cause == "blocking"
    assert lo.finish_ns == 12 and lo.interference_ns == 2   # preempted at its op boundary
    # Interference: two more urgent jobs released with it run first.
    a, b, c = job("a", 0, 50, 1, [3]), job("b", 0, 50, 2, [3]), job("c", 0, 5, 3, [1])
    simulate([c, b, a])
    assert c.finish_ns == 7 and c.interference_ns == 6 and c.cause == "interference"
    # Overrun: alone, but it took 12 of a 10-unit budget and its deadline is 11.
    o = job("o", 0, 11, 1, [6, 6])
    simulate([o])
    assert o.late_ns == 1 and o.cause == "overrun"


def test_the_hardware_report_reads_a_trace() -> None:
    ring = TraceRing(1024)
    K = EventKind
    for j, r in enumerate((0, 10 * MS)):
        ring.emit(K.RELEASE, r, "T", j, 0, 0)
        ring.emit(K.MEASURED, r, "T", j, 0, 3 * MS)
        ring.emit(K.MEASURED, r + MS, "T", j, 1, 4 * MS + j * 2 * MS)
    cols = ring.drain()
    meta = {"policy": "edf", "tasks_config": {"T": {"deadline_ns": 8 * MS, "wcet_ns": 6 * MS, "rank": 0}}}
    hw = hardware_report(cols, meta)
    t = hw["tasks"][0]
    assert hw["source"] == "simulated" and (t["overruns"], t["misses"]) == (2, 1)
    assert t["exec_ms"]["max"] == 9.0 and hw["missed"][0]["late_ms"] == 1.0 and hw["missed"][0]["cause"] == "overrun"


def test_op_budgets_in_a_config_are_checked(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "config" / "stack.yaml").read_text())
    radar = next(t for t in doc["tasks"] if t["name"] == "radar_objects")
    radar["op_budgets"] = {"radar_clustr": "1ms"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match=r"bad.yaml: task 'radar_objects': op_budgets: no op named \['radar_clustr'\]"):
        build_bindings(load_stack(path))
    radar["op_budgets"] = {"radar_cluster": 1}   # a bare number: no unit
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match="bad.yaml: task 'radar_objects'.*op_budgets"):
        load_stack(path)
    radar["op_budgets"] = {"radar_cluster": "1s"}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match="radar_objects.*add up to 1000.000 ms, more than one run's budget"):
        build_bindings(load_stack(path))
