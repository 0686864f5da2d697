"""LiDAR drivers' PointCloud2 layouts, built byte for byte as each driver builds its message.

Each cloud below is packed with ``struct`` from the driver's own field list (name, offset, datatype,
point_step), independently of the numpy dtype machinery the decoder uses, and decoded through the
ingress codec the stack runs: x, y, z, intensity in the documented convention (0..255), and each
point's time since the stamp. The source of each layout is cited at its builder.
"""
from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from rt_runtime.bag import cloud_to_array, from_cdr, header, msg_class, to_cdr
from rt_runtime.bag.deskew import deskew
from rt_runtime.bag.lidar_layouts import driver_layout, point_intensity, point_times
from rt_runtime.io import INGRESS_CODECS
from rt_runtime.io.ingress import EgoMotion, IngressError, decode

F32, F64, U8, U16, U32 = 7, 8, 2, 4, 6
STAMP_NS = 1_700_000_000_250_000_000
RNG = np.random.default_rng(3)
N = 40


def cloud(fields: list[tuple[str, int, int]], step: int, rows: list[bytes], height: int = 1,
          frame: str = "lidar") -> object:
    """A PointCloud2 exactly as a driver fills one: its fields, point_step, the packed points, CDR round trip."""
    field_cls = msg_class("sensor_msgs/msg/PointField")
    width = len(rows) // height
    msg = msg_class("sensor_msgs/msg/PointCloud2")(
        header=header(STAMP_NS, frame), height=height, width=width,
        fields=[field_cls(name=n, offset=o, datatype=d, count=1) for n, o, d in fields], is_bigendian=False,
        point_step=step, row_step=step * width, data=np.frombuffer(b"".join(rows), np.uint8), is_dense=False)
    return from_cdr(to_cdr(msg), "sensor_msgs/msg/PointCloud2")   # what a bag gives back


def points():
    xyz = RNG.uniform(-30, 30, (N, 3)).astype(np.float32)
    xyz[5] = np.nan   # a missing return, as the drivers mark it
    return xyz, RNG.uniform(0, 255, N).astype(np.float32), np.sort(RNG.uniform(0, 0.1, N))


def check(msg, layout: str, xyz, intensity, t_s, time_tol: float = 2e-6):
    out = decode(INGRESS_CODECS["lidar_points"], msg, "/points")["value"]
    ok = np.isfinite(xyz).all(axis=1)
    np.testing.assert_array_equal(out[:, :3], xyz[ok])
    np.testing.assert_allclose(out[:, 3], intensity[ok], rtol=0, atol=1e-4)
    pts = cloud_to_array(msg)
    lay = driver_layout(pts.dtype.names)
    assert lay is not None and lay.name == layout
    if t_s is not None:
        np.testing.assert_allclose(point_times(pts, lay, STAMP_NS), t_s, rtol=0, atol=time_tol)


def test_velodyne_xyzirt():
    # ros-drivers/velodyne: velodyne_pointcloud/src/lib/pointcloudXYZIRT.cpp -- setPointCloud2Fields(6, x, y, z,
    # intensity FLOAT32, ring UINT16, time FLOAT32): packed offsets 0, 4, 8, 12, 16, 18; point_step 22.
    xyz, inten, t = points()
    rows = [struct.pack("<ffffHf", *xyz[i], inten[i], i % 16, t[i]) for i in range(N)]
    msg = cloud([("x", 0, F32), ("y", 4, F32), ("z", 8, F32), ("intensity", 12, F32), ("ring", 16, U16),
                 ("time", 18, F32)], 22, rows)
    check(msg, "velodyne", xyz, inten, t.astype(np.float32))


def test_velodyne_organized_marks_no_return_with_nan_intensity_too():
    # ros-drivers/velodyne: velodyne_pointcloud/src/lib/organized_cloudXYZIRT.cpp -- one row per firing
    # (height grows), width = lasers; an out-of-range point gets NaN x, y, z and intensity.
    xyz, inten, t = points()
    inten = inten.copy()
    inten[5] = np.nan
    rows = [struct.pack("<ffffHf", *xyz[i], inten[i], i % 8, t[i]) for i in range(N)]
    msg = cloud([("x", 0, F32), ("y", 4, F32), ("z", 8, F32), ("intensity", 12, F32), ("ring", 16, U16),
                 ("time", 18, F32)], 22, rows, height=5)
    check(msg, "velodyne", xyz, inten, t.astype(np.float32))


def test_ouster_48_byte_padded_point_uses_reflectivity_and_ns_time():
    # ouster-lidar/ouster-ros: ouster-ros/include/ouster_ros/os_point.h -- EIGEN_ALIGN16 PCL_ADD_POINT4D (x, y, z +
    # pad), float intensity (signal) @16, uint32 t (ns) @20, uint16 reflectivity @24, ring @26, ambient @28,
    # uint32 range @32; sizeof 48. Organized: rows = beams.
    xyz, _, t = points()
    signal = RNG.uniform(0, 3000, N).astype(np.float32)          # photons: not 0..255
    refl = RNG.integers(0, 300, N).astype(np.uint16)             # 8-bit calibrated, above 255 clipped
    t_ns = (t * 1e9).astype(np.uint32)
    rows = [struct.pack("<fff4xfIHHH2xI12x", *xyz[i], signal[i], t_ns[i], refl[i], i % 8, 7, 12345)
            for i in range(N)]
    fields = [("x", 0, F32), ("y", 4, F32), ("z", 8, F32), ("intensity", 16, F32), ("t", 20, U32),
              ("reflectivity", 24, U16), ("ring", 26, U16), ("ambient", 28, U16), ("range", 32, U32)]
    msg = cloud(fields, 48, rows, height=8)
    check(msg, "ouster", xyz, np.minimum(refl, 255).astype(np.float32), (t_ns * 1e-9).astype(np.float32))


def test_hesai_ros2_absolute_seconds():
    # HesaiTechnology/HesaiLidar_ROS_2.0: src/manager/source_driver_ros2.hpp ToRosMsg -- addPointField x, y, z,
    # intensity FLOAT32, ring UINT16, timestamp FLOAT64 (packed: 18, point_step 26); stamp = frame start,
    # timestamp = each point's absolute time in seconds.
    xyz, inten, t = points()
    rows = [struct.pack("<ffffHd", *xyz[i], inten[i], i % 32, STAMP_NS * 1e-9 + t[i]) for i in range(N)]
    msg = cloud([("x", 0, F32), ("y", 4, F32), ("z", 8, F32), ("intensity", 12, F32), ("ring", 16, U16),
                 ("timestamp", 18, F64)], 26, rows)
    check(msg, "hesai_robosense", xyz, inten, t, time_tol=1e-6)


def test_robosense_xyzirt_sent_by_rows_is_organized():
    # RoboSense-LiDAR/rslidar_sdk: src/source/source_pointcloud_ros.hpp toRosMsg (ROS 2, POINT_TYPE_XYZIRT) --
    # x, y, z, intensity FLOAT32, ring UINT16, timestamp FLOAT64; ros_send_by_rows: height = rows.
    xyz, inten, t = points()
    rows = [struct.pack("<ffffHd", *xyz[i], inten[i], i // 10, STAMP_NS * 1e-9 + t[i]) for i in range(N)]
    msg = cloud([("x", 0, F32), ("y", 4, F32), ("z", 8, F32), ("intensity", 12, F32), ("ring", 16, U16),
                 ("timestamp", 18, F64)], 26, rows, height=4)
    check(msg, "hesai_robosense", xyz, inten, t, time_tol=1e-6)


def test_livox_pointcloud2_absolute_ns_as_double():
    # Livox-SDK/livox_ros_driver2: src/lddc.cpp InitPointcloud2MsgHeader -- x, y, z @0/4/8, intensity FLOAT32 @12
    # (reflectivity), tag UINT8 @16, line UINT8 @17, timestamp FLOAT64 @18, point_step sizeof(LivoxPointXyzrtlt)
    # = 26 (packed); timestamp = static_cast<double>(offset_time), nanoseconds since the epoch.
    xyz, inten, t = points()
    rows = [struct.pack("<ffffBBd", *xyz[i], inten[i], 0, i % 6, float(STAMP_NS + int(t[i] * 1e9)))
            for i in range(N)]
    msg = cloud([("x", 0, F32), ("y", 4, F32), ("z", 8, F32), ("intensity", 12, F32), ("tag", 16, U8),
                 ("line", 17, U8), ("timestamp", 18, F64)], 26, rows)
    check(msg, "livox", xyz, inten, t, time_tol=1e-6)


def test_autoware_xyzirc_uint8_intensity():
    # autowarefoundation/autoware_core: common/autoware_point_types/include/autoware/point_types/types.hpp --
    # PointXYZIRC: float x, y, z; uint8 intensity @12, uint8 return_type @13, uint16 channel @14; 16 bytes.
    xyz, inten, _ = points()
    i8 = inten.astype(np.uint8)
    rows = [struct.pack("<fffBBH", *xyz[i], i8[i], 1, i % 16) for i in range(N)]
    msg = cloud([("x", 0, F32), ("y", 4, F32), ("z", 8, F32), ("intensity", 12, U8), ("return_type", 13, U8),
                 ("channel", 14, U16)], 16, rows)
    check(msg, "autoware_xyzirc", xyz, i8.astype(np.float32), None)
    assert point_times(cloud_to_array(msg), driver_layout(cloud_to_array(msg).dtype.names), STAMP_NS) is None


def test_autoware_xyzircaedt_ns_offsets():
    # Same file -- PointXYZIRCAEDT: ... channel @14, float azimuth @16, elevation @20, distance @24,
    # uint32 time_stamp @28 (ns since header.stamp); 32 bytes.
    xyz, inten, t = points()
    i8, t_ns = inten.astype(np.uint8), (t * 1e9).astype(np.uint32)
    rows = [struct.pack("<fffBBHfffI", *xyz[i], i8[i], 1, i % 16, 0.1, 0.2, 10.0, t_ns[i]) for i in range(N)]
    msg = cloud([("x", 0, F32), ("y", 4, F32), ("z", 8, F32), ("intensity", 12, U8), ("return_type", 13, U8),
                 ("channel", 14, U16), ("azimuth", 16, F32), ("elevation", 20, F32), ("distance", 24, F32),
                 ("time_stamp", 28, U32)], 32, rows)
    check(msg, "autoware_xyzircaedt", xyz, i8.astype(np.float32), (t_ns * 1e-9).astype(np.float32))


def test_intensity_is_clipped_to_the_convention_and_absent_is_none():
    pts = np.zeros(3, [("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<f4")])
    pts["intensity"] = [10.0, 255.0, 4000.0]
    assert point_intensity(pts, driver_layout(pts.dtype.names)).tolist() == [10.0, 255.0, 255.0]
    xyz_only = np.zeros(2, [("x", "<f4"), ("y", "<f4"), ("z", "<f4")])
    assert point_intensity(xyz_only, driver_layout(xyz_only.dtype.names)) is None
    assert driver_layout(("a", "b")) is None


@pytest.mark.parametrize("height", [1, 4])
def test_four_floats_in_a_row_decode_as_one_block_with_the_same_conventions(height):
    # x, y, z, intensity as four float32 at consecutive offsets (PCL PointXYZI; the simulator's, Velodyne's, Hesai's
    # and Livox's clouds start so) take the ingress's one-copy path: the same rule for clipping, no-returns and
    # NaN/Inf, into an array of the codec's own (not a view of the message, which the channel would adopt).
    xyz, inten, _ = points()
    inten = inten.copy()
    inten[[3, 4]] = [300.0, 255.5]   # clipped to 255
    inten[5] = np.inf                # on a no-return point, dropped with it: the sweep is kept
    msg = cloud([("x", 0, F32), ("y", 4, F32), ("z", 8, F32), ("intensity", 12, F32)], 16,
                [struct.pack("<ffff", *xyz[i], inten[i]) for i in range(N)], height=height)
    out = decode(INGRESS_CODECS["lidar_points"], msg, "/points")["value"]
    ok = np.isfinite(xyz).all(axis=1)
    assert out.dtype == np.float32 and out.flags.c_contiguous and out.flags.writeable
    assert not np.shares_memory(out, msg.data)
    np.testing.assert_array_equal(out[:, :3], xyz[ok])
    np.testing.assert_array_equal(out[:, 3], np.minimum(inten, 255.0)[ok])
    inten[6] = np.inf                # on a kept point: the sweep is rejected
    bad = cloud([("x", 0, F32), ("y", 4, F32), ("z", 8, F32), ("intensity", 12, F32)], 16,
                [struct.pack("<ffff", *xyz[i], inten[i]) for i in range(N)], height=height)
    with pytest.raises(IngressError, match="non-finite value.*in intensity"):
        decode(INGRESS_CODECS["lidar_points"], bad, "/points")


def sweep(vx: float, yaw_rate: float, mount=(1.2, 0.3, 1.9, 0.2)):
    """Static world points seen by a sensor on a moving ego, each fired at its own time: (raw, times, truth)."""
    world = RNG.uniform(-40, 40, (400, 3))   # in base_link at the stamp
    world[:, 2] = RNG.uniform(-1.5, 2.0, 400)
    t = np.linspace(0.0, 0.1, 400)
    th = yaw_rate * t
    if yaw_rate:
        dx, dy = vx / yaw_rate * np.sin(th), vx / yaw_rate * (1 - np.cos(th))
    else:
        dx, dy = vx * t, 0 * t
    mx, my, _, myaw = mount

    def to_sensor(bx, by):
        x, y = bx - mx, by - my
        return np.cos(myaw) * x + np.sin(myaw) * y, -np.sin(myaw) * x + np.cos(myaw) * y
    # base_link at time t: the world point seen from the ego's pose then
    bx = np.cos(th) * (world[:, 0] - dx) + np.sin(th) * (world[:, 1] - dy)
    by = -np.sin(th) * (world[:, 0] - dx) + np.cos(th) * (world[:, 1] - dy)
    raw = np.column_stack([*to_sensor(bx, by), world[:, 2]]).astype(np.float32)
    truth = np.column_stack([*to_sensor(world[:, 0], world[:, 1]), world[:, 2]]).astype(np.float32)
    return raw, t.astype(np.float32), truth


@pytest.mark.parametrize("vx,yaw_rate", [(27.0, 0.0), (12.0, 0.5), (0.0, -0.8)])
def test_deskew_undoes_the_ego_motion_during_a_sweep(vx, yaw_rate):
    raw, t, truth = sweep(vx, yaw_rate)
    assert np.abs(raw - truth).max() > 0.5, "the sweep is distorted before compensation"
    np.testing.assert_allclose(deskew(raw, t, vx, yaw_rate, (1.2, 0.3, 1.9, 0.2)), truth, atol=2e-4)


def test_deskewed_codec_compensates_with_the_odometry_and_leaves_a_still_ego_alone():
    raw, t, truth = sweep(20.0, 0.3, mount=(0.0, 0.0, 0.0, 0.0))
    inten = np.full(len(raw), 9.0, np.float32)
    rows = [struct.pack("<ffffHf", *raw[i], inten[i], 0, t[i]) for i in range(len(raw))]
    msg = cloud([("x", 0, F32), ("y", 4, F32), ("z", 8, F32), ("intensity", 12, F32), ("ring", 16, U16),
                 ("time", 18, F32)], 22, rows)
    codec = INGRESS_CODECS["lidar_points_deskewed"]
    motion = EgoMotion()
    motion.update(np.array([0.0, 0.0, 0.0, 20.0, 0.3, 0.0]))
    out = decode(codec, msg, "/points", motion)["value"]
    np.testing.assert_allclose(out[:, :3], truth, atol=2e-4)
    assert out[:, 3].tolist() == inten.tolist()
    for still in (None, EgoMotion()):   # no odometry yet: the points as measured
        np.testing.assert_array_equal(decode(codec, msg, "/points", still)["value"][:, :3], raw)


def test_a_cloud_without_xyz_is_one_clear_error():
    msg = cloud([("a", 0, F32)], 4, [struct.pack("<f", 1.0)] * 3)
    with pytest.raises(IngressError, match=r"/points.*x.*y.*z"):
        decode(INGRESS_CODECS["lidar_points"], msg, "/points")


def test_deskew_keeps_a_straight_wall_straight():
    # a wall 20 m ahead across the road, swept while driving at 27 m/s: the raw wall is slanted by 2.7 m
    y = np.linspace(-10, 10, 200)
    t = np.linspace(0, 0.1, 200).astype(np.float32)
    raw = np.column_stack([20.0 - 27.0 * t, y, np.zeros(200)]).astype(np.float32)
    out = deskew(raw, t, 27.0, 0.0)
    assert np.ptp(raw[:, 0]) == pytest.approx(2.7, abs=1e-3)
    assert np.ptp(out[:, 0]) < 1e-4 and math.isclose(float(out[0, 0]), 20.0, abs_tol=1e-4)


def test_a_sweep_is_compensated_to_the_latest_odometry_stamp():
    # the points are placed as seen from where the ego is at the odometry's stamp (what the fusion uses)
    raw, t, _ = sweep(15.0, 0.2, mount=(0.0, 0.0, 0.0, 0.0))
    rows = [struct.pack("<ffffHf", *raw[i], 1.0, 0, t[i]) for i in range(len(raw))]
    msg = cloud([("x", 0, F32), ("y", 4, F32), ("z", 8, F32), ("intensity", 12, F32), ("ring", 16, U16),
                 ("time", 18, F32)], 22, rows)
    motion = EgoMotion()
    motion.update(np.array([0.0, 0.0, 0.0, 15.0, 0.2, STAMP_NS * 1e-9 + 0.105]))
    out = decode(INGRESS_CODECS["lidar_points_deskewed"], msg, "/points", motion)["value"]
    np.testing.assert_allclose(out[:, :3], deskew(raw, t - np.float32(0.105), 15.0, 0.2), atol=1e-4)
    assert np.abs(out[:, :3] - deskew(raw, t, 15.0, 0.2)).max() > 1.0, "a different reference time"
