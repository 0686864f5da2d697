"""Simulator oracle: the real dispatcher in virtual time against the schedulability analysis.

Time unit: 1 us. All periods divide 120 units, so a hyperperiod is at most 120 units and each
example runs in milliseconds. Where a task's graph is a chain of 1-unit ops and every release
falls on a unit boundary, limited preemption is full preemption and the analysis is exact.

The analysis is ``rt_runtime.analysis.analyze_taskset``. If that package cannot be imported (it
is developed alongside), the tiny reference below stands in: textbook RTA with blocking and EDF
processor demand, enough for these properties. (Lead: drop ``_reference_*`` once the analysis
is a fixed dependency.)
"""
from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rt_runtime.core import Task
from dispatch_oracle import simulate, synthetic_graph

try:
    from rt_runtime.analysis import analyze_taskset
except ImportError:  # pragma: no cover - only while the analysis package is missing
    analyze_taskset = None

U = 1_000                       # one time unit in ns
PERIODS = [4, 5, 6, 8, 10, 12, 15, 20, 24, 30, 40, 60]
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


# ---- the reference (used only without rt_runtime.analysis) ----------------------------------------
def _reference_fp(tasks: list[Task], order: list[int], blocking: list[int]) -> list[int | None]:
    """Response time per task (every job of the level-i busy period), None past the deadline."""
    out: list[int | None] = [None] * len(tasks)
    for rank, i in enumerate(order):
        t, hp = tasks[i], [tasks[j] for j in order[:rank]]
        B, C, T = blocking[i], t.wcet_ns, t.period_ns
        if sum((Fraction(h.wcet_ns, h.period_ns) for h in hp), Fraction(C, T)) > 1:
            continue
        busy = B + C + sum(h.wcet_ns for h in hp)
        while True:
            nxt = B + sum(math.ceil(busy / h.period_ns) * h.wcet_ns for h in (*hp, t))
            if nxt == busy:
                break
            busy = nxt
        worst, q, w = 0, 0, 0
        while q == 0 or q * T < busy:
            w = max(w, B + (q + 1) * C)
            while True:
                nxt = B + (q + 1) * C + sum(math.ceil(w / h.period_ns) * h.wcet_ns for h in hp)
                if nxt == w:
                    break
                w = nxt
            worst = max(worst, w - q * T)
            q += 1
        out[i] = worst if worst <= t.deadline else None
    return out


def _reference_edf(tasks: list[Task]) -> bool:
    """Processor demand up to the hyperperiod plus the largest deadline, with Baker's blocking:
    at interval length x, the longest op of a task whose relative deadline exceeds x."""
    if utilization(tasks) > 1:
        return False
    longest = [round(t.graph.longest_op_us() * 1000) if t.graph is not None else 0 for t in tasks]
    horizon = math.lcm(*(t.period_ns for t in tasks)) + max(t.deadline for t in tasks)
    points = sorted({k * t.period_ns + t.deadline for t in tasks for k in range(horizon // t.period_ns + 1)})
    for x in (p for p in points if p <= horizon):
        demand = sum(max(0, (x - t.deadline) // t.period_ns + 1) * t.wcet_ns for t in tasks)
        blocking = max((b for b, t in zip(longest, tasks) if t.deadline > x), default=0)
        if demand + blocking > x:
            return False
    return True


def analyse(tasks: list[Task], policy: str) -> tuple[bool, dict[str, int | None]]:
    """(schedulable, response time per task) from the analysis, or the reference without it."""
    if analyze_taskset is not None:
        rep = analyze_taskset(tasks, policy)
        return rep.schedulable, {r.name: r.response_ns for r in rep.tasks}
    if policy == "edf":
        return _reference_edf(tasks), {}
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i].priority, i))
    longest = [round(t.graph.longest_op_us() * 1000) if t.graph is not None else 0 for t in tasks]
    blocking = [t.blocking_ns if t.blocking_ns is not None else
                max([longest[j] for j in order[order.index(i) + 1:]], default=0) for i, t in enumerate(tasks)]
    resp = _reference_fp(tasks, order, blocking)
    return all(r is not None for r in resp), {t.name: r for t, r in zip(tasks, resp)}


# ---- strategies ------------------------------------------------------------------------------------
@st.composite
def task_sets(draw, implicit: bool = False, max_n: int = 4, load: int = 2) -> list[Task]:
    """2..max_n tasks, distinct explicit priorities, periods dividing 120 units, C <= T/load."""
    n = draw(st.integers(2, max_n))
    prios = draw(st.permutations(range(n)))
    tasks = []
    for i in range(n):
        T = draw(st.sampled_from(PERIODS))
        C = draw(st.integers(1, max(1, T // load)))
        D = T if implicit else draw(st.integers(C, T))
        tasks.append(Task(f"t{i}", T * U, C * U, deadline_ns=D * U, priority=prios[i]))
    return tasks


def split(draw, total: int) -> list[int]:
    """A random chain of op costs (in units) summing to ``total``."""
    cuts = sorted(draw(st.sets(st.integers(1, total - 1), max_size=min(4, total - 1)))) if total > 1 else []
    pts = [0, *cuts, total]
    return [b - a for a, b in zip(pts, pts[1:])]


def utilization(tasks: list[Task]) -> Fraction:
    """Exact: a float sum can round a utilization of exactly 1 to either side."""
    return sum((Fraction(t.wcet_ns, t.period_ns) for t in tasks), Fraction(0))


def unit_ops(tasks: list[Task]) -> dict[str, list[int]]:
    return {t.name: [U] * (t.wcet_ns // U) for t in tasks}


# ---- properties ------------------------------------------------------------------------------------
@FAST
@given(st.data())
def test_rta_schedulable_fixed_priority_set_never_misses_and_stays_within_its_bounds(data) -> None:
    tasks = data.draw(task_sets(load=3))
    costs = {t.name: [c * U for c in split(data.draw, t.wcet_ns // U)] for t in tasks}
    with_graphs = [replace(t, graph=synthetic_graph(t.name, costs[t.name])) for t in tasks]
    ok, resp = analyse(with_graphs, "fp")
    assume(ok)
    offsets = [data.draw(st.integers(0, t.period_ns // U)) * U for t in tasks]
    sim = simulate([replace(t, offset_ns=o) for t, o in zip(tasks, offsets)], "fp", op_costs_ns=costs)
    assert not sim.misses
    for t in tasks:
        if resp.get(t.name) is not None:
            assert sim.worst_response(t.name) <= resp[t.name]


@FAST
@given(task_sets(max_n=5, load=3))
def test_synchronous_release_reaches_the_rta_bound_exactly(tasks) -> None:
    # The lowest-priority task has no one below it (zero blocking); with 1-unit ops it is
    # preemptible at every release, so its first job meets the RTA bound exactly.
    lowest = max(tasks, key=lambda t: t.priority)
    ok, resp = analyse([replace(t, graph=None) for t in tasks], "fp")
    assume(resp.get(lowest.name) is not None)
    costs = {t.name: [t.wcet_ns] for t in tasks} | {lowest.name: [U] * (lowest.wcet_ns // U)}
    sim = simulate(tasks, "fp", op_costs_ns=costs)
    assert sim.of(lowest.name)[0].response_ns == resp[lowest.name]


@FAST
@given(task_sets(max_n=5, load=3))
def test_single_op_lowest_task_reaches_the_non_preemptive_bound_exactly(tasks) -> None:
    # Single-op graphs everywhere: the lowest task cannot be preempted once started, so its first
    # job starts at S, the least fixed point of S = sum over higher tasks of (floor(S/T) + 1) C,
    # and ends at S + C (the limited-preemption RTA with its last op = the whole job).
    lowest = max(tasks, key=lambda t: t.priority)
    hp = [t for t in tasks if t is not lowest]
    assume(sum(Fraction(t.wcet_ns, t.period_ns) for t in hp) < 1)   # exact: a float sum can round to < 1
    s = sum(t.wcet_ns for t in hp)
    while (nxt := sum((s // t.period_ns + 1) * t.wcet_ns for t in hp)) != s:
        s = nxt
    assume(s + lowest.wcet_ns <= lowest.deadline)
    sim = simulate(tasks, "fp")
    assert sim.of(lowest.name)[0].response_ns == s + lowest.wcet_ns


@FAST
@given(task_sets(implicit=True, max_n=5, load=3), st.data())
def test_edf_with_utilization_at_most_one_and_implicit_deadlines_never_misses(tasks, data) -> None:
    assume(utilization(tasks) <= 1)
    offsets = [data.draw(st.integers(0, t.period_ns // U)) * U for t in tasks]
    sim = simulate([replace(t, offset_ns=o) for t, o in zip(tasks, offsets)], "edf", op_costs_ns=unit_ops(tasks))
    assert not sim.misses


@FAST
@given(st.data())
def test_edf_analysis_schedulable_with_blocking_never_misses(data) -> None:
    tasks = data.draw(task_sets(load=3))
    costs = {t.name: [c * U for c in split(data.draw, t.wcet_ns // U)] for t in tasks}
    ok, _ = analyse([replace(t, graph=synthetic_graph(t.name, costs[t.name])) for t in tasks], "edf")
    assume(ok)
    assert not simulate(tasks, "edf", op_costs_ns=costs).misses


@FAST
@given(task_sets(max_n=4), st.sampled_from(["fp", "edf"]))
def test_unschedulable_verdict_comes_with_a_simulated_miss_where_the_analysis_is_exact(tasks, policy) -> None:
    # Exact: 1-unit ops and unit-aligned synchronous releases (full preemption, no blocking),
    # constrained deadlines, total utilization <= 1 (bounded busy periods, checked in full).
    assume(utilization(tasks) <= 1)
    ok, _ = analyse([replace(t, graph=None) for t in tasks], policy)
    assume(not ok)
    assert simulate(tasks, policy, op_costs_ns=unit_ops(tasks)).misses


@FAST
@given(task_sets(implicit=True, max_n=4, load=1))
def test_edf_overload_misses_within_the_hyperperiod(tasks) -> None:
    assume(utilization(tasks) > 1)
    assert not analyse(tasks, "edf")[0]
    sim = simulate(tasks, "edf", op_costs_ns=unit_ops(tasks))
    assert any(j.deadline_ns <= sim.horizon_ns for j in sim.misses)
