"""Multi-object tracking in the map frame: ego-motion compensation, Kalman filter, assignment, track life.

The tracker is pure: its whole state is graph inputs (``tracks_in``, ``track_cov_in``,
``track_hits_in``, ``track_count_in``, ``next_id_in``, ``last_t_in``) and the same tensors come
out as outputs (``tracks``, ``track_cov``, ...); the runtime feeds one job's outputs back as the
next job's inputs (``STATE_FEEDBACK``), so two runs of a job on equal inputs agree bit for bit.
Elapsed time comes from the stamps, never from a clock.

Ops (batched over all track slots and detections; counts are masks, never host reads on CUDA; on the CPU
the kernels compute on the counted rows only, ``geometry.live_rows``, bit for bit as on all of them):

0. ``sweep_pose``: the instant the boxes describe and the ego pose then. The LiDAR task's output
   carries its sweep's header stamp (``boxes.meta``, ``rt_runtime.sched.meta``), the odometry its own
   (``odom.meta``); the sweep describes ``stamp + sweep_offset`` (the mean time of its points), and
   the pose there is the odometry's moved back along the arc its speed and yaw rate drive. A job
   reads the odometry of its release, 75-140 ms after the beams crossed the objects: placed with
   that pose, a still object's track ran ahead by the ego's speed times the gap (docs/QUALITY.md).
   Without odometry the sweeps' stamps are the time (tracks in base_link, with relative velocities).
1. ``detections_to_map``: each fused object (base_link) goes to the map frame with the ego pose
   when it was seen: ``p_map = R(yaw) p + t``, a LiDAR box at the sweep's pose moved on by ``dt``,
   its azimuth's share of the turn (``sweep_spin`` s per turn from ``sweep_mid``), a radar-only
   object by its scan's stamp after the sweep's (``dt`` kept in ``det_attr``). Position noise R_p is
   sigma^2 I (LiDAR or radar-only sigma). Radar gives only a range rate; with the sensor's ground velocity in base_link,
   ``v_s = (vx - w s_y, w s_x)``, the ground radial speed is ``vr + v_s . u`` along the bearing u,
   so the velocity "measurement" is ``u (vr + v_s . u)`` with covariance
   ``sr^2 u u^T + st^2 (I - u u^T)``, st huge (the tangential part is unobserved). Without Doppler
   the velocity covariance is st^2 I: a measurement of position only, in the same 4-D form.
2. ``kf_predict``: constant velocity, state (x, y, vx, vy), to the sweep's instant: ``dt = t_sweep -
   t_last`` (either sign: the last job's output instant may be later than this sweep);
   ``x = F x``, ``P = F P F^T + Q`` with the white-noise-acceleration Q
   ``q [[dt^3/3 I, dt^2/2 I], [dt^2/2 I, dt I]]``.
3. ``associate``: each detection against the track where it was at the detection's ``dt``;
   Mahalanobis distance on position, ``y^T (P_pp + R_p)^-1 y``, gated by a chi^2
   bound (2 dof) and a Euclidean cap; optimal assignment (Hungarian, scipy on the host) on the
   CPU, tensorized greedy-by-cost (mutual nearest rounds, capturable) on CUDA. Radar-only
   detections standing still over ground (``still_radar_only``: trees, poles, signs as often as
   parked cars, which LiDAR sees) take no part, neither here nor in births.
4. ``kf_update``: Kalman update ``K = P S^-1``, Joseph form ``(I-KH)P(I-KH)^T + K R K^T``, for the
   matched tracks (a Doppler outside the velocity gate ``doppler_gate_chi2`` counts as unobserved);
   hits, misses, age, score, size, class; deletion of confirmed tracks after
   ``max_misses`` consecutive misses (``steady_max_misses`` once seen ``steady_hits`` times and
   slower than ``steady_max_speed``: a pedestrian walks behind a tree or a parked car for
   seconds) and of tentative ones after ``tentative_max_misses``; birth of a tentative track (new
   id) from each unmatched detection above ``birth_score`` that lies on no live track's footprint
   (``within_tracks``);
   confirmation at ``confirm_hits`` hits; then every track is predicted on to the odometry's stamp
   (``last_t``: what prediction and planning read is the present). Rows are compacted confirmed
   first, then tentative, each by id, so ``tracks[:confirmed_count]`` is what prediction and planning read.

Each op's body is a kernel of ``pipelines/tracking_kernels.py`` (``rt_runtime.exec.kernel``: eager, or
compiled where it pays); the op builders here declare the contracts and pass ``TrackerParams`` as ``Knobs``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from rt_runtime import Graph, Op, TensorSpec
from rt_runtime.sched.meta import meta_spec
from pipelines import schema
from pipelines import tracking_kernels as kernels
from pipelines.fusion import FusionParams, fusion_inputs, fusion_ops
from pipelines.camera_model import CameraModel
from pipelines.geometry import on_device
from pipelines.tracking_kernels import ATTR_COLS

RADAR = "radar_objects"   # the fusion input whose stamp the radar-only objects carry
STATE_FEEDBACK = {"tracks": "tracks_in", "track_cov": "track_cov_in", "track_hits": "track_hits_in",
                  "track_count": "track_count_in", "next_id": "next_id_in", "last_t": "last_t_in"}


@dataclass(frozen=True)
class TrackerParams:
    """Tracker tuning: track life (M hits, K misses), noise, gates."""

    confirm_hits: int = 3             # M: a tentative track is confirmed at this many hits
    max_misses: int = 5               # K: a confirmed track dies after this many consecutive misses
    tentative_max_misses: int = 1
    steady_hits: int = 20             # a track seen this often ...
    steady_max_misses: int = 20       # ... coasts this long: a pedestrian walking behind trees or a parked car
    steady_max_speed: float = 3.0     # m/s: ... if no faster than a runner
    accel_std: float = 1.0            # m/s^2, process noise (white acceleration)
    lidar_pos_std: float = 0.3
    radar_pos_std: float = 1.0
    doppler_std: float = 0.5
    init_vel_std: float = 8.0
    gate_chi2: float = 13.8           # 2 dof, 99.9 %
    doppler_gate_chi2: float = 10.8   # 1 dof, 99.9 %: a Doppler further off the prediction is ignored
    gate_m: float = 5.0
    birth_score: float = 0.15         # a far pedestrian's LiDAR box: 0.29-0.44, x 0.85 when the camera misses it
    birth_margin: float = 0.5         # m around a live track's box: no birth there (see ``within_tracks``)
    radar_still_speed: float = 1.0   # m/s over ground: slower radar-only detections are ignored
    max_dt: float = 1.0
    radar_xy: tuple[float, float] = (0.0, 0.0)
    sweep_offset: float = 0.0         # s after a sweep's stamp that its boxes describe (``sweep_pose``) ...
    sweep_spin: float = 0.0           # ... and, in s per turn (+ counter-clockwise; 0: not known), when each
    sweep_mid: float = 0.0            # was fired relative to that: the azimuth (base_link, rad) fired then
    assignment: str = "auto"          # "hungarian" | "greedy" | "auto" (Hungarian on CPU)


def _spec(s: TensorSpec, device: str) -> TensorSpec:
    return on_device(s, device)


def state_specs(device: str = "cpu", suffix: str = "_in") -> list[TensorSpec]:
    """The tracker state's specs; inputs carry ``_in``, outputs the bare names."""
    return [_spec(s, device) for s in (
        schema.tracks("tracks" + suffix), schema.track_covariance("track_cov" + suffix),
        schema.track_hits("track_hits" + suffix), schema.count("track_count" + suffix),
        schema.count("next_id" + suffix), schema.timestamp("last_t" + suffix))]


def initial_tracker_state(device: str = "cpu") -> dict[str, torch.Tensor]:
    """The empty tracker: no tracks, ids from 1, no previous stamp (NaN)."""
    dev = torch.device(device)
    mt = schema.MAX_TRACKS
    return {"tracks_in": torch.zeros(mt, len(schema.TRACK_COLS), device=dev),
            "track_cov_in": torch.zeros(mt, 4, 4, device=dev),
            "track_hits_in": torch.zeros(mt, dtype=torch.int32, device=dev),
            "track_count_in": torch.zeros(1, dtype=torch.int32, device=dev),
            "next_id_in": torch.ones(1, dtype=torch.int32, device=dev),
            "last_t_in": torch.full((1,), math.nan, dtype=torch.float64, device=dev)}


def stamps(odom_ns: int, boxes_ns: int, radar_ns: int | None = None) -> dict[str, torch.Tensor]:
    """``odom.meta``, ``boxes.meta`` and ``radar_objects.meta`` of fresh messages stamped at these instants (ns;
    the radar's at the odometry's unless given), as the runtime binds
    them (``rt_runtime.sched.meta``): for running the fusion-tracking graph directly."""
    def meta(stamp: int) -> torch.Tensor:
        return torch.tensor([stamp, 0, 0, 0, stamp], dtype=torch.int64)   # t_ns, seq, age_ns, stale, stamp_ns

    radar_ns = odom_ns if radar_ns is None else radar_ns

    return {"odom.meta": meta(odom_ns), "boxes.meta": meta(boxes_ns), RADAR + ".meta": meta(radar_ns)}


def tracker_feedback(outputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Next job's state inputs from this job's outputs (copied: output views are reused)."""
    return {dst: outputs[src].clone() for src, dst in STATE_FEEDBACK.items()}


POSE = "ego_at_sweep"   # the ego pose at the sweep's instant (``schema.ODOM_COLS``), as the tracker's ops read it
NOW = "track_now"     # the instant the tracks are output at
RADAR_LAG = "radar_lag"   # the radar scan's stamp after the sweep's instant (s)


def _sweep_op(p: TrackerParams, device: str, stamped: str | None) -> Op:
    """``sweep_pose``: where the ego was when the sweep saw its boxes, from the odometry (``odom.meta``'s
    stamp) and the boxes' (``<stamped>.meta``: the sweep's header stamp, carried by the LiDAR task's output)."""
    odom = _spec(schema.odometry(), device)
    outs = (_spec(schema.odometry(POSE), device), _spec(schema.timestamp(NOW), device),
            _spec(schema.timestamp(RADAR_LAG), device))
    times = float(p.sweep_offset), float(p.max_dt)
    if stamped is None:   # no stamps given: the boxes are taken at the odometry's stamp
        def same(odom: Tensor, pose: Tensor, now: Tensor, radar_lag: Tensor) -> None:
            kernels.sweep_pose(odom, True, False, 0.0, 0.0, 0.0, *times, pose, now, radar_lag)

        return Op("sweep_pose", same, (odom,), outs, capturable=True, cost_us=20.0)

    def sweep(odom: Tensor, odom_meta: Tensor, boxes_meta: Tensor, radar_meta: Tensor, pose: Tensor, now: Tensor,
              radar_lag: Tensor) -> None:
        # t_ns, seq, age_ns, stale, stamp_ns (host int64); an optional input never written reads seq -1 and
        # stale (a chain's hand-over: seq -1, fresh)
        om, bm, rm = odom_meta.tolist(), boxes_meta.tolist(), radar_meta.tolist()
        has_odom, has_boxes = not (om[1] < 0 and om[3] > 0), not (bm[1] < 0 and bm[3] > 0)
        radar_shift = (rm[4] - bm[4]) * 1e-9 if not (rm[1] < 0 and rm[3] > 0) else k_offset
        kernels.sweep_pose(odom, has_odom, has_boxes, (bm[4] - om[4]) * 1e-9, bm[4] * 1e-9, radar_shift, *times,
                           pose, now, radar_lag)

    k_offset = float(p.sweep_offset)   # no radar scan: no lag
    return Op("sweep_pose", sweep, (odom, meta_spec("odom"), meta_spec(stamped), meta_spec(RADAR)), outs,
              cost_us=20.0)


def _to_map_op(p: TrackerParams, device: str) -> Op:
    ins = (_spec(schema.fused_objects(), device), _spec(schema.count("fused_count"), device),
           _spec(schema.odometry(POSE), device), _spec(schema.timestamp(RADAR_LAG), device))
    outs = (TensorSpec("det_z", (schema.MAX_FUSED, 4), "float32", ins[0].device),
            TensorSpec("det_R", (schema.MAX_FUSED, 4, 4), "float32", ins[0].device),
            TensorSpec("det_attr", (schema.MAX_FUSED, len(ATTR_COLS)), "float32", ins[0].device))
    radar_xy = torch.tensor(p.radar_xy, dtype=torch.float64, device=torch.device(device))
    knobs = kernels.Knobs.of(p)

    def to_map(fused: Tensor, fused_count: Tensor, odom: Tensor, radar_lag: Tensor, det_z: Tensor, det_R: Tensor,
               det_attr: Tensor) -> None:
        kernels.to_map(fused, fused_count, odom, radar_lag, radar_xy, knobs, det_z, det_R, det_attr)

    return Op("detections_to_map", to_map, ins, outs, capturable=True, cost_us=150.0)


def _predict_op(p: TrackerParams, device: str) -> Op:
    st = state_specs(device)
    ins = (st[0], st[1], _spec(schema.odometry(POSE), device), st[5])
    outs = (TensorSpec("pred_x", (schema.MAX_TRACKS, 4), "float64", st[0].device),
            TensorSpec("pred_P", (schema.MAX_TRACKS, 4, 4), "float64", st[0].device))
    knobs = kernels.Knobs.of(p)

    def predict(tracks: Tensor, cov: Tensor, odom: Tensor, last_t: Tensor, pred_x: Tensor, pred_P: Tensor) -> None:
        kernels.predict(tracks, cov, odom, last_t, knobs, pred_x, pred_P)

    return Op("kf_predict", predict, ins, outs, capturable=True, cost_us=60.0)


def _associate_op(p: TrackerParams, device: str) -> Op:
    st = state_specs(device)
    dev = st[0].device
    ins = (TensorSpec("pred_x", (schema.MAX_TRACKS, 4), "float64", dev),
           TensorSpec("pred_P", (schema.MAX_TRACKS, 4, 4), "float64", dev),
           TensorSpec("det_z", (schema.MAX_FUSED, 4), "float32", dev),
           TensorSpec("det_R", (schema.MAX_FUSED, 4, 4), "float32", dev),
           st[3], _spec(schema.count("fused_count"), device),
           TensorSpec("det_attr", (schema.MAX_FUSED, len(ATTR_COLS)), "float32", dev))
    outs = (TensorSpec("assignment", (schema.MAX_TRACKS,), "int64", dev),)
    hungarian = p.assignment == "hungarian" or (p.assignment == "auto" and dev == "cpu")
    knobs = kernels.Knobs.of(p)

    def associate(pred_x: Tensor, pred_P: Tensor, det_z: Tensor, det_R: Tensor, track_count: Tensor,
                  fused_count: Tensor, det_attr: Tensor, assignment: Tensor) -> None:
        if hungarian:
            # geometry.hungarian_assign in three steps, so that only scipy's call (which lets the GIL go
            # while it solves) and the array hand-overs run in Python
            cost, finite, allowed = kernels.hungarian_cost(pred_x, pred_P, det_z, det_R, track_count, fused_count,
                                                    det_attr, knobs)
            if not allowed:
                assignment.fill_(-1)
                return
            rows, cols = linear_sum_assignment(cost.numpy())
            kernels.hungarian_result(finite, torch.from_numpy(rows), torch.from_numpy(cols), assignment)
        else:
            kernels.associate_greedy(pred_x, pred_P, det_z, det_R, track_count, fused_count, det_attr, knobs,
                                     assignment)

    return Op("associate", associate, ins, outs, capturable=not hungarian, cost_us=300.0)


def _update_op(p: TrackerParams, device: str) -> Op:
    st_in, st_out = state_specs(device), state_specs(device, "")
    dev = st_in[0].device
    ins = (st_in[0], st_in[2], st_in[3], st_in[4], _spec(schema.odometry(), device),
           _spec(schema.odometry(POSE), device), _spec(schema.timestamp(NOW), device),
           TensorSpec("pred_x", (schema.MAX_TRACKS, 4), "float64", dev),
           TensorSpec("pred_P", (schema.MAX_TRACKS, 4, 4), "float64", dev),
           TensorSpec("det_z", (schema.MAX_FUSED, 4), "float32", dev),
           TensorSpec("det_R", (schema.MAX_FUSED, 4, 4), "float32", dev),
           TensorSpec("det_attr", (schema.MAX_FUSED, len(ATTR_COLS)), "float32", dev),
           _spec(schema.count("fused_count"), device),
           TensorSpec("assignment", (schema.MAX_TRACKS,), "int64", dev))
    outs = tuple(st_out) + (_spec(schema.count("confirmed_count"), device),)
    knobs = kernels.Knobs.of(p)

    def update(*args: Tensor) -> None:   # the inputs, then the outputs, in the order above
        ins_, outs_ = args[:len(ins)], args[len(ins):]
        kernels.update(*ins_, knobs, *outs_)

    return Op("kf_update", update, ins, outs, capturable=True, cost_us=400.0)


def tracking_ops(device: str = "cpu", params: TrackerParams | None = None, stamped: str | None = None) -> list[Op]:
    """The tracker's ops, reading ``fused`` + ``fused_count`` and ``odom`` (with ``stamped``, also ``odom.meta``
    and ``<stamped>.meta``: the detections are placed and associated at that input's stamp)."""
    p = params or TrackerParams()
    return [_sweep_op(p, device, stamped), _to_map_op(p, device), _predict_op(p, device), _associate_op(p, device),
            _update_op(p, device)]


TRACKING_OUTPUTS = list(STATE_FEEDBACK) + ["confirmed_count"]


def build_tracking_graph(device: str = "cpu", **params: object) -> Graph:
    """Tracker graph: fused (+ count), odom and the state ``*_in`` -> the new state + ``confirmed_count``."""
    ins = [_spec(schema.fused_objects(), device), _spec(schema.count("fused_count"), device),
           _spec(schema.odometry(), device)] + state_specs(device)
    ops = tracking_ops(device, TrackerParams(**params))  # type: ignore[arg-type]
    return Graph("tracking", ops, ins, TRACKING_OUTPUTS)


def build_fusion_tracking_graph(device: str = "cpu", camera: object | None = None,
                                fusion: FusionParams | None = None, tracker: TrackerParams | None = None) -> Graph:
    """Fusion and tracking as one graph (one task: a fast chain pays no LET hop in between)."""
    f = fusion or FusionParams()
    if camera is not None:
        f = FusionParams(**{**f.__dict__, "camera": CameraModel.like(camera)})
    ins = fusion_inputs(device) + [_spec(schema.odometry(), device)] + state_specs(device) + \
        [meta_spec("odom"), meta_spec("boxes"), meta_spec(RADAR)]
    ops = fusion_ops(device, f) + tracking_ops(device, tracker, stamped="boxes")
    return Graph("fusion_tracking", ops, ins, TRACKING_OUTPUTS)
