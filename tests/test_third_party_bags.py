"""Recordings this project did not make give objects, configured the documented way.

A bag is built at test time from the committed real recordings (tests/data/third_party/README.md: one
revolution of a real Velodyne VLP-16 from MRPT, OpenCV's 768x576 vtest.avi street video), in each
LiDAR layout and camera encoding ``inspect`` recognizes, with nothing else in it (no radar,
odometry, tf or CameraInfo). Then what a new user does: ``rt-runtime inspect BAG --config-out
mine.yaml``, ``rt-runtime replay BAG --config mine.yaml``. No job may abort, no invariant may fire
on the real data (a false alarm), and ``/perception/objects`` must be published with objects in it.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from rt_runtime.bag import cloud_to_array, open_bag
from rt_runtime.bag.lidar_layouts import driver_layout

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import third_party_bags as tp  # noqa: E402

SECONDS = 2.0   # 20 sweeps, 20 frames


def test_vlp16_packets_decode_to_one_real_revolution():
    # the committed MRPT file holds 75 VLP-16 packets: one 10 Hz revolution, 1800 firings of 16 lasers
    packets = tp.vlp16_packets(tp.VLP16_RAWLOG)
    assert packets.shape == (75, 1206) and set(packets[:, 1205]) == {0x22}
    sweep = tp.decode_vlp16(packets)
    assert sweep.xyz.shape == (1800, 16, 3)
    assert 0.099 < sweep.duration_s < 0.1005
    returns = sweep.distance > 0
    assert returns.sum() == 22591
    azimuth = np.degrees(np.arctan2(sweep.xyz[..., 1], sweep.xyz[..., 0]))[returns]
    assert azimuth.min() < -179 and azimuth.max() > 179              # all around
    elevation = np.degrees(np.arcsin(sweep.xyz[..., 2][returns] / sweep.distance[returns]))
    np.testing.assert_allclose(np.unique(np.round(elevation)), tp.ELEVATION_DEG[np.argsort(tp.ELEVATION_DEG)])


def test_layouts_are_the_drivers_and_inspect_names_them(tmp_path):
    bags = tp.build_bags(tmp_path, 0.3, ("mcap",), cameras=("jpeg",))
    with open_bag(bags[0]) as bag:
        velodyne = cloud_to_array(bag.decode(next(bag.messages(["/velodyne_points"]))))
    with open_bag(bags[1]) as bag:
        ouster = cloud_to_array(bag.decode(next(bag.messages(["/ouster/points"]))))
    assert velodyne.dtype.itemsize == 22 and velodyne.ndim == 1 and driver_layout(velodyne.dtype.names).name == "velodyne"
    assert -0.1 < velodyne["time"].min() < -0.09 and 0 <= velodyne["time"].max() < 0.002   # stamped at the last packet
    assert ouster.dtype.itemsize == 48 and ouster.shape == (16, 1800) and driver_layout(ouster.dtype.names).name == "ouster"
    missing = ouster["range"] == 0
    assert missing.any() and (ouster["x"][missing] == 0).all()        # ouster-ros: a missing return is zeros


# the two LiDAR layouts, the two camera encodings and the two storages, each once (a replay takes ~30 s here)
@pytest.mark.parametrize("lidar, camera, storage", [("velodyne", "bgr8", "mcap"), ("ouster", "jpeg", "sqlite3")])
def test_documented_flow_on_a_third_party_recording_publishes_objects_without_false_alarms(
        tmp_path, lidar, camera, storage):
    bag = tp.build_bags(tmp_path, SECONDS, (storage,), lidars=(lidar,), cameras=(camera,))[0]
    row = tp.flow(bag)   # rt-runtime inspect BAG --config-out BAG.yaml; rt-runtime replay BAG --config BAG.yaml
    assert row["inspect_rc"] == 0 and row.get("replay_rc") == 0, row.get("error_lines")
    assert row["aborted"] == 0 and row["errors"] == 0, (row["tasks"], row["error_lines"])
    assert row["alarms"] == 0, row["tasks"]
    assert row["objects"] > 0 and max(row["tracks"]) > 0, (row["tasks"], row["tracks"])   # objects, not only DELETEALL
