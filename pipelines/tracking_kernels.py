"""The tracker's op bodies as kernels (``rt_runtime.exec.kernel``: eager, jit or aot, chosen at set-up).

Each op of ``pipelines/tracking.py`` is one kernel call here (``associate`` on the CPU: two, around
scipy's Hungarian solver); the filter and the track rules are described there. The kernels take
tensors and plain numbers only (written for TorchScript once: no dataclasses, closures or module ints): the
op builders pass ``TrackerParams`` as ``Knobs``, and rows are read column by column in the schema's
order, which the asserts below pin.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor

from rt_runtime.exec import kernel
from pipelines import schema
from pipelines.geometry import greedy_assign, live_rows, valid_mask, wrap_angle
from pipelines.tracking_time import sweep_pose, transition

if TYPE_CHECKING:
    from pipelines.tracking import TrackerParams

ATTR_COLS = ("yaw", "l", "w", "score", "cls", "src", "dt")   # det_attr's columns; dt: fired after the sweep's pose (s)
UNOBSERVED_VAR = 1e4  # (m/s)^2: a velocity direction no sensor measured


class Knobs(NamedTuple):
    """``TrackerParams``' numbers as the kernels read them (TorchScript takes no dataclass)."""

    confirm_hits: int
    max_misses: int
    tentative_max_misses: int
    steady_hits: int
    steady_max_misses: int
    steady_max_speed: float
    q: float                  # accel_std ** 2
    lidar_var: float          # lidar_pos_std ** 2
    radar_var: float          # radar_pos_std ** 2
    doppler_var: float        # doppler_std ** 2
    init_vel_var: float       # init_vel_std ** 2
    gate_chi2: float
    doppler_gate_chi2: float
    gate_m: float
    birth_score: float
    birth_margin: float
    radar_still_speed: float
    max_dt: float
    radar_x: float
    radar_y: float
    unobserved_var: float     # UNOBSERVED_VAR
    sweep_spin: float         # s per turn, + counter-clockwise (0: no spin known, every box at the pose's time)
    sweep_mid: float          # rad in base_link: the azimuth fired at the pose's time

    @classmethod
    def of(cls, p: "TrackerParams") -> "Knobs":
        """The knobs of ``p`` (squares taken here, in Python, as the ops always took them)."""
        return cls(p.confirm_hits, p.max_misses, p.tentative_max_misses, p.steady_hits, p.steady_max_misses,
                   float(p.steady_max_speed), p.accel_std ** 2, p.lidar_pos_std ** 2, p.radar_pos_std ** 2,
                   p.doppler_std ** 2, p.init_vel_std ** 2, float(p.gate_chi2), float(p.doppler_gate_chi2),
                   float(p.gate_m), float(p.birth_score), float(p.birth_margin), float(p.radar_still_speed),
                   float(p.max_dt), float(p.radar_xy[0]), float(p.radar_xy[1]), UNOBSERVED_VAR,
                   float(p.sweep_spin), float(p.sweep_mid))


# The kernels unpack rows column by column in the schema's order (TorchScript reads no dicts): a
# reordered schema must stop the import rather than shuffle columns silently.
assert schema.TRACK_COLS == ("id", "cls", "x", "y", "vx", "vy", "yaw", "l", "w", "score", "age", "misses")
assert schema.ODOM_COLS == ("x", "y", "yaw", "vx", "yaw_rate", "t")
assert ATTR_COLS == ("yaw", "l", "w", "score", "cls", "src", "dt")


def _rot(yaw: Tensor) -> Tensor:
    c, s = torch.cos(yaw), torch.sin(yaw)
    return torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)


def _norm(x: Tensor, dim: int) -> Tensor:
    """``x.norm(dim=dim)``: the kernel Tensor.norm runs (TorchScript's ``norm`` would pick another)."""
    return torch.linalg.vector_norm(x, 2, [dim])


def still_radar_only(det_z: Tensor, det_attr: Tensor, still_speed: float) -> Tensor:
    """Radar-only detections standing still over ground (below ``still_speed``): ignored by association and birth.

    Such a return is as likely a tree, a pole or a sign as a parked car (which LiDAR sees): used, it
    starts tracks on the roadside and pulls tracks that pass by (a pedestrian's under a tree) off
    their object. ``det_z``'s velocity is the ground radial velocity along the bearing.
    """
    radar_only = (det_attr[:, 5].long() & 1) == 0   # src & SRC_LIDAR
    return radar_only & (_norm(det_z[:, 2:], 1) < still_speed)


def within_tracks(det_z: Tensor, x: Tensor, yaw: Tensor, tracks: Tensor, alive: Tensor, margin: float) -> Tensor:
    """Detections whose centre lies on a live track's footprint (``margin`` around its box).

    LiDAR now and then cuts one road user in two (a 0.1 m sliver of a passing cyclist boxed apart,
    0.6-0.8 m ahead of it); the piece the track did not take would otherwise start a twin track.
    """
    z = det_z.double()
    dx, dy = z[None, :, 0] - x[:, None, 0], z[None, :, 1] - x[:, None, 1]         # (T, D) each
    c, s = torch.cos(yaw.double())[:, None], torch.sin(yaw.double())[:, None]
    along = (dx * c + dy * s).abs() - 0.5 * tracks[:, 7, None].double()     # l
    across = (dy * c - dx * s).abs() - 0.5 * tracks[:, 8, None].double()    # w
    return (alive[:, None] & (along < margin) & (across < margin)).any(0)


def _rows_matmul(a: Tensor, b: Tensor, n_all: int) -> Tensor:
    """``a @ b`` for the leading rows ``a`` (M, K) of an ``n_all``-row buffer, bit for bit as the whole
    buffer's product gives them: a matmul's bits depend on its row count (not on other rows' values)."""
    pad = torch.zeros([n_all - a.shape[0], a.shape[1]], dtype=a.dtype, device=a.device)
    return (torch.cat([a, pad]) @ b)[:a.shape[0]]


@kernel
def to_map(fused: Tensor, fused_count: Tensor, odom: Tensor, radar_lag: Tensor, radar_xy: Tensor, k: Knobs,
            det_z: Tensor, det_R: Tensor, det_attr: Tensor) -> None:
    """``detections_to_map``'s body: positions, Doppler velocities and their covariances in the map frame.

    ``odom`` is the ego pose at the sweep's instant; a LiDAR box was fired ``dt`` later (``sweep_spin``: the
    sensor's turn, ``sweep_mid``: the azimuth fired at that instant), a radar-only object ``radar_lag``
    later, and each is placed with the pose then."""
    # Rows past the count are all alike (computed from a zero row): the leading live rows plus one
    # such row are computed (all rows on CUDA: ``live_rows``), and that row is copied to the rest.
    n_all = fused.shape[0]
    m = min(live_rows(fused_count, n_all) + 1, n_all)
    live = valid_mask(fused_count, m)[:, None]
    f = torch.where(live, fused[:m].double(), 0.0)  # rows past the count may hold anything
    x, y, _z, l, w, _h, yaw_f, score, cls, vr_f, has_vr_f, src = f.unbind(1)
    yaw, rate = odom[2], odom[4]
    rot = _rot(yaw)
    pos = f[:, 0:2]
    bearing = pos - radar_xy
    u = bearing / torch.linalg.vector_norm(bearing, 2, [1], True).clamp(min=1e-3)
    v_sensor = torch.stack([odom[3] - rate * k.radar_y, rate * k.radar_x])
    has_vr = has_vr_f > 0.5
    vr = vr_f + _rows_matmul(u, v_sensor, n_all)
    u_map = _rows_matmul(u, rot.T, n_all)
    eye = torch.eye(2, dtype=f.dtype, device=f.device)
    uu = u_map[:, :, None] * u_map[:, None, :]
    r_vel = torch.where(has_vr[:, None, None], k.doppler_var * uu + k.unobserved_var * (eye - uu),
                        k.unobserved_var * eye)
    lidar = (src.long() & 1) > 0   # SRC_LIDAR
    pos_var = torch.where(lidar, k.lidar_var, k.radar_var)
    # The ego's pose when the beam crossed each box: dt after the sweep's pose, along the same arc.
    az = wrap_angle(torch.atan2(y, x) - k.sweep_mid)
    fired = torch.where(live[:, 0], torch.where(lidar, k.sweep_spin * az / (2.0 * math.pi), radar_lag[0]), 0.0)
    yaw_j, mid_j = yaw + rate * fired, yaw + 0.5 * rate * fired
    cj, sj = torch.cos(yaw_j), torch.sin(yaw_j)
    det_z[:m, 0] = torch.where(live[:, 0], cj * x - sj * y + odom[0] + odom[3] * fired * torch.cos(mid_j), 0.0)
    det_z[:m, 1] = torch.where(live[:, 0], sj * x + cj * y + odom[1] + odom[3] * fired * torch.sin(mid_j), 0.0)
    det_z[:m, 2:] = torch.where(live & has_vr[:, None], u_map * vr[:, None], 0.0)
    det_R[:m].zero_()
    det_R[:m, :2, :2] = pos_var[:, None, None] * eye
    det_R[:m, 2:, 2:] = r_vel
    det_attr[:m] = torch.stack([wrap_angle(yaw_f + yaw_j), l, w, score, cls, src, fired], 1)
    if m < n_all:
        det_z[m:] = det_z[m - 1]
        det_R[m:] = det_R[m - 1]
        det_attr[m:] = det_attr[m - 1]


@kernel
def predict(tracks: Tensor, cov: Tensor, pose: Tensor, last_t: Tensor, k: Knobs,
             pred_x: Tensor, pred_P: Tensor) -> None:
    """``kf_predict``'s body: constant velocity from the tracks' time to the sweep's (``pose[5]``; earlier
    than the tracks' when the previous job's odometry was newer than this sweep)."""
    dt = torch.nan_to_num(pose[5] - last_t[0], nan=0.0).clamp(-k.max_dt, k.max_dt)
    f, qm = transition(dt, k.q)
    x = tracks[:, 2:6].double()   # x, y, vx, vy
    pred_x.copy_(x @ f.T)
    pred_P.copy_(f @ cov.double() @ f.T + qm)


def _gated_block(pred_x: Tensor, pred_P: Tensor, det_z: Tensor, det_R: Tensor, track_count: Tensor,
                 fused_count: Tensor, det_attr: Tensor, k: Knobs) -> Tensor:
    """``gated_cost`` on its leading (live tracks, live detections) block (``live_rows``: all rows on CUDA)."""
    nt, nd = live_rows(track_count, pred_x.shape[0]), live_rows(fused_count, det_z.shape[0])
    px, pp = pred_x[:nt], pred_P[:nt]
    # Residual y and position covariance S = P_pp + R_p entry by entry as (T, D) planes: the same sums
    # as on the (T, D, 2, 2) blocks, without their strided reads.
    z, r = det_z[:nd].double(), det_R[:nd].double()
    fired = det_attr[:nd, 6].double()[None, :]   # each detection against the track where it was then
    y0 = z[None, :, 0] - (px[:, None, 0] + px[:, None, 2] * fired)
    y1 = z[None, :, 1] - (px[:, None, 1] + px[:, None, 3] * fired)
    a, b = pp[:, None, 0, 0] + r[None, :, 0, 0], pp[:, None, 0, 1] + r[None, :, 0, 1]
    c, d = pp[:, None, 1, 0] + r[None, :, 1, 0], pp[:, None, 1, 1] + r[None, :, 1, 1]
    det = (a * d - b * c).clamp(min=1e-12)
    m2 = (d * y0 ** 2 - (b + c) * y0 * y1 + a * y1 ** 2) / det
    y = torch.stack([y0, y1], -1)                                                 # (T, D, 2)
    usable = valid_mask(fused_count, nd) & ~still_radar_only(det_z[:nd], det_attr[:nd], k.radar_still_speed)
    ok = (valid_mask(track_count, nt)[:, None] & usable[None, :]
          & (m2 < k.gate_chi2) & (_norm(y, -1) < k.gate_m))
    return torch.where(ok, m2, math.inf)


def gated_cost(pred_x: Tensor, pred_P: Tensor, det_z: Tensor, det_R: Tensor, track_count: Tensor,
               fused_count: Tensor, det_attr: Tensor, k: Knobs) -> Tensor:
    """Track x detection Mahalanobis distances on position (T, D), inf outside the gates."""
    block = _gated_block(pred_x, pred_P, det_z, det_R, track_count, fused_count, det_attr, k)
    # Rows and columns past the counts never pass the gates: inf, as the full computation gives them.
    cost = torch.full([pred_x.shape[0], det_z.shape[0]], math.inf, dtype=block.dtype, device=block.device)
    cost[:block.shape[0], :block.shape[1]] = block
    return cost


@kernel
def hungarian_cost(pred_x: Tensor, pred_P: Tensor, det_z: Tensor, det_R: Tensor, track_count: Tensor,
                    fused_count: Tensor, det_attr: Tensor, k: Knobs) -> tuple[Tensor, Tensor, bool]:
    """The gated cost as ``hungarian_assign`` (geometry) hands it to scipy: on the host in float64, forbidden
    pairs dearer than any allowed one; with the finite mask and whether any pair is allowed."""
    cpu = torch.device("cpu")
    block = _gated_block(pred_x, pred_P, det_z, det_R, track_count, fused_count, det_attr, k).to(cpu, torch.float64)
    nt, nd = block.shape[0], block.shape[1]
    shape = [pred_x.shape[0], det_z.shape[0]]
    finite_block = torch.isfinite(block)
    finite = torch.zeros(shape, dtype=torch.bool)   # past the block: inf, never finite
    finite[:nt, :nd] = finite_block
    if not bool(finite_block.any()):
        return torch.full(shape, math.inf, dtype=torch.float64), finite, False
    big = float(block[finite_block].abs().max()) * 4 + 1e3  # dearer than any allowed pair: never preferred
    cost = torch.full(shape, big, dtype=torch.float64)
    cost[:nt, :nd] = torch.where(finite_block, block, big)
    return cost, finite, True


@kernel
def hungarian_result(finite: Tensor, rows: Tensor, cols: Tensor, assignment: Tensor) -> None:
    """scipy's matching as ``hungarian_assign`` returns it: forbidden pairs dropped, -1 where unmatched."""
    r2c = torch.full([finite.shape[0]], -1, dtype=torch.long)
    ok = finite[rows, cols]
    r2c[rows[ok]] = cols[ok]
    assignment.copy_(r2c)


@kernel
def associate_greedy(pred_x: Tensor, pred_P: Tensor, det_z: Tensor, det_R: Tensor, track_count: Tensor,
                      fused_count: Tensor, det_attr: Tensor, k: Knobs, assignment: Tensor) -> None:
    """``associate``'s body with greedy assignment (capturable: the CUDA graph's)."""
    # Rows and columns past the block are all inf: greedy picks the same pairs without them.
    r2c, _ = greedy_assign(_gated_block(pred_x, pred_P, det_z, det_R, track_count, fused_count, det_attr, k))
    assignment.fill_(-1)
    assignment[:r2c.shape[0]] = r2c


def _through_last(mask: Tensor) -> int:
    """One past the index of ``mask``'s last True (0 if none): the rows after it need no work."""
    at = torch.nonzero(mask)
    return int(at[-1, 0].item()) + 1 if at.shape[0] > 0 else 0


@kernel
def update(tracks_in: Tensor, hits_in: Tensor, count_in: Tensor, next_id_in: Tensor, odom: Tensor,
            pose: Tensor, now: Tensor, pred_x: Tensor, pred_P: Tensor, det_z: Tensor, det_R: Tensor,
            det_attr: Tensor, fused_count: Tensor, assignment: Tensor, k: Knobs, tracks: Tensor,
            track_cov: Tensor, track_hits: Tensor, track_count: Tensor, next_id: Tensor, last_t: Tensor,
            confirmed_count: Tensor) -> None:
    """``kf_update``'s body: Kalman update of matched tracks at the sweep's time, track life, births,
    every track then predicted to ``now`` (the odometry's stamp), compaction."""
    f64 = torch.float64
    mt, nd = tracks_in.shape[0], det_z.shape[0]   # MAX_TRACKS, MAX_FUSED
    # Slots past the track count are dead and dropped: only the leading nt tracks are computed (all of
    # them on CUDA: ``live_rows``). Each filter step is per track (batched solves and products read no
    # neighbour), so a track's numbers do not depend on how many are computed with it.
    nt = live_rows(count_in, mt)
    tracks_in, hits_in, pred_x, pred_P = tracks_in[:nt], hits_in[:nt], pred_x[:nt], pred_P[:nt]
    assignment = assignment[:nt]
    eye4 = torch.eye(4, dtype=f64, device=odom.device)
    alive_in = valid_mask(count_in, nt)
    matched = (assignment >= 0) & alive_in
    j = assignment.clamp(min=0)
    z, r, at = det_z[j].double(), det_R[j].double(), det_attr[j]
    # a box fired dt after the sweep's instant: its position brought back along the track's velocity
    z[:, :2] = z[:, :2] - at[:, 6, None].double() * pred_x[:, 2:]
    # A Doppler far off the track's predicted velocity belongs to something else (clutter beside
    # the object, a neighbour's cluster): one such update would halve a truck's speed. Its
    # velocity rows then count as unobserved; the position still updates.
    yv = (z[:, 2:] - pred_x[:, 2:])[:, :, None]
    m2v = (yv.transpose(1, 2) @ torch.linalg.solve_ex(pred_P[:, 2:, 2:] + r[:, 2:, 2:], yv)[0])[:, 0, 0]
    r[:, 2:, 2:] = torch.where((m2v > k.doppler_gate_chi2)[:, None, None], k.unobserved_var * eye4[:2, :2],
                               r[:, 2:, 2:])
    # Kalman update with H = I (velocity rows carry the Doppler or an unobserved variance).
    s = torch.where(matched[:, None, None], pred_P + r, eye4)
    gain = torch.linalg.solve_ex(s, pred_P)[0].transpose(1, 2)           # P S^-1 (P, S symmetric)
    ik = eye4 - gain
    x_upd = pred_x + (gain @ (z - pred_x)[:, :, None])[:, :, 0]
    p_upd = ik @ pred_P @ ik.transpose(1, 2) + gain @ r @ gain.transpose(1, 2)
    x_new = torch.where(matched[:, None], x_upd, pred_x)
    p_new = torch.where(matched[:, None, None], p_upd, pred_P)

    t_id, t_cls, _x, _y, _vx, _vy, t_yaw, t_l, t_w, t_score, t_age, t_misses = tracks_in.unbind(1)
    a_yaw, a_l, a_w, a_score, a_cls, a_src, _a_dt = at.unbind(1)
    hits = hits_in + matched.int()
    misses = torch.where(matched, 0.0, t_misses + 1)
    confirmed = hits >= k.confirm_hits
    # Only slow tracks coast long: a walker's prediction holds for seconds, while a car's track
    # that lost its object (a wrong velocity, a sweep-seam split) would drift on as a phantom.
    speed = _norm(x_new[:, 2:], 1)
    steady = (hits >= k.steady_hits) & (speed < k.steady_max_speed)
    limit = torch.where(steady, k.steady_max_misses,
                        torch.where(confirmed, k.max_misses, k.tentative_max_misses))
    keep_old = alive_in & (misses < limit)
    src = a_src.long()
    lidar, camera = matched & ((src & 1) > 0), matched & ((src & 4) > 0)   # SRC_LIDAR, SRC_CAMERA
    yaw = torch.where(speed > 1.0, torch.atan2(x_new[:, 3], x_new[:, 2]).float(),
                      torch.where(lidar, a_yaw, t_yaw))
    # From the sweep's instant to the output's: what prediction and planning read is the present.
    f_out, q_out = transition(now[0] - pose[5], k.q)
    xf = (x_new @ f_out.T).float()
    p_new = f_out @ p_new @ f_out.T + q_out
    old = torch.stack([
        t_id, torch.where(camera, a_cls, t_cls), xf[:, 0], xf[:, 1], xf[:, 2], xf[:, 3], yaw,
        torch.where(lidar, 0.7 * t_l + 0.3 * a_l, t_l),
        torch.where(lidar, 0.7 * t_w + 0.3 * a_w, t_w),
        torch.where(matched, 0.6 * t_score + 0.4 * a_score, 0.9 * t_score),
        t_age + 1, misses], dim=1)

    # Births: unmatched detections, ids handed out in detection order. Rows past the count are never
    # born, so only the leading ``nb`` rows are computed (all of them on CUDA: ``live_rows``).
    nb = live_rows(fused_count, nd)
    dz, dr, da = det_z[:nb], det_R[:nb], det_attr[:nb]
    # Detections some matched track took: a scatter of the matched tracks' columns (slot nd: unmatched).
    taken = torch.zeros([nd + 1], dtype=torch.int32, device=odom.device)
    taken.index_fill_(0, torch.where(matched, assignment, nd), 1)
    born = (valid_mask(fused_count, nb) & (taken[:nb] == 0) & (da[:, 3] >= k.birth_score)   # score
            & ~still_radar_only(dz, da, k.radar_still_speed))
    if odom.device.type == "cpu":
        # On the host, rows after the last candidate (usually all: births are rare) take no more work.
        nb = _through_last(born)
        born, dz, dr, da = born[:nb], dz[:nb], dr[:nb], da[:nb]
    if nb > 0:
        born = born & ~within_tracks(dz, x_new, yaw, tracks_in, keep_old, k.birth_margin)
    if odom.device.type == "cpu":
        nb = _through_last(born)
        born, dz, dr, da = born[:nb], dz[:nb], dr[:nb], da[:nb]
    d_yaw, d_l, d_w, d_score, d_cls, _d_src, d_dt = da.unbind(1)
    rank = torch.cumsum(born.int(), 0) - 1
    ids = (next_id_in[0] + rank).float()
    zb, rb = dz.double(), dr.double()
    # Velocity prior N(0, sv^2 I) fused with the Doppler measurement (information form).
    r_vel_inv = torch.linalg.inv_ex(rb[:, 2:, 2:])[0]
    p_vel = torch.linalg.inv_ex(r_vel_inv + eye4[:2, :2] / k.init_vel_var)[0]
    v0 = (p_vel @ r_vel_inv @ zb[:, 2:, None])[:, :, 0]
    p0 = torch.zeros([nb, 4, 4], dtype=f64, device=odom.device)
    p0[:, :2, :2] = rb[:, :2, :2]
    p0[:, 2:, 2:] = p_vel
    x0 = (torch.cat([zb[:, :2] - d_dt[:, None].double() * v0, v0], 1) @ f_out.T).float()
    p0 = f_out @ p0 @ f_out.T + q_out
    one = torch.ones_like(ids)
    new = torch.stack([ids, d_cls, x0[:, 0], x0[:, 1], x0[:, 2], x0[:, 3], d_yaw, d_l, d_w, d_score,
                       one, 0 * one], dim=1)

    # Compact: confirmed first, then tentative, each by id; newborns (largest ids) overflow first.
    # The m = min(nt + nb, mt) leading slots are sorted rows (live or zeroed), the rest zeros.
    rows = torch.cat([old, new])
    all_hits = torch.cat([hits, torch.ones([nb], dtype=torch.int32, device=odom.device)])
    keep = torch.cat([keep_old, born])
    key = ((all_hits < k.confirm_hits).long() << 40) + rows[:, 0].long()
    key = torch.where(keep, key, 9223372036854775807)   # int64's max: dropped rows sort last
    m = min(nt + nb, mt)
    order = torch.sort(key, stable=True)[1][:m]
    n = keep.sum().clamp(max=mt)
    live = torch.arange(m, device=odom.device) < n
    tracks[:m] = torch.where(live[:, None], rows[order], 0.0)
    tracks[m:] = 0.0
    track_cov[:m] = torch.where(live[:, None, None], torch.cat([p_new, p0])[order], 0.0)
    track_cov[m:] = 0.0
    track_hits[:m] = torch.where(live, all_hits[order], 0)
    track_hits[m:] = 0
    track_count.copy_(n.view(1))
    confirmed_count.copy_((live & (all_hits[order] >= k.confirm_hits)).sum().view(1))
    slots = (mt - keep_old.sum()).clamp(min=0)
    next_id.copy_(next_id_in + torch.minimum(born.sum(), slots))
    last_t.copy_(now)
