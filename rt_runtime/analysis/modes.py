"""The degraded mode: every task with a fallback on it, the periodic ones reserved (docs/ANALYSIS.md).

What the runtime does in that mode (sched/chains.py, ``reserved``): a degraded task with a period of
its own (a periodic task, or a chain member such as the planner, whose fallback reads nothing from
its chain) runs its fallback every one of its own periods, out of its chain, with the fallback's
budget, and its job goes ahead of every other job at the next op boundary. A fallback of a triggered
task keeps its releases and its priority, with the fallback's budget.

So the analysis of the mode charges, per worker:

* each reserved fallback r: its response R_r = (sum of the reserved budgets on the worker) + B, with
  B the longest op of any other task there (limited preemption: it waits for at most one op), within
  its deadline (its task's, a chain member's share of its chain's);
* every other task: the test of its policy with the reserved budgets as higher-priority work. Under
  EDF the processor demand with that interference, h(t) + B(t) + sum_r ceil(t / T_r) C_r <= t, at every
  deadline t up to the synchronous busy period of the whole worker; under fixed priorities the
  response time with it, R = C + B + sum_hp ceil((R + J_j) / T_j) C_j + sum_r ceil(R / T_r) C_r <= D.

The others' release models (periods, propagated jitter) are those of the holistic analysis of the
mode's task set (``e2e.analyze_system``): the reserved tasks are periodic there and out of their chains.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping, Sequence

from ..core.chain import Chain, apply_chains
from ..core.task import Task
from .e2e import analyze_system
from .rta import longest_op_ns
from .schedulability import SchedulabilityReport, TaskResult

MAX_POINTS = 200_000   # deadlines checked in the demand test before it gives up (inconclusive: fails)


@dataclass(frozen=True)
class ReservedResult:
    """A reserved fallback: its budget, own period, deadline and response bound (ns)."""

    name: str
    period_ns: int
    wcet_ns: int
    deadline_ns: int
    response_ns: int | None
    worker: int

    @property
    def schedulable(self) -> bool:
        """Its response bound within its deadline."""
        return self.response_ns is not None and self.response_ns <= self.deadline_ns

    def to_json(self) -> dict[str, object]:
        """JSON-ready, durations in ms."""
        return {"name": self.name, "period_ms": self.period_ns / 1e6, "fallback_wcet_ms": self.wcet_ns / 1e6,
                "deadline_ms": self.deadline_ns / 1e6, "worker": self.worker, "schedulable": self.schedulable,
                "response_time_ms": None if self.response_ns is None else self.response_ns / 1e6}


@dataclass(frozen=True)
class ModeReport:
    """The degraded mode's verdict: the reserved fallbacks, the others with them, the chains left."""

    reserved: tuple[ReservedResult, ...]
    others: SchedulabilityReport                  # the mode's holistic analysis (reserved as plain tasks)
    responses: dict[str, int | None]              # the others' response bounds with the reservation
    demand_passes: bool
    checked_until_ns: int | None
    chains: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def schedulable(self) -> bool:
        """Every reserved fallback and every other task within its deadline."""
        others = [r for r in self.others.tasks if r.name not in {x.name for x in self.reserved}]
        return all(r.schedulable for r in self.reserved) and self.demand_passes and all(
            self.responses.get(r.name) is not None and self.responses[r.name] <= r.deadline_ns for r in others)  # type: ignore[operator]

    def to_json(self) -> dict[str, object]:
        """JSON-ready dict."""
        return {"schedulable": self.schedulable, "reserved": [r.to_json() for r in self.reserved],
                "demand_passes": self.demand_passes, "chains": [list(c) for c in self.chains],
                "checked_until_ms": None if self.checked_until_ns is None else self.checked_until_ns / 1e6,
                "responses_ms": {n: None if r is None else r / 1e6 for n, r in self.responses.items()},
                "notes": list(self.notes)}


def degraded_taskset(tasks: Sequence[Task], policy: str, chains: Sequence[Chain],
                     fallbacks: Mapping[str, int]) -> tuple[list[Task], list[Chain], set[str]]:
    """The mode's task set: each task of ``fallbacks`` (name -> the fallback's budget) on it; the periodic
    ones (own period, no trigger) reserved, out of their chains, with the deadline they run with there."""
    run = {t.name: t for t in apply_chains(tasks, chains, policy)}
    keep = {n for c in chains if c.deadline_ns is not None for n in c.tasks}
    reserved = {t.name for t in tasks if t.name in fallbacks and t.trigger is None}
    out = []
    for t in tasks:
        if t.name not in fallbacks:
            out.append(t)
        elif t.name in reserved:
            deadline = run[t.name].deadline if t.name in keep else t.deadline
            out.append(dataclasses.replace(t, wcet_ns=fallbacks[t.name], deadline_ns=deadline, jitter_ns=0))
        else:
            out.append(dataclasses.replace(t, wcet_ns=fallbacks[t.name]))
    left = []
    for c in chains:
        members = tuple(n for n in c.tasks if n not in reserved)
        if len(members) >= 2:
            left.append(dataclasses.replace(c, tasks=members))
    return out, left, reserved


def analyse_degraded(tasks: Sequence[Task], policy: str, chains: Sequence[Chain], fallbacks: Mapping[str, int],
                     activations: Mapping[str, Any] | None = None, on_finish: Mapping[str, bool] | None = None,
                     partition: Mapping[str, int] | None = None,
                     writes: Mapping[str, Collection[str]] | None = None) -> ModeReport:
    """The degraded mode's analysis (module docstring); ``fallbacks``: task -> its fallback's budget (ns)."""
    mode_tasks, mode_chains, reserved = degraded_taskset(tasks, policy, chains, fallbacks)
    acts = {n: a for n, a in (activations or {}).items() if n not in reserved}
    where = None if partition is None else dict(partition)
    report = analyze_system(mode_tasks, policy, mode_chains, acts, on_finish, where, None, writes)
    by_name = {t.name: t for t in mode_tasks}
    np_ns = {t.name: longest_op_ns(t) for t in mode_tasks}
    res_out: list[ReservedResult] = []
    responses: dict[str, int | None] = {}
    passes, until = True, None
    notes = []
    for w in sorted({r.worker or 0 for r in report.tasks}):
        rows = [r for r in report.tasks if (r.worker or 0) == w]
        mine = [by_name[r.name] for r in rows if r.name in reserved]
        rest = [r for r in rows if r.name not in reserved]
        blocking = max((np_ns[r.name] for r in rest), default=0)
        c_res = sum(t.wcet_ns for t in mine)
        for t in mine:
            res_out.append(ReservedResult(t.name, t.period_ns, t.wcet_ns, t.deadline, c_res + blocking, w))
        interference = _interference(mine)
        if policy == "edf":
            ok, checked = _edf_demand(rest, np_ns, interference, mine)
            passes &= ok
            until = checked if until is None or (checked is not None and checked > until) else until
            for r in rest:   # bounded by its deadline when the demand test passes (EDF)
                responses[r.name] = r.deadline_ns if ok else None
        else:
            for r in rest:
                responses[r.name] = _fp_response(r, rest, np_ns, interference)
    if not reserved:
        notes.append("no periodic task has a fallback: nothing is reserved")
    return ModeReport(tuple(res_out), report, responses, passes, until, tuple(c.tasks for c in mode_chains),
                      tuple(notes))


def _interference(reserved: Sequence[Task]) -> Callable[[int], int]:
    """The reserved fallbacks' work released in any window of length t (all at once at its start)."""
    def work(t: int) -> int:
        return sum(-(-t // r.period_ns) * r.wcet_ns for r in reserved)
    return work


def _edf_demand(rest: Sequence[TaskResult], np_ns: Mapping[str, int], interference: Callable[[int], int],
                reserved: Sequence[Task]) -> tuple[bool, int | None]:
    """h(t) + B(t) + I(t) <= t at every deadline t of the others up to the worker's busy period."""
    if not rest:
        return True, None
    u = sum(r.wcet_ns / r.period_ns for r in rest) + sum(t.wcet_ns / t.period_ns for t in reserved)
    if u >= 1:
        return False, None

    def busy(w: int) -> int:
        return interference(w) + sum(-(-(w + r.jitter_ns) // r.period_ns) * r.wcet_ns for r in rest)
    start = sum(r.wcet_ns for r in rest) + sum(t.wcet_ns for t in reserved)
    w = start
    for _ in range(10_000):
        nxt = busy(w)
        if nxt == w:
            break
        w = nxt
    else:
        return False, None
    points = sorted({d for r in rest for d in range(max(1, r.deadline_ns - r.jitter_ns), w + 1, r.period_ns)})
    if len(points) > MAX_POINTS:
        return False, None
    for t in points:
        h = sum(((t - (r.deadline_ns - r.jitter_ns)) // r.period_ns + 1) * r.wcet_ns for r in rest
                if t >= r.deadline_ns - r.jitter_ns)
        b = max((np_ns[r.name] for r in rest if r.deadline_ns > t), default=0)
        if h + b + interference(t) > t:
            return False, w
    return True, w


def _fp_response(task: TaskResult, rest: Sequence[TaskResult], np_ns: Mapping[str, int],
                 interference: Callable[[int], int]) -> int | None:
    """Fixed priorities: the response time with the reserved work above every priority; None past the deadline."""
    rank = task.priority_rank or 0
    higher = [r for r in rest if (r.priority_rank or 0) < rank]
    b = max((np_ns[r.name] for r in rest if (r.priority_rank or 0) > rank), default=0)
    r = task.wcet_ns + b
    for _ in range(10_000):
        nxt = task.wcet_ns + b + interference(r) + sum(-(-(r + h.jitter_ns) // h.period_ns) * h.wcet_ns
                                                      for h in higher)
        if nxt == r:
            return r + task.jitter_ns if r + task.jitter_ns <= task.deadline_ns else None
        if nxt > task.deadline_ns:
            return None
        r = nxt
    return None
