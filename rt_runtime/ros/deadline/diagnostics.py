"""The DeadlineExecutor's ``/diagnostics``: one DiagnosticStatus per callback, every ``diagnostics`` period.

``deadline_executor: <callback>``: released, missed, overruns, skipped, aborted, degraded, errors, its
deadline and longest execution; WARN ``N deadline misses`` when it missed during the last period,
ERROR ``N errors`` when its callback raised. Published by a small node of the executor's own
(``deadline_executor``), whose timer is one more callback under the same scheduler.
"""
from __future__ import annotations

from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR


def statuses(stats: dict[str, dict[str, int]], before: dict[str, dict[str, int]]) -> list[DiagnosticStatus]:
    """One status per callback, its level from what changed since ``before``."""
    out = []
    for name, s in stats.items():
        prev = before.get(name, {})
        errors, misses = s["errors"] - prev.get("errors", 0), s["missed"] - prev.get("missed", 0)
        level, msg = (ERROR, f"{errors} errors") if errors else (WARN, f"{misses} deadline misses") if misses \
            else (OK, "ok")
        out.append(DiagnosticStatus(level=level, name=f"deadline_executor: {name}", message=msg,
                                    hardware_id="rt_runtime",
                                    values=[KeyValue(key=k, value=str(v)) for k, v in s.items()]))
    return out


class DiagnosticsPublisher:
    """A node publishing the executor's statuses every ``period_s``."""

    def __init__(self, ex: Any, period_s: float) -> None:
        self.ex, self.before = ex, {}
        self.node = Node("deadline_executor", context=ex.context)
        self.pub = self.node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.node.create_timer(period_s, self.publish)

    def publish(self) -> None:
        """Publish one DiagnosticArray of every callback's status."""
        stats = self.ex.stats()
        msg = DiagnosticArray(status=statuses(stats, self.before))
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.before = stats
        self.pub.publish(msg)

    def destroy(self) -> None:
        """Destroy the node."""
        self.node.destroy_node()
