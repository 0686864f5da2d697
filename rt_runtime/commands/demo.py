"""`rt-runtime demo`: the main job on the built-in scenario, with its report.

Until the replay lands this runs what exists: it builds a small perception-like graph, plans its
memory, runs jobs through the executor and reports what it saw.
"""
from __future__ import annotations

import argparse
import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core import Graph


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register the subcommand."""
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--jobs", type=int, default=200, help="jobs to run (default 200)")
    return p


def demo_graph(seed: int = 0) -> Graph:
    """A small conv feature extractor and a linear head, each op writing into its planned view."""
    import torch

    from ..core import Graph, Op, TensorSpec
    g = torch.Generator().manual_seed(seed)
    w_conv = torch.randn(8, 3, 3, 3, generator=g) * 0.2
    w_head = torch.randn(8 * 48 * 80, 4, generator=g) * 0.01
    image = TensorSpec("image", (1, 3, 96, 160), layout="NCHW")
    feat = TensorSpec("feat", (1, 8, 96, 160), layout="NCHW")
    pooled = TensorSpec("pooled", (1, 8, 48, 80), layout="NCHW")
    act = TensorSpec("act", (1, 8, 48, 80), layout="NCHW")
    flat = TensorSpec("flat", (1, 8 * 48 * 80))
    boxes = TensorSpec("boxes", (1, 4))

    def conv(x, out):
        out.copy_(torch.nn.functional.conv2d(x, w_conv, padding=1))

    def pool(x, out):
        out.copy_(torch.nn.functional.avg_pool2d(x, 2))

    ops = [
        Op("conv", conv, (image,), (feat,), cost_us=400),
        Op("pool", pool, (feat,), (pooled,), cost_us=80),
        Op("relu", lambda x, out: torch.clamp(x, min=0, out=out), (pooled,), (act,), inplace={"act": "pooled"}, cost_us=10),
        Op("flatten", lambda x, out: out.copy_(x.reshape(1, -1)), (act,), (flat,), cost_us=10),
        Op("head", lambda x, out: torch.mm(x, w_head, out=out), (flat,), (boxes,), cost_us=60),
    ]
    return Graph("camera_demo", ops, [image], ["boxes"])


def run(args: argparse.Namespace) -> int:
    """Build, plan and run the demo graph; print the memory plan and per-op times."""
    import torch

    from ..exec import GraphExecutor

    graph = demo_graph()
    ex = GraphExecutor(graph)
    images = torch.rand(4, 1, 3, 96, 160, generator=torch.Generator().manual_seed(1))
    per_op: list[list[int]] = [[] for _ in graph.ops]
    for j in range(args.jobs):
        ex.run({"image": images[j % 4]})
        for i in range(len(graph.ops)):
            per_op[i].append(ex.op_end_ns[i] - ex.op_start_ns[i])
    print(f"graph '{graph.name}': {len(graph.ops)} ops, critical path "
          f"{' -> '.join(graph.critical_path().ops)} (estimate {graph.critical_path().cost_us:.0f} us)")
    print(f"{'pool':<12} {'planned B':>10} {'lower bound':>12} {'naive B':>10} {'ratio':>6}")
    for kind, pool in ex.pools.items():
        p = pool.plan
        print(f"{kind.value:<12} {p.total_bytes:>10} {p.lower_bound:>12} {p.naive_bytes:>10} {p.ratio:>6.2f}")
    print(f"{'op':<10} {'p50 us':>8} {'max us':>8}")
    for o, times in zip(graph.ops, per_op):
        print(f"{o.name:<10} {statistics.median(times) / 1e3:>8.1f} {max(times) / 1e3:>8.1f}")
    print(f"{ex.jobs} jobs ran inside {ex.arena_bytes} arena bytes; outputs are views into the io arena.")
    print("What this showed: a graph validated at build, planned statically, run op by op with "
          "per-op timing. The bag replay with its deadline report replaces this demo when it lands.")
    return 0
