"""Object-level fusion of LiDAR boxes, radar clusters and camera boxes, as an rt_runtime graph.

Two tensorized ops (whole batches, no per-object Python loops; on CUDA no host reads of counts, while on
the CPU they compute on the counted rows only, ``geometry.live_rows``):

1. ``fuse_lidar_radar`` (base_link): every valid LiDAR box is an object. Radar clusters are matched
   to boxes by centre distance, gated per box at ``radar_gate_m`` around its outline (in the box's
   frame), with greedy-by-cost (mutual nearest rounds, ``geometry.greedy_assign``). A matched box
   takes the cluster's range rate (Doppler) and a fused score ``1 - (1 - s_lidar)(1 - s_radar / 2)``.
   A cluster that falls in some box's gate but lost the match (a second cluster on a long truck) is
   absorbed; any other cluster becomes a radar-only object of default size and discounted score.
   A class prior comes from the box size (length >= 7 m truck, >= 3 m car, >= 1.2 m cyclist,
   else pedestrian).
2. ``fuse_camera``: each object's 3D box is projected into the image — its 8 corners through the
   extrinsics (base_link -> optical frame, z forward) and the pinhole ``u = fx X/Z + cx``,
   ``v = fy Y/Z + cy`` — to the 2D box around them, clipped to the image; boxes with a corner
   nearer than ``near_m`` are not projected. With lens distortion (CameraInfo's ``plumb_bob``,
   ``rational_polynomial`` or ``equidistant`` ``d``, or the config's) each corner goes through the lens
   first (``camera_model.distort_normalized``): the detector sees the unrectified image. Projected and
   detected 2D boxes are matched by IoU (cost 1 - IoU, gate ``iou_gate``, greedy). The camera confirms: a matched object takes the
   camera's class and score ``1 - (1 - s)(1 - s_cam)``; an object in view that the camera missed
   (while the camera did report) is discounted by ``camera_miss_scale``.

Output: ``fused`` (MAX_FUSED, FUSED_COLS) in base_link, compacted, plus ``fused_count``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional

import torch
from torch import Tensor

from rt_runtime import Graph, Op
from rt_runtime.exec import kernel
from pipelines import schema
from pipelines.camera_model import CameraModel, distort_normalized
from pipelines.geometry import box_corners, compact, greedy_assign, live_rows, on_device, valid_mask

F = {c: i for i, c in enumerate(schema.FUSED_COLS)}   # for readers of ``fused`` (the kernels unpack rows)
SRC_LIDAR, SRC_RADAR, SRC_CAMERA = 1, 2, 4
CAR, TRUCK, CYCLIST, PEDESTRIAN = (schema.CLASSES.index(c) for c in ("car", "truck", "cyclist", "pedestrian"))


@dataclass(frozen=True)
class FusionParams:
    """Gates and score rules of the fusion (metres, pixels-free IoU, unit-less scores)."""

    radar_gate_m: float = 1.0
    min_radar_score: float = 0.1
    radar_only_score: float = 0.6                     # radar-only objects are less certain
    radar_only_dims: tuple[float, float, float] = (4.0, 1.8, 1.5)
    iou_gate: float = 0.3
    near_m: float = 0.5
    camera_miss_scale: float = 0.85
    camera: CameraModel = field(default_factory=CameraModel)


def class_prior(l: Tensor, w: Tensor) -> Tensor:
    """A class index (schema.CLASSES) guessed from a box's footprint."""
    car, truck, cyclist, pedestrian = 0, 1, 2, 3   # schema.CLASSES (pinned below): TorchScript reads no module ints
    small = torch.where(w < 1.2, cyclist, car)
    return torch.where(l >= 7.0, truck, torch.where(l >= 3.0, car, torch.where(l >= 1.2, small, pedestrian))).float()


# The kernels unpack rows column by column in the schema's order (TorchScript reads no dicts): a
# reordered schema must stop the import rather than shuffle columns silently.
assert (CAR, TRUCK, CYCLIST, PEDESTRIAN) == (0, 1, 2, 3)
assert schema.BOX_COLS == ("x", "y", "z", "l", "w", "h", "yaw", "score")
assert schema.RADAR_OBJ_COLS == ("x", "y", "vr", "vx", "vy", "rcs", "n", "score")
assert schema.CAM_COLS == ("u1", "v1", "u2", "v2", "score", "cls")
assert schema.FUSED_COLS == ("x", "y", "z", "l", "w", "h", "yaw", "score", "cls", "vr", "has_vr", "src")
assert (SRC_LIDAR, SRC_RADAR, SRC_CAMERA) == (1, 2, 4)


@kernel
def _fuse_lidar_radar(boxes: Tensor, box_count: Tensor, radar: Tensor, radar_count: Tensor, lr_objects: Tensor,
                      lr_count: Tensor, gate_m: float, min_radar_score: float, radar_only_score: float,
                      only_l: float, only_w: float, only_h: float) -> None:
    """``fuse_lidar_radar``'s body: LiDAR boxes take matched clusters' Doppler; lone clusters become objects."""
    # Rows past the counts take no part: only the leading nb boxes and nr clusters are computed
    # (all rows on CUDA: ``live_rows``); the output rows past them are compaction's zeros.
    nb, nr = live_rows(box_count, boxes.shape[0]), live_rows(radar_count, radar.shape[0])
    bx, by, bz, bl, bw, bh, byaw, s_l = boxes[:nb].unbind(1)
    rx, ry, r_vr, _rvx, _rvy, _rcs, _rn, r_score = radar[:nr].unbind(1)
    lb = valid_mask(box_count, nb)
    rb = valid_mask(radar_count, nr) & (r_score >= min_radar_score)
    # Cluster minus box centre as (B, R) planes of x and y (contiguous: no strided reads).
    dx, dy = rx[None, :] - bx[:, None], ry[None, :] - by[:, None]
    dist = torch.linalg.vector_norm(torch.stack([dx, dy], -1), 2, [-1])   # what Tensor.norm(dim=-1) runs
    # Gate in the box's frame: within gate_m of its outline. A circle round a long truck
    # takes in the roadside beside it, whose static clutter would lend the truck its Doppler.
    c, s = torch.cos(byaw[:, None]), torch.sin(byaw[:, None])
    out_u = (dx * c + dy * s).abs() - 0.5 * bl[:, None]
    out_v = (dy * c - dx * s).abs() - 0.5 * bw[:, None]
    inside = lb[:, None] & rb[None, :] & (out_u < gate_m) & (out_v < gate_m)
    b2r, _ = greedy_assign(torch.where(inside, dist, math.inf))
    matched = b2r >= 0
    r = radar[b2r.clamp(min=0)]   # the whole buffer: row 0 exists even when no cluster counts
    s_r, m_vr = r[:, 7], r[:, 2]   # the matched cluster's score and vr
    lidar_rows = torch.stack([
        bx, by, bz, bl, bw, bh, byaw,
        torch.where(matched, 1 - (1 - s_l) * (1 - 0.5 * s_r), s_l),
        class_prior(bl, bw),
        torch.where(matched, m_vr, 0.0),
        matched.float(),
        1 + 2 * matched.float()], dim=1)   # SRC_LIDAR + SRC_RADAR * matched
    # Radar-only: valid clusters no LiDAR box claims or encloses (a truck's second cluster is absorbed).
    alone = rb & ~inside.any(dim=0)
    one = torch.ones_like(rx)
    radar_rows = torch.stack([
        rx, ry, one * (only_h / 2), one * only_l, one * only_w, one * only_h, torch.zeros_like(one),
        radar_only_score * r_score, one * 0, r_vr, one, one * 2], dim=1)   # class CAR, src SRC_RADAR
    rows, n = compact(torch.cat([lidar_rows, radar_rows]), torch.cat([lb, alone]))
    lr_objects[:nb + nr] = rows
    lr_objects[nb + nr:] = 0.0
    lr_count.copy_(n.view(1))


def _lidar_radar_op(p: FusionParams, device: str) -> Op:
    boxes_s = on_device(schema.boxes(), device)
    nbox_s = on_device(schema.count("box_count"), device)
    radar_s = on_device(schema.radar_objects(), device)
    nradar_s = on_device(schema.count("radar_object_count"), device)
    obj_s = on_device(schema.fused_objects("lr_objects"), device)
    nobj_s = on_device(schema.count("lr_count"), device)
    knobs = (float(p.radar_gate_m), float(p.min_radar_score), float(p.radar_only_score),
             *(float(d) for d in p.radar_only_dims))

    def fuse(boxes: Tensor, box_count: Tensor, radar: Tensor, radar_count: Tensor,
             lr_objects: Tensor, lr_count: Tensor) -> None:
        _fuse_lidar_radar(boxes, box_count, radar, radar_count, lr_objects, lr_count, *knobs)

    return Op("fuse_lidar_radar", fuse, (boxes_s, nbox_s, radar_s, nradar_s), (obj_s, nobj_s),
              capturable=device != "cpu", cost_us=400.0)


def project_boxes(objects: Tensor, rot: Tensor, trans: Tensor, fx: float, fy: float, cx: float, cy: float,
                  width: int, height: int, near_m: float, rows: int = -1, lens: int = 0,
                  coeffs: Optional[List[float]] = None, reach: float = 0.0) -> tuple[Tensor, Tensor]:
    """Image boxes (N, 4: u1, v1, u2, v2) of fused objects and whether each is (partly) in view.

    ``rot``, ``trans``: base_link -> optical frame; fx .. height: the pinhole (``CameraModel``);
    ``rows``: only the leading rows' boxes are wanted (N = rows; -1: all); ``lens``, ``coeffs``, ``reach``:
    the lens distortion (``CameraModel.distortion``, ``.distortion_reach``) applied to each corner, so the box
    lands where the camera's own (unrectified) image shows the object; 0: a pinhole.
    """
    n_all = objects.shape[0]
    n = n_all if rows < 0 else rows
    corners = box_corners(objects[:n, 0:3], objects[:n, 3:6], objects[:n, 6])    # x y z, l w h, yaw
    if n < n_all:
        # The product over the whole buffer's row count (its bits depend on the count, not on other
        # rows' values): zero corners past n, whose images are not returned.
        corners = torch.cat([corners, torch.zeros([n_all - n, 8, 3], dtype=corners.dtype, device=corners.device)])
    opt = (corners @ rot.T)[:n] + trans                                     # (N, 8, 3) optical frame
    z = opt[..., 2]
    in_front = (z > near_m).all(dim=-1)
    zc = z.clamp(min=near_m)
    if lens == 0 or coeffs is None:
        u = fx * opt[..., 0] / zc + cx
        v = fy * opt[..., 1] / zc + cy
    else:   # the corners through the lens, then the box around them
        xd, yd = distort_normalized(opt[..., 0] / zc, opt[..., 1] / zc, lens, coeffs, reach)
        u = fx * xd + cx
        v = fy * yd + cy
    box = torch.stack([u.amin(-1).clamp(0, width), v.amin(-1).clamp(0, height),
                       u.amax(-1).clamp(0, width), v.amax(-1).clamp(0, height)], dim=1)
    visible = in_front & (box[:, 2] > box[:, 0]) & (box[:, 3] > box[:, 1])
    return box, visible


def _area(x: Tensor) -> Tensor:
    return (x[:, 2:] - x[:, :2]).clamp(min=0).prod(-1)


def iou(a: Tensor, b: Tensor) -> Tensor:
    """Pairwise IoU (N, M) of axis-aligned boxes (u1, v1, u2, v2)."""
    lo = torch.maximum(a[:, None, :2], b[None, :, :2])
    hi = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (hi - lo).clamp(min=0).prod(-1)
    return inter / (_area(a)[:, None] + _area(b)[None, :] - inter).clamp(min=1e-6)


@kernel
def _fuse_camera(objects: Tensor, count: Tensor, cam_boxes: Tensor, cam_count: Tensor, fused: Tensor,
                 fused_count: Tensor, rot: Tensor, trans: Tensor, fx: float, fy: float, cx: float, cy: float,
                 width: int, height: int, near_m: float, iou_gate: float, miss_scale: float, lens: int = 0,
                 coeffs: Optional[List[float]] = None, reach: float = 0.0) -> None:
    """``fuse_camera``'s body: projected boxes matched to camera boxes by IoU confirm or discount objects."""
    score, cls, src = 7, 8, 11   # FUSED_COLS
    # Only the leading no objects and nc camera boxes are computed (all rows on CUDA: ``live_rows``):
    # rows past the counts take no part.
    no, nc = live_rows(count, objects.shape[0]), live_rows(cam_count, cam_boxes.shape[0])
    box, visible = project_boxes(objects, rot, trans, fx, fy, cx, cy, width, height, near_m, no, lens, coeffs, reach)
    valid = valid_mask(count, no)
    cvalid = valid_mask(cam_count, nc)
    overlap = iou(box, cam_boxes[:nc, :4])
    ok = (valid & visible)[:, None] & cvalid[None, :] & (overlap >= iou_gate)
    o2c, _ = greedy_assign(torch.where(ok, 1.0 - overlap, math.inf))
    hit = o2c >= 0
    c = cam_boxes[o2c.clamp(min=0)]   # the whole buffer: row 0 exists even when no box counts
    s = objects[:no, score]
    missed = valid & visible & ~hit & (cam_count.reshape(()) > 0)
    fused.copy_(objects)
    fused[:no, score] = torch.where(hit, 1 - (1 - s) * (1 - c[:, 4]), torch.where(missed, s * miss_scale, s))
    fused[:no, cls] = torch.where(hit, c[:, 5], objects[:no, cls])   # CAM_COLS: score 4, cls 5
    fused[:no, src] += 4 * hit.float()                                # SRC_CAMERA
    fused[no:, src] += 0.0   # as the whole-buffer sum did: a -0.0 past the count turns +0.0
    fused_count.copy_(count)


def _camera_op(p: FusionParams, device: str) -> Op:
    obj_s = on_device(schema.fused_objects("lr_objects"), device)
    nobj_s = on_device(schema.count("lr_count"), device)
    cam_s = on_device(schema.camera_boxes(), device)
    ncam_s = on_device(schema.count("camera_box_count"), device)
    fused_s = on_device(schema.fused_objects(), device)
    nfused_s = on_device(schema.count("fused_count"), device)
    cam = CameraModel.like(p.camera)
    r, t = cam.base_to_optical()
    dev = torch.device(device)
    rot = torch.tensor(r, dtype=torch.float32, device=dev)
    trans = torch.tensor(t, dtype=torch.float32, device=dev)
    lens, coeffs = cam.distortion()
    knobs = (float(cam.fx), float(cam.fy), float(cam.cx), float(cam.cy), int(cam.width), int(cam.height),
             float(p.near_m), float(p.iou_gate), float(p.camera_miss_scale), lens, coeffs, cam.distortion_reach())

    def fuse(objects: Tensor, count: Tensor, cam_boxes: Tensor, cam_count: Tensor,
             fused: Tensor, fused_count: Tensor) -> None:
        _fuse_camera(objects, count, cam_boxes, cam_count, fused, fused_count, rot, trans, *knobs)

    return Op("fuse_camera", fuse, (obj_s, nobj_s, cam_s, ncam_s), (fused_s, nfused_s),
              capturable=device != "cpu", cost_us=400.0)


def fusion_ops(device: str = "cpu", params: FusionParams | None = None) -> list[Op]:
    """The fusion's ops, for graphs that chain more after them (see ``tracking``)."""
    p = params or FusionParams()
    return [_lidar_radar_op(p, device), _camera_op(p, device)]


def fusion_inputs(device: str = "cpu") -> list:
    """The fusion graph's input specs: LiDAR boxes, radar clusters, camera boxes, each with a count."""
    return [on_device(s, device) for s in (
        schema.boxes(), schema.count("box_count"), schema.radar_objects(), schema.count("radar_object_count"),
        schema.camera_boxes(), schema.count("camera_box_count"))]


def build_fusion_graph(device: str = "cpu", camera: object | None = None, **params: object) -> Graph:
    """Fusion graph: boxes, radar_objects, camera_boxes (+ counts) -> ``fused`` + ``fused_count``.

    ``camera`` is any object with fx, fy, cx, cy (and width, height, x, y, z, roll, pitch, yaw);
    other keyword arguments are ``FusionParams`` fields.
    """
    if camera is not None:
        params["camera"] = CameraModel.like(camera)
    p = FusionParams(**params)  # type: ignore[arg-type]
    return Graph("fusion", fusion_ops(device, p), inputs=fusion_inputs(device), outputs=["fused", "fused_count"])
