"""The LiDAR graph with static shapes (``pipelines/lidar_static.py``): capturable ops, the dynamic graph's boxes.

What a CUDA graph needs is checked without a GPU: every op runs on meta tensors (shapes, no data), where a
data-dependent size or a host read raises, and the CPU twin of capture at the bound (``pad_inputs=True``)
gives the dynamic graph's outputs on the recorded sweeps.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from pipelines import schema
from pipelines.lidar import build_lidar_graph
from rt_runtime import Graph, TensorSpec
from rt_runtime.exec import GraphExecutor

MOUNT = (1.2, 0.0, 1.9, 0.0)   # config/stack.yaml's lidar_objects args
EVERY = 4                      # sweeps compared: one in EVERY (a padded CPU job takes ~0.5-1 s)
SCORE = schema.BOX_COLS.index("score")


def _run_on_meta(graph: Graph) -> dict[str, str]:
    """Each op of ``graph`` on meta tensors at the bounds: the ops that raised, with the error's last line
    (where TorchScript puts the cause)."""
    def empty(spec: TensorSpec) -> torch.Tensor:
        return torch.empty(spec.max_shape, dtype=getattr(torch, spec.dtype), device="meta")

    env = {name: empty(spec) for name, spec in graph.specs.items()}
    failed = {}
    for op in graph.ops:
        args = [env[s.name] for s in op.inputs] + [env[s.name] for s in op.outputs] + [empty(s) for s in op.workspace]
        try:
            op.fn(*args)
        except Exception as e:  # noqa: BLE001 - any failure on meta tensors means the op needs the data
            failed[op.name] = str(e).strip().splitlines()[-1]
    return failed


def test_the_static_graph_is_built_off_the_cpu_and_runs_on_shapes_alone() -> None:
    """Off the CPU the graph pads its points and every op is capturable: none needs the data for a size."""
    assert not build_lidar_graph("cpu").static, "on the CPU the dynamic graph is the default"
    graph = build_lidar_graph("meta")
    assert graph.static and graph.capturable and set(graph.pad) == {"points"}
    assert np.isnan(graph.pad["points"])
    assert _run_on_meta(graph) == {}


def test_the_meta_probe_finds_the_dynamic_graphs_data_dependent_sizes() -> None:
    """The probe above bites: the dynamic graph (nonzero, unique, counts read to the host) fails on meta."""
    failed = _run_on_meta(build_lidar_graph("meta", static=False))
    assert {"lidar_voxelize", "lidar_cluster"} <= set(failed), failed


@functools.lru_cache(maxsize=1)
def _sweeps() -> list[torch.Tensor]:
    """The built-in scenario's LiDAR sweeps, decoded as the replay's ingress does."""
    from rt_runtime.bag import open_bag
    from rt_runtime.io import INGRESS_CODECS
    from rt_runtime.io.ingress import decode
    from rt_runtime.replay.defaults import default_bag

    out = []
    with open_bag(default_bag()) as reader:
        for msg in reader.messages(topics=["/sensing/lidar/points"]):
            cloud = decode(INGRESS_CODECS["lidar_points"], reader.decode(msg), msg.topic)["value"]
            out.append(torch.from_numpy(np.ascontiguousarray(cloud)))
    return out


def _canonical(rows: torch.Tensor) -> torch.Tensor:
    """``rows`` sorted lexicographically. The dynamic graph ranks boxes with ``topk``, whose order among equal
    scores is unspecified (on the CPU it varies with the number of clusters); the static one with a stable
    sort (cluster order). Equal scores are common: a score is a function of the point count alone."""
    for col in reversed(range(rows.shape[1])):
        rows = rows[torch.sort(rows[:, col], stable=True).indices]
    return rows


@pytest.mark.usefixtures("one_torch_thread")
def test_padded_static_graph_gives_the_dynamic_boxes_on_recorded_sweeps() -> None:
    """The same count and bit-identical boxes, sweep by sweep (up to the order of equal scores); rows past
    the count are zero."""
    dynamic = GraphExecutor(build_lidar_graph(static=False, mount=MOUNT))
    static = GraphExecutor(build_lidar_graph(static=True, mount=MOUNT), pad_inputs=True)
    assert static.pad_eager
    sweeps = _sweeps()
    assert len(sweeps) >= 50
    for i, cloud in list(enumerate(sweeps))[::EVERY]:
        want = {k: v.clone() for k, v in dynamic.run({"points": cloud}).items()}
        got = static.run({"points": cloud})
        n = int(want["box_count"])
        where = f"sweep {i} ({len(cloud)} points, {n} boxes)"
        assert n > 0, where
        assert torch.equal(got["box_count"], want["box_count"]), where
        # The same scores in the same order; rows of equal score may come in another order (see _canonical).
        assert torch.equal(got["boxes"][:n, SCORE], want["boxes"][:n, SCORE]), where
        assert torch.equal(_canonical(got["boxes"][:n]), _canonical(want["boxes"][:n])), where
        assert not got["boxes"][n:].any(), where
        stage = static._staging["points"]   # what the ops read: the sweep, then NaN rows up to the bound
        assert stage.shape[0] > len(cloud) and torch.isnan(stage[len(cloud):]).all(), where


@pytest.mark.usefixtures("one_torch_thread")
def test_the_static_graph_takes_a_sweep_as_it_comes_too() -> None:
    """Unpadded (eager CUDA without capture, or the CPU): the padded run's outputs, also for no points at all."""
    padded = GraphExecutor(build_lidar_graph(static=True, mount=MOUNT), pad_inputs=True)
    unpadded = GraphExecutor(build_lidar_graph(static=True, mount=MOUNT))
    for cloud in [torch.zeros(0, 4), _sweeps()[7]]:
        want = {k: v.clone() for k, v in padded.run({"points": cloud}).items()}
        got = unpadded.run({"points": cloud})
        assert torch.equal(got["boxes"], want["boxes"]) and torch.equal(got["box_count"], want["box_count"])
        assert int(got["box_count"]) == (5 if len(cloud) else 0)
