"""Camera 2D object detection as an rt_runtime graph: a small CenterNet on a downscaled frame.

Three ops:

1. ``camera_preprocess``: the uint8 HWC frame is box-filtered by ``downscale`` (an exact area
   average: the frame viewed as blocks, one ``mean`` into a planned buffer) and written as
   normalised float NCHW into the net's input view.
2. ``camera_net``: a small conv net (stride-2 stem, stride-4/8/16 stages, the deeper features
   upsampled back onto stride 4) with CenterNet heads: per-class centre heatmaps (logits), box size
   (log of width and height in output cells) and sub-cell centre offset. Torch convolutions have no
   ``out=``, so this op copies the net's result into its planned view (one copy of a small map).
3. ``camera_decode``: centre peaks are the heatmap cells equal to their 3x3 max-pool (NMS without
   sorting boxes), the ``MAX_CAMERA_BOXES`` best scores across classes are taken with one
   ``topk``, and each becomes a box ``u1, v1, u2, v2`` in the full frame's pixels, score and class
   (an index into ``schema.CLASSES``). Boxes under ``score_threshold`` are not counted, nor boxes
   overlapping a better-scored one by IoU > 0.6 whatever their classes (one object, one box).

The weights come from ``pipelines/train_camera.py`` (see ``pipelines/models/README.md``).

A camera whose frames are not ``width`` x ``height`` (``source_width``, ``source_height``: any size)
gets a letterboxing ``camera_preprocess`` (the same op name, so configured op budgets still apply):
the frame is scaled by one factor to fit
the net's input (an area average, ``adaptive_avg_pool2d`` into a planned buffer), centred, the rest
padded with the mean grey (0 once normalised), so nothing is stretched or cut; ``camera_decode``
then maps the boxes back into the source frame's pixels (``Letterbox``).

Each op is one call into TorchScript (``rt_runtime.exec.kernel``; the net scripted whole, ``script_module``),
so its work runs in C++ off the GIL and camera jobs on parallel replay workers compute side by side.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rt_runtime import Graph, Op, TensorSpec
from rt_runtime.exec import kernel, script_module
from pipelines import schema
from pipelines.geometry import compact
from pipelines.lidar import on_device

WEIGHTS = Path(__file__).parent / "models" / "camera_centernet.pt"
NUM_CLASSES = len(schema.CLASSES)
HEAD_CHANNELS = NUM_CLASSES + 4  # heatmap logits, log w, log h, offset u, offset v
MEAN = (0.45, 0.45, 0.45)
STD = (0.25, 0.25, 0.25)
BOX_OVERLAP = 0.6   # IoU above which a box is the same object as a better-scored one


def _conv(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class CenterNet(nn.Module):
    """A 0.2 M-parameter CenterNet: output stride 4, heads = heatmap logits, log size, offset."""

    stride = 4

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        w = width
        self.s4 = nn.Sequential(_conv(3, w // 2, 2), _conv(w // 2, w, 2), _conv(w, w))
        self.s8 = nn.Sequential(_conv(w, 2 * w, 2), _conv(2 * w, 2 * w))
        self.s16 = nn.Sequential(_conv(2 * w, 2 * w, 2), _conv(2 * w, 2 * w), _conv(2 * w, 2 * w))
        self.lat8 = nn.Conv2d(2 * w, w, 1)
        self.lat16 = nn.Conv2d(2 * w, w, 1)
        self.fuse = _conv(w, w)
        self.heat = nn.Sequential(_conv(w, w), nn.Conv2d(w, NUM_CLASSES, 1))
        self.box = nn.Sequential(_conv(w, w), nn.Conv2d(w, 4, 1))
        self.heat[-1].bias.data.fill_(-2.19)  # CenterNet's prior: sigmoid = 0.1 at the start

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) normalised image → (B, HEAD_CHANNELS, H/4, W/4)."""
        f4 = self.s4(x)
        f8 = self.s8(f4)
        f16 = self.s16(f8)
        up = F.interpolate(self.lat16(f16), size=f8.shape[-2:], mode="nearest") + self.lat8(f8)
        f = self.fuse(F.interpolate(up, size=f4.shape[-2:], mode="nearest") + f4)
        return torch.cat([self.heat(f), self.box(f)], 1)


@dataclasses.dataclass(frozen=True)
class CameraParams:
    """Frame size and detector settings."""

    height: int = 384
    width: int = 640
    downscale: int = 4             # 640x384 → 160x96 net input, 40x24 heatmap
    score_threshold: float = 0.3
    weights: str | None = str(WEIGHTS)  # None: untrained net (shapes and timing only)
    source_width: int | None = None    # the camera's frame size, when not width x height: letterboxed
    source_height: int | None = None


@dataclasses.dataclass(frozen=True)
class Letterbox:
    """A source frame scaled by one factor into a ``dst_w`` x ``dst_h`` input, centred, the rest padding."""

    src_w: int
    src_h: int
    dst_w: int
    dst_h: int

    @property
    def scale(self) -> float:
        """Input pixels per source pixel (the same along both axes)."""
        return min(self.dst_w / self.src_w, self.dst_h / self.src_h)

    @property
    def size(self) -> tuple[int, int]:
        """Width and height of the scaled frame inside the input."""
        return (max(1, min(self.dst_w, round(self.src_w * self.scale))),
                max(1, min(self.dst_h, round(self.src_h * self.scale))))

    @property
    def offset(self) -> tuple[int, int]:
        """Column and row of the scaled frame's top-left corner in the input."""
        w, h = self.size
        return (self.dst_w - w) // 2, (self.dst_h - h) // 2

    def to_source(self, u: float, v: float) -> tuple[float, float]:
        """An input pixel coordinate -> the source frame's (the scale actually used along each axis)."""
        (w, h), (ox, oy) = self.size, self.offset
        return (u - ox) * self.src_w / w, (v - oy) * self.src_h / h


def load_net(path: str | None, device: str = "cpu") -> CenterNet:
    """The detector in eval mode on ``device``, with trained weights unless ``path`` is None."""
    net = CenterNet()
    if path is not None:
        state = torch.load(path, map_location="cpu", weights_only=True)
        net.load_state_dict({k: v.float() for k, v in state.items()})
    return net.to(device).eval()


@kernel
def preprocess_into(image: Tensor, out: Tensor, block: Tensor, k: int, mean: Tensor, inv_std: Tensor,
                    rows: Tensor) -> None:
    """uint8 (H, W, 3) → normalised float (1, 3, H/k, W/k) in ``out``, via ``block`` (H/k, W/k, 3) and
    ``rows`` (H/k, W, 3): the k x k block means as k row adds then k column adds of contiguous rows
    (0.8 ms for 640x384, k = 4, against 4.0 ms for one strided ``torch.mean`` over the (h, k, w, k, 3) view,
    one thread; the same bits as that mean: sums of integers below 2**24 are exact in float32, and the
    division is the mean's)."""
    h, w = block.shape[0], block.shape[1]
    strips = image.view(h, k, w * k, 3)
    rows.copy_(strips[:, 0])
    for i in range(1, k):
        rows.add_(strips[:, i])
    cols = rows.view(h, w, k, 3)
    torch.add(cols[:, :, 0], cols[:, :, 1], out=block)
    for i in range(2, k):
        block.add_(cols[:, :, i])
    block.div_(k * k)
    # out is contiguous NCHW; the permuted HWC view lets one kernel write it without a transpose copy.
    hwc = out[0].permute(1, 2, 0)
    torch.sub(block, mean, out=hwc)
    hwc.mul_(inv_std)


@kernel
def letterbox_into(image: Tensor, out: Tensor, frame: Tensor, region: Tensor, rw: int, rh: int, ox: int, oy: int,
                   mean: Tensor, inv_std: Tensor) -> None:
    """uint8 (H, W, 3) of any size -> normalised float (1, 3, h, w) in ``out``, letterboxed: scaled to ``rw`` x ``rh``
    at column ``ox``, row ``oy`` (``Letterbox.size``, ``.offset``), via ``frame`` (3, H, W) and ``region`` (3, rh, rw)
    float buffers."""
    frame.copy_(image.permute(2, 0, 1))
    torch.ops.aten.adaptive_avg_pool2d(frame, [rh, rw], out=region)   # the area average of each input pixel
    region.sub_(mean.view(3, 1, 1)).mul_(inv_std.view(3, 1, 1))
    out.zero_()   # the padding: the mean grey, 0 once normalised
    out[0, :, oy:oy + rh, ox:ox + rw].copy_(region)


def decode_into(maps: torch.Tensor, boxes: torch.Tensor, count: torch.Tensor, scale: float | tuple[float, float],
                threshold: float, offset: tuple[float, float] = (0.0, 0.0), overlap: float = BOX_OVERLAP) -> None:
    """CenterNet decoding: 3x3 max-pool peaks, top-k over classes and cells, boxes in frame pixels
    (``cell * scale - offset`` per axis: a letterboxed frame's boxes land in its source pixels), class-agnostic
    suppression of boxes overlapping a better one by more than ``overlap`` (IoU)."""
    su, sv = scale if isinstance(scale, tuple) else (scale, scale)
    _decode(maps, boxes, count, NUM_CLASSES, float(su), float(sv), float(offset[0]), float(offset[1]),
            float(threshold), float(overlap))


@kernel
def _decode(maps: Tensor, boxes: Tensor, count: Tensor, num_classes: int, su: float, sv: float, ou: float,
            ov: float, threshold: float, overlap: float) -> None:
    """``decode_into``'s body: the first ``num_classes`` maps are heatmap logits, the next 4 the box regression."""
    heat = torch.sigmoid(maps[0, :num_classes])
    hh, ww = heat.shape[-2], heat.shape[-1]
    peak = heat * (F.max_pool2d(heat[None], 3, 1, 1)[0] == heat)
    score, idx = torch.topk(peak.view(-1), boxes.shape[0])
    cls, cell = idx // (hh * ww), idx % (hh * ww)
    reg = maps[0, num_classes:].reshape(4, -1)[:, cell]              # (4, K): log w, log h, du, dv
    cu = (cell % ww).float() + 0.5 + reg[2]
    cv = (cell // ww).float() + 0.5 + reg[3]
    half_w, half_h = reg[0].exp() / 2, reg[1].exp() / 2
    torch.stack([(cu - half_w) * su - ou, (cv - half_h) * sv - ov, (cu + half_w) * su - ou, (cv + half_h) * sv - ov,
                 score, cls.float()], 1, out=boxes)
    # One object, two class peaks (a cyclist's rider also peaks as a pedestrian): drop a box that
    # overlaps a better-scored one (topk is sorted) by more than ``overlap``, whatever either's class.
    lt = torch.maximum(boxes[:, None, :2], boxes[None, :, :2])
    rb = torch.minimum(boxes[:, None, 2:4], boxes[None, :, 2:4])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area = (boxes[:, 2:4] - boxes[:, :2]).clamp(min=0).prod(-1)
    iou = inter / (area[:, None] + area[None, :] - inter).clamp(min=1e-6)
    keep = (score >= threshold) & ~(iou.tril(-1) > overlap).any(1)
    rows, n = compact(boxes, keep)     # kept boxes first, still best first
    boxes.copy_(rows)
    count.copy_(n.view(1))


def build_camera_graph(device: str = "cpu", **params: object) -> Graph:
    """The camera detector: ``image`` (H, W, 3) uint8 → ``camera_boxes`` (MAX_CAMERA_BOXES, 6) + count."""
    p = CameraParams(**params)  # type: ignore[arg-type]
    k = p.downscale
    if p.height % (4 * k) or p.width % (4 * k):
        raise ValueError(f"camera: frame {p.width}x{p.height} must be a multiple of {4 * k} (downscale x stride)")
    h, w = p.height // k, p.width // k
    src_w, src_h = p.source_width or p.width, p.source_height or p.height
    if src_w < 1 or src_h < 1:
        raise ValueError(f"camera: source frame {src_w}x{src_h} must be at least 1x1")
    lb = Letterbox(src_w, src_h, w, h) if (src_w, src_h) != (p.width, p.height) else None
    img = on_device(schema.image(height=src_h, width=src_w), device)
    x_spec = TensorSpec("camera_input", (1, 3, h, w), "float32", device, layout="NCHW")
    block_spec = TensorSpec("camera_block", (h, w, 3), "float32", device)
    rows_spec = TensorSpec("camera_rows", (h, p.width, 3), "float32", device)
    maps_spec = TensorSpec("camera_maps", (1, HEAD_CHANNELS, h // 4, w // 4), "float32", device, layout="NCHW")
    boxes_spec = on_device(schema.camera_boxes(), device)
    count_spec = on_device(schema.count("camera_box_count"), device)
    mean = torch.tensor(MEAN, device=device) * 255
    inv_std = 1.0 / (torch.tensor(STD, device=device) * 255)
    net = script_module(load_net(p.weights, device))

    def preprocess(image: torch.Tensor, x: torch.Tensor, block: torch.Tensor, rows: torch.Tensor) -> None:
        preprocess_into(image, x, block, k, mean, inv_std, rows)

    def run_net(x: torch.Tensor, maps: torch.Tensor) -> None:
        with torch.inference_mode():
            maps.copy_(net(x))  # conv has no out=: one copy of the (small) head maps into the planned view

    def letterbox(image: torch.Tensor, x: torch.Tensor, frame: torch.Tensor, region: torch.Tensor) -> None:
        letterbox_into(image, x, frame, region, rw, rh, ox, oy, mean, inv_std)

    if lb is None:
        scale, offset = (float(k * CenterNet.stride),) * 2, (0.0, 0.0)
        first = Op("camera_preprocess", preprocess, (img,), (x_spec,), workspace=(block_spec, rows_spec),
                   capturable=True, cost_us=500)
    else:   # output cells -> input pixels (x stride) -> source pixels (Letterbox.to_source, per axis)
        (rw, rh), (ox, oy) = lb.size, lb.offset
        scale = (CenterNet.stride * src_w / rw, CenterNet.stride * src_h / rh)
        offset = (ox * src_w / rw, oy * src_h / rh)
        frame_spec = TensorSpec("camera_frame", (3, src_h, src_w), "float32", device)
        region_spec = TensorSpec("camera_region", (3, rh, rw), "float32", device)
        first = Op("camera_preprocess", letterbox, (img,), (x_spec,), workspace=(frame_spec, region_spec),
                   capturable=True, cost_us=500 + src_w * src_h // 500)

    # decode_into's arguments resolved once, as its kernel takes them: the op calls the kernel directly
    at = (NUM_CLASSES, *scale, *offset, float(p.score_threshold), BOX_OVERLAP)

    def decode(maps: torch.Tensor, boxes: torch.Tensor, count: torch.Tensor) -> None:
        _decode(maps, boxes, count, *at)

    ops = [
        first,
        Op("camera_net", run_net, (x_spec,), (maps_spec,), capturable=True, cost_us=8000),
        Op("camera_decode", decode, (maps_spec,), (boxes_spec, count_spec), capturable=True, cost_us=300),
    ]
    return Graph("camera", ops, inputs=[img], outputs=["camera_boxes", "camera_box_count"])
