"""The Autoware reference system example (examples/autoware_reference): topology, a short wall-clock
run with well-formed KPIs (no timing assertions: the machine is shared), and the crunch library."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EX = Path(__file__).resolve().parent.parent / "examples" / "autoware_reference"
sys.path.insert(0, str(EX))

import system as S  # noqa: E402


@pytest.fixture(scope="module")
def lib() -> None:
    if not S.LIB.exists():   # `make test` builds it; a bare pytest run builds it here
        subprocess.run(["make", "-s", "crunch"], cwd=EX.parent.parent, check=True)


def test_the_crunch_library_loads_and_counts_primes(lib) -> None:
    crunch = S.load_crunch()
    assert crunch(10) == 4 and crunch(100) == 25 and crunch(2) == 2
    assert S.calibrate(0.5) > 16


def test_the_topology_is_the_reference_one(lib) -> None:
    bindings, chains, _ = S.build(100)
    names = [b.name for b in bindings]
    assert len(names) == len(set(names)) == 24
    kinds = [n.kind for n in S.TOPOLOGY]
    assert (kinds.count("sensor"), kinds.count("transform"), kinds.count("fusion"), kinds.count("cyclic"),
            kinds.count("intersection"), kinds.count("command")) == (6, 9, 5, 1, 1, 2)
    by = {b.name: b for b in bindings}
    periodic = sorted(n for n, b in by.items() if b.task.trigger is None)
    assert periodic == sorted([n for n, _ in S.SENSORS] + ["BehaviorPlanner"])
    # two-input fusions off the hot path release on a join of both inputs
    for n in ("NDTLocalizer", "VehicleInterface", "Lanelet2GlobalPlanner", "Lanelet2MapLoader"):
        assert by[n].join is not None and by[n].join.mode == "all" and len(by[n].join.channels) == 2
    assert by["BehaviorPlanner"].optional == frozenset(f"in{k}" for k in range(6))
    assert by["EuclideanClusterDetector"].optional == frozenset({"in1"})
    # the hot path: both chains together cover its members, front chain ending at the sink
    members = {t for c in chains for t in c.tasks}
    assert members == set(S.HOT_PATH) and chains[-1].tasks[-1] == S.HOT_SINK
    assert all(c.deadline_ns and c.deadline_ns <= 100 * S.MS for c in chains)


def test_kpis_the_reference_way_on_a_made_up_history() -> None:
    import numpy as np

    samples = []
    for k in range(15):
        s = np.zeros(S.SHAPE, dtype=np.int64)
        t = 1_000_000_000 + k * 100 * S.MS
        s[S.STAMP, S.IDX["FrontLidarDriver"]] = t
        s[S.STAMP, S.IDX["RearLidarDriver"]] = t - 5 * S.MS
        s[S.STAMP, S.IDX["ObjectCollisionEstimator"]] = t + 30 * S.MS
        s[S.STAMP, S.IDX["RayGroundFilter"]] = t + 10 * S.MS
        s[S.DROP, S.IDX["RayGroundFilter"]] = 1 if k == 12 else 0
        bp_seq = k if k != 13 else None   # BehaviorPlanner cycle 13 never arrives
        if bp_seq is not None:
            s[S.STAMP, S.IDX["BehaviorPlanner"]] = t + 40 * S.MS
            s[S.SEQ, S.IDX["BehaviorPlanner"]] = bp_seq
        samples.append(s)
    k = S.kpis(samples, skip=10)
    assert k["hot_path_latency_ms"] == {"n": 5, "p50": 30.0, "p99": 30.0, "max": 30.0}
    assert k["hot_path_drops"] == {"total": 1} and k["lost_cycles"] == 1
    assert k["bp_period_ms"]["max_abs_dev_from_100"] == 0.0


@pytest.mark.wallclock
@pytest.mark.timeout(120)
def test_a_short_run_on_the_wall_clock_gives_well_formed_kpis_and_a_trace_analyze_reads(lib, tmp_path) -> None:
    trace = tmp_path / "autoware.rttrace"
    p = subprocess.run([sys.executable, str(EX / "run.py"), "--duration", "3", "--json", "--crunch-ms", "1",
                        "--trace", str(trace)], capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stderr[-2000:]
    k = json.loads(p.stdout.strip().splitlines()[-1])
    assert set(k) >= {"hot_path_latency_ms", "hot_path_drops", "lost_cycles", "bp_period_ms"}
    h = k["hot_path_latency_ms"]
    assert set(h) == {"n", "p50", "p99", "max"} and isinstance(h["n"], int) and h["n"] > 0
    assert 0 < h["p50"] <= h["p99"] <= h["max"]
    assert isinstance(k["hot_path_drops"]["total"], int) and isinstance(k["lost_cycles"], int)
    assert set(k["bp_period_ms"]) == {"std", "max_abs_dev_from_100"}
    assert k["rt_runtime"]["errors"] == [] and k["rt_runtime"]["samples_at_sink"] > 0
    # The trace says what the runtime counted, and analyze reads the example's task set with it (its chains).
    a = subprocess.run([sys.executable, "-m", "rt_runtime.cli", "analyze", str(trace), "--json"],
                       capture_output=True, text=True, timeout=100, cwd=EX.parent.parent)
    assert a.returncode == 0 and "warning" not in a.stderr, a.stderr[-2000:]
    doc = json.loads(a.stdout)
    assert {t["name"] for t in doc["tasks"]} == {n.name for n in S.TOPOLOGY}
    assert {t["name"]: t["misses"] for t in doc["tasks"] if t["misses"]} == k["rt_runtime"]["missed"]
    assert {c["name"] for c in doc["chains"]} >= {"hot_path_front", "hot_path_rear"}
