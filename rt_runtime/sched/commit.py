"""The seam between the scheduler and how a job's result is committed: the ``Commit`` protocol.

The scheduler runs one path for every job (release -> snapshot -> compute -> book -> commit,
docs/CYCLE.md). Serial commit, where the driver runs each op where it is booked, needs nothing
here: ``Scheduler.par`` is None. Parallel commit (``sched.parallel``) and optimistic commit
(``sched.optimistic``) are strategies behind this protocol, installed with ``Scheduler.use_commit``;
the scheduler and its drivers call them at these points only:

* ``start``: a deferred job's first dispatch (the inline driver books its ops, a pool computes it);
* ``at_finish``: its last op is booked; settle it now if its result is read at its finish;
* ``at_deadline``: its LET publish is due (``Scheduler.deadline``): settle it, or bet on it;
* ``hand_over``: a chain member is released by a producer whose computation may not have run;
* ``dropped``: the scheduler killed the job;
* ``make_room`` / ``defer_egress``: only where ``betting``: before a slot is reserved on a full
  channel (settle bets first), and at a publish (hold the egress of a result on a bet);
* ``egress_floor``, ``settle_all``, ``abandon``, ``close``, ``stats``: what ``Runtime`` asks for the
  replay and at the end of a run.

``Core`` is the other side: what the scheduler's own hook modules (``let``, ``chains``) use of the
``Scheduler`` they are called with, declared here so that they need not import it.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable, Collection, Protocol

from .events import EventSink
from .job import RunJob, TaskState
from .timeline import Entry


class Commit(Protocol):
    """How a job's computation and its commit meet (module docstring)."""

    betting: bool   # results published before they are computed: make_room and defer_egress are called
    hw: bool        # trace the MEASURED steps of what it computes (set by the inline driver)
    threads: int

    def start(self, job: RunJob) -> None: ...
    def at_finish(self, job: RunJob, t: int) -> BaseException | None: ...
    def at_deadline(self, job: RunJob, t: int) -> None: ...
    def hand_over(self, nxt: RunJob, gin: str, ch: Any, rid: int, src: RunJob, oi: int, t: int) -> None: ...
    def dropped(self, job: RunJob) -> None: ...
    def make_room(self, ch: Any, t: int) -> None: ...
    def defer_egress(self, ch: Any, t: int, seq: int, slot: Any) -> bool: ...
    def egress_floor(self) -> int: ...
    def settle_all(self, t: int) -> None: ...
    def abandon(self) -> None: ...
    def close(self, t: int) -> None: ...
    def stats(self) -> dict[str, int]: ...


class Core(Protocol):
    """The part of ``Scheduler`` its hook modules (``let``: LET read and write; ``chains``) use."""

    tr: bool
    hot: EventSink
    sink: EventSink
    betting: bool
    par: Commit | None
    egress: Callable[[str, int, int, Any], None] | None
    outbox: deque[tuple[str, int, int, Any]]
    egress_lock: threading.Lock
    triggers: dict[str, list[TaskState]]
    workers: list[Any]
    timeouts: int
    key: Callable[..., tuple]

    def emit(self, kind: int, t: int, task: str, index: int, a: int = 0, b: int = 0) -> None: ...
    def schedule(self, entry: Entry) -> None: ...
    def trigger(self, ts: TaskState, t: int) -> None: ...
    def release(self, ts: TaskState, r: int) -> None: ...
    def admit(self, ts: TaskState, r: int, d: int, key: tuple, stamp: int | None = None,
              skip: Collection[str] = ()) -> RunJob | None: ...
    def queue(self, w: Any, job: RunJob) -> None: ...
    def kill(self, job: RunJob, t: int, worker: int) -> None: ...
