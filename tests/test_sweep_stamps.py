"""LiDAR boxes carry their sweep's stamp: the tracks of still objects stay where the objects are while the ego moves.

A fusion job reads the odometry of its release, ~140 ms after the sweep's stamp (docs/QUALITY.md); the
boxes were fired 0-100 ms after the stamp. Placed with the odometry's pose, a still object's track ran
ahead by the ego's speed x that gap (1.8 m at 20 m/s); placed with the pose at each box's firing time
(``sweep_pose``: stamp + ``sweep_offset`` + the turn's share of ``sweep_spin``), it stays put.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pipelines import schema
from pipelines.tracking import (TrackerParams, build_fusion_tracking_graph, initial_tracker_state, stamps,
                                tracker_feedback)
from rt_runtime.exec import GraphExecutor

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPEED, PERIOD, READ_AFTER = 20.0, 0.1, 0.14     # m/s; s between sweeps; odometry stamp after the sweep's stamp
STILL = [(40.0, 6.0), (-15.0, -4.0), (8.0, 12.0)]  # map: ahead left, behind right, beside
# the rig's LiDAR: a sweep stamped at its start, turning counter-clockwise from straight behind in 100 ms
SIM = {"sweep_offset": 0.05, "sweep_spin": 0.1, "sweep_mid": 0.0}


def fired(x: float, y: float) -> float:
    """When, after the stamp, the rig's LiDAR fires at azimuth atan2(y, x)."""
    return (math.atan2(y, x) + math.pi) / (2 * math.pi) * PERIOD


def sweep(k: int) -> tuple[torch.Tensor, int]:
    """The boxes of sweep k (base_link at each box's firing time) and the sweep's stamp (ns)."""
    stamp = k * PERIOD
    boxes = torch.zeros(schema.MAX_BOXES, len(schema.BOX_COLS))
    for i, (ox, oy) in enumerate(STILL):
        t = stamp + fired(ox - SPEED * (stamp + 0.05), oy)
        for _ in range(3):   # the firing time depends on where the ego is then
            t = stamp + fired(ox - SPEED * t, oy)
        boxes[i] = torch.tensor([ox - SPEED * t, oy, 0.75, 4.5, 1.9, 1.5, 0.0, 0.8])
    return boxes, round(stamp * 1e9)


def track_errors(**tracker: float) -> tuple[np.ndarray, np.ndarray]:
    """Each still object's distance to the nearest confirmed track after 12 sweeps, and the tracks' speeds."""
    ex = GraphExecutor(build_fusion_tracking_graph(tracker=TrackerParams(**tracker)))
    state = initial_tracker_state()
    one = lambda v: torch.tensor([v], dtype=torch.int32)  # noqa: E731
    for k in range(12):
        boxes, stamp_ns = sweep(k)
        t_odom = k * PERIOD + READ_AFTER
        out = ex.run({"boxes": boxes, "box_count": one(len(STILL)),
                      "radar_objects": torch.zeros(schema.MAX_RADAR_OBJECTS, len(schema.RADAR_OBJ_COLS)),
                      "radar_object_count": one(0),
                      "camera_boxes": torch.zeros(schema.MAX_CAMERA_BOXES, len(schema.CAM_COLS)),
                      "camera_box_count": one(0),
                      "odom": torch.tensor([SPEED * t_odom, 0.0, 0.0, SPEED, 0.0, t_odom], dtype=torch.float64),
                      **stamps(round(t_odom * 1e9), stamp_ns), **state})
        state = tracker_feedback(out)
    tracks = out["tracks"][: int(out["confirmed_count"])].double().numpy()
    assert len(tracks) == len(STILL) and float(out["last_t"][0]) == t_odom   # the tracks are the odometry's instant
    truth = np.array(STILL)
    return np.array([np.hypot(*(tracks[:, 2:4] - p).T).min() for p in truth]), np.hypot(tracks[:, 4], tracks[:, 5])


def test_a_still_objects_track_stays_at_it_while_the_ego_drives_by():
    where, speed = track_errors(**SIM)
    assert where.max() < 0.05 and speed.max() < 0.05, (where, speed)   # noise-free boxes: exact to rounding


def test_placed_at_the_odometrys_instant_a_still_object_runs_ahead_by_speed_times_the_gap():
    # what the tracker did before the boxes carried their sweep's stamp: every box at the odometry's time
    where, _ = track_errors(sweep_offset=READ_AFTER)
    assert where.min() > 0.5 * SPEED * (READ_AFTER - PERIOD), where



def test_without_odometry_the_sweeps_stamps_are_the_time_and_a_passing_object_is_tracked():
    """A perception-only stack (a bag with no odometry: ``odom`` optional, never written): a parked car
    passes at 20 m/s in base_link, 2 m per sweep. With no time between sweeps (before) its track never
    saw a second hit inside the gate and was never confirmed: no /perception/objects on a real drive."""
    ex = GraphExecutor(build_fusion_tracking_graph(tracker=TrackerParams(**SIM)))
    state = initial_tracker_state()
    one = lambda v: torch.tensor([v], dtype=torch.int32)  # noqa: E731
    never = torch.tensor([0, -1, 0, 1, 0], dtype=torch.int64)   # an optional input's default: seq -1, stale
    for k in range(8):
        boxes = torch.zeros(schema.MAX_BOXES, len(schema.BOX_COLS))
        boxes[0] = torch.tensor([40.0 - SPEED * (k * PERIOD + fired(40.0 - SPEED * k * PERIOD, 5.0)), 5.0, 0.75,
                                 4.5, 1.9, 1.5, 0.0, 0.8])
        meta = stamps(0, round(k * PERIOD * 1e9))
        out = ex.run({"boxes": boxes, "box_count": one(1),
                      "radar_objects": torch.zeros(schema.MAX_RADAR_OBJECTS, len(schema.RADAR_OBJ_COLS)),
                      "radar_object_count": one(0),
                      "camera_boxes": torch.zeros(schema.MAX_CAMERA_BOXES, len(schema.CAM_COLS)),
                      "camera_box_count": one(0), "odom": torch.zeros(6, dtype=torch.float64),
                      **meta, "odom.meta": never, **state})
        state = tracker_feedback(out)
    assert int(out["confirmed_count"]) == 1
    track = out["tracks"][0].double()
    assert float(track[4]) == pytest.approx(-SPEED, abs=0.5) and abs(float(track[5])) < 0.5   # relative velocity
    assert float(out["last_t"][0]) == pytest.approx(7 * PERIOD + SIM["sweep_offset"])    # the sweep's instant
