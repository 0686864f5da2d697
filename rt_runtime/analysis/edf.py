"""EDF analysis: the processor-demand test (QPA) and worst-case response times (Spuri).

Model: sporadic tasks with arbitrary deadlines (D may exceed T: the demand bound and Spuri's busy
period count every job of a task whose deadline falls in the window, so earlier jobs of the same
task still queue ahead), release jitter J, and preemption only between ops (limited preemption).
Release jitter is handled the usual way: a job may be released up to J after its arrival but its
deadline still counts from the arrival, so in the demand bound a task behaves as if its deadline
were D' = D - J (Spuri 1996).

Blocking. A job with an absolute deadline after the end of an interval of length t can block the
jobs inside it only if it started before the interval, so only tasks with D_j > t can block it
(Baker, "Stack-based scheduling of real-time processes", RTS 1991; Baruah, "The limited-preemption
uniprocessor scheduling of sporadic task systems", ECRTS 2005). B(t) is the longest op of those
tasks, or the largest explicit ``blocking_ns`` among the tasks that have a job in the interval.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Sequence

import numpy as np

from ..core.task import Task
from ..core.units import format_duration as fmt
from .bounds import exact_utilization
from .rta import MAX_ITERATIONS, least_fixed_point

MAX_QPA_STEPS = 1_000_000
# Spuri's candidate arrival offsets grow like 1 / (1 - U); past these the demand test alone decides.
MAX_CANDIDATES = 200_000
MAX_TOTAL_CANDIDATES = 600_000
_CHUNK = 512  # candidates solved together: small enough that the warm start stays close


@dataclass(frozen=True)
class DemandResult:
    """Outcome of the processor-demand test."""

    schedulable: bool
    checked_until_ns: int | None   # the bound L on the interval lengths that had to be checked
    failed_at_ns: int | None       # an interval length t with h(t) + B(t) > t, when one was found
    note: str = ""


@dataclass(frozen=True)
class SpuriResult:
    """Worst-case response time of one task under EDF, from arrival."""

    response_ns: int | None      # None: can exceed the deadline, or no bound could be computed
    worst_arrival_ns: int | None  # the arrival offset a in the busy period that gives it
    note: str = ""


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def demand_bound(tasks: Sequence[Task], t: int) -> int:
    """h(t): work of jobs with arrival and deadline inside any interval of length t (Baruah et al. 1990)."""
    h = 0
    for k in tasks:
        dp = k.deadline - k.jitter_ns
        if t >= dp:
            h += ((t - dp) // k.period_ns + 1) * k.wcet_ns
    return h


def blocking_function(tasks: Sequence[Task], np_ns: Sequence[int]) -> Callable[[int], int]:
    """B(t) for the demand test; ``np_ns[j]`` is task j's longest non-preemptive region (op)."""
    derived_from = [k.deadline - k.jitter_ns for k in tasks if k.blocking_ns is None]
    explicit = [(k.deadline - k.jitter_ns, k.blocking_ns) for k in tasks if k.blocking_ns is not None]

    def blocking(t: int) -> int:
        b = 0
        if any(dp <= t for dp in derived_from):
            b = max((np_ns[j] for j, k in enumerate(tasks) if k.deadline > t), default=0)
        for dp, bx in explicit:
            if dp <= t and bx > b:
                b = bx
        return b

    return blocking


def _last_deadline_before(tasks: Sequence[Task], x: int) -> int | None:
    """The largest absolute deadline k T + D' (k >= 0) of any task that is strictly below x."""
    best: int | None = None
    for k in tasks:
        dp = k.deadline - k.jitter_ns
        if x > dp:
            d = dp + (_ceil_div(x - dp, k.period_ns) - 1) * k.period_ns
            if best is None or d > best:
                best = d
    return best


def _busy_period(tasks: Sequence[Task], extra: int) -> int | None:
    """Synchronous busy period with jitter and an initial blocking ``extra``; None if unbounded."""
    u = exact_utilization(tasks)
    if u > 1 or (u == 1 and (extra > 0 or any(k.jitter_ns for k in tasks))):
        return None
    start = extra + sum(k.wcet_ns for k in tasks)
    return least_fixed_point(
        start, lambda x: extra + sum(_ceil_div(x + k.jitter_ns, k.period_ns) * k.wcet_ns for k in tasks),
        limit=1 << 62)


def qpa(tasks: Sequence[Task], np_ns: Sequence[int] | None = None) -> DemandResult:
    """Quick Processor-demand Analysis (Zhang & Burns, IEEE TC 2009), with jitter and blocking.

    Exact for preemptive EDF without blocking: schedulable iff h(t) <= t for every absolute
    deadline t < L. QPA walks the deadlines backwards, jumping from t to h(t) whenever
    h(t) < t, because h is non-decreasing. With blocking the test is h(t) + B(t) <= t; B(t) is a
    step function constant between relative deadlines, so the walk runs once per such segment.
    """
    np_ns = list(np_ns) if np_ns is not None else [0] * len(tasks)
    if not tasks:
        return DemandResult(True, 0, None)
    for k in tasks:
        if k.deadline - k.jitter_ns <= 0:
            return DemandResult(False, None, 0, f"task '{k.name}': jitter leaves no time before the deadline")
    u = exact_utilization(tasks)
    if u > 1:
        return DemandResult(False, None, None, f"utilization {float(u):.3f} > 1")
    blocking = blocking_function(tasks, np_ns)
    d_max = max(k.deadline for k in tasks)
    b_explicit = max((k.blocking_ns or 0 for k in tasks), default=0)
    b_max = max([b_explicit, *np_ns])
    if u < 1:
        # Beyond La, h(t) + B(t) <= t U + sum (T - D') U + B <= t (Zhang & Burns, Theorem 3, with B);
        # a deadline beyond the period makes its term negative, and La >= max D covers max(D - T).
        slack = sum((Fraction((k.period_ns - k.deadline + k.jitter_ns) * k.wcet_ns, k.period_ns) for k in tasks),
                    Fraction(0))
        la = max(d_max, math.ceil((slack + b_explicit) / (1 - u)))
        lb = _busy_period(tasks, b_max)
        limit = la if lb is None else min(la, lb)
    else:
        # U = 1: for t >= max D the excess h(t) + B(t) - t repeats with the hyperperiod H.
        limit = d_max + math.lcm(*(k.period_ns for k in tasks))

    cuts = sorted({k.deadline for k in tasks} | {k.deadline - k.jitter_ns for k in tasks})
    segments = [(lo, hi) for lo, hi in zip(cuts, [*cuts[1:], limit]) if lo < min(hi, limit)]
    steps = 0
    for lo, hi in reversed(segments):
        beta = blocking(lo)
        t = _last_deadline_before(tasks, min(hi, limit))
        while t is not None and t >= lo:
            steps += 1
            if steps > MAX_QPA_STEPS:
                return DemandResult(False, limit, None, f"inconclusive: QPA stopped after {MAX_QPA_STEPS} steps")
            v = demand_bound(tasks, t) + beta
            if v > t:
                return DemandResult(False, limit, t, f"demand {fmt(v)} exceeds the interval {fmt(t)}")
            t = v if v < t else _last_deadline_before(tasks, t)
    return DemandResult(True, limit, None)


def spuri_response_times(tasks: Sequence[Task], np_ns: Sequence[int] | None = None) -> list[SpuriResult]:
    """Worst-case response times under EDF (Spuri, "Analysis of deadline scheduled real-time systems",
    INRIA RR-2772, 1996), with jitter and limited-preemption blocking.

    For a job of task i arriving at a in a busy period that starts at 0 (a >= -J_i), only jobs with
    absolute deadline <= d = a + D_i run before it:

        L_i(a) = B_i(d) + (1 + floor((a + J_i) / T_i)) C_i
                 + sum_{j != i} min(ceil((L_i(a) + J_j) / T_j), max(0, 1 + floor((d - D_j + J_j) / T_j))) C_j

    and R_i = max over a of max(C_i, L_i(a) - a). L_i(a) only changes where d meets an absolute
    deadline of another task or a + J_i a multiple of T_i, so those a in [-J_i, L) are the only
    candidates, L being the synchronous busy period. Measured from arrival, so it includes J_i.
    """
    np_ns = list(np_ns) if np_ns is not None else [0] * len(tasks)
    u = exact_utilization(tasks)
    if u > 1:
        return [SpuriResult(None, None, f"utilization {float(u):.3f} > 1")] * len(tasks)
    busy = _busy_period(tasks, max([0, *np_ns, *(k.blocking_ns or 0 for k in tasks)]))
    if busy is None:
        why = ("inconclusive: utilization is 1 with blocking or jitter, so the busy period is unbounded"
               if u == 1 else f"inconclusive: the busy period did not converge within {MAX_ITERATIONS} iterations")
        return [SpuriResult(None, None, why)] * len(tasks)
    results, budget = [], MAX_TOTAL_CANDIDATES
    for i in range(len(tasks)):
        r, used = _spuri_one(tasks, i, np_ns, busy, min(budget, MAX_CANDIDATES))
        results.append(r)
        budget = max(0, budget - used)
    return results


def _candidates(tasks: Sequence[Task], i: int, busy: int, limit: int) -> np.ndarray | None:
    """Sorted arrival offsets a in [-J_i, busy) where L_i(a) can change; None when there are too many."""
    ti = tasks[i]
    parts = [np.array([-ti.jitter_ns], dtype=np.int64)]
    sources = [(ti.period_ns, -ti.jitter_ns)]  # a + J_i = k T_i
    sources += [(k.period_ns, k.deadline - k.jitter_ns - ti.deadline) for j, k in enumerate(tasks) if j != i]
    total = 1
    for period, first in sources:
        if first < -ti.jitter_ns:  # skip to the first point at or after -J_i
            first += _ceil_div(-ti.jitter_ns - first, period) * period
        total += max(0, _ceil_div(busy - first, period))
        if total > limit:
            return None
        parts.append(np.arange(first, busy, period, dtype=np.int64))
    return np.unique(np.concatenate(parts))


def _spuri_one(tasks: Sequence[Task], i: int, np_ns: Sequence[int], busy: int,
               limit: int) -> tuple[SpuriResult, int]:
    """Spuri's bound for task i and the number of candidates it took; chunks of integer numpy arrays."""
    ti = tasks[i]
    C, T, D, J = ti.wcet_ns, ti.period_ns, ti.deadline, ti.jitter_ns
    idx = [j for j in range(len(tasks)) if j != i]
    To = np.array([tasks[j].period_ns for j in idx], dtype=np.int64)
    Co = np.array([tasks[j].wcet_ns for j in idx], dtype=np.int64)
    Do = np.array([tasks[j].deadline for j in idx], dtype=np.int64)
    Jo = np.array([tasks[j].jitter_ns for j in idx], dtype=np.int64)
    No = np.array([np_ns[j] for j in idx], dtype=np.int64)
    candidates = _candidates(tasks, i, busy, limit)
    if candidates is None:
        return SpuriResult(None, None, "inconclusive: too many arrival offsets to check (the busy period is "
                                       f"{fmt(busy)} long); the demand test decides"), 0
    worst, worst_a = 0, None
    prev_b, prev_t = -1, 0  # blocking and L_i(a) of the last candidate of the previous chunk
    for lo in range(0, len(candidates), _CHUNK):
        a = candidates[lo:lo + _CHUNK]
        # L_i(a) <= busy, so R(a) <= busy - a: later offsets cannot beat the worst found so far.
        a = a[busy - a > worst]
        if a.size == 0:
            break
        d = a + D
        if ti.blocking_ns is not None:
            b = np.full(a.shape, ti.blocking_ns, dtype=np.int64)
        elif idx:
            # Earlier jobs of the same task have earlier deadlines, so only other tasks block.
            b = np.max(np.where(Do[None, :] > d[:, None], No[None, :], 0), axis=1, initial=0)
        else:
            b = np.zeros(a.shape, dtype=np.int64)
        base = b + (1 + (a + J) // T) * C
        caps = np.maximum(0, 1 + (d[:, None] - Do[None, :] + Jo[None, :]) // To[None, :])
        # Warm start: with equal blocking, L_i(a) does not decrease in a (more jobs have deadline <= d),
        # so the previous chunk's last fixed point is below this chunk's least fixed points.
        t = np.where(b == prev_b, np.maximum(base, prev_t), base)
        for _ in range(MAX_ITERATIONS):
            arrived = -(-(t[:, None] + Jo[None, :]) // To[None, :])
            nxt = base + np.minimum(arrived, caps) @ Co
            late = nxt > d
            if late.any():
                k = int(np.argmax(late))
                return SpuriResult(None, int(a[k]), f"the job arriving {fmt(int(a[k]))} into a busy period "
                                                    f"can miss its deadline"), len(candidates)
            if np.array_equal(nxt, t):
                break
            t = nxt
        else:
            return SpuriResult(None, None, f"inconclusive: no fixed point within {MAX_ITERATIONS} "
                                           f"iterations"), len(candidates)
        prev_b, prev_t = int(b[-1]), int(t[-1])
        r = np.maximum(C, t - a)
        k = int(np.argmax(r))
        if int(r[k]) > worst:
            worst, worst_a = int(r[k]), int(a[k])
    if worst > D:
        return SpuriResult(None, worst_a, "can exceed the deadline"), len(candidates)
    return SpuriResult(worst, worst_a), len(candidates)
