"""Prediction and planning through GraphExecutor: lane keeping, speed, obstacles, minimal-risk fallback, jerk."""
import math

import pytest
import torch

from pipelines import schema
from pipelines.geometry import RoadLayout, route_from_road
from pipelines.planning import PlannerParams, build_minimal_risk_graph, build_planning_graph
from pipelines.prediction import build_prediction_graph
from rt_runtime.exec import GraphExecutor

DT = schema.DT_S
ROUTE = torch.stack((torch.arange(0.0, 600.0, 2.0), torch.zeros(300)), 1)   # straight, along +x
R_ARC = 120.0
_th = torch.linspace(-0.3, 2.0, 300)
ARC = torch.stack((R_ARC * torch.sin(_th), R_ARC - R_ARC * torch.cos(_th)), 1)  # left curve, centre (0, R)
ONE = lambda v: torch.tensor([v], dtype=torch.int32)  # noqa: E731



pytestmark = pytest.mark.usefixtures("one_torch_thread")

def scene(obstacles=(), ego=(50.0, 0.0, 0.0, 10.0), route=ROUTE, t=0.0, last=None):
    """Planner inputs: static obstacles (x, y) with car size, their (static) predictions."""
    tracks = torch.zeros(schema.MAX_TRACKS, len(schema.TRACK_COLS))
    pred = torch.zeros(schema.MAX_TRACKS, schema.HORIZON, 2)
    for i, (x, y) in enumerate(obstacles):
        tracks[i, [0, 2, 3, 7, 8]] = torch.tensor([i + 1, x, y, 4.6, 1.9])
        pred[i] = torch.tensor([x, y])
    return {"odom": torch.tensor([*ego, 0.0, t], dtype=torch.float64), "route": route, "route_count": ONE(len(route)),
            "tracks": tracks, "predictions": pred, "confirmed_count": ONE(len(obstacles)),
            "last_trajectory": torch.zeros(schema.TRAJ_POINTS, len(schema.TRAJ_COLS)) if last is None else last}


@pytest.fixture(scope="module")
def planner():
    return GraphExecutor(build_planning_graph(target_speed=10.0))


def plan(ex, **kw):
    out = ex.run(scene(**kw))
    return out["trajectory"].clone(), int(out["plan_status"]), float(out["plan_cost"])


def jerk(v):
    return torch.diff(v, n=3) / DT ** 3


def min_gap(traj, obstacles):
    """Smallest centre distance between the plan and any obstacle over time."""
    return min(float((traj[:, :2] - torch.tensor(o)).norm(dim=1).min()) for o in obstacles)


def test_empty_road_keeps_lane_and_target_speed(planner):
    traj, status, cost = plan(planner)
    assert status == 0 and math.isfinite(cost)
    assert traj[:, 1].abs().max() < 0.05 and traj[:, 2].abs().max() < 0.01
    assert torch.allclose(traj[:, 3], torch.full((schema.TRAJ_POINTS,), 10.0), atol=0.05)
    assert torch.allclose(traj[:, 4], torch.arange(schema.TRAJ_POINTS) * DT)
    assert torch.allclose(torch.diff(traj[:, 0]), torch.full((schema.TRAJ_POINTS - 1,), 1.0), atol=0.02)


def test_accelerates_towards_target_speed_within_limits(planner):
    traj, status, _ = plan(planner, ego=(50.0, 0.0, 0.0, 4.0))
    v = traj[:, 3]
    assert status == 0 and v[-1] > 6.0 and (torch.diff(v) >= -1e-4).all()
    assert (torch.diff(v) / DT).max() <= PlannerParams().max_accel + 1e-3
    assert jerk(v).abs().max() <= PlannerParams().max_jerk + 1e-2


def test_keeps_its_lane_on_a_curved_road():
    ex = GraphExecutor(build_planning_graph(target_speed=12.0))
    a = 0.4
    x, y = R_ARC * math.sin(a), R_ARC - R_ARC * math.cos(a)
    traj, status, _ = plan(ex, route=ARC, ego=(x, y, a, 12.0))
    radius = (traj[:, 0] ** 2 + (traj[:, 1] - R_ARC) ** 2).sqrt()
    assert status == 0 and (radius - R_ARC).abs().max() < 0.1        # on the centre lane, not on the tangent
    assert (torch.diff(traj[:, 2]) > 0).all()                        # heading turns left with the road
    inner = GraphExecutor(build_planning_graph(target_speed=12.0, road=RoadLayout(3.5, (3.5,), (1,))))
    r = R_ARC - 3.5                                                   # a lane 3.5 m inside the route
    traj, _, _ = plan(inner, route=ARC, ego=(r * math.sin(a), R_ARC - r * math.cos(a), a, 12.0))
    step = (traj[1:, :2] - traj[:-1, :2]).norm(dim=1)
    assert torch.allclose(step, (traj[1:, 3] + traj[:-1, 3]) / 2 * DT, atol=5e-3)   # v is the speed driven


def test_queues_behind_a_static_obstacle_in_its_lane(planner):
    obstacle = [(95.0, 0.0)]                                          # 45 m ahead at 10 m/s
    traj, status, _ = plan(planner, obstacles=obstacle)
    assert status == 0 and traj[:, 1].abs().max() < 0.05              # stays in its lane...
    assert (torch.diff(traj[:, 3]) <= 1e-4).all() and traj[-1, 3] < 6.0   # ...and brakes for it
    assert min_gap(traj, obstacle) > 2 * 1.22


def test_overtakes_a_static_obstacle_when_told_to(planner):
    overtaking = GraphExecutor(build_planning_graph(target_speed=10.0, w_lead=1.0))
    for x in (95.0, 110.0):                                           # 45 and 60 m ahead
        traj, status, _ = plan(overtaking, obstacles=[(x, 0.0)])
        assert status == 0 and abs(float(traj[-1, 1])) > 2.5 and traj[-1, 3] > 3.0   # a neighbouring lane
        assert min_gap(traj, [(x, 0.0)]) > 2 * 1.22                   # the covering circles never touch
        assert jerk(traj[:, 1]).abs().max() <= PlannerParams().max_jerk + 0.5


def test_does_not_cut_in_front_of_a_closing_car(planner):
    """Overtaking a static obstacle, with a car in each neighbouring lane 20 m behind closing at 4 m/s:
    the follower's safe distance would shrink, so the plan queues instead (without that cost it
    changes lanes in front of it)."""
    def run(**params):
        ex = GraphExecutor(build_planning_graph(target_speed=10.0, w_lead=1.0, **params))
        s = scene(obstacles=[(95.0, 0.0)])
        for i, y in ((1, 3.5), (2, -3.5)):
            s["tracks"][i, [0, 2, 3, 4, 7, 8]] = torch.tensor([i + 1, 30.0, y, 14.0, 4.6, 1.9])
            s["predictions"][i] = torch.stack((30.0 + 14.0 * DT * torch.arange(1, schema.HORIZON + 1),
                                               torch.full((schema.HORIZON,), y)), 1)
        s["confirmed_count"] = ONE(3)
        out = ex.run(s)
        return out["trajectory"].clone(), int(out["plan_status"])

    traj, status = run()
    assert status == 0 and traj[:, 1].abs().max() < 0.05 and traj[-1, 3] < 1.0   # stays, stops behind it
    careless, status = run(w_rear=0.0)
    assert status == 0 and abs(float(careless[-1, 1])) > 2.5                     # would have cut in


def test_keeps_a_safe_distance_to_a_slower_leader(planner):
    """A leader at 5 m/s 20 m ahead: the plan slows towards its speed instead of running into it."""
    s = scene()
    s["tracks"][0, [0, 2, 3, 4, 7, 8]] = torch.tensor([1.0, 70.0, 0.0, 5.0, 4.6, 1.9])
    s["predictions"][0] = torch.stack((70.0 + 5.0 * DT * torch.arange(1, schema.HORIZON + 1), torch.zeros(30)), 1)
    s["confirmed_count"] = ONE(1)
    out = planner.run(s)
    traj = out["trajectory"]
    assert int(out["plan_status"]) == 0 and traj[:, 1].abs().max() < 0.05 and traj[-1, 3] < 7.0
    gap = s["predictions"][0, :, 0] - traj[1:, 0] - 4.6                 # bumper to bumper
    assert gap.min() > 2.0


def test_consecutive_plans_continue_the_acceleration(planner):
    first, _, _ = plan(planner, obstacles=[(95.0, 0.0)])
    x, y, yaw, v = (float(a) for a in first[1, :4])                    # the ego followed the plan for one step
    second, _, _ = plan(planner, obstacles=[(95.0, 0.0)], ego=(x, y, yaw, v), last=first)
    a_first = (first[2, 3] - first[1, 3]) / DT
    a_second = (second[1, 3] - second[0, 3]) / DT
    assert a_first < -0.5 and abs(float(a_second - a_first)) < 0.3    # no restart from zero acceleration


def test_all_lanes_blocked_gives_the_minimal_risk_stop(planner):
    wall = [(65.0, -3.5), (65.0, 0.0), (65.0, 3.5)]
    traj, status, cost = plan(planner, obstacles=wall)
    assert status == 1 and cost == math.inf
    mrm = GraphExecutor(build_minimal_risk_graph()).run(scene())
    assert torch.equal(traj, mrm["trajectory"]) and int(mrm["plan_status"]) == 1


def test_opposing_lanes_are_not_planned_into():
    road = RoadLayout(3.5, (-1.75, 1.75), (1, -1))                   # two-lane street, left lane oncoming
    ex = GraphExecutor(build_planning_graph(road=road, target_speed=10.0, w_lead=2.0))   # keen to overtake
    traj, status, _ = plan(ex, obstacles=[(95.0, -1.75)], ego=(50.0, -1.75, 0.0, 10.0))
    assert traj[:, 1].max() < 0.0                                     # never across the centre line
    assert status == 0 and traj[-1, 3] < 6.0                          # so it brakes behind the obstacle


@pytest.mark.parametrize("v0", [0.0, 6.0, 10.0, 20.0])
def test_minimal_risk_decelerates_monotonically_within_its_limit(v0):
    p = PlannerParams()
    a = 0.3
    ex = GraphExecutor(build_minimal_risk_graph(mrm_decel=p.mrm_decel))
    r = R_ARC - 1.0                                                   # 1 m left of the route, on the curve
    odom = torch.tensor([r * math.sin(a), R_ARC - r * math.cos(a), a, v0, 0, 0], dtype=torch.float64)
    out = ex.run({"odom": odom, "route": ARC, "route_count": ONE(len(ARC))})
    traj = out["trajectory"]
    v = traj[:, 3]
    assert v[0] == pytest.approx(v0) and (torch.diff(v) <= 1e-6).all()
    assert (-torch.diff(v) / DT).max() <= p.mrm_decel + 1e-3
    if v0 <= p.mrm_decel * (schema.TRAJ_POINTS - 1) * DT:
        assert v[-1] == 0.0
    step = (traj[1:, :2] - traj[:-1, :2]).norm(dim=1)
    assert torch.allclose(step, (v[1:] + v[:-1]) / 2 * DT, atol=1e-2)   # positions match the speeds
    radius = (traj[:, 0] ** 2 + (traj[:, 1] - R_ARC) ** 2).sqrt()
    assert (radius - radius[0]).abs().max() < 0.05                   # it stays on its lane along the curve


def test_minimal_risk_without_a_route_brakes_along_the_heading():
    ex = GraphExecutor(build_minimal_risk_graph())
    odom = torch.tensor([10.0, 5.0, math.pi / 4, 8.0, 0, 0], dtype=torch.float64)
    traj = ex.run({"odom": odom, "route": ARC, "route_count": ONE(0)})["trajectory"]
    d = traj[:, :2] - torch.tensor([10.0, 5.0])
    assert (d[:, 0] - d[:, 1]).abs().max() < 1e-3 and d[-1].norm() == pytest.approx(64 / 7, abs=0.05)


def test_lane_aware_prediction_follows_the_curve_and_oncoming_traffic():
    ex = GraphExecutor(build_prediction_graph(road=RoadLayout.uniform(2)))
    tracks = torch.zeros(schema.MAX_TRACKS, len(schema.TRACK_COLS))
    a = 0.5
    for i, (d, v) in enumerate(((1.75, 15.0), (-1.75, -10.0))):
        r = R_ARC - d
        tracks[i, 2:6] = torch.tensor([r * math.sin(a), R_ARC - r * math.cos(a), v * math.cos(a), v * math.sin(a)])
    tracks[2, 2:6] = torch.tensor([30.0, 5.0, 0.0, -1.5])            # a pedestrian crossing: straight line
    r = R_ARC + 6.0                                                   # a cyclist on the shoulder, along the road
    tracks[3, 2:6] = torch.tensor([r * math.sin(a), R_ARC - r * math.cos(a), 5 * math.cos(a), 5 * math.sin(a)])
    pred = ex.run({"tracks": tracks, "confirmed_count": ONE(4), "route": ARC, "route_count": ONE(len(ARC))})[
        "predictions"]
    radius = (pred[:2, :, 0] ** 2 + (pred[:2, :, 1] - R_ARC) ** 2).sqrt()
    assert (radius[0] - (R_ARC - 1.75)).abs().max() < 0.05 and (radius[1] - (R_ARC + 1.75)).abs().max() < 0.05
    travelled = (pred[:2, -1] - tracks[:2, 2:4]).norm(dim=1)
    assert travelled[0] == pytest.approx(15 * 3.0, rel=0.01) and travelled[1] == pytest.approx(10 * 3.0, rel=0.01)
    assert torch.allclose(pred[2, -1], torch.tensor([30.0, 5.0 - 1.5 * 3.0]), atol=1e-4)
    shoulder = (pred[3, :, 0] ** 2 + (pred[3, :, 1] - R_ARC) ** 2).sqrt()
    assert (shoulder - (R_ARC + 6.0)).abs().max() < 0.05               # stays on the shoulder, not pulled in
    assert pred[4:].abs().sum() == 0


def test_sim_road_geometry_is_understood():
    road_mod = pytest.importorskip("rt_runtime.sim.road")
    road = road_mod.Road(((100, 0.0), (200, 1 / 150), (300, 0.0)), directions=(1, 1, -1), lane_width=3.5)
    layout = RoadLayout.like(road)
    assert layout.centers == pytest.approx([road.lane_center(i) for i in range(3)]) and layout.directions == (1, 1, -1)
    route = route_from_road(road)
    assert route.shape[0] <= schema.MAX_ROUTE
    s = 150.0
    x, y, h = road.pose(s, road.lane_center(0))
    ex = GraphExecutor(build_planning_graph(road=road, target_speed=12.0))
    traj, status, _ = plan(ex, route=route, ego=(float(x), float(y), float(h), 12.0))
    xs, ys, _ = road.pose(s + 18.0, road.lane_center(0))
    assert status == 0 and math.hypot(float(traj[15, 0]) - xs, float(traj[15, 1]) - ys) < 0.3


def test_braking_aware_prediction_stops_a_braking_leader_where_it_will_stop():
    from pipelines.prediction import initial_prediction_state

    route = torch.tensor([[float(x), 0.0] for x in range(0, 400, 20)])
    cv = GraphExecutor(build_prediction_graph(road=RoadLayout.uniform(2)))
    ex = GraphExecutor(build_prediction_graph(road=RoadLayout.uniform(2), accel=True))
    state = initial_prediction_state()
    tracks = torch.zeros(schema.MAX_TRACKS, len(schema.TRACK_COLS))
    base = {"confirmed_count": ONE(2), "route": route, "route_count": ONE(len(route))}
    for k in range(12):   # a leader braking at 4 m/s^2 from 10 m/s; an oncoming car braking at 4 m/s^2 too
        v = 10.0 - 0.4 * k
        x = 50.0 + 10.0 * 0.1 * k - 2.0 * (0.1 * k) ** 2
        tracks[0, :6] = torch.tensor([7.0, 0.0, x, -1.75, v, 0.0])
        tracks[1, :6] = torch.tensor([8.0, 0.0, 300.0 - x, 1.75, -v, 0.0])
        out = ex.run({"tracks": tracks, **base, "track_t": torch.tensor([5.0 + 0.1 * k], dtype=torch.float64),
                      **state})
        state = {"motion_in": out["motion"].clone(), "motion_t_in": out["motion_t"].clone()}
    v, x = 10.0 - 0.4 * 11, float(tracks[0, 2])
    stop = x + v * v / (2 * 4.0)                       # where it really stops
    rate = out["motion"][:2, 2]
    assert torch.allclose(rate, torch.tensor([-4.0, -4.0]), atol=0.05)   # the filter has converged
    pred = out["predictions"]
    assert float(pred[0, -1, 0]) == pytest.approx(stop, abs=0.1)
    assert float(pred[1, -1, 0]) == pytest.approx(300 - stop, abs=0.1)
    assert (pred[0, 1:, 0] - pred[0, :-1, 0]).min() >= 0                # stops; never reverses
    plain = cv.run({"tracks": tracks, **base})["predictions"]
    assert float(plain[0, -1, 0]) > stop + 10                           # constant velocity drives through it
    # A track the state has not seen (a new id) starts from zero acceleration.
    tracks[0, 0] = 99.0
    fresh = ex.run({"tracks": tracks, **base, "track_t": torch.tensor([6.2], dtype=torch.float64), **state})
    assert float(fresh["motion"][0, 2]) == 0.0


def test_kernels_write_what_their_python_bodies_write_bit_for_bit(monkeypatch):
    """The planning and prediction kernels (TorchScript) against their Python bodies, over a few chained
    jobs: a closing car, a braking leader, all lanes blocked (the minimal-risk stop), no route."""
    from pipelines import planning, prediction
    from pipelines.prediction import initial_prediction_state
    from rt_runtime.exec import kernel

    def jobs():
        for k in range(4):
            wall = [(65.0, -3.5), (65.0, 0.0), (65.0, 3.5)] if k == 2 else []
            s = scene(obstacles=[(95.0 - 0.6 * k, 0.0), (30.0 + 1.4 * k, 3.5), *wall],
                      ego=(50.0 + k, 0.4, 0.03, 10.0), t=0.1 * k, route=ROUTE if k < 3 else ROUTE[:1])
            s["tracks"][:2, 4] = torch.tensor([6.0 - 0.4 * k, 14.0])          # a braking leader, a closing car
            s["predictions"][1, :, 0] += 14.0 * DT * torch.arange(1, schema.HORIZON + 1)
            yield s

    def run() -> list[torch.Tensor]:
        plan_ex = GraphExecutor(build_planning_graph(target_speed=10.0, w_lead=1.0))
        mrm_ex = GraphExecutor(build_minimal_risk_graph())
        pred_ex = GraphExecutor(build_prediction_graph(road=RoadLayout.uniform(3), accel=True))
        state, last, outs, status = initial_prediction_state(), None, [], []
        for s in jobs():
            p = pred_ex.run({**{k: s[k] for k in ("tracks", "confirmed_count", "route", "route_count")},
                             "track_t": s["odom"][5:6].clone(), **state})
            state = {"motion_in": p["motion"].clone(), "motion_t_in": p["motion_t"].clone()}
            out = plan_ex.run({**s, "last_trajectory": last} if last is not None else s)
            last = out["trajectory"].clone()
            mrm = mrm_ex.run({k: s[k] for k in ("odom", "route", "route_count")})
            outs += [v.clone() for v in (*p.values(), *out.values(), *mrm.values())]
            status.append(int(out["plan_status"]))
        assert status == [0, 0, 1, 0]           # the wall: the minimal-risk stop
        return outs

    names = ((planning, "_reference"), (planning, "_build"), (planning, "_stop"), (planning, "_stop_on"),
             (planning, "_clearance"), (planning, "_select"), (prediction, "_predict"))
    compiled = run()
    assert all(getattr(m, n).mode in ("eager", "jit", "aot") for m, n in names)
    monkeypatch.setenv("RT_RUNTIME_EAGER_KERNELS", "1")
    for m, n in names:
        monkeypatch.setattr(m, n, kernel(getattr(m, n).py))
    eager = run()
    bits = lambda t: (t.dtype, t.shape, t.reshape(-1).view(torch.uint8))  # noqa: E731 - NaN compares too
    assert all(bits(a)[:2] == bits(b)[:2] and torch.equal(bits(a)[2], bits(b)[2]) for a, b in zip(compiled, eager))


@pytest.mark.parametrize("route", [ROUTE[:5], ARC[:40], ROUTE[:1]], ids=["short", "curve", "one vertex"])
def test_a_polyline_padded_to_a_buffer_gives_the_same_bits(route):
    """The planner's ops share one reference line padded to MAX_ROUTE vertices (``polyline(rows=...)``):
    every projection and frame on it is bit for bit the unpadded line's, beyond both ends too."""
    from pipelines.geometry import curvature, frenet_frame, polyline, to_frenet

    pose = torch.tensor([30.0, 2.0, 0.2, 8.0, 0.0, 0.0], dtype=torch.float64)
    short, padded = (polyline(route, ONE(len(route)), pose, rows) for rows in (0, schema.MAX_ROUTE))
    assert padded.p.shape[0] == schema.MAX_ROUTE and short.p.shape[0] < schema.MAX_ROUTE
    g = torch.Generator().manual_seed(5)
    xy = torch.stack((torch.rand(50, generator=g) * 140 - 20, torch.rand(50, generator=g) * 40 - 10), 1)
    s, guess = torch.rand(7, 9, generator=g) * 160 - 20, xy[:, 0] + torch.randn(50, generator=g) * 5
    for f in (lambda pl: to_frenet(pl, xy), lambda pl: to_frenet(pl, xy, guess), lambda pl: frenet_frame(pl, s),
              lambda pl: (curvature(pl, s),)):
        assert all(torch.equal(u.view(torch.int32), v.view(torch.int32)) for u, v in zip(f(short), f(padded)))


def test_squared_distances_are_cdists_before_its_root_bit_for_bit():
    """The clearance takes the nearest circles on squared distances, then roots: it relies on
    ``_sq_dists`` being ``torch.cdist``'s matmul form op for op (a torch upgrade could change that)."""
    from pipelines.planning_kernels import _sq_dists

    g = torch.Generator().manual_seed(2)
    for b, p, q in ((35, 378, 18), (3, 7, 1), (1, 40, 33)):
        x1, x2 = ((torch.rand(b, n, 2, generator=g) - 0.5) * 300 for n in (p, q))
        x2[:, :1] = x1[:, :1]                                          # coincident points: a zero distance
        packed = torch.stack((x1[..., 0].mul(-2), x1[..., 1].mul(-2), x1[..., 0].pow(2) + x1[..., 1].pow(2),
                              torch.ones_like(x1[..., 0])), -1)
        want = torch.cdist(x1, x2, compute_mode="use_mm_for_euclid_dist")
        got = _sq_dists(packed, x2, torch.full((b * p * q + 5,), math.nan)).clamp_min_(0.0).sqrt_()
        assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_prediction_on_cpu_computes_the_confirmed_rows_only_with_the_all_slots_bits():
    """On the CPU only rows [0, confirmed_count) are computed: the same bits as every slot computed
    (the CUDA path), however the empty slots are filled, and zeros there."""
    from pipelines import prediction
    from pipelines.prediction import MOTION_COLS, PredictionParams, _knobs

    p = PredictionParams(road=RoadLayout.uniform(3), accel=True)
    t = torch.arange(1, schema.HORIZON + 1, dtype=torch.float32) * DT
    centers = torch.tensor(p.road.centers, dtype=torch.float32)
    g = torch.Generator().manual_seed(3)
    tracks = torch.randn(schema.MAX_TRACKS, len(schema.TRACK_COLS), generator=g) * 40   # garbage past the count
    tracks[:5, 0] = torch.arange(1.0, 6.0)
    tracks[:5, 2:6] = torch.tensor([[60.0, 0.0, 12.0, 0.0], [90.0, 3.5, 9.0, 0.2], [40.0, -3.5, -11.0, 0.0],
                                    [30.0, 9.0, 0.1, 0.0], [70.0, 1.0, 10.0, 2.0]])
    motion_in = torch.zeros(schema.MAX_TRACKS, len(MOTION_COLS))
    motion_in[:3] = torch.tensor([[2.0, 9.5, 0.0], [1.0, 12.4, -1.0], [40.0, 3.0, 0.0]])
    track_t, motion_t_in = torch.tensor([4.1], dtype=torch.float64), torch.tensor([4.0], dtype=torch.float64)

    def run(on_cpu: bool) -> list[torch.Tensor]:
        outs = [torch.full((schema.MAX_TRACKS, schema.HORIZON, 2), math.nan),
                torch.full((schema.MAX_TRACKS, len(MOTION_COLS)), math.nan), torch.zeros(1, dtype=torch.float64)]
        prediction._predict(tracks, ONE(5), ROUTE, ONE(len(ROUTE)), t, centers, _knobs(p), on_cpu, outs[0],
                            track_t, motion_in, motion_t_in, outs[1], outs[2])
        return outs

    sliced, full = run(True), run(False)
    assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(sliced, full))
    assert sliced[0][5:].abs().sum() == 0 and sliced[1][5:].abs().sum() == 0
    assert float(sliced[1][1, 2]) != 0.0 and sliced[0][:5].abs().sum() > 0   # rows were computed, a rate too
