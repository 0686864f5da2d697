"""Detection quality: tracked objects, LiDAR boxes and camera boxes against ground truth."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...bag.objects import Objects
from .common import (
    BOX_MARGIN_M,
    GROUND_BAND_M,
    IOU_MIN,
    LOOSE_MATCH_M,
    MATCH_M,
    MIN_HEIGHT_PX,
    MIN_INSIDE,
    MIN_LIDAR_POINTS,
    MIN_VISIBLE,
    RANGE_M,
    STACK_CLASSES,
    EgoPath,
    nearest_frame,
    planar_distances,
    greedy_matches,
    detection_rates,
    match_with_care,
)


# ---- detection: tracked objects --------------------------------------------------------------------
def detection_quality(tracks: list[tuple[int, np.ndarray, np.ndarray]], gt: list[Objects]) -> dict[str, Any]:
    """Precision and recall of published tracks (t_ns, tracks, ego_xy) against ground truth."""
    times = np.array([g.t_ns for g in gt], np.int64)
    tp = fp = fn = 0
    for t_ns, rows, ego in tracks:
        g = nearest_frame(gt, times, t_ns)
        gxy = g.boxes[:, :2] if len(g) else np.zeros((0, 2))
        gxy = gxy[np.hypot(*(gxy - ego).T) <= RANGE_M] if len(gxy) else gxy
        txy = rows[:, 2:4].astype(np.float64)
        txy = txy[np.hypot(*(txy - ego).T) <= RANGE_M] if len(txy) else txy
        m = greedy_matches(planar_distances(txy, gxy), MATCH_M)
        tp, fp, fn = tp + m, fp + len(txy) - m, fn + len(gxy) - m
    return {**detection_rates(tp, fp, fn), "match_m": MATCH_M}


# ---- detection: LiDAR ------------------------------------------------------------------------------
class LidarGeometry:
    """What the evaluation needs of the recording's LiDAR: mount in base_link, spin rate, firing order.

    As ``rt_runtime.sim.rig.LidarModel``: columns fire counter-clockwise starting straight behind
    the sensor, evenly over one turn, and each point is reported in the sensor frame of its firing
    instant (no motion compensation).
    """

    def __init__(self, rate_hz: float = 10.0, mount: Mapping[str, float] | None = None) -> None:
        m = {"x": 1.2, "y": 0.0, "z": 1.9, "roll": 0.0, "pitch": 0.0, "yaw": 0.0, **(mount or {})}
        self.rate_hz = float(rate_hz)
        self.xyz = np.array([m["x"], m["y"], m["z"]], np.float64)
        cr, sr, cp, sp = math.cos(m["roll"]), math.sin(m["roll"]), math.cos(m["pitch"]), math.sin(m["pitch"])
        cy, sy = math.cos(m["yaw"]), math.sin(m["yaw"])
        self.rot = np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                             [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                             [-sp, cp * sr, cp * cr]])  # base_link <- sensor

    def fire_offset_ns(self, base_xy: np.ndarray) -> np.ndarray:
        """When in the sweep (ns after its stamp) the beam points at base_link points (N, 2)."""
        d = np.column_stack([base_xy - self.xyz[:2], np.zeros(len(base_xy))]) @ self.rot  # -> sensor frame
        az = np.arctan2(d[:, 1], d[:, 0])
        return np.round(np.mod(az + math.pi, 2 * math.pi) / (2 * math.pi) / self.rate_hz * 1e9).astype(np.int64)


def lidar_view(points: np.ndarray | None, sweep_ns: int, gt: list[Objects], times: np.ndarray, ego: EgoPath,
               lidar: LidarGeometry) -> tuple[Objects, np.ndarray]:
    """The objects as one sweep saw them: in base_link at the instant the beam crossed each, and
    how many of the sweep's returns (sensor-frame xyz, (P, 3); None: not counted) fell inside each box."""
    g = nearest_frame(gt, times, sweep_ns)
    n = len(g)
    if not n:
        return g, np.zeros(0, np.int64)
    def in_base(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        xe, ye, we = ego.pose(t)
        gx = g.boxes[:, 0] + g.velocities[:, 0] * (t - g.t_ns) * 1e-9
        gy = g.boxes[:, 1] + g.velocities[:, 1] * (t - g.t_ns) * 1e-9
        c, s = np.cos(we), np.sin(we)
        return (gx - xe) * c + (gy - ye) * s, -(gx - xe) * s + (gy - ye) * c, we

    t = np.full(n, sweep_ns + int(0.5e9 / lidar.rate_hz), np.int64)
    for _ in range(2):  # the crossing instant depends on where the object is then: refine once
        bx, by, _ = in_base(t)
        t = sweep_ns + lidar.fire_offset_ns(np.column_stack([bx, by]))
    bx, by, we = in_base(t)
    boxes = g.boxes.copy()
    boxes[:, 0], boxes[:, 1], boxes[:, 6] = bx, by, g.boxes[:, 6] - we
    seen = Objects(sweep_ns, "base_link", g.ids, g.classes, boxes, g.velocities)
    if points is None:
        return seen, np.full(n, MIN_LIDAR_POINTS, np.int64)
    near = np.hypot(bx, by) <= RANGE_M + 10.0
    counts = np.zeros(n, np.int64)
    if near.any() and len(points):
        p = points @ lidar.rot.T + lidar.xyz                              # base_link, (P, 3)
        b = boxes[near]
        cb, sb = np.cos(b[:, 6]), np.sin(b[:, 6])
        dx, dy = p[:, None, 0] - b[None, :, 0], p[:, None, 1] - b[None, :, 1]
        lx, ly = dx * cb + dy * sb, -dx * sb + dy * cb
        inside = ((np.abs(lx) <= b[:, 3] / 2 + BOX_MARGIN_M) & (np.abs(ly) <= b[:, 4] / 2 + BOX_MARGIN_M)
                  & (p[:, None, 2] >= GROUND_BAND_M) & (p[:, None, 2] <= b[:, 5] + BOX_MARGIN_M))
        counts[near] = inside.sum(0)
    return seen, counts


def lidar_detection_quality(frames: list[tuple[np.ndarray, Objects, np.ndarray]], match_m: float = MATCH_M,
                            loose_m: float | None = LOOSE_MATCH_M) -> dict[str, Any]:
    """Precision and recall of LiDAR boxes: frames of (boxes (N, 8) base_link, objects in base_link
    as the sweep saw them, their return counts). With ``loose_m``, also the figures at that distance
    (``precision_loose``, ``recall_loose``): objects found but placed off their centre."""
    tp = fp = fn = 0
    hits, total = np.zeros(len(STACK_CLASSES) + 1, np.int64), np.zeros(len(STACK_CLASSES) + 1, np.int64)
    for boxes, seen, counts in frames:
        gxy = seen.boxes[:, :2] if len(seen) else np.zeros((0, 2))
        care = (np.hypot(*gxy.T) <= RANGE_M) & (counts >= MIN_LIDAR_POINTS) if len(gxy) else np.zeros(0, bool)
        dxy = boxes[:, :2].astype(np.float64)
        pairs, f, m = match_with_care(planar_distances(dxy, gxy), care, np.hypot(*dxy.T) <= RANGE_M if len(dxy) else
                                      np.zeros(0, bool), match_m)
        tp, fp, fn = tp + len(pairs), fp + f, fn + m
        cls = np.clip(seen.classes.astype(np.int64) - 1, -1, len(STACK_CLASSES) - 1) if len(seen) else seen.classes
        np.add.at(total, cls[care], 1)
        np.add.at(hits, cls[[c for _, c in pairs]], 1)
    by_class = {name: hits[i] / total[i] for i, name in enumerate(STACK_CLASSES) if total[i]}
    out = {**detection_rates(tp, fp, fn), "recall_by_class": {k: float(v) for k, v in by_class.items()},
           "frames": len(frames), "match_m": match_m, "min_points": MIN_LIDAR_POINTS}
    if loose_m is not None:
        loose = lidar_detection_quality(frames, loose_m, None)
        out.update(precision_loose=loose["precision"], recall_loose=loose["recall"], loose_match_m=loose_m)
    return out


# ---- detection: camera -----------------------------------------------------------------------------
class CameraGeometry:
    """Pinhole intrinsics and the mount of the recording's camera (``rt_runtime.sim.rig.CameraModel``)."""

    def __init__(self, width: int = 640, height: int = 384, fx: float = 400.0, fy: float = 400.0, cx: float = 319.5,
                 cy: float = 191.5, mount: Mapping[str, float] | None = None) -> None:
        m = {"x": 1.6, "y": 0.0, "z": 1.45, "roll": 0.0, "pitch": math.radians(2.0), "yaw": 0.0, **(mount or {})}
        self.width, self.height, self.fx, self.fy, self.cx, self.cy = int(width), int(height), fx, fy, cx, cy
        self.xyz = np.array([m["x"], m["y"], m["z"]], np.float64)
        rot = LidarGeometry(mount=m).rot                                  # base_link <- camera link
        self.rot_optical = rot @ np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


def project_boxes(cam: CameraGeometry, ego: tuple[float, float, float], boxes: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Tight image rectangles (M, 4: u1, v1, u2, v2) of map-frame boxes (M, 7), and whether each counts.

    The rules of ``pipelines.train_camera.project`` (the detector's own evaluation): a rectangle
    counts when every corner is in front of the camera, it is at least ``MIN_HEIGHT_PX`` tall, at
    least ``MIN_INSIDE`` of it lies in the frame and ``MIN_VISIBLE`` of it is not covered by nearer
    rectangles (a coarse z-buffer at 1/4 resolution).
    """
    width, height = cam.width, cam.height
    c, s = math.cos(ego[2]), math.sin(ego[2])
    rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    origin = np.array([ego[0], ego[1], 0.0]) + rot @ cam.xyz
    r_cam = (rot @ cam.rot_optical).T
    sx = np.array([1, 1, -1, -1, 1, 1, -1, -1]) / 2
    sy = np.array([1, -1, 1, -1, 1, -1, 1, -1]) / 2
    sz = np.array([1, 1, 1, 1, -1, -1, -1, -1]) / 2
    bx, by, bz, ln, w, h, yaw = (boxes[:, i:i + 1] for i in range(7))
    lx, ly = ln * sx, w * sy
    corners = np.stack([bx + np.cos(yaw) * lx - np.sin(yaw) * ly, by + np.sin(yaw) * lx + np.cos(yaw) * ly,
                        bz + h * sz], -1)
    p = (corners - origin) @ r_cam.T                                   # (M, 8, 3) optical frame
    front = (p[..., 2] > 0.3).all(1)
    z = np.where(front[:, None], p[..., 2], 1.0)
    u, v = cam.fx * p[..., 0] / z + cam.cx, cam.fy * p[..., 1] / z + cam.cy
    full = np.stack([u.min(1), v.min(1), u.max(1), v.max(1)], 1)
    rects = np.stack([full[:, 0].clip(0, width), full[:, 1].clip(0, height),
                      full[:, 2].clip(0, width), full[:, 3].clip(0, height)], 1)
    area = lambda r: np.clip(r[:, 2] - r[:, 0], 0, None) * np.clip(r[:, 3] - r[:, 1], 0, None)  # noqa: E731
    inside = area(rects) / np.maximum(area(full), 1e-6)
    dist = np.where(front, np.linalg.norm(p.mean(1), axis=1), np.inf)
    zbuf = np.full((height // 4, width // 4), np.inf)
    owner = np.full(zbuf.shape, -1)
    q = np.round(rects / 4).astype(int)
    for i in np.argsort(-dist):
        if front[i]:
            zbuf[q[i, 1]:q[i, 3], q[i, 0]:q[i, 2]] = dist[i]
            owner[q[i, 1]:q[i, 3], q[i, 0]:q[i, 2]] = i
    cells = np.maximum((q[:, 2] - q[:, 0]) * (q[:, 3] - q[:, 1]), 1)
    seen = np.bincount(owner[owner >= 0], minlength=len(boxes))[: len(boxes)] / cells
    care = front & (rects[:, 3] - rects[:, 1] >= MIN_HEIGHT_PX) & (inside >= MIN_INSIDE) & (seen >= MIN_VISIBLE)
    return rects.astype(np.float32), care


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of (N, 4) and (M, 4) rectangles u1, v1, u2, v2."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(-1)
    area = lambda r: (r[:, 2] - r[:, 0]) * (r[:, 3] - r[:, 1])  # noqa: E731
    return inter / np.maximum(area(a)[:, None] + area(b)[None, :] - inter, 1e-9)


def match_camera(det: np.ndarray, rects: np.ndarray, cls: np.ndarray, care: np.ndarray) -> tuple[int, int, int, int]:
    """Greedy by score at IoU >= IOU_MIN: (hits, false alarms, misses, hits with the right class).

    A detection whose best counting partner is taken or too far off, but that overlaps a rectangle
    that does not count by IOU_MIN, is neither a hit nor a false alarm.
    """
    ious = box_iou(det[:, :4], rects) if len(det) and len(rects) else np.zeros((len(det), len(rects)))
    taken = np.zeros(len(rects), bool)
    tp = fp = right = 0
    for i in np.argsort(-det[:, 4], kind="stable"):
        cand = np.where(~taken & care, ious[i], 0.0)
        j = int(cand.argmax()) if len(rects) else -1
        if j >= 0 and cand[j] >= IOU_MIN:
            taken[j] = True
            tp += 1
            right += int(det[i, 5] == cls[j])
        elif not (len(rects) and (ious[i][~care] >= IOU_MIN).any()):
            fp += 1
    return tp, fp, int(care.sum()) - tp, right


def camera_detection_quality(frames: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """Precision, recall and class accuracy of camera boxes: frames of (detections (N, 6: CAM_COLS),
    ground-truth rectangles (M, 4), their stack class indices (M,), whether each counts (M,))."""
    tp = fp = fn = right = 0
    for det, rects, cls, care in frames:
        a, b, c, d = match_camera(det, rects, cls, care)
        tp, fp, fn, right = tp + a, fp + b, fn + c, right + d
    return {**detection_rates(tp, fp, fn), "class_accuracy": right / tp if tp else None, "frames": len(frames),
            "iou_min": IOU_MIN}
