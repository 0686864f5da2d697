"""Scenario simulator: a seeded driving world, sensor models and bag recording.

Pure core: ``road`` (geometry), ``scenarios`` (what happens), ``world`` (dynamics -> Trajectory),
``camera`` / ``lidar`` / ``radar`` (frames as numpy arrays). Adapter: ``record`` turns frames
into ROS messages and writes them with ``rt_runtime.bag``.
"""
from .record import TOPICS, Summary, record
from .rig import CameraModel, LidarModel, Mount, RadarModel, Rig
from .road import Road
from .scenarios import DEFAULT_SCENARIO, SCENARIOS, Scenario, build_scenario
from .world import Trajectory, check_outcome, outcome, simulate

__all__ = ["TOPICS", "Summary", "record", "CameraModel", "LidarModel", "Mount", "RadarModel", "Rig", "Road",
           "DEFAULT_SCENARIO", "SCENARIOS", "Scenario", "build_scenario", "Trajectory", "check_outcome", "outcome",
           "simulate"]
