"""sensor_msgs/Image and CompressedImage <-> H x W x C numpy arrays.

Raw images decode zero-copy (a strided view honouring `step`, so row padding is free). Compressed
images (jpeg, png) need Pillow, imported only when used.

``image_to_rgb8`` / ``compressed_to_rgb8`` give what a camera graph reads whatever the camera
recorded: (H, W, 3) uint8 RGB, contiguous. 16-bit images are scaled to 8 bit (the high byte),
Bayer mosaics are demosaiced (bilinear, vectorized numpy), JPEG goes through simplejpeg when it
is installed (``bench/bench_jpeg.py``: 1.5-1.8x Pillow), else Pillow; PNG through Pillow.
"""
from __future__ import annotations

import io
from typing import Any

import numpy as np

from .errors import CodecError
from .types import header, msg_class

# encoding -> (numpy base type, channels)
ENCODINGS: dict[str, tuple[str, int]] = {
    "rgb8": ("u1", 3), "bgr8": ("u1", 3), "rgba8": ("u1", 4), "bgra8": ("u1", 4),
    "mono8": ("u1", 1), "8UC1": ("u1", 1), "8UC3": ("u1", 3),
    "mono16": ("u2", 1), "16UC1": ("u2", 1), "32FC1": ("f4", 1),
    "rgb16": ("u2", 3), "bgr16": ("u2", 3), "rgba16": ("u2", 4), "bgra16": ("u2", 4),
    **{f"bayer_{p}{bits}": ("u1" if bits == 8 else "u2", 1) for p in ("rggb", "bggr", "gbrg", "grbg") for bits in (8, 16)},
}


def _where(msg: Any, topic: str | None) -> str:
    frame = getattr(getattr(msg, "header", None), "frame_id", "?")
    return f"{msg.__msgtype__.rsplit('/', 1)[-1]}{' on ' + topic if topic else ''} (frame {frame!r})"


def image_to_array(msg: Any, topic: str | None = None) -> np.ndarray:
    """Image -> (height, width, channels) array in the message's own channel order, zero-copy."""
    if msg.encoding not in ENCODINGS:
        raise CodecError(f"{_where(msg, topic)}: encoding {msg.encoding!r} not supported; "
                         f"expected one of {sorted(ENCODINGS)}")
    base, ch = ENCODINGS[msg.encoding]
    dt = np.dtype((">" if msg.is_bigendian else "<") + base)
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    row = w * ch * dt.itemsize
    data = msg.data if isinstance(msg.data, np.ndarray) else np.frombuffer(bytes(msg.data), np.uint8)
    if step < row:
        raise CodecError(f"{_where(msg, topic)}: step {step} < {w} px x {ch} ch x {dt.itemsize} B = {row} "
                         f"({msg.encoding})")
    need = (h - 1) * step + row if h else 0
    if data.size < need or (h and data.size != h * step and data.size != need):
        raise CodecError(f"{_where(msg, topic)}: data has {data.size} bytes; {w}x{h} {msg.encoding} "
                         f"with step {step} needs {h * step}")
    if h == 0 or w == 0:
        return np.zeros((h, w, ch), dt)
    return np.ndarray((h, w, ch), dtype=dt, buffer=data, strides=(step, ch * dt.itemsize, dt.itemsize))


def array_to_image(arr: np.ndarray, encoding: str, frame_id: str, t_ns: int) -> Any:
    """(H, W[, C]) array -> Image with a tight `step` (little-endian)."""
    if encoding not in ENCODINGS:
        raise CodecError(f"Image (frame {frame_id!r}): encoding {encoding!r} not supported; "
                         f"expected one of {sorted(ENCODINGS)}")
    base, ch = ENCODINGS[encoding]
    a = arr[..., None] if arr.ndim == 2 else arr
    if a.ndim != 3 or a.shape[2] != ch:
        raise CodecError(f"Image (frame {frame_id!r}): {encoding} needs shape (H, W, {ch}); found {arr.shape}")
    if a.dtype != np.dtype(base):
        raise CodecError(f"Image (frame {frame_id!r}): {encoding} needs dtype {np.dtype(base)}; found {a.dtype}")
    a = np.ascontiguousarray(a.astype("<" + base, copy=False))
    h, w = a.shape[:2]
    return msg_class("sensor_msgs/msg/Image")(
        header=header(t_ns, frame_id), height=h, width=w, encoding=encoding, is_bigendian=0,
        step=w * ch * a.dtype.itemsize, data=a.reshape(-1).view(np.uint8))


def to_rgb(arr: np.ndarray, encoding: str) -> np.ndarray:
    """An (H, W, 3) rgb view or copy of a decoded image (bgr reversed, mono repeated)."""
    if encoding in ("rgb8", "8UC3"):
        return arr
    if encoding == "bgr8":
        return arr[..., ::-1]
    if encoding in ("rgba8", "bgra8"):
        return arr[..., :3] if encoding == "rgba8" else arr[..., 2::-1]
    if arr.shape[-1] == 1:
        return np.repeat(arr, 3, axis=-1)
    raise CodecError(f"cannot show encoding {encoding!r} as rgb")


def _pil() -> Any:
    try:
        from PIL import Image as PILImage
    except ImportError:
        raise CodecError("CompressedImage needs Pillow (pip install pillow)") from None
    return PILImage


def compressed_to_array(msg: Any, topic: str | None = None) -> np.ndarray:
    """CompressedImage (jpeg/png) -> (H, W, C) uint8 (rgb, or 1 channel for grey images)."""
    pil = _pil()
    fmt = msg.format.lower()
    if not any(k in fmt for k in ("jpeg", "jpg", "png")):
        raise CodecError(f"{_where(msg, topic)}: format {msg.format!r} not supported; expected jpeg or png")
    try:
        img = pil.open(io.BytesIO(bytes(msg.data)))
        img.load()
    except Exception as e:
        raise CodecError(f"{_where(msg, topic)}: cannot decode {len(msg.data)} bytes of {msg.format}: {e}") from None
    if img.mode not in ("L", "RGB"):
        img = img.convert("RGB")
    a = np.asarray(img)
    return a[..., None] if a.ndim == 2 else a


def array_to_compressed(arr: np.ndarray, frame_id: str, t_ns: int, fmt: str = "jpeg", quality: int = 90) -> Any:
    """(H, W, 3) rgb or (H, W[, 1]) grey uint8 -> CompressedImage in jpeg or png."""
    pil = _pil()
    if fmt not in ("jpeg", "png"):
        raise CodecError(f"CompressedImage (frame {frame_id!r}): format {fmt!r} not supported; expected jpeg or png")
    a = arr[..., 0] if arr.ndim == 3 and arr.shape[2] == 1 else arr
    if a.dtype != np.uint8 or a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] != 3):
        raise CodecError(f"CompressedImage (frame {frame_id!r}): needs uint8 (H, W, 3) or (H, W); "
                         f"found {arr.dtype} {arr.shape}")
    buf = io.BytesIO()
    kw = {"quality": quality} if fmt == "jpeg" else {"compress_level": 6}
    pil.fromarray(np.ascontiguousarray(a)).save(buf, format=fmt.upper(), **kw)
    # image_transport's convention: "<encoding>; <fmt> compressed <encoding>"
    enc = "rgb8" if a.ndim == 3 else "mono8"
    return msg_class("sensor_msgs/msg/CompressedImage")(
        header=header(t_ns, frame_id), format=f"{enc}; {fmt} compressed {enc}",
        data=np.frombuffer(buf.getvalue(), np.uint8))


# The colour sampled at (row % 2, col % 2) of each Bayer pattern: rggb = R G / G B.
_BAYER = {"rggb": "RGGB", "bggr": "BGGR", "gbrg": "GBRG", "grbg": "GRBG"}
RGB8_ENCODINGS = tuple(e for e in ENCODINGS if e != "32FC1")   # what image_to_rgb8 takes


def _sum3(a: np.ndarray, weights: tuple[int, int, int]) -> np.ndarray:
    """a (H, W) int32 filtered with the 3x3 kernel outer(w, w) (zero outside the image), separably."""
    p = np.pad(a, 1)
    r = weights[0] * p[:-2] + weights[1] * p[1:-1] + weights[2] * p[2:]
    return weights[0] * r[:, :-2] + weights[1] * r[:, 1:-1] + weights[2] * r[:, 2:]


def _cross(a: np.ndarray) -> np.ndarray:
    """a (H, W) int32 filtered with [[0,1,0],[1,4,1],[0,1,0]] (zero outside the image)."""
    p = np.pad(a, 1)
    return 4 * a + p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:]


def demosaic(raw: np.ndarray, pattern: str) -> np.ndarray:
    """(H, W) uint8 Bayer mosaic -> (H, W, 3) uint8 RGB, bilinear: each missing colour is the mean of its
    nearest samples (G: the 4 edge neighbours; R/B: the 2 or 4 nearest), as a normalized convolution
    so the borders average the neighbours that exist. Sampled values are kept exactly."""
    order = _BAYER[pattern]
    h, w = raw.shape
    v = raw.astype(np.int32)
    out = np.empty((h, w, 3), np.uint8)
    for c, name in enumerate("RGB"):
        mask = np.zeros((h, w), np.int32)
        for i, s in enumerate(order):
            if s == name:
                mask[i // 2::2, i % 2::2] = 1
        filt = _cross if name == "G" else (lambda a: _sum3(a, (1, 2, 1)))
        num, den = filt(v * mask), filt(mask)
        out[..., c] = (2 * num + den) // (2 * np.maximum(den, 1))   # rounded mean
    return out


def _rgb8_error(msg: Any, topic: str | None) -> CodecError:
    return CodecError(f"{_where(msg, topic)}: encoding {msg.encoding!r} is not a camera image this codec "
                      f"decodes; supported: {', '.join(RGB8_ENCODINGS)}")


def image_to_rgb8(msg: Any, topic: str | None = None) -> np.ndarray:
    """Image in any of ``RGB8_ENCODINGS`` -> (H, W, 3) uint8 RGB, contiguous (a copy: never the bag's bytes)."""
    enc = msg.encoding
    if enc not in RGB8_ENCODINGS:
        raise _rgb8_error(msg, topic)
    arr = image_to_array(msg, topic)
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 2:
        arr = (arr >> 8).astype(np.uint8)   # 16 bit -> 8 bit: the high byte (65535 -> 255)
    if enc.startswith("bayer_"):
        return demosaic(arr[..., 0], enc[6:10])
    if enc.startswith("bgr"):
        arr = arr[..., 2::-1]
    elif arr.shape[2] == 1:
        arr = np.broadcast_to(arr, arr.shape[:2] + (3,))
    else:
        arr = arr[..., :3]
    return np.ascontiguousarray(arr, np.uint8)


def _jpeg_rgb(data: bytes) -> np.ndarray | None:
    """JPEG bytes -> (H, W, 3) uint8 RGB through simplejpeg (libjpeg-turbo); None when it is absent or refuses
    (CMYK, ...): the caller then uses Pillow."""
    try:
        import simplejpeg
    except ImportError:
        return None
    try:
        return simplejpeg.decode_jpeg(data, colorspace="RGB")
    except (ValueError, RuntimeError):
        return None


def compressed_to_rgb8(msg: Any, topic: str | None = None) -> np.ndarray:
    """CompressedImage (jpeg or png, as image_transport's ``compressed`` writes it, e.g. "rgb8; jpeg
    compressed bgr8", or a bare "jpeg") -> (H, W, 3) uint8 RGB. The payload's own magic bytes decide
    jpeg or png; the file holds true colours whatever channel order the format string names (the
    publisher encodes from bgr8 with OpenCV, which writes RGB files). Grey is repeated, 16-bit png scaled."""
    fmt = str(msg.format).lower()
    data = msg.data.tobytes() if isinstance(msg.data, np.ndarray) else bytes(msg.data)
    if "compresseddepth" in fmt:
        raise CodecError(f"{_where(msg, topic)}: format {msg.format!r} (a depth image) not supported; "
                         f"expected a jpeg or png camera image")
    if data[:2] == b"\xff\xd8":
        rgb = _jpeg_rgb(data)
        if rgb is not None:
            return rgb
    elif data[:8] != b"\x89PNG\r\n\x1a\n" and not any(k in fmt for k in ("jpeg", "jpg", "png")):
        raise CodecError(f"{_where(msg, topic)}: format {msg.format!r} not supported; expected jpeg or png")
    pil = _pil()
    try:
        img = pil.open(io.BytesIO(data))
        img.load()
    except Exception as e:
        raise CodecError(f"{_where(msg, topic)}: cannot decode {len(data)} bytes of {msg.format}: {e}") from None
    if img.mode.startswith("I"):   # 16-bit grey png ("I;16", "I;16B", "I")
        a = (np.asarray(img).astype(np.uint32) >> 8).clip(0, 255).astype(np.uint8)
        return np.ascontiguousarray(np.broadcast_to(a[..., None], a.shape + (3,)))
    if img.mode != "RGB":
        img = img.convert("RGB")
    return np.asarray(img)


def frame_size(msg: Any, topic: str | None = None) -> tuple[int, int]:
    """(width, height) of the (H, W, 3) frame the camera codecs decode ``msg`` into: an Image's own fields, a
    CompressedImage's decoded payload (its header does not say). CodecError where it does not decode."""
    if hasattr(msg, "encoding"):
        return int(msg.width), int(msg.height)
    h, w = compressed_to_rgb8(msg, topic).shape[:2]
    return int(w), int(h)
