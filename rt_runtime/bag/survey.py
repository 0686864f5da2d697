"""What a bag holds, as the stack sees it: per topic the type, count, rate, message size, which ingress
codec fits it and which sensor role it can play; the time span; the calibration it carries.

``survey(reader)`` reads the bag's index (types, counts, times) and only the first few messages of
each topic (sizes, a cloud's fields, a header's frame), so it takes about the same time on a
minute of recording as on an hour.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .calibration import BagCalibration, read_calibration
from .image import RGB8_ENCODINGS
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
    # LiDAR, over the sampled sweeps: the farthest return (m from the sensor); with per-point times, their
    # mean after the header stamp (s: the instant a sweep describes on average), the turn's duration
    # (s, + counter-clockwise seen from above) and the azimuth fired at the mean time (sensor frame, rad)
    max_range_m: float | None = None
    mean_point_time_s: float | None = None
    spin_s: float | None = None
    mid_azimuth: float | None = None


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
        if first.encoding not in RGB8_ENCODINGS:   # a depth map (32FC1) or a format no codec reads
            return None, f"{first.width}x{first.height} {first.encoding}: not a camera image the stack reads"
        return "camera", f"{first.width}x{first.height} {first.encoding}"
    if msgtype == COMPRESSED and first is not None:
        return "camera", f"format {first.format!r}"   # its size: once decoded (``survey``)
    if msgtype == ODOMETRY:
        return "odometry", f"{first.header.frame_id} -> {first.child_frame_id}" if first is not None else ""
    if msgtype == PATH and "route" in topic.lower():
        return "route", f"{len(first.poses)} poses" if first is not None else ""
    return None, ""


def _spin(az: np.ndarray, t: np.ndarray) -> tuple[float, float] | None:
    """(s per turn, + counter-clockwise; azimuth at the mean time) of a sweep's points by a line through
    (time, unwrapped azimuth); None when the points were not fired over a turn (one instant, or no spin)."""
    order = np.argsort(t, kind="stable")
    t, a = t[order].astype(np.float64), np.unwrap(az[order].astype(np.float64))
    span = float(t[-1] - t[0]) if len(t) > 1 else 0.0
    if span <= 1e-4:
        return None
    w, a0 = np.polyfit(t - t.mean(), a, 1)
    if abs(w) * span < np.pi:   # less than half a turn: not a spinning sensor's sweep
        return None
    return float(2 * np.pi / w), float((a0 + np.pi) % (2 * np.pi) - np.pi)


def _lidar_extent(samples: list[tuple[int, Any]]) -> tuple[float | None, float | None, float | None, float | None]:
    """The farthest return, the mean per-point time after the stamp, the turn and the azimuth fired at the
    mean time (``_spin``) over a LiDAR topic's sampled sweeps (medians)."""
    from .lidar_layouts import point_times
    from .pointcloud import cloud_stamp_ns, cloud_to_array

    far, times, spins = None, [], []
    for _, msg in samples:
        if msg is None:
            continue
        try:
            pts = cloud_to_array(msg)
            layout = driver_layout(pts.dtype.names)
            flat = pts.reshape(-1)
            xyz = np.stack([flat[c].astype(np.float64) for c in ("x", "y", "z")], 1)
            # a return at the origin is a driver's no-return (Ouster writes zeros), not a point at 0 m
            ok = np.isfinite(xyz).all(1) & (np.abs(xyz).sum(1) > 0)
            t = point_times(pts, layout, cloud_stamp_ns(msg))
        except Exception:  # noqa: BLE001 - an undecodable sample says nothing about the sensor
            continue
        if ok.any():
            r = float(np.sqrt((xyz[ok] ** 2).sum(1)).max())
            far = r if far is None else max(far, r)
            if t is not None and np.isfinite(t[ok]).all():
                times.append(float(np.mean(t[ok], dtype=np.float64)))
                spin = _spin(np.arctan2(xyz[ok, 1], xyz[ok, 0]), t[ok])
                if spin is not None:
                    spins.append(spin)
    med = (lambda v: float(np.median(v)) if v else None)   # noqa: E731
    mid = float(np.arctan2(sum(np.sin(a) for _, a in spins), sum(np.cos(a) for _, a in spins))) if spins else None
    return far, med(times), med([s for s, _ in spins]), mid   # the azimuths' circular mean: +-pi is one direction


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
        if role == "lidar":
            lidar = out.topics[topic]
            lidar.max_range_m, lidar.mean_point_time_s, lidar.spin_s, lidar.mid_azimuth = _lidar_extent(samples)
    sensors = [t for t, s in out.topics.items() if s.role in ("lidar", "radar", "camera")]
    out.calibration = read_calibration(reader, sensors)
    for topic, (w, h) in out.calibration.image_sizes.items():
        if out.topics[topic].msgtype == COMPRESSED:
            out.topics[topic].detail = f"{w}x{h}, {out.topics[topic].detail}"
    return out
