"""Front radar model: detections on visible objects, roadside clutter and false alarms.

Doppler is the relative radial velocity (target minus sensor, along the line of sight), as an
automotive radar measures it before ego-motion compensation; static things therefore show the
ego's own speed. RCS is in dBsm.
"""
from __future__ import annotations

import numpy as np

from .raycast import slab, to_box_frame
from .rig import RadarModel
from .scenarios import BICYCLE, CAR, PEDESTRIAN, POLE, TREE, TRUCK

POINT_DTYPE = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("doppler", "<f4"), ("rcs", "<f4")])
RCS_DBSM = {CAR: 10.0, TRUCK: 20.0, BICYCLE: 0.0, PEDESTRIAN: -5.0, POLE: 5.0, TREE: 0.0}
POINTS = {CAR: (1, 4), TRUCK: (2, 6), BICYCLE: (1, 2), PEDESTRIAN: (1, 1), POLE: (1, 1), TREE: (1, 2)}


def detect(radar: RadarModel, ego: tuple[float, float, float], ego_vel: tuple[float, float, float],
           boxes: np.ndarray, velocities: np.ndarray, classes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One frame of detections (N,) POINT_DTYPE in the radar frame.

    `ego` = (x, y, yaw), `ego_vel` = (vx, vy, yaw_rate) in the map; boxes (M, 7), velocities (M, 2).
    """
    ex, ey, eyaw = ego
    c, s = np.cos(eyaw), np.sin(eyaw)
    m = radar.mount
    sx, sy = ex + c * m.x - s * m.y, ey + s * m.x + c * m.y
    # sensor velocity: vehicle velocity + yaw_rate x lever arm
    svx = ego_vel[0] - ego_vel[2] * (s * m.x + c * m.y)
    svy = ego_vel[1] + ego_vel[2] * (c * m.x - s * m.y)
    to_sensor = np.array([[c, s], [-s, c]])  # map -> sensor (radar mounted level, facing forward)
    half_fov = np.deg2rad(radar.fov_deg) / 2
    rows: list[np.ndarray] = []

    if len(boxes):
        rel = (boxes[:, :2] - [sx, sy]) @ to_sensor.T
        dist = np.hypot(rel[:, 0], rel[:, 1])
        az = np.arctan2(rel[:, 1], rel[:, 0])
        cand = np.flatnonzero((dist < radar.max_range) & (np.abs(az) < half_fov) & (dist > 0.5))
        origin = np.array([sx, sy, m.z])
        for i in cand:
            if _occluded(origin, boxes, i, cand):
                continue
            cls = int(classes[i])
            p_det = radar.p_detect * (0.75 if cls == PEDESTRIAN else 1.0)
            if rng.random() >= p_det:
                continue
            lo, hi = POINTS.get(cls, (1, 1))
            n = int(rng.integers(lo, hi + 1))
            pts = _surface_points(boxes[i], origin, n, rng)
            los = pts - origin
            u = los / np.linalg.norm(los, axis=1, keepdims=True)
            dop = (velocities[i, 0] - svx) * u[:, 0] + (velocities[i, 1] - svy) * u[:, 1]
            rcs = RCS_DBSM.get(cls, 0.0) + rng.normal(0.0, 2.5, n)
            rows.append(np.column_stack([pts, dop, rcs]))

    # roadside / ground clutter: static returns spread over the field of view
    n_cl = int(rng.poisson(radar.clutter_mean))
    if n_cl:
        r = rng.uniform(5.0, 80.0, n_cl)
        a = rng.uniform(-half_fov, half_fov, n_cl)
        pts_s = np.column_stack([r * np.cos(a), r * np.sin(a)])
        pts_w = pts_s @ to_sensor + [sx, sy]
        u = np.column_stack([np.cos(a), np.sin(a)]) @ to_sensor
        dop = -(svx * u[:, 0] + svy * u[:, 1])
        rows.append(np.column_stack([pts_w, np.full(n_cl, 0.2), dop, rng.uniform(-12.0, 0.0, n_cl)]))
    # false alarms: random range, angle and doppler
    n_fa = int(rng.poisson(radar.false_alarm_mean))
    if n_fa:
        r = rng.uniform(2.0, radar.max_range, n_fa)
        a = rng.uniform(-half_fov, half_fov, n_fa)
        pts_w = np.column_stack([r * np.cos(a), r * np.sin(a)]) @ to_sensor + [sx, sy]
        rows.append(np.column_stack([pts_w, rng.uniform(0.0, 1.5, n_fa), rng.uniform(-30, 30, n_fa),
                                     rng.uniform(-20.0, -5.0, n_fa)]))
    if not rows:
        return np.zeros(0, POINT_DTYPE)
    det = np.vstack(rows)
    # measure in polar coordinates of the sensor frame, with noise there
    rel = (det[:, :2] - [sx, sy]) @ to_sensor.T
    rng_m = np.hypot(rel[:, 0], rel[:, 1]) + rng.normal(0, radar.range_sigma, len(det))
    az = np.arctan2(rel[:, 1], rel[:, 0]) + rng.normal(0, np.deg2rad(radar.azimuth_sigma_deg), len(det))
    keep = (np.abs(az) < half_fov) & (rng_m > 0.5) & (rng_m < radar.max_range)
    out = np.zeros(int(keep.sum()), POINT_DTYPE)
    out["x"] = (rng_m * np.cos(az))[keep]
    out["y"] = (rng_m * np.sin(az))[keep]
    out["z"] = (det[:, 2] - m.z + rng.normal(0, 0.3, len(det)))[keep]
    out["doppler"] = (det[:, 3] + rng.normal(0, radar.doppler_sigma, len(det)))[keep]
    out["rcs"] = det[keep, 4]
    return out


def _surface_points(box: np.ndarray, origin: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n points on the faces of `box` that face the sensor."""
    o = (np.array([origin[0]]), np.array([origin[1]]), np.array([origin[2]]))
    ol, _ = to_box_frame(o, (np.zeros(1), np.zeros(1), np.zeros(1)), box)
    half = box[3:6] / 2
    local = rng.uniform(-1.0, 1.0, (n, 3)) * half
    local[:, 2] = rng.uniform(-0.3, 0.3, n) * half[2]
    # put each point on the visible face along the axis the sensor is most outside of
    out = np.abs([ol[0][0], ol[1][0]]) / half[:2]
    ax = int(np.argmax(out))
    local[:, ax] = np.sign(ol[ax][0]) * half[ax]
    c, s = np.cos(box[6]), np.sin(box[6])
    return np.column_stack([box[0] + c * local[:, 0] - s * local[:, 1], box[1] + s * local[:, 0] + c * local[:, 1],
                            box[2] + local[:, 2]])


def _occluded(origin: np.ndarray, boxes: np.ndarray, i: int, others: np.ndarray) -> bool:
    """True when the line of sight to box i's centre passes through a nearer box."""
    target = boxes[i, :3]
    d = target - origin
    dist = np.linalg.norm(d)
    d = d / dist
    for j in others:
        if j == i:
            continue
        o = (origin[0:1], origin[1:2], origin[2:3])
        ol, dl = to_box_frame(o, (d[0:1], d[1:2], d[2:3]), boxes[j])
        t, _ = slab(ol, dl, boxes[j, 3:6] / 2)
        if t[0] < dist - 1.0:
            return True
    return False
