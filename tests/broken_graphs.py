"""Graph builders for tests whose ops fail by design (a deterministic error, not a timing fault)."""
from __future__ import annotations

import dataclasses

from pipelines.camera import build_camera_graph
from rt_runtime.core.graph import Graph


def _reject(*args: object) -> None:
    raise ValueError("this camera op rejects every frame (a test of deterministic errors)")


def build_failing_camera(device: str = "cpu", **args: object) -> Graph:
    """The reference camera graph whose first op raises on every frame."""
    g = build_camera_graph(device=device, **args)
    ops = [dataclasses.replace(g.ops[0], fn=_reject), *g.ops[1:]]
    return Graph(g.name, ops, g.inputs, [s.name for s in g.outputs])
