"""Road geometry: a reference line of constant-curvature segments, lanes offset from it.

Frenet coordinates (s along the reference line, d to its left) are how actors move; map
coordinates (x, y, yaw) are what sensors see. Both directions are closed-form and vectorized:
arcs and straights have exact projections, so no nearest-neighbour search is needed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def _s_c(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # sin(t)/t and (1 - cos t)/t without the 0/0 at t = 0
    s = np.sinc(theta / np.pi)
    c = np.sin(theta / 2) * np.sinc(theta / (2 * np.pi))
    return s, c


@dataclass(frozen=True)
class Road:
    """A multi-lane road; lane 0 is the rightmost, `directions[i]` is +1 (along s) or -1."""

    segments: tuple[tuple[float, float], ...]  # (length m, curvature 1/m)
    directions: tuple[int, ...] = (1, 1, 1)
    lane_width: float = 3.5
    shoulder: float = 1.5
    sidewalk: float = 0.0
    crosswalks: tuple[float, ...] = ()  # s where a 4 m zebra crossing starts
    origin: tuple[float, float, float] = (0.0, 0.0, 0.0)  # x, y, heading of s = 0
    speed_limit: float = 13.9  # m/s (50 km/h), what a map says of the road; a planner's target speed
    s0: np.ndarray = field(init=False, repr=False)
    x0: np.ndarray = field(init=False, repr=False)
    y0: np.ndarray = field(init=False, repr=False)
    h0: np.ndarray = field(init=False, repr=False)
    k: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        lengths = np.array([s[0] for s in self.segments], np.float64)
        k = np.array([s[1] for s in self.segments], np.float64)
        s0 = np.concatenate([[0.0], np.cumsum(lengths)])
        x0, y0, h0 = [self.origin[0]], [self.origin[1]], [self.origin[2]]
        for L, kk in zip(lengths, k):
            sv, cv = _s_c(np.array(kk * L))
            h = h0[-1]
            x0.append(x0[-1] + L * (np.cos(h) * sv - np.sin(h) * cv))
            y0.append(y0[-1] + L * (np.sin(h) * sv + np.cos(h) * cv))
            h0.append(h + kk * L)
        object.__setattr__(self, "s0", s0)
        object.__setattr__(self, "x0", np.array(x0))
        object.__setattr__(self, "y0", np.array(y0))
        object.__setattr__(self, "h0", np.array(h0))
        object.__setattr__(self, "k", k)

    @property
    def n_lanes(self) -> int:
        """Number of lanes."""
        return len(self.directions)

    @property
    def length(self) -> float:
        """Length of the reference line (m)."""
        return float(self.s0[-1])

    @property
    def half_width(self) -> float:
        """Distance from the reference line to the outer edge of the outermost lane."""
        return self.n_lanes * self.lane_width / 2

    def lane_center(self, lane: int) -> float:
        """Lateral offset d of a lane's centre line."""
        return (lane + 0.5) * self.lane_width - self.half_width

    def pose(self, s: np.ndarray, d: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Map (x, y, heading) of Frenet points; s beyond the ends extends the end segments."""
        s = np.asarray(s, np.float64)
        i = np.clip(np.searchsorted(self.s0, s, side="right") - 1, 0, len(self.k) - 1)
        ds = s - self.s0[i]
        k = self.k[i]
        h0 = self.h0[i]
        sv, cv = _s_c(k * ds)
        x = self.x0[i] + ds * (np.cos(h0) * sv - np.sin(h0) * cv)
        y = self.y0[i] + ds * (np.sin(h0) * sv + np.cos(h0) * cv)
        h = h0 + k * ds
        return x - d * np.sin(h), y + d * np.cos(h), h

    def curvature(self, s: np.ndarray) -> np.ndarray:
        """Curvature of the reference line at s."""
        i = np.clip(np.searchsorted(self.s0, np.asarray(s), side="right") - 1, 0, len(self.k) - 1)
        return self.k[i]

    def frenet(self, x: np.ndarray, y: np.ndarray, s_range: tuple[float, float] | None = None,
               s_hint: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Project map points to (s, d).

        Only segments overlapping `s_range` are candidates. With `s_hint` (a rough s per point, within
        a few metres) each point is projected once, on the segment its hint falls in, and again on
        the neighbouring one only where that first answer falls outside the segment.
        """
        if s_hint is not None and len(self.k) > 1:
            return self._frenet_hinted(x, y, s_hint)
        lo, hi = s_range if s_range is not None else (-np.inf, np.inf)
        segs = [j for j in range(len(self.k)) if self.s0[j + 1] >= lo and self.s0[j] <= hi] or [0]
        if len(segs) == 1:
            return self._project(segs[0], x, y)
        best_s = np.full(np.shape(x), np.nan)
        best_d = np.full(np.shape(x), np.inf)
        for j in segs:
            sl, dl = self._project(j, x, y)
            L = self.s0[j + 1] - self.s0[j]
            ok = ((sl >= self.s0[j]) | (j == 0)) & ((sl <= self.s0[j] + L) | (j == len(self.k) - 1))
            better = ok & (np.abs(dl) < np.abs(best_d))
            best_s = np.where(better, sl, best_s)
            best_d = np.where(better, dl, best_d)
        return best_s, best_d

    def _frenet_hinted(self, x: np.ndarray, y: np.ndarray, s_hint: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        last = len(self.k) - 1
        seg = np.clip(np.searchsorted(self.s0, s_hint, side="right") - 1, 0, last)
        s, d = self._project_each(seg, x, y)
        for step in (-1, 1):
            off = (s < self.s0[seg]) if step < 0 else (s > self.s0[seg + 1])
            off &= (seg + step >= 0) & (seg + step <= last)
            if off.any():
                idx = np.flatnonzero(off)
                s2, d2 = self._project_each(seg[idx] + step, x[idx], y[idx])
                s[idx], d[idx] = s2, d2
        return s, d

    def _project_each(self, seg: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`_project` with a segment per point: straights in closed form, arcs (atan2) only where needed."""
        c, sn = np.cos(self.h0[:-1]), np.sin(self.h0[:-1])
        rx = x - self.x0[:-1][seg]
        ry = y - self.y0[:-1][seg]
        cs, ss = c[seg], sn[seg]
        s = self.s0[seg] + rx * cs + ry * ss
        d = ry * cs - rx * ss
        arc = np.flatnonzero(np.abs(self.k[seg]) > 1e-9)
        if arc.size:
            k = self.k[seg[arc]]
            ax, ay = ss[arc] / k, -cs[arc] / k  # start point seen from the arc centre
            vx, vy = rx[arc] + ax, ry[arc] + ay
            phi = np.arctan2(ax * vy - ay * vx, ax * vx + ay * vy)
            s[arc] = self.s0[seg[arc]] + phi / k
            d[arc] = 1 / k - np.sign(k) * np.hypot(vx, vy)
        return s, d

    def _project(self, j: int, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(s, d) of points relative to segment j's line or circle (extended beyond its ends)."""
        h0 = self.h0[j]
        # a straight is an arc of negligible curvature: one formula, and d stays exact to ~1e-7 m
        k = self.k[j] if abs(self.k[j]) > 1e-9 else 1e-9
        # a = start point seen from the arc centre, v = point seen from the centre
        ax, ay = np.sin(h0) / k, -np.cos(h0) / k
        vx = x - self.x0[j] + ax
        vy = y - self.y0[j] + ay
        phi = np.arctan2(ax * vy - ay * vx, ax * vx + ay * vy)
        return self.s0[j] + phi / k, 1 / k - np.sign(k) * np.hypot(vx, vy)
