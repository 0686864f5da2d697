"""What the DeadlineExecutor's .rttrace says of its callbacks, so that ``rt-runtime analyze`` reads it as a run's.

Each callback is a task with one op (``callback``); its job events are the scheduler's (RELEASE, START,
OP_START/OP_END, FINISH, MISS, OVERRUN, REACTION, ABORT; ``sched.events``), times in ns since the
executor was made, on the monotonic clock. ``tasks_config`` gives each callback's timing as the run used
it at its end: a derived deadline is the last one derived, a budget absent from the configuration is
the longest execution observed (so no job counts as an overrun of a budget nobody set); a callback
never released whose rate is unknown (a service no one called) is left out. ``deadline_executor``
says where each deadline came from and, per callback, what a file's entries select it by, the keys
its node's parameters gave, its budget and its period (None: unknown), for ``rt-runtime check --trace``.
"""
from __future__ import annotations

from typing import Any, Callable

from ...sched.events import REACT_ABORT, REACT_DEGRADE, REACT_NONE, REACT_SKIP
from ...sched.events import EventKind as K
from .jobs import Job, Verdict

_REACT = {"none": REACT_NONE, "skip": REACT_SKIP, "abort": REACT_ABORT, "degrade": REACT_DEGRADE}
Emit = Callable[[int, int, str, int, int, int], None]   # TraceRing.emit: kind, t, task, job, a, b


def trace_abort(emit: Emit, t: int, job: Job) -> None:
    """A job dropped at its start, past its deadline: MISS, REACTION abort, ABORT."""
    name, j = job.cb.name, job.index
    emit(K.MISS, t, name, j, -1, 0)
    emit(K.REACTION, t, name, j, REACT_ABORT, 0)
    emit(K.ABORT, t, name, j, -1, 0)


def trace_end(emit: Emit, t: int, job: Job, exec_ns: int, worker: int, verdict: Verdict) -> None:
    """A job that returned: OP_END, FINISH, and its verdict (OVERRUN, MISS, REACTION)."""
    name, j = job.cb.name, job.index
    emit(K.OP_END, t, name, j, 0, worker)
    emit(K.FINISH, t, name, j, exec_ns, worker)
    if verdict.overran:
        emit(K.OVERRUN, t, name, j, exec_ns, job.cb.timing.budget_ns or 0)
    if verdict.missed:
        emit(K.MISS, t, name, j, worker, 1)
    if verdict.reaction != "none":
        emit(K.REACTION, t, name, j, _REACT[verdict.reaction], int(verdict.reaction == "degrade"))


def trace_meta(ex: Any, described: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The trace metadata of a DeadlineExecutor (``ex``) as it stands now; ``described``: ``Book.described``."""
    cbs = ex.callbacks()
    tasks = {}
    for name, c in sorted(cbs.items()):
        if c.kind == "task" or (c.jobs == 0 and c.period is None):
            continue   # booked when its node was added, never released, nothing known of its rate (a service)
        tasks[name] = {"period_ns": int(c.period or c.deadline_ns), "deadline_ns": int(c.deadline_ns),
                       "wcet_ns": int(c.timing.budget_ns if c.timing.budget_ns is not None else c.max_exec_ns),
                       "priority": c.timing.priority, "rank": int(c.rank),
                       "trigger": None if c.kind == "timer" else c.name}
    return {"ops": {n: ["callback"] for n in tasks}, "policy": ex.policy.name, "workers": ex.workers,
            "clock": "wall", "live": True, "tasks_config": tasks,
            "deadline_executor": {"config": ex.config.source,
                                  "derived": sorted(n for n in tasks if cbs[n].timing.deadline_ns is None),
                                  "deadline_from": {n: cbs[n].deadline_from for n in tasks},
                                  "callbacks": {n: {**d, "budget_ns": cbs[n].timing.budget_ns,
                                                    "period_ns": cbs[n].period}
                                                for n, d in described.items() if n in tasks}}}
