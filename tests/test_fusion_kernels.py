"""Fusion and tracking kernels (exec/kernel.py): the fusion_tracking graph's compiled bodies write what the
Python bodies write, bit for bit, frame by frame through a scene with radar, camera, births and deaths."""
from __future__ import annotations

import math

import pytest
import torch

from pipelines import fusion, schema, tracking, tracking_kernels as kernels
from pipelines.fusion import SRC_CAMERA, SRC_RADAR, FusionParams
from pipelines.camera_model import CameraModel
from pipelines.geometry import hungarian_assign
from pipelines.tracking import TrackerParams, build_fusion_tracking_graph, initial_tracker_state
from pipelines.tracking_kernels import Knobs
from rt_runtime import Graph
from rt_runtime.exec import Kernel
from rt_runtime.exec import GraphExecutor

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CAM = CameraModel(fx=400.0, fy=400.0, cx=319.5, cy=191.5, width=640, height=384, x=1.6, z=1.45, pitch=0.0349066)
FP, TP = FusionParams(camera=CAM), TrackerParams(radar_xy=(3.8, 0.0))
# Map frame: (x, y, vx, vy, l, w, seen by: "l"idar, "r"adar, "c"amera, frames without it)
OBJECTS = [(30.0, 0.0, 14.0, 0.0, 4.5, 1.9, "lrc", ()),            # car ahead, all three sensors
           (50.0, -3.5, 8.0, 0.0, 12.0, 2.5, "lrc", ()),           # truck: a second cluster is absorbed
           (25.0, 6.0, 0.0, -1.2, 0.6, 0.6, "l", ()),              # pedestrian the camera misses
           (-20.0, 3.5, 20.0, 0.0, 4.5, 1.9, "lr", range(8, 14)),  # car behind, out of sight for a while
           (80.0, 0.0, 5.0, 0.0, 4.0, 1.8, "r", ()),               # radar only, moving: a radar-only track
           (40.0, 9.0, 0.0, 0.0, 0.5, 0.5, "r", ())]               # radar only, still: ignored
FRAMES, DT = 24, 0.1
SWEEP_AGE = 0.12   # s: the odometry a fusion job reads is this much newer than the sweep its boxes come from


def to_base(x: float, y: float, ego: tuple[float, float, float]) -> tuple[float, float]:
    c, s = math.cos(ego[2]), math.sin(ego[2])
    dx, dy = x - ego[0], y - ego[1]
    return c * dx + s * dy, -s * dx + c * dy


def frame(k: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """The fusion inputs and odometry of frame ``k``: noisy boxes and clusters, camera boxes by projection."""
    t = k * DT
    ego = (10.0 * t, 0.2 * t, 0.02 * t)
    boxes, radar, labels = [], [], []
    for x0, y0, vx, vy, l, w, seen, gone in OBJECTS:
        if k in gone:
            continue
        bx, by = to_base(x0 + vx * t, y0 + vy * t, ego)
        jit = (0.1 * torch.randn(3, generator=g)).tolist()
        if "l" in seen:
            boxes.append([bx + jit[0], by + jit[1], 0.8, l, w, 1.6, 0.05 * jit[2] - ego[2], 0.5 + 0.4 * (l > 1)])
            labels.append((1 if l > 10 else 0) if "c" in seen else None)
        if "r" in seen:
            rng = math.hypot(bx - 3.8, by)
            u = ((bx - 3.8) / rng, by / rng)
            vxb, vyb = to_base(vx, vy, (0.0, 0.0, ego[2]))
            vr = (vxb - 10.0) * u[0] + vyb * u[1]
            radar.append([bx + jit[1], by - jit[0], vr + jit[2], 0.0, 0.0, 5.0, 4.0, 0.8])
            if l > 10:
                radar.append([bx + 4.0, by + 0.3, vr, 0.0, 0.0, 5.0, 3.0, 0.7])
    b = torch.zeros(schema.MAX_BOXES, 8)
    b[:len(boxes)] = torch.tensor(boxes)
    r = torch.zeros(schema.MAX_RADAR_OBJECTS, 8)
    r[:len(radar)] = torch.tensor(radar)
    rot, trans = (torch.tensor(v, dtype=torch.float32) for v in CAM.base_to_optical())
    uv, visible = fusion.project_boxes(b[:len(boxes)], rot, trans, CAM.fx, CAM.fy, CAM.cx, CAM.cy, CAM.width,
                                       CAM.height, 0.5)   # reads x y z l w h yaw: a box row's columns too
    cams = [uv[i].tolist() + [0.8, lab] for i, lab in enumerate(labels) if lab is not None and visible[i]]
    cams.append([600.0, 10.0, 630.0, 40.0, 0.9, 1.0])   # a detection nothing projects onto
    c = torch.zeros(schema.MAX_CAMERA_BOXES, 6)
    jitter = torch.cat((torch.randn(len(cams), 4, generator=g), torch.zeros(len(cams), 2)), 1)   # pixels only
    c[:len(cams)] = torch.tensor(cams) + jitter
    n = lambda rows: torch.tensor([len(rows)], dtype=torch.int32)  # noqa: E731
    return {"boxes": b, "box_count": n(boxes), "radar_objects": r, "radar_object_count": n(radar),
            "camera_boxes": c, "camera_box_count": n(cams),
            "odom": torch.tensor([*ego, 10.0, 0.02, t], dtype=torch.float64),
            **tracking.stamps(round(t * 1e9), round((t - SWEEP_AGE) * 1e9), round((t - 0.01) * 1e9))}


def fresh(out: dict[str, torch.Tensor], *names: str) -> list[torch.Tensor]:
    """Empty tensors shaped like the graph's ``names``, for a Python body to write into."""
    return [torch.empty_like(out[n]) for n in names]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.numpy().tobytes() == b.numpy().tobytes()


def ids(tracks: torch.Tensor, count: torch.Tensor) -> set[int]:
    return {int(v) for v in tracks[: int(count), 0]}


def test_fusion_tracking_kernels_write_what_their_python_bodies_write() -> None:
    g0 = build_fusion_tracking_graph(camera=CAM, tracker=TP)
    # every tensor an op writes as an output: none is overwritten by a later op before the comparison
    ex = GraphExecutor(Graph(g0.name, g0.ops, g0.inputs, [s.name for o in g0.ops for s in o.outputs]))
    rot, trans = (torch.tensor(v, dtype=torch.float32) for v in CAM.base_to_optical())
    radar_xy, k = torch.tensor(TP.radar_xy, dtype=torch.float64), Knobs.of(TP)
    g = torch.Generator().manual_seed(3)
    state = initial_tracker_state()
    seen = {"radar": 0, "camera": 0, "confirmed": 0, "deaths": 0, "births": 0}
    for i in range(FRAMES):
        job = {**frame(i, g), **state}
        out = {n: v.clone() for n, v in ex.run(job).items()}
        assert isinstance(kernels.update, Kernel) and isinstance(fusion._fuse_camera, Kernel)
        want: dict[str, torch.Tensor] = dict(zip(("lr_objects", "lr_count"), fresh(out, "lr_objects", "lr_count")))
        fusion._fuse_lidar_radar.py(job["boxes"], job["box_count"], job["radar_objects"], job["radar_object_count"],
                                    *want.values(), FP.radar_gate_m, FP.min_radar_score, FP.radar_only_score,
                                    *FP.radar_only_dims)
        fu = fresh(out, "fused", "fused_count")
        fusion._fuse_camera.py(out["lr_objects"], out["lr_count"], job["camera_boxes"], job["camera_box_count"],
                               *fu, rot, trans, CAM.fx, CAM.fy, CAM.cx, CAM.cy, CAM.width, CAM.height,
                               FP.near_m, FP.iou_gate, FP.camera_miss_scale)
        pose = fresh(out, "ego_at_sweep", "track_now", "radar_lag")
        stamp = {n: int(job[n + ".meta"][4]) for n in ("odom", "boxes", "radar_objects")}
        kernels.sweep_pose.py(job["odom"], True, True, (stamp["boxes"] - stamp["odom"]) * 1e-9, stamp["boxes"] * 1e-9,
                              (stamp["radar_objects"] - stamp["boxes"]) * 1e-9, TP.sweep_offset, TP.max_dt,
                              *pose)
        det = fresh(out, "det_z", "det_R", "det_attr")
        kernels.to_map.py(out["fused"], out["fused_count"], out["ego_at_sweep"], out["radar_lag"], radar_xy, k, *det)
        pred = fresh(out, "pred_x", "pred_P")
        kernels.predict.py(job["tracks_in"], job["track_cov_in"], out["ego_at_sweep"], job["last_t_in"], k, *pred)
        assoc_in = (out["pred_x"], out["pred_P"], out["det_z"], out["det_R"], job["track_count_in"],
                    out["fused_count"], out["det_attr"])
        hungarian = hungarian_assign(kernels.gated_cost(*assoc_in, k))
        greedy_py, greedy = fresh(out, "assignment", "assignment")
        kernels.associate_greedy.py(*assoc_in, k, greedy_py)
        kernels.associate_greedy(*assoc_in, k, greedy)
        names = ("tracks", "track_cov", "track_hits", "track_count", "next_id", "last_t", "confirmed_count")
        upd = fresh(out, *names)
        kernels.update.py(job["tracks_in"], job["track_hits_in"], job["track_count_in"], job["next_id_in"],
                            job["odom"], out["ego_at_sweep"], out["track_now"], out["pred_x"], out["pred_P"], out["det_z"], out["det_R"], out["det_attr"],
                            out["fused_count"], out["assignment"], k, *upd)
        want.update(zip(("fused", "fused_count", "ego_at_sweep", "track_now", "radar_lag", "det_z", "det_R", "det_attr", "pred_x",
                         "pred_P"), fu + pose + det + pred))
        want.update(zip(names, upd), assignment=hungarian)
        assert [n for n in out if not same_bits(want[n], out[n])] == [], f"frame {i}"
        assert same_bits(greedy_py, greedy), f"frame {i}"

        src = out["fused"][: int(out["fused_count"]), 11].long()
        before, after = ids(job["tracks_in"], job["track_count_in"]), ids(out["tracks"], out["track_count"])
        seen["radar"] += int(((src & SRC_RADAR) > 0).sum())
        seen["camera"] += int(((src & SRC_CAMERA) > 0).sum())
        seen["confirmed"] += int(out["confirmed_count"])
        seen["deaths"] += len(before - after)
        seen["births"] += len(after - before)
        state = {dst: out[name].clone() for name, dst in tracking.STATE_FEEDBACK.items()}
    # every branch was compared: Doppler matches, camera hits, confirmed tracks, births and deaths
    assert all(v > 0 for v in seen.values()), seen
