"""How fast does the simulator write a bag, against real time?

Records the default scenario (highway_cut_in, 20 s, full-resolution rig: 640x384 camera at 20 Hz,
32x1800 LiDAR at 10 Hz, radar at 20 Hz, odometry at 50 Hz) to a temporary bag, once in one process
and once with a worker per CPU (up to 8), and prints wall time, the ratio to the simulated time
(< 1 is faster than real time), CPU seconds used (all processes: on a shared machine this is the
steadier figure), bag size and message count. A second table times each stage per
frame (median over the frames of a 2 s run) to show where the time goes.
Run standalone: `python bench/bench_sim.py [--seconds S] [--format mcap|sqlite3]`.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from rt_runtime.bag import to_cdr  # noqa: E402
from rt_runtime.sim import DEFAULT_SCENARIO, Rig, build_scenario, record, simulate  # noqa: E402
from rt_runtime.sim.record import _CAMERA, _LIDAR, _RADAR, _frame, _frames, _message, _Scene  # noqa: E402


def bag_size(path: Path) -> int:
    """Bytes on disk of a bag directory."""
    return sum(p.stat().st_size for p in path.iterdir())


def cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def stages(seconds: float = 2.0) -> list[tuple[str, float]]:
    """Median per-frame time of each stage over a short run."""
    rig = Rig()
    t = time.perf_counter()
    sc = build_scenario(DEFAULT_SCENARIO, 0)
    traj = simulate(sc, 20.0)
    world = time.perf_counter() - t
    scene = _Scene(sc, traj, sc.static[:, 7].astype(np.uint8), np.arange(len(sc.static), dtype=np.uint32))
    ctx = (sc, traj, rig, 0, scene)
    out = [("world dynamics, whole 20 s (once)", world)]
    for name, kind, rate, topic in [("camera render 640x384", _CAMERA, rig.camera.rate_hz, "/sensing/camera/image_raw"),
                                    ("lidar sweep 32x1800", _LIDAR, rig.lidar.rate_hz, "/sensing/lidar/points"),
                                    ("radar frame", _RADAR, rig.radar.rate_hz, "/sensing/radar/points")]:
        times, ser = [], []
        for k in _frames(rate, seconds):
            t0 = time.perf_counter()
            arr = _frame(ctx, kind, int(k))
            t1 = time.perf_counter()
            to_cdr(_message(topic, int(k), 0, traj, rig, iter([arr])))
            ser.append(time.perf_counter() - t1)
            times.append(t1 - t0)
        out.append((name, statistics.median(times)))
        out.append(("  -> message + CDR", statistics.median(ser)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--format", default="mcap", choices=["mcap", "sqlite3"])
    args = ap.parse_args()
    cpus = os.cpu_count() or 1
    runs = [1] + ([min(8, cpus)] if cpus > 1 else [])
    print(f"sim {DEFAULT_SCENARIO}, {args.seconds:g} s simulated, {args.format}, {cpus} CPUs")
    print(f"{'workers':>8s} {'wall s':>8s} {'x real time':>12s} {'cpu s':>8s} {'bag MB':>8s} {'messages':>9s}")
    for workers in runs:
        tmp = Path(tempfile.mkdtemp(prefix="bench_sim_"))
        try:
            cpu0 = cpu_seconds()
            t = time.perf_counter()
            s = record(tmp / "bag", DEFAULT_SCENARIO, args.seconds, 0, args.format, workers=workers)
            wall = time.perf_counter() - t
            cpu = cpu_seconds() - cpu0
            print(f"{workers:8d} {wall:8.2f} {wall / args.seconds:12.2f} {cpu:8.2f} "
                  f"{bag_size(tmp / 'bag') / 1e6:8.1f} {s.messages:9d}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(f"{'stage (median per frame, one process)':44s} {'ms':>8s}")
    for name, sec in stages():
        print(f"{name:44s} {sec * 1e3:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
