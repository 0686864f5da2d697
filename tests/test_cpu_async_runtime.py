"""The runtime on ``cpu-async``: what CI checks of the CUDA path's waits, on a machine without a GPU.

Each test fails when the wait it names is taken out: the twin runs launched work later, on stream
threads, so an output read before its job's completion event sees the bytes of before.
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
import torch

from rt_runtime.cli import main
from rt_runtime.config.stack import load_stack
from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.device.base import device_for
from rt_runtime.exec.executor import GraphExecutor
from rt_runtime.replay import replay
from rt_runtime.sched import ChannelConfig, Runtime, TaskBinding
from rt_runtime.sched.budget import BudgetCost

from replay_fixtures import short_bag  # noqa: F401 - a fixture
from test_replay_determinism import CONFIG

pytestmark = pytest.mark.timeout(120)
MS = 1_000_000


def slow_affine(name: str, sleep_s: float = 0.03) -> Graph:
    """y = 2x + 1, written only after ``sleep_s``: a kernel that takes a while on its stream."""
    x, y = TensorSpec("x", (4,), "float32"), TensorSpec("y", (4,), "float32")

    def affine(a: torch.Tensor, o: torch.Tensor) -> None:
        time.sleep(sleep_s)
        torch.add(a * 2.0, 1.0, out=o)

    return Graph(name, [Op("affine", affine, (x,), (y,), cost_us=1000)], [x], ["y"])


@pytest.fixture
def twin():
    dev = device_for("cpu-async")
    yield dev
    dev.close()


def test_a_job_ends_when_its_device_work_ends(twin) -> None:
    ex = GraphExecutor(slow_affine("g"), twin)
    assert ex.asynchronous
    out = ex.run({"x": torch.full((4,), 3.0)})
    assert torch.equal(out["y"], torch.full((4,), 7.0))   # without the completion wait: zeros


@pytest.mark.wallclock
def test_per_op_times_are_device_times_not_launch_times(twin) -> None:
    ex = GraphExecutor(slow_affine("g", 0.03), twin)
    ex.run({"x": torch.zeros(4)})
    assert ex.op_end_ns[0] - ex.op_start_ns[0] >= 25 * MS


def test_an_error_on_the_stream_fails_the_job_that_launched_it(twin) -> None:
    x, y = TensorSpec("x", (4,), "float32"), TensorSpec("y", (4,), "float32")

    def bad(a: torch.Tensor, o: torch.Tensor) -> None:
        raise ValueError("kernel fault")

    ex = GraphExecutor(Graph("bad", [Op("bad", bad, (x,), (y,))], [x], ["y"]), twin)
    with pytest.raises(RuntimeError, match="kernel fault"):
        ex.run({"x": torch.zeros(4)})


def two_tasks(device) -> list[tuple[int, float]]:
    """A producer and a consumer over LET channels; what the consumer published, in order."""
    x, y = TensorSpec("x", (4,), "float32"), TensorSpec("y", (4,), "float32")
    inc = Graph("cons", [Op("inc", lambda a, o: torch.add(a, 1.0, out=o), (x,), (y,))], [x], ["y"])
    seen: list[tuple[int, float]] = []
    bindings = [TaskBinding(Task("prod", 10 * MS, 5 * MS, trigger="/in"), slow_affine("prod", 0.002),
                            inputs={"x": "/in"}, outputs={"y": "/mid"}),
                TaskBinding(Task("cons", 10 * MS, 2 * MS, trigger="/mid"), inc, inputs={"x": "/mid"},
                            outputs={"y": "/out"})]
    # Budget timing: the schedule is logical, so both devices must publish the same sequence on any machine
    # (measured timing let a loaded machine stretch prod's 2 ms op past its deadline: a miss, one output less)
    rt = Runtime(bindings, cost=BudgetCost(bindings),
                 channels=[ChannelConfig("/in"), ChannelConfig("/mid"), ChannelConfig("/out")], device=device,
                 egress=lambda ch, t, seq, d: seen.append((t, float(d[0]))) if ch == "/out" else None)
    for i in range(15):
        rt.push("/in", i * 10 * MS, torch.full((4,), float(i)))
    rt.run_until(200 * MS)
    rt.close()
    return seen


def test_a_two_task_runtime_publishes_the_same_sequence_on_the_twin(twin) -> None:
    ref = two_tasks(device_for("cpu"))
    assert [v for _, v in ref] == [2.0 * i + 2.0 for i in range(15)]
    assert two_tasks(twin) == ref


def test_streams_get_the_policys_urgency(twin) -> None:
    g = slow_affine("g", 0.0)
    rt = Runtime([TaskBinding(Task(n, p * MS, 1 * MS), g, inputs={"x": f"/{n}"})
                  for n, p in (("fast", 10), ("mid", 20), ("slow", 40))], policy="rm", device=twin)
    urgency = {name: ts.executors[0].stream.urgency for name, ts in rt.tasks.items()}
    rt.close()
    assert urgency == {"fast": 1.0, "mid": 0.5, "slow": 0.0}


def test_replay_on_the_twin_gives_the_cpu_digest(short_bag: Path, capsys) -> None:
    cfg = load_stack(CONFIG)
    ref = replay(short_bag, cfg, until_s=1.5, hardware=False, parallel=1)
    got = replay(short_bag, dataclasses.replace(cfg, device="cpu-async"), until_s=1.5, hardware=False, parallel=2)
    assert ref.device == "cpu" and got.device == "cpu-async"
    assert ref.outputs["/planning/trajectory"] > 3
    assert got.output_digest == ref.output_digest and got.stats == ref.stats
    assert main(["replay", str(short_bag), "--until", "0.3", "--device", "cpu-async", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["device"] == "cpu-async"
    assert main(["replay", str(short_bag), "--device", "tpu"]) == 2
    assert "--device: expected cpu, cpu-async, cuda or cuda:N, found 'tpu'" in capsys.readouterr().err
