"""Camera and radar kernels (exec/kernel.py): the graphs' compiled bodies write what the Python bodies write,
bit for bit, on a simulator frame (plain and letterboxed) and on a cluttered radar scan."""
from __future__ import annotations

import math

import pytest
import torch

from pipelines import camera, radar, schema
from pipelines.camera import MEAN, NUM_CLASSES, STD, WEIGHTS, Letterbox, build_camera_graph, load_net
from pipelines.radar import RadarParams, build_radar_graph
from rt_runtime.exec import GraphExecutor, Kernel


@pytest.fixture(scope="module")
def frame() -> torch.Tensor:
    from pipelines.train_camera import frames

    return torch.from_numpy(next(iter(frames("highway_cut_in", 100, seconds=4.0, every=2.0, start=2.0)))[0])


def grey_canvas(f: torch.Tensor) -> torch.Tensor:
    """The frame between grey bars in a 4:3 canvas: letterboxed with padding rows."""
    out = torch.full((480, 640, 3), 115, dtype=torch.uint8)
    out[48:432] = f
    return out


@pytest.mark.parametrize("letterboxed", [False, True])
def test_camera_graph_writes_what_its_python_bodies_write(frame: torch.Tensor, letterboxed: bool) -> None:
    img = grey_canvas(frame) if letterboxed else frame
    src_h, src_w = img.shape[:2]
    ex = GraphExecutor(build_camera_graph(**({"source_width": src_w, "source_height": src_h} if letterboxed else {})))
    out = ex.run({"image": img})
    assert isinstance(camera.preprocess_into, Kernel) and isinstance(camera._decode, Kernel)
    mean, inv_std = torch.tensor(MEAN) * 255, 1.0 / (torch.tensor(STD) * 255)
    x = torch.empty(1, 3, 96, 160)
    if letterboxed:
        lb = Letterbox(src_w, src_h, 160, 96)
        (rw, rh), (ox, oy) = lb.size, lb.offset
        camera.letterbox_into.py(img, x, torch.empty(3, src_h, src_w), torch.empty(3, rh, rw), rw, rh, ox, oy,
                             mean, inv_std)
        su, sv, ou, ov = 4 * src_w / rw, 4 * src_h / rh, ox * src_w / rw, oy * src_h / rh
    else:
        pool, divisor = camera.block_pool(4)
        camera.preprocess_into.py(img, x, torch.empty(96, 1920, dtype=torch.int16), torch.empty(96, 1920), pool,
                                  torch.empty(96, 160, 3), divisor, mean, inv_std)
        su, sv, ou, ov = 16.0, 16.0, 0.0, 0.0
    assert torch.equal(x, ex.views["camera_input"])
    with torch.inference_mode():
        maps = load_net(str(WEIGHTS))(x)   # the nn.Module itself, not the graph's scripted copy
    assert torch.equal(maps, ex.views["camera_maps"])
    boxes, count = torch.empty(schema.MAX_CAMERA_BOXES, 6), torch.empty(1, dtype=torch.int32)
    camera._decode.py(maps, boxes, count, NUM_CLASSES, *camera.decode_at((su, sv), (ou, ov), "cpu", (src_w, src_h)),
                      0.3, 0.6, True)   # as the graph: boxes clipped to the source frame
    assert int(count) > 0, "the frame has objects: the decode's every step is compared"
    assert torch.equal(boxes, out["camera_boxes"]) and torch.equal(count, out["camera_box_count"])


def scan(seed: int) -> torch.Tensor:
    """Rigid targets with Doppler seen from the origin, clutter, a NaN row and a lone strong detection."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(12):
        cx, cy, vx = 8.0 + 5 * i, -20.0 + 3.5 * i, float(i % 4) * 4.0 - 6.0
        x = cx + torch.randn(6, generator=g) * 0.8
        y = cy + torch.randn(6, generator=g) * 0.4
        vr = vx * x / torch.hypot(x, y) + torch.randn(6, generator=g) * 0.05
        rows.append(torch.stack([x, y, torch.full((6,), 0.5), vr, 8 + torch.randn(6, generator=g)], 1))
    rows.append(torch.rand(40, 5, generator=g) * torch.tensor([80.0, 60.0, 2.0, 10.0, 20.0]) - torch.tensor(
        [0.0, 30.0, 0.0, 5.0, 10.0]))
    rows.append(torch.tensor([[math.nan, 0.0, 0.0, 0.0, 0.0], [50.0, -20.0, 0.5, 2.0, 25.0]]))
    return torch.cat(rows).contiguous()


def test_radar_graph_writes_what_its_python_bodies_write() -> None:
    p = RadarParams(mount=(3.8, 0.5, 0.1))
    ex = GraphExecutor(build_radar_graph(mount=p.mount))
    for seed in range(3):
        pts = scan(seed)
        out = ex.run({"radar": pts})
        assert isinstance(radar._cluster, Kernel) and isinstance(radar._objects, Kernel)
        label = torch.empty(pts.shape[0], dtype=torch.int64)
        radar._cluster.py(pts, label, p.eps_xy, p.eps_xy_per_m, p.eps_v, p.max_prop_iters, True)
        assert torch.equal(label, ex.views["radar_label"][: pts.shape[0]])
        objs, count = torch.empty(schema.MAX_RADAR_OBJECTS, 8), torch.empty(1, dtype=torch.int32)
        sums = torch.empty(schema.MAX_RADAR + 1, 10)
        radar._objects.py(pts, label, objs, count, torch.empty(schema.MAX_RADAR + 1, 8), sums, float(p.min_points),
                          p.single_point_rcs, p.min_rcs, p.max_resid, p.tangential_ridge, p.half_score_points,
                          3.8, 0.5, math.cos(0.1), math.sin(0.1))
        assert int(count) >= 5, "several objects: the ridge, the residual gate and the top-k are all compared"
        assert torch.equal(objs, out["radar_objects"]) and torch.equal(count, out["radar_object_count"])
