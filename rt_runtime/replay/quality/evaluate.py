"""Every quality measure from a replay's retained outputs and its bag (``quality_from_outputs``)."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...bag import open_bag
from ...bag.objects import Objects
from .common import (
    CAMERA_BOXES,
    CAMERA_COUNT,
    CHANNELS,
    LIDAR_BOXES,
    LIDAR_COUNT,
    MIN_LIDAR_POINTS,
    PLAN_STATUS,
    RANGE_M,
    TRACK_TIME,
    EgoPath,
    gt_at,
    load_ground_truth,
)
from .detection import (
    CameraGeometry,
    LidarGeometry,
    camera_detection_quality,
    detection_quality,
    lidar_detection_quality,
    lidar_view,
    project_boxes,
)
from .motion import planning_quality, tracking_quality


# ---- from a replay's outputs -----------------------------------------------------------------------
def _producer(cfg: Any, channel: str, codec: str) -> tuple[int, str] | None:
    """(read-to-publish interval ns, input topic) of the task writing ``channel`` and its ``codec`` input:
    under LET a job reads at its release and publishes its deadline later; a chain member reads at the
    chain's release and publishes with the chain, its deadline later."""
    if cfg is None:
        return None
    by_channel = {ch: r.topic for r in cfg.ingress if r.codec == codec for ch in r.channels.values()}
    chained = {n: c.deadline_ns for c in cfg.chains if c.deadline_ns is not None for n in c.tasks}
    for task in cfg.tasks:
        e = cfg.entries[task.name]
        if channel in (e.get("outputs") or {}).values():
            for ch in (e.get("inputs") or {}).values():
                if ch in by_channel:
                    return int(chained.get(task.name, task.deadline)), by_channel[ch]
    return None


def _series(channels: Mapping[str, list[tuple[int, np.ndarray]]], name: str) -> dict[int, np.ndarray]:
    return dict(sorted(channels.get(name, []), key=lambda p: p[0]))


def _rows(values: dict[int, np.ndarray], counts: dict[int, np.ndarray]) -> list[tuple[int, np.ndarray]]:
    return [(t, v[: int(counts[t].reshape(-1)[0])]) for t, v in values.items() if t in counts]


def _sim_metadata(reader: Any) -> dict[str, Any]:
    try:
        return json.loads(reader.metadata.get("rt_runtime.sim", "") or "{}")
    except (ValueError, AttributeError):
        return {}


def _header_stamp(cdr: bytes) -> int:
    """The std_msgs/Header stamp at the start of a CDR message (Image, PointCloud2)."""
    order = "<" if cdr[1] == 1 else ">"
    sec, nsec = np.frombuffer(cdr[4:12], np.dtype(f"{order}i4")).tolist()
    return int(sec) * 1_000_000_000 + (int(nsec) & 0xFFFFFFFF)


def _read_by(log_ns: list[int], release_ns: int) -> int | None:
    i = int(np.searchsorted(np.asarray(log_ns, np.int64), release_ns, side="right")) - 1
    return i if i >= 0 else None


def _lidar_frames(reader: Any, topic: str, deadline_ns: int, boxes: list[tuple[int, np.ndarray]], start_ns: int,
                  gt: list[Objects], times: np.ndarray, ego: EgoPath, meta: dict[str, Any]
                  ) -> tuple[list[tuple[np.ndarray, Objects, np.ndarray]], dict[int, set[int]]]:
    """LiDAR frames for ``lidar_detection_quality``, and the objects seen by each sweep (by sweep stamp)."""
    from ...bag import cloud_to_array

    rig = meta.get("rig", {}).get("lidar", {})
    lidar = LidarGeometry(rig.get("rate_hz", 10.0), rig.get("mount"))
    logs = [m.t_ns for m in reader.messages([topic])]  # which sweep each job read: a first, light pass
    wanted: dict[int, list[np.ndarray]] = {}
    for t, rows in boxes:
        i = _read_by(logs, start_ns + t - deadline_ns)
        if i is not None:
            wanted.setdefault(logs[i], []).append(rows)
    frames, visible = [], {}
    for msg in reader.messages([topic]):
        if msg.t_ns not in wanted:
            continue
        cloud = cloud_to_array(reader.decode(msg), topic).reshape(-1)
        xyz = np.stack([cloud["x"], cloud["y"], cloud["z"]], 1).astype(np.float64)
        xyz = xyz[np.isfinite(xyz).all(1)]
        sweep = _header_stamp(msg.raw_cdr)
        seen, counts = lidar_view(xyz, sweep, gt, times, ego, lidar)
        visible[sweep] = {int(k) for k, n in zip(seen.ids, counts) if n >= MIN_LIDAR_POINTS}
        frames += [(rows, seen, counts) for rows in wanted.pop(msg.t_ns)]
    return frames, visible


def _camera_frames(reader: Any, topic: str, deadline_ns: int, boxes: list[tuple[int, np.ndarray]], start_ns: int,
                   gt: list[Objects], times: np.ndarray, ego: EgoPath, meta: dict[str, Any]
                   ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Camera frames for ``camera_detection_quality``."""
    rig = meta.get("rig", {}).get("camera", {})
    cam = CameraGeometry(**{k: rig[k] for k in ("width", "height", "fx", "fy", "cx", "cy", "mount") if k in rig})
    static = np.zeros((0, 8))
    if "scenario" in meta and "seed" in meta:  # scenery hides road users too: the same z-buffer as training
        try:
            from ...sim import build_scenario

            static = build_scenario(meta["scenario"], int(meta["seed"])).static
        except (KeyError, ValueError):
            pass
    heads = [(m.t_ns, _header_stamp(m.raw_cdr)) for m in reader.messages([topic])]
    logs = [h[0] for h in heads]
    frames = []
    for t, det in boxes:
        i = _read_by(logs, start_ns + t - deadline_ns)
        if i is None:
            continue
        stamp = heads[i][1]
        g = gt_at(gt, times, stamp)
        x, y, yaw = (float(v) for v in ego.pose(stamp))
        near = np.hypot(static[:, 0] - x, static[:, 1] - y) < 320.0 if len(static) else np.zeros(0, bool)
        rects, care = project_boxes(cam, (x, y, yaw), np.vstack([g.boxes.reshape(-1, 7), static[near, :7]]))
        n = len(g)
        frames.append((det, rects[:n], g.classes.astype(np.int64) - 1, care[:n]))
    return frames


def quality_from_outputs(bag_path: str | Path, retained: dict[str, list[tuple[int, dict[str, np.ndarray]]]],
                         start_ns: int, ego: list[tuple[int, np.ndarray]], *,
                         channels: Mapping[str, list[tuple[int, np.ndarray]]] | None = None,
                         cfg: Any = None) -> dict[str, Any] | None:
    """Every measure the outputs allow, when the bag carries ground truth; None otherwise.

    ``retained``: egress groups per codec, (t, {role: array}) with t relative to ``start_ns``;
    ``ego``: the odometry pushed, (log ns, value); ``channels``: copies of non-egressed channels'
    publications (t, array); ``cfg``: the StackConfig, for producers' deadlines and input topics.
    """
    gt = load_ground_truth(bag_path)
    if not gt:
        return None
    times = np.array([g.t_ns for g in gt], np.int64)
    path = EgoPath(ego)
    channels = channels or {}

    def ego_xy(log_ns: int) -> np.ndarray:
        return path.xy_logged(log_ns) if len(path) else np.zeros(2)

    markers = retained.get("markers", [])
    tracks = [(start_ns + t, v["tracks"][: int(v["count"].reshape(-1)[0])]) for t, v in markers]
    # Each track set is judged at its state's own time (the odometry stamp the tracker predicted to),
    # not at its publish instant: how late an output becomes visible is the data age's business.
    state_t = _series(channels, TRACK_TIME)
    t_states = [int(round(float(state_t[t].reshape(-1)[0]) * 1e9)) if t in state_t else t_abs
                for (t, _v), (t_abs, _rows) in zip(markers, tracks)]
    detection = detection_quality([(ts, rows, ego_xy(ts)) for ts, (_, rows) in zip(t_states, tracks)], gt)

    visible: dict[int, set[int]] = {}
    reader = None
    try:
        lidar_src, camera_src = _producer(cfg, LIDAR_BOXES, "lidar_points"), _producer(cfg, CAMERA_BOXES, "image_rgb")
        lidar_boxes = _rows(_series(channels, LIDAR_BOXES), _series(channels, LIDAR_COUNT))
        camera_boxes = _rows(_series(channels, CAMERA_BOXES), _series(channels, CAMERA_COUNT))
        if len(path) and ((lidar_src and lidar_boxes) or (camera_src and camera_boxes)):
            reader = open_bag(bag_path)
            meta = _sim_metadata(reader)
            if lidar_src and lidar_boxes and lidar_src[1] in reader.topics:
                frames, visible = _lidar_frames(reader, lidar_src[1], lidar_src[0], lidar_boxes, start_ns, gt, times,
                                                path, meta)
                detection["lidar"] = lidar_detection_quality(frames)
            if camera_src and camera_boxes and camera_src[1] in reader.topics:
                detection["camera"] = camera_detection_quality(
                    _camera_frames(reader, camera_src[1], camera_src[0], camera_boxes, start_ns, gt, times, path, meta))
    finally:
        if reader is not None:
            reader.close()

    # Tracking: each track set at its state's time (the odometry stamp it was predicted to).
    sweeps = np.array(sorted(visible), np.int64)
    track_frames = []
    for t_state, (_, rows) in zip(t_states, tracks):
        g = gt_at(gt, times, t_state)
        if len(path):
            xe, ye, _ = path.pose(t_state)
            exy = np.array([float(xe), float(ye)])
        else:
            exy = np.zeros(2)
        care = np.hypot(*(g.boxes[:, :2] - exy).T) <= RANGE_M if len(g) else np.zeros(0, bool)
        if len(sweeps):  # what the latest sweep by then saw
            k = int(np.searchsorted(sweeps, t_state, side="right")) - 1
            seen = visible[int(sweeps[k])] if k >= 0 else set()
            care &= np.array([int(i) in seen for i in g.ids], bool).reshape(-1)
        counted = np.hypot(*(rows[:, 2:4].astype(np.float64) - exy).T) <= RANGE_M if len(rows) else np.zeros(0, bool)
        track_frames.append((rows, g, care, counted))

    # Planning: time 0 of a plan is the odometry stamp its job read at release (publish - deadline).
    plan_src = _producer(cfg, _plan_channel(cfg), "odometry")
    trajs = []
    for t, v in retained.get("path", []):
        t0 = start_ns + t
        if plan_src is not None and len(path):
            stamp = path.stamp_read_at(start_ns + t - plan_src[0])
            t0 = stamp if stamp is not None else t0
        trajs.append((t0, v["trajectory"]))
    status_s = _series(channels, PLAN_STATUS)
    status = [int(status_s[t].reshape(-1)[0]) for t, _ in retained.get("path", []) if t in status_s] \
        if status_s else None
    return {"detection": detection, "tracking": tracking_quality(track_frames),
            "planning": planning_quality(trajs, gt, path if len(path) else None, status)}


def _plan_channel(cfg: Any) -> str:
    """The channel the ``path`` egress route publishes (config/stack.yaml: planning/trajectory)."""
    for r in getattr(cfg, "egress", []) or []:
        if r.codec == "path":
            return next(iter(r.channels.values()))
    return "planning/trajectory"


# The replay keeps copies of these channels' publications for this function (see ``replay``).
quality_from_outputs.channels = CHANNELS  # type: ignore[attr-defined]

