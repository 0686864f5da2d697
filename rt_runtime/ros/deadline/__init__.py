"""The DeadlineExecutor: existing rclpy nodes' callbacks as jobs under EDF/RM/DM/FP (docs/ROS.md).

``jobs`` (pure: callbacks, jobs, the ready queue, the watchdog's verdict), ``config`` (the YAML
file), ``timing`` (a callback's keys from the file, ``@deadline`` and parameters, merged) and
``decorator`` (``@deadline``) import no rclpy; ``executor`` is the rclpy adapter, imported on first
use of ``DeadlineExecutor``.
"""
from __future__ import annotations

from typing import Any

from .config import ExecutorConfig, load_config
from .decorator import deadline
from .jobs import Callback, Job, ReadyQueue, Timing


def __getattr__(name: str) -> Any:
    if name == "DeadlineExecutor":
        from .executor import DeadlineExecutor
        return DeadlineExecutor
    raise AttributeError(name)


__all__ = ["Callback", "DeadlineExecutor", "ExecutorConfig", "Job", "ReadyQueue", "Timing", "deadline", "load_config"]
