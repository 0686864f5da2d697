"""EDF processor demand with release offsets: tasks pinned to one clock, beside sporadic ones.

The runtime releases every periodic task at offset + k T on one clock, and under LET a task
triggered by another's publish is released when that publish happens, at its writer's release + D
(docs/ANALYSIS.md, "Event chains"): such tasks are *concrete* (Leung & Merrill 1980), their release
instants known (``trigger_releases`` derives them as the scheduler makes them: min_interarrival,
coalescing, joins). The worst phasing that the synchronous test assumes (every task released at
once) then never happens, and assuming it rejects sets that run without a miss. Sporadic tasks
(released by ingress, by a join ``any``, or with jitter) keep the worst phasing beside them.

EDF misses a deadline only if, for some window [s, e], the jobs released in it and due in it, plus one
op of a job released before s and due after e (limited preemption), need more than e - s
(Baruah, Rosier & Howell 1990; Baruah 2005 for the blocking), e being the missed job's own deadline.
A window need only start at a concrete release (moving s right up to the next one loses no job) and
end at a deadline; with the pattern repeating every hyperperiod H once started, starts in [H, 2 H)
cover all, and a window longer than ``limit`` (the synchronous busy period or QPA's La, which
bound the worst phasing too) need not be checked. Exact for concrete periodic tasks without
blocking (tests/test_cpa.py holds it to a simulation).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..core.task import Task
from ..core.units import format_duration as fmt
from .edf import DemandResult

MAX_STARTS = 100_000
MAX_FIXED_POINT_STEPS = 10_000


@dataclass(frozen=True)
class Pinned:
    """A task on the common clock: its analysis parameters and its release instants over the horizon."""

    task: Task          # wcet, deadline (from release)
    times: np.ndarray   # sorted release instants in [0, horizon), int64 ns
    longest_op_ns: int


def trigger_releases(inputs: Sequence[np.ndarray], mode: str, min_interarrival_ns: int) -> np.ndarray:
    """The releases of an event-triggered task, given when each of its trigger channels receives a message,
    as ``Scheduler.trigger`` makes them: a task with a release pending reads the newest data at it (a
    ``latest`` channel: messages coalesce), a release comes no sooner than ``min_interarrival`` after the
    last one, and a join ``all`` fires once every channel has a message its last job did not read."""
    events = sorted((int(t), k) for k, arr in enumerate(inputs) for t in arr)
    fresh = [False] * len(inputs)
    out: list[int] = []
    last: int | None = None
    pending: int | None = None
    i = 0
    while True:
        tm = events[i][0] if i < len(events) else None
        if pending is not None and (tm is None or pending < tm):
            out.append(pending)   # the release reads every channel: nothing is new after it
            last, pending, fresh = pending, None, [False] * len(inputs)
            continue
        if tm is None:
            break
        fresh[events[i][1]] = True
        i += 1
        ready = all(fresh) if mode == "all" else any(fresh)
        if pending is None and ready:
            pending = tm if last is None else max(tm, last + min_interarrival_ns)
    return np.array(out, dtype=np.int64)


def pattern_model(times: np.ndarray, lo: int, hyperperiod: int) -> tuple[int, int, int, int]:
    """(period, jitter, min distance, releases) of the steady pattern in [lo, lo + hyperperiod): the period
    rounded down, so that ``ceil((w + J) / P)`` counts at least the releases of any window inside it."""
    seg = times[(times >= lo) & (times < lo + hyperperiod)]
    n = int(seg.size)
    if n == 0:
        return hyperperiod, 0, hyperperiod, 0
    p = hyperperiod // n
    dev = seg - lo - np.arange(n, dtype=np.int64) * p
    gaps = np.diff(times[(times >= lo) & (times < lo + 2 * hyperperiod)])
    return p, int(dev.max() - dev.min()), int(gaps.min()) if gaps.size else p, n


def offset_demand(pinned: Sequence[Pinned], sporadic: Sequence[Task], sporadic_np_ns: Sequence[int],
                  hyperperiod: int, horizon_ns: int, limit_ns: int) -> tuple[DemandResult, frozenset[str]] | None:
    """The demand test over every window (module docstring), and the tasks that can miss (those with a
    deadline at the end of a window that fails). Windows start at the releases in [hyperperiod,
    2 hyperperiod), the pattern's steady state; None when the releases simulated do not reach far
    enough for ``limit_ns`` (then the worst phasing is all there is)."""
    if not pinned:
        return None
    H = hyperperiod
    if 2 * H + limit_ns + max(p.task.deadline for p in pinned) > horizon_ns:
        return None
    A = np.concatenate([p.times for p in pinned])
    Dn = np.concatenate([p.times + p.task.deadline for p in pinned])
    C = np.concatenate([np.full(p.times.shape, p.task.wcet_ns, dtype=np.int64) for p in pinned])
    OP = np.concatenate([np.full(p.times.shape, p.longest_op_ns, dtype=np.int64) for p in pinned])
    TID = np.concatenate([np.full(p.times.shape, i, dtype=np.int64) for i, p in enumerate(pinned)])
    # An explicit blocking term (``blocking:``, or the one op a worker may have taken from another with
    # steal) belongs to a task's jobs: it counts in a window where one of them is due, as in edf.qpa.
    BX = np.concatenate([np.full(p.times.shape, p.task.blocking_ns or 0, dtype=np.int64) for p in pinned])
    first: tuple[int, int, int] | None = None
    late: set[int] = set()
    starts = np.unique(A[(A >= H) & (A < 2 * H)])
    if starts.size > MAX_STARTS:
        return None
    # The sporadic tasks' demand and blocking depend on the window's length only.
    sp_t = np.array([k.period_ns for k in sporadic], dtype=np.int64)
    sp_dp = np.array([k.deadline - k.jitter_ns for k in sporadic], dtype=np.int64)
    sp_c = np.array([k.wcet_ns for k in sporadic], dtype=np.int64)
    steps = [np.arange(dp, limit_ns + 1, t, dtype=np.int64) for dp, t in zip(sp_dp, sp_t) if dp <= limit_ns]
    sp_points = np.concatenate(steps) if steps else np.zeros(0, dtype=np.int64)
    by_d = np.argsort(-np.array([k.deadline for k in sporadic], dtype=np.int64), kind="stable")
    sp_d = np.array([k.deadline for k in sporadic], dtype=np.int64)[by_d]
    sp_op = np.maximum.accumulate(np.array(sporadic_np_ns, dtype=np.int64)[by_d]) if sporadic else sp_d
    by_dp = np.argsort(sp_dp, kind="stable")
    sp_dp_up = sp_dp[by_dp]
    sp_bx = np.maximum.accumulate(np.array([k.blocking_ns or 0 for k in sporadic], dtype=np.int64)[by_dp]) \
        if sporadic else sp_dp_up

    def prefix_max_after(ends: np.ndarray, ops: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Per x: the largest op among entries with end > x (``ends`` descending, ``ops`` its prefix max)."""
        n = np.searchsorted(-ends, -x, side="left")
        return np.where(n > 0, ops[np.maximum(n - 1, 0)] if ops.size else 0, 0)

    for s in starts:
        inside = (A >= s) & (Dn <= s + limit_ns)
        o = np.argsort(Dn[inside], kind="stable")
        d_in = Dn[inside][o] - s
        cum = np.concatenate([[0], np.cumsum(C[inside][o])])
        ts = np.unique(np.concatenate([d_in, sp_points]))
        if ts.size == 0:
            continue
        due = np.searchsorted(d_in, ts, side="right")   # how many of the window's pinned jobs are due by ts
        demand = cum[due]
        bx_in = np.concatenate([[0], np.maximum.accumulate(BX[inside][o])])
        explicit = bx_in[due]
        if sporadic:
            n = np.searchsorted(sp_dp_up, ts, side="right")
            explicit = np.maximum(explicit, np.where(n > 0, sp_bx[np.maximum(n - 1, 0)], 0))
        if sporadic:
            demand = demand + (np.where(ts[:, None] >= sp_dp[None, :],
                                        ((ts[:, None] - sp_dp[None, :]) // sp_t[None, :] + 1) * sp_c[None, :],
                                        0)).sum(axis=1)
        # Blocking: one op of a job that can be released before s and be due after s + t.
        before = A < s
        ob = np.argsort(-Dn[before], kind="stable")
        ends = Dn[before][ob]
        ops = np.maximum.accumulate(OP[before][ob]) if ends.size else ends
        block = np.maximum(prefix_max_after(ends, ops, s + ts), prefix_max_after(sp_d, sp_op, ts))
        total = demand + np.maximum(block, explicit)
        bad = ts[total > ts]
        if bad.size == 0:
            continue
        if first is None:
            k = int(np.argmax(total > ts))
            first = (int(ts[k]), int(s), int(total[k]))
        # A job misses only at the end of a window that needs more than its length (its own deadline).
        late.update(int(i) for i in np.unique(TID[np.isin(Dn, s + bad)]))
        late.update(len(pinned) + k for k in range(len(sporadic))
                    if np.any((bad >= sp_dp[k]) & ((bad - sp_dp[k]) % sp_t[k] == 0)))
    names = [p.task.name for p in pinned] + [k.name for k in sporadic]
    can_miss = frozenset(names[i] for i in late)
    if first is None:
        return DemandResult(True, limit_ns, None, f"with the release offsets ({starts.size} window starts over the "
                                                  f"hyperperiod of {fmt(H)})"), can_miss
    t, s0, need = first
    return DemandResult(False, limit_ns, t, f"with the release offsets, the window of {fmt(t)} starting "
                                            f"{fmt(s0 - H)} into the hyperperiod needs {fmt(need)}"), can_miss


def fp_offset_response(task: Task, times: np.ndarray, higher: Sequence[tuple[Task, np.ndarray | None]],
                       blocking_ns: int, hyperperiod: int, horizon_ns: int, busy_ns: int) -> int | None:
    """Worst-case response time (from the arrival) of a pinned task under fixed priorities with the
    release offsets; None when the instants do not reach far enough (then the worst phasing decides).

    ``times`` are the task's arrivals, each job released up to its ``jitter_ns`` later (a chain member:
    its head's releases, and the jitter its predecessors' finishing adds); ``higher``: the
    higher-priority tasks with theirs (None: sporadic, worst-phased). The job arriving at a finishes
    within the least t with

        t = s + B + C (own jobs arriving in [s - J, a]) + pinned higher jobs that can be released in [s, t)
              + sum_h ceil((t - s + J_h) / T_h) C_h  (sporadic higher tasks)

    where s starts the level-i busy period holding it. The pinned work counted from s only drops
    when s passes a job's latest release, and t - s only grows as s moves later, so the latest
    releases in [a + J - ``busy_ns``, a + J] are the only starts to try (a busy period is at most
    ``busy_ns``, the worst phasing's). As RTA does, the task is taken as fully preemptive with one
    blocking term (Bril et al. 2009), which can only lengthen its bound."""
    if 2 * hyperperiod + busy_ns + task.deadline > horizon_ns or busy_ns > hyperperiod:
        return None
    J = task.jitter_ns
    pinned = [(h.wcet_ns, h.jitter_ns, np.asarray(x)) for h, x in higher if x is not None]
    spor = [h for h, x in higher if x is None]
    latest = [times + J, *(x + j for _, j, x in pinned)]
    starts_all = np.unique(np.concatenate(latest))
    # Scalar lookups in plain lists (bisect): a numpy call per lookup costs more than the lookup.
    arrivals = [(x.tolist(), j, c) for c, j, x in pinned]

    def pinned_work(s: int, t: int) -> int:
        return sum((bisect_left(x, t) - bisect_left(x, s - j)) * c for x, j, c in arrivals)

    mine, starts = times.tolist(), starts_all.tolist()
    worst = 0
    for a in times[(times >= hyperperiod) & (times < 2 * hyperperiod)].tolist():
        for s in starts[bisect_left(starts, a + J - busy_ns):bisect_right(starts, a + J)]:
            own = (bisect_right(mine, a) - bisect_left(mine, s - J)) * task.wcet_ns
            t = s + blocking_ns + own
            for _ in range(MAX_FIXED_POINT_STEPS):
                nxt = s + blocking_ns + own + pinned_work(s, t) + sum(
                    -(-(t - s + h.jitter_ns) // h.period_ns) * h.wcet_ns for h in spor)
                if nxt == t:
                    break
                t = nxt
                if t - a > task.deadline + busy_ns:
                    return t - a   # far past the deadline: it can miss, the exact amount does not matter
            else:
                return None
            worst = max(worst, t - a)
    return worst
