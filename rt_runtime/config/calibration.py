"""The bag's calibration into a stack's sensor parameters, where the configuration leaves them out.

The reference stack's tasks take their sensors' parameters as graph arguments: the LiDAR graph a
``mount`` (x, y, z, yaw in base_link), the radar graph a ``mount`` (x, y, yaw), the fusion graph a
``camera`` (intrinsics with the lens distortion, and mount) and the tracker the radar's position, the
camera graph the size of the frames it letterboxes (``source_width``, ``source_height``: the frames the
bag really carries). ``with_bag_calibration`` fills each one the configuration does not give from the bag
(``bag.calibration``): a value in the configuration always wins (an override; the fusion's camera by
group: intrinsics, mount), one in neither is one note naming the task, the argument and what the bag
lacks, and the builder's default is used (for a camera without CameraInfo: ``default_intrinsics`` of its
frame size). Tasks are found by the graph they run, their sensors through their input channels and the
ingress topic feeding them.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ..bag.calibration import BagCalibration, camera_pose, default_intrinsics

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


INTRINSICS = ("fx", "fy", "cx", "cy", "width", "height", "distortion_model", "d")
MOUNT = ("x", "y", "z", "roll", "pitch", "yaw")


def _bag_intrinsics(cal: BagCalibration, topic: str, notes: list[str]) -> dict[str, Any] | None:
    """The camera's intrinsics (the fusion's ``camera`` keys in ``INTRINSICS``) from the bag: its CameraInfo,
    scaled to the frames the topic really carries where those differ; else the stated default for their size
    (``default_intrinsics``, with a note); None where the bag gives neither."""
    intr, size = cal.camera_for(topic), cal.image_sizes.get(topic)
    if intr is None:
        if size is None:
            return None
        out = default_intrinsics(*size)
        notes.append(f"camera {topic}: no CameraInfo in the bag: the default intrinsics for its {size[0]}x{size[1]} "
                     f"frames are used (fx=fy={out['fx']:g}, the principal point at the centre, no distortion; "
                     "give the fusion's args.camera for this camera's)")
        return out
    out = {"fx": intr.fx, "fy": intr.fy, "cx": intr.cx, "cy": intr.cy, "width": intr.width, "height": intr.height}
    if size is not None and size != (intr.width, intr.height):   # e.g. the images binned or resized after calibration
        sx, sy = size[0] / intr.width, size[1] / intr.height
        out = {"fx": intr.fx * sx, "fy": intr.fy * sy, "cx": (intr.cx + 0.5) * sx - 0.5,
               "cy": (intr.cy + 0.5) * sy - 0.5, "width": size[0], "height": size[1]}
        notes.append(f"camera {topic}: {intr.topic} is for {intr.width}x{intr.height} frames, the topic carries "
                     f"{size[0]}x{size[1]}: its intrinsics scaled to them")
    if intr.distorted:
        out.update(distortion_model=intr.distortion_model, d=list(intr.d))
    return out


def _camera(cfg: Any, cal: BagCalibration, given: Mapping[str, Any], notes: list[str]
            ) -> tuple[dict[str, Any] | None, str | None, list[str]]:
    """The fusion's ``camera`` argument: what the configuration gives, the rest from the bag, by group (the
    intrinsics with their distortion, and the mount: a group the configuration gives at all is its own);
    with the topic and which groups came from the bag."""
    cam = _task(cfg, CAMERA_GRAPH)
    topic = _topic(cfg, cam[1], "image") if cam else None
    if topic is None:
        return None, None, []
    out, taken = dict(given), []
    if not set(INTRINSICS) & set(given):
        intr = _bag_intrinsics(cal, topic, notes)
        if intr is not None:
            out.update(intr)
            taken.append("intrinsics")
    if not set(MOUNT) & set(given):
        info = cal.camera_for(topic)
        pose = (cal.poses.get(info.frame_id) if info is not None else None) or cal.pose_of(topic)
        if pose is not None:
            out.update(camera_pose(pose))
            taken.append("mount")
        else:
            notes.append(f"camera {topic}: neither the configuration nor the bag's /tf_static gives the mount of "
                         f"frame {cal.frames.get(topic, '?')!r}: the camera model's default mount is used")
    size = cal.image_sizes.get(topic)
    if size is not None and "width" in out and (out.get("width"), out.get("height")) != size:
        notes.append(f"camera {topic}: the fusion's args.camera is for {out.get('width')}x{out.get('height')} frames, "
                     f"the topic carries {size[0]}x{size[1]}: objects are projected into the wrong frame")
    return (out if out else None), topic, taken


def _camera_source(cfg: Any, name: str, e: Mapping[str, Any], cal: BagCalibration, notes: list[str]
                   ) -> dict[str, int]:
    """The camera graph's ``source_width`` / ``source_height`` from the frames the bag carries (else its
    CameraInfo), where the configuration leaves them out; a note where the configuration's are not the bag's."""
    given = e.get("args") or {}
    topic = _topic(cfg, e, "image")
    if topic is None:
        return {}
    intr = cal.camera_for(topic)
    size = cal.image_sizes.get(topic) or ((intr.width, intr.height) if intr is not None else None)
    if size is None:
        return {}
    if "source_width" in given or "source_height" in given:
        mine = (given.get("source_width"), given.get("source_height"))
        if mine != size:
            notes.append(f"task '{name}': args source_width x source_height {mine[0]}x{mine[1]}, but {topic} carries "
                         f"{size[0]}x{size[1]} frames: every job fails its input contract")
        return {}
    return {"source_width": size[0], "source_height": size[1]}


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
        if graph == CAMERA_GRAPH:
            source = _camera_source(cfg, name, e, cal, notes)
            if source:
                args(name).update(source)
        if graph == FUSION_GRAPH:
            given = e.get("args") or {}
            camera, topic, taken = _camera(cfg, cal, given.get("camera") or {}, notes)
            if taken:
                args(name)["camera"] = camera
            if "intrinsics" in taken:
                dist = (f", {camera['distortion_model']} distortion {camera['d']}" if camera.get("d") else
                        ", no distortion")
                notes.append(f"task '{name}': camera intrinsics fx={camera['fx']:g} fy={camera['fy']:g} "
                             f"cx={camera['cx']:g} cy={camera['cy']:g} {camera['width']}x{camera['height']}{dist} from "
                             f"the bag")
            elif topic is not None and camera is None:
                notes.append(f"task '{name}': no camera intrinsics in the configuration (args.camera) nor a "
                             f"CameraInfo or frame in the bag for {topic}: the camera model's defaults are used")
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
