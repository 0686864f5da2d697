"""The campaign goals on the reference stack, through short replays of the built-in scenario.

Every single bit flip, into any task's outputs, is detected or masked, never published wrong; no
fault class crashes the runtime; a valid trajectory (nominal or minimal-risk) is published every
planning period under every single fault, and a hang's effect is gone by the end of the run;
nothing leaks (threads, executors, arenas). Every op takes its budget (budget timing), so these
runs follow from the configuration and the scenario alone, not from this machine's load.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from leak_audit import leaked, snapshot, soak  # noqa: E402 - bench/leak_audit.py
from replay_fixtures import short_bag  # noqa: F401,E402 - a fixture
from rt_runtime.cli import main
from rt_runtime.replay.defaults import default_config
from rt_runtime.faults.campaign import judge, load_campaign, published, stack_under_test
from rt_runtime.faults.harness import Harness, Scenario
from rt_runtime.faults.inject import FIELDS, INGRESS_CLASSES, OP_CLASSES, plan
from rt_runtime.sched.events import COMPARE_MATCH, EventKind

MS = 1_000_000
CAMPAIGN = Path(__file__).resolve().parents[1] / "config" / "campaign.yaml"
TASKS = ("planning", "fusion_tracking", "prediction", "lidar_objects", "camera_objects", "radar_objects")


@pytest.fixture(scope="module")
def stack(short_bag):  # noqa: F811
    """The campaign's stack under test on 2.2 s of the scenario, with its golden run."""
    before = snapshot()
    c = load_campaign(CAMPAIGN)
    c.duration_ns, c.inject_ns, c.settle_ns = 2_200_000_000, (600 * MS, 1_100 * MS), 400 * MS
    cfg = stack_under_test(default_config(), c)
    sc = Scenario(short_bag, cfg, c.duration_ns)
    h = Harness(cfg, sc, c.planner, monitor=c.monitor, clear_after=c.hysteresis, stall_after_ns=c.stall_after_ns)
    golden = h.run()
    assert golden.crash is None and not golden.detections and not golden.machine.transitions
    yield c, cfg, h, golden, before
    sc.close()


def _planner_out(h: Harness) -> tuple[str, str]:
    b = next(b for b in h.bindings if b.name == "planning")
    return b.outputs["trajectory"], b.outputs["plan_status"]


def test_every_bit_flip_is_detected_or_masked_never_published_wrong(stack) -> None:
    c, cfg, h, golden, _ = stack
    # One flip per task, the fields (sign, exponent, mantissa, integer) in turn across them.
    drawn = [plan("bitflip", k % len(FIELDS) + 1, [task], np.random.default_rng(11 + k), c.inject_ns, h.graphs,
                  k, outputs_only=True, fields=True)[-1] for k, task in enumerate(TASKS)]
    assert {i.field for i in drawn} == set(FIELDS) and {i.target for i in drawn} == set(TASKS)
    for inj in drawn:
        run = h.run([inj])
        out = judge(golden, run, inj, _planner_out(h), c, cfg.egress)
        assert out.landed_ns is not None and not out.crash, inj.describe()
        assert out.detected or out.masked, inj.describe()
        assert not out.wrong_output and out.missing_plans == 0 and out.deadline_misses == 0, inj.describe()
        if inj.target in ("fusion_tracking", "prediction"):   # dual: the flipped copy is outvoted, the
            # published outputs are the golden ones bit for bit
            verdicts = [e[4] for e in run.events if e[0] == EventKind.COMPARE and e[2] == inj.target]
            assert verdicts.count(COMPARE_MATCH) == len(verdicts) - 1, inj.describe()
            for topic, msgs in published(run, cfg.egress).items():
                gold = published(golden, cfg.egress)[topic]
                assert all(np.array_equal(x, gold[t]) for t, x in msgs.items()), inj.describe()


def test_no_class_crashes_and_a_plan_is_published_every_period(stack) -> None:
    c, cfg, h, golden, _ = stack
    rng = np.random.default_rng(5)
    injections = []
    for cls in OP_CLASSES:   # each op class on the planner itself and on one perception task
        other = ("lidar_objects", "fusion_tracking", "prediction", "radar_objects")[len(injections) % 4]
        for task in ("planning", other):
            injections += plan(cls, 1, [task], rng, c.inject_ns, h.graphs, len(injections))
    for cls in INGRESS_CLASSES:
        topics = ["/sensing/lidar/points"] if cls == "arena" else [r.topic for r in cfg.ingress][:4]
        injections += plan(cls, 1, topics, rng, c.inject_ns, h.graphs, len(injections),
                           magnitude=(20 * MS, 80 * MS) if cls == "delay" else (4, 16))
    for inj in injections:
        out = judge(golden, h.run([inj]), inj, _planner_out(h), c, cfg.egress)
        assert not out.crash, inj.describe()
        assert out.landed_ns is not None, inj.describe()
        # A LiDAR sweep lost (its job re-run past its 45 ms deadline, or the message rejected, dropped or
        # late) releases no fusion -> planning chain that cycle: the planner runs on its own 1.5 periods
        # after the last chain, one planning instant later than the golden run (docs/SAFETY.md).
        lidar = inj.target in ("lidar_objects", "/sensing/lidar/points")
        assert out.missing_plans <= (1 if lidar else 0) and not out.wrong_output, inj.describe()
        if inj.cls in ("exception", "hang", "nan_input", "drop", "arena", "corrupt"):
            assert out.detected, inj.describe()
        if inj.cls == "hang":   # the re-run masks it: the outputs are the golden ones again by the end
            assert out.recovered, inj.describe()


def test_faults_command_prints_one_json_document(short_bag, tmp_path, capsys) -> None:  # noqa: F811
    camp = tmp_path / "c.yaml"
    camp.write_text("""seed: 3
duration: "1.5s"
inject: {from: "0.6s", to: "0.8s"}
settle: "300ms"
stack: {workers: 2, tasks: {planning: {redundancy: dual}}}
classes:
  bitflip: {n: 1, outputs_only: true, tasks: [planning]}
  drop: {n: 1, topics: [/sensing/lidar/points]}
""")
    assert main(["faults", "--json", "--campaign", str(camp), "--bag", str(short_bag)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [k["name"] for k in doc["classes"]] == ["bitflip", "drop"]
    for k in doc["classes"]:
        assert {"injected", "detected", "masked", "recovered", "wrong_output", "crashes"} <= set(k)
        assert k["injected"] == 1 and k["crashes"] == 0
    assert doc["classes"][0]["detected"] == 1 and doc["classes"][0]["wrong_output"] == 0
    assert main(["faults", "--campaign", str(tmp_path / "missing.yaml")]) == 2


def test_nothing_leaks_after_the_campaign_and_a_looped_replay(stack) -> None:
    c, cfg, h, golden, before = stack
    rss = soak(h, loops=2)
    assert len(rss) == 2 and all(r > 0 for r in rss)
    after = snapshot()
    assert leaked(before, after) == {}, (before, after)
    assert published(golden, cfg.egress)   # the golden record itself holds only copies of outputs
