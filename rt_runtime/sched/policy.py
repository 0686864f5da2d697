"""Scheduling policies (EDF, and fixed priorities by RM, DM or explicit numbers) and partitioning.

A policy turns a job into a sort key; the ready queue is a heap on that key, so the job picked is
always the one with the smallest key. Ties never depend on thread timing or dict order: the key
ends with (absolute deadline, task name, release), all plain values.
"""
from __future__ import annotations

import dataclasses

import warnings
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..core.task import Task


@dataclass(frozen=True)
class Policy:
    """How jobs are ordered: ``edf``, or a fixed-priority assignment ``rm``, ``dm`` or ``fp``."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in ("edf", "rm", "dm", "fp"):
            raise ValueError(f"policy: expected 'edf', 'rm', 'dm' or 'fp', found {self.name!r}")

    @property
    def fixed(self) -> bool:
        """True for fixed-priority policies."""
        return self.name != "edf"

    def priorities(self, tasks: Sequence[Task]) -> dict[str, int]:
        """Each task's rank, 0 = most urgent (all zero under EDF, where the deadline decides)."""
        if self.name == "edf":
            return {t.name: 0 for t in tasks}
        if self.name == "rm":
            order = sorted(tasks, key=lambda t: (t.period_ns, t.deadline, t.name))
        elif self.name == "dm":
            order = sorted(tasks, key=lambda t: (t.deadline, t.period_ns, t.name))
        else:
            missing = [t.name for t in tasks if t.priority is None]
            if missing:
                raise ValueError(f"policy fp: every task needs an explicit priority; missing for {missing}")
            order = sorted(tasks, key=lambda t: (t.priority, t.deadline, t.name))
        return {t.name: i for i, t in enumerate(order)}

    def stream_urgency(self, tasks: Sequence[Task]) -> dict[str, float]:
        """Each task's device-stream urgency in [0, 1], 1 the most urgent (``Device.stream``'s one convention).

        The policy's rank; under EDF, where urgency changes job by job but a stream's priority is fixed
        when it is created, the deadline-monotonic order (the static order closest to EDF's).
        """
        ranks = (Policy("dm") if self.name == "edf" else self).priorities(tasks)
        n = max(ranks.values(), default=0)
        return {name: 1.0 - r / n if n else 1.0 for name, r in ranks.items()}

    def key(self, prio: int, deadline_ns: int, task: str, release_ns: int) -> tuple:
        """The ready-queue key of a job: smaller runs first."""
        if self.name == "edf":
            return (deadline_ns, task, release_ns)
        return (prio, deadline_ns, task, release_ns)


EDF, RM, DM, FP = Policy("edf"), Policy("rm"), Policy("dm"), Policy("fp")


def as_policy(p: Policy | str) -> Policy:
    """Accept a Policy or its name."""
    return p if isinstance(p, Policy) else Policy(str(p).lower())


def partition(tasks: Sequence[Task], workers: int, explicit: Mapping[str, int] | None = None,
              capacity: float = 1.0, together: Sequence[Sequence[str]] = ()) -> dict[str, int]:
    """Assign tasks to workers: explicit choices first, then first-fit decreasing by utilization.

    Each group in ``together`` (a run-time chain) is placed as one item, its members' utilizations
    summed, on the worker one of them was given explicitly if any: a chain hands its data over
    at zero logical delay and runs one member at a time, so splitting it gains nothing. A task that
    fits nowhere under ``capacity`` goes to the least-loaded worker, with a warning: the analysis,
    not the partitioner, is the place to reject an overloaded set.
    """
    by_name = {t.name: t for t in tasks}
    explicit = dict(explicit or {})
    grouped: dict[str, list[Task]] = {}
    for names in together:
        members = [by_name[n] for n in names if n in by_name]
        given = {explicit[n] for n in names if n in explicit}
        if len(given) > 1:
            continue   # the user split the chain on purpose
        if given:
            w = given.pop()
            explicit.update({m.name: w for m in members})
            continue
        grouped[members[0].name] = members
    if grouped:
        inside = {m.name for ms in grouped.values() for m in ms}
        units = [t for t in tasks if t.name not in inside] + [
            dataclasses.replace(ms[0], wcet_ns=sum(m.wcet_ns for m in ms), period_ns=ms[0].period_ns)
            for ms in grouped.values()]
        placed = partition(units, workers, explicit, capacity)
        return {**{t.name: placed[t.name] for t in tasks if t.name not in inside},
                **{m.name: placed[head] for head, ms in grouped.items() for m in ms}}
    if workers < 1:
        raise ValueError(f"workers must be >= 1, found {workers}")
    load = [0.0] * workers
    out: dict[str, int] = {}
    for t in tasks:
        if t.name in explicit:
            w = explicit[t.name]
            if not 0 <= w < workers:
                raise ValueError(f"task '{t.name}': worker {w} does not exist (workers: 0..{workers - 1})")
            out[t.name] = w
            load[w] += t.utilization
    rest = sorted((t for t in tasks if t.name not in explicit), key=lambda t: (-t.utilization, t.name))
    for t in rest:
        w = next((i for i in range(workers) if load[i] + t.utilization <= capacity + 1e-12), None)
        if w is None:
            w = min(range(workers), key=lambda i: (load[i], i))
            if workers > 1:   # on one worker there is no choice to make: the analysis judges the load
                warnings.warn(f"rt_runtime.sched: task '{t.name}' (U={t.utilization:.3f}) fits on no worker; "
                              f"placed on worker {w} (U={load[w] + t.utilization:.3f})", stacklevel=2)
        out[t.name] = w
        load[w] += t.utilization
    return out
