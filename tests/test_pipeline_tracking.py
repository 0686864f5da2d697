"""The tracker through GraphExecutor: Kalman convergence, stable ids, track life, ego-motion compensation, purity."""
import math

import pytest
import torch

from pipelines import schema
from pipelines.fusion import F, SRC_LIDAR, SRC_RADAR
from pipelines.tracking import (STATE_FEEDBACK, TrackerParams, build_fusion_tracking_graph, build_tracking_graph,
                                initial_tracker_state, stamps, tracker_feedback)
from rt_runtime.exec import GraphExecutor

T = {c: i for i, c in enumerate(schema.TRACK_COLS)}
DT = 0.1



pytestmark = pytest.mark.usefixtures("one_torch_thread")

def fused(objects, vr=None):
    """Fused-object rows (base_link) for (x, y) LiDAR detections; optional Doppler per object."""
    f = torch.zeros(schema.MAX_FUSED, len(schema.FUSED_COLS))
    for i, (x, y) in enumerate(objects):
        f[i, [F["x"], F["y"], F["z"], F["l"], F["w"], F["h"], F["score"], F["src"]]] = torch.tensor(
            [x, y, 0.75, 4.5, 1.9, 1.5, 0.9, SRC_LIDAR])
        if vr is not None:
            f[i, F["vr"]], f[i, F["has_vr"]] = vr[i], 1.0
            f[i, F["src"]] += SRC_RADAR
    return f, torch.tensor([len(objects)], dtype=torch.int32)


class Tracker:
    """Runs the tracking graph frame by frame, feeding the state back as the runtime's channel would."""

    def __init__(self, **params):
        self.ex = GraphExecutor(build_tracking_graph(**params))
        self.state = initial_tracker_state()

    def step(self, objects, t, ego=(0.0, 0.0, 0.0, 0.0, 0.0), vr=None):
        f, n = fused(objects, vr)
        odom = torch.tensor([*ego, t], dtype=torch.float64)
        out = self.ex.run({"fused": f, "fused_count": n, "odom": odom, **self.state})
        self.state = tracker_feedback(out)
        return {k: v.clone() for k, v in out.items()}


def confirmed(out):
    return out["tracks"][: int(out["confirmed_count"])]


def test_kalman_follows_a_constant_velocity_target():
    g = torch.Generator().manual_seed(1)
    trk = Tracker(accel_std=0.5)  # a constant-velocity target: little process noise is the right model
    for k in range(50):
        t = k * DT
        truth = torch.tensor([10 + 6 * t, -3 + 1.5 * t])
        out = trk.step([tuple((truth + 0.15 * torch.randn(2, generator=g)).tolist())], t)
    tr = confirmed(out)
    assert tr.shape[0] == 1
    assert torch.allclose(tr[0, T["vx"]:T["vy"] + 1], torch.tensor([6.0, 1.5]), atol=0.4)
    assert (tr[0, T["x"]:T["y"] + 1] - truth).norm() < 0.3
    assert torch.linalg.eigvalsh(out["track_cov"][0].double()).min() > 0  # covariance stays positive definite


def test_ids_stay_stable_for_two_crossing_targets():
    g = torch.Generator().manual_seed(2)
    trk = Tracker()
    a0, va = torch.tensor([10.0, -5.0]), torch.tensor([5.0, 2.5])
    b0, vb = torch.tensor([10.0, 5.0]), torch.tensor([5.0, -2.5])
    seen = {"a": set(), "b": set()}
    for k in range(45):  # the paths cross at t = 2 s (frame 20)
        t = k * DT
        a, b = a0 + va * t, b0 + vb * t
        dets = [a + 0.1 * torch.randn(2, generator=g), b + 0.1 * torch.randn(2, generator=g)]
        order = dets[::-1] if k % 2 else dets  # detection order must not decide the ids
        out = trk.step([tuple(d.tolist()) for d in order], t)
        tr = confirmed(out)
        if k >= 5:
            assert tr.shape[0] == 2
            if (a - b).norm() < 1.0:  # at the crossing itself "nearest to the truth" is no test of identity
                continue
            for name, truth in (("a", a), ("b", b)):
                near = (tr[:, T["x"]:T["y"] + 1] - truth).norm(dim=1).argmin()
                seen[name].add(int(tr[near, T["id"]]))
    assert len(seen["a"]) == 1 and len(seen["b"]) == 1 and seen["a"] != seen["b"]
    vel = {int(r[T["id"]]): r[T["vx"]:T["vy"] + 1] for r in confirmed(out)}
    assert torch.allclose(vel[seen["a"].pop()], va, atol=0.5)
    assert torch.allclose(vel[seen["b"].pop()], vb, atol=0.5)


def test_birth_after_m_hits_and_death_after_k_misses():
    m, k_miss = 3, 4
    trk = Tracker(confirm_hits=m, max_misses=k_miss)
    t = 0.0
    for i in range(m):
        out = trk.step([(20.0, 1.0)], t)
        t += DT
        assert int(out["track_count"]) == 1
        assert int(out["confirmed_count"]) == (1 if i == m - 1 else 0), f"hit {i + 1}"
    tid = int(out["tracks"][0, T["id"]])
    for i in range(k_miss):
        out = trk.step([], t)
        t += DT
        alive = int(out["track_count"])
        assert alive == (1 if i < k_miss - 1 else 0), f"miss {i + 1}"
        if alive:
            assert int(out["tracks"][0, T["id"]]) == tid and out["tracks"][0, T["misses"]] == i + 1
    assert out["tracks"].abs().sum() == 0  # rows past the count are zeroed, not stale


def test_tentative_track_dies_on_its_first_miss_and_ids_are_not_reused():
    trk = Tracker(confirm_hits=3)
    trk.step([(20.0, 1.0)], 0.0)
    out = trk.step([], 0.1)
    assert int(out["track_count"]) == 0
    out = trk.step([(5.0, -2.0)], 0.2)
    assert int(out["tracks"][0, T["id"]]) == 2 and int(out["next_id"]) == 3


def test_ego_motion_compensation_keeps_a_static_object_static():
    """The ego drives a left curve; a static map object, seen from base_link, must stay put in the map."""
    obj = torch.tensor([40.0, 15.0], dtype=torch.float64)
    v, w = 8.0, 0.25
    trk = Tracker()
    for k in range(30):
        t = k * DT
        yaw = w * t
        ego = torch.tensor([v / w * math.sin(yaw), v / w * (1 - math.cos(yaw))], dtype=torch.float64)
        c, s = math.cos(yaw), math.sin(yaw)
        rel = torch.tensor([[c, s], [-s, c]], dtype=torch.float64) @ (obj - ego)   # map -> base_link
        u = rel / rel.norm()
        # Doppler of a static target seen from the moving base_link: -(v_sensor . u), sensor at origin.
        vr = -(v * u[0]).item()
        out = trk.step([tuple(rel.tolist())], t, ego=(ego[0].item(), ego[1].item(), yaw, v, w), vr=[vr])
    tr = confirmed(out)
    assert tr.shape[0] == 1
    assert (tr[0, T["x"]:T["y"] + 1].double() - obj).norm() < 0.1
    assert tr[0, T["vx"]:T["vy"] + 1].norm() < 0.2


def test_doppler_speeds_up_velocity_convergence():
    """A receding target with radar range rate: velocity known along the bearing after few frames."""
    with_vr, without = Tracker(), Tracker()
    for k in range(4):
        t = k * DT
        x = 20 + 10 * t
        a = with_vr.step([(x, 0.0)], t, vr=[10.0])
        b = without.step([(x, 0.0)], t)
    assert abs(float(a["tracks"][0, T["vx"]]) - 10) < 0.5
    assert abs(float(a["tracks"][0, T["vx"]]) - 10) < abs(float(b["tracks"][0, T["vx"]]) - 10)


@pytest.mark.parametrize("assignment", ["hungarian", "greedy"])
def test_job_is_pure_equal_inputs_give_bit_equal_outputs(assignment):
    f, n = fused([(10.0, 1.0), (25.0, -3.0), (18.0, 6.0)])
    state = initial_tracker_state()
    state = {**state, "last_t_in": torch.tensor([0.0], dtype=torch.float64)}
    inputs = {"fused": f, "fused_count": n, "odom": torch.tensor([1, 2, 0.3, 5, 0.1, 0.1], dtype=torch.float64),
              **state}
    before = {k: v.clone() for k, v in inputs.items()}
    g = build_tracking_graph(assignment=assignment)
    one, two = GraphExecutor(g).run(inputs), GraphExecutor(g).run(inputs)
    for name in STATE_FEEDBACK:
        assert torch.equal(one[name], two[name]), name
    for k, v in before.items():
        assert torch.equal(v, inputs[k]) or (v.isnan().all() and inputs[k].isnan().all()), f"{k} was modified"


def test_fusion_and_tracking_as_one_graph():
    g = build_fusion_tracking_graph(tracker=TrackerParams(confirm_hits=2))
    ex = GraphExecutor(g)
    boxes = torch.zeros(schema.MAX_BOXES, len(schema.BOX_COLS))
    boxes[0] = torch.tensor([20.0, 2.0, 0.8, 4.5, 1.9, 1.6, 0.0, 0.8])
    radar = torch.zeros(schema.MAX_RADAR_OBJECTS, len(schema.RADAR_OBJ_COLS))
    radar[0] = torch.tensor([20.5, 2.1, -3.0, -3.0, 0.0, 10.0, 4.0, 0.7])
    state = initial_tracker_state()
    one = lambda v: torch.tensor([v], dtype=torch.int32)  # noqa: E731
    for k in range(2):
        out = ex.run({"boxes": boxes, "box_count": one(1), "radar_objects": radar, "radar_object_count": one(1),
                      "camera_boxes": torch.zeros(schema.MAX_CAMERA_BOXES, len(schema.CAM_COLS)),
                      "camera_box_count": one(0), "odom": torch.tensor([0, 0, 0, 0, 0, k * DT], dtype=torch.float64),
                      **stamps(round(k * DT * 1e9), round(k * DT * 1e9)), **state})
        state = tracker_feedback(out)
    assert int(out["confirmed_count"]) == 1 and int(out["track_count"]) == 1  # radar cluster merged into the box
    assert ex.pools  # planned statically


def test_rows_past_the_counts_are_never_read():
    """Garbage (NaN) past every count, in detections and in the state, must not leak into the outputs."""
    f, n = fused([(10.0, 1.0)], vr=[-2.0])
    f[1:] = math.nan
    state = initial_tracker_state()
    state["tracks_in"][:] = math.nan
    state["track_cov_in"][:] = math.nan
    out = GraphExecutor(build_tracking_graph()).run(
        {"fused": f, "fused_count": n, "odom": torch.tensor([0, 0, 0, 3, 0, 0], dtype=torch.float64), **state})
    assert int(out["track_count"]) == 1
    assert torch.isfinite(out["tracks"]).all() and torch.isfinite(out["track_cov"]).all()
    assert out["tracks"][1:].abs().sum() == 0


def radar_only(objects):
    """Fused rows of radar-only objects (x, y, Doppler) as the fusion emits them, base_link."""
    f = torch.zeros(schema.MAX_FUSED, len(schema.FUSED_COLS))
    for i, (x, y, vr) in enumerate(objects):
        f[i, [F["x"], F["y"], F["z"], F["l"], F["w"], F["h"], F["score"], F["vr"], F["has_vr"], F["src"]]] = \
            torch.tensor([x, y, 0.75, 4.0, 1.8, 1.5, 0.6, vr, 1.0, SRC_RADAR])
    return f, torch.tensor([len(objects)], dtype=torch.int32)


def run_rows(trk, f, n, t, ego=(0.0, 0.0, 0.0, 0.0, 0.0)):
    out = trk.ex.run({"fused": f, "fused_count": n, "odom": torch.tensor([*ego, t], dtype=torch.float64), **trk.state})
    trk.state = tracker_feedback(out)
    return {k: v.clone() for k, v in out.items()}


def test_radar_only_returns_standing_still_start_no_track_and_pull_none_away():
    """Seen from an ego driving at 10 m/s, a roadside return (ground speed 0) is a tree as often as a
    parked car: no track from it, and a passing track is not dragged onto it; a moving one is tracked."""
    v = 10.0
    still, moving = Tracker(), Tracker()
    for k in range(8):
        t = k * DT
        # Static at map (40, 6): seen from base_link at (40 - v t, 6), Doppler -(v_sensor . u).
        x = 40.0 - v * t
        u = torch.tensor([x, 6.0]) / math.hypot(x, 6.0)
        a = run_rows(still, *radar_only([(x, 6.0, float(-v * u[0]))]), t, ego=(v * t, 0.0, 0.0, v, 0.0))
        # A car ahead at 15 m/s: gains 5 m/s on the ego, radially.
        b = run_rows(moving, *radar_only([(30.0 + 5.0 * t, 0.0, 5.0)]), t, ego=(v * t, 0.0, 0.0, v, 0.0))
    assert int(a["track_count"]) == 0
    assert int(b["confirmed_count"]) == 1
    # A LiDAR track, then its object unseen while a still radar return lies 1.5 m off: it coasts.
    trk = Tracker()
    for k in range(6):
        out = trk.step([(20.0, 0.0)], k * DT)
    for k in range(6, 9):
        out = run_rows(trk, *radar_only([(21.5, 0.5, 0.0)]), k * DT)
    tr = confirmed(out)
    assert tr.shape[0] == 1 and int(tr[0, T["misses"]]) == 3
    assert abs(float(tr[0, T["y"]])) < 0.1


def test_a_doppler_far_off_the_track_velocity_is_ignored():
    """Ten frames at 10 m/s with its Doppler, then one return whose Doppler says -12 m/s (clutter
    beside the object): the velocity stays; without the gate it would collapse."""
    gated, open_gate = Tracker(), Tracker(doppler_gate_chi2=math.inf)
    for trk in (gated, open_gate):
        for k in range(11):
            vr = 10.0 if k < 10 else -12.0
            out = trk.step([(20 + 10 * k * DT, 0.0)], k * DT, vr=[vr])
        trk.vx = float(confirmed(out)[0, T["vx"]])
    assert abs(gated.vx - 10.0) < 0.5
    assert open_gate.vx < 5.0


def lidar_rows(objects):
    """Fused rows of LiDAR boxes (x, y, l, w, score) in base_link, yaw 0."""
    f = torch.zeros(schema.MAX_FUSED, len(schema.FUSED_COLS))
    for i, (x, y, ln, w, score) in enumerate(objects):
        f[i, [F["x"], F["y"], F["z"], F["l"], F["w"], F["h"], F["score"], F["src"]]] = \
            torch.tensor([x, y, 0.85, ln, w, 1.7, score, SRC_LIDAR])
    return f, torch.tensor([len(objects)], dtype=torch.int32)


def test_a_far_pedestrian_the_camera_misses_is_tracked_after_m_hits():
    """Crossing, seed 8: a pedestrian 45 m ahead gives a LiDAR box of ~8 returns (score 8 / (8 + 15));
    the camera, reporting other boxes, misses it (score x 0.85 in the fusion). It must still start
    a track and be confirmed at the third hit: with a birth threshold of 0.3 it never was, and the
    crossing's tracked-object recall fell to 0.898."""
    ex = GraphExecutor(build_fusion_tracking_graph())
    state = initial_tracker_state()
    one = lambda v: torch.tensor([v], dtype=torch.int32)  # noqa: E731
    camera = torch.zeros(schema.MAX_CAMERA_BOXES, len(schema.CAM_COLS))
    camera[0] = torch.tensor([10.0, 150.0, 30.0, 200.0, 0.9, 3.0])  # someone else, far left in the frame
    counts = []
    for k in range(3):
        boxes = torch.zeros(schema.MAX_BOXES, len(schema.BOX_COLS))
        boxes[0] = torch.tensor([45.0 - 1.3 * k * DT, 6.0, 0.85, 0.6, 0.6, 1.7, 0.0, 8 / (8 + 15)])
        out = ex.run({"boxes": boxes, "box_count": one(1), "radar_objects": torch.zeros(schema.MAX_RADAR_OBJECTS, 8),
                      "radar_object_count": one(0), "camera_boxes": camera, "camera_box_count": one(1),
                      "odom": torch.tensor([0, 0, 0, 0, 0, k * DT], dtype=torch.float64),
                      **stamps(round(k * DT * 1e9), round(k * DT * 1e9)), **state})
        state = tracker_feedback(out)
        counts.append((int(out["track_count"]), int(out["confirmed_count"])))
    assert counts == [(1, 0), (1, 0), (1, 1)]


@pytest.mark.parametrize("margin, twins", [(TrackerParams().birth_margin, 0), (0.0, 1)])
def test_a_road_user_cut_in_two_keeps_one_track(margin, twins):
    """A cyclist passing at 5 m/s; from frame 5 LiDAR also boxes a 0.1 m sliver of it 0.75 m ahead of
    its centre (crossing, seeds 1-8: a twin track beside the cyclist for 0.6 s). No track is born on
    a live track's footprint; without that margin the sliver becomes a confirmed twin."""
    trk = Tracker(birth_margin=margin)
    for k in range(10):
        x = 15.0 + 5.0 * k * DT
        objects = [(x, -4.0, 1.2, 0.5, 0.8)] + ([(x + 0.75, -3.9, 0.8, 0.1, 0.5)] if k >= 5 else [])
        out = run_rows(trk, *lidar_rows(objects), k * DT)
    assert int(out["confirmed_count"]) == 1 + twins
    assert int(out["track_count"]) == 1 + twins


def test_a_steady_track_coasts_through_an_occlusion_a_young_one_does_not():
    """Crossing, seed 8: a pedestrian tracked for 5 s is hidden for 4 s; its track went after 0.5 s
    and the object counted as missed all that time. A slow track seen ``steady_hits`` times coasts
    ``steady_max_misses`` frames and keeps its id when the object reappears; a young one, or a fast
    one, still dies after ``max_misses``."""
    p = TrackerParams()
    steady, young = Tracker(), Tracker()
    for trk, seen in ((steady, p.steady_hits + 5), (young, p.confirm_hits + 2)):
        for k in range(seen):
            out = trk.step([(20.0 + 1.3 * k * DT, 5.0)], k * DT)
        trk.id = int(confirmed(out)[0, T["id"]])
        for k in range(seen, seen + p.max_misses + 2):
            out = run_rows(trk, *lidar_rows([]), k * DT)
        trk.alive = int(out["confirmed_count"])
    assert young.alive == 0 and steady.alive == 1
    car = Tracker()   # as steady, but at 12 m/s: a car's track that lost its object would drift on as a phantom
    for k in range(p.steady_hits + 5):
        out = car.step([(20.0 + 12.0 * k * DT, 5.0)], k * DT)
    for k in range(p.steady_hits + 5, p.steady_hits + 5 + p.max_misses):
        out = run_rows(car, *lidar_rows([]), k * DT)
    assert int(out["confirmed_count"]) == 0
    k0 = p.steady_hits + 5 + p.max_misses + 2
    for k in range(k0, k0 + p.steady_max_misses - p.max_misses - 3):
        out = run_rows(steady, *lidar_rows([]), k * DT)
    k = k + 1
    out = steady.step([(20.0 + 1.3 * k * DT, 5.0)], k * DT)     # it reappears where it walked to
    tr = confirmed(out)
    assert tr.shape[0] == 1 and int(tr[0, T["id"]]) == steady.id and int(tr[0, T["misses"]]) == 0
