"""A small little-endian CDR writer for the hot egress messages (nav_msgs/Path).

rosbags serializes any message but walks it field by field in Python (about 1 ms for a 31-pose
Path); this writer packs the fixed layout directly. Its output is byte-identical to rosbags' (a
test checks), so the digest does not depend on which one ran.
"""
from __future__ import annotations

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


__all__ = ["CdrWriter", "path_cdr"]
