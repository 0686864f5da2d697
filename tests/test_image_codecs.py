"""Camera images as vehicles record them (issue 17): every common sensor_msgs/Image encoding and
CompressedImage (jpeg, png) decode to the (H, W, 3) uint8 RGB array the camera graph reads.

Each encoding is built from one known RGB frame (a smooth synthetic image): channel orders and alpha
by reordering it, grey by taking one channel, 16 bit by scaling it up (v * 257, so the high byte is v
again), Bayer by sampling it in the pattern. A bag with a CompressedImage camera topic replays through
a perception-only stack (config/stack.yaml with only camera_objects and its ingress).
"""
from __future__ import annotations

import copy
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from rt_runtime.bag import array_to_compressed, from_cdr, header, msg_class, to_cdr
from rt_runtime.bag.image import demosaic
from rt_runtime.io import INGRESS_CODECS, IngressError
from rt_runtime.io.ingress import decode

ROOT = Path(__file__).resolve().parents[1]
H, W = 24, 32
CAMERA = "/sensing/camera/image_raw"


def known_frame(h: int = H, w: int = W) -> np.ndarray:
    """(h, w, 3) uint8: each channel linear in x and y (bilinear demosaic is exact for it inside)."""
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([20 + 6 * x, 30 + 4 * y + 2 * x, 200 - 3 * x - 2 * y], axis=-1).astype(np.uint8)


def image_msg(arr: np.ndarray, encoding: str, pad: int = 0, bigendian: bool = False) -> Any:
    """An Image of ``arr`` (H, W[, C]) in ``encoding``, each row followed by ``pad`` junk bytes, through CDR."""
    a = arr[..., None] if arr.ndim == 2 else arr
    a = np.ascontiguousarray(a.astype(a.dtype.newbyteorder(">" if bigendian else "<")))
    h, w = a.shape[:2]
    row = w * a.shape[2] * a.dtype.itemsize
    raw = a.reshape(h, row // a.dtype.itemsize).view(np.uint8).reshape(h, row)
    data = np.concatenate([raw, np.full((h, pad), 0xAB, np.uint8)], axis=1).reshape(-1)
    msg = msg_class("sensor_msgs/msg/Image")(header=header(0, "cam"), height=h, width=w, encoding=encoding,
                                             is_bigendian=int(bigendian), step=row + pad, data=data)
    return from_cdr(to_cdr(msg), "sensor_msgs/msg/Image")


def bayer(rgb: np.ndarray, pattern: str) -> np.ndarray:
    """The mosaic a sensor with this colour filter would record of ``rgb``."""
    out = np.empty(rgb.shape[:2], rgb.dtype)
    for i, colour in enumerate(pattern.upper()):
        c = "RGB".index(colour)
        out[i // 2::2, i % 2::2] = rgb[i // 2::2, i % 2::2, c]
    return out


def rgb_of(msg: Any, topic: str = "/cam", codec: str = "image_rgb") -> np.ndarray:
    out = decode(INGRESS_CODECS[codec], msg, topic)["value"]
    assert out.dtype == np.uint8 and out.ndim == 3 and out.shape[2] == 3 and out.flags.c_contiguous
    return out


def encoded(frame: np.ndarray, encoding: str) -> np.ndarray:
    """``frame`` as a camera with ``encoding`` would record it (the decoded RGB is then ``expected``)."""
    alpha = np.full(frame.shape[:2] + (1,), 77, np.uint8)
    base = {"rgb": frame, "bgr": frame[..., ::-1], "rgba": np.concatenate([frame, alpha], -1),
            "bgra": np.concatenate([frame[..., ::-1], alpha], -1)}
    if encoding.startswith("bayer_"):
        a = bayer(frame, encoding[6:10])
    elif encoding in ("mono8", "8UC1", "mono16", "16UC1"):
        a = frame[..., 1]
    else:
        a = base[encoding.rstrip("0123456789").replace("8UC", "rgb")]
    return a.astype(np.uint16) * 257 if encoding.endswith("16") or encoding == "16UC1" else a


def expected(frame: np.ndarray, encoding: str) -> np.ndarray:
    return np.repeat(frame[..., 1:2], 3, -1) if encoding in ("mono8", "8UC1", "mono16", "16UC1") else frame


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "rgba8", "bgra8", "8UC3", "mono8", "8UC1", "mono16", "16UC1",
                                      "rgb16", "bgr16", "rgba16", "bgra16"])
@pytest.mark.parametrize("pad", [0, 6])
def test_each_encoding_decodes_to_the_known_frame(encoding: str, pad: int) -> None:
    frame = known_frame()
    out = rgb_of(image_msg(encoded(frame, encoding), encoding, pad))
    assert (out == expected(frame, encoding)).all()


def test_sixteen_bit_is_scaled_to_eight_and_big_endian_is_honoured() -> None:
    grey = np.array([[0, 255, 256, 65535], [4095, 32768, 1000, 65280]], np.uint16)
    out = rgb_of(image_msg(grey, "mono16", pad=4, bigendian=True))
    assert out[..., 0].tolist() == [[0, 0, 1, 255], [15, 128, 3, 255]] and (out[..., 0] == out[..., 2]).all()


@pytest.mark.parametrize("pattern", ["rggb", "bggr", "gbrg", "grbg"])
@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("pad", [0, 5])
def test_bayer_is_demosaiced(pattern: str, bits: int, pad: int) -> None:
    frame = known_frame()
    encoding = f"bayer_{pattern}{bits}"
    out = rgb_of(image_msg(encoded(frame, encoding), encoding, pad))
    # every sampled value is kept exactly; inside, the bilinear mean of a linear image is the image
    mosaic = bayer(frame, pattern)
    assert (bayer(out, pattern) == mosaic).all()
    assert np.abs(out[1:-1, 1:-1].astype(int) - frame[1:-1, 1:-1]).max() <= 1
    assert np.abs(out.astype(int) - frame).max() <= 12   # borders: one-sided means
    flat = np.broadcast_to(np.array([10, 120, 240], np.uint8), (6, 8, 3))
    assert (demosaic(bayer(flat, pattern), pattern) == flat).all()   # a flat colour is exact everywhere


def test_an_unknown_encoding_is_one_line_naming_topic_and_encoding() -> None:
    msg = image_msg(np.zeros((2, 4, 2), np.uint8), "yuv422")
    with pytest.raises(IngressError) as e:
        rgb_of(msg, "/front/image")
    text = str(e.value)
    assert "\n" not in text and "/front/image" in text and "'yuv422'" in text and "bayer_rggb8" in text
    float_depth = image_msg(np.zeros((2, 2), np.float32), "32FC1")
    with pytest.raises(IngressError, match="'32FC1' not supported"):
        rgb_of(float_depth, "/depth")


def compressed(frame: np.ndarray, fmt: str, **kw: Any) -> Any:
    return from_cdr(to_cdr(array_to_compressed(frame, "cam", 0, fmt, **kw)), "sensor_msgs/msg/CompressedImage")


def pillow_rgb(msg: Any) -> np.ndarray:
    import io

    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(msg.data.tobytes())).convert("RGB")).astype(int)


@pytest.mark.parametrize("codec", ["compressed_image", "image_rgb"])
def test_compressed_png_is_exact_and_jpeg_close(codec: str) -> None:
    rng = np.random.default_rng(3)
    frame = np.clip(known_frame(48, 64).astype(int) + rng.integers(-3, 4, (48, 64, 3)), 0, 255).astype(np.uint8)
    assert (rgb_of(compressed(frame, "png"), codec=codec) == frame).all()
    jpeg = compressed(frame, "jpeg", quality=95)
    assert jpeg.format == "rgb8; jpeg compressed rgb8"
    out = rgb_of(jpeg, codec=codec)
    # within JPEG's loss (4:2:0 chroma on steep colour ramps and grain), and what Pillow decodes
    assert np.abs(out.astype(int) - frame).mean() < 6
    assert np.abs(out.astype(int) - pillow_rgb(jpeg)).max() <= 1
    grey = rgb_of(compressed(frame[..., 0], "jpeg", quality=95), codec=codec)
    assert np.abs(grey.astype(int) - frame[..., :1]).mean() < 3 and (grey[..., 0] == grey[..., 2]).all()
    # image_transport's format names bgr8 as what it encoded from: the file still holds true colours
    jpeg.format = "rgb8; jpeg compressed bgr8"
    assert (rgb_of(jpeg, codec=codec) == out).all()


def test_compressed_sixteen_bit_png_and_bad_payloads() -> None:
    import io

    from PIL import Image

    grey = (known_frame()[..., 0].astype(np.uint16) * 257)
    buf = io.BytesIO()
    Image.fromarray(grey).save(buf, format="PNG")
    msg = msg_class("sensor_msgs/msg/CompressedImage")(header=header(0, "c"), format="16UC1; png compressed mono16",
                                                       data=np.frombuffer(buf.getvalue(), np.uint8))
    assert (rgb_of(msg, codec="compressed_image")[..., 1] == known_frame()[..., 0]).all()
    broken = msg_class("sensor_msgs/msg/CompressedImage")(header=header(0, "c"), format="jpeg",
                                                          data=np.frombuffer(b"\xff\xd8nope", np.uint8))
    with pytest.raises(IngressError, match="/cam/compressed.*cannot decode 6 bytes of jpeg"):
        rgb_of(broken, "/cam/compressed", "compressed_image")
    depth = msg_class("sensor_msgs/msg/CompressedImage")(header=header(0, "c"), format="16UC1; compressedDepth png",
                                                         data=np.frombuffer(b"\0" * 12 + buf.getvalue(), np.uint8))
    with pytest.raises(IngressError, match="compressedDepth"):
        rgb_of(depth, "/depth/compressed", "compressed_image")


def perception_only(tmp_path: Path, codec: str) -> Path:
    """config/stack.yaml with only camera_objects, its ingress (codec ``codec``) and no egress."""
    doc = yaml.safe_load((ROOT / "config" / "stack.yaml").read_text())
    doc = copy.deepcopy(doc)
    doc["ingress"] = [dict(r, codec=codec) for r in doc["ingress"] if r["topic"] == CAMERA]
    doc["tasks"] = [t for t in doc["tasks"] if t["name"] == "camera_objects"]
    doc["channels"] = [c for c in doc.get("channels", []) if c["name"] == "camera/image"]
    doc["egress"] = []
    for key in ("safety", "chains"):
        doc.pop(key, None)
    path = tmp_path / f"camera_{codec}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("codec", ["image_rgb", "compressed_image"])
def test_a_bag_with_a_compressed_camera_replays(tmp_path: Path, codec: str) -> None:
    from rt_runtime.bag import BagWriter
    from rt_runtime.config.stack import load_stack
    from rt_runtime.replay.engine import codec_problems, replay

    bag = tmp_path / "compressed"
    t0, frames = 1_700_000_000 * 10**9, 10
    rng = np.random.default_rng(0)
    with BagWriter(bag, "mcap") as w:
        w.add_topic(CAMERA, "sensor_msgs/msg/CompressedImage")
        for i in range(frames):
            img = np.clip(known_frame(384, 640).astype(int) + rng.integers(-3, 4, (384, 640, 3)), 0, 255)
            t = t0 + i * 50_000_000
            w.write(CAMERA, t + 15_000_000, array_to_compressed(img.astype(np.uint8), "camera", t, "jpeg"))
    cfg = load_stack(perception_only(tmp_path, codec))
    assert codec_problems(cfg, {CAMERA: "sensor_msgs/msg/CompressedImage"}) == []
    result = replay(bag, cfg)
    assert result.bad_messages == {}
    assert result.inputs == frames
    jobs = result.stats["camera_objects"]
    assert result.errors == 0 and jobs["finished"] >= frames - 1 and jobs["published"] >= frames - 1, jobs


def test_the_codec_check_still_refuses_an_image_codec_on_a_cloud(tmp_path: Path) -> None:
    from rt_runtime.config.stack import load_stack
    from rt_runtime.replay.engine import codec_problems

    cfg = load_stack(perception_only(tmp_path, "compressed_image"))
    (line,) = codec_problems(cfg, {CAMERA: "sensor_msgs/msg/Image"})
    assert "codec compressed_image decodes sensor_msgs/msg/CompressedImage" in line and "image_rgb" in line
    cfg = load_stack(perception_only(tmp_path, "image_rgb"))
    (line,) = codec_problems(cfg, {CAMERA: "sensor_msgs/PointCloud2"})
    assert "image_rgb decodes sensor_msgs/msg/Image or sensor_msgs/msg/CompressedImage" in line


def test_row_padding_is_junk_never_read() -> None:
    frame = known_frame(3, 4)
    a = image_msg(frame, "rgb8", pad=4)
    assert a.step == 16 and len(a.data) == 48 and struct.unpack("4B", bytes(a.data[12:16])) == (0xAB,) * 4
    assert (rgb_of(a) == frame).all()
