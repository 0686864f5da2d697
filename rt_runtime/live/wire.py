"""Foxglove's ``PosesInFrame``, ``SceneUpdate`` and ``FrameTransforms`` written as protobuf bytes straight from the arrays.

Building them from the SDK's message objects took a Python object per vector, quaternion and pose (four
per pose of a trajectory, a dozen per track): most of the live view's own CPU, taken from the replay's
thread by the GIL. Here the fixed-size parts (a pose, a cube, a label's placement) are rows of a numpy
record array whose tags are a template and whose doubles are filled per column; only the strings (a
track's id and label) are joined per track. Every field is written, zeros too (a proto3 reader accepts
them); the field numbers are those of the SDK's own schemas (``foxglove.messages.*.get_schema()``), and
``tests/test_live_channels.py`` decodes both ways and compares."""
from __future__ import annotations

import math
import struct
from typing import Iterable, Sequence

import numpy as np

_D = struct.Struct("<d")


_BYTES = [bytes([i]) for i in range(0x80)]   # the one-byte varints, made once


def varint(n: int) -> bytes:
    """``n`` (>= 0) as a protobuf varint."""
    if n < 0x80:
        return _BYTES[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a message, a string); ``number`` below 16."""
    n = len(payload)
    return _BYTES[number << 3 | 2] + (_BYTES[n] if n < 0x80 else varint(n)) + payload


def _doubles(fields: Sequence[tuple[int, float | None]]) -> tuple[bytes, list[int]]:
    """A message of fixed64 fields (number, a constant or None: filled per row): its bytes and the offsets of
    the Nones."""
    out, at = bytearray(), []
    for number, value in fields:
        out.append(number << 3 | 1)
        if value is None:
            at.append(len(out))
        out += _D.pack(0.0 if value is None else value)
    return bytes(out), at


class Rows:
    """A fixed-size message whose Nones are columns (``nest`` builds it: fixed64 fields in messages in
    messages); ``encode(columns)`` gives one row per entry, as a (rows, size) uint8 array."""

    def __init__(self, template: bytes, offsets: list[int]) -> None:
        self.template, self.offsets = template, offsets
        self.dtype = np.dtype({"names": [f"f{i}" for i in range(len(offsets))], "formats": ["<f8"] * len(offsets),
                               "offsets": offsets, "itemsize": len(template)})
        # one row by struct: the template's constant runs as bytes fields, the columns as doubles
        fmt, args, self.slots, at = "<", [], [], 0
        for off in offsets:
            if off > at:
                fmt += f"{off - at}s"
                args.append(template[at:off])
            fmt += "d"
            self.slots.append(len(args))
            args.append(0.0)
            at = off + 8
        if at < len(template):
            fmt += f"{len(template) - at}s"
            args.append(template[at:])
        self.struct, self.args = struct.Struct(fmt), args

    def pack(self, *values: float) -> bytes:
        """One row (a few of them: no numpy call's overhead per row set)."""
        args = self.args.copy()
        for k, v in zip(self.slots, values):
            args[k] = v
        return self.struct.pack(*args)

    def encode(self, columns: Sequence[np.ndarray]) -> np.ndarray:
        n = len(columns[0]) if columns else 0
        buf = np.frombuffer(self.template * n, np.uint8).copy().reshape(n, len(self.template))
        rec = buf.reshape(-1).view(self.dtype)
        for i, col in enumerate(columns):
            rec[f"f{i}"] = col
        return buf


def nest(*parts: tuple[int, "tuple[bytes, list[int]]"] | bytes) -> tuple[bytes, list[int]]:
    """Concatenate sub-messages (``(number, (bytes, offsets))``: a length-delimited field) and raw bytes, the
    offsets moved along."""
    out, at = bytearray(), []
    for part in parts:
        if isinstance(part, bytes):
            out += part
            continue
        number, (payload, offs) = part
        head = varint(number << 3 | 2) + varint(len(payload))
        at += [len(out) + len(head) + o for o in offs]
        out += head + payload
    return bytes(out), at


def _vector(x: float | None, y: float | None, z: float | None) -> tuple[bytes, list[int]]:
    return _doubles([(1, x), (2, y), (3, z)])


def _quaternion(z: float | None, w: float | None) -> tuple[bytes, list[int]]:
    return _doubles([(1, 0.0), (2, 0.0), (3, z), (4, w)])


def _pose(z: float, yaw: bool) -> tuple[bytes, list[int]]:
    """A pose at (None, None, z), turned by a yaw (None, None: sin, cos of its half) or not."""
    return nest((1, _vector(None, None, z)), (2, _quaternion(None, None) if yaw else _quaternion(0.0, 1.0)))


def timestamp(t_ns: int) -> bytes:
    """A ``google.protobuf.Timestamp`` (or Duration) of ``t_ns``."""
    return b"\x08" + varint(t_ns // 1_000_000_000) + b"\x10" + varint(t_ns % 1_000_000_000)


# PosesInFrame: timestamp 1, frame_id 2, poses 3 (Pose: position 1, orientation 2)
_POSE = Rows(*nest((3, _pose(0.0, True))))


def poses_in_frame(xy_yaw: np.ndarray, stamp_ns: int, frame: str) -> bytes:
    """Rows (x, y, yaw) as ``foxglove.PosesInFrame``."""
    half = xy_yaw[:, 2] / 2
    body = _POSE.encode([xy_yaw[:, 0], xy_yaw[:, 1], np.sin(half), np.cos(half)])
    return field(1, timestamp(stamp_ns)) + field(2, frame.encode()) + body.tobytes()


# SceneEntity: timestamp 1, frame_id 2, id 3, lifetime 4, cubes 8, texts 13.
# CubePrimitive: pose 1, size 2, color 3; TextPrimitive: pose 1, billboard 2, font_size 3, scale_invariant 4,
# color 5, text 6 (last: the string follows the fixed part).
_CUBE = Rows(*nest((8, nest((1, _pose(0.75, True)), (2, _vector(None, None, 1.5)),
                            (3, _doubles([(1, None), (2, None), (3, None), (4, 0.8)]))))))
_LABEL_FIXED = nest((1, _pose(1.8, False)), b"\x10\x01", b"\x19" + _D.pack(14.0), b"\x20\x01",
                    (5, _doubles([(1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0)])))
_LABEL = Rows(*_LABEL_FIXED)


def scene_update(stamp_ns: int, frame: str, lifetime_ns: int,
                 entities: Iterable[tuple[str, str, Sequence[float], Sequence[float]]]) -> bytes:
    """``foxglove.SceneUpdate``: everything deleted, then per entity (id, label text, cube: x, y, sin and cos of
    the half yaw, length, width, r, g, b; label: x, y) a cube and a label."""
    stamp = field(1, timestamp(stamp_ns))
    out = [field(1, stamp + b"\x10\x01")]   # a deletion of type ALL (1)
    head = stamp + field(2, frame.encode())
    life = field(4, timestamp(lifetime_ns))
    for ident, text, cube, label in entities:
        entity = b"".join((head, field(3, ident.encode()), life, _CUBE.pack(*cube),
                           field(13, _LABEL.pack(*label) + field(6, text.encode()))))
        out.append(field(2, entity))
    return b"".join(out)


# FrameTransforms: transforms 1 (FrameTransform: timestamp 1, parent_frame_id 2, child_frame_id 3, translation 4,
# rotation 5)
_PLACE = Rows(*nest((4, _vector(None, None, 0.0)), (5, _quaternion(None, None))))


def frame_transform(stamp_ns: int, parent: str, child: str, x: float, y: float, yaw: float) -> bytes:
    """``foxglove.FrameTransforms`` of one transform: ``child`` at (x, y) in ``parent``, turned by ``yaw``."""
    body = field(1, timestamp(stamp_ns)) + field(2, parent.encode()) + field(3, child.encode())
    return field(1, body + _PLACE.pack(x, y, math.sin(yaw / 2), math.cos(yaw / 2)))


def finite_rows(rows: np.ndarray) -> np.ndarray:
    """The rows whose x and y (columns 0, 1) are finite."""
    return rows[np.isfinite(rows[:, 0]) & np.isfinite(rows[:, 1])]


__all__ = ["field", "finite_rows", "frame_transform", "poses_in_frame", "scene_update", "timestamp", "varint"]
