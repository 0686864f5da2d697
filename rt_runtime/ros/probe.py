"""A small in-process ROS endpoint for tests, benchmarks and quick checks: record topics, publish raw CDR.

    with Probe({"/planning/trajectory": "nav_msgs/msg/Path"}, domain_id=77) as probe:
        probe.spin_until(lambda: len(probe.messages("/planning/trajectory")) >= 10, timeout=20)
        for rx_wall_ns, msg in probe.messages("/planning/trajectory"): ...   # rosbags objects

It owns its rclpy context (so a test picks its own domain) and spins only when asked, on the
calling thread.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from .env import prepare_environment

prepare_environment()   # before rclpy loads the RMW

import rclpy  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import QoSProfile  # noqa: E402
from rclpy.signals import SignalHandlerOptions  # noqa: E402

from ..bag import from_cdr  # noqa: E402
from .msgtypes import output_qos, ros_class  # noqa: E402


class Probe:
    """Records messages (decoded with rosbags, with their receive wall time) and publishes raw bytes."""

    def __init__(self, topics: Mapping[str, str], *, domain_id: int | None = None, qos: QoSProfile | None = None,
                 name: str = "rt_runtime_probe") -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._msgs: dict[str, list[tuple[int, Any]]] = {t: [] for t in topics}
        self._pubs: dict[str, Any] = {}
        qos = qos or output_qos(100)
        for topic, msgtype in topics.items():
            self.node.create_subscription(ros_class(msgtype), topic, self._recorder(topic, msgtype), qos, raw=True)

    def _recorder(self, topic: str, msgtype: str) -> Callable[[bytes], None]:
        box = self._msgs[topic]

        def record(raw: bytes) -> None:
            box.append((time.time_ns(), from_cdr(raw, msgtype)))
        return record

    def messages(self, topic: str) -> list[tuple[int, Any]]:
        """(receive wall time ns, message) pairs so far."""
        return self._msgs[topic]

    def advertise(self, topic: str, msgtype: str, qos: QoSProfile | None = None, wait: float = 0.0,
                  settle: float = 0.5) -> bool:
        """Create the publisher for ``topic``; with ``wait``, wait that long for a reader to match, then
        ``settle`` more: our side matches first, and a best-effort reader drops samples until its side has."""
        if topic not in self._pubs:
            self._pubs[topic] = self.node.create_publisher(ros_class(msgtype), topic, qos or output_qos())
        pub = self._pubs[topic]
        if wait <= 0:
            return True
        if not self.spin_until(lambda: pub.get_subscription_count() > 0, wait):
            return False
        self.spin_for(settle)
        return True

    def publish(self, topic: str, msgtype: str, cdr: bytes) -> None:
        """Publish serialized bytes (the publisher is created on first use: advertise first not to lose it)."""
        self.advertise(topic, msgtype)
        self._pubs[topic].publish(cdr)

    def spin_for(self, seconds: float) -> None:
        """Handle callbacks for ``seconds``."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.executor.spin_once(timeout_sec=min(left, 0.05))

    def spin_until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Handle callbacks until ``done()`` or ``timeout`` seconds; returns ``done()``."""
        end = time.monotonic() + timeout
        while not done():
            left = end - time.monotonic()
            if left <= 0:
                return done()
            self.executor.spin_once(timeout_sec=min(left, 0.05))
        return True

    def close(self) -> None:
        """Destroy the node and shut the context down."""
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)

    def __enter__(self) -> "Probe":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
