"""A runnable stack configuration for what a bag holds (``rt-runtime inspect --config-out``).

It starts from the reference stack (``config/stack.yaml``: its graphs, budgets, deadlines, chains)
and fits it to the bag's sensors (``bag.survey``):

- each ingress route reads the bag's own topic, with the codec its message type needs (``image_rgb``
  for ``Image``, ``compressed_image`` for ``CompressedImage``; ``lidar_points``, or with ``deskew``
  ``lidar_points_deskewed`` when the bag has odometry and the cloud per-point times);
- a sensor the bag lacks is a configuration, not a refusal: its task goes, and the fusion reads
  its objects as an ``optional:`` input (the empty default); without a LiDAR the fusion is released
  by the camera's (else the radar's) objects;
- without odometry the stack is perception only: detection and tracking in the vehicle frame
  (``frame: base_link``; the tracker's time is the sweeps' stamps, so tracks carry velocities
  relative to the vehicle), no prediction, no planning, no safety supervisor;
- the LiDAR boxes' invariants come from the detector's window and the bag's sensor mount
  (``pipelines.lidar.box_bounds``), the tracker takes the boxes at their sweep's stamp plus the mean
  time of the bag's own points (``sweep_offset``); a radar's objects are not bounded in position
  (the reference's bound is its simulated radar's range);
- with odometry but no route the planner keeps its lane: each plan's reference line runs straight
  ahead along the ego's heading (``pipelines.planning``'s no-route fallback), one lane of 3.5 m at
  ``LANE_KEEPING_SPEED`` m/s;
- sensor mounts and camera intrinsics are left out, so ``replay`` takes them from the bag's
  ``/tf_static`` and ``CameraInfo`` (``config.calibration``; a value written in the file overrides);
  a camera without a CameraInfo gets the stated default intrinsics for its frame size, written
  (``bag.calibration.default_intrinsics``);
- the camera graph letterboxes the frames the bag carries (``source_width``, ``source_height``: any
  size and encoding the ingress decodes), and its boxes' invariants are that frame's.

``stack_for_bag`` returns the document and the reasons, one line each; ``render`` writes the YAML
with those reasons as comments.
"""
from __future__ import annotations

import copy
import math
from typing import Any

import yaml

from ..bag.calibration import default_intrinsics
from ..bag.survey import COMPRESSED, BagSurvey
from .calibration import CAMERA_GRAPH

LANE_KEEPING_SPEED = 13.9   # m/s (50 km/h): the planner's target speed with no route (no road known)
LANE_KEEPING_ROAD = {"lane_width": 3.5, "centers": [0.0], "directions": [1], "speed_limit": LANE_KEEPING_SPEED}
SENSOR_TASKS = {"lidar": "lidar_objects", "radar": "radar_objects", "camera": "camera_objects"}
# the fusion's inputs that each sensor's task feeds: optional when the sensor is absent
FUSION_INPUTS = {"lidar": ("boxes", "box_count"), "radar": ("radar_objects", "radar_object_count"),
                 "camera": ("camera_boxes", "camera_box_count")}
FUSION, PLANNING_TASKS = "fusion_tracking", ("prediction", "planning")
CHANNELS = {"lidar": "lidar/points", "radar": "radar/points", "camera": "camera/image", "odometry": "ego/odom"}


class NoSensorsError(ValueError):
    """A bag with no LiDAR, camera or radar topic: nothing for the stack to perceive."""


def _ingress(s: BagSurvey, picked: dict[str, Any], notes: list[str], deskew: bool) -> list[dict[str, Any]]:
    out = []
    lidar, odom = picked.get("lidar"), picked.get("odometry")
    if lidar is not None:
        timed = "no per-point time" not in lidar.detail
        codec = "lidar_points_deskewed" if timed and odom is not None and deskew else "lidar_points"
        alt = " (lidar_points_deskewed would compensate the ego's motion with the odometry: docs/SENSORS.md)" \
            if timed and odom is not None and not deskew else ""
        notes.append(f"LiDAR {lidar.topic}: {lidar.detail}; codec {codec}{alt}")
        out.append({"topic": lidar.topic, "codec": codec, "channel": CHANNELS["lidar"]})
    if picked.get("radar") is not None:
        out.append({"topic": picked["radar"].topic, "codec": "radar_points", "channel": CHANNELS["radar"]})
    cam = picked.get("camera")
    if cam is not None:
        codec = "compressed_image" if cam.msgtype == COMPRESSED else "image_rgb"
        notes.append(f"camera {cam.topic}: {cam.detail}; codec {codec}")
        out.append({"topic": cam.topic, "codec": codec, "channel": CHANNELS["camera"]})
    if odom is not None:
        out.append({"topic": odom.topic, "codec": "odometry", "channel": CHANNELS["odometry"]})
    if picked.get("route") is not None:
        out.append({"topic": picked["route"].topic, "codec": "route",
                    "channels": {"route": "planning/route", "count": "planning/route_count"}})
    return out


def _checks(e: dict[str, Any], output: str) -> dict[str, Any] | None:
    """The declared invariants of one of a task's outputs (None: none declared)."""
    red = e.get("redundancy")
    checks = red.get("checks") if isinstance(red, dict) else None
    return checks.get(output) if isinstance(checks, dict) else None


def _lidar_invariants(e: dict[str, Any], args: dict[str, Any], s: BagSurvey, lidar: Any, notes: list[str]) -> None:
    """The LiDAR boxes' bounds from the detector's args and this bag's sensor mount (its graph module's
    ``box_bounds``), never the reference's numbers, which describe another sensor on another vehicle."""
    import importlib

    boxes = _checks(e, "boxes")
    module = str(e.get("graph", "")).partition(":")[0]
    try:
        bounds_of = getattr(importlib.import_module(module), "box_bounds", None) if module else None
    except ImportError:
        bounds_of = None
    if boxes is None or bounds_of is None:
        return
    pose = s.calibration.pose_of(lidar.topic)
    mount = pose.mount4() if pose is not None else [0.0, 0.0, 0.0, 0.0]
    bounds = bounds_of(**{**args, "mount": mount})
    boxes["range"] = {col: [lo, hi] for col, (lo, hi) in bounds.items()}
    seen = f"returns up to {lidar.max_range_m:.1f} m in the sampled sweeps; " if lidar.max_range_m else ""
    notes.append(f"LiDAR boxes' invariants from the detector's window and this bag's mount {mount} "
                 f"({seen}x in [{bounds[0][0]:g}, {bounds[0][1]:g}], y in [{bounds[1][0]:g}, {bounds[1][1]:g}] m "
                 f"in base_link: {module}.box_bounds)")


def _radar_invariants(e: dict[str, Any], radar: Any, notes: list[str]) -> None:
    """Radar objects' positions unbounded: the reference's bound is its simulated radar's range, not this one's."""
    objects = _checks(e, "radar_objects")
    if objects is None or not isinstance(objects.get("range"), dict):
        return
    dropped = [c for c in (0, 1) if objects["range"].pop(c, None) is not None]
    if dropped:
        notes.append(f"radar {radar.topic}: its objects' x, y are not bounded (the reference bounds its simulated "
                     f"radar's 150 m range; add this radar's from its datasheet to radar_objects' checks)")


def _camera_frame(e: dict[str, Any], args: dict[str, Any], s: BagSurvey, cam: Any, notes: list[str]) -> None:
    """The camera graph at the frames the bag carries (letterboxed: ``source_width``, ``source_height``), and its
    boxes' invariants from that frame (``pipelines.camera.box_bounds``), never the reference camera's."""
    size = s.calibration.image_sizes.get(cam.topic)
    if e.get("graph") != CAMERA_GRAPH:
        return
    if size is None:
        notes.append(f"camera {cam.topic}: its first frame does not decode, its size is unknown: the camera graph "
                     f"expects the reference's frames (set camera_objects' args source_width, source_height)")
        return
    from pipelines.camera import CameraParams, box_bounds

    args.update(source_width=size[0], source_height=size[1])
    net = CameraParams(**args)
    bounds = box_bounds(**args)
    boxes = _checks(e, "camera_boxes")
    if boxes is not None and isinstance(boxes.get("range"), dict):
        boxes["range"].update({col: list(bounds[col]) for col in range(4)})   # u1, v1, u2, v2: the frame
    how = "as they are" if size == (net.width, net.height) else f"letterboxed into the detector's {net.width}x{net.height}"
    notes.append(f"camera {cam.topic}: {size[0]}x{size[1]} frames, {how} (camera_objects' args source_width, "
                 f"source_height); its boxes' invariants: u in [0, {size[0]}], v in [0, {size[1]}] px, the frame the "
                 f"detector clips to (pipelines.camera.box_bounds)")


def _fusion_camera(args: dict[str, Any], s: BagSurvey, cam: Any, notes: list[str]) -> None:
    """The fusion's camera intrinsics: the bag's CameraInfo (read by replay: not written), else the stated default
    for the camera's frame size (written, and said)."""
    intr, size = s.calibration.camera_for(cam.topic), s.calibration.image_sizes.get(cam.topic)
    if intr is not None:
        dist = f", {intr.distortion_model} distortion {list(intr.d)}" if intr.distorted else ", no distortion"
        notes.append(f"fusion camera intrinsics: from {intr.topic} at replay (fx={intr.fx:g} fy={intr.fy:g} "
                     f"cx={intr.cx:g} cy={intr.cy:g} {intr.width}x{intr.height}{dist})")
    elif size is not None:
        args["camera"] = default_intrinsics(*size)
        notes.append(f"fusion camera intrinsics: no CameraInfo for {cam.topic}; the stated default for {size[0]}x"
                     f"{size[1]}: fx=fy={args['camera']['fx']:g} (0.625 x the width, a 77 degree horizontal field "
                     f"of view), the principal point at the centre, no distortion (put this camera's calibration "
                     f"in fusion_tracking's args.camera)")


def _tracker_times(e: dict[str, Any], args: dict[str, Any], s: BagSurvey, picked: dict[str, Any],
                   notes: list[str], deskewed: bool) -> None:
    """When the LiDAR saw each box, from the bag's own points (the reference's numbers are its simulated
    sensor's): the mean point time after the stamp, the turn, the azimuth fired at that time (deskewed:
    every point at the sweep's end, about the latest odometry's stamp they are compensated to); without
    odometry the tracks' time is the sweeps', not the odometry's."""
    lidar = picked.get("lidar")
    if lidar is not None and deskewed:
        tracker = args.get("tracker") or {}
        args["tracker"] = tracker
        end = (lidar.mean_point_time_s or 0.0) + abs(lidar.spin_s or 0.0) / 2
        tracker.update(sweep_offset=round(end, 4), sweep_spin=0.0, sweep_mid=0.0)
        notes.append(f"tracker: the deskewed boxes are taken {end * 1e3:g} ms after their sweep's stamp (its end: "
                     f"the latest odometry's stamp, which the codec compensates the points to)")
    elif lidar is not None:
        tracker = args.get("tracker") or {}
        args["tracker"] = tracker
        offset, spin = lidar.mean_point_time_s, lidar.spin_s
        tracker["sweep_offset"] = round(offset, 4) if offset is not None else 0.0
        tracker["sweep_spin"] = round(spin, 4) if spin is not None else 0.0
        pose = s.calibration.pose_of(lidar.topic)
        mid = (lidar.mid_azimuth or 0.0) + (pose.rpy()[2] if pose is not None else 0.0)
        tracker["sweep_mid"] = round((mid + math.pi) % (2 * math.pi) - math.pi, 4) if spin is not None else 0.0
        how = (f"the mean time of its points; one turn in {abs(spin) * 1e3:.0f} ms "
               f"{'counter-' if spin > 0 else ''}clockwise, azimuth {tracker['sweep_mid']:g} rad fired then"
               if spin is not None else "the mean time of its points; no turn in them" if offset is not None
               else "no per-point times: the stamp")
        notes.append(f"tracker: the LiDAR boxes are taken {tracker['sweep_offset'] * 1e3:g} ms after their sweep's "
                     f"stamp ({how})")
    if "odometry" not in picked:
        last_t = _checks(e, "last_t")
        if last_t is not None and "equals" in last_t:
            e["redundancy"]["checks"].pop("last_t")
            notes.append("no odometry: the tracks' time is their sweeps' stamps (last_t is not the odometry's)")


def _pick(s: BagSurvey, notes: list[str]) -> dict[str, Any]:
    """One topic per role: the one with the most messages; a camera's raw Image before its compressed twin."""
    picked: dict[str, Any] = {}
    for role in ("lidar", "radar", "camera", "odometry", "route"):
        cands = s.by_role(role)
        if role == "camera":
            cands.sort(key=lambda t: (t.msgtype == COMPRESSED, -t.count, t.topic))
        if cands:
            picked[role] = cands[0]
            if len(cands) > 1:
                notes.append(f"{role}: {cands[0].topic} used; also in the bag: {', '.join(t.topic for t in cands[1:])}")
        else:
            notes.append(f"no {role} topic in the bag")
    return picked


def stack_for_bag(s: BagSurvey, reference: dict[str, Any], deskew: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The reference stack document fitted to the bag (see the module's doc), and why, one line each;
    ``deskew``: the LiDAR motion-compensated when the bag has odometry and per-point times."""
    notes: list[str] = []
    picked = _pick(s, notes)
    if not any(r in picked for r in SENSOR_TASKS):
        raise NoSensorsError(f"{s.path}: no LiDAR (PointCloud2 with x, y, z), camera (Image, CompressedImage) or "
                             f"radar (PointCloud2 with doppler and rcs) topic; the bag has "
                             f"{sorted(s.topics) or 'no topics'}: nothing for the stack to perceive")
    doc = copy.deepcopy(reference)
    doc["name"] = f"{reference.get('name', 'stack')}_for_{s.path.rstrip('/').rsplit('/', 1)[-1]}"
    doc["ingress"] = _ingress(s, picked, notes, deskew)
    gone = {task for role, task in SENSOR_TASKS.items() if role not in picked}
    if "odometry" not in picked:
        gone |= set(PLANNING_TASKS)
        doc["frame"] = "base_link"
        notes.append("no odometry: perception only (detection and tracking in base_link); no prediction or planning")
    tasks = []
    for e in doc.get("tasks") or []:
        if e["name"] in gone:
            continue
        args = e["args"] = e.get("args") or {}   # "args: null" too: one dict, kept in the entry
        if e["name"] in SENSOR_TASKS.values():
            args.pop("mount", None)   # from the bag's /tf_static (replay says where it came from)
        if e["name"] == SENSOR_TASKS["lidar"] and "lidar" in picked:
            _lidar_invariants(e, args, s, picked["lidar"], notes)
        if e["name"] == SENSOR_TASKS["radar"] and "radar" in picked:
            _radar_invariants(e, picked["radar"], notes)
        if e["name"] == SENSOR_TASKS["camera"] and "camera" in picked:
            _camera_frame(e, args, s, picked["camera"], notes)
        if e["name"] == FUSION:
            args.pop("camera", None)
            if "camera" in picked:
                _fusion_camera(args, s, picked["camera"], notes)
            (args.get("tracker") or {}).pop("radar_xy", None)
            _tracker_times(e, args, s, picked, notes,
                           any(r.get("codec") == "lidar_points_deskewed" for r in doc["ingress"]))
            optional = [i for role, ins in FUSION_INPUTS.items() if role not in picked for i in ins]
            if "odometry" not in picked:
                optional.append("odom")
            if "lidar" not in picked:
                e["trigger"] = "camera/boxes" if "camera" in picked else "radar/objects"
                e["min_interarrival"] = "45ms"
            if optional:
                e["optional"] = optional
        if e["name"] in PLANNING_TASKS and "route" not in picked:
            e["optional"] = [i for i in ("route", "route_count") if i in (e.get("inputs") or {})]
            if e["name"] == "planning":
                args["road"] = dict(LANE_KEEPING_ROAD)
                notes.append(f"no route: the planner keeps its lane, straight ahead along the ego's heading at "
                             f"{LANE_KEEPING_SPEED} m/s (one 3.5 m lane; edit planning's args.road for your road)")
        if not args:
            e.pop("args", None)
        tasks.append(e)
    doc["tasks"] = tasks
    fed = {r.get("channel") for r in doc["ingress"]} | {c for r in doc["ingress"] for c in (r.get("channels") or {}).values()}
    written = fed | {c for e in tasks for c in (e.get("outputs") or {}).values()}
    doc["channels"] = [c for c in doc.get("channels") or [] if c.get("name") in written]
    doc["egress"] = [r for r in doc.get("egress") or [] if set((r.get("channels") or {}).values()) <= written]
    names = {e["name"] for e in tasks}
    doc["chains"] = [c for c in doc.get("chains") or [] if set(c.get("tasks") or []) <= names]
    for key in ("channels", "egress", "chains"):
        if not doc[key]:
            doc.pop(key)
    safety = doc.get("safety")
    if safety is not None:
        if safety.get("planner") not in names:
            doc.pop("safety")
        else:
            safety["sensors"] = {ch: t for ch, t in (safety.get("sensors") or {}).items() if ch in fed}
    return doc, notes


def render(doc: dict[str, Any], header: list[str]) -> str:
    """The YAML text, with ``header`` lines as comments on top."""
    lines = ["# yaml-language-server: $schema=stack.schema.json"] + [f"# {h}" if h else "#" for h in header]
    return "\n".join(lines) + "\n" + yaml.safe_dump(doc, sort_keys=False, width=120, default_flow_style=None)
