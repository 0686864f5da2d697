"""Simulator core: road geometry, scenario outcomes, sensor models (no bag involved)."""
from __future__ import annotations

import numpy as np
import pytest

from rt_runtime.sim import Rig, Road, build_scenario, check_outcome, outcome, simulate
from rt_runtime.sim import camera, lidar, radar
from rt_runtime.sim.scenarios import CAR, SCENARIOS


def test_road_pose_and_frenet_are_inverse() -> None:
    road = Road(((200, 0.0), (300, 1 / 600), (200, 0.0), (300, -1 / 500), (400, 0.0)), origin=(5, 3, 0.3))
    rng = np.random.default_rng(0)
    s, d = rng.uniform(0, 1400, 5000), rng.uniform(-10, 10, 5000)
    x, y, _ = road.pose(s, d)
    s2, d2 = road.frenet(x, y)
    assert np.abs(s2 - s).max() < 1e-3 and np.abs(d2 - d).max() < 1e-3
    # the heading follows the curvature: total turn = sum of k * L
    assert road.pose(np.array([1400.0]))[2][0] == pytest.approx(0.3 + 300 / 600 - 300 / 500)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenarios_show_their_known_outcome(name: str) -> None:
    for seed in (0, 1):
        traj = simulate(build_scenario(name, seed), 20.0)
        checks = check_outcome(traj, 20.0)
        assert checks and all(ok for _, _, ok in checks.values()), (name, seed, checks)


def test_world_is_deterministic_and_seeded() -> None:
    a = simulate(build_scenario("highway_cut_in", 3), 5.0)
    b = simulate(build_scenario("highway_cut_in", 3), 5.0)
    c = simulate(build_scenario("highway_cut_in", 4), 5.0)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.v, b.v)
    assert not np.array_equal(a.x, c.x)  # random traffic differs
    assert outcome(a, 5.0)["collision"] == 0.0
    with pytest.raises(KeyError, match="unknown scenario"):
        build_scenario("nope", 0)


def _state(name: str, t: float) -> tuple:
    sc = build_scenario(name, 0)
    tr = simulate(sc, t + 0.5)
    k = tr.index(t)
    return sc, tr, k


def test_camera_sees_road_markings_and_the_car_ahead() -> None:
    sc, tr, k = _state("highway_cut_in", 6.0)
    cam = Rig.small().camera
    ego = (tr.x[k, 0], tr.y[k, 0], tr.yaw[k, 0])
    img = camera.render(cam, sc.road, ego, tr.s[k, 0], tr.boxes(k), tr.classes[1:], tr.ids[1:],
                        np.random.default_rng(0))
    assert img.shape == (96, 160, 3) and img.dtype == np.uint8
    empty = camera.render(cam, sc.road, ego, tr.s[k, 0], np.zeros((0, 7)), np.zeros(0, int), np.zeros(0, int),
                          np.random.default_rng(0))
    changed = np.abs(img.astype(int) - empty).sum(axis=2) > 30
    assert changed[:, 60:100].any()  # the cut-in car now ahead, near the image centre
    bright = empty.mean(axis=2) > 200
    assert bright[60:, :].any()  # white lane markings on the ground below the horizon
    again = camera.render(cam, sc.road, ego, tr.s[k, 0], tr.boxes(k), tr.classes[1:], tr.ids[1:],
                          np.random.default_rng(0))
    assert np.array_equal(img, again)


def test_lidar_hits_ground_and_the_car_ahead() -> None:
    sc, tr, k = _state("highway_cut_in", 6.0)
    li = Rig.small().lidar
    at = (np.full(li.columns, tr.x[k, 0]), np.full(li.columns, tr.y[k, 0]), np.full(li.columns, tr.yaw[k, 0]))
    vel = np.column_stack([tr.vx[k, 1:], tr.vy[k, 1:]])
    pts = lidar.scan(li, sc.road, at, tr.s[k, 0], tr.boxes(k), vel, tr.classes[1:], np.random.default_rng(0))
    assert pts.shape == (16, 360) and pts.dtype.itemsize == 24
    ok = np.isfinite(pts["x"])
    assert 0.3 < ok.mean() < 0.95  # upward beams see nothing: NaN
    assert (pts["ring"] == np.arange(16)[:, None]).all()
    ground = ok & (np.abs(pts["z"] + li.mount.z) < 0.1)
    assert ground.sum() > 1000
    ahead = ok & (pts["x"] > 5) & (np.abs(pts["y"]) < 1.5) & (pts["z"] > -li.mount.z + 0.3)
    # the forward column fires half a sweep in, by when the car ahead has moved on (ego held still here)
    gap = tr.s[k, 1] - tr.s[k, 0] - 4.6 / 2 - li.mount.x + tr.v[k, 1] * 0.5 / li.rate_hz
    assert ahead.any() and abs(np.nanmin(pts["x"][ahead]) - gap) < 1.0


def test_radar_doppler_is_relative_radial_velocity() -> None:
    sc, tr, k = _state("highway_cut_in", 6.0)
    rd = Rig().radar
    rd = type(rd)(clutter_mean=0.0, false_alarm_mean=0.0, p_detect=1.0, doppler_sigma=0.0)
    ego = (tr.x[k, 0], tr.y[k, 0], tr.yaw[k, 0])
    ev = (tr.vx[k, 0], tr.vy[k, 0], tr.yaw_rate[k, 0])
    vel = np.column_stack([tr.vx[k, 1:], tr.vy[k, 1:]])
    det = radar.detect(rd, ego, ev, tr.boxes(k), vel, tr.classes[1:], np.random.default_rng(0))
    assert det.dtype.names == ("x", "y", "z", "doppler", "rcs") and len(det) > 0
    near = det[(np.abs(det["y"]) < 1.5) & (det["x"] < 40)]
    rel = tr.v[k, 1] - tr.v[k, 0]  # cut-in car vs ego, both along the lane
    assert len(near) and np.allclose(near["doppler"], rel, atol=0.6)
    assert tr.classes[1] == CAR
