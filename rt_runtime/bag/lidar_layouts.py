"""The PointCloud2 layouts of the common LiDAR drivers, and the two things the stack reads from any
of them beyond x, y, z: intensity, in one convention, and each point's time.

``cloud_to_array`` already decodes any layout by its field offsets; what differs between drivers
is what the fields *mean*. ``driver_layout`` names the driver whose field set a cloud has (the
most specific match first), ``point_intensity`` maps its intensity onto the stack's convention and
``point_times`` gives each point's firing time relative to ``header.stamp``.

**Intensity convention**: float32 from 0 (no return energy) to 255 (the brightest), the range
Velodyne, Hesai, Livox, RoboSense and Autoware's uint8 all use. Ouster's ``intensity`` is the
photon count (signal, unbounded), so its calibrated ``reflectivity`` is used instead. Values
above 255 are clipped to 255; NaN and Inf stay (the ingress rejects them on a kept point).

**Time convention**: float32 seconds since ``header.stamp`` (negative before it). An integer time
field is nanoseconds since the stamp (Ouster ``t``, Autoware ``time_stamp``); a float one is
absolute when it is far from zero (Hesai and RoboSense ``timestamp``: seconds since the epoch;
Livox ``timestamp``: nanoseconds since the epoch) and relative seconds otherwise (Velodyne
``time``, the simulator's ``t``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INTENSITY_MAX = 255.0
TIME_FIELDS = ("t", "time", "time_stamp", "timestamp", "time_offset")
# A float time field whose values exceed these is absolute (since the epoch), in ns or in s.
_ABS_NS = 1e14
_ABS_S = 1e6


@dataclass(frozen=True)
class DriverLayout:
    """One driver's point layout: the field names that identify it, and which carry intensity and time."""

    name: str
    fields: frozenset[str]
    intensity: str | None
    time: str | None
    source: str   # where the layout comes from (repository: path)


# Most specific first: the first layout whose fields a cloud has names it.
LAYOUTS: tuple[DriverLayout, ...] = (
    DriverLayout("ouster", frozenset({"x", "y", "z", "intensity", "t", "reflectivity", "ring", "ambient", "range"}),
                 "reflectivity", "t", "ouster-lidar/ouster-ros: ouster-ros/include/ouster_ros/os_point.h"),
    DriverLayout("autoware_xyzircaedt", frozenset({"x", "y", "z", "intensity", "return_type", "channel", "azimuth",
                                                   "elevation", "distance", "time_stamp"}), "intensity", "time_stamp",
                 "autowarefoundation/autoware_core: common/autoware_point_types/include/autoware/point_types/types.hpp"),
    DriverLayout("autoware_xyzirc", frozenset({"x", "y", "z", "intensity", "return_type", "channel"}), "intensity",
                 None, "autowarefoundation/autoware_core: common/autoware_point_types/include/autoware/point_types/"
                       "types.hpp"),
    DriverLayout("livox", frozenset({"x", "y", "z", "intensity", "tag", "line", "timestamp"}), "intensity",
                 "timestamp", "Livox-SDK/livox_ros_driver2: src/lddc.cpp (InitPointcloud2MsgHeader)"),
    DriverLayout("hesai_robosense", frozenset({"x", "y", "z", "intensity", "ring", "timestamp"}), "intensity",
                 "timestamp", "HesaiTechnology/HesaiLidar_ROS_2.0: src/manager/source_driver_ros2.hpp; "
                              "RoboSense-LiDAR/rslidar_sdk: src/source/source_pointcloud_ros.hpp (XYZIRT)"),
    DriverLayout("velodyne", frozenset({"x", "y", "z", "intensity", "ring", "time"}), "intensity", "time",
                 "ros-drivers/velodyne: velodyne_pointcloud/src/lib/pointcloudXYZIRT.cpp"),
    DriverLayout("rt_runtime_sim", frozenset({"x", "y", "z", "intensity", "ring", "t"}), "intensity", "t",
                 "rt_runtime/sim/lidar.py"),
    DriverLayout("xyzi", frozenset({"x", "y", "z", "intensity"}), "intensity", None, "PCL PointXYZI"),
    DriverLayout("xyz", frozenset({"x", "y", "z"}), None, None, "PCL PointXYZ"),
)


def driver_layout(names: tuple[str, ...] | None) -> DriverLayout | None:
    """The first (most specific) known layout whose fields are all in ``names``; None without x, y, z."""
    have = set(names or ())
    layout = next((lay for lay in LAYOUTS if lay.fields <= have), None)
    if layout is None or layout.time is not None or layout.name.startswith("autoware_xyzirc"):
        return layout
    # A cloud of an unlisted driver may still carry a time field: use it.
    time = next((f for f in TIME_FIELDS if f in have), None)
    return layout if time is None else DriverLayout(layout.name, layout.fields, layout.intensity, time, layout.source)


def point_intensity(points: np.ndarray, layout: DriverLayout | None) -> np.ndarray | None:
    """Flat float32 intensity in the stack's convention (0..255, clipped), or None if the layout has none."""
    if layout is None or layout.intensity is None or layout.intensity not in (points.dtype.names or ()):
        return None
    out = np.array(points.reshape(-1)[layout.intensity], dtype=np.float32)
    # only finite values are clipped: a NaN/Inf intensity stays what it is, for the ingress to reject
    np.putmask(out, np.isfinite(out) & (out > INTENSITY_MAX), np.float32(INTENSITY_MAX))
    return out


def point_times(points: np.ndarray, layout: DriverLayout | None, stamp_ns: int) -> np.ndarray | None:
    """Flat float32 seconds since ``stamp_ns`` of each point (see the module's time convention), or None."""
    if layout is None or layout.time is None or layout.time not in (points.dtype.names or ()):
        return None
    raw = points.reshape(-1)[layout.time]
    if raw.dtype.kind in "iu":
        return (raw.astype(np.float64) * 1e-9).astype(np.float32)
    t = raw.astype(np.float64)
    finite = t[np.isfinite(t)]
    scale = np.abs(finite).max() if finite.size else 0.0
    if scale > _ABS_NS:
        return ((t - float(stamp_ns)) * 1e-9).astype(np.float32)
    if scale > _ABS_S:
        return (t - stamp_ns * 1e-9).astype(np.float32)
    return t.astype(np.float32)
