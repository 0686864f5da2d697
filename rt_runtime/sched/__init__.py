"""Scheduling: clocks, LET channels, policies, the dispatcher and the watchdog (see docs/CYCLE.md).

The pure core (policies, channels, the scheduler's event handling, watchdog decisions) is plain
data and functions; thin adapters add threads (``threads``) and clocks (``clock``). rclpy is never
imported here.
"""
from .binding import (CostModel, Publish, Reaction, TaskBinding, cpu_time_cost, declared_cost, measured_cost,
                      zero_cost)
from .channel import Channel, ChannelConfig, ChannelPolicy, Slot
from .clock import Clock, VirtualClock, WallClock, measure_overshoot
from .dispatch import Worker
from .events import Event, EventKind, EventSink, FanoutSink, NullSink, RecordingSink
from .job import RunJob, TaskState
from .policy import DM, EDF, FP, RM, Policy, as_policy, partition
from .runtime import Runtime
from .scheduler import Egress, Scheduler
from .watchdog import Watchdog

__all__ = [
    "Channel", "ChannelConfig", "ChannelPolicy", "Clock", "CostModel", "DM", "EDF", "Egress", "Event",
    "EventKind", "EventSink", "FP", "FanoutSink", "NullSink", "Policy", "Publish", "RM", "Reaction",
    "RecordingSink", "RunJob", "Runtime", "Scheduler", "Slot", "TaskBinding", "TaskState",
    "VirtualClock", "WallClock", "Watchdog", "Worker", "as_policy", "cpu_time_cost", "declared_cost",
    "measure_overshoot", "measured_cost", "partition", "zero_cost",
]
