"""Ground truth, the ego's path and the matching rules shared by every quality measure."""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ...bag import BagError, msg_to_objects, open_bag
from ...bag.objects import Objects

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


def nearest_frame(gt: list[Objects], times: np.ndarray, t_ns: int) -> Objects:
    """The ground-truth frame nearest ``t_ns`` (the earlier one on a tie)."""
    i = int(np.clip(np.searchsorted(times, t_ns), 0, len(times) - 1))
    if i > 0 and abs(times[i - 1] - t_ns) <= abs(times[i] - t_ns):
        i -= 1
    return gt[i]


def gt_at(gt: list[Objects], times: np.ndarray, t_ns: int) -> Objects:
    """The ground truth at ``t_ns``: its nearest sample, moved by the velocities over the time between."""
    g = nearest_frame(gt, times, t_ns)
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


def greedy_matches(dist: np.ndarray, limit: float) -> int:
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


def planar_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise x-y distances between the rows of ``a`` and ``b``."""
    if not len(a) or not len(b):
        return np.zeros((len(a), len(b)))
    return np.linalg.norm(a[:, None, :2] - b[None, :, :2], axis=-1)


def detection_rates(tp: int, fp: int, fn: int) -> dict[str, float | None]:
    """Precision and recall (None where undefined) with the counts they come from."""
    return {"precision": tp / (tp + fp) if tp + fp else None, "recall": tp / (tp + fn) if tp + fn else None,
            "true_positives": tp, "false_positives": fp, "false_negatives": fn}
