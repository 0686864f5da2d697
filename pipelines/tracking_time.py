"""When the tracker's detections were seen, as kernels: the ego pose at a sweep's instant
and constant-velocity motion over a time step of either sign (``pipelines/tracking.py``, ops 0 and 2)."""
from __future__ import annotations

import torch
from torch import Tensor

from rt_runtime.exec import kernel
from pipelines.geometry import wrap_angle

@kernel
def sweep_pose(odom: Tensor, has_odom: bool, has_boxes: bool, shift: float, stamp_s: float, radar_shift: float,
               offset: float, max_dt: float, pose: Tensor, now: Tensor, radar_lag: Tensor) -> None:
    """``sweep_pose``'s body: the ego pose (x, y, yaw, vx, yaw rate, t) at the instant the sweep's boxes
    describe, ``shift`` + ``offset`` (``sweep_offset``) from the odometry's stamp, along the arc the odometry's speed
    and yaw rate drive; ``now``, the instant the tracks are output at (the odometry's stamp); ``radar_lag``,
    the radar scan's stamp after that instant (``radar_shift``: after the sweep's stamp; 0 without a scan)."""
    pose.copy_(odom)
    now.copy_(odom[5:6])
    radar_lag.zero_()
    if not has_boxes:
        return
    radar_lag.fill_(radar_shift - offset if abs(radar_shift - offset) <= max_dt else 0.0)
    if not has_odom:   # perception only: the sweeps' own stamps are the time, in base_link
        pose[5] = stamp_s + offset
        now.copy_(pose[5:6])
        return
    dt = shift + offset
    if abs(dt) > max_dt:   # the LiDAR and the odometry stamp on different clocks: keep the odometry's pose
        return
    yaw, v, w = odom[2], odom[3], odom[4]
    th = w * dt
    small = th.abs() < 1e-9
    safe = torch.where(small, torch.ones_like(th), th)
    along = v * dt * torch.where(small, 1.0 - th * th / 6.0, torch.sin(safe) / safe)          # sin(th) / th
    left = v * dt * torch.where(small, th / 2.0, (1.0 - torch.cos(safe)) / safe)              # (1 - cos th) / th
    c, s = torch.cos(yaw), torch.sin(yaw)
    pose[0] = odom[0] + c * along - s * left
    pose[1] = odom[1] + s * along + c * left
    pose[2] = wrap_angle(yaw + th)
    pose[5] = odom[5] + dt


def transition(dt: Tensor, q: float) -> tuple[Tensor, Tensor]:
    """Constant velocity over ``dt`` (either sign): F, and the white-noise-acceleration Q of |dt|
    (backwards the position-velocity terms change sign; Q stays positive semi-definite)."""
    eye2 = torch.eye(2, dtype=torch.float64, device=dt.device)
    f = torch.eye(4, dtype=torch.float64, device=dt.device)
    f[:2, 2:] = dt * eye2
    a = dt.abs()
    qm = torch.cat([torch.cat([a ** 3 / 3 * eye2, dt * a / 2 * eye2], 1),
                    torch.cat([dt * a / 2 * eye2, a * eye2], 1)]) * q
    return f, qm
