"""Declared output invariants: each check catches what it names, a violation re-runs the job once,
and every bit flip into a plan is caught or too small to matter."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rt_runtime.config import ConfigError
from rt_runtime.config.taskset import parse_taskset
from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.faults.inject import FIELDS, Injection, Injector, field_bit, flip_bit, plan
from rt_runtime.safety.invariants import parse_checks, violation
from rt_runtime.safety.redundancy import Redundant
from rt_runtime.config.safety_keys import parse_redundancy
from rt_runtime.safety.spec import CHECK_COST_NS
from rt_runtime.sched import EventKind, RecordingSink, Runtime, TaskBinding, declared_cost
from rt_runtime.sched.events import COMPARE_MATCH, COMPARE_NO_MAJORITY, COMPARE_VOTED

MS = 1_000_000


def trajectory(v0: float = 20.0, a: float = -2.0, y0: float = 1.0) -> np.ndarray:
    """31 rows of x, y, yaw, v, t: braking along a gentle curve y = y0 + 0.002 x^2 (float32, as planned)."""
    t = np.arange(31) * 0.1
    v = np.maximum(v0 + a * t, 0.0)
    s = np.concatenate([[0.0], np.cumsum(0.5 * (v[1:] + v[:-1]) * 0.1)]) + 100.0
    # arc length ~ x on a gentle curve: walk the curve in small steps so the steps match the speeds
    xs = np.linspace(100.0, 200.0, 200001)
    ys = y0 + 0.002 * (xs - 100.0) ** 2
    arc = np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(xs), np.diff(ys)))]) + 100.0
    x = np.interp(s, arc, xs)
    y = np.interp(s, arc, ys)
    yaw = np.arctan(0.004 * (x - 100.0))
    return np.stack([x, y, yaw, v, t], 1).astype(np.float32)


KIN = {"trajectory": {"kinematics": {"dt": 0.1, "v_max": 45, "a_max": 8, "tol": 0.05, "yaw_tol": 0.03,
                                     "kappa_max": 0.005}}}
TRACKS = {"count": {"capacity": 4}, "next_id": {"range": [1, 1000]},
          "tracks": {"rows": "count", "zero_padding": True, "integer": [0], "increasing": 0, "below": "next_id",
                     "speed": [2, 3, 70.0], "range": {4: [0.1, 30]}},
          "cov": {"rows": "count", "positive_definite": True},
          "boxes": {"rows": "count", "ordered": [[0, 1]]}}


def tracks() -> dict[str, np.ndarray]:
    """Two tracks (id, x, vx, vy, length) of four rows, their covariances and boxes."""
    tr = np.zeros((4, 5), np.float32)
    tr[:2] = [[3, 10.0, 5.0, 0.0, 4.5], [7, 30.0, -2.0, 1.0, 1.8]]
    cov = np.zeros((4, 2, 2), np.float32)
    cov[:2] = np.eye(2) * 0.5
    boxes = np.zeros((4, 2), np.float32)
    boxes[:2] = [[1.0, 2.0], [5.0, 9.0]]
    return {"tracks": tr, "count": np.array([2], np.int32), "next_id": np.array([8], np.int32), "cov": cov,
            "boxes": boxes}


def test_each_structure_check_catches_what_it_names() -> None:
    checks = parse_checks(TRACKS)
    good = tracks()
    assert violation(good, checks) is None
    cases = [("count", lambda o: o["count"].__setitem__(0, 5), "outside 0..4"),
             ("tracks", lambda o: o["tracks"].__setitem__((1, 0), 2), "increasing"),
             ("tracks", lambda o: o["tracks"].__setitem__((1, 0), 8), "below next_id"),
             ("tracks", lambda o: o["tracks"].__setitem__((0, 0), 2.5), "non-integer"),
             ("tracks", lambda o: o["tracks"].__setitem__((0, 2), 80.0), "speed"),
             ("tracks", lambda o: o["tracks"].__setitem__((0, 4), 0.0), "outside"),
             ("tracks", lambda o: o["tracks"].__setitem__((0, 1), np.nan), "non-finite"),
             ("tracks", lambda o: o["tracks"].__setitem__((3, 1), 1.0), "not empty"),
             ("cov", lambda o: o["cov"].__setitem__((0, 1, 1), -0.1), "positive definite"),
             ("cov", lambda o: o["cov"].__setitem__((0, 0, 1), 0.1), "symmetric"),
             ("boxes", lambda o: o["boxes"].__setitem__((1, 1), 4.0), "inverted")]
    for name, spoil, msg in cases:
        bad = {k: v.copy() for k, v in good.items()}
        spoil(bad)
        why = violation(bad, checks)
        assert why is not None and msg in why, (name, msg, why)
    # A count that drops a track leaves a non-empty row past it: caught by the padding check.
    bad = {k: v.copy() for k, v in good.items()}
    bad["count"][0] = 1
    assert "not empty" in violation(bad, checks)


def test_a_plausible_plan_passes_and_every_bit_flip_is_caught_or_within_tolerance() -> None:
    checks = parse_checks(KIN)
    for traj in (trajectory(), trajectory(27.0, 0.0, -3.5), trajectory(8.0, -4.0, 3.5)):
        assert violation({"trajectory": traj}, checks) is None
        escaped = []
        for e in range(traj.size):
            for bit in range(32):
                bad = traj.copy()
                flip_bit(bad, (e + 0.5) / traj.size, bit)
                if violation({"trajectory": bad}, checks) is None:
                    # What a nav_msgs/Path publishes (x, y, yaw, t), within the campaign's tolerance
                    off = np.abs(bad.astype(np.float64) - traj)[:, [0, 1, 2, 4]]
                    if not np.all(off <= 0.05 + 1e-3 * np.abs(traj[:, [0, 1, 2, 4]])):
                        escaped.append((divmod(e, 5), bit, float(off.max())))
        # Left (docs/SAFETY.md): the plan's first or last point moved sideways by less than 0.1 m (one
        # mantissa bit of y: its one neighbouring step's heading and second difference move by half of
        # that), and the yaw of a point where the plan has (nearly) stopped, which no motion constrains.
        step = np.hypot(*np.diff(traj[:, :2].astype(np.float64), axis=0).T)
        slow = {r for r in range(31) if all(step[j] <= 0.2 for j in (r - 1, r) if 0 <= j < 30)}
        assert all(((r, c) in ((0, 1), (30, 1)) and off < 0.1) or (c == 2 and r in slow)
                   for (r, c), _, off in escaped), escaped[:5]


def test_a_speed_or_time_off_the_plan_is_caught() -> None:
    checks = parse_checks(KIN)
    for col, row, value, msg in ((3, 5, 50.0, "speed"), (3, 5, 21.0, "acceleration"), (4, 3, 0.35, "grid"),
                                 (2, 10, 0.4, "yaw"), (1, 10, 1.0, "")):
        traj = trajectory()
        traj[row, col] = value
        why = violation({"trajectory": traj}, checks)
        assert why is not None and msg in why, (col, value, why)


@pytest.mark.parametrize("bad, msg", [
    ({"x": {"ranged": [0, 1]}}, "unknown check"), ({"x": {"range": [2, 1]}}, "above high"),
    ({"x": {"range": {"a": [0, 1]}}}, "column index"), ({"x": {"speed": [1, 2]}}, "speed"),
    ({"x": {"kinematics": {"dt": 0.1}}}, "v_max"), ({"x": {"ordered": [[1]]}}, "ordered"), ({}, "mapping")])
def test_bad_checks_say_which_output_and_key(bad, msg) -> None:
    with pytest.raises(ValueError, match=msg):
        parse_checks(bad)


def test_check_adds_the_checks_cost_and_invariants_need_checks() -> None:
    doc = {"policy": "edf", "tasks": [
        {"name": "a", "period": "10ms", "wcet": "2ms",
         "redundancy": {"mode": "invariants", "checks": {"y": {"range": [0, 1]}, "n": {"capacity": 8}}}},
        {"name": "b", "period": "10ms", "wcet": "2ms", "redundancy": {"mode": "dual", "checks": {"y": {}},
                                                                       "cost": "1ms"}}]}
    _, tasks, _ = parse_taskset(doc, "t.yaml")
    assert [t.wcet_ns for t in tasks] == [2 * MS + 2 * CHECK_COST_NS, 5 * MS]
    spec = parse_redundancy(doc["tasks"][0]["redundancy"])
    assert (spec.copies, spec.budget_factor, spec.worst_case_factor) == (1, 1, 2)
    doc["tasks"][0]["redundancy"] = {"mode": "invariants"}
    with pytest.raises(ConfigError, match="task 'a': redundancy: mode invariants: expected 'checks'"):
        parse_taskset(doc, "t.yaml")


X = TensorSpec("x", (8,), "float32")
Y = TensorSpec("y", (8,), "float32")
N = TensorSpec("n", (1,), "int32")


def run(injections: list[Injection], fallback: bool = True):
    """y = x / 10 (all in [0, 1)) every 10 ms under invariants; returns (runtime, sink, published y)."""
    g = Graph("g", [Op("scale", lambda x, y, n: (torch.mul(x, 0.1, out=y), n.fill_(8)), (X,), (Y, N),
                       cost_us=1000)], [X], ["y", "n"])
    stop = Graph("stop", [Op("stop", lambda x, y, n: (y.fill_(0.0), n.fill_(0)), (X,), (Y, N), cost_us=500)],
                 [X], ["y", "n"])
    spec = parse_redundancy({"mode": "invariants", "checks": {"y": {"range": [0, 1]}, "n": {"capacity": 8}},
                             "cost": "100us"})
    inj = Injector()
    b = TaskBinding(Task("T", 10 * MS, 3 * MS), inj.wrap("T", g), inputs={"x": "/x"}, outputs={"y": "/y"},
                    fallback=inj.wrap("T", stop, primary=False) if fallback else None, on_overrun="none",
                    executor=Redundant(spec))
    sink, out = RecordingSink(), {}
    rt = Runtime([b], sink=sink, cost=inj.cost(declared_cost),
                 egress=lambda ch, t, seq, d: out.__setitem__(t // MS, d.clone()))
    inj.arm(injections, rt.clock.now, lambda task: 5 * MS)
    rt.push("/x", 0, torch.arange(8, dtype=torch.float32))
    rt.run_until(40 * MS)
    return rt, sink, out


GOOD = torch.arange(8, dtype=torch.float32) * 0.1


def test_a_violation_reruns_the_job_once_and_publishes_the_clean_copy() -> None:
    rt, sink, out = run([])
    assert [e.a for e in sink.of(EventKind.COMPARE, "T")] == [COMPARE_MATCH] * 4
    assert all(torch.equal(v, GOOD) for v in out.values())
    # One run (1 ms) and one check (declared: no virtual time; its cost is in the budget) per job.
    assert rt.stats()["T"]["max_exec_ns"] == 1 * MS
    sign = Injection(0, "bitflip", 8 * MS, "T", 0, 0, element=0.5, bit=31)   # y[4] = -0.4: out of range
    rt, sink, out = run([sign])
    assert [(e.a, e.b) for e in sink.of(EventKind.COMPARE, "T")] == [(COMPARE_MATCH, 1), (COMPARE_VOTED, 2),
                                                                     (COMPARE_MATCH, 1), (COMPARE_MATCH, 1)]
    assert all(torch.equal(v, GOOD) for v in out.values()) and sorted(out) == [10, 20, 30, 40]
    assert rt.tasks["T"].executors[0].stats()["violations"] == 1


def test_two_violations_in_one_job_publish_the_fallback() -> None:
    flips = [Injection(k, "bitflip", 18 * MS, "T", 0, 1, element=0.0, bit=30) for k in range(2)]   # n = 2^30 + 8
    rt, sink, out = run(flips)
    assert [e.a for e in sink.of(EventKind.COMPARE, "T")][2] == COMPARE_NO_MAJORITY
    assert torch.equal(out[30], torch.zeros(8)) and torch.equal(out[20], GOOD)


def test_bit_flips_cycle_through_sign_exponent_mantissa_and_integer_bits() -> None:
    g = Graph("g", [Op("scale", lambda x, y, n: None, (X,), (Y, N))], [X], ["y", "n"])
    drawn = plan("bitflip", 8, ["T"], np.random.default_rng(1), (0, 1), {"T": g}, outputs_only=True, fields=True)
    assert [i.field for i in drawn] == list(FIELDS) * 2
    assert all((i.tensor == 1) == (i.field == "integer") for i in drawn)   # integers: the count n
    assert field_bit(5, 4, "sign") == 31 and 23 <= field_bit(70, 4, "exponent") <= 30
    assert field_bit(70, 8, "mantissa") <= 51 and field_bit(40, 4, "integer") == 8


def test_the_schema_and_the_parser_know_the_same_check_keys() -> None:
    from rt_runtime.config import schema
    from rt_runtime.safety.invariants import CHECK_KEYS, KINEMATICS_KEYS, STEPS_KEYS

    assert set(CHECK_KEYS) == set(schema.OutputChecks.model_fields)
    assert set(KINEMATICS_KEYS) == set(schema.Kinematics.model_fields)
    assert set(STEPS_KEYS) == set(schema.Steps.model_fields)
