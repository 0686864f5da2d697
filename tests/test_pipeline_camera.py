"""Camera detector graph: preprocessing, CenterNet decoding, and the trained net on held-out frames."""
import math

import pytest
import torch
import torch.nn.functional as F

from pipelines import schema
from pipelines.camera import (BOX_OVERLAP, HEAD_CHANNELS, MEAN, NUM_CLASSES, STD, WEIGHTS, DeployedNet,
                              build_camera_graph, decode_into, load_net)
from pipelines.geometry import compact
from rt_runtime.exec import GraphExecutor


def test_preprocess_is_an_exact_area_downscale_into_the_planned_input():
    ex = GraphExecutor(build_camera_graph(weights=None))
    img = torch.randint(0, 256, (384, 640, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    ex.run({"image": img})
    x = ex.views["camera_input"]
    ref = F.avg_pool2d(img.permute(2, 0, 1)[None].float(), 4)
    ref = (ref - torch.tensor(MEAN).view(1, 3, 1, 1) * 255) / (torch.tensor(STD).view(1, 3, 1, 1) * 255)
    assert x.shape == (1, 3, 96, 160) and x.is_contiguous()
    torch.testing.assert_close(x, ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("k", [4, 3])
def test_preprocess_is_the_block_mean_bit_for_bit(k):
    """k = 4: the scale 1/16 sits in the pooling matmul (exact); k = 3: the sums are divided by 9 after."""
    h, w = 384, 640 if k == 4 else 624
    ex = GraphExecutor(build_camera_graph(height=h, width=w, downscale=k, weights=None))
    img = torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(k))
    img[:k, :k] = 255   # a saturated block: the largest sums
    ex.run({"image": img})
    block = img.view(h // k, k, w // k, k, 3).float().mean((1, 3))   # the strided mean the op replaces
    ref = ((block - torch.tensor(MEAN) * 255) * (1.0 / (torch.tensor(STD) * 255))).permute(2, 0, 1)[None]
    assert torch.equal(ex.views["camera_input"], ref)


@pytest.mark.parametrize("weights", [None, str(WEIGHTS)])
def test_deployed_net_writes_the_trained_nets_maps_bit_for_bit(weights):
    net = load_net(weights)
    x = torch.randn(2, 3, 96, 160, generator=torch.Generator().manual_seed(1))
    out = torch.full((2, HEAD_CHANNELS, 24, 40), math.nan)
    with torch.inference_mode():
        DeployedNet(net)(x, out)
        assert torch.equal(out, net(x))
    assert not DeployedNet(net).training


def peak_maps(peaks, h=24, w=40):
    """Head maps with Gaussian-ish peaks: (cls, row, col, score, w_cells, h_cells, du, dv)."""
    maps = torch.zeros(1, HEAD_CHANNELS, h, w)
    maps[0, :NUM_CLASSES] = -10.0
    for cls, r, c, score, bw, bh, du, dv in peaks:
        logit = math.log(score / (1 - score))
        maps[0, cls, r, c] = logit
        for dr, dc in ((0, 1), (1, 0), (1, 1), (-1, 0)):  # shoulders that NMS must suppress
            maps[0, cls, r + dr, c + dc] = logit - 0.5
        maps[0, NUM_CLASSES:, r, c] = torch.tensor([math.log(bw), math.log(bh), du, dv])
    return maps


def test_decode_finds_peaks_suppresses_neighbours_and_maps_to_frame_pixels():
    maps = peak_maps([(0, 10, 20, 0.9, 4.0, 2.0, 0.25, -0.25), (3, 5, 7, 0.6, 1.0, 3.0, 0.0, 0.0),
                      (1, 18, 30, 0.2, 2.0, 2.0, 0.0, 0.0)])
    boxes = torch.full((schema.MAX_CAMERA_BOXES, 6), 7.0)
    count = torch.zeros(1, dtype=torch.int32)
    decode_into(maps, boxes, count, 16.0, 0.3)
    assert int(count) == 2, "the 0.2 peak is under the threshold; shoulders are not peaks"
    car, ped = boxes[0].tolist(), boxes[1].tolist()
    cu, cv = (20 + 0.5 + 0.25) * 16, (10 + 0.5 - 0.25) * 16
    assert car == pytest.approx([cu - 32, cv - 16, cu + 32, cv + 16, 0.9, 0.0], abs=1e-3)
    cu, cv = (7 + 0.5) * 16, (5 + 0.5) * 16
    assert ped == pytest.approx([cu - 8, cv - 24, cu + 8, cv + 24, 0.6, 3.0], abs=1e-3)
    assert torch.all(boxes[2:] == 0), "rows past the count are cleared"


def reference_decode(maps, k, su, sv, ou, ov, threshold):
    """The decode as first written (a 3x3 ``max_pool2d``, boxes as (K, 6) rows, IoU on (K, K, 2) views)."""
    heat = torch.sigmoid(maps[0, :NUM_CLASSES])
    hh, ww = heat.shape[-2:]
    peak = heat * (F.max_pool2d(heat[None], 3, 1, 1)[0] == heat)
    score, idx = torch.topk(peak.view(-1), k)
    cls, cell = idx // (hh * ww), idx % (hh * ww)
    reg = maps[0, NUM_CLASSES:].reshape(4, -1)[:, cell]
    cu, cv = (cell % ww).float() + 0.5 + reg[2], (cell // ww).float() + 0.5 + reg[3]
    half_w, half_h = reg[0].exp() / 2, reg[1].exp() / 2
    boxes = torch.stack([(cu - half_w) * su - ou, (cv - half_h) * sv - ov, (cu + half_w) * su - ou,
                         (cv + half_h) * sv - ov, score, cls.float()], 1)
    lt = torch.maximum(boxes[:, None, :2], boxes[None, :, :2])
    rb = torch.minimum(boxes[:, None, 2:4], boxes[None, :, 2:4])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area = (boxes[:, 2:4] - boxes[:, :2]).clamp(min=0).prod(-1)
    iou = inter / (area[:, None] + area[None, :] - inter).clamp(min=1e-6)
    keep = (score >= threshold) & ~(iou.tril(-1) > BOX_OVERLAP).any(1)
    return compact(boxes, keep)


def test_decode_is_bit_for_bit_the_max_pool_decode():
    """Ties (plateaus of equal logits), NaN logits and overlapping boxes, at odd scales and offsets."""
    g = torch.Generator().manual_seed(3)
    for trial in range(12):
        maps = torch.randn(1, HEAD_CHANNELS, 24, 40, generator=g) * 3
        if trial % 2:
            maps[0, :NUM_CLASSES] = maps[0, :NUM_CLASSES].round()
        if trial % 3 == 0:
            maps[0, trial % NUM_CLASSES, 3, 5] = math.nan
            maps[0, NUM_CLASSES + trial % 4, 10, 11] = math.nan
        maps[0, NUM_CLASSES:NUM_CLASSES + 2] += trial % 4   # larger boxes: more overlaps
        for threshold, (su, sv), (ou, ov) in ((0.3, (16.0, 16.0), (0.0, 0.0)), (0.0, (2.7, 3.3), (5.1, -2.3))):
            boxes = torch.empty(schema.MAX_CAMERA_BOXES, 6)
            count = torch.empty(1, dtype=torch.int64)
            decode_into(maps, boxes, count, (su, sv), threshold, (ou, ov))
            want, n = reference_decode(maps, schema.MAX_CAMERA_BOXES, su, sv, ou, ov, threshold)
            assert torch.equal(boxes.view(torch.int32), want.view(torch.int32)) and int(count) == int(n)


def test_graph_contracts_and_empty_frame():
    graph = build_camera_graph(weights=None)
    assert [o.name for o in graph.ops] == ["camera_preprocess", "camera_net", "camera_decode"]
    assert graph.specs["camera_boxes"] == schema.camera_boxes()
    assert graph.capturable
    out = GraphExecutor(graph).run({"image": torch.zeros(384, 640, 3, dtype=torch.uint8)})
    assert int(out["camera_box_count"]) == 0, "an untrained net starts at the heatmap prior (0.1)"
    with pytest.raises(ValueError):
        build_camera_graph(height=390, weights=None)


def test_committed_weights_are_small_and_load():
    assert WEIGHTS.exists() and WEIGHTS.stat().st_size < 5e6
    out = GraphExecutor(build_camera_graph()).run({"image": torch.zeros(384, 640, 3, dtype=torch.uint8)})
    assert int(out["camera_box_count"]) == 0, "a blank frame has no objects"


def test_trained_detector_on_held_out_simulator_frames():
    """IoU >= 0.5, greedy by score, on seeds never trained on (see pipelines/train_camera.py)."""
    from pipelines.train_camera import HELDOUT_SEEDS, evaluate

    res = evaluate(str(WEIGHTS), ("highway_cut_in", "pedestrian_crossing", "stop_and_go"), HELDOUT_SEEDS[:1],
                   every=2.0)
    print("camera held-out:", res)
    assert res["hits"] >= 25 and res["precision"] >= 0.8 and res["recall"] >= 0.8
    assert res["class_accuracy"] >= 0.9


@pytest.mark.cuda
def test_runs_on_cuda_like_on_cpu():
    from pipelines.train_camera import frames
    from rt_runtime.device import device_for

    img = torch.from_numpy(next(iter(frames("highway_cut_in", 100, seconds=4.0, every=2.0, start=2.0)))[0])
    cpu = GraphExecutor(build_camera_graph()).run({"image": img})
    ex = GraphExecutor(build_camera_graph("cuda"), device_for("cuda"))
    gpu = ex.run({"image": img.cuda()})
    n = int(cpu["camera_box_count"])
    assert int(gpu["camera_box_count"]) == n
    torch.testing.assert_close(gpu["camera_boxes"][:n].cpu(), cpu["camera_boxes"][:n], atol=0.5, rtol=1e-3)


def test_decode_keeps_one_box_per_object_whatever_the_classes():
    """A cyclist's rider also peaks as a pedestrian (crossing: the same rectangle twice, a false alarm
    each time); a lower box overlapping a better one by IoU > 0.6 goes, a neighbour beside it stays."""
    maps = peak_maps([(2, 10, 20, 0.8, 1.0, 2.0, 0.0, 0.0), (3, 10, 22, 0.6, 1.0, 2.0, -1.8, 0.1),
                      (3, 10, 24, 0.7, 1.0, 2.0, 0.0, 0.0)])
    boxes = torch.zeros(schema.MAX_CAMERA_BOXES, 6)
    count = torch.zeros(1, dtype=torch.int32)
    decode_into(maps, boxes, count, 16.0, 0.3)
    assert int(count) == 2, "the 0.6 pedestrian box lies on the 0.8 cyclist box (IoU 0.82)"
    assert boxes[:2, 4].tolist() == pytest.approx([0.8, 0.7]) and boxes[:2, 5].tolist() == [2.0, 3.0]
    assert torch.all(boxes[2:] == 0), "kept boxes first, the rest cleared"
