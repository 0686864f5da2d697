"""Release jitter of a 10 ms periodic task on the WallClock, beside rclpy timers and a sleep loop.

Jitter here is lateness: when the task's work actually starts, minus its nominal release instant
(for ours, the entry of the graph's first op; for rclpy, the timer callback's entry minus
``TimerInfo.expected_call_time``; for the floor, a plain ``time.sleep`` loop with absolute
deadlines, the wake-up minus the deadline). Each variant runs in its own process, idle and then
beside CPU-hog processes (one per CPU by default), for ``--duration`` seconds (default 30;
BENCH_QUICK=1: 5). The table gives p50 / p99 / max in us, each the median over ``--repeat`` runs.

Variants: ``floor`` and ``ours`` as ordinary threads (same footing as rclpy); ``floor+FIFO`` and
``ours+FIFO`` pinned to a core with SCHED_FIFO (where the OS permits; ours falls back with a
warning). Targets: ours' p99 at most half of rclpy SingleThreaded's and within 2x the floor's.

Run: ``python bench/bench_jitter.py [--duration S] [--repeat N] [--hogs N] [--variants a,b]``.
"""
from __future__ import annotations

import os

# DDS stays on this machine, on its own domain: set before anything can import rclpy.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_DOMAIN_ID"] = "72"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without install

PERIOD_NS = 10_000_000
VARIANTS = ["floor", "floor+FIFO", "ours", "ours+FIFO", "rclpy ST", "rclpy Events"]
mono = time.monotonic_ns


# ---- one variant, in a child process --------------------------------------------------------------
def run_floor(n: int, fifo: bool) -> list[int]:
    if fifo:
        from rt_runtime.sched.threads import make_realtime

        make_realtime([sorted(os.sched_getaffinity(0))[-1]], 50, "floor")
    late = []
    t0 = mono() + PERIOD_NS
    for k in range(n):
        target = t0 + k * PERIOD_NS
        d = target - mono()
        if d > 0:
            time.sleep(d * 1e-9)
        late.append(mono() - target)
    return late


def run_ours(n: int, fifo: bool) -> list[int]:
    from rt_runtime.core import Graph, Op, Task
    from rt_runtime.sched import Runtime, TaskBinding, WallClock

    entries: list[int] = []
    g = Graph("tick", [Op("mark", lambda: entries.append(mono()), (), ())], [], [])
    clock = WallClock()
    rt = Runtime([TaskBinding(Task("tick", PERIOD_NS, PERIOD_NS // 2, offset_ns=PERIOD_NS), g)], clock=clock,
                 realtime=fifo, cpus=[sorted(os.sched_getaffinity(0))[-1]] if fifo else None)
    rt.run_until(n * PERIOD_NS)
    rt.close()
    # Each entry belongs to the latest nominal release before it.
    return [(e - clock.epoch_ns) % PERIOD_NS for e in entries]


def run_rclpy(n: int, kind: str) -> list[int]:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.experimental import EventsExecutor
    from rclpy.timer import TimerInfo

    rclpy.init()
    node = rclpy.create_node(f"bench_jitter_{kind}")
    late: list[int] = []
    fut = rclpy.task.Future()

    def cb(info: TimerInfo) -> None:
        late.append(time.time_ns() - info.expected_call_time.nanoseconds)
        if len(late) >= n and not fut.done():
            fut.set_result(True)

    cb.__annotations__["info"] = TimerInfo   # rclpy finds the TimerInfo parameter by annotation
    node.create_timer(PERIOD_NS / 1e9, cb)
    ex = SingleThreadedExecutor() if kind == "st" else EventsExecutor()
    ex.add_node(node)
    ex.spin_until_future_complete(fut, timeout_sec=n * PERIOD_NS / 1e9 + 10)   # on the main thread
    ex.shutdown()
    node.destroy_node()
    rclpy.shutdown()
    return late


def child(variant: str, seconds: float) -> dict[str, float]:
    n = int(seconds * 1e9 / PERIOD_NS)
    if variant.startswith("floor"):
        late = run_floor(n, variant.endswith("FIFO"))
    elif variant.startswith("ours"):
        late = run_ours(n, variant.endswith("FIFO"))
    else:
        late = run_rclpy(n, "st" if variant.endswith("ST") else "events")
    late = sorted(late[10:])   # warm-up
    pick = lambda q: late[min(len(late) - 1, int(q * len(late)))] / 1e3  # noqa: E731
    return {"p50": pick(0.5), "p99": pick(0.99), "max": late[-1] / 1e3, "n": len(late)}


# ---- the parent: conditions, repeats, table --------------------------------------------------------
def measure(variant: str, seconds: float) -> dict[str, float] | None:
    cmd = [sys.executable, __file__, "--child", variant, "--duration", str(seconds)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        print(f"  {variant}: timed out", file=sys.stderr)
        return None
    line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if out.returncode != 0 or not line.startswith("{"):
        print(f"  {variant}: failed ({out.stderr.strip().splitlines()[-1:] or out.returncode})", file=sys.stderr)
        return None
    return json.loads(line)


def main() -> None:
    quick = os.environ.get("BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=5.0 if quick else 30.0, help="seconds per run")
    ap.add_argument("--repeat", type=int, default=3 if quick else 1)
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 1, help="CPU-hog processes (0: idle only)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.duration)))
        return

    variants = [v for v in args.variants.split(",") if v]
    try:
        import rclpy  # noqa: F401  (env vars above are already set)
    except ImportError:
        variants = [v for v in variants if not v.startswith("rclpy")]
        print("rclpy not importable: its rows are left out")
    conditions = ["idle"] + ([f"{args.hogs} hog(s)"] if args.hogs > 0 else [])
    res: dict[tuple[str, str], list[dict[str, float]]] = {}
    for cond in conditions:
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)] \
            if cond != "idle" else []
        try:
            for _ in range(args.repeat):
                for v in variants:
                    r = measure(v, args.duration)
                    if r is not None:
                        res.setdefault((v, cond), []).append(r)
        finally:
            for h in hogs:
                h.kill()
                h.wait()

    def med(v: str, cond: str, key: str) -> float | None:
        rs = res.get((v, cond))
        return statistics.median(r[key] for r in rs) if rs else None

    print(f"\nRelease lateness of a 10 ms periodic task, us (median of {args.repeat} run(s) of "
          f"{args.duration:g} s each; {os.cpu_count()} CPUs)")
    head = f"{'variant':14s}" + "".join(f"{c + ' p50':>14s}{'p99':>9s}{'max':>9s}" for c in conditions)
    print(head)
    for v in variants:
        cells = ""
        for c in conditions:
            vals = [med(v, c, k) for k in ("p50", "p99", "max")]
            cells += "".join(f"{x:14.1f}" if i == 0 else f"{x:9.1f}" for i, x in enumerate(vals)) \
                if None not in vals else f"{'n/a':>14s}{'':>18s}"
        print(f"{v:14s}{cells}")
    print("\nTargets: ours p99 <= rclpy ST p99 / 2, and <= 2x the floor's p99 (same scheduling class)")
    for c in conditions:
        for ours, floor in (("ours", "floor"), ("ours+FIFO", "floor+FIFO")):
            o, f, st = med(ours, c, "p99"), med(floor, c, "p99"), med("rclpy ST", c, "p99")
            if o is None:
                continue
            vs_st = "n/a" if st is None else ("met" if o <= st / 2 else "NOT met")
            vs_fl = "n/a" if f is None else ("met" if o <= 2 * f else "NOT met")
            print(f"  {c:10s} {ours:10s} p99 {o:8.1f}  ST/2 {st / 2 if st else float('nan'):8.1f} ({vs_st})  "
                  f"2x {floor} {2 * f if f else float('nan'):8.1f} ({vs_fl})")


if __name__ == "__main__":
    main()
