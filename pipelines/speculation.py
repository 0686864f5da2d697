"""Hypotheses for speculative planning: the world at the next planning release, predicted in slack time.

What the planner will see at its next release R is mostly known before R under LET: the tracks,
the predictions and its own last trajectory are outputs of jobs that finish before they are
published (the runtime's basis, ``rt_runtime.safety.speculation``). The one input that is not
is the ego's odometry, a sensor stream: at R the planner reads the last message that arrived
by R. The hypotheses propagate the basis odometry to that message's stamp:

* ``keep``: constant speed and yaw rate (the ego keeps going);
* ``brake``: the same path, decelerating at ``brake`` m/s^2 (the driver brakes);
* ``accelerate``: the same path at ``+accel`` m/s^2.

Messages are assumed to come every ``period`` (the odometry rate) after the basis message, with
stamps that far apart; a late or missing message makes the hypotheses miss, and the planner then
runs as usual. Obstacle hypotheses (keeps going, brakes, changes lane) would be
needed only for speculation before the fused tracks are known; this stack speculates after.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch

from rt_runtime.core.units import parse_duration

VARIANTS = ("keep", "brake", "accelerate")


def propagate_odometry(odom: torch.Tensor, dt: float, accel: float = 0.0) -> torch.Tensor:
    """ODOM_COLS (x, y, yaw, vx, yaw_rate, t) moved ``dt`` seconds ahead at constant yaw rate and ``accel``.

    The speed does not go below zero (a braking ego stops); positions integrate the arc exactly.
    """
    x, y, yaw, v, w, t = (float(a) for a in odom.tolist())
    t_stop = v / -accel if accel < 0 and v > 0 else math.inf
    tau = min(dt, t_stop) if v > 0 else 0.0
    s = v * tau + 0.5 * accel * tau * tau      # distance along the path
    v1 = max(0.0, v + accel * dt) if v > 0 or accel > 0 else v
    yaw1 = yaw + w * dt
    if abs(w) < 1e-6:
        x1, y1 = x + s * math.cos(yaw), y + s * math.sin(yaw)
    else:   # the arc at radius s / (w tau): exact for constant speed, close for constant acceleration
        dyaw = w * tau
        r = s / dyaw if dyaw != 0 else 0.0
        x1 = x + r * (math.sin(yaw + dyaw) - math.sin(yaw))
        y1 = y - r * (math.cos(yaw + dyaw) - math.cos(yaw))
    return torch.tensor([x1, y1, math.atan2(math.sin(yaw1), math.cos(yaw1)), v1, w, t + dt], dtype=odom.dtype)


class EgoHypotheses:
    """``hypotheses(basis, written_ns, release_ns)`` for the planner: the ego's odometry at the release."""

    def __init__(self, odom: str = "odom", period: str | int = "20ms", variants: Sequence[str] = ("keep", "brake"),
                 brake: float = 3.0, accel: float = 1.0) -> None:
        unknown = sorted(set(variants) - set(VARIANTS))
        if unknown or not variants:
            raise ValueError(f"variants: expected some of {list(VARIANTS)}, found {list(variants)}")
        self.odom = odom
        self.period_ns = parse_duration(period) if isinstance(period, str) else int(period)
        if self.period_ns <= 0:
            raise ValueError(f"period: must be positive, found {period!r}")
        self.accels = [{"keep": 0.0, "brake": -abs(brake), "accelerate": abs(accel)}[v] for v in variants]

    def __call__(self, basis: Mapping[str, Any], written_ns: Mapping[str, int],
                 release_ns: int) -> list[dict[str, Any]]:
        """One input set per variant: the odometry message expected last by ``release_ns``."""
        n = max(0, (release_ns - written_ns[self.odom]) // self.period_ns)   # messages still to come by R
        if n == 0:
            return [{}]   # the basis message is the one the release will read
        dt = n * self.period_ns / 1e9
        odom = basis[self.odom]
        return [{self.odom: propagate_odometry(odom, dt, a)} for a in self.accels]


def ego_hypotheses(**params: Any) -> EgoHypotheses:
    """The ``speculate.hypotheses`` factory named in config/stack.yaml (params: EgoHypotheses')."""
    return EgoHypotheses(**params)
