"""The planner's kernels: the Frenet sampling planner's op bodies (``rt_runtime.exec.kernel``: eager, jit or aot).

``pipelines.planning`` builds the ops and documents the method; these are their bodies, one kernel
per op, reading ``PlannerParams``' numbers as ``Knobs`` (plain numbers: what a compiler traces best). Columns
are indexed by number (written for TorchScript once, which read no module variable), so their order is checked
when this module is imported.
"""
from __future__ import annotations

import math
from typing import List, NamedTuple, Tuple

import torch
from torch import Tensor

from rt_runtime.exec import kernel
from pipelines import schema
from pipelines.geometry import (Polyline, curvature, frenet_frame, from_frenet, poly_eval_at, polyline, quartic,
                                quintic, to_frenet, valid_mask)

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
def _reference(odom: Tensor, route: Tensor, route_count: Tensor, tracks: Tensor, n: Tensor, on_cpu: bool,
               line: List[Tensor], ego: Tensor, track_frenet: Tensor) -> None:
    """The reference line and who is where on it, once per job for the ops after it: ``line`` (the
    ``Polyline``'s fields, padded to their buffers' size), ``ego`` (5,) s0, d0, s', d', speed and
    ``track_frenet`` (3, MAX_TRACKS) s, d, lane heading of each confirmed track now."""
    pl = polyline(route, route_count, odom, line[0].shape[0])
    if on_cpu:  # reading the count costs nothing on the host; on CUDA all slots stay (capturable)
        tracks = tracks[:int(n[0])]
    # The ego and the tracks in one search: every point is projected on its own (row by row the same).
    s, d, psi = to_frenet(pl, torch.cat((odom[0:2].float()[None], tracks[:, 2:4])))    # x, y
    dpsi = odom[2].float() - psi[0]                      # yaw
    v = odom[3].float().clamp(min=0.0)                   # vx
    line[0].copy_(pl.p)
    line[1].copy_(pl.vec)
    line[2].copy_(pl.length)
    line[3].copy_(pl.s0)
    line[4].copy_(pl.heading)
    line[5].copy_(pl.last.reshape(1))
    torch.stack((s[0], d[0], v * torch.cos(dpsi), v * torch.sin(dpsi), v), out=ego)
    track_frenet[:, :tracks.shape[0]].copy_(torch.stack((s[1:], d[1:], psi[1:])))


def _line(line: List[Tensor]) -> Polyline:
    """The ``Polyline`` in the buffers ``_reference`` wrote (a list of tensors crosses into TorchScript
    faster than a NamedTuple)."""
    return Polyline(line[0], line[1], line[2], line[3], line[4], line[5].view(()))


@kernel
def _stop(odom: Tensor, route: Tensor, route_count: Tensor, t: Tensor, mrm_decel: float, traj: Tensor) -> None:
    """The minimal-risk stop's body: brake at ``mrm_decel`` at the current offset, into ``traj``."""
    pl, s0, d0, _vs, _vd, v0 = _ego_frenet(odom, route, route_count)
    _brake(pl, s0, d0, v0, t, mrm_decel, traj)


@kernel
def _stop_on(line: List[Tensor], ego: Tensor, t: Tensor, mrm_decel: float, traj: Tensor) -> None:
    """``_stop`` on the reference line and ego state ``_reference`` prepared."""
    _brake(_line(line), ego[0], ego[1], ego[4], t, mrm_decel, traj)


def _brake(pl: Polyline, s0: Tensor, d0: Tensor, v0: Tensor, t: Tensor, mrm_decel: float, traj: Tensor) -> None:
    """Brake at ``mrm_decel`` from (s0, d0) at speed v0 along ``pl``, into ``traj``."""
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
def _build(odom: Tensor, line: List[Tensor], ego: Tensor, last: Tensor, allowed: Tensor, d1: Tensor,
           lat_d1: Tensor, lon_v1: Tensor, tm: Tensor, at: Tuple[Tensor, Tensor, Tensor], lane_cost: Tensor,
           lat_of: Tensor, lon_of: Tensor, t: Tensor, frac: Tensor, d_lo: float, d_hi: float, q: Knobs, cand: Tensor,
           cost: Tensor) -> None:
    """The candidates' body: every lateral and speed profile, checked and priced, gathered per candidate.

    ``tm`` holds the lateral profiles' manoeuvre times, then the speed profiles'; ``at`` is
    ``poly_times(t, tm)`` and ``lane_cost`` each candidate's lane-keeping cost (both fixed by the grid).
    """
    c, N = cand.shape[0], t.shape[0]            # candidates, TRAJ_POINTS
    pl, s0, d0, vs0, vd0 = _line(line), ego[0], ego[1], ego[2], ego[3]
    nl = lat_d1.shape[0]                        # lateral profiles
    lat_tm, lon_tm = tm[:nl], tm[nl:]
    zl, zs = torch.zeros_like(lat_d1), torch.zeros_like(lon_v1)
    a0 = _initial_accel(last, odom, q.max_decel, q.max_accel, q.dt)
    # Both kinds of profile evaluated at once (row by row the same numbers as one call each).
    prof = poly_eval_at(torch.cat((quintic(d0 + zl, vd0 + zl, zl, lat_d1, zl, zl, lat_tm),
                                   quartic(s0 + zs, vs0 + zs, a0 + zs, lon_v1, zs, lon_tm))), at[0], at[1], at[2])
    lat, lon = prof[:, :nl], prof[:, nl:]
    d, ddd, dddd = lat[0], lat[2], lat[3]     # TorchScript unpacks no tensor
    s, ds, dds, ddds = lon[0], lon[1], lon[2], lon[3]
    excess = torch.maximum(d - d_hi, d_lo - d).clamp(min=0.0)
    lat_ok = ((ddd.abs() <= q.max_lat_accel) & (dddd.abs() <= q.max_jerk)
              & (excess <= excess[:, :1] + 1e-3)).all(dim=1)
    lon_ok = ((dds >= -q.max_decel) & (dds <= q.max_accel) & (ds >= -0.1) & (ddds.abs() <= q.max_jerk)).all(dim=1)
    # Per candidate (4, C, N): d and its 3 derivatives, s and its (one gather each; index_select, not
    # x[index]: no advanced-indexing overhead).
    lat_c, lon_c = lat.index_select(1, lat_of), lon.index_select(1, lon_of)
    dd_c, ds_c = lat_c[1], lon_c[1]
    ok = lat_ok.index_select(0, lat_of) & lon_ok.index_select(0, lon_of) \
        & (dd_c.abs() <= 0.6 * ds_c.clamp(min=0.0) + 0.3).all(dim=1)
    own = allowed.index_select(0, (d0 - allowed).abs().argmin().reshape(1))   # not allowed[0-dim]: a host read
    j = q.w_jerk * (lon_c[3] ** 2 + lat_c[3] ** 2).mean(dim=1) + lane_cost \
        + q.w_change * (d1 - own).abs() / q.lane_width
    cost.copy_(torch.where(ok, j, math.inf))
    # Braking tail after the horizon: straight on along the lane at the final offset.
    v_end = ds[:, -1].clamp(min=0.0)
    s_tail = s[:, -1:] + frac[None, :] * (v_end ** 2 / (2 * q.tail_decel))[:, None]
    ss, dl = torch.cat((s, s_tail), 1), torch.cat((d, d[:, -1:].expand(-1, q.tail_steps)), 1)
    # The lane frame along each speed profile, then offset sideways per candidate.
    bx, by, h = frenet_frame(pl, ss)
    frame = torch.stack((torch.sin(h), torch.cos(h), bx, by, h, ss)).index_select(1, lon_of)   # per candidate
    sin_h, cos_h = frame[0], frame[1]
    dl_c = dl.index_select(0, lat_of)
    x, y, h = frame[2] - sin_h * dl_c, frame[3] + cos_h * dl_c, frame[4]
    # Speed along the driven curve: the reference's rate scaled by 1 - kappa d, plus the lateral rate.
    ds_lane = ds_c * (1.0 - curvature(pl, s).index_select(0, lon_of) * lat_c[0])
    yaw = h[:, :N] + torch.atan2(dd_c, ds_lane.clamp(min=0.01))
    speed = torch.hypot(ds_lane, dd_c)
    torch.stack((x, y, torch.cat((yaw, h[:, N:]), 1), torch.cat((speed, speed.new_zeros([c, q.tail_steps])), 1),
                 frame[5], dl_c), -1, out=cand)


def _sq_dists(x1_: Tensor, x2: Tensor, out: Tensor) -> Tensor:
    """Squared distances (B, P, Q) of points (B, P, 2) and (B, Q, 2), the first given as
    ``(-2 x, -2 y, x^2 + y^2, 1)`` (B, P, 4): ``torch.cdist`` with ``compute_mode="use_mm_for_euclid_dist"``
    before its final ``clamp_min_(0).sqrt_()``, op for op (aten's ``_euclidean_dist``; the sum of two
    squares is the same float as its ``pow(2).sum(-1)``), so that the same bits come out. Written into
    the front of ``out`` (flat, planned memory: a fresh tensor this large costs page faults every job)."""
    x2_norm = x2.pow(2).sum(-1, keepdim=True)
    x2_ = torch.cat((x2, torch.ones_like(x2_norm), x2_norm), -1)
    b, p, q = x1_.shape[0], x1_.shape[1], x2.shape[1]
    return torch.matmul(x1_, x2_.transpose(-2, -1), out=out[:b * p * q].view(b, p, q))


@kernel
def _clearance(cand: Tensor, base: Tensor, tracks: Tensor, pred: Tensor, n: Tensor, odom: Tensor, line: List[Tensor],
               track_frenet: Tensor, frac: Tensor, ego_off: Tensor, ego_r: Tensor, on_cpu: bool, k_rss: int, vt: float,
               half_lane: float, q: Knobs, total: Tensor, dist_ws: Tensor) -> None:
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
    pl = _line(line)
    now = track_frenet[:, :tracks.shape[0]]             # s, d, lane heading now: ``_reference``'s
    s_now, h_now = now[0], now[2]
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
    # The ego's circles as the distance matmul reads them, (T, 3, C) each of x and y: every op runs
    # along the candidates (a trailing dim of 2 makes an op many times slower), the same numbers.
    ct = cand.transpose(0, 1)                                                           # (T, C, 6)
    off = ego_off[None, :, None]
    ex = (ct[..., 0] - origin[0])[:, None] + off * torch.cos(ct[..., 2])[:, None]       # x, yaw
    ey = (ct[..., 1] - origin[1])[:, None] + off * torch.sin(ct[..., 2])[:, None]       # y, yaw
    steps = cand.shape[1]
    # The matmul form is exact enough: coordinates are ego-centred (|x| < ~200 m). The nearest of
    # the 3 x 3 circle pairs is taken on the squared distances, then clamped and rooted: both are
    # monotone, so this is the minimum of cdist's distances bit for bit, at a ninth of the roots.
    eg_ = torch.stack((ex.mul(-2), ey.mul(-2), ex.pow(2) + ey.pow(2), torch.ones_like(ex)), -1).view(steps, -1, 4)
    dist2 = _sq_dists(eg_, ob.permute(1, 2, 0, 3).reshape(steps, -1, 2), dist_ws).view(steps, 3, c, 3, -1)
    near = torch.minimum(torch.minimum(dist2[:, 0], dist2[:, 1]), dist2[:, 2])          # (T, C, 3, M)
    near = torch.minimum(torch.minimum(near[:, :, 0], near[:, :, 1]), near[:, :, 2])    # (T, C, M)
    near = near.clamp_min_(0.0).sqrt_()
    gap = torch.where(live, near - ego_r - r_obs, math.inf)
    collide = (gap < q.safety_margin).any(dim=2).any(dim=0)
    risk = ((1.0 - gap / (3 * q.clear_sigma)).clamp(min=0.0) ** 2).sum(dim=(0, 2)) / steps   # a bump, no exp

    # 2. RSS following distance to whoever is ahead in the corridor, every step (C, N, M):
    # v rho + v^2 / 2 a_ego - v_lead^2 / 2 a_lead + standstill gap, against the bumper gap.
    se, de, v = cand[:, :N, 4:5], cand[:, :N, 5:6], cand[:, :N, 3:4]
    along = so.T[None] - se
    hl = half_len.T[None]
    bumper = along - q.ego_length / 2 - hl
    corridor = (do.T[None] - de).abs() < q.ego_width / 2 + half_wid.T[None] + 0.3     # ahead or behind
    ahead = live & (along > 0) & corridor
    stop_ego, stop_lane = v ** 2 / (2 * q.tail_decel), v_lane.T[None] ** 2 / (2 * q.other_decel)
    need = v * q.rss_response + stop_ego - stop_lane + q.rss_standstill
    short = torch.where(ahead, (need - bumper).clamp(min=0.0), 0.0)
    rss = (short ** 2).sum(dim=(1, 2)) / N
    # Hard from rss_from_s on, but only where worse than now: what is short already (a cut-in,
    # a standstill close behind) cannot be undone and must not force the fallback.
    unsafe = (short[:, k_rss:] > short[:, :1] + 0.1).any(dim=2).any(dim=1)
    # The same distance for whoever follows in the corridor (mirrored: can it stop if we brake at
    # tail_decel?), priced where it grows beyond now: no cutting in front of a closing car, no
    # braking harder than a close follower can. Soft only: the minimal-risk stop brakes too.
    gap_b = -along - q.ego_length / 2 - hl
    behind = live & (along < 0) & corridor
    need_b = v_lane.T[None] * q.rss_response + stop_lane - stop_ego + q.rss_standstill
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
