"""Open-loop quality of a replay's outputs against the bag's ground truth (docs/QUALITY.md).

Ground truth (``/ground_truth/objects``, map frame, 20 Hz from the simulator) is taken at any
instant from its nearest sample, moved by the objects' velocities over the time in between.
Every figure compares an output with the world at the instant the output describes:

* Detection, tracked objects (``detection``): every published track set is matched to the ground
  truth at its publish time, within ``RANGE_M`` of the ego: greedy nearest pairs by centre
  distance in the map plane, a pair counts when it is within ``MATCH_M``. Precision = TP / (TP +
  FP), recall = TP / (TP + FN), summed over all instants.
* Detection, LiDAR (``detection.lidar``): each published box set is matched against the objects
  as the sweep it came from saw them. The sensor spins (no motion compensation), so each object
  is taken at the instant the beam swept across it and brought into ``base_link`` with the ego's
  odometry at that instant. An object counts (``care``) within ``RANGE_M`` and with at least
  ``MIN_LIDAR_POINTS`` returns above the ground inside its box in that very sweep; a box matched
  to an object that does not count is neither a hit nor a false alarm. Matching: greedy by centre
  distance within ``MATCH_M``, class-agnostic.
* Detection, camera (``detection.camera``): the objects are projected into the image of the frame
  the detector read (ego pose interpolated at the frame's stamp, the recording rig's camera): the
  tight rectangle of the 8 corners. As in ``pipelines/train_camera.py``: rectangles under
  ``MIN_HEIGHT_PX``, less than half inside the frame or less than half visible behind nearer boxes
  (scenery included, when the bag names its scenario) do not count; greedy by score, a detection
  is a hit at IoU >= ``IOU_MIN`` with an unmatched counting rectangle.
* Tracking (``tracking``): CLEAR MOT over the published confirmed tracks, each set compared with
  the ground truth at the track state's own time (the odometry stamp the tracker predicted to,
  ``fusion/last_t``), within ``RANGE_M``; objects not seen in the latest LiDAR sweep do not count
  (a track coasting on one is ignored). Correspondences of the previous instant are kept while
  within ``MATCH_M``, the rest matched greedily; an ID switch is an object matched to another
  track id than its last one. MOTA = 1 - (FN + FP + IDSW) / GT; position RMSE over matched pairs.
* Planning (``planning``): every published trajectory is checked against where the ground-truth
  objects actually were at each of its points' times (the recording's future, so this is open
  loop). A plan's time 0 is the odometry stamp the planning job read (its release is its publish
  time minus its deadline under LET). The ego is three discs of radius ``EGO_RADIUS_M`` along its
  length; an object is its oriented box. The clearance is the smallest disc-to-box distance; a
  trajectory collides when it is below zero within its horizon (points past the end of the
  recording are not judged). Also: the largest jerk along any plan and progress (mean planned
  speed, planned distance over the horizon, and the ratio of planned distance to the distance the
  recorded ego drove over the same time, summed over plans, over the part of each horizon the
  recording covers, at least ``MIN_PROGRESS_S``). Other road users in a recording react to the
  recorded ego, not to the plan, and the plan is judged over its whole horizon though it is
  replanned every cycle: open loop is pessimistic where others would yield or the next plan would
  correct, and blind to what arises only once the ego leaves the recorded path (docs/QUALITY.md).

LiDAR, camera and the track state times need channels that are not egressed: the replay keeps
copies of them for this function (``quality_from_outputs.channels``, see ``replay``) and hands
over the stack configuration, from which the producing task's deadline and input topic come.
"""
from .common import (
    BOX_MARGIN_M, CAMERA_BOXES, CAMERA_COUNT, CHANNELS, EGO_DISC_OFFSETS_M, EGO_RADIUS_M, EgoPath,
    GROUND_BAND_M, GT_SLACK_NS, GT_TOPIC, IOU_MIN, LIDAR_BOXES, LIDAR_COUNT, LOOSE_MATCH_M, MATCH_M,
    MIN_HEIGHT_PX, MIN_INSIDE, MIN_LIDAR_POINTS, MIN_PROGRESS_S, MIN_VISIBLE, PLAN_STATUS, RANGE_M,
    STACK_CLASSES, TRACK_TIME, greedy_pairs, gt_at, load_ground_truth, match_with_care,
)
from .detection import (
    CameraGeometry, LidarGeometry, box_iou, camera_detection_quality, detection_quality,
    lidar_detection_quality, lidar_view, match_camera, project_boxes,
)
from .motion import (
    planning_quality, tracking_quality,
)
from .evaluate import (
    quality_from_outputs,
)

__all__ = [
    "BOX_MARGIN_M", "CAMERA_BOXES", "CAMERA_COUNT", "CHANNELS", "CameraGeometry",
    "EGO_DISC_OFFSETS_M", "EGO_RADIUS_M", "EgoPath", "GROUND_BAND_M", "GT_SLACK_NS", "GT_TOPIC",
    "IOU_MIN", "LIDAR_BOXES", "LIDAR_COUNT", "LOOSE_MATCH_M", "LidarGeometry", "MATCH_M",
    "MIN_HEIGHT_PX", "MIN_INSIDE", "MIN_LIDAR_POINTS", "MIN_PROGRESS_S", "MIN_VISIBLE",
    "PLAN_STATUS", "RANGE_M", "STACK_CLASSES", "TRACK_TIME", "box_iou", "camera_detection_quality",
    "detection_quality", "greedy_pairs", "gt_at", "lidar_detection_quality", "lidar_view",
    "load_ground_truth", "match_camera", "match_with_care", "planning_quality", "project_boxes",
    "quality_from_outputs", "tracking_quality",
]
