"""`rt-runtime inspect` -> `rt-runtime replay`: someone else's recording replays with the config inspect writes.

The "vehicle" bags are simulated recordings (camera as JPEG CompressedImage) rewritten as another
vehicle would have recorded them: topics renamed, and the radar (and in one of them the odometry and
route) left out. Calibration comes from the bag's CameraInfo and /tf_static.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rt_runtime import cli
from rt_runtime.bag import BagWriter, open_bag
from rt_runtime.bag.calibration import camera_pose, read_calibration
from rt_runtime.config.calibration import with_bag_calibration
from rt_runtime.config.stack import parse_stack
from rt_runtime.sim import record

SECONDS = 1.5
RENAME = {"/sensing/lidar/points": "/velodyne_points", "/sensing/camera/image_raw/compressed":
          "/cam_front/image_raw/compressed", "/sensing/camera/camera_info": "/cam_front/camera_info",
          "/localization/odometry": "/odom", "/planning/route": "/mission/route"}


@pytest.fixture(scope="module")
def sim_bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inspect") / "sim_jpeg"
    record(path, "highway_cut_in", SECONDS, 7, "mcap", workers=2, camera_format="jpeg")
    return path


def vehicle_bag(src: Path, out: Path, drop: set[str]) -> Path:
    """The simulated bag as another vehicle records it: topics renamed, some sensors absent."""
    with open_bag(src) as r, BagWriter(out, "mcap") as w:
        keep = {t: ty for t, ty in r.topics.items() if t not in drop}
        for t, ty in keep.items():
            w.add_topic(RENAME.get(t, t), ty)
        for m in r.messages(list(keep)):
            w.write(RENAME.get(m.topic, m.topic), m.t_ns, m.raw_cdr)
    return out


def inspect(bag: Path, cfg: Path, capsys) -> dict:
    assert cli.main(["inspect", str(bag), "--config-out", str(cfg), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def replay(bag: Path, cfg: Path, capsys) -> tuple[dict, str]:
    assert cli.main(["replay", str(bag), "--config", str(cfg), "--json"]) == 0
    out = capsys.readouterr()
    return json.loads(out.out), out.err


def test_no_radar_no_odometry_is_a_perception_only_stack_that_replays(sim_bag, tmp_path, capsys):
    bag = vehicle_bag(sim_bag, tmp_path / "no_radar_no_odom", {"/sensing/radar/points", "/localization/odometry",
                                                               "/tf", "/planning/route"})
    cfg = tmp_path / "stack.yaml"
    report = inspect(bag, cfg, capsys)
    roles = {t["topic"]: t["role"] for t in report["topics"]}
    assert roles["/velodyne_points"] == "lidar" and roles["/cam_front/image_raw/compressed"] == "camera"
    assert report["calibration"]["cameras"]["/cam_front/camera_info"]["fx"] == 400.0
    doc = yaml.safe_load(cfg.read_text())
    assert cfg.read_text().startswith("# yaml-language-server") and "no odometry: perception only" in cfg.read_text()
    assert {e["name"] for e in doc["tasks"]} == {"lidar_objects", "camera_objects", "fusion_tracking"}
    assert {r["topic"]: r["codec"] for r in doc["ingress"]} == {
        "/velodyne_points": "lidar_points", "/cam_front/image_raw/compressed": "compressed_image"}
    assert doc["frame"] == "base_link" and "safety" not in doc
    out, err = replay(bag, cfg, capsys)
    jobs = {t["name"]: t for t in out["tasks"]}
    assert set(jobs) == {"lidar_objects", "camera_objects", "fusion_tracking"}
    assert all(t["jobs"] > 0 and t["errors"] == 0 for t in jobs.values()), jobs
    assert out["outputs"].get("/perception/objects", 0) > 0 and out["deterministic"]
    assert "LiDAR mount [1.2, 0.0, 1.9, 0.0] from the bag's /tf_static" in err, err


def test_no_radar_with_odometry_plans_and_takes_calibration_from_the_bag(sim_bag, tmp_path, capsys):
    bag = vehicle_bag(sim_bag, tmp_path / "no_radar", {"/sensing/radar/points"})
    cfg = tmp_path / "stack.yaml"
    inspect(bag, cfg, capsys)
    doc = yaml.safe_load(cfg.read_text())
    names = [e["name"] for e in doc["tasks"]]
    assert "radar_objects" not in names and "planning" in names
    fusion = next(e for e in doc["tasks"] if e["name"] == "fusion_tracking")
    assert fusion["optional"] == ["radar_objects", "radar_object_count"] and "camera" not in fusion.get("args", {})
    out, _ = replay(bag, cfg, capsys)
    assert out["outputs"].get("/planning/trajectory", 0) > 0 and out["deterministic"]
    assert all(t["errors"] == 0 for t in out["tasks"])


def test_inspect_never_writes_over_its_input_and_names_a_bad_bag(sim_bag, tmp_path, capsys):
    assert cli.main(["inspect", str(sim_bag), "--config-out", str(sim_bag / "metadata.yaml")]) == 2
    err = capsys.readouterr().err
    assert "--config-out" in err and len(err.strip().splitlines()) == 1
    assert cli.main(["inspect", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err


def test_calibration_read_from_the_bag_and_config_values_override(sim_bag):
    with open_bag(sim_bag) as r:
        cal = read_calibration(r, ["/sensing/lidar/points", "/sensing/camera/image_raw/compressed"])
    assert cal.pose_of("/sensing/lidar/points").mount4() == [1.2, 0.0, 1.9, 0.0]
    cam = camera_pose(cal.pose_of("/sensing/camera/image_raw/compressed"))
    assert cam["pitch"] == pytest.approx(0.0349066, abs=1e-6) and cam["x"] == pytest.approx(1.6)
    root = Path(__file__).resolve().parents[1]
    doc = yaml.safe_load((root / "config" / "stack.yaml").read_text())
    doc["ingress"] = [dict(r, topic="/sensing/camera/image_raw/compressed") if r["channel"] == "camera/image"
                      else r for r in doc["ingress"] if "channel" in r] + [r for r in doc["ingress"] if "channel" not in r]
    fusion = next(e for e in doc["tasks"] if e["name"] == "fusion_tracking")
    given = dict(fusion["args"]["camera"])
    del next(e for e in doc["tasks"] if e["name"] == "lidar_objects")["args"]["mount"]
    cfg, notes = with_bag_calibration(parse_stack(doc, "stack.yaml"), cal)
    assert cfg.entries["lidar_objects"]["args"]["mount"] == [1.2, 0.0, 1.9, 0.0]
    assert cfg.entries["fusion_tracking"]["args"]["camera"] == given, "a configured value overrides the bag's"
    assert any("lidar_objects" in n and "/tf_static" in n for n in notes)
    del fusion["args"]["camera"]
    cfg, _ = with_bag_calibration(parse_stack(doc, "stack.yaml"), cal)
    cam = cfg.entries["fusion_tracking"]["args"]["camera"]
    assert (cam["fx"], cam["width"], cam["height"]) == (400.0, 640, 384) and cam["pitch"] == pytest.approx(0.0349066, abs=1e-6)


def test_neither_config_nor_bag_calibration_is_one_clear_note(sim_bag):
    from rt_runtime.bag.calibration import BagCalibration

    root = Path(__file__).resolve().parents[1]
    doc = yaml.safe_load((root / "config" / "stack.yaml").read_text())
    del next(e for e in doc["tasks"] if e["name"] == "lidar_objects")["args"]["mount"]
    _, notes = with_bag_calibration(parse_stack(doc, "stack.yaml"), BagCalibration())
    assert notes == ["task 'lidar_objects': no LiDAR mount in the configuration (args.mount) nor in the bag "
                     "(/tf_static has no pose in base_link for /sensing/lidar/points's frame '?'): points are taken "
                     "as in base_link"]
