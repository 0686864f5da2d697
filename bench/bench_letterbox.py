"""Camera preprocessing at any resolution: the letterboxing ``camera_preprocess`` op against the native one.

Runs only the first op of the camera graph (uint8 frame -> normalised net input, in planned buffers)
on a random frame of each size; median of repeated runs. The anchor is the native 640x384 op (an exact
4x4 box filter), measured in the same run.

    python bench/bench_letterbox.py [--repeats N]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from pipelines.camera import build_camera_graph
from rt_runtime.exec import GraphExecutor

SIZES = [(640, 384), (768, 576), (1280, 720), (1920, 1080)]


def preprocess_ms(width: int, height: int, repeats: int) -> float:
    """Median wall time (ms) of the camera graph's first op on a ``width`` x ``height`` frame."""
    args = {} if (width, height) == (640, 384) else {"source_width": width, "source_height": height}
    graph = build_camera_graph(weights=None, **args)
    ex = GraphExecutor(graph)
    img = torch.randint(0, 256, (height, width, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    ex.run({"image": img})   # warm-up: arenas, kernels
    op = graph.ops[0]
    views = [ex.views[s.name] for s in op.outputs] + \
        [torch.empty(s.shape, dtype=torch.float32) for s in op.workspace]   # scratch like the arena's
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        op.fn(img, *views)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=50)
    a = ap.parse_args()
    torch.set_num_threads(1)
    anchor = preprocess_ms(640, 384, a.repeats)
    print(f"{'frame':>10} {'op':>16} {'median ms':>10} {'x anchor':>9}")
    for w, h in SIZES:
        ms = anchor if (w, h) == (640, 384) else preprocess_ms(w, h, a.repeats)
        kind = "box filter 4x4" if (w, h) == (640, 384) else "letterbox"
        print(f"{w}x{h:<5} {kind:>16} {ms:10.2f} {ms / anchor:9.2f}")


if __name__ == "__main__":
    main()
