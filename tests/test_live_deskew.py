"""The live node compensates a LiDAR sweep with the odometry that arrived before it, as replay does."""
from __future__ import annotations

import struct

import numpy as np
import torch

from rt_runtime.bag import msg_class, to_cdr
from rt_runtime.bag.types import header, quaternion_from_yaw, vector3
from rt_runtime.config.stack import IngressRoute
from rt_runtime.io import INGRESS_CODECS
from rt_runtime.io.ingress import EgoMotion, decode
from rt_runtime.ros.inputs import Ingress

from test_lidar_layouts import F32, STAMP_NS, U16, cloud, sweep
from test_ros_offline import FakeDriver


def odometry(vx: float, yaw_rate: float, t_ns: int):
    g = "geometry_msgs/msg/"
    pose = msg_class(g + "Pose")(position=msg_class(g + "Point")(x=0.0, y=0.0, z=0.0),
                                 orientation=quaternion_from_yaw(0.0))
    twist = msg_class(g + "Twist")(linear=vector3(vx, 0.0, 0.0), angular=vector3(0.0, 0.0, yaw_rate))
    return msg_class("nav_msgs/msg/Odometry")(
        header=header(t_ns, "map"), child_frame_id="base_link",
        pose=msg_class(g + "PoseWithCovariance")(pose=pose, covariance=np.zeros(36)),
        twist=msg_class(g + "TwistWithCovariance")(twist=twist, covariance=np.zeros(36)))


def test_the_live_ingress_deskews_with_the_odometry_received_before_the_sweep() -> None:
    routes = [IngressRoute("/odom", "odometry", {"value": "ego/odom"}),
              IngressRoute("/points", "lidar_points_deskewed", {"value": "lidar/points"})]
    drv = FakeDriver()
    ing = Ingress(routes, drv, lambda a: torch.from_numpy(a if a.flags.writeable else a.copy()))
    cb = {r.topic: ing.callback(r) for r in routes}
    raw, t, _ = sweep(20.0, 0.3, mount=(0.0, 0.0, 0.0, 0.0))
    rows = [struct.pack("<ffffHf", *raw[i], 1.0, 0, t[i]) for i in range(len(raw))]
    msg = cloud([("x", 0, F32), ("y", 4, F32), ("z", 8, F32), ("intensity", 12, F32), ("ring", 16, U16),
                 ("time", 18, F32)], 22, rows)
    odom = odometry(20.0, 0.3, STAMP_NS)
    cb["/points"](to_cdr(msg))   # before any odometry: the points as measured
    cb["/odom"](to_cdr(odom))
    cb["/points"](to_cdr(msg))
    clouds = [data.numpy() for ch, _, data in drv.pushed if ch == "lidar/points"]
    motion = EgoMotion()
    motion.update(decode(INGRESS_CODECS["odometry"], odom, "/odom")["value"])
    want = decode(INGRESS_CODECS["lidar_points_deskewed"], msg, "/points", motion)["value"]
    np.testing.assert_array_equal(clouds[0][:, :3], raw)
    np.testing.assert_array_equal(clouds[1], want)
    assert np.abs(clouds[1][:, :3] - raw).max() > 0.5, "the sweep was compensated"
    assert ing.health["/points"].bad == 0
