"""Open-loop quality of a replay's outputs against the bag's ground truth.

* Detection: every published track set is matched to the ground-truth objects of the nearest
  ground-truth instant, within ``RANGE_M`` of the ego: greedy nearest pairs by centre distance in
  the map plane, a pair counts when it is within ``MATCH_M``. Precision = TP / (TP + FP), recall =
  TP / (TP + FN), summed over all instants.
* Planning: every published trajectory is checked against where the ground-truth objects actually
  were at each of its points' times (the recording's future, so this is open loop). The ego is
  three discs of radius ``EGO_RADIUS_M`` along its length; an object is its oriented box. The
  clearance is the smallest disc-to-box distance; a trajectory collides when it is below zero
  within its horizon (points past the end of the recording are not judged). Reported: the
  collision-free rate and the minimum clearance. Other road users in a recording react to the
  recorded ego, not to the plan, so this open-loop figure is a lower bound on closed-loop safety.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..bag import BagError, msg_to_objects, open_bag
from ..bag.objects import Objects

GT_TOPIC = "/ground_truth/objects"
MATCH_M = 2.0
RANGE_M = 50.0
EGO_RADIUS_M = 1.0
EGO_DISC_OFFSETS_M = (-1.4, 0.0, 1.4)
GT_SLACK_NS = 50_000_000


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


def _greedy_matches(dist: np.ndarray, limit: float) -> int:
    """Pairs matched greedily by increasing distance, each side used once, within ``limit``."""
    if dist.size == 0:
        return 0
    pairs = np.argwhere(dist <= limit)
    order = np.argsort(dist[pairs[:, 0], pairs[:, 1]], kind="stable")
    used_r, used_c, n = set(), set(), 0
    for r, c in pairs[order]:
        if r not in used_r and c not in used_c:
            used_r.add(r)
            used_c.add(c)
            n += 1
    return n


def detection_quality(tracks: list[tuple[int, np.ndarray, np.ndarray]], gt: list[Objects]) -> dict[str, float]:
    """Precision and recall of published tracks (t_ns, tracks, ego_xy) against ground truth."""
    times = np.array([g.t_ns for g in gt], np.int64)
    tp = fp = fn = 0
    for t_ns, rows, ego in tracks:
        g = _at(gt, times, t_ns)
        gxy = g.boxes[:, :2] if len(g) else np.zeros((0, 2))
        gxy = gxy[np.hypot(*(gxy - ego).T) <= RANGE_M] if len(gxy) else gxy
        txy = rows[:, 2:4].astype(np.float64)
        txy = txy[np.hypot(*(txy - ego).T) <= RANGE_M] if len(txy) else txy
        dist = np.linalg.norm(txy[:, None, :] - gxy[None, :, :], axis=-1) if len(txy) and len(gxy) else np.zeros((0, 0))
        m = _greedy_matches(dist, MATCH_M)
        tp, fp, fn = tp + m, fp + len(txy) - m, fn + len(gxy) - m
    return {"precision": tp / (tp + fp) if tp + fp else None, "recall": tp / (tp + fn) if tp + fn else None,
            "true_positives": tp, "false_positives": fp, "false_negatives": fn, "match_m": MATCH_M}


def _disc_box_clearance(centres: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Distance from each disc centre (P, 2) to each oriented box (M, 7) minus the disc radius: (P, M)."""
    d = centres[:, None, :] - boxes[None, :, :2]
    c, s = np.cos(boxes[:, 6]), np.sin(boxes[:, 6])
    local_x = d[..., 0] * c + d[..., 1] * s
    local_y = -d[..., 0] * s + d[..., 1] * c
    ex = np.maximum(np.abs(local_x) - boxes[:, 3] / 2, 0.0)
    ey = np.maximum(np.abs(local_y) - boxes[:, 4] / 2, 0.0)
    return np.hypot(ex, ey) - EGO_RADIUS_M


def planning_quality(trajectories: list[tuple[int, np.ndarray]], gt: list[Objects]) -> dict[str, float]:
    """Collision-free rate and minimum clearance of published trajectories (t_ns, (P, 5) rows)."""
    times = np.array([g.t_ns for g in gt], np.int64)
    free, min_clear, jerk = 0, np.inf, 0.0
    offsets = np.array(EGO_DISC_OFFSETS_M)
    for t_ns, traj in trajectories:
        collided = False
        for x, y, yaw, _v, t_rel in traj.astype(np.float64):
            t_pt = t_ns + int(t_rel * 1e9)
            if t_pt > times[-1] + GT_SLACK_NS:  # past the recording: where objects went is unknown
                break
            g = _at(gt, times, t_pt)
            if not len(g):
                continue
            centres = np.stack([x + offsets * np.cos(yaw), y + offsets * np.sin(yaw)], axis=1)
            clear = float(_disc_box_clearance(centres, g.boxes.astype(np.float64)).min())
            min_clear = min(min_clear, clear)
            collided |= clear < 0
        free += not collided
        if len(traj) >= 4:
            dt = np.diff(traj[:, 4]).astype(np.float64)
            v = traj[:, 3].astype(np.float64)
            ok = dt > 0
            if ok.all():
                a = np.diff(v) / dt
                jerk = max(jerk, float(np.abs(np.diff(a) / dt[1:]).max()))
    n = len(trajectories)
    return {"collision_free_rate": free / n if n else None,
            "min_clearance_m": float(min_clear) if np.isfinite(min_clear) else None,
            "max_jerk_mps3": jerk if n else None, "trajectories": n}


def quality_from_outputs(bag_path: str | Path, retained: dict[str, list[tuple[int, dict[str, np.ndarray]]]],
                         start_ns: int, ego: list[tuple[int, np.ndarray]]) -> dict[str, Any] | None:
    """Both measures, when the bag carries ground truth; None otherwise."""
    gt = load_ground_truth(bag_path)
    if not gt:
        return None
    ego_t = np.array([t for t, _ in ego], np.int64)
    ego_xy = np.array([p[:2] for _, p in ego], np.float64) if ego else np.zeros((1, 2))

    def ego_at(t: int) -> np.ndarray:
        if not len(ego_t):
            return ego_xy[0]
        return ego_xy[int(np.clip(np.searchsorted(ego_t, t, side="right") - 1, 0, len(ego_t) - 1))]

    tracks = [(start_ns + t, v["tracks"][: int(v["count"].reshape(-1)[0])], ego_at(start_ns + t))
              for t, v in retained.get("markers", [])]
    trajs = [(start_ns + t, v["trajectory"]) for t, v in retained.get("path", [])]
    return {"detection": detection_quality(tracks, gt), "planning": planning_quality(trajs, gt)}
