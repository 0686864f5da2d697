"""The DeadlineExecutor over real DDS: unmodified rclpy nodes, their callbacks ordered by deadline.

Each test has its own rclpy context on a ROS_DOMAIN_ID of 80..89 (LOCALHOST discovery). Nothing here
asserts a duration: the tests check orders, counts and what the trace's analysis says.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from rt_runtime.ros.env import prepare_environment

prepare_environment()
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
rclpy = pytest.importorskip("rclpy", reason="the ros extra is not installed")

from lifecycle_msgs.srv import GetState  # noqa: E402
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup  # noqa: E402
from rclpy.node import Node  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from rt_runtime.config.yamlfile import ConfigError  # noqa: E402
from rt_runtime.ros import DeadlineExecutor  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.timeout(60)]
ROOT = Path(__file__).resolve().parents[1]
DOMAIN = 80 + os.getpid() % 10


@pytest.fixture
def ctx() -> Iterator[Any]:
    c = rclpy.Context()
    rclpy.init(context=c, domain_id=DOMAIN)
    try:
        yield c
    finally:
        rclpy.try_shutdown(context=c)


def spin_until(ex: DeadlineExecutor, done: Callable[[], bool], limit: float = 20.0) -> None:
    """Spin until ``done()``; fail (not hang) if it never is."""
    end = time.monotonic() + limit
    while not done():
        assert time.monotonic() < end, "the condition never held"
        ex.spin_once(timeout_sec=0.05)


def matched(pubs: list[Any], ex: DeadlineExecutor) -> None:
    spin_until(ex, lambda: all(p.get_subscription_count() >= 1 for p in pubs))


def _fallback(msg: Any) -> None:
    """The degraded release's callback (named in a test's configuration)."""
    FALLBACK.append(msg.data)


FALLBACK: list[str] = []


@pytest.mark.parametrize("policy, poll", [("edf", "1ns"), ("fp", "1ns"), ("edf", "100s")])
def test_ready_callbacks_run_by_deadline_not_by_creation_order(ctx, policy, poll):
    # rclpy's executors run ready subscriptions in creation order (lax, mid, urgent); EDF by deadline, and
    # fp by the numbers (here the reverse: lax first). A topic's next message overtakes the less urgent
    # queued ones, polling before each job or not: after a job took a message its next one is taken
    # ahead, without a wait (poll still bounds how long another topic's new message goes unseen).
    cfg = {"policy": policy, "poll": poll, "callbacks": [
        {"node": "ordered", "topic": "/lax", "deadline": "20s", "priority": 1},
        {"node": "ordered", "topic": "/mid", "deadline": "10s", "priority": 2},
        {"node": "ordered", "topic": "/urgent", "deadline": "1ms", "priority": 3}]}
    node, talker = Node("ordered", context=ctx), Node("talker", context=ctx)
    ran: list[str] = []
    for topic in ("/lax", "/mid", "/urgent"):
        node.create_subscription(String, topic, lambda m, t=topic: ran.append(t), 10)
    pubs = {t: talker.create_publisher(String, t, 10) for t in ("/lax", "/mid", "/urgent")}
    ex = DeadlineExecutor(cfg, context=ctx)
    ex.add_node(node)
    matched(list(pubs.values()), ex)
    for t in ("/lax", "/mid", "/urgent"):
        for i in range(3):
            pubs[t].publish(String(data=f"{t}{i}"))
    time.sleep(0.5)   # all nine delivered before the first wait: every job is released at once
    spin_until(ex, lambda: len(ran) == 9)
    want = ["/urgent", "/mid", "/lax"] if policy == "edf" else ["/lax", "/mid", "/urgent"]
    assert ran == [t for t in want for _ in range(3)]
    ex.shutdown()


def test_a_miss_is_detected_and_the_next_release_skipped(ctx):
    cfg = {"callbacks": [{"node": "late", "timer": "20ms", "deadline": "5ms", "on_miss": "skip"}]}
    node = Node("late", context=ctx)
    calls: list[int] = []

    def tick() -> None:
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.03)   # past its 5 ms deadline
    node.create_timer(0.02, tick)
    ex = DeadlineExecutor(cfg, context=ctx)
    ex.add_node(node)
    spin_until(ex, lambda: len(calls) >= 3)
    s = ex.stats()["late/timer:20ms"]
    assert s["missed"] >= 1 and s["skipped"] >= 1
    assert s["released"] >= len(calls) + s["skipped"]   # a skipped release's callback never ran (+ queued ones)
    ex.shutdown()


def test_a_job_not_started_by_its_deadline_is_aborted(ctx):
    cfg = {"callbacks": [{"node": "busy", "timer": "10ms", "deadline": "2ms", "on_miss": "abort"}]}
    node = Node("busy", context=ctx)
    ticks: list[int] = []
    node.create_timer(0.01, lambda: ticks.append(1))
    node.create_timer(0.05, lambda: time.sleep(0.03))   # holds the one thread past the 10 ms timer's deadline
    ex = DeadlineExecutor(cfg, context=ctx)
    ex.add_node(node)
    spin_until(ex, lambda: ex.stats().get("busy/timer:10ms", {}).get("aborted", 0) >= 1 and len(ticks) >= 2)
    s = ex.stats()["busy/timer:10ms"]
    # an aborted job's callback never ran (released may count a job still queued)
    assert s["released"] >= len(ticks) + s["aborted"] and s["missed"] >= s["aborted"]
    ex.shutdown()


def test_an_overrun_degrades_the_next_release_to_the_fallback(ctx):
    FALLBACK.clear()
    cfg = {"callbacks": [{"node": "heavy", "topic": "/work", "deadline": "10s", "budget": "20ms",
                          "on_overrun": "degrade", "fallback": "test_deadline_executor:_fallback"}]}
    node, talker = Node("heavy", context=ctx), Node("talker", context=ctx)
    seen: list[str] = []

    def work(msg: String) -> None:
        seen.append(msg.data)
        if msg.data == "slow":
            time.sleep(0.05)
    node.create_subscription(String, "/work", work, 10)
    pub = talker.create_publisher(String, "/work", 10)
    ex = DeadlineExecutor(cfg, context=ctx)
    ex.add_node(node)
    matched([pub], ex)
    pub.publish(String(data="slow"))
    spin_until(ex, lambda: seen == ["slow"])
    pub.publish(String(data="next"))
    pub.publish(String(data="after"))
    spin_until(ex, lambda: len(seen) + len(FALLBACK) == 3)
    assert (seen, FALLBACK) == (["slow", "after"], ["next"])
    s = ex.stats()["heavy/sub:/work"]
    assert (s["overruns"], s["degraded"], s["missed"]) == (1, 1, 0)
    ex.shutdown()


def test_a_burst_is_drained_without_a_wait_per_message_and_its_reactions_hold(ctx):
    # four messages delivered before the first wait: one wait finds the subscription, then each job's next
    # message is taken ahead (no handler, no wait); the overrun's skip still lands on the next one, "a"
    cfg = {"callbacks": [{"node": "burst", "topic": "/burst", "budget": "20ms", "on_overrun": "skip"}]}
    node, talker = Node("burst", context=ctx), Node("talker", context=ctx)
    seen: list[str] = []
    node.create_subscription(String, "/burst", lambda m: (seen.append(m.data), m.data == "slow" and time.sleep(.05)), 10)
    pub = talker.create_publisher(String, "/burst", 10)
    ex = DeadlineExecutor(cfg, context=ctx)
    ex.add_node(node)
    matched([pub], ex)
    waits = [0]
    wait = ex._wait_for_ready_callbacks

    def counted(*a: Any) -> Any:
        waits[0] += 1
        return wait(*a)
    ex._wait_for_ready_callbacks = counted
    for d in ("slow", "a", "b", "c"):
        pub.publish(String(data=d))
    time.sleep(0.5)
    spin_until(ex, lambda: len(seen) == 3 and ex.stats()["burst/sub:/burst"]["skipped"] == 1)
    assert seen == ["slow", "b", "c"] and waits[0] <= 2   # one wait per message would be four
    s = ex.stats()["burst/sub:/burst"]
    assert (s["released"], s["overruns"], s["skipped"]) == (4, 1, 1)
    ex.shutdown()


def test_mutually_exclusive_callbacks_never_overlap_on_workers_and_reentrant_ones_do(ctx):
    node = Node("groups", context=ctx)
    mutex, reentrant = MutuallyExclusiveCallbackGroup(), ReentrantCallbackGroup()
    active = {"mutex": 0, "reentrant": 0}
    most = {"mutex": 0, "reentrant": 0}
    runs = {"mutex": 0, "reentrant": 0}
    lock = threading.Lock()

    def body(group: str) -> None:
        with lock:
            active[group] += 1
            most[group] = max(most[group], active[group])
            runs[group] += 1
        time.sleep(0.02)   # sleeps release the GIL: the workers really run side by side
        with lock:
            active[group] -= 1
    for _ in range(3):
        node.create_timer(0.005, lambda: body("mutex"), callback_group=mutex)
        node.create_timer(0.005, lambda: body("reentrant"), callback_group=reentrant)
    ex = DeadlineExecutor(workers=4, context=ctx)
    ex.add_node(node)
    spin_until(ex, lambda: runs["mutex"] >= 10 and runs["reentrant"] >= 10 and most["reentrant"] >= 2)
    ex.shutdown()
    assert most["mutex"] == 1 and most["reentrant"] >= 2


@pytest.mark.parametrize("workers", [1, 2])
def test_spin_until_future_complete_with_a_callback_awaiting_a_service(ctx, workers):
    server, node = Node("server", context=ctx), Node("caller", context=ctx)

    def state(req: Any, resp: Any) -> Any:
        resp.current_state.label = "served"
        return resp
    server.create_service(GetState, "/state", state)
    client = node.create_client(GetState, "/state", callback_group=ReentrantCallbackGroup())
    labels: list[str] = []

    async def ask() -> None:   # a coroutine callback: suspended while the call is out, resumed by the response
        labels.append((await client.call_async(GetState.Request())).current_state.label)
    timer = node.create_timer(0.01, ask)
    ex = DeadlineExecutor(workers=workers, context=ctx)
    ex.add_node(server)
    ex.add_node(node)
    spin_until(ex, lambda: client.service_is_ready())
    spin_until(ex, lambda: len(labels) >= 2)
    timer.cancel()
    fut = client.call_async(GetState.Request())
    ex.spin_until_future_complete(fut, timeout_sec=20)
    assert fut.done() and fut.result().current_state.label == "served"
    assert set(labels) == {"served"}
    ex.shutdown()


@pytest.mark.parametrize("how", ["executor", "rclpy"])
def test_spun_from_a_background_thread_and_stopped_from_another(ctx, how):
    # ex.spin() ends at ex.shutdown(); rclpy.spin(node, executor=ex) ends when the context does (as with
    # rclpy's own executors, whose spin_once returns at once after their shutdown).
    node, talker = Node("bg", context=ctx), Node("talker", context=ctx)
    got: list[str] = []
    node.create_subscription(String, "/bg", lambda m: got.append(m.data), 10)
    pub = talker.create_publisher(String, "/bg", 10)
    ex = DeadlineExecutor(context=ctx)
    if how == "executor":
        ex.add_node(node)
        t = threading.Thread(target=ex.spin, daemon=True)
    else:
        t = threading.Thread(target=rclpy.spin, args=(node,), kwargs={"executor": ex}, daemon=True)
    t.start()
    end = time.monotonic() + 20
    while not got and time.monotonic() < end:
        pub.publish(String(data="hi"))
        time.sleep(0.05)
    assert got and got[0] == "hi"
    if how == "executor":
        assert ex.shutdown(timeout_sec=5)
    else:
        rclpy.shutdown(context=ctx)
    t.join(10)
    assert not t.is_alive()
    ex.shutdown(timeout_sec=5)


def test_analyze_explains_the_miss_from_the_executors_trace(ctx, tmp_path):
    trace = tmp_path / "callbacks.rttrace"
    cfg = {"trace": str(trace), "callbacks": [
        {"node": "planner", "timer": "50ms", "deadline": "50ms", "budget": "10ms"},
        {"node": "planner", "timer": "10ms", "deadline": "5ms"}]}
    node = Node("planner", context=ctx)
    plans, ticks = [], []

    def plan() -> None:
        plans.append(1)
        if len(plans) == 2:
            time.sleep(0.08)   # over its budget and past its deadline: an overrun
    node.create_timer(0.05, plan)
    node.create_timer(0.01, lambda: ticks.append(1))
    ex = DeadlineExecutor(cfg, context=ctx)
    ex.add_node(node)
    spin_until(ex, lambda: len(plans) >= 4)
    ex.shutdown()
    out = subprocess.run([sys.executable, "-m", "rt_runtime.cli", "analyze", str(trace), "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    tasks = {t["name"]: t for t in rep["tasks"]}
    assert {"planner/timer:50ms", "planner/timer:10ms"} <= set(tasks)
    misses = [m for m in rep["misses"] if m["task"] == "planner/timer:50ms"]
    assert [m["job"] for m in misses] == [1] and misses[0]["cause"] == "overrun"
    assert tasks["planner/timer:50ms"]["overruns"] == 1


def test_diagnostics_report_each_callbacks_misses(ctx):
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    cfg = {"diagnostics": "100ms", "callbacks": [{"node": "slowpoke", "timer": "20ms", "deadline": "1ms"}]}
    node, probe = Node("slowpoke", context=ctx), Node("probe", context=ctx)
    node.create_timer(0.02, lambda: time.sleep(0.005))   # every job past its 1 ms deadline
    seen: dict[str, Any] = {}
    probe.create_subscription(DiagnosticArray, "/diagnostics",
                              lambda m: seen.update({s.name: s for s in m.status}), 10)
    ex = DeadlineExecutor(cfg, context=ctx)
    ex.add_node(node)
    ex.add_node(probe)
    name = "deadline_executor: slowpoke/timer:20ms"
    spin_until(ex, lambda: name in seen and int({kv.key: kv.value for kv in seen[name].values}["missed"]) > 0)
    assert seen[name].level == DiagnosticStatus.WARN and seen[name].message.endswith("deadline misses")
    ex.shutdown()


def test_a_typo_in_the_executors_file_is_one_line(ctx, tmp_path):
    p = tmp_path / "callbacks.yaml"
    p.write_text("callbacks:\n  - {node: planner, timer: 100ms, deadline: 80ms, on_mis: skip}\n")
    with pytest.raises(ConfigError) as e:
        DeadlineExecutor(p, context=ctx)
    assert str(e.value) == (f"{p}: callbacks[0]: unknown key 'on_mis'; expected node, topic, timer, service, client, "
                            f"period, deadline, budget, priority, criticality, on_miss, on_overrun, fallback "
                            f"(did you mean 'on_miss'?)")
