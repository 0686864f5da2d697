"""`rt-runtime play`'s controls over real DDS and a real Foxglove client: pause, play_next, seek and rate change
what is published (rosbag2's service names on std_srvs, rate and seek as parameters), /clock follows; a bad
value is a failed call with one line. Each test on its own ROS_DOMAIN_ID, discovery on localhost only."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rt_runtime.ros.env import prepare_environment

prepare_environment()
pytest.importorskip("rclpy", reason="the ros extra is not installed")
pytest.importorskip("std_srvs", reason="the ros extra (ros-std-srvs) is not installed")

from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue  # noqa: E402
from rcl_interfaces.srv import GetParameters, SetParameters  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from replay_fixtures import short_bag  # noqa: E402,F401 - a fixture
from rt_runtime.bag import from_cdr, open_bag  # noqa: E402
from rt_runtime.bag.types import stamp_ns  # noqa: E402
from rt_runtime.ros.probe import Probe  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[1]
ODOM = "/localization/odometry"
TOPICS = {ODOM: "nav_msgs/msg/Odometry", "/clock": "rosgraph_msgs/msg/Clock"}
NODE = "/rt_runtime_player"
S = 1_000_000_000


def start_play(args: list[str], domain: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "rt_runtime.cli", "play", *args], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def finish(proc: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            return
        os.killpg(proc.pid, sig)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass


class Calls:
    """Service clients on the probe's node: Trigger by name, set/get parameters."""

    def __init__(self, probe: Probe, node: str = NODE) -> None:
        self.probe, self.node = probe, node
        self.clients = {}

    def _call(self, srv: type, name: str, req: object) -> object:
        if name not in self.clients:
            self.clients[name] = self.probe.node.create_client(srv, f"{self.node}/{name}")
        client = self.clients[name]
        assert self.probe.spin_until(client.service_is_ready, 60), f"no service {self.node}/{name}"
        fut = client.call_async(req)
        assert self.probe.spin_until(fut.done, 30), f"{name}: no answer"
        return fut.result()

    def trigger(self, name: str) -> Trigger.Response:
        return self._call(Trigger, name, Trigger.Request())

    def set(self, name: str, value: float) -> object:
        p = Parameter(name=name, value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value))
        return self._call(SetParameters, "set_parameters", SetParameters.Request(parameters=[p])).results[0]

    def get(self, name: str) -> float:
        return self._call(GetParameters, "get_parameters", GetParameters.Request(names=[name])).values[0].double_value


def odom_stamps(probe: Probe) -> list[int]:
    return [stamp_ns(m.header.stamp) for _, m in probe.messages(ODOM)]


def clocks(probe: Probe) -> list[int]:
    return [stamp_ns(m.clock) for _, m in probe.messages("/clock")]


def bag_odometry(bag: Path) -> list[tuple[int, int]]:
    """(log time, header stamp) of every odometry message."""
    with open_bag(bag) as r:
        return [(m.t_ns, stamp_ns(from_cdr(bytes(m.raw_cdr), TOPICS[ODOM]).header.stamp))
                for m in r.messages(topics=[ODOM])]


def test_pause_step_seek_and_rate_over_the_services_change_what_is_published(short_bag, tmp_path) -> None:  # noqa: F811
    domain, log = 187, tmp_path / "play.log"
    odom = bag_odometry(short_bag)
    start = open_bag(short_bag).start_ns
    proc = start_play([str(short_bag), "--topics", ODOM, "--clock", "--paused"], domain, log)
    try:
        with Probe(TOPICS, domain_id=domain) as probe:
            calls = Calls(probe)
            assert calls.trigger("is_paused").success                 # --paused: rosbag2's IsPaused.paused
            assert probe.spin_until(lambda: len(clocks(probe)) >= 20, 30), log.read_text()
            probe.spin_for(1.0)
            # Paused from the start: nothing published, /clock holds at the bag's start.
            assert odom_stamps(probe) == [] and set(clocks(probe)) == {start}, log.read_text()

            for k in (1, 2, 3):   # play_next: exactly one message each, in the bag's order; the clock on it
                res = calls.trigger("play_next")
                assert res.success, res.message
                assert probe.spin_until(lambda: len(odom_stamps(probe)) >= k, 20)
            probe.spin_for(0.5)
            assert odom_stamps(probe) == [s for _, s in odom[:3]]
            assert clocks(probe)[-1] == odom[2][0]

            # One period (--step-period 0.1): the messages in the next 0.1 s of the bag, no more.
            res = calls.trigger("play_period")
            assert res.success, res.message
            period = [s for t, s in odom if odom[2][0] < t <= odom[2][0] + S // 10]
            assert probe.spin_until(lambda: len(odom_stamps(probe)) >= 3 + len(period), 20)
            probe.spin_for(0.5)
            assert odom_stamps(probe) == [s for _, s in odom[:3]] + period and len(period) == 5
            first = 3 + len(period)

            # Seek to 2 s (the seek parameter, seconds from the start): the next message is the first at or after.
            res = calls.set("seek", 2.0)
            assert res.successful, res.reason
            assert calls.trigger("play_next").success
            assert probe.spin_until(lambda: len(odom_stamps(probe)) >= first + 1, 20)
            after = [(t, s) for t, s in odom if t >= start + 2 * S]
            assert odom_stamps(probe)[first] == after[0][1]
            # /clock is another topic: its tick for that message may arrive just after the message
            assert probe.spin_until(lambda: clocks(probe)[-1] == after[0][0], 10), clocks(probe)[-5:]

            # A bad seek or rate: a failed call, one line, nothing changed.
            for name, value, expected in (("seek", 99.0, "seek: expected a time from"),
                                          ("seek", -1.0, "seek: expected a time from"),
                                          ("rate", 0.0, "rate: expected a number from 0.001 to 1000")):
                res = calls.set(name, value)
                assert not res.successful and expected in res.reason and "\n" not in res.reason, res.reason
            assert calls.get("rate") == 1.0

            # Rate 0.25 and resume: in 1 s of wall time at most a quarter second of the bag goes out.
            assert calls.set("rate", 0.25).successful and calls.get("rate") == 0.25
            n0, t0 = len(odom_stamps(probe)), time.monotonic()
            assert calls.trigger("toggle_paused").success and not calls.trigger("is_paused").success
            probe.spin_for(1.0)
            assert probe.spin_until(lambda: len(odom_stamps(probe)) > n0, 20)   # a loaded machine: some time
            played = len(odom_stamps(probe)) - n0
            bag_s = (time.monotonic() - t0) * 0.25
            assert played <= bag_s * 50 + 2, (played, bag_s)          # 50 Hz odometry: never ahead of 0.25x
            # Pause again: what is out stays out, nothing more comes.
            assert calls.trigger("pause").success and calls.trigger("is_paused").success
            probe.spin_for(0.3)
            held = len(odom_stamps(probe))
            probe.spin_for(1.0)
            assert len(odom_stamps(probe)) == held
            assert len(set(clocks(probe)[-20:])) == 1                 # /clock holds

            # Rate 4 and resume: the rest of the bag, in order, and the player ends by itself.
            assert calls.set("rate", 4.0).successful
            assert calls.trigger("resume").success
            assert probe.spin_until(lambda: proc.poll() is not None, 30), log.read_text()
            probe.spin_until(lambda: len(odom_stamps(probe)) >= first + len(after), 10)
    finally:
        finish(proc)
    assert proc.returncode == 0, log.read_text()
    got = odom_stamps(probe)
    assert got == [s for _, s in odom[:3]] + period + [s for _, s in after], log.read_text()


PLAYBACK_STATE, TIME = 0x05, 0x02       # server binary opcodes (foxglove.sdk.v1)
PLAYBACK_CONTROL_REQUEST = 0x03         # client binary opcode
PLAY, PAUSE = 0, 1


def request(command: int, speed: float, seek_ns: int | None, request_id: str) -> bytes:
    rid = request_id.encode()
    return bytes([PLAYBACK_CONTROL_REQUEST, command]) + struct.pack(
        "<fBQI", speed, seek_ns is not None, seek_ns or 0, len(rid)) + rid


def parse_state(frame: bytes) -> dict:
    status, current, speed, did_seek, n = struct.unpack_from("<BQfBI", frame, 1)
    return {"status": status, "time": current, "speed": speed, "did_seek": bool(did_seek),
            "request_id": frame[19:19 + n].decode()}


async def drive(url: str, start: int) -> dict:
    import websockets

    out: dict = {"states": [], "times": []}
    async with websockets.connect(url, subprotocols=["foxglove.sdk.v1"]) as ws:

        async def answer(rid: str) -> dict:
            while True:
                frame = await asyncio.wait_for(ws.recv(), 20)
                if isinstance(frame, str):
                    out.setdefault("json", []).append(json.loads(frame))
                elif frame[0] == TIME:
                    out["times"].append(struct.unpack_from("<Q", frame, 1)[0])
                elif frame[0] == PLAYBACK_STATE:
                    st = parse_state(frame)
                    out["states"].append(st)
                    if st["request_id"] == rid:
                        return st

        info = json.loads(await asyncio.wait_for(ws.recv(), 20))
        out["info"] = info
        out["seek"] = await answer_after(ws, request(PAUSE, 1.0, start + 1 * S, "seek-1s"), answer, "seek-1s")
        out["times"].clear()
        await asyncio.sleep(0.5)
        out["bad"] = await answer_after(ws, request(PAUSE, 1.0, start + 60 * S, "seek-far"), answer, "seek-far")
        out["held"] = list(out["times"])
        out["play"] = await answer_after(ws, request(PLAY, 2.0, None, "play-2x"), answer, "play-2x")
        out["times"].clear()
        await asyncio.sleep(0.5)
        await answer_after(ws, request(PLAY, 2.0, None, "still"), answer, "still")
        out["running"] = list(out["times"])
    return out


async def answer_after(ws, frame: bytes, answer, rid: str) -> dict:
    await ws.send(frame)
    return await answer(rid)


def test_foxgloves_playback_controls_pause_seek_and_speed_the_player(short_bag, tmp_path) -> None:  # noqa: F811
    pytest.importorskip("websockets")
    pytest.importorskip("foxglove")
    domain, log = 188, tmp_path / "play.log"
    start = open_bag(short_bag).start_ns
    proc = start_play([str(short_bag), "--topics", ODOM, "--paused", "--foxglove", "0"], domain, log)
    try:
        end = time.monotonic() + 60
        while "playback controls on " not in log.read_text():
            assert proc.poll() is None and time.monotonic() < end, log.read_text()
            time.sleep(0.1)
        url = log.read_text().split("playback controls on ", 1)[1].split()[0]
        assert url.startswith("ws://127.0.0.1:")
        got = asyncio.run(drive(url, start))
    finally:
        finish(proc)
    info = got["info"]
    assert info["op"] == "serverInfo" and {"playbackControl", "time"} <= set(info["capabilities"])
    assert info["dataStartTime"] == {"sec": start // S, "nsec": start % S}
    seek = got["seek"]
    assert seek["did_seek"] and seek["status"] == PAUSE and seek["time"] == start + S and seek["speed"] == 1.0
    assert got["held"] and set(got["held"]) == {start + S}          # paused: the time broadcast holds
    bad = got["bad"]   # a seek outside the bag: refused (one line on stderr), the state says where it stays
    assert not bad["did_seek"] and bad["time"] == start + S
    assert got["play"]["status"] == PLAY and got["play"]["speed"] == 2.0
    assert got["running"] and got["running"][-1] > start + S       # playing: bag time moves on
    text = log.read_text()
    assert sum("Foxglove: seek: expected a time from" in line for line in text.splitlines()) == 1, text
    assert "Traceback" not in text


@pytest.mark.parametrize("extra, expected", [
    (["--foxglove", "host:port"], "--foxglove: expected [HOST:]PORT"),
    (["--foxglove", "PORT_IN_USE"], "in use"),
    (["--step-period", "0"], "--step-period: expected seconds above 0 up to 3600")])
def test_a_bad_foxglove_endpoint_a_busy_port_or_a_bad_step_period_is_one_line(short_bag, tmp_path, extra,  # noqa: F811
                                                                             expected) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        args = [str(short_bag), "--topics", ODOM, *[str(port) if a == "PORT_IN_USE" else a for a in extra]]
        proc = start_play(args, 189, tmp_path / "play.log")
        try:
            assert proc.wait(60) == 2
        finally:
            finish(proc)
    lines = [ln for ln in (tmp_path / "play.log").read_text().splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0], lines


def test_keys_on_a_terminal_step_the_player_and_ctrl_c_stops_it_with_the_terminal_as_it_was(short_bag) -> None:  # noqa: F811
    import pty
    import select
    import termios

    env = {**os.environ, "ROS_DOMAIN_ID": "190", "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    pid, fd = pty.fork()   # the child's controlling terminal: Ctrl-C there is its SIGINT
    if pid == 0:
        os.execve(sys.executable, [sys.executable, "-m", "rt_runtime.cli", "play", str(short_bag), "--topics", ODOM,
                                   "--paused"], env)
    out = b""

    def read_until(text: bytes, timeout: float = 60) -> bool:
        nonlocal out
        end = time.monotonic() + timeout
        while text not in out and time.monotonic() < end:
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    out += os.read(fd, 4096)
                except OSError:
                    break
        return text in out

    try:
        before = termios.tcgetattr(fd)
        assert read_until(b"keys: space: pause / resume"), out
        assert not termios.tcgetattr(fd)[3] & termios.ICANON       # cbreak: keys one by one
        os.write(fd, b"s\x1b[Cs")                                   # three steps, one an arrow key
        time.sleep(1.0)
        os.write(fd, b"\x03")                                       # Ctrl-C
        assert read_until(b"at most"), out
        _, status = os.waitpid(pid, 0)
        pid = 0
        assert os.waitstatus_to_exitcode(status) == 0, out
        assert b": 3 messages on 1 topics" in out and b"Traceback" not in out, out
        assert termios.tcgetattr(fd) == before                     # the terminal given back as it was
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)


def test_a_wall_clock_replay_pauses_steps_seeks_and_rerates_over_the_same_services(short_bag, tmp_path) -> None:  # noqa: F811
    domain, log = 193, tmp_path / "replay.log"
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "rt_runtime.cli", "replay", str(short_bag), "--speed", "2",
                                 "--until", "2.5", "--services", "--clock", "--paused", "--json"], cwd=ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    start = open_bag(short_bag).start_ns
    try:
        with Probe({"/clock": TOPICS["/clock"]}, domain_id=domain) as probe:
            calls = Calls(probe, "/rt_runtime_replay")
            assert calls.trigger("is_paused").success   # --paused
            probe.spin_for(3.0)            # at 2x the 2.5 s would be over in 1.25 s once fed: paused, it is not
            assert proc.poll() is None, log.read_text()
            # /clock holds where the paused runtime stands: its first message fed, a few ms of logical time at most
            held = clocks(probe)[-20:]
            assert len(set(held)) == 1 and start <= held[0] < start + S // 10, (held, log.read_text())
            for _ in range(3):
                res = calls.trigger("play_next")
                assert res.success, res.message
            res = calls.set("seek", 9.0)   # past --until: refused, one line, nothing changed
            assert not res.successful and res.reason.startswith("seek: expected a time") and "\n" not in res.reason
            assert calls.set("seek", 1.0).successful   # the replay starts afresh at 1 s, paused still
            assert calls.trigger("is_paused").success
            probe.spin_for(1.5)   # the clock jumped to the instant sought and holds there (the stack built anew)
            held = clocks(probe)[-20:]
            assert len(set(held)) == 1 and start + S <= held[0] < start + S + S // 10, held
            assert calls.set("rate", 4.0).successful and calls.get("rate") == 4.0
            assert calls.trigger("resume").success and not calls.trigger("is_paused").success
            assert probe.spin_until(lambda: clocks(probe)[-1] > held[0], 30)   # and runs on from there
            out, _ = proc.communicate(timeout=120)
            ran = [t for t in clocks(probe) if t > start + S]
            assert ran == sorted(ran) and ran[-1] <= start + 5 * S // 2   # forward, never past --until
    finally:
        finish(proc)
    assert proc.returncode == 0, log.read_text()
    doc = json.loads(out)
    assert doc["seeks"] == [1.0] and doc["duration_s"] == pytest.approx(1.5, abs=0.05)   # from the seek to --until
    assert "Traceback" not in log.read_text() and "seek to 1.000 s" in log.read_text()
    # What a fresh start at that instant gives: the virtual clock's replay from 1 s, the same outputs wherever
    # no job missed (LET; a busy machine may make the wall-clock run miss, and then it says so).
    fresh = subprocess.run([sys.executable, "-m", "rt_runtime.cli", "replay", str(short_bag), "--start", "1",
                            "--until", "2.5", "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    want = json.loads(fresh.stdout)
    assert want["start_s"] == 1.0 and want["outputs"]["/planning/trajectory"] > 0
    if doc["deterministic"]:
        assert doc["output_digest"] == want["output_digest"]
