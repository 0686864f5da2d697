"""The logical-execution-time read and write: what a job reads at its release, and how its outputs
become visible at its deadline (docs/CYCLE.md, steps 2 and 4 of an instant).

``snapshot`` pins, at release r, the message each input channel holds (an optional input's default
where there is none) and fills the job's metadata rows (``Scheduler.admit`` then reserves a slot per
output for the job to fill); ``publish`` commits the job's reserved output slots at t, triggers the tasks waiting on them and hands them to egress; on an asynchronous device the
egress gets a host copy, delivered by ``flush_egress`` after the driver released the scheduler's lock.
Functions of the scheduler, called where it runs (under its lock when threaded).
"""
from __future__ import annotations

from typing import Collection

from .commit import Core
from .events import DROP_CHANNEL, DROP_NO_INPUT, EventKind
from .job import RunJob, TaskState


_K = EventKind


def snapshot(s: Core, ts: TaskState, job: RunJob, r: int, skip: Collection[str] = ()) -> int | None:
    """LET read at ``r``: pin what each of the job's input channels holds now (but the inputs in
    ``skip``), an optional input's default where its channel is empty, and fill its metadata rows.
    Returns how many inputs were stale; None when a required input has no message yet (then nothing
    stays pinned and the job is counted as released without input)."""
    tr = s.tr
    inputs = job.inputs = {}
    pins = job.pins = []
    stale = 0
    meta = ts.meta
    block = job.meta_block = meta.take() if meta is not None else 0
    for gin, ch, rid in ts.readers:
        if gin in skip:
            continue
        m = ch.read(rid)
        if ch.last_read_drops and tr:
            s.hot.emit(_K.DROP, r, ts.name, job.index, DROP_CHANNEL, ch.last_read_drops)
        if m is None:
            if gin in ts.defaults:   # optional: its empty default, stale
                inputs[gin] = ts.defaults[gin]
                if meta is not None and gin in meta.row_of:
                    meta.fill(block, gin, r, -1, r, True, r)
                stale += 1
                continue
            for ch2, s2 in pins:
                ch2.unpin(s2)
            ts.c.no_input += 1
            if tr:
                s.hot.emit(_K.DROP, r, ts.name, job.index, DROP_NO_INPUT, 1)
            return None
        st = ch.readers[rid].stale
        stale += st
        inputs[gin] = m.data
        if m.pending is not None:   # published on a bet: its computation reads it once its producer ran
            if not job.reads:
                job.reads = []
            job.reads.append((gin, m))
        pins.append((ch, m))
        if ch in ts.stamp_from and (job.stamp_ns < 0 or m.stamp_ns < job.stamp_ns):
            job.stamp_ns = m.stamp_ns   # what released it; of a join's messages, the oldest
        if meta is not None and gin in meta.row_of:
            meta.fill(block, gin, m.t_ns, m.seq, r, st, m.stamp_ns)
    return stale


def publish(s: Core, job: RunJob, t: int, at_finish: bool) -> None:
    """Make a job's outputs visible on its channels at ``t`` (LET write) and hand them to egress."""
    ts = job.ts
    egress = s.egress
    for (_, ch), slot in zip(ts.writers, job.outs):
        seq = ch.commit(slot, t, job.stamp_ns)
        if ch.last_commit_drops and s.tr:
            s.hot.emit(_K.DROP, t, ch.name, seq, DROP_CHANNEL, ch.last_commit_drops)
        if egress is not None:
            if ch.streamed:   # a device-to-host copy now; the driver waits for it after the lock
                s.outbox.append((ch.name, t, seq, ch.egress_copy(slot)))
            elif not s.betting or not s.par.defer_egress(ch, t, seq, slot):   # type: ignore[union-attr]
                egress(ch.name, t, seq, slot.data)
        for tts in s.triggers.get(ch.name, ()):
            s.trigger(tts, t)
    job.outs = ()
    ts.c.published += 1
    if s.tr:
        s.sink.emit(_K.PUBLISH, t, ts.name, job.index, len(ts.writers), int(at_finish))


def flush_egress(s: Core) -> None:
    """Hand the queued egress copies to egress in publish order, each once its copy completed.

    Called by the drivers after releasing ``lock``: waiting for a copy is a host sync."""
    box, egress = s.outbox, s.egress
    with s.egress_lock:
        while box:
            name, t, seq, copy = box.popleft()
            try:
                egress(name, t, seq, copy.result())   # type: ignore[misc]
            finally:
                copy.release()
