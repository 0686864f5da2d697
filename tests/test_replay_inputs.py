"""Replay on bad input: clear errors with exit 2 and no traceback; single bad messages are counted."""
from __future__ import annotations

import json
import os
import struct
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from rt_runtime.bag import BagWriter, array_to_cloud, open_bag
from rt_runtime.config.stack import load_stack
from rt_runtime.replay import replay

from replay_fixtures import short_bag  # noqa: F401 - a fixture

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "rt_runtime.cli", *args], capture_output=True, text=True,
                          env=env, timeout=300, cwd=ROOT)


def test_unreadable_bag(tmp_path):
    bad = tmp_path / "garbage.mcap"
    bad.write_bytes(b"\x89MCAP0\r\n" + os.urandom(200))
    proc = run_cli("replay", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "garbage.mcap" in proc.stderr


def test_a_record_length_past_memory_is_one_line(tmp_path):
    # garbage whose first record claims 2**62 bytes: rosbags' reader raised MemoryError (a traceback, exit 1,
    # on a random 200-byte file in CI)
    bad = tmp_path / "huge.mcap"
    bad.write_bytes(b"\x89MCAP0\r\n" + bytes([0x01]) + struct.pack("<Q", 1 << 62) + b"x" * 100)
    proc = run_cli("replay", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "huge.mcap" in proc.stderr, proc.stderr


def test_missing_topics_are_listed_with_what_the_bag_has(short_bag, tmp_path):  # noqa: F811
    proc = run_cli("replay", str(short_bag), "--remap", "/sensing/lidar/points=/vehicle/velodyne")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "/vehicle/velodyne" in proc.stderr and "/sensing/lidar/points" in proc.stderr


def test_remap_replays_a_bag_recorded_under_other_names(short_bag, tmp_path):  # noqa: F811
    renamed = tmp_path / "renamed"
    with open_bag(short_bag) as r, BagWriter(renamed, "mcap") as w:
        for topic, msgtype in r.topics.items():
            w.add_topic("/vehicle/velodyne" if topic == "/sensing/lidar/points" else topic, msgtype)
        for m in r.messages():
            w.write("/vehicle/velodyne" if m.topic == "/sensing/lidar/points" else m.topic, m.t_ns, m.raw_cdr)
    proc = run_cli("replay", str(renamed), "--remap", "/sensing/lidar/points=/vehicle/velodyne", "--json",
                   "--until", "1.5")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert next(t for t in doc["tasks"] if t["name"] == "lidar_objects")["jobs"] >= 10


def test_invalid_config_names_file_task_and_field(short_bag, tmp_path):  # noqa: F811
    cfg = tmp_path / "bad.yaml"
    text, n = re.subn(r'(- name: planning\n(?:    .*\n)*?    wcet: )"[^"]+"', r"\g<1>40", (ROOT / "config" / "stack.yaml").read_text())
    assert n == 1
    cfg.write_text(text)
    proc = run_cli("replay", str(short_bag), "--config", str(cfg))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "bad.yaml" in proc.stderr and "planning" in proc.stderr and "wcet" in proc.stderr


def test_single_bad_messages_are_counted_and_the_replay_goes_on(short_bag, tmp_path):  # noqa: F811
    """Every third LiDAR sweep replaced by a cloud whose fields overrun point_step."""
    damaged = tmp_path / "damaged"
    broken = 0
    with open_bag(short_bag) as r, BagWriter(damaged, "mcap") as w:
        for topic, msgtype in r.topics.items():
            w.add_topic(topic, msgtype)
        lidar = 0
        for m in r.messages():
            if m.topic == "/sensing/lidar/points":
                lidar += 1
                if lidar % 3 == 0:
                    msg = array_to_cloud(np.zeros(10, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4")]), "lidar", m.t_ns)
                    msg.point_step = 8  # the z field (offset 8) now lies outside each point
                    w.write(m.topic, m.t_ns, msg)
                    broken += 1
                    continue
            w.write(m.topic, m.t_ns, m.raw_cdr)
    result = replay(damaged, load_stack(ROOT / "config" / "stack.yaml"))
    assert result.bad_messages == {"/sensing/lidar/points": {"undecodable": broken}}
    assert result.stats["lidar_objects"]["released"] > 0 and result.outputs["/planning/trajectory"] > 0
