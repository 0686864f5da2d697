"""Trace events: the kinds the scheduler emits, and the sink protocol a tracer implements.

Every step of a cycle is an event ``(kind, t_ns, task, job_index, a, b)``; what ``a`` and ``b`` mean
per kind: docs/CYCLE.md, "One instant t, in order" (the table after the steps).
"""
from __future__ import annotations

from enum import IntEnum
from typing import Callable, NamedTuple, Protocol, Sequence, runtime_checkable


class EventKind(IntEnum):
    """What happened; ints so a columnar tracer can store them in a small integer column."""

    RELEASE = 0
    SNAPSHOT = 1
    START = 2
    PREEMPT = 3
    RESUME = 4
    OP_START = 5
    OP_END = 6
    FINISH = 7
    PUBLISH = 8
    DEADLINE = 8  # the same instant: under LET a job's outputs are published at its deadline
    MISS = 9
    OVERRUN = 10
    REACTION = 11
    DROP = 12
    ABORT = 13
    STALL = 14
    COMPARE = 15  # a redundant job compared (and maybe voted on) its copies' outputs
    SAFETY = 16   # the safety supervisor changed state: nominal / degraded / minimal-risk
    MEASURED = 17  # budget timing: the CPU time an op really took, at its logical start (hardware timeline)
    CHAIN = 18     # a chain member released by its predecessor's finish (which job of the predecessor)


# The high-rate kinds (the bulk of a trace): the scheduler emits them through ``Scheduler.hot``, which a
# listener installed beside the tracer that acts on none of them (``safety.monitor``) leaves alone.
HOT = frozenset({EventKind.RELEASE, EventKind.SNAPSHOT, EventKind.START, EventKind.PREEMPT, EventKind.RESUME,
                 EventKind.OP_START, EventKind.OP_END, EventKind.FINISH, EventKind.DROP, EventKind.MEASURED,
                 EventKind.CHAIN})

# Reaction codes (``a`` of REACTION).
REACT_NONE, REACT_SKIP, REACT_ABORT, REACT_DEGRADE, REACT_RECOVER = 0, 1, 2, 3, 4
REACT_SPEC_HIT, REACT_SPEC_MISS = 5, 6   # a speculative result committed / every hypothesis missed
# Drop reasons (``a`` of DROP).
DROP_CHANNEL, DROP_NO_INPUT, DROP_BACKLOG, DROP_OUTPUT = 1, 2, 3, 4
# Comparison verdicts (``a`` of COMPARE): copies agreed; a majority outvoted a faulty copy; no
# majority (the job published its fallback graph's outputs instead).
COMPARE_MATCH, COMPARE_VOTED, COMPARE_NO_MAJORITY = 0, 1, 2


@runtime_checkable
class EventSink(Protocol):
    """Anything with ``emit`` can subscribe to the scheduler's events (a tracer, a test, a logger)."""

    def emit(self, kind: int, t_ns: int, task: str, job_index: int, a: int = 0, b: int = 0) -> None:
        """Record one event; called on the hot path, so keep it cheap and never block."""


class Observer(EventSink, Protocol):
    """An extension that watches every event of a run (the live view): told the run's tasks before the first.
    One with an ``on_output(channel, t_ns, value)`` also gets each egress channel's host copy (the egress
    adapter's own, not to be written to) as it is published."""

    def attach(self, tasks: Sequence[str], stamp: Callable[[int], int] | None = None) -> None:
        """The names of the tasks whose events follow (a viewer advertises their channels now, not at the
        first event, so a client that subscribes before the run starts misses nothing), and ``stamp``: the
        wall or ROS time (ns) of a logical instant, as the run's outputs are stamped."""


class NullSink:
    """The default sink: drops everything. The runtime checks ``enabled`` and skips the call."""

    enabled = False

    def emit(self, kind: int, t_ns: int, task: str, job_index: int, a: int = 0, b: int = 0) -> None:
        """Do nothing."""


class Event(NamedTuple):
    """One recorded event."""

    kind: EventKind
    t_ns: int
    task: str
    job_index: int
    a: int = 0
    b: int = 0


class RecordingSink:
    """Keeps every event in a list (tests, small runs); ``list.append`` is safe across threads."""

    enabled = True

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, kind: int, t_ns: int, task: str, job_index: int, a: int = 0, b: int = 0) -> None:
        """Append the event."""
        self.events.append(Event(EventKind(kind), t_ns, task, job_index, a, b))

    def of(self, kind: EventKind, task: str | None = None) -> list[Event]:
        """The events of one kind, optionally of one task, in emission order."""
        return [e for e in self.events if e.kind == kind and (task is None or e.task == task)]


class FanoutSink:
    """Forwards each event to several sinks."""

    enabled = True

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = tuple(s for s in sinks if getattr(s, "enabled", True))

    def emit(self, kind: int, t_ns: int, task: str, job_index: int, a: int = 0, b: int = 0) -> None:
        """Forward to every sink."""
        for s in self.sinks:
            s.emit(kind, t_ns, task, job_index, a, b)
