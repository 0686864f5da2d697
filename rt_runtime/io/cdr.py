"""A small little-endian CDR writer for the hot egress messages (nav_msgs/Path, MarkerArray).

rosbags serializes any message but walks it field by field in Python (about 1 ms for a 31-pose
Path, 0.5 ms for a MarkerArray of ten tracks); this writer packs the fixed layouts directly. Its
output is byte-identical to rosbags' (tests check both), so the digest does not depend on which
one ran.
"""
from __future__ import annotations

import math
import struct

import numpy as np

_HEADER = b"\x00\x01\x00\x00"  # CDR_LE encapsulation; alignment counts from after it


class CdrWriter:
    """Append-only little-endian CDR with the alignment rules of XCDR1."""

    def __init__(self) -> None:
        self.buf = bytearray(_HEADER)

    def _align(self, n: int) -> None:
        pad = (-(len(self.buf) - 4)) % n
        if pad:
            self.buf += b"\0" * pad

    def u32(self, v: int) -> None:
        """uint32."""
        self._align(4)
        self.buf += struct.pack("<I", v)

    def i32(self, v: int) -> None:
        """int32."""
        self._align(4)
        self.buf += struct.pack("<i", v)

    def u8(self, v: int) -> None:
        """uint8 / bool (no alignment)."""
        self.buf.append(v & 0xFF)

    def f32s(self, values: tuple[float, ...]) -> None:
        """Consecutive float32 values (aligned to 4)."""
        self._align(4)
        self.buf += struct.pack(f"<{len(values)}f", *values)

    def string(self, s: str) -> None:
        """A string: length with its terminating NUL, the bytes, the NUL."""
        b = s.encode()
        self.u32(len(b) + 1)
        self.buf += b + b"\0"

    def f64s(self, values: np.ndarray) -> None:
        """Consecutive float64 values (aligned to 8)."""
        self._align(8)
        self.buf += np.ascontiguousarray(values, "<f8").tobytes()

    def stamp(self, t_ns: int) -> None:
        """builtin_interfaces/Time."""
        sec, nanosec = divmod(int(t_ns), 1_000_000_000)
        self.i32(sec)
        self.u32(nanosec)

    def header(self, t_ns: int, frame: str) -> None:
        """std_msgs/Header."""
        self.stamp(t_ns)
        self.string(frame)

    def bytes(self) -> bytes:
        """The serialized message."""
        return bytes(self.buf)


def path_cdr(trajectory: np.ndarray, t_ns: int, frame: str) -> bytes:
    """nav_msgs/Path of trajectory rows (x, y, yaw, v, t): each pose stamped t_ns + t, yaw as a quaternion."""
    traj = np.asarray(trajectory, np.float64)
    w = CdrWriter()
    w.header(t_ns, frame)
    w.u32(len(traj))
    half = traj[:, 2] / 2
    # position x, y, z then orientation x, y, z, w for every pose, as geometry_msgs/Pose lays them out
    poses = np.column_stack([traj[:, 0], traj[:, 1], np.zeros(len(traj)), np.zeros(len(traj)), np.zeros(len(traj)),
                             np.sin(half), np.cos(half)])
    for row, t_rel in zip(poses, traj[:, 4]):
        w.header(t_ns + int(round(t_rel * 1e9)), frame)
        w.f64s(row)
    return w.bytes()


_DELETEALL, _ADD, _CUBE = 3, 0, 1


def _marker_cdr(w: CdrWriter, t_ns: int, frame: str, ns: str, mid: int, action: int, pose: np.ndarray,
                scale: np.ndarray, rgba: tuple[float, ...], lifetime_ns: int, text: str) -> None:
    """One visualization_msgs/Marker (CUBE), every field this stack does not set left empty."""
    w.header(t_ns, frame)
    w.string(ns)
    w.i32(mid)
    w.i32(_CUBE)
    w.i32(action)
    w.f64s(pose)                          # geometry_msgs/Pose: position x, y, z; orientation x, y, z, w
    w.f64s(scale)                         # geometry_msgs/Vector3
    w.f32s(rgba)                          # std_msgs/ColorRGBA
    w.i32(lifetime_ns // 1_000_000_000)   # builtin_interfaces/Duration
    w.u32(lifetime_ns % 1_000_000_000)
    w.u8(0)                               # frame_locked
    w.u32(0)                              # points
    w.u32(0)                              # colors
    w.string("")                          # texture_resource
    w.header(0, "")                       # texture: sensor_msgs/CompressedImage (header, format, data)
    w.string("")
    w.u32(0)
    w.u32(0)                              # uv_coordinates
    w.string(text)
    w.string("")                          # mesh_resource
    w.string("")                          # mesh_file: visualization_msgs/MeshFile (filename, data)
    w.u32(0)
    w.u8(0)                               # mesh_use_embedded_materials


def markers_cdr(tracks: np.ndarray, count: int, t_ns: int, frame: str, names: tuple[str, ...],
                colours: tuple[tuple[float, float, float], ...]) -> bytes:
    """visualization_msgs/MarkerArray: DELETEALL, then a cube per track row (TRACK_COLS), as ``egress._markers``."""
    rows = np.asarray(tracks, np.float64)[:count]
    w = CdrWriter()
    w.u32(len(rows) + 1)
    zero = np.zeros(7)
    zero[6] = 1.0
    _marker_cdr(w, t_ns, frame, "tracks", 0, _DELETEALL, zero, np.ones(3), (0.0, 0.0, 0.0, 0.0), 0, "")
    for row in rows:
        tid, cls = int(row[0]), int(row[1])
        r, g, b = colours[cls] if 0 <= cls < len(colours) else (0.7, 0.7, 0.7)
        half = float(np.float64(row[6])) / 2
        pose = np.array([row[2], row[3], 0.75, 0.0, 0.0, math.sin(half), math.cos(half)])
        scale = np.array([max(float(row[7]), 0.1), max(float(row[8]), 0.1), 1.5])
        _marker_cdr(w, t_ns, frame, names[cls] if 0 <= cls < len(names) else "object", tid, _ADD, pose, scale,
                    (r, g, b, 0.8), 300_000_000, f"#{tid} {math.hypot(float(row[4]), float(row[5])):.1f} m/s")
    return w.bytes()


__all__ = ["CdrWriter", "markers_cdr", "path_cdr"]
