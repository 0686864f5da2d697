"""Egress: encode the runtime's output tensors as ROS messages (rosbags objects, then CDR).

Each codec takes the tensors of one output group (``{role: array}``, all published by one job at
the same logical instant) and builds one message. The bag replay writes its CDR bytes; the live
node hands the same bytes to rclpy, so both paths publish the same thing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..bag.types import header, msg_class, point, quaternion_from_yaw, to_cdr, vector3
from .cdr import markers_cdr, path_cdr

# (role -> array, logical publish time ns, frame id) -> message object
Encode = Callable[[Mapping[str, np.ndarray], int, str], Any]

_CLASS_NAMES = ("car", "truck", "cyclist", "pedestrian")
_CLASS_RGB = ((0.2, 0.6, 1.0), (0.1, 0.3, 0.9), (1.0, 0.7, 0.1), (1.0, 0.2, 0.2))


@dataclass(frozen=True)
class Layout:
    """What a codec reads from one role's tensor: its shape (an int: that size; a name: any size) and dtype kind.

    ``config.stack.build_bindings`` checks the writer graph's output spec against it before a run, so
    a channel of another layout is refused up front instead of failing mid-run in the encoder."""

    shape: tuple[int | str, ...]
    kind: str   # "float" or "int"
    what: str = ""   # the columns, for the message (e.g. "TRACK_COLS")

    def __str__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape) + ("," if len(self.shape) == 1 else "")
        return f"({dims}) {self.kind}" + (f" ({self.what})" if self.what else "")

    def accepts(self, shape: tuple[Any, ...], dtype: str) -> bool:
        """True when a tensor of ``shape`` (ints, or symbolic dims) and numpy ``dtype`` is read as intended."""
        kinds = {"float": "f", "int": "iu"}[self.kind]
        if np.dtype(dtype).kind not in kinds or len(shape) != len(self.shape):
            return False
        return all(isinstance(want, str) or (isinstance(have, int) and have == want)
                   for want, have in zip(self.shape, shape))


@dataclass(frozen=True)
class EgressCodec:
    """Builds one message type from named tensors."""

    name: str
    msgtype: str
    roles: tuple[str, ...]
    encode: Encode
    doc: str
    cdr: Callable[[Mapping[str, np.ndarray], int, str], bytes] | None = None  # byte-identical fast path
    layouts: Mapping[str, Layout] = field(default_factory=dict)   # role -> what the codec reads of it

    def to_cdr(self, data: Mapping[str, np.ndarray], t_ns: int, frame: str) -> bytes:
        """The message's CDR bytes (through the fast path when the codec has one)."""
        if self.cdr is not None:
            return self.cdr(data, t_ns, frame)
        return to_cdr(self.encode(data, t_ns, frame))


def _path(data: Mapping[str, np.ndarray], t_ns: int, frame: str) -> Any:
    traj = np.asarray(data["trajectory"], np.float64)
    PoseStamped, Pose = msg_class("geometry_msgs/msg/PoseStamped"), msg_class("geometry_msgs/msg/Pose")
    poses = [PoseStamped(header=header(t_ns + int(round(row[4] * 1e9)), frame),
                         pose=Pose(position=point(row[0], row[1], 0.0), orientation=quaternion_from_yaw(row[2])))
             for row in traj]
    return msg_class("nav_msgs/msg/Path")(header=header(t_ns, frame), poses=poses)


def _marker(t_ns: int, frame: str, **fields: Any) -> Any:
    """A visualization_msgs/Marker with every field this codec does not set left empty."""
    Marker = msg_class("visualization_msgs/msg/Marker")
    empty = np.zeros(0, np.uint8)
    defaults = dict(
        header=header(t_ns, frame), ns="", id=0, type=Marker.CUBE, action=Marker.ADD,
        pose=msg_class("geometry_msgs/msg/Pose")(position=point(0, 0, 0), orientation=quaternion_from_yaw(0.0)),
        scale=vector3(1, 1, 1), color=msg_class("std_msgs/msg/ColorRGBA")(r=0.0, g=0.0, b=0.0, a=0.0),
        lifetime=msg_class("builtin_interfaces/msg/Duration")(sec=0, nanosec=0), frame_locked=False,
        points=[], colors=[], texture_resource="",
        texture=msg_class("sensor_msgs/msg/CompressedImage")(header=header(0, ""), format="", data=empty),
        uv_coordinates=[], text="", mesh_resource="",
        mesh_file=msg_class("visualization_msgs/msg/MeshFile")(filename="", data=empty),
        mesh_use_embedded_materials=False)
    return Marker(**{**defaults, **fields})


def _markers(data: Mapping[str, np.ndarray], t_ns: int, frame: str) -> Any:
    Marker, ColorRGBA = msg_class("visualization_msgs/msg/Marker"), msg_class("std_msgs/msg/ColorRGBA")
    Pose, Duration = msg_class("geometry_msgs/msg/Pose"), msg_class("builtin_interfaces/msg/Duration")
    n = int(np.asarray(data["count"]).reshape(-1)[0])
    tracks = np.asarray(data["tracks"])[:n]
    # DELETEALL first: a viewer then shows exactly this instant's tracks.
    markers = [_marker(t_ns, frame, ns="tracks", action=Marker.DELETEALL)]
    for row in tracks:
        tid, cls = int(row[0]), int(row[1])
        r, g, b = _CLASS_RGB[cls] if 0 <= cls < len(_CLASS_RGB) else (0.7, 0.7, 0.7)
        speed = math.hypot(float(row[4]), float(row[5]))
        markers.append(_marker(
            t_ns, frame, ns=_CLASS_NAMES[cls] if 0 <= cls < len(_CLASS_NAMES) else "object", id=tid,
            pose=Pose(position=point(row[2], row[3], 0.75), orientation=quaternion_from_yaw(float(row[6]))),
            scale=vector3(max(float(row[7]), 0.1), max(float(row[8]), 0.1), 1.5),
            color=ColorRGBA(r=r, g=g, b=b, a=0.8), lifetime=Duration(sec=0, nanosec=300_000_000),
            text=f"#{tid} {speed:.1f} m/s"))
    return msg_class("visualization_msgs/msg/MarkerArray")(markers=markers)


EGRESS_CODECS: dict[str, EgressCodec] = {c.name: c for c in (
    EgressCodec("path", "nav_msgs/msg/Path", ("trajectory",), _path,
                "trajectory (P, 5: x, y, yaw, v, t) -> nav_msgs/Path, one pose per row stamped at t",
                cdr=lambda d, t, f: path_cdr(d["trajectory"], t, f),
                layouts={"trajectory": Layout(("P", 5), "float", "x, y, yaw, v, t")}),
    EgressCodec("markers", "visualization_msgs/msg/MarkerArray", ("tracks", "count"), _markers,
                "tracks (T, 12) + count -> MarkerArray: DELETEALL, then a cube per track",
                cdr=lambda d, t, f: markers_cdr(d["tracks"], int(np.asarray(d["count"]).reshape(-1)[0]), t, f,
                                                _CLASS_NAMES, _CLASS_RGB),
                layouts={"tracks": Layout(("T", 12), "float", "TRACK_COLS"), "count": Layout((1,), "int")}),
)}


def diagnostics(stats: Mapping[str, Mapping[str, Any]], t_ns: int, extra: Mapping[str, str] | None = None) -> Any:
    """DiagnosticArray with one status per task: jobs, misses, overruns, reactions, mode, drops.

    Only counters go in (no measured times), so the message is the same on every replay.
    """
    Status, KeyValue = msg_class("diagnostic_msgs/msg/DiagnosticStatus"), msg_class("diagnostic_msgs/msg/KeyValue")
    statuses = []
    for task in sorted(stats):
        s = stats[task]
        missed = int(s.get("missed", 0))
        degraded = s.get("mode", 0) in ("fallback", 1, True)  # the scheduler reports "primary" / "fallback"
        level = Status.ERROR if degraded else Status.WARN if missed else Status.OK
        values = [KeyValue(key=k, value=str(s[k])) for k in sorted(s) if isinstance(s[k], (int, str, bool))]
        statuses.append(Status(level=level, name=f"rt_runtime: {task}", message="degraded" if degraded else
                               f"{missed} deadline misses" if missed else "ok", hardware_id="rt_runtime",
                               values=values))
    for key, value in (extra or {}).items():
        statuses.append(Status(level=Status.OK, name=f"rt_runtime: {key}", message=value, hardware_id="rt_runtime",
                               values=[]))
    return msg_class("diagnostic_msgs/msg/DiagnosticArray")(header=header(t_ns, ""), status=statuses)


__all__ = ["EGRESS_CODECS", "EgressCodec", "Layout", "diagnostics"]
