"""Ray casting against yaw-rotated 3D boxes (slab method), vectorized over rays.

Rays are passed as separate x, y, z component arrays: element-wise minimum/maximum over three
1-D arrays is several times faster than reductions over a trailing axis of length 3.
"""
from __future__ import annotations

import numpy as np

Vec = tuple[np.ndarray, np.ndarray, np.ndarray]


def to_box_frame(o: Vec, d: Vec, box: np.ndarray) -> tuple[Vec, Vec]:
    """Ray origins and directions in the frame of `box` (x, y, z, l, w, h, yaw), centred on it."""
    c, s = np.float32(np.cos(box[6])), np.float32(np.sin(box[6]))
    ox, oy = o[0] - box[0], o[1] - box[1]
    ol = (c * ox + s * oy, c * oy - s * ox, o[2] - box[2])
    dl = (c * d[0] + s * d[1], c * d[1] - s * d[0], d[2])
    return ol, dl


def slab(ol: Vec, dl: Vec, half: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Entry distance (inf on a miss) and entry face axis (0, 1, 2) of rays in a box's own frame."""
    t_in = None
    t_out = None
    axis = None
    with np.errstate(divide="ignore", invalid="ignore"):
        for a in range(3):
            inv = 1.0 / dl[a]
            t1 = (-half[a] - ol[a]) * inv
            t2 = (half[a] - ol[a]) * inv
            lo = np.fmin(t1, t2)  # fmin/fmax ignore the NaN of 0 * inf for rays parallel to a face
            hi = np.fmax(t1, t2)
            if t_in is None:
                t_in, t_out, axis = lo, hi, np.zeros(lo.shape, np.int8)
            else:
                later = lo > t_in
                t_in = np.where(later, lo, t_in)
                axis[later] = a
                t_out = np.fmin(t_out, hi)
    hit = (t_in <= t_out) & (t_in > 0)
    return np.where(hit, t_in, np.inf), axis


def face_normal(axis: np.ndarray, dl: Vec, yaw: float) -> Vec:
    """World-frame unit normals of the entry faces found by `slab` (rays given in the box frame)."""
    nx = np.where(axis == 0, -np.sign(dl[0]), 0).astype(np.float32)
    ny = np.where(axis == 1, -np.sign(dl[1]), 0).astype(np.float32)
    nz = np.where(axis == 2, -np.sign(dl[2]), 0).astype(np.float32)
    c, s = np.float32(np.cos(yaw)), np.float32(np.sin(yaw))
    return c * nx - s * ny, s * nx + c * ny, nz
