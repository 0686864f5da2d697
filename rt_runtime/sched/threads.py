"""The threaded driver: a timekeeper (the calling thread), one thread per worker, a watchdog thread.

The timekeeper owns the timeline: it sleeps until the next instant, then releases, snapshots and
publishes in time order and hands released jobs to their workers' queues. Workers run ops
outside the lock and take it only at op boundaries. The watchdog thread wakes when a running
op's budget or stall limit would run out; it never blocks on a worker, so a worker stuck in an
op that never returns is reported while the others go on.

When every worker is idle, a worker whose tasks speculate (``rt_runtime.safety.speculation``)
runs their hypotheses one op at a time outside the lock, each only if it is expected to end
before the next known instant a job could start; a message arriving from outside (a sensor) can
still find it in such an op, so a mandatory job may wait up to one speculative op (a blocking
term), on its worker or, sharing the interpreter lock, on another.

Worker threads are pinned to a core (``os.sched_setaffinity``) and use SCHED_FIFO where the OS
permits; where it does not, they run as ordinary threads after a one-line warning.
"""
from __future__ import annotations

import heapq
import os
import threading
import time
import warnings
from typing import Any, Iterable

from .clock import set_timer_slack
from .dispatch import Worker, complete_op, next_job, run_op
from .let import flush_egress

_INF = 1 << 62
_warned: set[str] = set()


def _warn_once(key: str, msg: str) -> None:
    """One line per kind of refusal per process, however many threads meet it."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


class ThreadPolicy:
    """The calling thread's CPU set, scheduling policy and timer slack, saved to restore later."""

    def __init__(self) -> None:
        self.cpus = os.sched_getaffinity(0)
        self.policy = os.sched_getscheduler(0)
        self.param = os.sched_getparam(0)

    def restore(self) -> None:
        """Put the thread back as it was."""
        try:
            os.sched_setscheduler(0, self.policy, self.param)
            os.sched_setaffinity(0, self.cpus)
        except OSError:
            pass


def make_realtime(cpus: Iterable[int] | None, priority: int | None, who: str) -> bool:
    """Pin the calling thread to ``cpus`` and make it SCHED_FIFO at ``priority``; False (and a
    one-line warning) where the OS refuses."""
    ok = True
    if cpus:
        try:
            os.sched_setaffinity(0, set(cpus))
        except OSError as e:
            ok = False
            _warn_once("affinity", f"rt_runtime.sched: cannot pin {who} to CPUs {sorted(cpus)} ({e}); threads run "
                                   f"unpinned")
    if priority is not None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except (OSError, AttributeError) as e:
            ok = False
            _warn_once("fifo", f"rt_runtime.sched: SCHED_FIFO not permitted ({e}); {who} and the other runtime "
                               f"threads run SCHED_OTHER")
    set_timer_slack(1)
    return ok


class WorkerThread(threading.Thread):
    """Runs one worker's jobs, op by op, taking the scheduler lock only at op boundaries."""

    def __init__(self, rt: Any, crew: "Crew", w: Worker, priority: int | None) -> None:
        super().__init__(name=f"rt-worker-{w.index}", daemon=True)   # a stalled op must not hang exit
        self.rt, self.crew, self.w, self.priority = rt, crew, w, priority
        self.ready = threading.Event()

    def run(self) -> None:
        rt, w, crew = self.rt, self.w, self.crew
        s, clock, wd = rt.sched, rt.clock, crew.watchdog
        if rt.realtime:
            make_realtime([w.cpu] if w.cpu is not None else None, self.priority, f"worker {w.index}")
        lock, cond = s.lock, w.cond
        now = clock.now
        specs = [sp for sp in s.speculators if sp.ts.worker == w.index]
        cost, mono = rt.cost, time.monotonic_ns
        self.ready.set()

        def speculate() -> bool:
            """Slack: one speculative op of this worker's tasks, if no worker has a job and the op is
            expected to end before anything known can start one (lock held on entry and exit, released
            while the op runs). Python threads share the interpreter lock and the cores: speculating
            while another worker runs a job would slow that job down."""
            if any(x.current is not None or x.ready for x in s.workers):
                return False
            t_next = s.next_ready_event()
            for sp in specs:
                gen = sp.prepare(now(), t_next, cost, True)
                if gen is None:
                    continue
                m0 = mono()
                w.op_t0, w.spec = now(), sp.ts   # the watchdog thread watches a speculative op for stalls
                if wd is not None:
                    wd.watch(w.op_t0 + rt.stall_ns(sp.ts))
                lock.release()
                try:
                    idx, err = sp.run_op(gen)
                finally:
                    lock.acquire()
                    w.spec = None
                    if w.stalled:
                        w.stalled = False
                        s.watchdog.unstall(w.index)
                sp.settle(idx, err, sp.op_cost(cost, mono() - m0), now(), t_next)
                return True
            return False

        def wait_for_job() -> Any:
            """The worker's next job, waiting on its condition until there is one (lock held)."""
            job = next_job(s, w, now())
            while job is None:
                if crew.stopping:
                    return None
                if not (specs and speculate()):
                    cond.wait()
                job = next_job(s, w, now())
            return job

        with lock:
            job = wait_for_job()
        if job is None:
            return
        while True:
            t0 = now()
            w.op_t0 = t0
            w.op_seq += 1
            w.in_op = True
            if wd is not None:
                wd.watch(t0 + min(max(0, job.ts.wcet - job.exec_ns), rt.stall_ns(job.ts)))
            idx, done, err = run_op(job)
            t1 = now()
            w.in_op = False
            filled = False
            if done and err is None and s.wants_output(job) and all(
                    ch.fits(job.executor.outputs[g]) and slot.index >= 0
                    for (g, ch), slot in zip(job.ts.writers, job.outs)):
                s.fill_outputs(job)   # copy outside the lock: the reserved slots are this job's alone
                filled = True
            with lock:
                if w.stalled:
                    w.stalled = False
                    s.watchdog.unstall(w.index)
                complete_op(s, w, job, idx, t0, t1, done, err, filled)
                flush = bool(s.outbox)
                if not flush:
                    job = wait_for_job()
            if flush:   # egress copies published here: wait for them off the lock, then the next job
                flush_egress(s)
                with lock:
                    job = wait_for_job()
            if job is None:
                return


class WatchdogThread(threading.Thread):
    """Catches, while it happens, an op running past its job's budget or never returning."""

    def __init__(self, rt: Any, crew: "Crew", priority: int | None) -> None:
        super().__init__(name="rt-watchdog", daemon=True)
        self.rt, self.crew, self.priority = rt, crew, priority
        self.kick = threading.Event()
        self.wake_at = _INF

    def watch(self, t: int) -> None:
        """A worker's op may need a look at ``t``: wake up earlier if that is sooner."""
        if t < self.wake_at:
            self.wake_at = t
            self.kick.set()

    def run(self) -> None:
        rt = self.rt
        s, clock = rt.sched, rt.clock
        if rt.realtime:
            make_realtime(None, None if self.priority is None else self.priority, "watchdog")
        while not self.crew.stopping:
            nxt = _INF
            self.kick.clear()   # before the scan: a kick during it must not be lost
            with s.lock:
                now = clock.now()
                for w in s.workers:
                    job = w.current
                    spec = w.spec
                    if spec is not None and not w.stalled:   # a speculative op (no job, no budget)
                        at = w.op_t0 + rt.stall_ns(spec)
                        if now >= at:
                            w.stalled = True
                            s.watchdog.stall_in(w.index, spec, -1, spec.spec.ops_done, now)
                        else:
                            nxt = min(nxt, at)
                    if job is None or not w.in_op:
                        continue
                    t0, ts = w.op_t0, job.ts
                    if not job.overrun:
                        at = t0 + ts.wcet - job.exec_ns
                        if now >= at:   # the budget is spent now, mid-op; the op is booked when it ends
                            s.watchdog.overrun(job, now, job.exec_ns + now - t0)
                        else:
                            nxt = min(nxt, at)
                    if not w.stalled:
                        at = t0 + rt.stall_ns(ts)
                        if now >= at:
                            w.stalled = True
                            s.watchdog.stall(w.index, job, now)
                        else:
                            nxt = min(nxt, at)
                self.wake_at = nxt
            if nxt != _INF:
                delay = (nxt - clock.now()) * 1e-9
                if delay > 0:
                    self.kick.wait(delay)
            else:
                self.kick.wait(0.1)


def run_threaded(rt: Any, t_end: int) -> None:
    """Be the timekeeper until logical time ``t_end``: release, snapshot, publish, in time order."""
    s, clock = rt.sched, rt.clock
    tl = s.timeline
    wake = s.wake
    pop = heapq.heappop
    while True:
        wake.clear()
        with s.lock:
            if s.inbox:
                s.drain_inbox()
            now = clock.now()
            while tl and tl[0].t <= now and tl[0].t <= t_end:
                s.process(pop(tl))
            t = tl[0].t if tl else _INF
            nxt = t if t < t_end else t_end
            s.wake_at = nxt
        if s.outbox:   # egress copies of what was published here: waited for off the lock
            flush_egress(s)
        if nxt <= now:
            break
        clock.sleep_until(nxt, wake)
    s.wake_at = _INF


class Crew:
    """The threads of a threaded run: one per worker and the watchdog thread; ``stopping`` tells them to end."""

    def __init__(self, rt: Any, priority: int | None) -> None:
        self.rt = rt
        self.stopping = False
        self.watchdog = WatchdogThread(rt, self, None if priority is None else min(99, priority + 2))
        s = rt.sched
        for w in s.workers:
            w.cond = threading.Condition(s.lock)
            w.thread = WorkerThread(rt, self, w, priority)

    def start(self) -> "Crew":
        """Start the threads; return once each worker is set up (pinned, SCHED_FIFO): the first release is not late."""
        workers = self.rt.sched.workers
        self.watchdog.start()
        for w in workers:
            w.thread.start()
        for w in workers:
            w.thread.ready.wait(5.0)
        return self

    def stop(self, timeout: float = 1.0) -> list[int]:
        """Ask every thread to stop; returns the workers that did not (stuck in an op)."""
        self.stopping = True
        s = self.rt.sched
        with s.lock:
            for w in s.workers:
                if w.cond is not None:
                    w.cond.notify_all()
        self.watchdog.kick.set()
        self.watchdog.join(timeout)
        stuck = []
        deadline = time.monotonic() + timeout
        for w in s.workers:
            if w.thread is not None:
                w.thread.join(max(0.0, deadline - time.monotonic()))
                if w.thread.is_alive():
                    stuck.append(w.index)
        return stuck
