"""`rt-runtime run --foxglove 0 --foxglove-mcap FILE` over real DDS: `rt-runtime play` feeds the node a bag, a
Foxglove protocol client sees its jobs, windows and outputs live, and the MCAP written when it stops holds the
same channels; a busy port is one line. Processes in their own group, killed whatever happens."""
from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rt_runtime.ros.env import prepare_environment

prepare_environment()
pytest.importorskip("rclpy", reason="the ros extra is not installed")
pytest.importorskip("foxglove")
pytest.importorskip("websockets")
pytest.importorskip("google.protobuf")

from foxglove_client import jobs_of, read_mcap, watch  # noqa: E402
from replay_fixtures import short_bag  # noqa: E402,F401 - a fixture

pytestmark = [pytest.mark.ros, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[1]
DOMAIN = 161   # of its own: no other test plays on it


def start(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "ROS_DOMAIN_ID": str(DOMAIN), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "rt_runtime.cli", *args], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def end(proc: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            return
        os.killpg(proc.pid, sig)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass


def wait_for(log: Path, pattern: str, proc: subprocess.Popen, timeout: float = 120) -> re.Match:
    end_t = time.monotonic() + timeout
    while True:
        m = re.search(pattern, log.read_text(errors="replace"))
        if m:
            return m
        if proc.poll() is not None or time.monotonic() > end_t:
            pytest.fail(f"no {pattern!r} (exit {proc.poll()}); log:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)


def test_run_serves_its_jobs_and_outputs_live_and_writes_the_same_channels_to_mcap(short_bag, tmp_path) -> None:  # noqa: F811
    mcap, log = tmp_path / "node.mcap", tmp_path / "node.log"
    node = start(["run", "--foxglove", "0", "--foxglove-mcap", str(mcap), "--stale-after", "300ms"], log)
    try:
        url = wait_for(log, r"Foxglove live view on (ws://127\.0\.0\.1:\d+)", node).group(1)
        seen: dict = {}
        client = threading.Thread(target=lambda: seen.update(zip(("adv", "got", "times"),
                                                               asyncio.run(asyncio.wait_for(watch(url), 200)))))
        client.start()
        wait_for(log, "SIGINT or SIGTERM stops", node)
        player = start(["play", str(short_bag), "--wait-for-subscriber", "20"], tmp_path / "play.log")
        try:
            assert player.wait(120) == 0, (tmp_path / "play.log").read_text()
        finally:
            end(player)
        time.sleep(2.0)   # the last jobs publish at their deadlines; the inputs go stale, the stack degrades
        os.killpg(node.pid, signal.SIGTERM)
        assert node.wait(30) == 0, log.read_text()[-3000:]
        client.join(60)
    finally:
        end(node)
    out = log.read_text()
    assert "Traceback" not in out
    summary = re.search(r"(\d+) /planning/trajectory out", out)
    advertised, got = seen["adv"], seen["got"]
    tasks = ("lidar_objects", "fusion_tracking", "prediction", "planning", "camera_objects", "radar_objects")
    for task in tasks:   # every channel advertised and subscribed to: the jobs came over the socket
        assert got.get(f"/rt/tasks/{task}/jobs"), (task, sorted(got))
        done = [j for j in jobs_of(got[f"/rt/tasks/{task}/jobs"]) if j["response_ms"] is not None]
        assert done and all(j["finish_ms"] >= j["start_ms"] >= j["release_ms"] >= 0 for j in done)
    assert advertised["/rt/out/planning/trajectory"]["schemaName"] == "foxglove.PosesInFrame"
    planned = int(summary.group(1))
    assert planned > 0 and 0 < len(got.get("/rt/out/planning/trajectory", [])) <= planned   # 10 Hz at most
    assert all(p.frame_id == "map" for p in got["/rt/out/planning/trajectory"])
    assert "/rt/chains/lidar_to_plan" in advertised and "/rt/safety" in advertised
    # The file: the same channels (those with a message), whole, with the jobs the client saw and more.
    channels, in_file, meta = read_mcap(mcap)
    assert meta["rt_runtime"]["partial"] == "false"
    assert set(channels) <= set(advertised) and "/rt/tasks/planning/jobs" in channels
    for task in tasks:
        batches = in_file[f"/rt/tasks/{task}/jobs"]
        assert len(jobs_of(batches)) >= len(jobs_of(got[f"/rt/tasks/{task}/jobs"]))
        assert batches[-1]["window"]["jobs"] == len(jobs_of(batches))
    # The bag ended: its sensors silent, the planner on its fallback and the supervisor at minimal risk.
    assert any(m["task"] == "planning" and m["mode"] == "fallback" and "planning" in m["degraded"]
               for m in in_file["/rt/degraded"]), in_file.get("/rt/degraded")
    assert in_file["/rt/safety"][-1]["state"] == "minimal_risk", in_file["/rt/safety"]
    ages = [x["age_ms"] for b in in_file["/rt/chains/lidar_to_plan"] for x in b["latencies"]]
    assert ages and all(a > 0 for a in ages)


def test_run_on_a_port_in_use_is_one_line(tmp_path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        log = tmp_path / "node.log"
        node = start(["run", "--foxglove", str(port)], log)
        try:
            assert node.wait(120) == 2, log.read_text()
        finally:
            end(node)
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert len(lines) == 1 and f"--foxglove 127.0.0.1:{port}" in lines[0] and "in use" in lines[0], lines
