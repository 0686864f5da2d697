"""Spinning LiDAR model: ray casts against the ground and boxes, per-column firing times.

Each column fires at its own time within the sweep, from where the vehicle is at that moment,
and its points are expressed in the sensor frame of that moment, as a real driver reports them
(no motion compensation). Boxes move with their velocity during the sweep.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .camera import ground_material
from .raycast import face_normal, slab, to_box_frame
from .rig import LidarModel
from .road import Road
from .scenarios import BICYCLE, CAR, PEDESTRIAN, POLE, TREE, TRUCK

# x, y, z, intensity (float32), ring (uint16) + 2 padding bytes, t (float32, s since sweep start)
POINT_DTYPE = np.dtype({"names": ["x", "y", "z", "intensity", "ring", "t"],
                        "formats": ["<f4", "<f4", "<f4", "<f4", "<u2", "<f4"],
                        "offsets": [0, 4, 8, 12, 16, 20], "itemsize": 24})
GROUND_REFLECTIVITY = np.array([0.10, 0.14, 0.25, 0.30, 0.65, 0.55], np.float32)  # by ground material code
REFLECTIVITY = {CAR: 0.35, TRUCK: 0.40, BICYCLE: 0.30, PEDESTRIAN: 0.20, POLE: 0.45, TREE: 0.25}


@dataclass(frozen=True)
class _Beams:
    dirs: np.ndarray  # (B, C, 3) unit directions in the sensor frame
    dirs_base: np.ndarray  # (B, C, 3) the same in base_link
    r_ground: np.ndarray  # (B, C) range to flat ground (inf: never)
    t_col: np.ndarray  # (C,) firing time in the sweep (s)
    az: np.ndarray  # (C,) azimuth in base_link


@functools.lru_cache(maxsize=8)
def _beams(lidar: LidarModel) -> _Beams:
    el = lidar.elevations()[:, None]
    az = lidar.azimuths()[None, :]
    dirs = np.stack(np.broadcast_arrays(np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)), axis=-1)
    dirs_base = dirs @ lidar.mount.rotation.T
    with np.errstate(divide="ignore"):
        r_ground = np.where(dirs_base[..., 2] < -1e-6, -lidar.mount.z / dirs_base[..., 2], np.inf)
    t_col = np.arange(lidar.columns) / lidar.columns / lidar.rate_hz
    az_base = np.arctan2(dirs_base[0, :, 1], dirs_base[0, :, 0])
    return _Beams(dirs, dirs_base, r_ground, t_col, az_base)


def scan(lidar: LidarModel, road: Road, ego_at: tuple[np.ndarray, np.ndarray, np.ndarray], ego_s: float,
         boxes: np.ndarray, velocities: np.ndarray, classes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One sweep as an organized (beams, columns) POINT_DTYPE array; no return = NaN x/y/z.

    `ego_at` = (x, y, yaw) of base_link at each column's firing time; boxes (M, 7) and velocities
    (M, 2) in the map at the start of the sweep.
    """
    bm = _beams(lidar)
    ex, ey, eyaw = ego_at
    c, s = np.cos(eyaw), np.sin(eyaw)  # (C,)
    mx, my = lidar.mount.x, lidar.mount.y
    ox = ex + c * mx - s * my  # sensor origin in the map per column
    oy = ey + s * mx + c * my
    oz = lidar.mount.z
    rng_m = np.where(bm.r_ground <= lidar.max_range, bm.r_ground, np.inf).astype(np.float64)
    refl = np.zeros(rng_m.shape, np.float32)
    cos_inc = np.abs(bm.dirs_base[..., 2]).astype(np.float32)
    g = np.isfinite(rng_m)
    bi, ci = np.nonzero(g)
    gxb = rng_m[g] * bm.dirs_base[bi, ci, 0]
    gyb = rng_m[g] * bm.dirs_base[bi, ci, 1]
    gx = ox[ci] + c[ci] * gxb - s[ci] * gyb
    gy = oy[ci] + s[ci] * gxb + c[ci] * gyb
    fs, fd = road.frenet(gx, gy, s_hint=ego_s + lidar.mount.x + gxb)
    refl[g] = GROUND_REFLECTIVITY[ground_material(road, fs, fd)]

    for i in range(len(boxes)):
        box = boxes[i]
        cols = _columns(lidar, bm, box, ox[0], oy[0], eyaw[0])
        if cols is None:
            continue
        ccos, csin = c[cols], s[cols]
        d_base = bm.dirs_base[:, cols]  # (B, K, 3)
        dw = (ccos * d_base[..., 0] - csin * d_base[..., 1], csin * d_base[..., 0] + ccos * d_base[..., 1],
              d_base[..., 2])
        # the box's centre moves while the columns fire: move each column's origin the opposite way
        rx = (ox[cols] - velocities[i, 0] * bm.t_col[cols] - box[0])[None, :]
        ry = (oy[cols] - velocities[i, 1] * bm.t_col[cols] - box[1])[None, :]
        rz = np.full((1, 1), oz - box[2])
        ol, dl = to_box_frame((rx, ry, rz), dw, np.array([0, 0, 0, 0, 0, 0, box[6]]))
        t_hit, axis = slab(ol, dl, box[3:6] / 2)
        sub = rng_m[:, cols]
        closer = t_hit < sub
        if not closer.any():
            continue
        sub[closer] = t_hit[closer]
        rng_m[:, cols] = sub
        nx, ny, nz = face_normal(axis[closer], tuple(x[closer] for x in dl), box[6])
        r_sub = refl[:, cols]
        r_sub[closer] = REFLECTIVITY.get(int(classes[i]), 0.3)
        refl[:, cols] = r_sub
        ci_sub = cos_inc[:, cols]
        ci_sub[closer] = np.abs(nx * dw[0][closer] + ny * dw[1][closer] + nz * dw[2][closer])
        cos_inc[:, cols] = ci_sub

    valid = np.isfinite(rng_m) & (rng_m >= lidar.min_range)
    # weak, distant returns are lost more often
    p_drop = lidar.dropout + 0.15 * (np.minimum(rng_m, lidar.max_range) / lidar.max_range) ** 2 * (refl < 0.2)
    valid &= rng.random(rng_m.shape) >= p_drop
    r_noisy = rng_m + rng.standard_normal(rng_m.shape) * lidar.range_sigma
    out = np.zeros((lidar.beams, lidar.columns), POINT_DTYPE)
    r32 = np.where(valid, r_noisy, np.nan).astype(np.float32)
    out["x"] = r32 * bm.dirs[..., 0]
    out["y"] = r32 * bm.dirs[..., 1]
    out["z"] = r32 * bm.dirs[..., 2]
    inten = 255.0 * refl * (0.5 + 0.5 * cos_inc) + rng.standard_normal(rng_m.shape) * 2.0
    out["intensity"] = np.where(valid, np.clip(inten, 0, 255), 0).astype(np.float32)
    out["ring"] = np.arange(lidar.beams, dtype=np.uint16)[:, None]
    out["t"] = bm.t_col.astype(np.float32)[None, :]
    return out


def _columns(lidar: LidarModel, bm: _Beams, box: np.ndarray, sx: float, sy: float, yaw: float) -> np.ndarray | None:
    """Columns whose azimuth can see the box during the sweep (None: out of range)."""
    dx, dy = box[0] - sx, box[1] - sy
    dist = np.hypot(dx, dy)
    radius = np.hypot(box[3], box[4]) / 2 + 4.0  # + what the ego and box move in one sweep
    if dist - radius > lidar.max_range:
        return None
    if dist <= radius + 0.5:
        return np.arange(lidar.columns)
    center = np.arctan2(dy, dx) - yaw
    half = np.arcsin(min(1.0, radius / dist))
    rel = np.angle(np.exp(1j * (bm.az - center)))
    cols = np.flatnonzero(np.abs(rel) <= half)
    return cols if cols.size else None
