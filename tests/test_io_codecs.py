"""Ingress decoders and egress encoders: round trips through real message objects and CDR."""
import math

import numpy as np

from rt_runtime.bag import array_to_cloud, array_to_image, from_cdr, to_cdr
from rt_runtime.io import EGRESS_CODECS, INGRESS_CODECS
from rt_runtime.io.egress import diagnostics
from rt_runtime.io.ingress import IngressError, decode


def test_fast_path_cdr_is_byte_identical_to_rosbags():
    rng = np.random.default_rng(0)
    traj = rng.normal(size=(31, 5)).astype(np.float32)
    traj[:, 4] = np.arange(31) * 0.1
    codec = EGRESS_CODECS["path"]
    for t_ns, frame in ((1_700_000_000_123_456_789, "map"), (0, "odom_long_frame_name")):
        assert codec.cdr({"trajectory": traj}, t_ns, frame) == to_cdr(codec.encode({"trajectory": traj}, t_ns, frame))
    msg = from_cdr(codec.to_cdr({"trajectory": traj}, 5_000_000_000, "map"), "nav_msgs/msg/Path")
    assert len(msg.poses) == 31 and msg.header.frame_id == "map"
    p = msg.poses[3]
    assert math.isclose(p.pose.position.x, float(traj[3, 0]), rel_tol=1e-6)
    assert math.isclose(2 * math.atan2(p.pose.orientation.z, p.pose.orientation.w), float(traj[3, 2]), abs_tol=1e-6)
    assert p.header.stamp.sec == 5 and abs(p.header.stamp.nanosec - 300_000_000) < 1_000  # t is float32


def test_markers_fast_path_is_byte_identical_to_rosbags():
    rng = np.random.default_rng(1)
    tracks = rng.normal(size=(64, 12)).astype(np.float32) * 10
    tracks[:, 0] = rng.integers(0, 5000, 64)
    tracks[:, 1] = rng.integers(-1, 6, 64)       # includes classes outside the palette
    tracks[:5, 7:9] = 0.01                        # below the minimum marker size
    codec = EGRESS_CODECS["markers"]
    for n in (0, 1, 7, 64):
        data = {"tracks": tracks, "count": np.array([n], np.int32)}
        for t_ns, frame in ((1_700_000_000_123_456_789, "map"), (3, "a_longer_frame")):
            assert codec.cdr(data, t_ns, frame) == to_cdr(codec.encode(data, t_ns, frame)), (n, frame)


def test_markers_carry_only_the_counted_tracks():
    tracks = np.zeros((64, 12), np.float32)
    tracks[:, 0] = np.arange(64)
    msg = from_cdr(to_cdr(EGRESS_CODECS["markers"].encode({"tracks": tracks, "count": np.array([5], np.int32)},
                                                           10, "map")), "visualization_msgs/msg/MarkerArray")
    assert [m.id for m in msg.markers[1:]] == [0, 1, 2, 3, 4]
    assert msg.markers[0].action == 3  # DELETEALL first


def test_lidar_cloud_without_intensity_still_meets_the_contract():
    pts = np.zeros(4, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4")])
    pts["x"] = [1, 2, np.nan, 4]
    out = decode(INGRESS_CODECS["lidar_points"], array_to_cloud(pts, "lidar", 0), "/l")["value"]
    assert out.shape == (3, 4) and out.dtype == np.float32 and (out[:, 3] == 0).all()


def test_radar_cloud_without_doppler_names_topic_and_fields():
    pts = np.zeros(3, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4")])
    try:
        decode(INGRESS_CODECS["radar_points"], array_to_cloud(pts, "radar", 0), "/sensing/radar/points")
    except IngressError as e:
        assert "/sensing/radar/points" in str(e) and "doppler" in str(e)
    else:
        raise AssertionError("a radar cloud without doppler must be rejected")


def test_bgr_image_becomes_rgb():
    bgr = np.zeros((4, 6, 3), np.uint8)
    bgr[..., 0] = 255  # blue
    rgb = decode(INGRESS_CODECS["image_rgb"], array_to_image(bgr, "bgr8", "cam", 0), "/c")["value"]
    assert rgb.shape == (4, 6, 3) and (rgb[..., 2] == 255).all() and (rgb[..., 0] == 0).all()


def test_diagnostics_level_follows_misses_and_mode():
    msg = diagnostics({"a": {"missed": 0, "mode": "primary"}, "b": {"missed": 2, "mode": "primary"},
                       "c": {"missed": 0, "mode": "fallback"}}, 0)
    levels = {s.name: s.level for s in msg.status}
    assert levels == {"rt_runtime: a": 0, "rt_runtime: b": 1, "rt_runtime: c": 2}
