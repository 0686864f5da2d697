"""Tracking (MOTA, ID switches, position error) and open-loop planning quality."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...bag.objects import Objects
from .common import (
    EGO_DISC_OFFSETS_M,
    EGO_RADIUS_M,
    GT_SLACK_NS,
    MATCH_M,
    MIN_PROGRESS_S,
    EgoPath,
    planar_distances,
    detection_rates,
    greedy_pairs,
    gt_at,
)


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
        dist = planar_distances(rows[:, 2:4].astype(np.float64), g.boxes[:, :2])
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
            "class_accuracy": right / tp if tp else None, **detection_rates(tp, fp, fn), "objects": gt_total,
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
