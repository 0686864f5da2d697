"""The degrade supervisor in a replay: config/stack.yaml's ``safety:`` key installs it; a sensor that
falls silent in the recording moves the stack to degraded, then to minimal-risk, and the planner
publishes the minimal-risk stop from then on."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from replay_fixtures import short_bag  # noqa: F401 - a fixture

from rt_runtime.bag import BagWriter, open_bag
from rt_runtime.config.stack import load_stack
from rt_runtime.replay import replay
from rt_runtime.sched.events import EventKind
from rt_runtime.trace.file import load_trace

ROOT = Path(__file__).resolve().parents[1]
LIDAR = "/sensing/lidar/points"
CUT_NS = 1_500_000_000


def test_a_lidar_that_falls_silent_degrades_then_holds_the_minimal_risk_stop(short_bag, tmp_path):  # noqa: F811
    silent = tmp_path / "lidar_silent"
    last = 0
    with open_bag(short_bag) as r, BagWriter(silent, "mcap") as w:
        start = r.start_ns
        for topic, msgtype in r.topics.items():
            w.add_topic(topic, msgtype)
        for m in r.messages():
            if m.topic == LIDAR:
                if m.t_ns - start >= CUT_NS:
                    continue
                last = m.t_ns - start
            w.write(m.topic, m.t_ns, m.raw_cdr)
    cfg = load_stack(ROOT / "config" / "stack.yaml")
    result = replay(silent, cfg, trace=tmp_path / "t.rttrace", retain_channels=["planning/status"])
    hist = result.extra["safety"]["history"]
    assert [(h["from"], h["to"], h["reason"]) for h in hist] == [
        ("nominal", "degraded", "sensor_silent"), ("degraded", "minimal_risk", "sensor_silent")]
    # Silent for 1.5 lidar periods -> degraded, for 4 -> minimal-risk (both since the last sweep).
    assert abs(hist[0]["t_s"] - (last + 150_000_000) / 1e9) < 1e-6
    assert abs(hist[1]["t_s"] - (last + 400_000_000) / 1e9) < 1e-6
    status = result.extra["channels"]["planning/status"]
    before = [int(v[0]) for t, v in status if t < last]
    after = [int(v[0]) for t, v in status if t > hist[1]["t_s"] * 1e9 + 100_000_000]
    assert before and set(before) == {0} and after and set(after) == {1}
    assert result.stats["planning"]["safety_state"] == 2 and result.stats["planning"]["mode"] == "fallback"
    cols, _ = load_trace(tmp_path / "t.rttrace")
    safety = cols.kind == EventKind.SAFETY
    assert cols.a[safety].tolist() == [1, 2]


def test_a_clean_recording_stays_nominal(short_bag):  # noqa: F811
    result = replay(short_bag, load_stack(ROOT / "config" / "stack.yaml"))
    assert result.extra["safety"]["history"] == [] and result.extra["safety"]["state"] == "nominal"
    assert result.stats["planning"]["safety_state"] == 0 and result.deterministic
    assert np.isfinite(result.duration_s)


@pytest.mark.parametrize("change, message", [
    ({"planner": "pilot"}, "safety: planner: no task named 'pilot'"),
    ({"sensors": {"lidar/pointz": "100ms"}}, "safety: sensors: ['lidar/pointz'] are not ingress channels"),
    ({"sensors": {"ego/odom": 20}}, "sensors.ego/odom: expected a duration with a unit"),
    ({"silence_critical": 1.0}, "silence_critical (1.0) must be >= silence_factor (1.5)"),
    ({"hysteresis": {"degraded": 0}}, "hysteresis.degraded: expected an integer >= 1, found 0"),
    ({"colour": "red"}, "unknown key(s) ['colour']"),
])
def test_bad_safety_keys_name_the_file_and_the_field(change, message):
    from rt_runtime.config import ConfigError
    from rt_runtime.config.stack import parse_stack
    from rt_runtime.config.taskset import load_yaml

    doc = load_yaml(ROOT / "config" / "stack.yaml")
    doc["safety"] = {**doc["safety"], **change}
    with pytest.raises(ConfigError) as e:
        parse_stack(doc, "stack.yaml")
    assert str(e.value).startswith("stack.yaml: safety") and message in str(e.value), str(e.value)
