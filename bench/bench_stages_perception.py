"""Perception stages on CPU: per-job latency (median, p99) and planned arena bytes vs the lower bound.

Each stage's graph runs through ``GraphExecutor`` on simulator data (``rt_runtime.sim``: a LiDAR
sweep of 32 x 1800 rows in ``lidar_link`` with NaN no-returns, a radar scan, a 640x384 camera
frame), plus a denser LiDAR input (two sweeps, ~115k rows) and a radar scan at capacity. Torch
runs on ``--threads`` threads (default 1: the machines this runs on are shared, and one thread
gives the steadiest figures). Memory: per pool kind, the planned arena bytes against the most
bytes alive at any step (``executor.pools[kind].plan``).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from pipelines.camera import build_camera_graph
from pipelines.lidar import build_lidar_graph
from pipelines.radar import build_radar_graph
from rt_runtime.exec import GraphExecutor
from rt_runtime.sim import Rig, build_scenario, simulate
from rt_runtime.sim import camera as simcam, lidar as simlidar, radar as simradar


def sim_inputs(scenario: str = "highway_cut_in", seed: int = 0, k: int = 300) -> dict[str, torch.Tensor]:
    """One frame of each sensor at world sample k, drawn like the recorder draws it."""
    rig = Rig()
    sc = build_scenario(scenario, seed)
    tr = simulate(sc, k * 0.01 + 1.0)
    st = sc.static
    near = np.hypot(st[:, 0] - tr.x[k, 0], st[:, 1] - tr.y[k, 0]) < 300
    boxes = np.vstack([tr.boxes(k), st[near, :7]])
    vel = np.vstack([np.column_stack([tr.vx[k, 1:], tr.vy[k, 1:]]), np.zeros((int(near.sum()), 2))])
    cls = np.concatenate([tr.classes[1:], st[near, 7].astype(np.uint8)])
    ids = np.concatenate([tr.ids[1:], 100_000 + np.flatnonzero(near).astype(np.uint32)])
    ego = (float(tr.x[k, 0]), float(tr.y[k, 0]), float(tr.yaw[k, 0]))
    lid = rig.lidar
    tc = tr.t[k] + np.arange(lid.columns) / lid.columns / lid.rate_hz
    at = tuple(np.interp(tc, tr.t, v) for v in (tr.x[:, 0], tr.y[:, 0], np.unwrap(tr.yaw[:, 0])))
    sweep = simlidar.scan(lid, sc.road, at, float(tr.s[k, 0]), boxes, vel, cls, np.random.default_rng([seed, 2, k]))
    ev = (float(tr.vx[k, 0]), float(tr.vy[k, 0]), float(tr.yaw_rate[k, 0]))
    scan = simradar.detect(rig.radar, ego, ev, boxes, vel, cls, np.random.default_rng([seed, 3, k]))
    noise = np.random.default_rng([seed, 1, k])
    img = simcam.render(rig.camera, sc.road, ego, float(tr.s[k, 0]), boxes, cls, ids, noise)
    return {
        "points": torch.from_numpy(np.stack([sweep[f] for f in ("x", "y", "z", "intensity")], -1).reshape(-1, 4)),
        "radar": torch.from_numpy(np.stack([scan[f] for f in ("x", "y", "z", "doppler", "rcs")], -1)),
        "image": torch.from_numpy(img.copy()),
    }


def time_jobs(ex: GraphExecutor, inputs: dict[str, torch.Tensor], jobs: int, warmup: int = 5) -> np.ndarray:
    """Wall time of each job in ms, after warm-up jobs."""
    for _ in range(warmup):
        ex.run(inputs)
    out = np.empty(jobs)
    for i in range(jobs):
        t0 = time.perf_counter_ns()
        ex.run(inputs)
        out[i] = (time.perf_counter_ns() - t0) / 1e6
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    rig = Rig()
    inp = sim_inputs()
    later = sim_inputs(k=500)
    gen = torch.Generator().manual_seed(0)
    full_radar = torch.cat([inp["radar"] + torch.randn(inp["radar"].shape, generator=gen) * 0.3
                            for _ in range(1024 // max(len(inp["radar"]), 1) + 1)])[:1024].contiguous()
    m, r = rig.lidar.mount, rig.radar.mount
    lidar = build_lidar_graph(mount=(m.x, m.y, m.z, m.yaw))
    radar = build_radar_graph(mount=(r.x, r.y, r.yaw))
    cases = [
        ("lidar", lidar, {"points": inp["points"]}, f"sim sweep, {len(inp['points'])} rows"),
        ("lidar", lidar, {"points": torch.cat([inp["points"], later["points"]])}, "2 sweeps, "
         f"{2 * len(inp['points'])} rows"),
        ("radar", radar, {"radar": inp["radar"]}, f"sim scan, {len(inp['radar'])} detections"),
        ("radar", radar, {"radar": full_radar}, "1024 detections (capacity)"),
        ("camera", build_camera_graph(), {"image": inp["image"]}, "sim frame 640x384"),
    ]
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.jobs} jobs per row after 5 warm-up jobs")
    print(f"{'stage':<7} {'input':<28} {'median ms':>9} {'p99 ms':>7} {'slowest op (median ms)':<30}")
    plans = {}
    for stage, graph, inputs, what in cases:
        ex = GraphExecutor(graph)
        ms = time_jobs(ex, inputs, args.jobs if stage != "camera" else max(args.jobs // 2, 10))
        per_op = []
        for _ in range(9):
            ex.run(inputs)
            per_op.append([(e - s) / 1e6 for s, e in zip(ex.op_start_ns, ex.op_end_ns)])
        op_ms = np.median(np.array(per_op), 0)
        slow = int(op_ms.argmax())
        print(f"{stage:<7} {what:<28} {np.median(ms):>9.2f} {np.percentile(ms, 99):>7.2f} "
              f"{graph.ops[slow].name + f' ({op_ms[slow]:.2f})':<30}")
        plans[stage] = ex
    print(f"\n{'stage':<7} {'pool':<12} {'planned B':>11} {'lower bound B':>14} {'ratio':>6} {'no reuse B':>11}")
    for stage, ex in plans.items():
        for kind, pool in ex.pools.items():
            p = pool.plan
            print(f"{stage:<7} {kind.value:<12} {p.total_bytes:>11} {p.lower_bound:>14} {p.ratio:>6.3f} "
                  f"{p.naive_bytes:>11}")
        print(f"{stage:<7} {'total':<12} {ex.arena_bytes:>11}")
    print(f"\n({time.perf_counter() - t_start:.1f} s)")


if __name__ == "__main__":
    main()
