"""Sampling-based trajectory planning in the Frenet frame, with a minimal-risk stop as fallback.

The reference line is the ``route`` polyline (map frame, lanes at lateral offsets ``RoadLayout``);
the ego pose is projected onto it as (s0, d0) with velocities ``s' = v cos(dpsi)``,
``d' = v sin(dpsi)``; the initial acceleration a0 is the previous plan's where the ego now is
(``last_trajectory``, fed back like the tracker's state), so consecutive plans chain. Candidates
are the grid lateral target x target speed x manoeuvre time (default 7 x 6 x 3 = 126), built and
scored at once (each lateral profile once per offset and time, each speed profile and its lane frame
once per speed and time, then gathered per candidate):

* lateral: quintic ``d(t)`` from (d0, d'0, 0) to (d1, 0, 0) at T; longitudinal: quartic ``s(t)``
  from (s0, s'0, a0) to speed v1 with zero acceleration at T (velocity keeping); both held
  afterwards. Sampled at TRAJ_POINTS times ``k DT_S`` and mapped back to x, y, yaw = lane heading
  + atan2(d', s' (1 - kappa d)), v = hypot(s' (1 - kappa d), d').
* hard limits: acceleration in [-max_decel, max_accel], |d''| <= max_lat_accel, |jerk| <=
  max_jerk on both axes, no reversing, no sideways motion without forward motion, no leaving the
  lanes open to our direction (further than at the start).
* overlap (hard): ego and obstacles are covered by three circles along their headings; the
  distances of all candidates x all obstacles x all time steps are one batched ``cdist`` per time
  step. Obstacles are the confirmed tracks now and their predictions, plus a braking tail after
  the horizon (the obstacle brakes at ``other_decel``, the ego at ``tail_decel``), so no plan ends
  where a collision is unavoidable. Closer than ``safety_margin`` rejects a candidate.
* following distance (RSS, in the lane frame: along s, across d): to every road user ahead in the
  ego's corridor, ``v rho + v^2 / 2 tail_decel - v_lead^2 / 2 other_decel + standstill``; its
  squared shortfall is a cost at every step, and a shortfall that grows beyond ``rss_from_s``
  rejects the candidate. tail_decel is the minimal-risk stop's, so the fallback stays safe.
  Mirrored for whoever follows in the corridor (``v_f rho + v_f^2 / 2 other_decel - v^2 / 2
  tail_decel + standstill``): a shortfall growing beyond the present one is a cost (``w_rear``),
  so the plan does not cut in front of a closing car or brake harder than a close follower can.
* costs: jerk, lane keeping (offset from the nearest lane centre), lane change, clearance
  ``sum max(0, 1 - gap / 3 sigma)^2``, speed tracking towards what the candidate's lane allows (its slowest
  road user ahead: the plan queues behind a slower leader) and, with ``w_lead`` > 0, that lane's
  own speed deficit (the incentive to overtake).

The cheapest admissible candidate is the plan (``plan_status`` 0). When none is, the plan is the
minimal-risk stop (``plan_status`` 1): the same op ``build_minimal_risk_graph`` runs for the
watchdog's degrade reaction — keep the current lateral offset on the route (or the current
heading when there is no route) and brake at ``mrm_decel`` to a standstill.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple, Tuple

import torch
from torch import Tensor

from rt_runtime import Graph, Op, TensorSpec
from rt_runtime.exec import kernel
from pipelines import schema
from pipelines.geometry import (Polyline, RoadLayout, curvature, frenet_frame, from_frenet, on_device, poly_eval,
                                polyline, quartic, quintic, to_frenet, valid_mask)

N = schema.TRAJ_POINTS
# The kernels index columns by number (TorchScript reads no module-level variable): this order.
if (schema.ODOM_COLS[:4] != ("x", "y", "yaw", "vx") or schema.TRACK_COLS[2:4] != ("x", "y")
        or schema.TRACK_COLS[6:9] != ("yaw", "l", "w")):
    raise ImportError("pipelines.planning: the kernels' column numbers no longer match pipelines.schema")
CAND_COLS = 6  # x, y, yaw, v (map frame) and s, d (Frenet) of every candidate sample


@dataclass(frozen=True)
class PlannerParams:
    """Candidate grid, vehicle limits and cost weights (SI units)."""

    road: RoadLayout = field(default_factory=RoadLayout)
    target_speed: float = 13.9        # m/s; capped by (and, when not given, set to) the road's speed limit
    n_offsets: int = 7
    speed_fractions: tuple[float, ...] = (1.0, 0.8, 0.6, 0.4, 0.2, 0.0)   # of target_speed
    horizons: tuple[float, ...] = (2.0, 3.0, 4.0)                         # manoeuvre times, s
    ego_length: float = 4.6
    ego_width: float = 1.9
    safety_margin: float = 0.3
    max_accel: float = 3.0
    max_decel: float = 6.0
    max_lat_accel: float = 3.0
    max_jerk: float = 15.0
    mrm_decel: float = 3.5
    tail_decel: float = 3.5          # ego braking assumed by RSS and the tail: the minimal-risk stop's
    other_decel: float = 6.0         # obstacle braking assumed after the horizon
    tail_steps: int = 4
    w_jerk: float = 0.02
    w_lane: float = 1.0
    w_change: float = 1.5             # per lane width: above the cost of stopping, so the default queues
    w_speed: float = 2.0
    w_clear: float = 1.0
    clear_sigma: float = 0.5          # m: the clearance cost fades out at 3 sigma
    w_lead: float = 0.0              # > 0: a lane whose leader is slow costs (overtaking); 0: queue
    w_rss: float = 1.0               # following-distance deficit (RSS), squared, per step
    w_rear: float = 1.0              # a follower's RSS deficit growing beyond now, squared, per step
    rss_from_s: float = 1.0          # from then on a growing deficit rejects the candidate
    rss_response: float = 0.3        # s: reaction time in the safe following distance
    rss_standstill: float = 2.0      # m: gap kept at a standstill
    lead_range: float = 50.0         # m ahead of a candidate's end in which a leader counts

    @property
    def n_candidates(self) -> int:
        """Lateral targets x speeds x manoeuvre times."""
        return self.n_offsets * len(self.speed_fractions) * len(self.horizons)

    def knobs(self) -> "Knobs":
        """The numbers the kernels read, as a NamedTuple (TorchScript takes no dataclass)."""
        return Knobs(*(float(getattr(self, f)) for f in Knobs._fields[:-3]), float(self.road.lane_width),
                     int(self.tail_steps), schema.DT_S)


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


def minimal_risk_op(device: str = "cpu", params: PlannerParams | None = None, out: str = "trajectory") -> Op:
    """The minimal-risk stop: brake at ``mrm_decel`` along the route at the current offset."""
    p = params or PlannerParams()
    dev = torch.device(device)
    t = torch.arange(N, dtype=torch.float32, device=dev) * schema.DT_S
    mrm_decel = float(p.mrm_decel)
    ins = tuple(on_device(s, device) for s in (schema.odometry(), schema.route(), schema.count("route_count")))

    def stop(odom: Tensor, route: Tensor, route_count: Tensor, traj: Tensor) -> None:
        _stop(odom, route, route_count, t, mrm_decel, traj)

    return Op("minimal_risk", stop, ins, (on_device(schema.trajectory(out), device),), capturable=True, cost_us=100.0)


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


def initial_accel(last: Tensor, odom: Tensor, p: PlannerParams) -> Tensor:
    """The acceleration the last plan commands where the ego now is (0 without one): plans chain smoothly.

    Odometry carries no acceleration; restarting every plan at zero acceleration would undo each
    braking manoeuvre after one cycle, so the plan continues from the previous plan's point nearest
    to the ego (within 1 m; a zeroed trajectory has t[1] = 0 and counts as none).
    """
    return _initial_accel(last, odom, p.max_decel, p.max_accel, schema.DT_S)


def _initial_accel(last: Tensor, odom: Tensor, max_decel: float, max_accel: float, dt: float) -> Tensor:
    """``initial_accel`` with the limits as floats (what the candidates kernel calls)."""
    dist = torch.linalg.vector_norm(last[:, :2] - odom[0:2].float(), 2, dim=1)   # = .norm(dim=1); odom x, y
    # A (1,) index and index_select, not last[i]: indexing by a 0-dim tensor reads it on the host.
    i = dist[:-1].argmin().reshape(1)
    speed = last[:, 3]
    a = (speed.index_select(0, i + 1) - speed.index_select(0, i)) / dt
    ok = (dist.index_select(0, i) < 1.0) & (last[1, 4] > 0)
    return torch.where(ok, a, 0.0).clamp(-max_decel, max_accel).reshape(())


def _candidates_op(p: PlannerParams, device: str) -> Op:
    dev = torch.device(device)
    road = p.road
    allowed = torch.tensor([c for c, d in zip(road.centers, road.directions) if d > 0], device=dev)
    lo, hi = float(allowed.min()), float(allowed.max())
    offsets = (torch.linspace(lo, hi, p.n_offsets, device=dev) if hi > lo else
               torch.linspace(lo - 0.3 * road.lane_width, lo + 0.3 * road.lane_width, p.n_offsets, device=dev))
    d_lo, d_hi = lo - road.lane_width / 2 + p.ego_width / 2, hi + road.lane_width / 2 - p.ego_width / 2
    speeds = torch.tensor(p.speed_fractions, device=dev) * p.target_speed
    horizons = torch.tensor(p.horizons, device=dev)
    g = torch.meshgrid(offsets, speeds, horizons, indexing="ij")
    d1, v1, tm = (x.reshape(-1) for x in g)
    # The lateral profile depends on (offset, horizon) only, the longitudinal on (speed, horizon):
    # each is computed once per distinct pair (21 and 18 of them, not 126) and gathered per
    # candidate; every value is the one computed per candidate before, row for row.
    lat_d1, lat_tm = (x.reshape(-1) for x in torch.meshgrid(offsets, horizons, indexing="ij"))
    lon_v1, lon_tm = (x.reshape(-1) for x in torch.meshgrid(speeds, horizons, indexing="ij"))
    nh, ns = len(p.horizons), len(p.speed_fractions)
    ci = torch.arange(p.n_candidates, device=dev)
    lat_of, lon_of = (ci // (ns * nh)) * nh + ci % nh, ((ci // nh) % ns) * nh + ci % nh
    t = torch.arange(N, dtype=torch.float32, device=dev) * schema.DT_S
    frac = torch.arange(1, p.tail_steps + 1, dtype=torch.float32, device=dev) / p.tail_steps
    c, q = p.n_candidates, p.knobs()
    ins = tuple(on_device(s, device) for s in (schema.odometry(), schema.route(), schema.count("route_count"),
                                               schema.trajectory("last_trajectory")))
    outs = (TensorSpec("candidates", (c, N + p.tail_steps, CAND_COLS), "float32", ins[0].device),
            TensorSpec("candidate_cost", (c,), "float32", ins[0].device))

    def build(odom: Tensor, route: Tensor, route_count: Tensor, last: Tensor, cand: Tensor, cost: Tensor) -> None:
        _build(odom, route, route_count, last, allowed, d1, lat_d1, lat_tm, lon_v1, lon_tm, lat_of, lon_of, t, frac,
               d_lo, d_hi, q, cand, cost)

    return Op("frenet_candidates", build, ins, outs, capturable=True, cost_us=1500.0)


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


def _clearance_op(p: PlannerParams, device: str) -> Op:
    dv = "cuda" if device.startswith("cuda") else "cpu"
    dev = torch.device(device)
    c, e = p.n_candidates, p.tail_steps
    frac = torch.arange(1, e + 1, dtype=torch.float32, device=dev) / e
    ego_off, ego_r = _circles(torch.tensor(p.ego_length, device=dev), torch.tensor(p.ego_width, device=dev))
    ins = (TensorSpec("candidates", (c, N + e, CAND_COLS), "float32", dv),
           TensorSpec("candidate_cost", (c,), "float32", dv),
           *(on_device(s, device) for s in (schema.tracks(), schema.predictions(), schema.count("confirmed_count"),
                                            schema.odometry(), schema.route(), schema.count("route_count"))))
    outs = (TensorSpec("candidate_total", (c,), "float32", dv),)
    on_cpu = dv == "cpu"
    k_rss = min(N - 1, round(p.rss_from_s / schema.DT_S))
    vt = float(max(p.target_speed, 0.1))
    half_lane = float(p.road.lane_width / 2)
    q = p.knobs()

    def clearance(cand: Tensor, base: Tensor, tracks: Tensor, pred: Tensor, n: Tensor, odom: Tensor, route: Tensor,
                  route_count: Tensor, total: Tensor) -> None:
        _clearance(cand, base, tracks, pred, n, odom, route, route_count, frac, ego_off, ego_r, on_cpu, k_rss, vt,
                   half_lane, q, total)

    return Op("clearance", clearance, ins, outs, capturable=not on_cpu, cost_us=4000.0)


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


def _select_op(p: PlannerParams, device: str) -> Op:
    dv = "cuda" if device.startswith("cuda") else "cpu"
    c, e = p.n_candidates, p.tail_steps
    ins = (TensorSpec("candidates", (c, N + e, CAND_COLS), "float32", dv),
           TensorSpec("candidate_total", (c,), "float32", dv),
           on_device(schema.trajectory("mrm_trajectory"), device))
    outs = (on_device(schema.trajectory(), device), on_device(schema.flag("plan_status"), device),
            on_device(schema.scalar("plan_cost"), device))

    def select(cand: Tensor, total: Tensor, mrm: Tensor, traj: Tensor, status: Tensor, plan_cost: Tensor) -> None:
        _select(cand, total, mrm, traj, status, plan_cost)

    return Op("select", select, ins, outs, capturable=True, cost_us=30.0)


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


def planning_inputs(device: str = "cpu") -> list[TensorSpec]:
    """odom, route, route_count, tracks, predictions, confirmed_count, last_trajectory (the previous plan)."""
    return [on_device(s, device) for s in (schema.odometry(), schema.route(), schema.count("route_count"),
                                           schema.tracks(), schema.predictions(), schema.count("confirmed_count"),
                                           schema.trajectory("last_trajectory"))]


def _params(road: object | None, params: dict) -> PlannerParams:
    if road is not None:
        lay = params["road"] = RoadLayout.like(road)
        if lay.speed_limit is not None:   # the road's limit, unless a lower target speed is asked for
            params["target_speed"] = min(float(params.get("target_speed", lay.speed_limit)), lay.speed_limit)
    return PlannerParams(**params)


def build_planning_graph(device: str = "cpu", road: object | None = None, **params: object) -> Graph:
    """Planner graph -> ``trajectory`` (TRAJ_POINTS, 5), ``plan_status`` (0 nominal, 1 minimal-risk), ``plan_cost``.

    ``road`` is a ``RoadLayout`` or a sim ``Road``; other keyword arguments are ``PlannerParams``.
    """
    p = _params(road, params)
    ops = [_candidates_op(p, device), minimal_risk_op(device, p, out="mrm_trajectory"), _clearance_op(p, device),
           _select_op(p, device)]
    return Graph("planning", ops, planning_inputs(device), ["trajectory", "plan_status", "plan_cost"])


def build_minimal_risk_graph(device: str = "cpu", road: object | None = None, **params: object) -> Graph:
    """The degrade reaction's graph: odom, route, route_count -> the minimal-risk ``trajectory`` + ``plan_status``."""
    p = _params(road, params)
    status = on_device(schema.flag("plan_status"), device)
    mark = Op("mark_minimal_risk", lambda traj, st: st.fill_(1), (on_device(schema.trajectory(), device),), (status,),
              capturable=True)
    ins = [on_device(s, device) for s in (schema.odometry(), schema.route(), schema.count("route_count"))]
    return Graph("minimal_risk", [minimal_risk_op(device, p), mark], ins, ["trajectory", "plan_status"])
