"""Optimistic parallel commit: publish a job's result before it is computed, betting it computes cleanly.

When a bet is placed, held, checked and lost, and what is never bet on: docs/CYCLE.md, "Publishing on a bet".
"""
from __future__ import annotations

from collections import deque
from typing import Any

from ..exec.executor import GraphExecutor
from .events import COMPARE_MATCH, EventKind
from .job import FINISHED, RunJob
from .parallel import ParallelCommit
from .pool import Computation

# Slots each channel gets beyond the serial schedule's bound, for messages pinned by results published on
# a bet: how far the threads may compute ahead of the driver before a full channel makes it wait.
BETS_AHEAD = 2
_INF = 1 << 62
_K = EventKind


class Mispredicted(RuntimeError):
    """A result published before it was computed did not compute cleanly: rerun without betting."""


class OptimisticCommit(ParallelCommit):
    """Parallel commit that publishes on a bet and checks each bet when the computation is settled."""

    def __init__(self, s: Any, threads: int, **kw: Any) -> None:
        super().__init__(s, threads, **kw)
        self.betting = self.threads > 1 and all(ts.deferred for ts in s.tasks.values())
        self.late: deque[Computation] = deque()   # published on a bet, not yet settled, in publish order
        self.egress: deque[tuple] = deque()       # (computation or None, channel, t, seq, slot), publish order
        self.bets = 0
        self.lost: str | None = None

    # ---- the driver's hooks -----------------------------------------------------------------
    def at_deadline(self, job: RunJob, t: int) -> None:
        """A job finished by its deadline publishes now: on a bet if its computation is not done."""
        late = self.late
        while late and late[0].done:   # bets already computed: checked now, in publish order
            self._settle_next(t)
        c = job.comp
        if c is None or c.settled or job.state != FINISHED:
            return
        if self.betting and not c.done:
            ex = c.executor
            copies = 0 if type(ex) is GraphExecutor else ex.spec.copies if id(ex) in self.booking else -1
            outs = job.outs
            if any(slot.index < 0 or ch.spec is None or ch.streamed for (_, ch), slot in zip(job.ts.writers, outs)):
                copies = -1
            if copies >= 0:
                for slot in outs:
                    slot.pending = c
                late.append(c)
                self.bets += 1
                if copies:   # the verdict of copies that agree, traced where settling traces it
                    c.expect = (COMPARE_MATCH, copies)
                    self.s.emit(_K.COMPARE, t, job.ts.name, job.index, COMPARE_MATCH, copies)
                return
        super().at_deadline(job, t)

    def waits_for(self, job: RunJob, c: Computation) -> list[Computation]:
        """The producers of the slots ``job`` snapshotted on a bet: ``c`` reads those slots once they ran."""
        reads = job.reads
        if not reads:
            return []
        c.reads = reads
        job.reads = ()
        return [slot.pending for _, slot in reads if slot.pending is not None]

    def defer_egress(self, ch: Any, t: int, seq: int, slot: Any) -> bool:
        """Called at a publish: hold the egress of a slot on a bet (and of every one after it, in order)."""
        if slot.pending is None and not self.egress:
            return False
        slot.refs += 1   # not refilled before its egress
        self.egress.append((slot.pending, ch, t, seq, slot))
        return True

    def make_room(self, ch: Any, t: int) -> None:
        """Before a slot of ``ch`` is reserved: settle bets, oldest first, until one is free."""
        while ch.full and self.late:
            self._settle_next(t)

    # ---- settling ---------------------------------------------------------------------------
    def egress_floor(self) -> int:
        """The oldest instant whose egress still waits for a computation (a large number: none)."""
        return self.egress[0][2] if self.egress else _INF

    def settle_all(self, t: int) -> None:
        """Wait for every bet and check it, in publish order, and hand on all the egress held."""
        while self.late:
            self._settle_next(t)

    def _settle_next(self, t: int) -> None:
        """Settle the oldest bet (waiting for it), check it, and hand on the egress that waited for it."""
        c = self.late.popleft()
        self.pool.wait(c)
        for slot in c.outs:
            if slot.pending is c:
                slot.pending = None
        job = c.job
        compares = c.compares
        if c.expect is not None and compares == [c.expect]:
            compares.clear()   # traced at the bet
        why = f"op error {c.error!r}" if c.error is not None else \
            f"output error {c.fill_error!r}" if c.fill_error is not None else \
            "an output did not fit its slot" if c.held is not None else \
            f"its copies' verdicts were {compares} (traced at the bet as agreeing)" if compares else None
        if why is not None:
            self.lost = f"task '{job.ts.name}' job {job.index}, published at its deadline on a bet: {why}"
            raise Mispredicted(self.lost)
        self.settle(c, t)
        self._flush()

    def _flush(self) -> None:
        q, egress = self.egress, self.s.egress
        while q:
            c, ch, t, seq, slot = q[0]
            if c is not None and not c.settled:
                return
            q.popleft()
            egress(ch.name, t, seq, slot.data)
            ch.unpin(slot)

    def abandon(self) -> None:
        """The run ended in an error: ``close`` checks no bet (a lost one would hide the error)."""
        self.lost = self.lost or "abandoned"

    def close(self, t: int) -> None:
        """Settle the remaining bets (a lost one raises), then as parallel commit closes."""
        try:
            if self.lost is None:
                self.settle_all(t)
        finally:
            super().close(t)

    def stats(self) -> dict[str, int]:
        """As parallel commit's, and the publishes made on a bet."""
        return {**super().stats(), "bets": self.bets}
