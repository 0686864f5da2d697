"""Speculative planning on the built-in scenario: hit rate, latency saved, work wasted, interference.

Replays the 10 s scenario through config/stack.yaml with the planner's ``speculate:`` key off (the
anchor, same run) and on, on the virtual clock with the default cost model (each op's CPU time).
Latency is release -> trajectory available (the planning job's response time); a hit makes it 0.
Work wasted: speculative ops whose result was never committed (other hypotheses, hypotheses
restarted on a new basis, abandoned ones), and their share of the planner's own work.
Interference: the other tasks' response times (p99, max) with and without speculation.
"""
from __future__ import annotations

import os
import statistics

import numpy as np

from rt_runtime.config.stack import load_stack
from rt_runtime.replay import replay
from rt_runtime.replay.defaults import default_bag, default_config

RUNS = 3 if not os.environ.get("BENCH_QUICK") else 1


def main() -> None:
    bag = default_bag()
    cfg = load_stack(default_config())
    runs = {on: [replay(bag, cfg, speculate=on) for _ in range(RUNS)] for on in (False, True)}
    med = statistics.median
    r0 = runs[False][0]
    print(f"bag: {bag} ({r0.duration_s:.1f} s); {RUNS} runs each, medians; virtual clock, CPU-time cost model")
    print(f"\n{'planning':<22} {'resp p50 ms':>12} {'resp p99 ms':>12} {'resp max ms':>12} {'wall s':>8}")
    for on in (False, True):
        rs = runs[on]
        resp = [r.tasks["planning"].response_ns / 1e6 for r in rs]
        print(f"{'speculation ' + ('on' if on else 'off (anchor)'):<22} "
              f"{med([np.percentile(x, 50) for x in resp]):>12.2f} {med([np.percentile(x, 99) for x in resp]):>12.2f} "
              f"{med([x.max() for x in resp]):>12.2f} {med([r.wall_s for r in rs]):>8.2f}")
    sps = [r.stats["planning"]["speculation"] for r in runs[True]]
    fin = [len(r.tasks["planning"].response_ns) for r in runs[True]]
    ops = 4   # the planning graph's ops: candidates, minimal-risk, clearance, select
    print(f"\n{'hit rate':>9} {'hits':>5} {'misses':>7} {'no hyp':>7} {'inexact':>8} {'saved ms':>9} "
          f"{'spec ops':>9} {'wasted':>7} {'wasted/planner work':>20} {'late ops':>9}")
    print(f"{med([s['hits'] / max(1, s['hits'] + s['misses'] + s['no_hypothesis']) for s in sps]) * 100:>8.1f}% "
          f"{med([s['hits'] for s in sps]):>5} {med([s['misses'] for s in sps]):>7} "
          f"{med([s['no_hypothesis'] for s in sps]):>7} {med([s['inexact_hits'] for s in sps]):>8} "
          f"{med([s['latency_saved_ns'] / 1e6 for s in sps]):>9.1f} {med([s['spec_ops'] for s in sps]):>9} "
          f"{med([s['ops_wasted'] for s in sps]):>7} "
          f"{med([s['ops_wasted'] / (ops * n) for s, n in zip(sps, fin)]):>19.2f}x {med([s['late_ops'] for s in sps]):>9}")
    print(f"\n{'other task':<18} {'p99 off ms':>11} {'p99 on ms':>10} {'max off ms':>11} {'max on ms':>10} {'misses on':>10}")
    for name in r0.tasks:
        if name == "planning":
            continue
        p = {on: [r.tasks[name].response_ns / 1e6 for r in runs[on]] for on in (False, True)}
        print(f"{name:<18} {med([np.percentile(x, 99) for x in p[False]]):>11.2f} "
              f"{med([np.percentile(x, 99) for x in p[True]]):>10.2f} {med([x.max() for x in p[False]]):>11.2f} "
              f"{med([x.max() for x in p[True]]):>10.2f} {max(int(r.stats[name]['missed']) for r in runs[True]):>10}")


if __name__ == "__main__":
    main()
