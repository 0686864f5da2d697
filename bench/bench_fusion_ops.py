"""Fusion and tracking ops on recorded data: each op's median time per job, and a bit-for-bit check.

Inputs: every job of the ``fusion_tracking`` task in a replay of the built-in scenario's bag (zero
op cost, the serial driver), recorded as that job's graph inputs (LiDAR boxes, radar clusters,
camera boxes, odometry and the tracker state it read). Each recorded job then runs through
``build_fusion_tracking`` (config/stack.yaml's arguments) on one torch thread; per op, the median of
``GraphExecutor``'s op start/end stamps over ``--passes`` passes. With ``--baseline DIR`` (another
checkout) that checkout's fusion and tracking (and the geometry they use) run too, taking turns
with these job by job, and every tensor each op writes is compared bit for bit, job by job.
``--threads-check`` then runs two executors of each graph on two threads over the same jobs against
the same work on one thread (the GIL's share: > 1x means the threads compute side by side).

Run: ``PYTHONPATH=. python bench/bench_fusion_ops.py [--passes N] [--baseline DIR] [--threads-check]
[--cache FILE]`` (``--cache``: the recorded jobs are saved there, and loaded from there next time).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install
sys.path.insert(0, str(Path(__file__).resolve().parent))      # bench_hot_ops' helpers

import pipelines.stack  # noqa: E402
import rt_runtime.drive as drive  # noqa: E402
from bench_hot_ops import anchor_ms, baseline_modules, bits, op_times, thread_scaling  # noqa: E402
from rt_runtime import Graph, Op  # noqa: E402
from rt_runtime.config.stack import load_stack  # noqa: E402
from rt_runtime.exec import GraphExecutor  # noqa: E402
from rt_runtime.replay import replay  # noqa: E402
from rt_runtime.replay.defaults import default_bag, default_config  # noqa: E402
from rt_runtime.sched import zero_cost  # noqa: E402

TASK = "fusion_tracking"


def recording(graph: Graph, jobs: list[dict[str, torch.Tensor]], live: Callable[[], bool]) -> Graph:
    """``graph`` whose ops also copy the graph inputs they read into ``jobs`` (a new job at the first op)."""
    inputs = {s.name for s in graph.inputs}
    first = graph.ops[0].name

    def wrap(op: Op) -> Op:
        names = [s.name for s in op.inputs]

        def fn(*args: Any) -> None:
            if live():
                if op.name == first:
                    jobs.append({})
                jobs[-1].update({n: a.clone() for n, a in zip(names, args) if n in inputs})
            op.fn(*args)
        return dataclasses.replace(op, fn=fn)

    return Graph(graph.name, [wrap(o) for o in graph.ops], graph.inputs, graph.outputs)


def recorded_jobs(bag: Path) -> tuple[list[dict[str, torch.Tensor]], dict[str, Any]]:
    """Every fusion_tracking job's graph inputs in a replay of ``bag``, and the task's graph arguments."""
    cfg = load_stack(default_config())
    args = cfg.entries[TASK].get("args", {})
    jobs: list[dict[str, torch.Tensor]] = []
    warming = [False]
    build, warm_up = pipelines.stack.build_fusion_tracking, drive.warm_up

    def build_recording(*a: Any, **kw: Any) -> Graph:
        return recording(build(*a, **kw), jobs, lambda: not warming[0])

    def quiet_warm_up(ex: GraphExecutor, *a: Any, **kw: Any) -> bool:   # synthetic inputs are not jobs
        warming[0] = True
        try:
            return warm_up(ex, *a, **kw)
        finally:
            warming[0] = False

    pipelines.stack.build_fusion_tracking, drive.warm_up = build_recording, quiet_warm_up
    try:
        replay(bag, cfg, cost=zero_cost, hardware=False, parallel=0)
    finally:
        pipelines.stack.build_fusion_tracking, drive.warm_up = build, warm_up
    return [j for j in jobs if len(j) == len(jobs[0])], args


def baseline_builder(root: Path) -> Callable[..., Graph]:
    """``build_fusion_tracking`` of another checkout: its geometry, fusion and tracking (and their
    kernels), loaded by file."""
    names = ("geometry", "fusion", "tracking_kernels", "tracking")
    base = baseline_modules(root, names)
    # pipelines.stack's builder imports these modules at call time: the same function, these modules
    stack_spec = importlib.util.spec_from_file_location("baseline_stack", root / "pipelines" / "stack.py")
    stack = importlib.util.module_from_spec(stack_spec)
    stack_spec.loader.exec_module(stack)
    graph = stack.build_fusion_tracking

    def build(**kw: Any) -> Graph:
        old = {n: sys.modules[f"pipelines.{n}"] for n in base}
        sys.modules.update({f"pipelines.{n}": m for n, m in base.items()})
        try:
            return graph(**kw)
        finally:
            sys.modules.update({f"pipelines.{n}": m for n, m in old.items()})
    return build


def every_tensor(graph: Graph) -> Graph:
    """``graph`` with every tensor an op writes as an output, so each op's results can be compared."""
    return Graph(graph.name, graph.ops, graph.inputs, [s.name for o in graph.ops for s in o.outputs])


def compare(exs: dict[str, GraphExecutor], jobs: list[dict[str, torch.Tensor]]) -> list[str]:
    """Tensors (named with their job) where the executors' results differ."""
    diffs = []
    for i, job in enumerate(jobs):
        outs = {k: {n: t.clone() for n, t in ex.run(job).items()} for k, ex in exs.items()}
        ref, *others = outs.values()
        diffs += [f"job {i}: {n}" for o in others for n in ref if bits(ref[n]) != bits(o[n])]
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="another checkout whose pipelines/fusion.py and tracking.py "
                    "run interleaved with these, for a before/after in one run and a bit-for-bit check")
    ap.add_argument("--threads-check", action="store_true", help="two executors on two threads vs one thread")
    ap.add_argument("--cache", type=Path, help="recorded jobs: loaded from this file if it exists, else saved to it")
    args = ap.parse_args()
    torch.set_num_threads(1)
    bag = default_bag()
    if args.cache is not None and args.cache.exists():
        jobs, kw = torch.load(args.cache)
    else:
        jobs, kw = recorded_jobs(bag)
        if args.cache is not None:
            torch.save((jobs, kw), args.cache)
    builders: dict[str, Callable[..., Graph]] = {"this": pipelines.stack.build_fusion_tracking}
    if args.baseline:
        builders = {"baseline": baseline_builder(args.baseline), **builders}
    a0 = anchor_ms()
    diffs = compare({k: GraphExecutor(every_tensor(b(**kw))) for k, b in builders.items()}, jobs)
    times, _ = op_times({k: GraphExecutor(b(**kw)) for k, b in builders.items()}, jobs, args.passes)
    a1 = anchor_ms()
    print(f"torch {torch.__version__}, 1 thread; bag {bag.name}: {len(jobs)} {TASK} jobs, "
          f"{args.passes} passes; medians per job")
    print(f"anchor (sort 1M + matmul 512): {a0:.2f} ms before, {a1:.2f} ms after")
    keys = list(builders)
    print(f"{'op':<20}" + "".join(f"{k + ' ms':>14}" for k in keys))
    for op in times[keys[-1]]:
        print(f"{op:<20}" + "".join(f"{times[k].get(op, float('nan')):>14.3f}" for k in keys))
    print(f"{'(sum)':<20}" + "".join(f"{sum(times[k].values()):>14.3f}" for k in keys))
    if len(keys) > 1:
        print("outputs: bit-identical, every op, every job" if not diffs else
              f"outputs DIFFER in {len(diffs)} tensor(s), first: {', '.join(diffs[:8])}")
    if args.threads_check:
        for k, b in builders.items():
            one, two = thread_scaling(lambda: b(**kw), jobs, 1)
            print(f"{k}: 2 executors x {len(jobs)} jobs: {one:.0f} ms on 1 thread, {two:.0f} ms on 2 threads "
                  f"({one / two:.2f}x)")
    if diffs:
        sys.exit(1)


if __name__ == "__main__":
    main()
