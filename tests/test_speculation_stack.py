"""Speculative planning on the reference stack, replaying a real recording of the built-in scenario.

A fixed per-op cost model makes virtual time independent of the machine, so the traces of the runs
with and without speculation can be compared job for job.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from replay_fixtures import short_bag  # noqa: F401 - a fixture

from rt_runtime.config.stack import load_stack
from rt_runtime.replay import replay
from rt_runtime.replay.defaults import default_config

MS = 1_000_000
PER_OP_NS = {"lidar_objects": 2 * MS, "radar_objects": 350_000, "camera_objects": 1_800_000,
             "fusion_tracking": 800_000, "prediction": 1_300_000, "planning": 1_700_000}


def fixed_cost(task: str, job: int, op_index: int, op: object, measured_ns: int) -> int:
    """Each op of a task costs the same, on any machine (roughly the reference stack's measured costs); the
    output invariants' check step is in those costs (docs/SAFETY.md, "Output invariants")."""
    return 0 if getattr(op, "name", "") == "invariants" else PER_OP_NS[task]


@pytest.fixture(scope="module")
def runs(short_bag, tmp_path_factory):  # noqa: F811
    cfg = load_stack(default_config())
    # The same structure with and without speculation: the planner on its own period (speculating takes
    # it out of its chain anyway; test_sched_chain.py covers that).
    cfg.chains = [dataclasses.replace(c, deadline_ns=None) for c in cfg.chains]
    where = tmp_path_factory.mktemp("spec")
    return {on: replay(short_bag, cfg, cost=fixed_cost, speculate=on, retain_channels=["planning/trajectory"],
                       trace=where / f"{on}.rttrace")
            for on in (False, True)}


def test_the_trace_analysis_counts_the_committed_jobs(runs) -> None:
    from rt_runtime.analysis.trace_report import analyze_trace
    from rt_runtime.trace.file import load_trace

    on = runs[True]
    rep = analyze_trace(*load_trace(on.trace))
    planning = next(t for t in rep.tasks if t.name == "planning").to_json()
    assert planning["speculation"] == {"hits": on.stats["planning"]["speculation"]["hits"], "misses": 0}
    assert planning["speculation"]["hits"] > 0 and planning["response_ms"]["max"] == 0.0
    off = analyze_trace(*load_trace(runs[False].trace))
    assert next(t for t in off.tasks if t.name == "planning").to_json()["speculation"] == {"hits": 0, "misses": 0}


def responses(result, task: str) -> dict[int, int]:
    t = result.tasks[task]
    return dict(zip(t.finished_jobs.tolist(), t.response_ns.tolist()))


def test_mandatory_jobs_never_respond_later_with_speculation(runs) -> None:
    off, on = runs[False], runs[True]
    for task in PER_OP_NS:
        if task == "planning":
            continue
        r0, r1 = responses(off, task), responses(on, task)
        assert r0.keys() == r1.keys() and r0, task
        assert all(r1[j] <= r0[j] for j in r0), task
    assert off.misses == 0 and on.misses == 0
    assert off.deterministic


def test_the_planner_hits_and_its_trajectory_is_there_at_release(runs) -> None:
    off, on = runs[False], runs[True]
    sp = on.stats["planning"]["speculation"]
    finished = len(responses(off, "planning"))
    assert sp["hits"] >= 0.8 * (finished - 1), sp
    assert sp["late_ops"] == 0 and sp["errors"] == 0
    r0, r1 = responses(off, "planning"), responses(on, "planning")
    assert r0.keys() <= r1.keys()   # a hit at the last release finishes before the end of the bag
    zero = [j for j, r in r1.items() if r == 0]
    assert len(zero) == sp["hits"] and all(r0[j] >= 4 * PER_OP_NS["planning"] for j in zero if j in r0)
    # A hit commits a plan made for the hypothesised odometry (within atol of the real one): the run is
    # no longer bit-exact, and says so, but the trajectories start where the real plans start.
    assert not on.deterministic and on.inexact_commits > 0
    t0 = dict(off.extra["channels"]["planning/trajectory"])
    t1 = dict(on.extra["channels"]["planning/trajectory"])
    assert t0.keys() == t1.keys()
    start = max(float(np.abs(t0[t][0, :2] - t1[t][0, :2]).max()) for t in t0)
    assert start <= 0.1


def test_speculation_off_changes_nothing(short_bag) -> None:  # noqa: F811
    cfg = load_stack(default_config())
    default = replay(short_bag, cfg, cost=fixed_cost)   # the config declares it with enabled: false
    off = replay(short_bag, cfg, cost=fixed_cost, speculate=False)
    assert "speculation" not in default.stats["planning"]
    assert default.output_digest == off.output_digest


@pytest.mark.parametrize("change, message", [
    ({"k": 0}, "k: expected an integer >= 1"),
    ({"atol": {"odom": [0.1, -1]}}, "atol.odom.1: expected a number >= 0, found -1"),   # the union's deepest
    ({"atol": "wide"}, "atol: expected a number, a list or a mapping, found 'wide'"),
    ({"colour": 1}, "unknown key(s) ['colour']"),
    ({"atol": {"odom": [0.1, 0.1]}}, "expected one tolerance per column (6 for shape (6,)), found 2"),
    ({"atol": {"wheel": 0.1}}, "graph 'planning' has no input(s) ['wheel']"),
    ({"hypotheses": "pipelines.speculation:nothing"}, "module 'pipelines.speculation' has no 'nothing'"),
    ({"args": {"variants": ["teleport"]}}, "rejected its arguments (variants: expected some of"),
])
def test_bad_speculate_keys_name_the_task_and_the_field(change, message) -> None:
    from rt_runtime.config import ConfigError
    from rt_runtime.config.stack import build_bindings, parse_stack
    from rt_runtime.config.taskset import load_yaml

    doc = load_yaml(default_config())
    planning = next(e for e in doc["tasks"] if e["name"] == "planning")
    planning["speculate"] = {**planning["speculate"], **change}
    with pytest.raises(ConfigError) as e:
        build_bindings(parse_stack(doc, "stack.yaml"), speculate=True)
    assert "stack.yaml: task 'planning': speculate" in str(e.value) and message in str(e.value)


def test_a_triggered_task_cannot_speculate() -> None:
    from rt_runtime.config import ConfigError
    from rt_runtime.config.stack import parse_stack
    from rt_runtime.config.taskset import load_yaml

    doc = load_yaml(default_config())
    pred = next(e for e in doc["tasks"] if e["name"] == "prediction")
    pred["speculate"] = {"hypotheses": "pipelines.speculation:ego_hypotheses"}
    with pytest.raises(ConfigError, match="task 'prediction': speculate: speculation needs a periodic task"):
        parse_stack(doc, "stack.yaml")


def test_ego_hypotheses_predict_the_last_odometry_message_before_the_release() -> None:
    import math

    import torch

    from pipelines.speculation import EgoHypotheses, propagate_odometry

    odom = torch.tensor([10.0, 5.0, math.pi / 2, 20.0, 0.0, 100.0], dtype=torch.float64)   # north at 20 m/s
    keep = propagate_odometry(odom, 0.04)
    assert torch.allclose(keep, torch.tensor([10.0, 5.8, math.pi / 2, 20.0, 0.0, 100.04], dtype=torch.float64))
    stop = propagate_odometry(odom, 20.0, accel=-4.0)   # stops after 5 s and 50 m, does not reverse
    assert float(stop[3]) == 0.0 and abs(float(stop[1]) - 55.0) < 1e-9
    turn = propagate_odometry(torch.tensor([0, 0, 0, 10.0, 0.5, 0], dtype=torch.float64), math.pi / 0.5)
    assert abs(float(turn[0])) < 1e-9 and abs(float(turn[1]) - 40.0) < 1e-9   # half a circle of radius 20
    h = EgoHypotheses(period="20ms", variants=["keep", "brake"])
    # Written at 2 ms, release at 50 ms: messages at 22 and 42 ms are still to come -> 40 ms ahead.
    hyps = h({"odom": odom}, {"odom": 2 * MS}, 50 * MS)
    assert len(hyps) == 2 and torch.equal(hyps[0]["odom"], keep) and float(hyps[1]["odom"][3]) < 20.0
    assert h({"odom": odom}, {"odom": 42 * MS}, 50 * MS) == [{}]   # the basis message is the last one
