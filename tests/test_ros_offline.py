"""The ROS adapters' plain-Python parts, without DDS: overrides, ingress health, egress pump, drivers,
diagnostics, the DDS environment, the CLI without rclpy, and what setup.py installs for the launch files."""
from __future__ import annotations

import ast
import re
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from rt_runtime import cli
from rt_runtime.bag import array_to_cloud, array_to_image, from_cdr, to_cdr
from rt_runtime.bag.types import msg_class
from rt_runtime.config import ConfigError
from rt_runtime.config.stack import EgressRoute, IngressRoute
from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.ros import diagnostics, env, rclpy_missing
from rt_runtime.ros.drivers import SimDriver, WallDriver, collect, degrade_fallback_tasks
from rt_runtime.ros.inputs import Ingress
from rt_runtime.ros.outputs import EgressPump
from rt_runtime.ros.overrides import apply_overrides, load_config
from rt_runtime.ros.params import PARAMS
from rt_runtime.sched import Runtime, TaskBinding, VirtualClock, WallClock

ROOT = Path(__file__).resolve().parents[1]
MS = 1_000_000
XYZI = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<f4")])


# ---- overrides ------------------------------------------------------------------------------------
def test_overrides_set_named_list_entries_nested_keys_and_typed_values() -> None:
    doc = {"workers": 1, "tasks": [{"name": "planning", "wcet": "17ms", "args": {"k": 1}}, {"name": "radar"}]}
    out = apply_overrides(doc, ["tasks.planning.deadline=10ms", "tasks.planning.args.k=[1, 2]", "workers=2"])
    assert out["tasks"][0]["deadline"] == "10ms" and out["tasks"][0]["args"]["k"] == [1, 2] and out["workers"] == 2
    assert doc["tasks"][0] == {"name": "planning", "wcet": "17ms", "args": {"k": 1}}   # the input is untouched
    for bad, says in (("tasks.nope.wcet=1ms", "no entry named 'nope'"), ("workers", "dotted.key=value"),
                      ("workers.x=1", "inside a int")):
        with pytest.raises(ValueError, match=re.escape(says)):
            apply_overrides(doc, [bad])


def test_load_config_applies_overrides_and_names_the_file_on_errors() -> None:
    cfg = load_config(ROOT / "config" / "stack.yaml", ["tasks.planning.deadline=10ms"])
    assert next(t for t in cfg.tasks if t.name == "planning").deadline == 10 * MS
    with pytest.raises(ConfigError, match="stack.yaml: .*deadline"):
        load_config(ROOT / "config" / "stack.yaml", ["tasks.planning.deadline=10"])   # a bare number
    with pytest.raises(ConfigError, match="no entry named 'planer'"):
        load_config(ROOT / "config" / "stack.yaml", ["tasks.planer.deadline=10ms"])


# ---- ingress ------------------------------------------------------------------------------------
class FakeDriver:
    def __init__(self) -> None:
        self.t = 0
        self.epoch = 0
        self.pushed: list[tuple[str, int, object]] = []
        self.stamps: list[int] = []

    def now(self) -> int:
        return self.t

    def push(self, channel: str, t_ns: int, data: object, stamp_ns: int = -1) -> bool:
        self.pushed.append((channel, t_ns, data))
        self.stamps.append(stamp_ns)
        return True

    def to_logical(self, ros_ns: int) -> int:
        return max(0, ros_ns - self.epoch)


def _ingress() -> tuple[Ingress, FakeDriver, dict]:
    routes = [IngressRoute("/lidar", "lidar_points", {"value": "lidar/points"}),
              IngressRoute("/cam", "image_rgb", {"value": "camera/image"})]
    drv = FakeDriver()
    ing = Ingress(routes, drv, lambda a: torch.from_numpy(a if a.flags.writeable else a.copy()),
                  stale_after_ns=500 * MS)
    return ing, drv, {r.topic: ing.callback(r) for r in routes}


def _cloud(n: int = 100, t_ns: int = 0, nan: int = 0) -> bytes:
    pts = np.zeros(n, XYZI)
    pts["x"] = np.arange(n)
    pts["x"][:nan] = np.nan
    return to_cdr(array_to_cloud(pts, "lidar", t_ns, is_dense=nan == 0))


def test_ingress_decodes_raw_cdr_into_channels_counting_nan_points_and_backward_stamps() -> None:
    ing, drv, cb = _ingress()
    drv.t = 5 * MS
    cb["/lidar"](_cloud(100, t_ns=2_000, nan=7))
    cb["/lidar"](_cloud(10, t_ns=1_000))                          # stamp goes backwards
    cb["/cam"](to_cdr(array_to_image(np.zeros((4, 6, 3), np.uint8), "bgr8", "cam", 0)))
    h = ing.health["/lidar"]
    assert (h.received, h.bad, h.nan_points, h.stamp_back) == (2, 0, 7, 1)
    (ch, t, pts), _, (ch2, _, img) = drv.pushed
    assert (ch, t, tuple(pts.shape)) == ("lidar/points", 5 * MS, (93, 4)) and not torch.isnan(pts).any()
    assert ch2 == "camera/image" and tuple(img.shape) == (4, 6, 3)
    assert drv.stamps == [2_000, 1_000, 0]   # each header stamp on the logical timeline (epoch 0 here)


def test_malformed_messages_are_counted_reported_and_never_raise() -> None:
    ing, drv, cb = _ingress()
    Field, Cloud = msg_class("sensor_msgs/msg/PointField"), from_cdr(_cloud(4), "sensor_msgs/msg/PointCloud2")
    past_step = to_cdr(type(Cloud)(**{**Cloud.__dict__, "fields": [Field(name="x", offset=14, datatype=7, count=1)]}))
    no_xyz = to_cdr(type(Cloud)(**{**Cloud.__dict__, "fields": [Field(name="x", offset=0, datatype=7, count=1)]}))
    img = from_cdr(to_cdr(array_to_image(np.zeros((2, 2, 3), np.uint8), "rgb8", "c", 0)), "sensor_msgs/msg/Image")
    yuv = to_cdr(type(img)(**{**img.__dict__, "encoding": "yuv422"}))
    for topic, raw in (("/lidar", past_step), ("/lidar", no_xyz), ("/lidar", _cloud(4)[:40]), ("/lidar", b"junk"),
                       ("/cam", yuv)):
        cb[topic](raw)
    assert (ing.health["/lidar"].bad, ing.health["/cam"].bad) == (4, 1) and not drv.pushed
    assert "point_step" in ing.health["/lidar"].values(0)["last_error"] or ing.health["/lidar"].last_error
    assert "yuv422" in ing.health["/cam"].last_error


def test_a_silent_input_goes_stale_after_its_own_periods_and_recovers_with_the_next_message() -> None:
    ing, drv, cb = _ingress()
    for k in range(5):                    # a 10 Hz stream
        drv.t = k * 100 * MS
        cb["/lidar"](_cloud(3))
    drv.t = 400 * MS + 499 * MS
    assert ing.check_stale(drv.t) == []           # 3 periods = 300 ms, but at least stale_after (500 ms)
    drv.t = 400 * MS + 501 * MS
    assert ing.check_stale(drv.t) == ["/lidar"] and ing.stale_topics() == ["/lidar"]
    assert ing.check_stale(drv.t + MS) == []      # reported once per silence
    cb["/lidar"](_cloud(3))
    assert ing.stale_topics() == [] and ing.health["/lidar"].stale_events == 1
    assert "/cam" not in ing.stale_topics()       # never heard of: "no message yet", not stale


# ---- egress -------------------------------------------------------------------------------------
def test_egress_pump_publishes_one_message_per_route_and_instant_with_the_mapped_stamp() -> None:
    sent: list[tuple[str, bytes]] = []
    routes = [EgressRoute("/planning/trajectory", "path", {"trajectory": "planning/trajectory"}),
              EgressRoute("/perception/objects", "markers", {"tracks": "fusion/tracks", "count": "fusion/count"})]
    pump = EgressPump(routes, "map", lambda t: 1_000_000_000_000 + t, lambda topic, cdr: sent.append((topic, cdr)),
                      watch=["planning/status"])
    traj = torch.zeros(4, 5)
    traj[:, 4] = torch.arange(4) * 0.1
    pump.on_publish("planning/trajectory", 100 * MS, 0, traj)
    pump.on_publish("planning/status", 100 * MS, 0, torch.ones(1, dtype=torch.int32))
    pump.on_publish("fusion/tracks", 80 * MS, 0, torch.zeros(8, 12))   # half a route: nothing yet
    pump.close()
    assert [t for t, _ in sent] == ["/planning/trajectory"] and pump.latest["planning/status"] == (100 * MS, 1)
    path = from_cdr(sent[0][1], "nav_msgs/msg/Path")
    assert path.header.frame_id == "map" and (path.header.stamp.sec, path.header.stamp.nanosec) == (1000, 100 * MS)
    assert len(path.poses) == 4 and abs(path.poses[1].header.stamp.nanosec - 200 * MS) < 1000   # float32 t


def test_diagnostics_say_degraded_stale_and_bad_with_levels() -> None:
    tasks = {"planning": {"released": 10, "missed": 2, "overruns": 0, "mode": "fallback", "max_exec_ns": 3 * MS},
             "radar": {"released": 10, "missed": 1, "mode": "primary"}}
    stats = {"tasks": tasks, "channels": {"ego/odom": {"drops": 3}}, "stalled": {}, "deterministic": False,
             "why": [(5, "task 'planning' job 3 missed its deadline")], "errors": 0}
    inputs = {"/lidar": {"received": 5, "bad": 2, "stale": True, "silent_ms": 800.0}, "/cam": {"received": 0}}
    msg = from_cdr(to_cdr(diagnostics.build(7, stats, {}, inputs, {"mode": "wall", "jumps_back": 0},
                                            {"planning/status": 1})), "diagnostic_msgs/msg/DiagnosticArray")
    by = {s.name: s for s in msg.status}
    assert (by["rt_runtime: task planning"].level, by["rt_runtime: task planning"].message) == (2, "degraded")
    assert by["rt_runtime: task radar"].level == 1 and "1 deadline misses" in by["rt_runtime: task radar"].message
    assert by["rt_runtime: watchdog"].message == "degraded: planning"
    assert by["rt_runtime: input /lidar"].message.startswith("stale")
    assert by["rt_runtime: input /cam"].message == "no message yet"
    outs = {kv.key: kv.value for kv in by["rt_runtime: outputs"].values}
    assert outs["planning/status"] == "1" and outs["drops ego/odom"] == "3"


# ---- drivers ------------------------------------------------------------------------------------
def _stack(clock: object, **kw: object) -> Runtime:
    x, y = TensorSpec("x", (1,), "float32"), TensorSpec("y", (1,), "float32")
    add = Graph("add", [Op("add", lambda a, o: torch.add(a, 1.0, out=o), (x,), (y,))], [x], ["y"])
    stop = Graph("stop", [Op("zero", lambda a, o: o.zero_(), (x,), (y,))], [x], ["y"])
    task = TaskBinding(Task("plan", 100 * MS, 50 * MS), add, inputs={"x": "in"}, outputs={"y": "out"},
                       fallback=stop, on_miss="degrade", recover_after=1000)
    return Runtime([task], clock=clock, **kw)  # type: ignore[arg-type]


@pytest.mark.wallclock
def test_sim_driver_follows_clock_ticks_and_rebases_a_clock_that_jumps_back() -> None:
    got: list[tuple[int, float]] = []
    rt = _stack(VirtualClock(), egress=lambda ch, t, seq, d: got.append((t, float(d[0]))))
    drv = SimDriver(rt)
    drv.start()
    try:
        drv.on_clock(10_000 * MS)                  # sim time starts at 10 s: logical 0
        assert drv.push("in", drv.now(), torch.ones(1))
        for k in range(1, 4):
            drv.on_clock(10_000 * MS + k * 100 * MS)
        drv.on_clock(10_000 * MS + 50 * MS)        # a bag played in a loop starts over
        drv.on_clock(10_000 * MS + 150 * MS)
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert drv.jumps_back == 1 and drv.now() == 400 * MS
        assert drv.stamp(0) == 10_000 * MS - 250 * MS     # re-based so logical time went on
        drv.call(lambda t: degrade_fallback_tasks(rt, t))
    finally:
        drv.stop()
    assert [t for t, _ in got[:3]] == [100 * MS, 200 * MS, 300 * MS] and got[0][1] == 2.0
    assert drv.error is None and collect(rt)["tasks"]["plan"]["mode"] == "fallback"


@pytest.mark.wallclock
def test_wall_driver_runs_the_threaded_runtime_and_stops() -> None:
    got: list[int] = []
    rt = _stack(WallClock(epoch_ns=0), workers=1, threaded=True, realtime=False,
                egress=lambda ch, t, seq, d: got.append(t))
    drv = WallDriver(rt, step_ns=20 * MS)
    t0 = time.monotonic_ns()
    drv.start(lambda: 5_000_000_000)
    started = time.monotonic_ns() - t0
    assert drv.push("in", drv.now(), torch.ones(1))
    end = time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < end:   # about 0.3 s; as long as a loaded machine takes
        time.sleep(0.01)
    ran = time.monotonic_ns() - t0
    assert drv.stop() == [] and drv.error is None and not drv.alive
    # At r + D, on the logical grid, one each period from the first job that read the push (released at
    # 0 or 100 ms), never ahead of the wall clock.
    assert len(got) >= 2 and got[0] in (100 * MS, 200 * MS) and got[-1] <= ran
    assert got == [got[0] + k * 100 * MS for k in range(len(got))]
    assert 5_000_000_000 - started <= drv.stamp(0) <= 5_000_000_000   # logical 0 = the ROS time at start


# ---- environment, CLI, packaging ------------------------------------------------------------------
def test_environment_defaults_to_localhost_and_a_large_shm_profile_but_keeps_what_is_set(tmp_path) -> None:
    e: dict[str, str] = {}
    done = env.prepare_environment(e)
    assert e["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST" and e["RMW_IMPLEMENTATION"] == "rmw_fastrtps_cpp"
    assert str(env.SHM_SEGMENT_BYTES) in Path(e["FASTDDS_DEFAULT_PROFILES_FILE"]).read_text() and done
    mine = {"ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET", "FASTDDS_DEFAULT_PROFILES_FILE": str(tmp_path / "x.xml")}
    assert env.prepare_environment(mine) == {"RMW_IMPLEMENTATION": "rmw_fastrtps_cpp"}
    assert mine["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET"


@pytest.mark.parametrize("argv", [["run"], ["play", "some.bag"]])
def test_run_and_play_without_rclpy_exit_2_with_the_fix(argv, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "rclpy", None)       # as if the ros extra were not installed
    assert rclpy_missing() is not None
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "rclpy is not installed" in err and "pip install" in err and "Traceback" not in err


def _setup_kwargs() -> dict:
    import setuptools

    captured: dict = {}
    old = setuptools.setup
    setuptools.setup = lambda **kw: captured.update(kw)   # type: ignore[assignment]
    try:
        code = compile((ROOT / "setup.py").read_text(), "setup.py", "exec")
        exec(code, {"__name__": "setup", "__file__": "setup.py"})   # with setup() captured
    finally:
        setuptools.setup = old
    return captured


def test_setup_installs_executables_launch_files_and_parameter_files_the_ament_way(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    kw = _setup_kwargs()
    files = {dest: srcs for dest, srcs in kw["data_files"]}
    assert "rt-runtime = rt_runtime.cli:main" in kw["entry_points"]["console_scripts"]
    assert {Path(s).name for s in files["lib/rt_runtime"]} == {"runtime_node", "player"}
    for s in files["lib/rt_runtime"]:
        assert (ROOT / s).stat().st_mode & 0o111 and "rt_runtime.cli import main" in (ROOT / s).read_text()
    assert {"launch/runtime.launch.py", "launch/replay.launch.py"} <= set(files["share/rt_runtime/launch"])
    assert "config/ros_params.yaml" in files["share/rt_runtime/config"]
    assert files["share/ament_index/resource_index/packages"] == ["resource/rt_runtime"]
    xml = (ROOT / "package.xml").read_text()
    assert "<build_type>ament_python</build_type>" in xml
    for dep in ("rclpy", "sensor_msgs", "nav_msgs", "visualization_msgs", "diagnostic_msgs", "rosgraph_msgs"):
        assert f"<exec_depend>{dep}</exec_depend>" in xml


def _nodes(tree: ast.AST) -> list[dict]:
    out = []
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Node":
            out.append({k.arg: k.value for k in call.keywords})
    return out


@pytest.mark.parametrize("name, executables", [("runtime.launch.py", {"runtime_node"}),
                                               ("replay.launch.py", {"runtime_node", "player"})])
def test_launch_files_name_installed_executables_and_match_the_command_in_their_docstring(name, executables) -> None:
    tree = ast.parse((ROOT / "launch" / name).read_text())
    nodes = _nodes(tree)
    assert {ast.literal_eval(n["package"]) for n in nodes} == {"rt_runtime"}
    assert {ast.literal_eval(n["executable"]) for n in nodes} == executables
    assert any(isinstance(f, ast.FunctionDef) and f.name == "generate_launch_description" for f in tree.body)
    strings = {c.value for c in ast.walk(tree) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    assert "ros_params.yaml" in strings and (ROOT / "config" / "ros_params.yaml").is_file()
    doc = ast.get_docstring(tree) or ""
    commands = [line.strip().rstrip("&").strip() for line in doc.splitlines() if line.strip().startswith("rt-runtime ")]
    assert {c.split()[1] for c in commands} == {{"runtime_node": "run", "player": "play"}[e] for e in executables}
    parser = cli.build_parser()
    samples = {"BAG": "drive.mcap", "RATE": "0.5", "CONFIG": "stack.yaml"}
    declared = {ast.literal_eval(c.args[0]) for c in ast.walk(tree)
                if isinstance(c, ast.Call) and getattr(c.func, "id", None) == "DeclareLaunchArgument"}
    for command in commands:
        parser.parse_args([samples.get(w, w) for w in shlex.split(command)[1:]])   # a valid command line
    text = " ".join(commands)
    switches = {"use_sim_time", "speculate"}          # off by default: the docstring's prose gives their flag
    for arg in declared - switches:                    # each other launch argument is in the commands
        assert arg.upper() in text or f"--{arg.replace('_', '-')}" in text, (arg, text)
    for arg in declared & switches:
        assert f"--{arg.replace('_', '-')}" in " ".join(doc.split()), arg


def test_ros_params_file_sets_only_parameters_the_node_declares() -> None:
    doc = yaml.safe_load((ROOT / "config" / "ros_params.yaml").read_text())
    params = doc["rt_runtime"]["ros__parameters"]
    assert set(params) - {"use_sim_time"} <= set(PARAMS)
    for key, value in params.items():
        if key in PARAMS:
            assert type(value) is type(PARAMS[key]), key
