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

The graph: ``reference_line`` prepares the route as a polyline (padded to MAX_ROUTE vertices), the ego
and the confirmed tracks on it, once per job for the ops after it (``frenet_candidates``,
``minimal_risk``, ``clearance``), then ``select``.

The cheapest admissible candidate is the plan (``plan_status`` 0). When none is, the plan is the
minimal-risk stop (``plan_status`` 1): the same op ``build_minimal_risk_graph`` runs for the
watchdog's degrade reaction — keep the current lateral offset on the route (or the current
heading when there is no route) and brake at ``mrm_decel`` to a standstill.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from rt_runtime import Graph, Op, TensorSpec
from pipelines import schema
from pipelines.geometry import RoadLayout, on_device, poly_times
from pipelines.planning_kernels import (Knobs, _build, _circles, _clearance, _initial_accel, _reference, _select, _stop,
                                        _stop_on)

N = schema.TRAJ_POINTS
CAND_COLS = 6  # x, y, yaw, v (map frame) and s, d (Frenet) of every candidate sample
EGO_COLS = 5   # the ego on the reference line: s0, d0, s', d', speed


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


def _line_specs(device: str) -> tuple[TensorSpec, ...]:
    """``Polyline``'s fields as ``reference_line`` writes them, at the route's bound (a shorter route is
    padded with zero-length segments: the same line)."""
    dv, r = device.split(":")[0], schema.MAX_ROUTE
    return (TensorSpec("line_p", (r, 2), "float32", dv), TensorSpec("line_vec", (r - 1, 2), "float32", dv),
            TensorSpec("line_length", (r - 1,), "float32", dv), TensorSpec("line_s0", (r - 1,), "float32", dv),
            TensorSpec("line_heading", (r - 1,), "float32", dv), TensorSpec("line_last", (1,), "int64", dv))


def _ego_spec(device: str) -> TensorSpec:
    return TensorSpec("ego_frenet", (EGO_COLS,), "float32", device.split(":")[0])


def _tracks_spec(device: str) -> TensorSpec:
    return TensorSpec("track_frenet", (3, schema.MAX_TRACKS), "float32", device.split(":")[0])   # s, d, lane heading


def _reference_op(device: str) -> Op:
    """The route as the reference line and the ego and the tracks on it, once per job: the ops after it read them."""
    dv = device.split(":")[0]
    ins = tuple(on_device(s, device) for s in (schema.odometry(), schema.route(), schema.count("route_count"),
                                               schema.tracks(), schema.count("confirmed_count")))
    outs = (*_line_specs(device), _ego_spec(device), _tracks_spec(device))
    on_cpu = dv == "cpu"

    def reference(odom: Tensor, route: Tensor, route_count: Tensor, tracks: Tensor, n: Tensor, *out: Tensor) -> None:
        _reference(odom, route, route_count, tracks, n, on_cpu, list(out[:6]), out[6], out[7])

    return Op("reference_line", reference, ins, outs, capturable=not on_cpu, cost_us=300.0)


def _shared_minimal_risk_op(p: PlannerParams, device: str) -> Op:
    """``minimal_risk_op`` into ``mrm_trajectory`` on the reference line ``reference_line`` prepared."""
    t = torch.arange(N, dtype=torch.float32, device=torch.device(device)) * schema.DT_S
    mrm_decel = float(p.mrm_decel)

    def stop(*args: Tensor) -> None:
        _stop_on(list(args[:6]), args[6], t, mrm_decel, args[7])

    return Op("minimal_risk", stop, (*_line_specs(device), _ego_spec(device)),
              (on_device(schema.trajectory("mrm_trajectory"), device),), capturable=True, cost_us=60.0)


def initial_accel(last: Tensor, odom: Tensor, p: PlannerParams) -> Tensor:
    """The acceleration the last plan commands where the ego now is (0 without one): plans chain smoothly.

    Odometry carries no acceleration; restarting every plan at zero acceleration would undo each
    braking manoeuvre after one cycle, so the plan continues from the previous plan's point nearest
    to the ego (within 1 m; a zeroed trajectory has t[1] = 0 and counts as none).
    """
    return _initial_accel(last, odom, p.max_decel, p.max_accel, schema.DT_S)


def _candidates_op(p: PlannerParams, device: str) -> Op:
    dev, dv = torch.device(device), device.split(":")[0]
    road = p.road
    allowed = torch.tensor([c for c, d in zip(road.centers, road.directions) if d > 0])   # read here: on the host
    lo, hi = float(allowed.min()), float(allowed.max())
    allowed = allowed.to(dev)
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
    tm = torch.cat((lat_tm, lon_tm))   # both profiles' manoeuvre times: the kernel evaluates them in one batch
    nh, ns = len(p.horizons), len(p.speed_fractions)
    ci = torch.arange(p.n_candidates, device=dev)
    lat_of, lon_of = (ci // (ns * nh)) * nh + ci % nh, ((ci // nh) % ns) * nh + ci % nh
    t = torch.arange(N, dtype=torch.float32, device=dev) * schema.DT_S
    frac = torch.arange(1, p.tail_steps + 1, dtype=torch.float32, device=dev) / p.tail_steps
    c, q = p.n_candidates, p.knobs()
    # What depends on the grid alone, prepared here (the ops the kernel ran per job, the same bits):
    # the profiles' sample times and each candidate's lane-keeping cost.
    at = poly_times(t, tm)
    lane_cost = q.w_lane * (d1[:, None] - allowed[None, :]).abs().min(dim=1)[0] ** 2
    ins = (on_device(schema.odometry(), device), *_line_specs(device), _ego_spec(device),
           on_device(schema.trajectory("last_trajectory"), device))
    outs = (TensorSpec("candidates", (c, N + p.tail_steps, CAND_COLS), "float32", ins[0].device),
            TensorSpec("candidate_cost", (c,), "float32", ins[0].device))

    def build(odom: Tensor, *args: Tensor) -> None:
        ego, last, cand, cost = args[6:]
        _build(odom, list(args[:6]), ego, last, allowed, d1, lat_d1, lon_v1, tm, at, lane_cost, lat_of, lon_of, t, frac,
               d_lo, d_hi, q, cand, cost)

    return Op("frenet_candidates", build, ins, outs, capturable=True, cost_us=1500.0)


def _clearance_op(p: PlannerParams, device: str) -> Op:
    dv = device.split(":")[0]
    dev = torch.device(device)
    c, e = p.n_candidates, p.tail_steps
    frac = torch.arange(1, e + 1, dtype=torch.float32, device=dev) / e
    ego_off, ego_r = _circles(torch.tensor(p.ego_length, device=dev), torch.tensor(p.ego_width, device=dev))
    ins = (TensorSpec("candidates", (c, N + e, CAND_COLS), "float32", dv),
           TensorSpec("candidate_cost", (c,), "float32", dv),
           *(on_device(s, device) for s in (schema.tracks(), schema.predictions(), schema.count("confirmed_count"),
                                            schema.odometry())),
           *_line_specs(device), _tracks_spec(device))
    outs = (TensorSpec("candidate_total", (c,), "float32", dv),)
    on_cpu = dv == "cpu"
    k_rss = min(N - 1, round(p.rss_from_s / schema.DT_S))
    vt = float(max(p.target_speed, 0.1))
    half_lane = float(p.road.lane_width / 2)
    q = p.knobs()

    def clearance(cand: Tensor, base: Tensor, tracks: Tensor, pred: Tensor, n: Tensor, odom: Tensor,
                  *args: Tensor) -> None:
        track_frenet, total, dist_ws = args[6:]
        _clearance(cand, base, tracks, pred, n, odom, list(args[:6]), track_frenet, frac, ego_off, ego_r, on_cpu, k_rss,
                   vt, half_lane, q, total, dist_ws)

    # The squared distances of all circle pairs (steps, 3 C, 3 M), in planned memory (at most 3 MAX_TRACKS).
    ws = (TensorSpec("circle_dist2", ((N + e) * 3 * c * 3 * schema.MAX_TRACKS,), "float32", dv),)
    return Op("clearance", clearance, ins, outs, ws, capturable=not on_cpu, cost_us=4000.0)


def _select_op(p: PlannerParams, device: str) -> Op:
    dv = device.split(":")[0]
    c, e = p.n_candidates, p.tail_steps
    ins = (TensorSpec("candidates", (c, N + e, CAND_COLS), "float32", dv),
           TensorSpec("candidate_total", (c,), "float32", dv),
           on_device(schema.trajectory("mrm_trajectory"), device))
    outs = (on_device(schema.trajectory(), device), on_device(schema.flag("plan_status"), device),
            on_device(schema.scalar("plan_cost"), device))

    def select(cand: Tensor, total: Tensor, mrm: Tensor, traj: Tensor, status: Tensor, plan_cost: Tensor) -> None:
        _select(cand, total, mrm, traj, status, plan_cost)

    return Op("select", select, ins, outs, capturable=True, cost_us=30.0)


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
    ops = [_reference_op(device), _candidates_op(p, device), _shared_minimal_risk_op(p, device),
           _clearance_op(p, device), _select_op(p, device)]
    return Graph("planning", ops, planning_inputs(device), ["trajectory", "plan_status", "plan_cost"])


def build_minimal_risk_graph(device: str = "cpu", road: object | None = None, **params: object) -> Graph:
    """The degrade reaction's graph: odom, route, route_count -> the minimal-risk ``trajectory`` + ``plan_status``."""
    p = _params(road, params)
    status = on_device(schema.flag("plan_status"), device)
    mark = Op("mark_minimal_risk", lambda traj, st: st.fill_(1), (on_device(schema.trajectory(), device),), (status,),
              capturable=True)
    ins = [on_device(s, device) for s in (schema.odometry(), schema.route(), schema.count("route_count"))]
    return Graph("minimal_risk", [minimal_risk_op(device, p), mark], ins, ["trajectory", "plan_status"])
