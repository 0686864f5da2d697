"""A join's release condition: several channels release one event-triggered task (``binding.Join``)."""
from __future__ import annotations

from .job import TaskState


def joined(ts: TaskState) -> bool:
    """Any, or every, join channel has a message the task has not read (every: within the window)."""
    readers = ts.join_readers
    if ts.join.mode == "any":
        return any(ch.unread(rid) for ch, rid in readers)
    if not all(ch.unread(rid) for ch, rid in readers):
        return False
    w = ts.join.window_ns
    if w is None:
        return True
    stamps = [ch.peek(rid).t_ns for ch, rid in readers]   # type: ignore[union-attr]
    return max(stamps) - min(stamps) <= w
