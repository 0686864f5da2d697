"""Per-job dispatch overhead of rt_runtime.sched, beside rclpy timers in the same run.

Two figures, each the median of repeated runs:

  (1) release -> first op start: a 1 kHz periodic task whose only op records when it is entered,
      minus the job's nominal release instant (WallClock). rclpy: a 1 ms timer whose callback
      records its entry, minus the timer's expected call time (``TimerInfo``).
  (2) runtime cost of one job with an empty graph (one op that does nothing): wall time of a run
      of many jobs divided by their number, with no sleeping (VirtualClock for ours; a timer of
      period 0 spun for a fixed time for rclpy, so callbacks run back to back).

rclpy runs on SingleThreadedExecutor and on rclpy.experimental.EventsExecutor, both spun on the
main thread (the EventsExecutor deadlocks when spun in a background thread). Target: ours at most
1/5 of SingleThreaded's and below Events'. rclpy is optional: without it, its columns read n/a.

Run: ``python bench/bench_dispatch.py [--repeat N] [--seconds S]`` (BENCH_QUICK=1: fewer, shorter).
"""
from __future__ import annotations

import os

# DDS stays on this machine, on its own domain: set before anything can import rclpy.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_DOMAIN_ID"] = "71"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

import torch  # noqa: E402

from rt_runtime.core import Graph, Op, Task, TensorSpec  # noqa: E402
from rt_runtime.sched import Runtime, TaskBinding, VirtualClock, WallClock  # noqa: E402

MS = 1_000_000
mono = time.monotonic_ns


def _pct(xs: list[int], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] / 1e3 if xs else float("nan")


# ---- ours -----------------------------------------------------------------------------------------
def _recording_graph(entries: list[int]) -> Graph:
    return Graph("empty", [Op("mark", lambda: entries.append(mono()), (), ())], [], [])


def ours_latency(seconds: float, threaded: bool, realtime: bool) -> tuple[float, float]:
    """(median, p99) of release -> first op start, in us, for a 1 kHz task."""
    entries: list[int] = []
    clock = WallClock()
    rt = Runtime([TaskBinding(Task("tick", 1 * MS, MS // 2), _recording_graph(entries))], clock=clock,
                 threaded=threaded, realtime=realtime)
    n = int(seconds * 1000)
    try:
        rt.run_until(n * MS)
        if threaded:
            time.sleep(0.01)
    finally:
        rt.close()
    # Each entry belongs to the latest nominal release before it (lateness stays well under 1 ms).
    lat = [(e - clock.epoch_ns) % MS for e in entries][10:]
    return _pct(lat, 0.5), _pct(lat, 0.99)


def ours_cost(jobs: int, with_channels: bool) -> float:
    """Wall us per job of a run with no sleeping (VirtualClock), an empty graph."""
    if with_channels:
        x, y = TensorSpec("x", (16,), "float32"), TensorSpec("y", (16,), "float32")
        g = Graph("copy", [Op("copy", lambda a, o: None, (x,), (y,))], [x], ["y"])
        b = TaskBinding(Task("tick", 1 * MS, MS // 2), g, inputs={"x": "/in"}, outputs={"y": "/out"})
    else:
        b = TaskBinding(Task("tick", 1 * MS, MS // 2), Graph("empty", [Op("noop", lambda: None, (), ())], [], []))
    rt = Runtime([b], clock=VirtualClock())
    if with_channels:
        rt.push("/in", 0, torch.zeros(16))
    rt.run_until(1000 * MS)                      # warm up
    t0 = time.perf_counter()
    rt.run_until((1000 + jobs) * MS)
    return (time.perf_counter() - t0) / jobs * 1e6


# ---- rclpy ----------------------------------------------------------------------------------------
class Ros:
    """rclpy, started once on first use."""

    def __init__(self) -> None:
        self.ok = False
        try:
            import rclpy
            from rclpy.executors import SingleThreadedExecutor
            from rclpy.experimental import EventsExecutor
            from rclpy.timer import TimerInfo
        except ImportError as e:
            self.why = f"rclpy not importable ({e})"
            return
        rclpy.init()
        self.rclpy, self.TimerInfo = rclpy, TimerInfo
        self.executors = {"st": SingleThreadedExecutor, "events": EventsExecutor}
        self.ok = True

    def _spin(self, kind: str, node, seconds: float) -> None:
        ex = self.executors[kind]()
        ex.add_node(node)
        fut = self.rclpy.task.Future()
        ex.spin_until_future_complete(fut, timeout_sec=seconds)
        ex.shutdown()

    def latency(self, kind: str, seconds: float) -> tuple[float, float]:
        """(median, p99) us from a 1 ms timer's expected call time to its callback's entry."""
        node = self.rclpy.create_node(f"bench_latency_{kind}")
        lat: list[int] = []
        TimerInfo = self.TimerInfo

        def cb(info: TimerInfo) -> None:
            lat.append(time.time_ns() - info.expected_call_time.nanoseconds)

        cb.__annotations__["info"] = TimerInfo   # rclpy passes TimerInfo by annotation
        node.create_timer(0.001, cb)
        self._spin(kind, node, seconds)
        node.destroy_node()
        return _pct(lat[10:], 0.5), _pct(lat[10:], 0.99)

    def cost(self, kind: str, seconds: float) -> float:
        """us per empty timer callback, with the timer due all the time (period 0).

        The callback itself ends the run (the EventsExecutor never returns from a spin with a
        timeout while a period-0 timer keeps it busy); the clock read it adds costs ~0.1 us.
        """
        node = self.rclpy.create_node(f"bench_cost_{kind}")
        count = [0]
        fut = self.rclpy.task.Future()
        end = time.monotonic_ns() + int(seconds * 1e9)

        def cb() -> None:
            count[0] += 1
            if time.monotonic_ns() >= end and not fut.done():
                timer.cancel()
                fut.set_result(True)

        timer = node.create_timer(0.0, cb)
        ex = self.executors[kind]()
        ex.add_node(node)
        t0 = time.perf_counter()
        ex.spin_until_future_complete(fut, timeout_sec=seconds + 5)
        el = time.perf_counter() - t0
        ex.shutdown()
        node.destroy_node()
        return el / max(1, count[0]) * 1e6

    def close(self) -> None:
        if self.ok:
            self.rclpy.shutdown()


def main() -> None:
    quick = os.environ.get("BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3 if quick else 5)
    ap.add_argument("--seconds", type=float, default=1.0 if quick else 2.0, help="per latency run")
    ap.add_argument("--jobs", type=int, default=20_000 if quick else 50_000, help="per cost run")
    args = ap.parse_args()

    cols = ["ours inline", "ours inline+FIFO", "ours threaded", "rclpy ST", "rclpy Events"]
    res: dict[tuple[str, str], list[float]] = {}

    def add(row: str, col: str, v: float) -> None:
        res.setdefault((row, col), []).append(v)

    ros = Ros()
    for _ in range(args.repeat):
        for col, thr, rt_ in (("ours inline", False, False), ("ours inline+FIFO", False, True),
                              ("ours threaded", True, False)):
            med, p99 = ours_latency(args.seconds, thr, rt_)
            add("release -> first op, median (us)", col, med)
            add("release -> first op, p99 (us)", col, p99)
        add("job cost, empty graph (us)", "ours inline", ours_cost(args.jobs, False))
        add("job cost, 1 in + 1 out channel (us)", "ours inline", ours_cost(args.jobs, True))
        if ros.ok:
            for col, kind in (("rclpy ST", "st"), ("rclpy Events", "events")):
                med, p99 = ros.latency(kind, args.seconds)
                add("release -> first op, median (us)", col, med)
                add("release -> first op, p99 (us)", col, p99)
                add("job cost, empty graph (us)", col, ros.cost(kind, args.seconds))
    ros.close()

    rows = ["release -> first op, median (us)", "release -> first op, p99 (us)", "job cost, empty graph (us)",
            "job cost, 1 in + 1 out channel (us)"]
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"\nDispatch overhead, median of {args.repeat} runs (1 kHz task for latency; "
          f"{args.jobs} jobs / {args.seconds:g} s spin for cost)")
    print(f"{'metric':38s}" + "".join(f"{c:>18s}" for c in cols))
    for r in rows:
        print(f"{r:38s}" + "".join(f"{med[(r, c)]:18.1f}" if (r, c) in med else f"{'n/a':>18s}" for c in cols))
    if not ros.ok:
        print(f"\n(rclpy columns n/a: {ros.why})")
        return
    print("\nTargets: ours at most 1/5 of rclpy SingleThreaded's and below Events' (rclpy runs SCHED_OTHER;")
    print("'ours inline' likewise, '+FIFO' is the runtime's default on a WallClock where the OS permits)")
    for r in rows[:3]:
        for col in ("ours inline", "ours inline+FIFO"):
            if (r, col) not in med:
                continue
            ours, st, ev = med[(r, col)], med[(r, "rclpy ST")], med[(r, "rclpy Events")]
            ok = ours <= st / 5 and ours < ev
            print(f"  {r:38s} {col:17s} {ours:8.1f}  ST/5 {st / 5:8.1f}  Events {ev:8.1f}  -> "
                  f"{'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
