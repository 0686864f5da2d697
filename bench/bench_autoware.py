"""The Autoware reference system (examples/autoware_reference) on rt_runtime beside rclpy's
SingleThreadedExecutor and EventsExecutor: the same 24 nodes, the same per-node logic and workload
(the C prime counter through ctypes), the same KPIs computed the reference's way.

The rclpy variants are real ROS 2 nodes in one process, talking over DDS (std_msgs/Int64MultiArray
carrying the (4, 24) stamp history), discovery on this machine only and a ROS_DOMAIN_ID per run.
Each run is its own process; the variants are interleaved (rt, single, events, rt, ...), N runs
each, and the table shows the median of the runs' KPIs.

    .venv/bin/python bench/bench_autoware.py                       # 3 runs x 10 s each
    AUTOWARE_BENCH_RUNS=5 AUTOWARE_BENCH_SECONDS=60 .venv/bin/python bench/bench_autoware.py
    .venv/bin/python bench/bench_autoware.py --runs 1 --seconds 5 --json
    .venv/bin/python bench/bench_autoware.py --seconds 60 --hogs 1      # beside one CPU hog

``--hogs K`` starts K CPU hogs (``while True: pass``, one process each, in their own process group)
after the crunch is calibrated (so every run does the same work) and kills them when the runs end,
however they end.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples" / "autoware_reference"
sys.path.insert(0, str(EX))

MODES = ("rt_runtime", "rt_runtime_nosteal", "rclpy_single", "rclpy_events")


# ---- the rclpy system (a child process) -----------------------------------------------------
def run_rclpy(mode: str, duration_s: float, limit: int) -> dict:
    import array

    import rclpy
    import torch
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node as RosNode
    from std_msgs.msg import Int64MultiArray

    import system as S

    rclpy.init()
    samples: list = []

    def to_t(msg) -> torch.Tensor:
        return torch.frombuffer(bytearray(memoryview(msg.data).cast("B")), dtype=torch.int64).view(S.SHAPE)

    def to_msg(y: torch.Tensor):
        m = Int64MultiArray()
        a = array.array("q")
        a.frombytes(y.numpy().tobytes())
        m.data = a
        return m

    nodes = []
    for spec in S.TOPOLOGY:
        L = S.NodeLogic(spec, limit)
        n = RosNode(spec.name)
        nodes.append(n)
        y = torch.zeros(S.SHAPE, dtype=torch.int64)
        pub = n.create_publisher(Int64MultiArray, spec.name, 10) if spec.kind not in ("command",) else None
        if spec.kind == "sensor":
            def cb(*_, L=L, y=y, pub=pub):   # EventsExecutor passes a TimerInfo
                L.sensor(y)
                pub.publish(to_msg(y))
            n.create_timer(spec.period_ms / 1e3, cb)
        elif spec.kind == "transform":
            def cb(msg, L=L, y=y, pub=pub):
                L.transform(to_t(msg), y)
                pub.publish(to_msg(y))
            n.create_subscription(Int64MultiArray, spec.inputs[0], cb, 10)
        elif spec.kind == "fusion":
            cache: list = [None, None]

            def cb(msg, k, L=L, y=y, pub=pub, cache=cache):
                cache[k] = to_t(msg)
                if cache[0] is None or cache[1] is None:
                    return
                L.fusion(cache[0], cache[1], y)
                pub.publish(to_msg(y))
                cache[0] = cache[1] = None
            for k, src in enumerate(spec.inputs):
                n.create_subscription(Int64MultiArray, src, lambda m, k=k, cb=cb: cb(m, k), 1)
        elif spec.kind == "cyclic":
            caches: list = [None] * len(spec.inputs)

            def store(msg, k, caches=caches):
                caches[k] = to_t(msg)

            def tick(*_, L=L, y=y, pub=pub, caches=caches):
                L.cyclic(list(caches), y)
                caches[:] = [None] * len(caches)
                pub.publish(to_msg(y))
            for k, src in enumerate(spec.inputs):
                n.create_subscription(Int64MultiArray, src, lambda m, k=k: store(m, k), 1)
            n.create_timer(spec.period_ms / 1e3, tick)
        elif spec.kind == "intersection":
            pub2 = n.create_publisher(Int64MultiArray, "EuclideanIntersection", 10)

            def det(msg, L=L, y=y, pub=pub):
                L.transform(to_t(msg), y)
                pub.publish(to_msg(y))

            def settings(msg, L=L, pub2=pub2):
                L.settings(to_t(msg))
                pub2.publish(to_msg(L.inter))
            n.create_subscription(Int64MultiArray, spec.inputs[0], det, 10)
            n.create_subscription(Int64MultiArray, spec.inputs[1], settings, 10)
        elif spec.kind == "command":
            def cb(msg, L=L, y=y, keep=spec.name == S.KPI_NODE):
                L.command(to_t(msg), y)
                if keep:
                    samples.append(y.numpy().copy())
            n.create_subscription(Int64MultiArray, spec.inputs[0], cb, 10)

    if mode == "rclpy_events":
        from rclpy.experimental import EventsExecutor
        ex = EventsExecutor()
    else:
        ex = SingleThreadedExecutor()
    for n in nodes:
        ex.add_node(n)
    done = rclpy.task.Future()
    end = time.monotonic() + duration_s
    stopper = nodes[0].create_timer(0.05, lambda *_: done.set_result(True) if time.monotonic() >= end and not done.done() else None)
    try:
        ex.spin_until_future_complete(done, timeout_sec=duration_s + 30)   # in the main thread
    finally:
        stopper.cancel()
        ex.shutdown()
        for n in nodes:
            n.destroy_node()
        rclpy.shutdown()
    out = S.kpis(samples)
    out["samples_at_sink"] = len(samples)
    return out


def child(mode: str, duration_s: float, limit: int) -> dict:
    if mode.startswith("rt_runtime"):
        import system as S
        return S.run(duration_s, limit, workers=min(2, os.cpu_count() or 1), steal=not mode.endswith("nosteal"))
    return run_rclpy(mode, duration_s, limit)


# ---- the parent: interleaved runs and the table ---------------------------------------------
@contextlib.contextmanager
def hogs(k: int) -> Iterator[None]:
    """``k`` CPU hogs (busy loops, a process group each) for the block's duration; SIGKILLed after it,
    also when the bench is interrupted or sent SIGTERM (the hogs are in sessions of their own, so
    nothing else would stop them)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                              start_new_session=True) for _ in range(k)]
    before = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def whole(text: str) -> int:
    """argparse type: an integer >= 0."""
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number (0, 1, ...), found {text}")
    return n


def positive(text: str) -> float:
    """argparse type: a number of seconds > 0."""
    x = float(text)
    if not x > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, found {text}")
    return x


def med(vals):
    vals = [v for v in vals if v is not None]
    return round(statistics.median(vals), 2) if vals else None


ROWS = [("hot-path latency p50 (ms)", lambda r: r["hot_path_latency_ms"]["p50"]),
        ("hot-path latency p99 (ms)", lambda r: r["hot_path_latency_ms"]["p99"]),
        ("hot-path latency max (ms)", lambda r: r["hot_path_latency_ms"]["max"]),
        ("hot-path samples n", lambda r: r["hot_path_latency_ms"]["n"]),
        ("hot-path drops", lambda r: r["hot_path_drops"]["total"]),
        ("lost BehaviorPlanner cycles", lambda r: r["lost_cycles"]),
        ("BP period std (ms)", lambda r: r["bp_period_ms"]["std"]),
        ("BP period max |dev from 100| (ms)", lambda r: r["bp_period_ms"]["max_abs_dev_from_100"])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Autoware reference system: rt_runtime vs rclpy executors")
    ap.add_argument("--runs", type=int, default=int(os.environ.get("AUTOWARE_BENCH_RUNS", 3)))
    ap.add_argument("--seconds", type=positive, default=float(os.environ.get("AUTOWARE_BENCH_SECONDS", 10)),
                    help="seconds per run (default 10, or AUTOWARE_BENCH_SECONDS)")
    ap.add_argument("--hogs", type=whole, default=0, help="CPU hogs the bench starts beside the runs (default 0)")
    ap.add_argument("--crunch-ms", type=float, default=4.0)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child, a.seconds, a.limit)))
        return 0
    import system as S
    try:
        limit = S.calibrate(a.crunch_ms)
    except RuntimeError as e:
        print(f"bench_autoware: {e}", file=sys.stderr)
        return 2
    modes = [m for m in a.modes.split(",") if m]
    results: dict[str, list[dict]] = {m: [] for m in modes}
    base = int(os.environ.get("ROS_DOMAIN_ID", "42"))
    with hogs(a.hogs):
        for i in range(a.runs):
            for k, m in enumerate(modes):
                env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
                           ROS_DOMAIN_ID=str((base + 1 + i * len(modes) + k) % 100 + 1))
                p = subprocess.run([sys.executable, __file__, "--child", m, "--seconds", str(a.seconds),
                                    "--limit", str(limit)], env=env, capture_output=True, text=True,
                                   timeout=a.seconds + 120)
                if p.returncode != 0:
                    print(f"bench_autoware: {m} run {i} failed:\n{p.stderr[-2000:]}", file=sys.stderr)
                    return 1
                results[m].append(json.loads(p.stdout.strip().splitlines()[-1]))
    table = {m: {name: med([f(r) for r in results[m]]) for name, f in ROWS} for m in modes}
    if a.json:
        print(json.dumps({"runs": a.runs, "seconds": a.seconds, "hogs": a.hogs, "crunch_limit": limit, "medians": table,
                          "raw": results}))
        return 0
    print(f"Autoware reference system, {a.runs} run(s) x {a.seconds:g} s per executor, interleaved, beside "
          f"{a.hogs} CPU hog(s); crunch limit {limit} (~{a.crunch_ms:g} ms/node); {os.cpu_count()} CPU(s); "
          f"medians of runs")
    w = max(len(n) for n, _ in ROWS)
    print(f"{'KPI':<{w}}  " + "  ".join(f"{m:>13}" for m in modes))
    for name, _ in ROWS:
        print(f"{name:<{w}}  " + "  ".join(f"{str(table[m][name]):>13}" for m in modes))
    if "rt_runtime" in results:
        pub = med([r["rt_runtime"]["hot_path_publish_latency_ms"]["p50"] for r in results["rt_runtime"]])
        miss = med([sum(r["rt_runtime"]["missed"].values()) for r in results["rt_runtime"]])
        print(f"rt_runtime only: the sink's output becomes visible (LET publish) p50 {pub} ms after the "
              f"newest LiDAR stamp; deadline misses per run (median) {miss}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
