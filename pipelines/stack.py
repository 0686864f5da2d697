"""Glue for running the reference stack under the runtime: initial states fed back by channels.

Stateful stages (the tracker, the planner) are pure graphs whose state is an input and an output;
the configuration loops each output back through a channel. Before the first job there is no
previous output, so these functions give the state a job starts from.

The prediction, planning and minimal-risk graphs need the road's lane layout (``RoadLayout``);
``build_prediction``, ``build_planning`` and ``build_minimal_risk`` take it as a YAML mapping
(``road: {lane_width, directions, centers}``), and ``with_road`` points a stack document's graphs
at them with a scenario's road (what ``bench/quality.py`` replays each scenario with).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from pipelines import schema
from pipelines.tracking import initial_tracker_state

if TYPE_CHECKING:
    from pipelines.geometry import RoadLayout
    from rt_runtime import Graph


def initial_planner_state(device: str = "cpu") -> dict[str, torch.Tensor]:
    """No previous plan: the planner starts from zero acceleration."""
    return {"last_trajectory": torch.zeros(schema.TRAJ_POINTS, len(schema.TRAJ_COLS), device=device)}



def build_fusion_tracking(device: str = "cpu", camera: dict | None = None, fusion: dict | None = None,
                          tracker: dict | None = None) -> "Graph":
    """``build_fusion_tracking_graph`` from plain config values (YAML mappings, not dataclasses)."""
    from pipelines.fusion import FusionParams
    from pipelines.camera_model import CameraModel
    from pipelines.tracking import TrackerParams, build_fusion_tracking_graph

    def tuples(d: dict | None) -> dict:
        return {k: tuple(v) if isinstance(v, list) else v for k, v in (d or {}).items()}

    return build_fusion_tracking_graph(device, camera=CameraModel(**camera) if camera else None,
                                       fusion=FusionParams(**tuples(fusion)), tracker=TrackerParams(**tuples(tracker)))


# ---- the road layout from plain config values ----------------------------------------------------
def road_layout(road: Any) -> "RoadLayout | None":
    """A ``RoadLayout`` from a YAML mapping ``{lane_width, directions, centers?, speed_limit?}`` (centres
    default to lanes of ``lane_width`` centred on the route, lane 0 the rightmost; the speed limit in
    m/s), a sim ``Road`` or a RoadLayout."""
    from pipelines.geometry import RoadLayout

    if road is None:
        return None
    if not isinstance(road, Mapping):
        return RoadLayout.like(road)
    unknown = set(road) - {"lane_width", "centers", "directions", "speed_limit"}
    if unknown:
        raise TypeError(f"road: unknown key(s) {sorted(unknown)}; expected lane_width, centers, directions, "
                        "speed_limit")
    width = float(road.get("lane_width", 3.5))
    dirs = road.get("directions")
    centers = road.get("centers")
    n = len(dirs) if dirs is not None else len(centers) if centers is not None else 3
    dirs = tuple(int(d) for d in dirs) if dirs is not None else (1,) * n
    centers = tuple(float(c) for c in centers) if centers is not None else RoadLayout.uniform(n, width).centers
    if len(centers) != len(dirs):
        raise TypeError(f"road: {len(centers)} lane centres but {len(dirs)} directions")
    limit = road.get("speed_limit")
    return RoadLayout(width, centers, dirs, float(limit) if limit is not None else None)


def road_args(road: Any) -> dict[str, Any]:
    """The YAML mapping of a road layout (a sim ``Road`` or a RoadLayout): what the builders below take."""
    lay = road_layout(road)
    out: dict[str, Any] = {"lane_width": lay.lane_width, "centers": list(lay.centers),
                           "directions": list(lay.directions)}
    if lay.speed_limit is not None:
        out["speed_limit"] = lay.speed_limit
    return out


def build_prediction(device: str = "cpu", road: Mapping[str, Any] | None = None, **params: object) -> "Graph":
    """``build_prediction_graph`` with ``road`` as a YAML mapping (see ``road_layout``)."""
    from pipelines.prediction import build_prediction_graph

    return build_prediction_graph(device, road=road_layout(road), **params)


def build_planning(device: str = "cpu", road: Mapping[str, Any] | None = None, **params: object) -> "Graph":
    """``build_planning_graph`` with ``road`` as a YAML mapping (see ``road_layout``)."""
    from pipelines.planning import build_planning_graph

    return build_planning_graph(device, road=road_layout(road), **params)


def build_minimal_risk(device: str = "cpu", road: Mapping[str, Any] | None = None, **params: object) -> "Graph":
    """``build_minimal_risk_graph`` with ``road`` as a YAML mapping (see ``road_layout``)."""
    from pipelines.planning import build_minimal_risk_graph

    return build_minimal_risk_graph(device, road=road_layout(road), **params)


_ROAD_GRAPHS = {  # graph reference in config/stack.yaml -> the wrapper that takes a road mapping
    "pipelines.prediction:build_prediction_graph": "pipelines.stack:build_prediction",
    "pipelines.planning:build_planning_graph": "pipelines.stack:build_planning",
    "pipelines.planning:build_minimal_risk_graph": "pipelines.stack:build_minimal_risk",
}


def with_road(doc: Mapping[str, Any], road: Any) -> dict[str, Any]:
    """A copy of a stack document whose prediction, planning and minimal-risk graphs get ``road``.

    ``road``: a sim ``Road`` (e.g. ``build_scenario(name, seed).road``), a RoadLayout or a mapping.
    Graphs given by the ``pipelines.stack`` wrappers already get their ``road`` replaced.
    """
    import copy

    out = copy.deepcopy(dict(doc))
    args = road_args(road) if not isinstance(road, Mapping) else dict(road)
    for e in out.get("tasks") or []:
        for key, arg_key in (("graph", "args"), ("fallback", "fallback_args")):
            ref = e.get(key)
            ref = _ROAD_GRAPHS.get(ref, ref)
            if ref in _ROAD_GRAPHS.values():
                e[key] = ref
                e[arg_key] = {**(e.get(arg_key) or {}), "road": copy.deepcopy(args)}
    return out


__all__ = ["build_fusion_tracking", "build_minimal_risk", "build_planning", "build_prediction", "initial_planner_state",
           "initial_tracker_state", "road_args", "road_layout", "with_road"]
