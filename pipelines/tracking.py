"""Multi-object tracking in the map frame: ego-motion compensation, Kalman filter, assignment, track life.

The tracker is pure: its whole state is graph inputs (``tracks_in``, ``track_cov_in``,
``track_hits_in``, ``track_count_in``, ``next_id_in``, ``last_t_in``) and the same tensors come
out as outputs (``tracks``, ``track_cov``, ...); the runtime feeds one job's outputs back as the
next job's inputs (``STATE_FEEDBACK``), so two runs of a job on equal inputs agree bit for bit.
Elapsed time comes from the odometry stamp, never from a clock.

Ops (batched over all track slots and detections; counts are masks, never host reads):

1. ``detections_to_map``: each fused object (base_link) goes to the map frame with the ego pose
   (x, y, yaw): ``p_map = R(yaw) p + t``. Position noise R_p is sigma^2 I (LiDAR or radar-only
   sigma). Radar gives only a range rate; with the sensor's ground velocity in base_link,
   ``v_s = (vx - w s_y, w s_x)``, the ground radial speed is ``vr + v_s . u`` along the bearing u,
   so the velocity "measurement" is ``u (vr + v_s . u)`` with covariance
   ``sr^2 u u^T + st^2 (I - u u^T)``, st huge (the tangential part is unobserved). Without Doppler
   the velocity covariance is st^2 I: a measurement of position only, in the same 4-D form.
2. ``kf_predict``: constant velocity, state (x, y, vx, vy); ``dt = t_odom - t_last``;
   ``x = F x``, ``P = F P F^T + Q`` with the white-noise-acceleration Q
   ``q [[dt^3/3 I, dt^2/2 I], [dt^2/2 I, dt I]]``.
3. ``associate``: Mahalanobis distance on position, ``y^T (P_pp + R_p)^-1 y``, gated by a chi^2
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
   confirmation at ``confirm_hits`` hits. Rows are compacted confirmed first, then tentative,
   each by id, so ``tracks[:confirmed_count]`` is what prediction and planning read.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rt_runtime import Graph, Op, TensorSpec
from pipelines import schema
from pipelines.fusion import F, SRC_CAMERA, SRC_LIDAR, FusionParams, fusion_inputs, fusion_ops
from pipelines.geometry import CameraModel, greedy_assign, hungarian_assign, on_device, valid_mask, wrap_angle

T = {c: i for i, c in enumerate(schema.TRACK_COLS)}
O = {c: i for i, c in enumerate(schema.ODOM_COLS)}
ATTR_COLS = ("yaw", "l", "w", "score", "cls", "src")
STATE_FEEDBACK = {"tracks": "tracks_in", "track_cov": "track_cov_in", "track_hits": "track_hits_in",
                  "track_count": "track_count_in", "next_id": "next_id_in", "last_t": "last_t_in"}
_UNOBSERVED_VAR = 1e4  # (m/s)^2: a velocity direction no sensor measured


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


def tracker_feedback(outputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Next job's state inputs from this job's outputs (copied: output views are reused)."""
    return {dst: outputs[src].clone() for src, dst in STATE_FEEDBACK.items()}


def _rot(yaw: torch.Tensor) -> torch.Tensor:
    c, s = torch.cos(yaw), torch.sin(yaw)
    return torch.stack((torch.stack((c, -s), -1), torch.stack((s, c), -1)), -2)


def still_radar_only(det_z: torch.Tensor, det_attr: torch.Tensor, p: TrackerParams) -> torch.Tensor:
    """Radar-only detections standing still over ground: ignored by association and birth.

    Such a return is as likely a tree, a pole or a sign as a parked car (which LiDAR sees): used, it
    starts tracks on the roadside and pulls tracks that pass by (a pedestrian's under a tree) off
    their object. ``det_z``'s velocity is the ground radial velocity along the bearing.
    """
    radar_only = (det_attr[:, ATTR_COLS.index("src")].long() & SRC_LIDAR) == 0
    return radar_only & (det_z[:, 2:].norm(dim=1) < p.radar_still_speed)


def within_tracks(det_z: torch.Tensor, x: torch.Tensor, yaw: torch.Tensor, tracks: torch.Tensor,
                  alive: torch.Tensor, p: TrackerParams) -> torch.Tensor:
    """Detections whose centre lies on a live track's footprint (``birth_margin`` around its box).

    LiDAR now and then cuts one road user in two (a 0.1 m sliver of a passing cyclist boxed apart,
    0.6-0.8 m ahead of it); the piece the track did not take would otherwise start a twin track.
    """
    d = det_z[None, :, :2].double() - x[:, None, :2]                           # (T, D, 2)
    c, s = torch.cos(yaw.double())[:, None], torch.sin(yaw.double())[:, None]
    along = (d[..., 0] * c + d[..., 1] * s).abs() - 0.5 * tracks[:, T["l"], None].double()
    across = (d[..., 1] * c - d[..., 0] * s).abs() - 0.5 * tracks[:, T["w"], None].double()
    return (alive[:, None] & (along < p.birth_margin) & (across < p.birth_margin)).any(0)


def _to_map_op(p: TrackerParams, device: str) -> Op:
    ins = (_spec(schema.fused_objects(), device), _spec(schema.count("fused_count"), device),
           _spec(schema.odometry(), device))
    outs = (TensorSpec("det_z", (schema.MAX_FUSED, 4), "float32", ins[0].device),
            TensorSpec("det_R", (schema.MAX_FUSED, 4, 4), "float32", ins[0].device),
            TensorSpec("det_attr", (schema.MAX_FUSED, len(ATTR_COLS)), "float32", ins[0].device))

    radar_xy = torch.tensor(p.radar_xy, dtype=torch.float64, device=torch.device(device))

    def to_map(fused: torch.Tensor, fused_count: torch.Tensor, odom: torch.Tensor,
               det_z: torch.Tensor, det_R: torch.Tensor, det_attr: torch.Tensor) -> None:
        live = valid_mask(fused_count, fused.shape[0])[:, None]
        f = torch.where(live, fused.double(), 0.0)  # rows past the count may hold anything
        yaw, w = odom[O["yaw"]], odom[O["yaw_rate"]]
        rot = _rot(yaw)
        pos = f[:, F["x"]:F["y"] + 1]
        sx, sy = p.radar_xy
        bearing = pos - radar_xy
        u = bearing / bearing.norm(dim=1, keepdim=True).clamp(min=1e-3)
        v_sensor = torch.stack((odom[O["vx"]] - w * sy, w * sx))
        has_vr = f[:, F["has_vr"]] > 0.5
        vr = f[:, F["vr"]] + u @ v_sensor
        u_map = u @ rot.T
        eye = torch.eye(2, dtype=f.dtype, device=f.device)
        uu = u_map[:, :, None] * u_map[:, None, :]
        r_vel = torch.where(has_vr[:, None, None], p.doppler_std ** 2 * uu + _UNOBSERVED_VAR * (eye - uu),
                            _UNOBSERVED_VAR * eye)
        lidar = (f[:, F["src"]].long() & SRC_LIDAR) > 0
        pos_var = torch.where(lidar, p.lidar_pos_std ** 2, p.radar_pos_std ** 2)
        det_z[:, :2] = torch.where(live, pos @ rot.T + odom[O["x"]:O["y"] + 1], 0.0)
        det_z[:, 2:] = torch.where(live & has_vr[:, None], u_map * vr[:, None], 0.0)
        det_R.zero_()
        det_R[:, :2, :2] = pos_var[:, None, None] * eye
        det_R[:, 2:, 2:] = r_vel
        det_attr.copy_(torch.stack((wrap_angle(f[:, F["yaw"]] + yaw), f[:, F["l"]], f[:, F["w"]], f[:, F["score"]],
                                    f[:, F["cls"]], f[:, F["src"]]), 1))

    return Op("detections_to_map", to_map, ins, outs, capturable=True, cost_us=150.0)


def _predict_op(p: TrackerParams, device: str) -> Op:
    st = state_specs(device)
    ins = (st[0], st[1], _spec(schema.odometry(), device), st[5])
    outs = (TensorSpec("pred_x", (schema.MAX_TRACKS, 4), "float64", st[0].device),
            TensorSpec("pred_P", (schema.MAX_TRACKS, 4, 4), "float64", st[0].device))
    q = p.accel_std ** 2

    def predict(tracks: torch.Tensor, cov: torch.Tensor, odom: torch.Tensor, last_t: torch.Tensor,
                pred_x: torch.Tensor, pred_P: torch.Tensor) -> None:
        dt = torch.nan_to_num(odom[O["t"]] - last_t[0], nan=0.0).clamp(0.0, p.max_dt)
        eye2 = torch.eye(2, dtype=torch.float64, device=odom.device)
        f = torch.eye(4, dtype=torch.float64, device=odom.device)
        f[:2, 2:] = dt * eye2
        qm = torch.cat((torch.cat((dt ** 3 / 3 * eye2, dt ** 2 / 2 * eye2), 1),
                        torch.cat((dt ** 2 / 2 * eye2, dt * eye2), 1))) * q
        x = tracks[:, T["x"]:T["vy"] + 1].double()
        pred_x.copy_(x @ f.T)
        pred_P.copy_(f @ cov.double() @ f.T + qm)

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

    def associate(pred_x: torch.Tensor, pred_P: torch.Tensor, det_z: torch.Tensor, det_R: torch.Tensor,
                  track_count: torch.Tensor, fused_count: torch.Tensor, det_attr: torch.Tensor,
                  assignment: torch.Tensor) -> None:
        y = det_z[None, :, :2].double() - pred_x[:, None, :2]                          # (T, D, 2)
        s = pred_P[:, None, :2, :2] + det_R[None, :, :2, :2].double()
        a, b, c, d = s[..., 0, 0], s[..., 0, 1], s[..., 1, 0], s[..., 1, 1]
        det = (a * d - b * c).clamp(min=1e-12)
        m2 = (d * y[..., 0] ** 2 - (b + c) * y[..., 0] * y[..., 1] + a * y[..., 1] ** 2) / det
        usable = valid_mask(fused_count, y.shape[1]) & ~still_radar_only(det_z, det_attr, p)
        ok = (valid_mask(track_count, y.shape[0])[:, None] & usable[None, :]
              & (m2 < p.gate_chi2) & (y.norm(dim=-1) < p.gate_m))
        cost = torch.where(ok, m2, math.inf)
        assignment.copy_(hungarian_assign(cost) if hungarian else greedy_assign(cost)[0])

    return Op("associate", associate, ins, outs, capturable=not hungarian, cost_us=300.0)


def _update_op(p: TrackerParams, device: str) -> Op:
    st_in, st_out = state_specs(device), state_specs(device, "")
    dev = st_in[0].device
    ins = (st_in[0], st_in[2], st_in[3], st_in[4], _spec(schema.odometry(), device),
           TensorSpec("pred_x", (schema.MAX_TRACKS, 4), "float64", dev),
           TensorSpec("pred_P", (schema.MAX_TRACKS, 4, 4), "float64", dev),
           TensorSpec("det_z", (schema.MAX_FUSED, 4), "float32", dev),
           TensorSpec("det_R", (schema.MAX_FUSED, 4, 4), "float32", dev),
           TensorSpec("det_attr", (schema.MAX_FUSED, len(ATTR_COLS)), "float32", dev),
           _spec(schema.count("fused_count"), device),
           TensorSpec("assignment", (schema.MAX_TRACKS,), "int64", dev))
    outs = tuple(st_out) + (_spec(schema.count("confirmed_count"), device),)
    A = {c: i for i, c in enumerate(ATTR_COLS)}
    mt, nd = schema.MAX_TRACKS, schema.MAX_FUSED

    def update(tracks_in, hits_in, count_in, next_id_in, odom, pred_x, pred_P, det_z, det_R, det_attr,  # noqa: ANN001
               fused_count, assignment, tracks, track_cov, track_hits, track_count, next_id, last_t,
               confirmed_count) -> None:
        f64 = torch.float64
        eye4 = torch.eye(4, dtype=f64, device=odom.device)
        alive_in = valid_mask(count_in, mt)
        matched = (assignment >= 0) & alive_in
        j = assignment.clamp(min=0)
        z, r, at = det_z[j].double(), det_R[j].double(), det_attr[j]
        # A Doppler far off the track's predicted velocity belongs to something else (clutter beside
        # the object, a neighbour's cluster): one such update would halve a truck's speed. Its
        # velocity rows then count as unobserved; the position still updates.
        yv = (z[:, 2:] - pred_x[:, 2:])[:, :, None]
        m2v = (yv.transpose(1, 2) @ torch.linalg.solve_ex(pred_P[:, 2:, 2:] + r[:, 2:, 2:], yv)[0])[:, 0, 0]
        r[:, 2:, 2:] = torch.where((m2v > p.doppler_gate_chi2)[:, None, None], _UNOBSERVED_VAR * eye4[:2, :2],
                                   r[:, 2:, 2:])
        # Kalman update with H = I (velocity rows carry the Doppler or an unobserved variance).
        s = torch.where(matched[:, None, None], pred_P + r, eye4)
        k = torch.linalg.solve_ex(s, pred_P)[0].transpose(1, 2)           # P S^-1 (P, S symmetric)
        ik = eye4 - k
        x_upd = pred_x + (k @ (z - pred_x)[:, :, None])[:, :, 0]
        p_upd = ik @ pred_P @ ik.transpose(1, 2) + k @ r @ k.transpose(1, 2)
        x_new = torch.where(matched[:, None], x_upd, pred_x)
        p_new = torch.where(matched[:, None, None], p_upd, pred_P)

        hits = hits_in + matched.int()
        misses = torch.where(matched, 0.0, tracks_in[:, T["misses"]] + 1)
        confirmed = hits >= p.confirm_hits
        # Only slow tracks coast long: a walker's prediction holds for seconds, while a car's track
        # that lost its object (a wrong velocity, a sweep-seam split) would drift on as a phantom.
        steady = (hits >= p.steady_hits) & (x_new[:, 2:].norm(dim=1) < p.steady_max_speed)
        limit = torch.where(steady, p.steady_max_misses,
                            torch.where(confirmed, p.max_misses, p.tentative_max_misses))
        keep_old = alive_in & (misses < limit)
        src = at[:, A["src"]].long()
        lidar, camera = matched & ((src & SRC_LIDAR) > 0), matched & ((src & SRC_CAMERA) > 0)
        speed = x_new[:, 2:].norm(dim=1)
        yaw = torch.where(speed > 1.0, torch.atan2(x_new[:, 3], x_new[:, 2]).float(),
                          torch.where(lidar, at[:, A["yaw"]], tracks_in[:, T["yaw"]]))
        old = torch.stack((
            tracks_in[:, T["id"]], torch.where(camera, at[:, A["cls"]], tracks_in[:, T["cls"]]),
            *x_new.float().unbind(1), yaw,
            torch.where(lidar, 0.7 * tracks_in[:, T["l"]] + 0.3 * at[:, A["l"]], tracks_in[:, T["l"]]),
            torch.where(lidar, 0.7 * tracks_in[:, T["w"]] + 0.3 * at[:, A["w"]], tracks_in[:, T["w"]]),
            torch.where(matched, 0.6 * tracks_in[:, T["score"]] + 0.4 * at[:, A["score"]],
                        0.9 * tracks_in[:, T["score"]]),
            tracks_in[:, T["age"]] + 1, misses), dim=1)

        # Births: unmatched detections, ids handed out in detection order.
        taken = (assignment[:, None] == torch.arange(nd, device=odom.device)[None, :]) & matched[:, None]
        born = (valid_mask(fused_count, nd) & ~taken.any(0) & (det_attr[:, A["score"]] >= p.birth_score)
                & ~still_radar_only(det_z, det_attr, p) & ~within_tracks(det_z, x_new, yaw, tracks_in, keep_old, p))
        rank = torch.cumsum(born.int(), 0) - 1
        ids = (next_id_in[0] + rank).float()
        zb, rb = det_z.double(), det_R.double()
        # Velocity prior N(0, sv^2 I) fused with the Doppler measurement (information form).
        r_vel_inv = torch.linalg.inv_ex(rb[:, 2:, 2:])[0]
        p_vel = torch.linalg.inv_ex(r_vel_inv + eye4[:2, :2] / p.init_vel_std ** 2)[0]
        v0 = (p_vel @ r_vel_inv @ zb[:, 2:, None])[:, :, 0]
        p0 = torch.zeros(nd, 4, 4, dtype=f64, device=odom.device)
        p0[:, :2, :2] = rb[:, :2, :2]
        p0[:, 2:, 2:] = p_vel
        one = torch.ones_like(ids)
        new = torch.stack((ids, det_attr[:, A["cls"]], det_z[:, 0], det_z[:, 1], *v0.float().unbind(1),
                           det_attr[:, A["yaw"]], det_attr[:, A["l"]], det_attr[:, A["w"]],
                           det_attr[:, A["score"]], one, 0 * one), dim=1)

        # Compact: confirmed first, then tentative, each by id; newborns (largest ids) overflow first.
        rows = torch.cat((old, new))
        all_hits = torch.cat((hits, torch.ones(nd, dtype=torch.int32, device=odom.device)))
        keep = torch.cat((keep_old, born))
        key = ((all_hits < p.confirm_hits).long() << 40) + rows[:, T["id"]].long()
        key = torch.where(keep, key, torch.iinfo(torch.int64).max)
        order = torch.sort(key, stable=True).indices[:mt]
        n = keep.sum().clamp(max=mt)
        live = torch.arange(mt, device=odom.device) < n
        tracks.copy_(torch.where(live[:, None], rows[order], 0.0))
        track_cov.copy_(torch.where(live[:, None, None], torch.cat((p_new, p0))[order], 0.0))
        track_hits.copy_(torch.where(live, all_hits[order], 0))
        track_count.copy_(n.view(1))
        confirmed_count.copy_((live & (all_hits[order] >= p.confirm_hits)).sum().view(1))
        slots = (mt - keep_old.sum()).clamp(min=0)
        next_id.copy_(next_id_in + torch.minimum(born.sum(), slots))
        last_t.copy_(odom[O["t"]:O["t"] + 1])

    return Op("kf_update", update, ins, outs, capturable=True, cost_us=400.0)


def tracking_ops(device: str = "cpu", params: TrackerParams | None = None) -> list[Op]:
    """The tracker's ops, reading ``fused`` + ``fused_count`` and ``odom``."""
    p = params or TrackerParams()
    return [_to_map_op(p, device), _predict_op(p, device), _associate_op(p, device), _update_op(p, device)]


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
    ins = fusion_inputs(device) + [_spec(schema.odometry(), device)] + state_specs(device)
    ops = fusion_ops(device, f) + tracking_ops(device, tracker)
    return Graph("fusion_tracking", ops, ins, TRACKING_OUTPUTS)
