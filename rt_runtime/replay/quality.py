"""Open-loop quality of a replay's outputs against the bag's ground truth (docs/QUALITY.md).

Ground truth (``/ground_truth/objects``, map frame, 20 Hz from the simulator) is taken at any
instant from its nearest sample, moved by the objects' velocities over the time in between.
Every figure compares an output with the world at the instant the output describes:

* Detection, tracked objects (``detection``): every published track set is matched to the ground
  truth at its publish time, within ``RANGE_M`` of the ego: greedy nearest pairs by centre
  distance in the map plane, a pair counts when it is within ``MATCH_M``. Precision = TP / (TP +
  FP), recall = TP / (TP + FN), summed over all instants.
* Detection, LiDAR (``detection.lidar``): each published box set is matched against the objects
  as the sweep it came from saw them. The sensor spins (no motion compensation), so each object
  is taken at the instant the beam swept across it and brought into ``base_link`` with the ego's
  odometry at that instant. An object counts (``care``) within ``RANGE_M`` and with at least
  ``MIN_LIDAR_POINTS`` returns above the ground inside its box in that very sweep; a box matched
  to an object that does not count is neither a hit nor a false alarm. Matching: greedy by centre
  distance within ``MATCH_M``, class-agnostic.
* Detection, camera (``detection.camera``): the objects are projected into the image of the frame
  the detector read (ego pose interpolated at the frame's stamp, the recording rig's camera): the
  tight rectangle of the 8 corners. As in ``pipelines/train_camera.py``: rectangles under
  ``MIN_HEIGHT_PX``, less than half inside the frame or less than half visible behind nearer boxes
  (scenery included, when the bag names its scenario) do not count; greedy by score, a detection
  is a hit at IoU >= ``IOU_MIN`` with an unmatched counting rectangle.
* Tracking (``tracking``): CLEAR MOT over the published confirmed tracks, each set compared with
  the ground truth at the track state's own time (the odometry stamp the tracker predicted to,
  ``fusion/last_t``), within ``RANGE_M``; objects not seen in the latest LiDAR sweep do not count
  (a track coasting on one is ignored). Correspondences of the previous instant are kept while
  within ``MATCH_M``, the rest matched greedily; an ID switch is an object matched to another
  track id than its last one. MOTA = 1 - (FN + FP + IDSW) / GT; position RMSE over matched pairs.
* Planning (``planning``): every published trajectory is checked against where the ground-truth
  objects actually were at each of its points' times (the recording's future, so this is open
  loop). A plan's time 0 is the odometry stamp the planning job read (its release is its publish
  time minus its deadline under LET). The ego is three discs of radius ``EGO_RADIUS_M`` along its
  length; an object is its oriented box. The clearance is the smallest disc-to-box distance; a
  trajectory collides when it is below zero within its horizon (points past the end of the
  recording are not judged). Also: the largest jerk along any plan and progress (mean planned
  speed, planned distance over the horizon, and the ratio of planned distance to the distance the
  recorded ego drove over the same time, summed over plans, over the part of each horizon the
  recording covers, at least ``MIN_PROGRESS_S``). Other road users in a recording react to the
  recorded ego, not to the plan, and the plan is judged over its whole horizon though it is
  replanned every cycle: open loop is pessimistic where others would yield or the next plan would
  correct, and blind to what arises only once the ego leaves the recorded path (docs/QUALITY.md).

LiDAR, camera and the track state times need channels that are not egressed: the replay keeps
copies of them for this function (``quality_from_outputs.channels``, see ``replay``) and hands
over the stack configuration, from which the producing task's deadline and input topic come.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..bag import BagError, msg_to_objects, open_bag
from ..bag.objects import Objects

GT_TOPIC = "/ground_truth/objects"
MATCH_M = 2.0
LOOSE_MATCH_M = 4.0       # LiDAR figures at this distance too: found, but the box centre is off
RANGE_M = 50.0
EGO_RADIUS_M = 1.0
EGO_DISC_OFFSETS_M = (-1.4, 0.0, 1.4)
GT_SLACK_NS = 50_000_000
MIN_PROGRESS_S = 1.0      # a plan's progress is compared with the recording over at least this much
IOU_MIN = 0.5
MIN_LIDAR_POINTS = 5      # returns inside a box (above the ground) for an object to count for LiDAR
GROUND_BAND_M = 0.3       # returns lower than this above the ground are ground, not the object
BOX_MARGIN_M = 0.2        # slack around a box when counting its returns
# Camera "don't care" rules, shared with the detector's training (pipelines/train_camera.py):
MIN_HEIGHT_PX = 12.0      # smaller boxes: 3 px tall at the net's input
MIN_VISIBLE = 0.5         # fraction of the projected rectangle not hidden by nearer boxes
MIN_INSIDE = 0.5          # fraction of the projected rectangle inside the frame
STACK_CLASSES = ("car", "truck", "cyclist", "pedestrian")  # = pipelines.schema.CLASSES; GT label - 1

# The stack's non-egressed channels the measures read (config/stack.yaml's names).
LIDAR_BOXES, LIDAR_COUNT = "lidar/boxes", "lidar/box_count"
CAMERA_BOXES, CAMERA_COUNT = "camera/boxes", "camera/box_count"
TRACK_TIME = "fusion/last_t"
PLAN_STATUS = "planning/status"
CHANNELS = (LIDAR_BOXES, LIDAR_COUNT, CAMERA_BOXES, CAMERA_COUNT, TRACK_TIME, PLAN_STATUS)


# ---- ground truth and the ego's path --------------------------------------------------------------
def load_ground_truth(bag_path: str | Path) -> list[Objects]:
    """Every ground-truth message of the bag, in time order (empty if it has none)."""
    try:
        reader = open_bag(bag_path)
    except BagError:
        return []
    with reader:
        if GT_TOPIC not in reader.topics:
            return []
        return [msg_to_objects(m) for _, m in reader.decoded([GT_TOPIC])]


def _at(gt: list[Objects], times: np.ndarray, t_ns: int) -> Objects:
    i = int(np.clip(np.searchsorted(times, t_ns), 0, len(times) - 1))
    if i > 0 and abs(times[i - 1] - t_ns) <= abs(times[i] - t_ns):
        i -= 1
    return gt[i]


def gt_at(gt: list[Objects], times: np.ndarray, t_ns: int) -> Objects:
    """The ground truth at ``t_ns``: its nearest sample, moved by the velocities over the time between."""
    g = _at(gt, times, t_ns)
    dt = (t_ns - g.t_ns) * 1e-9
    if not len(g) or dt == 0:
        return g
    boxes = g.boxes.copy()
    boxes[:, :2] += g.velocities[:, :2] * dt
    return Objects(t_ns, g.frame_id, g.ids, g.classes, boxes, g.velocities)


class EgoPath:
    """The odometry the replay pushed, (log time ns, ODOM_COLS value), as a path over its stamps."""

    def __init__(self, ego: Sequence[tuple[int, np.ndarray]]) -> None:
        v = np.array([p for _, p in ego], np.float64).reshape(-1, 6)
        self.log = np.array([t for t, _ in ego], np.int64)
        self.stamp = np.round(v[:, 5] * 1e9).astype(np.int64)
        self.x, self.y, self.yaw, self.v = v[:, 0], v[:, 1], np.unwrap(v[:, 2]) if len(v) else v[:, 2], v[:, 3]
        self.s = np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(self.x), np.diff(self.y)))]) if len(v) else v[:, 0]

    def __len__(self) -> int:
        return len(self.stamp)

    def pose(self, t_ns: int | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """x, y, yaw interpolated at stamp(s) ``t_ns`` (held beyond the ends)."""
        t = np.asarray(t_ns, np.float64)
        st = self.stamp.astype(np.float64)
        return np.interp(t, st, self.x), np.interp(t, st, self.y), np.interp(t, st, self.yaw)

    def xy_logged(self, log_ns: int) -> np.ndarray:
        """The position of the latest odometry logged at or before ``log_ns`` (the first if none)."""
        i = int(np.clip(np.searchsorted(self.log, log_ns, side="right") - 1, 0, len(self.log) - 1))
        return np.array([self.x[i], self.y[i]])

    def stamp_read_at(self, log_ns: int) -> int | None:
        """The stamp of the odometry a job released at ``log_ns`` read (the latest logged by then)."""
        i = int(np.searchsorted(self.log, log_ns, side="right")) - 1
        return int(self.stamp[i]) if i >= 0 else None

    def distance(self, t0_ns: int, t1_ns: int) -> float | None:
        """Distance driven between two stamps, None when the odometry does not cover them."""
        if not len(self) or t0_ns < self.stamp[0] or t1_ns > self.stamp[-1]:
            return None
        st = self.stamp.astype(np.float64)
        return float(np.interp(t1_ns, st, self.s) - np.interp(t0_ns, st, self.s))


def _to_base(xy: np.ndarray, pose: tuple[float, float, float]) -> np.ndarray:
    """Map-frame points (N, 2) into base_link at ``pose`` (x, y, yaw)."""
    c, s = math.cos(pose[2]), math.sin(pose[2])
    d = xy - np.array(pose[:2])
    return np.stack([d[:, 0] * c + d[:, 1] * s, -d[:, 0] * s + d[:, 1] * c], 1)


# ---- matching -------------------------------------------------------------------------------------
def greedy_pairs(dist: np.ndarray, limit: float, rows: np.ndarray | None = None,
                 cols: np.ndarray | None = None) -> list[tuple[int, int]]:
    """Pairs (row, col) matched greedily by increasing distance, each side used once, within ``limit``.

    ``rows`` / ``cols`` are bool masks of the rows and columns still free (default: all).
    """
    if dist.size == 0:
        return []
    ok = dist <= limit
    if rows is not None:
        ok &= rows[:, None]
    if cols is not None:
        ok &= cols[None, :]
    pairs = np.argwhere(ok)
    order = np.argsort(dist[pairs[:, 0], pairs[:, 1]], kind="stable")
    used_r, used_c, out = set(), set(), []
    for r, c in pairs[order]:
        if r not in used_r and c not in used_c:
            used_r.add(int(r))
            used_c.add(int(c))
            out.append((int(r), int(c)))
    return out


def _greedy_matches(dist: np.ndarray, limit: float) -> int:
    """How many pairs ``greedy_pairs`` matches."""
    return len(greedy_pairs(dist, limit))


def match_with_care(dist: np.ndarray, care: np.ndarray, counted: np.ndarray, limit: float
                    ) -> tuple[list[tuple[int, int]], int, int]:
    """Detections (rows) against objects (columns) that count (``care``) or not.

    Greedy pairs with counting objects first; then detections left over that lie within
    ``limit`` of an object that does not count are ignored. Returns (pairs, false positives among
    the ``counted`` detections, missed counting objects).
    """
    n_det, n_gt = dist.shape
    pairs = greedy_pairs(dist, limit, cols=care) if n_det and n_gt else []
    used = np.zeros(n_det, bool)
    for r, _ in pairs:
        used[r] = True
    if n_det and n_gt and (~care).any():
        for r, _ in greedy_pairs(dist, limit, rows=~used, cols=~care):
            used[r] = True
    fp = int((~used & counted).sum())
    return pairs, fp, int(care.sum()) - len(pairs)


def _cdist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if not len(a) or not len(b):
        return np.zeros((len(a), len(b)))
    return np.linalg.norm(a[:, None, :2] - b[None, :, :2], axis=-1)


def _rates(tp: int, fp: int, fn: int) -> dict[str, float | None]:
    return {"precision": tp / (tp + fp) if tp + fp else None, "recall": tp / (tp + fn) if tp + fn else None,
            "true_positives": tp, "false_positives": fp, "false_negatives": fn}


# ---- detection: tracked objects --------------------------------------------------------------------
def detection_quality(tracks: list[tuple[int, np.ndarray, np.ndarray]], gt: list[Objects]) -> dict[str, Any]:
    """Precision and recall of published tracks (t_ns, tracks, ego_xy) against ground truth."""
    times = np.array([g.t_ns for g in gt], np.int64)
    tp = fp = fn = 0
    for t_ns, rows, ego in tracks:
        g = _at(gt, times, t_ns)
        gxy = g.boxes[:, :2] if len(g) else np.zeros((0, 2))
        gxy = gxy[np.hypot(*(gxy - ego).T) <= RANGE_M] if len(gxy) else gxy
        txy = rows[:, 2:4].astype(np.float64)
        txy = txy[np.hypot(*(txy - ego).T) <= RANGE_M] if len(txy) else txy
        m = _greedy_matches(_cdist(txy, gxy), MATCH_M)
        tp, fp, fn = tp + m, fp + len(txy) - m, fn + len(gxy) - m
    return {**_rates(tp, fp, fn), "match_m": MATCH_M}


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
    g = _at(gt, times, sweep_ns)
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
        pairs, f, m = match_with_care(_cdist(dxy, gxy), care, np.hypot(*dxy.T) <= RANGE_M if len(dxy) else
                                      np.zeros(0, bool), match_m)
        tp, fp, fn = tp + len(pairs), fp + f, fn + m
        cls = np.clip(seen.classes.astype(np.int64) - 1, -1, len(STACK_CLASSES) - 1) if len(seen) else seen.classes
        np.add.at(total, cls[care], 1)
        np.add.at(hits, cls[[c for _, c in pairs]], 1)
    by_class = {name: hits[i] / total[i] for i, name in enumerate(STACK_CLASSES) if total[i]}
    out = {**_rates(tp, fp, fn), "recall_by_class": {k: float(v) for k, v in by_class.items()},
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
    return {**_rates(tp, fp, fn), "class_accuracy": right / tp if tp else None, "frames": len(frames),
            "iou_min": IOU_MIN}


# ---- tracking ------------------------------------------------------------------------------------
def tracking_quality(frames: list[tuple[np.ndarray, Objects, np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """CLEAR MOT of confirmed tracks: frames of (tracks (N, TRACK_COLS), ground truth at the tracks'
    time (M objects), which objects count (M,) bool, which tracks are in range (N,) bool).

    Per frame: correspondences of the previous frames (object id -> track id) are kept while within
    ``MATCH_M``; the other counting objects are matched greedily by distance; tracks left over near
    an object that does not count are ignored. An ID switch is an object matched to a different
    track id than the one it was last matched to.
    """
    last: dict[int, int] = {}
    gt_total = tp = fp = fn = switches = right = 0
    sq = 0.0
    for rows, g, care, counted in frames:
        tid = rows[:, 0].astype(np.int64) if len(rows) else np.zeros(0, np.int64)
        dist = _cdist(rows[:, 2:4].astype(np.float64), g.boxes[:, :2])
        gid = g.ids.astype(np.int64)
        pairs: list[tuple[int, int]] = []
        free_t, free_g = np.ones(len(rows), bool), care.copy()
        col_of = {int(t): i for i, t in enumerate(tid)}
        for j in np.flatnonzero(care):
            i = col_of.get(last.get(int(gid[j]), -1))
            if i is not None and free_t[i] and dist[i, j] <= MATCH_M:
                pairs.append((i, int(j)))
                free_t[i] = free_g[j] = False
        for i, j in greedy_pairs(dist, MATCH_M, rows=free_t, cols=free_g) if dist.size else []:
            pairs.append((i, j))
            free_t[i] = False
        if dist.size and (~care).any():
            for i, _ in greedy_pairs(dist, MATCH_M, rows=free_t, cols=~care):
                free_t[i] = False
        for i, j in pairs:
            g_id, t_id = int(gid[j]), int(tid[i])
            switches += int(g_id in last and last[g_id] != t_id)
            last[g_id] = t_id
            sq += float(dist[i, j]) ** 2
            right += int(int(rows[i, 1]) == int(g.classes[j]) - 1)
        n_care = int(care.sum())
        gt_total += n_care
        tp += len(pairs)
        fn += n_care - len(pairs)
        fp += int((free_t & counted).sum())
    return {"mota": 1.0 - (fn + fp + switches) / gt_total if gt_total else None,
            "id_switches": switches, "position_rmse_m": math.sqrt(sq / tp) if tp else None,
            "class_accuracy": right / tp if tp else None, **_rates(tp, fp, fn), "objects": gt_total,
            "frames": len(frames), "match_m": MATCH_M}


# ---- planning ------------------------------------------------------------------------------------
def _disc_box_clearance(centres: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Distance from each disc centre (P, 2) to each oriented box (M, 7) minus the disc radius: (P, M)."""
    d = centres[:, None, :] - boxes[None, :, :2]
    c, s = np.cos(boxes[:, 6]), np.sin(boxes[:, 6])
    local_x = d[..., 0] * c + d[..., 1] * s
    local_y = -d[..., 0] * s + d[..., 1] * c
    ex = np.maximum(np.abs(local_x) - boxes[:, 3] / 2, 0.0)
    ey = np.maximum(np.abs(local_y) - boxes[:, 4] / 2, 0.0)
    return np.hypot(ex, ey) - EGO_RADIUS_M


def planning_quality(trajectories: list[tuple[int, np.ndarray]], gt: list[Objects], ego: EgoPath | None = None,
                     status: Sequence[int] | None = None) -> dict[str, Any]:
    """Safety, comfort and progress of published trajectories: (time 0 of the plan in ns, (P, 5) rows
    of TRAJ_COLS). ``ego`` (the recorded odometry) gives the progress ratio; ``status`` per plan
    (1 = minimal-risk stop) the count of minimal-risk plans."""
    times = np.array([g.t_ns for g in gt], np.int64)
    free, min_clear, jerk = 0, np.inf, 0.0
    offsets = np.array(EGO_DISC_OFFSETS_M)
    speeds, dists, planned, driven = [], [], 0.0, 0.0
    for t_ns, traj in trajectories:
        collided = False
        rows = traj.astype(np.float64)
        for x, y, yaw, _v, t_rel in rows:
            t_pt = t_ns + int(round(t_rel * 1e9))
            if not len(times) or t_pt > times[-1] + GT_SLACK_NS:  # past the recording: where objects went is unknown
                break
            g = gt_at(gt, times, t_pt)
            if not len(g):
                continue
            centres = np.stack([x + offsets * np.cos(yaw), y + offsets * np.sin(yaw)], axis=1)
            clear = float(_disc_box_clearance(centres, g.boxes.astype(np.float64)).min())
            min_clear = min(min_clear, clear)
            collided |= clear < 0
        free += not collided
        if len(rows) >= 4:
            dt = np.diff(rows[:, 4])
            ok = dt > 0
            if ok.all():
                a = np.diff(rows[:, 3]) / dt
                jerk = max(jerk, float(np.abs(np.diff(a) / dt[1:]).max()))
        if len(rows) >= 2:
            arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(rows[:, :2], axis=0).T))])
            speeds.append(float(rows[:, 3].mean()))
            dists.append(float(arc[-1]))
            # progress against the recorded ego over the part of the horizon the recording covers
            span = min(float(rows[-1, 4]), (float(ego.stamp[-1]) - t_ns) * 1e-9) \
                if ego is not None and len(ego) else 0.0
            rec = ego.distance(t_ns, t_ns + int(round(span * 1e9))) if span >= MIN_PROGRESS_S else None
            if rec is not None:
                planned, driven = planned + float(np.interp(span, rows[:, 4], arc)), driven + rec
    n = len(trajectories)
    out = {"collision_free_rate": free / n if n else None,
           "min_clearance_m": float(min_clear) if np.isfinite(min_clear) else None,
           "max_jerk_mps3": jerk if n else None, "trajectories": n,
           "mean_planned_speed_mps": float(np.mean(speeds)) if speeds else None,
           "mean_planned_distance_m": float(np.mean(dists)) if dists else None,
           "progress_ratio": planned / driven if driven > 0 else None}
    if status is not None:
        out["minimal_risk_plans"] = int(sum(int(s) == 1 for s in status))
    return out


# ---- from a replay's outputs -----------------------------------------------------------------------
def _producer(cfg: Any, channel: str, codec: str) -> tuple[int, str] | None:
    """(relative deadline ns, input topic) of the task writing ``channel`` and its ``codec`` input."""
    if cfg is None:
        return None
    by_channel = {ch: r.topic for r in cfg.ingress if r.codec == codec for ch in r.channels.values()}
    for task in cfg.tasks:
        e = cfg.entries[task.name]
        if channel in (e.get("outputs") or {}).values():
            for ch in (e.get("inputs") or {}).values():
                if ch in by_channel:
                    return int(task.deadline), by_channel[ch]
    return None


def _series(channels: Mapping[str, list[tuple[int, np.ndarray]]], name: str) -> dict[int, np.ndarray]:
    return dict(sorted(channels.get(name, []), key=lambda p: p[0]))


def _rows(values: dict[int, np.ndarray], counts: dict[int, np.ndarray]) -> list[tuple[int, np.ndarray]]:
    return [(t, v[: int(counts[t].reshape(-1)[0])]) for t, v in values.items() if t in counts]


def _sim_metadata(reader: Any) -> dict[str, Any]:
    try:
        return json.loads(reader.metadata.get("rt_runtime.sim", "") or "{}")
    except (ValueError, AttributeError):
        return {}


def _header_stamp(cdr: bytes) -> int:
    """The std_msgs/Header stamp at the start of a CDR message (Image, PointCloud2)."""
    order = "<" if cdr[1] == 1 else ">"
    sec, nsec = np.frombuffer(cdr[4:12], np.dtype(f"{order}i4")).tolist()
    return int(sec) * 1_000_000_000 + (int(nsec) & 0xFFFFFFFF)


def _read_by(log_ns: list[int], release_ns: int) -> int | None:
    i = int(np.searchsorted(np.asarray(log_ns, np.int64), release_ns, side="right")) - 1
    return i if i >= 0 else None


def _lidar_frames(reader: Any, topic: str, deadline_ns: int, boxes: list[tuple[int, np.ndarray]], start_ns: int,
                  gt: list[Objects], times: np.ndarray, ego: EgoPath, meta: dict[str, Any]
                  ) -> tuple[list[tuple[np.ndarray, Objects, np.ndarray]], dict[int, set[int]]]:
    """LiDAR frames for ``lidar_detection_quality``, and the objects seen by each sweep (by sweep stamp)."""
    from ..bag import cloud_to_array

    rig = meta.get("rig", {}).get("lidar", {})
    lidar = LidarGeometry(rig.get("rate_hz", 10.0), rig.get("mount"))
    logs = [m.t_ns for m in reader.messages([topic])]  # which sweep each job read: a first, light pass
    wanted: dict[int, list[np.ndarray]] = {}
    for t, rows in boxes:
        i = _read_by(logs, start_ns + t - deadline_ns)
        if i is not None:
            wanted.setdefault(logs[i], []).append(rows)
    frames, visible = [], {}
    for msg in reader.messages([topic]):
        if msg.t_ns not in wanted:
            continue
        cloud = cloud_to_array(reader.decode(msg), topic).reshape(-1)
        xyz = np.stack([cloud["x"], cloud["y"], cloud["z"]], 1).astype(np.float64)
        xyz = xyz[np.isfinite(xyz).all(1)]
        sweep = _header_stamp(msg.raw_cdr)
        seen, counts = lidar_view(xyz, sweep, gt, times, ego, lidar)
        visible[sweep] = {int(k) for k, n in zip(seen.ids, counts) if n >= MIN_LIDAR_POINTS}
        frames += [(rows, seen, counts) for rows in wanted.pop(msg.t_ns)]
    return frames, visible


def _camera_frames(reader: Any, topic: str, deadline_ns: int, boxes: list[tuple[int, np.ndarray]], start_ns: int,
                   gt: list[Objects], times: np.ndarray, ego: EgoPath, meta: dict[str, Any]
                   ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Camera frames for ``camera_detection_quality``."""
    rig = meta.get("rig", {}).get("camera", {})
    cam = CameraGeometry(**{k: rig[k] for k in ("width", "height", "fx", "fy", "cx", "cy", "mount") if k in rig})
    static = np.zeros((0, 8))
    if "scenario" in meta and "seed" in meta:  # scenery hides road users too: the same z-buffer as training
        try:
            from ..sim import build_scenario

            static = build_scenario(meta["scenario"], int(meta["seed"])).static
        except (KeyError, ValueError):
            pass
    heads = [(m.t_ns, _header_stamp(m.raw_cdr)) for m in reader.messages([topic])]
    logs = [h[0] for h in heads]
    frames = []
    for t, det in boxes:
        i = _read_by(logs, start_ns + t - deadline_ns)
        if i is None:
            continue
        stamp = heads[i][1]
        g = gt_at(gt, times, stamp)
        x, y, yaw = (float(v) for v in ego.pose(stamp))
        near = np.hypot(static[:, 0] - x, static[:, 1] - y) < 320.0 if len(static) else np.zeros(0, bool)
        rects, care = project_boxes(cam, (x, y, yaw), np.vstack([g.boxes.reshape(-1, 7), static[near, :7]]))
        n = len(g)
        frames.append((det, rects[:n], g.classes.astype(np.int64) - 1, care[:n]))
    return frames


def quality_from_outputs(bag_path: str | Path, retained: dict[str, list[tuple[int, dict[str, np.ndarray]]]],
                         start_ns: int, ego: list[tuple[int, np.ndarray]], *,
                         channels: Mapping[str, list[tuple[int, np.ndarray]]] | None = None,
                         cfg: Any = None) -> dict[str, Any] | None:
    """Every measure the outputs allow, when the bag carries ground truth; None otherwise.

    ``retained``: egress groups per codec, (t, {role: array}) with t relative to ``start_ns``;
    ``ego``: the odometry pushed, (log ns, value); ``channels``: copies of non-egressed channels'
    publications (t, array); ``cfg``: the StackConfig, for producers' deadlines and input topics.
    """
    gt = load_ground_truth(bag_path)
    if not gt:
        return None
    times = np.array([g.t_ns for g in gt], np.int64)
    path = EgoPath(ego)
    channels = channels or {}

    def ego_xy(log_ns: int) -> np.ndarray:
        return path.xy_logged(log_ns) if len(path) else np.zeros(2)

    markers = retained.get("markers", [])
    tracks = [(start_ns + t, v["tracks"][: int(v["count"].reshape(-1)[0])]) for t, v in markers]
    detection = detection_quality([(t, rows, ego_xy(t)) for t, rows in tracks], gt)

    visible: dict[int, set[int]] = {}
    reader = None
    try:
        lidar_src, camera_src = _producer(cfg, LIDAR_BOXES, "lidar_points"), _producer(cfg, CAMERA_BOXES, "image_rgb")
        lidar_boxes = _rows(_series(channels, LIDAR_BOXES), _series(channels, LIDAR_COUNT))
        camera_boxes = _rows(_series(channels, CAMERA_BOXES), _series(channels, CAMERA_COUNT))
        if len(path) and ((lidar_src and lidar_boxes) or (camera_src and camera_boxes)):
            reader = open_bag(bag_path)
            meta = _sim_metadata(reader)
            if lidar_src and lidar_boxes and lidar_src[1] in reader.topics:
                frames, visible = _lidar_frames(reader, lidar_src[1], lidar_src[0], lidar_boxes, start_ns, gt, times,
                                                path, meta)
                detection["lidar"] = lidar_detection_quality(frames)
            if camera_src and camera_boxes and camera_src[1] in reader.topics:
                detection["camera"] = camera_detection_quality(
                    _camera_frames(reader, camera_src[1], camera_src[0], camera_boxes, start_ns, gt, times, path, meta))
    finally:
        if reader is not None:
            reader.close()

    # Tracking: each track set at its state's time (the odometry stamp it was predicted to).
    state_t = _series(channels, TRACK_TIME)
    sweeps = np.array(sorted(visible), np.int64)
    track_frames = []
    for (t, _v), (t_abs, rows) in zip(markers, tracks):
        t_state = int(round(float(state_t[t].reshape(-1)[0]) * 1e9)) if t in state_t else t_abs
        g = gt_at(gt, times, t_state)
        if len(path):
            xe, ye, _ = path.pose(t_state)
            exy = np.array([float(xe), float(ye)])
        else:
            exy = np.zeros(2)
        care = np.hypot(*(g.boxes[:, :2] - exy).T) <= RANGE_M if len(g) else np.zeros(0, bool)
        if len(sweeps):  # what the latest sweep by then saw
            k = int(np.searchsorted(sweeps, t_state, side="right")) - 1
            seen = visible[int(sweeps[k])] if k >= 0 else set()
            care &= np.array([int(i) in seen for i in g.ids], bool).reshape(-1)
        counted = np.hypot(*(rows[:, 2:4].astype(np.float64) - exy).T) <= RANGE_M if len(rows) else np.zeros(0, bool)
        track_frames.append((rows, g, care, counted))

    # Planning: time 0 of a plan is the odometry stamp its job read at release (publish - deadline).
    plan_src = _producer(cfg, _plan_channel(cfg), "odometry")
    trajs = []
    for t, v in retained.get("path", []):
        t0 = start_ns + t
        if plan_src is not None and len(path):
            stamp = path.stamp_read_at(start_ns + t - plan_src[0])
            t0 = stamp if stamp is not None else t0
        trajs.append((t0, v["trajectory"]))
    status_s = _series(channels, PLAN_STATUS)
    status = [int(status_s[t].reshape(-1)[0]) for t, _ in retained.get("path", []) if t in status_s] \
        if status_s else None
    return {"detection": detection, "tracking": tracking_quality(track_frames),
            "planning": planning_quality(trajs, gt, path if len(path) else None, status)}


def _plan_channel(cfg: Any) -> str:
    """The channel the ``path`` egress route publishes (config/stack.yaml: planning/trajectory)."""
    for r in getattr(cfg, "egress", []) or []:
        if r.codec == "path":
            return next(iter(r.channels.values()))
    return "planning/trajectory"


# The replay keeps copies of these channels' publications for this function (see ``replay``).
quality_from_outputs.channels = CHANNELS  # type: ignore[attr-defined]

__all__ = ["CHANNELS", "EgoPath", "GT_TOPIC", "MATCH_M", "RANGE_M", "CameraGeometry", "LidarGeometry", "box_iou",
           "camera_detection_quality", "detection_quality", "greedy_pairs", "gt_at", "lidar_detection_quality",
           "lidar_view", "load_ground_truth", "match_camera", "match_with_care", "planning_quality", "project_boxes",
           "quality_from_outputs", "tracking_quality"]
