"""Ingress: decode a sensor message into the array a channel carries.

Each codec names the ROS message type it accepts and returns numpy arrays whose layouts the
reference stack's input contracts expect (``pipelines/schema.py``): one array per role it
declares (most codecs have the single role ``value``). A message that cannot be
decoded raises ``IngressError`` naming the topic, what was expected and what was found; the
caller counts it and goes on (a bad message never stops a replay or a vehicle).

A message that decodes but carries NaN/Inf where the stack needs numbers raises ``NonFiniteError``
(an ``IngressError``): any non-finite odometry, route or radar value; a LiDAR cloud whose points are
more than half non-finite (drivers mark a missing return with NaN x/y/z, and the codec drops those
points), or whose kept points have a non-finite intensity. Images are integers: nothing to check.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..bag import CodecError, cloud_to_array, cloud_xyz
from ..bag.deskew import deskew
from ..bag.image import RGB8_ENCODINGS, compressed_to_rgb8, image_to_rgb8
from ..bag.lidar_layouts import INTENSITY_MAX, driver_layout, point_intensity, point_times
from ..bag.types import stamp_ns


class IngressError(ValueError):
    """A sensor message that cannot be decoded; names the topic."""

    kind = "undecodable"


class NonFiniteError(IngressError):
    """A sensor message that decodes but carries NaN/Inf where the stack needs numbers; names the topic."""

    kind = "nonfinite"


# A LiDAR sweep with more non-finite (no-return) points than this is rejected: a sensor that sees
# nothing is faulty, not looking at the sky (the simulator's sweeps are about 35 % no-return).
MAX_NONFINITE_POINTS = 0.5


@dataclass(frozen=True)
class IngressCodec:
    """Decodes one message type into an array."""

    name: str
    msgtypes: tuple[str, ...]
    decode: Callable[..., np.ndarray | dict[str, np.ndarray]]   # (msg, topic[, motion])
    doc: str
    roles: tuple[str, ...] = ("value",)
    # What is non-finite in a decoded message that must not reach the stack (None: nothing)
    nonfinite: Callable[[Any, dict[str, np.ndarray]], str | None] = lambda msg, value: _any_nonfinite(value)
    # decode also takes the ego's motion (``EgoMotion``: what the odometry said last)
    uses_motion: bool = False


@dataclass
class EgoMotion:
    """The ego's latest forward speed and yaw rate (base_link), for codecs that compensate motion.

    The feed (replay) updates it from each decoded odometry message, in log-time order, so what a
    LiDAR sweep is compensated with is the odometry logged before it: deterministic. ``mounts``:
    a sensor frame's (x, y, z, yaw) in base_link (from the bag's /tf_static), for the lever arm.
    """

    vx: float = 0.0
    yaw_rate: float = 0.0
    t_s: float = math.nan   # the odometry's stamp (s): the time a sweep is compensated to
    known: bool = False
    mounts: dict[str, tuple[float, float, float, float]] = field(default_factory=dict)

    def update(self, odom: np.ndarray) -> None:
        """Take vx, yaw rate and stamp from an odometry codec's (6,) array (x, y, yaw, vx, yaw_rate, t)."""
        self.vx, self.yaw_rate, self.t_s, self.known = float(odom[3]), float(odom[4]), float(odom[5]), True


# A sweep is compensated to the latest odometry's stamp when it is this close to the sweep's, else to its own.
DESKEW_MAX_REFERENCE_S = 1.0


def _any_nonfinite(value: dict[str, np.ndarray], names: tuple[str, ...] = ()) -> str | None:
    """Which float values are NaN/Inf: "N non-finite value(s) in ROLE" (with field ``names`` per column)."""
    for role, a in value.items():
        if a.dtype.kind != "f" or a.size == 0:
            continue
        bad = ~np.isfinite(a)
        if bad.any():
            cols = bad.reshape(-1, a.shape[-1]).any(axis=0) if names and a.ndim >= 1 and a.shape[-1] == len(names) \
                else None
            where = ", ".join(n for n, b in zip(names, cols) if b) if cols is not None else role
            return f"{int(bad.sum())} non-finite value(s) (NaN/Inf) in {where}"
    return None


def _points(msg: Any) -> int:
    return int(msg.width) * int(msg.height)


def _lidar_nonfinite(msg: Any, value: dict[str, np.ndarray]) -> str | None:
    total, kept = _points(msg), len(value["value"])
    if total and total - kept > MAX_NONFINITE_POINTS * total:
        return (f"{total - kept} of {total} points have non-finite x/y/z (more than "
                f"{MAX_NONFINITE_POINTS:.0%} of a sweep)")
    return _any_nonfinite(value, ("x", "y", "z", "intensity"))


def _radar_nonfinite(msg: Any, value: dict[str, np.ndarray]) -> str | None:
    total, kept = _points(msg), len(value["value"])
    if kept < total:
        return f"{total - kept} of {total} points have non-finite x/y/z"
    return _any_nonfinite(value, ("x", "y", "z", "doppler", "rcs"))


# The fields that, as four native float32 at consecutive offsets, a sweep is decoded from as one block.
_XYZI = ("x", "y", "z", "intensity")
# 16 opaque bytes: x, y, z, intensity copied as they are (a float copy could be slower, never different).
_ROW16 = np.dtype((np.void, 16))


def _xyzi_fast(pts: np.ndarray, layout: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """(N, 4) x, y, z, clipped intensity of the finite points and the keep mask, for the common layouts
    (x, y, z, intensity native float32 at consecutive offsets, rows without padding); None otherwise.

    One pass per x/y/z column for the mask and one copy of the kept 16-byte rows, where the general
    path copies each field, the intensity twice, and compacts the result."""
    fields = pts.dtype.fields
    if layout is None or layout.intensity != "intensity" or fields is None or pts.size == 0:
        return None
    x_off = fields["x"][1]
    if any(fields[n][0] != np.float32 or fields[n][1] != x_off + 4 * i for i, n in enumerate(_XYZI)):
        return None
    if pts.ndim == 2 and pts.strides[0] != pts.shape[1] * pts.strides[1]:
        return None   # padded rows: the general path
    flat = pts.reshape(-1)   # a view: rows are contiguous
    step = flat.strides[0]
    xyzi = np.ndarray((flat.shape[0], 4), np.float32, buffer=flat, offset=x_off, strides=(step, 4))
    ok = np.isfinite(xyzi[:, 0]) & np.isfinite(xyzi[:, 1]) & np.isfinite(xyzi[:, 2])
    rows = np.ndarray(flat.shape, _ROW16, buffer=flat, offset=x_off, strides=(step,))
    out = (np.array(rows) if ok.all() else rows[ok]).view(np.float32).reshape(-1, 4)
    inten = out[:, 3]
    high = inten > INTENSITY_MAX
    if high.any():   # as ``point_intensity``: finite values above the range are clipped, NaN/Inf stay
        inten[high & np.isfinite(inten)] = np.float32(INTENSITY_MAX)
    return out, ok


def _lidar_columns(msg: Any, topic: str, with_time: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(N, 4) x, y, z, intensity (the convention of ``bag.lidar_layouts``) of the finite points, and
    their times since the stamp when ``with_time`` and the layout has them."""
    pts = cloud_to_array(msg, topic)
    layout = driver_layout(pts.dtype.names)
    missing = [n for n in ("x", "y", "z") if n not in (pts.dtype.names or ())]
    if missing:
        raise CodecError(f"point cloud has no field(s) {missing}; it has {pts.dtype.names}")
    fast = _xyzi_fast(pts, layout)
    if fast is not None:
        out, ok = fast
        times = point_times(pts, layout, stamp_ns(msg.header.stamp)) if with_time else None
        return out, (times[ok] if times is not None and not ok.all() else times)
    flat = pts.reshape(-1)
    out = np.empty((len(flat), 4), np.float32)
    for i, n in enumerate(("x", "y", "z")):
        out[:, i] = flat[n]   # one strided copy per field, converting byte order and type
    inten = point_intensity(pts, layout)
    out[:, 3] = 0.0 if inten is None else inten   # a cloud without intensity still feeds a 4-column contract
    times = point_times(pts, layout, stamp_ns(msg.header.stamp)) if with_time else None
    ok = np.isfinite(out[:, 0]) & np.isfinite(out[:, 1]) & np.isfinite(out[:, 2])
    if not ok.all():
        out = out[ok]
        times = times[ok] if times is not None else None
    return out, times


def _lidar_points(msg: Any, topic: str) -> np.ndarray:
    return _lidar_columns(msg, topic, with_time=False)[0]


def _lidar_points_deskewed(msg: Any, topic: str, motion: EgoMotion | None) -> np.ndarray:
    """As ``lidar_points``, each point moved to where the sensor sees it from at the latest odometry's stamp
    (the ego pose the fusion places the objects with), or at the sweep's stamp (``bag.deskew``)."""
    moving = motion is not None and motion.known and (motion.vx != 0.0 or motion.yaw_rate != 0.0)
    out, times = _lidar_columns(msg, topic, with_time=moving)
    if moving and times is not None and len(out):
        mount = motion.mounts.get(msg.header.frame_id, (0.0, 0.0, 0.0, 0.0))
        ref = motion.t_s - stamp_ns(msg.header.stamp) * 1e-9
        if abs(ref) <= DESKEW_MAX_REFERENCE_S:   # else the odometry is on another clock: the sweep's stamp
            times = times - np.float32(ref)
        out[:, :3] = deskew(out[:, :3], times, motion.vx, motion.yaw_rate, mount)
    return out


def _radar_points(msg: Any, topic: str) -> np.ndarray:
    pts = cloud_to_array(msg, topic)
    names = pts.dtype.names or ()
    doppler = next((n for n in ("doppler", "velocity", "vr", "radial_velocity") if n in names), None)
    if doppler is None or "rcs" not in names:
        raise IngressError(f"topic {topic}: radar cloud needs fields doppler and rcs; it has {list(names)}")
    return cloud_xyz(pts, (doppler, "rcs"))


def _compressed_image(msg: Any, topic: str) -> np.ndarray:
    return compressed_to_rgb8(msg, topic)


def _image_rgb(msg: Any, topic: str) -> np.ndarray:
    # A CompressedImage has `format` where an Image has `encoding` (rosbags and rclpy objects alike):
    # a config's image_rgb replays a bag whose camera topic is compressed.
    if not hasattr(msg, "encoding") and hasattr(msg, "format"):
        return compressed_to_rgb8(msg, topic)
    if msg.encoding not in RGB8_ENCODINGS:
        raise IngressError(f"topic {topic}: image_rgb: encoding {msg.encoding!r} not supported "
                           f"(supported: {', '.join(RGB8_ENCODINGS)})")
    return image_to_rgb8(msg, topic)


def _yaw(q: Any) -> float:
    return math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))


def _odometry(msg: Any, topic: str) -> np.ndarray:
    p, tw = msg.pose.pose, msg.twist.twist
    return np.array([p.position.x, p.position.y, _yaw(p.orientation), tw.linear.x, tw.angular.z,
                     stamp_ns(msg.header.stamp) * 1e-9], np.float64)


def _odometry_nonfinite(msg: Any, value: dict[str, np.ndarray]) -> str | None:
    # The fields the codec reads, by name: an Inf in the quaternion can still give a finite yaw.
    p, q, tw = msg.pose.pose.position, msg.pose.pose.orientation, msg.twist.twist
    fields = {"pose.position.x": p.x, "pose.position.y": p.y, "pose.orientation.x": q.x,
              "pose.orientation.y": q.y, "pose.orientation.z": q.z, "pose.orientation.w": q.w,
              "twist.linear.x": tw.linear.x, "twist.angular.z": tw.angular.z}
    bad = [name for name, v in fields.items() if not math.isfinite(v)]
    if bad:
        return f"non-finite value(s) (NaN/Inf) in {', '.join(bad)}"
    return _any_nonfinite(value, ("x", "y", "yaw", "vx", "yaw_rate", "stamp"))


def _route(msg: Any, topic: str) -> dict[str, np.ndarray]:
    xy = np.array([[p.pose.position.x, p.pose.position.y] for p in msg.poses], np.float32).reshape(-1, 2)
    if len(xy) < 2:
        raise IngressError(f"topic {topic}: a route needs at least 2 poses, found {len(xy)}")
    return {"route": xy, "count": np.array([len(xy)], np.int32)}


INGRESS_CODECS: dict[str, IngressCodec] = {c.name: c for c in (
    IngressCodec("lidar_points", ("sensor_msgs/msg/PointCloud2",), _lidar_points,
                 "PointCloud2 -> (N, 4) float32 x, y, z, intensity; non-finite points dropped "
                 "(rejected when more than half are)", nonfinite=_lidar_nonfinite),
    IngressCodec("lidar_points_deskewed", ("sensor_msgs/msg/PointCloud2",), _lidar_points_deskewed,
                 "as lidar_points, motion-compensated to the stamp with each point's time and the ego's odometry "
                 "(docs/SENSORS.md, \"LiDAR drivers\"); as measured without odometry or per-point time",
                 nonfinite=_lidar_nonfinite, uses_motion=True),
    IngressCodec("radar_points", ("sensor_msgs/msg/PointCloud2",), _radar_points,
                 "PointCloud2 with doppler and rcs -> (R, 5) float32 x, y, z, doppler, rcs; "
                 "rejected if any is non-finite", nonfinite=_radar_nonfinite),
    IngressCodec("image_rgb", ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage"), _image_rgb,
                 "Image (rgb8, bgr8, rgba8, bgra8, mono8, mono16, 16UC1, rgb16, ..., bayer_rggb8/bggr8/gbrg8/grbg8 "
                 "and their 16-bit forms) -> (H, W, 3) uint8 RGB (16 bit scaled to 8, Bayer demosaiced); in a "
                 "replay also a CompressedImage topic (as compressed_image; a live node subscribes to Image)",
                 nonfinite=lambda msg, value: None),
    IngressCodec("compressed_image", ("sensor_msgs/msg/CompressedImage",), _compressed_image,
                 "CompressedImage (jpeg via simplejpeg, png via Pillow; image_transport's \"rgb8; jpeg compressed "
                 "bgr8\") -> (H, W, 3) uint8 RGB", nonfinite=lambda msg, value: None),
    IngressCodec("odometry", ("nav_msgs/msg/Odometry",), _odometry,
                 "Odometry -> (6,) float64 x, y, yaw, vx, yaw_rate, stamp seconds; rejected if a field it reads "
                 "is non-finite", nonfinite=_odometry_nonfinite),
    IngressCodec("route", ("nav_msgs/msg/Path",), _route,
                 "Path (map frame) -> route (K, 2) float32 x, y and count (1,) int32; rejected if any is non-finite",
                 roles=("route", "count"), nonfinite=lambda msg, value: _any_nonfinite(value, ("x", "y"))),
)}


def decode(codec: IngressCodec, msg: Any, topic: str, motion: EgoMotion | None = None) -> dict[str, np.ndarray]:
    """Run a codec: {role: array}; every decoding failure becomes an ``IngressError`` naming the topic,
    and NaN/Inf the stack must not see a ``NonFiniteError`` (see the module's doc). ``motion`` goes to
    the codecs that use it (``uses_motion``)."""
    try:
        out = codec.decode(msg, topic, motion) if codec.uses_motion else codec.decode(msg, topic)
        out = out if isinstance(out, dict) else {"value": out}
    except IngressError:
        raise
    except (CodecError, AttributeError, ValueError, TypeError, IndexError) as e:
        raise IngressError(f"topic {topic}: {codec.name} could not decode the message ({e})") from None
    why = codec.nonfinite(msg, out)
    if why is not None:
        raise NonFiniteError(f"topic {topic}: {codec.name}: {why}; rejected")
    return out
