"""Output invariants come from the sensor and the configuration, never from the simulator's world.

The LiDAR boxes' bounds are the detector's own (``pipelines.lidar.box_bounds``: the window it looks at,
its plausibility rule, the mount): a real object 62 m to the side is inside them, a box beyond the
window is not an object the detector can have seen. ``inspect`` writes them for an arbitrary bag
from its sensor's mount, and the tracker's sweep timing from the bag's own points.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from pipelines import schema
from pipelines.lidar import box_bounds, build_lidar_graph
from rt_runtime.bag import BagWriter, array_to_cloud, open_bag
from rt_runtime.bag.survey import survey
from rt_runtime.config.calibration import calibrate_from_bag
from rt_runtime.config.generate import stack_for_bag
from rt_runtime.config.stack import parse_stack
from rt_runtime.exec import GraphExecutor
from rt_runtime.replay import replay
from rt_runtime.safety.invariants import check_output, parse_checks

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import third_party_bags as tp  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def stack() -> dict:
    return yaml.safe_load((ROOT / "config" / "stack.yaml").read_text())


def task(doc: dict, name: str) -> dict:
    return next(e for e in doc["tasks"] if e["name"] == name)


def lidar_checks(entry: dict) -> tuple:
    return parse_checks({k: v for k, v in entry["redundancy"]["checks"].items() if k in ("boxes", "box_count")})


def boxes_at(*ys: float) -> dict[str, np.ndarray]:
    """LiDAR outputs with one car-sized box per ``y`` (x 10 m, on the ground under a 1.9 m high sensor)."""
    out = np.zeros((schema.MAX_BOXES, len(schema.BOX_COLS)), np.float32)
    for i, y in enumerate(ys):
        out[i] = [10.0, y, 0.75, 4.5, 1.9, 1.5, 0.1, 0.6]
    return {"boxes": out, "box_count": np.array([len(ys)], np.int32)}


def test_the_stack_files_lidar_bounds_are_the_detectors_own():
    lidar = task(stack(), "lidar_objects")
    declared = {int(k): tuple(v) for k, v in lidar["redundancy"]["checks"]["boxes"]["range"].items()}
    assert declared == box_bounds(**lidar["args"])   # the comment in config/stack.yaml says where they come from


def test_a_box_beyond_the_detectors_window_is_a_fault_and_a_far_object_inside_it_is_not():
    lidar = task(stack(), "lidar_objects")
    (hi_y,) = [box_bounds(**lidar["args"])[1][1]]
    checks = lidar_checks(lidar)
    c = next(c for c in checks if c.output == "boxes")
    assert check_output(boxes_at(62.1035, -71.8391), c) is None       # the real objects the old [-60, 60] rejected
    why = check_output(boxes_at(5.0, hi_y + 1.0), c)
    assert why is not None and "column 1" in why and f"{hi_y + 1.0:g}" in why
    # and the bound is the detector's: a car 62 m to the side is boxed there, one beyond the window not at all
    assert hi_y < 90 and box_bounds(range_m=120.0)[1][1] > 120


def car_cloud(y: float) -> torch.Tensor:
    """A sensor-frame sweep: flat ground 1.9 m below, and the L of a car's side and rear at (20, y)."""
    g = np.stack(np.meshgrid(np.arange(-70.0, 70.0, 1.0), np.arange(-70.0, 70.0, 1.0)), -1).reshape(-1, 2)
    ground = np.column_stack([g, np.full(len(g), -1.9), np.full(len(g), 10.0)])
    zs = np.arange(-1.7, -0.5, 0.1)
    side = [(20.0 + a, y - np.sign(y) * 0.95, z) for a in np.arange(-2.25, 2.25, 0.1) for z in zs]
    rear = [(17.75, y + b, z) for b in np.arange(-0.95, 0.95, 0.1) for z in zs]
    car = np.column_stack([np.array(side + rear), np.full(len(side) + len(rear), 80.0)])
    return torch.tensor(np.concatenate([ground, car]), dtype=torch.float32)


@pytest.mark.parametrize("y, seen", [(62.0, True), (-62.0, True), (95.0, False)])
def test_the_detector_boxes_a_car_inside_its_window_and_never_one_beyond(y, seen):
    out = GraphExecutor(build_lidar_graph()).run({"points": car_cloud(y)})
    n = int(out["box_count"])
    ys = out["boxes"][:n, 1].tolist()
    assert any(abs(b - y) < 1.5 for b in ys) == seen, ys
    assert check_output({k: v.numpy() for k, v in out.items()}, next(
        c for c in lidar_checks({"redundancy": {"checks": {"boxes": {"rows": "box_count", "range": box_bounds()},
                                                           "box_count": {"capacity": 128}}}})
        if c.output == "boxes")) is None


class Boxes:
    """A replay's quality callback that keeps the LiDAR boxes it is handed (retained channels)."""

    channels = ("lidar/boxes", "lidar/box_count")

    def __call__(self, bag, retained, start_ns, ego, *, channels=None, cfg=None) -> dict:
        rows = dict(channels or {})
        counts = [int(c.reshape(-1)[0]) for _, c in rows.get("lidar/box_count", [])]
        self.boxes = np.concatenate([b[:n] for (_, b), n in zip(rows.get("lidar/boxes", []), counts)] or
                                    [np.zeros((0, 8), np.float32)])
        return {}


def lidar_only_bag(out: Path, sweeps: int) -> Path:
    """The real VLP-16 revolution (tests/data/third_party) as the Velodyne driver sends it, at 10 Hz, alone
    in a bag (no camera, radar, odometry or tf): what the LiDAR side of the stack is given."""
    points, stamp_s = tp.velodyne_points(tp.decode_vlp16(tp.vlp16_packets(tp.VLP16_RAWLOG)))
    with BagWriter(out, "mcap") as bag:
        bag.add_topic("/velodyne_points", "sensor_msgs/msg/PointCloud2")
        for k in range(sweeps):
            t0 = tp.T0_NS + k * tp.LIDAR_PERIOD_NS
            bag.write("/velodyne_points", t0 + tp.LIDAR_PERIOD_NS + tp.LIDAR_DELAY_NS,
                      array_to_cloud(points, "velodyne", t0 + int(round(stamp_s * 1e9))))
    return out


def test_inspect_configures_a_real_recording_with_an_object_past_60_m_to_the_side(tmp_path):
    """A real VLP-16 revolution with objects 62-72 m to the side (on main the LiDAR's invariant [-60, 60]
    fired on 39 of 40 sweeps): inspect's config replays with no invariant alarm, the far boxes published,
    and objects on /perception/objects."""
    bag = lidar_only_bag(tmp_path / "vlp16", 10)
    with open_bag(bag) as r:
        s = survey(r)
    doc, notes = stack_for_bag(s, stack())
    lidar, fusion = task(doc, "lidar_objects"), task(doc, "fusion_tracking")
    assert {int(k): tuple(v) for k, v in lidar["redundancy"]["checks"]["boxes"]["range"].items()} == box_bounds()
    # the tracker's sweep timing is the bag's own: stamped at the last packet, turning clockwise in 100 ms
    tracker = fusion["args"]["tracker"]
    assert -0.06 < tracker["sweep_offset"] < -0.04 and tracker["sweep_spin"] == pytest.approx(-0.1, abs=0.002)
    assert "last_t" not in fusion["redundancy"]["checks"]   # no odometry: the tracks' time is the sweeps'
    cfg, _ = calibrate_from_bag(parse_stack(doc, str(tmp_path / "mine.yaml")), str(bag))
    keep = Boxes()
    result = replay(bag, cfg, quality=keep)
    assert result.faults == {} and result.errors == 0 and result.clean, result.faults
    assert np.abs(keep.boxes[:, 1]).max() > 60.0, "the recording's far objects were published"
    assert result.outputs.get("/perception/objects", 0) > 0
