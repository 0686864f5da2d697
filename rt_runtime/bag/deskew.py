"""Motion compensation (deskew) of a LiDAR sweep: every point moved to where the sensor sees it from
at one reference time (``t`` = 0), using each point's firing time and the ego's motion.

A spinning LiDAR takes a sweep over about 100 ms; at 27 m/s the vehicle moves 2.7 m meanwhile,
so a point fired late is measured from further ahead than one fired early, and a straight wall
comes out sheared. With the ego's forward speed ``vx`` and yaw rate (base_link, from the
odometry) held constant over the sweep, the ego's pose at time t relative to the stamp is the
arc of a circle: heading ``w t``, position ``(v/w sin wt, v/w (1 - cos wt))`` (a straight line
when ``w`` is 0). Each point goes sensor -> base_link at its firing time -> base_link at the
stamp -> sensor. The sensor's mount in base_link (x, y, z, yaw) matters because a turning
vehicle moves a sensor ahead of the rear axle sideways; without one the sensor is taken at the
rear axle. Moving objects are not compensated (their motion is unknown here).
"""
from __future__ import annotations

import numpy as np

_STRAIGHT = 1e-6   # rad/s: below this yaw rate the arc is a straight line (v/w would lose precision)


def deskew(xyz: np.ndarray, t: np.ndarray, vx: float, yaw_rate: float,
           mount: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)) -> np.ndarray:
    """(N, 3) points in the sensor frame, each at its firing time ``t`` (s since the stamp) -> (N, 3)
    float32 points in the sensor frame at the stamp, for an ego moving at ``vx`` m/s and ``yaw_rate`` rad/s."""
    mx, my, _, myaw = (float(v) for v in mount)   # planar motion: z stays
    c, s = np.cos(myaw), np.sin(myaw)
    p = xyz.astype(np.float64)
    # sensor -> base_link at the firing time
    bx = c * p[:, 0] - s * p[:, 1] + mx
    by = s * p[:, 0] + c * p[:, 1] + my
    tt = t.astype(np.float64)
    th = yaw_rate * tt
    if abs(yaw_rate) > _STRAIGHT:
        dx, dy = vx / yaw_rate * np.sin(th), vx / yaw_rate * (1.0 - np.cos(th))
    else:
        dx, dy = vx * tt, np.zeros_like(tt)
    ct, st = np.cos(th), np.sin(th)
    # base_link at the firing time -> base_link at the stamp, then back into the sensor frame
    x0 = ct * bx - st * by + dx - mx
    y0 = st * bx + ct * by + dy - my
    out = np.empty((len(p), 3), np.float32)
    out[:, 0] = c * x0 + s * y0
    out[:, 1] = -s * x0 + c * y0
    out[:, 2] = p[:, 2]
    return out
