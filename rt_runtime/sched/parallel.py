"""Parallel commit: the virtual clock decides the schedule, N threads compute it, results are committed in logical order.

What is booked, settled and pinned when, and why the outputs are the same for every N: docs/CYCLE.md, "Parallel commit".
"""
from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable

from ..exec.executor import GraphExecutor
from .events import DROP_NO_INPUT, EventKind
from .job import ABORTED, FINISHED, RunJob
from .pool import Computation, ComputePool, HandOver, NoInput, record_compare

_K = EventKind
_MEASURED = int(EventKind.MEASURED)


class _Booking:
    """What the driver reads of a deferred redundant job's executor: the steps it books (``graph.ops``)."""

    __slots__ = ("graph", "ops")

    def __init__(self, ops: list[Any]) -> None:
        self.graph = self
        self.ops = ops


def booked_ops(ex: Any) -> list[Any] | None:
    """The steps the logical schedule books for one job of ``ex`` whatever its results: a time-redundant
    executor declares them (``booked_ops``); None for another executor, whose steps cannot be known ahead."""
    declared = getattr(ex, "booked_ops", None)
    return declared() if declared is not None else None


class ParallelCommit:
    """The driver's side: start deferred jobs' computations, settle them where their results are read."""

    def __init__(self, s: Any, threads: int, measure: Callable[[], int] = time.thread_time_ns) -> None:
        self.s = s
        self.threads = max(1, threads)
        eager = bool(s.speculators)   # speculation reads outputs not yet published: compute each job at its start
        if eager:
            self.threads = 1
        self.booking: dict[int, _Booking] = {}   # id(redundant executor) -> the steps its jobs book
        for ts in s.tasks.values():
            ok = ts.spec is None
            for ex in ts.executors:
                if ex is None or type(ex) is GraphExecutor:
                    continue
                ops = booked_ops(ex)
                if ops is None:
                    ok = False
                else:
                    self.booking[id(ex)] = _Booking(ops)
            ts.deferred = ok
            if ok:
                for ex in ts.executors:
                    if ex is not None and id(ex) in self.booking:
                        ex.attach(ts.name, record_compare)   # traced at the settle point, not from a worker thread
        self.pool = ComputePool(self.threads, measure, eager)
        self.last: dict[str, Computation] = {}      # task -> its latest computation
        self.open: deque[Computation] = deque()     # started, not settled, in start order
        self.zombies: list[Computation] = []        # of aborted jobs: their references go once they are done
        self.hw = False                             # trace MEASURED steps (set by the driver)
        self.betting = False                        # no result is published before it is computed

    # ---- the driver's hooks -----------------------------------------------------------------
    def start(self, job: RunJob) -> None:
        """A deferred job's first dispatch: book its ops without running them, compute it on the pool."""
        ts = job.ts
        ex = job.executor
        b = self.booking.get(id(ex))
        if b is not None:   # a redundant job books its nominal steps, whatever its copies do
            job.executor = b
            job.last_op = len(b.ops) - 1
        job.gen = _phantom(job.last_op + 1)
        inputs = job.inputs
        if ts.meta is not None:   # the pool's rows are reused round-robin: the computation keeps its own
            inputs = dict(inputs)
            for name in ts.meta.names:
                if name in inputs:
                    inputs[name] = inputs[name].clone()
        refs = list(job.pins)
        refs += [(ch, slot) for (_, ch), slot in zip(ts.writers, job.outs) if slot.index >= 0]
        for _, slot in refs:
            slot.refs += 1
        c = Computation(job, ex, inputs, refs)
        after = [h.producer for h in job.handovers] if job.handovers else []
        if job.reads:
            after += self.waits_for(job, c)
        if job.handovers:
            c.handovers = job.handovers
            job.handovers = ()
        prev = self.last.get(ts.name)
        if prev is not None:
            after.append(prev)
        job.comp = c
        self.pool.submit(c, after)
        self.last[ts.name] = c
        self.open.append(c)
        if self.zombies:
            self._reap()

    def waits_for(self, job: RunJob, c: Computation) -> list[Computation]:
        """Computations ``c`` must wait for besides its task's previous one and its hand-overs (none here)."""
        return []

    def make_room(self, ch: Any, t: int) -> None:
        """Called only where ``betting``: nothing is held on a bet here."""

    def defer_egress(self, ch: Any, t: int, seq: int, slot: Any) -> bool:
        """Called only where ``betting``: no egress is held here."""
        return False

    def at_deadline(self, job: RunJob, t: int) -> None:
        """Before a job's deadline entry: a job finished by then publishes now, so settle it first."""
        c = job.comp
        if c is None or c.settled or job.state != FINISHED:
            return
        err = self.settle(c, t)
        if err is not None:
            self.fail(job, t, err)

    def at_finish(self, job: RunJob, t: int) -> BaseException | None:
        """Before a job's last op is booked: settle it if its result is read at its finish; returns the
        error an op raised (booked by the caller as the serial driver books one: the job ends here)."""
        c = job.comp
        if c.settled:
            return None
        if job.ts.on_finish or job.missed or job.drop:
            return self.settle(c, t)
        return None

    def hand_over(self, nxt: RunJob, gin: str, ch: Any, rid: int, src: RunJob, oi: int, t: int) -> None:
        """A chain member is released by ``src``'s finish at ``t``: it will read ``src``'s output ``oi`` once
        ``src`` has computed, or, if that fails, what the channel holds now (pinned here, stale)."""
        ts = nxt.ts
        slot = src.outs[oi]
        if slot.index >= 0:   # pinned until the member is done with it (a bare slot: it reads the held copy)
            slot.refs += 1
            nxt.pins.append((ch, slot))
        fb = ch.peek(rid)
        meta = None
        if fb is not None:
            fb.refs += 1
            nxt.pins.append((ch, fb))
        if ts.meta is not None and gin in ts.meta.row_of:
            ts.meta.fill(nxt.meta_block, gin, t, -1, t, False, src.stamp_ns)   # handed over: now, no seq yet
            if fb is not None:
                import torch

                r = ch.readers[rid]
                k = ts.meta.row_of[gin]
                meta = (ts.meta.names[k], torch.tensor([fb.t_ns, fb.seq, t - fb.t_ns, int(fb.seq <= r.last_seq),
                                                            fb.stamp_ns]))
        if not nxt.handovers:
            nxt.handovers = []
        nxt.handovers.append(HandOver(gin, src.comp, oi, fb, meta))
        nxt.inputs[gin] = None   # resolved by its computation

    def dropped(self, job: RunJob) -> None:
        """The scheduler killed a job: its computation need not run; its references go once it is done."""
        c = job.comp
        if c is not None and not c.settled:
            self.pool.cancel(c)
            c.settled = True
            self.zombies.append(c)

    # ---- settling ---------------------------------------------------------------------------
    def settle(self, c: Computation, t: int) -> BaseException | None:
        """Wait for ``c``, trace its steps, fill what it could not, drop its references; its op error."""
        self.pool.wait(c)
        c.settled = True
        job = c.job
        s = self.s
        if self.hw:
            name, index, emit = job.ts.name, job.index, s.hot.emit
            for i, ns in enumerate(c.steps):
                emit(_MEASURED, t, name, index, i, ns)
        for verdict, copies in c.compares:
            s.emit(_K.COMPARE, t, job.ts.name, job.index, verdict, copies)
        err = c.error
        if err is None:
            if c.fill_error is not None:
                self._release(c)
                raise c.fill_error
            held = c.held
            if held is not None and job.outs and job.state != ABORTED:
                outs = job.outs
                for i, (_, ch) in enumerate(c.writers):
                    if held[i] is not None:
                        outs[i] = ch.fill(outs[i], held[i])
        self._release(c)
        return err

    def fail(self, job: RunJob, t: int, err: BaseException) -> None:
        """A job finished in the logical schedule whose computation raised: it ends here, unpublished."""
        s = self.s
        ts = job.ts
        c = ts.c
        if isinstance(err, NoInput):   # as the serial driver counts a chain member it could not feed
            c.no_input += 1
            s.emit(_K.DROP, t, ts.name, job.index, DROP_NO_INPUT, 1)
        else:
            s.book_error(job, err, "an op")
        c.finished -= 1
        c.aborted += 1
        s.cancel_outputs(job)
        job.aborted = True
        job.state = ABORTED
        s.emit(_K.ABORT, t, ts.name, job.index, -1, job.ops_done)

    def _release(self, c: Computation) -> None:
        for ch, slot in c.refs:
            ch.unpin(slot)
        c.refs = []
        c.inputs = {}   # (``held`` stays: a chain member computed later may still read it)
        opened = self.open
        while opened and opened[0].settled:
            opened.popleft()

    def _reap(self) -> None:
        # Every submitted computation ends done (a cancelled one without running): then its slots are free.
        keep = []
        for c in self.zombies:
            if c.done:
                self._release(c)
            else:
                keep.append(c)
        self.zombies = keep

    def egress_floor(self) -> int:
        """The oldest instant whose egress waits for a computation: none here (a large number)."""
        return 1 << 62

    def settle_all(self, t: int) -> None:
        """Settle what was published before it was computed: nothing is, here."""

    def abandon(self) -> None:
        """The run ended in an error: ``close`` only waits for the computations (nothing here to skip)."""

    def close(self, t: int) -> None:
        """End of the run: wait for every computation, trace the steps of those never settled, stop the pool."""
        for c in list(self.open):
            if not c.settled:
                try:
                    self.settle(c, t)   # nothing is published any more: only its steps are traced
                except Exception:  # noqa: BLE001 - a contract error here must not mask the run's own outcome
                    c.settled = True
        self.pool.close()   # runs what is queued (cancelled ones end at once), then stops
        self._reap()
        self.open.clear()

    def stats(self) -> dict[str, int]:
        """Threads, the CPU time they spent computing, the wall time the driver waited for results."""
        pool = self.pool
        return {"threads": self.threads, "compute_ns": pool.busy_ns, "driver_compute_ns": pool.driver_busy_ns,
                "waited_ns": pool.waited_ns}


def _phantom(n: int) -> Any:
    """The op indices of a job whose ops run elsewhere: the driver books them on the virtual clock."""
    yield from range(n)
