"""Radar clusterer graph: Doppler-aware clustering, full velocity, false-alarm rejection."""
import math

import pytest
import torch

from pipelines import schema
from pipelines.radar import build_radar_graph
from rt_runtime.exec import GraphExecutor


def target(cx, cy, vx, vy, n, g, rcs=10.0, spread=(0.8, 0.4), noise_v=0.05):
    """Detections on one rigid object moving at (vx, vy), Doppler seen from the origin."""
    x = cx + torch.randn(n, generator=g) * spread[0]
    y = cy + torch.randn(n, generator=g) * spread[1]
    r = torch.hypot(x, y)
    vr = (vx * x + vy * y) / r + torch.randn(n, generator=g) * noise_v
    return torch.stack([x, y, torch.full((n,), 0.5), vr, rcs + torch.randn(n, generator=g)], 1)


def objects(scan, ex=None):
    ex = ex or GraphExecutor(build_radar_graph())
    out = ex.run({"radar": scan.contiguous()})
    n = int(out["radar_object_count"])
    return out["radar_objects"][:n].clone()


def nearest(objs, x, y):
    return objs[int(torch.hypot(objs[:, 0] - x, objs[:, 1] - y).argmin())]


def test_doppler_splits_objects_that_position_alone_would_merge():
    g = torch.Generator().manual_seed(0)
    moving, parked = target(30, 2.0, 12.0, 0.0, 8, g), target(30.5, 3.2, 0.0, 0.0, 8, g)
    objs = objects(torch.cat([moving, parked]))
    assert len(objs) == 2
    assert abs(nearest(objs, 30, 2.0)[2] - 12.0 * 30 / math.hypot(30, 2)) < 0.2
    assert abs(nearest(objs, 30.5, 3.2)[2]) < 0.2
    assert sorted(objs[:, 6].tolist()) == [8.0, 8.0], "each keeps its own detections"
    same = objects(torch.cat([target(30, 2.0, 12.0, 0.0, 8, g), target(30.5, 3.2, 12.0, 0.0, 8, g)]))
    assert len(same) == 1 and same[0, 6] == 16


def test_full_velocity_from_a_wide_object_radial_only_from_a_narrow_one():
    g = torch.Generator().manual_seed(1)
    # A crossing truck close by spans ~30° of bearing: both velocity components are observable.
    truck = target(8.0, 0.0, 1.0, 6.0, 30, g, spread=(0.3, 2.0))
    far = target(60.0, 0.0, 5.0, 4.0, 6, g, spread=(0.3, 0.3))
    objs = objects(torch.cat([truck, far]))
    t = nearest(objs, 8.0, 0.0)
    assert abs(t[3] - 1.0) < 0.3 and abs(t[4] - 6.0) < 0.4
    f = nearest(objs, 60.0, 0.0)
    assert abs(f[3] - 5.0) < 0.2 and abs(f[4]) < 1.0, "the unobservable cross component is not invented"


def test_false_alarms_are_rejected():
    g = torch.Generator().manual_seed(2)
    car = target(25, -3, 8.0, 0.0, 6, g)
    lone_weak = torch.tensor([[40.0, 10.0, 0.5, -3.0, 0.0], [15.0, 20.0, 0.5, 7.0, -2.0]])
    lone_strong = torch.tensor([[50.0, -20.0, 0.5, 2.0, 25.0]])
    # Clutter: a tight clump whose Doppler drifts step by step: each pair passes the gate, the whole is not rigid.
    clump = torch.stack([torch.full((9,), 12.0) + 0.1 * torch.arange(9), torch.full((9,), 12.0), torch.zeros(9),
                         torch.tensor([-3.2, -2.4, -1.6, -0.8, 0.0, 0.8, 1.6, 2.4, 3.2]), torch.full((9,), 5.0)], 1)
    faint = target(35, 5, 0.0, 0.0, 4, g, rcs=-30.0)
    objs = objects(torch.cat([car, lone_weak, lone_strong, clump, faint]))
    assert len(objs) == 2
    assert torch.hypot(objs[:, 0] - 25, objs[:, 1] + 3).min() < 0.5
    assert torch.hypot(objs[:, 0] - 50, objs[:, 1] + 20).min() < 1e-3
    strong = nearest(objs, 50, -20)
    assert strong[6] == 1 and abs(strong[5] - 25.0) < 1e-3
    c = nearest(objs, 25, -3)
    assert abs(c[5] - (10 + 10 * math.log10(6))) < 2.0, "RCS is the power sum of the detections"
    assert torch.all((objs[:, 7] > 0) & (objs[:, 7] <= 1))


def test_empty_scan_capacity_and_reuse():
    ex = GraphExecutor(build_radar_graph())
    assert len(objects(torch.zeros(0, 5), ex)) == 0
    g = torch.Generator().manual_seed(3)
    many = torch.cat([target(10 + 6 * (i % 10), -40 + 6 * (i // 10), 0.0, 0.0, 8, g) for i in range(125)]
                     + [target(80, 0, 0, 0, 24, g)])
    assert many.shape[0] == schema.MAX_RADAR
    full = objects(many, ex)
    assert len(full) == schema.MAX_RADAR_OBJECTS, "more clusters than capacity: the best ones fill it"
    one = target(20, 0, 3.0, 0.0, 5, g)
    assert torch.equal(objects(one, ex), objects(one))
    nan_row = torch.tensor([[float("nan"), 0.0, 0.0, 0.0, 0.0]])
    assert len(objects(torch.cat([one, nan_row]), ex)) == 1
    with pytest.raises(Exception):
        ex.run({"radar": torch.zeros(schema.MAX_RADAR + 1, 5)})


def test_precision_recall_and_doppler_against_simulator_ground_truth():
    """A cluster hits a car or truck when it lies within 1 m of its box; scenery is not scored."""
    import numpy as np
    from rt_runtime.sim import Rig, build_scenario, simulate
    from rt_runtime.sim import radar as simradar
    from rt_runtime.sim.scenarios import CAR, TRUCK

    rig = Rig()
    m = rig.radar.mount
    ex = GraphExecutor(build_radar_graph(mount=(m.x, m.y, m.yaw)))
    hits = alarms = misses = 0
    vr_err = []
    for name in ("highway_cut_in", "pedestrian_crossing", "stop_and_go"):
        sc, seed = build_scenario(name, 3), 3
        traj = simulate(sc, 10.0)
        for k in range(50, 1000, 75):
            ego = (traj.x[k, 0], traj.y[k, 0], traj.yaw[k, 0])
            ego_v = (traj.vx[k, 0], traj.vy[k, 0], traj.yaw_rate[k, 0])
            boxes = np.vstack([traj.boxes(k), sc.static[:, :7]])
            vel = np.vstack([np.column_stack([traj.vx[k, 1:], traj.vy[k, 1:]]), np.zeros((len(sc.static), 2))])
            cls = np.concatenate([traj.classes[1:], sc.static[:, 7].astype(np.uint8)])
            d = simradar.detect(rig.radar, ego, ego_v, boxes, vel, cls, np.random.default_rng([seed, 3, k]))
            scan = torch.from_numpy(np.stack([d[f] for f in ("x", "y", "z", "doppler", "rcs")], 1).astype(np.float32))
            objs = objects(scan, ex).numpy()
            # Everything in base_link: boxes, detections (radar frame + mount), relative velocities.
            c, s = np.cos(ego[2]), np.sin(ego[2])
            dx, dy = boxes[:, 0] - ego[0], boxes[:, 1] - ego[1]
            bx, by, byaw = c * dx + s * dy, -s * dx + c * dy, boxes[:, 6] - ego[2]

            def near(x, y):  # (points, boxes): within 1 m of each box's footprint
                ex_, ey_ = x[:, None] - bx[None], y[:, None] - by[None]
                lx = np.abs(np.cos(byaw) * ex_ + np.sin(byaw) * ey_) - boxes[:, 3] / 2
                ly = np.abs(-np.sin(byaw) * ex_ + np.cos(byaw) * ey_) - boxes[:, 4] / 2
                return (lx < 1.0) & (ly < 1.0)

            vehicle = np.isin(cls, [CAR, TRUCK]) & (np.arange(len(cls)) < len(traj.ids) - 1)
            seen = near(scan[:, 0].numpy() + m.x, scan[:, 1].numpy() + m.y).any(0) & vehicle
            on = near(objs[:, 0], objs[:, 1])
            taken = np.zeros(len(boxes), bool)
            for o, row in zip(objs, on):  # sorted by score
                free = row & seen & ~taken
                if free.any():
                    j = int(np.flatnonzero(free)[0])
                    taken[j] = True
                    hits += 1
                    rel = np.array([c * (vel[j, 0] - ego_v[0]) + s * (vel[j, 1] - ego_v[1]),
                                    -s * (vel[j, 0] - ego_v[0]) + c * (vel[j, 1] - ego_v[1])])
                    los = np.array([o[0] - m.x, o[1] - m.y])
                    vr_err.append(o[2] - rel @ los / np.linalg.norm(los))
                elif not row.any():
                    alarms += 1
            misses += int((seen & ~taken).sum())
    precision, recall = hits / (hits + alarms), hits / (hits + misses)
    print(f"radar vs sim ground truth: precision {precision:.2f} recall {recall:.2f} ({hits} hits), "
          f"median |vr error| {np.median(np.abs(vr_err)):.3f} m/s")
    assert hits >= 30 and precision >= 0.8 and recall >= 0.85 and np.median(np.abs(vr_err)) < 0.2


@pytest.mark.cuda
def test_runs_on_cuda_like_on_cpu():
    from rt_runtime.device import device_for

    g = torch.Generator().manual_seed(0)
    scan = torch.cat([target(30, 2.0, 12.0, 0.0, 8, g), target(30.5, 3.2, 0.0, 0.0, 8, g), target(60, -5, 3, 0, 4, g)])
    ex = GraphExecutor(build_radar_graph("cuda"), device_for("cuda"))
    out = ex.run({"radar": scan.cuda()})
    n = int(out["radar_object_count"])
    by_x = lambda t: t[t[:, 0].argsort()]  # noqa: E731 - equal scores may rank differently on the GPU
    torch.testing.assert_close(by_x(out["radar_objects"][:n].cpu()), by_x(objects(scan)), atol=1e-3, rtol=1e-4)
