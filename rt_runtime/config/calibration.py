"""The bag's calibration into a stack's sensor parameters, where the configuration leaves them out.

The reference stack's tasks take their sensors' parameters as graph arguments: the LiDAR graph a
``mount`` (x, y, z, yaw in base_link), the radar graph a ``mount`` (x, y, yaw), the fusion graph a
``camera`` (intrinsics and mount) and the tracker the radar's position, the camera graph the
frame size. ``with_bag_calibration`` fills each one the configuration does not give from the bag
(``bag.calibration``): a value in the configuration always wins (an override), one in neither
is one note naming the task, the argument and what the bag lacks, and the builder's default is
used. Tasks are found by the graph they run, their sensors through their input channels and the
ingress topic feeding them.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ..bag.calibration import BagCalibration, camera_pose

LIDAR_GRAPH = "pipelines.lidar:build_lidar_graph"
RADAR_GRAPH = "pipelines.radar:build_radar_graph"
CAMERA_GRAPH = "pipelines.camera:build_camera_graph"
FUSION_GRAPH = "pipelines.stack:build_fusion_tracking"


def _topic(cfg: Any, entry: Mapping[str, Any], graph_input: str) -> str | None:
    """The ingress topic feeding a task's graph input (through its channel), if any."""
    ch = (entry.get("inputs") or {}).get(graph_input)
    return next((r.topic for r in cfg.ingress if ch in r.channels.values()), None)


def _task(cfg: Any, graph: str) -> tuple[str, Mapping[str, Any]] | None:
    return next(((n, e) for n, e in cfg.entries.items() if e.get("graph") == graph), None)


def _camera(cfg: Any, cal: BagCalibration, notes: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    """The fusion's ``camera`` argument from the bag (intrinsics, and the mount when /tf has it)."""
    cam = _task(cfg, CAMERA_GRAPH)
    topic = _topic(cfg, cam[1], "image") if cam else None
    if topic is None:
        return None, None
    intr = cal.camera_for(topic)
    if intr is None:
        return None, topic
    out: dict[str, Any] = {"fx": intr.fx, "fy": intr.fy, "cx": intr.cx, "cy": intr.cy, "width": intr.width,
                           "height": intr.height}
    pose = cal.poses.get(intr.frame_id) or cal.pose_of(topic)
    if pose is not None:
        out.update(camera_pose(pose))
    else:
        notes.append(f"camera {topic}: intrinsics from {intr.topic}, but neither the configuration nor the bag's "
                     f"/tf_static gives the mount of frame {intr.frame_id!r}: the camera model's default mount is used")
    if intr.distorted:
        notes.append(f"camera {topic}: {intr.topic} has {intr.distortion_model} distortion {list(intr.d)}; the stack "
                     "projects with the pinhole model (rectified images assumed)")
    return out, topic


def with_bag_calibration(cfg: Any, cal: BagCalibration) -> tuple[Any, list[str]]:
    """A copy of a ``StackConfig`` whose sensor arguments the configuration leaves out come from ``cal``,
    and notes (one line each) on what was taken from the bag and what neither gives."""
    entries = {n: dict(e) for n, e in cfg.entries.items()}
    notes: list[str] = []

    def args(name: str) -> dict[str, Any]:
        entries[name]["args"] = dict(entries[name].get("args") or {})
        return entries[name]["args"]

    for name, e in cfg.entries.items():
        graph = e.get("graph")
        for graph_ref, graph_input, what in ((LIDAR_GRAPH, "points", "LiDAR"), (RADAR_GRAPH, "radar", "radar")):
            if graph != graph_ref or "mount" in (e.get("args") or {}):
                continue
            topic = _topic(cfg, e, graph_input)
            pose = cal.pose_of(topic) if topic else None
            if pose is None:
                notes.append(f"task '{name}': no {what} mount in the configuration (args.mount) nor in the bag "
                             f"(/tf_static has no pose in base_link for {topic}'s frame "
                             f"{cal.frames.get(topic or '', '?')!r}): points are taken as in base_link")
                continue
            mount = pose.mount4()
            args(name)["mount"] = mount if what == "LiDAR" else [mount[0], mount[1], mount[3]]
            notes.append(f"task '{name}': {what} mount {args(name)['mount']} from the bag's "
                         f"{cal.sources.get(cal.frames[topic], '/tf_static')} (frame {cal.frames[topic]!r})")
        if graph == CAMERA_GRAPH and not {"width", "height"} & set(e.get("args") or {}):
            topic = _topic(cfg, e, "image")
            intr = cal.camera_for(topic) if topic else None
            if intr is not None:
                args(name).update(source_width=intr.width, source_height=intr.height)
        if graph == FUSION_GRAPH:
            given = e.get("args") or {}
            if "camera" not in given:
                camera, topic = _camera(cfg, cal, notes)
                if camera is not None:
                    args(name)["camera"] = camera
                    notes.append(f"task '{name}': camera intrinsics fx={camera['fx']:g} fy={camera['fy']:g} "
                                 f"cx={camera['cx']:g} cy={camera['cy']:g} {camera['width']}x{camera['height']} from "
                                 f"the bag's CameraInfo")
                elif topic is not None:
                    notes.append(f"task '{name}': no camera intrinsics in the configuration (args.camera) nor a "
                                 f"CameraInfo in the bag for {topic}: the camera model's defaults are used")
            radar = _task(cfg, RADAR_GRAPH)
            rtopic = _topic(cfg, radar[1], "radar") if radar else None
            pose = cal.pose_of(rtopic) if rtopic else None
            if pose is not None and "radar_xy" not in (given.get("tracker") or {}):
                tracker = dict(args(name).get("tracker") or {})
                tracker["radar_xy"] = [round(pose.translation[0], 6), round(pose.translation[1], 6)]
                args(name)["tracker"] = tracker
    return dataclasses.replace(cfg, entries=entries), notes


def calibrate_from_bag(cfg: Any, bag: str) -> tuple[Any, list[str]]:
    """``with_bag_calibration`` with the calibration read from the bag at ``bag`` (unchanged, no notes, if it
    does not open: the replay reports that itself)."""
    from ..bag import BagError, open_bag
    from ..bag.calibration import read_calibration

    try:
        reader = open_bag(bag)
    except (BagError, OSError):
        return cfg, []
    try:
        return with_bag_calibration(cfg, read_calibration(reader, cfg.topics_in()))
    finally:
        reader.close()
