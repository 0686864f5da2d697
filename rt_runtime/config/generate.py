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
  (``frame: base_link``; the tracker sees no time pass between sweeps, so tracks carry positions,
  not velocities), no prediction, no planning, no safety supervisor;
- with odometry but no route the planner keeps its lane: each plan's reference line runs straight
  ahead along the ego's heading (``pipelines.planning``'s no-route fallback), one lane of 3.5 m at
  ``LANE_KEEPING_SPEED`` m/s;
- sensor mounts and camera intrinsics are left out, so ``replay`` takes them from the bag's
  ``/tf_static`` and ``CameraInfo`` (``config.calibration``; a value written in the file overrides).

``stack_for_bag`` returns the document and the reasons, one line each; ``render`` writes the YAML
with those reasons as comments.
"""
from __future__ import annotations

import copy
from typing import Any

import yaml

from ..bag.survey import COMPRESSED, BagSurvey

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
        args = e.setdefault("args", {}) or {}
        if e["name"] in SENSOR_TASKS.values():
            args.pop("mount", None)   # from the bag's /tf_static (replay says where it came from)
        if e["name"] == FUSION:
            args.pop("camera", None)
            (args.get("tracker") or {}).pop("radar_xy", None)
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
