"""Motion prediction of tracked objects over the planning horizon, lane-aware, as an rt_runtime graph.

One op, ``predict_tracks``, batched over all track slots and all HORIZON steps (t_k = (k+1) DT_S):

* constant velocity: ``p(t) = p0 + v t``;
* lane following, when a route is given (``route_count >= 2``) and the track moves
  (``speed >= min_speed``) within ``align_tol`` of the lane direction or of its opposite: the
  track goes to Frenet coordinates (s0, d0, lane heading psi) on the route; it keeps its speed
  along the lane, ``s(t) = s0 + |v| cos(dpsi) t`` (negative for oncoming traffic), while its offset
  relaxes exponentially to the lane centre it is heading for,
  ``d(t) = c + (d0 - c) exp(-t / tau)``, with c the lane centre nearest to ``d0 + v_d tau``
  (``v_d = |v| sin(dpsi)``, so a lane change in progress ends in its target lane; off the lanes,
  e.g. a cyclist on the shoulder, c = d0 and the offset is kept); then back to
  the map frame along the (curving) route. Constant velocity would leave the road on a curve;
  this bends with it. Other tracks (crossing pedestrians, parked cars) keep constant velocity.

Braking (``accel=True``): the tracker is constant-velocity, so a leader braking to a stop would be
predicted to drive on through it. The graph then keeps a small state per track, fed back like the
tracker's (``motion_in`` -> ``motion``: id, speed along the lane, its filtered rate of change),
with the tracks' stamp (``track_t``). A lane follower's along-lane acceleration is the change of
its speed since the previous job, smoothed (``accel_gain``) and clamped to ``[-max_brake,
max_accel]``; its along-lane motion is then ``s(t) = s0 + v tau + a tau^2 / 2`` with ``tau`` capped
at the instant it would stop (a braking vehicle stops; it does not reverse). A track seen for the
first time, or after more than ``accel_dt_max``, starts from zero acceleration.

Input: ``tracks`` + ``confirmed_count`` (the tracker's confirmed prefix), ``route`` + ``route_count``
(+ ``track_t``, ``motion_in``, ``motion_t_in`` with ``accel``).
Output: ``predictions`` (MAX_TRACKS, HORIZON, 2) in the map frame; rows past the count are zero
(+ ``motion``, ``motion_t`` with ``accel``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from rt_runtime import Graph, Op, TensorSpec
from rt_runtime.exec import kernel
from pipelines import schema
from pipelines.geometry import (RoadLayout, curvature, from_frenet, on_device, polyline, to_frenet, valid_mask,
                                wrap_angle)

# The kernel indexes columns by number (TorchScript reads no module-level variable): this order.
if schema.TRACK_COLS[:6] != ("id", "cls", "x", "y", "vx", "vy"):
    raise ImportError("pipelines.prediction: the kernel's column numbers no longer match pipelines.schema")


@dataclass(frozen=True)
class PredictionParams:
    """Lane-aware prediction tuning."""

    lane_aware: bool = True
    min_speed: float = 1.0                 # m/s: slower tracks are not lane-followers
    align_tol: float = math.radians(35.0)  # heading vs lane direction (or its opposite)
    tau: float = 1.5                       # s: time constant of the drift to the lane centre
    road: RoadLayout = field(default_factory=RoadLayout)
    accel: bool = False                    # braking-aware: keep a per-track speed state (module docstring)
    accel_gain: float = 0.5                # weight of the newest speed difference in the filtered rate
    max_brake: float = 8.0                 # m/s^2
    max_accel: float = 2.0                 # m/s^2
    accel_dt_max: float = 0.5              # s: older state is not differenced against


class Knobs(NamedTuple):
    """``PredictionParams``' scalars by the same names, plus the road's lane width, for the kernel."""

    lane_aware: bool
    min_speed: float
    align_tol: float
    tau: float
    accel_gain: float
    max_brake: float
    max_accel: float
    accel_dt_max: float
    lane_width: float


def _knobs(p: PredictionParams) -> Knobs:
    return Knobs(bool(p.lane_aware), *(float(getattr(p, f)) for f in Knobs._fields[1:-1]), float(p.road.lane_width))


MOTION_COLS = ("id", "speed", "rate")   # speed along the lane (direction of travel) and its filtered change


def initial_prediction_state(device: str = "cpu") -> dict[str, torch.Tensor]:
    """No previous job: no per-track speeds, no stamp (NaN)."""
    dev = torch.device(device)
    return {"motion_in": torch.zeros(schema.MAX_TRACKS, len(MOTION_COLS), device=dev),
            "motion_t_in": torch.full((1,), math.nan, dtype=torch.float64, device=dev)}


def prediction_inputs(device: str = "cpu", accel: bool = False) -> list:
    """tracks, confirmed_count, route, route_count (+ track_t, motion_in, motion_t_in with ``accel``)."""
    specs = [schema.tracks(), schema.count("confirmed_count"), schema.route(), schema.count("route_count")]
    if accel:
        specs += [schema.timestamp("track_t"), _motion("motion_in"), schema.timestamp("motion_t_in")]
    return [on_device(s, device) for s in specs]


def _motion(name: str) -> TensorSpec:
    return TensorSpec(name, (schema.MAX_TRACKS, len(MOTION_COLS)), "float32")


def prediction_op(device: str = "cpu", params: PredictionParams | None = None) -> Op:
    """The op writing ``predictions`` (see the module docstring for the model)."""
    p = params or PredictionParams()
    dev = torch.device(device)
    t = torch.arange(1, schema.HORIZON + 1, dtype=torch.float32, device=dev) * schema.DT_S   # (H,)
    centers = torch.tensor(p.road.centers, dtype=torch.float32, device=dev)
    q = _knobs(p)
    on_cpu = dev.type == "cpu"

    def predict(tracks: Tensor, n: Tensor, route: Tensor, route_count: Tensor, *rest: Tensor) -> None:
        if p.accel:
            track_t, motion_in, motion_t_in, predictions, motion, motion_t = rest
            _predict(tracks, n, route, route_count, t, centers, q, on_cpu, predictions,
                     track_t, motion_in, motion_t_in, motion, motion_t)
        else:
            _predict(tracks, n, route, route_count, t, centers, q, on_cpu, rest[0], None, None, None, None, None)

    outs = [on_device(schema.predictions(), device)]
    if p.accel:
        outs += [on_device(_motion("motion"), device), on_device(schema.timestamp("motion_t"), device)]
    return Op("predict_tracks", predict, tuple(prediction_inputs(device, p.accel)), tuple(outs),
              capturable=True, cost_us=300.0)


@kernel
def _predict(tracks: Tensor, n: Tensor, route: Tensor, route_count: Tensor, t: Tensor, centers: Tensor, q: Knobs,
             on_cpu: bool, predictions: Tensor, track_t: Optional[Tensor], motion_in: Optional[Tensor],
             motion_t_in: Optional[Tensor], motion: Optional[Tensor], motion_t: Optional[Tensor]) -> None:
    """The op's body; braking-aware when the speed state (``track_t`` ... ``motion_t``) is given."""
    if on_cpu:
        # Reading the count costs nothing on the host (on CUDA all slots stay: capturable). Every row
        # is computed on its own, and an empty slot's predictions and motion are zeros (the masks
        # below): compute the confirmed tracks only and write the zeros directly.
        m = min(max(int(n[0]), 0), tracks.shape[0])
        tracks = tracks[:m]
        predictions[m:].zero_()
        predictions = predictions[:m]
        if motion is not None:
            motion[m:].zero_()
            motion = motion[:m]
    live = valid_mask(n, tracks.shape[0])
    p0 = tracks[:, 2:4]                                                         # x, y
    v = tracks[:, 4:6]                                                          # vx, vy
    cv = p0[:, None, :] + v[:, None, :] * t[None, :, None]                      # (N, H, 2)
    if not q.lane_aware:
        predictions.copy_(torch.where(live[:, None, None], cv, 0.0))
        return
    pl = polyline(route, route_count)
    s0, d0, psi = to_frenet(pl, p0)
    speed = torch.linalg.vector_norm(v, 2, dim=1)                               # = v.norm(dim=1)
    dpsi = wrap_angle(torch.atan2(v[:, 1], v[:, 0]) - psi)
    aligned = (dpsi.abs() < q.align_tol) | ((math.pi - dpsi.abs()) < q.align_tol)
    follow = aligned & (speed >= q.min_speed) & (route_count.reshape(()) >= 2)
    v_s, v_d = speed * torch.cos(dpsi), speed * torch.sin(dpsi)
    v_s = v_s / (1.0 - curvature(pl, s0) * d0).clamp(min=0.2)   # along the lane at d0, not the reference
    aim = d0 + v_d * q.tau
    c = centers[(aim[:, None] - centers[None, :]).abs().argmin(dim=1)]
    # Off the lanes (a cyclist on the shoulder, a walker on the sidewalk): keep the offset.
    c = torch.where((aim - c).abs() <= q.lane_width / 2, c, d0)
    if track_t is not None and motion_in is not None and motion_t_in is not None and motion is not None \
            and motion_t is not None:
        # Speed along the direction of travel (oncoming traffic too) and its filtered rate of change.
        sp = v_s.abs()
        a = _speed_rate(q, tracks, live & follow, sp, track_t, motion_in, motion_t_in, motion, motion_t)
        # sp tau + a tau^2 / 2, tau capped where the speed reaches zero (it stops, never reverses)
        t_stop = torch.where(a < 0, sp / torch.where(a < 0, -a, 1.0), math.inf)
        tau = torch.minimum(t[None, :], t_stop[:, None])
        s = s0[:, None] + torch.sign(v_s)[:, None] * (sp[:, None] * tau + 0.5 * a[:, None] * tau * tau)
    else:
        s = s0[:, None] + v_s[:, None] * t[None, :]
    d = c[:, None] + (d0 - c)[:, None] * torch.exp(-t / q.tau)[None, :]
    x, y, _h = from_frenet(pl, s, d)
    lane = torch.stack((x, y), dim=-1)
    predictions.copy_(torch.where(live[:, None, None], torch.where(follow[:, None, None], lane, cv), 0.0))


def _speed_rate(q: Knobs, tracks: Tensor, follow: Tensor, v_s: Tensor, track_t: Tensor, motion_in: Tensor,
                motion_t_in: Tensor, motion: Tensor, motion_t: Tensor) -> Tensor:
    """Each lane follower's filtered rate of change of its along-lane speed ``v_s``; writes this job's
    state (``motion``: id, speed, rate) for the next job."""
    dt = (track_t - motion_t_in).to(torch.float32)                      # NaN on the first job
    fresh = (dt > 1e-3) & (dt <= q.accel_dt_max)
    ids = tracks[:, 0]                                                  # id
    same = (ids[:, None] == motion_in[None, :, 0]) & (motion_in[None, :, 0] > 0)   # (N, N): this id before
    seen = same.any(dim=1) & follow & fresh
    j = same.float().argmax(dim=1)
    prev_v, prev_a = motion_in[j, 1], motion_in[j, 2]
    raw = (v_s - prev_v) / torch.where(fresh, dt, 1.0)
    a = (q.accel_gain * raw + (1.0 - q.accel_gain) * prev_a).clamp(-q.max_brake, q.max_accel)
    a = torch.where(seen, a, 0.0)
    motion.copy_(torch.where(follow[:, None], torch.stack((ids, v_s, a), dim=1), 0.0))
    motion_t.copy_(track_t)
    return a


def build_prediction_graph(device: str = "cpu", road: object | None = None, **params: object) -> Graph:
    """Prediction graph: tracks + confirmed_count, route + route_count -> ``predictions``.

    ``road`` is a ``RoadLayout`` or a sim ``Road`` (lane centres snap the lateral drift); other
    keyword arguments are ``PredictionParams`` fields.
    """
    if road is not None:
        params["road"] = RoadLayout.like(road)
    pp = PredictionParams(**params)  # type: ignore[arg-type]
    outs = ["predictions", "motion", "motion_t"] if pp.accel else ["predictions"]
    return Graph("prediction", [prediction_op(device, pp)], prediction_inputs(device, pp.accel), outs)
