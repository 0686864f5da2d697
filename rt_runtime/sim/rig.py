"""Sensor rig: intrinsics, extrinsics (base_link -> sensor), rates, noise and latency of each sensor."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np


def rot_rpy(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """3x3 rotation R = Rz(yaw) Ry(pitch) Rx(roll) (ROS fixed-axis convention)."""
    cr, sr, cp, sp, cy, sy = np.cos(roll), np.sin(roll), np.cos(pitch), np.sin(pitch), np.cos(yaw), np.sin(yaw)
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


# optical frame (z forward, x right, y down) expressed in a sensor link frame (x forward, z up)
LINK_FROM_OPTICAL = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


@dataclass(frozen=True)
class Mount:
    """Pose of a sensor frame in base_link (rear axle centre on the ground, x forward, z up)."""

    x: float
    y: float
    z: float
    roll: float = 0.0
    pitch: float = 0.0
    yaw: float = 0.0

    @property
    def translation(self) -> np.ndarray:
        """Sensor origin in base_link."""
        return np.array([self.x, self.y, self.z])

    @property
    def rotation(self) -> np.ndarray:
        """Rotation base_link <- sensor link frame."""
        return rot_rpy(self.roll, self.pitch, self.yaw)


@dataclass(frozen=True)
class CameraModel:
    """Pinhole camera (no distortion) publishing rgb8 images."""

    width: int = 640
    height: int = 384
    fx: float = 400.0
    fy: float = 400.0
    cx: float = 319.5
    cy: float = 191.5
    rate_hz: float = 20.0
    mount: Mount = Mount(1.6, 0.0, 1.45, pitch=np.deg2rad(2.0))
    noise_sigma: float = 3.0  # grey levels
    max_depth: float = 300.0
    latency_s: float = 0.015
    frame_id: str = "camera_optical_link"

    @property
    def rotation_optical(self) -> np.ndarray:
        """Rotation base_link <- camera optical frame."""
        return self.mount.rotation @ LINK_FROM_OPTICAL

    @property
    def k(self) -> np.ndarray:
        """3x3 intrinsic matrix."""
        return np.array([[self.fx, 0, self.cx], [0, self.fy, self.cy], [0, 0, 1.0]])


@dataclass(frozen=True)
class LidarModel:
    """Spinning LiDAR: `beams` rings, `columns` firings per turn, organized (beams x columns) clouds."""

    beams: int = 32
    columns: int = 1800
    min_elev_deg: float = -25.0
    max_elev_deg: float = 15.0
    rate_hz: float = 10.0
    mount: Mount = Mount(1.2, 0.0, 1.9)
    max_range: float = 120.0
    min_range: float = 1.0
    range_sigma: float = 0.02
    dropout: float = 0.01  # base probability of a lost return
    latency_s: float = 0.005  # after the end of the sweep
    frame_id: str = "lidar_link"

    def elevations(self) -> np.ndarray:
        """Beam elevations (rad), ring 0 lowest; denser near the horizon like automotive units."""
        u = np.linspace(-1.0, 1.0, self.beams)
        span = (self.max_elev_deg - self.min_elev_deg) / 2
        mid = (self.max_elev_deg + self.min_elev_deg) / 2
        return np.deg2rad(mid + span * np.sign(u) * np.abs(u) ** 1.5)

    def azimuths(self) -> np.ndarray:
        """Column azimuths (rad), counter-clockwise from straight behind, in firing order."""
        return -np.pi + 2 * np.pi * (np.arange(self.columns) + 0.5) / self.columns


@dataclass(frozen=True)
class RadarModel:
    """Front radar: detections with doppler (relative radial velocity) and RCS."""

    rate_hz: float = 20.0
    mount: Mount = Mount(3.8, 0.0, 0.5)
    fov_deg: float = 120.0
    max_range: float = 150.0
    range_sigma: float = 0.15
    azimuth_sigma_deg: float = 0.5
    doppler_sigma: float = 0.1
    p_detect: float = 0.95
    clutter_mean: float = 6.0  # ground / roadside returns per frame
    false_alarm_mean: float = 1.5
    latency_s: float = 0.010
    frame_id: str = "radar_link"


@dataclass(frozen=True)
class Rig:
    """All sensors of the ego vehicle, plus odometry and ground-truth rates."""

    camera: CameraModel = field(default_factory=CameraModel)
    lidar: LidarModel = field(default_factory=LidarModel)
    radar: RadarModel = field(default_factory=RadarModel)
    odom_rate_hz: float = 50.0
    odom_latency_s: float = 0.002
    gt_rate_hz: float = 20.0

    @staticmethod
    def small() -> "Rig":
        """A low-resolution rig for fast tests (same geometry, fewer pixels and rays)."""
        return Rig(camera=CameraModel(width=160, height=96, fx=100.0, fy=100.0, cx=79.5, cy=47.5),
                   lidar=LidarModel(beams=16, columns=360))

    def describe(self) -> dict:
        """Plain-data description (for the bag's metadata)."""
        d = asdict(self)
        d["camera"]["K"] = self.camera.k.tolist()
        d["lidar"]["elevations_deg"] = np.rad2deg(self.lidar.elevations()).round(4).tolist()
        return _plain(d)


def _plain(x: object) -> object:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x
