"""Policies: EDF / RM / DM / FP ordering and the fixed tie-break; partitioning onto workers."""
from __future__ import annotations

import warnings

import pytest

from rt_runtime.core import Task
from rt_runtime.sched import EDF, DM, FP, RM, EventKind, Policy, RecordingSink, Runtime, TaskBinding, declared_cost
from rt_runtime.sched import partition
from dispatch_oracle import synthetic_graph

MS = 1_000_000


def _start_order(tasks: list[Task], policy: str, costs: dict[str, list[int]] | None = None) -> list[str]:
    """Release everything at 0 on one worker; the order in which jobs start."""
    sink = RecordingSink()
    bindings = [TaskBinding(t, synthetic_graph(f"{t.name}_g", (costs or {}).get(t.name, [t.wcet_ns])))
                for t in tasks]
    rt = Runtime(bindings, policy=policy, cost=declared_cost, sink=sink)
    rt.run_until(max(t.period_ns for t in tasks) - 1)
    return [e.task for e in sink.of(EventKind.START)]


def test_edf_runs_earliest_absolute_deadline_first() -> None:
    tasks = [Task("a", 100 * MS, 1 * MS, deadline_ns=30 * MS), Task("b", 100 * MS, 1 * MS, deadline_ns=10 * MS),
             Task("c", 100 * MS, 1 * MS, deadline_ns=20 * MS, offset_ns=0)]
    assert _start_order(tasks, "edf") == ["b", "c", "a"]


def test_edf_ties_break_by_task_name_not_declaration_order() -> None:
    tasks = [Task(n, 50 * MS, 1 * MS) for n in ("zeta", "alpha", "mid")]
    assert _start_order(tasks, "edf") == ["alpha", "mid", "zeta"]
    assert _start_order(list(reversed(tasks)), "edf") == ["alpha", "mid", "zeta"]


def test_rm_orders_by_period_dm_by_relative_deadline() -> None:
    # "slow" has the longer period but the shorter deadline: RM and DM disagree.
    tasks = [Task("fast", 10 * MS, 1 * MS, deadline_ns=10 * MS), Task("slow", 20 * MS, 1 * MS, deadline_ns=5 * MS)]
    assert _start_order(tasks, "rm")[:2] == ["fast", "slow"]
    assert _start_order(tasks, "dm")[:2] == ["slow", "fast"]


def test_fp_uses_explicit_numbers_lower_is_more_urgent() -> None:
    tasks = [Task("a", 10 * MS, 1 * MS, priority=3), Task("b", 10 * MS, 1 * MS, priority=1),
             Task("c", 10 * MS, 1 * MS, priority=2)]
    assert _start_order(tasks, "fp") == ["b", "c", "a"]
    with pytest.raises(ValueError, match="explicit priority"):
        FP.priorities([Task("x", 10 * MS, 1 * MS)])


def test_fixed_priority_ties_break_by_deadline_then_name() -> None:
    tasks = [Task("b", 10 * MS, 1 * MS, priority=1), Task("a", 10 * MS, 1 * MS, priority=1),
             Task("c", 10 * MS, 1 * MS, priority=1, deadline_ns=5 * MS)]
    assert _start_order(tasks, "fp") == ["c", "a", "b"]
    # RM with equal periods: the rank itself is assigned by (period, deadline, name).
    assert RM.priorities(tasks) == {"c": 0, "a": 1, "b": 2}


def test_keys_are_plain_values_and_jobs_of_one_task_stay_in_release_order() -> None:
    assert EDF.key(0, 10, "t", 0) < EDF.key(0, 10, "u", 0) < EDF.key(0, 11, "a", 0)
    assert DM.key(0, 99, "z", 5) < DM.key(1, 1, "a", 0)
    # A backlogged task: its second job never overtakes its first.
    t = Task("t", 10 * MS, 15 * MS, deadline_ns=10 * MS)
    sink = RecordingSink()
    rt = Runtime([TaskBinding(t, synthetic_graph("g", [15 * MS]))], cost=declared_cost, sink=sink)
    rt.run_until(40 * MS)
    assert [e.job_index for e in sink.of(EventKind.START)] == [0, 1, 2]


def test_policy_names_are_checked() -> None:
    with pytest.raises(ValueError, match="policy"):
        Policy("lifo")


def test_partition_first_fit_decreasing_and_explicit() -> None:
    ts = [Task("a", 10, 6), Task("b", 10, 5), Task("c", 10, 4), Task("d", 10, 3), Task("e", 10, 1)]
    got = partition(ts, 2)
    # Decreasing utilization: a(.6)->0, b(.5)->1, c(.4)->0, d(.3)->1, e(.1)->1.
    assert got == {"a": 0, "b": 1, "c": 0, "d": 1, "e": 1}
    got = partition(ts, 2, {"e": 0})
    assert got["e"] == 0 and got["a"] == 0
    with pytest.raises(ValueError, match="worker 5"):
        partition(ts, 2, {"a": 5})
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        partition([Task("x", 10, 8), Task("y", 10, 8), Task("z", 10, 8)], 2)
    assert any("fits on no worker" in str(x.message) for x in w)
