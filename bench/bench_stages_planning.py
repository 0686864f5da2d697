"""Per-stage execution time and planned memory of the fusion, tracking, prediction and planning graphs.

Realistic sizes: 30 LiDAR boxes, 20 radar clusters, 15 camera boxes; ~30 tracks in steady state
(the state fed back job after job, as the runtime's channel does); the planner's 7 offsets x 6
speeds x 3 manoeuvre times = 126 candidates against 30 predicted obstacles over 35 time steps.
Prints, per stage, the median and p99 of one job through ``GraphExecutor`` and the arena bytes
planned (all pools) against the lower bound (the most bytes alive at once) per pool kind.

Usage: ``python bench/bench_stages_planning.py [--jobs 200] [--threads 1]``; finishes in < 60 s.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from pipelines import schema
from pipelines.planning import build_minimal_risk_graph, build_planning_graph
from pipelines.prediction import build_prediction_graph
from pipelines.fusion import build_fusion_graph
from pipelines.tracking import (build_fusion_tracking_graph, build_tracking_graph, initial_tracker_state, stamps,
                                tracker_feedback)
from rt_runtime.exec import GraphExecutor

N_OBJ, N_RADAR, N_CAM, DT = 30, 20, 15, 0.1
ROUTE = torch.stack((torch.arange(0.0, 1024.0, 2.0), torch.zeros(512)), 1)


def one(v: int) -> torch.Tensor:
    return torch.tensor([v], dtype=torch.int32)


def world(k: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """Sensor inputs at frame k: N_OBJ cars on three lanes moving at 8, 11, 14 m/s, ego at 10 m/s."""
    i = torch.arange(N_OBJ, dtype=torch.float32)
    t = k * DT
    ego_x = 10.0 * t
    x = 8.0 + 4.0 * i + (8.0 + 3.0 * (i % 3)) * t - ego_x              # base_link; one speed per lane
    y = (i % 3 - 1) * 3.5
    boxes = torch.zeros(schema.MAX_BOXES, len(schema.BOX_COLS))
    boxes[:N_OBJ] = torch.stack((x + 0.1 * torch.randn(N_OBJ, generator=g), y, torch.full_like(x, 0.8),
                                 torch.full_like(x, 4.5), torch.full_like(x, 1.9), torch.full_like(x, 1.6),
                                 torch.zeros_like(x), torch.full_like(x, 0.8)), 1)
    radar = torch.zeros(schema.MAX_RADAR_OBJECTS, len(schema.RADAR_OBJ_COLS))
    rel_v = (8.0 + 3.0 * (i % 3) - 10.0)[:N_RADAR]                       # relative speed along x
    vr = rel_v * x[:N_RADAR] / torch.hypot(x[:N_RADAR], y[:N_RADAR])      # its radial part: the Doppler
    radar[:N_RADAR] = torch.stack((x[:N_RADAR] + 0.5, y[:N_RADAR], vr, vr, torch.zeros(N_RADAR),
                                   torch.full((N_RADAR,), 10.0),
                                   torch.full((N_RADAR,), 4.0), torch.full((N_RADAR,), 0.7)), 1)
    cams = torch.zeros(schema.MAX_CAMERA_BOXES, len(schema.CAM_COLS))
    cams[:N_CAM] = torch.tensor([[300.0 + 5 * j, 180.0, 340.0 + 5 * j, 210.0, 0.9, 0.0] for j in range(N_CAM)])
    odom = torch.tensor([ego_x, 0.0, 0.0, 10.0, 0.0, t], dtype=torch.float64)
    return {"boxes": boxes, "box_count": one(N_OBJ), "radar_objects": radar, "radar_object_count": one(N_RADAR),
            "camera_boxes": cams, "camera_box_count": one(N_CAM), "odom": odom}


def time_jobs(ex: GraphExecutor, feed, jobs: int) -> list[float]:  # noqa: ANN001 - feed: job index -> inputs
    """Wall time (ms) of each job; inputs are built before the clock starts."""
    out = []
    for k in range(jobs):
        inputs = feed(k)
        t0 = time.perf_counter_ns()
        ex.run(inputs)
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return out


def p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(0.99 * len(s)) - 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (a runtime worker pins one)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    frames = [world(k, g) for k in range(args.jobs + 20)]
    rows = []

    def tracked(graph, with_fusion: bool):  # noqa: ANN001, ANN202
        ex = GraphExecutor(graph)
        state = initial_tracker_state()
        fusion = GraphExecutor(build_fusion_graph()) if not with_fusion else None

        def feed(k: int) -> dict[str, torch.Tensor]:
            nonlocal state
            if k and ex.jobs:
                state = tracker_feedback(ex.outputs)
            f = frames[k]
            if fusion is None:   # the sweep stamped at the odometry's instant
                stamp = round(float(f["odom"][5]) * 1e9)
                return {**f, **state, **stamps(stamp, stamp)}
            fused = fusion.run({n: f[n] for n in ("boxes", "box_count", "radar_objects", "radar_object_count",
                                                   "camera_boxes", "camera_box_count")})
            return {"fused": fused["fused"].clone(), "fused_count": fused["fused_count"].clone(), "odom": f["odom"],
                    **state}
        return ex, feed

    fusion_ex = GraphExecutor(build_fusion_graph())
    sensors = lambda k: {n: v for n, v in frames[k].items() if n != "odom"}  # noqa: E731
    rows.append(("fusion", fusion_ex, time_jobs(fusion_ex, sensors, args.jobs)))
    for name, graph, fused in (("tracking", build_tracking_graph(), False),
                               ("fusion+tracking", build_fusion_tracking_graph(), True)):
        ex, feed = tracked(graph, fused)
        time_jobs(ex, feed, 15)                                        # warm up: tracks born and confirmed
        rows.append((name, ex, time_jobs(ex, lambda k: feed(k + 15), args.jobs)))
    tracks_out = {k: v.clone() for k, v in ex.outputs.items()}
    n_conf = int(tracks_out["confirmed_count"])
    pred_ex = GraphExecutor(build_prediction_graph())
    pred_in = {"tracks": tracks_out["tracks"], "confirmed_count": tracks_out["confirmed_count"], "route": ROUTE,
               "route_count": one(len(ROUTE))}
    rows.append(("prediction", pred_ex, time_jobs(pred_ex, lambda k: pred_in, args.jobs)))
    predictions = pred_ex.run(pred_in)["predictions"].clone()
    plan_ex = GraphExecutor(build_planning_graph(target_speed=12.0))
    odom = frames[-1]["odom"]
    plan_in = {**pred_in, "predictions": predictions, "odom": odom,
               "last_trajectory": torch.zeros(schema.TRAJ_POINTS, len(schema.TRAJ_COLS))}
    plan_in["last_trajectory"] = plan_ex.run(plan_in)["trajectory"].clone()   # steady state: last plan fed back
    rows.append(("planning", plan_ex, time_jobs(plan_ex, lambda k: plan_in, args.jobs)))
    mrm_ex = GraphExecutor(build_minimal_risk_graph())
    mrm_in = {"odom": odom, "route": ROUTE, "route_count": one(len(ROUTE))}
    rows.append(("minimal_risk", mrm_ex, time_jobs(mrm_ex, lambda k: mrm_in, args.jobs)))

    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.jobs} jobs per stage; "
          f"{n_conf} confirmed tracks, {plan_ex.graph.specs['candidates'].shape[0]} planner candidates")
    print(f"{'stage':<16} {'ops':>3} {'median ms':>10} {'p99 ms':>8}  {'arena B':>9} {'lower B':>9} {'ratio':>6}  "
          "per pool: planned/lower bound")
    for name, ex, ms in rows:
        plans = {k.value: pool.plan for k, pool in ex.pools.items()}
        total = sum(p.total_bytes for p in plans.values())
        lower = sum(p.lower_bound for p in plans.values())
        pools = ", ".join(f"{k} {p.total_bytes}/{p.lower_bound}" for k, p in plans.items() if p.total_bytes)
        ratio = total / lower if lower else 1.0
        print(f"{name:<16} {len(ex.graph.ops):>3} {statistics.median(ms):>10.3f} {p99(ms):>8.3f}  "
              f"{total:>9} {lower:>9} {ratio:>6.3f}  {pools}")


if __name__ == "__main__":
    main()
