"""A camera that is not the simulator's: the config `inspect` writes works at the bag's resolution and
encoding, and the lens distortion a CameraInfo (or the config) gives reaches the fusion's projection.

The "vehicle" bags are a simulated recording with a 768x576 camera (the rig's lens at that size),
rewritten as the issue's recording came: LiDAR and camera only (no CameraInfo, tf, odometry or
radar), the camera as bgr8 Image or as JPEG CompressedImage. Configured the documented way
(`inspect --config-out`, then `replay --config`), every camera job runs, no camera box breaks its
invariants (the frame the detector clips to), boxes are published and objects come out.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from rt_runtime import cli
from rt_runtime.bag import BagWriter, array_to_compressed, open_bag
from rt_runtime.bag.calibration import BagCalibration, CameraIntrinsics, default_intrinsics
from rt_runtime.bag.image import RGB8_ENCODINGS, array_to_image, image_to_array
from rt_runtime.bag.survey import survey
from rt_runtime.bag.types import stamp_ns
from rt_runtime.config.calibration import calibrate_from_bag, with_bag_calibration
from rt_runtime.config.generate import stack_for_bag
from rt_runtime.config.stack import load_stack, parse_stack
from rt_runtime.config.yamlfile import load_yaml
from rt_runtime.io import INGRESS_CODECS
from rt_runtime.io.ingress import decode
from rt_runtime.replay.defaults import default_config
from rt_runtime.replay.engine import replay
from rt_runtime.safety.invariants import parse_checks, violation
from rt_runtime.sim import record
from rt_runtime.sim.rig import CameraModel as RigCamera, Rig

W, H = 768, 576
LIDAR, RAW, JPEG = "/lidar/points", "/camera/image_raw", "/camera/image_raw/compressed"


@pytest.fixture(scope="module")
def sim768(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cam768") / "sim"
    rig = Rig(camera=RigCamera(width=W, height=H, fx=480.0, fy=480.0, cx=383.5, cy=287.5))
    record(path, "highway_cut_in", 1.5, 7, "mcap", rig=rig, workers=1)
    return path


def vehicle_bag(sim: Path, out: Path, kind: str, lidar: bool = True, frames: int | None = None) -> Path:
    """The sim bag as the issue's recording: LiDAR (optional) and the camera as ``kind`` (an Image encoding, or
    jpeg / png CompressedImage); nothing else."""
    compressed = kind in ("jpeg", "png")
    cam = JPEG if compressed else RAW
    with open_bag(sim) as r, BagWriter(out, "mcap") as w:
        if lidar:
            w.add_topic(LIDAR, "sensor_msgs/msg/PointCloud2")
        w.add_topic(cam, "sensor_msgs/msg/CompressedImage" if compressed else "sensor_msgs/msg/Image")
        n = 0
        for m in r.messages(["/sensing/lidar/points", "/sensing/camera/image_raw"]):
            if m.topic == "/sensing/lidar/points":
                if lidar:
                    w.write(LIDAR, m.t_ns, m.raw_cdr)
                continue
            if frames is not None and n >= frames:
                continue
            msg = r.decode(m)
            rgb, t_ns = image_to_array(msg), stamp_ns(msg.header.stamp)
            w.write(cam, m.t_ns, array_to_compressed(rgb, "camera", t_ns, kind, 90) if compressed
                    else encoded(rgb, kind, t_ns))
            n += 1
    return out


def encoded(rgb: np.ndarray, encoding: str, t_ns: int) -> object:
    """An rgb8 frame as a camera driver publishing ``encoding`` would (grey as luma, 16 bit as x257, Bayer mosaics)."""
    grey = (rgb.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)).round().astype(np.uint8)
    if encoding.startswith("bayer_"):
        order, mosaic = encoding[6:10], np.empty(rgb.shape[:2], np.uint8)
        for i, c in enumerate(order):
            mosaic[i // 2::2, i % 2::2] = rgb[i // 2::2, i % 2::2, "rgb".index(c)]
        a = mosaic
    elif encoding.startswith(("mono", "8UC1", "16UC1")):
        a = grey
    else:
        a = rgb[..., ::-1] if encoding.startswith("bgr") else rgb
        if "a" in encoding[:4]:   # rgba / bgra
            a = np.concatenate([a, np.full(a.shape[:2] + (1,), 255, np.uint8)], 2)
    a = np.ascontiguousarray(a)
    if "16" in encoding:
        a = a.astype(np.uint16) * 257
    return array_to_image(a, encoding, "camera", t_ns)


def inspect_replay(bag: Path, cfg: Path, capsys) -> tuple[dict, dict]:
    assert cli.main(["inspect", str(bag), "--config-out", str(cfg), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert cli.main(["replay", str(bag), "--config", str(cfg), "--json"]) == 0
    return report, json.loads(capsys.readouterr().out)


def published_boxes(bag: Path, cfg: Path) -> tuple[list[tuple[np.ndarray, np.ndarray]], tuple]:
    """Every camera_objects publication (boxes, count) in a replay of ``bag`` with ``cfg`` (as `replay` loads it),
    and the task's declared invariants."""
    stack, _ = calibrate_from_bag(load_stack(str(cfg), {}), str(bag))
    res = replay(bag, stack, retain_channels=["camera/boxes", "camera/box_count"])
    ch = res.extra["channels"]
    pubs = [(b, c) for (_, b), (_, c) in zip(ch["camera/boxes"], ch["camera/box_count"])]
    checks = parse_checks(stack.entries["camera_objects"]["redundancy"]["checks"])
    return pubs, checks


@pytest.mark.parametrize("kind", ["bgr8", "jpeg"])
def test_inspected_config_replays_a_768x576_camera(sim768, tmp_path, capsys, kind):
    bag = vehicle_bag(sim768, tmp_path / f"veh_{kind}", kind)
    cfg = tmp_path / "mine.yaml"
    report, out = inspect_replay(bag, cfg, capsys)
    cam = next(t for t in report["topics"] if t["role"] == "camera")
    assert cam["detail"].startswith(f"{W}x{H}"), cam
    notes = report["config"]["notes"]
    assert any(f"the stated default for {W}x{H}" in n for n in notes), notes
    doc = yaml.safe_load(cfg.read_text())
    task = next(e for e in doc["tasks"] if e["name"] == "camera_objects")
    assert task["args"] == {"source_width": W, "source_height": H}
    rng = task["redundancy"]["checks"]["camera_boxes"]["range"]
    assert [rng[c] for c in range(4)] == [[0.0, W], [0.0, H], [0.0, W], [0.0, H]], "the bag's frame, not 640x384"
    fusion = next(e for e in doc["tasks"] if e["name"] == "fusion_tracking")
    assert fusion["args"]["camera"] == default_intrinsics(W, H) == {
        "fx": 480.0, "fy": 480.0, "cx": 383.5, "cy": 287.5, "width": W, "height": H}

    jobs = {t["name"]: t for t in out["tasks"]}
    assert jobs["camera_objects"]["jobs"] >= 25 and jobs["camera_objects"]["errors"] == 0, jobs
    assert "aborted" not in out["faults"] and out["clean"], out["faults"]
    assert out["outputs"]["/perception/objects"] > 0

    pubs, checks = published_boxes(bag, cfg)
    assert len(pubs) >= 25
    counts = [int(c.reshape(-1)[0]) for _, c in pubs]
    assert sum(counts) > 0, "camera boxes are published"
    alarms = [violation({"camera_boxes": b, "camera_box_count": c}, checks) for b, c in pubs]
    assert alarms == [None] * len(pubs)
    live = np.concatenate([b[:n] for (b, _), n in zip(pubs, counts)])
    assert live[:, [0, 2]].max() <= W and live[:, [1, 3]].max() <= H and live[:, :4].min() >= 0
    # The frame is 768x576: objects right of u = 640 or below v = 384 are seen (the old 640x384 frame's box).
    assert live[:, 2].max() > 0 and (live[:, 2] - live[:, 0]).min() > 0


# Every encoding the camera codec (and so inspect) takes, and both compressed formats.
ENCODINGS = [e for e in RGB8_ENCODINGS if e != "8UC3"] + ["png"]


@pytest.mark.parametrize("kind", ENCODINGS)
def test_inspected_camera_graph_takes_every_encoding_at_its_resolution(sim768, tmp_path, kind):
    from pipelines.camera import build_camera_graph
    from rt_runtime.exec import GraphExecutor

    bag = vehicle_bag(sim768, tmp_path / kind, kind, lidar=False, frames=2)
    with open_bag(bag) as r:
        s = survey(r)
        topic = next(t for t in s.topics.values() if t.role == "camera")
        msg = next(r.decoded([topic.topic]))[1]
    doc, notes = stack_for_bag(s, load_yaml(default_config()))
    task = next(e for e in doc["tasks"] if e["name"] == "camera_objects")
    assert task["args"] == {"source_width": W, "source_height": H}, (kind, notes)
    route = next(x for x in doc["ingress"] if x["topic"] == topic.topic)
    frame = decode(INGRESS_CODECS[route["codec"]], msg, topic.topic)["value"]
    assert frame.shape == (H, W, 3) and frame.dtype == np.uint8
    out = GraphExecutor(build_camera_graph(**task["args"], weights=None)).run({"image": torch.from_numpy(np.array(frame))})
    checks = parse_checks(task["redundancy"]["checks"])
    assert violation({k: v.numpy() for k, v in out.items()}, checks) is None


def test_a_depth_image_is_not_taken_for_the_camera(tmp_path):
    bag = tmp_path / "depth"
    with BagWriter(bag, "mcap") as w:
        w.add_topic("/depth/image", "sensor_msgs/msg/Image")
        w.write("/depth/image", 1, array_to_image(np.ones((4, 6), np.float32), "32FC1", "depth", 1))
    with open_bag(bag) as r:
        t = survey(r).topics["/depth/image"]
    assert t.role is None and "32FC1: not a camera image" in t.detail


# ---- lens distortion ------------------------------------------------------------------------------------
LENSES = {
    "plumb_bob": [-0.28, 0.07, 0.0012, -0.0008, -0.008],
    "rational_polynomial": [0.9, -0.4, 0.0005, 0.0007, 0.02, 1.2, -0.25, 0.05],
    "equidistant": [-0.02, 0.004, -0.002, 0.0003],
}


def textbook(model: str, d: list[float], x: float, y: float) -> tuple[float, float]:
    """The distortion of image_geometry / OpenCV, written out per point (the reference the kernels must meet)."""
    if model == "equidistant":
        r = math.hypot(x, y)
        th = math.atan(r)
        thd = th * (1 + d[0] * th ** 2 + d[1] * th ** 4 + d[2] * th ** 6 + d[3] * th ** 8)
        return (x * thd / r, y * thd / r) if r > 0 else (x, y)
    k1, k2, p1, p2, k3, k4, k5, k6 = d + [0.0] * (8 - len(d))
    r2 = x * x + y * y
    radial = (1 + k1 * r2 + k2 * r2 ** 2 + k3 * r2 ** 3) / (1 + k4 * r2 + k5 * r2 ** 2 + k6 * r2 ** 3)
    return (x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x), y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y)


@pytest.mark.parametrize("model", list(LENSES))
def test_distortion_matches_the_textbook_and_undistorts_back(model):
    from pipelines.camera_model import CameraModel

    cam = CameraModel(fx=480.0, fy=478.0, cx=380.0, cy=290.0, width=W, height=H, distortion_model=model,
                      d=tuple(LENSES[model]))
    g = torch.Generator().manual_seed(1)
    # points across the view, out to its corners (x/z up to +-0.8, y/z up to +-0.6)
    xyz = torch.stack([(torch.rand(400, generator=g, dtype=torch.float64) - 0.5) * 1.6,
                       (torch.rand(400, generator=g, dtype=torch.float64) - 0.5) * 1.2,
                       torch.ones(400, dtype=torch.float64)], 1) * (torch.rand(400, 1, generator=g) * 40 + 2)
    uv = cam.project(xyz)
    want = torch.tensor([textbook(model, LENSES[model], float(p[0] / p[2]), float(p[1] / p[2])) for p in xyz],
                        dtype=torch.float64)
    want = torch.stack([cam.fx * want[:, 0] + cam.cx, cam.fy * want[:, 1] + cam.cy], 1)
    assert torch.allclose(uv, want, atol=1e-9)
    moved = (uv - CameraModel(fx=480.0, fy=478.0, cx=380.0, cy=290.0).project(xyz)).norm(dim=1)
    assert moved.max() > 20, "a lens that moves points by tens of pixels: the round trip is a real test"
    pinhole = torch.stack([cam.fx * xyz[:, 0] / xyz[:, 2] + cam.cx, cam.fy * xyz[:, 1] / xyz[:, 2] + cam.cy], 1)
    assert torch.allclose(cam.undistort_pixels(uv), pinhole, atol=1e-6)


def test_a_known_point_through_plumb_bob():
    from pipelines.camera_model import CameraModel

    cam = CameraModel(fx=500.0, fy=500.0, cx=320.0, cy=240.0, distortion_model="plumb_bob", d=(-0.3, 0, 0, 0, 0))
    # x = 0.5, y = 0: r^2 = 0.25, radial 1 - 0.3 x 0.25 = 0.925: x_d = 0.4625, u = 500 x 0.4625 + 320
    assert cam.project(torch.tensor([[0.5, 0.0, 1.0]], dtype=torch.float64)).tolist() == [[551.25, 240.0]]
    with pytest.raises(ValueError, match="distortion_model 'kannala'"):
        CameraModel(distortion_model="kannala", d=(0.1,))


def test_points_far_out_of_view_do_not_fold_back_into_the_image():
    from pipelines.camera_model import CameraModel

    cam = CameraModel(fx=480.0, fy=480.0, cx=383.5, cy=287.5, width=W, height=H, distortion_model="plumb_bob",
                      d=(-0.35, 0.0, 0.0, 0.0, 0.0))   # r_d = r (1 - 0.35 r^2) turns back at r = 0.98
    x = torch.tensor([0.5, 1.0, 2.0, 5.0, 50.0], dtype=torch.float64)
    u = cam.project(torch.stack([x, torch.zeros_like(x), torch.ones_like(x)], 1))[:, 0]
    assert bool((u[1:] > u[:-1]).all()) and float(u[-1]) > W, u


def fused_src(camera: object, cam_box: list[float], box: list[float]) -> int:
    """The fused object's src bits for one LiDAR box and one camera box, through the fusion graph."""
    from pipelines import schema
    from pipelines.fusion import F, build_fusion_graph
    from rt_runtime.exec import GraphExecutor

    boxes = torch.zeros(schema.MAX_BOXES, len(schema.BOX_COLS))
    boxes[0] = torch.tensor(box)
    cams = torch.zeros(schema.MAX_CAMERA_BOXES, len(schema.CAM_COLS))
    cams[0] = torch.tensor(cam_box + [0.9, 0.0])
    one = torch.ones(1, dtype=torch.int32)
    out = GraphExecutor(build_fusion_graph(camera=camera)).run({
        "boxes": boxes, "box_count": one, "radar_objects": torch.zeros(schema.MAX_RADAR_OBJECTS, 8),
        "radar_object_count": torch.zeros(1, dtype=torch.int32), "camera_boxes": cams, "camera_box_count": one})
    return int(out["fused"][0, F["src"]])


def test_the_fusion_matches_a_distorted_camera_box_only_through_the_lens():
    """A pedestrian ahead-left, near the edge of a wide lens's view: the detector's box is where the (barrel) lens
    shows it; projected through the lens the LiDAR box is that box and the camera confirms the object, projected
    as a pinhole it lands some 50 px further out (IoU 0.15, under the 0.3 gate) and the camera's box is not its."""
    from pipelines.fusion import SRC_CAMERA
    from pipelines.camera_model import CameraModel
    from pipelines.geometry import box_corners

    lens = CameraModel(**default_intrinsics(W, H), x=1.6, z=1.45, distortion_model="plumb_bob",
                       d=(-0.3, 0.08, 0.0, 0.0, 0.0))
    car = [8.0, 4.5, 0.85, 0.6, 0.6, 1.7, 0.0, 0.6]   # x y z l w h yaw score, base_link
    r, t = lens.base_to_optical()
    corners = box_corners(torch.tensor(car[:3]), torch.tensor(car[3:6]), torch.tensor(car[6])).double()
    opt = corners @ torch.tensor(r, dtype=torch.float64).T + torch.tensor(t, dtype=torch.float64)
    uv = lens.project(opt)
    seen = [float(uv[:, 0].min().clamp(0, W)), float(uv[:, 1].min().clamp(0, H)),
            float(uv[:, 0].max().clamp(0, W)), float(uv[:, 1].max().clamp(0, H))]
    assert seen[0] > 0 and seen[2] - seen[0] > 40, seen   # wholly in view: a fair box
    pinhole = CameraModel(**default_intrinsics(W, H), x=1.6, z=1.45)
    assert fused_src(lens, seen, car) & SRC_CAMERA, "through the lens: the camera confirms the car"
    assert not fused_src(pinhole, seen, car) & SRC_CAMERA, "as a pinhole: the projection misses the camera's box"


def test_camerainfo_distortion_reaches_the_fusion_and_the_config_overrides_it():
    from pipelines.stack import build_fusion_tracking

    doc = load_yaml(default_config())
    fusion = next(e for e in doc["tasks"] if e["name"] == "fusion_tracking")
    del fusion["args"]["camera"]
    cal = BagCalibration(cameras={"/sensing/camera/camera_info": CameraIntrinsics(
        "/sensing/camera/camera_info", "camera_optical_link", W, H, 480.0, 480.0, 383.5, 287.5, "rational_polynomial",
        tuple(LENSES["rational_polynomial"]))}, image_sizes={"/sensing/camera/image_raw": (W, H)})
    cfg, notes = with_bag_calibration(parse_stack(doc, "stack.yaml"), cal)
    cam = cfg.entries["fusion_tracking"]["args"]["camera"]
    assert cam["distortion_model"] == "rational_polynomial" and cam["d"] == LENSES["rational_polynomial"]
    assert cfg.entries["camera_objects"]["args"] == {"source_width": W, "source_height": H}
    assert any("rational_polynomial distortion" in n for n in notes), notes
    build_fusion_tracking(**cfg.entries["fusion_tracking"]["args"])   # the graph takes it
    fusion["args"]["camera"] = {"fx": 500.0, "fy": 500.0, "cx": 384.0, "cy": 288.0, "width": W, "height": H}
    cfg, _ = with_bag_calibration(parse_stack(doc, "stack.yaml"), cal)
    cam = cfg.entries["fusion_tracking"]["args"]["camera"]
    assert cam["fx"] == 500.0 and "d" not in cam, "the configuration's intrinsics are its own, lens included"
