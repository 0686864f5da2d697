"""What ROS 2 costs the live node: decode per message type, sensor-to-output latency through DDS
against the same stack in replay, and the node's CPU at idle against a bare rclpy node.

* Decode: one message of each input type from a recording (LiDAR 120k points, 640x384 image,
  radar, odometry, route): raw CDR + rosbags + the ingress codec (what the node does) against rclpy's
  deserialization + the same codec.
* Latency: `rt-runtime run` in a child process; this process publishes the recording at its pace
  (header stamps rewritten to the publish time) and subscribes to the outputs. Under LET the replay
  latency of a chain is exactly its deadlines (LiDAR -> objects = D(lidar) + D(fusion)), so
  live - LET = what ROS ingress (DDS, decode, push) and egress (encode, DDS) add.
* Idle CPU: the node with all subscriptions and no data, against a bare rclpy node subscribed to
  the same topics (CPU time of the process / wall time).

Run: python bench/bench_ros_latency.py (BENCH_QUICK=1: a 3 s recording instead of 8 s, shorter windows).
DDS stays on this machine (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST), on domain 99 (BENCH_ROS_DOMAIN;
the tests use 60..98).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without install
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_DOMAIN_ID"] = os.environ.get("BENCH_ROS_DOMAIN", "99")

from rt_runtime.ros.env import prepare_environment  # noqa: E402

prepare_environment()

from rclpy.serialization import deserialize_message  # noqa: E402

from rt_runtime.bag import from_cdr, open_bag  # noqa: E402
from rt_runtime.bag.types import stamp_ns  # noqa: E402
from rt_runtime.config.stack import load_stack  # noqa: E402
from rt_runtime.io import EGRESS_CODECS, INGRESS_CODECS  # noqa: E402
from rt_runtime.io.ingress import decode  # noqa: E402
from rt_runtime.ros.msgtypes import ros_class  # noqa: E402
from rt_runtime.ros.probe import Probe  # noqa: E402
from rt_runtime.sim import LidarModel, Rig, record  # noqa: E402
from timing import median_seconds  # noqa: E402 - bench/timing.py, beside this script

QUICK = bool(os.environ.get("BENCH_QUICK"))
SECONDS = 3.0 if QUICK else 8.0
IDLE_S = 3.0 if QUICK else 6.0
MS = 1e6
OUT = {"/planning/trajectory": "nav_msgs/msg/Path", "/perception/objects": "visualization_msgs/msg/MarkerArray",
       "/diagnostics": "diagnostic_msgs/msg/DiagnosticArray"}


def median_ms(fn, repeats: int) -> float:
    """Median wall time of `repeats` calls in ms (after one warm-up)."""
    return median_seconds(fn, repeats) * 1e3


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def decode_table(bag: Path, cfg) -> None:
    reader = open_bag(bag)
    first = {}
    for m in reader.messages(topics=[r.topic for r in cfg.ingress]):
        first.setdefault(m.topic, m)
    reader.close()
    print("\n== decode per message (median ms): raw CDR + rosbags (the node) vs rclpy deserialize, + the codec")
    print(f"{'topic':28s} {'codec':13s} {'bytes':>10s} {'raw+rosbags':>12s} {'rclpy':>10s} {'ratio':>7s}")
    for r in cfg.ingress:
        m = first[r.topic]
        codec, msgtype = INGRESS_CODECS[r.codec], INGRESS_CODECS[r.codec].msgtypes[0]
        raw = bytes(m.raw_cdr)
        cls = ros_class(msgtype)
        ours = median_ms(lambda: decode(codec, from_cdr(raw, msgtype), r.topic), 30)
        theirs = median_ms(lambda: decode(codec, deserialize_message(raw, cls), r.topic), 5)
        print(f"{r.topic:28s} {r.codec:13s} {len(raw):>10d} {ours:>12.3f} {theirs:>10.3f} {theirs / ours:>6.0f}x")


def cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_share(pid: int, seconds: float) -> float:
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_s(pid) - c0) / (time.monotonic() - t0)


BARE = """
import sys, time
from rt_runtime.ros.env import prepare_environment
prepare_environment()
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rt_runtime.ros.msgtypes import ros_class, sensor_qos
rclpy.init()
node = rclpy.create_node("bare")
for topic, msgtype in [a.split("=") for a in sys.argv[1:]]:
    node.create_subscription(ros_class(msgtype), topic, lambda raw: None, sensor_qos(), raw=True)
print("ready", flush=True)
ex = SingleThreadedExecutor()
ex.add_node(node)
while True:
    ex.spin_once(timeout_sec=0.1)
"""


def start(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)


def wait_log(proc: subprocess.Popen, log: Path, text: str, timeout: float = 90) -> None:
    end = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > end:
            raise SystemExit(f"{proc.args}: no {text!r}:\n{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)


def kill(proc: subprocess.Popen, sig: int = signal.SIGINT) -> None:
    for s, grace in ((sig, 20), (signal.SIGKILL, 5)):
        if proc.poll() is None:
            os.killpg(proc.pid, s)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass


def play(probe: Probe, bag: Path, cfg) -> dict[str, list[int]]:
    """Publish the recording's inputs at their pace, each stamped with its publish time; publish times."""
    topics = {r.topic: INGRESS_CODECS[r.codec].msgtypes[0] for r in cfg.ingress}
    for topic, msgtype in topics.items():
        probe.advertise(topic, msgtype, wait=20, settle=0.0)
    probe.spin_for(0.5)   # a best-effort reader drops samples until it has matched us too
    reader = open_bag(bag)
    msgs = [(m.t_ns, m.topic, bytearray(m.raw_cdr)) for m in reader.messages(topics=list(topics))]
    reader.close()
    sent: dict[str, list[int]] = {t: [] for t in topics}
    t_first, wall0 = msgs[0][0], time.monotonic()
    for t, topic, raw in msgs:
        at = wall0 + (t - t_first) * 1e-9
        while (left := at - time.monotonic()) > 0:
            probe.executor.spin_once(timeout_sec=min(left, 0.002))
        now = time.time_ns()
        raw[4:12] = int(now // 1_000_000_000).to_bytes(4, "little") + int(now % 1_000_000_000).to_bytes(4, "little")
        probe.publish(topic, topics[topic], bytes(raw))   # every input starts with its Header: the stamp is bytes 4..12
        sent[topic].append(now)
    probe.spin_for(1.5)
    return sent


def latency_table(sent: dict[str, list[int]], probe: Probe, cfg) -> None:
    d = {t.name: t.deadline for t in cfg.tasks}
    let_obj = d["lidar_objects"] + d["fusion_tracking"]
    lidar_pub = np.array(sent["/sensing/lidar/points"])
    # A marker array's stamp is its LET instant; minus the chain's deadlines it is the instant the
    # runtime got the LiDAR sweep (ROS time): the sweep is the newest published before that.
    sweeps, ingress, egress, total = [], [], [], []
    for rx, m in probe.messages("/perception/objects"):
        st = stamp_ns(m.markers[0].header.stamp) if m.markers else None
        if st is None:
            continue
        got = st - let_obj
        k = np.searchsorted(lidar_pub, got, side="right") - 1
        if k < 0:
            continue
        sweeps.append((got, lidar_pub[k]))
        ingress.append((got - lidar_pub[k]) / MS)
        egress.append((rx - st) / MS)
        total.append((rx - lidar_pub[k]) / MS)
    wait = d["prediction"] + let_obj
    plan_total, plan_let, plan_egress = [], [], []
    got_at = np.array([g for g, _ in sweeps])
    for rx, m in probe.messages("/planning/trajectory"):
        st = stamp_ns(m.header.stamp)
        k = np.searchsorted(got_at, st - d["planning"] - wait, side="right") - 1
        if k < 0 or k + 1 >= len(got_at):   # after the last sweep the planner goes on with old data
            continue
        plan_total.append((rx - sweeps[k][1]) / MS)
        plan_let.append((st - sweeps[k][0]) / MS)
        plan_egress.append((rx - st) / MS)
    print(f"\n== latency through DDS (ms), {len(total)} LiDAR sweeps of "
          f"{SECONDS:g} s; replay = LET (the chain's deadlines), identical by construction")
    print(f"{'path':44s} {'live p50':>9s} {'live p99':>9s} {'replay p50':>11s} {'ROS adds p50':>13s} {'p99':>7s}")
    rows = [("LiDAR -> /perception/objects", total, [let_obj / MS] * len(total)),
            ("LiDAR -> /planning/trajectory", plan_total, plan_let),
            ("  ingress: publish -> runtime (DDS+decode)", ingress, [0.0] * len(ingress)),
            ("  egress: LET instant -> subscriber (objects)", egress, [0.0] * len(egress)),
            ("  egress: LET instant -> subscriber (traj.)", plan_egress, [0.0] * len(plan_egress))]
    for name, live, let in rows:
        adds = [a - b for a, b in zip(live, let)]    # paired: the same sweep, live against its LET latency
        print(f"{name:44s} {pct(live, 50):>9.2f} {pct(live, 99):>9.2f} {pct(let, 50):>11.2f} "
              f"{pct(adds, 50):>13.2f} {pct(adds, 99):>7.2f}")


def diag_table(probe: Probe) -> None:
    if not probe.messages("/diagnostics"):
        return
    last = {s.name: {kv.key: kv.value for kv in s.values} for s in probe.messages("/diagnostics")[-1][1].status}
    print("\n== the node's own figures (last /diagnostics)")
    print(f"{'input':28s} {'received':>9s} {'decode mean':>12s} {'decode max':>11s} {'rx lat mean':>12s} "
          f"{'rx lat max':>11s}")
    for name, v in last.items():
        if name.startswith("rt_runtime: input "):
            print(f"{name[18:]:28s} {v['received']:>9s} {v['decode_ms_mean']:>12s} {v['decode_ms_max']:>11s} "
                  f"{v.get('rx_latency_ms_mean', '-'):>12s} {v.get('rx_latency_ms_max', '-'):>11s}")
    o = last.get("rt_runtime: outputs", {})
    print(f"encode + serialize per output: mean {o.get('encode_ms_mean')} ms, max {o.get('encode_ms_max')} ms")
    misses = {n[17:]: v["missed"] for n, v in last.items() if n.startswith("rt_runtime: task ")}
    print("deadline misses: " + ", ".join(f"{k} {v}" for k, v in misses.items()))


def main() -> int:
    cfg = load_stack(ROOT / "config" / "stack.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        bag = Path(tmp) / "bag"
        t0 = time.monotonic()
        record(bag, "highway_cut_in", SECONDS, 7, "mcap", rig=Rig(lidar=LidarModel(beams=64, columns=1875)), workers=2)
        print(f"recording: {SECONDS:g} s, LiDAR 64x1875 = 120,000 points at 10 Hz, camera 640x384 at 20 Hz, "
              f"radar 20 Hz, odometry 50 Hz ({time.monotonic() - t0:.1f} s to simulate)")
        decode_table(bag, cfg)
        node_log, bare_log = Path(tmp) / "node.log", Path(tmp) / "bare.log"
        node = start(["-m", "rt_runtime.cli", "run"], node_log)
        try:
            wait_log(node, node_log, "SIGINT or SIGTERM stops")
            time.sleep(1.0)
            node_idle = cpu_share(node.pid, IDLE_S)
            with Probe(OUT, domain_id=int(os.environ["ROS_DOMAIN_ID"]), name="bench") as probe:
                sent = play(probe, bag, cfg)
                latency_table(sent, probe, cfg)
                diag_table(probe)
        finally:
            kill(node)
        subs = [f"{r.topic}={INGRESS_CODECS[r.codec].msgtypes[0]}" for r in cfg.ingress]
        bare = start(["-c", BARE, *subs], bare_log)
        try:
            wait_log(bare, bare_log, "ready")
            time.sleep(1.0)
            bare_idle = cpu_share(bare.pid, IDLE_S)
        finally:
            kill(bare, signal.SIGKILL)
    print(f"\n== CPU at idle ({IDLE_S:g} s, {len(subs)} subscriptions, no data; share of one core)")
    print(f"{'process':52s} {'CPU':>7s}")
    print(f"{'rt-runtime run (runtime threads, timers, executor)':52s} {node_idle * 100:>6.1f}%")
    print(f"{'bare rclpy node, same subscriptions':52s} {bare_idle * 100:>6.1f}%")
    print(f"(encoders: {', '.join(sorted(EGRESS_CODECS))}; DDS: {os.environ.get('RMW_IMPLEMENTATION')}, "
          f"profile {os.environ.get('FASTDDS_DEFAULT_PROFILES_FILE')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
