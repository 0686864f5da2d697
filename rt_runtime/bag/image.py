"""sensor_msgs/Image and CompressedImage <-> H x W x C numpy arrays.

Raw images decode zero-copy (a strided view honouring `step`, so row padding is free). Compressed
images (jpeg, png) need Pillow, imported only when used.
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
