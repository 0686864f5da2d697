"""World dynamics: every actor and the ego over time, as plain arrays (the ground truth).

Longitudinal motion follows the intelligent driver model (IDM) towards the nearest road user
ahead whose lateral extent, now or within a short prediction horizon, overlaps the follower's
corridor; lateral motion is scripted (lane changes, crossings). Everything is deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .scenarios import BICYCLE, PEDESTRIAN, ActorSpec, Scenario

DT = 0.01  # world step (s); every sensor period is a multiple of it


@dataclass(frozen=True)
class Trajectory:
    """Sampled world states; column 0 of every (T, N+1) array is the ego, then scenario actors."""

    t: np.ndarray  # (T,) seconds from start
    ids: np.ndarray  # (N+1,) ids, ego = 0
    classes: np.ndarray  # (N+1,)
    dims: np.ndarray  # (N+1, 3) length, width, height
    s: np.ndarray
    d: np.ndarray
    v: np.ndarray  # speed along the actor's own direction (>= 0)
    a: np.ndarray
    x: np.ndarray
    y: np.ndarray
    yaw: np.ndarray
    vx: np.ndarray
    vy: np.ndarray
    yaw_rate: np.ndarray
    gap: np.ndarray  # (T,) ego bumper gap to the road user ahead in its lane (inf: none)
    scenario: Scenario

    @property
    def steps(self) -> int:
        """Number of samples."""
        return int(self.t.shape[0])

    def index(self, t: float) -> int:
        """Sample index at time t (rounded to the world step)."""
        return int(np.clip(round(t / DT), 0, self.steps - 1))

    def boxes(self, k: int, with_ego: bool = False) -> np.ndarray:
        """(M, 7) boxes x, y, z, l, w, h, yaw at sample k (z = box centre)."""
        sl = slice(0 if with_ego else 1, None)
        dims = self.dims[sl]
        return np.column_stack([self.x[k, sl], self.y[k, sl], dims[:, 2] / 2, dims, self.yaw[k, sl]])


def _lateral(spec: ActorSpec, t: np.ndarray) -> np.ndarray:
    d = np.full(t.shape, spec.d)
    start = spec.d
    for m in spec.maneuvers:
        u = np.clip((t - m.t0) / m.duration, 0.0, 1.0)
        # walkers move at constant speed; vehicles ease in and out of a lane change
        f = u if spec.cls == PEDESTRIAN else (1 - np.cos(np.pi * u)) / 2
        d = np.where(t >= m.t0, start + (m.d_target - start) * f, d)
        start = m.d_target
    return d


def simulate(scenario: Scenario, seconds: float) -> Trajectory:
    """Run the scenario for `seconds` (+0.5 s margin for sensors that look ahead in time)."""
    specs = (scenario.ego, *scenario.actors)
    n = len(specs)
    steps = int(round((seconds + 0.5) / DT)) + 1
    t = np.arange(steps) * DT
    road = scenario.road
    D = np.stack([_lateral(sp, t) for sp in specs], axis=1)
    dims = np.array([sp.size for sp in specs])
    L, W = dims[:, 0], dims[:, 1]
    dirn = np.array([sp.direction for sp in specs], np.float64)
    v_des = np.array([max(sp.v_des, 0.1) for sp in specs])
    headway = np.array([sp.headway for sp in specs])
    scripted = np.array([bool(sp.speed_profile) or sp.cls == PEDESTRIAN for sp in specs])
    follows = ~scripted
    profiles = [np.array(sp.speed_profile if sp.speed_profile else [(0.0, sp.v)]) for sp in specs]
    Vs = np.stack([np.interp(t, p[:, 0], p[:, 1]) for p in profiles], axis=1)
    horizon = np.where(np.arange(n) == 0, 2.0, 0.6)  # ego looks further ahead than the traffic
    ahead_k = np.minimum(np.arange(steps)[:, None] + np.round(horizon / DT).astype(int)[None, :], steps - 1)
    a_max, b_comf, s_min, b_max, jerk = 1.8, 3.0, 2.5, 9.0, 15.0
    a_prev = np.zeros(n)
    yielding = np.zeros((steps, n), bool)  # pedestrian j wants to cross or is crossing at step k
    for j, sp in enumerate(specs):
        if sp.cls == PEDESTRIAN and sp.maneuvers:
            m = sp.maneuvers[0]
            side = np.sign(m.d_target) or 1.0
            yielding[:, j] = (t >= m.t0 - 2.0) & (side * D[:, j] < road.half_width + 0.5)
    S = np.empty((steps, n))
    V = np.empty((steps, n))
    A = np.zeros((steps, n))
    gap = np.full(steps, np.inf)
    s = np.array([sp.s for sp in specs], np.float64)
    v = np.array([sp.v for sp in specs], np.float64)
    eye = np.eye(n, dtype=bool)
    for k in range(steps):
        S[k], V[k] = s, v
        d_now = D[k]
        # row i of overlap: is j (now or within i's prediction horizon) inside i's corridor?
        d_fut = D[ahead_k[k]]  # (n observers' horizons, n actors)
        lo = np.minimum(d_now[None, :], d_fut) - W[None, :] / 2
        hi = np.maximum(d_now[None, :], d_fut) + W[None, :] / 2
        overlap = (lo < d_now[:, None] + W[:, None] / 2 + 0.3) & (hi > d_now[:, None] - W[:, None] / 2 - 0.3)
        ds = dirn[:, None] * (s[None, :] - s[:, None])
        bumper = ds - (L[:, None] + L[None, :]) / 2
        cand = overlap & (ds > 0) & ~eye
        g = np.where(cand, bumper, np.inf)
        j = np.argmin(g, axis=1)
        gmin = g[np.arange(n), j]
        v_lead = np.where(dirn[j] == dirn, v[j], 0.0)
        now_overlap = (np.abs(d_now - d_now[0]) < (W + W[0]) / 2) & (np.arange(n) > 0)
        g0 = dirn[0] * (s - s[0]) - (L + L[0]) / 2
        ahead0 = now_overlap & (dirn[0] * (s - s[0]) > 0)
        gap[k] = g0[ahead0].min() if ahead0.any() else np.inf
        if yielding[k].any():
            # a pedestrian about to cross or crossing a zebra stops traffic in both directions
            for sc in road.crosswalks:
                if not (yielding[k] & (np.abs(s - sc - 2.0) < 3.0)).any():
                    continue
                g_cw = np.where(dirn > 0, sc - s, s - (sc + 4.0)) - L / 2 - 1.0
                use = follows & (g_cw > -1.0) & (g_cw < gmin)
                gmin = np.where(use, np.maximum(g_cw, 0.1), gmin)
                v_lead = np.where(use, 0.0, v_lead)
        s_star = s_min + v * headway + v * (v - v_lead) / (2 * np.sqrt(a_max * b_comf))
        inter = np.where(np.isfinite(gmin), (np.maximum(s_star, 0) / np.maximum(gmin, 0.1)) ** 2, 0.0)
        acc = np.clip(a_max * (1 - (v / v_des) ** 4 - inter), -b_max, a_max)
        # drivers and ACC systems build up braking over a few tenths of a second (jerk limit)
        acc = np.clip(acc, a_prev - jerk * DT, a_prev + jerk * DT)
        v_new = np.where(follows, np.maximum(v + acc * DT, 0.0), Vs[min(k + 1, steps - 1)])
        A[k] = (v_new - v) / DT
        a_prev = np.where(follows, acc, 0.0)
        kappa = road.curvature(s)
        s = s + dirn * (v + v_new) / 2 * DT / np.maximum(1 - kappa * d_now, 0.2)
        v = v_new
    x, y, head = road.pose(S, D)
    vd = np.gradient(D, DT, axis=0)
    walker = np.array([sp.cls in (PEDESTRIAN, BICYCLE) for sp in specs])
    v_floor = np.where(walker, 0.0, 1.0)
    along = dirn * np.maximum(V, v_floor)
    yaw = head + np.arctan2(vd, along)
    yaw = np.where((np.abs(vd) < 0.05) & walker, head + np.where(dirn > 0, 0.0, np.pi), yaw)
    yaw = np.arctan2(np.sin(yaw), np.cos(yaw))
    vlong = dirn * V
    vx = vlong * np.cos(head) - vd * np.sin(head)
    vy = vlong * np.sin(head) + vd * np.cos(head)
    yaw_rate = np.gradient(np.unwrap(yaw, axis=0), DT, axis=0)
    return Trajectory(t, np.array([sp.id for sp in specs], np.uint32), np.array([sp.cls for sp in specs], np.uint8),
                      dims, S, D, V, A, x, y, yaw, vx, vy, yaw_rate, gap, scenario)


def outcome(traj: Trajectory, seconds: float | None = None) -> dict[str, float]:
    """What happened to the ego: collisions, closest gap, hardest braking, stops, cut-in time."""
    k_end = traj.steps if seconds is None else traj.index(seconds) + 1
    gap = traj.gap[:k_end]
    v = traj.v[:k_end, 0]
    stopped = v < 0.5
    starts = np.flatnonzero(stopped[1:] & ~stopped[:-1]) + 1
    stops = len(starts) + int(stopped[0])
    res = {
        "collision": float((gap < 0).any()),
        "min_gap_m": float(gap.min()) if np.isfinite(gap).any() else float("inf"),
        "max_decel": float(max(0.0, -traj.a[:k_end, 0].min())),
        "min_speed": float(v.min()),
        "ego_stops": float(stops),
        "ego_distance_m": float(traj.s[k_end - 1, 0] - traj.s[0, 0]),
    }
    if stops:
        res["first_stop_s"] = float(traj.s[int(np.flatnonzero(stopped)[0]), 0])
    # the first time another actor that started outside the ego lane is inside it
    w = traj.dims[:, 1]
    inside = np.abs(traj.d[:k_end, 1:] - traj.d[:k_end, :1]) < (w[1:] + w[0]) / 2
    outside0 = ~inside[0]
    entered = inside & outside0[None, :] & (traj.s[:k_end, 1:] > traj.s[:k_end, :1])
    if entered.any():
        k = int(np.argmax(entered.any(axis=1)))
        j = int(np.flatnonzero(entered[k])[0])
        res["cut_in_actor"] = float(traj.ids[1 + j])
        res["cut_in_t"] = float(traj.t[k])
    return res


def check_outcome(traj: Trajectory, seconds: float | None = None) -> dict[str, tuple[float, float, bool]]:
    """Each expected outcome of the scenario: (expected, actual, met)."""
    got = outcome(traj, seconds)
    res: dict[str, tuple[float, float, bool]] = {}
    for key, want in traj.scenario.expected.items():
        if key == "min_gap_m_above":
            res[key] = (want, got["min_gap_m"], got["min_gap_m"] > want)
        elif key == "max_decel_above":
            res[key] = (want, got["max_decel"], got["max_decel"] > want)
        elif key == "ego_stops":
            res[key] = (want, got["ego_stops"], got["ego_stops"] >= want)
        elif key == "stop_before_s":
            first = got.get("first_stop_s", float("inf"))
            res[key] = (want, first, first < want)
        elif key == "cut_in_by_s":
            res[key] = (want, got.get("cut_in_t", float("inf")), got.get("cut_in_t", float("inf")) <= want)
        else:
            res[key] = (want, got.get(key, float("nan")), got.get(key) == want)
    return res
