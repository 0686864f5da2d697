"""Fusion and tracking kernels compute on the counted rows only on the CPU (``geometry.live_rows``) and
still write what the whole buffers' computation writes: products whose bits depend on their row count
run on the whole buffer's count, and rows past the counts, whatever they hold, change nothing."""
from __future__ import annotations

import math

import pytest
import torch

from pipelines import fusion, schema
from pipelines.fusion import build_fusion_graph
from pipelines.camera_model import CameraModel
from pipelines.geometry import live_rows
from pipelines.tracking_kernels import _rows_matmul
from rt_runtime.exec import GraphExecutor

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CAM = CameraModel(fx=400.0, fy=400.0, cx=319.5, cy=191.5, width=640, height=384, x=1.6, z=1.45, pitch=0.0349066)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.numpy().tobytes() == b.numpy().tobytes()


def test_live_rows_is_the_count_clamped_to_the_buffer() -> None:
    count = lambda n: torch.tensor([n], dtype=torch.int32)  # noqa: E731
    assert [live_rows(count(n), 8) for n in (0, 5, 8, 20, -3)] == [0, 5, 8, 8, 0]


def test_leading_rows_product_matches_the_whole_buffers() -> None:
    # BLAS picks its kernel by the row count: a product on fewer rows may round differently.
    g = torch.Generator().manual_seed(5)
    n_all = schema.MAX_FUSED
    for _ in range(3):
        a = torch.randn(n_all, 2, generator=g, dtype=torch.float64) * 40
        b = torch.randn(2, 2, generator=g, dtype=torch.float64).T   # a rotation's transpose, as to_map's
        v = torch.randn(2, generator=g, dtype=torch.float64)
        whole, whole_v = a @ b, a @ v
        for n in range(n_all + 1):
            assert same_bits(_rows_matmul(a[:n], b, n_all), whole[:n]), n
            assert same_bits(_rows_matmul(a[:n], v, n_all), whole_v[:n]), n


def test_projection_of_leading_rows_matches_the_whole_buffers() -> None:
    g = torch.Generator().manual_seed(6)
    n_all = schema.MAX_FUSED
    rot, trans = (torch.tensor(v, dtype=torch.float32) for v in CAM.base_to_optical())
    knobs = (CAM.fx, CAM.fy, CAM.cx, CAM.cy, CAM.width, CAM.height, 0.5)
    for _ in range(3):
        objects = torch.zeros(n_all, len(schema.FUSED_COLS))
        objects[:, 0] = 5 + 60 * torch.rand(n_all, generator=g)                  # x ahead
        objects[:, 1] = 20 * torch.rand(n_all, generator=g) - 10                 # y
        objects[:, 2] = 1.0
        objects[:, 3:6] = 0.5 + 4 * torch.rand(n_all, 3, generator=g)          # l w h
        objects[:, 6] = 6 * torch.rand(n_all, generator=g) - 3                   # yaw
        box, visible = fusion.project_boxes(objects, rot, trans, *knobs)
        for n in range(n_all + 1):
            b, vis = fusion.project_boxes(objects, rot, trans, *knobs, n)
            assert same_bits(b, box[:n]) and same_bits(vis, visible[:n]), n


def scene(fill: float) -> dict[str, torch.Tensor]:
    """Boxes, radar clusters and camera boxes (some matching, some not); ``fill`` past every count."""
    boxes = [[15.0, 3.0, 0.8, 4.5, 1.9, 1.6, 0.1, 0.7], [22.0, -2.5, 1.7, 10.0, 2.5, 3.4, 0.0, 0.6],
             [30.0, 0.5, 0.9, 1.8, 0.6, 1.7, -0.2, 0.5]]
    radar = [[15.2, 3.1, -2.0, 0.0, 0.0, 5.0, 4.0, 0.8], [26.0, -2.4, -1.0, 0.0, 0.0, 5.0, 3.0, 0.7],
             [60.0, 8.0, 3.0, 0.0, 0.0, 5.0, 3.0, 0.9]]
    rot, trans = (torch.tensor(v, dtype=torch.float32) for v in CAM.base_to_optical())
    uv, _ = fusion.project_boxes(torch.tensor(boxes), rot, trans, CAM.fx, CAM.fy, CAM.cx, CAM.cy, CAM.width,
                                 CAM.height, 0.5)   # reads x y z l w h yaw: a box row's columns too
    cams = [uv[0].tolist() + [0.9, 0.0], uv[2].tolist() + [0.8, 2.0], [500.0, 20.0, 560.0, 60.0, 0.95, 0.0]]
    out = {}
    for name, rows, size in (("boxes", boxes, schema.MAX_BOXES), ("radar_objects", radar, schema.MAX_RADAR_OBJECTS),
                             ("camera_boxes", cams, schema.MAX_CAMERA_BOXES)):
        t = torch.full((size, len(rows[0])), fill)
        t[:len(rows)] = torch.tensor(rows)
        out[name] = t
    n = lambda rows: torch.tensor([len(rows)], dtype=torch.int32)  # noqa: E731
    return {**out, "box_count": n(boxes), "radar_object_count": n(radar), "camera_box_count": n(cams)}


@pytest.mark.parametrize("fill", [math.nan, 1e30, -0.0])
def test_rows_past_the_counts_change_nothing(fill: float) -> None:
    ex = GraphExecutor(build_fusion_graph(camera=CAM))
    want = {k: v.clone() for k, v in ex.run(scene(0.0)).items()}
    got = ex.run(scene(fill))
    assert int(want["fused_count"]) == 4   # three boxes (two with a cluster) and the lone cluster
    src = want["fused"][:4, 11].long()
    assert int(((src & fusion.SRC_RADAR) > 0).sum()) == 3 and int(((src & fusion.SRC_CAMERA) > 0).sum()) == 2
    assert [k for k in want if not same_bits(want[k], got[k])] == []
