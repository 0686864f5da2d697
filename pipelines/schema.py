"""The tensors that flow between the reference stack's stages: one place, so stages agree.

Every variable-size set is a fixed-capacity tensor (the static memory plan reserves the bound)
plus a count: rows past the count are garbage and must never be read. Frames: LiDAR and radar
points arrive in their sensor's frame (the graph is given the sensor's mount in ``base_link``);
detections are in the vehicle frame ``base_link`` (x forward, y left, z up);
tracks, predictions and trajectories are in the fixed ``map`` frame of the odometry.
"""
from __future__ import annotations

from rt_runtime import TensorSpec

MAX_POINTS = 131072       # LiDAR points per sweep
MAX_RADAR = 1024          # radar detections per scan
MAX_BOXES = 128           # LiDAR objects per sweep
MAX_RADAR_OBJECTS = 64    # radar clusters per scan
MAX_CAMERA_BOXES = 64     # camera detections per frame
MAX_TRACKS = 64           # tracked objects
HORIZON = 30              # prediction / trajectory steps
DT_S = 0.1                # seconds between prediction / trajectory steps (3 s horizon)
TRAJ_POINTS = HORIZON + 1

# Object classes, shared by ground truth, detectors and tracker.
CLASSES = ("car", "truck", "cyclist", "pedestrian")

# Column layouts (index constants so ops read like the math).
BOX_COLS = ("x", "y", "z", "l", "w", "h", "yaw", "score")             # LiDAR boxes, base_link
RADAR_OBJ_COLS = ("x", "y", "vr", "vx", "vy", "rcs", "n", "score")     # radar clusters, base_link
CAM_COLS = ("u1", "v1", "u2", "v2", "score", "cls")                    # image pixels
TRACK_COLS = ("id", "cls", "x", "y", "vx", "vy", "yaw", "l", "w", "score", "age", "misses")  # map
TRAJ_COLS = ("x", "y", "yaw", "v", "t")                                # map frame, t from plan time
ODOM_COLS = ("x", "y", "yaw", "vx", "yaw_rate", "t")                   # ego pose, map frame


def points(name: str = "points") -> TensorSpec:
    """LiDAR sweep: x, y, z, intensity (float32), up to MAX_POINTS rows."""
    return TensorSpec(name, (f"N<={MAX_POINTS}", 4), "float32")


def radar_points(name: str = "radar") -> TensorSpec:
    """Radar scan: x, y, z, doppler (radial velocity, m/s), rcs."""
    return TensorSpec(name, (f"R<={MAX_RADAR}", 5), "float32")


def image(name: str = "image", height: int = 384, width: int = 640) -> TensorSpec:
    """Camera frame, H x W x 3 uint8 (rgb8)."""
    return TensorSpec(name, (height, width, 3), "uint8")


def odometry(name: str = "odom") -> TensorSpec:
    """Latest ego pose and motion: ODOM_COLS."""
    return TensorSpec(name, (len(ODOM_COLS),), "float64")


def boxes(name: str = "boxes") -> TensorSpec:
    """LiDAR objects: BOX_COLS rows, MAX_BOXES capacity (with a separate count)."""
    return TensorSpec(name, (MAX_BOXES, len(BOX_COLS)), "float32")


def radar_objects(name: str = "radar_objects") -> TensorSpec:
    """Radar clusters: RADAR_OBJ_COLS rows."""
    return TensorSpec(name, (MAX_RADAR_OBJECTS, len(RADAR_OBJ_COLS)), "float32")


def camera_boxes(name: str = "camera_boxes") -> TensorSpec:
    """Camera detections: CAM_COLS rows."""
    return TensorSpec(name, (MAX_CAMERA_BOXES, len(CAM_COLS)), "float32")


def tracks(name: str = "tracks") -> TensorSpec:
    """Tracked objects in the map frame: TRACK_COLS rows."""
    return TensorSpec(name, (MAX_TRACKS, len(TRACK_COLS)), "float32")


def track_covariance(name: str = "track_cov") -> TensorSpec:
    """Kalman covariance per track (state x, y, vx, vy)."""
    return TensorSpec(name, (MAX_TRACKS, 4, 4), "float32")


def predictions(name: str = "predictions") -> TensorSpec:
    """Each track's future (x, y) over HORIZON steps of DT_S, map frame."""
    return TensorSpec(name, (MAX_TRACKS, HORIZON, 2), "float32")


def trajectory(name: str = "trajectory") -> TensorSpec:
    """The committed plan: TRAJ_POINTS rows of TRAJ_COLS, map frame."""
    return TensorSpec(name, (TRAJ_POINTS, len(TRAJ_COLS)), "float32")


def count(name: str) -> TensorSpec:
    """How many rows of a fixed-capacity tensor are valid."""
    return TensorSpec(name, (1,), "int32")


def flag(name: str) -> TensorSpec:
    """A one-element status word (e.g. 0 nominal, 1 minimal-risk)."""
    return TensorSpec(name, (1,), "int32")


# ---- fusion, tracking and planning (added with pipelines/fusion.py .. planning.py) ------------
MAX_FUSED = MAX_BOXES + MAX_RADAR_OBJECTS   # fused objects: every LiDAR box plus radar-only clusters
MAX_ROUTE = 512                             # reference centerline vertices
# Fused objects, base_link. vr: radar range rate (m/s, + receding) when has_vr; cls: index into
# CLASSES; src: bit mask of the sensors that saw it (1 LiDAR, 2 radar, 4 camera).
FUSED_COLS = ("x", "y", "z", "l", "w", "h", "yaw", "score", "cls", "vr", "has_vr", "src")


def fused_objects(name: str = "fused") -> TensorSpec:
    """Object-level fusion of LiDAR, radar and camera: FUSED_COLS rows in base_link."""
    return TensorSpec(name, (MAX_FUSED, len(FUSED_COLS)), "float32")


def track_hits(name: str = "track_hits") -> TensorSpec:
    """Associated detections per track since birth (a track is confirmed at M hits)."""
    return TensorSpec(name, (MAX_TRACKS,), "int32")


def route(name: str = "route") -> TensorSpec:
    """Reference centerline polyline (x, y) in the map frame, with a separate count."""
    return TensorSpec(name, (f"K<={MAX_ROUTE}", 2), "float32")


def timestamp(name: str) -> TensorSpec:
    """One time in seconds (float64, the odometry's clock)."""
    return TensorSpec(name, (1,), "float64")


def scalar(name: str) -> TensorSpec:
    """One float32 value (e.g. a cost)."""
    return TensorSpec(name, (1,), "float32")
