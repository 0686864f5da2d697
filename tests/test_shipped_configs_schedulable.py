"""Every task set the project ships gets the verdict its runs bear out, and ``steal`` is analysed soundly.

The shipped configurations (issue 28 item 5): each stack file and task-set example under ``config/`` and
``examples/`` is listed with the verdict ``rt-runtime check`` must give; a new file there must be added
(the glob below finds it). Only ``config/examples/edf_overload.yaml`` is NOT SCHEDULABLE, on purpose: it
is the example of a miss (``tests/test_sched_oracle.py`` runs it and sees the misses). The Autoware
example runs with ``steal: true``; its logical run misses nothing (``tests/test_cpa_reference.py``).

Work-conserving dispatch (docs/ANALYSIS.md, "Work-conserving dispatch"): a worker that is idle takes
another worker's waiting job, and a job of its own released meanwhile waits for that job's op to end.
The set below misses only because of that, on the virtual clock through the real dispatcher, and
``check`` says NOT SCHEDULABLE for it with ``steal: true`` and SCHEDULABLE without.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from dispatch_oracle import synthetic_graph
from rt_runtime.cli import main
from rt_runtime.core import Task
from rt_runtime.sched import Reaction, Runtime, TaskBinding, VirtualClock, declared_cost

ROOT = Path(__file__).resolve().parents[1]
MS = 1_000_000

SHIPPED = {   # path -> check's exit status (0 schedulable, 1 not)
    "config/stack.yaml": 0,
    "config/examples/rm_schedulable.yaml": 0,
    "config/examples/fp_blocking.yaml": 0,
    "config/examples/edf_overload.yaml": 1,   # the example of a miss, on purpose
    "examples/autoware_reference/tasks.yaml": 0,
}
NOT_TASK_SETS = {"config/campaign.yaml", "config/ros_params.yaml"}   # a fault campaign, ROS parameters


def test_every_shipped_yaml_is_listed() -> None:
    found = {str(p.relative_to(ROOT)) for pattern in ("config/**/*.yaml", "examples/**/*.yaml")
             for p in ROOT.glob(pattern)}
    assert found == set(SHIPPED) | NOT_TASK_SETS, "a shipped YAML without a verdict here: add it to SHIPPED"


@pytest.mark.parametrize("path", sorted(SHIPPED))
def test_check_gives_each_shipped_config_its_verdict(path: str, capsys) -> None:
    code = main(["check", str(ROOT / path)])
    out = capsys.readouterr().out
    assert code == SHIPPED[path], out[-2000:]
    assert ("verdict: SCHEDULABLE" in out) == (code == 0)


# Worker 0: A (5 ms, due in 10) runs first; L (one 6 ms op) waits behind it. Worker 1 is idle at 0, so
# with steal it takes L; S, released on worker 1 at 1 ms, then waits for L's op (worker 0, busy with A
# until 5, takes S then): done at 7, past its deadline of 6. Without steal L runs on worker 0 from 5 to
# 11 and S on worker 1 from 1 to 3.
STEAL_SET = """policy: edf
workers: 2
steal: {steal}
tasks:
  - {{name: A, period: "20ms", wcet: "5ms", deadline: "10ms", worker: 0}}
  - {{name: L, period: "20ms", wcet: "6ms", deadline: "20ms", worker: 0}}
  - {{name: S, period: "20ms", wcet: "2ms", deadline: "5ms", offset: "1ms", worker: 1}}
"""


def run_steal_set(steal: bool, until_ms: int = 200) -> dict[str, int]:
    """Misses per task of the set above on the real dispatcher, virtual clock, every op its declared cost."""
    tasks = [Task("A", 20 * MS, 5 * MS, deadline_ns=10 * MS), Task("L", 20 * MS, 6 * MS),
             Task("S", 20 * MS, 2 * MS, deadline_ns=5 * MS, offset_ns=1 * MS)]
    home = {"A": 0, "L": 0, "S": 1}
    bindings = [TaskBinding(t, synthetic_graph(f"{t.name}_g", [t.wcet_ns]), on_miss=Reaction.SKIP,
                            on_overrun=Reaction.NONE, worker=home[t.name]) for t in tasks]
    rt = Runtime(bindings, policy="edf", clock=VirtualClock(), workers=2, cost=declared_cost, steal=steal)
    try:
        rt.run_until(until_ms * MS)
        return {n: s["missed"] for n, s in rt.stats().items() if s.get("missed")}
    finally:
        rt.close()


def test_a_set_that_misses_only_because_of_steal_is_not_schedulable(tmp_path, capsys) -> None:
    assert run_steal_set(steal=False) == {}
    assert run_steal_set(steal=True) == {"S": 10}     # every period: S waits for the taken op of L
    verdicts = {}
    for steal in (False, True):
        path = tmp_path / f"steal_{steal}.yaml"
        path.write_text(STEAL_SET.format(steal=str(steal).lower()))
        verdicts[steal] = main(["check", str(path)]), capsys.readouterr().out
    assert verdicts[False][0] == 0, verdicts[False][1]
    code, out = verdicts[True]
    assert code == 1 and "can miss: S)" in out, out
