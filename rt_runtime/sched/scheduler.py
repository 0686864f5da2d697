"""Scheduler: the pure core of a cycle. Releases, LET snapshots, deadlines and publishes, ingress.

It owns the timeline, a heap of instants at which something happens:

* ``PUBLISH``, the deadline of a job: publish its outputs (LET write) or declare a miss;
* ``INGRESS``, an ingress message becoming visible on its channel;
* ``RELEASE``, the release of a job (periodic, or triggered by a message), which snapshots inputs.

Entries are ``timeline.Entry(t, phase, name, index, payload, stamp)``, unique before the payload, so the order of
everything at one instant is fixed: publishes, then ingress, then releases, each by name then
index. Hence a job released at t sees what was published at t. Nothing here sleeps, spawns a
thread or reads a clock; drivers (``inline``, ``threads``) call it, holding ``lock`` if threaded.
How a job ends (finish, kill, errors) is in ``ends.JobEnds``; how results are committed other than
serially, behind ``commit.Commit``.
"""
from __future__ import annotations

import heapq
import threading
from collections import deque
from typing import Any, Callable, Collection, Iterator, Mapping, Sequence

from .chains import (arm_timeout, chain_bound, next_on_grid, open_instance, reserved, reserved_release,
                     timeout)
from .channel import Channel
from .commit import Commit
from .dispatch import wake_idle
from .ends import JobEnds
from .events import DROP_BACKLOG, DROP_CHANNEL, EventKind, EventSink, FanoutSink
from .join import joined
from .job import DONE, FINISHED, PREEMPTED, READY, RUNNING, WAITING, RunJob, TaskState
from .let import publish, snapshot
from .policy import Policy
from .timeline import INGRESS, PUBLISH, RELEASE, Entry, new_entry

Egress = Callable[[str, int, int, Any], None]   # (channel, t_ns, seq, data view valid during the call)
# On an asynchronous device the data is a host copy, handed over by the driver outside the lock (flush_egress).

_K = EventKind
_push = heapq.heappush
# Prefix of a reserved job's ready-queue key: before any policy key (deadlines and ranks are >= 0).
RESERVED = (-1,)


class Scheduler(JobEnds):
    """Task and channel state, and the handling of every timeline event (see the module docstring)."""

    def __init__(self, tasks: list[TaskState], channels: dict[str, Channel], policy: Policy,
                 sink: EventSink, egress: Egress | None, max_active: int, logical: bool = False,
                 chains: Sequence[Any] = (), chain_periods: Mapping[str, int] | None = None) -> None:
        from .watchdog import Watchdog

        self.tasks = {ts.name: ts for ts in tasks}
        self.channels = channels
        self.policy = policy
        self.key = policy.key   # the one definition of the ready-queue order
        self.sink = sink   # also sets ``hot``
        self.tr = bool(getattr(sink, "enabled", True))
        self.egress = egress
        self.max_active = max_active
        self.steal = False   # work-conserving dispatch across workers (dispatch.py)
        self.workers: list[Any] = []
        self.timeline: list[Entry] = []   # a heap (sched.timeline)
        self.triggers: dict[str, list[TaskState]] = {}
        self.lock = threading.Lock()
        self.inbox: deque[tuple[str, int, Any, int]] = deque()   # ingress pushed from other threads: push's arguments
        self.wake: threading.Event | None = None            # set when the timeline gets an earlier entry
        self.wake_at = 1 << 62                               # the instant the timekeeper sleeps until
        self.deterministic = True
        # Time on a VirtualClock under a machine-independent cost model (budget timing): misses,
        # reactions and finishes are then part of the logical schedule, the same on every run.
        self.logical = logical
        self.hw = False   # record each op's measured time (EventKind.MEASURED) for the hardware timeline
        self.par: Commit | None = None   # how results are committed, but serially (sched.commit; use_commit)
        self.betting = False             # par publishes results before they are computed (sched.optimistic)
        self.adopt = False     # ingress keeps pushed data without a copy (Channel.adopt)
        self.async_device = False   # streams: jobs wait on their inputs' fill events (sched.handoff)
        self.outbox: deque[tuple[str, int, int, Any]] = deque()   # egress copies in flight, in publish order
        self.egress_lock = threading.Lock()   # one flusher at a time, so egress sees publish order
        self.nondeterminism: list[tuple[int, str]] = []
        self.errors: list[tuple[str, int, BaseException]] = []
        self._ingress_seq = 0
        self.watchdog = Watchdog(self)
        self.speculators: list[Any] = []   # tasks whose binding asks for speculation (safety.speculation)
        self.written_channels = {ch.name for ts in tasks for _, ch in ts.writers}
        self.chains = chain_bound(tasks, list(chains), chain_periods)   # run-time chains (sched.chains)
        self.timeouts = 0   # chain members' timeout entries so far (their unique, negative index)
        for ts in tasks:
            sp = ts.binding.speculate
            ts.spec = sp.bind(ts, self) if sp is not None else None
            if ts.spec is not None:
                self.speculators.append(ts.spec)
            if ts.chain_pos > 0:
                arm_timeout(self, ts, ts.offset)   # released by its chain predecessor's finish
                continue
            if ts.join is not None:
                for ch, _ in ts.join_readers:
                    self.triggers.setdefault(ch.name, []).append(ts)
            elif ts.triggered:
                self.triggers.setdefault(ts.task.trigger, []).append(ts)   # type: ignore[arg-type]
            else:
                _push(self.timeline, Entry(ts.offset, RELEASE, ts.name, 0, ts))
            if ts.on_finish:
                self.mark_nondeterministic(0, f"task '{ts.name}' publishes on finish")

    # ---- helpers ----------------------------------------------------------------------------
    @property
    def sink(self) -> EventSink:
        """Where every event goes (``hot``: where the high-rate kinds go, the same sink unless set apart)."""
        return self._sink

    @sink.setter
    def sink(self, sink: EventSink) -> None:
        # Setting the sink sets ``hot`` too; ``listen`` then keeps the tracer there, for the high-rate kinds
        # (``events.HOT``) to skip the fan-out.
        self._sink = sink
        self.hot = sink

    def listen(self, listener: EventSink, hot: bool = False) -> None:
        """The hook for an extension that acts on events (the safety monitor): ``listener`` gets every
        event but the high-rate kinds (``events.HOT``), which go on to ``hot`` (the tracer) alone, unfanned;
        ``hot=True``: the high-rate kinds too (an observer of every job's start and finish, the live view),
        at the cost of a fan-out per event."""
        was = self.hot
        self.sink = FanoutSink(self._sink, listener)
        self.hot = FanoutSink(was, listener) if hot else was
        self.tr = True

    def use_commit(self, commit: Commit) -> None:
        """Commit results through ``commit`` (parallel or optimistic commit) instead of serially."""
        self.par = commit
        self.betting = commit.betting

    def emit(self, kind: int, t: int, task: str, index: int, a: int = 0, b: int = 0) -> None:
        """Forward an event to the sink (callers on hot paths test ``self.tr`` first)."""
        if self.tr:
            self.sink.emit(kind, t, task, index, a, b)

    def mark_nondeterministic(self, t: int, why: str) -> None:
        """From ``t`` on, outputs may depend on timing; say why (first reason first).

        On a logical timeline nothing depends on timing: the event is part of the schedule."""
        if self.logical:
            return
        self.deterministic = False
        if len(self.nondeterminism) < 100:
            self.nondeterminism.append((t, why))

    def schedule(self, entry: Entry) -> None:
        """Add a timeline entry; wake a sleeping timekeeper if it is earlier than its wake-up."""
        _push(self.timeline, entry)
        if entry.t < self.wake_at and self.wake is not None:
            self.wake.set()

    def push(self, channel: str, t_ns: int, data: Any, stamp_ns: int = -1) -> None:
        """Queue an ingress message, visible on ``channel`` at logical ``t_ns`` (data held by reference),
        describing the world at ``stamp_ns`` (-1: at ``t_ns``)."""
        if channel not in self.channels:
            raise KeyError(f"push: no channel named {channel!r} (have: {sorted(self.channels)})")
        seq = self._ingress_seq
        self._ingress_seq = seq + 1
        self.schedule(new_entry((int(t_ns), INGRESS, channel, seq, data, int(stamp_ns))))

    def drain_inbox(self) -> None:
        """Move messages pushed from other threads onto the timeline."""
        inbox = self.inbox
        while inbox:
            self.push(*inbox.popleft())

    def next_ready_event(self) -> int:
        """The first instant on the timeline at which a job may become ready (or a miss be declared):
        a release, a message on a trigger channel, a publish into one, the deadline of an unfinished
        job. Other entries (a message or a publish nobody is triggered by) start nothing."""
        t_min = 1 << 62
        trig = self.triggers
        for e in self.timeline:
            t = e.t
            if t >= t_min:
                continue
            phase = e.phase
            if phase == RELEASE or (phase == INGRESS and e.name in trig):
                t_min = t
            elif phase == PUBLISH:
                job = e.payload
                st = job.state
                if st == READY or st == RUNNING or st == PREEMPTED or (
                        st == FINISHED and not job.ts.on_finish and any(ch.name in trig for _, ch in job.ts.writers)):
                    t_min = t
        return t_min

    def due_publishes(self, until: int) -> Iterator[tuple[int, RunJob]]:
        """``(t, job)`` for every publish entry on the timeline at or before ``until``, in no order: the
        jobs whose outputs a release at ``until`` will read (speculation builds its basis from them)."""
        for e in self.timeline:
            if e.phase == PUBLISH and e.t <= until:
                yield e.t, e.payload

    # ---- the timeline -----------------------------------------------------------------------
    def process(self, entry: Entry) -> None:
        """Handle one timeline entry (already popped)."""
        t, phase, name, index, payload, stamp = entry
        if phase == RELEASE:
            if index < 0:
                timeout(self, payload, t)   # a chain member not released by its chain for its own period
            elif payload.chain_pos > 0:
                reserved_release(self, payload, t)   # a degraded member's own period (sched.chains)
            else:
                self.release(payload, t)
        elif phase == PUBLISH:
            self.deadline(payload, t)
        else:
            self._ingress(name, t, payload, stamp)

    def _ingress(self, name: str, t: int, data: Any, stamp_ns: int) -> None:
        ch = self.channels[name]
        if self.betting:   # bets settled before a full channel takes a slot
            self.par.make_room(ch, t)   # type: ignore[union-attr]
        if self.adopt:
            ch.adopt(t, data, stamp_ns)
        else:
            ch.write(t, data, stamp_ns)
        if ch.last_commit_drops and self.tr:
            self.hot.emit(_K.DROP, t, name, ch.seq - 1, DROP_CHANNEL, ch.last_commit_drops)
        for ts in self.triggers.get(name, ()):
            self.trigger(ts, t)

    def trigger(self, ts: TaskState, t: int) -> None:
        """A new message for an event-triggered task: release it, no sooner than its min inter-arrival."""
        if ts.pending_release:
            return   # one release is already due; it will read the newest data
        if ts.join is not None and not joined(ts):
            return   # an "all" join still waits for another input
        r = t if ts.last_release is None else max(t, ts.last_release + ts.period)
        ts.pending_release = True
        self.schedule(new_entry((r, RELEASE, ts.name, ts.next_index, ts, -1)))

    def release(self, ts: TaskState, r: int) -> None:
        """Release a job at ``r``: snapshot its inputs (LET read) and queue it on its worker."""
        own = ts.mode != 0 and reserved(ts)   # a reserved fallback's release (primary mode: never; no call)
        if ts.triggered:
            ts.pending_release = False
            ts.last_release = r
        elif ts.chain_pos > 0:   # a chain member released on its own (sched.chains: timeout, reserved)
            ts.last_release = r
            if own:
                ts.stream = True
                _push(self.timeline, new_entry((next_on_grid(ts, r), RELEASE, ts.name, ts.next_index + 1, ts, -1)))
            else:
                arm_timeout(self, ts, r)
        else:
            _push(self.timeline, new_entry((r + ts.period, RELEASE, ts.name, ts.next_index + 1, ts, -1)))
        d = r + ts.deadline
        # A degraded task's fallback released on its own period runs ahead of every other job: the
        # reservation the analysis charges (analysis.modes), so an overloaded worker still plans.
        key = self.key(ts.prio, d, ts.name, r)
        job = self.admit(ts, r, d, RESERVED + key if own else key, None,
                         ts.chain_skip if own and ts.chain_pos > 0 else ())
        if job is None:
            if ts.trigger is not None and ts.active >= self.max_active:   # dropped with the message that released it
                ch, rid = ts.trigger
                s = ch.read(rid)
                if s is not None:
                    ch.unpin(s)
                if ts.triggered and ch.unread(rid):
                    self.trigger(ts, r)
            return
        if ts.chain is not None and ts.chain_pos == 0:
            open_instance(self, job, r)   # the whole chain publishes at r + its deadline
        _push(self.timeline, new_entry((job.deadline_ns, PUBLISH, ts.name, job.index, job, -1)))
        if ts.spec is not None and ts.spec.on_release(job, r):
            # A cached hypothesis matched and filled the job's outputs: it finishes at r, here, as any job
            # does. Its worker, idle, may speculate for the next release now.
            job.start_ns = r
            self.finish(job, r, ts.worker)
            cond = self.workers[ts.worker].cond
            if cond is not None:
                cond.notify()
        else:
            self.queue(self.workers[ts.worker], job)
        if ts.trigger is not None and ts.trigger[0].unread(ts.trigger[1]):
            self.trigger(ts, r)   # more queued messages: the next release, one inter-arrival later
        elif ts.join is not None and joined(ts):
            self.trigger(ts, r)

    def admit(self, ts: TaskState, r: int, d: int, key: tuple, stamp: int | None = None,
              skip: Collection[str] = ()) -> RunJob | None:
        """Set up a job of ``ts`` released at ``r``, a task's or a chain member's alike: its index, the
        backlog check, its count as released, its LET read but of ``skip``, the instant its outputs
        describe, its output slots (through the commit: a full channel settles bets first), its executor
        for the task's mode. ``stamp`` None: a job queued now (traced RELEASE and SNAPSHOT, metadata bound,
        stamped from its trigger or its inputs); else a chain member's, stamped ``stamp`` (its head's),
        traced, bound and queued when its predecessor finishes. None: the job was dropped (backlog, or a
        required input never written), counted and traced as such."""
        idx = ts.next_index
        ts.next_index = idx + 1
        c = ts.c
        tr = self.tr
        if ts.active >= self.max_active:
            c.dropped_releases += 1
            if tr:
                self.hot.emit(_K.DROP, r, ts.name, idx, DROP_BACKLOG, 1)
            return None
        job = RunJob(ts, idx, r, d, key)
        c.released += 1
        now = stamp is None
        if now and tr:
            self.hot.emit(_K.RELEASE, r, ts.name, idx, ts.worker, int(ts.triggered))
        stale = 0
        if ts.readers:
            stale = snapshot(self, ts, job, r, skip)
            if stale is None:
                return None
        if now:
            if tr:
                self.hot.emit(_K.SNAPSHOT, r, ts.name, idx, len(job.inputs), stale)
            if ts.meta is not None and ts.readers:
                ts.meta.bind(job.meta_block, job.inputs)
            if ts.trigger is not None and not ts.trigger_is_input:
                ch, rid = ts.trigger
                m = ch.read(rid)
                if m is not None:
                    job.stamp_ns = m.stamp_ns
                    ch.unpin(m)
            if job.stamp_ns < 0:
                job.stamp_ns = r   # a periodic task's outputs describe the world it read at its release
        else:
            job.stamp_ns = stamp
        if ts.writers:   # its output slots, each reserved now (bets settled first where a channel is full)
            if self.betting:
                for _, ch in ts.writers:
                    self.par.make_room(ch, r)   # type: ignore[union-attr]
            job.outs = [ch.reserve() for _, ch in ts.writers]
        mode = ts.mode
        job.fallback = mode
        ex = job.executor = ts.executors[mode]
        job.last_op = len(ex.graph.ops) - 1   # type: ignore[union-attr]
        ts.active += 1
        return job

    def queue(self, w: Any, job: RunJob) -> None:
        """Put a released job on its worker's ready queue (and wake the worker's thread, if any; with
        ``steal``, also an idle worker's while that one is busy)."""
        _push(w.ready, (job.pkey, job))
        if w.cond is not None:
            w.cond.notify()
            if self.steal and w.current is not None:
                wake_idle(self, w)

    def deadline(self, job: RunJob, t: int) -> None:
        """At release + deadline: publish a finished job's outputs, or declare a miss and react."""
        if self.par is not None:
            self.par.at_deadline(job, t)   # a LET publish reads the job's result: settle it first (or bet)
        st = job.state
        ts = job.ts
        if st == FINISHED:
            job.state = DONE
            if not ts.on_finish:
                publish(self, job, t, False)
            if ts.mode or job.overrun:
                self.watchdog.clean(job, t)
            else:
                ts.clean += 1   # the common case, inline: a clean job in primary mode
        elif st == READY or st == RUNNING or st == PREEMPTED or st == WAITING:
            job.missed = True
            ts.c.missed += 1
            self.mark_nondeterministic(t, f"task '{ts.name}' job {job.index} missed its deadline")
            self.emit(_K.MISS, t, ts.name, job.index, job.worker if st == RUNNING or st == PREEMPTED else -1,
                      job.ops_done)
            self.watchdog.react(job, ts.on_miss, t)
            if job.state == WAITING:   # a chain member its predecessor never released: it never runs
                self.kill(job, t, -1)

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per-task counters (see ``job.COUNTERS``), by task name."""
        out = {name: ts.stats() for name, ts in sorted(self.tasks.items())}
        for sp in self.speculators:
            out[sp.ts.name]["speculation"] = sp.stats()
        return out

