"""The planner's kernels: the Frenet sampling planner's op bodies as TorchScript (``rt_runtime.exec.kernel``).

``pipelines.planning`` builds the ops and documents the method; these are their bodies, one kernel
per op, reading ``PlannerParams``' numbers as ``Knobs`` (TorchScript takes no dataclass). Columns are
indexed by number (TorchScript reads no module-level variable), so the order they assume is checked
when this module is imported.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Tuple

import torch
from torch import Tensor

from rt_runtime.exec import kernel
from pipelines import schema
from pipelines.geometry import (Polyline, curvature, frenet_frame, from_frenet, poly_eval, polyline, quartic, quintic,
                                to_frenet, valid_mask)

if (schema.ODOM_COLS[:4] != ("x", "y", "yaw", "vx") or schema.TRACK_COLS[2:4] != ("x", "y")
        or schema.TRACK_COLS[6:9] != ("yaw", "l", "w")):
    raise ImportError("pipelines.planning_kernels: the kernels' column numbers no longer match pipelines.schema")


class Knobs(NamedTuple):
    """``PlannerParams``' scalars by the same names, plus the road's lane width, for the kernels."""

    target_speed: float
    ego_length: float
    ego_width: float
    safety_margin: float
    max_accel: float
    max_decel: float
    max_lat_accel: float
    max_jerk: float
    mrm_decel: float
    tail_decel: float
    other_decel: float
    w_jerk: float
    w_lane: float
    w_change: float
    w_speed: float
    w_clear: float
    clear_sigma: float
    w_lead: float
    w_rss: float
    w_rear: float
    rss_from_s: float
    rss_response: float
    rss_standstill: float
    lead_range: float
    lane_width: float
    tail_steps: int
    dt: float               # schema.DT_S, the trajectory's step


def _circles(length: Tensor, width: Tensor) -> Tuple[Tensor, Tensor]:
    """Three circles covering a length x width box: centre offsets (..., 3) along heading, radius."""
    k = torch.arange(-1, 2, device=length.device, dtype=length.dtype)
    return length[..., None] / 3 * k, torch.sqrt((length / 6) ** 2 + (width / 2) ** 2)


def _ego_frenet(odom: Tensor, route: Tensor,
                route_count: Tensor) -> Tuple[Polyline, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The reference line and the ego on it: s0, d0, s', d', speed (0-dim tensors)."""
    pl = polyline(route, route_count, fallback_pose=odom)
    xy = odom[0:2].float()[None]                         # x, y
    s0, d0, psi = to_frenet(pl, xy)
    dpsi = odom[2].float() - psi[0]                      # yaw
    v = odom[3].float().clamp(min=0.0)                   # vx
    return pl, s0[0], d0[0], v * torch.cos(dpsi), v * torch.sin(dpsi), v


@kernel
def _stop(odom: Tensor, route: Tensor, route_count: Tensor, t: Tensor, mrm_decel: float, traj: Tensor) -> None:
    """The minimal-risk stop's body: brake at ``mrm_decel`` at the current offset, into ``traj``."""
    pl, s0, d0, _vs, _vd, v0 = _ego_frenet(odom, route, route_count)
    tc = torch.minimum(t, v0 / mrm_decel)
    travelled = v0 * tc - 0.5 * mrm_decel * tc ** 2                   # along our lane, at offset d0
    # Arc length on the reference advances by 1 / (1 - kappa d0) per metre driven at offset d0.
    stretch = 1.0 / (1.0 - curvature(pl, s0 + travelled) * d0).clamp(min=0.2)
    s = s0 + torch.cat((travelled[:1], torch.diff(travelled) * stretch[1:])).cumsum(0)
    x, y, h = from_frenet(pl, s, d0.expand_as(s))
    torch.stack((x, y, h, (v0 - mrm_decel * t).clamp(min=0.0), t), dim=1, out=traj)


def _initial_accel(last: Tensor, odom: Tensor, max_decel: float, max_accel: float, dt: float) -> Tensor:
    """``initial_accel`` with the limits as floats (what the candidates kernel calls)."""
    dist = torch.linalg.vector_norm(last[:, :2] - odom[0:2].float(), 2, dim=1)   # = .norm(dim=1); odom x, y
    # A (1,) index and index_select, not last[i]: indexing by a 0-dim tensor reads it on the host.
    i = dist[:-1].argmin().reshape(1)
    speed = last[:, 3]
    a = (speed.index_select(0, i + 1) - speed.index_select(0, i)) / dt
    ok = (dist.index_select(0, i) < 1.0) & (last[1, 4] > 0)
    return torch.where(ok, a, 0.0).clamp(-max_decel, max_accel).reshape(())


@kernel
def _build(odom: Tensor, route: Tensor, route_count: Tensor, last: Tensor, allowed: Tensor, d1: Tensor,
           lat_d1: Tensor, lat_tm: Tensor, lon_v1: Tensor, lon_tm: Tensor, lat_of: Tensor, lon_of: Tensor, t: Tensor,
           frac: Tensor, d_lo: float, d_hi: float, q: Knobs, cand: Tensor, cost: Tensor) -> None:
    """The candidates' body: every lateral and speed profile, checked and priced, gathered per candidate."""
    c, N = cand.shape[0], t.shape[0]            # candidates, TRAJ_POINTS
    pl, s0, d0, vs0, vd0, _ = _ego_frenet(odom, route, route_count)
    zl, zs = torch.zeros_like(lat_d1), torch.zeros_like(lon_v1)
    lat = poly_eval(quintic(d0 + zl, vd0 + zl, zl, lat_d1, zl, zl, lat_tm), t, lat_tm)
    d, dd, ddd, dddd = lat[0], lat[1], lat[2], lat[3]     # TorchScript unpacks no tensor
    a0 = _initial_accel(last, odom, q.max_decel, q.max_accel, q.dt)
    lon = poly_eval(quartic(s0 + zs, vs0 + zs, a0 + zs, lon_v1, zs, lon_tm), t, lon_tm)
    s, ds, dds, ddds = lon[0], lon[1], lon[2], lon[3]
    excess = torch.maximum(d - d_hi, d_lo - d).clamp(min=0.0)
    lat_ok = ((ddd.abs() <= q.max_lat_accel) & (dddd.abs() <= q.max_jerk)
              & (excess <= excess[:, :1] + 1e-3)).all(dim=1)
    lon_ok = ((dds >= -q.max_decel) & (dds <= q.max_accel) & (ds >= -0.1) & (ddds.abs() <= q.max_jerk)).all(dim=1)
    dd_c, ds_c = dd[lat_of], ds[lon_of]
    ok = lat_ok[lat_of] & lon_ok[lon_of] & (dd_c.abs() <= 0.6 * ds_c.clamp(min=0.0) + 0.3).all(dim=1)
    lane_err = (d1[:, None] - allowed[None, :]).abs().min(dim=1)[0]
    own = allowed.index_select(0, (d0 - allowed).abs().argmin().reshape(1))   # not allowed[0-dim]: a host read
    j = q.w_jerk * (ddds[lon_of] ** 2 + dddd[lat_of] ** 2).mean(dim=1) + q.w_lane * lane_err ** 2 \
        + q.w_change * (d1 - own).abs() / q.lane_width
    cost.copy_(torch.where(ok, j, math.inf))
    # Braking tail after the horizon: straight on along the lane at the final offset.
    v_end = ds[:, -1].clamp(min=0.0)
    s_tail = s[:, -1:] + frac[None, :] * (v_end ** 2 / (2 * q.tail_decel))[:, None]
    ss, dl = torch.cat((s, s_tail), 1), torch.cat((d, d[:, -1:].expand(-1, q.tail_steps)), 1)
    # The lane frame along each speed profile, then offset sideways per candidate.
    bx, by, h = frenet_frame(pl, ss)
    sin_h, cos_h = torch.sin(h)[lon_of], torch.cos(h)[lon_of]
    dl_c = dl[lat_of]
    x, y, h = bx[lon_of] - sin_h * dl_c, by[lon_of] + cos_h * dl_c, h[lon_of]
    # Speed along the driven curve: the reference's rate scaled by 1 - kappa d, plus the lateral rate.
    ds_lane = ds_c * (1.0 - curvature(pl, s)[lon_of] * d[lat_of])
    yaw = h[:, :N] + torch.atan2(dd_c, ds_lane.clamp(min=0.01))
    speed = torch.hypot(ds_lane, dd_c)
    torch.stack((x, y, torch.cat((yaw, h[:, N:]), 1), torch.cat((speed, speed.new_zeros([c, q.tail_steps])), 1),
                 ss[lon_of], dl_c), -1, out=cand)


@kernel
def _clearance(cand: Tensor, base: Tensor, tracks: Tensor, pred: Tensor, n: Tensor, odom: Tensor, route: Tensor,
               route_count: Tensor, frac: Tensor, ego_off: Tensor, ego_r: Tensor, on_cpu: bool, k_rss: int, vt: float,
               half_lane: float, q: Knobs, total: Tensor) -> None:
    """The clearance body: overlap, RSS distances and speed tracking of every candidate, into ``total``."""
    c, e, N = cand.shape[0], frac.shape[0], pred.shape[1] + 1   # candidates, tail steps, TRAJ_POINTS
    origin = odom[0:2].float()                  # centre coordinates: cdist stays precise
    if on_cpu:  # reading the count costs nothing on the host; on CUDA all slots stay (capturable)
        m = int(n[0])
        tracks, pred = tracks[:m], pred[:m]
    live = valid_mask(n, tracks.shape[0])
    path = torch.cat((tracks[:, None, 2:4], pred), 1)                 # (M, N, 2) map
    step = path[:, 1:] - path[:, :-1]
    speed = torch.linalg.vector_norm(step, 2, dim=-1) / q.dt   # = step.norm(dim=-1)
    # Heading of motion; a standing object keeps its box's yaw.
    head = torch.where(speed > 0.5, torch.atan2(step[..., 1], step[..., 0]), tracks[:, 6, None])      # yaw
    head, speed = torch.cat((head[:, :1], head), 1), torch.cat((speed[:, :1], speed), 1)   # (M, N)
    # Obstacles in the lane frame: who is ahead of whom, and in which lane, follows the road.
    # Project the positions now by full search, the predicted ones near where the lane speed
    # puts them (a window of segments, not the whole route).
    pl = polyline(route, route_count, odom)
    s_now, d_now, h_now = to_frenet(pl, path[:, 0])
    v_s = speed[:, :1] * torch.cos(head[:, :1] - h_now[:, None])
    guess = s_now[:, None] + v_s * torch.arange(N, device=path.device) * q.dt
    so, do, lane_h = to_frenet(pl, path.reshape(-1, 2), guess.reshape(-1))
    so, do, lane_h = so.view(path.shape[:2]), do.view(path.shape[:2]), lane_h.view(path.shape[:2])
    dpsi = head - lane_h
    ln, wd = tracks[:, 7, None], tracks[:, 8, None]                                      # l, w
    half_len = 0.5 * (ln * torch.cos(dpsi).abs() + wd * torch.sin(dpsi).abs())
    half_wid = 0.5 * (ln * torch.sin(dpsi).abs() + wd * torch.cos(dpsi).abs())
    v_lane = (speed * torch.cos(dpsi)).clamp(min=0.0)                                   # (M, N)

    # 1. Overlap: three circles each, all candidates x obstacles x steps, one cdist per step.
    # After the horizon a braking tail: the obstacle brakes hard, the ego at tail_decel.
    tail = path[:, -1:] + (frac[None, :, None] * (speed[:, -1] ** 2 / (2 * q.other_decel))[:, None, None]
                           * torch.stack((torch.cos(head[:, -1]), torch.sin(head[:, -1])), -1)[:, None])
    ob_xy, ob_h = torch.cat((path, tail), 1) - origin, torch.cat((head, head[:, -1:].expand(-1, e)), 1)
    off, r_obs = _circles(tracks[:, 7].clamp(min=0.3), tracks[:, 8].clamp(min=0.3))
    ob = ob_xy[:, :, None] + off[:, None, :, None] * torch.stack((torch.cos(ob_h), torch.sin(ob_h)), -1)[:, :, None]
    eg = cand[..., None, :2] - origin + ego_off[:, None] * torch.stack(
        (torch.cos(cand[..., 2]), torch.sin(cand[..., 2])), -1)[..., None, :]         # (C, T, 3, 2)
    steps = cand.shape[1]
    # The matmul form is exact enough: coordinates are ego-centred (|x| < ~200 m).
    dist = torch.cdist(eg.permute(1, 2, 0, 3).reshape(steps, -1, 2), ob.permute(1, 2, 0, 3).reshape(steps, -1, 2),
                       compute_mode="use_mm_for_euclid_dist").view(steps, 3, c, 3, -1)
    near = torch.minimum(torch.minimum(dist[:, 0], dist[:, 1]), dist[:, 2])             # (T, C, 3, M)
    near = torch.minimum(torch.minimum(near[:, :, 0], near[:, :, 1]), near[:, :, 2])    # (T, C, M)
    gap = torch.where(live, near - ego_r - r_obs, math.inf)
    collide = (gap < q.safety_margin).any(dim=2).any(dim=0)
    risk = ((1.0 - gap / (3 * q.clear_sigma)).clamp(min=0.0) ** 2).sum(dim=(0, 2)) / steps   # a bump, no exp

    # 2. RSS following distance to whoever is ahead in the corridor, every step (C, N, M):
    # v rho + v^2 / 2 a_ego - v_lead^2 / 2 a_lead + standstill gap, against the bumper gap.
    se, de, v = cand[:, :N, 4:5], cand[:, :N, 5:6], cand[:, :N, 3:4]
    along = so.T[None] - se
    bumper = along - q.ego_length / 2 - half_len.T[None]
    ahead = live & (along > 0) & ((do.T[None] - de).abs() < q.ego_width / 2 + half_wid.T[None] + 0.3)
    need = v * q.rss_response + v ** 2 / (2 * q.tail_decel) - v_lane.T[None] ** 2 / (2 * q.other_decel) \
        + q.rss_standstill
    short = torch.where(ahead, (need - bumper).clamp(min=0.0), 0.0)
    rss = (short ** 2).sum(dim=(1, 2)) / N
    # Hard from rss_from_s on, but only where worse than now: what is short already (a cut-in,
    # a standstill close behind) cannot be undone and must not force the fallback.
    unsafe = (short[:, k_rss:] > short[:, :1] + 0.1).flatten(1).any(dim=1)
    # The same distance for whoever follows in the corridor (mirrored: can it stop if we brake at
    # tail_decel?), priced where it grows beyond now: no cutting in front of a closing car, no
    # braking harder than a close follower can. Soft only: the minimal-risk stop brakes too.
    gap_b = -along - q.ego_length / 2 - half_len.T[None]
    behind = live & (along < 0) & ((do.T[None] - de).abs() < q.ego_width / 2 + half_wid.T[None] + 0.3)
    need_b = v_lane.T[None] * q.rss_response + v_lane.T[None] ** 2 / (2 * q.other_decel) \
        - v ** 2 / (2 * q.tail_decel) + q.rss_standstill
    short_b = torch.where(behind, (need_b - gap_b).clamp(min=0.0), 0.0)
    rear = (((short_b - short_b[:, :1]).clamp(min=0.0)) ** 2).sum(dim=(1, 2)) / N

    # 3. Speed tracking aims at what the lane a candidate ends in allows: its slowest road user
    # ahead of the ego and within lead_range past the candidate's end (queue behind a slower
    # leader); w_lead prices that lane's deficit, the incentive to overtake.
    s_end, d_end = cand[:, N - 1, 4:5], cand[:, N - 1, 5:6]
    lead = live & (so[:, -1] > cand[:, :1, 4]) & (so[:, -1] < s_end + q.lead_range) \
        & ((do[:, -1] - d_end).abs() < half_lane)
    v_ref = torch.where(lead, v_lane[:, -1].clamp(max=vt), vt).amin(dim=1).clamp(max=vt) if lead.shape[1] > 0 \
        else torch.full((c,), vt, device=cand.device)
    vc = cand[:, :N, 3]
    speed_cost = q.w_speed * (((vc[:, -1] - v_ref) / vt) ** 2 + (((vc - v_ref[:, None]) / vt) ** 2).mean(dim=1))
    total.copy_(torch.where(collide | unsafe, math.inf, base + speed_cost + q.w_clear * risk
                            + q.w_lead * ((vt - v_ref) / vt) ** 2 + q.w_rss * rss + q.w_rear * rear))


@kernel
def _select(cand: Tensor, total: Tensor, mrm: Tensor, traj: Tensor, status: Tensor, plan_cost: Tensor) -> None:
    """The cheapest admissible candidate (status 0), else the minimal-risk stop (status 1)."""
    N = traj.shape[0]                                   # TRAJ_POINTS
    best_cost, best = total.min(dim=0)
    ok = torch.isfinite(best_cost)
    # index_select, not cand[best]: indexing by a 0-dim tensor reads it on the host (a sync on CUDA)
    nominal = torch.cat((cand.index_select(0, best.reshape(1))[0, :N, :4], mrm[:, 4:5]), 1)
    traj.copy_(torch.where(ok, nominal, mrm))
    status.copy_((~ok).int().view(1))
    plan_cost.copy_(best_cost.view(1))
