"""The type store (ROS 2 Kilted + `rt_runtime_msgs`), CDR helpers and small message builders."""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from .errors import CodecError

# Our one custom type. It travels with every bag that uses it (MCAP schema records, the db3
# message_definitions table), so any rosbag2 tool can read it without this package.
GROUND_TRUTH_OBJECT = "rt_runtime_msgs/msg/GroundTruthObject"
GROUND_TRUTH_OBJECTS = "rt_runtime_msgs/msg/GroundTruthObjects"
CUSTOM_MSGDEFS: dict[str, str] = {
    GROUND_TRUTH_OBJECT: """\
# One simulated object: a 3D box in header.frame_id of the enclosing array.
uint8 UNKNOWN=0
uint8 CAR=1
uint8 TRUCK=2
uint8 BICYCLE=3
uint8 PEDESTRIAN=4
uint32 id
uint8 label
geometry_msgs/Point position
geometry_msgs/Vector3 dimensions
float64 yaw
geometry_msgs/Vector3 velocity
""",
    GROUND_TRUTH_OBJECTS: """\
# Every dynamic object of the simulated world at header.stamp.
std_msgs/Header header
rt_runtime_msgs/GroundTruthObject[] objects
""",
}

STORE_NAME = getattr(Stores, "ROS2_KILTED", Stores.LATEST)


def new_typestore() -> Typestore:
    """A fresh type store: ROS 2 Kilted messages plus `rt_runtime_msgs`."""
    store = get_typestore(STORE_NAME)
    for name, text in CUSTOM_MSGDEFS.items():
        store.register(get_types_from_msg(text, name))
    return store


@functools.cache
def default_typestore() -> Typestore:
    """The shared type store used when a caller passes none (never mutated after creation)."""
    return new_typestore()


def to_cdr(msg: Any, msgtype: str | None = None, store: Typestore | None = None) -> bytes:
    """Serialize a message object to little-endian CDR bytes (what a bag stores)."""
    store = store or default_typestore()
    msgtype = msgtype or getattr(msg, "__msgtype__", None)
    if msgtype is None or msgtype not in store.types:
        raise CodecError(f"cannot serialize {type(msg).__name__}: unknown message type {msgtype!r}")
    try:
        return bytes(store.serialize_cdr(msg, msgtype, little_endian=True))
    except Exception as e:  # rosbags raises assorted errors for wrong field types
        raise CodecError(f"cannot serialize {msgtype}: {e}") from None


def from_cdr(raw: bytes | memoryview, msgtype: str, store: Typestore | None = None) -> Any:
    """Deserialize CDR bytes; arrays of numbers come back as numpy views into `raw`."""
    store = store or default_typestore()
    if msgtype not in store.types:
        raise CodecError(f"unknown message type {msgtype!r}: not in the type store")
    try:
        return store.deserialize_cdr(memoryview(raw), msgtype)  # a view: arrays alias raw, no copy
    except Exception as e:
        raise CodecError(f"cannot decode {msgtype} ({len(raw)} bytes): {e}") from None


def msg_class(name: str, store: Typestore | None = None) -> Any:
    """The message class for a type name such as 'sensor_msgs/msg/Image'."""
    return (store or default_typestore()).types[name]


def stamp(t_ns: int) -> Any:
    """builtin_interfaces/Time from integer nanoseconds."""
    sec, nanosec = divmod(int(t_ns), 1_000_000_000)
    return msg_class("builtin_interfaces/msg/Time")(sec=sec, nanosec=nanosec)


def stamp_ns(st: Any) -> int:
    """Integer nanoseconds from builtin_interfaces/Time."""
    return int(st.sec) * 1_000_000_000 + int(st.nanosec)


def header(t_ns: int, frame_id: str) -> Any:
    """std_msgs/Header with a stamp and frame."""
    return msg_class("std_msgs/msg/Header")(stamp=stamp(t_ns), frame_id=frame_id)


def quaternion_from_yaw(yaw: float) -> Any:
    """geometry_msgs/Quaternion for a rotation about z."""
    return msg_class("geometry_msgs/msg/Quaternion")(x=0.0, y=0.0, z=math.sin(yaw / 2), w=math.cos(yaw / 2))


def quaternion_from_matrix(r: np.ndarray) -> Any:
    """geometry_msgs/Quaternion from a 3x3 rotation matrix (w >= 0)."""
    m = np.asarray(r, dtype=np.float64)
    w = math.sqrt(max(0.0, 1.0 + m[0, 0] + m[1, 1] + m[2, 2])) / 2
    x = math.sqrt(max(0.0, 1.0 + m[0, 0] - m[1, 1] - m[2, 2])) / 2
    y = math.sqrt(max(0.0, 1.0 - m[0, 0] + m[1, 1] - m[2, 2])) / 2
    z = math.sqrt(max(0.0, 1.0 - m[0, 0] - m[1, 1] + m[2, 2])) / 2
    x = math.copysign(x, m[2, 1] - m[1, 2])
    y = math.copysign(y, m[0, 2] - m[2, 0])
    z = math.copysign(z, m[1, 0] - m[0, 1])
    return msg_class("geometry_msgs/msg/Quaternion")(x=x, y=y, z=z, w=w)


def vector3(x: float, y: float, z: float) -> Any:
    """geometry_msgs/Vector3."""
    return msg_class("geometry_msgs/msg/Vector3")(x=float(x), y=float(y), z=float(z))


def point(x: float, y: float, z: float) -> Any:
    """geometry_msgs/Point."""
    return msg_class("geometry_msgs/msg/Point")(x=float(x), y=float(y), z=float(z))
