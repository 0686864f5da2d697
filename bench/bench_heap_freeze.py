"""The Autoware reference example on the wall clock with and without ``sched.runtime.freeze_heap``.

A full (generation 2) collection traverses every object set-up left (torch, the graphs: hundreds of
thousands) and stalls every thread meanwhile; ``Runtime.run_until`` freezes the heap at a wall-clock
run's start so that a collection in steady state sees only what the run made. Each run is its own
process, the two variants interleaved; per run: the collections of generation 2 made during the run
(from the runtime's first ``run_until`` on, where it freezes or, here, would have) and the longest of any generation, the deadline misses,
the hot path's drops and p99, lost BehaviorPlanner cycles and the planner's period std.

    python bench/bench_heap_freeze.py                    # 2 rounds x 30 s
    python bench/bench_heap_freeze.py --rounds 3 --seconds 60
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import gc, json, sys, time
sys.path.insert(0, "examples/autoware_reference")
import rt_runtime.sched.runtime as R
import system
mode, secs = sys.argv[1], float(sys.argv[2])
limit = system.calibrate(4.0)
started = [False]
real = R.freeze_heap
def freeze():
    if mode == "freeze":
        real()
    started[0] = True      # what follows is the run
R.freeze_heap = freeze
pauses, t0 = [], [0]
def cb(phase, info):
    if phase == "start":
        t0[0] = time.perf_counter_ns()
    elif started[0]:
        pauses.append((info["generation"], (time.perf_counter_ns() - t0[0]) / 1e6))
gc.callbacks.append(cb)
out = system.run(secs, limit)
print(json.dumps({"p99": out["hot_path_latency_ms"]["p99"], "drops": out["hot_path_drops"]["total"],
                  "lost": out["lost_cycles"], "std": out["bp_period_ms"]["std"],
                  "missed": sum(out["rt_runtime"]["missed"].values()),
                  "gen2": sum(1 for g, _ in pauses if g == 2), "gc_max_ms": max((p for _, p in pauses), default=0.0)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=30.0)
    a = ap.parse_args()
    rows: dict[str, list[dict]] = {"no freeze": [], "freeze (default)": []}
    for _ in range(a.rounds):
        for label, mode in (("no freeze", "off"), ("freeze (default)", "freeze")):
            p = subprocess.run([sys.executable, "-c", CHILD, mode, str(a.seconds)], capture_output=True, text=True,
                               cwd=ROOT, timeout=a.seconds * 4 + 120)
            if p.returncode != 0:
                raise SystemExit(f"bench_heap_freeze: the {label} run failed:\n{p.stderr[-1500:]}")
            rows[label].append(json.loads(p.stdout.strip().splitlines()[-1]))
    print(f"Autoware reference on rt_runtime, {a.rounds} round(s) x {a.seconds:g} s, interleaved; per run, and the median")
    keys = ("gen2", "gc_max_ms", "missed", "drops", "lost", "p99", "std")
    print(f"{'variant':<18} " + " ".join(f"{k:>16}" for k in keys))
    for label, rs in rows.items():
        cells = [",".join(f"{r[k]:.3g}" for r in rs) + f" ({statistics.median(r[k] for r in rs):.3g})" for k in keys]
        print(f"{label:<18} " + " ".join(f"{c:>16}" for c in cells))


if __name__ == "__main__":
    main()
