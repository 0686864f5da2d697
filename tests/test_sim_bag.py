"""Simulator recording: bags in both formats, determinism, and the `sim` command."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from rt_runtime.bag import cloud_to_array, image_to_array, msg_to_objects, open_bag
from rt_runtime.cli import UsageError
from rt_runtime.commands import sim as sim_cmd
from rt_runtime.sim import TOPICS, Rig, record
from rt_runtime.sim.record import T0_NS


def _raw(bag: Path) -> list[tuple[str, int, bytes]]:
    with open_bag(bag) as r:
        return [(m.topic, m.t_ns, m.raw_cdr) for m in r.messages()]


@pytest.fixture(scope="module")
def small_bags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sim")
    out = {}
    for name, fmt, seed in [("a", "mcap", 7), ("b", "sqlite3", 7), ("c", "mcap", 8)]:
        record(root / name, "highway_cut_in", 1.0, seed, fmt, rig=Rig.small())
        out[name] = root / name
    return out


def test_same_seed_gives_identical_messages_in_both_formats(small_bags: dict[str, Path]) -> None:
    a, b, c = (_raw(small_bags[k]) for k in "abc")
    assert a == b  # byte for byte, message for message, across storage plugins
    assert len(a) == len(c) and a != c  # another seed: other traffic and noise


def test_bag_content(small_bags: dict[str, Path]) -> None:
    with open_bag(small_bags["a"]) as r:
        assert r.topics == TOPICS
        meta = json.loads(r.metadata["rt_runtime.sim"])
        assert meta["scenario"] == "highway_cut_in" and meta["seed"] == 7
        assert meta["rig"]["camera"]["K"][0][0] == 100.0 and "mount" in meta["rig"]["lidar"]
        assert r.counts["/localization/odometry"] == 50 and r.counts["/sensing/camera/image_raw"] == 20
        assert r.counts["/sensing/lidar/points"] == 10 and r.counts["/sensing/radar/points"] == 20
        assert r.counts["/tf_static"] == 1 and r.counts["/ground_truth/objects"] == 20
        seen = set()
        for m, msg in r.decoded():
            seen.add(m.topic)
            if m.topic == "/sensing/camera/image_raw" and m.seq == 0:
                assert image_to_array(msg).shape == (96, 160, 3) and msg.encoding == "rgb8"
            elif m.topic == "/sensing/lidar/points" and m.seq == 0:
                pts = cloud_to_array(msg)
                assert pts.shape == (16, 360) and pts.dtype.names == ("x", "y", "z", "intensity", "ring", "t")
                stamp = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
                assert m.t_ns - stamp == 105_000_000  # logged when the sweep is complete
            elif m.topic == "/ground_truth/objects" and m.seq == 0:
                gt = msg_to_objects(msg)
                assert gt.frame_id == "map" and 1 in gt.ids and gt.boxes.shape == (len(gt), 7)
            elif m.topic == "/sensing/camera/camera_info":
                assert msg.k[0] == 100.0 and msg.header.frame_id == "camera_optical_link"
        assert seen == set(TOPICS) and not r.skipped


def test_longer_run_starts_with_the_same_frames(tmp_path: Path, small_bags: dict[str, Path]) -> None:
    record(tmp_path / "long", "highway_cut_in", 1.5, 7, "mcap", rig=Rig.small())
    short = _raw(small_bags["a"])
    long = _raw(tmp_path / "long")
    end = T0_NS + 10**9  # everything logged within the first second is the same
    assert [x for x in long if x[1] < end] == [x for x in short if x[1] < end]
    assert len(long) > len(short)


def test_workers_do_not_change_the_output(tmp_path: Path, small_bags: dict[str, Path]) -> None:
    record(tmp_path / "par", "highway_cut_in", 1.0, 7, "mcap", rig=Rig.small(), workers=2)
    assert _raw(tmp_path / "par") == _raw(small_bags["a"])


def _args(out: Path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    sim_cmd.add_parser(sub, "sim", "simulate")
    return parser.parse_args(["sim", str(out), *extra])


def test_sim_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bag"
    assert sim_cmd.run(_args(out, "--seconds", "0.3", "--scenario", "stop_and_go", "--format", "sqlite3",
                             "--workers", "1")) == 0
    line = capsys.readouterr().out
    assert "wrote" in line and "stop_and_go" in line and "sqlite3" in line
    with open_bag(out) as r:
        assert r.storage == "sqlite3" and r.message_count > 0
    for extra, msg in [((), "exists already"), (("--scenario", "x"), "unknown scenario 'x'"),
                       (("--format", "zip"), "expected mcap or sqlite3")]:
        target = out if msg == "exists already" else tmp_path / "new"
        with pytest.raises(UsageError, match=msg):
            sim_cmd.run(_args(target, *extra))
    # Numbers are checked by argparse (rt_runtime/commands/args.py), before run().
    for extra, msg in [(("--seconds", "-1"), "above 0 up to 3600"), (("--seconds", "abc"), "number of seconds"),
                       (("--seconds", "inf"), "not a finite number"), (("--seed", "1.5"), "a seed from 0"),
                       (("--workers", "0"), "process count from 1 to 64")]:
        with pytest.raises(SystemExit):
            _args(tmp_path / "new", *extra)
        assert msg in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
