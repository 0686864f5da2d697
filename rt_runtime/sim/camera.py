"""Camera model: a shaded, noisy rgb8 rendering of road, markings, scenery and road users.

The vehicle stays on flat ground, so each pixel's ray meets the ground at a fixed point of the
vehicle frame: those points (and their fog) are computed once per camera. A frame then only
moves them into the map, looks up the road surface there, and ray-casts the boxes in front, each
over the pixel rectangle it projects to, with a depth buffer for occlusion.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .raycast import face_normal, slab, to_box_frame
from .rig import CameraModel
from .road import Road
from .scenarios import BICYCLE, CAR, PEDESTRIAN, POLE, TREE, TRUCK

SUN = np.array([0.35, 0.25, 0.90]) / np.linalg.norm([0.35, 0.25, 0.90])
HAZE = np.array([190.0, 200.0, 210.0], np.float32)
# material code -> rgb: asphalt, shoulder, sidewalk, grass, white paint, yellow paint
PALETTE = np.array([[88, 88, 92], [110, 108, 104], [165, 162, 155], [72, 110, 52], [235, 235, 230], [225, 190, 40]],
                   np.float32)
def _normal_quantiles() -> np.ndarray:
    """256 equiprobable quantiles of the standard normal (inverse CDF by bisection on erf)."""
    from math import erf, sqrt
    out = []
    for i in range(256):
        p, lo, hi = (i + 0.5) / 256, -6.0, 6.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if 0.5 * (1 + erf(mid / sqrt(2))) < p else (lo, mid)
        out.append((lo + hi) / 2)
    return np.array(out, np.float32)


_NORMAL_Q = _normal_quantiles()
CAR_COLOURS = np.array([[180, 30, 30], [30, 60, 160], [200, 200, 205], [25, 25, 28], [230, 230, 235], [90, 100, 110],
                        [20, 110, 60], [200, 150, 40]], np.float32)


@dataclass(frozen=True)
class _Rays:
    dirs_base: np.ndarray  # (H*W, 3) pixel rays in base_link, optical depth 1
    norm: np.ndarray  # (H*W,) their lengths (range = t * norm)
    ground: np.ndarray  # (G,) flat indices of pixels that see the ground within max_depth
    gxy: np.ndarray  # (G, 2) their ground points in base_link
    keep: np.ndarray  # (G, 1) (1 - haze weight) x vignette
    haze: np.ndarray  # (G, 3) haze colour x haze weight x vignette
    dist: np.ndarray  # (G,) range from the camera
    sky: np.ndarray  # (H*W, 3) background (sky gradient, distant haze), vignetted
    vignette: np.ndarray  # (H*W, 1)


@functools.lru_cache(maxsize=8)
def _rays(cam: CameraModel) -> _Rays:
    v, u = np.mgrid[0:cam.height, 0:cam.width]
    d_opt = np.stack([(u - cam.cx) / cam.fx, (v - cam.cy) / cam.fy, np.ones(u.shape)], axis=-1).reshape(-1, 3)
    dirs = d_opt @ cam.rotation_optical.T
    h = cam.mount.z
    with np.errstate(divide="ignore"):
        t = np.where(dirs[:, 2] < -1e-6, -h / dirs[:, 2], np.inf)
    ground = np.flatnonzero(t < cam.max_depth)
    gxy = (cam.mount.translation[:2] + t[ground, None] * dirs[ground, :2]).astype(np.float64)
    fog = (1 - np.exp(-t[ground] / 180.0)).astype(np.float32)[:, None]
    dist = np.hypot(gxy[:, 0] - cam.mount.x, gxy[:, 1] - cam.mount.y).astype(np.float32)
    elev = dirs[:, 2] / np.linalg.norm(dirs, axis=1)
    up = np.clip(elev, 0, 1)[:, None]
    sky = (HAZE * (1 - up) + np.array([70, 120, 200], np.float32) * up).astype(np.float32)
    r2 = ((u - cam.cx) / cam.width) ** 2 + ((v - cam.cy) / cam.height) ** 2
    vignette = (1 - 0.35 * r2).reshape(-1, 1).astype(np.float32)
    norm = np.linalg.norm(dirs, axis=1).astype(np.float32)
    # vignetting is folded into every constant, so frames never pay a pass over the whole image for it
    vg = vignette[ground]
    return _Rays(dirs.astype(np.float32), norm, ground, gxy, (1 - fog) * vg, HAZE * fog * vg, dist, sky * vignette,
                 vignette)


def ground_material(road: Road, s: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Surface code per ground point: 0 asphalt, 1 shoulder, 2 sidewalk, 3 grass, 4 white, 5 yellow paint."""
    ad = np.abs(d)
    hw, w = road.half_width, road.lane_width
    edges = np.array([hw, hw + road.shoulder, hw + road.shoulder + road.sidewalk])
    code = np.searchsorted(edges, ad).astype(np.uint8)  # 0 road .. 3 beyond the sidewalk
    code[np.abs(ad - hw + 0.2) < 0.08] = 4  # solid edge lines
    if road.n_lanes > 1:
        # distance to the nearest lane boundary, all boundaries at once
        b = np.clip(np.rint((d + hw) / w), 1, road.n_lanes - 1).astype(np.intp)
        dist = np.abs(d + hw - b * w)
        yellow = np.array([False] + [road.directions[i] != road.directions[i - 1] for i in range(1, road.n_lanes)])
        yb = yellow[b]
        line = np.where(yb, np.abs(dist - 0.12) < 0.06, (dist < 0.08) & (np.mod(s, 12.0) < 4.0))
        code[line] = np.where(yb[line], 5, 4)
    for cw in road.crosswalks:
        code[(s > cw) & (s < cw + 4.0) & (ad < hw) & (np.mod(d + 50.0, 1.2) < 0.6)] = 4
    return code


def _texture(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # a fixed world texture (10 cm cells) so the road looks and flows like a real surface
    ix = np.floor(x * 10).astype(np.int64)
    iy = np.floor(y * 10).astype(np.int64)
    h = ((ix * 73856093) ^ (iy * 19349663)) & 255
    return np.float32(0.16 / 255.0) * h.astype(np.float32) + np.float32(0.92)


def object_colour(cls: int, oid: int) -> np.ndarray:
    """Base body colour of an object."""
    if cls in (CAR, TRUCK):
        return CAR_COLOURS[oid % len(CAR_COLOURS)]
    if cls == PEDESTRIAN:
        return np.array([[200, 60, 60], [60, 140, 200], [230, 200, 70], [120, 60, 150]], np.float32)[oid % 4]
    if cls == BICYCLE:
        return np.array([40, 160, 200], np.float32)
    if cls == TREE:
        return np.array([40, 95, 35], np.float32)
    if cls == POLE:
        return np.array([130, 130, 135], np.float32)
    return np.array([150, 150, 150], np.float32)


def _detail(cls: int, zrel: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Colour per hit by height within the box (0 bottom .. 1 top): windows, heads, trunks."""
    col = np.broadcast_to(base, zrel.shape + (3,)).copy()
    if cls in (CAR, TRUCK):
        col[(zrel > 0.6) & (zrel < 0.95)] = (45, 55, 70)
        col[zrel < 0.15] = (20, 20, 20)  # wheels / shadowed sill
    elif cls in (PEDESTRIAN, BICYCLE):
        col[zrel > 0.87] = (205, 160, 130)
        col[zrel < 0.45] = (40, 45, 80)
    elif cls == TREE:
        col[zrel < 0.4] = (90, 65, 40)
    return col


def render(cam: CameraModel, road: Road, ego: tuple[float, float, float], ego_s: float,
           boxes: np.ndarray, classes: np.ndarray, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One (H, W, 3) uint8 rgb frame; `ego` = (x, y, yaw) of base_link, boxes (M, 7) in the map."""
    r = _rays(cam)
    ex, ey, eyaw = ego
    c, s = np.cos(eyaw), np.sin(eyaw)
    img = r.sky.copy()
    depth = np.full(cam.width * cam.height, np.inf, np.float32)
    gx = ex + c * r.gxy[:, 0] - s * r.gxy[:, 1]
    gy = ey + s * r.gxy[:, 0] + c * r.gxy[:, 1]
    # a point's distance ahead of the vehicle is a good first guess of how far along the road it is
    fs, fd = road.frenet(gx, gy, s_hint=ego_s + r.gxy[:, 0])
    col = PALETTE[ground_material(road, fs, fd)]
    col *= _texture(gx, gy)[:, None] * r.keep
    col += r.haze
    img[r.ground] = col
    depth[r.ground] = r.dist

    rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    origin = np.array([ex, ey, 0.0]) + rot @ cam.mount.translation
    r_cam = (rot @ cam.rotation_optical).T  # map -> optical
    rc, rs = np.float32(c), np.float32(s)
    order = np.argsort(-np.hypot(boxes[:, 0] - origin[0], boxes[:, 1] - origin[1])) if len(boxes) else []
    for i in order:
        box = boxes[i]
        rect = _pixel_rect(cam, box, origin, r_cam)
        if rect is None:
            continue
        v0, v1, u0, u1 = rect
        pix = (np.arange(v0, v1)[:, None] * cam.width + np.arange(u0, u1)[None, :]).reshape(-1)
        db = r.dirs_base[pix]
        dw = (rc * db[:, 0] - rs * db[:, 1], rs * db[:, 0] + rc * db[:, 1], db[:, 2])
        # box relative to the camera, so float32 keeps centimetres even far from the map origin
        rel = np.array([box[0] - origin[0], box[1] - origin[1], box[2] - origin[2], *box[3:]], np.float32)
        zero = np.zeros(1, np.float32)  # the camera is the origin; broadcasts against the rays
        ol, dl = to_box_frame((zero, zero, zero), dw, np.array([*rel[:3], 0, 0, 0, box[6]], np.float32))
        t_hit, axis = slab(ol, dl, rel[3:6] / 2)
        rng_all = t_hit * r.norm[pix]  # t runs along rays of optical depth 1: make it a range
        nearer = rng_all < depth[pix]
        if not nearer.any():
            continue
        sel = pix[nearer]
        t_n = t_hit[nearer]
        nx, ny, nz = face_normal(axis[nearer], tuple(x[nearer] for x in dl), box[6])
        zrel = (ol[2] + t_n * dl[2][nearer]) / rel[5] + 0.5
        shade = (0.45 + 0.55 * np.clip(nx * SUN[0] + ny * SUN[1] + nz * SUN[2], 0, 1)).astype(np.float32)[:, None]
        rng_m = rng_all[nearer]
        fog = (1 - np.exp(-rng_m / 180.0)).astype(np.float32)[:, None]
        col = _detail(int(classes[i]), zrel, object_colour(int(classes[i]), int(ids[i]))) * shade
        vg = r.vignette[sel]
        img[sel] = col * ((1 - fog) * vg) + HAZE * (fog * vg)
        depth[sel] = rng_m
    # grain: one value per pixel (luminance noise, most of a real sensor's), drawn as random
    # bytes mapped through the normal quantile table: ~5x cheaper than standard_normal
    noise = _NORMAL_Q[np.frombuffer(rng.bytes(img.shape[0]), np.uint8)]
    img += (noise * np.float32(cam.noise_sigma))[:, None]
    np.clip(img, 0, 255, out=img)
    return img.astype(np.uint8).reshape(cam.height, cam.width, 3)


_SIGNS = np.array([[1 if i & 1 else -1, 1 if i & 2 else -1, 1 if i & 4 else -1] for i in range(8)], np.float64)
# the 12 edges of a box, as corner index pairs (corners differ in exactly one coordinate sign)
_EDGES = np.array([(i, j) for i in range(8) for j in range(i + 1, 8) if bin(i ^ j).count("1") == 1])


def _pixel_rect(cam: CameraModel, box: np.ndarray, origin: np.ndarray, r_cam: np.ndarray
                ) -> tuple[int, int, int, int] | None:
    """Pixel rectangle (v0, v1, u0, u1) covering a box's projection; None if not visible."""
    cx, cy, cz, ln, w, h, yaw = box
    sx = _SIGNS[:, 0] * ln / 2
    sy = _SIGNS[:, 1] * w / 2
    sz = _SIGNS[:, 2] * h / 2
    c, s = np.cos(yaw), np.sin(yaw)
    corners = np.stack([cx + c * sx - s * sy, cy + s * sx + c * sy, cz + sz], axis=1)
    p = (corners - origin) @ r_cam.T
    near = 0.3
    front = p[:, 2] >= near
    if not front.any() or np.hypot(cx - origin[0], cy - origin[1]) > cam.max_depth:
        return None
    if not front.all():
        # clip the box edges at the near plane: keep corners in front plus the crossing points
        a, b = p[_EDGES[:, 0]], p[_EDGES[:, 1]]
        cross = (a[:, 2] >= near) != (b[:, 2] >= near)
        f = (near - a[cross, 2]) / (b[cross, 2] - a[cross, 2])
        p = np.vstack([p[front], a[cross] + f[:, None] * (b[cross] - a[cross])])
    u = cam.fx * p[:, 0] / p[:, 2] + cam.cx
    v = cam.fy * p[:, 1] / p[:, 2] + cam.cy
    u0, u1 = int(max(np.floor(u.min()), 0)), int(min(np.ceil(u.max()) + 1, cam.width))
    v0, v1 = int(max(np.floor(v.min()), 0)), int(min(np.ceil(v.max()) + 1, cam.height))
    if u0 >= u1 or v0 >= v1:
        return None
    return v0, v1, u0, u1
