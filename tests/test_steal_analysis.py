"""The analysis of work-conserving dispatch (``steal``) against the real dispatcher: whatever ``check``'s
holistic analysis calls schedulable with steal never misses on the virtual clock with steal on
(docs/ANALYSIS.md, "Work-conserving dispatch"). Random periodic sets on two workers, with release
offsets (so the demand test over the release instants decides where the worst phasing fails), each
task a chain of ops whose longest the analysis is given. (Random sets rarely hit the case that the
release-offsets test once missed, a taken op blocking a tight job on the other worker; the set in
tests/test_shipped_configs_schedulable.py pins that one.)"""
from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dispatch_oracle import simulate
from rt_runtime.analysis.e2e import analyze_system
from rt_runtime.core import Task

U = 1_000
PERIODS = [5, 6, 8, 10, 12, 15, 20, 24, 30, 40, 60]


@st.composite
def steal_sets(draw) -> tuple[list[Task], dict[str, int], dict[str, list[int]]]:
    """2..5 tasks on two workers: (tasks, task -> worker, task -> its op costs in ns)."""
    n = draw(st.integers(2, 5))
    tasks, where, ops = [], {}, {}
    for i in range(n):
        T = draw(st.sampled_from(PERIODS))
        C = draw(st.integers(1, max(1, T // 3)))
        D = draw(st.integers(C, T))
        O = draw(st.integers(0, T - 1))
        name = f"t{i}"
        tasks.append(Task(name, T * U, C * U, deadline_ns=D * U, offset_ns=O * U, priority=i))
        where[name] = draw(st.integers(0, 1))
        cuts = sorted(draw(st.sets(st.integers(1, C - 1), max_size=min(3, C - 1)))) if C > 1 else []
        pts = [0, *cuts, C]
        ops[name] = [(b - a) * U for a, b in zip(pts, pts[1:])]
    assume(len(set(where.values())) == 2)
    return tasks, where, ops


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(steal_sets(), st.sampled_from(["edf", "fp"]))
def test_what_the_analysis_calls_schedulable_with_steal_never_misses_with_steal(case, policy) -> None:
    tasks, where, ops = case
    rep = analyze_system(tasks, policy, partition=where, longest_op={n: max(c) for n, c in ops.items()}, steal=True)
    assume(rep.schedulable)
    run = simulate([dataclasses.replace(t) for t in tasks], policy, op_costs_ns=ops, workers=2, partition=where,
                   steal=True)
    assert not run.misses, [(j.task, j.index, j.release_ns, j.finish_ns) for j in run.misses[:5]]
