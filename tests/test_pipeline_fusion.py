"""Object fusion through GraphExecutor: radar-to-box association, camera association by projection."""
import math

import numpy as np
import pytest
import torch

from pipelines import schema
from pipelines.fusion import F, SRC_CAMERA, SRC_LIDAR, SRC_RADAR, build_fusion_graph
from pipelines.camera_model import CameraModel
from rt_runtime.exec import GraphExecutor
from rt_runtime.memory import PoolKind

CAM = CameraModel(fx=600.0, fy=600.0, cx=320.0, cy=192.0, width=640, height=384, x=1.5, y=0.2, z=1.6)
CAR, TRUCK, CYCLIST = (schema.CLASSES.index(c) for c in ("car", "truck", "cyclist"))



pytestmark = pytest.mark.usefixtures("one_torch_thread")

def pinhole_box(x, y, z, l, w, h, cam=CAM):
    """Reference projection, written independently: a forward-looking camera, axis-aligned box."""
    us, vs = [], []
    for dx in (-l / 2, l / 2):
        for dy in (-w / 2, w / 2):
            for dz in (-h / 2, h / 2):
                depth = x + dx - cam.x
                us.append(cam.cx + cam.fx * -(y + dy - cam.y) / depth)
                vs.append(cam.cy + cam.fy * -(z + dz - cam.z) / depth)
    return [max(min(us), 0), max(min(vs), 0), min(max(us), cam.width), min(max(vs), cam.height)]


def run(boxes, radar, cams, camera=CAM):
    b = torch.zeros(schema.MAX_BOXES, len(schema.BOX_COLS))
    r = torch.zeros(schema.MAX_RADAR_OBJECTS, len(schema.RADAR_OBJ_COLS))
    c = torch.zeros(schema.MAX_CAMERA_BOXES, len(schema.CAM_COLS))
    for t, rows in ((b, boxes), (r, radar), (c, cams)):
        if rows:
            t[: len(rows)] = torch.tensor(rows, dtype=torch.float32)
    n = lambda rows: torch.tensor([len(rows)], dtype=torch.int32)  # noqa: E731
    ex = GraphExecutor(build_fusion_graph(camera=camera))
    out = ex.run({"boxes": b, "box_count": n(boxes), "radar_objects": r, "radar_object_count": n(radar),
                  "camera_boxes": c, "camera_box_count": n(cams)})
    k = int(out["fused_count"])
    return out["fused"][:k].clone(), ex


def row_at(fused, x, y):
    return fused[(fused[:, F["x"]] - x).abs().add((fused[:, F["y"]] - y).abs()).argmin()]


def test_projected_lidar_boxes_pick_their_own_camera_boxes():
    boxes = [[15.0, 3.0, 0.8, 4.5, 1.9, 1.6, 0.0, 0.7],    # car, left
             [22.0, -2.5, 1.7, 10.0, 2.5, 3.4, 0.0, 0.6],  # truck, right
             [30.0, 0.5, 0.9, 1.8, 0.6, 1.7, 0.0, 0.5]]    # cyclist, ahead
    labels = [CAR, TRUCK, CYCLIST]
    cams = [pinhole_box(*bx[:6]) + [0.9, lab] for bx, lab in zip(boxes, labels)]
    cams = [[u1 + 4, v1 - 3, u2 + 3, v2 + 2, s, c] for u1, v1, u2, v2, s, c in cams]   # detector jitter
    cams = cams[::-1] + [[500.0, 20.0, 560.0, 60.0, 0.95, CAR]]                       # shuffled + a distractor
    fused, _ = run(boxes, [], cams)
    assert fused.shape[0] == 3
    for bx, lab in zip(boxes, labels):
        row = row_at(fused, bx[0], bx[1])
        assert int(row[F["cls"]]) == lab
        assert int(row[F["src"]]) == SRC_LIDAR + SRC_CAMERA
        assert row[F["score"]] > bx[7]  # the camera confirmed it


def test_object_behind_or_out_of_view_is_not_matched():
    boxes = [[-10.0, 0.0, 0.8, 4.5, 1.9, 1.6, 0.0, 0.7], [5.0, 25.0, 0.8, 4.5, 1.9, 1.6, 0.0, 0.7]]
    cams = [[0.0, 0.0, 640.0, 384.0, 0.9, TRUCK]]  # a full-image box would match anything projected
    fused, _ = run(boxes, [], cams)
    assert (fused[:, F["src"]] == SRC_LIDAR).all() and (fused[:, F["cls"]] == CAR).all()


def test_side_camera_extrinsics_are_honoured():
    """A camera looking left (yaw +90 deg): optical z is base_link +y and image right is base_link +x."""
    side = CameraModel(fx=400, fy=400, cx=320, cy=192, x=0.0, y=1.0, z=1.6, yaw=math.pi / 2)
    box = [3.0, 12.0, 0.8, 4.5, 1.9, 1.6, 0.0, 0.7]
    corners = [(box[0] + dx, box[1] + dy, box[2] + dz) for dx in (-2.25, 2.25) for dy in (-0.95, 0.95)
               for dz in (-0.8, 0.8)]
    u = [side.cx + side.fx * x / (y - side.y) for x, y, _ in corners]
    v = [side.cy + side.fy * -(z - side.z) / (y - side.y) for _, y, z in corners]
    mirrored = [2 * side.cx - max(u), min(v), 2 * side.cx - min(u), max(v), 0.8, CAR]  # wrong if x were flipped
    fused, _ = run([box], [], [mirrored, [min(u), min(v), max(u), max(v), 0.8, TRUCK]], camera=side)
    assert int(fused[0, F["cls"]]) == TRUCK
    front, _ = run([[20.0, 0.0, 0.8, 4.5, 1.9, 1.6, 0.0, 0.7]], [], [[0.0, 0.0, 640.0, 384.0, 0.9, TRUCK]],
                   camera=side)
    assert int(front[0, F["src"]]) == SRC_LIDAR  # ahead of the car is outside a side camera's view


def test_radar_cluster_joins_its_box_and_a_lone_cluster_stays_an_object():
    boxes = [[20.0, 0.0, 0.8, 4.5, 1.9, 1.6, 0.0, 0.6], [40.0, 5.0, 1.7, 12.0, 2.5, 3.4, 0.0, 0.6]]
    radar = [[20.8, 0.3, -4.0, -4.0, 0.0, 12.0, 5.0, 0.8],   # on the car: Doppler -4 m/s
             [43.0, 5.2, 2.0, 2.0, 0.0, 15.0, 5.0, 0.8],     # on the truck
             [38.0, 4.8, 2.0, 2.0, 0.0, 10.0, 3.0, 0.5],     # the truck's second cluster: absorbed
             [60.0, -8.0, 6.0, 6.0, 0.0, 8.0, 3.0, 0.7]]     # nothing from the LiDAR there
    fused, ex = run(boxes, radar, [])
    assert fused.shape[0] == 3
    car = row_at(fused, 20.0, 0.0)
    assert car[F["has_vr"]] == 1 and car[F["vr"]] == -4.0 and int(car[F["src"]]) == SRC_LIDAR + SRC_RADAR
    lone = row_at(fused, 60.0, -8.0)
    assert int(lone[F["src"]]) == SRC_RADAR and lone[F["vr"]] == 6.0 and lone[F["score"]] < 0.7
    truck = row_at(fused, 40.0, 5.0)
    assert int(truck[F["cls"]]) == TRUCK and truck[F["vr"]] == 2.0
    plan = ex.pools[PoolKind.ACTIVATIONS].plan
    assert plan.total_bytes >= plan.lower_bound > 0


def test_camera_model_adopts_the_sim_rig_extrinsics():
    rig = pytest.importorskip("rt_runtime.sim.rig")
    sim_cam = rig.CameraModel()
    cam = CameraModel.like(sim_cam)
    rot, trans = cam.base_to_optical()
    assert np.allclose(np.array(rot), sim_cam.rotation_optical.T, atol=1e-9)   # base_link -> optical
    assert np.allclose(trans, -np.array(rot) @ sim_cam.mount.translation, atol=1e-9)
    assert (cam.fx, cam.cy, cam.width) == (sim_cam.fx, sim_cam.cy, sim_cam.width)


def test_radar_gate_follows_the_box_outline_not_a_circle():
    """Static clutter 1.4 m beside a 12 m truck lies well inside a circle of half its diagonal: it must
    not lend the truck its Doppler, and stays a radar object of its own; a cluster on the truck joins."""
    truck = [[30.0, 0.0, 1.7, 12.0, 2.5, 3.4, 0.0, 0.6]]
    beside = [34.0, 2.65, -25.0, -25.0, 0.0, 5.0, 2.0, 0.6]
    on = [35.5, 0.4, -3.0, -3.0, 0.0, 18.0, 4.0, 0.8]
    fused, _ = run(truck, [beside], [])
    row = row_at(fused, 30.0, 0.0)
    assert fused.shape[0] == 2 and row[F["has_vr"]] == 0 and int(row[F["src"]]) == SRC_LIDAR
    assert int(row_at(fused, 34.0, 2.65)[F["src"]]) == SRC_RADAR
    fused, _ = run(truck, [on], [])
    row = row_at(fused, 30.0, 0.0)
    assert fused.shape[0] == 1 and row[F["vr"]] == -3.0
