"""The ROS 2 Real-Time Working Group's Autoware reference system (ros-realtime/reference-system,
package ``autoware_reference_system``) on rt_runtime's public API: 24 nodes, one Task + Graph each.

The topology, periods and node kinds follow the reference's ``autoware_system_builder.hpp`` and
``system/timing/default.hpp``; the node semantics follow its rclcpp nodes (sensor, transform,
fusion, cyclic, intersection, command) and the KPIs its ``sample_management.hpp``. README.md in
this folder says how each node maps onto tasks, joins, optional inputs and the hot-path chain.

Every message is one (4, 24) int64 tensor, the reference's sample history with one column per
node (``NODES``): row STAMP the node's timestamp (``time.monotonic_ns()`` when it ran; 0: not in
this history), row SEQ its sequence number, row DROP the samples it missed on its inputs, row DATA
its crunch result. Merging histories keeps the first entry per node, as ``merge_history_into_sample``.

The per-node logic (``NodeLogic``) works on torch tensors and writes its output with ``copy_``,
``torch.where(..., out=)`` and element stores; ``bench/bench_autoware.py`` runs the very same logic
in rclpy nodes.
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
LIB = HERE / "libcrunch.so"
MS = 1_000_000

# ---- the workload ----------------------------------------------------------------------------
_crunch: Callable[[int], int] | None = None


def load_crunch() -> Callable[[int], int]:
    """The C prime counter (ctypes releases the GIL during the call); says how to build it if missing."""
    global _crunch
    if _crunch is None:
        if not LIB.exists():
            raise RuntimeError(f"{LIB} is missing: build it with `make crunch` (or: gcc -O2 -shared -fPIC "
                               f"-o {LIB} {HERE / 'crunch.c'})")
        lib = ctypes.CDLL(str(LIB))
        lib.crunch.argtypes = [ctypes.c_uint64]
        lib.crunch.restype = ctypes.c_uint64
        _crunch = lib.crunch
    return _crunch


def calibrate(target_ms: float = 4.0) -> int:
    """The number-crunch limit that takes about ``target_ms`` here (the reference's
    ``number_cruncher_benchmark``: its default 65536 is sized for a Raspberry Pi 4)."""
    crunch = load_crunch()

    def took(n: int) -> float:
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            crunch(n)
            best = min(best, time.perf_counter() - t0)
        return best * 1e3

    n = 256
    while took(n) < target_ms / 4 and n < 1 << 22:
        n *= 2
    # trial division costs about n^2 / (2 ln n): scale from the last measurement, then refine once
    for _ in range(2):
        n = max(16, int(n * (target_ms / max(took(n), 1e-3)) ** 0.5))
    return n


# ---- the topology (autoware_system_builder.hpp) ----------------------------------------------
@dataclass(frozen=True)
class Node:
    name: str
    kind: str                      # sensor | transform | fusion | cyclic | intersection | command
    inputs: tuple[str, ...] = ()   # topics (= producing node names)
    period_ms: int = 0             # sensors and the cyclic node


SENSORS = [("FrontLidarDriver", 100), ("RearLidarDriver", 100), ("PointCloudMap", 120), ("Visualizer", 60),
           ("Lanelet2Map", 100), ("EuclideanClusterSettings", 1000)]
TOPOLOGY: list[Node] = [
    *(Node(n, "sensor", (), p) for n, p in SENSORS),
    Node("PointsTransformerFront", "transform", ("FrontLidarDriver",)),
    Node("PointsTransformerRear", "transform", ("RearLidarDriver",)),
    Node("VoxelGridDownsampler", "transform", ("PointCloudFusion",)),
    Node("PointCloudMapLoader", "transform", ("PointCloudMap",)),
    Node("RayGroundFilter", "transform", ("PointCloudFusion",)),
    Node("ObjectCollisionEstimator", "transform", ("EuclideanClusterDetector",)),
    Node("MPCController", "transform", ("BehaviorPlanner",)),
    Node("ParkingPlanner", "transform", ("Lanelet2MapLoader",)),
    Node("LanePlanner", "transform", ("Lanelet2MapLoader",)),
    Node("PointCloudFusion", "fusion", ("PointsTransformerFront", "PointsTransformerRear")),
    Node("NDTLocalizer", "fusion", ("VoxelGridDownsampler", "PointCloudMapLoader")),
    Node("VehicleInterface", "fusion", ("MPCController", "BehaviorPlanner")),
    Node("Lanelet2GlobalPlanner", "fusion", ("Visualizer", "NDTLocalizer")),
    Node("Lanelet2MapLoader", "fusion", ("Lanelet2Map", "Lanelet2GlobalPlanner")),
    Node("BehaviorPlanner", "cyclic", ("ObjectCollisionEstimator", "NDTLocalizer", "Lanelet2GlobalPlanner",
                                       "Lanelet2MapLoader", "ParkingPlanner", "LanePlanner"), 100),
    # two connections: RayGroundFilter -> EuclideanClusterDetector, EuclideanClusterSettings -> EuclideanIntersection
    Node("EuclideanClusterDetector", "intersection", ("RayGroundFilter", "EuclideanClusterSettings")),
    Node("VehicleDBWSystem", "command", ("VehicleInterface",)),
    Node("IntersectionOutput", "command", ("EuclideanIntersection",)),
]
NODES = [n.name for n in TOPOLOGY]
IDX = {n: i for i, n in enumerate(NODES)}
IDX["EuclideanIntersection"] = IDX["EuclideanClusterDetector"]   # the intersection node's second output
BY_NAME = {n.name: n for n in TOPOLOGY}
WIDTH = len(NODES)
STAMP, SEQ, DROP, DATA = range(4)
SHAPE = (4, WIDTH)

# sample_management: the hot path and where its KPIs are computed (the command node's samples)
HOT_PATH = ("FrontLidarDriver", "RearLidarDriver", "PointsTransformerFront", "PointsTransformerRear",
            "PointCloudFusion", "RayGroundFilter", "EuclideanClusterDetector", "ObjectCollisionEstimator")
HOT_ROOTS = ("FrontLidarDriver", "RearLidarDriver")
HOT_SINK = "ObjectCollisionEstimator"
KPI_NODE = "VehicleDBWSystem"
# rt_runtime's run-time chains over the hot path (README.md): the rear branch publishes before the front opens
FRONT_CHAIN = ("FrontLidarDriver", "PointsTransformerFront", "PointCloudFusion", "RayGroundFilter",
               "EuclideanClusterDetector", "ObjectCollisionEstimator")
REAR_CHAIN = ("RearLidarDriver", "PointsTransformerRear")


def topic(name: str) -> str:
    return "/" + name


def outputs_of(node: Node) -> tuple[str, ...]:
    if node.kind == "intersection":
        return (node.name, "EuclideanIntersection")
    return (node.name,)


# ---- the node logic (the reference's callbacks, on torch tensors) ---------------------------
def _missed(x: torch.Tensor, producer: int, last: list[int], k: int) -> int:
    """get_missed_samples_and_update_seq_nr: gaps in the producer's sequence numbers."""
    seq = int(x[SEQ, producer])
    missed = seq - last[k] - 1 if seq > last[k] else 0
    last[k] = seq
    return missed


def _stamp(y: torch.Tensor, me: int, seq: int, dropped: int, t_ns: int, data: int) -> None:
    y[STAMP, me] = t_ns
    y[SEQ, me] = seq
    y[DROP, me] = dropped
    y[DATA, me] = data


def _merge(y: torch.Tensor, x: torch.Tensor) -> None:
    """merge_history_into_sample: add x's entries for nodes y does not have yet."""
    torch.where(y[STAMP:STAMP + 1] != 0, y, x, out=y)


class NodeLogic:
    """One reference node's callbacks with their state (sequence numbers); ``limit`` is the crunch size."""

    def __init__(self, node: Node, limit: int) -> None:
        self.node, self.limit = node, limit
        self.me = IDX[node.name]
        self.seq = 0
        self.last = [0] * max(1, len(node.inputs))
        self.crunch = load_crunch()
        self.inter = torch.zeros(SHAPE, dtype=torch.int64)   # the intersection's second connection's last output
        self.inter_seq = 0

    def _next(self) -> int:
        s = self.seq
        self.seq += 1
        return s

    def sensor(self, y: torch.Tensor) -> None:
        y.zero_()
        _stamp(y, self.me, self._next(), 0, time.monotonic_ns(), 0)

    def transform(self, x: torch.Tensor, y: torch.Tensor) -> None:
        r = self.crunch(self.limit)
        y.copy_(x)
        dropped = _missed(x, IDX[self.node.inputs[0]], self.last, 0)
        _stamp(y, self.me, self._next(), dropped, time.monotonic_ns(), r)   # fuse_samples: after the crunch

    def fusion(self, a: torch.Tensor, b: torch.Tensor, y: torch.Tensor) -> None:
        t = time.monotonic_ns()   # the reference stamps a fusion at the start of its callback
        r = self.crunch(self.limit)
        i0, i1 = (IDX[n] for n in self.node.inputs)
        dropped = _missed(a, i0, self.last, 0) + _missed(b, i1, self.last, 1)
        y.copy_(a)
        _merge(y, b)
        _stamp(y, self.me, self._next(), dropped, t, r)

    def cyclic(self, xs: Sequence[torch.Tensor | None], y: torch.Tensor) -> None:
        """Merge the inputs that arrived since the last cycle (None: nothing new), as the timer callback."""
        t = time.monotonic_ns()
        r = self.crunch(self.limit)
        y.zero_()
        dropped = 0
        for k, x in enumerate(xs):
            if x is None:
                continue
            dropped += _missed(x, IDX[self.node.inputs[k]], self.last, k)
            _merge(y, x)
        _stamp(y, self.me, self._next(), dropped, t, r)

    def settings(self, s: torch.Tensor) -> None:
        """The intersection's second connection (EuclideanClusterSettings -> EuclideanIntersection)."""
        r = self.crunch(self.limit)
        if len(self.last) < 2:
            self.last.append(0)
        dropped = _missed(s, IDX["EuclideanClusterSettings"], self.last, 1)
        self.inter.copy_(s)
        _stamp(self.inter, self.me, self.inter_seq, dropped, time.monotonic_ns(), r)
        self.inter_seq += 1

    def command(self, x: torch.Tensor, y: torch.Tensor) -> None:
        y.copy_(x)
        y[STAMP, self.me] = time.monotonic_ns()   # the reception instant (print_sample_path's "now")


# ---- the KPIs, computed the reference's way (sample_management.hpp, print_sample_path) ------
def kpis(samples: Sequence[np.ndarray], skip: int = 10) -> dict:
    """KPIs from the samples the command node VehicleDBWSystem received, in order.

    * hot-path latency: the sink's (ObjectCollisionEstimator) stamp minus the newest root
      (Front/RearLidarDriver) stamp in the same history, for each sample that contains the sink;
    * hot-path drops: the samples the hot-path nodes in that history missed on their inputs;
    * behavior planner period: (stamp - previous stamp) / (seq - previous seq) of the BehaviorPlanner
      entries, one per sample that contains a new one;
    * lost cycles: BehaviorPlanner cycles that never reached VehicleDBWSystem (gaps in its seq).
    The first ``skip`` samples are dismissed (the reference dismisses its first 10: start-up).
    """
    lat, drops, periods = [], 0, []
    lost, prev = 0, None
    hot = [IDX[n] for n in HOT_PATH]
    roots = [IDX[n] for n in HOT_ROOTS]
    sink, bp = IDX[HOT_SINK], IDX["BehaviorPlanner"]
    for s in samples[skip:]:
        st = s[STAMP]
        if st[sink] != 0:
            root = max(int(st[r]) for r in roots)
            if root:
                lat.append((int(st[sink]) - root) / 1e6)
            drops += int(sum(int(s[DROP, i]) for i in hot if st[i] != 0))
        if st[bp] != 0:
            seq, ts = int(s[SEQ, bp]), int(st[bp])
            if prev is not None and seq > prev[0]:
                periods.append((ts - prev[1]) / (seq - prev[0]) / 1e6)
                lost += seq - prev[0] - 1
            if prev is None or seq > prev[0]:
                prev = (seq, ts)
    a = np.array(lat) if lat else np.zeros(0)
    p = np.array(periods) if periods else np.zeros(0)

    def r(v: float) -> float | None:
        return None if not np.isfinite(v) else round(float(v), 3)

    return {
        "hot_path_latency_ms": {"n": int(len(a)), "p50": r(np.percentile(a, 50)) if len(a) else None,
                                "p99": r(np.percentile(a, 99)) if len(a) else None,
                                "max": r(a.max()) if len(a) else None},
        "hot_path_drops": {"total": int(drops)},
        "lost_cycles": int(lost),
        "bp_period_ms": {"std": r(p.std(ddof=1)) if len(p) > 1 else None,
                         "max_abs_dev_from_100": r(np.abs(p - 100.0).max()) if len(p) else None},
    }


# ---- the rt_runtime system -------------------------------------------------------------------
# The timing is what `rt-runtime check` proves with steal: true (docs/ANALYSIS.md, "Work-conserving
# dispatch"): every job may first wait for one 6 ms op (each node is one op) of a job its worker took
# from the other, so a sensor's deadline is 10 ms (2 + 6; it was 5), the rear chain's 14 ms (2 + 6 + 6;
# it was 10) and a hop's 30 ms (it was 20). The sensor timers off the hot path are phased 5 ms apart
# (mod 20 ms, the gcd of their periods) so that no two are released together: released together, with
# 5 ms deadlines, PointCloudMap and Visualizer missed on the logical timeline (check said they could).
SENSOR_OFFSET_MS = {"PointCloudMap": 0, "Visualizer": 5, "Lanelet2Map": 10, "EuclideanClusterSettings": 15}


def build(limit: int, *, hop_ms: int = 30, front_chain_ms: int = 50, rear_chain_ms: int = 14,
          min_interarrival_ms: int = 60, budget_ms: int = 6, sensor_deadline_ms: int = 10):
    """The 24 TaskBindings and the two hot-path chains.

    Sensors and the BehaviorPlanner are periodic tasks (their timers); every other node is
    event-triggered (minimum inter-arrival ``min_interarrival_ms``: the fastest sensor's period;
    deadline ``hop_ms``; budget ``budget_ms``: one crunch and its Python around it). Two-input fusions outside the
    hot path release on a join of both inputs (the reference fuses once each input has a new
    sample); the BehaviorPlanner's six inputs are optional and it merges only the fresh ones (their
    ``x.meta`` says stale); the intersection node's settings input is optional. The hot path runs as
    two run-time chains: rear LiDAR -> its transform (``rear_chain_ms``), then, phased after it, front
    LiDAR -> transform -> PointCloudFusion -> RayGroundFilter -> EuclideanClusterDetector ->
    ObjectCollisionEstimator with one deadline ``front_chain_ms``.
    """
    from rt_runtime import Graph, Op, Task, TensorSpec
    from rt_runtime.core.chain import Chain
    from rt_runtime.sched import TaskBinding
    from rt_runtime.sched.binding import Join
    from rt_runtime.sched.meta import meta_spec

    def spec(name: str) -> TensorSpec:
        return TensorSpec(name, SHAPE, "int64")

    Y = spec("y")
    hop, mit, wcet = hop_ms * MS, min_interarrival_ms * MS, budget_ms * MS
    bindings, logic = [], {}
    for node in TOPOLOGY:
        L = NodeLogic(node, limit)
        logic[node.name] = L
        ins = {f"in{k}": topic(src) for k, src in enumerate(node.inputs)}
        outs = {"y": topic(node.name)}
        kw: dict = {}
        if node.kind == "sensor":
            offset = rear_chain_ms if node.name == "FrontLidarDriver" else SENSOR_OFFSET_MS.get(node.name, 0)
            task = Task(node.name, node.period_ms * MS, 2 * MS, deadline_ns=sensor_deadline_ms * MS,
                        offset_ns=offset * MS)
            ops = [Op(node.name, L.sensor, (), (Y,))]
            gins = []
        elif node.kind == "transform" or node.kind == "command":
            X = spec("in0")
            fn = L.transform if node.kind == "transform" else L.command
            task = Task(node.name, mit, wcet, deadline_ns=hop, trigger=topic(node.inputs[0]))
            ops = [Op(node.name, fn, (X,), (Y,))]
            gins = [X]
        elif node.kind == "fusion":
            A, B = spec("in0"), spec("in1")
            task = Task(node.name, mit, wcet, deadline_ns=hop, trigger="join")
            ops = [Op(node.name, L.fusion, (A, B), (Y,))]
            gins = [A, B]
            if node.name != "PointCloudFusion":   # a chain member is released by its predecessor instead
                kw["join"] = Join("all", tuple(ins.values()))
            else:
                task = Task(node.name, mit, wcet, deadline_ns=hop, trigger=topic(node.inputs[0]))
        elif node.kind == "cyclic":
            xs = [spec(f"in{k}") for k in range(len(node.inputs))]
            ms = [meta_spec(f"in{k}") for k in range(len(node.inputs))]

            def bp(*args, L=L, n=len(node.inputs)):
                xs_, ms_, y = args[:n], args[n:2 * n], args[2 * n]
                L.cyclic([x if int(m[3]) == 0 and int(m[1]) >= 0 else None for x, m in zip(xs_, ms_)], y)

            task = Task(node.name, node.period_ms * MS, wcet, deadline_ns=hop)
            ops = [Op(node.name, bp, (*xs, *ms), (Y,))]
            gins = [*xs, *ms]
            kw["optional"] = frozenset(ins)
        elif node.kind == "intersection":
            X, S, SM, Y2 = spec("in0"), spec("in1"), meta_spec("in1"), spec("y2")

            def ecd(x, s, sm, y, y2, L=L):
                L.transform(x, y)
                if int(sm[3]) == 0 and int(sm[1]) >= 0:   # a new EuclideanClusterSettings sample
                    L.settings(s)
                y2.copy_(L.inter)

            task = Task(node.name, mit, wcet, deadline_ns=hop, trigger=topic(node.inputs[0]))
            ops = [Op(node.name, ecd, (X, S, SM), (Y, Y2))]
            gins = [X, S, SM]
            outs["y2"] = topic("EuclideanIntersection")
            kw["optional"] = frozenset({"in1"})
        else:
            raise ValueError(node.kind)
        graph = Graph(node.name, ops, inputs=gins, outputs=list(outs))
        bindings.append(TaskBinding(task, graph, inputs=ins, outputs=outs, **kw))
    chains = [Chain("hot_path_rear", REAR_CHAIN, rear_chain_ms * MS),
              Chain("hot_path_front", FRONT_CHAIN, front_chain_ms * MS)]
    return bindings, chains, logic


def run(duration_s: float, limit: int, *, workers: int = 2, realtime: bool = False, steal: bool = True,
        trace: str | Path | None = None, **build_kw: int) -> dict:
    """Run the system on the WallClock for ``duration_s``; returns the KPIs and the runtime's counters
    (``build_kw``: ``build``'s deadlines); ``trace``: write the run's ``.rttrace`` there (``rt-runtime analyze``
    explains each miss)."""
    from rt_runtime.sched import Runtime, WallClock
    from rt_runtime.trace import TraceRing

    bindings, chains, _ = build(limit, **build_kw)
    samples: list[np.ndarray] = []
    publish_lat: list[float] = []
    dbw, oce = topic(KPI_NODE), topic(HOT_SINK)
    roots = [IDX[n] for n in HOT_ROOTS]

    def egress(ch: str, t_ns: int, seq: int, data) -> None:
        if ch == dbw:
            samples.append(data.numpy().copy())
        elif ch == oce:   # when the sink's output became visible to the rest of the system (LET publish)
            root = max(int(data[STAMP, r]) for r in roots)
            if root:
                publish_lat.append((time.monotonic_ns() - root) / 1e6)

    ring = TraceRing(1 << 22) if trace is not None else None   # 4M events: a minute of this system, undrained
    rt = Runtime(bindings, clock=WallClock(), workers=workers, threaded=True, realtime=realtime,
                 chains=chains, egress=egress, steal=steal, sink=ring)
    try:
        rt.run_until(int(duration_s * 1e9))
    finally:
        rt.close()
        if ring is not None:
            _save_trace(trace, ring, bindings, rt)
    out = kpis(samples)
    st = rt.stats()
    pl = np.array(publish_lat[10:]) if len(publish_lat) > 10 else np.zeros(0)
    out["rt_runtime"] = {
        "hot_path_publish_latency_ms": {"n": int(len(pl)),
                                        "p50": round(float(np.percentile(pl, 50)), 3) if len(pl) else None,
                                        "max": round(float(pl.max()), 3) if len(pl) else None},
        "missed": {n: s["missed"] for n, s in sorted(st.items()) if s.get("missed")},
        "errors": [f"{t}#{j}: {e!r}" for t, j, e in rt.errors[:5]],
        "deterministic": rt.deterministic,
        "samples_at_sink": len(samples),
    }
    return out


def _save_trace(path: str | Path, ring: Any, bindings: list[Any], rt: Any) -> None:
    """The run's events and what ``rt-runtime analyze`` needs of the task set (as a stack's trace says it)."""
    from rt_runtime.trace import save_trace

    save_trace(path, ring.drain(), {
        "clock": "wall", "config": str(Path(__file__).with_name("tasks.yaml")), "policy": rt.policy.name,
        "workers": len(rt.sched.workers), "lost_events": ring.lost,
        "ops": {b.name: [o.name for o in b.graph.ops] for b in bindings},
        "tasks_config": {b.name: {"period_ns": b.task.period_ns, "deadline_ns": b.task.deadline,
                                  "wcet_ns": b.task.wcet_ns, "priority": b.task.priority,
                                  "rank": rt.sched.tasks[b.name].prio, "trigger": b.task.trigger} for b in bindings}})
