"""The reference stack's hot ops on recorded data: each op's median time per job, LiDAR, prediction, planning.

LiDAR: every sweep of the built-in scenario's bag (``rt_runtime.replay.defaults.default_bag``),
decoded as the replay's ingress does, through ``build_lidar_graph`` with config/stack.yaml's
mount. Prediction and planning: the confirmed tracks the stack published in a replay of the same bag
(zero op cost), each with the odometry the planner read and the route, through the braking-aware
prediction graph (its speed state fed back) and then ``build_planning_graph`` (the highway's road),
its last plan fed back. Per op, the median of
``GraphExecutor``'s own op start/end stamps over ``--passes`` passes over all jobs; one torch
thread (what a runtime worker uses). Anchor, in the same run: a fixed torch workload (sort of 1M
floats and a 512x512 matmul) whose time tracks this machine's speed and load while the bench ran.
With ``--baseline DIR`` (another checkout) its LiDAR, prediction and planning graphs run too (with
that checkout's ``pipelines/geometry.py``), taking turns with these job by job, so that a
before/after shares the machine's load; each job's outputs are compared bit for bit.

Run: ``PYTHONPATH=. python bench/bench_hot_ops.py [--passes N] [--threads T] [--baseline DIR]``
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from pipelines.lidar import build_lidar_graph  # noqa: E402
from pipelines.planning import build_planning_graph  # noqa: E402
from pipelines.prediction import build_prediction_graph, initial_prediction_state  # noqa: E402
from pipelines.stack import initial_planner_state, road_args, road_layout  # noqa: E402
from rt_runtime.bag import open_bag  # noqa: E402
from rt_runtime.config.stack import load_stack  # noqa: E402
from rt_runtime.exec import GraphExecutor  # noqa: E402
from rt_runtime.io.ingress import INGRESS_CODECS  # noqa: E402
from rt_runtime.replay import replay  # noqa: E402
from rt_runtime.replay.defaults import default_bag, default_config  # noqa: E402
from rt_runtime.sched import zero_cost  # noqa: E402
from rt_runtime.sim import build_scenario  # noqa: E402


def anchor_ms(repeat: int = 5) -> float:
    """Median time of a fixed torch workload: the machine's speed while the bench ran."""
    g = torch.Generator().manual_seed(0)
    x, a = torch.rand(1 << 20, generator=g), torch.rand(512, 512, generator=g)
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        torch.sort(x)
        a @ a
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(out)


def op_times(exs: dict[str, GraphExecutor], feeds: list[dict[str, Any]], passes: int,
             feedback=None, views: bool = False) -> tuple[dict[str, dict[str, float]], int]:  # noqa: ANN001
    """Median ms per op of each executor over ``passes`` passes over ``feeds`` (after a warm-up pass),
    the executors taking turns job by job so that load on a shared machine hits them alike; and the
    number of jobs (all passes) whose outputs (and, with ``views``, every planned tensor) are not
    bit-equal across the executors."""
    names = {k: [o.name for o in ex.graph.ops] for k, ex in exs.items()}
    samples = {k: {n: [] for n in ns} for k, ns in names.items()}
    differing = 0
    for p in range(passes + 1):
        state = {k: None for k in exs}
        for inputs in feeds:
            outs = []
            for k, ex in exs.items():
                ex.run({**inputs, **feedback(ex, state[k])} if feedback is not None else inputs)
                if feedback is not None:
                    state[k] = ex.outputs
                if p:
                    for i, n in enumerate(names[k]):
                        samples[k][n].append((ex.op_end_ns[i] - ex.op_start_ns[i]) / 1e6)
                outs.append({n: bits(v) for n, v in ex.outputs.items()}
                            | ({f"view:{n}": bits(v) for n, v in ex.views.items()} if views else {}))
            differing += any(o != outs[0] for o in outs[1:])
    return {k: {n: statistics.median(v) for n, v in ops.items()} for k, ops in samples.items()}, differing


def bits(t: torch.Tensor) -> tuple:
    """A tensor's dtype, shape and bytes: equal exactly when bit-identical (NaN included)."""
    return t.dtype, tuple(t.shape), t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def thread_scaling(build: Callable[[], Any], feeds: list[dict[str, Any]], passes: int = 1) -> tuple[float, float]:
    """Wall ms of two executors' ``passes`` over ``feeds``: one after the other on one thread, then on two
    threads at once (after two untimed jobs each: TorchScript compiles, then optimises at its second call)."""
    exs = [GraphExecutor(build()) for _ in range(2)]
    for ex in exs:
        for inputs in feeds[:2]:
            ex.run(inputs)

    def work(ex: GraphExecutor) -> None:
        for _ in range(passes):
            for inputs in feeds:
                ex.run(inputs)

    t0 = time.perf_counter()
    for ex in exs:
        work(ex)
    t1 = time.perf_counter()
    ths = [threading.Thread(target=work, args=(ex,)) for ex in exs]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    return (t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3


def baseline_modules(root: Path, names: tuple[str, ...]) -> dict[str, Any]:
    """``pipelines/<name>.py`` of another checkout for each of ``names``, loaded by file in this order
    (each once per process): while they load, ``pipelines.<name>`` (module and package attribute) is
    the baseline's, so that each one's imports of the ones before it (``pipelines.geometry``, its
    ``*_kernels``) find the baseline's; the rest comes from here. Names without a file are skipped."""
    import pipelines
    saved = {n: (sys.modules.get(f"pipelines.{n}"), getattr(pipelines, n, None)) for n in names}
    loaded: dict[str, Any] = {}
    try:
        for n in names:
            path = root / "pipelines" / f"{n}.py"
            if not path.exists():
                continue
            mod = sys.modules.get(f"baseline_{n}")
            if mod is None:
                spec = importlib.util.spec_from_file_location(f"baseline_{n}", path)
                mod = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = mod          # dataclasses look their module up
                spec.loader.exec_module(mod)
            sys.modules[f"pipelines.{n}"] = mod
            setattr(pipelines, n, mod)               # ``from pipelines import x`` reads the attribute first
            loaded[n] = mod
    finally:
        for n, (module, attr) in saved.items():
            if module is not None:
                sys.modules[f"pipelines.{n}"] = module
            else:
                sys.modules.pop(f"pipelines.{n}", None)
            if attr is not None:
                setattr(pipelines, n, attr)
            elif hasattr(pipelines, n):
                delattr(pipelines, n)
    return loaded


def baseline_module(root: Path, name: str) -> Any:
    """``pipelines/<name>.py`` of another checkout, loaded by file, with that checkout's
    ``pipelines/geometry.py`` and ``pipelines/<name>_kernels.py`` (the shared helpers and the op
    bodies are part of a before/after)."""
    return baseline_modules(root, ("geometry", f"{name}_kernels", name))[name]


def lidar_feeds(bag: Path, topic: str) -> list[dict[str, torch.Tensor]]:
    """Every sweep of the bag as the ingress decodes it."""
    codec = INGRESS_CODECS["lidar_points"]
    with open_bag(bag) as r:
        return [{"points": torch.from_numpy(codec.decode(r.decode(m), topic))} for m in r.messages([topic])]


def planning_feeds(bag: Path) -> list[dict[str, torch.Tensor]]:
    """Planner inputs from a replay: published tracks, the odometry and route read, predictions (and
    ``track_t``, the prediction graph's stamp, which the planner ignores)."""
    cfg = load_stack(default_config())
    seen: dict[str, Any] = {}

    def keep(bag_path, retained, start_ns, ego, **_):  # noqa: ANN001, ANN202
        seen.update(retained=retained, ego=ego)
        return {}

    replay(bag, cfg, quality=keep, cost=zero_cost, hardware=False)
    with open_bag(bag) as r:
        route_msg = next(iter(r.messages(["/planning/route"])))
        route = INGRESS_CODECS["route"].decode(r.decode(route_msg), "/planning/route")
    route = {k: torch.from_numpy(np.asarray(v)) for k, v in route.items()}
    ego_t = np.array([t for t, _ in seen["ego"]])
    pred = GraphExecutor(build_prediction_graph(road=build_scenario("highway_cut_in", 7).road, accel=True))
    state = initial_prediction_state()
    feeds = []
    for t, v in seen["retained"].get("markers", []):
        odom = seen["ego"][max(0, int(np.searchsorted(ego_t, t, side="right")) - 1)][1]
        tracks = torch.from_numpy(np.ascontiguousarray(v["tracks"]))
        count = torch.from_numpy(np.ascontiguousarray(v["count"])).reshape(1).int()
        common = {"tracks": tracks, "confirmed_count": count, "route": route["route"],
                  "route_count": route["count"]}
        out = pred.run({**common, "track_t": torch.tensor([float(odom[5])], dtype=torch.float64), **state})
        state = {"motion_in": out["motion"].clone(), "motion_t_in": out["motion_t"].clone()}
        feeds.append({**common, "predictions": out["predictions"].clone(), "track_t": torch.tensor(
            [float(odom[5])], dtype=torch.float64), "odom": torch.from_numpy(np.asarray(odom, np.float64))})
    return feeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--baseline", type=Path, help="another checkout whose pipelines/lidar.py and planning.py "
                    "run interleaved with these, for a before/after in one run")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    bag = default_bag()
    cfg = load_stack(default_config())
    mount = tuple(cfg.entries["lidar_objects"].get("args", {}).get("mount", (0.0, 0.0, 0.0, 0.0)))
    road = road_layout(road_args(build_scenario("highway_cut_in", 7).road))
    builders = {"this": (build_lidar_graph, build_prediction_graph, build_planning_graph)}
    if args.baseline:
        base = [baseline_module(args.baseline, n) for n in ("lidar", "prediction", "planning")]
        builders = {"baseline": (base[0].build_lidar_graph, base[1].build_prediction_graph,
                                 base[2].build_planning_graph), **builders}
    a0 = anchor_ms()
    lidar = lidar_feeds(bag, "/sensing/lidar/points")
    lid = op_times({k: GraphExecutor(b[0](mount=mount)) for k, b in builders.items()}, lidar, args.passes)
    plans = planning_feeds(bag)
    last = initial_planner_state()

    def feedback(ex: GraphExecutor, previous: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
        return {"last_trajectory": previous["trajectory"].clone()} if previous is not None else last

    def motion(ex: GraphExecutor, previous: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
        return ({"motion_in": previous["motion"].clone(), "motion_t_in": previous["motion_t"].clone()}
                if previous is not None else initial_prediction_state())

    sim_road = build_scenario("highway_cut_in", 7).road
    prd = op_times({k: GraphExecutor(b[1](road=sim_road, accel=True)) for k, b in builders.items()}, plans,
                   args.passes, motion)
    # Each planner gets the road as its own checkout's RoadLayout (the class its isinstance check knows).
    layouts = {k: sys.modules["baseline_geometry" if k == "baseline" else "pipelines.geometry"].RoadLayout(
        road.lane_width, road.centers, road.directions, road.speed_limit) for k in builders}
    pln = op_times({k: GraphExecutor(b[2](road=layouts[k])) for k, b in builders.items()}, plans, args.passes,
                   feedback)
    a1 = anchor_ms()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); bag {bag.name}: {len(lidar)} sweeps, "
          f"{len(plans)} plans, {args.passes} passes; medians per job")
    print(f"anchor (sort 1M + matmul 512): {a0:.2f} ms before, {a1:.2f} ms after")
    keys = list(builders)
    print(f"{'graph':<11} {'op':<20}" + "".join(f"{k + ' ms':>14}" for k in keys))
    for graph, (times, differing) in (("lidar", lid), ("prediction", prd), ("planning", pln)):
        for op in times[keys[-1]]:
            print(f"{graph:<11} {op:<20}" + "".join(f"{times[k].get(op, float('nan')):>14.3f}" for k in keys))
        print(f"{graph:<11} {'(sum)':<20}" + "".join(f"{sum(times[k].values()):>14.3f}" for k in keys)
              + (f"   outputs: {differing} job(s) not bit-identical" if len(keys) > 1 else ""))


if __name__ == "__main__":
    main()
