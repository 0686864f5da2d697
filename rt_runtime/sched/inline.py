"""The thread-free driver: the calling thread releases, dispatches and publishes, in time order.

On a ``VirtualClock`` it simulates any number of workers: an op is executed for real when it
starts and completes when virtual time reaches its start plus its cost (from the cost model), so
several workers' ops overlap in virtual time while the host runs them one after another. Nothing
depends on thread timing: the same inputs give the same event sequence, bit for bit.

On a ``WallClock`` it runs one worker in the calling thread: ops run for real, the clock is read
after each, and whatever fell due meanwhile is handled in time order before the next op starts.
"""
from __future__ import annotations

import heapq
import time
from typing import Any

from .dispatch import complete_op, next_job, run_op
from .events import EventKind
from .let import flush_egress

_MEASURED = EventKind.MEASURED
_INF = 1 << 62


def run_inline(s: Any, clock: Any, cost: Any, t_end: int) -> None:
    """Advance the scheduler ``s`` to logical time ``t_end`` in the calling thread."""
    workers = s.workers
    single = workers[0] if len(workers) == 1 else None
    tl = s.timeline
    virtual = clock.virtual
    measured = getattr(cost, "measured", False)   # virtual time = the measurement itself
    mono = getattr(cost, "measure", time.monotonic_ns)
    now_fn = clock.now
    pop = heapq.heappop
    process = s.process
    specs = getattr(s, "speculators", ()) if virtual else ()
    hw = virtual and s.hw and s.tr   # on the wall clock: worker threads (threads.py)
    par = s.par   # parallel commit: deferred jobs are booked here and computed on a pool (parallel.py)
    if par is not None:
        par.hw = hw
    while True:
        if s.outbox:   # egress copies on an asynchronous device: handed over as they complete, in order
            flush_egress(s)
        if s.inbox:
            s.drain_inbox()
        if single is not None:
            t_op = (single.busy_until if single.budget_at == _INF else single.budget_at) \
                if single.op_job is not None else _INF
        else:
            t_op = _INF
            for w in workers:
                if w.op_job is not None:
                    if w.busy_until < t_op:
                        t_op = w.busy_until
                    if w.budget_at < t_op:
                        t_op = w.budget_at
        now = now_fn()
        lim = now if now < t_end else t_end
        while tl and tl[0].t <= lim and tl[0].t < t_op:   # events due before the next op completion
            process(pop(tl))
        if t_op <= lim:   # then op completions (before events at the same instant: on time is on time)
            for w in workers:
                if w.budget_at == t_op:   # the budget runs out mid-op: the watchdog sees it now
                    w.budget_at = _INF
                    s.watchdog.overrun(w.op_job, t_op, w.op_job.ts.wcet)
                    continue
                job = w.op_job
                if job is not None and w.busy_until == t_op:
                    idx, t0, done, err = w.op_index, w.op_t0, w.op_last, w.op_error
                    w.op_job = w.op_error = None
                    if job.comp is not None:   # deferred: its outputs are filled by its computation
                        if done:
                            err = par.at_finish(job, t_op)
                        complete_op(s, w, job, idx, t0, t_op, done, err, True)
                    else:
                        complete_op(s, w, job, idx, t0, t_op, done, err)
            continue
        if now <= t_end:
            started = False
            for w in workers:
                if w.op_job is not None:
                    continue
                job = next_job(s, w, now)
                if job is None:
                    continue
                started = True
                if par is not None and job.comp is None and job.ts.deferred:
                    par.start(job)   # its ops are booked here without running; a pool thread computes it
                if job.comp is not None:   # deferred: book its next op at its budget; nothing runs, nothing to measure
                    idx = job.ops_done
                    t0 = now
                    w.busy_until = t1 = now + cost(job.ts.name, job.index, idx, job.executor.graph.ops[idx], 0)
                    w.op_job, w.op_index, w.op_t0, w.op_last = job, idx, now, idx >= job.last_op
                elif virtual:
                    m0 = mono()
                    first = job.ops_done
                    idx, done, err = run_op(job)
                    m = mono() - m0
                    if hw:   # the hardware timeline: what this step took here (a deferred job's steps are
                        # traced where it is settled)
                        s.hot.emit(_MEASURED, now, job.ts.name, job.index, idx, m)
                    if measured:
                        dt = m
                    else:
                        ops = job.executor.graph.ops
                        n = idx - first + 1
                        per = m // n if n > 0 else m
                        dt = 0
                        for i in range(first, idx + 1):
                            dt += cost(job.ts.name, job.index, i, ops[i], per)
                    t0 = now
                    w.busy_until = t1 = now + dt
                    w.op_job, w.op_index, w.op_t0, w.op_last, w.op_error = job, idx, now, done, err
                else:
                    t0 = now_fn()
                    idx, done, err = run_op(job)
                    w.busy_until = t1 = now_fn()
                    w.op_job, w.op_index, w.op_t0, w.op_last, w.op_error = job, idx, t0, done, err
                if not job.overrun and job.exec_ns + (t1 - t0) > job.ts.wcet:
                    w.budget_at = t0 + max(0, job.ts.wcet - job.exec_ns)
            if started:
                if specs:   # a mandatory job is ready: abandon any hypothesis part-way through
                    for sp in specs:
                        if sp.live:
                            sp.abandon()
                continue
            if specs:   # slack: one speculative op that ends before anything can start a job, if one fits
                t = s.next_ready_event()
                if t_op < t:
                    t = t_op
                if t_end < t:
                    t = t_end
                dt = -1
                for sp in specs:
                    dt = sp.step(now, t, cost, measured, mono)
                    if dt >= 0:
                        break
                if dt >= 0:
                    clock.sleep_until(now + dt, None)   # nothing is due before: the op ran in slack
                    continue
        t = tl[0].t if tl else _INF
        if t_op < t:
            t = t_op
        nxt = t if t < t_end else t_end
        if nxt <= now:
            if s.outbox:
                flush_egress(s)
            break
        wake = s.wake
        if wake is not None:
            wake.clear()
            if s.inbox:
                continue
        s.wake_at = nxt
        clock.sleep_until(nxt, wake)
    s.wake_at = _INF
