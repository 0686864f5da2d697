"""From a simulated world to ROS messages and a rosbag2 bag (the thin adapter around the pure core).

Every sensor frame draws its noise from its own generator, seeded by (seed, sensor, frame index):
the same seed gives the same bytes, and a longer run starts with the same frames as a shorter one.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..bag import (BagWriter, Objects, array_to_cloud, array_to_compressed, array_to_image, header, image_to_array,
                   msg_class, objects_to_msg, stamp_ns)
from ..bag.types import GROUND_TRUTH_OBJECTS, quaternion_from_matrix, quaternion_from_yaw, vector3
from . import camera, lidar, radar
from .renderers import Renderers
from .rig import Rig
from .scenarios import Scenario, build_scenario
from .world import DT, Trajectory, check_outcome, outcome, simulate

T0_NS = 1_700_000_000 * 1_000_000_000  # bag clock origin (a fixed, plausible epoch)
TOPICS: dict[str, str] = {
    "/sensing/camera/image_raw": "sensor_msgs/msg/Image",
    "/sensing/camera/camera_info": "sensor_msgs/msg/CameraInfo",
    "/sensing/lidar/points": "sensor_msgs/msg/PointCloud2",
    "/sensing/radar/points": "sensor_msgs/msg/PointCloud2",
    "/localization/odometry": "nav_msgs/msg/Odometry",
    "/tf": "tf2_msgs/msg/TFMessage",
    "/tf_static": "tf2_msgs/msg/TFMessage",
    "/ground_truth/objects": GROUND_TRUTH_OBJECTS,
    "/planning/route": "nav_msgs/msg/Path",
}
ROUTE_POINTS = 512  # the reference line, sampled evenly (the planner's route capacity)
ROUTE_RATE_HZ = 1.0
_CAMERA, _LIDAR, _RADAR = 1, 2, 3  # noise stream ids


def _ns(t: float) -> int:
    return T0_NS + int(round(t * 1e9))


def _frames(rate_hz: float, seconds: float) -> np.ndarray:
    step = int(round(1.0 / rate_hz / DT))
    return np.arange(0, int(round(seconds / DT)), step)


@dataclass
class _Scene:
    scenario: Scenario
    traj: Trajectory
    static_cls: np.ndarray
    static_ids: np.ndarray

    def boxes(self, k: int, reach: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Dynamic + nearby static boxes at sample k: boxes, velocities (M, 2), classes, ids."""
        tr, st = self.traj, self.scenario.static
        near = np.hypot(st[:, 0] - tr.x[k, 0], st[:, 1] - tr.y[k, 0]) < reach
        boxes = np.vstack([tr.boxes(k), st[near, :7]])
        vel = np.vstack([np.column_stack([tr.vx[k, 1:], tr.vy[k, 1:]]), np.zeros((int(near.sum()), 2))])
        return boxes, vel, np.concatenate([tr.classes[1:], self.static_cls[near]]), \
            np.concatenate([tr.ids[1:], self.static_ids[near]])


def camera_info(rig: Rig, t_ns: int) -> Any:
    """CameraInfo of the rig's camera (pinhole, no distortion)."""
    cam = rig.camera
    k = cam.k
    p = np.hstack([k, np.zeros((3, 1))])
    roi = msg_class("sensor_msgs/msg/RegionOfInterest")(x_offset=0, y_offset=0, height=0, width=0, do_rectify=False)
    return msg_class("sensor_msgs/msg/CameraInfo")(
        header=header(t_ns, cam.frame_id), height=cam.height, width=cam.width, distortion_model="plumb_bob",
        d=np.zeros(5), k=k.reshape(-1), r=np.eye(3).reshape(-1), p=p.reshape(-1), binning_x=0, binning_y=0, roi=roi)


def _transform(t_ns: int, parent: str, child: str, xyz: np.ndarray, q: Any) -> Any:
    tf = msg_class("geometry_msgs/msg/Transform")(translation=vector3(*xyz), rotation=q)
    return msg_class("geometry_msgs/msg/TransformStamped")(header=header(t_ns, parent), child_frame_id=child,
                                                           transform=tf)


def tf_static(rig: Rig, t_ns: int) -> Any:
    """base_link -> sensor frames (the rig's extrinsics) as a TFMessage."""
    items = [_transform(t_ns, "base_link", rig.camera.frame_id, rig.camera.mount.translation,
                        quaternion_from_matrix(rig.camera.rotation_optical))]
    for sensor in (rig.lidar, rig.radar):
        items.append(_transform(t_ns, "base_link", sensor.frame_id, sensor.mount.translation,
                                quaternion_from_matrix(sensor.mount.rotation)))
    return msg_class("tf2_msgs/msg/TFMessage")(transforms=items)


def odometry(traj: Trajectory, k: int, t_ns: int) -> Any:
    """Ego odometry at sample k: pose in map, twist in base_link."""
    cov_pose = np.diag([0.02**2, 0.02**2, 0.05**2, 0.002**2, 0.002**2, 0.003**2]).reshape(-1)
    cov_twist = np.diag([0.05**2, 0.05**2, 0.05**2, 0.01**2, 0.01**2, 0.01**2]).reshape(-1)
    g = "geometry_msgs/msg/"
    pose = msg_class(g + "Pose")(position=msg_class(g + "Point")(x=float(traj.x[k, 0]), y=float(traj.y[k, 0]), z=0.0),
                                 orientation=quaternion_from_yaw(float(traj.yaw[k, 0])))
    c, s = np.cos(traj.yaw[k, 0]), np.sin(traj.yaw[k, 0])
    vx, vy = traj.vx[k, 0], traj.vy[k, 0]
    twist = msg_class(g + "Twist")(linear=vector3(c * vx + s * vy, -s * vx + c * vy, 0.0),
                                   angular=vector3(0.0, 0.0, float(traj.yaw_rate[k, 0])))
    return msg_class("nav_msgs/msg/Odometry")(
        header=header(t_ns, "map"), child_frame_id="base_link",
        pose=msg_class(g + "PoseWithCovariance")(pose=pose, covariance=cov_pose),
        twist=msg_class(g + "TwistWithCovariance")(twist=twist, covariance=cov_twist))


def _frame(ctx: tuple[Scenario, Trajectory, Rig, int, _Scene], kind: int, k: int) -> np.ndarray:
    """The array of one heavy sensor frame (camera image, LiDAR sweep, radar detections)."""
    scenario, traj, rig, seed, scene = ctx
    ego = (float(traj.x[k, 0]), float(traj.y[k, 0]), float(traj.yaw[k, 0]))
    noise = np.random.default_rng([seed, kind, k])
    if kind == _CAMERA:
        boxes, _, cls, ids = scene.boxes(k, rig.camera.max_depth + 20)
        return camera.render(rig.camera, scenario.road, ego, float(traj.s[k, 0]), boxes, cls, ids, noise)
    if kind == _LIDAR:
        sweep = 1.0 / rig.lidar.rate_hz
        tc = traj.t[k] + np.arange(rig.lidar.columns) / rig.lidar.columns * sweep
        at = (np.interp(tc, traj.t, traj.x[:, 0]), np.interp(tc, traj.t, traj.y[:, 0]),
              np.interp(tc, traj.t, np.unwrap(traj.yaw[:, 0])))
        boxes, vel, cls, _ = scene.boxes(k, rig.lidar.max_range + 40)
        return lidar.scan(rig.lidar, scenario.road, at, float(traj.s[k, 0]), boxes, vel, cls, noise)
    boxes, vel, cls, _ = scene.boxes(k, rig.radar.max_range + 20)
    ev = (float(traj.vx[k, 0]), float(traj.vy[k, 0]), float(traj.yaw_rate[k, 0]))
    return radar.detect(rig.radar, ego, ev, boxes, vel, cls, noise)


_CTX: tuple[Scenario, Trajectory, Rig, int, _Scene] | None = None  # inherited by forked workers


def _worker(job: tuple[int, int]) -> np.ndarray:
    assert _CTX is not None
    return _frame(_CTX, *job)


def messages(scenario: Scenario, traj: Trajectory, rig: Rig, seed: int, seconds: float,
             progress: Callable[[float], None] | None = None, workers: int = 1) -> Iterator[tuple[int, str, Any]]:
    """(log time ns, topic, message) for every sensor frame stamped in [0, seconds), in log-time order.

    With `workers` > 1 the camera, LiDAR and radar frames are computed in forked processes; each
    frame depends only on (seed, sensor, frame index), so the messages are the same either way.
    """
    global _CTX
    st = scenario.static
    scene = _Scene(scenario, traj, st[:, 7].astype(np.uint8), 100_000 + np.arange(len(st), dtype=np.uint32))
    ctx = (scenario, traj, rig, seed, scene)
    events: list[tuple[int, str, int]] = [(_ns(0.0), "/tf_static", 0)]
    for k in _frames(rig.odom_rate_hz, seconds):
        t = _ns(k * DT + rig.odom_latency_s)
        events += [(t, "/localization/odometry", k), (t, "/tf", k)]
    for k in _frames(rig.camera.rate_hz, seconds):
        t = _ns(k * DT + rig.camera.latency_s)
        events += [(t, "/sensing/camera/image_raw", k), (t, "/sensing/camera/camera_info", k)]
    for k in _frames(rig.radar.rate_hz, seconds):
        events.append((_ns(k * DT + rig.radar.latency_s), "/sensing/radar/points", k))
    for k in _frames(rig.lidar.rate_hz, seconds):
        events.append((_ns(k * DT + 1.0 / rig.lidar.rate_hz + rig.lidar.latency_s), "/sensing/lidar/points", k))
    for k in _frames(rig.gt_rate_hz, seconds):
        events.append((_ns(k * DT), "/ground_truth/objects", k))
    for k in _frames(ROUTE_RATE_HZ, seconds):
        events.append((_ns(k * DT), "/planning/route", k))
    events.sort()
    heavy = {"/sensing/camera/image_raw": _CAMERA, "/sensing/lidar/points": _LIDAR, "/sensing/radar/points": _RADAR}
    jobs = [(heavy[topic], k) for _, topic, k in events if topic in heavy]
    pool = None
    if workers > 1:
        _CTX = ctx   # inherited by the forked renderers (renderers.py: why not multiprocessing.Pool)
        pool = Renderers(_worker, workers)
        frames: Iterator[np.ndarray] = pool.frames(jobs)
    else:
        frames = (_frame(ctx, kind, k) for kind, k in jobs)
    try:
        for log_ns, topic, k in events:
            yield log_ns, topic, _message(topic, k, _ns(k * DT), traj, rig, frames if topic in heavy else None,
                                          scenario.road)
            if progress is not None:
                progress(k * DT)
    finally:
        if pool is not None:
            pool.close()
            _CTX = None


def route(road: Any, stamp: int) -> Any:
    """The road's reference line as a nav_msgs/Path in the map frame (what the planner follows)."""
    s = np.linspace(0.0, road.length, ROUTE_POINTS)
    x, y, h = road.pose(s)
    PoseStamped, Pose = msg_class("geometry_msgs/msg/PoseStamped"), msg_class("geometry_msgs/msg/Pose")
    poses = [PoseStamped(header=header(stamp, "map"), pose=Pose(position=msg_class("geometry_msgs/msg/Point")(
        x=float(xi), y=float(yi), z=0.0), orientation=quaternion_from_yaw(float(hi)))) for xi, yi, hi in zip(x, y, h)]
    return msg_class("nav_msgs/msg/Path")(header=header(stamp, "map"), poses=poses)


def _message(topic: str, k: int, stamp: int, traj: Trajectory, rig: Rig, frames: Iterator[np.ndarray] | None,
             road: Any = None) -> Any:
    if frames is not None:
        arr = next(frames)
        if topic == "/sensing/camera/image_raw":
            return array_to_image(arr, "rgb8", rig.camera.frame_id, stamp)
        if topic == "/sensing/lidar/points":
            return array_to_cloud(arr, rig.lidar.frame_id, stamp, is_dense=False)
        return array_to_cloud(arr, rig.radar.frame_id, stamp, is_dense=True)
    if topic == "/tf_static":
        return tf_static(rig, stamp)
    if topic == "/localization/odometry":
        return odometry(traj, k, stamp)
    if topic == "/tf":
        q = quaternion_from_yaw(float(traj.yaw[k, 0]))
        xyz = np.array([traj.x[k, 0], traj.y[k, 0], 0.0])
        return msg_class("tf2_msgs/msg/TFMessage")(transforms=[_transform(stamp, "map", "base_link", xyz, q)])
    if topic == "/sensing/camera/camera_info":
        return camera_info(rig, stamp)
    if topic == "/planning/route":
        return route(road, stamp)
    vel = np.column_stack([traj.vx[k, 1:], traj.vy[k, 1:], np.zeros(len(traj.ids) - 1)])
    return objects_to_msg(Objects(stamp, "map", traj.ids[1:], traj.classes[1:], traj.boxes(k), vel))


@dataclass(frozen=True)
class Summary:
    """What `record` wrote."""

    path: Path
    scenario: str
    seconds: float
    messages: int
    bytes: int
    wall_s: float
    outcome: dict[str, float]
    checks: dict[str, tuple[float, float, bool]]


CAMERA_FORMATS = ("raw", "jpeg", "png")
COMPRESSED_CAMERA = "/sensing/camera/image_raw/compressed"   # image_transport's name for the compressed twin


def _compressed(msg: Any, fmt: str) -> Any:
    """A camera Image as the CompressedImage a vehicle's image_transport would record (JPEG quality 90)."""
    return array_to_compressed(image_to_array(msg), msg.header.frame_id, stamp_ns(msg.header.stamp), fmt)


def record(out: str | Path, scenario: str = "highway_cut_in", seconds: float = 20.0, seed: int = 0,
           format: str = "mcap", rig: Rig | None = None, progress: Callable[[float], None] | None = None,
           workers: int = 1, camera_format: str = "raw") -> Summary:
    """Simulate `scenario` for `seconds` and write every sensor stream to a new bag at `out`.

    ``camera_format``: ``raw`` records ``sensor_msgs/Image``; ``jpeg`` or ``png`` records the frames as a
    ``CompressedImage`` on ``/sensing/camera/image_raw/compressed`` instead (no raw twin)."""
    if camera_format not in CAMERA_FORMATS:
        raise ValueError(f"camera_format: expected one of {', '.join(CAMERA_FORMATS)}, found {camera_format!r}")
    start = time.perf_counter()
    rig = rig or Rig()
    sc = build_scenario(scenario, seed)
    traj = simulate(sc, seconds)
    topics = dict(TOPICS)
    if camera_format != "raw":
        del topics["/sensing/camera/image_raw"]
        topics[COMPRESSED_CAMERA] = "sensor_msgs/msg/CompressedImage"
    with BagWriter(out, format) as w:
        for topic, msgtype in topics.items():
            w.add_topic(topic, msgtype)
        res = outcome(traj, seconds)
        w.set_metadata("rt_runtime.sim", json.dumps({
            "scenario": sc.name, "description": sc.description, "seed": seed, "seconds": seconds,
            "start_ns": T0_NS, "map_frame": "map", "rig": rig.describe(), "expected_outcome": sc.expected,
            "outcome": res, "topics": topics}, sort_keys=True))
        n = 0
        for log_ns, topic, msg in messages(sc, traj, rig, seed, seconds, progress, workers):
            if camera_format != "raw" and topic == "/sensing/camera/image_raw":
                topic, msg = COMPRESSED_CAMERA, _compressed(msg, camera_format)
            w.write(topic, log_ns, msg)
            n += 1
    return Summary(Path(out), sc.name, seconds, n, w.bytes_written, time.perf_counter() - start, res,
                   check_outcome(traj, seconds))
