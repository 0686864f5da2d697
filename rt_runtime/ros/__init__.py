"""ROS 2 adapters: the live runtime node, the bag player, DDS set-up. The only package that imports rclpy.

Modules that need rclpy (``node``, ``player``, ``msgtypes``) import it at module level and are
imported only by ``rt-runtime run`` / ``play`` and the ``ros2 run`` executables, after
``rclpy_missing()`` said it is there. Everything else here is plain Python and runs (and is tested)
without ROS: the DDS environment (``env``), config overrides (``overrides``), the ingress decoder and
its health counters (``inputs``), the runtime drivers for wall and simulated time (``drivers``),
the egress pump (``outputs``) and the diagnostics message (``diagnostics``). See docs/ROS.md.
``DeadlineExecutor`` (``deadline``: an rclpy executor scheduling existing nodes' callbacks by deadline)
imports rclpy on first use.
"""
from __future__ import annotations

import importlib.util


def rclpy_missing() -> str | None:
    """None when rclpy can be imported; else a one-line explanation with the fix."""
    try:
        found = importlib.util.find_spec("rclpy") is not None
    except (ImportError, ValueError):
        found = False
    if found:
        return None
    return ("rclpy is not installed: install the ROS 2 extra (pip install '.[ros]', or `make install`), "
            "or source a ROS 2 workspace")


def __getattr__(name: str) -> object:
    if name == "DeadlineExecutor":   # imports rclpy: only when asked for
        from .deadline.executor import DeadlineExecutor
        return DeadlineExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DeadlineExecutor", "rclpy_missing"]
