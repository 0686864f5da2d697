"""The stack's outputs for the live view: decimated where they are tapped, drawn in Foxglove's own schemas.

``OutputTap`` is called by the egress adapters (``replay.outputs.OutputCollector``, ``ros.outputs.EgressPump``)
with the host copy they make of every egress channel anyway: no copy of its own. It keeps one group per
route and ``1 / hz`` seconds of the runtime's logical time (the first complete group after the gate opens)
and hands it on; the rest it ignores before touching them. Building the messages (``trajectory``,
``objects``) happens on the live view's server thread, never on the scheduler's.

A ``path`` route (trajectory rows x, y, yaw, v, t) becomes ``foxglove.PosesInFrame``; a ``markers`` route
(tracks, TRACK_COLS, and their count) a ``foxglove.SceneUpdate``: everything deleted, then a cube and a label
per track, as the MarkerArray the node publishes. The 3D panel draws both."""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

# codec -> the Foxglove schema its route is drawn in (a route of another codec is not served)
SCHEMAS = {"path": "foxglove.PosesInFrame", "markers": "foxglove.SceneUpdate"}
CLASS_NAMES = ("car", "truck", "cyclist", "pedestrian")
CLASS_RGB = ((0.2, 0.6, 1.0), (0.1, 0.3, 0.9), (1.0, 0.7, 0.1), (1.0, 0.2, 0.2))
DEFAULT_HZ = 10.0

Group = Mapping[str, np.ndarray]


def topic_of(route_topic: str) -> str:
    """The live view's channel for an egress route (its ROS topic under ``/rt/out``)."""
    return "/rt/out" + (route_topic if route_topic.startswith("/") else "/" + route_topic)


class OutputTap:
    """Egress routes (``topic``, ``codec``, ``channels``: role -> channel) decimated to ``hz`` per route;
    ``push(route_topic, codec, t_ns, group)`` gets each group kept."""

    def __init__(self, routes: Sequence[Any], hz: float, push: Callable[[str, str, int, Group], None]) -> None:
        self.period_ns = int(round(1e9 / hz)) if hz > 0 else 0
        self.push = push
        self.by_channel: dict[str, list[tuple[Any, str]]] = {}
        self.next_ns: dict[str, int] = {}
        self.pending: dict[str, tuple[int, dict[str, np.ndarray]]] = {}
        for r in routes:
            if r.codec in SCHEMAS:
                self.next_ns[r.topic] = 0
                for role, channel in r.channels.items():
                    self.by_channel.setdefault(channel, []).append((r, role))

    def __call__(self, channel: str, t_ns: int, value: np.ndarray) -> None:
        """One egress channel's value published at ``t_ns`` (the caller's own copy, kept as it is)."""
        routes = self.by_channel.get(channel)
        if routes is None:
            return
        for r, role in routes:
            if t_ns < self.next_ns[r.topic]:
                continue   # decimated: before the route's gate, nothing else is done
            t, got = self.pending.get(r.topic) or (t_ns, {})
            if t != t_ns:   # a group left incomplete (a channel not published at that instant)
                t, got = t_ns, {}
            got[role] = value
            if len(got) == len(r.channels):
                self.pending.pop(r.topic, None)
                self.next_ns[r.topic] = t_ns + self.period_ns
                self.push(r.topic, r.codec, t_ns, got)
            else:
                self.pending[r.topic] = (t, got)


def _quaternion(m: Any, yaw: float) -> Any:
    return m.Quaternion(x=0.0, y=0.0, z=math.sin(yaw / 2), w=math.cos(yaw / 2))


def _stamp(m: Any, t_ns: int) -> Any:
    return m.Timestamp(sec=t_ns // 1_000_000_000, nsec=t_ns % 1_000_000_000)


def trajectory(m: Any, group: Group, stamp_ns: int, frame: str) -> Any:
    """A trajectory (P, 5: x, y, yaw, v, t) as ``foxglove.PosesInFrame`` (``m``: ``foxglove.messages``)."""
    rows = np.asarray(group["trajectory"], np.float64).reshape(-1, 5)
    poses = [m.Pose(position=m.Vector3(x=float(r[0]), y=float(r[1]), z=0.0), orientation=_quaternion(m, float(r[2])))
             for r in rows if math.isfinite(r[0]) and math.isfinite(r[1])]
    return m.PosesInFrame(timestamp=_stamp(m, stamp_ns), frame_id=frame, poses=poses)


def objects(m: Any, group: Group, stamp_ns: int, frame: str) -> Any:
    """Tracks (T, TRACK_COLS: id, class, x, y, vx, vy, yaw, length, width, ...) and their count as
    ``foxglove.SceneUpdate``: everything before deleted, then a cube and a label per confirmed track."""
    n = int(np.asarray(group["count"]).reshape(-1)[0])
    rows = np.asarray(group["tracks"], np.float64)[:max(0, n)]
    stamp = _stamp(m, stamp_ns)
    life = m.Duration(sec=0, nsec=300_000_000)
    entities = []
    for r in rows:
        tid, cls = int(r[0]), int(r[1])
        red, green, blue = CLASS_RGB[cls] if 0 <= cls < len(CLASS_RGB) else (0.7, 0.7, 0.7)
        name = CLASS_NAMES[cls] if 0 <= cls < len(CLASS_NAMES) else "object"
        pose = m.Pose(position=m.Vector3(x=float(r[2]), y=float(r[3]), z=0.75), orientation=_quaternion(m, float(r[6])))
        label = m.Pose(position=m.Vector3(x=float(r[2]), y=float(r[3]), z=1.8), orientation=_quaternion(m, 0.0))
        entities.append(m.SceneEntity(
            timestamp=stamp, frame_id=frame, id=f"{name}/{tid}", lifetime=life,
            cubes=[m.CubePrimitive(pose=pose, size=m.Vector3(x=max(float(r[7]), 0.1), y=max(float(r[8]), 0.1), z=1.5),
                                   color=m.Color(r=red, g=green, b=blue, a=0.8))],
            texts=[m.TextPrimitive(pose=label, billboard=True, font_size=14.0, scale_invariant=True,
                                   color=m.Color(r=1.0, g=1.0, b=1.0, a=1.0),
                                   text=f"#{tid} {math.hypot(float(r[4]), float(r[5])):.1f} m/s")]))
    return m.SceneUpdate(deletions=[m.SceneEntityDeletion(timestamp=stamp, type=m.SceneEntityDeletionType.All)],
                         entities=entities)


BUILD: dict[str, Callable[[Any, Group, int, str], Any]] = {"path": trajectory, "markers": objects}
