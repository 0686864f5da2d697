"""The live view's channels beyond jobs and windows (issue 31): chain latencies, speculation, degraded tasks,
trajectory and objects in Foxglove's schemas, and `--foxglove-mcap FILE`: read back with the ``mcap`` reader
and checked against the run's own JSON and `analyze`'s chains; the folds themselves, pure."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rt_runtime.cli import main
from rt_runtime.live.chains import CHAIN_SCHEMA, ChainFold
from rt_runtime.live.outputs import OutputTap
from rt_runtime.live.state import LiveState
from rt_runtime.sched.events import REACT_DEGRADE, REACT_RECOVER, REACT_SPEC_HIT, REACT_SPEC_MISS
from rt_runtime.sched.events import EventKind as K

from foxglove_client import conforms, jobs_of, latencies_of, read_mcap, watch
from replay_fixtures import short_bag  # noqa: F401 - a fixture

pytest.importorskip("foxglove")
pytest.importorskip("mcap")
pytest.importorskip("google.protobuf")
pytest.importorskip("websockets")

MS = 1_000_000
ENV = {**os.environ, "ROS_DOMAIN_ID": "158", "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}


def test_replay_mcap_holds_every_channel_with_its_schema_and_counts_that_match_the_run(short_bag: Path, tmp_path,
                                                                                        capsys) -> None:  # noqa: F811
    mcap, trace = tmp_path / "live.mcap", tmp_path / "run.rttrace"
    args = ["replay", str(short_bag), "--until", "2", "--speculate", "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*args, "--foxglove-mcap", str(mcap), "--foxglove-hz", "5", "--trace", str(trace)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["output_digest"] == plain["output_digest"]   # the view changes nothing the stack publishes
    assert main(["analyze", str(trace), "--json"]) == 0
    chains = {c["name"]: c for c in json.loads(capsys.readouterr().out)["chains"]}

    channels, got, meta = read_mcap(mcap)
    assert meta["rt_runtime"]["partial"] == "false" and meta["rt_runtime"]["dropped"] == "0"
    assert not list(tmp_path.glob(".live.mcap.*"))   # the staging folder went with the rename
    for topic, (schema, encoding) in channels.items():
        if topic.startswith("/rt/out/"):
            assert encoding == "protobuf" and schema.startswith("foxglove."), topic
        else:
            assert encoding == "json" and schema.startswith("rt_runtime."), topic
    for t in doc["tasks"]:   # every job folded and written, the window's counts the run's
        batches = got[f"/rt/tasks/{t['name']}/jobs"]
        jobs, window = jobs_of(batches), batches[-1]["window"]
        assert len(jobs) == t["jobs"] and window["jobs"] == t["jobs"] and window["misses"] == t["misses"]
        # a message per interval (5 Hz of the runtime's time) with a job ended in it, not one per job
        assert len(batches) <= 2 * 5 + 2 and [b["t_ms"] for b in batches] == sorted(b["t_ms"] for b in batches)
        assert len({j["job"] for j in jobs}) == len(jobs)
    radar = got["/rt/tasks/radar_objects/jobs"]   # 20 Hz: four jobs a batch
    assert len(jobs_of(radar)) >= 3 * len(radar) - 4, [len(b["jobs"]) for b in radar]

    # Chain latencies: one per output of the chain's last task, as `analyze` walks the trace back.
    assert set(chains) and {f"/rt/chains/{n}" for n in chains} <= set(channels)
    for name, c in chains.items():
        msgs = latencies_of(got[f"/rt/chains/{name}"])
        assert len(msgs) == c["outputs"] and got[f"/rt/chains/{name}"][-1]["outputs"] == c["outputs"], name
        assert max(m["age_ms"] for m in msgs) == pytest.approx(c["data_age_ms"]["max"])
        assert max(m["finished_ms"] for m in msgs) == pytest.approx(c["finished_ms"]["max"], abs=0.01)
        assert all(m["age_ms"] == pytest.approx(m["publish_ms"] - m["origin_ms"]) for m in msgs)

    # Speculation: every verdict, the counts the run reports.
    spec = doc["speculation"]["planning"]
    verdicts = got.get("/rt/speculation", [])
    assert spec["hits"] + spec["misses"] > 0
    assert (sum(m["hit"] for m in verdicts), sum(not m["hit"] for m in verdicts)) == (spec["hits"], spec["misses"])

    # Outputs: decimated to 5 Hz of logical time from the 10 Hz planner, drawn in Foxglove's schemas.
    assert channels["/rt/out/planning/trajectory"] == ("foxglove.PosesInFrame", "protobuf")
    assert channels["/rt/out/perception/objects"] == ("foxglove.SceneUpdate", "protobuf")
    paths = got["/rt/out/planning/trajectory"]
    assert len(paths) == math.ceil(doc["outputs"]["/planning/trajectory"] / 2), len(paths)
    assert all(p.frame_id == "map" and len(p.poses) > 1 for p in paths)
    # The ego frame the 3D panel follows: map -> ego at each trajectory's first pose, stamped as it is.
    assert channels["/rt/out/tf"] == ("foxglove.FrameTransforms", "protobuf")
    tfs = [m.transforms for m in got["/rt/out/tf"]]
    assert len(tfs) == len(paths) and all(len(t) == 1 for t in tfs)
    for [tf], p in zip(tfs, paths):
        first = p.poses[0]
        assert (tf.parent_frame_id, tf.child_frame_id, tf.timestamp.seconds, tf.timestamp.nanos) == \
            ("map", "ego", p.timestamp.seconds, p.timestamp.nanos)
        assert (tf.translation.x, tf.translation.y, tf.rotation.z, tf.rotation.w) == \
            (first.position.x, first.position.y, first.orientation.z, first.orientation.w)
    scenes = got["/rt/out/perception/objects"]
    assert len(scenes) == math.ceil(doc["outputs"]["/perception/objects"] / 2)
    assert all(len(s.deletions) == 1 for s in scenes) and any(s.entities for s in scenes)
    assert all(e.frame_id == "map" and len(e.cubes) == 1 for s in scenes for e in s.entities)
    live = got["/rt/live"][-1]
    assert live["dropped"] == live["dropped_outputs"] == 0 and live["outputs"] == len(paths) + len(scenes)


def test_a_lidar_falling_silent_shows_each_safety_change_and_the_degraded_planner(short_bag: Path, tmp_path,
                                                                                   capsys) -> None:  # noqa: F811
    from rt_runtime.bag import BagWriter, open_bag

    silent, mcap = tmp_path / "lidar_silent", tmp_path / "safety.mcap"
    with open_bag(short_bag) as r, BagWriter(silent, "mcap") as w:   # no sweep after 1.5 s
        for topic, msgtype in r.topics.items():
            w.add_topic(topic, msgtype)
        for m in r.messages():
            if m.topic != "/sensing/lidar/points" or m.t_ns - r.start_ns < 1_500_000_000:
                w.write(m.topic, m.t_ns, m.raw_cdr)
    assert main(["replay", str(silent), "--json", "--foxglove-mcap", str(mcap)]) == 0
    hist = json.loads(capsys.readouterr().out)["safety"]["history"]
    _, got, _ = read_mcap(mcap)
    safety = got["/rt/safety"]
    assert [(m["state"], m["reason"], m["t_ms"]) for m in safety] == [
        (h["to"], h["reason"], pytest.approx(h["t_s"] * 1e3)) for h in hist] and len(hist) == 2
    # The supervisor puts the planner on its fallback with the change (no REACTION of the planner's): its next
    # job runs it, and that says so, with the level it runs under.
    modes = [m for m in got["/rt/degraded"] if m["task"] == "planning"]
    assert [(m["mode"], m["state"]) for m in modes] == [("fallback", "minimal_risk")]
    assert modes[0]["t_ms"] >= safety[-1]["t_ms"] and "planning" in modes[0]["degraded"]


@pytest.mark.wallclock
@pytest.mark.timeout(180)
def test_an_interrupted_replay_leaves_its_mcap_readable_and_marked_partial(short_bag: Path, tmp_path) -> None:  # noqa: F811
    import asyncio
    import threading

    mcap = tmp_path / "cut.mcap"
    proc = subprocess.Popen([sys.executable, "-m", "rt_runtime.cli", "replay", str(short_bag), "--speed", "1",
                             "--foxglove", "0", "--foxglove-mcap", str(mcap)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        url = next(line.rsplit(" ", 1)[-1].strip() for line in proc.stderr if "Foxglove live view on " in line)
        seen: dict = {}
        client = threading.Thread(target=lambda: asyncio.run(asyncio.wait_for(watch(url, seen), 150)), daemon=True)
        client.start()
        end = time.monotonic() + 120
        while len(jobs_of(seen.get("/rt/tasks/planning/jobs", []))) < 3 and time.monotonic() < end:   # well into it
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        client.join(30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert f"{mcap} (MCAP, marked partial)" in err
    channels, got, meta = read_mcap(mcap)
    assert meta["rt_runtime"]["partial"] == "true" and "SIGINT" in meta["rt_runtime"]["why"]
    assert len(jobs_of(got["/rt/tasks/planning/jobs"])) >= len(jobs_of(seen["/rt/tasks/planning/jobs"])) >= 3
    assert "/rt/live" in channels


def test_an_mcap_over_an_input_or_an_existing_file_is_one_line(short_bag: Path, tmp_path, capsys) -> None:  # noqa: F811
    there = tmp_path / "there.mcap"
    there.write_bytes(b"keep")
    for path, why in ((short_bag, "outputs never"), (there, "exists already")):
        assert main(["replay", str(short_bag), "--until", "0.2", "--foxglove-mcap", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--foxglove-mcap" in err[0] and why in err[0], err
    assert there.read_bytes() == b"keep"
    assert main(["replay", str(short_bag), "--foxglove-hz", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--foxglove-hz" in err[0] and "'0'" in err[0], err


# ---- the folds, pure ---------------------------------------------------------------------------------------

def fold_all(fold, events) -> list:
    out = []
    for ev in events:
        out += fold(*ev) or []
    return out


def test_a_run_time_chain_member_reads_its_predecessors_job_and_a_free_one_the_last_publish() -> None:
    # chain A -> B -> C; B and C in a run-time chain of 50 ms (CHAIN events), A on its own (LET hand-over).
    f = ChainFold([("abc", ("A", "B", "C"), None), ("bc", ("B", "C"), 50 * MS)])
    out = fold_all(f.fold, [
        (K.RELEASE, 0, "A", 0, 0, 0), (K.FINISH, 4 * MS, "A", 0, 0, 0), (K.PUBLISH, 10 * MS, "A", 0, 1, 0),
        (K.RELEASE, 20 * MS, "A", 1, 0, 0),
        (K.RELEASE, 30 * MS, "B", 0, 0, 0),                       # reads A's job 0 (published at 10 ms)
        (K.FINISH, 34 * MS, "B", 0, 0, 0), (K.PUBLISH, 30 * MS + 50 * MS, "A", 1, 1, 0),
        (K.RELEASE, 34 * MS, "C", 0, 0, 2), (K.CHAIN, 34 * MS, "C", 0, 0, 1),   # released by B's finish
        (K.FINISH, 41 * MS, "C", 0, 0, 0),
        (K.PUBLISH, 80 * MS, "B", 0, 1, 0), (K.PUBLISH, 80 * MS, "C", 0, 1, 0)])
    assert out == [] and f.pending()   # the outputs wait for the interval's batch
    batches = {name: json.loads(text) for name, text in f.batch(100 * MS)}
    assert all(name == m["chain"] and conforms(m, CHAIN_SCHEMA) for name, m in batches.items())
    assert {(m["t_ms"], m["outputs"], len(m["latencies"])) for m in batches.values()} == {(100.0, 1, 1)}
    msgs = {name: m["latencies"][0] for name, m in batches.items()}
    assert set(msgs) == {"abc", "bc"}
    assert (msgs["abc"]["origin_ms"], msgs["abc"]["age_ms"], msgs["abc"]["finished_ms"]) == (0.0, 80.0, 41.0)
    assert msgs["abc"]["deadline_ms"] is None and not msgs["abc"]["miss"]
    assert (msgs["bc"]["origin_ms"], msgs["bc"]["age_ms"], msgs["bc"]["deadline_ms"]) == (30.0, 50.0, 80.0)
    assert msgs["bc"]["finished_ms"] == pytest.approx(11.0) and not msgs["bc"]["miss"]


def test_a_chain_output_without_data_from_the_head_and_a_dropped_one_send_nothing() -> None:
    f = ChainFold([("ab", ("A", "B"), None)])
    fold_all(f.fold, [(K.RELEASE, 0, "B", 0, 0, 0), (K.PUBLISH, 10 * MS, "B", 0, 1, 0)])
    assert f.batch(10 * MS) == []   # A not yet
    out = fold_all(f.fold, [(K.RELEASE, 20 * MS, "A", 0, 0, 0), (K.PUBLISH, 30 * MS, "A", 0, 1, 0),
                            (K.RELEASE, 40 * MS, "B", 1, 0, 0), (K.DROP, 45 * MS, "B", 1, 4, 1),
                            (K.PUBLISH, 50 * MS, "B", 1, 1, 0), (K.OP_START, 0, "B", 2, 0, 0)])
    assert out == [] and f.batch(60 * MS) == []


def test_degraded_tasks_follow_the_mode_each_reaction_leaves_and_the_safety_level_carries_them() -> None:
    s = LiveState()
    out = fold_all(s.fold, [(K.REACTION, 5 * MS, "plan", -1, REACT_DEGRADE, 1),
                            (K.SAFETY, 5 * MS, "plan", 0, 1, 3),
                            (K.REACTION, 6 * MS, "fuse", 3, 1, 1),     # a skip that left it on its fallback
                            (K.REACTION, 7 * MS, "fuse", 4, 1, 1),     # no change: no message
                            (K.REACTION, 9 * MS, "plan", -1, REACT_RECOVER, 0),
                            (K.START, 10 * MS, "plan", 7, 0, 0),        # on its primary graph: as known
                            (K.START, 11 * MS, "pred", 2, 0, 1)])       # switched without a REACTION of its own
    modes = [m for what, m in out if what == "mode"]
    assert [(m["task"], m["mode"], m["degraded"]) for m in modes] == [
        ("plan", "fallback", ["plan"]), ("fuse", "fallback", ["fuse", "plan"]), ("plan", "primary", ["fuse"]),
        ("pred", "fallback", ["fuse", "pred"])]
    assert (modes[-1]["level"], modes[-1]["state"]) == (1, "degraded")
    assert [m["degraded"] for what, m in out if what == "safety"] == [["plan"]]
    assert -1 not in s.open.get("plan", {})   # a task's reaction is no job of it


def test_speculation_verdicts_count_hits_and_misses() -> None:
    s = LiveState()
    out = fold_all(s.fold, [(K.REACTION, 0, "plan", 1, REACT_SPEC_HIT, 0), (K.REACTION, 1, "plan", 2, REACT_SPEC_MISS, 0),
                            (K.REACTION, 2, "plan", 3, REACT_SPEC_HIT, 0)])
    spec = [m for what, m in out if what == "spec"]
    assert [(m["job"], m["hit"], m["hits"], m["misses"]) for m in spec] == [(1, True, 1, 0), (2, False, 1, 1),
                                                                           (3, True, 2, 1)]
    assert spec[-1]["hit_rate"] == pytest.approx(2 / 3)
    s.close()   # the jobs end as they stand: the verdict is each one's reaction
    [(_, text)] = s.batch(3)
    batch = json.loads(text)
    assert [(j["job"], j["reaction"]) for j in batch["jobs"]] == [(1, "spec_hit"), (2, "spec_miss"), (3, "spec_hit")]


class Route:
    def __init__(self, topic: str, codec: str, channels: dict[str, str]) -> None:
        self.topic, self.codec, self.channels = topic, codec, channels


def test_outputs_are_decimated_per_route_before_anything_is_kept() -> None:
    kept = []
    tap = OutputTap([Route("/traj", "path", {"trajectory": "plan/t"}),
                     Route("/obj", "markers", {"tracks": "f/t", "count": "f/c"}),
                     Route("/other", "diagnostics", {"x": "x"})], 4.0, lambda *a: kept.append(a))
    tracks, count = np.zeros((2, 12)), np.array([1])
    for i in range(10):   # 10 Hz of logical time, 4 Hz wanted: at 0, 300, 600, 900 ms
        t = i * 100 * MS
        tap("plan/t", t, np.ones((3, 5)))
        tap("f/t", t, tracks)
        if i != 3:   # the objects' count missing at 300 ms: that group is incomplete, the next one is kept
            tap("f/c", t, count)
        tap("x", t, count)
    assert [(topic, t // MS) for topic, _, t, _ in kept if topic == "/traj"] == [("/traj", 0), ("/traj", 300),
                                                                                 ("/traj", 600), ("/traj", 900)]
    assert [t // MS for topic, _, t, _ in kept if topic == "/obj"] == [0, 400, 700]
    assert all(g["tracks"] is tracks and g["count"] is count for topic, _, _, g in kept if topic == "/obj")   # no copy


def test_the_layout_plots_only_channels_and_fields_the_live_view_serves() -> None:
    import re

    from rt_runtime.config.stack import load_stack
    from rt_runtime.live import chains as C
    from rt_runtime.live import state as S
    from rt_runtime.live.channels import LiveSpec
    from rt_runtime.live.outputs import EGO_FRAME, TF_TOPIC, topic_of

    root = Path(__file__).resolve().parents[1]
    layout = json.loads((root / "config" / "foxglove_layout.json").read_text())
    spec = LiveSpec.of(load_stack(root / "config" / "stack.yaml", {}))
    schemas = {"/rt/safety": S.SAFETY_SCHEMA, "/rt/degraded": S.MODE_SCHEMA, "/rt/speculation": S.SPEC_SCHEMA,
               "/rt/live": S.LIVE_SCHEMA, **{f"/rt/chains/{n}": C.CHAIN_SCHEMA for n, *_ in spec.chains}}
    schemas.update({f"/rt/tasks/{t}/jobs": S.JOBS_SCHEMA for t in spec.tasks})
    drawn = {topic_of(r.topic) for r in spec.routes}
    paths = [p["value"] for c in layout["configById"].values() for p in c.get("paths", ())] + \
        [c["topicPath"] for c in layout["configById"].values() if "topicPath" in c]
    assert len(paths) > 20
    for path in paths:   # a topic, a filter on a key of it, then fields, an array's sliced with [:]
        m = re.fullmatch(r"(/[\w/]+)(\{(\w+)==\"\w+\"\})?((?:\.\w+(?:\[:\])?)*)", path)
        assert m, path
        topic, _, key, fields = m.groups()
        assert topic in schemas, path
        node = schemas[topic]
        assert key is None or key in node["properties"], path
        for name, sliced in re.findall(r"\.(\w+)(\[:\])?", fields):
            assert node.get("type") == "object" and name in node["properties"], path   # an array is sliced first
            node = node["properties"][name]
            if sliced:
                assert node.get("type") == "array", path
                node = node["items"]
        assert node.get("type") != "array" or path in {c.get("topicPath") for c in layout["configById"].values()}, \
            path   # a plot of an array (unsliced) shows nothing; a table shows its rows
    panels = layout["configById"]
    # the 3D panel draws the trajectory and the objects, its camera on the ego frame the view serves
    assert set(panels["3D!scene"]["topics"]) == drawn | {TF_TOPIC}
    assert (panels["3D!scene"]["followTf"], panels["3D!scene"]["followMode"]) == (EGO_FRAME, "follow-position")
    assert {p.split("!")[0] for p in panels} >= {"Plot", "StateTransitions", "3D", "RawMessages", "Table"}


def test_a_failed_run_removes_its_mcap_and_leaves_no_staging_behind(tmp_path) -> None:
    from rt_runtime.live.foxglove import FoxgloveLive

    live = FoxgloveLive(serve=False, mcap=tmp_path / "gone.mcap", tasks=("T",))
    live.emit(K.RELEASE, 0, "T", 0)
    live.close(discard=True)
    assert list(tmp_path.iterdir()) == []


def test_a_trajectory_and_tracks_are_drawn_where_they_are() -> None:
    import warnings

    from foxglove_client import proto_class
    from rt_runtime.live.outputs import objects, trajectory

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from foxglove import messages as m
    rows = np.array([[1.0, 2.0, 0.5, 3.0, 0.0], [4.0, 5.0, -0.25, 3.0, 1.0], [np.nan, 0, 0, 0, 2.0]])
    path = proto_class("foxglove.PosesInFrame", m.PosesInFrame.get_schema().data).FromString(
        trajectory({"trajectory": rows}, 1_500_000_000, "map"))
    assert (path.timestamp.seconds, path.timestamp.nanos, path.frame_id) == (1, 500_000_000, "map")
    assert [(p.position.x, p.position.y, p.position.z) for p in path.poses] == [(1.0, 2.0, 0), (4.0, 5.0, 0)]   # no NaN
    assert [2 * math.atan2(p.orientation.z, p.orientation.w) for p in path.poses] == pytest.approx([0.5, -0.25])
    assert all(p.orientation.x == p.orientation.y == 0 for p in path.poses)
    tracks = np.zeros((3, 12))
    tracks[0, :9] = [7, 2, 10.0, -3.0, 3.0, 4.0, 0.6, 1.8, 0.6]   # a cyclist at (10, -3), 5 m/s, heading 0.6
    tracks[1, :2] = [8, 0]
    scene_class = proto_class("foxglove.SceneUpdate", m.SceneUpdate.get_schema().data)
    scene = scene_class.FromString(objects({"tracks": tracks, "count": np.array([1])}, 2_000_000_001, "map"))
    assert [(d.type, d.timestamp.seconds, d.timestamp.nanos) for d in scene.deletions] == [(1, 2, 1)]   # ALL
    [e] = scene.entities   # count 1: one track
    assert (e.id, e.frame_id, e.timestamp.nanos, e.lifetime.seconds, e.lifetime.nanos) == \
        ("cyclist/7", "map", 1, 0, 300_000_000)
    [cube] = e.cubes
    assert (cube.pose.position.x, cube.pose.position.y, cube.pose.position.z, cube.size.x, cube.size.y,
            cube.size.z) == pytest.approx((10, -3, 0.75, 1.8, 0.6, 1.5))
    assert 2 * math.atan2(cube.pose.orientation.z, cube.pose.orientation.w) == pytest.approx(0.6)
    assert (cube.color.r, cube.color.g, cube.color.b, cube.color.a) == pytest.approx((1.0, 0.7, 0.1, 0.8))
    [text] = e.texts
    assert (text.text, text.billboard, text.scale_invariant, text.font_size) == ("#7 5.0 m/s", True, True, 14.0)
    assert (text.pose.position.x, text.pose.position.y, text.pose.position.z, text.pose.orientation.w) == \
        pytest.approx((10, -3, 1.8, 1.0))
    # Written straight as bytes (live.wire): what the SDK's own message objects encode to, decoded, is the same.
    tracks[1, :9] = [8, 9, -1.0, 2.0, 0.0, -1.0, -0.3, 0.05, 4.0]   # a class out of range, a length under 0.1
    ours = scene_class.FromString(objects({"tracks": tracks, "count": np.array([2])}, 3, "odom"))
    stamp, life = m.Timestamp(sec=0, nsec=3), m.Duration(sec=0, nsec=300_000_000)

    def pose(x: float, y: float, z: float, yaw: float) -> object:
        return m.Pose(position=m.Vector3(x=x, y=y, z=z),
                      orientation=m.Quaternion(x=0.0, y=0.0, z=math.sin(yaw / 2), w=math.cos(yaw / 2)))

    sdk = m.SceneUpdate(deletions=[m.SceneEntityDeletion(timestamp=stamp, type=m.SceneEntityDeletionType.All)],
                        entities=[m.SceneEntity(
                            timestamp=stamp, frame_id="odom", id=ident, lifetime=life,
                            cubes=[m.CubePrimitive(pose=pose(x, y, 0.75, yaw), size=m.Vector3(x=sx, y=sy, z=1.5),
                                                   color=m.Color(r=r, g=g, b=b, a=0.8))],
                            texts=[m.TextPrimitive(pose=pose(x, y, 1.8, 0.0), billboard=True, font_size=14.0,
                                                   scale_invariant=True, color=m.Color(r=1.0, g=1.0, b=1.0, a=1.0),
                                                   text=text)])
                            for ident, x, y, yaw, sx, sy, (r, g, b), text in (
                                ("cyclist/7", 10.0, -3.0, 0.6, 1.8, 0.6, (1.0, 0.7, 0.1), "#7 5.0 m/s"),
                                ("object/8", -1.0, 2.0, -0.3, 0.1, 4.0, (0.7, 0.7, 0.7), "#8 1.0 m/s"))])
    assert ours == scene_class.FromString(sdk.encode())


def test_a_stack_attached_again_after_a_seek_ends_the_last_runs_jobs_and_starts_the_fold_over(tmp_path) -> None:
    from rt_runtime.live.foxglove import FoxgloveLive

    def run(live: FoxgloveLive, jobs: int) -> None:   # a 10 Hz task from logical 0, one job unfinished at the end
        for i in range(jobs):
            t = i * 100 * MS
            live.emit(K.RELEASE, t, "T", i)
            live.emit(K.START, t, "T", i)
            if i < jobs - 1:
                live.emit(K.FINISH, t + 5 * MS, "T", i)
                live.emit(K.PUBLISH, t + 50 * MS, "T", i, 1, 0)

    live = FoxgloveLive(serve=False, mcap=tmp_path / "seek.mcap", tasks=("T",))
    live.attach(["T"], lambda t: 10_000_000_000 + t)
    run(live, 4)
    live.attach(["T"], lambda t: 20_000_000_000 + t)   # a seek: the stack built again, logical 0 there
    run(live, 3)
    live.close()
    _, got, _ = read_mcap(tmp_path / "seek.mcap")
    batches = got["/rt/tasks/T/jobs"]
    assert [j["job"] for j in jobs_of(batches)] == [0, 1, 2, 3, 0, 1, 2]   # each run's jobs, none merged
    assert [j["finish_ms"] is None for j in jobs_of(batches)] == [False] * 3 + [True] + [False] * 2 + [True]
    restart = next(k for k, b in enumerate(batches) if b["jobs"][0]["job"] == 0 and k > 0)
    assert batches[restart - 1]["window"]["jobs"] == 4 and batches[-1]["window"]["jobs"] == 3   # counted afresh
    assert all(b["t_ms"] <= 400 for b in batches)   # the second run's intervals from its own 0
