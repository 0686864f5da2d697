"""`replay --foxglove`: a Foxglove protocol client (``websockets``, subprotocol ``foxglove.sdk.v1``) sees the
runtime's state live; without a client the replay is what it was; a busy port is one line."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from rt_runtime.cli import main
from rt_runtime.live.state import JOBS_SCHEMA, LiveState
from rt_runtime.sched.events import EventKind as K

from foxglove_client import conforms, jobs_of, watch
from replay_fixtures import short_bag  # noqa: F401 - a fixture

websockets = pytest.importorskip("websockets")
pytest.importorskip("foxglove")

def test_a_client_receives_the_advertised_channels_with_their_schemas_and_decodes_messages_of_each(
        short_bag: Path) -> None:   # noqa: F811
    env = {**os.environ, "ROS_DOMAIN_ID": "111", "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    proc = subprocess.Popen([sys.executable, "-m", "rt_runtime.cli", "replay", str(short_bag), "--speed", "1",
                             "--until", "1.5", "--foxglove", "0", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = None
        for line in proc.stderr:   # the server is up before the stack is built: the client is there from the start
            if "Foxglove live view on " in line:
                url = line.rsplit(" ", 1)[-1].strip()
                break
        assert url is not None and url.startswith("ws://127.0.0.1:")
        advertised, got, _ = asyncio.run(asyncio.wait_for(watch(url), 120))
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    doc = json.loads(out)
    tasks = {t["name"]: t for t in doc["tasks"]}
    assert {"/rt/safety", "/rt/live"} <= set(advertised)
    for name in tasks:
        assert f"/rt/tasks/{name}/jobs" in set(advertised)
    for topic, ch in advertised.items():
        if topic.startswith("/rt/out/"):   # the outputs, in Foxglove's own schemas (tests/test_live_channels.py)
            assert ch["encoding"] == "protobuf" and ch["schemaName"].startswith("foxglove."), ch
            continue
        assert ch["encoding"] == "json" and ch["schemaEncoding"] == "jsonschema"
        schema = json.loads(ch["schema"])
        assert schema["type"] == "object" and ch["schemaName"] == schema["title"]
        for msg in got.get(topic, ()):
            assert conforms(msg, schema), (topic, msg)
    assert got["/rt/live"][-1]["dropped"] == 0 and got["/rt/live"][-1]["events"] > 0
    for name, t in tasks.items():
        batches = got.get(f"/rt/tasks/{name}/jobs", [])
        jobs, windows = jobs_of(batches), [b["window"] for b in batches]
        assert jobs and windows, (name, sorted(got))   # each channel was subscribed to: none refused
        # a message per interval of the runtime's time (10 Hz) with the jobs ended in it, not one per job
        assert all(b["jobs"] for b in batches) and len(batches) <= 10 * 1.5 + 2, (name, len(batches))
        assert all(j["finish_ms"] <= b["t_ms"] for b in batches for j in b["jobs"] if j["finish_ms"] is not None)
        assert windows[-1]["jobs"] == t["jobs"]   # every released job was folded and sent, the last at the end
        assert windows[-1]["misses"] == t["misses"]
        done = [j for j in jobs if j["response_ms"] is not None]
        assert done and all(j["finish_ms"] >= j["start_ms"] >= j["release_ms"] for j in done)
        assert all(j["response_ms"] == pytest.approx(j["finish_ms"] - j["release_ms"]) for j in done)
        assert windows[-1]["max_ms"] >= windows[-1]["p50_ms"] > 0


def test_without_a_client_the_output_digest_is_unchanged(short_bag: Path, capsys) -> None:  # noqa: F811
    digests = []
    for extra in ([], ["--foxglove", "0"]):
        assert main(["replay", str(short_bag), "--until", "1", "--json", *extra]) == 0
        digests.append(json.loads(capsys.readouterr().out)["output_digest"])
    assert digests[0] == digests[1]


def test_a_port_in_use_is_one_line(short_bag: Path, capsys) -> None:  # noqa: F811
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["replay", str(short_bag), "--until", "0.2", "--foxglove", str(port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--foxglove 127.0.0.1:{port}" in err[0] and "in use" in err[0], err


def test_a_bad_endpoint_is_one_line(capsys) -> None:
    assert main(["replay", "--foxglove", "host:port"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--foxglove: expected [HOST:]PORT" in err[0] and "'host:port'" in err[0], err


def test_a_late_publish_and_a_skipped_job_are_each_one_job_of_the_intervals_batch() -> None:
    s = LiveState()
    ms = 1_000_000
    out = []
    for ev in [(K.RELEASE, 0, "T", 0, 0, 0), (K.START, 1 * ms, "T", 0, 0, 0), (K.MISS, 5 * ms, "T", 0, 0, 1),
               (K.FINISH, 7 * ms, "T", 0, 7 * ms, 0), (K.PUBLISH, 7 * ms, "T", 0, 1, 1),
               (K.RELEASE, 10 * ms, "T", 1, 0, 0), (K.START, 10 * ms, "T", 1, 0, 0),
               (K.FINISH, 12 * ms, "T", 1, 2 * ms, 0), (K.PUBLISH, 15 * ms, "T", 1, 1, 0)]:
        out += s.fold(*ev)
    assert out == [] and s.pending()   # a job's message waits for the interval's batch
    assert s.batch(20 * ms, lambda task: False) == [] and not s.pending()   # nobody receives it: not built
    assert s.jobs["T"] == 2   # ... and still counted
    for ev in [(K.RELEASE, 20 * ms, "T", 2, 0, 0), (K.START, 20 * ms, "T", 2, 0, 0),
               (K.FINISH, 27 * ms, "T", 2, 7 * ms, 0), (K.MISS, 25 * ms, "T", 2, 0, 1),
               (K.PUBLISH, 27 * ms, "T", 2, 1, 1),
               (K.RELEASE, 30 * ms, "T", 3, 0, 0), (K.START, 30 * ms, "T", 3, 0, 0),
               (K.FINISH, 32 * ms, "T", 3, 2 * ms, 0), (K.PUBLISH, 35 * ms, "T", 3, 1, 0)]:
        s.fold(*ev)
    [(task, text)] = s.batch(40 * ms)   # JSON text, as it is logged
    msg = json.loads(text)
    assert (task, msg["task"], msg["t_ms"]) == ("T", "T", 40.0)
    assert conforms(msg, JOBS_SCHEMA)
    assert [(j["job"], j["miss"], j["deadline_ms"], j["response_ms"], j["slack_ms"]) for j in msg["jobs"]] == [
        (2, True, 25.0, 7.0, -2.0), (3, False, 35.0, 2.0, 3.0)]
    window = msg["window"]   # over all four jobs
    assert (window["jobs"], window["misses"], window["window"], window["max_ms"], window["slack_ms"],
            window["min_slack_ms"]) == (4, 2, 4, 7.0, 3.0, -2.0)
    assert s.batch(50 * ms) == []   # nothing ended since


def test_a_safety_change_is_one_message_and_the_ops_are_not_folded() -> None:
    s = LiveState()
    assert s.fold(K.OP_START, 0, "T", 0, 0, 0) == [] and s.open == {}
    assert s.fold(K.SAFETY, 2_000_000, "T", 0, 1, 3) == [
        ("safety", {"t_ms": 2.0, "level": 1, "state": "degraded", "reason": "miss", "task": "T", "degraded": []})]


def test_a_full_queue_drops_and_counts_instead_of_waiting() -> None:
    from rt_runtime.live.foxglove import FoxgloveLive

    live = FoxgloveLive("127.0.0.1", 0, capacity=2)
    live._stop.set()   # the server thread drains no more: the queue fills
    live.thread.join()
    for i in range(5):
        live.emit(K.RELEASE, i, "T", i)
    live.emit(K.OP_START, 0, "T", 0)   # not a kind the view folds: neither queued nor dropped
    assert (len(live.queue), live.events, live.dropped) == (2, 2, 3)
    live.server.stop()


def test_nothing_is_logged_before_a_stack_is_attached_so_the_file_starts_on_the_runs_time(tmp_path) -> None:
    """The view starts before the stack is built (seconds, in a replay): its /rt/live counts logged then had
    log time 0, and the MCAP's timeline began in 1970. Fails if the drain logs before ``attach``."""
    import time

    from mcap.reader import make_reader
    from rt_runtime.live.foxglove import PERIOD_S, FoxgloveLive

    path = tmp_path / "live.mcap"
    live = FoxgloveLive("127.0.0.1", 0, serve=False, mcap=path)
    time.sleep(3 * PERIOD_S)   # drains with nothing attached
    start = 1_700_000_000_000_000_000
    live.attach(["T"], lambda t: start + t)
    live.emit(K.RELEASE, 1_000_000, "T", 0)
    time.sleep(2 * PERIOD_S)
    live.close()
    with open(path, "rb") as f:
        stats = make_reader(f).get_summary().statistics
    assert stats.message_count > 0 and stats.message_start_time >= start


def test_a_tasks_window_keeps_its_last_jobs_sorted_as_they_come_and_go() -> None:
    import random
    from collections import deque

    from rt_runtime.live.state import WINDOW, Window

    rng = random.Random(1)
    win, last = Window(), deque(maxlen=WINDOW)
    for _ in range(3 * WINDOW):
        response, slack = rng.randint(0, 50), rng.choice([None, rng.randint(-20, 20)])
        win.add(response, slack)
        last.append((response, slack))
        assert win.responses == sorted(r for r, _ in last)
        assert win.slacks == sorted(s for _, s in last if s is not None)
