"""Once the planner is degraded, its minimal-risk plan is published every planning period (docs/SAFETY.md,
"Degraded mode"): on the virtual clock under budget timing, with an injected overload, exactly.

The reference stack with the tracks -> trajectory chain squeezed to 20 ms (the planner misses and
degrades, as in tests/test_ros_e2e.py), and, in the second case, the LiDAR objects forced over their
budget (115 ms of ground removal a sweep, against a 45 ms deadline): the chain that released the planner
then opens only now and then. The degraded planner is reserved: released every 100 ms on its own grid,
ahead of every other job, reading only what its fallback reads.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from replay_fixtures import short_bag  # noqa: F401 - a fixture

from rt_runtime.commands.check import degraded_mode
from rt_runtime.config.stack import load_stack
from rt_runtime.replay import replay

ROOT = Path(__file__).resolve().parents[1]
MS = 1_000_000
PERIOD = 100 * MS   # the planner's


def overloaded_stack(tmp_path: Path, lidar_ground: str | None) -> Path:
    """config/stack.yaml, the fusion_to_plan chain squeezed to 20 ms, recovery off; maybe the LiDAR overloaded."""
    doc = yaml.safe_load((ROOT / "config" / "stack.yaml").read_text())
    next(c for c in doc["chains"] if c["name"] == "fusion_to_plan")["deadline"] = "20ms"
    tasks = {t["name"]: t for t in doc["tasks"]}
    tasks["planning"]["recover_after"] = 1000
    if lidar_ground is not None:
        lidar = tasks["lidar_objects"]
        lidar["wcet"], lidar["op_budgets"]["lidar_ground"] = "130ms", lidar_ground
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def minimal_risk_publishes(bag: Path, stack: Path) -> tuple[list[int], dict]:
    """The instants the planner published, from its first minimal-risk plan on (all must be minimal-risk)."""
    result = replay(bag, load_stack(stack), retain_channels=["planning/status", "planning/trajectory"])
    status = [(t, int(v.reshape(-1)[0])) for t, v in result.extra["channels"]["planning/status"]]
    first = next((t for t, v in status if v == 1), None)
    assert first is not None, f"no minimal-risk plan: {result.stats['planning']}"
    after = [(t, v) for t, v in status if t >= first]
    assert {v for _, v in after} == {1}   # held: nothing but the minimal-risk plan once degraded
    trajectories = [t for t, _ in result.extra["channels"]["planning/trajectory"] if t >= first]
    assert trajectories == [t for t, _ in after]   # each with its trajectory (one job publishes both)
    return [t for t, _ in after], result.stats["planning"]


def test_the_squeezed_chain_degrades_the_planner_and_its_plan_comes_at_every_let_instant(short_bag,  # noqa: F811
                                                                                          tmp_path) -> None:
    pubs, stats = minimal_risk_publishes(short_bag, overloaded_stack(tmp_path, None))
    # Degraded by its miss at 170 ms (the chain of the sweep at 150 ms): the fallback is released at once
    # and published 20 ms later; then one every period at k * 100 ms + 20 ms, its LET instant, never late.
    assert pubs[0] == 190 * MS
    grid = pubs[1:]
    assert grid == [pubs[1] + k * PERIOD for k in range(len(grid))] and pubs[1] % PERIOD == 20 * MS
    assert len(grid) >= 25   # to the end of the 3 s recording
    assert (stats["missed"], stats["degraded"], stats["dropped_releases"], stats["mode"]) == (1, 1, 0, "fallback")


def test_an_overloaded_lidar_leaves_no_planning_period_without_the_minimal_risk_plan(short_bag,  # noqa: F811
                                                                                      tmp_path) -> None:
    pubs, stats = minimal_risk_publishes(short_bag, overloaded_stack(tmp_path, "115ms"))
    # Exactly one minimal-risk plan in every planning period from the first to the end of the recording.
    # (A plan can be late, not lost: a 115 ms op cannot be preempted, and the planner waits for it.)
    periods = range(pubs[0] // PERIOD, pubs[-1] // PERIOD + 1)
    per_period = [sum(1 for t in pubs if k * PERIOD <= t < (k + 1) * PERIOD) for k in periods]
    assert per_period == [1] * len(periods) and len(periods) >= 25
    assert stats["dropped_releases"] == 0 and stats["degraded"] == 1


def test_check_charges_the_fallback_in_the_degraded_mode() -> None:
    """The reference stack's degraded mode: the planner's 1.6 ms fallback every 100 ms, ahead of the rest."""
    mode = degraded_mode(ROOT / "config" / "stack.yaml")
    assert mode is not None and mode.schedulable
    (fb,) = mode.reserved
    assert (fb.name, fb.wcet_ns, fb.period_ns) == ("planning", 1_600_000, PERIOD)
    assert fb.response_ns is not None and fb.response_ns <= fb.deadline_ns
    # The others' demand plus the reservation, checked up to the busy period, with the planner out of its chain.
    assert mode.demand_passes and "planning" not in {n for c in mode.chains for n in c}


@pytest.mark.parametrize("budget, message", [
    ("0ms", "task 'planning': fallback_wcet: must be positive, found '0ms'"),
    ("fast", "task 'planning': fallback_wcet"),
])
def test_a_bad_fallback_budget_is_one_line(tmp_path, budget: str, message: str) -> None:
    doc = yaml.safe_load((ROOT / "config" / "stack.yaml").read_text())
    next(t for t in doc["tasks"] if t["name"] == "planning")["fallback_wcet"] = budget
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(Exception) as e:
        load_stack(path)
    assert message in str(e.value) and "\n" not in str(e.value)
