"""One entry point, ``analyze_taskset``: the right exact test for the policy, plus the quick bounds.

Fixed priorities (rm, dm, fp): response-time analysis, schedulable iff every task's worst-case
response time is within its deadline. EDF: the processor-demand test (QPA) decides; Spuri's
response times are reported per task. Utilization bounds are reported as information.
Offsets are ignored: a synchronous (or worst-phased sporadic) release is the worst case, so the
verdict is safe for any offsets.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Mapping, Sequence

from ..core.chain import apply_chains
from ..core.task import Task, TaskError
from . import bounds
from .chains import Chain, ChainBounds, chain_bounds
from .edf import DemandResult, qpa, spuri_response_times
from .rta import FIXED_PRIORITY_POLICIES, fixed_priority_analysis, longest_op_ns, priority_order

POLICIES = ("rm", "dm", "fp", "edf")


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


@dataclass(frozen=True)
class TaskResult:
    """Analysis result of one task (all durations in ns)."""

    name: str
    period_ns: int
    wcet_ns: int
    deadline_ns: int
    jitter_ns: int
    blocking_ns: int                  # the blocking term the analysis used
    response_ns: int | None           # worst-case response time from arrival; None: no bound within the deadline
    schedulable: bool
    priority_rank: int | None = None  # 1 = highest, under fixed priorities
    note: str = ""
    released_by: str = ""             # how its release model was derived (``cpa``), when it was
    worker: int | None = None

    @property
    def slack_ns(self) -> int | None:
        """Deadline minus worst-case response time: how much longer the task could run and still fit."""
        return None if self.response_ns is None else self.deadline_ns - self.response_ns

    @property
    def utilization(self) -> float:
        """wcet / period."""
        return self.wcet_ns / self.period_ns

    def to_json(self) -> dict[str, object]:
        """JSON-ready dict, durations in ms."""
        return {"name": self.name, "response_time_ms": _ms(self.response_ns), "deadline_ms": _ms(self.deadline_ns),
                "schedulable": self.schedulable, "slack_ms": _ms(self.slack_ns), "period_ms": _ms(self.period_ns),
                "wcet_ms": _ms(self.wcet_ns), "jitter_ms": _ms(self.jitter_ns), "blocking_ms": _ms(self.blocking_ns),
                "utilization": self.utilization, "priority_rank": self.priority_rank, "note": self.note,
                "released_by": self.released_by, "worker": self.worker}


@dataclass(frozen=True)
class SchedulabilityReport:
    """Verdict of a task set under one policy, per task and overall."""

    policy: str
    utilization: float
    schedulable: bool
    tasks: tuple[TaskResult, ...]
    chains: tuple[ChainBounds, ...] = ()
    bounds: dict[str, dict[str, object]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def task(self, name: str) -> TaskResult:
        """The result of the task with that name."""
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(name)

    def to_json(self) -> dict[str, object]:
        """JSON-ready dict: policy, utilization, schedulable, tasks (file order), chains, bounds, notes."""
        return {"policy": self.policy, "utilization": self.utilization, "schedulable": self.schedulable,
                "tasks": [t.to_json() for t in self.tasks], "chains": [c.to_json() for c in self.chains],
                "bounds": self.bounds, "notes": list(self.notes)}


def validate_for_policy(tasks: Sequence[Task], policy: str) -> None:
    """Raise ValueError/TaskError when the policy's analysis cannot take this task set as written."""
    if policy not in POLICIES:
        raise ValueError(f"policy: expected one of {', '.join(POLICIES)}, found {policy!r}")
    seen: set[str] = set()
    for t in tasks:
        if t.name in seen:
            raise TaskError(t.name, "name", "two tasks have this name")
        seen.add(t.name)
    if policy == "fp":
        priority_order(tasks, policy)


def _validate_chains(tasks: Sequence[Task], chains: Sequence[Chain]) -> None:
    names = {t.name for t in tasks}
    for c in chains:
        for n in c.tasks:
            if n not in names:
                raise ValueError(f"chain '{c.name}': tasks: no task is named '{n}'")


def analyze_taskset(tasks: Sequence[Task], policy: str, chains: Sequence[Chain] = (),
                    writes: Mapping[str, Collection[str]] | None = None) -> SchedulabilityReport:
    """Analyse ``tasks`` under ``policy`` (rm, dm, fp or edf); raise ValueError/TaskError on input it cannot take.

    ``writes`` (task -> channels it writes, from a full config) lets chain bounds see which tasks are
    released by what the task before them publishes."""
    _validate_chains(list(tasks), chains)
    # Members of a chain run as one LET interval are analysed with their share of its deadline
    # (the head's period, release jitter = the shares before them): core/chain.py.
    tasks = apply_chains(tasks, chains, policy)
    validate_for_policy(tasks, policy)
    if not tasks:
        return SchedulabilityReport(policy, 0.0, True, (), notes=("no tasks",))
    u = bounds.utilization(tasks)
    notes: list[str] = []
    info: dict[str, dict[str, object]] = {}
    results: list[TaskResult] = []

    if policy in FIXED_PRIORITY_POLICIES:
        order, rta = fixed_priority_analysis(tasks, policy)
        rank = {i: r + 1 for r, i in enumerate(order)}
        for i, (t, r) in enumerate(zip(tasks, rta)):
            ok = r.response_ns is not None and r.response_ns <= t.deadline
            results.append(TaskResult(t.name, t.period_ns, t.wcet_ns, t.deadline, t.jitter_ns, r.blocking_ns,
                                      r.response_ns, ok, rank[i], r.note))
        verdict = all(r.schedulable for r in results)
        blocking = [r.blocking_ns for r in results]
        applies = bounds.textbook_model(tasks, blocking) and (
            policy == "rm" or order == priority_order(tasks, "rm"))
        info["liu_layland"] = {"bound": bounds.liu_layland_bound(len(tasks)),
                               "passes": bounds.liu_layland_test(tasks), "applies": applies}
        info["hyperbolic"] = {"product": bounds.hyperbolic_product(tasks),
                              "passes": bounds.hyperbolic_test(tasks), "applies": applies}
    else:
        np_ns = [longest_op_ns(t) for t in tasks]
        demand: DemandResult = qpa(tasks, np_ns)
        spuri = spuri_response_times(tasks, np_ns)
        # For the table: under EDF only tasks with a longer relative deadline can block (Baker 1991).
        edf_blocking = [t.blocking_ns if t.blocking_ns is not None else
                        max((n for n, k in zip(np_ns, tasks) if k.deadline > t.deadline), default=0)
                        for t in tasks]
        for t, s, b in zip(tasks, spuri, edf_blocking):
            ok = s.response_ns is not None and s.response_ns <= t.deadline
            note = s.note
            if s.response_ns is None and s.note.startswith("inconclusive"):
                ok = demand.schedulable  # no response bound, but the demand test still decides
            results.append(TaskResult(t.name, t.period_ns, t.wcet_ns, t.deadline, t.jitter_ns, b, s.response_ns,
                                      ok, None, note))
        verdict = demand.schedulable and all(r.schedulable for r in results)
        info["edf_demand"] = {"passes": demand.schedulable, "checked_until_ms": _ms(demand.checked_until_ns),
                              "failed_at_ms": _ms(demand.failed_at_ns), "note": demand.note}
        info["edf_utilization"] = {"utilization": u, "passes": bounds.edf_utilization_test(tasks),
                                   "applies": bounds.textbook_model(tasks, np_ns)}
        info["density"] = {"density": bounds.density(tasks), "passes": bounds.density(tasks) <= 1}

    if policy != "fp" and any(t.priority is not None for t in tasks):
        notes.append(f"'priority' is ignored under policy {policy}")
    if any(t.offset_ns for t in tasks):
        notes.append("offsets are ignored: the analysis assumes the worst phasing, which covers any offsets")
    by_name = {t.name: t for t in tasks}
    resp = {r.name: r.response_ns for r in results}
    ok_by_name = {r.name: r.schedulable for r in results}
    chain_results = tuple(chain_bounds(c, by_name, resp, ok_by_name, chains, writes) for c in chains)
    return SchedulabilityReport(policy, u, verdict, tuple(results), chain_results, info, tuple(notes))
