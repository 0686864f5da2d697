"""Replay speed-up over real time for the built-in scenario, and the runtime's own share of wall time.

The runtime's share is everything that is not op execution: reading and decoding the bag, channel
copies, scheduling, tracing, encoding and writing outputs. Target: <= 5% with ``--parallel 1`` (one
thread computing, which is the driver itself: the runtime's own CPU in it — booking, channels, trace,
encoding — and the wall time it waited for results are printed too). Also prints each task's
execution time (p50 / p99 / max), the figures config/stack.yaml's budgets are derived from.
Anchor in the same run: the ops alone (the sum of measured op execution times).
Then what reading the bag cost: the reader (``--reader``: auto, thread or process) and its CPU, and
for the process the CPU this process spent receiving its messages.
"""
from __future__ import annotations

import argparse
import os
import statistics

from rt_runtime.config.stack import load_stack
from rt_runtime.replay import replay
from rt_runtime.replay.defaults import default_bag, default_config

RUNS = 3 if not os.environ.get("BENCH_QUICK") else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reader", choices=("auto", "thread", "process"), default="auto")
    args = ap.parse_args()
    bag = default_bag()
    cfg = load_stack(default_config())
    # One thread computing (`--parallel 1`): the runtime's share is then what keeps that thread from
    # computing (bench/bench_parallel.py compares thread counts).
    results = [replay(bag, cfg, parallel=1, reader=args.reader) for _ in range(RUNS)]
    med = lambda xs: statistics.median(xs)  # noqa: E731
    r0 = results[0]
    print(f"bag: {bag} ({r0.duration_s:.1f} s, {r0.inputs} sensor messages); {RUNS} runs, medians")
    print(f"{'wall s':>8} {'speed-up':>9} {'ops s':>7} {'runtime share':>14} {'runtime cpu s':>13} "
          f"{'driver waited s':>16} {'digest equal':>13}")
    print(f"{med([r.wall_s for r in results]):>8.2f} {med([r.speedup for r in results]):>8.2f}x "
          f"{med([r.exec_s for r in results]):>7.2f} {med([r.runtime_share for r in results]) * 100:>13.1f}% "
          f"{med([r.extra.get('runtime_cpu_s', 0.0) for r in results]):>13.2f} "
          f"{med([r.extra.get('driver_waited_s', 0.0) for r in results]):>16.2f} "
          f"{str(len({r.output_digest for r in results}) == 1):>13}")
    reading = [r.extra["reading"] for r in results]
    receive = f", receiving here {med([x.get('receive_cpu_s', 0.0) for x in reading]):.2f} s" \
        if reading[0]["reader"] == "process" else ""
    start = f" (start-up {med([x.get('start_cpu_s', 0.0) for x in reading]):.2f} s)" if receive else ""
    print(f"reader: {reading[0]['reader']}, its CPU {med([x.get('cpu_s', 0.0) for x in reading]):.2f} s"
          f"{start}{receive}")
    # What the ops took on this machine (the hardware timeline; the logical one takes the budgets).
    print(f"\nmeasured on this machine, median over runs of each figure (ms)")
    print(f"{'task':<18} {'jobs':>5} {'exec p50':>9} {'exec p99':>9} {'exec max':>9} {'resp p99':>9}")
    for name in sorted(r0.tasks):
        hw = [next(t for t in r.hardware["tasks"] if t["name"] == name) for r in results]
        ex = {k: med([h["exec_ms"][k] for h in hw]) for k in ("p50", "p99", "max")}
        print(f"{name:<18} {r0.tasks[name].released:>5} {ex['p50']:>9.2f} {ex['p99']:>9.2f} {ex['max']:>9.2f} "
              f"{med([h['response_ms']['p99'] for h in hw]):>9.2f}")


if __name__ == "__main__":
    main()
