"""From a graph to its static memory plans: one plan per pool kind.

* ``io``: the graph's outputs. They live for the whole job, because they are read after it (the
  LET publish at the deadline copies them out). With CUDA-graph capture the graph's inputs get
  staging slots here too, since a captured graph reads fixed addresses.
* ``activations``: every other tensor an op writes, placed by lifetime over the fixed execution
  order, so tensors whose lifetimes do not overlap share bytes. An in-place op's output takes its
  input's bytes when that input is an activation read by no later op.
* ``workspace``: each op's scratch tensors, live only during that op.

Graph inputs are bound by reference and need no slot (zero copy), except as noted above.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.graph import Graph
from ..core.tensor import TensorSpec
from .arena import PoolKind
from .lifetime import lifetimes
from .planner import Buffer, MemoryPlan, plan_buffers


@dataclass
class PoolPlan:
    """The plan of one pool, with the contracts of the tensors placed in it."""

    kind: PoolKind
    plan: MemoryPlan
    specs: dict[str, TensorSpec] = field(default_factory=dict)


def workspace_key(op_name: str, tensor: str) -> str:
    """Workspace names are per op; qualify them so two ops may both call theirs 'tmp'."""
    return f"{op_name}/{tensor}"


def plan_graph(graph: Graph, alignment: int = 64, *, stage_inputs: bool = False) -> dict[PoolKind, PoolPlan]:
    """Plan every tensor the graph writes into arenas, one ``PoolPlan`` per pool kind."""
    last = len(graph.ops) - 1
    outputs = {s.name for s in graph.outputs}
    live = lifetimes(graph.steps(), keep_alive=outputs)
    align = lambda s: max(alignment, s.alignment)  # noqa: E731 - one spec's alignment can exceed the plan's

    io: list[Buffer] = [Buffer(s.name, s.max_nbytes, 0, last) for s in graph.outputs]
    io_specs = {s.name: s for s in graph.outputs}
    if stage_inputs:
        io += [Buffer(s.name, s.max_nbytes, 0, last) for s in graph.inputs]
        io_specs.update({s.name: s for s in graph.inputs})

    act: list[Buffer] = []
    act_specs: dict[str, TensorSpec] = {}
    activation = lambda t: t in graph.producer and t not in outputs  # noqa: E731
    for step, o in enumerate(graph.ops):
        for s in o.outputs:
            if s.name in outputs:
                continue
            first, end = live[s.name]
            src = o.inplace.get(s.name)
            # Reuse the input's bytes only if nothing after this op still reads the input.
            alias = src if src is not None and activation(src) and live[src][1] == step else None
            act.append(Buffer(s.name, s.max_nbytes, first, end, alias_of=alias))
            act_specs[s.name] = s

    ws: list[Buffer] = []
    ws_specs: dict[str, TensorSpec] = {}
    for step, o in enumerate(graph.ops):
        for s in o.workspace:
            key = workspace_key(o.name, s.name)
            ws.append(Buffer(key, s.max_nbytes, step, step))
            ws_specs[key] = s

    pools = {}
    for kind, bufs, specs in ((PoolKind.IO, io, io_specs), (PoolKind.ACTIVATIONS, act, act_specs),
                              (PoolKind.WORKSPACE, ws, ws_specs)):
        a = max([alignment] + [align(s) for s in specs.values()])
        pools[kind] = PoolPlan(kind, plan_buffers(bufs, alignment=a), specs)
    return pools
