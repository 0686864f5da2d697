"""Calibration a bag carries: camera intrinsics from ``CameraInfo``, sensor mounts from ``/tf_static``
(and ``/tf``).

``read_calibration(reader, sensor_topics)`` reads the first ``CameraInfo`` of each camera-info topic, the
frame size of each camera topic (its first message, decoded as the ingress decodes it),
every transform of ``/tf_static`` and, from ``/tf``, the transforms between frames that are not a
world frame (``map``, ``odom``, ...: the ego's pose, not a mount) in its first messages. Chains
(``base_link -> sensor_kit -> lidar``) are composed, so each sensor frame gets its pose in
``base_link``. ``frames`` maps each sensor topic to the ``header.frame_id`` of its first message,
which is how a topic finds its mount.

Camera poses follow REP 103: a ``CameraInfo``'s frame is the optical frame (z forward, x right,
y down); ``camera_pose`` turns it into the body pose (x forward, z up; roll, pitch, yaw) that
``pipelines.camera_model.CameraModel`` takes. The pure parts (``compose``, ``camera_pose``) take
plain values; only ``read_calibration`` reads a bag.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from ..sim.rig import LINK_FROM_OPTICAL   # one definition of the optical-frame axes
from .errors import BagError, CodecError
from .image import frame_size

BASE_FRAME = "base_link"
WORLD_FRAMES = frozenset({"map", "odom", "world", "earth", "viewer"})
TF_MESSAGES_SCANNED = 100   # /tf's first messages: a mount published there repeats in every one
CAMERA_INFO = "sensor_msgs/msg/CameraInfo"
CAMERA_IMAGES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")
TF_MESSAGE = "tf2_msgs/msg/TFMessage"


@dataclass(frozen=True)
class CameraIntrinsics:
    """A ``CameraInfo``: image size, pinhole K and the distortion model and coefficients."""

    topic: str
    frame_id: str
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    distortion_model: str
    d: tuple[float, ...]

    @property
    def distorted(self) -> bool:
        """Whether any distortion coefficient is non-zero."""
        return any(abs(v) > 0.0 for v in self.d)


@dataclass(frozen=True)
class Pose:
    """A frame's pose in ``base_link``: rotation (3x3, base <- frame) and translation (m)."""

    rotation: tuple[tuple[float, float, float], ...]
    translation: tuple[float, float, float]

    def rpy(self) -> tuple[float, float, float]:
        """Roll, pitch, yaw (R = Rz(yaw) Ry(pitch) Rx(roll), ROS's fixed-axis convention)."""
        return rpy(np.array(self.rotation))

    def mount4(self) -> list[float]:
        """[x, y, z, yaw]: the LiDAR graph's ``mount``."""
        return [*(round(v, 6) for v in self.translation), round(self.rpy()[2], 6)]


@dataclass
class BagCalibration:
    """What calibration a bag carries."""

    cameras: dict[str, CameraIntrinsics] = field(default_factory=dict)   # camera-info topic -> intrinsics
    poses: dict[str, Pose] = field(default_factory=dict)                 # frame -> pose in base_link
    frames: dict[str, str] = field(default_factory=dict)                 # sensor topic -> its frame_id
    sources: dict[str, str] = field(default_factory=dict)                # frame -> "/tf_static" or "/tf"
    image_sizes: dict[str, tuple[int, int]] = field(default_factory=dict)   # camera topic -> (width, height)

    def pose_of(self, topic: str) -> Pose | None:
        """The pose in base_link of the frame a sensor topic's messages are in, if the bag has it."""
        frame = self.frames.get(topic)
        return self.poses.get(frame) if frame is not None else None

    def camera_for(self, image_topic: str) -> CameraIntrinsics | None:
        """The intrinsics for an image topic: its sibling ``camera_info`` topic, else the one in its frame,
        else the only one."""
        base = image_topic.rsplit("/", 2)[0] if image_topic.endswith("/compressed") else image_topic.rsplit("/", 1)[0]
        sib = next((c for t, c in sorted(self.cameras.items()) if t.rsplit("/", 1)[0] == base), None)
        if sib is not None:
            return sib
        frame = self.frames.get(image_topic)
        same = [c for c in self.cameras.values() if c.frame_id == frame]
        if same:
            return same[0]
        return next(iter(self.cameras.values())) if len(self.cameras) == 1 else None


# The camera nobody calibrated (no CameraInfo, no args.camera): the reference rig's lens, fx = fy = 0.625 x the
# width (400 px at 640: a 77 degree horizontal field of view), the principal point at the frame's centre.
DEFAULT_FX_PER_WIDTH = 0.625


def default_intrinsics(width: int, height: int) -> dict[str, Any]:
    """The stated default pinhole for a ``width`` x ``height`` frame (``DEFAULT_FX_PER_WIDTH``), no distortion."""
    f = round(DEFAULT_FX_PER_WIDTH * width, 3)
    return {"fx": f, "fy": f, "cx": (width - 1) / 2, "cy": (height - 1) / 2, "width": int(width), "height": int(height)}


def rpy(r: np.ndarray) -> tuple[float, float, float]:
    """Roll, pitch, yaw of a rotation matrix R = Rz(yaw) Ry(pitch) Rx(roll)."""
    pitch = math.asin(max(-1.0, min(1.0, -float(r[2, 0]))))
    return math.atan2(float(r[2, 1]), float(r[2, 2])), pitch, math.atan2(float(r[1, 0]), float(r[0, 0]))


def quat_matrix(x: float, y: float, z: float, w: float) -> np.ndarray:
    """3x3 rotation of a (normalized here) quaternion."""
    n = math.sqrt(x * x + y * y + z * z + w * w) or 1.0
    x, y, z, w = x / n, y / n, z / n, w / n
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def compose(edges: dict[str, tuple[str, np.ndarray, np.ndarray]], base: str = BASE_FRAME) -> dict[str, Pose]:
    """Each frame's pose in ``base`` from child -> (parent, R parent<-child, t) edges; frames not below
    ``base`` are left out (a cycle or a missing link ends the walk)."""
    out: dict[str, Pose] = {}
    for frame in sorted(edges):
        r, t, cur, seen = np.eye(3), np.zeros(3), frame, set()
        while cur != base and cur in edges and cur not in seen:
            seen.add(cur)
            parent, rp, tp = edges[cur]
            r, t = rp @ r, rp @ t + tp
            cur = parent
        if cur == base:
            out[frame] = Pose(tuple(tuple(float(v) for v in row) for row in r), tuple(float(v) for v in t))
    return out


def camera_pose(optical: Pose) -> dict[str, float]:
    """x, y, z, roll, pitch, yaw of a camera body whose optical frame has pose ``optical`` in base_link."""
    body = np.array(optical.rotation) @ LINK_FROM_OPTICAL.T
    roll, pitch, yaw = rpy(body)
    x, y, z = optical.translation
    return {"x": round(x, 6), "y": round(y, 6), "z": round(z, 6), "roll": round(roll, 6), "pitch": round(pitch, 6),
            "yaw": round(yaw, 6)}


def _intrinsics(topic: str, msg: Any) -> CameraIntrinsics:
    k = [float(v) for v in msg.k]
    return CameraIntrinsics(topic, str(msg.header.frame_id), int(msg.width), int(msg.height), k[0], k[4], k[2], k[5],
                            str(msg.distortion_model), tuple(float(v) for v in msg.d))


def _edges(messages: Iterable[Any], edges: dict[str, tuple[str, np.ndarray, np.ndarray]], sources: dict[str, str],
           source: str) -> None:
    for msg in messages:
        for tf in msg.transforms:
            parent, child = str(tf.header.frame_id).lstrip("/"), str(tf.child_frame_id).lstrip("/")
            if child in edges or parent in WORLD_FRAMES or child in WORLD_FRAMES:
                continue   # the first transform of a frame wins; world -> base is the ego's pose, not a mount
            q, tr = tf.transform.rotation, tf.transform.translation
            edges[child] = (parent, quat_matrix(q.x, q.y, q.z, q.w), np.array([tr.x, tr.y, tr.z], float))
            sources[child] = source


def read_calibration(reader: Any, sensor_topics: Iterable[str] = ()) -> BagCalibration:
    """The calibration in an open ``BagReader`` (see the module's doc); messages that do not decode are skipped."""
    cal = BagCalibration()

    def first(topic: str, limit: int = 1) -> list[Any]:
        out = []
        try:
            for m in reader.messages([topic], damaged=True):   # a damaged chunk: the replay reports it, not here
                if m.damage is not None:
                    continue
                try:
                    out.append(reader.decode(m))
                except Exception:  # noqa: BLE001 - an undecodable message carries no calibration
                    continue
                if len(out) >= limit:
                    break
        except BagError:
            pass
        return out

    for topic, msgtype in sorted(reader.topics.items()):
        if msgtype == CAMERA_INFO:
            for msg in first(topic):
                cal.cameras[topic] = _intrinsics(topic, msg)
    edges: dict[str, tuple[str, np.ndarray, np.ndarray]] = {}
    for topic, limit in (("/tf_static", 1 << 30), ("/tf", TF_MESSAGES_SCANNED)):
        if reader.topics.get(topic) == TF_MESSAGE:
            _edges(first(topic, limit), edges, cal.sources, topic)
    cal.poses = compose(edges)
    for topic in sensor_topics:
        if topic in reader.topics:
            msgs = first(topic)
            head = getattr(msgs[0], "header", None) if msgs else None
            if head is not None:
                cal.frames[topic] = str(head.frame_id).lstrip("/")
            if msgs and reader.topics[topic] in CAMERA_IMAGES:
                try:
                    cal.image_sizes[topic] = frame_size(msgs[0], topic)
                except CodecError:
                    pass   # the replay counts an undecodable frame; the size stays unknown
    return cal
