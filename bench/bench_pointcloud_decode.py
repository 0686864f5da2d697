"""How fast does rt_runtime.bag decode a PointCloud2, against a per-point struct.unpack loop?

The cloud: 120,000 points (64 rings x 1875 columns, organized) in a Velodyne/Ouster-like layout
with padding: x, y, z float32, 4 pad bytes, intensity float32, ring uint16, 2 pad bytes,
t float32 -> point_step 28. The baseline reads it the way sensor_msgs_py's read_points has done it
(one struct.unpack_from per point, building a list of tuples). Each method is timed as the
median of repeated runs; the ratio is baseline time / method time.
Run standalone: `python bench/bench_pointcloud_decode.py` (a few seconds).
"""
from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from rt_runtime.bag import array_to_cloud, cloud_to_array, cloud_xyz, from_cdr, to_cdr  # noqa: E402
from timing import median_seconds  # noqa: E402 - bench/timing.py, beside this script

DTYPE = np.dtype({"names": ["x", "y", "z", "intensity", "ring", "t"],
                  "formats": ["<f4", "<f4", "<f4", "<f4", "<u2", "<f4"],
                  "offsets": [0, 4, 8, 16, 20, 24], "itemsize": 28})


def make_cloud(rings: int = 64, columns: int = 1875) -> bytes:
    """Raw CDR bytes of a seeded 120k-point organized cloud."""
    rng = np.random.default_rng(0)
    pts = np.zeros((rings, columns), DTYPE)
    for n in ("x", "y", "z", "intensity", "t"):
        pts[n] = rng.standard_normal((rings, columns)).astype(np.float32)
    pts["ring"] = np.arange(rings)[:, None]
    return to_cdr(array_to_cloud(pts, "lidar", 0))


def struct_loop(msg: object) -> list[tuple]:
    """Per-point struct.unpack_from, as sensor_msgs_py.read_points used to (ROS 1 and early ROS 2)."""
    unpack = struct.Struct("<fff4xfHxxf").unpack_from
    data = msg.data.tobytes()
    step, row = msg.point_step, msg.row_step
    out = []
    for r in range(msg.height):
        base = r * row
        for c in range(msg.width):
            out.append(unpack(data, base + c * step))
    return out


def median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of `repeats` calls (after one warm-up)."""
    return median_seconds(fn, repeats)


def main() -> int:
    raw = make_cloud()
    msg = from_cdr(raw, "sensor_msgs/msg/PointCloud2")
    n = msg.width * msg.height
    ref = struct_loop(msg)
    arr = cloud_to_array(msg)
    assert len(ref) == n and np.allclose(np.array([p[3] for p in ref[:1000]]), arr.reshape(-1)["intensity"][:1000])
    methods: list[tuple[str, Callable[[], object], int]] = [
        ("struct.unpack per point (baseline)", lambda: struct_loop(msg), 5),
        ("cloud_to_array (zero-copy view)", lambda: cloud_to_array(msg), 200),
        ("from_cdr + cloud_to_array (raw bytes -> view)", lambda: cloud_to_array(
            from_cdr(raw, "sensor_msgs/msg/PointCloud2")), 200),
        ("cloud_to_array + cloud_xyz(intensity) -> (N,4) f32", lambda: cloud_xyz(cloud_to_array(msg), ("intensity",)),
         50),
    ]
    base = None
    print(f"PointCloud2 decode: {n} points, point_step {msg.point_step}, {len(raw) / 1e6:.2f} MB CDR")
    print(f"{'method':52s} {'median ms':>10s} {'speed-up':>10s}")
    for name, fn, reps in methods:
        t = median_time(fn, reps)
        base = base or t
        print(f"{name:52s} {t * 1e3:10.3f} {base / t:9.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
