"""The degraded planner's minimal-risk plan on the live node: how many come per planning period, idle and
beside CPU hogs (docs/BENCHMARKS.md, "Fallback while degraded"; docs/SAFETY.md, "Degraded mode").

Each run is what tests/test_ros_e2e.py's overload test does: `rt-runtime run` with the tracks ->
trajectory chain squeezed to 20 ms (the planner misses and degrades; recovery off), `rt-runtime play
--loop` of a 3 s recording, and this process subscribed to /planning/trajectory and /diagnostics. From
the first diagnostics report that shows the minimal-risk status (planning/status 1) on, for SECONDS, it
counts the trajectories per 100 ms period of their stamps (the node's publish instants): periods,
trajectories per period, periods without one, the longest gap between two. Medians over the repeats.

Run: python bench/bench_fallback.py [--repeats 2] [--seconds 10] [--hogs 0,2]
DDS stays on this machine (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST), on BENCH_ROS_DOMAIN (default 99).
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without install
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_DOMAIN_ID"] = os.environ.get("BENCH_ROS_DOMAIN", "99")

from rt_runtime.ros.env import prepare_environment  # noqa: E402

prepare_environment()

from rt_runtime.bag.types import stamp_ns  # noqa: E402
from rt_runtime.ros.probe import Probe  # noqa: E402
from rt_runtime.sim import record  # noqa: E402

PERIOD_NS = 100_000_000   # the planner's (config/stack.yaml)
TOPICS = {"/planning/trajectory": "nav_msgs/msg/Path", "/diagnostics": "diagnostic_msgs/msg/DiagnosticArray"}
NODE = ["run", "--set", "chains.fusion_to_plan.deadline=20ms", "--set", "tasks.planning.recover_after=1000"]


@contextmanager
def child(args: list[str], log: Path) -> Iterator[subprocess.Popen]:
    """`rt-runtime ARGS` in its own process group, SIGTERM then SIGKILL on the way out."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rt_runtime.cli", *args], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            if proc.poll() is not None:
                break
            os.killpg(proc.pid, sig)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass


@contextmanager
def hogs(n: int) -> Iterator[None]:
    """``n`` processes spinning on a core each."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def minimal_risk(probe: Probe) -> int | None:
    """Index of the first trajectory received after a report of the minimal-risk status, or None."""
    for rx, msg in probe.messages("/diagnostics"):
        for s in msg.status:
            if s.name == "rt_runtime: outputs" and any(kv.key == "planning/status" and kv.value == "1"
                                                        for kv in s.values):
                return sum(1 for t, _ in probe.messages("/planning/trajectory") if t <= rx)
    return None


def one_run(bag: Path, n_hogs: int, seconds: float, work: Path) -> dict[str, float]:
    """One degraded node beside ``n_hogs`` hogs: the per-period figures of SECONDS of its plans."""
    with hogs(n_hogs), child(NODE, work / "node.log") as node, Probe(TOPICS) as probe:
        end = time.monotonic() + 120
        while b"SIGINT or SIGTERM stops" not in (work / "node.log").read_bytes():
            if node.poll() is not None or time.monotonic() > end:
                raise SystemExit(f"bench_fallback: the node did not start; log:\n{(work / 'node.log').read_text()[-2000:]}")
            time.sleep(0.1)
        with child(["play", str(bag), "--loop", "--wait-for-subscriber", "60"], work / "play.log"):
            if not probe.spin_until(lambda: minimal_risk(probe) is not None, timeout=120):
                raise SystemExit("bench_fallback: the planner never published its minimal-risk plan")
            first = minimal_risk(probe)
            probe.spin_for(seconds)
    st = [stamp_ns(m.header.stamp) for _, m in probe.messages("/planning/trajectory")][first:]
    periods = range(st[0] // PERIOD_NS, st[-1] // PERIOD_NS + 1)
    per = [sum(1 for t in st if k * PERIOD_NS <= t < (k + 1) * PERIOD_NS) for k in periods]
    return {"periods": len(per), "plans": len(st), "per_period": len(st) / len(per), "empty": per.count(0),
            "max_gap_ms": max(b - a for a, b in zip(st, st[1:])) / 1e6}


def main() -> int:
    """Run the repeats of each load, print the table of medians."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of plans counted per run")
    ap.add_argument("--hogs", default="0,2", help="CPU hog counts to run beside, comma-separated")
    args = ap.parse_args()
    loads = [int(x) for x in args.hogs.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench_fallback_") as tmp:
        work = Path(tmp)
        bag = work / "highway_3s"
        record(bag, "highway_cut_in", 3.0, 7, "mcap", workers=2)
        rows = []
        for n in loads:
            runs = [one_run(bag, n, args.seconds, work) for _ in range(args.repeats)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            rows.append((n, med, sum(r["empty"] for r in runs), sum(r["periods"] for r in runs)))
    print(f"degraded planner's minimal-risk plans, {args.seconds:g} s a run, medians of {args.repeats} runs "
          f"({os.cpu_count()} cores)")
    print(f"{'CPU hogs':>8}  {'periods':>7}  {'plans':>5}  {'per period':>10}  {'empty periods':>13}  "
          f"{'max gap ms':>10}  {'empty, all runs':>15}")
    for n, m, empty, total in rows:
        print(f"{n:>8}  {m['periods']:>7.0f}  {m['plans']:>5.0f}  {m['per_period']:>10.2f}  {m['empty']:>13.0f}  "
              f"{m['max_gap_ms']:>10.1f}  {f'{empty} of {total}':>15}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
