"""Scheduling: clocks, LET channels, policies, the dispatcher and the watchdog (see docs/CYCLE.md).

The pure core (policies, channels, the scheduler's event handling, watchdog decisions) is plain
data and functions; thin adapters add threads (``threads``) and clocks (``clock``). rclpy is never
imported here.

The names below are imported on first use (PEP 562): ``sched.policy`` or ``sched.events`` alone (the
DeadlineExecutor reads them) must not pull in the runtime, its executors and with them torch.
"""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "binding": ("CostModel", "Publish", "Reaction", "TaskBinding", "cpu_time_cost", "declared_cost", "measured_cost",
                "zero_cost"),
    "channel": ("Channel", "ChannelConfig", "ChannelPolicy", "Slot"),
    "clock": ("Clock", "VirtualClock", "WallClock", "measure_overshoot"),
    "dispatch": ("Worker",),
    "events": ("Event", "EventKind", "EventSink", "FanoutSink", "NullSink", "RecordingSink"),
    "job": ("RunJob", "TaskState"),
    "policy": ("DM", "EDF", "FP", "RM", "Policy", "as_policy", "partition"),
    "runtime": ("Runtime",),
    "scheduler": ("Egress", "Scheduler"),
    "watchdog": ("Watchdog",),
}
_MODULE = {name: mod for mod, names in _WHERE.items() for name in names}

__all__ = sorted(_MODULE)


def __getattr__(name: str) -> Any:
    mod = _MODULE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value   # the next lookup is a plain attribute
    return value
