"""CDR compatibility between rclpy and the rosbags codecs the node uses (no DDS: serialization only)."""
from __future__ import annotations

import array

import numpy as np
import pytest
import torch

from rt_runtime.ros.env import prepare_environment

prepare_environment()
pytest.importorskip("rclpy", reason="the ros extra is not installed")

from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402

from rt_runtime.bag import to_cdr  # noqa: E402
from rt_runtime.config.stack import IngressRoute  # noqa: E402
from rt_runtime.io import EGRESS_CODECS  # noqa: E402
from rt_runtime.ros.diagnostics import build  # noqa: E402
from rt_runtime.ros.inputs import Ingress  # noqa: E402
from rt_runtime.ros.msgtypes import ros_class  # noqa: E402


class Driver:
    def __init__(self) -> None:
        self.pushed: dict[str, torch.Tensor] = {}

    def now(self) -> int:
        return 0

    def push(self, channel: str, t_ns: int, data: torch.Tensor, stamp_ns: int = -1) -> bool:
        self.pushed[channel] = data
        return True

    def to_logical(self, ros_ns: int) -> int:
        return ros_ns


def test_messages_serialized_by_rclpy_decode_through_the_raw_ingress_path() -> None:
    PointCloud2, PointField, Image = (ros_class(f"sensor_msgs/msg/{n}") for n in ("PointCloud2", "PointField", "Image"))
    pts = np.zeros(5, [("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("pad", "<f4"), ("intensity", "<f4")])
    pts["x"], pts["intensity"] = np.arange(5), 7.0
    layout = (("x", 0), ("y", 4), ("z", 8), ("intensity", 16))     # padding at 12..16
    cloud = PointCloud2(height=1, width=5, point_step=20, row_step=100, is_dense=True,
                        fields=[PointField(name=n, offset=o, datatype=7, count=1) for n, o in layout])
    cloud.data = array.array("B", pts.tobytes())
    img = Image(height=2, width=3, encoding="bgr8", step=9, data=array.array("B", range(18)))
    drv = Driver()
    ing = Ingress([IngressRoute("/l", "lidar_points", {"value": "l"}), IngressRoute("/c", "image_rgb", {"value": "c"})],
                  drv, torch.from_numpy)
    ing.callback(ing.routes[0])(serialize_message(cloud))
    ing.callback(ing.routes[1])(serialize_message(img))
    assert ing.health["/l"].bad == ing.health["/c"].bad == 0
    assert drv.pushed["l"][:, 0].tolist() == [0, 1, 2, 3, 4] and drv.pushed["l"][:, 3].tolist() == [7.0] * 5
    assert drv.pushed["c"][0, 0].tolist() == [2, 1, 0]           # bgr8 -> rgb


def test_what_the_node_publishes_is_cdr_that_rclpy_reads() -> None:
    traj = np.zeros((3, 5))
    traj[:, 0] = [1.0, 2.0, 3.0]
    path = deserialize_message(to_cdr(EGRESS_CODECS["path"].encode({"trajectory": traj}, 5_000_000_123, "map")),
                               ros_class("nav_msgs/msg/Path"))
    assert path.header.frame_id == "map" and path.header.stamp.nanosec == 123 and path.poses[2].pose.position.x == 3
    tracks = np.zeros((4, 12))
    tracks[0, :9] = [7, 0, 10.0, 2.0, 3.0, 0.0, 0.1, 4.5, 1.8]
    markers = deserialize_message(to_cdr(EGRESS_CODECS["markers"].encode({"tracks": tracks, "count": np.array([1])},
                                                                         0, "map")),
                                  ros_class("visualization_msgs/msg/MarkerArray"))
    assert [m.action for m in markers.markers] == [3, 0] and markers.markers[1].id == 7
    stats = {"tasks": {"planning": {"released": 1, "mode": "fallback"}}, "channels": {}, "stalled": {}}
    diag = deserialize_message(to_cdr(build(0, stats, {}, {}, {"mode": "wall"}, {})),
                               ros_class("diagnostic_msgs/msg/DiagnosticArray"))
    assert diag.status[0].message == "degraded" and diag.status[0].level == b"\x02"
