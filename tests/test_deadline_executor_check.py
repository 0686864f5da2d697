"""`rt-runtime check --trace RUN.rttrace [--executor CFG]` on the trace of a real DeadlineExecutor run over DDS:
the callbacks analysed with the execution times the trace observed, another configuration's timing applied
over the run's, and one line for each bad input (docs/ROS.md, "rt-runtime check on a run").

The run is recorded once per module on a ROS_DOMAIN_ID of 210..219 (LOCALHOST discovery). The planner's
callback sleeps 20 ms, so its observed execution is at least that on any machine: the verdicts below
follow from that lower bound and from configured values, never from how fast this machine is.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path


import pytest

from rt_runtime.ros.env import prepare_environment

prepare_environment()
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
rclpy = pytest.importorskip("rclpy", reason="the ros extra is not installed")

from rclpy.node import Node  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from rt_runtime import cli  # noqa: E402
from rt_runtime.ros import DeadlineExecutor  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]
DOMAIN = 210 + os.getpid() % 10
MS = 1_000_000


@pytest.fixture(scope="module")
def run_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DeadlineExecutor run: a 200 ms planner (20 ms of work), a 150 ms tick, a subscription fed at 100 ms."""
    trace = tmp_path_factory.mktemp("run") / "run.rttrace"
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=DOMAIN)
    try:
        node = Node("robot", context=ctx)
        plans: list[int] = []
        node.create_timer(0.2, lambda: (plans.append(1), time.sleep(0.02)))
        node.create_timer(0.15, lambda: None)
        node.create_subscription(String, "/scan", lambda m: None, 10)
        pub = node.create_publisher(String, "/scan", 10)
        node.create_timer(0.1, lambda: pub.publish(String(data="x")))
        ex = DeadlineExecutor({"trace": str(trace), "callbacks": [{"node": "robot", "timer": "200ms",
                                                                    "budget": "30ms"}]}, context=ctx)
        ex.add_node(node)
        end = time.monotonic() + 30
        while len(plans) < 6 or ex.stats()["robot/sub:/scan"]["released"] < 6:
            assert time.monotonic() < end, "the run never got its jobs"
            ex.spin_once(timeout_sec=0.05)
        ex.shutdown()
    finally:
        rclpy.try_shutdown(context=ctx)
    return trace


def check(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    code = cli.main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_runs_own_timing_with_the_observed_times_is_schedulable(run_trace, capsys):
    code, out, err = check(["--trace", str(run_trace), "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    rows = {r["name"]: r for r in doc["tasks"]}
    # timers, and the subscription (its deadline derived from the arrivals); the node's parameter services,
    # never called, have no rate and are not in the run's trace
    assert set(rows) == {"robot/timer:200ms", "robot/timer:150ms", "robot/timer:100ms", "robot/sub:/scan"}
    assert rows["robot/timer:200ms"]["observed_wcet_ms"] >= 20 and rows["robot/timer:200ms"]["budget_ms"] == 30
    assert rows["robot/timer:150ms"]["blocking_ms"] >= 20   # a running callback is not preempted
    assert doc["schedulable"] and doc["policy"] == "edf"
    code, out, _ = check(["--trace", str(run_trace)], capsys)
    assert code == 0 and "verdict: SCHEDULABLE" in out and "with the budgets instead: SCHEDULABLE" in out


def test_another_configuration_is_checked_against_what_the_run_observed(run_trace, tmp_path, capsys):
    # the file says the planner needs 1 ms and the tick must answer in 5 ms: by the budgets it passes, but
    # the planner was observed to run 20 ms or more without a break, so the tick can wait that long
    cfg = tmp_path / "tight.yaml"
    cfg.write_text("policy: dm\ncallbacks:\n"
                   "  - {node: robot, timer: 200ms, budget: 1ms}\n"
                   "  - {node: robot, timer: 150ms, deadline: 5ms, budget: 1ms}\n"
                   "  - {node: robot, timer: 100ms, budget: 1ms}\n"
                   "  - {node: robot, topic: /scan, period: 100ms, budget: 1ms}\n")
    code, out, err = check(["--trace", str(run_trace), "--executor", str(cfg), "--json"], capsys)
    assert code == 1, err
    doc = json.loads(out)
    rows = {r["name"]: r for r in doc["tasks"]}
    assert doc["policy"] == "dm" and doc["check"]["schedulable"] and not doc["schedulable"]
    tick = rows["robot/timer:150ms"]
    assert tick["deadline_ms"] == 5 and not tick["schedulable"] and tick["configured_schedulable"]
    assert rows["robot/sub:/scan"]["period_ms"] == 100 and rows["robot/sub:/scan"]["schedulable"]
    code, out, _ = check(["--trace", str(run_trace), "--executor", str(cfg)], capsys)
    assert code == 1 and "with the budgets instead: SCHEDULABLE" in out and "verdict: NOT SCHEDULABLE" in out


@pytest.mark.parametrize("case", ["typo", "missing", "not_a_trace", "stack_trace", "both", "executor_alone"])
def test_bad_input_is_one_line_and_exit_2(run_trace, tmp_path, capsys, case):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("callbacks:\n  - {node: robot, timer: 200ms, dedline: 5ms}\n")
    junk = tmp_path / "junk.rttrace"
    junk.write_bytes(b"not a trace")
    argv, says = {
        "typo": (["--trace", str(run_trace), "--executor", str(cfg)], "unknown key 'dedline'"),
        "missing": (["--trace", str(tmp_path / "nope.rttrace")], "nope.rttrace"),
        "not_a_trace": (["--trace", str(junk)], "junk.rttrace"),
        "stack_trace": (["--trace", str(_stack_trace(tmp_path))], "not a DeadlineExecutor trace"),
        "both": (["config/stack.yaml", "--trace", str(run_trace)], "not both"),
        "executor_alone": (["--executor", str(cfg)], "--executor needs --trace"),
    }[case]
    code, out, err = check(argv, capsys)
    assert code == 2 and out == "" and says in err and err.count("\n") == 1, err


def _stack_trace(tmp_path: Path) -> Path:
    """A trace written by the runtime's tracer, not by a DeadlineExecutor."""
    from rt_runtime.trace import TraceRing, TraceWriter
    path = tmp_path / "stack.rttrace"
    w = TraceWriter(path, TraceRing())
    w.meta = {"policy": "edf", "tasks_config": {}}
    w.close()
    return path


