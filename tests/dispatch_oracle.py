"""Simulator oracle (tests only): a task set run through the real dispatcher on a VirtualClock.

Each task gets a synthetic graph: a chain of real torch ops whose declared ``cost_us`` is the
virtual time they take (``declared_cost``). The run covers the hyperperiod (plus offsets and the
last deadlines), and the result lists every job's release, start, finish and whether it missed.
Property tests hold the analysis against it: what RTA or the EDF bound calls schedulable must
never miss here, and where the analysis is exact its verdicts and bounds must be met exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from rt_runtime.core.graph import Graph
from rt_runtime.core.op import Op
from rt_runtime.core.task import Task
from rt_runtime.core.tensor import TensorSpec
from rt_runtime.sched.binding import Reaction, TaskBinding, declared_cost
from rt_runtime.sched.clock import VirtualClock
from rt_runtime.sched.events import EventKind
from rt_runtime.sched.policy import Policy
from rt_runtime.sched.runtime import Runtime


def synthetic_graph(name: str, op_costs_ns: Sequence[int]) -> Graph:
    """A chain of torch ops ``v <- v + 1``, op i declared to take ``op_costs_ns[i]`` ns."""
    import torch

    if not op_costs_ns:
        raise ValueError(f"graph '{name}': needs at least one op cost")
    ops = []
    prev: TensorSpec | None = None
    for i, c in enumerate(op_costs_ns):
        out = TensorSpec(f"v{i}", (1,), "float64")
        if prev is None:
            ops.append(Op(f"op{i}", lambda o: o.fill_(1.0), (), (out,), cost_us=c / 1000))
        else:
            ops.append(Op(f"op{i}", lambda a, o: torch.add(a, 1.0, out=o), (prev,), (out,), cost_us=c / 1000))
        prev = out
    return Graph(name, ops, [], [prev.name])  # type: ignore[union-attr]


@dataclass
class JobRecord:
    """What happened to one job in the simulation."""

    task: str
    index: int
    release_ns: int
    deadline_ns: int
    start_ns: int | None = None
    finish_ns: int | None = None
    missed: bool = False

    @property
    def response_ns(self) -> int | None:
        """Finish minus release, once finished."""
        return None if self.finish_ns is None else self.finish_ns - self.release_ns


class _JobLog:
    enabled = True

    def __init__(self, deadlines: Mapping[str, int]) -> None:
        self.jobs: dict[tuple[str, int], JobRecord] = {}
        self.deadlines = deadlines

    def emit(self, kind: int, t: int, task: str, index: int, a: int = 0, b: int = 0) -> None:
        if kind == EventKind.RELEASE:
            self.jobs[(task, index)] = JobRecord(task, index, t, t + self.deadlines[task])
        elif kind == EventKind.START:
            self.jobs[(task, index)].start_ns = t
        elif kind == EventKind.FINISH:
            self.jobs[(task, index)].finish_ns = t
        elif kind == EventKind.MISS:
            self.jobs[(task, index)].missed = True


@dataclass
class SimResult:
    """Every job of the run, in release order, with helpers for the property tests."""

    jobs: list[JobRecord]
    horizon_ns: int
    stats: dict = field(default_factory=dict)

    @property
    def misses(self) -> list[JobRecord]:
        """The jobs that missed their deadlines."""
        return [j for j in self.jobs if j.missed]

    def of(self, task: str) -> list[JobRecord]:
        """One task's jobs, by index."""
        return sorted((j for j in self.jobs if j.task == task), key=lambda j: j.index)

    def worst_response(self, task: str) -> int:
        """The largest response time of the task's finished jobs (0 if none finished)."""
        return max((j.response_ns for j in self.of(task) if j.response_ns is not None), default=0)


def hyperperiod(tasks: Sequence[Task]) -> int:
    """Least common multiple of the periods."""
    return math.lcm(*(t.period_ns for t in tasks))


def simulate(tasks: Sequence[Task], policy: Policy | str = "edf", *, horizon_ns: int | None = None,
             op_costs_ns: Mapping[str, Sequence[int]] | None = None, workers: int = 1,
             partition: Mapping[str, int] | None = None, on_miss: Reaction | str = Reaction.SKIP,
             steal: bool = False) -> SimResult:
    """Run ``tasks`` on the real dispatcher in virtual time with synthetic costs.

    A task's graph is a chain of ops with the given costs (default: one op of its WCET). Jobs
    released before ``horizon_ns`` (default: max offset + hyperperiod) are followed to their end.
    Late jobs run on (``skip``), so an overload shows as it would live. ``steal``: work-conserving
    dispatch across the workers (sched/dispatch.py).
    """
    costs = dict(op_costs_ns or {})
    horizon = horizon_ns if horizon_ns is not None else max(t.offset_ns for t in tasks) + hyperperiod(tasks)
    bindings = []
    for t in tasks:
        g = synthetic_graph(f"{t.name}_g", costs.get(t.name, [t.wcet_ns]))
        bindings.append(TaskBinding(replace(t, graph=None), g, on_miss=on_miss, on_overrun=Reaction.NONE,
                                    worker=(partition or {}).get(t.name)))
    log = _JobLog({t.name: t.deadline for t in tasks})
    # Generous backlog: an overloaded set keeps its whole workload instead of dropping releases.
    rt = Runtime(bindings, policy=policy, clock=VirtualClock(), workers=workers, cost=declared_cost, sink=log,
                 max_active=1 << 20, steal=steal)
    total = sum(sum(costs.get(t.name, [t.wcet_ns])) * (horizon // t.period_ns + 1) for t in tasks)
    rt.run_until(horizon - 1)
    # Drain: no new releases matter past the horizon, but the released jobs must reach their ends.
    rt.run_until(horizon + max(t.deadline for t in tasks) + total)
    jobs = sorted((j for j in log.jobs.values() if j.release_ns < horizon),
                  key=lambda j: (j.release_ns, j.task, j.index))
    return SimResult(jobs, horizon, rt.stats())
