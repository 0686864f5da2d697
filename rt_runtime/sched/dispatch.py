"""Dispatcher: workers, their ready queues, and limited preemption at op boundaries.

A worker runs one job at a time, one op at a time. At every op boundary it asks ``next_job``:
abort the current job if the watchdog asked, switch to a more urgent ready job if there is one
(the current one goes back to the queue, preempted), else continue. Ops themselves are never
interrupted, so the longest op of a less urgent task is the blocking term of the analysis.

Tasks are partitioned: each has a worker whose queue its jobs join. With ``steal`` on, dispatch is
work-conserving: a worker with nothing to do takes the most urgent job not started yet from the
queue of a worker busy with another job. A taken job yields at its next op boundary to any job of
the worker's own, however urgent, and goes back to its own worker's queue: so a worker's own jobs
wait for at most one op of a taken job (a blocking term, as above), and a job starts no later than
it would have. Under LET the outputs and their publish instants do not depend on which worker
computed a job (the same outputs for any worker count). A task's jobs never run on two workers at
once: its executor's arena is one.

``run_op`` executes one op outside any lock; ``complete_op`` books it (execution time, budget,
trace) and finishes the job after its last op. Both drivers (inline, threads) use these three.
"""
from __future__ import annotations

import heapq
import threading
from typing import Any

from .events import EventKind
from .handoff import wait_ready
from .job import ABORTED, PREEMPTED, RUNNING, RunJob

_K = EventKind
_pop, _push = heapq.heappop, heapq.heappush


class Worker:
    """One worker: a ready queue (heap on the policy's key), its current job, the op in flight."""

    __slots__ = ("index", "cpu", "ready", "current", "cond", "op_job", "op_index", "op_last", "op_error",
                 "busy_until", "in_op", "op_t0", "op_seq", "stalled", "thread", "budget_at", "spec")

    def __init__(self, index: int, cpu: int | None = None) -> None:
        self.index = index
        self.cpu = cpu
        self.ready: list[tuple[tuple, RunJob]] = []
        self.current: RunJob | None = None
        self.cond: threading.Condition | None = None   # threaded mode: notified on a release
        # The op in flight (inline mode: ``op_job`` is None when there is none), fields rather than a
        # record: set once per op on the hot path, with no allocation.
        self.op_job: RunJob | None = None              # its job
        self.op_index = 0                              # the last op index of the step (run_op may run several)
        self.op_last = False                           # it is the job's last op
        self.op_error: BaseException | None = None     # what it raised
        self.busy_until = 0                            # inline mode: when that op completes
        self.budget_at = 1 << 62                       # inline mode: when it overruns its job's budget
        self.in_op = False                             # threaded mode, read by the watchdog thread
        self.op_t0 = 0                                 # when the op in flight started (both modes)
        self.op_seq = 0
        self.stalled = False
        self.thread: Any = None
        self.spec: Any = None                          # threaded mode: the task whose speculative op runs

    def __repr__(self) -> str:
        return f"Worker({self.index}, cpu={self.cpu}, ready={len(self.ready)}, current={self.current})"


def next_job(s: Any, w: Worker, now: int) -> RunJob | None:
    """At an op boundary of ``w``: abort, preempt or continue; returns the job whose next op runs."""
    ready = w.ready
    while ready and ready[0][1].state == ABORTED:
        _pop(ready)
    job = w.current
    if job is not None:
        if job.abort_req:
            w.current = None
            s.kill(job, now, w.index)
        elif ready and (ready[0][0] < job.pkey or job.ts.worker != w.index):   # taken: yields to any own job
            job.state = PREEMPTED
            home = s.workers[job.ts.worker]
            _push(home.ready, (job.pkey, job))   # a taken job goes back to its own worker's queue
            job.ts.on = home.index               # and is resumed there, by no one else
            if home is not w and home.cond is not None:
                home.cond.notify()
            w.current = None
            job.ts.c.preemptions += 1
            if s.tr:
                s.hot.emit(_K.PREEMPT, now, job.ts.name, job.index, w.index, job.ops_done)
        else:
            return job
        while ready and ready[0][1].state == ABORTED:
            _pop(ready)
    job = _take(ready, w.index) if ready else None
    if job is None:
        if not s.steal:
            return None
        job = _steal(s, w)
        if job is None:
            return None
    if job.gen is None:
        if s.async_device and job.pins:   # its stream waits on the fills of what it reads, not its thread
            wait_ready(job.executor, job.pins)
        job.start_ns = now
        job.gen = job.executor.steps(job.inputs)   # type: ignore[union-attr]
        job.ts.c.started += 1
        if s.tr:
            s.hot.emit(_K.START, now, job.ts.name, job.index, w.index, job.fallback)
    elif s.tr:
        s.hot.emit(_K.RESUME, now, job.ts.name, job.index, w.index, job.ops_done)
    job.state = RUNNING
    job.worker = w.index
    job.ts.on = w.index
    w.current = job
    if s.steal and ready:   # more waits behind this job: an idle worker's thread may take it
        wake_idle(s, w)
    return job


def wake_idle(s: Any, busy: Worker) -> None:
    """Notify the first idle worker thread other than ``busy`` (threaded mode, with ``steal``)."""
    for o in s.workers:
        if o is not busy and o.current is None and o.cond is not None:
            o.cond.notify()
            return


def _take(ready: list, worker: int) -> RunJob | None:
    """Pop the most urgent job of ``ready`` whose task is not running on another worker (a task's
    executor runs one job at a time); None if there is none."""
    job = ready[0][1]
    if job.ts.on < 0 or job.ts.on == worker:   # always so when no worker takes others' jobs
        return _pop(ready)[1]
    held = [_pop(ready)]
    found = None
    while ready:
        e = _pop(ready)
        if e[1].state != ABORTED and (e[1].ts.on < 0 or e[1].ts.on == worker):
            found = e[1]
            break
        held.append(e)
    for e in held:
        _push(ready, e)
    return found


def _steal(s: Any, w: Worker) -> RunJob | None:
    """Work-conserving dispatch: idle ``w`` takes the most urgent job not started yet from the queue of
    a worker busy with another job (in worker order on ties: deterministic on the virtual clock)."""
    best: tuple | None = None
    src: Worker | None = None
    for o in s.workers:
        if o is w or o.current is None or not o.ready:
            continue
        e = o.ready[0]
        job = e[1]
        if job.state == ABORTED or job.gen is not None or job.ts.on >= 0:
            continue
        if best is None or e[0] < best[0]:
            best, src = e, o
    if best is None:
        return None
    _pop(src.ready)   # type: ignore[union-attr]
    job = best[1]
    job.ts.c.taken += 1   # its START event names the worker that ran it
    return job


def run_op(job: RunJob) -> tuple[int, bool, BaseException | None]:
    """Run the job's next op: (index of the last op run, whether the job is done, an op's error)."""
    gen = job.gen
    try:
        idx = next(gen)   # type: ignore[arg-type]
        if idx >= job.last_op:
            for _ in gen:  # type: ignore[union-attr]  # the executor's tail: count the job, maybe capture
                pass
            return idx, True, None
        return idx, False, None
    except StopIteration:   # no op ran: an executor whose step count varies (e.g. a vote not needed) ended
        return job.ops_done - 1, True, None
    except Exception as e:  # an op that raises ends its job, not the runtime; it ran, so it is booked
        return job.ops_done, True, e


def complete_op(s: Any, w: Worker, job: RunJob, idx: int, t0: int, t1: int, done: bool,
                err: BaseException | None, filled: bool = False) -> None:
    """Book an op that ran from ``t0`` to ``t1``: execution time, budget, trace; finish after the last."""
    ts = job.ts
    dt = t1 - t0
    before = job.exec_ns
    job.exec_ns = before + dt
    if s.tr and idx >= job.ops_done:   # (idx < ops_done: the executor ended without running an op)
        s.hot.emit(_K.OP_START, t0, ts.name, job.index, idx, w.index)
        s.hot.emit(_K.OP_END, t1, ts.name, job.index, idx, w.index)
    job.ops_done = idx + 1
    if err is not None:
        s.book_error(job, err, f"op {idx + 1}")
        job.gen = None
        w.current = None
        s.kill(job, t1, w.index)
        return
    if job.exec_ns > ts.wcet and not job.overrun:   # a driver that did not watch the op: stamp the crossing
        s.watchdog.overrun(job, t0 + max(0, ts.wcet - before), ts.wcet)
    if done:
        w.current = None
        job.gen = None
        if job.abort_req:
            s.kill(job, t1, w.index)
            return
        if job.outs and not filled and s.wants_output(job):
            s.fill_outputs(job)
        s.finish(job, t1, w.index)
