"""Ops marked capturable are free of host syncs, checked without a GPU: each runs on torch's meta device.

A meta tensor has a shape and no data, so an op body that needs data on the host to go on (a
data-dependent size: ``nonzero``, ``unique``, boolean-mask indexing; a host read: ``.item()``,
``torch.equal``, ``if tensor:``) raises there, where on CUDA it would stall the stream or break a capture.
The reference graphs are built for "meta", which takes their accelerator paths (what "cuda" builds).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from rt_runtime import Graph, Op, TensorSpec
from rt_runtime.core.tensor import Dim

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from gpu_check import graphs  # noqa: E402  (the one list of the reference graphs the GPU check captures)


def _meta(spec: TensorSpec, symbolic: int = 256) -> torch.Tensor:
    shape = tuple(min(d.max, symbolic) if isinstance(d, Dim) else d for d in spec.shape)
    return torch.empty(shape, dtype=getattr(torch, spec.dtype), device="meta")


def sync_free(graph: Graph) -> dict[str, str]:
    """Run each capturable op of ``graph`` on meta tensors; op -> why it needs the host (empty: none does)."""
    env = {name: _meta(s) for name, s in graph.specs.items()}
    bad = {}
    for o in graph.ops:
        if not o.capturable:
            continue
        args: list[Any] = [env[s.name] for s in o.inputs] + [env[s.name] for s in o.outputs]
        args += [_meta(s) for s in o.workspace]
        try:
            o.fn(*args)
        except Exception as e:  # noqa: BLE001 - what the op did on shapes alone is the finding
            bad[o.name] = str(e).strip().splitlines()[-1][:200]
    return bad


GRAPHS = graphs("meta")


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_every_capturable_op_of_the_reference_graphs_runs_on_shapes_alone(name: str) -> None:
    graph = GRAPHS[name]
    assert isinstance(graph, Graph), f"{name}: building it for the meta device failed: {graph!r}"
    assert sync_free(graph) == {}


def test_the_probe_finds_a_host_read_and_a_data_dependent_size() -> None:
    x = TensorSpec("x", ("N<=64",), "float32", "meta")
    y = TensorSpec("y", ("N<=64",), "float32", "meta")
    z = TensorSpec("z", ("N<=64",), "float32", "meta")
    ops = [Op("clamp", lambda x, y: torch.clamp(x, min=0, out=y), (x,), (y,), capturable=True),
           Op("early_exit", lambda y, z: z.copy_(y) if bool((y > 0).any()) else None, (y,), (z,), capturable=True)]
    g = Graph("probe", ops, [x], ["z"])
    assert set(sync_free(g)) == {"early_exit"}
    ops[1] = Op("compact", lambda y, z: z[: int(y.nonzero().shape[0])].zero_(), (y,), (z,), capturable=True)
    assert set(sync_free(Graph("probe2", ops, [x], ["z"]))) == {"compact"}
