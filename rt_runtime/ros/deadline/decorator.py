"""``@deadline(...)``: a callback's timing written beside the callback, where the node's author knows it.

    from rt_runtime.ros.deadline import deadline

    class Planner(Node):
        @deadline(deadline="20ms", budget="5ms", on_miss="skip")
        def on_scan(self, msg): ...

The function is returned unchanged (rclpy inspects a subscription callback's signature, and a call
costs nothing more); the keys, checked when the decorator runs (one line naming the function and
the key), are kept on it for the DeadlineExecutor, under which they are the lowest layer: the
executor's file and the node's ``rt.<callback>.<key>`` parameters override them key by key
(``timing.merge``). Under rclpy's own executors the decorator does nothing.
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

from .timing import parse_fields

ATTR = "__rt_deadline__"
F = TypeVar("F", bound=Callable[..., Any])


def deadline(*, period: str | None = None, deadline: str | None = None, budget: str | None = None,
             priority: int | None = None, criticality: str | None = None, on_miss: str | None = None,
             on_overrun: str | None = None, fallback: Callable[..., Any] | str | None = None) -> Callable[[F], F]:
    """Give the decorated callback its timing (durations with units, "20ms"; the YAML entry's keys)."""
    values = {"period": period, "deadline": deadline, "budget": budget, "priority": priority,
              "criticality": criticality, "on_miss": on_miss, "on_overrun": on_overrun, "fallback": fallback}

    def mark(fn: F) -> F:
        name = (getattr(fn, "__qualname__", None) or repr(fn)).replace("<locals>.", "")
        setattr(fn, ATTR, parse_fields(values, f"@deadline on {name}"))
        return fn
    return mark


def declared(callback: Any) -> dict[str, Any]:
    """The keys ``@deadline`` gave ``callback`` (a function or a bound method); {} when none."""
    fields = getattr(callback, ATTR, None)
    return fields if isinstance(fields, dict) else {}
