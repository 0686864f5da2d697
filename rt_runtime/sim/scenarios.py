"""Named driving scenarios: road, ego, scripted and random traffic, and the outcome they must show."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .road import Road

UNKNOWN, CAR, TRUCK, BICYCLE, PEDESTRIAN = 0, 1, 2, 3, 4  # = GroundTruthObject label constants
POLE, TREE = 101, 102  # static scenery: seen by sensors, not in the ground truth
DIMS: dict[int, tuple[float, float, float]] = {
    CAR: (4.6, 1.9, 1.5), TRUCK: (12.0, 2.5, 3.6), BICYCLE: (1.8, 0.6, 1.7), PEDESTRIAN: (0.5, 0.6, 1.75),
    POLE: (0.3, 0.3, 7.0), TREE: (1.2, 1.2, 5.0),
}


@dataclass(frozen=True)
class Maneuver:
    """A lateral move to offset `d_target`, starting at `t0` and lasting `duration` seconds."""

    t0: float
    duration: float
    d_target: float


@dataclass(frozen=True)
class ActorSpec:
    """One road user in Frenet coordinates; `speed_profile` (t, v) pairs replace the driver model."""

    id: int
    cls: int
    s: float
    d: float
    v: float
    v_des: float = 0.0
    direction: int = 1
    maneuvers: tuple[Maneuver, ...] = ()
    speed_profile: tuple[tuple[float, float], ...] = ()
    headway: float = 1.4  # IDM time gap (s)
    dims: tuple[float, float, float] | None = None

    @property
    def size(self) -> tuple[float, float, float]:
        """(length, width, height) in m."""
        return self.dims or DIMS[self.cls]


@dataclass(frozen=True)
class Scenario:
    """A complete world description; `expected` names the outcome every run of it must show."""

    name: str
    description: str
    road: Road
    ego: ActorSpec
    actors: tuple[ActorSpec, ...]
    static: np.ndarray  # (M, 8): x, y, z, l, w, h, yaw, class
    expected: dict[str, float] = field(default_factory=dict)


def _scenery(road: Road, spacing: float, cls: int, offset: float, both: bool, rng: np.random.Generator) -> np.ndarray:
    s = np.arange(20.0, road.length, spacing) + rng.uniform(-3, 3, size=int(np.ceil((road.length - 20) / spacing)))
    sides = (-1.0, 1.0) if both else (-1.0,)
    rows = []
    for side in sides:
        d = side * (road.half_width + offset)
        x, y, h = road.pose(s, d)
        ln, w, hh = DIMS[cls]
        rows.append(np.stack([x, y, np.full_like(x, hh / 2), np.full_like(x, ln), np.full_like(x, w),
                              np.full_like(x, hh), h, np.full_like(x, cls)], axis=1))
    return np.concatenate(rows)


def _random_traffic(rng: np.random.Generator, road: Road, lanes: list[int], taken: list[tuple[int, float]],
                    s_lo: float, s_hi: float, count: int, v_lo: float, v_hi: float, first_id: int,
                    keep_out: tuple[tuple[int, float, float], ...] = ()) -> list[ActorSpec]:
    """Cars at random free places (>= 30 m from anyone in the same lane, outside `keep_out`)."""
    out: list[ActorSpec] = []
    for _ in range(count * 20):
        if len(out) == count:
            break
        lane = int(rng.choice(lanes))
        s = float(rng.uniform(s_lo, s_hi))
        if any(ln == lane and abs(s - s2) < 30 for ln, s2 in taken) or \
                any(ln == lane and a <= s <= b for ln, a, b in keep_out):
            continue
        v = float(rng.uniform(v_lo, v_hi))
        cls = TRUCK if rng.random() < 0.15 else CAR
        taken.append((lane, s))
        out.append(ActorSpec(first_id + len(out), cls, s, road.lane_center(lane), v, v_des=v,
                             direction=road.directions[lane], headway=float(rng.uniform(1.1, 1.8))))
    return out


def highway_cut_in(rng: np.random.Generator) -> Scenario:
    """Three-lane curved highway; a car cuts in close ahead of the ego at t = 4 s."""
    road = Road(((150, 0.0), (300, 1 / 900), (200, 0.0), (400, -1 / 700), (1200, 0.0)),
                directions=(1, 1, 1), lane_width=3.6, shoulder=2.5, speed_limit=27.8)
    ego = ActorSpec(0, CAR, 60.0, road.lane_center(1), 27.0, v_des=28.0, headway=1.2)
    scripted = [
        ActorSpec(1, CAR, 60.0 + 40.0, road.lane_center(2), 25.0, v_des=25.0,
                  maneuvers=(Maneuver(4.0, 2.5, road.lane_center(1)),)),
        ActorSpec(2, TRUCK, 60.0 + 55.0, road.lane_center(0), 22.0, v_des=22.0),
        ActorSpec(3, CAR, 60.0 - 35.0, road.lane_center(2), 31.0, v_des=32.0),
        ActorSpec(4, CAR, 60.0 + 140.0, road.lane_center(1), 27.5, v_des=27.5),
    ]
    taken = [(1, 60.0), (2, 100.0), (0, 115.0), (2, 25.0), (1, 200.0)]
    # random traffic keeps to the outer lanes, and away from car 1's path, so that the cut-in
    # plays out the same way for every seed
    traffic = _random_traffic(rng, road, [0, 2], taken, 0.0, 520.0, 7, 21.0, 31.0, 5, keep_out=((2, 90.0, 380.0),))
    static = _scenery(road, 50.0, POLE, road.shoulder + 1.0, False, rng)
    return Scenario("highway_cut_in", "3-lane highway with curves; car 1 cuts in 4 s in, ego brakes and keeps its gap",
                    road, ego, tuple(scripted + traffic), static,
                    expected={"collision": 0.0, "min_gap_m_above": 15.0, "max_decel_above": 2.5,
                              "cut_in_actor": 1.0, "cut_in_by_s": 6.0})


def pedestrian_crossing(rng: np.random.Generator) -> Scenario:
    """Two-lane town street; a pedestrian crosses at a zebra crossing and the ego stops for them."""
    road = Road(((180, 0.0), (60, 1 / 150), (600, 0.0)), directions=(1, -1), lane_width=3.25,
                shoulder=1.5, sidewalk=3.0, crosswalks=(130.0,))
    ego = ActorSpec(0, CAR, 30.0, road.lane_center(0), 12.0, v_des=13.9, headway=1.5)
    walk_d = road.half_width + road.shoulder + 1.0
    actors = [
        ActorSpec(1, PEDESTRIAN, 132.0, -walk_d, 0.0, maneuvers=(Maneuver(4.5, 2 * walk_d / 1.3, walk_d),)),
        ActorSpec(2, BICYCLE, 75.0, -(road.half_width + 0.75), 5.0, speed_profile=((0.0, 5.0), (60.0, 5.0))),
        ActorSpec(3, CAR, 260.0, road.lane_center(1), 11.0, v_des=12.0, direction=-1),
        ActorSpec(4, CAR, 320.0, road.lane_center(1), 11.0, v_des=12.0, direction=-1),
        ActorSpec(5, PEDESTRIAN, 60.0, walk_d + 0.5, 1.3, direction=1, speed_profile=((0.0, 1.3), (60.0, 1.3))),
        ActorSpec(6, PEDESTRIAN, 150.0, -walk_d - 0.5, 1.2, direction=-1, speed_profile=((0.0, 1.2), (60.0, 1.2))),
        ActorSpec(7, CAR, 8.0, road.lane_center(0), 11.0, v_des=13.0, headway=1.6),
    ]
    for i in range(4):  # more people strolling on both sidewalks
        side = 1 if rng.random() < 0.5 else -1
        v = float(rng.uniform(0.9, 1.6))
        d = side * (walk_d + rng.uniform(-0.8, 0.8))
        actors.append(ActorSpec(8 + i, PEDESTRIAN, float(rng.uniform(40, 260)), d,
                                v, direction=int(rng.choice([-1, 1])), speed_profile=((0.0, v), (60.0, v))))
    static = _scenery(road, 25.0, TREE, road.shoulder + road.sidewalk + 1.2, True, rng)
    return Scenario("pedestrian_crossing",
                    "town street; pedestrian 1 crosses from t = 4.5 s, ego stops before the crossing",
                    road, ego, tuple(actors), static,
                    expected={"collision": 0.0, "ego_stops": 1.0, "min_gap_m_above": 2.0, "stop_before_s": 131.0})


def stop_and_go(rng: np.random.Generator) -> Scenario:
    """Dense two-lane traffic; the car ahead stops and starts again and the ego follows it."""
    road = Road(((300, 0.0), (200, -1 / 400), (1000, 0.0)), directions=(1, 1), lane_width=3.5, shoulder=2.0)
    ego = ActorSpec(0, CAR, 40.0, road.lane_center(0), 11.0, v_des=16.0, headway=1.4)
    profile = ((0.0, 11.0), (1.5, 11.0), (4.0, 0.0), (8.5, 0.0), (11.0, 8.0), (12.0, 8.0), (14.0, 0.0),
               (20.0, 0.0), (23.0, 8.0), (60.0, 8.0))
    actors = [ActorSpec(1, CAR, 40.0 + 30.0, road.lane_center(0), 12.0, speed_profile=profile)]
    lead2 = tuple((t + 1.0, v) for t, v in profile)
    actors.append(ActorSpec(2, TRUCK, 40.0 + 60.0, road.lane_center(0), 12.0, speed_profile=((0.0, 12.0),) + lead2))
    taken = [(0, 40.0), (0, 70.0), (0, 100.0)]
    actors += _random_traffic(rng, road, [1], taken, 0.0, 300.0, 6, 7.0, 11.0, 3)
    static = _scenery(road, 40.0, POLE, road.shoulder + 1.0, True, rng)
    return Scenario("stop_and_go", "two-lane jam; car 1 stops twice, ego stops behind it and starts again",
                    road, ego, tuple(actors), static,
                    expected={"collision": 0.0, "ego_stops": 2.0, "min_gap_m_above": 1.5})


SCENARIOS: dict[str, Callable[[np.random.Generator], Scenario]] = {
    "highway_cut_in": highway_cut_in,
    "pedestrian_crossing": pedestrian_crossing,
    "stop_and_go": stop_and_go,
}
DEFAULT_SCENARIO = "highway_cut_in"


def build_scenario(name: str, seed: int) -> Scenario:
    """The scenario `name` with its random parts drawn from `seed`."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; choose one of {sorted(SCENARIOS)}")
    return SCENARIOS[name](np.random.default_rng([seed, 0]))
