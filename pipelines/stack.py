"""Glue for running the reference stack under the runtime: initial states fed back by channels.

Stateful stages (the tracker, the planner) are pure graphs whose state is an input and an output;
the configuration loops each output back through a channel. Before the first job there is no
previous output, so these functions give the state a job starts from.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pipelines import schema
from pipelines.tracking import initial_tracker_state

if TYPE_CHECKING:
    from rt_runtime import Graph


def initial_planner_state(device: str = "cpu") -> dict[str, torch.Tensor]:
    """No previous plan: the planner starts from zero acceleration."""
    return {"last_trajectory": torch.zeros(schema.TRAJ_POINTS, len(schema.TRAJ_COLS), device=device)}



def build_fusion_tracking(device: str = "cpu", camera: dict | None = None, fusion: dict | None = None,
                          tracker: dict | None = None) -> "Graph":
    """``build_fusion_tracking_graph`` from plain config values (YAML mappings, not dataclasses)."""
    from pipelines.fusion import FusionParams
    from pipelines.geometry import CameraModel
    from pipelines.tracking import TrackerParams, build_fusion_tracking_graph

    def tuples(d: dict | None) -> dict:
        return {k: tuple(v) if isinstance(v, list) else v for k, v in (d or {}).items()}

    return build_fusion_tracking_graph(device, camera=CameraModel(**camera) if camera else None,
                                       fusion=FusionParams(**tuples(fusion)), tracker=TrackerParams(**tuples(tracker)))


__all__ = ["build_fusion_tracking", "initial_planner_state", "initial_tracker_state"]
