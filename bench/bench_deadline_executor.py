"""DeadlineExecutor beside rclpy's SingleThreadedExecutor and EventsExecutor: the Autoware reference system's
rclpy nodes, unmodified, and the cost of dispatching one callback.

Two figures, each run its own process, the executors interleaved (single, events, deadline, single, ...),
medians of the runs:

* autoware: ``bench_autoware.run_rclpy`` builds the 24 nodes (imported, not copied) and spins them under
  the executor; its KPIs (hot-path latency, drops, BehaviorPlanner period) plus the process's CPU
  seconds per second of run (the workload is the same under every executor: the difference is the
  executor's). ``--hog`` runs it all beside one CPU hog.
* dispatch: one subscription with an empty callback and N messages already delivered; wall and CPU time
  per callback to drain them (the executor's own cost per callback: wait set, take, dispatch).

    .venv/bin/python bench/bench_deadline_executor.py                           # 3 runs x 20 s, idle
    .venv/bin/python bench/bench_deadline_executor.py --hog --runs 3 --seconds 20
    .venv/bin/python bench/bench_deadline_executor.py --only dispatch --runs 5 --idle-nodes 24
    .venv/bin/python bench/bench_deadline_executor.py --only idle --runs 3 --seconds 3 --idle-nodes 24

* idle (``--only idle``): ``--idle-nodes`` nodes with nothing to do and one 10 ms timer with an empty
  callback, spun for ``--seconds``: the process's CPU per second (what the executor costs a graph
  between callbacks: one wake-up, one wait set, per tick).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
# a child of mode "before" imports rt_runtime from the tree --before names (the rest from this one)
sys.path.insert(0, os.environ.get("BENCH_RT_BEFORE") or str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
MODES = ("single", "events", "deadline")
ALL_MODES = (*MODES, "deadline_cfg")
# deadline_cfg: the same unmodified nodes, the executor given the hot path's and the BehaviorPlanner's timing
# (the reference's own priorities: the planner's timer first, then the LiDAR path, then the rest).
HOT_CONFIG = {"callbacks": [
    {"node": "BehaviorPlanner", "timer": "100ms", "deadline": "5ms"},
    *({"node": n, "deadline": "30ms"} for n in ("FrontLidarDriver", "RearLidarDriver", "PointsTransformerFront",
                                                "PointsTransformerRear", "PointCloudFusion", "RayGroundFilter",
                                                "EuclideanClusterDetector", "ObjectCollisionEstimator"))]}


def _executor(mode: str) -> Any:
    from rclpy.executors import SingleThreadedExecutor
    if mode == "events":
        from rclpy.experimental import EventsExecutor
        return EventsExecutor()
    if mode.startswith("deadline") or mode == "before":
        from rt_runtime.ros import DeadlineExecutor
        return DeadlineExecutor(HOT_CONFIG if mode == "deadline_cfg" else None)
    return SingleThreadedExecutor()


def child_autoware(mode: str, seconds: float, limit: int) -> dict:
    """bench_autoware's rclpy system under ``mode``; its KPIs and the process's CPU per second."""
    import rclpy.executors

    import bench_autoware as BA
    if mode.startswith("deadline") or mode == "before":   # run_rclpy makes a SingleThreadedExecutor: this one takes its place
        from rt_runtime.ros import DeadlineExecutor
        cfg = HOT_CONFIG if mode == "deadline_cfg" else None
        rclpy.executors.SingleThreadedExecutor = lambda: DeadlineExecutor(cfg)   # type: ignore[misc]
    cpu0, t0 = time.process_time(), time.monotonic()
    out = BA.run_rclpy("rclpy_events" if mode == "events" else "rclpy_single", seconds, limit)
    out["cpu_per_s"] = (time.process_time() - cpu0) / (time.monotonic() - t0)
    return out


def child_dispatch(mode: str, n: int, idle: int = 0) -> dict:
    """Wall and CPU µs per callback to drain ``n`` delivered messages with an empty callback, beside ``idle``
    nodes with nothing to do (each has rclpy's parameter services: what a wait set holds on a real graph)."""
    import rclpy
    from rclpy.node import Node
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from rclpy.task import Future
    from std_msgs.msg import Int64

    rclpy.init()
    qos = QoSProfile(depth=n, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)
    node, talker = Node("sink"), Node("source")
    others = [Node(f"idle_{i}") for i in range(idle)]
    got, done = [0], Future()

    def cb(_msg: Any) -> None:
        got[0] += 1
        if got[0] == n:
            done.set_result(True)
    node.create_subscription(Int64, "/flood", cb, qos)
    pub = talker.create_publisher(Int64, "/flood", qos)
    end = time.monotonic() + 20
    while pub.get_subscription_count() < 1 and time.monotonic() < end:
        time.sleep(0.01)
    msg = Int64()
    for i in range(n):
        msg.data = i
        pub.publish(msg)
    time.sleep(1.0)   # delivered into the reader's history before the executor starts
    ex = _executor(mode)
    ex.add_node(node)
    for o in others:
        ex.add_node(o)
    cpu0, t0 = time.process_time(), time.perf_counter()
    ex.spin_until_future_complete(done, timeout_sec=60)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    ok = got[0] == n
    ex.shutdown()
    node.destroy_node()
    talker.destroy_node()
    rclpy.shutdown()
    return {"n": got[0], "ok": ok, "wall_us": wall / max(got[0], 1) * 1e6, "cpu_us": cpu / max(got[0], 1) * 1e6}


def child_idle(mode: str, seconds: float, idle: int) -> dict:
    """CPU seconds per second of spinning ``idle`` nodes with nothing to do beside one 10 ms timer with an empty
    callback: what an executor costs a graph between its callbacks (each wake-up's wait set)."""
    import rclpy
    from rclpy.node import Node

    rclpy.init()
    node = Node("ticker")
    ticks = [0]
    node.create_timer(0.01, lambda: ticks.__setitem__(0, ticks[0] + 1))
    others = [Node(f"idle_{i}") for i in range(idle)]
    ex = _executor(mode)
    for n in (node, *others):
        ex.add_node(n)
    end = time.monotonic() + 0.5
    while time.monotonic() < end:   # warm: the first waits build what later ones reuse
        ex.spin_once(timeout_sec=0.05)
    cpu0, t0, k0 = time.process_time(), time.perf_counter(), ticks[0]
    end = t0 + seconds
    while time.perf_counter() < end:
        ex.spin_once(timeout_sec=0.05)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    n = ticks[0] - k0
    ex.shutdown()
    rclpy.shutdown()
    return {"cpu_per_s": cpu / wall, "ticks_per_s": n / wall, "cpu_us_per_tick": cpu / max(n, 1) * 1e6}


@contextmanager
def hog(on: bool) -> Iterator[None]:
    """One busy process beside the runs (or nothing)."""
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None
    try:
        yield
    finally:
        if p is not None:
            p.kill()
            p.wait()


def med(vals: list[Any]) -> float | None:
    vals = [v for v in vals if v is not None]
    return round(statistics.median(vals), 2) if vals else None


ROWS = [("hot-path latency p50 (ms)", lambda r: r["hot_path_latency_ms"]["p50"]),
        ("hot-path latency p99 (ms)", lambda r: r["hot_path_latency_ms"]["p99"]),
        ("hot-path samples n", lambda r: r["hot_path_latency_ms"]["n"]),
        ("hot-path drops", lambda r: r["hot_path_drops"]["total"]),
        ("lost BehaviorPlanner cycles", lambda r: r["lost_cycles"]),
        ("BP period std (ms)", lambda r: r["bp_period_ms"]["std"]),
        ("process CPU (s per s)", lambda r: r["cpu_per_s"])]


def _run(args: list[str], domain: int, timeout: float, before: str | None = None) -> dict:
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_DOMAIN_ID=str(domain))
    if before and args[1].endswith(":before"):
        env["BENCH_RT_BEFORE"] = before
    p = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="DeadlineExecutor vs rclpy's executors")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--messages", type=int, default=2000, help="messages drained per dispatch run")
    ap.add_argument("--idle-nodes", type=int, default=0, help="idle nodes beside the dispatch run's two")
    ap.add_argument("--hog", action="store_true", help="beside one CPU hog")
    ap.add_argument("--only", choices=("autoware", "dispatch", "idle"))
    ap.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(ALL_MODES)}")
    ap.add_argument("--crunch-ms", type=float, default=4.0)
    ap.add_argument("--before", metavar="DIR", help="add mode 'before': the DeadlineExecutor of another tree "
                    "(git archive REV rt_runtime | tar -x -C DIR), interleaved with the others")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        kind, mode = a.child.split(":")
        out = child_autoware(mode, a.seconds, a.limit) if kind == "autoware" else \
            child_idle(mode, a.seconds, a.idle_nodes) if kind == "idle" else child_dispatch(mode, a.messages,
                                                                                            a.idle_nodes)
        print(json.dumps(out))
        return 0
    modes = [m for m in a.modes.split(",") if m] + (["before"] if a.before else [])
    bad = [m for m in modes if m not in (*ALL_MODES, "before")]
    if bad:
        print(f"bench_deadline_executor: --modes: {bad[0]!r} is not one of {', '.join(ALL_MODES)}", file=sys.stderr)
        return 2
    base = 80 + os.getpid() % 10
    res: dict[str, dict[str, list[dict]]] = {k: {m: [] for m in modes} for k in ("autoware", "dispatch", "idle")}
    limit = None
    if a.only in (None, "autoware"):
        sys.path.insert(0, str(ROOT / "examples" / "autoware_reference"))
        import system as S
        limit = S.calibrate(a.crunch_ms)
    with hog(a.hog):
        for i in range(a.runs):
            for m in modes:
                if a.only in (None, "dispatch"):
                    res["dispatch"][m].append(_run(["--child", f"dispatch:{m}", "--messages", str(a.messages),
                                                    "--idle-nodes", str(a.idle_nodes)], base, 120, a.before))
                if a.only == "idle":
                    res["idle"][m].append(_run(["--child", f"idle:{m}", "--seconds", str(a.seconds),
                                                "--idle-nodes", str(a.idle_nodes)], base, a.seconds + 120, a.before))
                if a.only in (None, "autoware"):
                    res["autoware"][m].append(_run(["--child", f"autoware:{m}", "--seconds", str(a.seconds),
                                                    "--limit", str(limit)], base, a.seconds + 120, a.before))
    table = {m: {name: med([f(r) for r in res["autoware"][m]]) for name, f in ROWS} for m in modes}
    disp = {m: {k: med([r[k] for r in res["dispatch"][m]]) for k in ("wall_us", "cpu_us")} for m in modes}
    idle = {m: {k: med([r[k] for r in res["idle"][m]]) for k in ("cpu_per_s", "ticks_per_s", "cpu_us_per_tick")}
            for m in modes}
    if a.json:
        print(json.dumps({"runs": a.runs, "seconds": a.seconds, "hog": a.hog, "autoware": table, "dispatch": disp,
                          "idle": idle, "raw": res}))
        return 0
    where = "beside one CPU hog" if a.hog else "idle"
    if a.only in (None, "autoware"):
        print(f"Autoware reference (rclpy nodes), {a.runs} run(s) x {a.seconds:g} s per executor, interleaved, "
              f"{where}; crunch limit {limit}; {os.cpu_count()} CPU(s); medians of runs")
        w = max(len(n) for n, _ in ROWS)
        print(f"{'KPI':<{w}}  " + "  ".join(f"{m:>12}" for m in modes))
        for name, _ in ROWS:
            print(f"{name:<{w}}  " + "  ".join(f"{str(table[m][name]):>12}" for m in modes))
    if a.only == "idle":
        print(f"idle: {a.idle_nodes} idle node(s) and one 10 ms timer, {a.seconds:g} s, {a.runs} run(s), {where}; "
              f"medians")
        print(f"{'':<16}  " + "  ".join(f"{m:>12}" for m in modes))
        for k, label in (("cpu_per_s", "CPU (s per s)"), ("ticks_per_s", "ticks per s"),
                         ("cpu_us_per_tick", "CPU us per tick")):
            print(f"{label:<16}  " + "  ".join(f"{str(idle[m][k]):>12}" for m in modes))
    if a.only in (None, "dispatch"):
        print(f"dispatch: {a.messages} delivered messages, empty callback, {a.idle_nodes} idle node(s) beside, "
              f"{a.runs} run(s), {where}; medians")
        print(f"{'per callback':<14}  " + "  ".join(f"{m:>12}" for m in modes))
        for k, label in (("wall_us", "wall (us)"), ("cpu_us", "CPU (us)")):
            print(f"{label:<14}  " + "  ".join(f"{str(disp[m][k]):>12}" for m in modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
