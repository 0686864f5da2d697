"""Camera 2D object detection as an rt_runtime graph: a small CenterNet on a downscaled frame.

Three ops:

1. ``camera_preprocess``: the uint8 HWC frame is box-filtered by ``downscale`` (an exact area
   average: integer row sums, then one small matmul over each block's columns, into planned
   buffers) and written as normalised float NCHW into the net's input view.
2. ``camera_net``: a small conv net (stride-2 stem, stride-4/8/16 stages, the deeper features
   upsampled back onto stride 4) with CenterNet heads: per-class centre heatmaps (logits), box size
   (log of width and height in output cells) and sub-cell centre offset. It runs as ``DeployedNet``
   (the two heads' first convs as one; the maps concatenated straight into the op's planned view).
3. ``camera_decode``: centre peaks are the heatmap cells equal to their 3x3 max (NMS without
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

Each op's body is a kernel (``rt_runtime.exec.kernel``): eager by default, or compiled where
``rt-runtime compile`` measured a net benefit (docs/REPLAY.md, the kernels' compile mode).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rt_runtime import Graph, Op, TensorSpec
from rt_runtime.exec import kernel
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


class DeployedNet(nn.Module):
    """A trained ``CenterNet`` for inference, bit for bit its outputs: the heat and box heads' 3x3 convs (both on
    the fused features) run as one 2w-channel conv, their batch norms as one, and the head maps are written
    into ``out`` (no copy). Stacking output channels changes no channel's sum (the same kernel, the same
    reduction order: checked on every frame of the built-in bag); it saves a conv call and a second read of
    the features (0.07 ms of the net's 3 ms, one thread)."""

    def __init__(self, net: CenterNet) -> None:
        super().__init__()
        self.s4, self.s8, self.s16 = net.s4, net.s8, net.s16
        self.lat8, self.lat16, self.fuse = net.lat8, net.lat16, net.fuse
        (hconv, hbn, _), (bconv, bbn, _) = net.heat[0], net.box[0]
        w = hconv.out_channels
        conv = nn.Conv2d(hconv.in_channels, 2 * w, 3, 1, 1, bias=False)
        bn = nn.BatchNorm2d(2 * w, eps=hbn.eps)
        with torch.no_grad():
            conv.weight.copy_(torch.cat([hconv.weight, bconv.weight]))
            for name in ("weight", "bias", "running_mean", "running_var"):
                getattr(bn, name).copy_(torch.cat([getattr(hbn, name), getattr(bbn, name)]))
        self.head = nn.Sequential(conv, bn, nn.ReLU(inplace=True)).to(hconv.weight.device)
        self.heat, self.box = net.heat[1], net.box[1]
        self.split = w
        self.train(net.training)

    def forward(self, x: torch.Tensor, out: torch.Tensor) -> None:
        """(B, 3, H, W) normalised image → ``out`` (B, HEAD_CHANNELS, H/4, W/4), as ``CenterNet.forward``."""
        f4 = self.s4(x)
        f8 = self.s8(f4)
        f16 = self.s16(f8)
        up = F.interpolate(self.lat16(f16), size=f8.shape[-2:], mode="nearest") + self.lat8(f8)
        f = self.fuse(F.interpolate(up, size=f4.shape[-2:], mode="nearest") + f4)
        h = self.head(f)
        torch.cat([self.heat(h[:, :self.split]), self.box(h[:, self.split:])], 1, out=out)


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
def preprocess_into(image: Tensor, out: Tensor, rows: Tensor, sums: Tensor, pool: Tensor, block: Tensor,
                    divisor: int, mean: Tensor, inv_std: Tensor) -> None:
    """uint8 (H, W, 3) → normalised float (1, 3, H/k, W/k) in ``out``: the k x k block means as k adds of whole
    image rows into ``rows`` (H/k, W*3; int16: 255 k² < 2**15), then, as float in ``sums``, one matmul of each
    block's k pixels x 3 channels with ``pool`` (k*3, 3) into ``block`` (H/k, W/k, 3). Every value on the way is
    a sum of integers below 2**24 (times 1/k² in ``pool`` when k is a power of two, else 1 and a division by
    ``divisor``): exact in float32 in any order, so the same bits as one ``torch.mean`` over the blocks (0.4 ms
    for 640x384, k = 4, one thread, against 0.8 ms for float adds of strided pixel columns, 4.0 ms for the
    strided mean)."""
    h, k = rows.shape[0], image.shape[0] // rows.shape[0]
    strips = image.view(h, k, rows.shape[1])
    rows.copy_(strips[:, 0])
    for i in range(1, k):
        rows.add_(strips[:, i])
    sums.copy_(rows)
    torch.mm(sums.view(block.shape[0] * block.shape[1], pool.shape[0]), pool, out=block.view(-1, 3))
    if divisor != 1:
        block.div_(divisor)
    # out is contiguous NCHW; the permuted HWC view lets one kernel write it without a transpose copy.
    hwc = out[0].permute(1, 2, 0)
    torch.sub(block, mean, out=hwc)
    hwc.mul_(inv_std)


def block_pool(k: int, device: str = "cpu") -> tuple[torch.Tensor, int]:
    """``preprocess_into``'s ``pool`` (k*3, 3) and ``divisor``: a block row's k pixels x 3 channels → its 3 channel
    sums, scaled by 1/k² where that is exact (k a power of two), else summed and divided by k² after."""
    exact = k & (k - 1) == 0
    pool = torch.eye(3, device=device).repeat(k, 1) / (k * k if exact else 1)
    return pool, 1 if exact else k * k


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
                threshold: float, offset: tuple[float, float] = (0.0, 0.0), overlap: float = BOX_OVERLAP,
                frame: tuple[int, int] | None = None) -> None:
    """CenterNet decoding: 3x3 max-pool peaks, top-k over classes and cells, boxes in frame pixels
    (``cell * scale - offset`` per axis: a letterboxed frame's boxes land in its source pixels), class-agnostic
    suppression of boxes overlapping a better one by more than ``overlap`` (IoU). ``frame`` (width, height):
    boxes clipped to it, those with nothing inside it dropped (None: as decoded)."""
    su, sv = scale if isinstance(scale, tuple) else (scale, scale)
    _decode(maps, boxes, count, NUM_CLASSES, *decode_at((su, sv), offset, str(maps.device), frame), float(threshold),
            float(overlap), frame is not None)


def decode_at(scale: tuple[float, float], offset: tuple[float, float], device: str,
              frame: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_decode``'s ``scale``, ``offset`` and ``frame`` (u, v) as float32 (2, 1) columns: the same products and
    differences as with the Python floats, which an op casts to float32 too (one op for both axes, nothing built
    per job); ``frame`` infinite where there is none."""
    w, h = frame if frame is not None else (math.inf, math.inf)
    return (torch.tensor([[scale[0]], [scale[1]]], device=device),
            torch.tensor([[offset[0]], [offset[1]]], device=device),
            torch.tensor([[float(w)], [float(h)]], device=device))


@kernel
def _decode(maps: Tensor, boxes: Tensor, count: Tensor, num_classes: int, scale: Tensor, offset: Tensor,
            frame: Tensor, threshold: float, overlap: float, clip: bool) -> None:
    """``decode_into``'s body: the first ``num_classes`` maps are heatmap logits, the next 4 the box regression;
    ``scale``, ``offset`` and ``frame`` are ``decode_at``'s (2, 1) columns (u, v); ``clip``: boxes clipped to
    ``frame``."""
    heat = torch.sigmoid(maps[0, :num_classes])
    hh, ww = heat.shape[-2], heat.shape[-1]
    # The 3x3 max-pool as a 3-wide max along rows, then along columns, on shifted views: a max is exact, so
    # these are the pool's values (NaN included), at a quarter of max_pool2d's time on these small maps.
    # (narrow, not ``x[:, :, 1:]``: TorchScript runs a slice op for every ``:``.)
    rmax, w1, h1 = heat.clone(), ww - 1, hh - 1
    torch.maximum(rmax.narrow(2, 0, w1), heat.narrow(2, 1, w1), out=rmax.narrow(2, 0, w1))
    torch.maximum(rmax.narrow(2, 1, w1), heat.narrow(2, 0, w1), out=rmax.narrow(2, 1, w1))
    pool = rmax.clone()
    torch.maximum(pool.narrow(1, 0, h1), rmax.narrow(1, 1, h1), out=pool.narrow(1, 0, h1))
    torch.maximum(pool.narrow(1, 1, h1), rmax.narrow(1, 0, h1), out=pool.narrow(1, 1, h1))
    peak = heat * (pool == heat)
    score, idx = torch.topk(peak.view(-1), boxes.shape[0])
    cls, cell = idx // (hh * ww), idx % (hh * ww)
    reg = maps[0, num_classes:].reshape(4, -1).index_select(1, cell)   # (4, K): log w, log h, du, dv
    # u and v side by side as (2, K) rows: each step is one op for both axes.
    centre = torch.stack([cell % ww, cell // ww]).float() + 0.5 + reg[2:]
    half = reg[:2].exp() / 2
    lo, hi = (centre - half) * scale - offset, (centre + half) * scale - offset
    if clip:   # the frame is all the camera saw: a box ends at its edge (as the fusion's projections do)
        lo = torch.minimum(lo.clamp(min=0.0), frame)
        hi = torch.minimum(hi.clamp(min=0.0), frame)
    torch.stack([lo[0], lo[1], hi[0], hi[1], score, cls.float()], 1, out=boxes)
    # One object, two class peaks (a cyclist's rider also peaks as a pedestrian): drop a box that
    # overlaps a better-scored one (topk is sorted) by more than ``overlap``, whatever either's class.
    # Both axes at once on contiguous (2, K, K) maps (not on (K, K, 2) views of the rows): the same values.
    side = (torch.minimum(hi.unsqueeze(2), hi.unsqueeze(1))
            - torch.maximum(lo.unsqueeze(2), lo.unsqueeze(1))).clamp(min=0)
    inter = side[0] * side[1]
    extent = (hi - lo).clamp(min=0)
    area = extent[0] * extent[1]
    iou = inter / (area.unsqueeze(1) + area.unsqueeze(0) - inter).clamp(min=1e-6)
    keep = (score >= threshold) & ~(iou.tril(-1) > overlap).any(1)
    if clip:   # a box wholly in a letterbox's padding, outside the source frame: nothing seen
        keep = keep & (extent > 0).all(0)
    rows, n = compact(boxes, keep)     # kept boxes first, still best first
    boxes.copy_(rows)
    count.copy_(n.view(1))


def box_bounds(**params: object) -> dict[int, tuple[float, float]]:
    """Each ``camera_boxes`` column's bounds (``schema.CAM_COLS``) that the detector built with ``params`` cannot
    leave: the output invariant of its task, derived from its own args (docs/SAFETY.md, "Output invariants").
    ``camera_decode`` clips every box to the camera's frame (``source_width`` x ``source_height``, else
    ``width`` x ``height``), the score is a sigmoid, the class an index into ``schema.CLASSES``: a box outside
    these is a fault, whatever the scene."""
    p = CameraParams(**params)  # type: ignore[arg-type]
    w, h = float(p.source_width or p.width), float(p.source_height or p.height)
    return {0: (0.0, w), 1: (0.0, h), 2: (0.0, w), 3: (0.0, h), 4: (0.0, 1.0), 5: (0.0, float(NUM_CLASSES - 1))}


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
    # row sums of k uint8 pixels: int16 holds them up to k = 11
    rows_spec = TensorSpec("camera_rows", (h, p.width * 3), "int16" if 255 * k * k < 2**15 else "int32", device)
    sums_spec = TensorSpec("camera_sums", (h, p.width * 3), "float32", device)
    pool, divisor = block_pool(k, device)
    maps_spec = TensorSpec("camera_maps", (1, HEAD_CHANNELS, h // 4, w // 4), "float32", device, layout="NCHW")
    boxes_spec = on_device(schema.camera_boxes(), device)
    count_spec = on_device(schema.count("camera_box_count"), device)
    mean = torch.tensor(MEAN, device=device) * 255
    inv_std = 1.0 / (torch.tensor(STD, device=device) * 255)
    net = kernel(DeployedNet(load_net(p.weights)).to(device))   # fused on the host, then moved

    def preprocess(image: torch.Tensor, x: torch.Tensor, rows: torch.Tensor, sums: torch.Tensor,
                   block: torch.Tensor) -> None:
        preprocess_into(image, x, rows, sums, pool, block, divisor, mean, inv_std)

    def run_net(x: torch.Tensor, maps: torch.Tensor) -> None:
        with torch.inference_mode():
            net(x, maps)

    def letterbox(image: torch.Tensor, x: torch.Tensor, frame: torch.Tensor, region: torch.Tensor) -> None:
        letterbox_into(image, x, frame, region, rw, rh, ox, oy, mean, inv_std)

    if lb is None:
        scale, offset = (float(k * CenterNet.stride),) * 2, (0.0, 0.0)
        first = Op("camera_preprocess", preprocess, (img,), (x_spec,),
                   workspace=(rows_spec, sums_spec, block_spec), capturable=True, cost_us=500)
    else:   # output cells -> input pixels (x stride) -> source pixels (Letterbox.to_source, per axis)
        (rw, rh), (ox, oy) = lb.size, lb.offset
        scale = (CenterNet.stride * src_w / rw, CenterNet.stride * src_h / rh)
        offset = (ox * src_w / rw, oy * src_h / rh)
        frame_spec = TensorSpec("camera_frame", (3, src_h, src_w), "float32", device)
        region_spec = TensorSpec("camera_region", (3, rh, rw), "float32", device)
        first = Op("camera_preprocess", letterbox, (img,), (x_spec,), workspace=(frame_spec, region_spec),
                   capturable=True, cost_us=500 + src_w * src_h // 500)

    # decode_into's arguments resolved once, as its kernel takes them: the op calls the kernel directly
    at = (NUM_CLASSES, *decode_at(scale, offset, device, (src_w, src_h)), float(p.score_threshold), BOX_OVERLAP, True)

    def decode(maps: torch.Tensor, boxes: torch.Tensor, count: torch.Tensor) -> None:
        _decode(maps, boxes, count, *at)

    ops = [
        first,
        Op("camera_net", run_net, (x_spec,), (maps_spec,), capturable=True, cost_us=8000),
        Op("camera_decode", decode, (maps_spec,), (boxes_spec, count_spec), capturable=True, cost_us=300),
    ]
    return Graph("camera", ops, inputs=[img], outputs=["camera_boxes", "camera_box_count"])
