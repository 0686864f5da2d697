"""The DeadlineExecutor's per-callback timing from beyond its YAML file, over real DDS: deadlines derived from
the graph (a publisher's QoS deadline, seen through discovery), the ``@deadline`` decorator and the node's
``rt.<callback>.<key>`` parameters, merged with the file (docs/ROS.md, "Per-callback timing in code").

Each test has its own rclpy contexts on a ROS_DOMAIN_ID of 160..169 (LOCALHOST discovery). Nothing here
asserts a duration: the tests check where each deadline came from and what it is.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterator

import pytest

from rt_runtime.ros.env import prepare_environment

prepare_environment()
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
rclpy = pytest.importorskip("rclpy", reason="the ros extra is not installed")

from rclpy.duration import Duration  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import QoSProfile  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from rt_runtime.ros import DeadlineExecutor  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.timeout(90)]
DOMAIN = 160 + os.getpid() % 10
MS = 1_000_000


def _context() -> Any:
    c = rclpy.Context()
    rclpy.init(context=c, domain_id=DOMAIN)
    return c


@pytest.fixture
def ctx() -> Iterator[Any]:
    c = _context()
    try:
        yield c
    finally:
        rclpy.try_shutdown(context=c)


@pytest.fixture
def remote() -> Iterator[Any]:
    """A second context (its own DDS participant): its publishers are known to ``ctx`` only by discovery."""
    c = _context()
    try:
        yield c
    finally:
        rclpy.try_shutdown(context=c)


def spin_until(ex: DeadlineExecutor, done: Callable[[], bool], step: Callable[[], None] = lambda: None,
               limit: float = 30.0) -> None:
    """Spin (calling ``step`` between spins) until ``done()``; fail (not hang) if it never is."""
    end = time.monotonic() + limit
    while not done():
        assert time.monotonic() < end, "the condition never held"
        step()
        ex.spin_once(timeout_sec=0.005)


def test_a_subscriptions_deadline_is_the_period_its_publishers_advertise(ctx, remote):
    # a publisher on another participant declares deadline=25ms (it promises a message at least every 25 ms)
    # and sends bursts 1 ms apart: the first job already has 25 ms (before any gap could be observed), a
    # second publisher's tighter 10 ms is taken once the graph shows it, and a topic whose publisher
    # advertises nothing falls back to the observed inter-arrival
    node, talker = Node("listener", context=ctx), Node("talker", context=remote)
    got: dict[str, int] = {"/scan": 0, "/plain": 0}
    for t in got:
        node.create_subscription(String, t, lambda m, t=t: got.__setitem__(t, got[t] + 1), 10)
    scan = talker.create_publisher(String, "/scan", QoSProfile(depth=10, deadline=Duration(nanoseconds=25 * MS)))
    plain = talker.create_publisher(String, "/plain", 10)
    ex = DeadlineExecutor(context=ctx)
    ex.add_node(node)
    spin_until(ex, lambda: scan.get_subscription_count() >= 1 and plain.get_subscription_count() >= 1)
    scan.publish(String(data="first"))
    spin_until(ex, lambda: got["/scan"] == 1)
    cb = ex.callbacks()["listener/sub:/scan"]
    assert (cb.deadline_from, cb.deadline_ns) == ("graph", 25 * MS)

    def burst() -> None:
        for pub in (scan, plain):
            pub.publish(String(data="x"))
        time.sleep(0.001)
    spin_until(ex, lambda: got["/scan"] >= 20 and got["/plain"] >= 20, burst)
    cb, other = ex.callbacks()["listener/sub:/scan"], ex.callbacks()["listener/sub:/plain"]
    assert (cb.deadline_from, cb.deadline_ns) == ("graph", 25 * MS)   # the bursts' short gaps do not count
    assert other.deadline_from == "observed" and other.deadline_ns < 25 * MS

    fast = Node("fast_talker", context=remote).create_publisher(
        String, "/scan", QoSProfile(depth=10, deadline=Duration(nanoseconds=10 * MS)))
    spin_until(ex, lambda: ex.callbacks()["listener/sub:/scan"].deadline_ns == 10 * MS,
               lambda: (fast.publish(String(data="y")), time.sleep(0.01)))
    assert ex.stats()["listener/sub:/scan"]["deadline_ns"] == 10 * MS
    ex.shutdown()
