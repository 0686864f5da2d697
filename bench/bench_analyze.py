"""Cost of `rt-runtime analyze` on a trace of 1,000,000 events (target: under 10 s).

The trace is real: the runtime (VirtualClock, declared op costs) runs a five-task EDF set with
graphs of 1-4 ops, where one task's op runs long every 40th job and a hog bursts now and then, so
that about 1% of jobs miss and the per-miss accounting is exercised too. Reported: the median of
3 runs of each stage, from reading the file to the finished report.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

from rt_runtime import Graph, Op, Task, TensorSpec
from rt_runtime.analysis.trace_report import analyze_trace
from rt_runtime.analysis.trace_text import format_report
from rt_runtime.sched import Runtime, TaskBinding, VirtualClock, declared_cost
from rt_runtime.trace import TraceColumns, TraceRing, load_trace, save_trace
from timing import median_seconds  # noqa: E402 - bench/timing.py, beside this script

N_EVENTS, REPEATS, MS = 1_000_000, 3, 1_000_000
TASKS = [  # name, period ms, deadline ms, wcet ms, op costs us
    ("imu", 5, 5, 1.0, [300]),
    ("lidar", 20, 20, 8.0, [1500, 2000, 1000, 500]),
    ("camera", 25, 25, 8.0, [2500, 3000]),
    ("fusion", 50, 40, 10.0, [2000, 3000, 1000]),
    ("planning", 100, 100, 20.0, [6000, 4000]),
]


def graph(name: str, costs: list[int]) -> Graph:
    specs = [TensorSpec(f"{name}_t{i}", (2,)) for i in range(len(costs) + 1)]
    return Graph(name, [Op(f"{name}_op{i}", lambda a, b: torch.add(a, 1, out=b), (specs[i],), (specs[i + 1],),
                           cost_us=c) for i, c in enumerate(costs)], [specs[0]], [specs[-1].name])


def cost(task: str, job: int, i: int, op: Op, measured: int) -> int:
    """Declared costs, with a long lidar op every 40th job and an imu burst every 97th."""
    if task == "lidar" and i == 1 and job % 40 == 7:
        return 14_000_000
    if task == "imu" and job % 97 < 3:
        return 3_000_000
    return declared_cost(task, job, i, op, measured)


def make_trace(path: Path) -> tuple[int, float]:
    """Run the runtime until it has emitted N_EVENTS events; save them; (events, seconds taken)."""
    bindings, ops, tc = [], {}, {}
    for name, period, deadline, wcet, costs in TASKS:
        g = graph(name, costs)
        t = Task(name, period_ns=period * MS, deadline_ns=deadline * MS, wcet_ns=int(wcet * MS))
        bindings.append(TaskBinding(t, g, inputs={f"{name}_t0": "in"}, outputs={g.outputs[0].name: f"{name}_out"}))
        ops[name] = [o.name for o in g.ops]
        tc[name] = {"period_ns": t.period_ns, "deadline_ns": t.deadline, "wcet_ns": t.wcet_ns}
    ring = TraceRing(1 << 20)
    rt = Runtime(bindings, policy="edf", clock=VirtualClock(), cost=cost, sink=ring)
    rt.push("in", 0, torch.zeros(2))
    parts: list[TraceColumns] = []
    n, t_end = 0, 0
    t0 = time.perf_counter()
    while n < N_EVENTS:
        t_end += 1000 * MS
        rt.run_until(t_end)
        parts.append(ring.drain())
        n += len(parts[-1])
    cols = TraceColumns.concat(parts, ring.tasks)
    cols = TraceColumns(*(getattr(cols, f)[:N_EVENTS] for f in ("kind", "t_ns", "task", "job", "a", "b")),
                        tasks=cols.tasks)
    save_trace(path, cols, {"ops": ops, "tasks_config": tc, "policy": "edf", "workers": 1, "clock": "virtual",
                            "config": None, "bag": None, "lost_events": ring.lost})
    return len(cols), time.perf_counter() - t0


def median_s(fn: Callable[[], object]) -> float:
    """Median wall time of REPEATS calls (no warm-up: the first analysis is part of the figure)."""
    return median_seconds(fn, REPEATS, warmup=0)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.rttrace"
        n, made = make_trace(path)
        cols, meta = load_trace(path)
        rep = analyze_trace(cols, meta)
        jobs, misses = sum(t.jobs for t in rep.tasks), len(rep.misses)
        rows = [("load_trace (npz)", median_s(lambda: load_trace(path))),
                ("analyze_trace", median_s(lambda: analyze_trace(cols, meta))),
                ("load + analyze + text report", median_s(lambda: format_report(analyze_trace(*load_trace(path))))),
                ("load + analyze + JSON", median_s(lambda: json.dumps(analyze_trace(*load_trace(path)).to_json())))]
        if "--html" in sys.argv:   # matplotlib rendering, off by default: it is not the analysis
            from rt_runtime.analysis.html import render_html
            rows.append(("load + analyze + HTML", median_s(lambda: render_html(analyze_trace(*load_trace(path))))))
    print(f"trace: {n} events, {jobs} jobs, {misses} missed jobs, {len(rep.trace.ops)} ops "
          f"(made by the runtime in {made:.1f} s)")
    print(f"{'stage':<32} {'median s':>9} {'Mevents/s':>10}")
    for name, s in rows:
        print(f"{name:<32} {s:>9.2f} {n / s / 1e6:>10.2f}")
    verdict = "PASS" if rows[2][1] < 10 else "FAIL"
    print(f"target: analyse 1M events in under 10 s -> {verdict} (median of {REPEATS} runs)")


if __name__ == "__main__":
    main()
