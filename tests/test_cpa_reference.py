"""`rt-runtime check` on the Autoware reference system (examples/autoware_reference/tasks.yaml): the file is
the system run.py runs, and the analysis agrees with a run of it on the logical timeline (virtual clock,
every op taking its budget: the very model the analysis assumes), under edf and under dm."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rt_runtime.cli import main
from rt_runtime.commands.check import analyse_file

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples" / "autoware_reference"
TASKS = EX / "tasks.yaml"
sys.path.insert(0, str(EX))

import system as S  # noqa: E402
from agreement import logical_run  # noqa: E402



@pytest.fixture(scope="module")
def lib() -> None:
    if not S.LIB.exists():   # `make test` builds it; a bare pytest run builds it here
        subprocess.run(["make", "-s", "crunch"], cwd=ROOT, check=True)


def test_the_task_set_file_is_the_system_run_py_runs(lib) -> None:
    from rt_runtime.config import load_taskset
    from rt_runtime.config.taskset import task_releases

    policy, tasks, chains = load_taskset(TASKS)
    acts, _, _, workers = task_releases(TASKS)
    bindings, run_chains, _ = S.build(16)
    assert (policy, workers) == ("edf", 2)
    by = {t.name: t for t in tasks}
    assert set(by) == {b.name for b in bindings}
    writer = {ch: b.name for b in bindings for ch in b.outputs.values()}
    for b in bindings:
        t = by[b.name]
        assert (t.period_ns, t.wcet_ns, t.deadline, t.offset_ns) == \
               (b.task.period_ns, b.task.wcet_ns, b.task.deadline, b.task.offset_ns), b.name
        if b.join is not None:
            assert acts[b.name].kind == "all" and acts[b.name].writers == tuple(writer[c] for c in b.join.channels)
        elif b.task.trigger is not None:
            assert acts[b.name].kind == "trigger" and acts[b.name].writers == (writer[b.task.trigger],)
        else:
            assert acts[b.name].kind == "periodic"
    assert [(c.name, c.tasks, c.deadline_ns) for c in chains if c.deadline_ns] == \
           [(c.name, c.tasks, c.deadline_ns) for c in run_chains]


def test_check_bounds_the_hot_path_and_finds_the_set_schedulable_with_steal(capsys) -> None:
    assert main(["check", str(TASKS), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in doc["tasks"] if not t["schedulable"]] == []
    by = {t["name"]: t for t in doc["tasks"]}
    # steal: true, so every task may wait for one op of a job taken from the other worker (its 6 ms budget:
    # the file has no graphs); the phased 10 ms sensors (system.SENSOR_OFFSET_MS) fit 2 + 6 ms
    assert by["Visualizer"]["blocking_ms"] == 6 and by["Visualizer"]["response_time_ms"] <= 10
    by = {t["name"]: t for t in doc["tasks"]}
    # rates come from the triggers (100 / 120 ms), not the declared 60 ms min_interarrival
    assert by["PointsTransformerFront"]["period_ms"] == 100 and by["NDTLocalizer"]["period_ms"] == 120
    assert by["NDTLocalizer"]["released_by"] == "all of VoxelGridDownsampler, PointCloudMapLoader"
    chains = {c["name"]: c for c in doc["chains"]}
    front = chains["hot_path_front"]
    assert (front["chain_let_ms"], front["per_hop_let_ms"]) == (50, 160) and front["response_ms"] <= 50
    assert doc["bounds"]["worker0"]["edf_offsets"]["passes"]   # rejected by the worst phasing alone
    assert not doc["bounds"]["worker0"]["edf_demand"]["passes"]


@pytest.mark.parametrize("policy", ["edf", "dm"])
def test_the_logical_run_agrees_with_the_analysis(lib, policy, tmp_path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(TASKS.read_text().replace("policy: edf", f"policy: {policy}"))
    rep = analyse_file(str(path))
    missed, front, where = logical_run(policy, 4.0)
    assert where == {t.name: t.worker for t in rep.tasks}       # the runtime's partition, analysed per worker
    can_miss = {t.name for t in rep.tasks if not t.schedulable}
    assert set(missed) <= can_miss, (missed, can_miss)           # every miss the run shows, the analysis names
    chain = next(c for c in rep.chains if c.name == "hot_path_front")
    if chain.response_ns is not None:
        assert front <= chain.response_ns
    if policy == "edf":   # schedulable: the run misses nothing, and the hot path stays inside its bound
        assert not missed and front <= chain.response_ns <= chain.chain_let_ns == 50 * S.MS
