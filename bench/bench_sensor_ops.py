"""The camera and radar ops on recorded data: each op's median time per job, before/after, and bit-equality.

Every camera frame and radar scan of the built-in scenario's bag (``rt_runtime.replay.defaults.default_bag``),
decoded as the replay's ingress does, through ``build_camera_graph`` (the plain 640x384 graph, and the
letterboxing one on the same frames enlarged to 1280x720 by nearest neighbour) and ``build_radar_graph``
(config/stack.yaml's mount). Per op, the median of ``GraphExecutor``'s own op start/end stamps over
``--passes`` passes over all jobs, one torch thread (what a runtime worker uses). With ``--baseline DIR``
(another checkout) its ``pipelines/camera.py`` and ``radar.py`` run too, taking turns with these job by
job (a before/after under the same load), and every job's outputs and the tensors its ops hand each other
must be bit-identical (not the ops' workspace, whose buffers may differ between versions).
``--scaling`` adds, per graph and checkout, the throughput of two executors on two threads over the same
jobs against one executor doing both shares alone (1.0: no gain from the second thread; 2.0: linear).

Run: ``PYTHONPATH=. python bench/bench_sensor_ops.py [--passes N] [--baseline DIR] [--scaling]``
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from bench.bench_hot_ops import anchor_ms, baseline_module, bits, op_times, thread_scaling  # noqa: E402
from pipelines.camera import build_camera_graph  # noqa: E402
from pipelines.radar import build_radar_graph  # noqa: E402
from rt_runtime.bag import open_bag  # noqa: E402
from rt_runtime.config.stack import load_stack  # noqa: E402
from rt_runtime.exec import GraphExecutor  # noqa: E402
from rt_runtime.io.ingress import INGRESS_CODECS  # noqa: E402
from rt_runtime.replay.defaults import default_bag, default_config  # noqa: E402

Feeds = list[dict[str, torch.Tensor]]
LETTERBOX = (1280, 720)   # a common camera size, not the net's aspect: letterboxed


def bag_feeds(bag: Path, topic: str, codec: str, name: str) -> Feeds:
    """Every message of ``topic`` as the ingress decodes it, as the graph input ``name``."""
    c = INGRESS_CODECS[codec]
    with open_bag(bag) as r:
        return [{name: torch.from_numpy(np.array(c.decode(r.decode(m), topic)))} for m in r.messages([topic])]


def enlarged(frames: Feeds, width: int, height: int) -> Feeds:
    """The frames resized to ``width`` x ``height`` by nearest neighbour (row and column indices)."""
    out = []
    for f in frames:
        img = f["image"]
        rows = torch.arange(height) * img.shape[0] // height
        cols = torch.arange(width) * img.shape[1] // width
        out.append({"image": img[rows][:, cols].contiguous()})
    return out


def differing_edges(exs: dict[str, GraphExecutor], feeds: Feeds) -> int:
    """Jobs (one pass) whose op outputs, the graph's outputs and the tensors between its ops, are not
    bit-equal across the executors (the first executor's graph names them)."""
    first = next(iter(exs.values()))
    edges = [s.name for o in first.graph.ops for s in o.outputs]
    differ = 0
    for inputs in feeds:
        seen = []
        for ex in exs.values():
            ex.run(inputs)
            seen.append([bits(ex.views[n]) for n in edges])
        differ += any(v != seen[0] for v in seen[1:])
    return differ


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="another checkout whose pipelines/camera.py and radar.py run "
                    "interleaved with these, for a before/after in one run and a bit-equality check")
    ap.add_argument("--scaling", action="store_true", help="also measure two threads against one")
    args = ap.parse_args()
    torch.set_num_threads(1)
    bag = default_bag()
    cfg = load_stack(default_config())
    mount = tuple(cfg.entries["radar_objects"].get("args", {}).get("mount", (0.0, 0.0, 0.0)))
    builders = {"this": (build_camera_graph, build_radar_graph)}
    if args.baseline:
        base = (baseline_module(args.baseline, "camera"), baseline_module(args.baseline, "radar"))
        builders = {"baseline": (base[0].build_camera_graph, base[1].build_radar_graph), **builders}
    frames = bag_feeds(bag, "/sensing/camera/image_raw", "image_rgb", "image")
    big = enlarged(frames, *LETTERBOX)
    scans = bag_feeds(bag, "/sensing/radar/points", "radar_points", "radar")
    lb_args = {"source_width": LETTERBOX[0], "source_height": LETTERBOX[1]}
    graphs: dict[str, tuple[dict[str, Callable[[], Any]], Feeds]] = {
        "camera": ({k: (lambda b=b: b[0]()) for k, b in builders.items()}, frames),
        "cam_lbox": ({k: (lambda b=b: b[0](**lb_args)) for k, b in builders.items()}, big),
        "radar": ({k: (lambda b=b: b[1](mount=mount)) for k, b in builders.items()}, scans),
    }
    a0 = anchor_ms()
    results = {}
    for graph, (makers, feeds) in graphs.items():
        exs = {k: GraphExecutor(m()) for k, m in makers.items()}
        times, differ = op_times(exs, feeds, args.passes)
        results[graph] = times, differ + (differing_edges(exs, feeds) if len(exs) > 1 else 0)
    a1 = anchor_ms()
    keys = list(builders)
    print(f"torch {torch.__version__}, 1 thread; bag {bag.name}: {len(frames)} frames (letterboxed: "
          f"{LETTERBOX[0]}x{LETTERBOX[1]}), {len(scans)} radar scans, {args.passes} passes; medians per job")
    print(f"anchor (sort 1M + matmul 512): {a0:.2f} ms before, {a1:.2f} ms after")
    print(f"{'graph':<9} {'op':<18}" + "".join(f"{k + ' ms':>14}" for k in keys)
          + (f"{'ratio':>8}" if len(keys) > 1 else ""))
    for graph, (times, differ) in results.items():
        rows = [*times[keys[-1]], "(sum)"]
        for op in rows:
            t = [sum(times[k].values()) if op == "(sum)" else times[k][op] for k in keys]
            print(f"{graph:<9} {op:<18}" + "".join(f"{v:>14.3f}" for v in t)
                  + (f"{t[0] / t[-1]:>7.2f}x" if len(keys) > 1 else ""))
        if len(keys) > 1:
            print(f"{graph:<9} jobs whose outputs or op-to-op tensors differ from the baseline: {differ} "
                  f"of {len(graphs[graph][1]) * (args.passes + 2)}")
    if args.scaling:
        print("two threads vs one (2 executors, each over every job: one after the other / at once):")
        for graph, (makers, feeds) in graphs.items():
            ratios = {k: thread_scaling(m, feeds) for k, m in makers.items()}
            print(f"{graph:<9}" + "".join(f"{k:>10} {one / two:.2f}x" for k, (one, two) in ratios.items()))


if __name__ == "__main__":
    main()
