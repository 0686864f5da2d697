"""rclpy message classes by type name, and the QoS profiles the node and the player use."""
from __future__ import annotations

import importlib
from typing import Any

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy


def ros_class(msgtype: str) -> Any:
    """The rclpy class of ``pkg/msg/Name``; LookupError naming the package when it is not installed."""
    pkg, kind, name = msgtype.split("/")
    try:
        return getattr(importlib.import_module(f"{pkg}.{kind}"), name)
    except (ImportError, AttributeError):
        raise LookupError(f"message type {msgtype} is not available: ROS package '{pkg}' is not installed") from None


def sensor_qos(depth: int = 5, reliability: str = "best_effort") -> QoSProfile:
    """Sensor-data QoS: keep last ``depth``, best effort (a late sample is worth less than the next one)."""
    rel = {"best_effort": ReliabilityPolicy.BEST_EFFORT, "reliable": ReliabilityPolicy.RELIABLE}.get(reliability)
    if rel is None:
        raise ValueError(f"qos_reliability: expected best_effort or reliable, found {reliability!r}")
    if depth < 1:
        raise ValueError(f"qos_depth: expected a positive integer, found {depth}")
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth, reliability=rel,
                      durability=DurabilityPolicy.VOLATILE)


def output_qos(depth: int = 10) -> QoSProfile:
    """Outputs and recorded topics: reliable keep-last, which both reliable and best-effort readers match."""
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)
