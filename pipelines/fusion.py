"""Object-level fusion of LiDAR boxes, radar clusters and camera boxes, as an rt_runtime graph.

Two tensorized ops (whole batches, no per-object Python loops, no host reads of counts):

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
   nearer than ``near_m`` are not projected. Projected and detected 2D boxes are matched by IoU
   (cost 1 - IoU, gate ``iou_gate``, greedy). The camera confirms: a matched object takes the
   camera's class and score ``1 - (1 - s)(1 - s_cam)``; an object in view that the camera missed
   (while the camera did report) is discounted by ``camera_miss_scale``.

Output: ``fused`` (MAX_FUSED, FUSED_COLS) in base_link, compacted, plus ``fused_count``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from rt_runtime import Graph, Op
from pipelines import schema
from pipelines.geometry import CameraModel, box_corners, compact, greedy_assign, on_device, valid_mask

B = {c: i for i, c in enumerate(schema.BOX_COLS)}
RO = {c: i for i, c in enumerate(schema.RADAR_OBJ_COLS)}
CAM = {c: i for i, c in enumerate(schema.CAM_COLS)}
F = {c: i for i, c in enumerate(schema.FUSED_COLS)}
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


def class_prior(l: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A class index (schema.CLASSES) guessed from a box's footprint."""
    small = torch.where(w < 1.2, CYCLIST, CAR)
    return torch.where(l >= 7.0, TRUCK, torch.where(l >= 3.0, CAR, torch.where(l >= 1.2, small, PEDESTRIAN))).float()


def _lidar_radar_op(p: FusionParams, device: str) -> Op:
    boxes_s = on_device(schema.boxes(), device)
    nbox_s = on_device(schema.count("box_count"), device)
    radar_s = on_device(schema.radar_objects(), device)
    nradar_s = on_device(schema.count("radar_object_count"), device)
    obj_s = on_device(schema.fused_objects("lr_objects"), device)
    nobj_s = on_device(schema.count("lr_count"), device)
    h_def = p.radar_only_dims

    def fuse(boxes: torch.Tensor, box_count: torch.Tensor, radar: torch.Tensor, radar_count: torch.Tensor,
             lr_objects: torch.Tensor, lr_count: torch.Tensor) -> None:
        nb, nr = boxes.shape[0], radar.shape[0]
        lb = valid_mask(box_count, nb)
        rb = valid_mask(radar_count, nr) & (radar[:, RO["score"]] >= p.min_radar_score)
        rel = radar[None, :, :2] - boxes[:, None, :2]
        dist = rel.norm(dim=-1)
        # Gate in the box's frame: within radar_gate_m of its outline. A circle round a long truck
        # takes in the roadside beside it, whose static clutter would lend the truck its Doppler.
        c, s = torch.cos(boxes[:, B["yaw"], None]), torch.sin(boxes[:, B["yaw"], None])
        out_u = (rel[..., 0] * c + rel[..., 1] * s).abs() - 0.5 * boxes[:, B["l"], None]
        out_v = (rel[..., 1] * c - rel[..., 0] * s).abs() - 0.5 * boxes[:, B["w"], None]
        inside = lb[:, None] & rb[None, :] & (out_u < p.radar_gate_m) & (out_v < p.radar_gate_m)
        b2r, _ = greedy_assign(torch.where(inside, dist, math.inf))
        matched = b2r >= 0
        r = radar[b2r.clamp(min=0)]
        s_l, s_r = boxes[:, B["score"]], r[:, RO["score"]]
        lidar_rows = torch.stack((
            *boxes[:, :7].unbind(1),
            torch.where(matched, 1 - (1 - s_l) * (1 - 0.5 * s_r), s_l),
            class_prior(boxes[:, B["l"]], boxes[:, B["w"]]),
            torch.where(matched, r[:, RO["vr"]], 0.0),
            matched.float(),
            SRC_LIDAR + SRC_RADAR * matched.float()), dim=1)
        # Radar-only: valid clusters no LiDAR box claims or encloses (a truck's second cluster is absorbed).
        alone = rb & ~inside.any(dim=0)
        one = torch.ones_like(radar[:, 0])
        radar_rows = torch.stack((
            radar[:, RO["x"]], radar[:, RO["y"]], one * (h_def[2] / 2), one * h_def[0], one * h_def[1],
            one * h_def[2], torch.zeros_like(one), p.radar_only_score * radar[:, RO["score"]],
            one * CAR, radar[:, RO["vr"]], one, one * SRC_RADAR), dim=1)
        rows, n = compact(torch.cat((lidar_rows, radar_rows)), torch.cat((lb, alone)))
        lr_objects.copy_(rows)
        lr_count.copy_(n.view(1))

    return Op("fuse_lidar_radar", fuse, (boxes_s, nbox_s, radar_s, nradar_s), (obj_s, nobj_s),
              capturable=device.startswith("cuda"), cost_us=400.0)


def project_boxes(objects: torch.Tensor, rot: torch.Tensor, trans: torch.Tensor, cam: CameraModel,
                  near_m: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Image boxes (N, 4: u1, v1, u2, v2) of fused objects and whether each is (partly) in view."""
    corners = box_corners(objects[:, F["x"]:F["z"] + 1], objects[:, F["l"]:F["h"] + 1], objects[:, F["yaw"]])
    opt = corners @ rot.T + trans                                            # (N, 8, 3) optical frame
    z = opt[..., 2]
    in_front = (z > near_m).all(dim=-1)
    zc = z.clamp(min=near_m)
    u = cam.fx * opt[..., 0] / zc + cam.cx
    v = cam.fy * opt[..., 1] / zc + cam.cy
    box = torch.stack((u.amin(-1).clamp(0, cam.width), v.amin(-1).clamp(0, cam.height),
                       u.amax(-1).clamp(0, cam.width), v.amax(-1).clamp(0, cam.height)), dim=1)
    visible = in_front & (box[:, 2] > box[:, 0]) & (box[:, 3] > box[:, 1])
    return box, visible


def iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU (N, M) of axis-aligned boxes (u1, v1, u2, v2)."""
    lo = torch.maximum(a[:, None, :2], b[None, :, :2])
    hi = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (hi - lo).clamp(min=0).prod(-1)
    area = lambda x: (x[:, 2:] - x[:, :2]).clamp(min=0).prod(-1)  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter).clamp(min=1e-6)


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

    def fuse(objects: torch.Tensor, count: torch.Tensor, cam_boxes: torch.Tensor, cam_count: torch.Tensor,
             fused: torch.Tensor, fused_count: torch.Tensor) -> None:
        valid = valid_mask(count, objects.shape[0])
        cvalid = valid_mask(cam_count, cam_boxes.shape[0])
        box, visible = project_boxes(objects, rot, trans, cam, p.near_m)
        overlap = iou(box, cam_boxes[:, :4])
        ok = (valid & visible)[:, None] & cvalid[None, :] & (overlap >= p.iou_gate)
        o2c, _ = greedy_assign(torch.where(ok, 1.0 - overlap, math.inf))
        hit = o2c >= 0
        c = cam_boxes[o2c.clamp(min=0)]
        s = objects[:, F["score"]]
        missed = valid & visible & ~hit & (cam_count.reshape(()) > 0)
        fused.copy_(objects)
        fused[:, F["score"]] = torch.where(hit, 1 - (1 - s) * (1 - c[:, CAM["score"]]),
                                           torch.where(missed, s * p.camera_miss_scale, s))
        fused[:, F["cls"]] = torch.where(hit, c[:, CAM["cls"]], objects[:, F["cls"]])
        fused[:, F["src"]] += SRC_CAMERA * hit.float()
        fused_count.copy_(count)

    return Op("fuse_camera", fuse, (obj_s, nobj_s, cam_s, ncam_s), (fused_s, nfused_s),
              capturable=device.startswith("cuda"), cost_us=400.0)


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
