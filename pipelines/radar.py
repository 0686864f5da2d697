"""Radar object extraction as an rt_runtime graph: Doppler-aware clustering → objects with velocity.

Two tensorized ops (no per-point or per-object Python loops):

1. ``radar_cluster``: two detections are neighbours when they are close in x, y (a gate that widens
   with range, as the azimuth cell does) *and* in radial velocity, so a car passing a parked one
   splits from it. Connected components over that R x R adjacency by max-label propagation with
   pointer jumping; each component's root becomes a cluster id.
2. ``radar_objects``: per cluster (``index_add_`` / ``scatter_reduce`` segments) the centroid, mean
   radial velocity and total RCS (power sum in dBsm); the full velocity (vx, vy) by least squares on
   ``vr_i = v · u_i`` over the detections' bearings ``u_i``, with a ridge on the component across
   the line of sight, which one bearing cannot observe (a narrow cluster falls back to the radial
   velocity). False alarms are rejected: too few detections (unless one is very strong), too weak,
   or Doppler inconsistent with one rigid motion (residual RMS). The best ``MAX_RADAR_OBJECTS`` by
   score are output.

Frames: detections come in the radar's own frame, as the sensor reports them, so bearings are
taken from the origin; ``mount`` (x, y, yaw of the radar in ``base_link``) turns the objects'
positions and velocities into ``base_link``. Velocities are as the Doppler measures them, i.e.
relative to the sensor (no ego-motion compensation here: fusion owns the odometry).

Each op's body is a kernel (``rt_runtime.exec.kernel``): eager, or compiled where it pays (``rt-runtime compile``).
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from rt_runtime import Graph, Op, TensorSpec
from rt_runtime.exec import kernel
from pipelines import schema
from pipelines.lidar import on_device


@dataclasses.dataclass(frozen=True)
class RadarParams:
    """Tuning of the radar clusterer; metres, m/s and dBsm."""

    eps_xy: float = 1.5            # neighbour gate near the sensor
    eps_xy_per_m: float = 0.02     # ... widened by this much per metre of range (~1° azimuth cell)
    eps_v: float = 1.0             # radial-velocity gate
    max_prop_iters: int = 32
    min_points: int = 2
    single_point_rcs: float = 5.0   # a lone detection at least this strong (a car's) is still an object
    min_rcs: float = 0.0            # weaker clusters (power sum) are ground clutter or false alarms
    max_resid: float = 1.0          # Doppler residual RMS above this: not one rigid object
    tangential_ridge: float = 0.001  # prior per detection, ~(2°)² of bearing spread, against cross velocity
    half_score_points: float = 2.0
    mount: tuple[float, float, float] = (0.0, 0.0, 0.0)  # radar x, y, yaw in base_link


@kernel
def _cluster(radar: Tensor, radar_label: Tensor, eps_xy: float, eps_xy_per_m: float, eps_v: float,
             max_prop_iters: int, early_exit: bool) -> None:
    """Cluster ids (0, 1, ... in order of each component's root) of the detections, -1 where invalid.
    ``early_exit``: stop once the labels converge (a host read; off the CPU every pass runs, which changes
    nothing once converged, so the graph can be captured)."""
    r = radar.shape[0]
    x, y, vr = radar[:, 0], radar[:, 1], radar[:, 3]
    valid = torch.isfinite(radar).all(1)
    rng = torch.hypot(x, y)
    gate = eps_xy + eps_xy_per_m * torch.maximum(rng[:, None], rng[None, :])
    near = (x[:, None] - x[None, :]) ** 2 + (y[:, None] - y[None, :]) ** 2 < gate * gate
    near &= (vr[:, None] - vr[None, :]).abs() < eps_v
    near &= valid[:, None] & valid[None, :]
    ids = torch.arange(r, device=radar.device)
    label = ids
    for _ in range(max_prop_iters):
        spread = torch.where(near, label[None, :], -1).amax(1) if r > 0 else label  # amax needs a column
        spread = torch.maximum(spread, label)
        spread = spread.take(spread)  # pointer jumping: labels never decrease, so this is safe
        if early_exit and torch.equal(spread, label):
            break
        label = spread
    root = label == ids
    cid = (torch.cumsum(root, 0) - 1).take(label)
    out = radar_label[:r]
    out.copy_(cid).masked_fill_(~valid, -1)


def _cluster_op(p: RadarParams, dev: torch.device, radar: TensorSpec, static: bool) -> Op:
    label_spec = TensorSpec("radar_label", (f"R<={schema.MAX_RADAR}",), "int64", str(dev))
    # the kernel's parameters as the plain floats and ints its signature takes
    gates = (float(p.eps_xy), float(p.eps_xy_per_m), float(p.eps_v), int(p.max_prop_iters), not static)

    def cluster(radar: torch.Tensor, radar_label: torch.Tensor) -> None:
        _cluster(radar, radar_label, *gates)

    return Op("radar_cluster", cluster, (radar,), (label_spec,), cost_us=1500, capturable=static)


@kernel
def _objects(radar: Tensor, radar_label: Tensor, radar_objects: Tensor, radar_object_count: Tensor, table: Tensor,
             sums: Tensor, min_points: float, single_point_rcs: float, min_rcs: float, max_resid: float,
             tangential_ridge: float, half_score_points: float, mx0: float, my0: float, cos_m: float,
             sin_m: float) -> None:
    """Per cluster (row ``sums.shape[0] - 1`` collects the unclustered) an object row, the best first."""
    mc = sums.shape[0] - 1
    r = radar.shape[0]
    lab = radar_label[:r]
    lab = torch.where(lab >= 0, lab, mc)
    x, y, vr, rcs = radar[:, 0], radar[:, 1], radar[:, 3], radar[:, 4]
    rng = torch.hypot(x, y).clamp(min=1e-3)
    c, s = x / rng, y / rng
    power = torch.pow(10.0, rcs / 10)
    # One pass of segment sums: n, x, y, vr, power, and the 2x2 normal equations of v·u = vr.
    cols = torch.stack([torch.ones_like(x), x, y, vr, power, c * c, c * s, s * s, c * vr, s * vr], 1)
    sums.zero_()
    sums.index_add_(0, lab, torch.nan_to_num(cols))
    n, sx, sy, svr, spow = sums[:, 0], sums[:, 1], sums[:, 2], sums[:, 3], sums[:, 4]
    scc, scs, sss, scv, ssv = sums[:, 5], sums[:, 6], sums[:, 7], sums[:, 8], sums[:, 9]
    nn = n.clamp(min=1)
    mx, my, mvr = sx / nn, sy / nn, svr / nn
    rcs_db = 10 * torch.log10(spow.clamp(min=1e-12))
    # Ridge across the line of sight of the centroid: (A^T A + λ e e^T) v = A^T vr.
    en = torch.hypot(mx, my).clamp(min=1e-3)
    px, py = -my / en, mx / en
    lam = tangential_ridge * n
    a, b, d = scc + lam * px * px, scs + lam * px * py, sss + lam * py * py
    det = (a * d - b * b).clamp(min=1e-9)
    vx, vy = (d * scv - b * ssv) / det, (a * ssv - b * scv) / det
    resid = vr - (vx[lab] * c + vy[lab] * s)
    rms = torch.sqrt(torch.zeros_like(n).index_add_(0, lab, torch.nan_to_num(resid * resid)) / nn)
    enough = (n >= min_points) | (rcs_db >= single_point_rcs)
    keep = enough & (n > 0) & (rcs_db >= min_rcs) & (rms <= max_resid)
    keep[mc] = False
    score = (n / (n + half_score_points)) * torch.exp(-((rms / max_resid) ** 2))
    score = torch.where(keep, score, 0.0)
    # Radar frame → base_link: rotate positions and velocities by the mount yaw, then translate.
    bx, by = mx0 + cos_m * mx - sin_m * my, my0 + sin_m * mx + cos_m * my
    bvx, bvy = cos_m * vx - sin_m * vy, sin_m * vx + cos_m * vy
    torch.stack([bx, by, mvr, bvx, bvy, rcs_db, n, score], 1, out=table)
    top, idx = torch.topk(score, radar_objects.shape[0])
    torch.index_select(table, 0, idx, out=radar_objects)
    radar_objects.mul_((top > 0).unsqueeze(1))
    radar_object_count.copy_((top > 0).sum().view(1))


def _objects_op(p: RadarParams, dev: torch.device, radar: TensorSpec, label: TensorSpec, static: bool) -> Op:
    mc = schema.MAX_RADAR
    obj_spec = on_device(schema.radar_objects(), str(dev))
    count_spec = on_device(schema.count("radar_object_count"), str(dev))
    table_spec = TensorSpec("radar_table", (mc + 1, len(schema.RADAR_OBJ_COLS)), "float32", str(dev))
    sums_spec = TensorSpec("radar_sums", (mc + 1, 10), "float32", str(dev))
    mx0, my0, myaw = p.mount
    # the kernel's parameters as the plain ints and floats its signature takes
    params = (float(p.min_points), float(p.single_point_rcs), float(p.min_rcs), float(p.max_resid),
              float(p.tangential_ridge), float(p.half_score_points), float(mx0), float(my0),
              math.cos(myaw), math.sin(myaw))

    def objects(radar: torch.Tensor, radar_label: torch.Tensor, radar_objects: torch.Tensor,
                radar_object_count: torch.Tensor, table: torch.Tensor, sums: torch.Tensor) -> None:
        _objects(radar, radar_label, radar_objects, radar_object_count, table, sums, *params)

    return Op("radar_objects", objects, (radar, label), (obj_spec, count_spec), workspace=(table_spec, sums_spec),
              cost_us=800, deterministic=dev.type == "cpu", capturable=static)


def build_radar_graph(device: str = "cpu", static: bool | None = None, **params: object) -> Graph:
    """The radar clusterer: ``radar`` (R<=1024, 5) → ``radar_objects`` (MAX_RADAR_OBJECTS, 8) + count.
    ``static`` (default: off the CPU): no host reads, every clustering pass runs, so it can be captured."""
    p = RadarParams(**params)  # type: ignore[arg-type]
    dev = torch.device(device)
    static = device != "cpu" if static is None else static
    radar = on_device(schema.radar_points(), device)
    clus = _cluster_op(p, dev, radar, static)
    objs = _objects_op(p, dev, radar, clus.outputs[0], static)
    # NaN rows are ignored (``valid`` in ``_cluster``): a scan padded with them to its bound gives the same
    # objects, so one CUDA graph captured at the bound serves every scan.
    return Graph("radar", [clus, objs], inputs=[radar], outputs=["radar_objects", "radar_object_count"],
                 pad={"radar": math.nan})
