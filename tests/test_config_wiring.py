"""A miswired stack is refused before it runs, one line per problem (issue 16): channels read but never
written, two writers of one channel, typos in the keys of channels/ingress/egress/safety entries, an
ingress codec for another message type than the bag's, an egress codec fed a channel of another layout.

Each case is config/stack.yaml edited (yaml.safe_load, a change, written to tmp_path), checked through
the command line (``rt-runtime check`` / ``replay``: exit 2, the lines, no traceback, nothing written)
or through ``parse_stack`` / ``build_bindings`` (``ConfigError`` naming what to fix).
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from rt_runtime import cli
from rt_runtime.config import ConfigError
from rt_runtime.config.stack import build_bindings, parse_stack

ROOT = Path(__file__).resolve().parents[1]
STACK = yaml.safe_load((ROOT / "config" / "stack.yaml").read_text())


def task(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(e for e in doc["tasks"] if e["name"] == name)


def stack(tmp_path: Path, edit: Callable[[dict[str, Any]], None], name: str = "stack.yaml") -> Path:
    """config/stack.yaml with ``edit`` applied, written to tmp_path."""
    doc = copy.deepcopy(STACK)
    edit(doc)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(argv: list[Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``rt-runtime ARGV`` in this process: (exit status, stderr)."""
    rc = cli.main([str(a) for a in argv])
    return rc, capsys.readouterr().err


def lines(err: str, n: int = 1) -> list[str]:
    """stderr's lines: ``n`` problems (one line; or a line saying how many, then one each), no traceback."""
    assert "Traceback" not in err, err
    out = err.strip().splitlines()
    assert len(out) == (1 if n == 1 else n + 1), err
    if n > 1:
        assert f"{n} problems" in out[0], out[0]
    return out


def refused(argv: list[Any], capsys: pytest.CaptureFixture[str], *names: str, n: int = 1) -> list[str]:
    rc, err = run(argv, capsys)
    assert rc == 2, err
    out = lines(err, n)
    text = "\n".join(out)
    for name in names:
        assert name in text, (name, text)
    return out


@pytest.fixture(scope="module")
def empty_bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bag with the reference stack's input topics and types, no messages: enough to get a replay to
    building the graphs (where the checks that need them run)."""
    from rt_runtime.bag import BagWriter
    from rt_runtime.io import INGRESS_CODECS

    path = tmp_path_factory.mktemp("bags") / "empty"
    with BagWriter(path, "mcap") as w:
        for r in STACK["ingress"]:
            w.add_topic(r["topic"], INGRESS_CODECS[r["codec"]].msgtypes[0])
    return path


# ---- graph-free: `check` (and every parse_stack) ----------------------------------------------
def test_the_reference_stack_is_wired_correctly(tmp_path, capsys):
    rc, err = run(["check", stack(tmp_path, lambda d: None)], capsys)
    assert rc == 0, err
    bindings, initial = build_bindings(parse_stack(copy.deepcopy(STACK), "stack.yaml"))
    assert len(bindings) == len(STACK["tasks"]) and "planning/trajectory" in initial


def test_an_input_channel_nothing_writes(tmp_path, capsys):
    cfg = stack(tmp_path, lambda d: task(d, "radar_objects")["inputs"].update(radar="radar/pionts"))
    line = refused(["check", cfg], capsys, "rt-runtime check: error:", str(cfg), "task 'radar_objects'",
                   "inputs.radar", "channel 'radar/pionts'", "did you mean 'radar/points'")[0]
    assert "written by no task, fed by no ingress and given no initial: value" in line


def test_two_tasks_writing_one_channel(tmp_path, capsys):
    cfg = stack(tmp_path, lambda d: task(d, "radar_objects")["outputs"].update(radar_objects="lidar/boxes"))
    refused(["check", cfg], capsys, str(cfg), "channel 'lidar/boxes'", "task 'lidar_objects' (outputs.boxes)",
            "task 'radar_objects' (outputs.radar_objects)", "one writer")


def test_an_ingress_route_and_a_task_writing_one_channel(tmp_path, capsys):
    cfg = stack(tmp_path, lambda d: task(d, "camera_objects")["outputs"].update(camera_boxes="ego/odom"))
    refused(["check", cfg], capsys, "channel 'ego/odom'", "task 'camera_objects'", "ingress /localization/odometry")


def test_a_trigger_nothing_writes(tmp_path, capsys):
    cfg = stack(tmp_path, lambda d: task(d, "fusion_tracking").update(trigger="lidar/boxs"))
    refused(["check", cfg], capsys, "task 'fusion_tracking': trigger: channel 'lidar/boxs'", "never released",
            "did you mean 'lidar/boxes'")
    cfg = stack(tmp_path, lambda d: task(d, "lidar_objects").update(trigger="/sensing/lidar/points"), "topic.yaml")
    refused(["check", cfg], capsys, "task 'lidar_objects': trigger", "did you mean 'lidar/points', the channel "
            "ingress /sensing/lidar/points feeds")


def test_an_egress_channel_no_task_writes(tmp_path, capsys):
    cfg = stack(tmp_path, lambda d: d["egress"][0]["channels"].update(trajectory="planning/trajectroy"))
    refused(["check", cfg], capsys, "egress /planning/trajectory: channels.trajectory", "'planning/trajectroy'",
            "written by no task", "did you mean 'planning/trajectory'")
    cfg = stack(tmp_path, lambda d: d["egress"][0]["channels"].update(trajectory="ego/odom"), "ingress.yaml")
    refused(["check", cfg], capsys, "channel 'ego/odom' is only fed by ingress")


@pytest.mark.parametrize("where, edit, names", [
    ("channels", lambda d: d["channels"][0].update(polcy="queue"),
     ["channel 'lidar/points': polcy: unknown key (did you mean 'policy'?)"]),
    ("ingress", lambda d: d["ingress"][0].update(chanel="lidar/points"),
     ["ingress /sensing/lidar/points: chanel: unknown key (did you mean 'channel'?)"]),
    ("egress", lambda d: d["egress"][1].update(chanels={"count": "fusion/track_count"}),
     ["egress /perception/objects: chanels: unknown key (did you mean 'channels'?)"]),
    ("safety", lambda d: d["safety"].update(silence_facter=2.0),
     ["safety: unknown key(s) ['silence_facter'] (silence_facter: did you mean 'silence_factor'?)"]),
    ("hysteresis", lambda d: d["safety"]["hysteresis"].update(degaded=3),
     ["safety: hysteresis: unknown key(s) ['degaded']", "did you mean 'degraded'"]),
    ("speculate", lambda d: task(d, "planning")["speculate"].update(wait_fro=["tracks"]),
     ["task 'planning': speculate: unknown key(s) ['wait_fro']", "did you mean 'wait_for'"]),
    ("task", lambda d: task(d, "planning").update(outptus={}),
     ["task 'planning': outptus: unknown key (did you mean 'outputs'?)"]),
    ("chain", lambda d: d["chains"][1].update(deadlin="75ms"),
     ["chain 'fusion_to_plan': deadlin: unknown key (did you mean 'deadline'?)"]),
    ("fallback_args without fallback", lambda d: task(d, "prediction").update(fallback_args={"x": 1}),
     ["task 'prediction': fallback_args", "no fallback"]),
    ("channel and channels", lambda d: d["ingress"][1].update(channels={"value": "radar/points"}),
     ["ingress /sensing/radar/points: channels: give 'channel'", "not both"]),
    ("an ingress role", lambda d: d["ingress"][4]["channels"].update(cuont=d["ingress"][4]["channels"].pop("count")),
     ["ingress /planning/route: channels.cuont: codec route produces no such role (did you mean 'count'?)"]),
    ("an egress role", lambda d: d["egress"][0]["channels"].update(status="planning/status"),
     ["egress /planning/trajectory: channels.status: codec path reads no such role; it reads trajectory"]),
])
def test_a_key_the_entry_does_not_have(where, edit, names, tmp_path, capsys):
    cfg = stack(tmp_path, edit)
    refused(["check", cfg], capsys, str(cfg), *names)
    with pytest.raises(ConfigError, match="stack.yaml: "):   # replay, run and faults refuse it the same way
        parse_stack(yaml.safe_load(cfg.read_text()), "stack.yaml")


def test_channels_entries_name_channels_in_use_once(tmp_path, capsys):
    cfg = stack(tmp_path, lambda d: d["channels"].append({"name": "camera/imgae", "policy": "queue", "depth": 2}))
    refused(["check", cfg], capsys, "channel 'camera/imgae': channels[2] configures a channel that no task",
            "did you mean 'camera/image'")
    cfg = stack(tmp_path, lambda d: d["channels"].append({"name": "lidar/points"}), "twice.yaml")
    refused(["check", cfg], capsys, "channel 'lidar/points': declared twice (channels[0] and channels[2])")


def test_all_the_problems_of_one_pass_at_once(tmp_path, capsys):
    def edit(d: dict[str, Any]) -> None:
        task(d, "radar_objects")["inputs"]["radar"] = "radar/pionts"
        task(d, "camera_objects")["outputs"]["camera_boxes"] = "lidar/boxes"
        d["egress"][0]["channels"]["trajectory"] = "planning/trajectroy"

    cfg = stack(tmp_path, edit)
    out = refused(["check", cfg], capsys, n=3)
    assert out[0] == f"rt-runtime check: error: {cfg}: 3 problems, one per line:"
    assert all(line.startswith(f"{cfg}: ") for line in out[1:]), out
    assert "'radar/pionts'" in out[2] and "'lidar/boxes'" in out[1] and "'planning/trajectroy'" in out[3], out

    def keys(d: dict[str, Any]) -> None:
        d["channels"][0]["polcy"] = "latest"
        d["ingress"][0]["chanel"] = "x"
        d["safety"]["planer"] = "planning"

    cfg = stack(tmp_path, keys, "keys.yaml")
    refused(["check", cfg], capsys, "polcy", "chanel", "planer", n=3)


def test_a_task_set_with_run_time_keys_is_not_a_stack_to_wire(tmp_path, capsys):
    # `check` reads bare task sets: a trigger there names whatever releases the task.
    path = tmp_path / "taskset.yaml"
    path.write_text("policy: edf\ntasks:\n  - {name: a, period: 10ms, wcet: 1ms}\n"
                    "  - {name: b, trigger: /objects, min_interarrival: 10ms, wcet: 1ms}\n")
    rc, err = run(["check", path], capsys)
    assert rc == 0, err


# ---- with the bag and the graphs: `replay` (and build_bindings) ------------------------------------
def test_an_input_only_the_initial_function_could_feed(tmp_path, capsys, empty_bag):
    # planning has an initial: function; whether it feeds ego/odm is known once it is called.
    cfg = stack(tmp_path, lambda d: task(d, "planning")["inputs"].update(odom="ego/odm"))
    rc, err = run(["check", cfg], capsys)
    assert rc == 0, err
    out = tmp_path / "out_bag"
    refused(["replay", empty_bag, "--config", cfg, "--out", out], capsys, "rt-runtime replay: error:", str(cfg),
            "task 'planning': inputs.odom: channel 'ego/odm'",
            "initial: pipelines.stack:initial_planner_state gives no value for 'odom'", "did you mean 'ego/odom'")
    assert not out.exists()


def test_an_ingress_codec_for_another_message_type(tmp_path, capsys, empty_bag):
    cfg = stack(tmp_path, lambda d: d["ingress"][1].update(codec="image_rgb"))
    refused(["replay", empty_bag, "--config", cfg], capsys, str(cfg), "ingress /sensing/radar/points",
            "codec image_rgb decodes sensor_msgs/msg/Image", "the bag's /sensing/radar/points is "
            "sensor_msgs/msg/PointCloud2", "lidar_points, lidar_points_deskewed, radar_points")

    def both(d: dict[str, Any]) -> None:
        d["ingress"][1]["codec"] = "image_rgb"
        d["ingress"][2]["codec"] = "odometry"

    cfg = stack(tmp_path, both, "both.yaml")
    refused(["replay", empty_bag, "--config", cfg], capsys, "codec image_rgb", "codec odometry decodes "
            "nav_msgs/msg/Odometry", "is sensor_msgs/msg/Image", n=2)


def test_ros1_spelled_message_types_match():
    from rt_runtime.replay.engine import codec_problems

    cfg = parse_stack(copy.deepcopy(STACK), "stack.yaml")
    topics = {r["topic"]: "sensor_msgs/PointCloud2" for r in STACK["ingress"][:2]}
    assert codec_problems(cfg, topics) == []


def test_an_egress_codec_fed_another_layout_fails_before_a_bag_is_written(tmp_path, capsys, empty_bag):
    cfg = stack(tmp_path, lambda d: d["egress"][1].update(channels={"tracks": "lidar/boxes",
                                                                    "count": "lidar/box_count"}))
    rc, err = run(["check", cfg], capsys)   # the layouts are the graphs': known once they are built
    assert rc == 0, err
    out = tmp_path / "out_bag"
    refused(["replay", empty_bag, "--config", cfg, "--out", out], capsys, str(cfg), "egress /perception/objects",
            "codec markers", "channel 'lidar/boxes'", "(T, 12) float (TRACK_COLS)", "found (128, 8) float32",
            "task 'lidar_objects', output boxes")
    assert not out.exists()
    doc = yaml.safe_load(cfg.read_text())
    doc["egress"][1]["channels"]["count"] = "fusion/tracks"   # and tracks still lidar/boxes: two problems
    with pytest.raises(ConfigError) as e:
        build_bindings(parse_stack(doc, "stack.yaml"))
    assert str(e.value).startswith("stack.yaml: 2 problems") and "reads count from channel 'fusion/tracks' as " \
        "(1,) int; found (64, 12) float32" in str(e.value), str(e.value)


def test_a_channel_between_tasks_is_checked_when_the_stack_is_built(tmp_path) -> None:
    """Prediction fed the LiDAR's boxes instead of the tracks: refused at build, naming both ends and why."""
    import yaml

    from rt_runtime.config import ConfigError
    from rt_runtime.config.stack import build_bindings, load_stack

    doc = yaml.safe_load(open("config/stack.yaml"))
    next(t for t in doc["tasks"] if t["name"] == "prediction")["inputs"]["tracks"] = "lidar/boxes"
    path = tmp_path / "miswired.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError) as e:
        build_bindings(load_stack(path))
    msg = str(e.value)
    assert "miswired.yaml: task 'prediction': input tracks reads channel 'lidar/boxes'" in msg
    assert "task 'lidar_objects' writes it (output boxes)" in msg and "\n" not in msg
