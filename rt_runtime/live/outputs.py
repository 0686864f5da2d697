"""The stack's outputs for the live view: decimated where they are tapped, drawn in Foxglove's own schemas.

``OutputTap`` is called by the egress adapters (``replay.outputs.OutputCollector``, ``ros.outputs.EgressPump``)
with the host copy they make of every egress channel anyway: no copy of its own. It keeps one group per
route and ``1 / hz`` seconds of the runtime's logical time (the first complete group after the gate opens)
and hands it on; the rest it ignores before touching them. Building the messages (``trajectory``,
``objects``: protobuf bytes, ``live.wire``) happens on the live view's server thread, never on the
scheduler's.

A ``path`` route (trajectory rows x, y, yaw, v, t) becomes ``foxglove.PosesInFrame``; a ``markers`` route
(tracks, TRACK_COLS, and their count) a ``foxglove.SceneUpdate``: everything deleted, then a cube and a label
per track, as the MarkerArray the node publishes. The 3D panel draws both, its camera following frame ``ego``:
where each trajectory drawn starts (the ego's pose when it was planned), on ``TF_TOPIC``."""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .wire import finite_rows, frame_transform, poses_in_frame, scene_update

# codec -> the Foxglove schema its route is drawn in (a route of another codec is not served)
SCHEMAS = {"path": "foxglove.PosesInFrame", "markers": "foxglove.SceneUpdate"}
CLASS_NAMES = ("car", "truck", "cyclist", "pedestrian")
CLASS_RGB = ((0.2, 0.6, 1.0), (0.1, 0.3, 0.9), (1.0, 0.7, 0.1), (1.0, 0.2, 0.2))
DEFAULT_HZ = 10.0
EGO_FRAME, TF_TOPIC = "ego", "/rt/out/tf"   # foxglove.FrameTransforms: frame -> ego

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


def trajectory(group: Group, stamp_ns: int, frame: str) -> bytes:
    """A trajectory (P, 5: x, y, yaw, v, t) as ``foxglove.PosesInFrame`` (protobuf); rows without a finite x and
    y left out."""
    rows = finite_rows(np.asarray(group["trajectory"], np.float64).reshape(-1, 5))
    return poses_in_frame(rows[:, :3], stamp_ns, frame)


def ego(group: Group, stamp_ns: int, frame: str) -> bytes | None:
    """Frame ``ego`` at a trajectory's first pose, as ``foxglove.FrameTransforms`` (None: no finite first pose)."""
    rows = np.asarray(group["trajectory"], np.float64).reshape(-1, 5)
    if not len(rows) or not np.isfinite(rows[0, :3]).all():
        return None
    x, y, yaw = rows[0, :3].tolist()
    return frame_transform(stamp_ns, frame, EGO_FRAME, x, y, yaw)


LIFETIME_NS = 300_000_000   # a track's cube and label, unless the next update comes first


def objects(group: Group, stamp_ns: int, frame: str) -> bytes:
    """Tracks (T, TRACK_COLS: id, class, x, y, vx, vy, yaw, length, width, ...) and their count as
    ``foxglove.SceneUpdate`` (protobuf): everything before deleted, then a cube and a label per confirmed track."""
    n = int(np.asarray(group["count"]).reshape(-1)[0])
    entities = []
    for r in np.asarray(group["tracks"], np.float64)[:max(0, n)].tolist():   # a few: plain floats, no numpy call
        tid, cls = int(r[0]), int(r[1])
        red, green, blue = CLASS_RGB[cls] if 0 <= cls < len(CLASS_RGB) else (0.7, 0.7, 0.7)
        name = CLASS_NAMES[cls] if 0 <= cls < len(CLASS_NAMES) else "object"
        half = r[6] / 2
        entities.append((f"{name}/{tid}", f"#{tid} {math.hypot(r[4], r[5]):.1f} m/s",
                         (r[2], r[3], math.sin(half), math.cos(half), max(r[7], 0.1), max(r[8], 0.1), red, green, blue),
                         (r[2], r[3])))
    return scene_update(stamp_ns, frame, LIFETIME_NS, entities)


BUILD: dict[str, Callable[[Group, int, str], bytes]] = {"path": trajectory, "markers": objects}
