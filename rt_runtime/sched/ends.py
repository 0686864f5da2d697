"""The ends of a job: its outputs filled, its finish, its abort, its errors (docs/CYCLE.md, steps 1 and 5).

``JobEnds`` is a part of ``Scheduler`` (which derives from it), kept apart as the one place a job
leaves the ready queues and the workers: finished (then published now or at its deadline, by
``let.publish``), killed (its slots given back, its chain's next member released), or ended by an op
error (``book_error``). It runs where the scheduler runs, under its lock when threaded.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from .chains import release_next
from .events import DROP_OUTPUT, EventKind
from .handoff import in_flight
from .job import ABORTED, DONE, FINISHED, PREEMPTED, READY, RUNNING, RunJob
from .let import publish

_K = EventKind
log = logging.getLogger("rt_runtime.sched")


class JobEnds:
    """How a job ends; the ``Scheduler``'s methods for it (they use its state: ``tr``, ``hot``, ``workers``...)."""

    tr: bool
    hot: Any
    steal: bool
    workers: list[Any]
    speculators: list[Any]
    errors: list[tuple[str, int, BaseException]]
    par: Any
    async_device: bool
    emit: Callable[..., None]   # Scheduler.emit

    def fill_outputs(self, job: RunJob) -> None:
        """Copy the executor's output views into the job's reserved channel slots (at finish); on an
        asynchronous device the copies are launched on the stream that wrote the views (``out_stream``)."""
        outs = job.outs
        ex = job.executor
        views = ex.outputs   # type: ignore[union-attr]
        stream = getattr(ex, "out_stream", None)
        for i, (gout, ch) in enumerate(job.ts.writers):
            outs[i] = ch.fill(outs[i], views[gout], stream)

    def wants_output(self, job: RunJob) -> bool:
        """False if the output will be dropped anyway (skip, or a late job): then do not copy it."""
        return not job.drop and (not job.missed or job.late_ok)

    def finish(self, job: RunJob, t: int, worker: int) -> None:
        """The last op returned (outputs already filled if wanted): publish now or wait for the deadline."""
        ts = job.ts
        c = ts.c
        job.finish_ns = t
        ts.active -= 1
        for ch, s in job.pins:
            ch.unpin(s)
        job.pins = ()
        c.finished += 1
        ts.on = -1
        if self.steal:   # its next job may wait in its worker's queue for this one to end
            cond = self.workers[ts.worker].cond
            if cond is not None:
                cond.notify()
        resp = t - job.release_ns
        if resp > c.max_response_ns:
            c.max_response_ns = resp
        if job.exec_ns > c.max_exec_ns:
            c.max_exec_ns = job.exec_ns
        if self.tr:
            self.hot.emit(_K.FINISH, t, ts.name, job.index, job.exec_ns, worker)
        for sp in self.speculators:   # a new output, or every worker idle now: wake a speculating worker
            cond = self.workers[sp.ts.worker].cond
            if cond is not None and sp.ts.worker != worker:
                cond.notify()
        if not self.wants_output(job):
            self.cancel_outputs(job)
            job.state = DONE
            c.skipped += 1
            if self.tr:
                self.hot.emit(_K.DROP, t, ts.name, job.index, DROP_OUTPUT, 1)
        elif job.missed:                  # reaction "none": publish late, on finish
            job.state = DONE
            publish(self, job, t, True)
        elif ts.on_finish:
            job.state = FINISHED
            publish(self, job, t, True)
        else:
            job.state = FINISHED
        if job.chain_run is not None:
            release_next(self, job, t)

    def book_error(self, job: RunJob, err: BaseException, op: str) -> None:
        """Count an error ``op`` of ``job`` raised (the job is then ended unpublished by the caller); the
        first of a task is logged, the first thousand of the run kept (``errors``)."""
        ts = job.ts
        if not ts.c.errors:
            log.error("rt_runtime.sched: task '%s' job %d: %s raised %r; the job is aborted (further errors of this "
                      "task are only counted)", ts.name, job.index, op, err)
        ts.c.errors += 1
        if len(self.errors) < 1000:
            self.errors.append((ts.name, job.index, err))

    def abort(self, job: RunJob, t: int) -> None:
        """Cancel a job: at once if it is queued, at its next op boundary if it is running."""
        st = job.state
        if st == READY or st == PREEMPTED:
            self.kill(job, t, -1 if st == READY else job.worker)
        elif st == RUNNING:
            job.abort_req = True

    def kill(self, job: RunJob, t: int, worker: int) -> None:
        """End a job that is not executing now: close its graph run, unpin inputs, free its slots."""
        ts = job.ts
        if job.gen is not None:
            job.gen.close()
            job.gen = None
            ts.on = -1
        if job.comp is not None:
            self.par.dropped(job)
        # Its launched ops may still read its inputs on its stream: their slots are refilled after them.
        running = in_flight(job.executor) if self.async_device and job.pins else None
        for ch, s in job.pins:
            ch.unpin(s, running)
        job.pins = ()
        self.cancel_outputs(job)
        ts.active -= 1
        job.aborted = True
        job.state = ABORTED
        ts.c.aborted += 1
        self.emit(_K.ABORT, t, ts.name, job.index, worker, job.ops_done)
        if job.chain_run is not None:
            release_next(self, job, t)

    def cancel_outputs(self, job: RunJob) -> None:
        """Give back a job's reserved output slots unpublished (skipped, killed, or its computation failed)."""
        for (_, ch), slot in zip(job.ts.writers, job.outs):
            ch.cancel(slot)
        job.outs = ()
