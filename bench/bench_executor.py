"""The executor's cost per op boundary, with empty ops, beside a plain Python loop (the floor).

Target: median <= 5 us per op boundary. The floor calls the same empty functions in a plain loop;
the ratio is what the executor adds (binding, timestamps, the generator's yield).
"""
from __future__ import annotations

import statistics
import time

import torch

from rt_runtime import Graph, Op, TensorSpec
from rt_runtime.exec import GraphExecutor

REPEATS, JOBS = 9, 2_000


def empty_chain(n_ops: int) -> Graph:
    """A chain of n ops that do nothing: only the executor's own cost remains."""
    specs = [TensorSpec(f"t{i}", (4,)) for i in range(n_ops + 1)]
    ops = [Op(f"op{i}", lambda a, b: None, (specs[i],), (specs[i + 1],)) for i in range(n_ops)]
    return Graph(f"chain{n_ops}", ops, [specs[0]], [specs[-1].name])


def main() -> None:
    print(f"{'ops':>4} {'executor us/op':>15} {'plain loop us/op':>17} {'ratio':>6} {'job us':>8}")
    for n_ops in (1, 10, 50):
        graph = empty_chain(n_ops)
        ex = GraphExecutor(graph)
        inputs = {"t0": torch.zeros(4)}
        fns = [(o.fn, (None, None)) for o in graph.ops]
        ex_runs, floor_runs = [], []
        for _ in range(REPEATS):
            t0 = time.perf_counter_ns()
            for _ in range(JOBS):
                for _ in ex.steps(inputs):
                    pass
            ex_runs.append((time.perf_counter_ns() - t0) / (JOBS * n_ops))
            t0 = time.perf_counter_ns()
            for _ in range(JOBS):
                for fn, args in fns:
                    fn(*args)
            floor_runs.append((time.perf_counter_ns() - t0) / (JOBS * n_ops))
        e, f = statistics.median(ex_runs) / 1e3, statistics.median(floor_runs) / 1e3
        print(f"{n_ops:>4} {e:>15.2f} {f:>17.2f} {e / f:>6.1f} {e * n_ops:>8.1f}")
    print(f"(median of {REPEATS} runs of {JOBS} jobs; per-op cost includes binding the input and contract check)")


if __name__ == "__main__":
    main()
