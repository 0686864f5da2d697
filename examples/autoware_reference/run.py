"""Run the Autoware reference system on rt_runtime's WallClock and print the reference's KPIs.

    .venv/bin/python examples/autoware_reference/run.py --duration 10 [--json] [--crunch-ms 4 | --crunch-limit N]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# Nothing here starts DDS; keep the project's rule anyway for anything imported that might.
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

import system  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of wall-clock time (default 10)")
    ap.add_argument("--json", action="store_true", help="print the KPIs as one JSON object")
    ap.add_argument("--crunch-ms", type=float, default=4.0, help="calibrate each node's work to this (default 4 ms)")
    ap.add_argument("--crunch-limit", type=int, default=None, help="use this prime-count limit instead of calibrating")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--realtime", action="store_true", help="SCHED_FIFO and pinning where the OS permits")
    ap.add_argument("--steal", action=argparse.BooleanOptionalAction, default=True,
                    help="work-conserving dispatch: an idle worker takes waiting jobs (default on)")
    ap.add_argument("--trace", metavar="FILE", help="write the run's trace there (rt-runtime analyze FILE explains "
                    "each miss)")
    a = ap.parse_args(argv)
    if not (0 < a.duration <= 86400):
        print("run.py: --duration must be in (0, 86400] seconds", file=sys.stderr)
        return 2
    try:
        limit = a.crunch_limit if a.crunch_limit is not None else system.calibrate(a.crunch_ms)
    except RuntimeError as e:
        print(f"run.py: {e}", file=sys.stderr)
        return 2
    out = system.run(a.duration, limit, workers=a.workers, realtime=a.realtime, steal=a.steal, trace=a.trace)
    out["crunch_limit"] = limit
    if a.json:
        print(json.dumps(out))
        return 0
    h = out["hot_path_latency_ms"]
    print(f"Autoware reference system on rt_runtime, {a.duration:g} s, crunch limit {limit}, {a.workers} worker(s)")
    print(f"  hot path latency (ms): n={h['n']} p50={h['p50']} p99={h['p99']} max={h['max']}")
    print(f"  hot path drops: {out['hot_path_drops']['total']}    lost BehaviorPlanner cycles: {out['lost_cycles']}")
    b = out["bp_period_ms"]
    print(f"  BehaviorPlanner period (ms): std={b['std']} max |dev from 100|={b['max_abs_dev_from_100']}")
    r = out["rt_runtime"]
    print(f"  rt_runtime: sink output visible (LET publish) p50={r['hot_path_publish_latency_ms']['p50']} ms; "
          f"missed={r['missed'] or 'none'}; errors={r['errors'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
