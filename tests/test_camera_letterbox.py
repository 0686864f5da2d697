"""The camera graph at any resolution: letterboxed into the net's input in planned memory, boxes back in
source pixels -- three resolutions x three encodings (rgb8 Image, bgr8 Image, JPEG CompressedImage),
each decoded by the ingress codec the replay uses.

A simulated frame F (640x384, the net's own size) is the reference: its boxes on the plain graph are
what every variant must find again. Nearest-neighbour 2x and 3x enlargements average back to exactly
F's input, so their boxes are F's scaled; a 4:3 canvas (F between grey bars) is letterboxed at another
scale, so its boxes are compared by overlap.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pipelines.camera import Letterbox, build_camera_graph
from rt_runtime.bag import array_to_compressed, array_to_image, open_bag
from rt_runtime.bag.image import image_to_rgb8
from rt_runtime.exec import GraphExecutor
from rt_runtime.io import INGRESS_CODECS
from rt_runtime.io.ingress import decode
from rt_runtime.sim import record

T_NS = 1_700_000_000_000_000_000


@pytest.fixture(scope="module")
def frame(tmp_path_factory) -> np.ndarray:
    path = tmp_path_factory.mktemp("letterbox") / "sim"
    record(path, "highway_cut_in", 0.6, 7, "mcap", workers=1)
    with open_bag(path) as r:
        msgs = [r.decode(m) for m in r.messages(["/sensing/camera/image_raw"])]
    return np.array(image_to_rgb8(msgs[-1], "/sensing/camera/image_raw"))


def detect(img: np.ndarray) -> np.ndarray:
    h, w = img.shape[:2]
    args = {} if (w, h) == (640, 384) else {"source_width": w, "source_height": h}
    out = GraphExecutor(build_camera_graph(**args)).run({"image": torch.from_numpy(np.ascontiguousarray(img))})
    return out["camera_boxes"][: int(out["camera_box_count"])].numpy().copy()


def iou(a: np.ndarray, b: np.ndarray) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def grey_canvas(f: np.ndarray) -> np.ndarray:
    """F in a 640x480 (4:3) frame between grey bars: letterboxed at 0.2 (not F's 0.25), offset 16 px."""
    out = np.full((480, 640, 3), 115, np.uint8)
    out[48:432] = f
    return out


RESOLUTIONS = {"1280x768": lambda f: f.repeat(2, 0).repeat(2, 1), "1920x1152": lambda f: f.repeat(3, 0).repeat(3, 1),
               "640x480": grey_canvas}
SOURCE = {"1280x768": lambda b: b * 2, "1920x1152": lambda b: b * 3, "640x480": lambda b: b + [0, 48, 0, 48]}


def encoded(img: np.ndarray, encoding: str) -> np.ndarray:
    """The frame as a vehicle records it, decoded back by the replay's ingress codec."""
    if encoding == "jpeg":
        msg, codec = array_to_compressed(img, "cam", T_NS, "jpeg", quality=95), "compressed_image"
    else:
        msg = array_to_image(img if encoding == "rgb8" else img[..., ::-1].copy(), encoding, "cam", T_NS)
        codec = "image_rgb"
    return decode(INGRESS_CODECS[codec], msg, "/cam")["value"]


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "jpeg"])
@pytest.mark.parametrize("resolution", list(RESOLUTIONS))
def test_boxes_come_back_in_source_pixels(frame, resolution, encoding):
    ref = detect(frame)
    assert len(ref) >= 1, "the reference frame has objects to find"
    img = RESOLUTIONS[resolution](frame)
    got = detect(encoded(img, encoding))
    want = ref.copy()
    want[:, :4] = SOURCE[resolution](ref[:, :4])
    exact = encoding != "jpeg" and resolution != "640x480"
    if exact:   # the same net input up to float rounding: the same boxes, scaled
        assert len(got) == len(want)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * (2 if resolution == "1280x768" else 3))
    else:       # every confident reference object found again where it is in the source frame
        for box in want[want[:, 4] > 0.6]:
            size, centre = box[2:4] - box[:2], (box[:2] + box[2:4]) / 2
            near = [g for g in got if g[5] == box[5] and (abs((g[:2] + g[2:4]) / 2 - centre) < size / 2).all()]
            assert near, (resolution, encoding, box, got)
        top = want[np.argmax(want[:, 4])]   # the most confident one also keeps its extent
        assert max(iou(top, g) for g in got if g[5] == top[5]) > 0.6, (resolution, encoding, top, got)
    h, w = img.shape[:2]
    assert (got[:, [0, 2]].mean(1) > 0).all() and (got[:, [0, 2]].mean(1) < w).all()
    assert (got[:, [1, 3]].mean(1) > 0).all() and (got[:, [1, 3]].mean(1) < h).all()


def test_letterbox_geometry_and_planned_buffers():
    lb = Letterbox(768, 576, 160, 96)
    assert lb.scale == pytest.approx(96 / 576) and lb.size == (128, 96) and lb.offset == (16, 0)
    assert lb.to_source(16, 0) == (0.0, 0.0) and lb.to_source(144, 96) == (768.0, 576.0)
    graph = build_camera_graph(source_width=768, source_height=576, weights=None)
    assert graph.inputs[0].shape == (576, 768, 3)
    assert [o.name for o in graph.ops] == ["camera_preprocess", "camera_net", "camera_decode"]
    assert {s.name for s in graph.ops[0].workspace} == {"camera_frame", "camera_region"}
    ex = GraphExecutor(graph)
    ex.run({"image": torch.full((576, 768, 3), 200, dtype=torch.uint8)})
    x = ex.views["camera_input"]
    assert torch.all(x[..., :16] == 0) and torch.all(x[..., 144:] == 0), "padding is the mean grey (0)"
    assert torch.all(x[..., 16:144] > 0), "the frame fills the middle"
