"""Watchdog: what happens when a job misses its deadline, overruns its budget, or a worker stalls.

The decisions are pure (this module); *detection* is done by whoever watches the time: the
scheduler at each deadline, the dispatcher after each op, and, with worker threads, a watchdog
thread that catches an op still running past its budget or never returning (``threads``).

Reactions, per task: ``skip`` lets the job finish and drops its late output (the channel keeps its
last value); ``abort`` cancels it at the next op boundary; ``degrade`` aborts it and switches the
task, or its whole group, to the fallback graph, and back once every switched task has had
``recover_after`` clean jobs in a row (published on time, within budget); ``none`` only counts.
A fallback job that misses or overruns gets no reaction but the count, whatever the task's: it is
not skipped, aborted or degraded (there is nothing safer to switch to, and dropping it would leave
the last nominal output standing): it publishes late, at finish. A degraded task whose fallback runs
on a period of its own is released every period ahead of every other job (``chains.reserved``).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from .binding import Reaction
from .chains import start_reserved
from .events import REACT_ABORT, REACT_DEGRADE, REACT_NONE, REACT_RECOVER, REACT_SKIP, EventKind
from .job import RunJob, TaskState

if TYPE_CHECKING:
    from .scheduler import Scheduler

log = logging.getLogger("rt_runtime.sched")

_CODE = {Reaction.NONE: REACT_NONE, Reaction.SKIP: REACT_SKIP, Reaction.ABORT: REACT_ABORT,
         Reaction.DEGRADE: REACT_DEGRADE}

# (worker, task, job index, t_ns) of a stalled worker.
StallHook = Callable[[int, str, int, int], None]


class Watchdog:
    """Reactions, degrade groups and recovery; the counters live on each TaskState."""

    def __init__(self, sched: "Scheduler") -> None:
        self.s = sched
        self.groups: dict[str, list[TaskState]] = {}
        for ts in sched.tasks.values():
            if ts.group is not None:
                self.groups.setdefault(ts.group, []).append(ts)
        for members in self.groups.values():
            members.sort(key=lambda m: m.name)
        self.on_stall: StallHook | None = None
        self.stalled: dict[int, tuple[str, int, int]] = {}   # worker -> (task, job, since)
        # Tasks a supervisor (e.g. the safety monitor in minimal-risk) holds in their fallback:
        # clean jobs do not switch them back while they are named here.
        self.held: set[str] = set()

    def _members(self, ts: TaskState) -> list[TaskState]:
        return self.groups[ts.group] if ts.group is not None else [ts]

    def react(self, job: RunJob, reaction: Reaction, t: int) -> None:
        """Apply a task's reaction to a job that missed (or overran)."""
        ts = job.ts
        ts.clean = 0
        if job.fallback:
            # Already the fallback: nothing safer to switch to, and skipping or aborting it would leave
            # the last nominal output standing. Its output is published late, at finish (counted as a miss).
            reaction = Reaction.NONE
        if reaction is Reaction.SKIP:
            job.drop = True
        elif reaction is Reaction.NONE:
            job.late_ok = True
        elif reaction is Reaction.ABORT:
            self.s.abort(job, t)
        else:
            self.degrade(ts, t)
            self.s.abort(job, t)
        self.s.emit(EventKind.REACTION, t, ts.name, job.index, _CODE[reaction], ts.mode)

    def overrun(self, job: RunJob, t: int, exec_ns: int) -> None:
        """A job has executed ``exec_ns`` (past its budget) at ``t``: count it and react, once per job."""
        if job.overrun:
            return
        ts = job.ts
        job.overrun = True
        ts.c.overruns += 1
        self.s.emit(EventKind.OVERRUN, t, ts.name, job.index, exec_ns, ts.wcet)
        if ts.on_overrun is Reaction.NONE:
            ts.clean = 0
            self.s.emit(EventKind.REACTION, t, ts.name, job.index, REACT_NONE, ts.mode)
        else:
            # The reaction changes what gets published because of how long execution took.
            self.s.mark_nondeterministic(t, f"task '{ts.name}' job {job.index} overran its budget "
                                            f"({ts.on_overrun.value})")
            self.react(job, ts.on_overrun, t)

    def degrade(self, ts: TaskState, t: int) -> None:
        """Switch the task's group (or the task) to its fallback graphs; later releases run them."""
        for m in self._members(ts):
            m.clean = 0
            if m.mode == 0 and m.executors[1] is not None:
                m.mode = 1
                m.c.degraded += 1
                start_reserved(self.s, m, t)   # a chain member: its fallback on its own period from now
                if m is not ts:
                    self.s.emit(EventKind.REACTION, t, m.name, -1, REACT_DEGRADE, 1)

    def clean(self, job: RunJob, t: int) -> None:
        """A job published on time: count a clean cycle and maybe switch its group back."""
        ts = job.ts
        if job.overrun:
            ts.clean = 0
            return
        ts.clean += 1
        if ts.mode == 1:
            members = self._members(ts)
            degraded = [m for m in members if m.mode == 1]
            if all(m.clean >= m.recover_after and m.name not in self.held for m in degraded):
                for m in degraded:
                    m.mode = 0
                    m.c.recovered += 1
                    self.s.emit(EventKind.REACTION, t, m.name, job.index if m is ts else -1, REACT_RECOVER, 0)

    def stall(self, worker: int, job: RunJob, t: int) -> None:
        """Report a worker whose current op has not returned for too long; the others go on."""
        self.stall_in(worker, job.ts, job.index, job.ops_done, t)

    def stall_in(self, worker: int, ts: Any, index: int, op: int, t: int) -> None:
        """Report a worker stuck in task ``ts``'s op ``op`` of job ``index`` (-1: a speculative op)."""
        ts.c.stalls += 1
        # Seen on the wall clock (the watchdog thread): the count is in the diagnostics and the safety
        # monitor reacts to it, so what is published now depends on how long the op took.
        what = f"job {index}" if index >= 0 else "speculation"
        self.s.mark_nondeterministic(t, f"worker {worker} stalled in task '{ts.name}' {what}")
        self.stalled[worker] = (ts.name, index, t)
        self.s.emit(EventKind.STALL, t, ts.name, index, worker, op)
        log.warning("rt_runtime.sched: worker %d stalled in task '%s' %s, op %d (detected at t=%dns)",
                    worker, ts.name, what, op, t)
        if self.on_stall is not None:
            self.on_stall(worker, ts.name, index, t)

    def unstall(self, worker: int) -> None:
        """The stalled op returned after all."""
        self.stalled.pop(worker, None)

    def status(self) -> dict[str, Any]:
        """Which workers are stalled now, and which tasks run their fallback."""
        return {"stalled": dict(self.stalled),
                "degraded": sorted(ts.name for ts in self.s.tasks.values() if ts.mode == 1)}
