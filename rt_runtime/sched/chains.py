"""Run-time chains: one LET interval for a whole chain of tasks (docs/CYCLE.md, "Chains"; reserved
members: docs/SAFETY.md, "Degraded mode").

These functions are the scheduler's hooks for chains; they run where the scheduler runs (under
its lock when threaded) and allocate only per instance, not per op.
"""
from __future__ import annotations

from typing import Any

from .commit import Core
from .events import DROP_NO_INPUT, EventKind
from .job import ABORTED, READY, WAITING, RunJob, TaskState
from .timeline import PUBLISH, RELEASE, Entry, new_entry


_K = EventKind
CHAIN_RELEASE = 2   # ``b`` of a RELEASE event: released by its chain predecessor's finish


class ChainState:
    """A chain as the scheduler runs it: its members in order, its deadline, each member's hop deadline."""

    def __init__(self, name: str, members: list[TaskState], deadline_ns: int) -> None:
        self.name = name
        self.members = members
        self.deadline_ns = deadline_ns
        # D_1 + ... + D_k: member k's hop deadline is r + hop_end[k] (its task's deadline, core/chain.py)
        self.hop_end = [ts.deadline for ts in members]
        self.last_open: int | None = None   # the head's latest release: the latest instance
        for k, ts in enumerate(members):
            ts.chain, ts.chain_pos = self, k
        for k, ts in enumerate(members[1:], 1):
            earlier = {ch.name: (j, i) for j, m in enumerate(members[:k]) for i, (_, ch) in enumerate(m.writers)}
            ts.chain_in = [(gin, ch, rid, *earlier[ch.name]) for gin, ch, rid in ts.readers if ch.name in earlier]
            if not ts.chain_in:
                raise ValueError(f"chain '{name}': task '{ts.name}' reads nothing that "
                                 f"{', '.join(repr(m.name) for m in members[:k])} write(s)")
            ts.chain_skip = frozenset(gin for gin, *_ in ts.chain_in)
            fb = ts.executors[1]
            ts.fallback_alone = fb is not None and not ts.chain_skip & {x.name for x in fb.graph.inputs}


class ChainRun:
    """One instance of a chain: the jobs of its members (None where a member could not be released)."""

    __slots__ = ("chain", "release_ns", "end_ns", "jobs")

    def __init__(self, chain: ChainState, release_ns: int) -> None:
        self.chain = chain
        self.release_ns = release_ns
        self.end_ns = release_ns + chain.deadline_ns
        self.jobs: list[RunJob | None] = [None] * len(chain.members)


def open_instance(s: Core, head: RunJob, r: int) -> None:
    """The head's job was released at ``r``: create the other members' jobs, snapshotting their inputs now."""
    chain: ChainState = head.ts.chain
    chain.last_open = r
    for ts in chain.members[1:]:
        arm_timeout(s, ts, r)
    run = ChainRun(chain, r)
    run.jobs[0] = head
    head.chain_run = run
    head.deadline_ns = run.end_ns   # published with the whole chain
    for k in range(1, len(chain.members)):
        ts = chain.members[k]
        if reserved(ts):
            continue   # released on its own period while degraded
        # Counted released with its instance, at r: when it is queued (its predecessor's finish) depends on
        # how fast the machine computes, and the LET counters replay diagnostics carry must not.
        # The chain's outputs describe what its head read: stamped as the head.
        key = s.key(ts.prio, r + chain.hop_end[k], ts.name, r)
        job = s.admit(ts, r, run.end_ns, key, head.stamp_ns, ts.chain_skip)
        if job is None:
            return   # backlog, or a required input never written yet: neither it nor the members after it run
        job.state = WAITING
        job.chain_run = run
        run.jobs[k] = job
        s.schedule(new_entry((run.end_ns, PUBLISH, ts.name, job.index, job, -1)))
        if job.fallback and ts.fallback_alone:
            # Its fallback reads nothing the members before it write: waiting for them would only let a
            # slow upstream starve the minimal-risk plan.
            prev = run.jobs[k - 1]
            _release(s, job, r, prev.index if prev is not None else -1, k)


def release_next(s: Core, job: RunJob, t: int) -> None:
    """Member ``job`` finished (or ended early) at ``t``: release the next member of its instance now."""
    run: ChainRun = job.chain_run
    k = job.ts.chain_pos + 1
    while k < len(run.jobs) and run.jobs[k] is None and reserved(run.chain.members[k]):
        k += 1   # a reserved member is not in this instance: the one after it reads its channel
    if k >= len(run.jobs):
        return
    nxt = run.jobs[k]
    if nxt is None or nxt.state != WAITING or t >= run.end_ns:
        return   # not created, or its miss at the chain's deadline already ended it
    ts = nxt.ts
    for gin, ch, rid, j, oi in ts.chain_in:
        src = run.jobs[j]
        slot = src.outs[oi] if src is not None and src.state != ABORTED and src.outs else None
        if slot is not None and src.comp is not None and not src.comp.settled:
            # Parallel commit: whether the producer's computation succeeds is known only once it ran; the
            # member reads its output then, or the channel's value pinned now if it failed (sched.parallel).
            s.par.hand_over(nxt, gin, ch, rid, src, oi, t)
            continue
        handed = slot is not None and slot.index >= 0 and slot.data is not None
        if handed:
            slot.refs += 1   # the slot stays this instance's until the reader lets go
        else:
            slot = ch.read(rid)   # the producer failed: its last published value, stale
            if slot is None:
                ts.c.no_input += 1
                s.emit(_K.DROP, t, ts.name, nxt.index, DROP_NO_INPUT, 1)
                s.kill(nxt, t, -1)   # which releases the member after it (from the channels)
                return
        nxt.inputs[gin] = slot.data
        nxt.pins.append((ch, slot))
        if ts.meta is not None and gin in ts.meta.row_of:   # handed over: stamped at this instant, no seq yet
            if handed:
                ts.meta.fill(nxt.meta_block, gin, t, -1, t, False, src.stamp_ns)
            else:
                ts.meta.fill(nxt.meta_block, gin, slot.t_ns, slot.seq, t, ch.readers[rid].stale, slot.stamp_ns)
    if ts.meta is not None:
        ts.meta.bind(nxt.meta_block, nxt.inputs)
    _release(s, nxt, t, job.index, k)


def _release(s: Core, job: RunJob, t: int, after: int, k: int) -> None:
    """Queue member ``k``'s ``job`` of an instance at ``t`` (``after``: its predecessor's job index)."""
    ts = job.ts
    job.release_ns = t
    job.state = READY
    if s.tr:
        s.hot.emit(_K.RELEASE, t, ts.name, job.index, ts.worker, CHAIN_RELEASE)
        s.hot.emit(_K.CHAIN, t, ts.name, job.index, after, k)
        s.hot.emit(_K.SNAPSHOT, t, ts.name, job.index, len(job.inputs), 0)
    s.queue(s.workers[ts.worker], job)


def chain_bound(tasks: list[Any], chains: list[Any], periods: Any = None) -> list[ChainState]:
    """ChainStates for the run-time chains (those with a deadline), by task states; ``periods``: member
    name -> its own period: released on its own after 1.5 of them without its chain, and every one
    of them while reserved."""
    by_name = {ts.name: ts for ts in tasks}
    out = [ChainState(c.name, [by_name[n] for n in c.tasks], int(c.deadline_ns)) for c in chains
           if c.deadline_ns is not None]
    for ch in out:
        for ts in ch.members[1:]:
            ts.own_period = int((periods or {}).get(ts.name, 0))
            ts.chain_timeout = ts.own_period * 3 // 2
    return out


def arm_timeout(s: Core, ts: TaskState, t: int) -> None:
    """A member with a period of its own is released on its own if nothing releases it by t + its timeout."""
    if ts.chain_timeout and not reserved(ts):
        s.timeouts += 1
        s.schedule(Entry(t + ts.chain_timeout, RELEASE, ts.name, -s.timeouts, ts))


def timeout(s: Core, ts: TaskState, t: int) -> None:
    """A member's timeout entry: release it on its own (reading the channels), unless its chain opened an
    instance or it ran on its own within the timeout. Measured from the head's releases, not the
    member's own: how long the members before it took must not decide whether it runs twice."""
    if reserved(ts):
        return   # its reserved releases run it every period
    since = t - ts.chain_timeout
    opened, alone = ts.chain.last_open, ts.last_release
    if (opened is None or opened <= since) and (alone is None or alone <= since):
        s.release(ts, t)


def reserved(ts: TaskState) -> bool:
    """Whether a job of ``ts`` released now is a reserved one: its fallback, released on a period of its own
    (a periodic task, or a chain member with a period whose fallback reads nothing from its chain)."""
    if not ts.mode:
        return False
    if ts.chain_pos > 0:
        return ts.fallback_alone and ts.own_period > 0
    return not ts.triggered and ts.join is None


def start_reserved(s: Core, ts: TaskState, t: int) -> None:
    """``ts`` was switched to its fallback at ``t``: a chain member's reserved releases start now (the
    period whose job missed gets its plan too), then follow its own period's grid (``next_on_grid``); a
    periodic task's own releases go on as they were."""
    if ts.chain_pos == 0 or ts.stream or not reserved(ts):
        return
    ts.stream = True
    s.schedule(Entry(t, RELEASE, ts.name, ts.next_index, ts))


def next_on_grid(ts: TaskState, r: int) -> int:
    """The first instant of ``ts``'s own period grid (offset + k * period) after ``r``."""
    p = ts.own_period
    return ts.offset + max(0, (r - ts.offset) // p + 1) * p


def reserved_release(s: Core, ts: TaskState, t: int) -> None:
    """A reserved release entry of a chain member: release it, or, recovered meanwhile, back to its chain."""
    ts.stream = False
    if reserved(ts):
        s.release(ts, t)   # which puts the next one a period later
    else:
        arm_timeout(s, ts, t)   # in its chain again, with its own-period release after 1.5 periods
