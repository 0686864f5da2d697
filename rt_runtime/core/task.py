"""Task and Job: the scheduling model.

A ``Task`` is a recurring piece of work: periodic (period, offset, relative deadline) or released
by a new message on an input channel with a minimum inter-arrival time (sporadic, for the
analysis). Each release of a task is a ``Job``. All times are integer nanoseconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .graph import Graph

CRITICALITIES = ("low", "medium", "high", "safety")


class TaskError(ValueError):
    """A task definition that cannot be scheduled as written; names the task and the field."""

    def __init__(self, task: str, field_name: str, message: str) -> None:
        super().__init__(f"task '{task}': {field_name}: {message}")
        self.task, self.field = task, field_name


@dataclass(frozen=True)
class Task:
    """A periodic or event-triggered task running one graph per job."""

    name: str
    period_ns: int                       # period, or minimum inter-arrival time when triggered
    wcet_ns: int                         # execution-time budget per job
    deadline_ns: int | None = None       # relative deadline; None means the period
    offset_ns: int = 0                   # phase of the first release (periodic tasks)
    priority: int | None = None          # explicit fixed priority: lower number = higher priority
    jitter_ns: int = 0                   # release jitter, for the analysis
    blocking_ns: int | None = None       # explicit blocking term; None derives it from the graphs
    trigger: str | None = None           # input channel whose new messages release jobs
    criticality: str = "medium"
    graph: "Graph | None" = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise TaskError("?", "name", "must be a non-empty string")
        if self.period_ns <= 0:
            raise TaskError(self.name, "period", f"must be positive, found {self.period_ns}ns")
        if self.wcet_ns <= 0:
            raise TaskError(self.name, "wcet", f"must be positive, found {self.wcet_ns}ns")
        if self.deadline_ns is None:
            object.__setattr__(self, "deadline_ns", self.period_ns)
        if self.deadline is not None and self.deadline <= 0:
            raise TaskError(self.name, "deadline", f"must be positive, found {self.deadline_ns}ns")
        for f in ("offset_ns", "jitter_ns"):
            if getattr(self, f) < 0:
                raise TaskError(self.name, f.removesuffix("_ns"), f"must not be negative, found {getattr(self, f)}ns")
        if self.blocking_ns is not None and self.blocking_ns < 0:
            raise TaskError(self.name, "blocking", f"must not be negative, found {self.blocking_ns}ns")
        if self.criticality not in CRITICALITIES:
            raise TaskError(self.name, "criticality", f"expected one of {', '.join(CRITICALITIES)}, "
                                                      f"found {self.criticality!r}")

    @property
    def deadline(self) -> int:
        """Relative deadline in ns (the period when none was given)."""
        return self.deadline_ns if self.deadline_ns is not None else self.period_ns

    @property
    def utilization(self) -> float:
        """WCET over period."""
        return self.wcet_ns / self.period_ns

    @property
    def is_triggered(self) -> bool:
        """True for event-triggered (sporadic) tasks."""
        return self.trigger is not None


@dataclass
class Job:
    """One release of a task: its logical release instant and absolute deadline, and what happened."""

    task: Task
    index: int
    release_ns: int
    deadline_ns: int
    start_ns: int | None = None
    finish_ns: int | None = None
    missed: bool = False
    aborted: bool = False

    @property
    def response_ns(self) -> int | None:
        """Finish minus release, once finished."""
        return None if self.finish_ns is None else self.finish_ns - self.release_ns

    def key(self) -> tuple[int, str, int]:
        """The fixed tie-break: deadline, then task name, then release; never thread timing."""
        return (self.deadline_ns, self.task.name, self.release_ns)
