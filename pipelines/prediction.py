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

Input: ``tracks`` + ``confirmed_count`` (the tracker's confirmed prefix), ``route`` + ``route_count``.
Output: ``predictions`` (MAX_TRACKS, HORIZON, 2) in the map frame; rows past the count are zero.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from rt_runtime import Graph, Op
from pipelines import schema
from pipelines.geometry import (RoadLayout, curvature, from_frenet, on_device, polyline, to_frenet, valid_mask,
                                wrap_angle)

T = {c: i for i, c in enumerate(schema.TRACK_COLS)}


@dataclass(frozen=True)
class PredictionParams:
    """Lane-aware prediction tuning."""

    lane_aware: bool = True
    min_speed: float = 1.0                 # m/s: slower tracks are not lane-followers
    align_tol: float = math.radians(35.0)  # heading vs lane direction (or its opposite)
    tau: float = 1.5                       # s: time constant of the drift to the lane centre
    road: RoadLayout = field(default_factory=RoadLayout)


def prediction_inputs(device: str = "cpu") -> list:
    """tracks, confirmed_count, route, route_count."""
    return [on_device(s, device) for s in (schema.tracks(), schema.count("confirmed_count"), schema.route(),
                                           schema.count("route_count"))]


def prediction_op(device: str = "cpu", params: PredictionParams | None = None) -> Op:
    """The op writing ``predictions`` (see the module docstring for the model)."""
    p = params or PredictionParams()
    dev = torch.device(device)
    t = torch.arange(1, schema.HORIZON + 1, dtype=torch.float32, device=dev) * schema.DT_S   # (H,)
    centers = torch.tensor(p.road.centers, dtype=torch.float32, device=dev)

    def predict(tracks: torch.Tensor, n: torch.Tensor, route: torch.Tensor, route_count: torch.Tensor,
                predictions: torch.Tensor) -> None:
        live = valid_mask(n, tracks.shape[0])
        p0 = tracks[:, T["x"]:T["y"] + 1]
        v = tracks[:, T["vx"]:T["vy"] + 1]
        cv = p0[:, None, :] + v[:, None, :] * t[None, :, None]                      # (N, H, 2)
        if not p.lane_aware:
            predictions.copy_(torch.where(live[:, None, None], cv, 0.0))
            return
        pl = polyline(route, route_count)
        s0, d0, psi = to_frenet(pl, p0)
        speed = v.norm(dim=1)
        dpsi = wrap_angle(torch.atan2(v[:, 1], v[:, 0]) - psi)
        aligned = (dpsi.abs() < p.align_tol) | ((math.pi - dpsi.abs()) < p.align_tol)
        follow = aligned & (speed >= p.min_speed) & (route_count.reshape(()) >= 2)
        v_s, v_d = speed * torch.cos(dpsi), speed * torch.sin(dpsi)
        v_s = v_s / (1.0 - curvature(pl, s0) * d0).clamp(min=0.2)   # along the lane at d0, not the reference
        aim = d0 + v_d * p.tau
        c = centers[(aim[:, None] - centers[None, :]).abs().argmin(dim=1)]
        # Off the lanes (a cyclist on the shoulder, a walker on the sidewalk): keep the offset.
        c = torch.where((aim - c).abs() <= p.road.lane_width / 2, c, d0)
        s = s0[:, None] + v_s[:, None] * t[None, :]
        d = c[:, None] + (d0 - c)[:, None] * torch.exp(-t / p.tau)[None, :]
        x, y, _ = from_frenet(pl, s, d)
        lane = torch.stack((x, y), dim=-1)
        predictions.copy_(torch.where(live[:, None, None], torch.where(follow[:, None, None], lane, cv), 0.0))

    return Op("predict_tracks", predict, tuple(prediction_inputs(device)), (on_device(schema.predictions(), device),),
              capturable=True, cost_us=300.0)


def build_prediction_graph(device: str = "cpu", road: object | None = None, **params: object) -> Graph:
    """Prediction graph: tracks + confirmed_count, route + route_count -> ``predictions``.

    ``road`` is a ``RoadLayout`` or a sim ``Road`` (lane centres snap the lateral drift); other
    keyword arguments are ``PredictionParams`` fields.
    """
    if road is not None:
        params["road"] = RoadLayout.like(road)
    op = prediction_op(device, PredictionParams(**params))  # type: ignore[arg-type]
    return Graph("prediction", [op], prediction_inputs(device), ["predictions"])
