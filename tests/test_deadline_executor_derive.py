"""The DeadlineExecutor's per-callback timing from beyond its YAML file, over real DDS: deadlines derived from
the graph (a publisher's QoS deadline, seen through discovery), the ``@deadline`` decorator and the node's
``rt.<callback>.<key>`` parameters, merged with the file (docs/ROS.md, "Per-callback timing in code").

Each test has its own rclpy contexts on a ROS_DOMAIN_ID of 200..209 (LOCALHOST discovery). Nothing here
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

from rt_runtime.config.yamlfile import ConfigError  # noqa: E402
from rt_runtime.ros import DeadlineExecutor  # noqa: E402
from rt_runtime.ros.deadline import deadline  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.timeout(90)]
DOMAIN = 200 + os.getpid() % 10
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


class Planner(Node):
    """An unmodified-looking node whose author wrote its timing beside the callback."""

    def __init__(self, ctx: Any, **kw: Any) -> None:
        super().__init__("planner", context=ctx, **kw)
        self.ticks = 0
        self.create_timer(0.02, self.tick)
        self.create_timer(0.02, lambda: None)   # a lambda: no parameters (no name to give them)

    @deadline(deadline="7ms", budget="3ms", on_miss="skip", priority=4)
    def tick(self) -> None:
        self.ticks += 1


def _timing(ex: DeadlineExecutor, name: str = "planner/timer:20ms") -> tuple:
    t = ex.callbacks()[name].timing
    return t.deadline_ns, t.budget_ns, t.on_miss, t.priority


def test_decorator_file_and_parameters_merge_key_by_key_parameter_first(ctx):
    # the decorator gives deadline, budget, on_miss, priority; the file overrides the budget; a parameter
    # given at start-up (as a launch file gives it) overrides the deadline; what nobody overrides stays
    from rclpy.parameter import Parameter
    node = Planner(ctx, parameter_overrides=[Parameter("rt.tick.deadline", value="9ms")])
    ex = DeadlineExecutor({"callbacks": [{"node": "planner", "timer": "20ms", "budget": "4ms"}]}, context=ctx)
    ex.add_node(node)
    assert _timing(ex) == (9 * MS, 4 * MS, "skip", 4)
    assert node.has_parameter("rt.tick.budget") and node.get_parameter("rt.tick.budget").value is None
    assert {k.split(".")[0] for k in node.get_parameters_by_prefix("rt")} == {"tick"}   # none for the lambda
    spin_until(ex, lambda: node.ticks >= 2)
    ex.shutdown()


def test_a_parameter_set_at_run_time_applies_and_a_bad_one_is_refused_in_one_line(ctx):
    from rcl_interfaces.msg import Parameter as ParameterMsg
    from rcl_interfaces.msg import ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters
    node, tool = Planner(ctx), Node("param_tool", context=ctx)
    ex = DeadlineExecutor(context=ctx)
    ex.add_node(node)
    ex.add_node(tool)
    client = tool.create_client(SetParameters, "/planner/set_parameters")

    def set_param(name: str, value: str) -> Any:   # what `ros2 param set /planner NAME VALUE` sends
        req = SetParameters.Request(parameters=[ParameterMsg(name=name, value=ParameterValue(
            type=ParameterType.PARAMETER_STRING, string_value=value))])
        fut = client.call_async(req)
        ex.spin_until_future_complete(fut, timeout_sec=20)
        assert fut.done()
        return fut.result().results[0]

    spin_until(ex, client.service_is_ready)
    assert set_param("rt.tick.deadline", "15ms").successful
    assert _timing(ex)[:2] == (15 * MS, 3 * MS)   # the next release has it; the decorator's budget stays
    bad = set_param("rt.tick.deadline", "15")
    assert not bad.successful and bad.reason == (
        'node /planner: parameter rt.tick.deadline: expected a duration such as "10ms", "250us" or "1.5s", '
        "found '15'")
    bad = set_param("rt.tick.on_overrun", "degrade")   # the whole: degrade needs a fallback
    assert not bad.successful and "degrade needs 'fallback" in bad.reason and "\n" not in bad.reason
    assert _timing(ex)[:2] == (15 * MS, 3 * MS) and node.get_parameter("rt.tick.deadline").value == "15ms"
    ex.shutdown()


def test_a_bad_parameter_at_start_up_is_one_line_when_the_node_is_added(ctx):
    from rclpy.parameter import Parameter
    node = Planner(ctx, parameter_overrides=[Parameter("rt.tick.on_miss", value="skp")])
    ex = DeadlineExecutor(context=ctx)
    with pytest.raises(ConfigError) as e:
        ex.add_node(node)
    assert str(e.value) == ("node /planner: parameter rt.tick.on_miss: expected one of none, skip, abort, degrade, "
                            "found 'skp' (did you mean 'skip'?)")
    assert node not in ex.get_nodes()
    quiet = DeadlineExecutor({"parameters": False}, context=ctx)   # the file may turn parameters off
    other = Node("other", context=ctx)
    other.create_timer(0.02, node.tick)
    quiet.add_node(other)
    assert not other.has_parameter("rt.tick.deadline") and _timing(quiet, "other/timer:20ms")[0] == 7 * MS
    ex.shutdown()
    quiet.shutdown()
