"""Fixed-priority response-time analysis (RTA) with release jitter and blocking.

The model: sporadic tasks (the period is the minimum inter-arrival time), fixed priorities,
preemption only between the ops of a job (limited preemption). A job can therefore be blocked
once per level-i busy period by an op of a lower-priority task that started just before, which
is the blocking term B_i: the longest op of any lower-priority task, or the task's explicit
``blocking_ns``.

Job q (0-based) of task i in a level-i busy period finishes by the least fixed point of

    w_q = B_i + (q + 1) C_i + sum_{j in hp(i)} ceil((w_q + J_j) / T_j) C_j

and its response time from arrival is R_q = w_q + J_i - q T_i (Audsley, Burns, Richardson,
Tindell & Wellings, "Applying new scheduling theory to static priority pre-emptive
scheduling", SEJ 1993; Tindell, Burns & Wellings, "An extendible approach for analysing fixed
priority hard real-time tasks", RTS 1994, for jitter and arbitrary deadlines). Every job that
can be released in the level-i busy period

    L_i = B_i + sum_{j in hep(i)} ceil((L_i + J_j) / T_j) C_j

is checked, not only the first one: under limited preemption a task's own last op can push
higher-priority work into its next job's window (Bril, Lukkien & Verhaegh, "Worst-case response
time analysis of real-time tasks under fixed-priority scheduling with deferred preemption",
RTS 2009), and deadlines longer than the period need it anyway. The task under analysis is
treated as fully preemptive, which can only make its bound larger, so the result is safe.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Sequence

from ..core.task import Task, TaskError
from ..core.units import format_duration as fmt

FIXED_PRIORITY_POLICIES = ("rm", "dm", "fp")

# Beyond these the analysis gives up and says so, rather than hang: they are only reached when a
# level-i utilization is within a hair of 1 with coprime nanosecond periods.
MAX_ITERATIONS = 200_000
MAX_JOBS = 200_000


@dataclass(frozen=True)
class RTAResult:
    """Worst-case response time of one task, and how it was found."""

    response_ns: int | None      # from arrival (includes the task's own jitter); None: no bound <= deadline
    blocking_ns: int             # the blocking term used
    busy_period_ns: int | None   # level-i busy period length, when bounded
    jobs_checked: int            # jobs of the task examined in the busy period
    worst_job: int | None        # index of the job with the largest response time
    note: str = ""               # why there is no bound, when there is none


def priority_order(tasks: Sequence[Task], policy: str) -> list[int]:
    """Task indices from highest to lowest priority, ties broken as the runtime's dispatcher does.

    ``rm``: shorter period first (Liu & Layland 1973); ``dm``: shorter relative deadline first
    (Leung & Whitehead 1982); ``fp``: the explicit ``priority``, a lower number first. Ties go by
    the deadline (or period), then the task name: the same fixed key as
    ``rt_runtime.sched.policy.Policy.priorities``, so analysis and dispatch rank alike.
    """
    if policy == "rm":
        key: Callable[[int], tuple] = lambda i: (tasks[i].period_ns, tasks[i].deadline, tasks[i].name)
    elif policy == "dm":
        key = lambda i: (tasks[i].deadline, tasks[i].period_ns, tasks[i].name)
    elif policy == "fp":
        for t in tasks:
            if t.priority is None:
                raise TaskError(t.name, "priority", "required under policy fp (a lower number is a higher "
                                                    "priority)")
        key = lambda i: (tasks[i].priority, tasks[i].deadline, tasks[i].name)  # type: ignore[return-value]
    else:
        raise ValueError(f"policy: expected one of {', '.join(FIXED_PRIORITY_POLICIES)}, found {policy!r}")
    return sorted(range(len(tasks)), key=key)


def longest_op_ns(task: Task) -> int:
    """The task's longest op in ns, i.e. its longest non-preemptive region; 0 without a graph.

    Capped at the task's WCET: a job cannot hold the processor longer than its whole budget.
    """
    if task.graph is None:
        return 0
    return min(task.wcet_ns, round(task.graph.longest_op_us() * 1_000))


def blocking_terms(tasks: Sequence[Task], order: Sequence[int]) -> list[int]:
    """Per task (in file order): explicit ``blocking_ns``, else the longest op of any lower-priority task."""
    blocking = [0] * len(tasks)
    lower_max = 0  # longest op among the tasks below the current one, filled from the bottom up
    for i in reversed(order):
        t = tasks[i]
        blocking[i] = t.blocking_ns if t.blocking_ns is not None else lower_max
        lower_max = max(lower_max, longest_op_ns(t))
    return blocking


def least_fixed_point(start: int, f: Callable[[int], int], limit: int) -> int | None:
    """Iterate w <- f(w) from ``start`` (f monotone); None once w exceeds ``limit`` before converging."""
    w = start
    for _ in range(MAX_ITERATIONS):
        nxt = f(w)
        if nxt == w:
            return w
        if nxt > limit:
            return None
        w = nxt
    return None


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def response_time(task: Task, higher: Sequence[Task], blocking_ns: int = 0) -> RTAResult:
    """Worst-case response time of ``task`` below the tasks in ``higher`` (Tindell et al. 1994)."""
    C, T, D, J, B = task.wcet_ns, task.period_ns, task.deadline, task.jitter_ns, blocking_ns
    hep = [*higher, task]

    def interference(w: int) -> int:
        return sum(_ceil_div(w + h.jitter_ns, h.period_ns) * h.wcet_ns for h in higher)

    u = sum((Fraction(t.wcet_ns, t.period_ns) for t in hep), Fraction(0))
    if u > 1:
        return RTAResult(None, B, None, 0, None, f"utilization at this priority level is {float(u):.3f} > 1")
    unbounded = u == 1 and (B > 0 or any(t.jitter_ns for t in hep))

    busy: int | None = None
    if not unbounded:
        start = B + sum(t.wcet_ns for t in hep)
        busy = least_fixed_point(
            start, lambda x: B + sum(_ceil_div(x + t.jitter_ns, t.period_ns) * t.wcet_ns for t in hep),
            limit=1 << 62)
    worst: int | None = None
    worst_job: int | None = None
    w = 0
    q = 0
    while True:
        # A job whose earliest release lies beyond the busy period belongs to a later one.
        if q > 0 and (busy is None or q * T - J >= busy):
            break
        if q >= MAX_JOBS:
            return RTAResult(None, B, busy, q, worst_job,
                             f"analysis stopped after {MAX_JOBS} jobs in the busy period (inconclusive)")
        start = max(w + C, B + (q + 1) * C + sum(h.wcet_ns for h in higher))
        limit = D - J + q * T  # R_q = w_q + J - qT exceeds D once w_q exceeds this
        w_q = least_fixed_point(start, lambda x: B + (q + 1) * C + interference(x), limit)
        if w_q is None or w_q > limit:
            return RTAResult(None, B, busy, q + 1, q, f"job {q} of the busy period can exceed the deadline")
        w = w_q
        r = w_q + J - q * T
        if worst is None or r > worst:
            worst, worst_job = r, q
        if busy is None:
            # No bounded busy period: the first job's bound is all we can state, and it is not enough.
            why = ("utilization at this priority level is 1 with blocking or jitter, so the busy period "
                   "is unbounded" if unbounded else
                   f"the busy period did not converge within {MAX_ITERATIONS} iterations")
            return RTAResult(None, B, None, 1, 0, f"inconclusive: {why} (first job: {fmt(r)})")
        q += 1
    return RTAResult(worst, B, busy, q, worst_job)


def fixed_priority_analysis(tasks: Sequence[Task], policy: str) -> tuple[list[int], list[RTAResult]]:
    """Priority order (highest first) and per-task RTA results in file order, for rm, dm or fp."""
    order = priority_order(tasks, policy)
    blocking = blocking_terms(tasks, order)
    results: list[RTAResult | None] = [None] * len(tasks)
    for rank, i in enumerate(order):
        results[i] = response_time(tasks[i], [tasks[j] for j in order[:rank]], blocking[i])
    return order, [r for r in results if r is not None]
