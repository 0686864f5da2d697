"""What the DeadlineExecutor's .rttrace says of its callbacks, so that ``rt-runtime analyze`` reads it as a run's.

Each callback is a task with one op (``callback``); its job events are the scheduler's (RELEASE, START,
OP_START/OP_END, FINISH, MISS, OVERRUN, REACTION, ABORT; ``sched.events``), times in ns since the
executor was made, on the monotonic clock. ``tasks_config`` gives each callback's timing as the run used
it at its end: a derived deadline is the last one derived, a budget absent from the configuration is
the longest execution observed (so no job counts as an overrun of a budget nobody set).
"""
from __future__ import annotations

from typing import Any

_BIG = 1 << 62


def trace_meta(ex: Any) -> dict[str, Any]:
    """The trace metadata of a DeadlineExecutor (``ex``) as it stands now."""
    cbs = ex.callbacks()
    tasks = {}
    for name, c in sorted(cbs.items()):
        if c.kind == "task":
            continue
        tasks[name] = {"period_ns": int(c.period or c.deadline_ns), "deadline_ns": int(c.deadline_ns),
                       "wcet_ns": int(c.timing.budget_ns if c.timing.budget_ns is not None else c.max_exec_ns),
                       "priority": c.timing.priority, "rank": int(c.rank),
                       "trigger": None if c.kind == "timer" else c.name}
    return {"ops": {n: ["callback"] for n in tasks}, "policy": ex.policy.name, "workers": ex.workers,
            "clock": "wall", "live": True, "tasks_config": tasks,
            "deadline_executor": {"config": ex.config.source,
                                  "derived": sorted(n for n, c in cbs.items() if c.timing.deadline_ns is None),
                                  "deadline_from": {n: c.deadline_from for n, c in sorted(cbs.items())
                                                    if c.kind != "task"}}}
