"""Shared tensor math for fusion, tracking, prediction and planning: frames, polylines, polynomials.

Everything here works on whole batches (no per-object Python loops) and never reads past a valid
count on the host, so the ops built on it run on CPU and CUDA alike without a host sync. The
polyline, Frenet and polynomial helpers are typed, with no lambdas or generators (written for
TorchScript once; torch.export and Inductor trace them as they are), so the planner's and the predictor's kernels (``rt_runtime.exec.kernel``) call them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, NamedTuple, Optional, Tuple

import torch
from scipy.optimize import linear_sum_assignment  # at import: a first use mid-job would stall it

from rt_runtime import TensorSpec


def on_device(spec: TensorSpec, device: str) -> TensorSpec:
    """The same contract on another device (the schema's specs are declared on the CPU)."""
    dev = device.split(":")[0]   # "cuda:1" -> "cuda"; "meta" (shapes only: the capturability probe) stays
    return TensorSpec(spec.name, spec.shape, spec.dtype, dev, spec.layout, spec.alignment)


def wrap_angle(a: torch.Tensor) -> torch.Tensor:
    """Angles folded into [-pi, pi)."""
    return torch.remainder(a + math.pi, 2 * math.pi) - math.pi


def valid_mask(count: torch.Tensor, n: int, index: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Rows [0, count) of an n-row buffer, as a bool mask (count is a (1,) tensor: no host read)."""
    idx = torch.arange(n, device=count.device) if index is None else index
    return idx < count.reshape(()).to(idx.dtype)


def live_rows(count: torch.Tensor, n: int) -> int:
    """How many leading rows of an n-row buffer to compute on: the count on the CPU, all n elsewhere.

    On the host reading a count costs nothing, and kernels that compute on the counted rows only do
    a few objects' work instead of a full buffer's; on CUDA a read would sync (and break capture).
    """
    if count.device.type != "cpu":
        return n
    return min(max(int(count.reshape(()).item()), 0), n)


# ---- boxes ----------------------------------------------------------------------------------------
def box_corners(xyz: torch.Tensor, lwh: torch.Tensor, yaw: torch.Tensor) -> torch.Tensor:
    """The 8 corners (..., 8, 3) of yawed 3D boxes given centers, sizes and yaw."""
    # Corner k takes the sign of bit 0, 1, 2 of k per axis (a device kernel: no host-to-device copy).
    k = torch.arange(8, device=xyz.device)
    sx, sy, sz = (((k >> b) & 1).to(xyz.dtype) - 0.5 for b in range(3))
    dx, dy, dz = lwh[..., 0:1] * sx, lwh[..., 1:2] * sy, lwh[..., 2:3] * sz
    c, s = torch.cos(yaw)[..., None], torch.sin(yaw)[..., None]
    return torch.stack((xyz[..., 0:1] + c * dx - s * dy, xyz[..., 1:2] + s * dx + c * dy,
                        xyz[..., 2:3] + dz), dim=-1)


# ---- assignment ---------------------------------------------------------------------------------
def greedy_assign(cost: torch.Tensor, rounds: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy-by-cost matching by rounds of mutual nearest pairs; inf marks a forbidden pair.

    Each round every free row and free column picks its cheapest free partner and the mutual
    picks are matched; the globally cheapest free pair is always mutual, so each round makes
    progress, and the result equals sequential greedy-by-cost. Returns (row->col, col->row), -1
    where unmatched. Rounds are fixed (capturable); on the CPU it stops early when nothing is left.
    """
    r, c = cost.shape
    rows = torch.arange(r, device=cost.device)
    cols = torch.arange(c, device=cost.device)
    r2c = torch.full((r,), -1, dtype=torch.long, device=cost.device)
    c2r = torch.full((c,), -1, dtype=torch.long, device=cost.device)
    if r == 0 or c == 0:
        return r2c, c2r
    free = torch.isfinite(cost)
    inf = torch.full_like(cost, math.inf)
    for _ in range(rounds):
        m = torch.where(free, cost, inf)
        rmin, rbest = m.min(dim=1)
        cmin, cbest = m.min(dim=0)
        row_ok = torch.isfinite(rmin) & (cbest[rbest] == rows)
        col_ok = torch.isfinite(cmin) & (rbest[cbest] == cols)
        r2c = torch.where(row_ok, rbest, r2c)
        c2r = torch.where(col_ok, cbest, c2r)
        free = free & (r2c < 0)[:, None] & (c2r < 0)[None, :]
        if cost.device.type == "cpu" and not bool(free.any()):
            break
    return r2c, c2r


def hungarian_assign(cost: torch.Tensor) -> torch.Tensor:
    """Optimal (minimum total cost) row->col matching with scipy on the host; inf = forbidden."""
    c = cost.detach().to("cpu", torch.float64)
    finite = torch.isfinite(c)
    r2c = torch.full((cost.shape[0],), -1, dtype=torch.long)
    if not bool(finite.any()):
        return r2c.to(cost.device)
    big = float(c[finite].abs().max()) * 4 + 1e3  # dearer than any allowed pair: never preferred
    rows, cols = linear_sum_assignment(torch.where(finite, c, big).numpy())
    rows_t, cols_t = torch.as_tensor(rows), torch.as_tensor(cols)
    ok = finite[rows_t, cols_t]
    r2c[rows_t[ok]] = cols_t[ok]
    return r2c.to(cost.device)


def compact(rows: torch.Tensor, keep: torch.Tensor,
            key: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Kept rows first (by ``key``, then index; stable), the rest zeroed; returns (rows, count)."""
    # int64's max as a literal: torch.iinfo is not TorchScript (a kernel calls this)
    k = (~keep).to(torch.int64) if key is None else torch.where(keep, key, 9223372036854775807)
    order = torch.sort(k, stable=True).indices
    n = keep.sum()
    out = rows[order]
    live = torch.arange(rows.shape[0], device=rows.device) < n
    # where, not a product: rows past a count may hold anything, NaN included
    return torch.where(live.reshape([-1] + [1] * (rows.dim() - 1)), out, torch.zeros_like(out)), n


# ---- polylines (reference lines) ----------------------------------------------------------------
# A NamedTuple, not a dataclass: TorchScript kernels take and return it. Declared by call, so that
# its field types are objects, not the strings ``from __future__ import annotations`` makes of a class
# body's (TorchScript would look those up in the calling kernel's signature, where "torch" is not).
Polyline = NamedTuple("Polyline", [
    ("p", torch.Tensor),        # (K, 2) vertices; rows past the count repeat the last valid vertex
    ("vec", torch.Tensor),      # (K-1, 2)
    ("length", torch.Tensor),   # (K-1,)  zero past the last valid segment
    ("s0", torch.Tensor),       # (K-1,)  arc length at each segment's start
    ("heading", torch.Tensor),  # (K-1,)  segment headings (past the end: the last valid one)
    ("last", torch.Tensor),     # () index of the last valid segment
])
Polyline.__doc__ = "A centerline as tensors: vertices, segment vectors, lengths, cumulative arc length, headings."


def polyline(route: torch.Tensor, count: torch.Tensor, fallback_pose: Optional[torch.Tensor] = None,
             rows: int = 0) -> Polyline:
    """Prepare ``route[:count]``; with fewer than 2 valid vertices, a straight line along the pose.

    ``rows``: at least this many vertices (the last valid one repeated: zero-length segments past the
    end), so that a polyline fits a buffer of fixed size; every value the line gives is the same.
    """
    pts = route.float()
    if pts.shape[0] < 2:  # a static shape fact, known when the graph is built: pad to one segment
        pts = torch.cat((pts, torch.zeros(2 - pts.shape[0], 2, device=route.device)))
    k = pts.shape[0]
    n = count.reshape(()).to(torch.long).clamp(max=min(k, route.shape[0]))
    # On the host reading the count costs nothing, and a route of 2+ vertices (the usual case) needs
    # no fallback line: it is built only where it may be used (always on CUDA: capturable).
    if fallback_pose is not None and (route.device.type != "cpu" or not bool(n >= 2)):
        # A straight line through the ego pose (x, y, yaw), so a missing route still gives a reference.
        x, y, yaw = fallback_pose[0].float(), fallback_pose[1].float(), fallback_pose[2].float()
        d = torch.stack((torch.cos(yaw), torch.sin(yaw)))
        ramp = torch.linspace(-50.0, 450.0, k, device=route.device)[:, None]
        ok = n >= 2
        pts = torch.where(ok, pts, torch.stack((x, y)) + ramp * d)
        n = torch.where(ok, n, torch.full_like(n, k))
    idx = torch.minimum(torch.arange(max(k, rows), device=route.device), (n - 1).clamp(min=0))
    p = pts[idx]
    vec = p[1:] - p[:-1]
    length = torch.linalg.vector_norm(vec, 2, dim=1)   # what vec.norm(dim=1) runs, in TorchScript too
    s_end = torch.cumsum(length, 0)
    s0 = s_end - length
    last = (n - 2).clamp(min=0, max=k - 2)
    heading = torch.atan2(vec[:, 1], vec[:, 0])
    seg = torch.arange(p.shape[0] - 1, device=route.device)
    # index_select, not heading[last]: indexing by a 0-dim tensor reads it on the host (a sync on CUDA)
    heading = torch.where(seg > last, heading.index_select(0, last.reshape(1)), heading)
    return Polyline(p, vec, length, s0, heading, last)


def to_frenet(pl: Polyline, xy: torch.Tensor, s_guess: Optional[torch.Tensor] = None,
              window: int = 32) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Project points (P, 2) onto the polyline: arc length s, signed offset d (left +), lane heading.

    The nearest segment wins; the first and last valid segments extend to infinity so points
    beyond either end get s < 0 or s > length rather than snapping to the end vertex. With
    ``s_guess`` (P,) only ``window`` segments around each guess are searched, (P, window) instead
    of (P, K): how the planner projects every predicted obstacle position cheaply.
    """
    if s_guess is None:
        s_n = pl.vec.shape[0]
        idx = torch.arange(s_n, device=xy.device)[None, :]                              # (1, S)
        # Every segment in order: the polyline's own rows as (1, S) views, not gathered copies.
        vx, vy, ln = pl.vec[None, :, 0], pl.vec[None, :, 1], pl.length[None, :]
        px, py = pl.p[None, :s_n, 0], pl.p[None, :s_n, 1]
    else:
        centre, _ = _locate(pl, s_guess)
        idx = centre[:, None] + torch.arange(-(window // 2), window - window // 2, device=xy.device)
        idx = torch.minimum(idx.clamp(min=0), pl.last)                                   # (P, W)
        vx, vy, ln = pl.vec[idx, 0], pl.vec[idx, 1], pl.length[idx]
        px, py = pl.p[idx, 0], pl.p[idx, 1]
    rx = xy[:, 0:1] - px
    ry = xy[:, 1:2] - py
    t = (rx * vx + ry * vy) / (ln * ln).clamp(min=1e-9)
    lo = torch.where(idx == 0, -math.inf, 0.0)
    hi = torch.where(idx == pl.last, math.inf, 1.0)
    t = torch.maximum(torch.minimum(t, hi), lo)
    dist2 = torch.where(idx <= pl.last, (rx - t * vx) ** 2 + (ry - t * vy) ** 2, math.inf)
    j = dist2.argmin(dim=1, keepdim=True)
    i, ti = _pick(idx, dist2, j), _pick(t, dist2, j)
    s = pl.s0[i] + ti * pl.length[i]
    d = (pl.vec[i, 0] * _pick(ry, dist2, j) - pl.vec[i, 1] * _pick(rx, dist2, j)) / pl.length[i].clamp(min=1e-9)
    return s, d, heading_at(pl, i, ti)


def _pick(a: torch.Tensor, like: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """Row-wise entries j (P, 1) of ``a`` broadcast to ``like`` (P, W): the nearest segment's values."""
    return a.expand_as(like).gather(1, j)[:, 0]


def heading_at(pl: Polyline, i: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Heading blended linearly between segment midpoints, so it turns smoothly at vertices."""
    prev = (i - 1).clamp(min=0)
    nxt = torch.minimum(i + 1, pl.last)
    h = pl.heading[i]
    tc = t.clamp(0.0, 1.0) - 0.5
    other = torch.where(tc >= 0, pl.heading[nxt], pl.heading[prev])
    return h + wrap_angle(other - h) * tc.abs()


def _locate(pl: Polyline, s: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Segment index and fraction along it (outside [0, 1] only beyond the ends) of arc lengths s."""
    flat = s.reshape(-1)
    i = torch.searchsorted(pl.s0.contiguous(), flat.contiguous(), right=True) - 1
    i = torch.minimum(i.clamp(min=0), pl.last)
    return i, (flat - pl.s0[i]) / pl.length[i].clamp(min=1e-9)


def frenet_frame(pl: Polyline, s: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Map frame x, y of the reference line and its heading at arc lengths s (any shape)."""
    i, t = _locate(pl, s)
    h = heading_at(pl, i, t)
    base = pl.p[i] + t[:, None] * pl.vec[i]
    return base[:, 0].reshape(s.shape), base[:, 1].reshape(s.shape), h.reshape(s.shape)


def from_frenet(pl: Polyline, s: torch.Tensor, d: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Map frame x, y and lane heading at arc length s and lateral offset d (any shape)."""
    bx, by, h = frenet_frame(pl, s)
    return bx - torch.sin(h) * d, by + torch.cos(h) * d, h


def curvature(pl: Polyline, s: torch.Tensor) -> torch.Tensor:
    """Curvature (1/m, left +) at arc lengths s: the rate of the blended heading of ``heading_at``.

    A point at offset d moves ``1 - curvature * d`` metres per metre of arc length.
    """
    i, t = _locate(pl, s)
    prev = (i - 1).clamp(min=0)
    nxt = torch.minimum(i + 1, pl.last)
    k_next = wrap_angle(pl.heading[nxt] - pl.heading[i]) / (0.5 * (pl.length[i] + pl.length[nxt])).clamp(min=1e-6)
    k_prev = wrap_angle(pl.heading[i] - pl.heading[prev]) / (0.5 * (pl.length[prev] + pl.length[i])).clamp(min=1e-6)
    return torch.where(t >= 0.5, k_next, k_prev).reshape(s.shape)


# ---- polynomials (Frenet trajectories) ----------------------------------------------------------
def quintic(p0: torch.Tensor, v0: torch.Tensor, a0: torch.Tensor, p1: torch.Tensor, v1: torch.Tensor,
            a1: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    """Coefficients (..., 6) of the quintic from (p0, v0, a0) at t=0 to (p1, v1, a1) at t=T."""
    dp = p1 - p0 - v0 * T - 0.5 * a0 * T ** 2
    dv = v1 - v0 - a0 * T
    da = a1 - a0
    c3 = (10 * dp - 4 * dv * T + 0.5 * da * T ** 2) / T ** 3
    c4 = (-15 * dp + 7 * dv * T - da * T ** 2) / T ** 4
    c5 = (6 * dp - 3 * dv * T + 0.5 * da * T ** 2) / T ** 5
    return torch.stack(torch.broadcast_tensors(p0, v0, 0.5 * a0, c3, c4, c5), dim=-1)


def quartic(p0: torch.Tensor, v0: torch.Tensor, a0: torch.Tensor, v1: torch.Tensor, a1: torch.Tensor,
            T: torch.Tensor) -> torch.Tensor:
    """Coefficients (..., 6; c5 = 0) of the quartic from (p0, v0, a0) to velocity v1, accel a1 at T."""
    dv = v1 - v0 - a0 * T
    da = a1 - a0
    c3 = (3 * dv - da * T) / (3 * T ** 2)
    c4 = (T * da - 2 * dv) / (4 * T ** 3)
    return torch.stack(torch.broadcast_tensors(p0, v0, 0.5 * a0, c3, c4, torch.zeros_like(c4)), dim=-1)


def poly_eval(c: torch.Tensor, t: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    """Value, 1st, 2nd and 3rd derivative (4, ..., N) at times t (N,), held past T at constant velocity.

    ``c`` is (..., 6) and ``T`` (...,). Beyond T the end state continues with its velocity and
    zero acceleration: a lateral move has ended, a speed change has settled.
    """
    powers, after, past = poly_times(t, T)
    return poly_eval_at(c, powers, after, past)


def poly_times(t: torch.Tensor, T: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What ``poly_eval`` needs of the times alone (fixed times: prepare once): the powers (..., N, 6)
    of t held at T, where t is past T, and by how much."""
    tc = torch.minimum(t, T[..., None])
    return torch.stack([tc ** k for k in range(6)], dim=-1), t > T[..., None], t - tc


def poly_eval_at(c: torch.Tensor, powers: torch.Tensor, after: torch.Tensor, past: torch.Tensor) -> torch.Tensor:
    """``poly_eval`` at the times ``poly_times`` prepared."""
    k = torch.arange(1, 6, dtype=c.dtype, device=c.device)
    zero = torch.zeros_like(c[..., :1])
    d1 = torch.cat((c[..., 1:] * k, zero), -1)
    d2 = torch.cat((d1[..., 1:] * k, zero), -1)
    d3 = torch.cat((d2[..., 1:] * k, zero), -1)
    coeffs: List[torch.Tensor] = [c, d1, d2, d3]
    vals = torch.stack([(powers * cc[..., None, :]).sum(-1) for cc in coeffs])
    extra = past * vals[1]
    return torch.stack((vals[0] + extra, vals[1], torch.where(after, 0.0, vals[2]),
                        torch.where(after, 0.0, vals[3])))


# ---- road layout --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RoadLayout:
    """Lanes as lateral offsets of their centres from the route (d, left +) and travel directions.

    Matches ``rt_runtime.sim.road.Road``: the route is the road's reference line, lane 0 the
    rightmost, ``directions[i]`` +1 along the route and -1 against it.
    """

    lane_width: float = 3.5
    centers: tuple[float, ...] = (-3.5, 0.0, 3.5)
    directions: tuple[int, ...] = (1, 1, 1)
    speed_limit: float | None = None   # m/s; None: not known (the planner keeps its own target speed)

    @classmethod
    def like(cls, road: object) -> "RoadLayout":
        """From a sim ``Road`` (lane_width, directions, lane_center(i), speed_limit) or another RoadLayout."""
        if isinstance(road, RoadLayout):
            return road
        dirs = tuple(int(d) for d in getattr(road, "directions"))
        limit = getattr(road, "speed_limit", None)
        return cls(float(getattr(road, "lane_width")),
                   tuple(float(road.lane_center(i)) for i in range(len(dirs))), dirs,  # type: ignore[attr-defined]
                   float(limit) if limit is not None else None)

    @classmethod
    def uniform(cls, n_lanes: int = 3, lane_width: float = 3.5) -> "RoadLayout":
        """n same-direction lanes centred on the route."""
        return cls(lane_width, tuple((i + 0.5 - n_lanes / 2) * lane_width for i in range(n_lanes)), (1,) * n_lanes)


def route_from_road(road: object, s_from: float = 0.0, s_to: float | None = None,
                    max_points: int = 512) -> torch.Tensor:
    """Sample a sim ``Road``'s reference line into a route polyline (K <= max_points, 2), float32."""
    import numpy as np

    end = float(getattr(road, "length")) if s_to is None else s_to
    n = max(2, min(max_points, int(math.ceil((end - s_from) / 1.0)) + 1))  # 1 m spacing when it fits
    x, y, _ = road.pose(np.linspace(s_from, end, n))  # type: ignore[attr-defined]
    return torch.tensor(np.stack([x, y], 1), dtype=torch.float32)
