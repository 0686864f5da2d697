"""End to end over DDS, in separate processes: `rt-runtime play` -> `rt-runtime run` -> a test subscriber.

Each test runs on its own ROS_DOMAIN_ID with discovery on localhost only; every process is started
in its own process group and killed (SIGKILL after a grace period) whatever happens.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from rt_runtime.bag import open_bag
from rt_runtime.bag.types import stamp_ns
from rt_runtime.ros.env import prepare_environment

prepare_environment()
pytest.importorskip("rclpy", reason="the ros extra is not installed")

from replay_fixtures import short_bag  # noqa: E402,F401 - a fixture
from rt_runtime.bag import array_to_cloud, array_to_image, to_cdr  # noqa: E402
from rt_runtime.ros.probe import Probe  # noqa: E402
from rt_runtime.sched import EventKind  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.timeout(300)]   # a test takes 25-55 s beside a CPU hog here

ROOT = Path(__file__).resolve().parents[1]
# Three domains a run: ROS_DOMAIN_ID (the Makefile's, bench/stress.py's per run, or conftest's per process)
# and the next two.
DOMAIN = int(os.environ["ROS_DOMAIN_ID"])
MS = 1_000_000
TOPICS = {"/planning/trajectory": "nav_msgs/msg/Path", "/perception/objects": "visualization_msgs/msg/MarkerArray",
          "/diagnostics": "diagnostic_msgs/msg/DiagnosticArray"}


@contextmanager
def cli(args: list[str], domain: int, log: Path) -> Iterator[subprocess.Popen]:
    """`rt-runtime ARGS` in its own process group; SIGTERM then SIGKILL on the way out."""
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rt_runtime.cli", *args], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            if proc.poll() is not None:
                break
            os.killpg(proc.pid, sig)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass


def wait_for(log: Path, text: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Wait until the process logged ``text``; fail with its log if it died or took too long."""
    end = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > end:
            pytest.fail(f"no {text!r} (exit {proc.poll()}); log:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)


def statuses(probe: Probe) -> list[dict[str, Any]]:
    """Every diagnostic status so far: name, level, message, values."""
    return [{"name": s.name, "level": s.level, "message": s.message, **{kv.key: kv.value for kv in s.values}}
            for _, m in probe.messages("/diagnostics") for s in m.status]


def latest(probe: Probe, name: str) -> dict[str, Any]:
    found = [s for s in statuses(probe) if s["name"] == name]
    return found[-1] if found else {}


def stamps(probe: Probe, topic: str) -> list[int]:
    return [stamp_ns(m.header.stamp) for _, m in probe.messages(topic)]


def planning_phases(st: list[int]) -> set[int]:
    """Where in the planning period (ns) each stamp lies, from the LET instants (the phase most stamps
    share: 0). What the trace says of each is checked against it at the end of the test."""
    phase = Counter(s % (100 * MS) for s in st).most_common(1)[0][0]
    return {(s - phase) % (100 * MS) for s in st}


def at_lidar_rate(st: list[int]) -> bool:
    """Stamps of a chain headed by the LiDAR (config/stack.yaml): one per sweep as the sweeps arrive (not
    on a grid of their own), rising, 10 Hz in the median (a node lagging behind the played clock on a
    loaded machine may bunch a few, or let the planner's own-period timeout run it once more)."""
    gaps = sorted(b - a for a, b in zip(st, st[1:]))
    return all(g > 0 for g in gaps) and abs(gaps[len(gaps) // 2] - 100 * MS) <= 10 * MS


def stop(proc: subprocess.Popen, sig: int, log: Path) -> str:
    """Signal the node, expect a clean exit within 20 s; its log."""
    os.killpg(proc.pid, sig)
    assert proc.wait(20) == 0, log.read_text(errors="replace")[-3000:]
    return log.read_text(errors="replace")


def play_through(probe: Probe, args: list[str], domain: int, log: Path, until: Callable[[], bool]) -> None:
    """Play the bag (waiting for the node's subscriptions) while the probe records."""
    with cli(["play", *args, "--wait-for-subscriber", "20"], domain, log) as player:
        probe.spin_until(lambda: player.poll() is not None, timeout=60)
        assert player.returncode == 0, log.read_text()
    probe.spin_until(until, timeout=10)


def test_live_node_trajectories_bad_input_silence_and_a_clean_stop(short_bag, tmp_path) -> None:  # noqa: F811
    domain, trace = DOMAIN, tmp_path / "live.trace"
    log = tmp_path / "node.log"
    t_start = time.time_ns()
    # Speculative planning on (worker thread, wall clock): the plans still come at the LET instants.
    with cli(["run", "--trace", str(trace), "--stale-after", "300ms", "--speculate"], domain, log) as node, \
            Probe(TOPICS, domain_id=domain) as probe:
        wait_for(log, "SIGINT or SIGTERM stops", node)
        play_through(probe, [str(short_bag)], domain, tmp_path / "play.log",
                     lambda: len(probe.messages("/planning/trajectory")) >= 20)
        traj = probe.messages("/planning/trajectory")
        st = stamps(probe, "/planning/trajectory")
        assert len(traj) >= 20 and {m.header.frame_id for _, m in traj} == {"map"}
        assert all(b > a for a, b in zip(st, st[1:])), st
        phases = planning_phases(st)                                      # checked against the trace below
        assert t_start < st[0] and st[-1] < time.time_ns()                # ROS time of each publication instant
        late = sorted(rx - stamp_ns(m.header.stamp) for rx, m in traj)
        assert 0 < late[len(late) // 2] < 100 * MS, late                  # LET instant -> received, median
        objects = len(probe.messages("/perception/objects"))              # all the node published (below)
        def lidar() -> dict[str, Any]:
            return latest(probe, "rt_runtime: input /sensing/lidar/points")
        assert probe.spin_until(lambda: int(lidar().get("received", 0)) >= 27, timeout=5), lidar()   # of 30
        assert lidar()["bad"] == "0" and int(lidar()["nan_points"]) > 0
        def planning() -> dict[str, Any]:
            return latest(probe, "rt_runtime: task planning")
        # Speculation ran and was judged over DDS: a hit commits the plan, a miss (the odometry came
        # other than predicted; how often depends on its arrival jitter here, docs/SAFETY.md) plans
        # again; the trajectories above stayed on the LET grid regardless. A planner that a loaded machine
        # made miss, or degraded for its inputs' misses, runs its fallback, which does not speculate: then
        # the run says so. (Beside a hog, one run in ten stalled the LiDAR's first jobs and the planner
        # ran degraded from the start, without a miss of its own.)
        assert probe.spin_until(lambda: int(planning().get("speculation hits", 0))
                                + int(planning().get("speculation misses", 0)) >= 1
                                or int(planning().get("missed", 0)) >= 1
                                or planning().get("message") == "degraded", timeout=5), planning()
        print("live speculation:", {k: v for k, v in planning().items() if k.startswith("speculation")})

        # Bad input on the node's own topics: counted, reported, and the node goes on.
        import numpy as np
        bad_cloud = to_cdr(array_to_cloud(np.zeros(3, [("x", "<f4"), ("y", "<f4")]), "lidar", 0))   # no z
        yuv = to_cdr(array_to_image(np.zeros((2, 2, 3), np.uint8), "rgb8", "cam", 0)).replace(b"rgb8", b"yuv8")
        for topic, msgtype in (("/sensing/lidar/points", "sensor_msgs/msg/PointCloud2"),
                               ("/sensing/camera/image_raw", "sensor_msgs/msg/Image"),
                               ("/sensing/radar/points", "sensor_msgs/msg/PointCloud2")):
            assert probe.advertise(topic, msgtype, wait=10)     # matched: nothing published into the void
        for _ in range(3):
            probe.publish("/sensing/lidar/points", "sensor_msgs/msg/PointCloud2", bad_cloud)
            probe.publish("/sensing/camera/image_raw", "sensor_msgs/msg/Image", yuv)
            probe.publish("/sensing/radar/points", "sensor_msgs/msg/PointCloud2", b"\x00\x01\x00\x00garbage")
            probe.spin_for(0.1)
        probe.spin_until(lambda: int(lidar().get("bad", 0)) >= 3
                         and "degraded" in latest(probe, "rt_runtime: watchdog").get("message", ""), timeout=10)
        lid = lidar()
        assert lid["bad"] == "3" and "z" in lid["last_error"]
        assert latest(probe, "rt_runtime: input /sensing/camera/image_raw")["bad"] == "3"
        assert latest(probe, "rt_runtime: input /sensing/radar/points")["bad"] == "3"
        # The sensors went silent when the bag ended: stale, and the config degrades the stack for it.
        assert lid["stale"] == "True" and lid["level"] == 1
        wd = latest(probe, "rt_runtime: watchdog")
        assert "/sensing/lidar/points" in wd["stale_inputs"] and wd["degraded_tasks"] == "planning"
        # The safety supervisor saw the bad messages and the silence: minimal-risk, held there.
        safety = latest(probe, "rt_runtime: safety")
        assert safety["state"] == "minimal_risk" and safety["level"] == 2 and int(safety["faults sensor_bad"]) >= 3
        assert "lidar/points" in safety["silent"]
        n = len(probe.messages("/planning/trajectory"))
        probe.spin_for(0.5)
        assert len(probe.messages("/planning/trajectory")) > n            # the minimal-risk plan keeps coming
        out = stop(node, signal.SIGTERM, log)
    assert "stopped after" in out and "Traceback" not in out
    # One per LiDAR sweep the machine processed in time (of 30 in 3 s), every one of them received.
    summary = next(line for line in out.splitlines() if "stopped after" in line)
    assert objects > 0 and f" {objects} /perception/objects," in summary, (objects, summary)
    from rt_runtime.trace.file import load_trace

    cols, meta = load_trace(trace)
    assert meta["clock"] == "wall" and meta["lost_events"] == 0 and "planning" in meta["tasks"] and len(cols) > 1000
    # Each trajectory at its job's LET instant (release + 100 ms), the nominal jobs' releases on the
    # period's grid; but a minimal-risk (fallback) job that missed publishes late, as sched/watchdog.py
    # says (a loaded machine may make one miss).
    plan = cols.task == cols.tasks.index("planning")
    def jobs(kind: EventKind, fallback: int | None = None) -> dict[int, int]:
        sel = plan & (cols.kind == kind) & (True if fallback is None else cols.b == fallback)
        return dict(zip(cols.job[sel].tolist(), cols.t_ns[sel].tolist()))
    released, published = jobs(EventKind.RELEASE), jobs(EventKind.PUBLISH)
    late = {j: t for j, t in published.items() if t != released[j] + 100 * MS}
    assert late.keys() <= jobs(EventKind.MISS).keys() & jobs(EventKind.START, fallback=1).keys(), late
    assert all(released[j] % (100 * MS) == 0 for j in jobs(EventKind.START, fallback=0))
    assert phases <= {t % (100 * MS) for t in published.values()}, (phases, late)


@contextmanager
def cpu_hogs(n: int) -> Iterator[None]:
    """``n`` processes spinning on a core each for the duration (the machine under CPU contention)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
            h.wait()


@pytest.mark.timeout(300)
def test_injected_overload_makes_the_watchdog_publish_the_degraded_trajectory(short_bag,  # noqa: F811
                                                                              tmp_path) -> None:
    """Beside two CPU hogs (docs/SAFETY.md, "Degraded mode"): the degraded planner's minimal-risk plan keeps
    coming, every one of its releases published."""
    domain, log = DOMAIN + 1, tmp_path / "node.log"
    # The tracks -> trajectory chain squeezed to 20 ms: the planner, its last member, misses and degrades.
    args = ["run", "--set", "chains.fusion_to_plan.deadline=20ms", "--set", "tasks.planning.recover_after=1000"]
    with cpu_hogs(2), cli(args, domain, log) as node, Probe(TOPICS, domain_id=domain) as probe:
        wait_for(log, "SIGINT or SIGTERM stops", node, timeout=120)

        def degraded() -> bool:
            return latest(probe, "rt_runtime: task planning").get("message") == "degraded"

        def trajectories(more: int) -> bool:
            seen = len(probe.messages("/planning/trajectory"))
            return probe.spin_until(lambda: len(probe.messages("/planning/trajectory")) >= seen + more, timeout=15)
        # --loop: the 3 s recording keeps the sensors alive however long the degrade takes here.
        with cli(["play", str(short_bag), "--loop", "--wait-for-subscriber", "60"], domain,
                 tmp_path / "play.log") as player:
            assert probe.spin_until(degraded, timeout=90), statuses(probe)[-14:]
            assert trajectories(3)
            assert player.poll() is None                   # still playing: degraded by the misses, not by silence
            assert probe.spin_until(lambda: latest(probe, "rt_runtime: outputs").get("planning/status") == "1",
                                    timeout=15)             # the minimal-risk plan's status
            reports = len([x for x in statuses(probe) if x["name"] == "rt_runtime: task planning"])
            before = latest(probe, "rt_runtime: task planning")
            held = len(probe.messages("/planning/trajectory"))
            assert trajectories(10)
            assert probe.spin_until(lambda: len([x for x in statuses(probe) if x["name"] == "rt_runtime: task planning"])
                                    > reports, timeout=15)   # a report made after those 10
            after = latest(probe, "rt_runtime: task planning")
        plan = latest(probe, "rt_runtime: task planning")
        # Degraded by the squeezed chain's misses, or first by the safety monitor (minimal-risk, state 2) when
        # the hogs delay the sensors past their latency bound before the chain misses (CI, 2 cores): both
        # hold the planner in the same fallback, which is what this test is about. The monitor may since have
        # stepped down to degraded (state 1) while the planner holds on (recover_after=1000): it was in
        # minimal-risk at least once (a CI run: missed 0, safety_state 1).
        assert plan["level"] == 2 and int(plan["degraded"]) == 1, plan
        safety = latest(probe, "rt_runtime: safety")
        assert int(plan["missed"]) >= 1 or plan.get("safety_state") == "2" or \
            int(safety.get("entries minimal_risk", 0)) >= 1, (plan, safety)
        assert plan["mode"] == "fallback" and latest(probe, "rt_runtime: watchdog")["degraded_tasks"] == "planning"
        # Held in its fallback, no release of the planner was dropped, skipped, aborted or left without input.
        lost = ("dropped_releases", "skipped", "aborted", "no_input")
        assert {k: after[k] for k in lost} == {k: before[k] for k in lost}, (before, after)
        assert int(after["published"]) - int(before["published"]) >= 10
        # ... and no planning period went without one: every 100 ms of the node's clock (the stamps are its
        # publish instants) holds a minimal-risk trajectory.
        st = stamps(probe, "/planning/trajectory")[held:]
        periods = range(st[0] // (100 * MS), st[-1] // (100 * MS) + 1)
        empty = [k for k in periods if not any(k * 100 * MS <= t < (k + 1) * 100 * MS for t in st)]
        assert len(periods) >= 10 and not empty, (empty, st)
        stop(node, signal.SIGINT, log)


def test_sim_time_follows_the_played_clock(short_bag, tmp_path) -> None:  # noqa: F811
    domain, log = DOMAIN + 2, tmp_path / "node.log"
    bag = open_bag(short_bag)
    start, end = bag.start_ns, bag.end_ns
    bag.close()
    args = ["run", "--use-sim-time", "--params-file", str(ROOT / "config" / "ros_params.yaml")]
    with cli(args, domain, log) as node, \
            Probe(TOPICS, domain_id=domain) as probe:
        wait_for(log, "/clock (sim time)", node)
        # At 0.3x: a loaded machine's node keeps up with the played clock (at 1x one computing at 2/3 of
        # real time skips sweeps); the stamps are the bag's time whatever the rate.
        play_through(probe, [str(short_bag), "--clock", "--rate", "0.3"], domain, tmp_path / "play.log",
                     lambda: bool(probe.messages("/diagnostics")))
        st = stamps(probe, "/planning/trajectory")
        assert len(st) >= 15 and at_lidar_rate(st), [(b - a) // MS for a, b in zip(st, st[1:])]
        assert start < st[0] and st[-1] <= end + 200 * MS                 # the bag's time, not the wall's
        clock = latest(probe, "rt_runtime: clock")
        assert clock["mode"] == "sim" and clock["jumps_back"] == "0"
        assert start <= stamp_ns(probe.messages("/diagnostics")[-1][1].header.stamp) <= end + 1_000 * MS
        stop(node, signal.SIGINT, log)


def test_cli_errors_exit_2_with_one_line(tmp_path) -> None:
    bad = [(["run", "--config", str(tmp_path / "none.yaml")], "no such file"),
           (["run", "--set", "tasks.planning.deadline=10"], "deadline"),
           (["play", str(tmp_path / "none")], "no such file")]
    for k, (args, says) in enumerate(bad):
        log = tmp_path / f"{k}.log"
        with cli(args, DOMAIN + 2, log) as proc:
            assert proc.wait(60) == 2, log.read_text()
        text = log.read_text()
        assert says in text and "Traceback" not in text, text
