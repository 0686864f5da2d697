"""What a bag holds, as the stack sees it: per topic the type, count, rate, message size, which ingress
codec fits it and which sensor role it can play; the time span; the calibration it carries.

``survey(reader)`` reads the bag's index (types, counts, times) and only the first few messages of
each topic (sizes, a cloud's fields, a header's frame), so it takes about the same time on a
minute of recording as on an hour.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .calibration import BagCalibration, read_calibration
from .lidar_layouts import driver_layout

SAMPLED = 8   # messages read per topic for sizes and fields
RADAR_DOPPLER = ("doppler", "velocity", "vr", "radial_velocity")
IMAGE = "sensor_msgs/msg/Image"
COMPRESSED = "sensor_msgs/msg/CompressedImage"
CLOUD = "sensor_msgs/msg/PointCloud2"
ODOMETRY = "nav_msgs/msg/Odometry"
PATH = "nav_msgs/msg/Path"


@dataclass
class TopicSurvey:
    """One topic: what it is and how the stack can read it."""

    topic: str
    msgtype: str
    count: int
    rate_hz: float
    mean_bytes: float | None
    codecs: tuple[str, ...]    # ingress codecs that decode it
    role: str | None           # lidar, radar, camera, odometry, route (None: not a stack input)
    detail: str = ""           # e.g. the LiDAR driver layout, the image encoding, the frame


@dataclass
class BagSurvey:
    """A bag's topics, time span and calibration."""

    path: str
    storage: str
    start_ns: int
    duration_ns: int
    topics: dict[str, TopicSurvey] = field(default_factory=dict)
    calibration: BagCalibration = field(default_factory=BagCalibration)

    def by_role(self, role: str) -> list[TopicSurvey]:
        """The topics that can play ``role``, the most messages first (then by name)."""
        return sorted((t for t in self.topics.values() if t.role == role), key=lambda t: (-t.count, t.topic))


def _samples(reader: Any, topic: str) -> list[tuple[int, Any]]:
    """(raw size, decoded message or None) of a topic's first messages."""
    out = []
    for m in reader.messages([topic], damaged=True):
        if m.damage is not None:
            continue
        try:
            msg = reader.decode(m)
        except Exception:  # noqa: BLE001 - an undecodable sample is still a size
            msg = None
        out.append((len(m.raw_cdr), msg))
        if len(out) >= SAMPLED:
            break
    return out


def _role(msgtype: str, topic: str, first: Any) -> tuple[str | None, str]:
    """The sensor role a topic can play, and a detail line."""
    if msgtype == CLOUD and first is not None:
        names = tuple(f.name for f in first.fields)
        if "rcs" in names and any(n in names for n in RADAR_DOPPLER):
            return "radar", f"{first.width * first.height} points, fields {', '.join(names)}"
        layout = driver_layout(names)
        if layout is None:
            return None, f"fields {', '.join(names)}: no x, y, z"
        shape = f"{first.height}x{first.width} organized" if first.height > 1 else f"{first.width} points"
        timed = f", per-point time '{layout.time}'" if layout.time else ", no per-point time"
        return "lidar", f"{layout.name} layout ({shape}, point_step {first.point_step}{timed})"
    if msgtype == IMAGE and first is not None:
        return "camera", f"{first.width}x{first.height} {first.encoding}"
    if msgtype == COMPRESSED and first is not None:
        return "camera", f"format {first.format!r}"
    if msgtype == ODOMETRY:
        return "odometry", f"{first.header.frame_id} -> {first.child_frame_id}" if first is not None else ""
    if msgtype == PATH and "route" in topic.lower():
        return "route", f"{len(first.poses)} poses" if first is not None else ""
    return None, ""


def survey(reader: Any) -> BagSurvey:
    """Survey an open ``BagReader`` (see the module's doc)."""
    from ..io import INGRESS_CODECS

    seconds = reader.duration_ns / 1e9
    out = BagSurvey(str(reader.path), reader.storage, reader.start_ns, reader.duration_ns)
    for topic, msgtype in sorted(reader.topics.items()):
        count = reader.counts.get(topic, 0)
        samples = _samples(reader, topic) if count else []
        first = next((m for _, m in samples if m is not None), None)
        role, detail = _role(msgtype, topic, first)
        codecs = tuple(n for n, c in INGRESS_CODECS.items() if msgtype in c.msgtypes)
        if msgtype == CLOUD:   # a cloud's fields say which of the two cloud codecs reads it
            codecs = tuple(c for c in codecs if c.startswith("radar") == (role == "radar")) if role else ()
        rate = (count - 1) / seconds if count > 1 and seconds > 0 else 0.0
        size = sum(n for n, _ in samples) / len(samples) if samples else None
        out.topics[topic] = TopicSurvey(topic, msgtype, count, rate, size, codecs, role, detail)
    sensors = [t for t, s in out.topics.items() if s.role in ("lidar", "radar", "camera")]
    out.calibration = read_calibration(reader, sensors)
    return out
