"""`replay --speed X --foxglove`: Foxglove's playback bar pauses and re-rates a wall-clock replay; while paused the
runtime stands still (no job released) and logical time resumes where it stopped; a seek starts it afresh there.
A real Foxglove protocol client (``websockets``, ``foxglove.sdk.v1``) against the real replay."""
from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replay_fixtures import short_bag  # noqa: F401 - a fixture

websockets = pytest.importorskip("websockets")
pytest.importorskip("foxglove")

pytestmark = [pytest.mark.wallclock, pytest.mark.timeout(240)]

SUBPROTOCOL = "foxglove.sdk.v1"
MESSAGE_DATA, TIME, PLAYBACK_STATE = 0x01, 0x02, 0x05   # server binary opcodes
PLAYBACK_CONTROL_REQUEST = 0x03                          # client binary opcode
PLAY, PAUSE = 0, 1
PAUSE_S = 1.5


def request(command: int, speed: float, seek_ns: int | None, rid: str) -> bytes:
    return bytes([PLAYBACK_CONTROL_REQUEST, command]) + struct.pack(
        "<fBQI", speed, seek_ns is not None, seek_ns or 0, len(rid)) + rid.encode()


def state(frame: bytes) -> dict:
    status, current, speed, did_seek, n = struct.unpack_from("<BQfBI", frame, 1)
    return {"status": status, "time": current, "speed": speed, "did_seek": bool(did_seek),
            "request_id": frame[19:19 + n].decode()}


async def session(url: str) -> dict:
    """Subscribe to the job channels; pause once jobs flow, hold PAUSE_S, resume at 2x, seek to 1 s; until the end."""
    subs: dict[int, str] = {}
    jobs: list[tuple[float, dict]] = []     # (receive time, job)
    times: list[tuple[float, int]] = []
    answers: dict[str, dict] = {}
    out: dict = {"jobs": jobs, "times": times, "answers": answers}

    async with websockets.connect(url, subprotocols=[SUBPROTOCOL], max_size=None) as ws:
        async def reader() -> None:
            try:
                async for frame in ws:
                    now = time.monotonic()
                    if isinstance(frame, str):
                        op = json.loads(frame)
                        if op["op"] == "serverInfo":
                            out["info"] = op
                        elif op["op"] == "advertise":
                            new = []
                            for ch in op["channels"]:
                                if ch["topic"].endswith("/jobs"):
                                    subs[len(subs) + 1] = ch["topic"]
                                    new.append({"id": len(subs), "channelId": ch["id"]})
                            await ws.send(json.dumps({"op": "subscribe", "subscriptions": new}))
                    elif frame[0] == MESSAGE_DATA:   # a task's jobs of an interval (or up to a pause)
                        jobs.extend((now, j) for j in json.loads(frame[13:])["jobs"])
                    elif frame[0] == TIME:
                        times.append((now, struct.unpack_from("<Q", frame, 1)[0]))
                    elif frame[0] == PLAYBACK_STATE:
                        st = state(frame)
                        if st["request_id"]:
                            answers[st["request_id"]] = st
            except websockets.ConnectionClosed:
                pass

        task = asyncio.create_task(reader())
        while len(jobs) < 5:
            await asyncio.sleep(0.02)
        await ws.send(request(PAUSE, 1.0, None, "pause"))
        while "pause" not in answers:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)    # jobs already released finish and are sent
        out["paused_at"] = time.monotonic()
        await asyncio.sleep(PAUSE_S)
        out["resumed_at"] = time.monotonic()
        await ws.send(request(PLAY, 2.0, None, "play"))
        await asyncio.sleep(0.3)
        out["seek_at"] = time.monotonic()
        start = out["info"]["dataStartTime"]
        await ws.send(request(PLAY, 2.0, (start["sec"] + 1) * 1_000_000_000 + start["nsec"], "seek"))
        await task
    return out


def test_the_playback_bar_pauses_a_wall_clock_replay_where_it_stands_and_resumes_it(short_bag: Path) -> None:  # noqa: F811
    env = {**os.environ, "ROS_DOMAIN_ID": "191", "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    proc = subprocess.Popen([sys.executable, "-m", "rt_runtime.cli", "replay", str(short_bag), "--speed", "1",
                             "--until", "2.5", "--foxglove", "0", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = None
        for line in proc.stderr:
            if "Foxglove live view on " in line:
                url = line.rsplit(" ", 1)[-1].strip()
                break
        assert url is not None
        got = asyncio.run(asyncio.wait_for(session(url), 180))
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    doc = json.loads(out)
    info = got["info"]
    assert {"playbackControl", "time"} <= set(info["capabilities"]) and "dataEndTime" in info
    a = got["answers"]
    assert a["pause"]["status"] == PAUSE and a["play"]["status"] == PLAY and a["play"]["speed"] == 2.0
    start_ns = info["dataStartTime"]["sec"] * 1_000_000_000 + info["dataStartTime"]["nsec"]
    assert a["seek"]["did_seek"] and 0 <= a["seek"]["time"] - (start_ns + 1_000_000_000) < 100_000_000   # playing on
    assert "seek to 1.000 s: the stack starts there afresh" in err and doc["seeks"] == [1.0]
    # While paused: no job finished (none released), and the broadcast time held.
    during = [j for t, j in got["jobs"] if got["paused_at"] <= t < got["resumed_at"]]
    assert during == [], during
    held = {v for t, v in got["times"] if got["paused_at"] <= t < got["resumed_at"]}
    assert len(held) == 1, sorted(held)
    # Logical time resumed where it stopped: the first job released after the pause follows the last one
    # before it by less than a period or two, not by the PAUSE_S the wall clock moved on.
    before = [j["release_ms"] for t, j in got["jobs"] if t < got["paused_at"] and j["release_ms"] is not None]
    after = [j["release_ms"] for t, j in got["jobs"] if got["resumed_at"] <= t < got["seek_at"]
             and j["release_ms"] is not None]
    assert before and after
    gap = min(r for r in after if r > max(before)) - max(before)
    print(f"paused at {max(before):.0f} ms, next release {gap:.1f} ms later, {len(got['jobs'])} jobs, "
          f"wall {doc['wall_s']:.2f} s for {doc['duration_s']:.2f} s")
    assert gap < 500, (gap, max(before))
    # After the seek the replay ran afresh from 1 s to the end of --until.
    assert doc["duration_s"] == pytest.approx(1.5, abs=0.05)
