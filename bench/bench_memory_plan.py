"""How good and how fast is the static memory planner (rt_runtime.memory.plan_offsets)?

Quality is the arena size over the lower bound (max bytes live at any one step; 1.000 is optimal)
for three families of buffer sets:

  (a) realistic:  CNN-like graphs (ResNet-ish chains with skip connections, a bottleneck ResNet,
                  an FPN detector with per-level heads, a U-Net with long skips, a ReLU-in-place
                  variant using alias_of), several input sizes; add the pipelines' real graphs in
                  `realistic_sets()`;
  (b) random:     200 seeded sets of 50-500 buffers with mostly short, some long lifetimes;
  (c) large:      one seeded set of 10,000 buffers.

Speed is the wall time of plan_offsets on the 10,000-buffer set, median of 5 runs.
Run standalone: `python bench/bench_memory_plan.py` (well under 30 s).
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from rt_runtime.memory import Buffer, MemoryPlan, lifetimes, plan_offsets  # noqa: E402

Step = tuple[str, list[str], list[str]]


class _GraphBuilder:
    """Records an execution order and tensor sizes, as an executor would see a topo-sorted graph."""

    def __init__(self, dtype_bytes: int = 4) -> None:
        self.order: list[Step] = []
        self.sizes: dict[str, int] = {}
        self.dtype_bytes = dtype_bytes

    def op(self, kind: str, inputs: list[str], shape: tuple[int, ...]) -> str:
        name = f"{kind}{len(self.order)}"
        self.order.append((kind, inputs, [name]))
        self.sizes[name] = int(np.prod(shape)) * self.dtype_bytes
        return name

    def buffers(self, outputs: set[str]) -> list[Buffer]:
        spans = lifetimes(self.order, keep_alive=outputs)
        return [Buffer(n, self.sizes[n], f, l) for n, (f, l) in spans.items()]


def _resnet(blocks: list[int], h: int, w: int, bottleneck: bool = False) -> list[Buffer]:
    """Basic or bottleneck ResNet at batch 1: conv stem, four stages with downsampling shortcuts."""
    g = _GraphBuilder()
    x = g.op("conv", ["image"], (64, h // 2, w // 2))
    h, w = h // 4, w // 4
    x = g.op("maxpool", [x], (64, h, w))
    c_in = 64
    for stage, n in enumerate(blocks):
        width = 64 * 2**stage
        c_out = width * 4 if bottleneck else width
        for i in range(n):
            if stage > 0 and i == 0:
                h, w = (h + 1) // 2, (w + 1) // 2
            skip = x
            if c_in != c_out or (stage > 0 and i == 0):
                skip = g.op("conv_down", [x], (c_out, h, w))
            if bottleneck:
                t = g.op("conv1x1", [x], (width, h, w))
                t = g.op("conv3x3", [t], (width, h, w))
                t = g.op("conv1x1", [t], (c_out, h, w))
            else:
                t = g.op("conv3x3", [x], (width, h, w))
                t = g.op("conv3x3", [t], (width, h, w))
            x = g.op("add_relu", [t, skip], (c_out, h, w))
            c_in = c_out
    x = g.op("avgpool", [x], (c_in,))
    out = g.op("fc", [x], (1000,))
    return g.buffers({out})


def _unet(h: int, w: int, depth: int = 4, base: int = 32) -> list[Buffer]:
    """U-Net: encoder features stay alive until the decoder concatenates them (long skips)."""
    g = _GraphBuilder()
    x, skips = "image", []
    for d in range(depth):
        c = base * 2**d
        x = g.op("conv", [x], (c, h, w))
        x = g.op("conv", [x], (c, h, w))
        skips.append((x, c, h, w))
        h, w = h // 2, w // 2
        x = g.op("pool", [x], (c, h, w))
    x = g.op("conv", [x], (base * 2**depth, h, w))
    for s, c, h, w in reversed(skips):
        x = g.op("upconv", [x], (c, h, w))
        x = g.op("concat", [x, s], (2 * c, h, w))
        x = g.op("conv", [x], (c, h, w))
        x = g.op("conv", [x], (c, h, w))
    out = g.op("head", [x], (2, h, w))
    return g.buffers({out})


def _fpn(h: int, w: int, heads: int = 3) -> list[Buffer]:
    """Detector: backbone stages C2-C5 wait for the top-down pass; per-level heads are outputs."""
    g = _GraphBuilder(dtype_bytes=2)  # fp16, as deployed
    x = g.op("stem", ["image"], (64, h // 4, w // 4))
    h, w, feats = h // 4, w // 4, []
    for stage in range(4):
        c = 64 * 2**stage
        if stage:
            h, w = (h + 1) // 2, (w + 1) // 2
        for _ in range(2):
            x = g.op("conv", [x], (c, h, w))
        feats.append((x, h, w))
    p, outs = None, set()
    for c_feat, fh, fw in reversed(feats):
        lat = g.op("lateral", [c_feat], (256, fh, fw))
        if p is not None:
            up = g.op("upsample", [p], (256, fh, fw))
            lat = g.op("add", [lat, up], (256, fh, fw))
        p = g.op("smooth", [lat], (256, fh, fw))
        for k in range(heads):  # class, box, centerness towers
            t = g.op("head_conv", [p], (256, fh, fw))
            outs.add(g.op("head_out", [t], (4 + 16 * k, fh, fw)))
    return g.buffers(outs)


def _relu_inplace(buffers: list[Buffer]) -> list[Buffer]:
    """Every add_relu writes into its first input (declared in place), as an executor might fuse it."""
    by_first = {b.first: b for b in buffers}
    out = []
    for b in buffers:
        if b.name.startswith("add_relu"):
            producer = by_first.get(b.first - 1)  # the conv feeding it is produced on the step before
            if producer is not None and producer.size >= b.size:
                b = Buffer(b.name, b.size, b.first, b.last, alias_of=producer.name)
        out.append(b)
    return out


def realistic_sets() -> list[tuple[str, list[Buffer]]]:
    """Named buffer sets from realistic graphs; add the pipelines' real graphs here."""
    r18 = [2, 2, 2, 2]
    return [
        ("resnet18 224x224", _resnet(r18, 224, 224)),
        ("resnet18 480x640", _resnet(r18, 480, 640)),
        ("resnet34 224x224", _resnet([3, 4, 6, 3], 224, 224)),
        ("resnet50 224x224", _resnet([3, 4, 6, 3], 224, 224, bottleneck=True)),
        ("resnet50 480x640", _resnet([3, 4, 6, 3], 480, 640, bottleneck=True)),
        ("resnet18 224 relu-inplace", _relu_inplace(_resnet(r18, 224, 224))),
        ("fpn detector 512x512", _fpn(512, 512)),
        ("fpn detector 480x640", _fpn(480, 640)),
        ("unet 256x256", _unet(256, 256)),
        ("unet 384x512 depth5", _unet(384, 512, depth=5)),
    ]


def pipeline_plans() -> list[tuple[str, MemoryPlan]]:
    """The reference stack's graphs as the executor plans them: one plan per graph and pool."""
    from pipelines import camera, lidar, planning, prediction, radar, tracking
    from rt_runtime.memory.graph_plan import plan_graph

    graphs = [lidar.build_lidar_graph(), radar.build_radar_graph(), camera.build_camera_graph(),
              tracking.build_fusion_tracking_graph(), prediction.build_prediction_graph(),
              planning.build_planning_graph(), planning.build_minimal_risk_graph()]
    return [(f"{g.name}/{kind.value}", pool.plan) for g in graphs for kind, pool in plan_graph(g).items()
            if pool.plan.total_bytes]


def random_set(rng: np.random.Generator, n: int) -> list[tuple[str, int, int, int]]:
    """n buffers over ~n steps: log-uniform sizes 64 B-4 MiB, mostly short lifetimes, 10% long."""
    first = rng.integers(0, n, size=n)
    short = rng.geometric(0.3, size=n) - 1
    long = rng.integers(0, max(n // 4, 1), size=n)
    length = np.where(rng.random(n) < 0.1, long, short)
    size = np.exp(rng.uniform(np.log(64), np.log(4 << 20), size=n)).astype(np.int64)
    return [(f"t{i}", int(size[i]), int(first[i]), int(first[i] + length[i])) for i in range(n)]


def main() -> None:
    rows: list[tuple[str, int, float, float, float]] = []  # label, sets, mean, max, seconds

    t0 = time.perf_counter()
    print("realistic sets:")
    real_ratios = []
    for name, bufs in realistic_sets():
        plan = plan_offsets(bufs)
        real_ratios.append(plan.ratio)
        print(f"  {name:28s} {len(bufs):4d} bufs  total {plan.total_bytes / 2**20:8.2f} MiB  "
              f"lb {plan.lower_bound / 2**20:8.2f} MiB  naive {plan.naive_bytes / 2**20:8.2f} MiB  "
              f"ratio {plan.ratio:.3f}  ({plan.strategy})")
    rows.append(("(a) CNN-like graphs", len(real_ratios), statistics.mean(real_ratios),
                 max(real_ratios), time.perf_counter() - t0))

    t0 = time.perf_counter()
    print("reference stack graphs (per pool):")
    stack_ratios = []
    for name, plan in pipeline_plans():
        stack_ratios.append(plan.ratio)
        print(f"  {name:28s} total {plan.total_bytes / 2**10:10.1f} KiB  lb {plan.lower_bound / 2**10:10.1f} KiB  "
              f"naive {plan.naive_bytes / 2**10:10.1f} KiB  ratio {plan.ratio:.3f}")
    rows.append(("(d) reference stack pools", len(stack_ratios), statistics.mean(stack_ratios), max(stack_ratios),
                 time.perf_counter() - t0))

    t0 = time.perf_counter()
    rng = np.random.default_rng(20240611)
    rand_ratios = [plan_offsets(random_set(rng, int(rng.integers(50, 501)))).ratio for _ in range(200)]
    rows.append(("(b) random 50-500 bufs", 200, statistics.mean(rand_ratios), max(rand_ratios),
                 time.perf_counter() - t0))

    big = random_set(np.random.default_rng(7), 10_000)
    times, plan = [], None
    for _ in range(5):
        t0 = time.perf_counter()
        plan = plan_offsets(big)
        times.append(time.perf_counter() - t0)
    rows.append(("(c) random 10,000 bufs", 1, plan.ratio, plan.ratio, sum(times)))

    print()
    print(f"{'family':26s} {'sets':>5s} {'ratio mean':>11s} {'ratio max':>10s} {'wall s':>7s}")
    for label, n, mean, mx, secs in rows:
        print(f"{label:26s} {n:5d} {mean:11.4f} {mx:10.4f} {secs:7.2f}")
    print(f"\nplan_offsets on 10,000 buffers: median {statistics.median(times) * 1e3:.0f} ms "
          f"over 5 runs (min {min(times) * 1e3:.0f} ms, by {plan.strategy})")


if __name__ == "__main__":
    main()
