"""Ingress: decode a sensor message into the array a channel carries.

Each codec names the ROS message type it accepts and returns numpy arrays whose layouts the
reference stack's input contracts expect (``pipelines/schema.py``): one array per role it
declares (most codecs have the single role ``value``). A message that cannot be
decoded raises ``IngressError`` naming the topic, what was expected and what was found; the
caller counts it and goes on (a bad message never stops a replay or a vehicle).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..bag import CodecError, cloud_to_array, cloud_xyz, image_to_array, to_rgb
from ..bag.types import stamp_ns


class IngressError(ValueError):
    """A sensor message that cannot be decoded; names the topic."""


@dataclass(frozen=True)
class IngressCodec:
    """Decodes one message type into an array."""

    name: str
    msgtypes: tuple[str, ...]
    decode: Callable[[Any, str], np.ndarray | dict[str, np.ndarray]]
    doc: str
    roles: tuple[str, ...] = ("value",)


def _lidar_points(msg: Any, topic: str) -> np.ndarray:
    pts = cloud_to_array(msg, topic)
    names = pts.dtype.names or ()
    extra = ("intensity",) if "intensity" in names else ()
    xyz = cloud_xyz(pts, extra)
    if not extra:  # a cloud without intensity still feeds a 4-column contract
        xyz = np.concatenate([xyz, np.zeros((len(xyz), 1), np.float32)], axis=1)
    return xyz


def _radar_points(msg: Any, topic: str) -> np.ndarray:
    pts = cloud_to_array(msg, topic)
    names = pts.dtype.names or ()
    doppler = next((n for n in ("doppler", "velocity", "vr", "radial_velocity") if n in names), None)
    if doppler is None or "rcs" not in names:
        raise IngressError(f"topic {topic}: radar cloud needs fields doppler and rcs; it has {list(names)}")
    return cloud_xyz(pts, (doppler, "rcs"))


def _image_rgb(msg: Any, topic: str) -> np.ndarray:
    arr = image_to_array(msg, topic)
    return np.ascontiguousarray(to_rgb(arr, msg.encoding))


def _yaw(q: Any) -> float:
    return math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))


def _odometry(msg: Any, topic: str) -> np.ndarray:
    p, tw = msg.pose.pose, msg.twist.twist
    return np.array([p.position.x, p.position.y, _yaw(p.orientation), tw.linear.x, tw.angular.z,
                     stamp_ns(msg.header.stamp) * 1e-9], np.float64)


def _route(msg: Any, topic: str) -> dict[str, np.ndarray]:
    xy = np.array([[p.pose.position.x, p.pose.position.y] for p in msg.poses], np.float32).reshape(-1, 2)
    if len(xy) < 2:
        raise IngressError(f"topic {topic}: a route needs at least 2 poses, found {len(xy)}")
    return {"route": xy, "count": np.array([len(xy)], np.int32)}


INGRESS_CODECS: dict[str, IngressCodec] = {c.name: c for c in (
    IngressCodec("lidar_points", ("sensor_msgs/msg/PointCloud2",), _lidar_points,
                 "PointCloud2 -> (N, 4) float32 x, y, z, intensity; non-finite points dropped"),
    IngressCodec("radar_points", ("sensor_msgs/msg/PointCloud2",), _radar_points,
                 "PointCloud2 with doppler and rcs -> (R, 5) float32 x, y, z, doppler, rcs"),
    IngressCodec("image_rgb", ("sensor_msgs/msg/Image",), _image_rgb,
                 "Image (rgb8, bgr8, mono8, ...) -> (H, W, 3) uint8 RGB"),
    IngressCodec("odometry", ("nav_msgs/msg/Odometry",), _odometry,
                 "Odometry -> (6,) float64 x, y, yaw, vx, yaw_rate, stamp seconds"),
    IngressCodec("route", ("nav_msgs/msg/Path",), _route,
                 "Path (map frame) -> route (K, 2) float32 x, y and count (1,) int32", roles=("route", "count")),
)}


def decode(codec: IngressCodec, msg: Any, topic: str) -> dict[str, np.ndarray]:
    """Run a codec: {role: array}; every decoding failure becomes an ``IngressError`` naming the topic."""
    try:
        out = codec.decode(msg, topic)
        return out if isinstance(out, dict) else {"value": out}
    except IngressError:
        raise
    except (CodecError, AttributeError, ValueError, TypeError, IndexError) as e:
        raise IngressError(f"topic {topic}: {codec.name} could not decode the message ({e})") from None
